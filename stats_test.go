package rwlock

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// within asserts that got is want give or take 10%, the histogram's
// promise.
func within(t *testing.T, want, got time.Duration, msg string) {
	t.Helper()
	assert.InEpsilon(t, float64(want), float64(got), 0.1, "%s: want about %v, got %v", msg, want, got)
}

func TestStatsOfUncontendedAcquisitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx) // the first also makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		first := l.Stats()
		assert.Equal(t, uint64(1), first.Write.Granted)
		assert.Equal(t, uint64(c.calls.Load()), first.Requests, "every request is counted, the directory's too")

		before, calls := first, c.calls.Load()
		for _, acquire := range []func(context.Context) (*Grant, error){l.Lock, l.RLock, l.RLock} {
			g, err := acquire(ctx)
			require.NoError(t, err)
			time.Sleep(time.Second) // the fake clock of the bubble: exactly a second
			require.NoError(t, g.Release(ctx))
		}
		d := l.Stats().Sub(before)
		assert.Equal(t, uint64(1), d.Write.Granted)
		assert.Equal(t, uint64(2), d.Read.Granted)
		assert.Equal(t, uint64(1), d.Write.OneRoundTrip)
		assert.Equal(t, uint64(2), d.Read.OneRoundTrip)
		assert.Equal(t, uint64(3), d.Acquisitions())
		assert.Equal(t, uint64(9), d.Requests, "create, list, delete")
		assert.Equal(t, uint64(c.calls.Load()-calls), d.Requests)
		assert.Equal(t, uint64(2), d.Read.Hold.Count())
		within(t, time.Second, d.Read.Hold.Quantile(0.5), "read hold p50")
		within(t, 2*time.Second, d.Read.Hold.Sum(), "read hold sum")
		assert.Equal(t, uint64(3), d.Wait().Count())
		assert.Less(t, d.Wait().Quantile(0.99), time.Millisecond, "no time passes in the bubble but the sleeps")
		assert.Zero(t, d.Lost.Total())
	})
}

func TestStatsOfContendedAcquisitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		c := s.conn()
		l := newLock(t, c)

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

		st := l.Stats()
		assert.Equal(t, ModeStats{Granted: 1, WouldBlock: 1}, ModeStats{Granted: st.Write.Granted, WouldBlock: st.Write.WouldBlock})
		assert.Equal(t, uint64(1), st.Read.Cancelled)
		assert.Zero(t, st.Read.Granted+st.Write.Failed+st.Read.Failed)
		assert.Zero(t, st.Write.OneRoundTrip, "it waited")
		assert.Equal(t, uint64(1), st.Write.Wait.Count(), "only grants are in the wait histogram")
		within(t, 2*time.Second, st.Write.Wait.Quantile(0.99), "write wait p99")
		assert.Equal(t, uint64(c.calls.Load()), st.Requests)
	})
}

func TestStatsOfAFailedAcquisition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		other := s.conn()
		g, err := newLock(t, other).Lock(t.Context()) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))
		c := s.conn()
		deleteOwnNodeBeforeListing(c, s, other, dir)
		l := newLock(t, c)
		_, err = l.Lock(t.Context())
		require.ErrorIs(t, err, ErrLost)
		st := l.Stats()
		assert.Equal(t, uint64(1), st.Write.Failed)
		assert.Equal(t, uint64(1), st.Write.Acquisitions())
		assert.Zero(t, st.Lost.Total(), "no grant was lost: there was none")
	})
}

func TestStatsOfLostGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()

		deleted := newLock(t, s.conn())
		g, err := deleted.RLock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		time.Sleep(time.Second)
		require.NoError(t, s.conn().Delete(g.Node(), -1))
		<-g.Done()
		assert.Equal(t, LostStats{NodeDeleted: 1}, deleted.Stats().Lost)
		within(t, time.Second, deleted.Stats().Read.Hold.Quantile(0.5), "a lost grant's hold")

		c := s.conn()
		expired := newLock(t, c)
		g, err = expired.Lock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		c.expire()
		<-g.Done()
		assert.Equal(t, LostStats{SessionExpired: 1}, expired.Stats().Lost)

		c = s.conn()
		cut := newLock(t, c)
		g, err = cut.Lock(ctx)
		require.NoError(t, err)
		c.disconnect()
		<-g.Done()
		c.reconnect()
		assert.Equal(t, LostStats{Disconnected: 1}, cut.Stats().Lost)
		assert.Equal(t, uint64(1), cut.Stats().Lost.Total())
	})
}

