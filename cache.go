package rwlock

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// WithCaching keeps a lock node after Release, while nobody else wants the
// lock. A later Lock or TryLock, or RLock or TryRLock, of the same mode on
// this RWLock is then granted at once on the same node, with the same
// token, and usually without a request. That is the grant the node would
// have had: nobody else held in between, since nobody passes a node that
// exists. A re-grant needs a write or sync answered in the node's session,
// sent at most δ = 50 ms before the call began, and after the last listing
// that showed nothing conflicting behind the node. When none is that recent, it sends
// a sync. A busy loop sends one sync ahead of time about every δ/2, so it
// never waits for one.
//
// The promise. A conflicting request queued behind the node is never passed
// by a re-grant that begins more than δ after its create, on a standalone
// server or a follower (docs/guarantees.md, "Cached nodes keep FIFO", tells
// the exceptions on a leader). The process hears of any change of the
// lock's queue in one notification. It deletes an idle node at once, and a
// busy one at its release if a conflicting request queued behind it. So a
// waiter pays at most one notification and one deletion more than a plain
// handoff. [Grant.Contended] tells the holder of a busy one.
//
// A re-grant is a grant like any other: its hold limit, lease clock, head
// start, revocation, fleet watch and observers begin afresh. For Revoke a
// kept node holds, since it was first held before. So a revocation may
// reach the next grant on it, but no later one: the node is then not kept.
// A node whose session was lost, or whose connection was made anew, is
// given up, and the next acquisition queues afresh. Only a connection made by [Dial],
// which counts its sessions, keeps nodes. New refuses it with
// [WithCapacity]. WithReadCoalescing's shared
// nodes, LockAll's and a Downgrade's are never kept, and a kept node takes
// no joiners. One node is kept per RWLock. An idle node sends nothing, and
// its data marks it cached for Queue.
func WithCaching() Option {
	return func(o *options) { o.cache = true }
}

// checkCaching refuses the options caching cannot go with.
func (o *options) checkCaching() error {
	if o.cache && o.capacity > 0 {
		return fmt.Errorf("%w: WithCaching with WithCapacity: a node's name fixes its weight, which a re-grant could not change",
			ErrInvalidArgument)
	}
	return nil
}

// keptData is the data of a node that a caching lock may keep, marked from
// the create on, so that Queue and the CLI show it as cached. It is nil
// without WithCaching. Only a lone node of the lock's own may be kept, so
// LockAll's and WithReadCoalescing's shared nodes are not marked.
func keptData(o options) []byte {
	if o.cache {
		return lockname.Data(o.owner, o.maxHold, lockname.MarkCached)
	}
	return nil
}

// proveCounted is a test hook: prove calls it just after its first read of
// the connection count, where a reconnection may land.
var proveCounted = func() {}

// cacheDelta is δ: how old the latest answered write or sync may be at a
// re-grant. It bounds how long a conflicting create may go unseen when its
// notification is late.
const cacheDelta = 50 * time.Millisecond

