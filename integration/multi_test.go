package integration

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
	"github.com/zkrwlock/rwlock/stats"
)

var setsFor = flag.Duration("sets.for", 15*time.Second, "how long TestLockAllRandomOrders runs (3s with -short)")

// Four locks, mixed modes, two of their directories missing: one
// transaction and the listings behind it; one token; nothing left after.
func TestLockAllUncontended(t *testing.T) {
	srv := zkserver.StartStandalone(t) // of its own: the server's request count is the set's
	a := connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	var rec stats.Recorder
	locks := make([]*rwlock.RWLock, 4)
	for i := range locks {
		locks[i] = a.lock(t, fmt.Sprintf("%s/%d", root, i), rwlock.WithObserver(&rec))
	}
	reqs := []rwlock.Request{{Lock: locks[0], Mode: rwlock.Write}, {Lock: locks[1], Mode: rwlock.Read}, {Lock: locks[2], Mode: rwlock.Write}, {Lock: locks[3], Mode: rwlock.Read}}
	grants, err := rwlock.LockAll(ctx, reqs...) // makes the directories
	require.NoError(t, err)
	for i, g := range grants {
		assert.Equal(t, reqs[i].Mode, g.Mode())
		require.NoError(t, g.Release(ctx))
	}

	packets := func() int64 {
		n, err := srv.SumMntr(ctx, "zk_packets_received")
		require.NoError(t, err)
		return n
	}
	// A listing sent behind the multi can overtake it (go-zookeeper sends
	// concurrent calls in no set order; see listBehind), and its member
	// then lists again: never wrong, one request more. Under -race on a
	// busy machine that happens to one set in a few, so the set is taken
	// again, up to 5 times, until none did.
	for try := 1; ; try++ {
		before := rec.Stats()
		p0 := packets()
		grants, err = rwlock.LockAll(ctx, reqs...)
		require.NoError(t, err)
		p1 := packets()
		d := rec.Stats().Sub(before)
		if first := d.Read.OneRoundTrip + d.Write.OneRoundTrip; first < 4 && try < 5 {
			t.Logf("try %d: %d members from their first listing; taking the set again", try, first)
			for _, g := range grants {
				require.NoError(t, g.Release(ctx))
			}
			continue
		}
		assert.Equal(t, uint64(5), d.Requests, "one multi, four listings behind it")
		assert.Equal(t, int64(5), p1-p0-1, "what the server received (the mntr exchange aside)")
		assert.Equal(t, uint64(4), d.Read.OneRoundTrip+d.Write.OneRoundTrip, "every member from its first listing")
		break
	}
	token := grants[0].Token()
	require.NotZero(t, token)
	for i, g := range grants {
		assert.Equal(t, token, g.Token(), "one transaction, one token")
		assert.Len(t, lockNodes(t, a.conn, locks[i].Path()), 1)
		require.NoError(t, g.Release(ctx))
		assert.Empty(t, lockNodes(t, a.conn, locks[i].Path()))
	}
}

func TestLockAllRefusesBadSets(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	p := zktest.LockPath(t, "/multi")
	la, la2, lb := a.lock(t, p+"/x"), a.lock(t, p+"/x"), b.lock(t, p+"/y")
	for name, reqs := range map[string][]rwlock.Request{
		"two connections": {{Lock: la, Mode: rwlock.Write}, {Lock: lb, Mode: rwlock.Write}},
		"a path twice":    {{Lock: la, Mode: rwlock.Write}, {Lock: la2, Mode: rwlock.Read}},
		"a nil lock":      {{Lock: la, Mode: rwlock.Write}, {Lock: nil, Mode: rwlock.Read}},
		"no mode":         {{Lock: la, Mode: 0}},
	} {
		_, err := rwlock.LockAll(ctx, reqs...)
		require.ErrorIs(t, err, rwlock.ErrInvalidArgument, name)
	}
	err := la.WithWrite(ctx, func(ctx context.Context) error {
		_, err := rwlock.LockAll(ctx, rwlock.Request{Lock: la, Mode: rwlock.Write})
		return err
	})
	require.ErrorIs(t, err, rwlock.ErrInvalidArgument, "a context carrying a grant of one of the locks")
	grants, err := rwlock.LockAll(ctx)
	require.NoError(t, err)
	require.Empty(t, grants)
	assert.Empty(t, lockNodes(t, a.conn, p+"/x"))
}

