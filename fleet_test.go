package rwlock

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Readers granted together behind a writer, as in W6r, list nothing for
// peers if they release before the first check. One that holds on lists
// once, one interval after the listing it was granted on, and then nothing
// while the directory does not change.
func TestFleetCheckSparesShortGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		var conns []*fakeConn
		var waits []<-chan result
		for range 8 {
			c := s.conn()
			waits = append(waits, start(ctx, newLock(t, c).RLock))
			conns = append(conns, c)
			synctest.Wait()
		}
		listed := func() (n int64) {
			for _, c := range conns {
				n += c.lists.Load()
			}
			return n
		}
		before := listed()
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		gs := make([]*Grant, len(waits))
		for i, ch := range waits {
			gs[i] = granted(t, ch)
		}
		for _, g := range gs[1:] {
			require.NoError(t, g.Release(ctx))
		}
		synctest.Wait()
		assert.Equal(t, before, listed(), "no listing for peers by grants released before their first check")

		time.Sleep(3 * fleetInterval)
		synctest.Wait()
		assert.Equal(t, before+1, listed(), "one check by the reader that holds on, then none while nothing changes")
		require.NoError(t, gs[0].Release(ctx))
	})
}

// A holder lists at most once per interval while the directory changes,
// not once per change. Here other clients' TryLocks change it twice every
// 10 ms (a create, and the deletion of a node refused).
func TestFleetCheckAtMostOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		g, err := newLock(t, c).Lock(ctx)
		require.NoError(t, err)
		before := c.lists.Load()
		const busy = 4 * fleetInterval
		other := newLock(t, s.conn())
		changes := 0
		for start := time.Now(); time.Since(start) < busy; time.Sleep(10 * time.Millisecond) {
			_, err := other.TryLock(ctx)
			require.True(t, errors.Is(err, ErrWouldBlock), "%v", err)
			changes += 2
			synctest.Wait()
		}
		time.Sleep(2 * fleetInterval)
		synctest.Wait()
		lists := c.lists.Load() - before
		t.Logf("%d changes in %v, %d listings for peers", changes, busy, lists)
		assert.LessOrEqual(t, lists, int64(busy/fleetInterval)+1, "at most one listing per interval")
		assert.Positive(t, lists, "and it does look")
		require.NoError(t, g.Release(ctx))
	})
}

// A holder whose release the server refuses holds on, so it needs the
// check again. Here the check falls due while the release is under way. Its
// only holder is releasing, so the watching stops and lists nothing. A blind
// peer's node came meanwhile. The refusal starts the watching again, and the
// holder is told at its listing.
func TestFleetCheckAfterARefusedRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		g, err := newLock(t, c).Lock(ctx)
		require.NoError(t, err)
		answer := make(chan struct{})
		var refused atomic.Bool
		c.setBefore(func(op, p string) error {
			if op == "delete" && p == g.Node() && refused.CompareAndSwap(false, true) {
				<-answer
				return zk.ErrNoAuth // an ACL changed since the lock was taken
			}
			return nil
		})
		released := make(chan error, 1)
		go func() { released <- g.Release(ctx) }()
		synctest.Wait()
		require.True(t, refused.Load(), "the release is under way")
		peerNode(t, s.conn(), "_c_"+uuid+"-__WRIT__", "")
		before := c.lists.Load()
		time.Sleep(fleetInterval)
		synctest.Wait()
		assert.Equal(t, before, c.lists.Load(), "no listing for a holder that is releasing")

		close(answer)
		require.ErrorIs(t, <-released, zk.ErrNoAuth)
		synctest.Wait()
		require.True(t, isClosed(g.Done()), "told, after the refusal")
		require.ErrorIs(t, g.Err(), ErrLost)
		require.ErrorIs(t, g.Err(), ErrInvalidArgument)
		assert.Equal(t, before+1, c.lists.Load(), "at one listing")
	})
}