// The safety argument: why a re-grant never follows a conflicting create
// that it could have seen.
//
//   - Exclusion needs nothing new. The node exists from its first grant to
//     its deletion. Every conflicting node behind it waits for that
//     deletion, as for any held node. A re-grant holds a node that was
//     never deleted, so it cannot overlap a grant behind it.
//   - The token still orders. Nobody conflicting was granted between the
//     node's grants, since nobody passes a node that exists.
//   - Fairness is what needs the proof. The tail's watch was set by a
//     listing that showed no conflicting node behind ours. Any create after
//     that listing fires the watch. A request answered in the node's
//     session, on the connection that set the watch, was run by a server
//     that had applied every create the leader committed before it was
//     sent. A notification comes before any later answer on one
//     connection, and go-zookeeper queues each before it reads the next
//     packet (see Watch.FiredNow). So if the watch has not fired once the
//     answer is read, no conflicting node was created before the request
//     was sent. The re-grant began at most δ after that.
//   - After a reconnection go-zookeeper sets its watches again with a
//     request that queued requests overtake. An answer then proves nothing
//     of the old watch. So the count of sessions must be the one before
//     the listing, read again after the answer and the watch: the new
//     connection's handshake, which also renews the lease, counts first.
//   - Only a request sent after the listing counts. Then both went on one
//     connection, and the answer is read after the watch was set.
//   - A watch that has fired proves nothing until the tail lists again. An
//     idle node is then deleted at once, without that listing. A re-grant
//     under way waits for the listing once, and gives the node up if the
//     watch fires again.
//   - A busy node behind which a conflict shows is deleted at its release,
//     never under its holder.
//
// The same leader exceptions as coalescing's apply (see join.go).
//
// The revocation rule: a revocation is not kept with the node. Revoke names
// the nodes that hold by their sequence numbers, and a re-grant keeps the
// number. A kept node counts as held for Revoke, since it was first held
// before the revocation's writes. So the next grant on it may be revoked.
// But a revoked hold is not kept: its release deletes the node. And a
// re-grant gives up a node that the latest revocation read on the
// connection names, as one revoked while idle would be. So the next
// acquisition queues afresh, with a number no revocation names, and a
// revocation reaches at most one grant made after it.

// cache is a lock's kept node, if any. Only a lock made with WithCaching
// has one.
type cache struct {
	mu    sync.Mutex
	node  *cachedNode    // guarded by mu
	tails sync.WaitGroup // the kept nodes' tails, which end with their sessions
}

// A cachedNode is a node kept across grants. It owns a use of the client,
// and the tail. Its hold is the grant's while one is made, and nil while
// it is idle.
type cachedNode struct {
	ca          *cache
	l           *RWLock
	c           *zkclient.Client
	path        string
	session     int64
	token       int64
	mode        Mode
	releaseMark lockname.Mark
	t           *tail

	// guarded by ca.mu
	busy    *hold // the hold of the grant on it; nil while idle
	claimed bool  // a re-grant is proving its place
	parking bool  // its hold ends to be kept
	doomed  bool  // a conflict, or its end: it goes at once if idle, at its release if busy
	syncing bool  // a sync ahead of time is under way
	// proofW and proofSent are the watch of the tail's listing and when a
	// sync sent after that listing, and answered in the session, was sent.
	proofW    *zkclient.Watch
	proofSent time.Time
	gone      bool // dropped from the cache
}

// keeps reports whether a hold made on c may be kept.
func keeps(c *zkclient.Client) bool {
	_, counted := c.ConnectCount()
	return counted
}

// adopt keeps the node of a hold just granted, if the cache has none. The
// tail starts from the listing that granted it, if the connection has had
// no new session since before, which connects counted.
func (ca *cache) adopt(h *hold, m *member, connects uint64) {
	if !keeps(h.c) || len(m.lines) > 0 || h.currentMode() != m.mode {
		return
	}
	ca.mu.Lock()
	if ca.node != nil {
		ca.mu.Unlock()
		return
	}
	cn := &cachedNode{
		ca: ca, l: h.l, c: h.c, path: h.path, session: h.session, token: h.token, mode: m.mode,
		releaseMark: h.releaseMark, busy: h,
	}
	ca.node = cn
	ca.mu.Unlock()
	cn.c.Ref()
	cn.t = newTail(h.l, h.c, h.path, h.session, m.mode)
	cn.t.running, cn.t.onFire = &ca.tails, cn.fired
	cs := cn.share(h)
	h.whenEnded(func(cause error) { cn.holdEnded(h, cause) })
	if cs.behind {
		close(cn.t.contended)
		close(cn.t.gone)
		cn.end(true)
		return
	}
	dir := cs.dir
	if n, _ := h.c.ConnectCount(); n != connects {
		dir = nil // it may be a watch set again, whose events come late
	}
	cn.t.start(dir, cs.listedAt, connects, cn.end)
}

