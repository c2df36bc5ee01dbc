package rwlock

import (
	"context"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// coalescing returns a coalescing lock on c, its directory made already
// (the first acquisition's extra requests out of the way).
func coalescing(t *testing.T, c *fakeConn, opts ...Option) *RWLock {
	t.Helper()
	l := newLock(t, c, append(opts, WithReadCoalescing())...)
	g, err := l.Lock(t.Context())
	require.NoError(t, err)
	require.NoError(t, g.Release(t.Context()))
	return l
}

// countCreates counts c's creates of lock nodes in dir.
func countCreates(c *fakeConn) *atomic.Int64 {
	var n atomic.Int64
	c.setBefore(func(op, p string) error {
		if op == "create" && strings.HasPrefix(p, dir+"/") {
			n.Add(1)
		}
		return nil
	})
	return &n
}

// A burst of readers that arrive as the node is made costs its create, its
// listing, one sync for all the joiners, and its deletion.
func TestCoalescedBurstOneNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		var rec recorder
		l := coalescing(t, c, WithObserver(&rec))
		var creates atomic.Int64
		listing := make(chan struct{})
		c.setBefore(func(op, p string) error {
			switch {
			case op == "create" && strings.HasPrefix(p, dir+"/"):
				creates.Add(1)
			case op == "children" && p == dir:
				<-listing // until every reader has arrived
			}
			return nil
		})
		before, first := c.calls.Load(), c.appliedCount()

		const n = 64
		var held sync.WaitGroup
		held.Add(n)
		eg, ctx := errgroup.WithContext(t.Context())
		nodes := make([]string, n)
		for i := range n {
			eg.Go(func() error {
				g, err := l.RLock(ctx)
				if err != nil {
					return err
				}
				nodes[i] = g.Node()
				held.Done()
				held.Wait() // all 64 at once
				return g.Release(ctx)
			})
		}
		synctest.Wait()
		close(listing)
		require.NoError(t, eg.Wait())
		assert.Equal(t, int64(1), creates.Load(), "one node")
		assert.Equal(t, int64(4+c.overtaken(first)), c.calls.Load()-before, "create, list, sync, delete")
		for _, node := range nodes {
			assert.Equal(t, nodes[0], node)
		}
		assert.Empty(t, s.lockNodes(dir))

		acquires, grants := rec.events()
		assert.Len(t, acquires[1:], n, "one event per caller") // [0]: the Lock
		assert.Len(t, grants[1:], 1, "one grant per node")
		var requests int
		for _, e := range acquires[1:] {
			assert.Equal(t, "granted", e.Outcome)
			requests += e.Requests
		}
		assert.Equal(t, 3+c.overtaken(first), requests, "the node's create and listing, and the joiners' sync, once")
	})
}

// Without the option nothing changes: one node per RLock.
func TestWithoutCoalescingOneNodeEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		g1, err := l.RLock(t.Context())
		require.NoError(t, err)
		g2, err := l.RLock(t.Context())
		require.NoError(t, err)
		assert.NotEqual(t, g1.Node(), g2.Node())
		require.NoError(t, g1.Release(t.Context()))
		require.NoError(t, g2.Release(t.Context()))
	})
}

