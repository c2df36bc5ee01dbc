package rwlock

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// caching returns a caching lock on c. Its kept node's tail ends once c
// is closed, which the test waits for.
func caching(t *testing.T, c *fakeConn, opts ...Option) *RWLock {
	t.Helper()
	l, err := newRWLock(c, dir, append(opts, WithCaching())...)
	require.NoError(t, err)
	t.Cleanup(l.background.Wait)
	t.Cleanup(l.cache.tails.Wait) // before the background: a tail may leave it a deletion
	t.Cleanup(c.close)
	return l
}

// releaseOnGrant waits for an acquisition, requires its grant, and releases
// it. It returns the grant, for its token.
func releaseOnGrant(t *testing.T, ctx context.Context, ch <-chan result) *Grant {
	t.Helper()
	res := <-ch
	require.NoError(t, res.err)
	require.NoError(t, res.g.Release(ctx))
	return res.g
}

// A hot loop of one process re-grants its kept node: the same node and
// token, and after the first re-grant's sync, no request while the answer
// is within δ.
func TestCachedRegrantSameNodeNoRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node, tok := g.Node(), g.Token()
		require.NoError(t, g.Release(ctx))
		assert.Equal(t, []string{node[len(dir)+1:]}, s.lockNodes(dir), "the node is kept")

		// The first re-grant has no answer sent after the listing, so it
		// syncs once.
		assert.Equal(t, int64(1), c.cost(func() {
			g, err = l.Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, g.Release(ctx))
		}))
		assert.Equal(t, node, g.Node())
		assert.Equal(t, tok, g.Token())
		assert.Equal(t, int64(0), c.cost(func() {
			for range 100 {
				g, err := l.Lock(ctx)
				require.NoError(t, err)
				require.Equal(t, node, g.Node())
				require.NoError(t, g.Err())
				require.NoError(t, g.Release(ctx))
				require.ErrorIs(t, g.Err(), ErrReleased)
			}
		}), "within δ of the sync, re-grants send nothing")

		// Past δ, the next re-grant syncs again; half way, one goes ahead.
		time.Sleep(2 * cacheDelta)
		assert.Equal(t, int64(1), c.cost(func() {
			g, err := l.Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, g.Release(ctx))
		}))
	})
}

// A remote writer queued behind an idle kept read node is heard of in one
// notification, and the node is deleted at once, with no listing, so the
// writer is granted.
func TestCachedIdleNodeGoesForAConflict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		require.Len(t, s.lockNodes(dir), 1)

		w, err := newLock(t, other).Lock(ctx) // granted once the kept node goes
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir))

		// The next read queues afresh.
		g2, err := l.RLock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, g.Node(), g2.Node())
		assert.Greater(t, g2.Token(), w.Token())
		require.NoError(t, g2.Release(ctx))
	})
}

// A busy kept node is never deleted under its holder. Its Contended closes
// when a remote writer queues, and it goes at its release.
func TestCachedBusyNodeGoesAtItsRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		g, err = l.Lock(ctx) // re-granted
		require.NoError(t, err)
		assert.False(t, isClosed(g.Contended()))

		w := start(ctx, newLock(t, other).Lock)
		synctest.Wait()
		assert.True(t, isClosed(g.Contended()), "told of the writer behind")
		require.NoError(t, g.Err(), "the holder is only told")
		assert.Len(t, s.lockNodes(dir), 2, "not deleted under its holder")
		require.NoError(t, g.Release(ctx))
		releaseOnGrant(t, ctx, w)
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Contended without caching: it closes when a conflicting request queues
// behind the grant, and costs nothing while nobody does.
func TestContendedWithoutCaching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(0), c.cost(func() {
			assert.False(t, isClosed(g.Contended()))
		}), "the listing's watch serves")
		r, err := newLock(t, other).RLock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		assert.False(t, isClosed(g.Contended()), "a reader behind a reader is no conflict")
		w := start(ctx, newLock(t, other).Lock)
		synctest.Wait()
		assert.True(t, isClosed(g.Contended()))
		require.NoError(t, r.Release(ctx))
		require.NoError(t, g.Release(ctx))
		releaseOnGrant(t, ctx, w)
	})
}

