package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// WithLockDelay (lockdelay.go): after an unclean loss ahead, no grant
// before the delay has passed since the loss; a clean release hands over
// at once.

// lockDelayTest is the delay of these tests: long beside a round trip and
// the scheduling of a loaded machine, short beside the test's time.
const lockDelayTest = 3 * time.Second

// existedUntil looks for node from a client of its own until it is gone,
// and returns, on CLOCK_MONOTONIC, when it sent the last look that found
// the node. The server deleted it after then: this dates the deletion from
// below. A notification dates it from above, and a watcher may hear of it
// later than the client under test does.
func existedUntil(t *testing.T, conn *zk.Conn, node string) <-chan int64 {
	t.Helper()
	sent := monotonic()
	ok, _, err := conn.Exists(node)
	require.NoError(t, err)
	require.True(t, ok, "%s is gone already", node)
	at := make(chan int64, 1)
	go func() {
		defer close(at)
		for {
			last := sent
			time.Sleep(time.Millisecond) // the pace of the looks, not a synchronisation
			sent = monotonic()
			ok, _, err := conn.Exists(node)
			switch {
			case err != nil:
				return
			case !ok:
				at <- last
				return
			}
		}
	}()
	return at
}

// leaderNode returns the one lock node of path, the leader's.
func leaderNode(t *testing.T, conn *zk.Conn, path string) string {
	t.Helper()
	nodes := lockNodes(t, conn, path)
	require.Len(t, nodes, 1)
	return path + "/" + nodes[0]
}

// A leader killed -9, or stopped past its session timeout, vanishes
// without a release: its successor, waiting with WithLockDelay, leads only
// the delay after the server deleted the leader's node. A third client
// dates the deletion from below, by its last look that found the node.
func TestLockDelayAfterLeaderLoss(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	for _, how := range []struct {
		name string
		sig  syscall.Signal
	}{{"killed", syscall.SIGKILL}, {"stopped", syscall.SIGSTOP}} {
		t.Run(how.name, func(t *testing.T) {
			const timeout = 4 * time.Second
			srv := faultServer(t, 1)
			path := zktest.LockPath(t, "/elect")
			ctx := t.Context()

			t.Setenv(leaderEnvDelay, lockDelayTest.String())
			leader := startLeader(t, srv.Addr(0), path, timeout, "first")

			wc := connect(t, srv.Addr(0), timeout)
			gone := existedUntil(t, wc.conn, leaderNode(t, wc.conn, path))

			sc := connect(t, srv.Addr(0), timeout)
			successor, err := rwlock.NewElection(sc.conn, path, rwlock.WithLockDelay(lockDelayTest))
			require.NoError(t, err)
			next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
				return successor.Campaign(ctx, []byte("second"))
			})
			waitNodeCount(t, sc.conn, path, 2, 10*time.Second)
			next.stillWaiting(t, "the leader leads")

			require.NoError(t, syscall.Kill(leader.pid(), how.sig))
			g := next.granted(t, timeout+2*faultTick+lockDelayTest+10*time.Second)
			led := monotonic()
			defer mustRelease(t, g)
			existed, ok := <-gone
			require.True(t, ok, "the third client did not see the leader's node go")
			after := time.Duration(led - existed)
			t.Logf("leader %s: its node went, and the successor led %v after it was last seen (lock-delay %v)", how.name, msec(after), lockDelayTest)
			// The successor counts from when it learnt of the deletion,
			// which came after the last look that found the node.
			require.GreaterOrEqual(t, after, lockDelayTest, "the successor led before the lock-delay had passed")
			require.Greater(t, g.Token(), leader.term, "terms increase")

			if how.sig == syscall.SIGSTOP {
				require.NoError(t, syscall.Kill(leader.pid(), syscall.SIGCONT))
				select {
				case <-leader.told:
				case <-time.After(10 * time.Second):
					t.Fatal("the resumed leader was never told")
				}
			}
			leader.cmd.Process.Kill()
			leader.reap()
		})
	}
}

// A clean Resign hands over at once, though the leader was granted at its
// first try, whose release deletes plainly without the option; and so
// does a leader that waited.
func TestLockDelayCleanResignHandsOverAtOnce(t *testing.T) {
	cluster := sharedServer(t)
	srv := cluster.Addr(0)
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()
	const timeout = 10 * time.Second
	var prev *rwlock.Election
	var prevConn *zk.Conn
	var leading *rwlock.Grant
	for i := range 3 {
		c := connect(t, srv, timeout)
		e, err := rwlock.NewElection(c.conn, path, rwlock.WithLockDelay(lockDelayTest))
		require.NoError(t, err)
		if prev == nil {
			leading, err = e.Campaign(ctx, []byte("first"))
			require.NoError(t, err)
			prev, prevConn = e, c.conn
			continue
		}
		next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			return e.Campaign(ctx, []byte("next"))
		})
		waitNodeCount(t, prevConn, path, 2, 10*time.Second)
		waitWatchedBy(t, cluster, path, leading.Node(), c) // a node gone before its waiter's first look costs the delay
		next.stillWaiting(t, "the leader leads")
		resigned := time.Now()
		require.NoError(t, prev.Resign(ctx))
		leading = next.granted(t, 10*time.Second)
		took := next.at.Sub(resigned)
		t.Logf("handoff %d: Resign → the next leads in %v", i, msec(took))
		require.Less(t, took, lockDelayTest/2, "a clean Resign must hand over at once")
		prev, prevConn = e, c.conn
	}
	require.NoError(t, prev.Resign(ctx))
}

