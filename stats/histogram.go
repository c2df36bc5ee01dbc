package stats

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Durations are counted in fixed buckets on a log scale, four to a
// doubling, from 1 µs (1024 ns) to 2^46 ns (about 19.5 hours), with one
// bucket below and one above. Recording is three atomic adds and no
// allocation; a quantile read from the buckets is off by at most half a
// bucket, about 10%, which is what a p50 or p99 needs. A histogram with
// buckets fine enough to be exact would cost a lock, or memory per lock
// that a program with many lock paths would feel.
const (
	histMinShift = 10 // the first doubling starts at 2^10 ns
	histMaxShift = 46 // the last ends at 2^46 ns
	histSub      = 4  // buckets per doubling
	histBuckets  = 1 + (histMaxShift-histMinShift)*histSub + 1
)

// histBucket returns the bucket of a duration of ns nanoseconds.
func histBucket(ns int64) int {
	if ns < 1<<histMinShift {
		return 0
	}
	e := bits.Len64(uint64(ns)) - 1 // 2^e <= ns < 2^(e+1)
	if e >= histMaxShift {
		return histBuckets - 1
	}
	sub := int(uint64(ns)>>(e-2)) & (histSub - 1)
	return 1 + (e-histMinShift)*histSub + sub
}

// histBounds returns the bucket's lower and upper bound in nanoseconds;
// the last bucket has no upper bound (it returns its lower bound twice).
func histBounds(i int) (lo, hi int64) {
	switch {
	case i <= 0:
		return 0, 1 << histMinShift
	case i >= histBuckets-1:
		return 1 << histMaxShift, 1 << histMaxShift
	}
	e, sub := histMinShift+(i-1)/histSub, int64((i-1)%histSub)
	return (histSub + sub) << (e - 2), (histSub + sub + 1) << (e - 2)
}

// histogram is the recording side: a wait or hold histogram of a Recorder.
type histogram struct {
	sum    atomic.Int64 // nanoseconds
	counts [histBuckets]atomic.Uint64
}

func (h *histogram) record(d time.Duration) {
	d = max(d, 0)
	h.counts[histBucket(int64(d))].Add(1)
	h.sum.Add(int64(d))
}

// snapshot reads the histogram. It is not one consistent instant (a value
// being recorded may be in the sum and not yet in its bucket), which is
// fine for figures that are read while they grow.
func (h *histogram) snapshot() Histogram {
	var s Histogram
	for i := range h.counts {
		s.counts[i] = h.counts[i].Load()
	}
	s.sum = time.Duration(h.sum.Load())
	return s
}

// A Histogram is a snapshot of a distribution of durations: how long
// acquisitions waited, or grants were held. It keeps counts in fixed
// buckets on a log scale (four to a doubling, from 1 µs to about 19.5
// hours), so its quantiles are estimates, within about 10%. The zero value
// is an empty histogram.
type Histogram struct {
	counts [histBuckets]uint64
	sum    time.Duration
}

// Count returns the number of durations recorded.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// Sum returns the total of the durations recorded.
func (h Histogram) Sum() time.Duration { return h.sum }

// Mean returns the mean duration, or 0 for an empty histogram.
func (h Histogram) Mean() time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return h.sum / time.Duration(n)
}

// Quantile returns an estimate of the q-quantile (0 <= q <= 1) of the
// durations: Quantile(0.5) is the median, Quantile(0.99) the p99. The
// estimate interpolates within the bucket that holds the rank. It returns
// 0 for an empty histogram.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(n) // the rank-th smallest, counting from 1
	rank = max(rank, 1)
	var seen float64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := histBounds(i)
			frac := (rank - seen) / float64(c)
			return time.Duration(float64(lo) + frac*float64(hi-lo))
		}
		seen += float64(c)
	}
	lo, _ := histBounds(histBuckets - 1)
	return time.Duration(lo)
}

// Add returns the histogram of the durations of h and o together.
func (h Histogram) Add(o Histogram) Histogram {
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.sum += o.sum
	return h
}

// Sub returns the histogram of the durations recorded in h since o, an
// earlier snapshot of the same histogram.
func (h Histogram) Sub(o Histogram) Histogram {
	for i := range h.counts {
		h.counts[i] -= o.counts[i]
	}
	h.sum -= o.sum
	return h
}