func TestStatsAddAndSub(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		a, b := newLock(t, s.conn()), newLock(t, s.conn())
		for _, l := range []*RWLock{a, b, b} {
			g, err := l.RLock(t.Context())
			require.NoError(t, err)
			require.NoError(t, g.Release(t.Context()))
		}
		sum := a.Stats().Add(b.Stats())
		assert.Equal(t, uint64(3), sum.Read.Granted)
		assert.Equal(t, uint64(3), sum.Read.Hold.Count())
		assert.Equal(t, a.Stats().Requests+b.Stats().Requests, sum.Requests)
		assert.Equal(t, b.Stats(), sum.Sub(a.Stats()))
	})
}

// Nested grants make no request and never wait: they are not counted.
func TestStatsSkipNestedGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		err := l.WithWrite(t.Context(), func(ctx context.Context) error {
			return l.WithRead(ctx, func(context.Context) error { return nil })
		})
		require.NoError(t, err)
		st := l.Stats()
		assert.Equal(t, uint64(1), st.Write.Granted)
		assert.Zero(t, st.Read.Acquisitions())
		assert.Zero(t, st.Read.Hold.Count())
		assert.Equal(t, uint64(1), st.Write.Hold.Count())
	})
}

// A downgrade ends the write grant's hold and starts the read grant's.
func TestStatsOfADowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		ctx := t.Context()
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		time.Sleep(time.Second)
		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		require.NoError(t, r.Release(ctx))
		st := l.Stats()
		within(t, time.Second, st.Write.Hold.Sum(), "write hold")
		within(t, 3*time.Second, st.Read.Hold.Sum(), "read hold")
		assert.Zero(t, st.Read.Acquisitions(), "a downgrade is no acquisition")
	})
}

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

func TestObserverHearsEveryAcquisitionAndGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var rec recorder
		l := newLock(t, s.conn(), WithObserver(&rec))
		ctx := t.Context()
		g, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))

		start := time.Now()
		g, err = l.RLock(ctx)
		require.NoError(t, err)
		time.Sleep(time.Second)
		require.NoError(t, g.Release(ctx))
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		_, err = l.TryRLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock)
		require.NoError(t, holder.Release(ctx))

		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Len(t, rec.acquires, 3)
		assert.Equal(t, AcquireEvent{
			Lock: dir, Mode: Read, Outcome: OutcomeGranted, Start: start, Requests: 2, OneRoundTrip: true,
		}, rec.acquires[1], "create and list")
		try := rec.acquires[2]
		assert.True(t, try.Try)
		assert.Equal(t, OutcomeWouldBlock, try.Outcome)
		assert.ErrorIs(t, try.Err, ErrWouldBlock)
		assert.Equal(t, 4, try.Requests, "create, list, a read of the writer in its way, the delete of its node")

		require.Len(t, rec.grants, 2)
		assert.Equal(t, GrantEvent{
			Lock: dir, Node: g.Node(), Mode: Read, Hold: time.Second, Cause: NotLost, Requests: 1, Err: ErrReleased,
		}, rec.grants[1])
		st := l.Stats()
		assert.Equal(t, uint64(len(rec.acquires)), st.Acquisitions())
	})
}

func TestHistogramBuckets(t *testing.T) {
	last := -1
	for ns := int64(0); ns < 1<<50; ns = ns*9/8 + 1 {
		i := histBucket(ns)
		require.GreaterOrEqual(t, i, last, "buckets grow with the value (%d ns)", ns)
		last = i
		lo, hi := histBounds(i)
		switch {
		case i == histBuckets-1:
			require.GreaterOrEqual(t, ns, lo)
		default:
			require.True(t, lo <= ns && ns < hi, "%d ns in bucket %d [%d, %d)", ns, i, lo, hi)
		}
		if i > 0 && i < histBuckets-1 {
			require.LessOrEqual(t, float64(hi-lo), 0.25*float64(lo), "a quarter of a doubling at most")
		}
	}
	assert.Equal(t, histBuckets-1, last)
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	var empty Histogram
	assert.Zero(t, empty.Quantile(0.5))
	assert.Zero(t, empty.Mean())
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	s := h.snapshot()
	assert.Equal(t, uint64(1000), s.Count())
	assert.Equal(t, 500500*time.Millisecond, s.Sum())
	for _, q := range []float64{0.01, 0.1, 0.5, 0.9, 0.99, 1} {
		within(t, time.Duration(q*1000)*time.Millisecond, s.Quantile(q), "quantile")
	}
	within(t, 500500*time.Microsecond, s.Mean(), "mean")

	h.record(-time.Second) // a clock step: counted as 0
	h.record(100 * 24 * time.Hour)
	s2 := h.snapshot()
	assert.Equal(t, uint64(2), s2.Sub(s).Count())
	assert.Equal(t, s2, s.Add(s2.Sub(s)))
	assert.Equal(t, time.Duration(1<<histMaxShift), s2.Quantile(1), "beyond the last bucket: its lower bound")
}
