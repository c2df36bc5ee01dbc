package rwlock

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/tier"
)

// A mutant is the package with one deliberate bug that the simulation
// must find. The code marks each place a mutant changes with a comment,
// `// mutant: <point>`, on the line before: the mutant replaces that next
// line, so code around it can be renamed and reflowed freely. flags are
// the simulation's, to aim it at the faults the bug is about. run names
// the test that must catch it instead, for a bug the simulation does not
// model.
type mutant struct {
	name  string
	edits []mutantEdit
	flags []string
	run   string
}

// mutantEdit replaces, in file, the line after `// mutant: point` by new
// (indented as the line it replaces).
type mutantEdit struct{ file, point, new string }

var mutants = []mutant{
	{name: "a head start too short: grants lost after the lease ends", edits: []mutantEdit{
		{file: "internal/zkclient/lease.go", point: "headstart", new: "return -t / 8"}}},
	{name: "a lease counted from the answer, not the request", edits: []mutantEdit{
		{file: "internal/zkclient/client.go", point: "lease-from-answer", new: "c.renew(session, sent.Add(time.Since(sent)))"}}},
	{name: "Err and Done trust the lease clock's timer", edits: []mutantEdit{
		{file: "hold.go", point: "judge-on-timer-only", new: "if true {"}}},
	{name: "numbers at the counter's stuck end ordered anyway", edits: []mutantEdit{
		{file: "internal/lockname/lockname.go", point: "usable-seq", new: "return seq >= 0 || seq < math.MaxInt32"},
		{file: "nodename.go", point: "self-duplicate", new: "case false:"},
		{file: "nodename.go", point: "duplicate", new: "if false {"}}},
	{name: "a token taken from any listing", edits: []mutantEdit{
		{file: "list.go", point: "token-any-listing", new: "case creates == creates:"}}},
	{name: "a reader's token taken from a listing that shows a later writer", edits: []mutantEdit{
		{file: "list.go", point: "reader-token-any-listing", new: "case m.mode == Read:"}}},
	{name: "readers ignore writers", edits: []mutantEdit{
		{file: "reader.go", point: "readers-ignore-writers", new: "if n := before[i]; false && n.mode == Write && !downgraded(n.name) {"}}},
	{name: "a waiter that gives up marks its node held", edits: []mutantEdit{
		{file: "acquire.go", point: "abort-marks-held", new: "if err := l.deleteNode(ctx, m.a.c, m.path, m.session, lockname.MarkHeld); err != nil {"}}},
	{name: "a waiter that gives up leaves its node", edits: []mutantEdit{
		{file: "acquire.go", point: "abort-leaves-node", new: "case m.node != \"\" && false:"}}},
	{name: "the lock trusts the timeout asked for, not the one granted", edits: []mutantEdit{
		{file: "internal/zkclient/lease.go", point: "trust-asked-timeout", new: "if limit > 0 {"}}},
	{name: "a reconnection granted less is not heard", edits: []mutantEdit{
		{file: "internal/zkclient/dial.go", point: "shorter-grant-unheard", new: "if last := d.last.Load(); last == nil || last.session != session {"}}},
	// The handoff in one notification (see runAhead and await).
	{name: "a writer granted when its run ahead is gone though a node before w0 is left", edits: []mutantEdit{
		{file: "watch.go", point: "run-unmarked-w0", new: "return m.confirmOwn(ctx)"}}},
	// The simulation has no peers.
	{name: "a reader takes a peer writer's data change for clearance", run: "TestReaderIgnoresAPeersChange",
		edits: []mutantEdit{{file: "watch.go", point: "reader-trusts-peer", new: "case ev.Type == zk.EventNodeDataChanged:"}}},
	{name: "kazoo's default locks taken to count native names", run: "TestRefusesPeersThatDoNotSeeUs",
		edits: []mutantEdit{{file: "internal/lockname/lockname.go", point: "kazoo-sees-native",
			new: `{"__lock__", true, Kazoo, true, guarded | hex32, "kazoo WriteLock or Lock", Kazoo.Bit() | KazooLock.Bit() | KazooPatterns.Bit() | Native.Bit()},`}}},
	{name: "DialectKazoo advised for kazoo's nodes as if no kazoo Lock could be there", run: "TestMixedFleetAdvice",
		edits: []mutantEdit{{file: "dialect.go", point: "kazoo-advised-unconditionally",
			new: "for _, d := range []Dialect{DialectNative, DialectCurator, DialectMutex, DialectKazoo, DialectKazooLock} {"}}},
	{name: "a writer watches its run ahead with a peer in the queue", run: "TestRunAheadWithAPeer",
		edits: []mutantEdit{{file: "watch.go", point: "run-with-peers",
			new: "if m.mode != Write || len(before) == 0 || before[len(before)-1].mode == Write {"}}},
	// Coalesced reads: a joiner admitted on what its process has heard,
	// with no sync to order its arrival against the server's changes.
	{name: "a joiner admitted without its sync", flags: []string{"-sim.coalesce"}, edits: []mutantEdit{
		{file: "join.go", point: "joiner-without-sync", new: "r := zkclient.Reply[struct{}]{Session: s.a.c.Conn().SessionID()}"}}},
	// A joiner that arrives while a sync is under way let in by its
	// answer: that sync may have reached the server before a writer's node.
	{name: "a joiner admitted by a sync sent before it arrived", run: "TestCoalescedJoinerWaitsForASyncSentAfterIt", edits: []mutantEdit{
		{file: "join.go", point: "joiner-on-an-earlier-sync", new: joinerOnAnEarlierSync}}},
	{name: "a joiner admitted by a sync sent before it arrived, in the simulation", flags: []string{"-sim.coalesce"}, edits: []mutantEdit{
		{file: "join.go", point: "joiner-on-an-earlier-sync", new: joinerOnAnEarlierSync}}},
	// The session check is the rule's last line (go-zookeeper ends every
	// watch before a new session): only a unit test reaches it.
	{name: "a joiner admitted by a sync answered in another session", run: "TestCoalescedJoinerSyncInAnotherSession", edits: []mutantEdit{
		{file: "join.go", point: "joiner-sync-any-session", new: "sy.ok = r.Err == nil"}}},
	{name: "a joiner admitted while a connection zk.Connect made is down", run: "TestCoalescedConnectConnectionNoJoinWhileDown", edits: []mutantEdit{
		{file: "join.go", point: "joiner-connect-state", new: "_ = zk.StateHasSession; return true"}}},
	// Lock caching (cache.go): a kept node is re-granted only on its tail's
	// proof, and never deleted under its holder.
	{name: "a kept node re-granted though its watch fired", run: "TestCachedRegrantNeverPassesAHeldNotification", edits: []mutantEdit{
		{file: "cache.go", point: "regrant-unproven", new: "if false {"}}},
	{name: "a kept node re-granted on an answer older than δ", run: "TestCachedRegrantNeverPassesAHeldNotification", edits: []mutantEdit{
		{file: "cache.go", point: "regrant-without-sync", new: "if fresh && !at.IsZero() && !began.IsZero() {"}}},
	{name: "a kept node re-granted on a watch set before a reconnection", run: "TestCachedRegrantNeverPassesAWriterAfterAReconnection",
		edits: []mutantEdit{{file: "cache.go", point: "cached-stale-watch", new: "if n != connects && false {"},
			{file: "cache.go", point: "regrant-count-before-answer", new: "if n, _ := cn.c.ConnectCount(); n != connects && false {"}}},
	// The simulation does not reliably land a reconnection between the
	// proof's two reads of the count: a unit test places it there.
	{name: "a kept node re-granted on an answer read after a reconnection", run: "TestCachedRegrantNeverPassesAWriterWhenAReconnectionComesMidProof",
		edits: []mutantEdit{{file: "cache.go", point: "regrant-count-before-answer", new: "if n, _ := cn.c.ConnectCount(); n != connects && false {"}}},
	{name: "a kept node deleted at a fire while a re-grant proves it", run: "TestCachedNodeNotDeletedUnderAProvingRegrant", edits: []mutantEdit{
		{file: "cache.go", point: "fired-deletes-claimed", new: "if cn.gone || cn.busy != nil {"}}},
	// A revocation names a node by its number, which a re-grant keeps.
	{name: "a revoked node kept", run: "TestCachedRevokedNodeNotKept", edits: []mutantEdit{
		{file: "cache.go", point: "keep-revoked", new: "if cn == nil || cn.busy != h || cn.doomed || h.currentMode() != cn.mode || revoked && false {"}}},
	{name: "a kept node re-granted though a revocation read names it", run: "TestCachedRegrantGivesUpANamedNode", edits: []mutantEdit{
		{file: "cache.go", point: "regrant-named", new: "if true {"}}},
	{name: "a busy kept node deleted when a conflict queues", run: "TestCachedBusyNodeGoesAtItsRelease", edits: []mutantEdit{
		{file: "cache.go", point: "delete-busy-cached", new: "idle := true"}}},
	{name: "a busy kept node deleted when a conflict queues, in the simulation", flags: []string{"-sim.cache"}, edits: []mutantEdit{
		{file: "cache.go", point: "delete-busy-cached", new: "idle := true"}}},
	{name: "a kept node re-granted though its watch fired, in the simulation", flags: []string{"-sim.cache"}, edits: []mutantEdit{
		{file: "cache.go", point: "regrant-unproven", new: "if false {"}}},
	{name: "a kept node re-granted on an answer older than δ, in the simulation", flags: []string{"-sim.cache"}, edits: []mutantEdit{
		{file: "cache.go", point: "regrant-without-sync", new: "if fresh && !at.IsZero() && !began.IsZero() {"}}},
	{name: "a kept node re-granted on a watch set before a reconnection, in the simulation", flags: []string{"-sim.cache"},
		edits: []mutantEdit{{file: "cache.go", point: "cached-stale-watch", new: "if n != connects && false {"},
			{file: "cache.go", point: "regrant-count-before-answer", new: "if n, _ := cn.c.ConnectCount(); n != connects && false {"}}},
	// Sets (LockAll): the members stop waiting once one is clear. (A
	// member's node deleted while the set waits for the others is a hand
	// deletion, which the simulation does not make: multi_test.go's
	// real-server test covers it.)
	{name: "a set granted before all its members", flags: []string{"-sim.set"}, edits: []mutantEdit{
		{file: "acquire.go", point: "set-partial", new: "if errs[i] != nil || next[i] != stepWait {"}}},
	// A set released together (ReleaseAll). The simulation refuses no
	// transaction while the session lives (it has no ACLs and no hand
	// deletions): a unit test covers the refusal.
	{name: "a set release whose answer is lost leaves its nodes", flags: []string{"-sim.set"}, edits: []mutantEdit{
		{file: "release.go", point: "set-release-lost", new: "_ = finish"}}},
	{name: "a held mark refused after the release's context ended leaves the node", run: "TestReleaseLateRefusedMark", edits: []mutantEdit{
		{file: "release.go", point: "release-late", new: "if zkclient.ConnectionLoss(r.Err) {"}}},
	{name: "a set release refused after its context ended leaves its nodes", run: "TestReleaseAllContextEndsFirst", edits: []mutantEdit{
		{file: "release.go", point: "set-release-late", new: "if false {"}}},
	// Revocation changes no grant, so the simulation, which checks the
	// grants, has nothing to find: unit tests cover whom it reaches.
	{name: "a revocation reaches its holders only through the names", run: "TestRevokeToldByTheFirstWrite", edits: []mutantEdit{
		{file: "revocations.go", point: "revoke-no-notice", new: "_ = n"}}},
	{name: "a grant that a revocation fired its watch after is not told when a read judged the fire before it listened", run: "TestRevokeFirstWriteReachesALateListener",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-listen-precedes", new: "revokedSince = seen == nil && false"}}},
	{name: "a release after the hold-limit notice deletes the node while other grants on it are open", run: "TestHoldLimitReleasedAfterTheNotice",
		edits: []mutantEdit{{file: "holdlimit.go", point: "early-delete-open-grants", new: "if lim.open--; false {"}}},
	{name: "Revoked's first call does not wait for the read that judges it", run: "TestRevokeSeenAtTheFirstLook",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-first-look", new: "if false {"}}},
	{name: "any change of the directory's data is taken for a revocation", run: "TestRevokeOnlyItsOwnRecord",
		edits: []mutantEdit{{file: "revoke.go", point: "revoke-any-change", new: "changed := true"}}},
	{name: "names count in any directory of the path", run: "TestRevokeNamesOfAnotherDirectory",
		edits: []mutantEdit{{file: "revoke.go", point: "revoke-names-dir", new: "named = rev.Nodes"}}},
	{name: "a listener that came as the read failed is left unserved", run: "TestRevokeServesAListenerAfterAFailedRead",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-stop-again", new: "if false && ls.sent >= n {"}}},
	{name: "the reading waits for the connection after its last listener left", run: "TestRevokeStopsWaitingWhenNobodyListens",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-wait-idle", new: "err := retry.Wait(context.Background(), c.Conn())"}}},
	{name: "a refused read drops the listeners", run: "TestRevokeRetriesARefusedRead",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-final-errors", new: "case !zkclient.ConnectionLoss(r.Err):"}}},
	{name: "a listener that came during a read and is named is not told", run: "TestRevokeConfirmsAListenerThatCameDuringARead",
		edits: []mutantEdit{{file: "revoke.go", point: "revoke-confirm-later", new: "_ = seq"}}},
	{name: "a listener that came during a read is judged by its names", run: "TestRevokeNamesOfAReadUnderWay",
		edits: []mutantEdit{{file: "revoke.go", point: "revoke-names-later", new: "case false:"}}},
	{name: "a retired Client starts a reading", run: "TestRevokeListeningOnARetiredClient",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-retired-client", new: "start := !rv.reading && func() bool { h.c.Ref(); return true }()"}}},
	{name: "a listener named before a reconnection is not told", run: "TestRevokeNamedAcrossAReconnection",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-confirm", new: "if false {"}}},
	{name: "a grant made after a reconnection is taken to come before the watch set until then", run: "TestRevokeAcrossAReconnection",
		edits: []mutantEdit{{file: "revocations.go", point: "revoke-base-reconnected",
			new: "if n, known := c.ConnectCount(); false && (!known || n != rv.connects) {"}}},
	{name: "ReleaseAll lets a reader join a node it is about to delete", run: "TestReleaseAllClaimsACoalescedNodeFirst", edits: []mutantEdit{
		{file: "hold.go", point: "claim-late", new: "_ = h.releasing"}}},
	{name: "a set release the server refused counts as done", run: "TestReleaseAllRefused", edits: []mutantEdit{
		{file: "multi.go", point: "set-release-refused", new: "if false {"}}},
	// The fleet watch (fleet.go): a holder finds a blind peer by its own
	// check, within D of the peer's create.
	{name: "the fleet watch never checks", flags: []string{"-sim.peer"}, edits: []mutantEdit{
		{file: "fleet.go", point: "fleet-never-checks", new: "wait := time.Until(due) + time.Hour"}}},
	{name: "the fleet watch's first check dated from the grant, not from its listing", flags: []string{"-sim.peer"}, edits: []mutantEdit{
		{file: "fleet.go", point: "fleet-due-from-grant", new: "dir, due := h.listing, time.Now().Add(fleetInterval)"}}},
	// The simulation's answers take no time on a healthy link, so it
	// cannot tell a check dated from the answer from one dated from the
	// request.
	{name: "the fleet watch's next check dated from the answer, not from its listing", run: "TestFleetCheckDatedFromTheListingSent",
		edits: []mutantEdit{{file: "fleet.go", point: "fleet-due-from-answer",
			new: "w, due, retry = next, sent.Add(time.Since(sent)+fleetInterval), zkclient.Backoff{}"}}},
	{name: "the fleet watch not started again after a release the server refused", run: "TestFleetCheckAfterARefusedRelease",
		edits: []mutantEdit{{file: "fleet.go", point: "fleet-refused-restart", new: "_ = h"}}},
	{name: "an acquisition that lists a blind peer's node queues anyway", flags: []string{"-sim.peer"}, edits: []mutantEdit{
		{file: "list.go", point: "queue-beside-blind-peer", new: "if mixed := m.l.blind(snap.peers); false && mixed != nil {"}}},
	// The rule the lock had before its lease clock: a grant judged by
	// go-zookeeper's state alone, as if T were unknown. It must fail in both
	// ways the issue reported, and where notifications keep coming through
	// a one-way partition; or the model is not faithful enough to trust its
	// verdict on the lease. (A two-way partition right after a
	// notification no longer tells it apart: the holders' listing for
	// peers that a notification may start (fleet.go) is in flight when the
	// link goes, and a lock that knows no T gives its grants up as soon as
	// go-zookeeper reports the disconnection.)
	{name: "the state rule: a stopped process", flags: []string{"-sim.nocut"},
		edits: []mutantEdit{{file: "internal/zkclient/lease.go", point: "state-rule", new: "return 0, false"}}},
	{name: "the state rule: any fault",
		edits: []mutantEdit{{file: "internal/zkclient/lease.go", point: "state-rule", new: "return 0, false"}}},
	// The rule the lock had on a connection that does not tell the granted
	// timeout: WithSessionTimeout ignored there, so that only go-zookeeper's
	// state judges its grants, and a stopped holder resumes still holding.
	{name: "the bound ignored on a connection that does not tell", edits: []mutantEdit{
		{file: "internal/zkclient/lease.go", point: "bound-ignored", new: "return 0, false"}}},
	// The other way round: the bound taken for a timeout the server
	// granted, so that the lease by it keeps a grant through a
	// disconnection, though the server may have granted less.
	{name: "the bound trusted as a granted timeout", edits: []mutantEdit{
		{file: "internal/zkclient/lease.go", point: "bound-ignored", new: "return limit, limit > 0"}}},
	// A hold limit's head start by the bound alone: the notice later than
	// without the bound. No safety rule breaks, so the simulation has
	// nothing to find; the unit test checks when the holder is told.
	{name: "a bound shortens a hold limit's head start", run: "TestHoldLimitTellsTheHolderFirst", edits: []mutantEdit{
		{file: "holdlimit.go", point: "bound-shortens-hold-head", new: "if t == 0 { head = l.maxHold / 4 }"}}},
	// The simulation's holders release soon after the notice, and the node
	// may go then (releasedLate), so it rarely sees this one: a unit test
	// holds a grant open past the notice.
	{name: "a hold limit's node deleted at the notice, not at the limit", run: "TestHoldLimitReleasedAfterTheNotice", edits: []mutantEdit{
		{file: "holdlimit.go", point: "delete-at-limit", new: "lim.timer = time.AfterFunc(time.Until(at)*0, func() { finish(h.path, \"\", h.session) })"}}},
	// The simulation's holders now release at the notice, which frees the
	// node at once (holdlimit.go), so a named test catches this one.
	{name: "a holder told of its hold limit late gets no head start", run: "TestHoldLimitAfterAPause", edits: []mutantEdit{
		{file: "holdlimit.go", point: "told-late", new: "if told := now.Add(lim.head); false && told.After(at) {"}}},
	{name: "a resumed holder waits for the hold timer", flags: []string{"-sim.nocut"},
		edits: []mutantEdit{{file: "holdlimit.go", point: "judge-ignores-hold-limit", new: "if false {"}}},
	// Elections are a write queue with values (election.go): a successor
	// must not lead before the old leader's head start, nor on the change
	// a Proclaim makes to the leader's node.
	// Lock-delay (lockdelay.go): after an unclean loss ahead, no grant
	// before the delay has passed since the waiter learned of it.
	{name: "lock-delay: a successor granted at the loss", flags: []string{"-sim.lockdelay"}, edits: []mutantEdit{
		{file: "lockdelay.go", point: "lock-delay-early", new: "until := time.Now()"}}},
	{name: "lock-delay: a deletion with no mark before it taken for a release", flags: []string{"-sim.lockdelay"}, edits: []mutantEdit{
		{file: "watch.go", point: "lock-delay-deletion-clean", new: "m.gone(l, true)"}}},
	{name: "lock-delay: a data change taken for a release without a look", flags: []string{"-sim.lockdelay"}, edits: []mutantEdit{
		{file: "lockdelay.go", point: "lock-delay-trusts-change", new: "if true {"}}},
	{name: "lock-delay: nodes a listing no longer shows taken for released", flags: []string{"-sim.lockdelay"}, edits: []mutantEdit{
		{file: "lockdelay.go", point: "lock-delay-vanished", new: "if false {"}}},
	{name: "lock-delay: a node missing at the read after a data change taken for released", run: "TestLockDelayProclaimThenLateExpiryIsALoss", edits: []mutantEdit{
		{file: "lockdelay.go", point: "lock-delay-late-read-clean", new: "m.gone(l, true)"}}},
	{name: "lock-delay: a change and a deletion across a reconnection taken for a release", run: "TestLockDelayChangeAndDeletionAcrossReconnection", edits: []mutantEdit{
		{file: "lockdelay.go", point: "lock-delay-mark-across-reconnection", new: "return known && l.counted || n != l.connects"}}},
	{name: "lock-delay: a queue again forgets the nodes ahead of the old node", run: "TestLockDelayQueueAgainAfterExpiryWaits", edits: []mutantEdit{
		{file: "create.go", point: "lock-delay-requeue-forgets", new: "_ = m"}}},
	{name: "elections: a head start too short", flags: []string{"-sim.elect"}, edits: []mutantEdit{
		{file: "internal/zkclient/lease.go", point: "headstart", new: "return -t / 8"}}},
	{name: "elections: a candidate takes its leader's Proclaim for the leader's end", flags: []string{"-sim.elect"}, edits: []mutantEdit{
		{file: "watch.go", point: "data-change-as-deletion", new: "m.gone(l, true)"}}},
	{name: "elections: a reader behind a leader takes its Proclaim for a downgrade", flags: []string{"-sim.elect"}, edits: []mutantEdit{
		{file: "watch.go", point: "reader-takes-proclaim-for-downgrade", new: "if false {"}}},
	{name: "a campaign's term left a listing's stand-in, which observers cannot read", run: "TestCampaignTermIsTheNodesCzxid", edits: []mutantEdit{
		{file: "election.go", point: "term-stand-in", new: "_ = r.V.Stat.Czxid"}}},
	{name: "an observer reports a state older than one it showed", run: "TestObserverNeverGoesBackwards", edits: []mutantEdit{
		{file: "observe.go", point: "observe-backwards", new: "case now.Term != o.term:"}}},
	{name: "an observer reports a successor read before the head went", run: "TestObserverNeverReportsACandidateThatNeverLed", edits: []mutantEdit{
		{file: "observe.go", point: "observe-successor-unproven", new: "case errors.Is(r.Err, zk.ErrNoNode) && n.Err == nil:"}}},
	// A Locker's exclusion of its own callers is in-process: the
	// simulation, which checks grants, has nothing to find.
	{name: "a Locker lets a second caller in once its grant is lost", run: "TestLockerExcludesItsCallersAfterALoss", edits: []mutantEdit{
		{file: "locker.go", point: "locker-exclusion", new: "_ = k.held"},
		{file: "locker.go", point: "locker-exclusion-unlock", new: "_ = k.held"}}},
	// A bounded lock (capacity.go): the rule, and its watch set.
	{name: "a permit granted past the capacity", flags: []string{"-sim.capacity"}, edits: []mutantEdit{
		{file: "capacity.go", point: "permit-past-capacity", new: "if sum < self.capacity {"}}},
	{name: "a small permit granted past a large waiter", flags: []string{"-sim.capacity"}, edits: []mutantEdit{
		{file: "capacity.go", point: "permit-out-of-order", new: "if sum+n.weight <= self.capacity { sum += n.weight }"}}},
	{name: "a waiter watches the first node ahead, not its predecessor", run: "TestPermitWakeups", edits: []mutantEdit{
		{file: "capacity.go", point: "permit-watches-wrong-node", new: "return before[:1], false"}}},
	// The held mark of a permit carries liveness. A named test catches each
	// at once; TestSimulationPermits's waiter check catches the first and
	// the third too, in a few thousand schedules.
	{name: "a permit granted by its first look does not announce it", run: "TestPermitGrantAfterALookMarksForItsFollower",
		edits: []mutantEdit{{file: "capacity.go", point: "permit-look-unannounced", new: "m.listedWaiting = m.waited"}}},
	{name: "a permit granted at once ignores the node listed behind", run: "TestPermitGrantAtOnceMarksForANodeBehind",
		edits: []mutantEdit{{file: "capacity.go", point: "permit-announce-ignores-behind", new: "return m.listedWaiting"}}},
	{name: "a set's member is announced only at the set's grant", run: "TestPermitSetMemberMarksWhenItsWayClears",
		edits: []mutantEdit{{file: "capacity.go", point: "set-member-unannounced", new: "if true {"}}},
	{name: "a bounded node whose numbers cannot be read is ignored", run: "TestPermitRefusesAnUnreadableNode",
		edits: []mutantEdit{{file: "nodename.go", point: "unreadable-capacity-ignored", new: "case false:"}}},
	// The fleet watch on a bounded lock's path.
	{name: "the fleet watch ignores a node made without a capacity", run: "TestFleetWatchEndsHoldersOnADisagreeingNode",
		edits: []mutantEdit{{file: "capacity.go", point: "fleet-ignores-uncounted", new: "case false:"}}},
	{name: "the fleet watch ignores Curator's semaphore", run: "TestFleetWatchEndsHoldersOnCuratorSemaphore",
		edits: []mutantEdit{{file: "fleet.go", point: "fleet-ignores-curator-semaphore", new: "case false:"}}},
}

// joinerOnAnEarlierSync lets the joiners waiting for the next sync in on
// the answer to the one under way.
const joinerOnAnEarlierSync = "if nx := s.next; nx != nil { nx.ok, s.next = sy.ok, nil; close(nx.done) }; s.sendSyncLocked()"

// apply makes e's change in src, or says why it cannot.
func (e mutantEdit) apply(src string) (string, error) {
	marker := "// mutant: " + e.point + "\n"
	if n := strings.Count(src, marker); n != 1 {
		return "", fmt.Errorf("%s: the mark %q occurs %d times, want once", e.file, strings.TrimSpace(marker), n)
	}
	start := strings.Index(src, marker) + len(marker)
	end := strings.IndexByte(src[start:], '\n')
	if end < 0 {
		return "", fmt.Errorf("%s: nothing after the mark %q", e.file, e.point)
	}
	line := src[start : start+end]
	indent := line[:len(line)-len(strings.TrimLeft(line, "\t "))]
	return src[:start] + indent + e.new + src[start+end:], nil
}

// TestSimulationCatchesMutants builds each mutant in a copy of the module
// (the root package and internal/) and runs the simulation, or the test
// it names, on it: it must fail (and not merely fail to build). It takes a
// few seconds per mutant.
func TestSimulationCatchesMutants(t *testing.T) {
	tier.Long(t) // builds a copy of the module per mutant
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skipf("no go command: %v", err)
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			copyModule(t, dir)
			for _, e := range m.edits {
				p := filepath.Join(dir, e.file)
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				src, err := e.apply(string(b))
				require.NoError(t, err, "the code to mutate has changed")
				require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
			}
			const limit = 20000
			// Without the race detector a schedule takes milliseconds: one
			// that a mutant livelocks is told by 20 s of real time.
			args := append([]string{"test", "-count=1", "-run", "TestSimulation$", fmt.Sprintf("-sim.schedules=%d", limit), "-sim.stuck=20s"}, m.flags...)
			if m.run != "" {
				args = []string{"test", "-count=1", "-run", "^" + m.run + "$"}
			}
			cmd := exec.Command(goTool, append(args, ".")...)
			cmd.Dir = dir
			// The module cache has what the package needs; the copy has no
			// go.work.
			cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOFLAGS=-mod=mod")
			out, err := cmd.CombinedOutput()
			if m.run != "" {
				if err == nil || !strings.Contains(string(out), "--- FAIL: "+m.run) {
					t.Fatalf("not caught by %s (err %v):\n%s", m.run, err, out)
				}
				return
			}
			found := regexp.MustCompile(`(?s)schedule (\d+) failed: (.*?)\n\s*replay it with`).FindSubmatch(out)
			if err == nil || found == nil {
				t.Fatalf("not caught in %d schedules (err %v):\n%s", limit, err, out)
			}
			t.Logf("caught at seed %s: %s", found[1], found[2])
		})
	}
}

// copyModule copies what the root package's tests build from: its own
// files, go.mod and go.sum, and internal/.
func copyModule(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	files = append(files, "go.mod", "go.sum")
	require.NoError(t, filepath.WalkDir("internal", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
}