// The next check is dated from when the listing before it was sent, not
// from its answer. Here that answer takes 50 ms to come back, and a blind
// peer's node comes while it is on its way. The holder lists again one
// interval after the listing before was sent, and is told then.
func TestFleetCheckDatedFromTheListingSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		g, err := newLock(t, c).Lock(ctx)
		require.NoError(t, err)
		_, err = newLock(t, s.conn()).TryLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock) // the directory changed, so a check is due
		synctest.Wait()

		const back = 50 * time.Millisecond
		sent, peer := make(chan time.Time, 1), make(chan error, 1)
		var slowed atomic.Bool
		c.setAfter(func(op, p string, err error) error {
			if op == "children" && p == dir && slowed.CompareAndSwap(false, true) {
				sent <- time.Now() // the fake's request leg takes no time
				time.Sleep(back / 5)
				_, perr := s.conn().Create(dir+"/_c_"+uuid+"-__WRIT__", nil, zk.FlagEphemeral|zk.FlagSequence, nil)
				peer <- perr
				time.Sleep(back - back/5)
			}
			return err
		})
		time.Sleep(fleetInterval)
		synctest.Wait()
		require.True(t, slowed.Load(), "the check fell due")
		time.Sleep(time.Until((<-sent).Add(fleetInterval)))
		synctest.Wait()
		require.NoError(t, <-peer)
		require.True(t, isClosed(g.Done()), "told one interval after the listing before was sent")
		require.ErrorIs(t, g.Err(), ErrInvalidArgument)
	})
}

// A mixed fleet is its own cause: an acquisition refused for it, and a
// grant lost for it, wrap ErrMixedFleet, and the loss is "mixed_fleet" to
// an Observer, so that it can be alerted on.
func TestMixedFleetIsItsOwnCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		var rec recorder
		g, err := newLock(t, s.conn(), WithObserver(&rec)).Lock(ctx)
		require.NoError(t, err)
		peerNode(t, s.conn(), "_c_"+uuid+"-__WRIT__", "")
		time.Sleep(fleetInterval)
		synctest.Wait()
		require.True(t, isClosed(g.Done()))
		require.ErrorIs(t, g.Err(), ErrLost)
		require.ErrorIs(t, g.Err(), ErrMixedFleet)
		rec.mu.Lock()
		require.Len(t, rec.grants, 1)
		assert.Equal(t, "mixed_fleet", rec.grants[0].Loss)
		rec.mu.Unlock()

		_, err = newLock(t, s.conn()).TryLock(ctx)
		require.ErrorIs(t, err, ErrMixedFleet)
		require.ErrorIs(t, err, ErrInvalidArgument)
	})
}

// Curator's InterProcessSemaphoreV2 counts none of our nodes, and an
// acquisition refuses its directories. A holder that holds already is told
// when they come, as it is of a blind peer's node (see fleet.go).
func TestFleetWatchEndsHoldersOnCuratorSemaphore(t *testing.T) {
	for name, opts := range map[string][]Option{"capacity": {WithCapacity(4)}, "plain": nil} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				l := newLock(t, s.conn(), opts...)
				g, err := l.RLock(t.Context())
				require.NoError(t, err)
				c := s.conn()
				for _, p := range []string{dir + "/locks", dir + "/leases", dir + "/leases/_c_" + uuid + "-lease-0000000000"} {
					_, err := c.Create(p, nil, 0, nil)
					require.NoError(t, err)
				}
				time.Sleep(3 * fleetInterval)
				synctest.Wait()
				// A second acquisition is refused...
				_, err = newLock(t, s.conn(), opts...).TryRLock(t.Context())
				require.ErrorIs(t, err, ErrInvalidArgument)
				// ...and the holder, overlapping Curator's lease, is told.
				if g.Err() == nil {
					t.Errorf("the holder was not told of Curator's semaphore on its path")
				}
				_ = g.Release(t.Context())
			})
		})
	}
}

// A holder of a bounded lock is told when a node without a capacity joins
// its path. Here it is the writer of a zkrwlock release that predates
// capacities: it cannot parse sem- names, and so is granted at once.
func TestFleetWatchEndsHoldersOnADisagreeingNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		g, err := newLock(t, s.conn(), WithCapacity(4)).RLock(t.Context())
		require.NoError(t, err)
		peerNode(t, s.conn(), "_c_"+guid+"-write-", "")
		time.Sleep(3 * fleetInterval)
		synctest.Wait()
		if g.Err() == nil {
			t.Errorf("the holder was not told of a node made without a capacity")
		}
		_ = g.Release(t.Context())
	})
}