// Two jobs that take the same two locks in opposite orders: one at a time,
// each gets its first lock and waits for the other's forever (shown with a
// timeout); with LockAll, both finish.
func TestLockAllDoesNotDeadlockWhereOneByOneDoes(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	pathX, pathY := root+"/x", root+"/y"

	t.Run("one by one", func(t *testing.T) {
		firsts := make(chan struct{}, 2)
		both := make(chan struct{})
		job := func(c *client, first, second string) error {
			g, err := c.lock(t, first).Lock(ctx)
			if err != nil {
				return err
			}
			defer g.Release(ctx)
			firsts <- struct{}{}
			<-both // each holds its first lock before asking for the second
			tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			h, err := c.lock(t, second).Lock(tctx)
			if err == nil {
				h.Release(ctx)
			}
			return err
		}
		errs := make(chan error, 2)
		go func() { errs <- job(a, pathX, pathY) }()
		go func() { errs <- job(b, pathY, pathX) }()
		<-firsts
		<-firsts
		close(both)
		require.ErrorIs(t, <-errs, context.DeadlineExceeded, "deadlocked")
		require.ErrorIs(t, <-errs, context.DeadlineExceeded, "deadlocked")
	})

	t.Run("LockAll", func(t *testing.T) {
		job := func(c *client, first, second string) error {
			tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			grants, err := rwlock.LockAll(tctx, rwlock.Request{Lock: c.lock(t, first), Mode: rwlock.Write}, rwlock.Request{Lock: c.lock(t, second), Mode: rwlock.Write})
			if err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // the hold that made the others wait, not a synchronisation
			for _, g := range grants {
				if err := g.Release(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		errs := make(chan error, 2)
		for range 10 {
			go func() { errs <- job(a, pathX, pathY) }()
			go func() { errs <- job(b, pathY, pathX) }()
			require.NoError(t, <-errs)
			require.NoError(t, <-errs)
		}
	})
	assert.Empty(t, lockNodes(t, a.conn, pathX))
	assert.Empty(t, lockNodes(t, a.conn, pathY))
}

// Clients take random subsets of overlapping locks, in random orders and
// modes, for sets.for: every set is granted (a deadlock would show as a
// timeout), no two conflicting grants of a path overlap, and no node is
// left.
func TestLockAllRandomOrders(t *testing.T) {
	srv := sharedServer(t)
	ctx := t.Context() // each set has its own bound below: sets.for may exceed testContext's minute
	root := zktest.LockPath(t, "/multi")
	const nPaths, nClients = 5, 6
	paths := make([]string, nPaths)
	excl := make([]exclusion, nPaths)
	for i := range paths {
		paths[i] = fmt.Sprintf("%s/%d", root, i)
	}
	var sets atomic.Int64
	duration := *setsFor
	if testing.Short() {
		duration = min(duration, 3*time.Second)
	}
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for c := range nClients {
		cl := connect(t, srv.ConnectString(), 0)
		locks := make([]*rwlock.RWLock, nPaths)
		for i := range locks {
			locks[i] = cl.lock(t, paths[i])
		}
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 7))
			for time.Now().Before(deadline) && !t.Failed() {
				idx := rnd.Perm(nPaths)[:2+rnd.IntN(nPaths-1)]
				reqs := make([]rwlock.Request, len(idx))
				for j, i := range idx {
					reqs[j] = rwlock.Request{Lock: locks[i], Mode: []rwlock.Mode{rwlock.Read, rwlock.Write}[rnd.IntN(2)]}
				}
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				grants, err := rwlock.LockAll(tctx, reqs...)
				cancel()
				if !assert.NoError(t, err, "a set not granted in 30 s: deadlock?") {
					return
				}
				for j, i := range idx {
					excl[i].enter(reqs[j].Mode)
				}
				time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond) // the work under the locks
				for j, i := range idx {
					excl[i].leave(reqs[j].Mode)
					assert.NoError(t, grants[j].Err())
					assert.NoError(t, grants[j].Release(ctx))
				}
				sets.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d sets of 2-%d locks granted by %d clients in %v", sets.Load(), nPaths, nClients, duration)
	for i := range excl {
		assert.Zero(t, excl[i].violations.Load(), "exclusion on %s", paths[i])
	}
	checker := connect(t, srv.ConnectString(), 0)
	for _, p := range paths {
		assert.Empty(t, lockNodes(t, checker.conn, p))
	}
}

// A set that waits is cancelled: every node it made goes before LockAll
// returns, including those of locks it would have had at once.
func TestLockAllCancelledLeavesNothing(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	holder, err := b.lock(t, root+"/busy").Lock(ctx)
	require.NoError(t, err)
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = rwlock.LockAll(tctx, rwlock.Request{Lock: a.lock(t, root+"/free"), Mode: rwlock.Write}, rwlock.Request{Lock: a.lock(t, root+"/busy"), Mode: rwlock.Read})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, lockNodes(t, a.conn, root+"/free"))
	assert.Len(t, lockNodes(t, a.conn, root+"/busy"), 1, "the holder's only")
	require.NoError(t, holder.Release(ctx))
}

// The session of a waiting set expires: the set queues again in a new
// session, in one transaction, and is granted once the holder releases.
func TestLockAllAfterExpiry(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	holder, err := b.lock(t, root+"/busy").Lock(ctx)
	require.NoError(t, err)
	la, lb := a.lock(t, root+"/free"), a.lock(t, root+"/busy")
	done := make(chan error, 1)
	var grants []*rwlock.Grant
	go func() {
		var err error
		grants, err = rwlock.LockAll(ctx, rwlock.Request{Lock: la, Mode: rwlock.Write}, rwlock.Request{Lock: lb, Mode: rwlock.Write})
		done <- err
	}()
	zktest.Poll(t, 10*time.Second, func() bool { return len(lockNodes(t, b.conn, root+"/busy")) == 2 },
		func() string { return "the set's node never queued" })
	old := a.conn.SessionID()
	a.expire(t, srv.Addr(0))
	zktest.Poll(t, 20*time.Second, func() bool { return a.conn.SessionID() != old && len(lockNodes(t, b.conn, root+"/busy")) == 2 },
		func() string { return "the set did not queue again in a new session" })
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-done)
	require.Len(t, grants, 2)
	assert.Equal(t, grants[0].Token(), grants[1].Token())
	for _, g := range grants {
		require.NoError(t, g.Release(ctx))
	}
	assert.Empty(t, lockNodes(t, b.conn, root+"/free"))
	assert.Empty(t, lockNodes(t, b.conn, root+"/busy"))
}

