package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
)

// RB32 and RL32: 32 read functions under one grant or a grant each.

type batchKind int

const (
	oneGrant batchKind = iota
	grantEach
)

func benchBatch(b *testing.B, name string, kind batchKind) {
	s := sharedServers(b)
	p := params(b)
	b.ReportAllocs()
	var m metrics
	for b.Loop() {
		b.StopTimer()
		emit(b, runBatch(b, s, p, name, kind, &m))
		b.StartTimer()
	}
	m.report(b)
}

func runBatch(b *testing.B, s *servers, p sizes, name string, kind batchKind, m *metrics) *record {
	ss := s.dial(b, 1)
	defer ss.close()
	l := ss.lock(b, 0, lockPath(name))
	ctx := context.Background()
	var fns []func(context.Context) error
	for range batchFns {
		fns = append(fns, func(context.Context) error { return nil })
	}
	batch := func() error {
		if kind == oneGrant {
			return l.ReadBatch(ctx, fns...)
		}
		return readEach(ctx, l, fns)
	}
	warmup := max(p.batches/10, 1)
	for range warmup {
		if err := batch(); err != nil {
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
		if err := batch(); err != nil {
			b.Fatal(err)
		}
		lat[i] = now() - t0
	}
	elapsed := now() - start
	b.StopTimer()
	spent := use.since()
	p1 := s.mustMntr(b, "zk_packets_received")

	grants := int64(p.batches)
	if kind == grantEach {
		grants *= batchFns
	}
	r := newRecord(workload(name, p.batches == standard.batches))
	r.put("clients", 1)
	r.put("fns", batchFns)
	r.put("grants_per_batch", grants/int64(p.batches))
	r.put("warmup_batches", warmup)
	r.put("batches", p.batches)
	r.put("elapsed_s", elapsed.Seconds())
	r.put("batches_per_s", float64(p.batches)/elapsed.Seconds())
	r.put("batch_p50_us", pct(lat, 50))
	r.put("batch_p99_us", pct(lat, 99))
	perGrant := r.reqPerAcq(s, p0, p1, 0, grants)
	perBatch := perGrant * float64(grants) / float64(p.batches)
	r.put("zk_req_per_batch", perBatch)
	r.usagePerAcq(m, spent, grants)
	r.put("allocs_per_batch", float64(spent.mallocs)/float64(p.batches))
	r.put("client_cpu_us_per_batch", us(spent.cpu)/float64(p.batches))

	m.add("batches/s", float64(p.batches)/elapsed.Seconds())
	m.add("p50-us/batch", pct(lat, 50))
	m.add("p99-us/batch", pct(lat, 99))
	m.add("req/batch", perBatch)
	m.add("allocs/batch", float64(spent.mallocs)/float64(p.batches))
	m.add("cpu-us/batch", us(spent.cpu)/float64(p.batches))
	return r
}

// readEach runs each function under a read grant of its own, concurrently.
func readEach(ctx context.Context, l *rwlock.RWLock, fns []func(context.Context) error) error {
	var eg errgroup.Group
	for _, fn := range fns {
		eg.Go(func() error {
			g, err := l.RLock(ctx)
			if err != nil {
				return err
			}
			return errors.Join(fn(ctx), g.Release(ctx))
		})
	}
	return eg.Wait()
}
