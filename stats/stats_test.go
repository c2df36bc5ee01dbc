package stats

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
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
		{Mode: rwlock.Read, Outcome: "granted", Wait: 3 * time.Millisecond, Requests: 4, Relists: 1},
		{Mode: rwlock.Read, Outcome: "cancelled", Wait: time.Second, Requests: 3, Relists: 1},
		{Mode: rwlock.Write, Outcome: "would_block", Requests: 4},
		{Mode: rwlock.Write, Outcome: "failed", Requests: 1, Relists: 3},
	} {
		r.ObserveAcquire(ctx, e)
	}
	s := r.Stats()
	assert.Equal(t, uint64(2), s.Read.Granted)
	assert.Equal(t, uint64(1), s.Read.Cancelled)
	assert.Equal(t, uint64(1), s.Read.OneRoundTrip)
	assert.Equal(t, uint64(1), s.Write.WouldBlock)
	assert.Equal(t, uint64(1), s.Write.Failed)
	assert.Equal(t, uint64(2), s.Read.Relists, "failed and cancelled acquisitions' too")
	assert.Equal(t, uint64(3), s.Write.Relists)
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
	granted := rwlock.AcquireEvent{Mode: rwlock.Read, Outcome: "granted", Wait: time.Millisecond, Requests: 2, Relists: 1}
	a.ObserveAcquire(ctx, granted)
	before := b.Stats()
	b.ObserveAcquire(ctx, granted)
	b.ObserveAcquire(ctx, granted)
	b.ObserveGrant(rwlock.GrantEvent{Mode: rwlock.Read, Hold: time.Second, Loss: "other"})
	sum := a.Stats().Add(b.Stats())
	assert.Equal(t, uint64(3), sum.Read.Granted)
	assert.Equal(t, uint64(3), sum.Read.Wait.Count())
	assert.Equal(t, uint64(6), sum.Requests)
	assert.Equal(t, uint64(3), sum.Read.Relists)
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

var _ rwlock.StartObserver = (*Recorder)(nil)

// What is under way: the waits begun and not ended, the grants held, the
// oldest wait's age, which the bubble's clock makes exact.
func TestRecorderUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r Recorder
		ctx := context.Background()
		write := rwlock.GrantEvent{Lock: "/a", Node: "/a/write-0000000000", Mode: rwlock.Write}
		r.ObserveGrantStart(write)
		first := rwlock.AcquireEvent{Lock: "/a", Mode: rwlock.Read, Start: time.Now()}
		r.ObserveAcquireStart(ctx, first)
		time.Sleep(30 * time.Second)
		second := rwlock.AcquireEvent{Lock: "/a", Mode: rwlock.Read, Start: time.Now()}
		r.ObserveAcquireStart(ctx, second)
		r.ObserveAcquireStart(ctx, second) // two that began together
		time.Sleep(time.Second)
		s := r.Stats()
		assert.Equal(t, uint64(3), s.Read.Waiting)
		assert.Equal(t, uint64(1), s.Write.Held)
		assert.Equal(t, 31*time.Second, s.OldestWait)

		first.Outcome, first.Wait = "cancelled", 31*time.Second
		r.ObserveAcquire(ctx, first)
		s = r.Stats()
		assert.Equal(t, uint64(2), s.Read.Waiting)
		assert.Equal(t, time.Second, s.OldestWait, "the oldest left")

		r.ObserveGrant(write)
		second.Outcome = "granted"
		for range 2 {
			r.ObserveAcquire(ctx, second)
			r.ObserveGrantStart(rwlock.GrantEvent{Lock: "/a", Node: "/a/read-0000000002", Mode: rwlock.Read})
		}
		s = r.Stats()
		assert.Zero(t, s.Read.Waiting)
		assert.Zero(t, s.Write.Held)
		assert.Equal(t, uint64(1), s.Read.Held, "one node, however often begun")
		assert.Zero(t, s.OldestWait)

		// Ends whose start was not heard (an Observer that passes on only
		// ends) are counted, but not as under way.
		r.ObserveAcquire(ctx, rwlock.AcquireEvent{Lock: "/a", Mode: rwlock.Write, Outcome: "granted", Start: time.Now()})
		r.ObserveGrant(rwlock.GrantEvent{Lock: "/a", Node: "/a/write-0000000009", Mode: rwlock.Write})
		s = r.Stats()
		assert.Equal(t, uint64(1), s.Write.Granted)
		assert.Zero(t, s.Write.Waiting)
		assert.Zero(t, s.Write.Held)
	})
}