// A writer behind a run of readers owes the delay when one reader of the
// run vanishes, though it waits on for the others, whose releases are
// clean. When the whole run releases cleanly, it is granted at once.
func TestLockDelayReaderLostInARun(t *testing.T) {
	tier.Long(t) // a session expiry
	cluster := sharedServer(t)
	srv := cluster.Addr(0)
	path := zktest.LockPath(t, "/run")
	ctx := t.Context()
	const timeout = 10 * time.Second
	for _, lose := range []bool{false, true} {
		r1, r2 := connect(t, srv, timeout), connect(t, srv, timeout)
		g1, err := r1.lock(t, path, rwlock.WithLockDelay(lockDelayTest)).RLock(ctx)
		require.NoError(t, err)
		g2, err := r2.lock(t, path, rwlock.WithLockDelay(lockDelayTest)).RLock(ctx)
		require.NoError(t, err)
		wc := connect(t, srv, timeout)
		gone := existedUntil(t, wc.conn, g1.Node())
		w := goAcquire(t, ctx, wc.lock(t, path, rwlock.WithLockDelay(lockDelayTest)).Lock)
		waitNodeCount(t, wc.conn, path, 3, 10*time.Second)
		waitWatchedBy(t, cluster, path, g1.Node(), wc)
		waitWatchedBy(t, cluster, path, g2.Node(), wc)
		w.stillWaiting(t, "readers hold")
		// Taken before the expiry or release, it dates the node's deletion
		// from below. The watcher's notification dates it from above, and
		// the writer's watch on the same connection may be served first.
		began := monotonic()
		if lose {
			r1.expire(t, srv)
		} else {
			require.NoError(t, g1.Release(ctx))
		}
		_, ok := <-gone
		require.True(t, ok)
		released := time.Now()
		require.NoError(t, g2.Release(ctx))
		g := w.granted(t, lockDelayTest+10*time.Second)
		granted := monotonic()
		after := time.Duration(granted - began)
		t.Logf("a reader of the run lost: %v; the writer granted %v after its node began to go, %v after the last release", lose, msec(after), msec(w.at.Sub(released)))
		if lose {
			require.GreaterOrEqual(t, after, lockDelayTest, "granted before the lock-delay had passed")
		} else {
			require.Less(t, w.at.Sub(released), lockDelayTest/2, "clean releases must hand over at once")
		}
		require.NoError(t, g.Release(ctx))
	}
}

// A leader Proclaims, and its session expires while its successor is cut
// off, right after the change's notification. The successor's read of the
// node after the change is lost with its connection. After the
// reconnection its listing lacks the leader's node, whose last event was a
// data change. Nothing tells how the node went, so the successor waits the
// delay.
func TestLockDelayProclaimThenExpiryAcrossReconnection(t *testing.T) {
	tier.Long(t) // a session expiry, and a reconnection
	cluster := sharedServer(t)
	srv := cluster.Addr(0)
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()
	const timeout = 10 * time.Second

	lc := connect(t, srv, timeout)
	el, err := rwlock.NewElection(lc.conn, path, rwlock.WithLockDelay(lockDelayTest))
	require.NoError(t, err)
	leader, err := el.Campaign(ctx, []byte("first"))
	require.NoError(t, err)

	p := faultproxy.StartFramed(t, srv)
	sc := connect(t, p.Addr(), timeout)
	successor, err := rwlock.NewElection(sc.conn, path, rwlock.WithLockDelay(lockDelayTest))
	require.NoError(t, err)
	next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
		return successor.Campaign(ctx, []byte("second"))
	})
	waitWatchedBy(t, cluster, path, leader.Node(), sc)
	next.stillWaiting(t, "the leader leads")

	cut := p.BlackholeAfter(faultproxy.Notification) // the Proclaim's
	require.NoError(t, el.Proclaim(ctx, []byte("first, again")))
	waitCut(t, cut)
	lc.expire(t, srv)
	expired := time.Now()
	heal(p)

	g := next.granted(t, timeout+lockDelayTest+10*time.Second)
	defer mustRelease(t, g)
	after := next.at.Sub(expired)
	t.Logf("the leader's session expired, and the successor led %v after (lock-delay %v)", msec(after), lockDelayTest)
	require.GreaterOrEqual(t, after, lockDelayTest, "the successor took the Proclaim's change for a release's mark")
}
