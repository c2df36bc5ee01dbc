package integration

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// cacheDelta is WithCaching's δ, as its doc states it.
const cacheDelta = 50 * time.Millisecond

// spy records, for each child of a directory, when a listing first showed
// it. The server created the node before then.
type spy struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// watch lists dir with a child watch, again at every change, until ctx ends.
func (s *spy) watch(ctx context.Context, conn *zk.Conn, dir string) {
	for ctx.Err() == nil {
		names, _, ch, err := conn.ChildrenW(dir)
		now := time.Now()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond): // the directory is not made yet
			}
			continue
		}
		s.mu.Lock()
		for _, n := range names {
			if _, ok := s.seen[n]; !ok {
				s.seen[n] = now
			}
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// snapshot returns what the spy has seen.
func (s *spy) snapshot() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.seen)
}

// forget forgets what the spy has seen.
func (s *spy) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.seen)
}

func (s *spy) at(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[name]
	return t, ok
}

// One caching process reads in a hot loop, re-granting its kept node,
// while writers of other processes queue now and then. Exclusion holds,
// and no re-grant that began more than δ (and a margin) after a writer's
// node was seen on the server passes that writer: the writer was granted
// before it.
func TestCachedStressWithRemoteWriters(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	path := zktest.LockPath(t, "/it")
	cacher := connect(t, srv.ConnectString(), 0)
	cl := cacher.lock(t, path, rwlock.WithCaching())
	ctx := testContext(t)

	var sp spy
	sp.seen = map[string]time.Time{}
	watcher := connect(t, srv.ConnectString(), 0)
	sctx, stopSpy := context.WithCancel(ctx)
	spied := make(chan struct{})
	go func() { defer close(spied); sp.watch(sctx, watcher.conn, path) }()

	var x exclusion
	type regrant struct {
		began, ended time.Time
		node         string
	}
	var mu sync.Mutex
	var regrants []regrant
	type writer struct {
		node    string
		granted time.Time
	}
	var writers []writer
	var cycles atomic.Int64
	deadline := time.Now().Add(3 * time.Second)

	eg, ectx := errgroup.WithContext(ctx)
	for range 2 { // two reading goroutines of the caching process
		eg.Go(func() error {
			last := ""
			for time.Now().Before(deadline) {
				began := time.Now()
				g, err := cl.RLock(ectx)
				if err != nil {
					return err
				}
				x.enter(rwlock.Read)
				if g.Node() == last {
					mu.Lock()
					regrants = append(regrants, regrant{began, time.Now(), g.Node()})
					mu.Unlock()
				}
				last = g.Node()
				cycles.Add(1)
				x.leave(rwlock.Read)
				if err := g.Release(ectx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for i := range 2 { // writers of their own processes
		wc := connect(t, srv.ConnectString(), 0)
		wl := wc.lock(t, path)
		eg.Go(func() error {
			for time.Now().Before(deadline) {
				time.Sleep(time.Duration(20+10*i) * time.Millisecond)
				// A writer the readers pass for good fails here, not by the
				// test's timeout.
				lctx, cancel := context.WithTimeout(ectx, 2*time.Second)
				g, err := wl.Lock(lctx)
				cancel()
				if err != nil {
					return fmt.Errorf("a writer queued for 2s behind re-granted readers: %w", err)
				}
				x.enter(rwlock.Write)
				mu.Lock()
				writers = append(writers, writer{g.Node(), time.Now()})
				mu.Unlock()
				time.Sleep(time.Millisecond)
				x.leave(rwlock.Write)
				if err := g.Release(ectx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, eg.Wait())
	stopSpy()
	<-spied

	assert.Zero(t, x.violations.Load(), "mutual exclusion")
	require.NotEmpty(t, writers)
	require.NotEmpty(t, regrants, "the caching process re-granted its node")
	const margin = 50 * time.Millisecond // the spy's listing after the create, on a loaded machine
	passed := 0
	for _, w := range writers {
		seen, ok := sp.at(w.node[len(path)+1:])
		if !ok {
			continue // created and granted between two of the spy's listings
		}
		for _, r := range regrants {
			if r.began.After(seen.Add(cacheDelta+margin)) && r.ended.Before(w.granted) {
				passed++
				t.Errorf("a re-grant of %s began %v after writer %s was seen, and was granted before it",
					r.node, r.began.Sub(seen), w.node)
			}
		}
	}
	t.Logf("%d read cycles, %d of them re-grants; %d writer grants; %d passed", cycles.Load(), len(regrants), len(writers), passed)
}

// A caching process whose session expires leaves no node behind: its kept
// node goes with the session, and its next acquisition queues afresh.
func TestCachedNodeGoesWithItsSession(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	path := zktest.LockPath(t, "/it")
	cacher := connect(t, srv.ConnectString(), 0)
	other := connect(t, srv.ConnectString(), 0)
	cl := cacher.lock(t, path, rwlock.WithCaching())
	ctx := testContext(t)

	g, err := cl.Lock(ctx)
	require.NoError(t, err)
	node := g.Node()
	require.NoError(t, g.Release(ctx))
	require.Len(t, lockNodes(t, other.conn, path), 1, "kept")

	session := cacher.conn.SessionID()
	cacher.expire(t, srv.Addr(0))
	waitNodeCount(t, other.conn, path, 0, 10*time.Second)
	zktest.WaitFor(t, 10*time.Second, func() bool {
		return cacher.conn.State() == zk.StateHasSession && cacher.conn.SessionID() != session
	}, "a new session")

	g, err = cl.Lock(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, node, g.Node(), "queued afresh")
	require.NoError(t, g.Release(ctx))
	cacher.conn.Close()
	waitNodeCount(t, other.conn, path, 0, 10*time.Second)
}

// Contended closes when a remote writer queues behind a grant, with or
// without caching; and a kept node goes at its release, so the writer is
// granted.
func TestContendedRemoteWriter(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	path := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	for _, caching := range []bool{false, true} {
		holder := connect(t, srv.ConnectString(), 0)
		other := connect(t, srv.ConnectString(), 0)
		var opts []rwlock.Option
		if caching {
			opts = append(opts, rwlock.WithCaching())
		}
		hl := holder.lock(t, path, opts...)
		g, err := hl.RLock(ctx)
		require.NoError(t, err)
		if caching {
			require.NoError(t, g.Release(ctx))
			g, err = hl.RLock(ctx) // re-granted
			require.NoError(t, err)
		}
		r, err := other.lock(t, path).RLock(ctx)
		require.NoError(t, err)
		select {
		case <-g.Contended():
			t.Fatal("a reader behind a reader is no conflict")
		case <-time.After(200 * time.Millisecond):
		}
		require.NoError(t, r.Release(ctx))
		w := goAcquire(t, ctx, other.lock(t, path).Lock)
		select {
		case <-g.Contended():
		case <-time.After(5 * time.Second):
			t.Fatalf("caching %v: Contended did not close with a writer queued", caching)
		}
		require.NoError(t, g.Err(), "Contended only tells")
		w.stillWaiting(t, "the writer waits for the grant it queued behind")
		require.NoError(t, g.Release(ctx))
		wg := w.granted(t, 5*time.Second)
		mustRelease(t, wg)
		waitNodeCount(t, other.conn, path, 0, 5*time.Second)
	}
}

// A partitioned caching process is told of the loss of a re-granted grant
// before another client is granted, as any holder is.
func TestCachedPartitionedHolderLearnsFirst(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1)
	p := proxied(t, srv.Addr(0))
	holder := connect(t, p.Addr(), timeout)
	other := connect(t, srv.Addr(0), timeout)
	path := zktest.LockPath(t, "/it")
	hl, ol := holder.lock(t, path, rwlock.WithCaching()), other.lock(t, path)
	ctx := t.Context()

	g, err := hl.Lock(ctx)
	require.NoError(t, err)
	node := g.Node()
	require.NoError(t, g.Release(ctx))
	g, err = hl.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, node, g.Node(), "re-granted")
	done := closedAt(ctx, g.Done())
	waiter := goAcquire(t, ctx, ol.Lock)
	waitNodeCount(t, other.conn, path, 2, 5*time.Second)

	start := time.Now()
	p.Blackhole()
	var doneAt, grantAt time.Time
	var wg *rwlock.Grant
	returned := waiter.done
	limit := time.After(timeout + 2*faultTick + 5*time.Second)
	for doneAt.IsZero() || grantAt.IsZero() {
		select {
		case doneAt = <-done:
		case <-returned:
			returned = nil
			wg, err = waiter.wait(t)
			require.NoError(t, err)
			grantAt = waiter.at
		case <-limit:
			t.Fatalf("partitioned for %v: holder told %v, other granted %v", msec(time.Since(start)), !doneAt.IsZero(), !grantAt.IsZero())
		}
	}
	heal(p)
	require.True(t, doneAt.Before(grantAt), "the holder learned of its loss %v after another client was granted", grantAt.Sub(doneAt))
	require.ErrorIs(t, g.Err(), rwlock.ErrLost)
	require.NoError(t, g.Release(ctx))
	mustRelease(t, wg)
	g2, err := hl.Lock(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, node, g2.Node())
	mustRelease(t, g2)
	holder.conn.Close()
	waitNodes(t, other.conn, path, 5*time.Second)
}

// W1c as a test: a hot loop of one caching process re-grants its kept node
// at about one sync per δ/2, by the server's count, and never the node's
// create and delete.
func TestCachedHotLoopRequests(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	path := zktest.LockPath(t, "/it")
	c := connect(t, srv.ConnectString(), 0)
	l := c.lock(t, path, rwlock.WithCaching())
	ctx := testContext(t)
	g, err := l.Lock(ctx)
	require.NoError(t, err)
	node := g.Node()
	require.NoError(t, g.Release(ctx))
	const cycles = 5000
	var elapsed time.Duration
	n := requestCount(t, srv, func() {
		start := time.Now()
		for range cycles {
			g, err := l.Lock(ctx)
			require.NoError(t, err)
			require.Equal(t, node, g.Node())
			require.NoError(t, g.Release(ctx))
		}
		elapsed = time.Since(start)
	})
	// One sync ahead of time per δ/2, and go-zookeeper's pings (one per a
	// third of the session timeout), with one more of each for the edges.
	most := int64(elapsed/(cacheDelta/2)) + int64(elapsed/(sessionTimeout/3)) + 3
	t.Logf("%d cycles in %v: %d requests (%.4f per cycle; at most %d allowed)", cycles, elapsed, n, float64(n)/cycles, most)
	assert.LessOrEqual(t, n, most)
}

// The stress with silent cuts aimed at the caching process: its proxy
// holds what the server sends, answers and notifications, while a remote
// writer queues behind its idle kept node. A re-grant that begins well
// after the writer's node exists waits for its sync's answer, which comes
// after the writer's notification. So it never passes the writer. The
// history checker finds no step under a grant after a conflicting grant
// was returned, and the spy no re-grant granted before a writer whose
// node was seen more than δ (and a margin) before the re-grant began.
func TestCachedSilentCutsWithRemoteWriters(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second // the hold below is far below its read timeout
	srv := faultServer(t, 1)
	p := proxied(t, srv.Addr(0))
	path := zktest.LockPath(t, "/it")
	cacher := connect(t, p.Addr(), timeout)
	cl := cacher.lock(t, path, rwlock.WithCaching())
	ctx := testContext(t)

	var sp spy
	sp.seen = map[string]time.Time{}
	watcher := connect(t, srv.Addr(0), timeout)
	sctx, stopSpy := context.WithCancel(ctx)
	spied := make(chan struct{})
	go func() { defer close(spied); sp.watch(sctx, watcher.conn, path) }()
	wl := connect(t, srv.Addr(0), timeout).lock(t, path)

	var mu sync.Mutex
	var events []chaosEvent
	record := func(e chaosEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	// hold runs one grant of a client: granted, a step that asks Err, and
	// the release.
	hold := func(client int, g *rwlock.Grant) {
		record(chaosEvent{Client: client, Kind: "granted", Lock: "a", Mode: g.Mode().String(), Node: g.Node(), At: time.Now().UnixNano()})
		at := time.Now().UnixNano()
		if g.Err() == nil {
			record(chaosEvent{Client: client, Kind: "step", Lock: "a", At: at, Done: time.Now().UnixNano()})
		}
		record(chaosEvent{Client: client, Kind: "released", Lock: "a", At: time.Now().UnixNano()})
		require.NoError(t, g.Release(ctx))
	}
	const margin = 50 * time.Millisecond // the spy's listing after the create, on a loaded machine
	const rounds = 5
	refused := 0
	for round := range rounds {
		g, err := cl.Lock(ctx)
		require.NoError(t, err)
		kept := g.Node()
		hold(1, g) // kept, idle

		p.Hold(true)
		w := goAcquire(t, ctx, wl.Lock)
		var seen time.Time
		zktest.WaitFor(t, 5*time.Second, func() bool {
			for name, at := range sp.snapshot() {
				if name != kept[len(path)+1:] {
					seen = at
					return true
				}
			}
			return false
		}, "the spy sees the writer's node")
		time.Sleep(2 * (cacheDelta + margin)) // the re-grant begins well after the writer's node exists
		began := time.Now()
		a := goAcquire(t, ctx, cl.Lock)
		time.Sleep(100 * time.Millisecond) // its sync waits in the proxy
		p.Hold(false)

		select { // whichever is granted first runs first: the other waits for it
		case <-w.done:
			hold(2, w.granted(t, time.Second))
			mine := a.granted(t, 10*time.Second)
			if mine.Node() != kept {
				refused++
			}
			hold(1, mine)
		case <-a.done:
			mine := a.granted(t, time.Second)
			if mine.Node() == kept && began.After(seen.Add(cacheDelta+margin)) {
				t.Errorf("round %d: a re-grant of %s began %v after the writer's node was seen, and was granted before it",
					round, kept, began.Sub(seen))
			}
			hold(1, mine)
			hold(2, w.granted(t, 10*time.Second))
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: neither the writer nor the caching process was granted within 10s", round)
		}
		sp.forget()
	}
	stopSpy()
	<-spied
	r := check(events, nil, 2*timeout)
	assert.Empty(t, r.Violations, "the history checker")
	assert.Equal(t, rounds, refused, "each re-grant under a cut queued afresh")
	t.Logf("%d rounds: %d grants, %d re-grants refused", rounds, r.Grants, refused)
}
