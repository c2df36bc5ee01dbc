package rwlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zkrwlock/rwlock/internal/lockname"
)

// recorder is an Observer that keeps what it hears.
type recorder struct {
	mu       sync.Mutex
	acquires []AcquireEvent
	grants   []GrantEvent
}

func (r *recorder) ObserveAcquire(_ context.Context, e AcquireEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, e)
}

func (r *recorder) ObserveGrant(e GrantEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants = append(r.grants, e)
}

// requests adds up the requests of every event heard.
func (r *recorder) requests() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, e := range r.acquires {
		n += int64(e.Requests)
	}
	for _, e := range r.grants {
		n += int64(e.Requests)
	}
	return n
}

func (r *recorder) events() ([]AcquireEvent, []GrantEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]AcquireEvent(nil), r.acquires...), append([]GrantEvent(nil), r.grants...)
}

func TestObserverHearsEveryAcquisitionAndGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var rec recorder
		c := s.conn()
		l := newLock(t, c, WithObserver(&rec))
		ctx := t.Context()
		g, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		assert.Equal(t, c.calls.Load(), rec.requests(), "every request is counted, the directory's too")

		calls := c.calls.Load()
		start := time.Now()
		g, err = l.RLock(ctx)
		require.NoError(t, err)
		time.Sleep(time.Second) // the fake clock of the bubble: exactly a second
		require.NoError(t, g.Release(ctx))
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		_, err = l.TryRLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock)
		require.NoError(t, holder.Release(ctx))

		acquires, grants := rec.events()
		require.Len(t, acquires, 3)
		// Create and list; the listing may overtake the create (listBehind),
		// and the acquisition then lists again: one round trip more.
		got := acquires[1]
		assert.Contains(t, []int{2, 3}, got.Requests)
		assert.Equal(t, AcquireEvent{
			Lock: dir, Mode: Read, Outcome: "granted", Start: start, Requests: got.Requests, OneRoundTrip: got.Requests == 2,
		}, got)
		try := acquires[2]
		assert.True(t, try.Try)
		assert.Equal(t, "would_block", try.Outcome)
		assert.ErrorIs(t, try.Err, ErrWouldBlock)
		assert.Equal(t, 4, try.Requests, "create, list, a read of the writer in its way, the delete of its node")

		require.Len(t, grants, 2)
		assert.Equal(t, GrantEvent{
			Lock: dir, Node: g.Node(), Mode: Read, Hold: time.Second, Requests: 1, Err: ErrReleased,
		}, grants[1])
		assert.Equal(t, c.calls.Load()-calls, rec.requests()-int64(acquires[0].Requests+grants[0].Requests))
	})
}

func TestEventsOfContendedAcquisitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		c := s.conn()
		var rec recorder
		l := newLock(t, c, WithObserver(&rec))

		_, err = l.TryLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock)

		cctx, cancel := context.WithCancel(ctx)
		r := start(cctx, l.RLock)
		time.Sleep(time.Second)
		cancel()
		require.ErrorIs(t, (<-r).err, context.Canceled)

		w := start(ctx, l.Lock)
		time.Sleep(2 * time.Second)
		require.NoError(t, holder.Release(ctx))
		synctest.Wait()
		g := granted(t, w)
		require.NoError(t, g.Release(ctx))

		acquires, grants := rec.events()
		require.Len(t, acquires, 3)
		outcomes := []string{acquires[0].Outcome, acquires[1].Outcome, acquires[2].Outcome}
		assert.Equal(t, []string{"would_block", "cancelled", "granted"}, outcomes)
		assert.Equal(t, time.Second, acquires[1].Wait)
		assert.ErrorIs(t, acquires[1].Err, context.Canceled)
		assert.Equal(t, 2*time.Second, acquires[2].Wait)
		assert.False(t, acquires[2].OneRoundTrip, "it waited")
		require.Len(t, grants, 1)
		assert.Equal(t, c.calls.Load(), rec.requests())
	})
}

func TestEventOfAFailedAcquisition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		other := s.conn()
		g, err := newLock(t, other).Lock(t.Context()) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))
		c := s.conn()
		deleteOwnNodeBeforeListing(c, s, other, dir)
		var rec recorder
		l := newLock(t, c, WithObserver(&rec))
		_, err = l.Lock(t.Context())
		require.ErrorIs(t, err, ErrLost)
		acquires, grants := rec.events()
		require.Len(t, acquires, 1)
		assert.Equal(t, "failed", acquires[0].Outcome)
		assert.ErrorIs(t, acquires[0].Err, ErrLost)
		assert.Empty(t, grants, "no grant was lost: there was none")
	})
}

func TestEventsOfLostGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		lost := func(l *RWLock, rec *recorder) GrantEvent {
			t.Helper()
			synctest.Wait() // the observer hears after Done closes
			_, grants := rec.events()
			require.Len(t, grants, 1)
			assert.ErrorIs(t, grants[0].Err, ErrLost)
			return grants[0]
		}

		var deleted recorder
		l := newLock(t, s.conn(), WithObserver(&deleted))
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		time.Sleep(time.Second)
		require.NoError(t, s.conn().Delete(g.Node(), -1))
		<-g.Done()
		ev := lost(l, &deleted)
		assert.Equal(t, "node_deleted", ev.Loss)
		assert.Equal(t, time.Second, ev.Hold, "a lost grant's hold")

		c := s.conn()
		var expired recorder
		l = newLock(t, c, WithObserver(&expired))
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		c.expire()
		<-g.Done()
		assert.Equal(t, "session_expired", lost(l, &expired).Loss)

		c = s.conn()
		var cut recorder
		l = newLock(t, c, WithObserver(&cut))
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		c.disconnect()
		<-g.Done()
		c.reconnect()
		assert.Equal(t, "disconnected", lost(l, &cut).Loss)
	})
}

// Nested grants make no request and never wait: they are no events.
func TestNestedGrantsAreNoEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var rec recorder
		l := newLock(t, s.conn(), WithObserver(&rec))
		err := l.WithWrite(t.Context(), func(ctx context.Context) error {
			return l.WithRead(ctx, func(context.Context) error { return nil })
		})
		require.NoError(t, err)
		acquires, grants := rec.events()
		require.Len(t, acquires, 1)
		require.Len(t, grants, 1)
		assert.Equal(t, Write, grants[0].Mode)
	})
}

// A downgrade ends the write grant's hold and starts the read grant's.
func TestEventsOfADowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var rec recorder
		l := newLock(t, s.conn(), WithObserver(&rec))
		ctx := t.Context()
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		time.Sleep(time.Second)
		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		require.NoError(t, r.Release(ctx))
		acquires, grants := rec.events()
		assert.Len(t, acquires, 1, "a downgrade is no acquisition")
		require.Len(t, grants, 2)
		assert.Equal(t, Write, grants[0].Mode)
		assert.Equal(t, time.Second, grants[0].Hold)
		assert.Empty(t, grants[0].Loss)
		assert.Equal(t, Read, grants[1].Mode)
		assert.Equal(t, 3*time.Second, grants[1].Hold)
	})
}

// Each WithObserver adds one; a nil one is refused.
func TestObservers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var a, b recorder
		l := newLock(t, s.conn(), WithObserver(&a), WithObserver(&b))
		require.NoError(t, l.WithRead(t.Context(), func(context.Context) error { return nil }))
		for _, rec := range []*recorder{&a, &b} {
			acquires, grants := rec.events()
			assert.Len(t, acquires, 1)
			assert.Len(t, grants, 1)
		}
		_, err := newRWLock(s.conn(), dir, WithObserver(nil))
		require.ErrorIs(t, err, ErrInvalidArgument)
	})
}