// Of what is under way, Add sums the counts and keeps the older wait; Sub
// keeps the later snapshot's.
func TestStatsUnderWayAddAndSub(t *testing.T) {
	a := Stats{OldestWait: time.Minute, Read: ModeStats{Waiting: 2, Held: 1}}
	b := Stats{OldestWait: time.Second, Read: ModeStats{Waiting: 1}, Write: ModeStats{Held: 1}}
	sum := a.Add(b)
	assert.Equal(t, time.Minute, sum.OldestWait)
	assert.Equal(t, uint64(3), sum.Read.Waiting)
	assert.Equal(t, uint64(1), sum.Read.Held)
	assert.Equal(t, uint64(1), sum.Write.Held)
	assert.Equal(t, b, b.Sub(a))
}

// A wait of minutes lands in a bucket of its own, not in an overflow.
func TestHistogramReachesHours(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{30 * time.Second, 5 * time.Minute, 2 * time.Hour} {
		h.record(d)
	}
	s := h.snapshot()
	within(t, 30*time.Second, s.Quantile(0.2), "30 s")
	within(t, 5*time.Minute, s.Quantile(0.5), "5 min")
	within(t, 2*time.Hour, s.Quantile(0.9), "2 h")
}

func TestRecorderCountsElections(t *testing.T) {
	var r Recorder
	ctx := context.Background()
	start := time.Now()
	for _, e := range []rwlock.AcquireEvent{
		{Mode: rwlock.Write, Campaign: true, Outcome: "granted", Start: start},
		{Mode: rwlock.Write, Campaign: true, Outcome: "cancelled", Start: start},
		{Mode: rwlock.Write, Outcome: "granted", Start: start},
	} {
		r.ObserveAcquireStart(ctx, e)
		r.ObserveAcquire(ctx, e)
	}
	r.ObserveGrantStart(rwlock.GrantEvent{Node: "/e/a", Mode: rwlock.Write, Term: true})
	r.ObserveGrantStart(rwlock.GrantEvent{Node: "/e/b", Mode: rwlock.Write, Term: true})
	r.ObserveGrantStart(rwlock.GrantEvent{Node: "/l/c", Mode: rwlock.Write})
	assert.Equal(t, ElectionStats{Campaigns: 2, Terms: 1, Leading: 2}, r.Stats().Election)
	r.ObserveGrant(rwlock.GrantEvent{Node: "/e/a", Mode: rwlock.Write, Term: true, Loss: "session_expired"})
	r.ObserveGrant(rwlock.GrantEvent{Node: "/e/b", Mode: rwlock.Write, Term: true, Err: rwlock.ErrReleased})
	r.ObserveGrant(rwlock.GrantEvent{Node: "/l/c", Mode: rwlock.Write, Loss: "node_deleted"})
	s := r.Stats()
	assert.Equal(t, ElectionStats{Campaigns: 2, Terms: 1, Lost: 1}, s.Election)
	assert.Equal(t, uint64(3), s.Write.Acquisitions(), "a campaign is a write acquisition")
	assert.Equal(t, uint64(2), s.Lost.Total(), "a lost term is a lost grant")
	assert.Equal(t, ElectionStats{Campaigns: 4, Terms: 2, Lost: 2}, s.Add(s).Election)
	assert.Equal(t, ElectionStats{}, s.Sub(s).Election)
}
