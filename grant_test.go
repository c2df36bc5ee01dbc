package rwlock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ended reports whether g's Done channel is closed.
func ended(g *Grant) bool {
	select {
	case <-g.Done():
		return true
	default:
		return false
	}
}

func TestLostWhenNodeDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		g, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		done := g.Done()
		synctest.Wait()
		assert.False(t, ended(g))
		require.NoError(t, s.conn().Delete(g.Node(), -1))
		<-done
		assert.ErrorIs(t, g.Err(), ErrLost)
		assert.ErrorIs(t, g.Err(), errNodeDeleted)
		assert.NoError(t, g.Release(t.Context()))
		assert.ErrorIs(t, g.Err(), ErrLost, "Release does not hide the loss")
	})
}

func TestLostWhenSessionExpires(t *testing.T) {
	for _, mode := range []Mode{Read, Write} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				l := newLock(t, c)
				g, err := l.acquire(t.Context(), mode, true, false)
				require.NoError(t, err)
				require.NoError(t, g.Err())
				synctest.Wait()
				c.expire()
				<-g.Done()
				assert.ErrorIs(t, g.Err(), ErrLost)
				assert.ErrorIs(t, g.Err(), zk.ErrSessionExpired)
				require.NoError(t, g.Release(t.Context()))
			})
		})
	}
}

// go-zookeeper replaces an expired session silently; a monitor started
// after that compares session ids.
func TestLostWhenSessionReplacedBeforeWatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		g, err := newLock(t, c).Lock(t.Context())
		require.NoError(t, err)
		c.expire()
		<-g.Done()
		assert.ErrorIs(t, g.Err(), ErrLost)
	})
}

func TestDisconnectionWithUnknownTimeoutIsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		g.Done()
		synctest.Wait()
		start := time.Now()
		c.disconnect()
		<-g.Done()
		assert.LessOrEqual(t, time.Since(start), 2*pollInterval(0))
		assert.ErrorIs(t, g.Err(), ErrLost)
		assert.ErrorIs(t, g.Err(), errDisconnected)

		// The session lived on: the node is deleted once reconnected.
		time.Sleep(time.Second)
		assert.Len(t, s.lockNodes(dir), 1)
		c.reconnect()
		l.background.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestDisconnectionWithinGraceIsRiddenOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 9 * time.Second
		grace := lossGrace(timeout, pollInterval(timeout))
		require.Greater(t, grace, time.Second)
		s := newFakeServer()
		c := s.conn()
		g, err := newLock(t, c, WithSessionTimeout(timeout)).Lock(t.Context())
		require.NoError(t, err)
		g.Done()
		synctest.Wait()

		c.disconnect()
		time.Sleep(grace - time.Second)
		c.reconnect()
		time.Sleep(time.Minute)
		assert.NoError(t, g.Err(), "a short disconnection is ridden out")

		start := time.Now()
		c.disconnect()
		<-g.Done()
		lost := time.Since(start)
		assert.ErrorIs(t, g.Err(), errDisconnected)
		// The server can expire the session no earlier than T/3 after the
		// client notices (see lossGrace).
		assert.Less(t, lost, timeout/3)
		assert.GreaterOrEqual(t, lost, grace-pollInterval(timeout))
		c.reconnect()
	})
}

// A request can hang for most of a session timeout (go-zookeeper queues it
// while it reconnects); the monitor's polling must not wait for it.
func TestLossNoticedWhileWatchRequestHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 6 * time.Second
		s := newFakeServer()
		c := s.conn()
		g, err := newLock(t, c, WithSessionTimeout(timeout)).Lock(t.Context())
		require.NoError(t, err)
		hang := make(chan struct{})
		c.before = func(op, p string) error {
			if op == "get" && p == g.Node() {
				<-hang
				return zk.ErrConnectionClosed
			}
			return nil
		}
		g.Done()
		synctest.Wait() // the watch request hangs
		start := time.Now()
		c.disconnect()
		<-g.Done()
		assert.Less(t, time.Since(start), timeout/3)
		assert.ErrorIs(t, g.Err(), errDisconnected)
		close(hang)
		c.reconnect()
	})
}

