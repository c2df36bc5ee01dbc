package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// One queue shared with the fleet's other lock libraries (issue 14): in
// each dialect, our readers and writers contend with real Curator, kazoo
// and zk.Lock clients of the family that dialect is for, and the merged log
// of everyone's grants must show no overlap of conflicting grants, FIFO
// order, and everyone finished. kazoo 2.8's ReadLock deadlocks with a
// writer that queues behind it while it waits (kazoo#649, fixed in 2.9.0),
// so it is left out of the runs with writers and has a test of its own.

const (
	peerSession  = 4 * time.Second      // sessions of the contenders that are not killed
	crashSession = 2 * time.Second      // of a peer holder killed with SIGKILL
	peerHold     = 3 * time.Millisecond // each grant's hold, and at most the pause between cycles
	peerRounds   = 20                   // cycles per contender of a mixed run
	peerDeadline = 90 * time.Second     // for a whole run
	peerQueued   = 30 * time.Second     // for contenders to queue their nodes
)

// mix is who contends besides ours, and with which session timeout.
type mix struct {
	curator []peerSpec // in one JVM
	kazoo   []peerSpec // in one Python process
	zkLocks int        // go-zookeeper zk.Lock clients, in this process
}

func (m mix) require(t *testing.T) {
	t.Helper()
	if len(m.curator) > 0 {
		requirePeer(t, "curator")
	}
	if len(m.kazoo) > 0 {
		requirePeer(t, "kazoo")
	}
}

// start starts the peer processes of m on path (each waits for "go").
func (m mix) start(t *testing.T, rec *record, servers, path string, session time.Duration) []*peerProc {
	t.Helper()
	var procs []*peerProc
	if len(m.curator) > 0 {
		procs = append(procs, startCurator(t, rec, servers, path, session, peerHold, m.curator...))
	}
	if len(m.kazoo) > 0 {
		procs = append(procs, startKazoo(t, rec, servers, path, session, peerHold, m.kazoo...))
	}
	return procs
}

func (m mix) contenders() int { return len(m.curator) + len(m.kazoo) + m.zkLocks }

func specs(family, kind string, n, count int) []peerSpec {
	s := make([]peerSpec, n)
	for i := range s {
		s[i] = peerSpec{name: fmt.Sprintf("%s-%s%d", family, kind, i+1), kind: kind, count: count}
	}
	return s
}

// The peer family each dialect is for, in a mixed run with writers.
func mixedRuns(rounds int) []struct {
	dialect rwlock.Dialect
	mix     mix
} {
	return []struct {
		dialect rwlock.Dialect
		mix     mix
	}{
		{rwlock.DialectCurator, mix{curator: append(specs("curator", "rwread", 2, rounds), specs("curator", "rwwrite", 2, rounds)...)}},
		{rwlock.DialectMutex, mix{curator: specs("curator", "mutex", 2, rounds), zkLocks: 2}},
		{rwlock.DialectKazoo, mix{kazoo: specs("kazoo", "write", 3, rounds)}},
		{rwlock.DialectKazooLock, mix{kazoo: specs("kazoo", "lock", 3, rounds)}},
		{rwlock.DialectKazooPatterns, mix{kazoo: specs("kazoo", "write-native", 3, rounds)}},
	}
}

// Per dialect: 2 readers and 2 writers of ours, each peerRounds times,
// with that family's readers and writers doing the same.
func TestPeersMixed(t *testing.T) {
	for _, run := range mixedRuns(peerRounds) {
		t.Run(run.dialect.String(), func(t *testing.T) { runMixed(t, run.dialect, run.mix) })
	}
}

// kazoo's Lock made with extra_lock_patterns=("write-", "read-") counts
// native names, our readers' too, so it shares a DialectKazooPatterns path
// as WriteLock does in TestPeersMixed. Without the patterns it would count
// none of them, and be granted beside our readers and writers.
func TestPeersKazooLockWithPatterns(t *testing.T) {
	runMixed(t, rwlock.DialectKazooPatterns, mix{kazoo: specs("kazoo", "lock-native", 3, peerRounds)})
}

