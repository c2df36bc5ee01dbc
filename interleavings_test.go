package rwlock

// Interleavings of release, downgrade, expiry and cancellation that each
// broke a promise until they were fixed.

import (
	"context"
	"path"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `defer g.Release(ctx)` with a request context that has ended must still
// delete the node.
func TestReleaseWithEndedContextStillDeletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		assert.ErrorIs(t, g.Release(ctx), context.Canceled)
		l.background.Wait()
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestTryRLockJoinsDowngradedGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		g, err := newLock(t, s.conn()).TryRLock(ctx)
		require.NoError(t, err)
		_, err = newLock(t, s.conn()).TryLock(ctx)
		assert.ErrorIs(t, err, ErrWouldBlock)
		require.NoError(t, g.Release(ctx))
		require.NoError(t, r.Release(ctx))
	})
}

// A downgrade whose mark may have been stored must not leave a writer that
// believes it still writes alone.
func TestDowngradeOfUnknownOutcomeLosesTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c, WithCleanupTimeout(time.Second))
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		reader := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		c.setAfter(func(op, p string, err error) error {
			if op == "set" {
				return zk.ErrConnectionClosed // applied, answer lost
			}
			return err
		})
		_, err = w.Downgrade(ctx)
		assert.ErrorIs(t, err, ErrLost)
		assert.ErrorIs(t, w.Err(), ErrLost)
		l.background.Wait()
		synctest.Wait()
		require.NoError(t, granted(t, reader).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestFirstErrSeesReplacedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		g, err := newLock(t, c).Lock(t.Context())
		require.NoError(t, err)
		c.expire()
		other, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		assert.ErrorIs(t, g.Err(), ErrLost, "the first Err already knows")
		require.NoError(t, other.Release(t.Context()))
	})
}

// go-zookeeper sends a request queued across an expiry in the new session:
// the node then belongs to the new one, and must not be left behind.
func TestCreateQueuedAcrossExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		_, err := c.Create(path.Dir(dir), nil, 0, nil)
		require.NoError(t, err)
		_, err = c.Create(dir, nil, 0, nil)
		require.NoError(t, err)
		expired := false
		c.setBefore(func(op, p string) error {
			if op == "create" && !expired {
				expired = true
				c.expire()
			}
			return nil
		})
		require.NoError(t, l.WithWrite(t.Context(), func(ctx context.Context) error {
			assert.Len(t, s.lockNodes(dir), 1)
			return nil
		}))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A watch request queued across an expiry runs in the new session; the
// waiter must not take the wake that follows as a grant.
func TestNoGrantForAReplacedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		h, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		b := s.conn()
		gate := make(chan struct{})
		fired := false
		b.setBefore(func(op, p string) error {
			if op == "get" && p == h.Node() && !fired {
				fired = true
				<-gate // w2's look at h waits in the queue while w3 queues behind w2
				b.expire()
			}
			return nil
		})
		w2 := start(ctx, newLock(t, b).Lock)
		synctest.Wait()
		w3 := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		close(gate)
		synctest.Wait()
		r, err := h.Downgrade(ctx) // a data change: fires the watch w2's look set in the new session
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, r.Release(ctx))
		synctest.Wait()
		g3 := granted(t, w3)
		pending(t, w2) // queued again, behind w3
		require.NoError(t, g3.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w2).Release(ctx))
	})
}

func TestReleaseWaitsForDowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		w, err := newLock(t, c).Lock(ctx)
		require.NoError(t, err)
		block := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "set" {
				<-block
				return zk.ErrNoAuth // refused: the write grant stays as it was
			}
			return nil
		})
		downgraded := make(chan error, 1)
		go func() { _, err := w.Downgrade(ctx); downgraded <- err }()
		synctest.Wait()
		released := make(chan error, 1)
		go func() { released <- w.Release(ctx) }() // waits for the Downgrade (sync.Mutex: no synctest.Wait here)
		close(block)
		assert.ErrorIs(t, <-downgraded, zk.ErrNoAuth)
		assert.NoError(t, <-released)
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestWithWriteReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		assert.Panics(t, func() {
			l.WithWrite(t.Context(), func(context.Context) error { panic("boom") })
		})
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A waiter is disconnected; meanwhile its own node is deleted, then the
// node in its way. At the reconnection, in the same session, go-zookeeper
// sets its watches again from a map, and the server fires the missed events
// in that order: here the blocker's first. The waiter must not take that
// wake for its turn: its connection has had a new session since it set its
// own watch (see confirmOwn), so it reads its node, and finds it gone.
func TestReplayedEventsOutOfOrderGrantNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		b, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		c := s.conn()
		waiter := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		nodes := s.lockNodes(dir)
		require.Len(t, nodes, 2)
		own := dir + "/" + otherThan(nodes, b.Node())

		c.disconnect()
		require.NoError(t, s.conn().Delete(own, -1)) // an operator's delete
		require.NoError(t, b.Release(ctx))
		var late []heldEvent
		c.replayOrder = func(held []heldEvent) {
			// The blocker's event first; our own node's in a later frame,
			// which the waiter does not see before it acts on the first.
			kept := held[:0]
			for _, h := range held {
				if h.ev.Path == own {
					late = append(late, h)
				} else {
					kept = append(kept, h)
				}
			}
			c.held = kept
		}
		c.reconnect()
		synctest.Wait()
		require.NotEmpty(t, late)
		for _, h := range late {
			h.ch <- h.ev
			close(h.ch)
		}
		r := <-waiter
		assert.ErrorIs(t, r.err, ErrLost, "granted %v", r.g)
		assert.Empty(t, s.lockNodes(dir))
	})
}

// otherThan returns the name in names that is not the last element of path.
func otherThan(names []string, path string) string {
	for _, n := range names {
		if dir+"/"+n != path {
			return n
		}
	}
	return ""
}

// A create whose answer was lost, carried out only after the listing that
// looked for it: the acquisition creates again, and finds a twin of its
// own node before it. The twin must go, not stand in the way.
func TestTwinOfOurNodeIsDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		g, err := l.TryLock(ctx) // the directory and the DELETE check
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))

		twin := ""
		c.setBefore(func(op, p string) error {
			if op == "create" && twin == "" {
				twin, _ = s.conn().Create(p, nil, zk.FlagEphemeral|zk.FlagSequence, nil) // the late one
				s.mu.Lock()
				s.nodes[twin].stat.EphemeralOwner = c.SessionID()
				s.mu.Unlock()
			}
			return nil
		})
		g, err = l.TryLock(ctx)
		require.NoError(t, err, "the twin before us is ours: nothing is in our way")
		c.setBefore(nil)
		l.background.Wait()
		assert.Equal(t, []string{path.Base(g.Node())}, s.lockNodes(dir), "the twin is gone")
		require.NoError(t, g.Release(ctx))
	})
}
