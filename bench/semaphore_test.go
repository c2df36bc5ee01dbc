package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/stats"
)

// W11, a bounded shared lock: 32 clients loop Acquire(1)/hold 1 ms/Release
// on one lock made WithCapacity(4), for 5 s. The holds set a ceiling of
// capacity/hold = 4,000 acquisitions/s, less the handoffs. Curator's
// InterProcessSemaphoreV2 runs the same in bench/peers.
const (
	w11Capacity   = 4
	w11Contenders = 32
	w11Hold       = time.Millisecond
)

// BenchmarkW11 is W11: 32 clients share 4 permits, each held 1 ms.
func BenchmarkW11(b *testing.B) {
	s := sharedServers(b)
	p := params(b)
	name := workload("W11", p.duration == standard.duration)
	b.ReportAllocs()
	var m metrics
	for b.Loop() {
		b.StopTimer()
		r, err := runSemaphore(b, s, p, name, &m)
		emit(b, r)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	m.report(b)
}

// permitChecker counts the permits held in the process: more than the
// capacity at once is a violation.
type permitChecker struct{ held, violations atomic.Int64 }

func (c *permitChecker) enter() {
	if c.held.Add(1) > w11Capacity {
		c.violations.Add(1)
	}
}

func (c *permitChecker) leave() { c.held.Add(-1) }

func runSemaphore(b *testing.B, s *servers, p sizes, name string, m *metrics) (*record, error) {
	path := lockPath(name)
	ss := s.dial(b, w11Contenders)
	defer ss.close()
	ctx := context.Background()
	var rec stats.Recorder
	locks := make([]*rwlock.RWLock, w11Contenders)
	for i := range locks {
		locks[i] = ss.lock(b, i, path, rwlock.WithCapacity(w11Capacity), rwlock.WithObserver(&rec))
		g, err := locks[i].Acquire(ctx, 1) // one unmeasured cycle per client (creates the lock dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}

	var chk permitChecker
	clients := make([]client, w11Contenders)
	start := make(chan struct{})
	var deadline time.Duration // written before start is closed
	var wg sync.WaitGroup
	for i := range clients {
		c := &clients[i]
		wg.Go(func() {
			<-start
			for now() < deadline {
				actx, cancel := context.WithTimeout(ctx, acquireTimeout)
				t0 := now()
				g, err := locks[i].Acquire(actx, 1)
				t1 := now()
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					c.timeouts++
					continue
				}
				if err != nil {
					c.err = err
					return
				}
				chk.enter()
				c.held += sleepPrecisely(w11Hold)
				chk.leave()
				t2 := now()
				if err := g.Release(ctx); err != nil {
					c.err = err
					return
				}
				c.acq, c.rel = append(c.acq, t1-t0), append(c.rel, now()-t2)
				c.count++
			}
		})
	}

	st0 := rec.Stats()
	p0 := s.mustMntr(b, "zk_packets_received")
	b.StartTimer()
	t0 := now()
	deadline = t0 + p.duration
	close(start)
	wg.Wait()
	elapsed := now() - t0
	b.StopTimer()
	p1 := s.mustMntr(b, "zk_packets_received")
	st := rec.Stats().Sub(st0)

	var total, timeouts int64
	var held time.Duration
	lo, hi := int64(math.MaxInt64), int64(0)
	var acq, rel []time.Duration
	var errs []error
	for _, c := range clients {
		total, timeouts, held = total+c.count, timeouts+c.timeouts, held+c.held
		lo, hi = min(lo, c.count), max(hi, c.count)
		acq, rel = append(acq, c.acq...), append(rel, c.rel...)
		if c.err != nil {
			errs = append(errs, c.err)
		}
	}
	ceiling := float64(w11Capacity) / w11Hold.Seconds()
	r := newRecord(name)
	r.put("clients", w11Contenders)
	r.put("capacity", w11Capacity)
	r.put("hold_ms", int(w11Hold/time.Millisecond))
	r.put("elapsed_s", elapsed.Seconds())
	r.put("acquisitions", total)
	r.put("acq_per_s", float64(total)/elapsed.Seconds())
	r.put("of_ceiling", float64(total)/elapsed.Seconds()/ceiling)
	r.put("per_client_min", lo)
	r.put("per_client_max", hi)
	r.put("hold_mean_us", float64(held.Microseconds())/float64(max(total, 1)))
	r.put("timeouts", timeouts)
	r.put("violations", chk.violations.Load())
	req := r.reqPerAcq(s, p0, p1, 0, total)
	r.relistsPerAcq(m, st, total)
	r.put("acq_p50_us", pct(acq, 50))
	r.put("acq_p99_us", pct(acq, 99))
	r.put("rel_p50_us", pct(rel, 50))
	r.put("rel_p99_us", pct(rel, 99))

	m.add("acquisitions/s", float64(total)/elapsed.Seconds())
	m.add("of-ceiling", float64(total)/elapsed.Seconds()/ceiling)
	m.add("min-per-client", float64(lo))
	m.add("max-per-client", float64(hi))
	m.add("timeouts", float64(timeouts))
	m.add("violations", float64(chk.violations.Load()))
	m.add("p50-us/acquire", pct(acq, 50))
	m.add("p99-us/acquire", pct(acq, 99))
	m.add("req/acquire", req)

	if v := chk.violations.Load(); v > 0 {
		errs = append(errs, fmt.Errorf("%d permits past the capacity", v))
	}
	if err := errors.Join(errs...); err != nil {
		r.put("error", err.Error())
		return r, err
	}
	return r, nil
}
