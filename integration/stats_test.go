package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
	"github.com/zkrwlock/rwlock/stats"
)

// The lock's request count is what the server received: on a server of
// its own, the packets it counts over uncontended and contended cycles are
// the lock's requests, give or take go-zookeeper's pings (one every third
// of the session timeout), the mntr exchanges and the test's own polls.
func TestStatsCountTheRequestsTheServerReceives(t *testing.T) {
	zk := zkserver.StartStandalone(t)
	a, b := connect(t, zk.ConnectString(), 0), connect(t, zk.ConnectString(), 0)
	path := zktest.LockPath(t, "/it")
	var rec stats.Recorder // of both locks
	la, lb := a.lock(t, path, rwlock.WithObserver(&rec)), b.lock(t, path, rwlock.WithObserver(&rec))
	ctx := t.Context()
	g, err := la.Lock(ctx) // the directory, and the ACL check of each lock, before measuring
	require.NoError(t, err)
	require.NoError(t, g.Release(ctx))
	g, err = lb.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, g.Release(ctx))

	packets := func() int64 {
		n, err := zk.SumMntr(ctx, "zk_packets_received")
		require.NoError(t, err)
		return n
	}
	before, p0, start := rec.Stats(), packets(), time.Now()
	for range 20 {
		g, err := la.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
	}
	w, err := la.Lock(ctx)
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		r, err := lb.RLock(ctx)
		if err == nil {
			err = r.Release(ctx)
		}
		waiting <- err
	}()
	polls := int64(0) // each a request of the test's, not the lock's
	require.Eventually(t, func() bool {
		polls++
		children, _, err := a.conn.Children(path)
		return err == nil && len(children) == 2
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, w.Release(ctx))
	require.NoError(t, <-waiting)
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	g, err = la.TryLock(tctx) // uncontended: granted
	require.NoError(t, err)
	require.NoError(t, g.Release(ctx))
	p2, elapsed := packets(), time.Since(start)

	d := rec.Stats().Sub(before)
	got := int64(d.Requests)
	server := p2 - p0 - 1 - polls // the second mntr exchange counts as a packet
	t.Logf("the lock counted %d requests, the server %d packets", got, server)
	assert.GreaterOrEqual(t, server, got, "every request the lock counts reached the server")
	// go-zookeeper pings on a ticker every third of the granted timeout,
	// busy or not, on each of the two connections. A slow machine makes
	// the run longer, so it allows more of them.
	pings := int64(0)
	for _, c := range []*client{a, b} {
		_, _, timeout, ok := c.session.Session()
		require.True(t, ok, "the recorder saw the handshake")
		pings += int64(elapsed/(timeout/3)) + 1
	}
	assert.LessOrEqual(t, server-got, pings, "the rest: go-zookeeper's pings over %v", elapsed)
	assert.Equal(t, uint64(22), d.Write.Granted)
	assert.Equal(t, uint64(1), d.Read.Granted)
	// Nothing was in the writes' way, so each took one round trip unless its
	// listing overtook its create (acquisition.listBehind: rare, but about
	// 2% of acquisitions under the race detector with the CPU busy, as
	// TestRequestCosts logs).
	assert.GreaterOrEqual(t, d.Write.OneRoundTrip, uint64(18), "nothing was in the writes' way")
	assert.LessOrEqual(t, d.Write.OneRoundTrip, uint64(22))
}

// A grant lost to a deleted node, a read that timed out behind it: the
// figures say so.
func TestStatsOfALossAndATimeout(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	path := zktest.LockPath(t, "/it")
	var ra, rb stats.Recorder
	la, lb := a.lock(t, path, rwlock.WithObserver(&ra)), b.lock(t, path, rwlock.WithObserver(&rb))
	ctx := t.Context()
	g, err := la.Lock(ctx)
	require.NoError(t, err)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = lb.RLock(tctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, b.conn.Delete(g.Node(), -1))
	<-g.Done()
	// The observer hears of the end just after Done closes, on the
	// goroutine that ended the grant.
	zktest.Poll(t, 10*time.Second, func() bool { return ra.Stats().Lost.Total() == 1 },
		func() string { return fmt.Sprintf("losses counted: %+v", ra.Stats().Lost) })

	sa, sb := ra.Stats(), rb.Stats()
	assert.Equal(t, stats.LostStats{NodeDeleted: 1}, sa.Lost)
	assert.Equal(t, uint64(1), sa.Write.Hold.Count())
	assert.Equal(t, uint64(1), sb.Read.Cancelled)
	assert.Zero(t, sb.Read.Wait.Count(), "the wait histogram has the grants only")
}

// What is under way, on a real server: eight readers wait behind a writer
// (and the Recorder says so while they wait), a LockAll holds a grant per
// lock, and once all have ended nothing is waiting or held.
func TestStatsUnderWay(t *testing.T) {
	zk := sharedServer(t)
	a, b := connect(t, zk.ConnectString(), 0), connect(t, zk.ConnectString(), 0)
	path := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	var rec stats.Recorder
	writer := a.lock(t, path, rwlock.WithObserver(&rec))
	w, err := writer.Lock(ctx)
	require.NoError(t, err)

	readers := b.lock(t, path, rwlock.WithObserver(&rec))
	began := time.Now() // before any reader's call
	var waits []*acquisition
	for range 8 {
		waits = append(waits, goAcquire(t, ctx, readers.RLock))
	}
	waitQueue(t, readers, 9)
	queued := time.Now()    // after every reader's call began
	time.Sleep(time.Second) // the waits age: their age is the figure under test
	// The figures are taken between before and after: each bound of the
	// age is measured to the side of the reading that keeps it true.
	before := time.Now()
	s := rec.Stats()
	after := time.Now()
	assert.Equal(t, uint64(8), s.Read.Waiting)
	assert.Equal(t, uint64(1), s.Write.Held)
	assert.Zero(t, s.Read.Held+s.Write.Waiting)
	assert.GreaterOrEqual(t, s.OldestWait, before.Sub(queued), "at least the time waited so far")
	assert.LessOrEqual(t, s.OldestWait, after.Sub(began))

	require.NoError(t, w.Release(ctx))
	var grants []*rwlock.Grant
	for _, r := range waits {
		grants = append(grants, r.granted(t, 30*time.Second))
	}
	s = rec.Stats()
	assert.Equal(t, uint64(8), s.Read.Held, "a node each")
	assert.Zero(t, s.Read.Waiting+s.Write.Held)
	assert.Zero(t, s.OldestWait)
	for _, g := range grants {
		require.NoError(t, g.Release(ctx))
	}

	other := a.lock(t, path+"-other", rwlock.WithObserver(&rec))
	all, err := rwlock.LockAll(ctx, rwlock.Request{Lock: writer, Mode: rwlock.Write}, rwlock.Request{Lock: other, Mode: rwlock.Read})
	require.NoError(t, err)
	s = rec.Stats()
	assert.Equal(t, uint64(1), s.Write.Held)
	assert.Equal(t, uint64(1), s.Read.Held)
	for _, g := range all {
		require.NoError(t, g.Release(ctx))
	}

	s = rec.Stats()
	assert.Zero(t, s.Read.Waiting+s.Write.Waiting, "waiting after all have ended")
	assert.Zero(t, s.Read.Held+s.Write.Held, "held after all have ended")
	assert.Equal(t, uint64(9), s.Read.Granted, "the eight readers and the set's")
}
