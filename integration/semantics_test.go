package integration

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
	"github.com/zkrwlock/rwlock/stats"
)

// The lock's core contract, on a real server: who may hold the lock
// together, in which order waiters get it, what each waiter watches, and
// what a failed or cancelled acquisition leaves behind (nothing).

// grantNodes returns the base names of the grants' nodes, sorted, as lockNodes
// lists them.
func grantNodes(gs ...*rwlock.Grant) []string {
	var ns []string
	for _, g := range gs {
		ns = append(ns, path.Base(g.Node()))
	}
	slices.Sort(ns)
	return ns
}

func TestReadersShareWritersExclude(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, b, c := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb, lc := a.lock(t, p), b.lock(t, p), c.lock(t, p)
	ctx := testContext(t)

	t.Run("readers share", func(t *testing.T) {
		r1, err := la.RLock(ctx)
		require.NoError(t, err)
		r2, err := lb.TryRLock(ctx)
		require.NoError(t, err, "a second reader must not wait for the first")
		r3, err := lc.RLock(ctx)
		require.NoError(t, err)
		require.Equal(t, grantNodes(r1, r2, r3), lockNodes(t, a.conn, p))
		for _, r := range []*rwlock.Grant{r1, r2, r3} {
			require.NoError(t, r.Release(ctx))
		}
		require.Empty(t, lockNodes(t, a.conn, p))
	})

	t.Run("a writer excludes readers and writers", func(t *testing.T) {
		w, err := la.Lock(ctx)
		require.NoError(t, err)
		var tl timeline
		reader := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			g, err := lb.RLock(ctx)
			tl.add("reader granted")
			return g, err
		})
		waitQueue(t, la, 2)
		writer := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			g, err := lc.Lock(ctx)
			tl.add("writer granted")
			return g, err
		})
		q := waitQueue(t, la, 3)
		assert.Equal(t, []bool{true, false, false}, heldFlags(q))

		tl.add("writer releases")
		require.NoError(t, w.Release(ctx))
		r, err := reader.wait(t)
		require.NoError(t, err)
		assert.False(t, writer.returned(), "the second writer must wait for the reader")
		tl.add("reader releases")
		require.NoError(t, r.Release(ctx))
		w2, err := writer.wait(t)
		require.NoError(t, err)
		require.NoError(t, w2.Release(ctx))
		require.Equal(t, []string{"writer releases", "reader granted", "reader releases", "writer granted"}, tl.get())
		require.Empty(t, lockNodes(t, a.conn, p))
	})
}

func heldFlags(q []rwlock.Entry) []bool {
	var held []bool
	for _, e := range q {
		held = append(held, e.Held)
	}
	return held
}

// A waiting writer blocks the readers that queue after it, even while
// readers hold the lock: no writer starvation.
func TestWaitingWriterBlocksLaterReaders(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, b, c := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb, lc := a.lock(t, p), b.lock(t, p), c.lock(t, p)
	ctx := testContext(t)

	r1, err := la.RLock(ctx)
	require.NoError(t, err)
	var tl timeline
	writer := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
		g, err := lb.Lock(ctx)
		tl.add("W granted")
		return g, err
	})
	waitQueue(t, la, 2)
	reader := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
		g, err := lc.RLock(ctx)
		tl.add("R2 granted")
		return g, err
	})
	waitQueue(t, la, 3)
	_, err = lc.TryRLock(ctx)
	require.ErrorIs(t, err, rwlock.ErrWouldBlock, "a reader behind a waiting writer must not join the holding reader")

	tl.add("R1 releases")
	require.NoError(t, r1.Release(ctx))
	w, err := writer.wait(t)
	require.NoError(t, err)
	tl.add("W releases")
	require.NoError(t, w.Release(ctx))
	r2, err := reader.wait(t)
	require.NoError(t, err)
	require.NoError(t, r2.Release(ctx))
	require.Equal(t, []string{"R1 releases", "W granted", "W releases", "R2 granted"}, tl.get())
	require.Empty(t, lockNodes(t, a.conn, p))
}