// share makes the node's tail the one h's grants see in Contended. It
// returns what the listing that granted h told.
func (cn *cachedNode) share(h *hold) *tailSlot {
	cs := h.slot(tailKey{}, func() any { return &tailSlot{} }).(*tailSlot)
	cs.once.Do(func() { cs.set(cn.t) })
	return cs
}

// holdEnded hears of the end of the hold on the node. A hold that ends to
// be kept leaves the node idle. Any other end takes the node out of the
// cache: a release deleted it, or it was lost and goes as a loss's does.
func (cn *cachedNode) holdEnded(h *hold, cause error) {
	ca := cn.ca
	ca.mu.Lock()
	if cn.busy != h {
		ca.mu.Unlock()
		return
	}
	cn.busy = nil
	kept := cn.parking && cause == ErrReleased
	cn.parking = false
	if kept && !cn.doomed {
		ca.mu.Unlock()
		return
	}
	cn.dropLocked()
	ca.mu.Unlock()
	cn.t.stop()
	if kept {
		cn.delete() // a conflict came as it was released
	}
	cn.c.Unref()
}

// end hears of the tail's end. A conflict dooms the node. So does any other
// end, since the re-grants rest on the tail. An idle node that may live on
// is deleted at once; one gone with its session or closed connection is
// just forgotten.
func (cn *cachedNode) end(live bool) {
	ca := cn.ca
	ca.mu.Lock()
	if cn.gone || cn.doomed {
		ca.mu.Unlock()
		return
	}
	cn.doomed = true
	// mutant: delete-busy-cached
	idle := cn.busy == nil && !cn.claimed
	if idle {
		cn.dropLocked()
	}
	ca.mu.Unlock()
	if idle {
		if live {
			cn.delete()
		}
		cn.c.Unref()
	}
}

// fired hears that the tail's watch fired. An idle node is then deleted at
// once, without the listing that would tell whether the change conflicts.
// So a waiter behind it pays one notification and one deletion. A busy
// node is left to the tail's listing, which tells Contended.
func (cn *cachedNode) fired() bool {
	ca := cn.ca
	ca.mu.Lock()
	// A node a re-grant is proving is left to the tail's listing, which the
	// proof waits for: deleted under it, the proof could pass on a node
	// that no longer exists.
	// mutant: fired-deletes-claimed
	if cn.gone || cn.busy != nil || cn.claimed {
		ca.mu.Unlock()
		return false
	}
	cn.doomed = true
	cn.dropLocked()
	ca.mu.Unlock()
	cn.delete()
	cn.c.Unref()
	return true
}

// dropLocked takes the node out of the cache.
func (cn *cachedNode) dropLocked() {
	cn.gone = true
	if cn.ca.node == cn {
		cn.ca.node = nil
	}
}

// delete deletes the node, as a release does. It waits up to the cleanup
// timeout, then leaves the deletion to the background.
func (cn *cachedNode) delete() {
	ctx, cancel := context.WithTimeout(context.Background(), cn.l.cleanupTimeout)
	defer cancel()
	cn.l.deleteNode(ctx, cn.c, cn.path, cn.session, cn.releaseMark)
}

// begin and changed make the cache a capability, whose seam is keep.
func (*cache) begin(*hold)           {}
func (*cache) changed(*hold, change) {}

// keep keeps the node of h, whose last grant is being released, instead of
// deleting it. It reports false if the node may not be kept; the caller
// then deletes it. The caller holds h.ops.
func (ca *cache) keep(h *hold) bool {
	// A revoked node is not kept: a revocation names the node, so it would
	// reach every re-grant on it (see the revocation rule).
	revoked := h.wasRevoked()
	ca.mu.Lock()
	cn := ca.node
	// mutant: keep-revoked
	if cn == nil || cn.busy != h || cn.doomed || h.currentMode() != cn.mode || revoked {
		ca.mu.Unlock()
		return false
	}
	select {
	case <-cn.t.gone:
		ca.mu.Unlock()
		return false
	default:
	}
	cn.parking = true
	ca.mu.Unlock()
	h.end(ErrReleased) // the grant's end; the node stays, and holdEnded keeps it
	h.l.debug("kept", h.path)
	return true
}