// Relists counts the listings that stand between what let a waiter go on
// and its grant, and nothing every acquisition makes anyway.
func TestRelists(t *testing.T) {
	// relists returns the Relists of the one acquisition rec heard.
	relists := func(t *testing.T, rec *recorder) int {
		t.Helper()
		acquires, _ := rec.events()
		require.Len(t, acquires, 1)
		require.Equal(t, "granted", acquires[0].Outcome)
		return acquires[0].Relists
	}
	t.Run("first listing lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeServer()
			g, err := newLock(t, s.conn()).Lock(t.Context()) // makes the directory
			require.NoError(t, err)
			require.NoError(t, g.Release(t.Context()))
			c := s.conn()
			var lost atomic.Bool
			c.setBefore(func(op, p string) error {
				if op == "children" && p == dir && !lost.Swap(true) {
					return zk.ErrConnectionClosed // the listing sent behind the create
				}
				return nil
			})
			var rec recorder
			g, err = newLock(t, c, WithObserver(&rec)).Lock(t.Context())
			require.NoError(t, err)
			require.NoError(t, g.Release(t.Context()))
			require.True(t, lost.Load())
			assert.Zero(t, relists(t, &rec), "the listing that first shows our node is everyone's")
		})
	})
	t.Run("writer behind writers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeServer()
			ctx := t.Context()
			holder, err := newLock(t, s.conn()).Lock(ctx)
			require.NoError(t, err)
			first := start(ctx, newLock(t, s.conn()).Lock)
			synctest.Wait()
			var rec recorder
			w := start(ctx, newLock(t, s.conn(), WithObserver(&rec)).Lock)
			synctest.Wait()
			require.NoError(t, holder.Release(ctx))
			synctest.Wait()
			require.NoError(t, granted(t, first).Release(ctx))
			synctest.Wait()
			require.NoError(t, granted(t, w).Release(ctx))
			assert.Zero(t, relists(t, &rec), "the held mark proves the way clear")
		})
	})
	t.Run("writer behind readers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeServer()
			ctx := t.Context()
			r1, err := newLock(t, s.conn()).RLock(ctx)
			require.NoError(t, err)
			r2, err := newLock(t, s.conn()).RLock(ctx)
			require.NoError(t, err)
			c := s.conn()
			var rec recorder
			w := start(ctx, newLock(t, c, WithObserver(&rec)).Lock)
			synctest.Wait()
			require.NoError(t, r2.Release(ctx)) // its predecessor; r1 still holds
			synctest.Wait()
			pending(t, w)
			require.NoError(t, r1.Release(ctx))
			synctest.Wait()
			require.NoError(t, granted(t, w).Release(ctx))
			assert.Zero(t, relists(t, &rec), "it watched both readers")
		})
	})
	t.Run("reconnection while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeServer()
			ctx := t.Context()
			holder, err := newLock(t, s.conn()).Lock(ctx)
			require.NoError(t, err)
			c := s.conn()
			var failed atomic.Bool
			c.setBefore(func(op, p string) error {
				if op == "get" && p == holder.Node() && !failed.Swap(true) {
					return zk.ErrConnectionClosed // its look at the holder
				}
				return nil
			})
			var rec recorder
			w := start(ctx, newLock(t, c, WithObserver(&rec)).Lock)
			time.Sleep(time.Second) // the bubble's clock: the retry's backoff passes
			synctest.Wait()
			pending(t, w)
			require.True(t, failed.Load())
			require.NoError(t, holder.Release(ctx))
			synctest.Wait()
			require.NoError(t, granted(t, w).Release(ctx))
			assert.Equal(t, 1, relists(t, &rec), "it listed again to prove its place")
		})
	})
}

// A writer granted by its first listing, with a node created after its own
// before that listing, reads its node for the token. That read is one of
// its requests, and the acquisition took two round trips.
func TestTokenReadCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		var rec recorder
		c := s.conn()
		l := newLock(t, c, WithObserver(&rec))
		g, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		other := s.conn()
		var once atomic.Bool
		c.setBefore(func(op, p string) error {
			if op == "children" && p == dir && once.CompareAndSwap(false, true) {
				_, err := other.Create(nodePrefix(dir, lockname.NewGUID(), Write, DialectNative), nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
				require.NoError(t, err)
			}
			return nil
		})
		calls := c.calls.Load()
		g, err = l.Lock(ctx)
		require.NoError(t, err)
		used := c.calls.Load() - calls
		acquires, _ := rec.events()
		got := acquires[len(acquires)-1]
		assert.Equal(t, int(used), got.Requests)
		assert.Equal(t, 3, got.Requests, "create, list and the token's read")
		assert.False(t, got.OneRoundTrip)
		require.NoError(t, g.Release(ctx))
	})
}

// grantHook is a recorder that runs onGrant as it hears of a grant's end.
type grantHook struct {
	recorder
	onGrant func(GrantEvent)
}

func (r *grantHook) ObserveGrant(e GrantEvent) {
	r.recorder.ObserveGrant(e)
	if r.onGrant != nil {
		r.onGrant(e)
	}
}

// A listing for peers is counted in a grant's figures across a Downgrade.
// Here the check falls due while the observer hears of the write grant's
// end. So does the read that watches the node again, after the Downgrade's
// change of its data. Both belong to the read grant's figures.
func TestFleetListingCountedAcrossDowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		var rec grantHook
		g, err := newLock(t, c, WithObserver(&rec)).Lock(ctx)
		require.NoError(t, err)
		calls := c.calls.Load()
		_, err = newLock(t, s.conn()).TryLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock) // the directory changed, so a check is due
		synctest.Wait()
		lists := c.lists.Load()
		rec.onGrant = func(e GrantEvent) {
			if e.Mode == Write {
				time.Sleep(fleetInterval + time.Millisecond) // the check falls due meanwhile
			}
		}
		r, err := g.Downgrade(ctx)
		require.NoError(t, err)
		rec.onGrant = nil
		require.NoError(t, r.Release(ctx))
		synctest.Wait()
		require.Equal(t, lists+1, c.lists.Load(), "the check listed once")
		_, grants := rec.events()
		require.Len(t, grants, 2)
		assert.Equal(t, c.calls.Load()-calls, int64(grants[0].Requests+grants[1].Requests),
			"every request after the grant, the listing too, in the write's figures or the read's")
	})
}
