package stats

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
)

// within asserts that got is want give or take 10%, the histogram's
// promise.
func within(t *testing.T, want, got time.Duration, msg string) {
	t.Helper()
	assert.InEpsilon(t, float64(want), float64(got), 0.1, "%s: want about %v, got %v", msg, want, got)
}

var _ rwlock.Observer = (*Recorder)(nil)

func TestRecorderCountsAcquisitions(t *testing.T) {
	var r Recorder
	ctx := context.Background()
	for _, e := range []rwlock.AcquireEvent{
		{Mode: rwlock.Read, Outcome: "granted", Wait: time.Millisecond, Requests: 2, OneRoundTrip: true},
		{Mode: rwlock.Read, Outcome: "granted", Wait: 3 * time.Millisecond, Requests: 4},
		{Mode: rwlock.Read, Outcome: "cancelled", Wait: time.Second, Requests: 3},
		{Mode: rwlock.Write, Outcome: "would_block", Requests: 4},
		{Mode: rwlock.Write, Outcome: "failed", Requests: 1},
	} {
		r.ObserveAcquire(ctx, e)
	}
	s := r.Stats()
	assert.Equal(t, uint64(2), s.Read.Granted)
	assert.Equal(t, uint64(1), s.Read.Cancelled)
	assert.Equal(t, uint64(1), s.Read.OneRoundTrip)
	assert.Equal(t, uint64(1), s.Write.WouldBlock)
	assert.Equal(t, uint64(1), s.Write.Failed)
	assert.Equal(t, uint64(3), s.Read.Acquisitions())
	assert.Equal(t, uint64(5), s.Acquisitions())
	assert.Equal(t, uint64(2), s.Granted())
	assert.Equal(t, uint64(14), s.Requests)
	assert.Equal(t, uint64(2), s.Wait().Count(), "only grants are in the wait histogram")
	within(t, 4*time.Millisecond, s.Read.Wait.Sum(), "read wait sum")
	assert.Zero(t, s.Lost.Total())
}

func TestRecorderCountsGrants(t *testing.T) {
	var r Recorder
	for _, e := range []rwlock.GrantEvent{
		{Mode: rwlock.Read, Hold: time.Second, Requests: 1, Err: rwlock.ErrReleased},
		{Mode: rwlock.Write, Hold: 2 * time.Second, Loss: "node_deleted", Requests: 1},
		{Mode: rwlock.Write, Hold: time.Second, Loss: "session_expired"},
		{Mode: rwlock.Write, Hold: time.Second, Loss: "lease_lapsed"},
		{Mode: rwlock.Write, Hold: time.Second, Loss: "disconnected"},
		{Mode: rwlock.Write, Hold: time.Second, Loss: "hold_limit"},
		{Mode: rwlock.Write, Hold: time.Second, Loss: "other"},
	} {
		r.ObserveGrant(e)
	}
	s := r.Stats()
	assert.Equal(t, LostStats{NodeDeleted: 1, SessionExpired: 1, LeaseLapsed: 1, Disconnected: 1, HoldLimit: 1, Other: 1}, s.Lost)
	assert.Equal(t, uint64(6), s.Lost.Total())
	assert.Equal(t, uint64(1), s.Read.Hold.Count())
	within(t, 7*time.Second, s.Write.Hold.Sum(), "write hold sum")
	assert.Equal(t, uint64(2), s.Requests)
	assert.Zero(t, s.Acquisitions(), "the end of a grant is no acquisition")
}

func TestStatsAddAndSub(t *testing.T) {
	var a, b Recorder
	ctx := context.Background()
	granted := rwlock.AcquireEvent{Mode: rwlock.Read, Outcome: "granted", Wait: time.Millisecond, Requests: 2}
	a.ObserveAcquire(ctx, granted)
	before := b.Stats()
	b.ObserveAcquire(ctx, granted)
	b.ObserveAcquire(ctx, granted)
	b.ObserveGrant(rwlock.GrantEvent{Mode: rwlock.Read, Hold: time.Second, Loss: "other"})
	sum := a.Stats().Add(b.Stats())
	assert.Equal(t, uint64(3), sum.Read.Granted)
	assert.Equal(t, uint64(3), sum.Read.Wait.Count())
	assert.Equal(t, uint64(6), sum.Requests)
	assert.Equal(t, b.Stats(), sum.Sub(a.Stats()))
	assert.Equal(t, b.Stats(), b.Stats().Sub(before), "since the zero snapshot: everything")
}

// A Recorder is shared by the goroutines of every lock it observes.
func TestRecorderIsSafeForConcurrentUse(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				r.ObserveAcquire(context.Background(), rwlock.AcquireEvent{Mode: rwlock.Write, Outcome: "granted", Requests: 2})
				r.ObserveGrant(rwlock.GrantEvent{Mode: rwlock.Write, Requests: 1})
				_ = r.Stats()
			}
		})
	}
	wg.Wait()
	s := r.Stats()
	assert.Equal(t, uint64(8000), s.Write.Granted)
	assert.Equal(t, uint64(8000), s.Write.Hold.Count())
	assert.Equal(t, uint64(24000), s.Requests)
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