// DialectKazooLock, which the mixed-fleet error advises for kazoo's nodes,
// with kazoo's WriteLock and Lock on the path together: both count its
// names, its readers' read__lock__ too. (kazoo 2.8's ReadLock is left out
// of runs with writers: see TestPeersMixed.)
func TestPeersKazooLockDialectWithWriteLock(t *testing.T) {
	runMixed(t, rwlock.DialectKazooLock, mix{kazoo: append(specs("kazoo", "write", 2, peerRounds), specs("kazoo", "lock", 2, peerRounds)...)})
}

// runMixed runs 2 readers and 2 writers of ours in dialect d, each
// peerRounds times, beside m's contenders doing the same, and checks the
// merged log of everyone's grants.
func runMixed(t *testing.T, d rwlock.Dialect, m mix) {
	m.require(t)
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	rec := newRecord()
	procs := m.start(t, rec, srv.Addr(0), path, peerSession)
	ctx := t.Context()
	var fns []func() error
	for i := range 2 {
		for _, mode := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
			l := connect(t, srv.Addr(0), peerSession).lock(t, path, rwlock.WithDialect(d))
			who := fmt.Sprintf("zkrwlock-%s%d", mode, i+1)
			fns = append(fns, func() error { return ours(ctx, rec, who, l, mode, peerRounds, peerHold) })
		}
	}
	for i := range m.zkLocks {
		conn := connect(t, srv.Addr(0), peerSession).conn
		who := fmt.Sprintf("zk.Lock-%d", i+1)
		fns = append(fns, func() error { return zkLock(ctx, rec, who, conn, path, peerRounds, peerHold) })
	}

	begin := time.Now()
	for _, p := range procs {
		p.start(t)
	}
	goAll(fns...)(t, peerDeadline)
	for _, p := range procs {
		p.finish(t, peerDeadline)
	}
	took := time.Since(begin)

	grants, bad := rec.snapshot()
	require.Empty(t, bad)
	violations := checkGrants(grants)
	t.Logf("%s: %s; %d violations; %v", d, summary(grants), len(violations), msec(took))
	require.Empty(t, violations)
	require.Len(t, grants, (4+m.contenders())*peerRounds, "everyone finished every round")
	for _, g := range grants {
		require.NotZero(t, g.rel, "%s %s was never released", g.who, g.node)
	}
	op := connect(t, srv.Addr(0), 0)
	waitNodes(t, op.conn, path, 10*time.Second)
}

// Per dialect: a peer holding the write lock is killed with SIGKILL while
// ours and its own family's clients wait. Its session lives on until the
// server expires it, and nobody may be granted before then.
func TestPeersHolderKilled(t *testing.T) {
	tier.Long(t)
	for _, tc := range []struct {
		dialect rwlock.Dialect
		holder  mix // one holder (COUNT 0)
		waiters mix
	}{
		{rwlock.DialectCurator, mix{curator: specs("curator", "rwwrite", 1, 0)},
			mix{curator: append(specs("curator", "rwread", 1, 1), specs("curator", "rwwrite", 1, 1)...)}},
		{rwlock.DialectMutex, mix{curator: specs("curator", "mutex", 1, 0)}, mix{zkLocks: 1}},
		{rwlock.DialectKazoo, mix{kazoo: specs("kazoo", "write", 1, 0)}, mix{kazoo: specs("kazoo", "write", 1, 1)}},
		{rwlock.DialectKazooLock, mix{kazoo: specs("kazoo", "lock", 1, 0)}, mix{kazoo: specs("kazoo", "lock", 1, 1)}},
		{rwlock.DialectKazooPatterns, mix{kazoo: specs("kazoo", "write-native", 1, 0)}, mix{kazoo: specs("kazoo", "write-native", 1, 1)}},
	} {
		t.Run(tc.dialect.String(), func(t *testing.T) {
			tc.holder.require(t)
			tc.waiters.require(t)
			srv := sharedServer(t)
			path := zktest.LockPath(t, "/it")
			rec := newRecord()
			op := connect(t, srv.Addr(0), 0)

			holder := tc.holder.start(t, rec, srv.Addr(0), path, crashSession)[0]
			holder.start(t)
			var held grant
			zktest.Poll(t, peerQueued, func() bool {
				gs, _ := rec.snapshot()
				if len(gs) == 1 {
					held = gs[0]
				}
				return len(gs) == 1
			}, func() string { return "the peer holder did not acquire the lock" })

			procs := tc.waiters.start(t, rec, srv.Addr(0), path, peerSession)
			for _, p := range procs {
				p.start(t)
			}
			ctx := t.Context()
			var fns []func() error
			for _, mode := range []rwlock.Mode{rwlock.Write, rwlock.Read} {
				l := connect(t, srv.Addr(0), peerSession).lock(t, path, rwlock.WithDialect(tc.dialect))
				who := fmt.Sprintf("zkrwlock-%s", mode)
				fns = append(fns, func() error { return ours(ctx, rec, who, l, mode, 1, peerHold) })
			}
			for i := range tc.waiters.zkLocks {
				conn := connect(t, srv.Addr(0), peerSession).conn
				who := fmt.Sprintf("zk.Lock-%d", i+1)
				fns = append(fns, func() error { return zkLock(ctx, rec, who, conn, path, 1, peerHold) })
			}
			wait := goAll(fns...)
			waitNodeCount(t, op.conn, path, 1+2+tc.waiters.contenders(), peerQueued)

			killed := monotonic()
			holder.kill(t)
			rec.releasing(held.who, held.node, killed) // it stopped working; its node lives on
			wait(t, peerDeadline)
			for _, p := range procs {
				p.finish(t, peerDeadline)
			}

			grants, bad := rec.snapshot()
			require.Empty(t, bad)
			violations := checkGrants(grants)
			first := int64(1) << 62
			for _, g := range grants[1:] {
				first = min(first, g.acq)
			}
			after := time.Duration(first - killed)
			t.Logf("%s: %s; %d violations; holder killed → first grant %v later (its session timeout %v)",
				tc.dialect, summary(grants), len(violations), msec(after), crashSession)
			require.Empty(t, violations)
			require.Len(t, grants, 1+2+tc.waiters.contenders())
			require.GreaterOrEqual(t, after, crashSession/2, "granted before the dead holder's session could have expired")
			waitNodes(t, op.conn, path, 10*time.Second)
		})
	}
}