// Grants follow the queue: readers queued together hold together, and
// each writer waits for everything before it.
func TestGrantsFollowQueueOrder(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	holder := connect(t, srv.ConnectString(), 0)
	lh := holder.lock(t, p)
	w0, err := lh.Lock(ctx)
	require.NoError(t, err)

	queue := []struct {
		name string
		mode rwlock.Mode
	}{{"R1", rwlock.Read}, {"R2", rwlock.Read}, {"W3", rwlock.Write}, {"R4", rwlock.Read}, {"W5", rwlock.Write}}
	var (
		tl      timeline
		x       exclusion
		waiters []*acquisition
	)
	for i, q := range queue {
		l := connect(t, srv.ConnectString(), 0).lock(t, p)
		acquire := l.RLock
		if q.mode == rwlock.Write {
			acquire = l.Lock
		}
		waiters = append(waiters, goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			g, err := acquire(ctx)
			if err != nil {
				return nil, err
			}
			tl.add(q.name + " granted")
			x.enter(q.mode)
			time.Sleep(20 * time.Millisecond) // hold it a while, so that readers overlap
			x.leave(q.mode)
			tl.add(q.name + " releases")
			return nil, g.Release(ctx)
		}))
		waitQueue(t, lh, i+2) // queue them one by one, in this order
	}
	tl.add("W0 releases")
	require.NoError(t, w0.Release(ctx))
	for _, w := range waiters {
		_, err := w.wait(t)
		require.NoError(t, err)
	}

	events := tl.get()
	t.Logf("timeline: %v", events)
	var grants []string
	for _, e := range events {
		if n, ok := strings.CutSuffix(e, " granted"); ok {
			grants = append(grants, n)
		}
	}
	require.Len(t, grants, 5)
	assert.ElementsMatch(t, []string{"R1", "R2"}, grants[:2])
	assert.Equal(t, []string{"W3", "R4", "W5"}, grants[2:])
	before := func(a, b string) {
		t.Helper()
		assert.Less(t, slices.Index(events, a), slices.Index(events, b), "%q must come before %q", a, b)
	}
	before("W0 releases", "R1 granted")
	before("W0 releases", "R2 granted")
	before("R1 releases", "W3 granted")
	before("R2 releases", "W3 granted")
	before("W3 releases", "R4 granted")
	before("R4 releases", "W5 granted")
	assert.Zero(t, x.violations.Load(), "mutual exclusion violated")
	require.Empty(t, lockNodes(t, holder.conn, p))
}