// A reader joins a held node only while nothing queued behind it: once a
// remote writer queues, the next local reader makes a node of its own,
// behind the writer, and the writer goes first.
func TestCoalescedNeverJoinsBehindAWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := coalescing(t, s.conn())
		r1, err := l.RLock(ctx)
		require.NoError(t, err)
		r2, err := l.RLock(ctx)
		require.NoError(t, err)
		assert.Equal(t, r1.Node(), r2.Node(), "joined the held node")

		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		pending(t, w)
		r3 := start(ctx, l.RLock)
		synctest.Wait()
		pending(t, r3)
		assert.Len(t, s.lockNodes(dir), 3, "shared node, writer, a new node behind the writer")

		require.NoError(t, r1.Release(ctx))
		synctest.Wait()
		pending(t, w)
		require.NoError(t, r2.Release(ctx))
		synctest.Wait()
		wg := granted(t, w)
		pending(t, r3)
		require.NoError(t, wg.Release(ctx))
		synctest.Wait()
		g3 := granted(t, r3)
		assert.NotEqual(t, r1.Node(), g3.Node())
		require.NoError(t, g3.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A waiting node takes joiners until something queues behind it.
func TestCoalescedJoinsAWaitingNodeUntilAWriterQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := coalescing(t, s.conn())
		w0, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		r1 := start(ctx, l.RLock)
		synctest.Wait()
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		assert.Len(t, s.lockNodes(dir), 2, "the second reader joined the waiting node")
		w1 := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		r3 := start(ctx, l.RLock)
		synctest.Wait()
		assert.Len(t, s.lockNodes(dir), 4, "a new node behind the writer")

		require.NoError(t, w0.Release(ctx))
		synctest.Wait()
		g1, g2 := granted(t, r1), granted(t, r2)
		assert.Equal(t, g1.Node(), g2.Node())
		pending(t, w1)
		pending(t, r3)
		require.NoError(t, g1.Release(ctx))
		require.NoError(t, g2.Release(ctx))
		synctest.Wait()
		gw := granted(t, w1)
		pending(t, r3)
		require.NoError(t, gw.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, r3).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A waiting reader whose context ends leaves; the others still get the
// node; the last to leave before the grant takes the node with it.
func TestCoalescedCancelLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := coalescing(t, s.conn())
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)

		ctxs := make([]context.Context, 3)
		cancels := make([]context.CancelFunc, 3)
		rs := make([]<-chan result, 3)
		for i := range rs {
			ctxs[i], cancels[i] = context.WithCancel(ctx)
			rs[i] = start(ctxs[i], l.RLock)
			synctest.Wait()
		}
		require.Len(t, s.lockNodes(dir), 2)
		cancels[0]() // the one that made the node
		cancels[2]()
		synctest.Wait()
		assert.ErrorIs(t, (<-rs[0]).err, context.Canceled)
		assert.ErrorIs(t, (<-rs[2]).err, context.Canceled)
		require.Len(t, s.lockNodes(dir), 2, "one reader still waits on the node")
		pending(t, rs[1])

		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		g := granted(t, rs[1])
		require.NoError(t, g.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
		cancels[1]()

		// Now all of them leave before the grant.
		w, err = newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		for i := range rs {
			ctxs[i], cancels[i] = context.WithCancel(ctx)
			rs[i] = start(ctxs[i], l.RLock)
			synctest.Wait()
		}
		require.Len(t, s.lockNodes(dir), 2)
		for i := range rs {
			cancels[i]()
			assert.ErrorIs(t, (<-rs[i]).err, context.Canceled)
		}
		assert.Equal(t, []string{w.Node()[len(dir)+1:]}, s.lockNodes(dir), "the last to leave took the node")
		assert.Empty(t, l.coalesce.live)
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		g, err = l.RLock(ctx) // and the next reader makes a new one
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// The loss of the shared node is every reader's: each Done closes, each
// WithRead's context is cancelled, and the lost node takes no joiner.
func TestCoalescedLossReachesEveryReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := coalescing(t, s.conn())
		var gs []*Grant
		for range 3 {
			g, err := l.RLock(ctx)
			require.NoError(t, err)
			gs = append(gs, g)
		}
		inside := make(chan struct{})
		withRead := make(chan error, 1)
		go func() {
			withRead <- l.WithRead(ctx, func(fctx context.Context) error {
				close(inside)
				<-fctx.Done()
				return context.Cause(fctx)
			})
		}()
		<-inside
		nested, err := gs[0].h.l.RLock(ContextWithGrant(ctx, gs[0]))
		require.NoError(t, err)
		require.Len(t, s.lockNodes(dir), 1)
		synctest.Wait()

		require.NoError(t, s.conn().Delete(gs[0].Node(), -1))
		synctest.Wait()
		for _, g := range append(gs, nested) {
			assert.True(t, doneClosed(g))
			assert.ErrorIs(t, g.Err(), ErrLost)
		}
		assert.ErrorIs(t, <-withRead, ErrLost)

		g, err := l.RLock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, gs[0].Node(), g.Node(), "a lost node takes no joiner")
		require.NoError(t, g.Release(ctx))
		for _, g := range gs {
			require.NoError(t, g.Release(ctx))
		}
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Each reader's Release is its own and idempotent; the node goes with the
// last one.
func TestCoalescedReleaseIsEachReadersOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := coalescing(t, s.conn())
		var gs []*Grant
		for range 3 {
			g, err := l.RLock(ctx)
			require.NoError(t, err)
			gs = append(gs, g)
		}
		inner, err := l.RLock(ContextWithGrant(ctx, gs[2]))
		require.NoError(t, err)
		q, err := l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1, "the node once")
		assert.Equal(t, 3, q[0].Readers, "a nested grant is no reader of its own")
		require.NoError(t, inner.Release(ctx))
		assert.NoError(t, gs[2].Err(), "a nested grant's release leaves its reader's")
		q, err = newLock(t, s.conn()).Queue(ctx)
		require.NoError(t, err)
		assert.Zero(t, q[0].Readers, "another process's view")

		for i, g := range gs {
			require.NoError(t, g.Release(ctx))
			require.NoError(t, g.Release(ctx))
			assert.ErrorIs(t, g.Err(), ErrReleased)
			if i < len(gs)-1 {
				assert.Len(t, s.lockNodes(dir), 1, "held by the others")
				assert.NoError(t, gs[i+1].Err())
				q, err := l.Queue(ctx)
				require.NoError(t, err)
				assert.Equal(t, len(gs)-1-i, q[0].Readers)
			}
		}
		assert.Empty(t, l.coalesce.live)
		assert.Empty(t, s.lockNodes(dir))
	})
}

