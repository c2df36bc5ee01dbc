package bench

import (
	"context"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/stats"
)

// W1 and W2: one client, acquire/release cycles without contention.

func benchUncontended(b *testing.B, name string, mode rwlock.Mode, opts ...rwlock.Option) {
	s := sharedServers(b)
	p := params(b)
	name = workload(name, p.ops == standard.ops && p.warmup == standard.warmup)
	b.ReportAllocs()
	var m metrics
	for b.Loop() {
		b.StopTimer()
		emit(b, runUncontended(b, s, p, name, mode, &m, opts...))
		b.StartTimer()
	}
	m.report(b)
}

// runUncontended is one run, with the timer stopped except for the
// measured cycles.
func runUncontended(b *testing.B, s *servers, p sizes, name string, mode rwlock.Mode, m *metrics, opts ...rwlock.Option) *record {
	ss := s.dial(b, 1)
	defer ss.close()
	var rec stats.Recorder
	l := ss.lock(b, 0, lockPath(name), append([]rwlock.Option{rwlock.WithObserver(&rec)}, opts...)...)
	acquire := l.Lock
	if mode == rwlock.Read {
		acquire = l.RLock
	}
	ctx := context.Background() // the peers' W1/W2 have no timeout
	for range p.warmup {
		g, err := acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}

	acq, rel := make([]time.Duration, p.ops), make([]time.Duration, p.ops)
	st0 := rec.Stats()
	p0 := s.mustMntr(b, "zk_packets_received")
	use := startUsage()
	b.StartTimer()
	start := now()
	for i := range p.ops {
		t0 := now()
		g, err := acquire(ctx)
		t1 := now()
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := now()
		acq[i], rel[i] = t1-t0, t2-t1
	}
	elapsed := now() - start
	b.StopTimer()
	spent := use.since()
	p1 := s.mustMntr(b, "zk_packets_received")
	st := rec.Stats().Sub(st0)
	oneTrip := float64(st.Read.OneRoundTrip+st.Write.OneRoundTrip) / float64(st.Granted())

	r := newRecord(name)
	r.put("clients", 1)
	r.put("warmup_cycles", p.warmup)
	r.put("ops", p.ops)
	r.put("elapsed_s", elapsed.Seconds())
	r.put("ops_per_s", float64(p.ops)/elapsed.Seconds())
	r.put("acq_p50_us", pct(acq, 50))
	r.put("acq_p99_us", pct(acq, 99))
	r.put("rel_p50_us", pct(rel, 50))
	r.put("rel_p99_us", pct(rel, 99))
	req := r.reqPerAcq(s, p0, p1, 0, int64(p.ops))
	r.put("one_round_trip_share", oneTrip) // from the lock's events (stats.Recorder)
	r.usagePerAcq(m, spent, int64(p.ops))

	m.add("cycles/s", float64(p.ops)/elapsed.Seconds())
	m.add("p50-us/acquire", pct(acq, 50))
	m.add("p99-us/acquire", pct(acq, 99))
	m.add("p50-us/release", pct(rel, 50))
	m.add("p99-us/release", pct(rel, 99))
	m.add("req/acquire", req)
	m.add("one-round-trip-share", oneTrip)
	return r
}
