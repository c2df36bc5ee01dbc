package delayproxy

import (
	"sync/atomic"
	"time"
)

// Stats describe how late the proxy wrote the chunks it forwarded: a
// chunk is due its delay after it was read, and is written some time after
// that, the time it takes the kernel and the runtime to wake the
// goroutine (tens of microseconds on an idle machine, more on a busy one),
// or longer when the receiver does not keep up.
type Stats struct {
	Chunks   int64         // chunks written
	Bytes    int64         // their bytes
	Mean     time.Duration // mean lateness
	P50, P99 time.Duration // percentiles of the lateness, to 10 µs
	Max      time.Duration
}

const (
	bucketWidth = 10 * time.Microsecond
	buckets     = 1000 // up to 10 ms; later goes in the last
)

// lateness counts chunks by lateness, lock-free: every pump writes to it.
type lateness struct {
	chunks, bytes, total, max atomic.Int64
	hist                      [buckets]atomic.Int64
}

func (l *lateness) record(late time.Duration, n int) {
	late = max(late, 0)
	l.chunks.Add(1)
	l.bytes.Add(int64(n))
	l.total.Add(int64(late))
	for m := l.max.Load(); int64(late) > m && !l.max.CompareAndSwap(m, int64(late)); m = l.max.Load() {
	}
	l.hist[min(int(late/bucketWidth), buckets-1)].Add(1)
}

func (l *lateness) stats() Stats {
	s := Stats{Chunks: l.chunks.Load(), Bytes: l.bytes.Load(), Max: time.Duration(l.max.Load())}
	if s.Chunks == 0 {
		return s
	}
	s.Mean = time.Duration(l.total.Load() / s.Chunks)
	var counts [buckets]int64
	var n int64
	for i := range counts {
		counts[i] = l.hist[i].Load()
		n += counts[i]
	}
	s.P50, s.P99 = percentile(counts[:], n, 0.50), percentile(counts[:], n, 0.99)
	return s
}

// percentile returns the upper edge of the bucket that holds the
// nearest-rank percentile p of n counts.
func percentile(counts []int64, n int64, p float64) time.Duration {
	rank := int64(p*float64(n) + 0.999999)
	var seen int64
	for i, c := range counts {
		if seen += c; seen >= max(rank, 1) {
			return time.Duration(i+1) * bucketWidth
		}
	}
	return time.Duration(len(counts)) * bucketWidth
}