// Each waiter watches the nodes its rule names (the server's wchp says so),
// and no node is watched by two waiting writers: readers behind a writer
// all watch that writer, and a writer behind readers watches them and the
// writer before them, so each reader has one watcher and no release wakes
// a herd.
func TestEachWaiterWatchesItsNodes(t *testing.T) {
	srv := sharedServer(t)
	for _, tc := range []struct {
		name    string
		modes   string // in queue order
		holders int    // how many of them hold the lock; the others wait
		// watched[i] are the indexes in modes of the nodes that waiter i
		// (modes[holders+i]) must watch: a reader, the nearest writer
		// before it; a writer, its predecessor, or behind readers, the run
		// of them and the writer before them.
		watched [][]int
	}{
		{name: "readers behind a writer", modes: "wrrr", holders: 1, watched: [][]int{{0}, {0}, {0}}},
		{name: "alternating", modes: "wrwrw", holders: 1, watched: [][]int{{0}, {0, 1}, {2}, {2, 3}}},
		{name: "writers behind readers", modes: "rrwrw", holders: 2, watched: [][]int{{0, 1}, {2}, {2, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := zktest.LockPath(t, "/it")
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			var (
				sessions []string
				holders  []*rwlock.Grant
				waiters  []*acquisition
				l        *rwlock.RWLock
			)
			for i, m := range tc.modes {
				c := connect(t, srv.ConnectString(), 0)
				sessions = append(sessions, sessionHex(c.conn.SessionID()))
				l = c.lock(t, p)
				acquire := l.RLock
				if m == 'w' {
					acquire = l.Lock
				}
				if i < tc.holders {
					g, err := acquire(ctx)
					require.NoError(t, err)
					holders = append(holders, g)
				} else {
					waiters = append(waiters, goAcquire(t, ctx, acquire))
				}
				waitQueue(t, l, i+1) // queue them one by one, in this order
			}
			q, err := l.Queue(ctx)
			require.NoError(t, err)
			require.Len(t, q, len(tc.modes))
			for i, e := range q {
				require.Equal(t, i < tc.holders, e.Held, "entry %d", i)
			}

			want := map[string][]string{}
			for i, targets := range tc.watched {
				for _, target := range targets {
					node := q[target].Node
					want[node] = append(want[node], sessions[tc.holders+i])
				}
			}
			for node := range want {
				slices.Sort(want[node])
			}
			owner := map[string]string{}
			for _, e := range q {
				owner[e.Node] = sessionHex(e.SessionID)
			}
			var got map[string][]string
			zktest.Poll(t, 20*time.Second, func() bool {
				// A node's own session may watch it too (to learn of its
				// deletion); the herd property is about the others.
				got = lockWatchers(t, srv, p)
				for node, ids := range got {
					if got[node] = slices.DeleteFunc(ids, func(id string) bool { return id == owner[node] }); len(got[node]) == 0 {
						delete(got, node)
					}
				}
				n := 0
				for _, ids := range got {
					n += len(ids)
				}
				return fmt.Sprint(got) == fmt.Sprint(want)
			}, func() string { return fmt.Sprintf("the waiters never all watched (last: %v)", got) })
			require.Equal(t, want, got, "who watches what")

			// The same, as properties.
			watches := map[string]int{}
			for node, ids := range got {
				writers := 0
				for _, id := range ids {
					watches[id]++
					if tc.modes[slices.Index(sessions, id)] == 'w' {
						writers++
					}
				}
				assert.LessOrEqual(t, writers, 1, "waiting writers watching %s", node)
			}
			for i, id := range sessions[tc.holders:] {
				assert.Equal(t, len(tc.watched[i]), watches[id], "nodes watched by waiter %s", id)
			}

			// Clean up the way clients do: waiters give up, holders release.
			cancel()
			for _, w := range waiters {
				_, err := w.wait(t)
				require.ErrorIs(t, err, context.Canceled)
			}
			for _, g := range holders {
				require.NoError(t, g.Release(testContext(t)))
			}
			require.Empty(t, lockNodes(t, connect(t, srv.ConnectString(), 0).conn, p))
		})
	}
}

// A cancelled or timed-out Lock/RLock returns promptly, with an error
// wrapping the context's, and its node is gone by the time it returns.
func TestCancelledAcquisitionLeavesNothing(t *testing.T) {
	srv := sharedServer(t)
	for _, tc := range []struct {
		name     string
		write    bool
		deadline bool
	}{
		{"Lock cancelled", true, false},
		{"RLock cancelled", false, false},
		{"Lock deadline", true, true},
		{"RLock deadline", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := zktest.LockPath(t, "/it")
			a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
			la, lb := a.lock(t, p), b.lock(t, p)
			w, err := la.Lock(testContext(t))
			require.NoError(t, err)
			acquire := lb.RLock
			if tc.write {
				acquire = lb.Lock
			}

			var (
				ctx    context.Context
				cancel context.CancelFunc
				want   error
			)
			if tc.deadline {
				ctx, cancel = context.WithTimeout(testContext(t), time.Second)
				want = context.DeadlineExceeded
			} else {
				ctx, cancel = context.WithCancel(testContext(t))
				want = context.Canceled
			}
			defer cancel()
			start := time.Now()
			waiter := goAcquire(t, ctx, acquire)
			if !tc.deadline {
				// Cancel mid-wait: once the waiter watches the holder's node.
				zktest.Poll(t, 20*time.Second, func() bool {
					return slices.Contains(lockWatchers(t, srv, p)[w.Node()], sessionHex(b.conn.SessionID()))
				}, func() string { return "the waiter never watched the holder" })
				start = time.Now()
				cancel()
			}
			g, err := waiter.wait(t)
			took := time.Since(start)
			require.Nil(t, g)
			require.ErrorIs(t, err, want)
			t.Logf("returned %v after the cancel or start: %v", took.Round(time.Millisecond), err)
			limit := 5 * time.Second
			if tc.deadline {
				limit += time.Second
			}
			require.Less(t, took, limit, "must return promptly")
			require.Equal(t, grantNodes(w), lockNodes(t, a.conn, p), "the cancelled call's node must be gone when it returns")
			require.NoError(t, w.Release(testContext(t)))
		})
	}
}