// The answer to a set's transaction is lost with its connection: the server
// made every node, the client never heard. Once reconnected, the set finds
// its nodes by its guid, in every directory, and is granted with them; or,
// if its caller gave up meanwhile, they are deleted by guid in the
// background. Either way no second node and no orphan.
func TestLockAllLostMultiResponse(t *testing.T) {
	tier.NoRace(t, zk35)
	srv := sharedServer(t)
	for _, giveUp := range []bool{false, true} {
		t.Run(fmt.Sprint("gave up ", giveUp), func(t *testing.T) {
			const timeout = 6 * time.Second
			root := zktest.LockPath(t, "/multi")
			d := newFaultDialer(opMulti, root+"/", true)
			conn := connect(t, srv.Addr(0), timeout, withDialer(d.wrap)).conn
			checker := connect(t, srv.Addr(0), 0)
			la, err := rwlock.New(conn, root+"/a", rwlock.WithSessionTimeout(timeout))
			require.NoError(t, err)
			lb, err := rwlock.New(conn, root+"/b", rwlock.WithSessionTimeout(timeout))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			warm, err := rwlock.LockAll(ctx, rwlock.Request{Lock: la, Mode: rwlock.Write}, rwlock.Request{Lock: lb, Mode: rwlock.Read})
			require.NoError(t, err) // the directories, before the fault
			for _, g := range warm {
				require.NoError(t, g.Release(ctx))
			}

			d.armed.Store(true)
			done := make(chan error, 1)
			var grants []*rwlock.Grant
			go func() {
				var err error
				grants, err = rwlock.LockAll(ctx, rwlock.Request{Lock: la, Mode: rwlock.Write}, rwlock.Request{Lock: lb, Mode: rwlock.Read})
				done <- err
			}()
			var created string
			select {
			case created = <-d.fired:
			case err := <-done:
				t.Fatalf("LockAll returned (%v) but no answer was withheld", err)
			case <-time.After(10 * time.Second):
				t.Fatal("no multi answer withheld within 10s")
			}
			ok, _, err := checker.conn.Exists(created)
			require.NoError(t, err)
			require.True(t, ok, "the server made %s", created)
			require.Len(t, lockNodes(t, checker.conn, root+"/b"), 1, "and the set's other node")

			if giveUp {
				cancel()
				require.ErrorIs(t, <-done, context.Canceled)
				waitNodes(t, checker.conn, root+"/a", 10*time.Second)
				waitNodes(t, checker.conn, root+"/b", 10*time.Second)
				return
			}
			require.NoError(t, <-done)
			require.Equal(t, created, grants[0].Node(), "the set adopted the nodes the server made")
			assert.Len(t, lockNodes(t, checker.conn, root+"/a"), 1)
			assert.Len(t, lockNodes(t, checker.conn, root+"/b"), 1)
			for _, g := range grants {
				require.NoError(t, g.Release(ctx))
			}
			waitNodes(t, checker.conn, root+"/a", 5*time.Second)
			waitNodes(t, checker.conn, root+"/b", 5*time.Second)
		})
	}
}

