package integration

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The bounded lock (WithCapacity) on a real server. TestChaos checks its
// permits under every fault the nemesis makes, kill -9, SIGSTOP past T,
// partitions and a leader's loss, with the history checker's weighted sum
// (pastCapacity).

// Strict queue order, and the herd-free watch set: each release of one
// permit admits the first waiter alone, and wakes at most one waiter more.
// Each waiter's connection counts the node events the server sends it; a
// Sync on it afterwards makes sure every event of the release's changes
// has arrived.
func TestPermitsFIFOAndWakeups(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	const capacity = 4
	ctx := testContext(t)
	var holders []*rwlock.Grant
	for range capacity {
		g, err := connect(t, srv.Addr(0), 0).lock(t, path, rwlock.WithCapacity(capacity)).RLock(ctx)
		require.NoError(t, err)
		holders = append(holders, g)
	}
	type waiter struct {
		conn   *zk.Conn
		events *atomic.Int64
		a      *acquisition
	}
	var waiters []waiter
	for i := range 8 {
		events := new(atomic.Int64)
		count := zk.WithEventCallback(func(ev zk.Event) {
			if strings.HasPrefix(ev.Path, path+"/") && (ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeDataChanged) {
				events.Add(1)
			}
		})
		c := connect(t, srv.Addr(0), 0, withZKOptions(count))
		l := c.lock(t, path, rwlock.WithCapacity(capacity))
		a := goAcquire(t, ctx, l.RLock)
		waitQueue(t, l, capacity+i+1)
		waiters = append(waiters, waiter{c.conn, events, a})
	}
	for _, w := range waiters {
		w.a.stillWaiting(t, "every permit is held")
	}
	held := holders
	for round := range len(waiters) {
		first := waiters[round:]
		before := make([]int64, len(first))
		for i, w := range first {
			before[i] = w.events.Load()
		}
		mustRelease(t, held[0])
		held = held[1:]
		g := first[0].a.granted(t, 10*time.Second) // the first waiter, none other
		held = append(held, g)
		// Its admission mark wakes the next waiter: once it is written, the
		// release's chain is over.
		require.Eventually(t, func() bool {
			data, _, err := first[0].conn.Get(g.Node())
			return err == nil && strings.Contains(string(data), "state=held")
		}, 10*time.Second, 5*time.Millisecond)
		woken := 0
		for i, w := range first {
			_, err := w.conn.Sync(path)
			require.NoError(t, err)
			if w.events.Load() > before[i] {
				woken++
			}
		}
		for _, w := range first[1:] {
			w.a.stillWaiting(t, "one permit came free")
		}
		assert.LessOrEqual(t, woken, 2, "release %d admitted one and woke %d", round, woken)
	}
	for _, g := range held {
		mustRelease(t, g)
	}
}

// A large request holds back a later small one that would fit, on a real
// server, and the release that makes room admits both. A permit's guarded
// write commits.
func TestPermitsLargeRequestHoldsBackSmall(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	lock := func() *rwlock.RWLock { return connect(t, srv.Addr(0), 0).lock(t, path, rwlock.WithCapacity(4)) }
	g3, err := lock().Acquire(ctx, 3)
	require.NoError(t, err)
	big := lock()
	a2 := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return big.Acquire(ctx, 2) })
	waitQueue(t, big, 2)
	small := lock()
	a1 := goAcquire(t, ctx, small.RLock)
	waitQueue(t, small, 3)
	a2.stillWaiting(t, "3 of 4 held")
	a1.stillWaiting(t, "the 2 ahead of it waits")
	mustRelease(t, g3)
	g2, g1 := a2.granted(t, 10*time.Second), a1.granted(t, 10*time.Second)
	assert.Less(t, g2.Token(), g1.Token())
	// A guarded write under a permit commits while it holds.
	_, err = g2.Multi(ctx, &zk.CreateRequest{Path: path + "-guarded", Data: []byte("x"), Acl: zk.WorldACL(zk.PermAll)})
	require.NoError(t, err)
	mustRelease(t, g2)
	mustRelease(t, g1)
}