// kazoo's ReadLock, kept out of the mixed runs (kazoo#649), against our
// writers and readers in the two dialects it can share (the second with
// extra_lock_patterns): it waits for our writer, shares with our reader,
// and holds back our next writer.
func TestPeersKazooReadLock(t *testing.T) {
	for _, tc := range []struct {
		dialect rwlock.Dialect
		kind    string
	}{
		{rwlock.DialectKazoo, "read"},
		{rwlock.DialectKazooPatterns, "read-native"},
	} {
		t.Run(tc.dialect.String(), func(t *testing.T) {
			requirePeer(t, "kazoo")
			srv := sharedServer(t)
			path := zktest.LockPath(t, "/it")
			rec := newRecord()
			ctx := t.Context()
			op := connect(t, srv.Addr(0), 0)
			lock := func() *rwlock.RWLock {
				return connect(t, srv.Addr(0), peerSession).lock(t, path, rwlock.WithDialect(tc.dialect))
			}
			rec.contender("zkrwlock-write", rwlock.Write)
			rec.contender("zkrwlock-read", rwlock.Read)

			w1, err := lock().Lock(ctx)
			require.NoError(t, err)
			rec.acquired("zkrwlock-write", nodeName(w1.Node()), monotonic())
			kazoo := startKazoo(t, rec, srv.Addr(0), path, peerSession, peerHold, specs("kazoo", tc.kind, 1, 0)...)
			kazoo.start(t)
			waitNodeCount(t, op.conn, path, 2, peerQueued)
			r := goAcquire(t, ctx, lock().RLock)
			waitNodeCount(t, op.conn, path, 3, peerQueued)

			rec.releasing("zkrwlock-write", nodeName(w1.Node()), monotonic())
			mustRelease(t, w1)
			rg := r.granted(t, peerQueued)
			rec.acquired("zkrwlock-read", nodeName(rg.Node()), monotonic())
			zktest.Poll(t, peerQueued, func() bool {
				gs, _ := rec.snapshot()
				return len(gs) == 3
			}, func() string { return "the kazoo reader was not granted beside ours" })

			w2 := goAcquire(t, ctx, lock().Lock)
			waitNodeCount(t, op.conn, path, 3, peerQueued) // the two readers and w2
			rec.releasing("zkrwlock-read", nodeName(rg.Node()), monotonic())
			mustRelease(t, rg)
			w2.stillWaiting(t, "the kazoo reader holds the lock")
			kazoo.letGo(t)
			wg := w2.granted(t, peerQueued)
			rec.acquired("zkrwlock-write", nodeName(wg.Node()), monotonic())
			kazoo.finish(t, peerQueued)
			rec.releasing("zkrwlock-write", nodeName(wg.Node()), monotonic())
			mustRelease(t, wg)

			grants, bad := rec.snapshot()
			require.Empty(t, bad)
			violations := checkGrants(grants)
			t.Logf("%s: %s; %d violations", tc.dialect, summary(grants), len(violations))
			require.Empty(t, violations)
			require.Len(t, grants, 4)
		})
	}
}