// The leader of a 3-member ensemble dies (kill -9) while a set waits on
// it, half of its locks free and half taken, and again while the set
// holds: the set is granted once the holder releases, keeps its grants
// through the second kill, and leaves no node.
func TestLockAllThroughLeaderKill(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 10 * time.Second
	cl := faultServer(t, 3)
	addrs := cl.Addrs()
	leader, err := cl.Leader()
	require.NoError(t, err)
	conn := connect(t, cl.ConnectString(), timeout, withHome(leader)).conn
	require.Equal(t, addrs[leader], conn.Server(), "the set's client is on the leader")
	other := connect(t, cl.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	la, err := rwlock.New(conn, root+"/free", rwlock.WithSessionTimeout(timeout))
	require.NoError(t, err)
	lb, err := rwlock.New(conn, root+"/busy", rwlock.WithSessionTimeout(timeout))
	require.NoError(t, err)
	holder, err := other.lock(t, root+"/busy").Lock(ctx)
	require.NoError(t, err)

	done := make(chan error, 1)
	var grants []*rwlock.Grant
	go func() {
		var err error
		grants, err = rwlock.LockAll(ctx, rwlock.Request{Lock: la, Mode: rwlock.Write}, rwlock.Request{Lock: lb, Mode: rwlock.Write})
		done <- err
	}()
	zktest.Poll(t, 10*time.Second, func() bool { return len(lockNodes(t, other.conn, root+"/busy")) == 2 },
		func() string { return "the set never queued" })
	require.NoError(t, cl.Kill(leader))
	restartMember(t, cl, leader)
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-done)
	require.Len(t, grants, 2)

	leader, err = cl.Leader()
	require.NoError(t, err)
	session := conn.SessionID()
	require.NoError(t, cl.Kill(leader))
	restartMember(t, cl, leader)
	waitSession(t, conn, session, 30*time.Second)
	for _, g := range grants {
		require.NoError(t, g.Err(), "a set's grants ride out a leader kill as any grant does")
		require.NoError(t, g.Release(ctx))
	}
	assert.Empty(t, lockNodes(t, other.conn, root+"/free"))
	assert.Empty(t, lockNodes(t, other.conn, root+"/busy"))
}

// A member granted early loses its node (deleted by hand) while another
// member still waits: the set is never granted with it. LockAll fails with
// ErrLost, as Lock does for a node deleted while it waits, and leaves no
// node.
func TestLockAllMemberDeletedWhileTheSetWaits(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	holder, err := b.lock(t, root+"/busy").Lock(ctx)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := rwlock.LockAll(ctx, rwlock.Request{Lock: a.lock(t, root+"/free"), Mode: rwlock.Write},
			rwlock.Request{Lock: a.lock(t, root+"/busy"), Mode: rwlock.Write})
		done <- err
	}()
	free := waitNodeCount(t, b.conn, root+"/free", 1, 10*time.Second)
	waitNodeCount(t, b.conn, root+"/busy", 2, 10*time.Second)
	require.NoError(t, b.conn.Delete(root+"/free/"+free[0], -1)) // an operator's zkCli delete
	require.NoError(t, holder.Release(ctx))
	require.ErrorIs(t, <-done, rwlock.ErrLost)
	assert.Empty(t, lockNodes(t, b.conn, root+"/free"))
	waitNodes(t, b.conn, root+"/busy", 10*time.Second)
}