// A create whose response is lost (the connection drops after the server
// made the node): the acquisition adopts its permit's node by guid, or,
// if its caller gave up, deletes it. No orphaned permit either way.
func TestPermitsLostCreateLeavesNoOrphan(t *testing.T) {
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	for _, giveUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "adopted", true: "abandoned"}[giveUp], func(t *testing.T) {
			t.Parallel()
			const timeout = 6 * time.Second
			path := zktest.LockPath(t, "/it")
			d := newFaultDialer(opCreate, path+"/", true)
			conn := connect(t, srv.Addr(0), timeout, withDialer(d.wrap)).conn
			checker := connect(t, srv.Addr(0), 0)
			l, err := rwlock.New(conn, path, rwlock.WithSessionTimeout(timeout), rwlock.WithCapacity(4))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			d.armed.Store(true)
			w := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return l.Acquire(ctx, 2) })
			var created string
			select {
			case created = <-d.fired:
			case <-w.done:
				t.Fatalf("the acquisition returned (%v) but no create response was withheld", w.err)
			case <-time.After(10 * time.Second):
				t.Fatal("no create response withheld within 10s")
			}
			assert.Contains(t, created, "-sem-2of4-")
			if giveUp {
				cancel()
				_, err := w.wait(t)
				require.ErrorIs(t, err, context.Canceled)
				waitNodes(t, checker.conn, path, 10*time.Second)
				return
			}
			g := w.granted(t, 10*time.Second)
			require.Equal(t, created, g.Node(), "the acquisition adopted the node the server created")
			waitNodes(t, checker.conn, path, time.Second, nodeName(created))
			mustRelease(t, g)
			waitNodes(t, checker.conn, path, 5*time.Second)
		})
	}
}

// A holder of two of three permits, in another process, dies by SIGKILL:
// its permits stay counted until the server expires its session, and only
// then is a waiter that needs them granted, beside the holder of the third.
func TestFaultPermitHolderKilled(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1) // its own: the times measured are the point
	path := zktest.LockPath(t, "/it")
	ctx := t.Context()

	holder := startHelper(t, "TestHelperHolder", holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path,
		holderEnvTimeout+"="+timeout.String(), holderEnvPermits+"=3,2")
	node := strings.TrimPrefix(holder.line(t, time.Minute, "held "), "held ")
	require.Contains(t, node, "-sem-2of3-")

	third, err := connect(t, srv.Addr(0), timeout).lock(t, path, rwlock.WithCapacity(3)).Acquire(ctx, 1)
	require.NoError(t, err)
	waiter := connect(t, srv.Addr(0), timeout)
	wl := waiter.lock(t, path, rwlock.WithCapacity(3))
	w := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return wl.Acquire(ctx, 2) })
	waitNodeCount(t, waiter.conn, path, 3, 10*time.Second)
	w.stillWaiting(t, "the holder process holds two permits of three")

	killed := time.Now()
	require.NoError(t, syscall.Kill(holder.pid(), syscall.SIGKILL))
	require.ErrorContains(t, holder.reap(), "killed")
	g := w.granted(t, timeout+2*faultTick+10*time.Second)
	took := w.at.Sub(killed)
	t.Logf("holder of 2 permits SIGKILLed → waiter of 2 granted %v (session timeout %v)", msec(took), timeout)
	require.GreaterOrEqual(t, took, timeout/2, "granted before the dead holder's session could have expired")
	exists, _, err := waiter.conn.Exists(node)
	require.NoError(t, err)
	require.False(t, exists, "the dead holder's node went first")
	require.NoError(t, third.Err(), "the third permit is held throughout")
	mustRelease(t, g)
	mustRelease(t, third)
}

// oneTrip records whether each acquisition took one round trip.
type oneTrip struct{ trips chan bool }

func (o oneTrip) ObserveAcquire(_ context.Context, e rwlock.AcquireEvent) { o.trips <- e.OneRoundTrip }
func (oneTrip) ObserveGrant(rwlock.GrantEvent)                            {}

// An uncontended permit takes one round trip, its listing sent behind its
// create, as any uncontended grant does: the listing proves its place and
// dates its token.
func TestPermitUncontendedOneRoundTrip(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	o := oneTrip{make(chan bool, 8)}
	l := connect(t, srv.Addr(0), 0).lock(t, path, rwlock.WithCapacity(4), rwlock.WithObserver(o))
	g, err := l.Acquire(ctx, 2) // the first makes the directory
	require.NoError(t, err)
	mustRelease(t, g)
	<-o.trips
	// A listing that overtakes its create costs one more (see listBehind):
	// on a busy machine that happens to one acquisition in a few, so each
	// is taken again, up to 5 times, until one is not overtaken.
	for _, w := range []int64{1, 2, 4} {
		one := false
		for try := 0; try < 5 && !one; try++ {
			g, err := l.Acquire(ctx, w)
			require.NoError(t, err)
			one = <-o.trips
			mustRelease(t, g)
		}
		assert.True(t, one, "weight %d: never one round trip in 5 tries", w)
	}
}