// Downgrade with Curator on the path: our reader joins the downgraded
// node, while Curator's reader and writer, which do not read the mark, wait
// for the node to go: it stays exclusive towards peers.
func TestPeersDowngradeStaysExclusiveTowardsPeers(t *testing.T) {
	requirePeer(t, "curator")
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	rec := newRecord()
	ctx := t.Context()
	op := connect(t, srv.Addr(0), 0)
	lock := func() *rwlock.RWLock {
		return connect(t, srv.Addr(0), peerSession).lock(t, path, rwlock.WithDialect(rwlock.DialectCurator))
	}

	w, err := lock().Lock(ctx)
	require.NoError(t, err)
	r := goAcquire(t, ctx, lock().RLock)
	waitNodeCount(t, op.conn, path, 2, peerQueued)
	curator := startCurator(t, rec, srv.Addr(0), path, peerSession, peerHold,
		append(specs("curator", "rwread", 1, 1), specs("curator", "rwwrite", 1, 1)...)...)
	curator.start(t)
	waitNodeCount(t, op.conn, path, 4, peerQueued)

	d, err := w.Downgrade(ctx)
	require.NoError(t, err)
	rg := r.granted(t, peerQueued)
	gs, _ := rec.snapshot()
	require.Empty(t, gs, "a Curator client passed the downgraded node")
	mustRelease(t, rg)
	released := monotonic()
	mustRelease(t, d)
	curator.finish(t, peerDeadline)

	gs, bad := rec.snapshot()
	require.Empty(t, bad)
	require.Len(t, gs, 2)
	for _, g := range gs {
		require.Greater(t, g.acq, released, "%s was granted before the downgraded node went", g.who)
	}
	require.Empty(t, checkGrants(gs))
}

// In a kazoo dialect the lock directory is persistent: a container would be
// reaped once empty, and a kazoo lock made before that fails for good. In
// the others it is a container, as before. (A client cannot tell them apart
// by their Stat: the server reports ephemeralOwner 0 for both. So a server
// of the test's own reaps empty containers every 100ms, and we see which
// directories go.)
func TestPeersKazooDirectoryIsPersistent(t *testing.T) {
	srv := zkserver.Start(t, zkserver.Config{JavaOpts: []string{"-Xms64m", "-Xmx256m", "-Dznode.container.checkIntervalMs=100"}})
	ctx := t.Context()
	c := connect(t, srv.Addr(0), 0)
	top := zktest.LockPath(t, "/it")
	dirs := map[rwlock.Dialect]string{}
	for _, d := range []rwlock.Dialect{rwlock.DialectNative, rwlock.DialectCurator, rwlock.DialectMutex,
		rwlock.DialectKazoo, rwlock.DialectKazooLock, rwlock.DialectKazooPatterns} {
		dirs[d] = top + "/" + d.String()
		g, err := c.lock(t, dirs[d], rwlock.WithDialect(d)).Lock(ctx)
		require.NoError(t, err)
		mustRelease(t, g)
	}
	exists := func(p string) bool {
		ok, _, err := c.conn.Exists(p)
		require.NoError(t, err)
		return ok
	}
	zktest.Poll(t, 30*time.Second, func() bool {
		return !exists(dirs[rwlock.DialectNative]) && !exists(dirs[rwlock.DialectCurator]) && !exists(dirs[rwlock.DialectMutex])
	}, func() string { return "the containers of the other dialects were never reaped" })
	require.True(t, exists(dirs[rwlock.DialectKazoo]), "kazoo: the directory must be persistent")
	require.True(t, exists(dirs[rwlock.DialectKazooLock]), "kazoo-lock: the directory must be persistent")
	require.True(t, exists(dirs[rwlock.DialectKazooPatterns]), "kazoo-patterns: the directory must be persistent")
	require.True(t, exists(top), "a container parent stays while it has a child")
}