// Queue shows a set's members in each member's entry, read from the data
// the set's one transaction wrote; a downgrade keeps them; a set of many
// locks names only some.
func TestQueueShowsSet(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	paths := []string{root + "/a", root + "/b", root + "/c"}
	grants := writeSet(t, ctx, a, paths)
	for i, p := range paths {
		q, err := b.lock(t, p).Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1)
		others := append(slices.Clone(paths[:i]), paths[i+1:]...)
		assert.Equal(t, others, q[0].Set, p)
		assert.Equal(t, 3, q[0].SetSize, p)
	}
	down, err := grants[0].Downgrade(ctx)
	require.NoError(t, err)
	q, err := b.lock(t, paths[0]).Queue(ctx)
	require.NoError(t, err)
	require.Len(t, q, 1)
	assert.Equal(t, rwlock.Read, q[0].Mode)
	assert.Equal(t, paths[1:], q[0].Set, "a downgrade keeps the set")
	require.NoError(t, down.Release(ctx))
	for _, g := range grants[1:] {
		require.NoError(t, g.Release(ctx))
	}

	g, err := a.lock(t, paths[0]).Lock(ctx)
	require.NoError(t, err)
	q, err = b.lock(t, paths[0]).Queue(ctx)
	require.NoError(t, err)
	assert.Nil(t, q[0].Set, "a lone lock is in no set")
	assert.Zero(t, q[0].SetSize)
	require.NoError(t, g.Release(ctx))

	many := make([]rwlock.Request, 20)
	for i := range many {
		many[i] = rwlock.Request{Lock: a.lock(t, fmt.Sprintf("%s/many/%d", root, i)), Mode: rwlock.Read}
	}
	grants, err = rwlock.LockAll(ctx, many...)
	require.NoError(t, err)
	q, err = b.lock(t, root+"/many/19").Queue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 20, q[0].SetSize)
	assert.Len(t, q[0].Set, 8, "the data names only some of a big set")
	assert.Equal(t, root+"/many/0", q[0].Set[0])
	for _, g := range grants {
		require.NoError(t, g.Release(ctx))
	}
}

// ReleaseAll deletes a set in one transaction: one request to the server,
// where Release takes one per grant; a writer queued behind a member is
// granted.
func TestReleaseAll(t *testing.T) {
	srv := zkserver.StartStandalone(t) // of its own: the server's request count is the release's
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	locks := make([]*rwlock.RWLock, 4)
	reqs := make([]rwlock.Request, 4)
	for i := range locks {
		locks[i] = a.lock(t, fmt.Sprintf("%s/%d", root, i))
		reqs[i] = rwlock.Request{Lock: locks[i], Mode: []rwlock.Mode{rwlock.Write, rwlock.Read}[i%2]}
	}
	packets := func() int64 {
		n, err := srv.SumMntr(ctx, "zk_packets_received")
		require.NoError(t, err)
		return n
	}
	// A keepalive or a ping of either connection may land in the window:
	// the set is taken again, up to 3 times, until none did.
	for try := 1; ; try++ {
		grants, err := rwlock.LockAll(ctx, reqs...)
		require.NoError(t, err)
		p0 := packets()
		require.NoError(t, rwlock.ReleaseAll(ctx, grants...))
		n := packets() - p0 - 1 // the mntr exchange aside
		for i, g := range grants {
			assert.ErrorIs(t, g.Err(), rwlock.ErrReleased)
			assert.Empty(t, lockNodes(t, a.conn, locks[i].Path()))
		}
		if n == 1 || try == 3 {
			assert.Equal(t, int64(1), n, "one transaction")
			break
		}
		t.Logf("try %d: %d requests; again", try, n)
	}

	grants, err := rwlock.LockAll(ctx, reqs...)
	require.NoError(t, err)
	waiter := make(chan error, 1)
	go func() {
		g, err := b.lock(t, root+"/0").Lock(ctx)
		if err == nil {
			err = g.Release(ctx)
		}
		waiter <- err
	}()
	waitNodeCount(t, a.conn, root+"/0", 2, 10*time.Second)
	require.NoError(t, rwlock.ReleaseAll(ctx, grants...))
	require.NoError(t, <-waiter)
	waitNodes(t, a.conn, root+"/0", 5*time.Second)
}