// A set's member whose own way clears marks its node then, not at the
// set's grant. A waiter behind it, which took it for a waiter and watches
// it alone, is admitted while the set still waits for its other lock.
// The follower's debug log says when it watches the member, so it listed
// before the permits came free.
func TestPermitSetMemberAdmitsItsFollower(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path, other := zktest.LockPath(t, "/it"), zktest.LockPath(t, "/it")
	ctx := testContext(t)
	lock := func(p string, opts ...rwlock.Option) *rwlock.RWLock {
		return connect(t, srv.Addr(0), 0).lock(t, p, opts...)
	}
	gz, err := lock(other).Lock(ctx) // the set's other lock, held on
	require.NoError(t, err)
	ga, err := lock(path, rwlock.WithCapacity(2)).Acquire(ctx, 2)
	require.NoError(t, err)

	c := connect(t, srv.Addr(0), 0)
	member := c.lock(t, path, rwlock.WithCapacity(2))
	type taken struct {
		gs  []*rwlock.Grant
		err error
	}
	set := make(chan taken, 1)
	setOther := c.lock(t, other)
	go func() {
		gs, err := rwlock.LockAll(ctx, rwlock.Request{Lock: member, Mode: rwlock.Read, Weight: 1},
			rwlock.Request{Lock: setOther, Mode: rwlock.Write})
		set <- taken{gs, err}
	}()
	waitQueue(t, member, 2)

	var log debugLog
	follower := lock(path, rwlock.WithCapacity(2), rwlock.WithLogger(log.logger()))
	ax := goAcquire(t, ctx, follower.RLock)
	zktest.WaitFor(t, 20*time.Second, func() bool { return log.about("waiting for permits") != "" },
		"the follower watches the set's member")
	mustRelease(t, ga)
	gx := ax.granted(t, 10*time.Second) // 1 + 1 permits of 2, while the set waits
	select {
	case <-set:
		t.Fatal("the set was granted while its other lock is held")
	default:
	}
	mustRelease(t, gz)
	r := <-set
	require.NoError(t, r.err)
	require.NoError(t, rwlock.ReleaseAll(ctx, r.gs...))
	mustRelease(t, gx)
}

// A holder is told when a node that cannot count its permits comes to its
// path (the fleet watch, see fleet.go). A bounded lock's holder is told of
// a plain writer's node, as a release that predates capacities makes: it
// cannot read our sem- names, and so holds at once. Any holder is told of
// Curator's InterProcessSemaphoreV2, whose leases no lock of ours counts.
func TestPermitHolderToldOfAnUncountingPeer(t *testing.T) {
	const uuid = "0f8ad5c2-3bd6-4b49-a0a3-6c6b5e0e9a7b"
	runs := []struct {
		name  string
		opts  []rwlock.Option
		nodes []string // made in order under the path; the last one ephemeral and sequential
	}{
		{"plain writer beside permits", []rwlock.Option{rwlock.WithCapacity(4)},
			[]string{"_c_0123456789abcdef0123456789abcdef-write-"}},
		{"curator semaphore beside permits", []rwlock.Option{rwlock.WithCapacity(4)},
			[]string{"leases", "leases/_c_" + uuid + "-lease-"}},
		{"curator semaphore beside a plain lock", nil,
			[]string{"leases", "leases/_c_" + uuid + "-lease-"}},
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			srv := sharedServer(t)
			path := zktest.LockPath(t, "/it")
			ctx := testContext(t)
			g, err := connect(t, srv.Addr(0), 0).lock(t, path, run.opts...).RLock(ctx)
			require.NoError(t, err)
			op := connect(t, srv.Addr(0), 0)
			var made []string
			t.Cleanup(func() {
				for _, p := range slices.Backward(made) {
					op.conn.Delete(p, -1)
				}
			})
			for i, n := range run.nodes {
				flags := int32(0)
				if i == len(run.nodes)-1 {
					flags = zk.FlagEphemeral | zk.FlagSequence
				}
				p, err := op.conn.Create(path+"/"+n, nil, flags, zk.WorldACL(zk.PermAll))
				require.NoError(t, err)
				made = append(made, p)
			}
			select {
			case <-g.Done():
				require.ErrorIs(t, g.Err(), rwlock.ErrLost)
				require.ErrorIs(t, g.Err(), rwlock.ErrInvalidArgument)
			case <-time.After(10 * time.Second):
				t.Fatal("the holder was not told of a peer that does not count its permits")
			}
		})
	}
}