func TestTryLockLeavesNothing(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, b, c := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb, lc := a.lock(t, p), b.lock(t, p), c.lock(t, p)
	ctx := testContext(t)

	try := func(t *testing.T, acquire func(context.Context) (*rwlock.Grant, error), holders ...*rwlock.Grant) {
		t.Helper()
		g, err := acquire(ctx)
		require.ErrorIs(t, err, rwlock.ErrWouldBlock)
		require.Nil(t, g)
		require.Equal(t, grantNodes(holders...), lockNodes(t, a.conn, p), "TryLock must leave no node")
	}

	t.Run("behind a writer", func(t *testing.T) {
		w, err := la.Lock(ctx)
		require.NoError(t, err)
		try(t, lb.TryLock, w)
		try(t, lb.TryRLock, w)
		require.NoError(t, w.Release(ctx))
	})
	t.Run("behind readers", func(t *testing.T) {
		r, err := la.RLock(ctx)
		require.NoError(t, err)
		try(t, lb.TryLock, r)
		r2, err := lb.TryRLock(ctx)
		require.NoError(t, err, "readers share")
		require.NoError(t, r2.Release(ctx))

		// A waiting writer blocks TryRLock too.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		waiter := goAcquire(t, wctx, lc.Lock)
		q := waitQueue(t, la, 2)
		_, err = lb.TryRLock(ctx)
		require.ErrorIs(t, err, rwlock.ErrWouldBlock)
		require.ElementsMatch(t, []string{path.Base(q[0].Node), path.Base(q[1].Node)}, lockNodes(t, a.conn, p), "TryRLock must leave no node")
		cancel()
		_, err = waiter.wait(t)
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, r.Release(ctx))
	})
	require.Empty(t, lockNodes(t, a.conn, p))
}

// Children that are not lock nodes (an operator's note, another library's
// names) neither block nor show up in the queue, and are left alone.
func TestForeignChildrenIgnored(t *testing.T) {
	srv := sharedServer(t)
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	p := zktest.LockPath(t, "/it")
	createAll(t, a.conn, p)
	foreign := []string{"foo", "lock-0000000001", "read-abc", "x__lock__0000000001"}
	for _, name := range foreign {
		_, err := a.conn.Create(p+"/"+name, []byte("not a lock node"), zk.FlagPersistent, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	la, lb := a.lock(t, p), b.lock(t, p)
	ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
	defer cancel()

	q, err := la.Queue(ctx)
	require.NoError(t, err)
	require.Empty(t, q)

	w, err := la.TryLock(ctx)
	require.NoError(t, err, "foreign children must not block a writer")
	q, err = lb.Queue(ctx)
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, w.Node(), q[0].Node)
	require.NoError(t, w.Release(ctx))

	r1, err := la.RLock(ctx)
	require.NoError(t, err)
	r2, err := lb.RLock(ctx)
	require.NoError(t, err)
	waiter := goAcquire(t, ctx, lb.Lock)
	q = waitQueue(t, la, 3)
	require.Equal(t, []bool{true, true, false}, heldFlags(q))
	require.NoError(t, r1.Release(ctx))
	require.NoError(t, r2.Release(ctx))
	w, err = waiter.wait(t)
	require.NoError(t, err, "foreign children must not block a waiter for ever")
	require.NoError(t, w.Release(ctx))

	require.Equal(t, foreign, lockNodes(t, a.conn, p), "foreign children are left alone")
}

// createAll creates path and its missing parents as persistent nodes.
func createAll(t *testing.T, conn *zk.Conn, p string) {
	t.Helper()
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		_, err := conn.Create(p[:i], nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll))
		if !errors.Is(err, zk.ErrNodeExists) {
			require.NoError(t, err, "create %s", p[:i])
		}
	}
}