// After a reconnection the tail's watch may be one set again, whose events
// come after later answers. So the kept node is not re-granted on it.
func TestCachedNodeNotRegrantedAfterReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		c.disconnect()
		c.reconnect()
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, node, g.Node(), "queued afresh")
		require.NoError(t, g.Release(ctx))
		synctest.Wait()
		assert.Equal(t, []string{g.Node()[len(dir)+1:]}, s.lockNodes(dir), "the old node was deleted, the new one kept")
	})
}

// A kept node whose session expired is gone; the next acquisition queues
// afresh in the new session.
func TestCachedNodeGoneWithItsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		c.expire()
		synctest.Wait()
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, node, g.Node())
		require.NoError(t, g.Release(ctx))
	})
}

// A kept node of the other mode is deleted before the acquisition queues,
// since our own node would wait for it.
func TestCachedOtherModeDeletedFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{w.Node()[len(dir)+1:]}, s.lockNodes(dir))
		require.NoError(t, w.Release(ctx))
	})
}

// A writer's node behind an idle kept node, whose notification is held
// back: the re-grant's sync is answered after it, so the re-grant sees the
// watch fired and does not pass the writer. The writer is granted first.
func TestCachedRegrantNeverPassesAHeldNotification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		g, err = l.Lock(ctx) // a re-grant: its sync proves the tail's watch, for δ
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		time.Sleep(2 * cacheDelta) // no answer recent enough: the re-grant syncs

		c.silence() // the writer's notification, and the sync's answer, wait
		w := start(ctx, newLock(t, other).Lock)
		synctest.Wait()
		a := start(ctx, l.Lock)
		synctest.Wait()
		c.speak()
		synctest.Wait()
		require.Len(t, w, 1, "the writer is granted once the kept node goes, not passed")
		res := releaseOnGrant(t, ctx, w)
		mine := <-a
		require.NoError(t, mine.err)
		assert.NotEqual(t, node, mine.g.Node(), "not re-granted behind the writer")
		assert.Greater(t, mine.g.Token(), res.Token())
		require.NoError(t, mine.g.Release(ctx))
	})
}

// A writer queues behind an idle kept node while its process is
// disconnected. After the reconnection the notification comes only once
// the watches are set again, after the answers of requests queued first.
// So a re-grant does not rest on a watch from before the reconnection.
func TestCachedRegrantNeverPassesAWriterAfterAReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		c.lateReplay = true
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		g, err = l.Lock(ctx) // a re-grant: its sync is a proof for the tail's watch
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))

		c.disconnect()
		w := start(ctx, newLock(t, other).Lock)
		synctest.Wait()
		c.reconnect() // the writer's event is not replayed yet
		a := start(ctx, l.Lock)
		synctest.Wait()
		c.replay()
		synctest.Wait()
		require.Len(t, w, 1, "the writer is granted once the kept node goes, not passed")
		releaseOnGrant(t, ctx, w)
		mine := <-a
		require.NoError(t, mine.err)
		assert.NotEqual(t, node, mine.g.Node(), "not re-granted behind the writer")
		require.NoError(t, mine.g.Release(ctx))
	})
}

// A reconnection lands in a re-grant's proof, between its first read of the
// connection count and its read of the latest answer. A sync answered on the
// new connection, before the watches are set again, proves nothing of the
// old watch. So the re-grant does not pass a writer queued a second before.
func TestCachedRegrantNeverPassesAWriterWhenAReconnectionComesMidProof(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		c.lateReplay = true
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		time.Sleep(2 * cacheDelta) // the re-grant must send a sync

		paused, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		proveCounted = func() {
			once.Do(func() { close(paused); <-resume })
		}
		defer func() { proveCounted = func() {} }()
		a := start(ctx, l.Lock)
		<-paused
		c.disconnect()
		w := start(ctx, newLock(t, other).Lock)
		synctest.Wait()
		time.Sleep(time.Second) // the writer has queued for far more than δ
		c.reconnect()           // its event comes only once the watches are set again
		zc := zkclient.For(c)
		require.NoError(t, zc.Sync(ctx).Err) // as syncAhead's, or the lease's keepalive
		zc.Unref()
		close(resume)
		synctest.Wait()
		c.replay()
		synctest.Wait()
		select {
		case mine := <-a:
			require.NoError(t, mine.err)
			assert.NotEqual(t, node, mine.g.Node(), "re-granted the kept node behind a writer queued 1 s before")
			require.Len(t, w, 0, "the writer passed")
			require.NoError(t, mine.g.Release(ctx))
		case res := <-w:
			require.NoError(t, res.err)
			require.NoError(t, res.g.Release(ctx))
			mine := <-a
			require.NoError(t, mine.err)
			require.NoError(t, mine.g.Release(ctx))
		}
		synctest.Wait()
		if len(w) > 0 {
			res := <-w
			require.NoError(t, res.g.Release(ctx))
		}
	})
}

