package integration

import (
	"context"
	"strings"
	"sync/atomic"
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