// regrant grants w on the idle cached node, if one of w's mode is kept and
// its place is proven. It returns nil, nil when it does not: the caller
// then queues afresh. A kept node of the other mode is deleted first, since
// ours would wait for it.
func (ca *cache) regrant(ctx context.Context, l *RWLock, w want) (*Grant, error) {
	ca.mu.Lock()
	cn := ca.node
	if cn == nil || cn.busy != nil || cn.claimed || cn.doomed {
		ca.mu.Unlock()
		return nil, nil
	}
	if cn.mode != w.mode {
		cn.dropLocked()
		ca.mu.Unlock()
		cn.t.stop()
		cn.delete()
		cn.c.Unref()
		return nil, nil
	}
	cn.claimed = true
	ca.mu.Unlock()
	start := time.Now()
	l.starting(ctx, w, start)
	m := &member{l: l, want: w, path: cn.path, session: cn.session, tok: cn.token, exact: true}
	proven, err := false, error(nil)
	// mutant: regrant-named
	if !cn.named() {
		proven, err = cn.prove(m.counting(ctx), start)
	}
	if proven && err == nil {
		// A conflict that comes from here on finds the node busy, and it
		// goes at this grant's release. The proof was of a moment before.
		cn.c.Ref() // the hold's use, given back as it ends
		h := newHold(l, cn.c, cn.member(m))
		h.releaseMark = cn.releaseMark
		cn.share(h)
		ca.mu.Lock()
		cn.claimed, cn.busy = false, h
		ca.mu.Unlock()
		h.whenEnded(func(cause error) { cn.holdEnded(h, cause) })
		h.judge()
		if err := h.ended(); err != nil {
			h.drop(context.WithoutCancel(ctx))
			l.acquired(ctx, m, start, err)
			return nil, &opError{verb(w), l.path, err}
		}
		l.acquired(ctx, m, start, nil)
		l.debug("granted again", cn.path)
		return h.grant(w.mode), nil
	}
	ca.mu.Lock()
	if err != nil && !cn.doomed && !cn.gone {
		// The caller gave up: the node stays kept, as it was.
		cn.claimed = false
		ca.mu.Unlock()
		l.acquired(ctx, m, start, err)
		return nil, &opError{verb(w), l.path, err}
	}
	// Not proven: queue afresh, without it. Our node of the same mode may
	// queue behind it meanwhile: it goes in the background.
	cn.claimed, cn.doomed = false, true
	cn.dropLocked()
	ca.mu.Unlock()
	cn.t.stop()
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		cn.delete()
		cn.c.Unref()
	}()
	if err != nil {
		l.acquired(ctx, m, start, err)
		return nil, &opError{verb(w), l.path, err}
	}
	return nil, nil
}

// named reports whether the latest revocation this connection read names
// the node (see the revocation rule).
func (cn *cachedNode) named() bool {
	n, ok := lockname.Parse(path.Base(cn.path))
	return ok && cn.l.revocationsOn(cn.c).names(n.Seq)
}

// member returns m filled as the acquisition of a re-grant: the node's,
// with the tail's watch as the listing that granted it.
func (cn *cachedNode) member(m *member) *member {
	w, listedAt, _, _ := cn.t.state()
	m.node, m.dir, m.listedAt = cn.path[len(cn.l.path)+1:], w, listedAt
	m.snap.self.name = m.node
	return m
}