// The server refuses a set's transaction when one of its nodes may not be
// deleted any more (its directory's ACL lost DELETE after the set was
// taken): ReleaseAll then releases each grant alone, so that every other
// node goes, and the refused grant stays held, as Release would leave it.
func TestReleaseAllRefusedByACL(t *testing.T) {
	srv := sharedServer(t)
	a, admin := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	root := zktest.LockPath(t, "/multi")
	paths := []string{root + "/a", root + "/b", root + "/c"}
	grants := writeSet(t, ctx, a, paths)
	_, err := admin.conn.SetACL(paths[1], zk.WorldACL(zk.PermAll&^zk.PermDelete), -1)
	require.NoError(t, err)

	err = rwlock.ReleaseAll(ctx, grants...)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	assert.Empty(t, lockNodes(t, admin.conn, paths[0]))
	assert.Len(t, lockNodes(t, admin.conn, paths[1]), 1, "the refused node stays")
	assert.Empty(t, lockNodes(t, admin.conn, paths[2]))
	assert.NoError(t, grants[1].Err(), "and its grant is still held")

	_, err = admin.conn.SetACL(paths[1], zk.WorldACL(zk.PermAll), -1)
	require.NoError(t, err)
	require.NoError(t, rwlock.ReleaseAll(ctx, grants...))
	assert.Empty(t, lockNodes(t, admin.conn, paths[1]))
}

// A set's release whose transaction is carried out but whose answer is
// lost (the connection closes before it arrives), or that never reaches
// the server: the grants end, ReleaseAll returns the error, and no node
// outlives it (deleted by the transaction, or in the background after the
// reconnection).
func TestFaultReleaseAllLostMulti(t *testing.T) {
	tier.NoRace(t, zk35)
	srv := sharedServer(t)
	for _, withhold := range []bool{true, false} {
		t.Run(map[bool]string{true: "answer lost", false: "not sent"}[withhold], func(t *testing.T) {
			root := zktest.LockPath(t, "/multi")
			d := newFaultDialer(opMulti, root+"/", withhold)
			conn := connect(t, srv.Addr(0), 0, withDialer(d.wrap)).conn
			checker := connect(t, srv.Addr(0), 0)
			ctx := testContext(t)
			var reqs []rwlock.Request
			for _, p := range []string{"/a", "/b"} {
				l, err := rwlock.New(conn, root+p)
				require.NoError(t, err)
				reqs = append(reqs, rwlock.Request{Lock: l, Mode: rwlock.Write})
			}
			grants, err := rwlock.LockAll(ctx, reqs...)
			require.NoError(t, err)

			d.armed.Store(true)
			err = rwlock.ReleaseAll(ctx, grants...)
			select {
			case <-d.fired:
			default:
				t.Fatalf("ReleaseAll returned (%v), but no transaction was broken", err)
			}
			require.Error(t, err, "the outcome was not known when it returned")
			for _, g := range grants {
				assert.ErrorIs(t, g.Err(), rwlock.ErrReleased)
			}
			waitNodes(t, checker.conn, root+"/a", 10*time.Second)
			waitNodes(t, checker.conn, root+"/b", 10*time.Second)
		})
	}
}

// writeSet takes the write locks of paths on a with one LockAll.
func writeSet(t *testing.T, ctx context.Context, a *client, paths []string) []*rwlock.Grant {
	t.Helper()
	reqs := make([]rwlock.Request, len(paths))
	for i, p := range paths {
		reqs[i] = rwlock.Request{Lock: a.lock(t, p), Mode: rwlock.Write}
	}
	grants, err := rwlock.LockAll(ctx, reqs...)
	require.NoError(t, err)
	return grants
}