func TestQueue(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	var (
		clients []*client
		locks   []*rwlock.RWLock
	)
	owners := []string{"reader-a", "reader-b", "writer-c", "reader-d"}
	for _, owner := range owners {
		c := connect(t, srv.ConnectString(), 0)
		clients = append(clients, c)
		locks = append(locks, c.lock(t, p, rwlock.WithOwner(owner)))
	}
	r1, err := locks[0].RLock(ctx)
	require.NoError(t, err)
	r2, err := locks[1].RLock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	goAcquire(t, wctx, locks[2].Lock)
	waitQueue(t, locks[0], 3)
	goAcquire(t, wctx, locks[3].RLock)
	waitQueue(t, locks[0], 4)

	observer := connect(t, srv.ConnectString(), 0).lock(t, p)
	q, err := observer.Queue(ctx)
	require.NoError(t, err)
	require.Len(t, q, 4)
	children := lockNodes(t, clients[0].conn, p)
	wantModes := []rwlock.Mode{rwlock.Read, rwlock.Read, rwlock.Write, rwlock.Read}
	for i, e := range q {
		assert.Equal(t, wantModes[i], e.Mode, "entry %d", i)
		assert.Equal(t, i < 2, e.Held, "entry %d held", i)
		assert.Equal(t, owners[i], e.Owner, "entry %d", i)
		assert.Equal(t, clients[i].conn.SessionID(), e.SessionID, "entry %d", i)
		assert.Contains(t, children, path.Base(e.Node), "entry %d", i)
		assert.Equal(t, p, path.Dir(e.Node), "entry %d: full path", i)
		assert.WithinDuration(t, time.Now(), e.Created, time.Minute, "entry %d", i)
		if i > 0 {
			assert.Less(t, q[i-1].Seq, e.Seq, "queue order")
		}
	}
	assert.Equal(t, r1.Node(), q[0].Node)
	assert.Equal(t, r2.Node(), q[1].Node)
}

