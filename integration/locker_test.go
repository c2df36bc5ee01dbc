package integration

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
)

// Lockers of two processes (two sessions), each shared by goroutines,
// never let two callers in at once.
func TestLockerExcludes(t *testing.T) {
	srv := sharedServer(t)
	const path = "/locker/excludes"
	var x exclusion
	var wg sync.WaitGroup
	for range 2 {
		k := rwlock.NewLocker(connect(t, srv.ConnectString(), 0).lock(t, path))
		for range 2 {
			wg.Go(func() {
				for range 4 {
					k.Lock()
					x.enter(rwlock.Write)
					time.Sleep(time.Millisecond) // widen the window an overlap would need
					x.leave(rwlock.Write)
					k.Unlock()
				}
			})
		}
	}
	wg.Wait()
	assert.Zero(t, x.violations.Load(), "two callers inside at once")
}

// A Lock whose waiting node is deleted (Lock fails with ErrLost) queues
// again instead of panicking, and is granted once the holder unlocks.
func TestLockerQueuesAgainAfterALostWait(t *testing.T) {
	srv := sharedServer(t)
	const path = "/locker/lostwait"
	ctx := testContext(t)
	holder := connect(t, srv.ConnectString(), 0)
	g, err := holder.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	waiter := rwlock.NewLocker(connect(t, srv.ConnectString(), 0).lock(t, path))
	locked := make(chan any, 1)
	go func() {
		defer func() { locked <- recover() }()
		waiter.Lock()
	}()
	nodes := waitNodeCount(t, holder.conn, path, 2, 30*time.Second)
	require.NoError(t, holder.conn.Delete(path+"/"+otherThan(nodes, g.Node()[len(path)+1:]), -1))
	// Queued again behind the holder: a node of a new name.
	waitNodes2 := func() bool {
		now, _ := nodesNow(holder.conn, path)
		return len(now) == 2 && !sameNodes(now, nodes)
	}
	require.Eventually(t, waitNodes2, 30*time.Second, 10*time.Millisecond, "the Locker queued again")
	select {
	case p := <-locked:
		t.Fatalf("Lock returned while the holder held (panic %v)", p)
	default:
	}
	require.NoError(t, g.Release(ctx))
	select {
	case p := <-locked:
		require.Nil(t, p, "Lock panicked")
	case <-time.After(30 * time.Second):
		t.Fatal("Lock still blocked 30s after the holder released")
	}
	waiter.Unlock()
	waitNodes(t, holder.conn, path, 30*time.Second)
}

// Misuse panics: a Lock on a closed connection with an error that says
// so, an Unlock without a Lock with a message.
func TestLockerMisuse(t *testing.T) {
	srv := sharedServer(t)
	c := connect(t, srv.ConnectString(), 0)
	k := rwlock.NewLocker(c.lock(t, "/locker/misuse"))
	assert.PanicsWithValue(t, "rwlock: Unlock of an unlocked Locker", k.Unlock)
	c.conn.Close()
	var p any
	func() {
		defer func() { p = recover() }()
		k.Lock()
	}()
	err, ok := p.(error)
	require.True(t, ok, "Lock panics with an error, got %v", p)
	assert.True(t, errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrConnectionClosed), "%v", err)
	assert.PanicsWithValue(t, "rwlock: Unlock of an unlocked Locker", k.Unlock, "the failed Lock left it unlocked")
	var nilLock *rwlock.RWLock
	assert.PanicsWithError(t, "rwlock: lock : invalid argument: NewLocker of a nil *RWLock", rwlock.NewLocker(nilLock).Lock)
}

// Through a server's outage: Unlock returns within the cleanup timeout
// without a panic, a Lock made during the outage waits, and is granted once
// the server is back and the old node gone.
func TestLockerRidesOutAnOutage(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35) // the lock's watches are re-set on the reconnection
	srv := faultServer(t, 1)
	const path = "/locker/outage"
	ctx := testContext(t)
	opts := []rwlock.Option{rwlock.WithCleanupTimeout(time.Second)}
	a := rwlock.NewLocker(connect(t, srv.ConnectString(), 10*time.Second).lock(t, path, opts...))
	b := rwlock.NewLocker(connect(t, srv.ConnectString(), 10*time.Second).lock(t, path, opts...))
	a.Lock()
	require.NoError(t, srv.Stop(0))
	locked := make(chan any, 1)
	go func() {
		defer func() { locked <- recover() }()
		b.Lock()
	}()
	start := time.Now()
	a.Unlock()
	assert.Less(t, time.Since(start), 5*time.Second, "Unlock waits for the deletion at most the cleanup timeout")
	require.NoError(t, srv.Start(ctx, 0))
	select {
	case p := <-locked:
		require.Nil(t, p, "Lock panicked")
	case <-time.After(30 * time.Second):
		t.Fatal("Lock still blocked 30s after the server came back")
	}
	b.Unlock()
}