// An idle kept node is given up at any change of the directory: telling a
// conflict would cost a listing. A busy one is kept while readers queue
// behind it.
func TestCachedIdleNodeGivenUpAtAnyChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		g, err = l.RLock(ctx) // busy
		require.NoError(t, err)
		r, err := newLock(t, other).RLock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		require.False(t, isClosed(g.Contended()))
		require.NoError(t, g.Release(ctx))
		assert.Len(t, s.lockNodes(dir), 2, "kept: a reader behind a reader is no conflict")
		require.NoError(t, r.Release(ctx))
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir), "idle, and the directory changed")
	})
}

// Caching refuses a capacity: a node's name fixes its weight.
func TestCachingRefusesACapacity(t *testing.T) {
	_, err := newRWLock(newFakeServer().conn(), dir, WithCaching(), WithCapacity(2))
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// A kept node shows as cached in Queue, from its data.
func TestCachedNodeInQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		q, err := newLock(t, s.conn()).Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1)
		assert.True(t, q[0].Cached)
		assert.True(t, q[0].Held)
		other := s.conn()
		r, err := newLock(t, other).RLock(ctx) // the kept writer goes for it
		require.NoError(t, err)
		q, err = newLock(t, other).Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1)
		assert.False(t, q[0].Cached, "a plain lock's node")
		require.NoError(t, r.Release(ctx))
	})
}

// In a peer's dialect a kept node is a node of the queue like any other:
// to the peer it is held. A peer's writer queued behind it is a conflict:
// a busy node's Contended closes, and it goes at its release.
func TestCachedNodeAndAPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, peer := s.conn(), s.conn()
		l := caching(t, c, WithDialect(DialectCurator))
		ctx := t.Context()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		g, err = l.RLock(ctx) // re-granted, busy
		require.NoError(t, err)
		reader := peerNode(t, peer, "_c_"+uuid+"-__READ__", "")
		synctest.Wait()
		assert.False(t, isClosed(g.Contended()), "a peer's reader is no conflict")
		writer := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", "")
		synctest.Wait()
		assert.True(t, isClosed(g.Contended()), "a peer's writer is")
		q, err := l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 3)
		assert.True(t, q[0].Held && q[0].Cached)
		assert.False(t, q[2].Held, "the peer's writer waits for the kept node")
		require.NoError(t, g.Release(ctx))
		synctest.Wait()
		assert.Equal(t, []string{reader, writer}, s.lockNodes(dir), "the kept node went at its release")
	})
}

// keptNode reports whether the lock keeps a node, and whether it is idle.
func (ca *cache) keptNode() (kept, idle bool) {
	if ca == nil {
		return false, false
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if cn := ca.node; cn != nil {
		return true, cn.busy == nil && !cn.claimed
	}
	return false, false
}

// cachedAt reports whether path is the lock's kept node, and whether it is
// idle.
func (ca *cache) cachedAt(path string) (cached, idle bool) {
	if ca == nil {
		return false, false
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if cn := ca.node; cn != nil && cn.path == path {
		return true, cn.busy == nil && !cn.claimed
	}
	return false, false
}

// After a Downgrade, readers behind the node are no conflict for its
// Contended; a writer still is.
func TestContendedAfterADowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		contended := g.Contended()
		d, err := g.Downgrade(ctx)
		require.NoError(t, err)
		r, err := newLock(t, other).RLock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		assert.False(t, isClosed(contended), "a reader behind a downgraded node")
		assert.False(t, isClosed(d.Contended()))
		w := start(ctx, newLock(t, other).Lock)
		synctest.Wait()
		assert.True(t, isClosed(d.Contended()))
		require.NoError(t, r.Release(ctx))
		require.NoError(t, d.Release(ctx))
		releaseOnGrant(t, ctx, w)
	})
}