// ReadGroup and ReadBatch run all their functions concurrently under one
// node, and delete it in Wait.
func TestReadGroupOneNode(t *testing.T) {
	srv := sharedServer(t)
	a := connect(t, srv.ConnectString(), 0)
	p := zktest.LockPath(t, "/it")
	l := a.lock(t, p)
	const n = 32

	// check lists the directory from inside a function, and waits for all n
	// functions to be running at once: they must share one grant, not queue
	// one after another.
	check := func(ctx context.Context, seen *sync.Map, arrived *atomic.Int32) error {
		children, _, err := a.conn.Children(p)
		if err != nil {
			return err
		}
		if len(children) != 1 {
			return fmt.Errorf("%d nodes under the lock, want 1: %v", len(children), children)
		}
		seen.Store(children[0], true)
		arrived.Add(1)
		for arrived.Load() < n {
			select {
			case <-ctx.Done():
				return fmt.Errorf("only %d of %d functions ran at once: %w", arrived.Load(), n, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}

	t.Run("ReadBatch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
		defer cancel()
		var (
			seen    sync.Map
			arrived atomic.Int32
		)
		fns := make([]func(context.Context) error, n)
		for i := range fns {
			fns[i] = func(fctx context.Context) error { return check(fctx, &seen, &arrived) }
		}
		require.NoError(t, l.ReadBatch(ctx, fns...))
		require.Equal(t, int32(n), arrived.Load())
		require.Equal(t, 1, syncMapLen(&seen), "one node for the whole batch")
		require.Empty(t, lockNodes(t, a.conn, p), "released when ReadBatch returns")
	})

	t.Run("ReadGroup", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
		defer cancel()
		gr, gctx, err := l.ReadGroup(ctx)
		require.NoError(t, err)
		var (
			seen    sync.Map
			arrived atomic.Int32
		)
		for range n {
			gr.Go(func() error { return check(gctx, &seen, &arrived) })
		}
		zktest.Poll(t, 20*time.Second, func() bool { return arrived.Load() == n }, func() string { return fmt.Sprintf("only %d of %d functions ran", arrived.Load(), n) })
		require.Len(t, lockNodes(t, a.conn, p), 1, "held until Wait")
		require.NoError(t, gr.Wait())
		require.Equal(t, 1, syncMapLen(&seen), "one node for the whole group")
		require.Empty(t, lockNodes(t, a.conn, p), "released by Wait")
		require.ErrorIs(t, gctx.Err(), context.Canceled, "the group's context ends with Wait")
	})
}

func syncMapLen(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestRequestCosts counts the requests ZooKeeper receives, on a server of
// its own so that no other test's client is counted. Its client has the
// longest session the server allows, 60s: go-zookeeper pings every 20s,
// and the whole test is over long before the first ping.
func TestRequestCosts(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	const timeout = 60 * time.Second
	a := connect(t, srv.ConnectString(), timeout)
	connected := time.Now()
	_, _, granted, _ := a.session.Session()
	require.Equal(t, timeout, granted)
	var rec stats.Recorder
	l := a.lock(t, "/costs/lock", rwlock.WithObserver(&rec))
	ctx := testContext(t)
	warm, err := l.Lock(ctx) // creates /costs and /costs/lock
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	// cycle acquires with ctx and releases.
	cycle := func(ctx context.Context, acquire func(context.Context) (*rwlock.Grant, error)) func() {
		return func() {
			g, err := acquire(ctx)
			if assert.NoError(t, err) {
				assert.NoError(t, g.Release(ctx))
			}
		}
	}
	// costOf is requestCount, less the second listing of an acquisition
	// whose first listing overtook its create: go-zookeeper does not
	// promise the order of the two, and an acquisition that finds its own
	// node missing from a listing lists again, as it must (acquire.go).
	// Rare (the lock's events say: not granted in one round trip), but
	// seen under -race with the package's tests running in parallel.
	lessRelisted := func(n int64, st0 stats.Stats) int64 {
		st := rec.Stats().Sub(st0)
		if relisted := int64(st.Granted() - st.Read.OneRoundTrip - st.Write.OneRoundTrip); relisted > 0 {
			t.Logf("%d acquisition(s) listed again: the listing overtook the create", relisted)
			n -= relisted
		}
		return n
	}
	costOf := func(fn func()) int64 {
		st0 := rec.Stats()
		return lessRelisted(requestCount(t, srv, fn), st0)
	}
	assert.Equal(t, int64(3), costOf(cycle(ctx, l.Lock)), "Lock+Release: create, list, delete")
	assert.Equal(t, int64(3), costOf(cycle(ctx, l.RLock)), "RLock+Release: create, list, delete")
	assert.Equal(t, int64(3), costOf(cycle(ctx, l.TryLock)), "TryLock+Release: create, list, delete")

	// A TryLock that would block: create, list, delete. (Not TryRLock: to
	// learn whether the writer in its way was downgraded, it may read it.)
	b := connect(t, srv.ConnectString(), timeout)
	holder, err := b.lock(t, "/costs/lock").RLock(ctx)
	require.NoError(t, err)
	// The holder's new watches go out on goroutines of their own, after
	// the notifications: wait for them. A TryLock whose listing overtook its
	// create lists again (see costOf); its own count tells.
	st0 := rec.Stats()
	var own int64
	n := requestCountAwaiting(t, srv, func() int64 {
		own = int64(rec.Stats().Sub(st0).Requests)
		return own + 2
	}, func() {
		_, err := l.TryLock(ctx)
		assert.ErrorIs(t, err, rwlock.ErrWouldBlock)
	})
	if own == 4 {
		t.Logf("the TryLock listed again: the listing overtook the create")
		n, own = n-1, own-1
	}
	assert.Equal(t, int64(3), own, "TryLock that would block: create, list, delete")
	// The holder, whose watch on the directory fired, watches its own node
	// instead (once per grant). And it lists the directory for peers, one
	// interval after the listing it was granted on: once for both changes,
	// or twice if the TryLock took longer than the interval (fleet.go).
	peers := n - own - 1
	t.Logf("the holder listed %d time(s) for peers", peers)
	assert.True(t, peers == 1 || peers == 2, "TryLock that would block: create, list, delete; and the holder's "+
		"watch on its own node, and one listing for peers per interval: %d requests", n)
	require.NoError(t, holder.Release(ctx))

	fns := make([]func(context.Context) error, 32)
	var ran atomic.Int32
	for i := range fns {
		fns[i] = func(context.Context) error { ran.Add(1); return nil }
	}
	assert.Equal(t, int64(3), costOf(func() {
		assert.NoError(t, l.ReadBatch(ctx, fns...))
	}), "ReadBatch of 32: create, list, delete")
	assert.Equal(t, int32(32), ran.Load())

	// WithRead and WithWrite listen for revocations: the first one of the
	// session sets a watch on the directory's data, with one read that may
	// arrive after it returned; later ones find it set and pay nothing.
	noop := func(context.Context) error { return nil }
	st0 = rec.Stats()
	assert.Equal(t, int64(4), lessRelisted(requestCountAwaiting(t, srv, func() int64 { return 4 }, func() {
		assert.NoError(t, l.WithRead(ctx, noop))
	}), st0), "the first WithRead: create, list, delete, and the read that sets the revocation watch")
	assert.Equal(t, int64(3), costOf(func() { assert.NoError(t, l.WithRead(ctx, noop)) }),
		"WithRead: create, list, delete")
	assert.Equal(t, int64(3), costOf(func() { assert.NoError(t, l.WithWrite(ctx, noop)) }),
		"WithWrite: create, list, delete")

	// Nested grants cost nothing: no node, no request (see reentrancy_test.go).
	var nested int64
	require.NoError(t, l.WithWrite(ctx, func(ctx context.Context) error {
		nested = requestCount(t, srv, func() {
			cycle(ctx, l.Lock)()
			cycle(ctx, l.RLock)()
			cycle(ctx, l.TryRLock)()
		})
		return nil
	}))
	assert.Zero(t, nested, "Lock, RLock and TryRLock inside WithWrite")
	require.NoError(t, l.WithRead(ctx, func(ctx context.Context) error {
		nested = requestCount(t, srv, cycle(ctx, l.RLock))
		return nil
	}))
	assert.Zero(t, nested, "RLock inside WithRead")
	g, err := l.Lock(ctx)
	require.NoError(t, err)
	assert.Zero(t, requestCount(t, srv, cycle(rwlock.ContextWithGrant(ctx, g), l.RLock)), "RLock with ContextWithGrant")
	require.NoError(t, g.Release(ctx))

	require.Empty(t, lockNodes(t, a.conn, "/costs/lock"))
	require.Less(t, time.Since(connected), timeout/3, "a ping may have been counted; the counts above are not exact")
}

// The lock directory and its parents are created by the first acquisition,
// as container nodes: the server deletes them once they are empty. The
// client API cannot tell a container from a persistent node (both report
// EphemeralOwner 0), so the test runs a server that looks for empty
// containers every 100ms (ZooKeeper's default is every minute) and waits
// for it to reap them, next to a persistent node it must keep.
func TestLockDirsAreContainers(t *testing.T) {
	srv := zkserver.Start(t, zkserver.Config{
		JavaOpts: []string{"-Xms64m", "-Xmx256m", "-Dznode.container.checkIntervalMs=100"},
	})
	a := connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	dirs := []string{"/apps", "/apps/billing", "/apps/billing/schema"}

	l := a.lock(t, dirs[2])
	exists := func(p string) bool {
		ok, _, err := a.conn.Exists(p)
		require.NoError(t, err)
		return ok
	}
	require.False(t, exists(dirs[0]), "New makes no request")

	// A persistent node that once had a child, as the lock directory has:
	// the server must keep it, or the reaping below proves nothing.
	createAll(t, a.conn, "/apps-control/child")
	require.NoError(t, a.conn.Delete("/apps-control/child", -1))

	g, err := l.Lock(ctx)
	require.NoError(t, err)
	for _, d := range dirs {
		require.True(t, exists(d), "%s created on demand", d)
	}
	require.NoError(t, g.Release(ctx))
	zktest.Poll(t, 30*time.Second, func() bool { return !exists(dirs[0]) }, func() string {
		return "the server never reaped the empty lock directory and its parents: not containers"
	})
	require.True(t, exists("/apps-control"), "the server reaped a persistent node")

	// And the next acquisition creates them again.
	g, err = l.RLock(ctx)
	require.NoError(t, err)
	require.NoError(t, g.Release(ctx))
}

func TestInvalidPath(t *testing.T) {
	srv := sharedServer(t)
	// A closed connection: New must not need the server to say no.
	conn := connect(t, srv.ConnectString(), 0).conn
	conn.Close()
	for _, p := range []string{"", "locks", "/", "/locks/", "/locks//x", "/locks/./x", "/locks/../x",
		"/zookeeper", "/zookeeper/quota", "/locks/\x00x", "/locks/\x01x", "/locks/\u007fx"} {
		l, err := rwlock.New(conn, p)
		assert.ErrorIs(t, err, rwlock.ErrInvalidPath, "%q", p)
		assert.Nil(t, l, "%q", p)
	}
}

func TestClosedConn(t *testing.T) {
	srv := sharedServer(t)
	a := connect(t, srv.ConnectString(), 0)
	l := a.lock(t, zktest.LockPath(t, "/it"))
	a.conn.Close()
	ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
	defer cancel()
	closed := func(err error) bool {
		return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing)
	}
	for name, acquire := range map[string]func(context.Context) (*rwlock.Grant, error){
		"Lock": l.Lock, "RLock": l.RLock, "TryLock": l.TryLock, "TryRLock": l.TryRLock,
	} {
		g, err := acquire(ctx)
		assert.Nil(t, g, name)
		assert.True(t, closed(err), "%s: %v", name, err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, name)
	}
	_, err := l.Queue(ctx)
	assert.True(t, closed(err), "Queue: %v", err)
	err = l.ReadBatch(ctx, func(context.Context) error { return errors.New("must not run") })
	assert.True(t, closed(err), "ReadBatch: %v", err)
	err = l.WithWrite(ctx, func(context.Context) error { return errors.New("must not run") })
	assert.True(t, closed(err), "WithWrite: %v", err)
}

// Fencing tokens grow with every grant, whoever gets it.
func TestTokensIncrease(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	var locks []*rwlock.RWLock
	for range 3 {
		locks = append(locks, connect(t, srv.ConnectString(), 0).lock(t, p))
	}
	ctx := testContext(t)
	var last int64
	for i := range 12 {
		l := locks[i%3]
		acquire := l.Lock
		if i%2 == 1 {
			acquire = l.RLock
		}
		g, err := acquire(ctx)
		require.NoError(t, err)
		tok := g.Token()
		require.Greater(t, tok, last, "grant %d", i)
		last = tok
		require.NoError(t, g.Release(ctx))
	}
}

// An operator deletes a held grant's node: the holder hears of it.
func TestDeletedNodeLosesGrant(t *testing.T) {
	srv := sharedServer(t)
	for _, mode := range []rwlock.Mode{rwlock.Write, rwlock.Read} {
		t.Run(mode.String(), func(t *testing.T) {
			p := zktest.LockPath(t, "/it")
			holder, operator := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
			l := holder.lock(t, p)
			acquire := l.Lock
			if mode == rwlock.Read {
				acquire = l.RLock
			}
			g, err := acquire(testContext(t))
			require.NoError(t, err)
			done := g.Done()
			require.NoError(t, g.Err())

			require.NoError(t, operator.conn.Delete(g.Node(), -1))
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Done did not close after the node was deleted")
			}
			require.ErrorIs(t, g.Err(), rwlock.ErrLost)
			require.NoError(t, g.Release(testContext(t)), "releasing a lost grant")
			require.ErrorIs(t, g.Err(), rwlock.ErrLost, "Release keeps the loss")
			require.Empty(t, lockNodes(t, holder.conn, p))

			// The lock works on.
			g, err = l.TryLock(testContext(t))
			require.NoError(t, err)
			require.NoError(t, g.Release(testContext(t)))
		})
	}
}