// prove proves that nothing conflicting has queued behind the node (see the
// safety argument), for a re-grant that began at began. It waits for the
// tail's listing under way, and sends a sync if no answered request was
// sent since δ before began. So its own sync proves it however slowly it
// is answered. It returns false if the
// node may not be re-granted, and ctx's error if ctx ended.
func (cn *cachedNode) prove(ctx context.Context, began time.Time) (bool, error) {
	synced, waited := false, false
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		w, listedAt, connects, settled := cn.t.state()
		if w == nil { // the tail is listing, or has ended
			select {
			case <-settled:
				continue
			case <-cn.t.gone:
				return false, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		// A watch set before a reconnection proves nothing: give it up now,
		// without a sync. The count is read again below, after the answer.
		n, _ := cn.c.ConnectCount()
		proveCounted()
		// mutant: cached-stale-watch
		if n != connects {
			return false, nil
		}
		// As prepare does: a grant starts with more than its head start to
		// run on the lease, and without a granted T a disconnection is a
		// loss.
		t, granted := cn.c.Timeout(cn.l.sessionTimeout, cn.session)
		if !granted && cn.c.Conn().State() != zk.StateHasSession {
			return false, nil
		}
		fresh := t <= 0 || cn.c.Fresh(cn.session, t, zkclient.RenewInterval(t))
		at := cn.answeredAfter(w, listedAt)
		// mutant: regrant-without-sync
		if fresh && !at.IsZero() && !at.Before(began.Add(-cacheDelta)) {
			// mutant: regrant-unproven
			if w.FiredNow() {
				// The tail lists again: wait for what it shows, once. A
				// queue that changes on and on is cheaper to join afresh.
				if waited {
					return false, nil
				}
				waited = true
				select {
				case <-settled:
				case <-cn.t.gone:
					return false, nil
				case <-ctx.Done():
					return false, ctx.Err()
				}
				continue
			}
			// The count again, after the answer and the watch were read. A
			// new connection counts at its handshake, before that handshake
			// renews the lease and before any answer on it. So an unchanged
			// count says both were read on the connection that set w.
			// mutant: regrant-count-before-answer
			if n, _ := cn.c.ConnectCount(); n != connects {
				return false, nil
			}
			if time.Since(at) > cacheDelta/2 {
				cn.syncAhead()
			}
			return true, nil
		}
		if synced {
			return false, nil // a sync did not prove it, so do not loop on it
		}
		synced = true
		if !cn.sync(ctx, w) && ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
}

// answeredAfter returns when the latest request answered in the node's
// session, and sent after the listing that set w, was sent. It is the zero
// time if none is known. The lease tells of any write or sync on the
// connection. The node's own syncs tell even within one tick of a coarse
// clock, since they were sent after w was read.
func (cn *cachedNode) answeredAfter(w *zkclient.Watch, listedAt time.Time) time.Time {
	var at time.Time
	if a := cn.c.AnsweredAt(cn.session); a.After(listedAt) {
		at = a
	}
	cn.ca.mu.Lock()
	defer cn.ca.mu.Unlock()
	if cn.proofW == w && cn.proofSent.After(at) {
		at = cn.proofSent
	}
	return at
}

// sync sends a sync, after the listing that set w, and records its answer
// as a proof for w. It reports whether the answer came in the node's
// session.
func (cn *cachedNode) sync(ctx context.Context, w *zkclient.Watch) bool {
	sent := time.Now()
	r := cn.c.Sync(ctx)
	if r.Err != nil || r.Session != cn.session {
		return false
	}
	cn.ca.mu.Lock()
	defer cn.ca.mu.Unlock()
	if cn.proofW != w || sent.After(cn.proofSent) {
		cn.proofW, cn.proofSent = w, sent
	}
	return true
}

// syncAhead sends a sync in the background, so that the next re-grant in a
// busy loop finds an answer within δ and need not wait for one.
func (cn *cachedNode) syncAhead() {
	ca := cn.ca
	ca.mu.Lock()
	if cn.syncing || cn.gone || !cn.c.RefIfLive() {
		ca.mu.Unlock()
		return
	}
	cn.syncing = true
	ca.mu.Unlock()
	cn.l.background.Add(1)
	go func() {
		defer cn.l.background.Done()
		defer cn.c.Unref()
		if w, _, _, _ := cn.t.state(); w != nil {
			cn.sync(context.Background(), w)
		}
		ca.mu.Lock()
		cn.syncing = false
		ca.mu.Unlock()
	}()
}