// ReadGroup and ReadBatch share the node too.
func TestCoalescedReadBatchShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := coalescing(t, s.conn())
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		err = l.ReadBatch(ctx, func(bctx context.Context) error {
			assert.Len(t, s.lockNodes(dir), 1)
			return nil
		})
		require.NoError(t, err)
		assert.NoError(t, g.Err())
		require.NoError(t, g.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A reader that arrives while the node's first listing is under way waits
// for it: a node listed behind ours (a writer that queued meanwhile) sends
// it to a node of its own.
func TestCoalescedJoinerWaitsForTheListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		gate := make(chan struct{})
		var once sync.Once
		c.setBefore(func(op, p string) error {
			if op == "children" && p == dir {
				once.Do(func() { <-gate })
			}
			return nil
		})
		r1 := start(ctx, l.RLock)
		synctest.Wait()
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		require.Len(t, s.lockNodes(dir), 1)
		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		close(gate)
		synctest.Wait()
		g1 := granted(t, r1)
		pending(t, w)
		pending(t, r2)
		assert.Len(t, s.lockNodes(dir), 3, "the reader made a node behind the writer")
		require.NoError(t, g1.Release(ctx))
		synctest.Wait()
		gw := granted(t, w)
		pending(t, r2)
		require.NoError(t, gw.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, r2).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// After a reconnection a node takes no joiner: the server tells of the
// changes missed meanwhile only once go-zookeeper has set its watches
// again, which answers may overtake.
func TestCoalescedNoJoinAfterReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		r1 := start(ctx, l.RLock)
		synctest.Wait()
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		require.Len(t, s.lockNodes(dir), 2, "joined while the connection lasts")
		q, err := l.Queue(ctx)
		require.NoError(t, err)
		assert.Equal(t, []int{0, 2}, []int{q[0].Readers, q[1].Readers}, "two readers wait on the node")
		c.disconnect()
		c.reconnect()
		r3 := start(ctx, l.RLock)
		synctest.Wait()
		assert.Len(t, s.lockNodes(dir), 3, "a node of its own after the reconnection")
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		for _, r := range []<-chan result{r1, r2, r3} {
			require.NoError(t, granted(t, r).Release(ctx))
		}
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A reader that arrives while what the server sends this process is held
// back (a silent cut) waits for its sync: a writer that queued behind the
// held node before the reader arrived, unheard of here, goes first, and
// the reader makes a node of its own behind it once the answers come.
func TestCoalescedJoinerWaitsForItsSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		r1, err := l.RLock(ctx)
		require.NoError(t, err)

		c.silence()
		t.Cleanup(c.speak)
		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		pending(t, w)
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		pending(t, r2)
		assert.Len(t, s.lockNodes(dir), 2, "no node of its own yet: it waits for its sync")

		c.speak()
		synctest.Wait()
		pending(t, r2)
		assert.Len(t, s.lockNodes(dir), 3, "the writer's event came before the sync's answer: a node behind the writer")
		require.NoError(t, r1.Release(ctx))
		synctest.Wait()
		gw := granted(t, w)
		pending(t, r2)
		require.NoError(t, gw.Release(ctx))
		synctest.Wait()
		g2 := granted(t, r2)
		assert.NotEqual(t, r1.Node(), g2.Node())
		require.NoError(t, g2.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A reader waiting for its sync gets the node's loss when the node's
// lease runs out first: a silent cut holds the sync's answer, and the
// lease's keepalives', back. (The lock's session timeout is well under the
// one the server granted, so that the lease ends before go-zookeeper would
// give the connection up, 2/3 of the granted one after its last packet.)
func TestCoalescedJoinerGetsTheLossWhileItsSyncWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 4 * time.Second
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		c.setGranted(3 * timeout)
		l := coalescing(t, c, WithSessionTimeout(timeout))
		r1, err := l.RLock(ctx)
		require.NoError(t, err)

		c.silence()
		t.Cleanup(c.speak)
		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		r2 := start(ctx, l.RLock)
		time.Sleep(timeout / 2)
		synctest.Wait()
		pending(t, r2)
		pending(t, w)
		require.NoError(t, r1.Err(), "half the session timeout: still held")

		time.Sleep(timeout / 2)
		synctest.Wait()
		require.ErrorIs(t, r1.Err(), ErrLost)
		select {
		case r := <-r2:
			require.ErrorIs(t, r.err, ErrLost, "the joiner gets the node's loss")
		default:
			t.Fatal("the joiner still waits after the node's loss")
		}

		c.speak()
		require.NoError(t, r1.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Joiners that arrive while a sync is under way wait for the next one,
// sent when its answer is in: one sync for all of them.
func TestCoalescedJoinersShareTheNextSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		r1, err := l.RLock(ctx)
		require.NoError(t, err)
		var syncs atomic.Int32
		gate := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "sync" && syncs.Add(1) == 1 {
				<-gate
			}
			return nil
		})
		first := start(ctx, l.RLock)
		synctest.Wait()
		var later []<-chan result
		for range 8 {
			later = append(later, start(ctx, l.RLock))
		}
		synctest.Wait()
		assert.Equal(t, int32(1), syncs.Load(), "the later joiners wait for the first sync's answer")
		close(gate)
		synctest.Wait()
		assert.Equal(t, int32(2), syncs.Load(), "one more sync for all of them")
		for _, r := range append(later, first) {
			g := granted(t, r)
			assert.Equal(t, r1.Node(), g.Node())
			require.NoError(t, g.Release(ctx))
		}
		require.NoError(t, r1.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A sync serves only the joiners that arrived before it was sent. Here the
// first joiner's sync reaches the server; then a writer queues behind the
// held node and a second joiner arrives, before that sync's answer is
// read, and the writer's notification waits (a silent cut). The first
// sync's answer says nothing of the writer: the second joiner must not
// join on it. Its own sync is answered after the writer's notification,
// and it makes a node of its own, behind the writer.
func TestCoalescedJoinerWaitsForASyncSentAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		r1, err := l.RLock(ctx)
		require.NoError(t, err)
		var syncs atomic.Int32
		answer := make(chan struct{})
		c.setAfter(func(op, _ string, err error) error {
			if op == "sync" && syncs.Add(1) == 1 {
				<-answer // the server has run it; its answer is on the way
			}
			return err
		})
		j1 := start(ctx, l.RLock)
		synctest.Wait()
		require.Equal(t, int32(1), syncs.Load(), "the first joiner's sync has reached the server")

		c.silence()
		t.Cleanup(c.speak)
		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		pending(t, w)
		j2 := start(ctx, l.RLock)
		synctest.Wait()
		close(answer)
		synctest.Wait()
		g1 := granted(t, j1)
		assert.Equal(t, r1.Node(), g1.Node(), "the first joiner arrived before the writer: it joins")
		pending(t, j2)
		assert.Len(t, s.lockNodes(dir), 2, "the second joiner waits for a sync of its own")

		c.speak()
		synctest.Wait()
		pending(t, j2)
		assert.Len(t, s.lockNodes(dir), 3, "the second joiner's sync was answered after the writer's notification: a node behind the writer")
		require.NoError(t, r1.Release(ctx))
		require.NoError(t, g1.Release(ctx))
		synctest.Wait()
		gw := granted(t, w)
		pending(t, j2)
		require.NoError(t, gw.Release(ctx))
		synctest.Wait()
		g2 := granted(t, j2)
		assert.NotEqual(t, r1.Node(), g2.Node())
		require.NoError(t, g2.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// coalescingConnect is coalescing on c as a connection zk.Connect made
// (asConnect): the lock counts none of its connections.
func coalescingConnect(t *testing.T, c *fakeConn) *RWLock {
	t.Helper()
	l, err := newRWLock(c.asConnect(), dir, WithReadCoalescing())
	require.NoError(t, err)
	t.Cleanup(l.background.Wait)
	t.Cleanup(c.close)
	g, err := l.Lock(t.Context())
	require.NoError(t, err)
	require.NoError(t, g.Release(t.Context()))
	return l
}

// On a connection that counts none of its connections (zk.Connect's),
// readers join while it is up, and a node takes no joiner while it is
// down: the sync would wait in go-zookeeper's queue, go out on the next
// connection ahead of the watches set again, and be answered before the
// events missed meanwhile. The reader makes a node of its own, which
// queues behind a writer that came during the outage.
func TestCoalescedConnectConnectionNoJoinWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		c.lateReplay, c.queueWhileDown = true, true
		l := coalescingConnect(t, c)
		w0, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		r1 := start(ctx, l.RLock)
		synctest.Wait()
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		require.Len(t, s.lockNodes(dir), 2, "joined while the connection is up")

		c.disconnect()
		w1 := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		pending(t, w1)
		r3 := start(ctx, l.RLock)
		synctest.Wait()
		c.reconnect() // what waited goes first
		synctest.Wait()
		c.replay() // then the events missed meanwhile
		synctest.Wait()
		assert.Len(t, s.lockNodes(dir), 4, "the first writer, the shared node, the second writer, and the third reader's own node")

		require.NoError(t, w0.Release(ctx))
		synctest.Wait()
		g1, g2 := granted(t, r1), granted(t, r2)
		assert.Equal(t, g1.Node(), g2.Node())
		pending(t, w1)
		pending(t, r3)
		require.NoError(t, g1.Release(ctx))
		require.NoError(t, g2.Release(ctx))
		synctest.Wait()
		gw := granted(t, w1)
		pending(t, r3)
		require.NoError(t, gw.Release(ctx))
		synctest.Wait()
		g3 := granted(t, r3)
		assert.NotEqual(t, g1.Node(), g3.Node())
		require.NoError(t, g3.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A sync answered in a session other than the node's proves nothing of
// the node's watch: the joiner makes a node of its own. (go-zookeeper ends
// every watch before it opens a new session, so a fired watch would say as
// much; here the fake moves the session under the sync without a word, to
// test the rule on its own.)
func TestCoalescedJoinerSyncInAnotherSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		w, err := newLock(t, s.conn()).Lock(ctx) // the shared node waits: no lease judges it meanwhile
		require.NoError(t, err)
		r1 := start(ctx, l.RLock)
		synctest.Wait()

		session := c.SessionID()
		restored := make(chan struct{})
		c.setBefore(func(op, _ string) error {
			switch op {
			case "sync":
				c.session.Store(session + 100) // the answer comes in a session not known to be the node's
			case "create":
				<-restored
			}
			return nil
		})
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		c.session.Store(session)
		close(restored)
		c.setBefore(nil)
		synctest.Wait()
		assert.Len(t, s.lockNodes(dir), 3, "the writer, the shared node, and the joiner's own node")

		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		g1, g2 := granted(t, r1), granted(t, r2)
		assert.NotEqual(t, g1.Node(), g2.Node())
		require.NoError(t, g1.Release(ctx))
		require.NoError(t, g2.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A joiner whose sync is still out when the node is granted has a grant in
// its seat: Queue counts it once.
func TestCoalescedReadersCountedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := coalescing(t, c)
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		r1 := start(ctx, l.RLock)
		synctest.Wait()
		hold := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "sync" {
				<-hold
			}
			return nil
		})
		r2 := start(ctx, l.RLock)
		synctest.Wait()
		pending(t, r2)
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		g1 := granted(t, r1)
		pending(t, r2)
		q, err := l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1)
		assert.Equal(t, 2, q[0].Readers, "r1 holds, r2 waits for its sync")
		close(hold)
		synctest.Wait()
		g2 := granted(t, r2)
		require.NoError(t, g1.Release(ctx))
		require.NoError(t, g2.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// ReleaseAll marks a coalesced node releasing as it checks that its grant
// is the node's last, before it waits for another grant's release. A reader
// that comes meanwhile makes a node of its own: it never joins a node that
// ReleaseAll then deletes. (A mutex cannot be waited for in a bubble: this
// test runs in real time, and waits for conditions, not for time.)
func TestReleaseAllClaimsACoalescedNodeFirst(t *testing.T) {
	s := newFakeServer()
	ctx := t.Context()
	c := s.conn()
	l := coalescing(t, c)
	lx, err := newRWLock(c, dir2)
	require.NoError(t, err)
	ly, err := newRWLock(c, "/locks/z")
	require.NoError(t, err)
	t.Cleanup(lx.background.Wait)
	t.Cleanup(ly.background.Wait)
	a, err := l.RLock(ctx) // the coalesced node, one reader
	require.NoError(t, err)
	x, err := lx.Lock(ctx)
	require.NoError(t, err)
	y, err := ly.Lock(ctx)
	require.NoError(t, err)

	// x's Release holds x's ops while its delete is held back.
	sent, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.setBefore(func(op, p string) error {
		if op == "delete" && strings.HasPrefix(p, dir2+"/") {
			once.Do(func() { close(sent) })
			<-release
		}
		return nil
	})
	xdone := make(chan error, 1)
	go func() { xdone <- x.Release(ctx) }()
	<-sent
	all := make(chan error, 1)
	go func() { all <- ReleaseAll(ctx, a, x, y) }() // checks a, then waits for x's ops
	require.Eventually(t, a.h.isReleasing, 10*time.Second, time.Millisecond,
		"ReleaseAll marks a's node releasing before it waits for x's release")

	g2, err := l.RLock(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, a.Node(), g2.Node(), "a reader joined a node that ReleaseAll is about to delete")
	close(release)
	require.NoError(t, <-xdone)
	require.NoError(t, <-all)
	assert.NoError(t, g2.Err())
	assert.Equal(t, []string{path.Base(g2.Node())}, s.lockNodes(dir))
	require.NoError(t, g2.Release(ctx))
}