func TestTokenIsLazyAndStable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		g1, err := l.Lock(t.Context())
		require.NoError(t, err)
		before := c.calls.Load()
		t1 := g1.Token()
		synctest.Wait()
		assert.Equal(t, int64(2), c.calls.Load()-before, "a read, and the watch it starts")
		assert.Equal(t, t1, g1.Token())
		assert.Equal(t, int64(2), c.calls.Load()-before, "then cached")
		require.NoError(t, g1.Release(t.Context()))
		assert.Equal(t, t1, g1.Token())

		g2, err := l.Lock(t.Context())
		require.NoError(t, err)
		assert.Greater(t, g2.Token(), t1, "tokens grow")
		g2.Done() // the monitor's watch reads the token too
		synctest.Wait()
		require.NoError(t, g2.Release(t.Context()))
	})
}

func TestNestedGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		wctx := ContextWithGrant(ctx, w)
		before := c.calls.Load()

		r, err := l.RLock(wctx)
		require.NoError(t, err, "read inside write")
		assert.Equal(t, w.Node(), r.Node())
		assert.Equal(t, Read, r.Mode())
		w2, err := l.Lock(ContextWithGrant(ctx, r))
		require.NoError(t, err, "write inside a read nested in a write: the node is a write node")
		assert.Equal(t, before, c.calls.Load(), "no request")
		require.NoError(t, w2.Release(ctx))
		require.NoError(t, r.Release(ctx))
		assert.NoError(t, w.Err(), "releasing nested grants leaves the outer one held")

		_, err = newLock(t, c).RLock(wctx)
		require.NoError(t, err, "another *RWLock, same path, same conn: still nested")
		_, err = newLock(t, s.conn()).TryRLock(wctx)
		assert.ErrorIs(t, err, ErrWouldBlock, "another connection is another client")
		r2, err := l.RLock(wctx)
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		assert.ErrorIs(t, r2.Err(), ErrReleased, "the outer grant's end ends its nested grants")
		_, err = l.RLock(wctx)
		assert.ErrorIs(t, err, ErrReleased)

		rd, err := l.RLock(ctx)
		require.NoError(t, err)
		_, err = l.Lock(ContextWithGrant(ctx, rd))
		assert.ErrorIs(t, err, ErrUpgrade)
		require.NoError(t, rd.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestNestedGrantsEndWithALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		w, err := l.Lock(t.Context())
		require.NoError(t, err)
		r, err := l.RLock(ContextWithGrant(t.Context(), w))
		require.NoError(t, err)
		done := r.Done()
		synctest.Wait()
		require.NoError(t, s.conn().Delete(w.Node(), -1))
		<-done
		assert.ErrorIs(t, r.Err(), ErrLost)
	})
}

// A reader queued behind our write grant joins on Downgrade; a writer
// queued behind it waits for both readers.
func TestDowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		token := w.Token()
		reader := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		writer := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		late := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()

		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		assert.Equal(t, Read, r.Mode())
		assert.Equal(t, w.Node(), r.Node())
		assert.Equal(t, token, r.Token())
		assert.ErrorIs(t, w.Err(), ErrReleased)
		require.NoError(t, w.Release(ctx), "a no-op after Downgrade")
		synctest.Wait()
		joined := granted(t, reader)
		pending(t, writer)
		pending(t, late) // behind the waiting writer

		q, err := l.Queue(ctx)
		require.NoError(t, err)
		assert.Equal(t, Read, q[0].Mode)
		assert.True(t, q[0].Held)

		require.NoError(t, r.Release(ctx))
		synctest.Wait()
		pending(t, writer)
		require.NoError(t, joined.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, writer).Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, late).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestDowngradeEdgeCases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		r, err := l.RLock(ctx)
		require.NoError(t, err)
		same, err := r.Downgrade(ctx)
		require.NoError(t, err)
		assert.Same(t, r, same)
		require.NoError(t, r.Release(ctx))

		w, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		_, err = w.Downgrade(ctx)
		assert.ErrorIs(t, err, ErrReleased)

		w, err = l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, s.conn().Delete(w.Node(), -1))
		_, err = w.Downgrade(ctx)
		assert.ErrorIs(t, err, ErrLost)
		assert.ErrorIs(t, w.Err(), ErrLost)
	})
}