// A hold limit runs per grant: an idle kept node is not held, so it has
// none; a re-grant's limit counts from the re-grant, and a busy kept node
// goes at it.
func TestCachedHoldLimitPerGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c, WithMaxHold(time.Second))
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		time.Sleep(3 * time.Second) // idle past the limit: nobody holds it
		assert.Len(t, s.lockNodes(dir), 1, "kept")
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		require.Equal(t, node, g.Node(), "re-granted")
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, g.Err(), "the limit counts from the re-grant")
		<-g.Done()
		require.ErrorIs(t, g.Err(), ErrHoldLimit)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir), "gone at its limit")
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, node, g.Node(), "queued afresh")
		require.NoError(t, g.Release(ctx))
	})
}

// Observers hear of each re-grant as of any acquisition and grant: the
// first re-grant's sync is its one request, the others send none.
func TestCachedObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var rec recorder
		l := caching(t, s.conn(), WithObserver(&rec))
		ctx := t.Context()
		for range 3 {
			g, err := l.Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, g.Release(ctx))
		}
		acquires, grants := rec.events()
		require.Len(t, acquires, 3)
		require.Len(t, grants, 3)
		assert.Equal(t, 1, acquires[1].Requests, "the first re-grant syncs")
		assert.Equal(t, 0, acquires[2].Requests)
		for _, a := range acquires {
			assert.NoError(t, a.Err)
		}
	})
}

// A re-grant whose context ends while it proves its place returns the
// context's error, and the node stays kept.
func TestCachedRegrantCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		cctx, cancel := context.WithCancel(ctx)
		c.setBefore(func(op, _ string) error {
			if op == "sync" {
				cancel() // as the proof's sync goes
			}
			return nil
		})
		_, err = l.Lock(cctx)
		require.ErrorIs(t, err, context.Canceled)
		c.setBefore(nil)
		synctest.Wait()
		assert.Equal(t, []string{node[len(dir)+1:]}, s.lockNodes(dir), "still kept")
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		assert.Equal(t, node, g.Node())
		require.NoError(t, g.Release(ctx))
	})
}

// A revocation made while a kept node is idle names the node, which was
// first held before it. So it may reach the next grant on the node. That
// grant's release deletes the node, and the grants after it are not
// revoked: the revocation does not stay with the kept node.
func TestCachedRevocationReachesOneGrantAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx)) // kept, idle: nobody holds
		require.NoError(t, newLock(t, other).Revoke(ctx, "maintenance"))
		synctest.Wait()
		for i := range 3 {
			time.Sleep(time.Second)
			g, err = l.Lock(ctx)
			require.NoError(t, err)
			ch := g.Revoked()
			synctest.Wait()
			if isClosed(ch) && i > 0 {
				t.Errorf("grant %d (node %s) revoked by a revocation made while nobody held", i, g.Node())
			}
			require.NoError(t, g.Release(ctx))
		}
	})
}

// A revoked grant's node is not kept: its release deletes it, and the next
// acquisition queues afresh, on a number the revocation did not name.
func TestCachedRevokedNodeNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := caching(t, s.conn())
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		node := g.Node()
		g.h.revoke(Revocation{}) // as a revocation's notification does, with no names read
		require.NoError(t, g.Release(ctx))
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, node, g.Node(), "a revoked node was kept")
		require.NoError(t, g.Release(ctx))
	})
}

