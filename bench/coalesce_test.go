package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
)

// W7: 64 goroutines of one process, each RLock then Release on one
// uncontended lock, in bursts (as many as RB32's batches, after a tenth as
// many warm-up bursts): with WithReadCoalescing (W7) they share one node;
// without it (W7-each) each makes its own, as the peers' threads do.

const burstReaders = 64

func benchBurst(b *testing.B, name string, coalesce bool) {
	s := sharedServers(b)
	p := params(b)
	b.ReportAllocs()
	var m metrics
	for b.Loop() {
		b.StopTimer()
		emit(b, runBurst(b, s, p, name, coalesce, &m))
		b.StartTimer()
	}
	m.report(b)
}

func runBurst(b *testing.B, s *servers, p sizes, name string, coalesce bool, m *metrics) *record {
	ss := s.dial(b, 1)
	defer ss.close()
	var opts []rwlock.Option
	if coalesce {
		opts = append(opts, rwlock.WithReadCoalescing())
	}
	l := ss.lock(b, 0, lockPath(name), opts...)
	ctx := context.Background()
	// The goroutines wait at a start line, so that the burst's reads are
	// concurrent, as a config reload's are.
	burst := func() error {
		var ready sync.WaitGroup
		ready.Add(burstReaders)
		start := make(chan struct{})
		var eg errgroup.Group
		for range burstReaders {
			eg.Go(func() error {
				ready.Done()
				<-start
				g, err := l.RLock(ctx)
				if err != nil {
					return err
				}
				return g.Release(ctx)
			})
		}
		ready.Wait()
		close(start)
		return eg.Wait()
	}
	warmup := max(p.batches/10, 1)
	for range warmup {
		if err := burst(); err != nil {
			b.Fatal(err)
		}
	}

	lat := make([]time.Duration, p.batches)
	p0 := s.mustMntr(b, "zk_packets_received")
	use := startUsage()
	b.StartTimer()
	start := now()
	for i := range lat {
		t0 := now()
		if err := burst(); err != nil {
			b.Fatal(err)
		}
		lat[i] = now() - t0
	}
	elapsed := now() - start
	b.StopTimer()
	spent := use.since()
	p1 := s.mustMntr(b, "zk_packets_received")

	grants := int64(p.batches) * burstReaders
	r := newRecord(workload(name, p.batches == standard.batches))
	r.put("clients", 1)
	r.put("goroutines", burstReaders)
	r.put("coalesced", coalesce)
	r.put("warmup_bursts", warmup)
	r.put("bursts", p.batches)
	r.put("elapsed_s", elapsed.Seconds())
	r.put("bursts_per_s", float64(p.batches)/elapsed.Seconds())
	r.put("burst_p50_us", pct(lat, 50))
	r.put("burst_p99_us", pct(lat, 99))
	perGrant := r.reqPerAcq(s, p0, p1, 0, grants)
	perBurst := perGrant * burstReaders
	r.put("zk_req_per_burst", perBurst)
	r.usagePerAcq(m, spent, grants)

	m.add("bursts/s", float64(p.batches)/elapsed.Seconds())
	m.add("p50-us/burst", pct(lat, 50))
	m.add("p99-us/burst", pct(lat, 99))
	m.add("req/burst", perBurst)
	return r
}