// A kept node that the latest revocation read on its connection names is
// given up by the next acquisition, which queues afresh and is not
// revoked. Here a reader of another RWLock on the connection listens, so
// the connection reads the revocation while the kept node is idle. (It
// queues first: an idle kept node goes at any change behind it.)
func TestCachedRegrantGivesUpANamedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		listener, err := newLock(t, c).RLock(ctx)
		require.NoError(t, err)
		heard := listener.Revoked()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx)) // kept, idle
		synctest.Wait()
		// Revoke's two writes in one, so that the connection's read after
		// the notification surely finds the names.
		zc := zkclient.For(other)
		defer zc.Unref()
		ol := newLock(t, other)
		nodes, dirID, err := ol.holders(ctx, zc)
		require.NoError(t, err)
		require.NoError(t, zc.Set(ctx, dir, lockname.Revocation{Reason: "maintenance", Nodes: nodes, Dir: dirID}.Data()).Err)
		synctest.Wait()
		require.True(t, isClosed(heard), "the listener was told")
		g, err = l.RLock(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, node, g.Node(), "re-granted a node the revocation names")
		ch := g.Revoked()
		synctest.Wait()
		assert.False(t, isClosed(ch), "a grant made after the revocation was revoked")
		require.NoError(t, g.Release(ctx))
		require.NoError(t, listener.Release(ctx))
	})
}

// A change behind a kept node while a re-grant proves its place is left to
// the tail's listing, which the proof waits for. A reader behind a read
// node is no conflict, so the re-grant takes the kept node: the watch's
// fire did not delete it under the proof.
func TestCachedNodeNotDeletedUnderAProvingRegrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c, other := s.conn(), s.conn()
		l := caching(t, c)
		ctx := t.Context()
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		node := g.Node()
		require.NoError(t, g.Release(ctx))
		g, err = l.RLock(ctx) // its sync proves the tail's watch for the next
		require.NoError(t, err)
		require.Equal(t, node, g.Node())
		require.NoError(t, g.Release(ctx))

		paused, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		proveCounted = func() {
			once.Do(func() { close(paused); <-resume })
		}
		defer func() { proveCounted = func() {} }()
		a := start(ctx, l.RLock)
		<-paused
		r, err := newLock(t, other).RLock(ctx) // fires the tail's watch
		require.NoError(t, err)
		synctest.Wait()
		close(resume)
		mine := <-a
		require.NoError(t, mine.err)
		assert.Equal(t, node, mine.g.Node(), "the kept node went under the re-grant proving it")
		require.NoError(t, mine.g.Release(ctx))
		require.NoError(t, r.Release(ctx))
	})
}

// Only a node the lock may keep is marked cached: a lone node of its own.
// LockAll's nodes and WithReadCoalescing's shared nodes are never kept.
func TestCachedMarkOnlyOnNodesItMayKeep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := caching(t, s.conn(), WithReadCoalescing())
		ctx := t.Context()
		queued := func() Entry {
			q, err := newLock(t, s.conn()).Queue(ctx)
			require.NoError(t, err)
			require.Len(t, q, 1)
			return q[0]
		}
		r, err := l.RLock(ctx) // a coalesced read: a shared node
		require.NoError(t, err)
		assert.False(t, queued().Cached, "a shared node")
		require.NoError(t, r.Release(ctx))
		synctest.Wait()
		gs, err := LockAll(ctx, Request{Lock: l, Mode: Write})
		require.NoError(t, err)
		assert.False(t, queued().Cached, "a node of LockAll")
		require.NoError(t, ReleaseAll(ctx, gs...))
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		assert.True(t, queued().Cached, "a lone node of its own")
		require.NoError(t, g.Release(ctx))
	})
}

// A tail stopped before it starts, as when the hold it watches for ended
// first, starts no goroutine: one would run until its watch fired.
func TestTailStoppedBeforeItStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := caching(t, c)
		zc := zkclient.For(c)
		defer zc.Unref()
		var running sync.WaitGroup
		tl := newTail(l, zc, dir+"/x-write-0000000000", zc.Conn().SessionID(), Write)
		tl.running = &running
		tl.stop()
		tl.start(nil, time.Time{}, 0, nil)
		assert.True(t, isClosed(tl.gone), "the tail ended")
		running.Wait()
	})
}
