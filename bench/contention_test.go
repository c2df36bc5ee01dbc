package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/stats"
)

// W3, W4 and W5: 8 clients loop acquire/release on one lock for a while.

type mix int

const (
	onlyWrites mix = iota
	onlyReads
	mixed
)

func benchContention(b *testing.B, name string, mx mix, opts ...rwlock.Option) {
	s := sharedServers(b)
	p := params(b)
	name = workload(name, p.duration == standard.duration)
	b.ReportAllocs()
	var m metrics
	for b.Loop() {
		b.StopTimer()
		r, err := runContention(b, s, p, name, mx, &m, opts...)
		emit(b, r)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	m.report(b)
}

// client is one W3-W5 client's tally.
type client struct {
	count, timeouts, writes int64
	acq, rel                []time.Duration
	held                    time.Duration // the holds' total, as slept
	err                     error         // the first failure, after which it stopped
}

// runContention is one run. It returns an error, after which the benchmark
// fails, for violations and for failures other than acquire timeouts.
func runContention(b *testing.B, s *servers, p sizes, name string, mx mix, m *metrics, opts ...rwlock.Option) (*record, error) {
	path := lockPath(name)
	ss := s.dial(b, contenders)
	defer ss.close()
	ctx := context.Background()
	var rec stats.Recorder
	locks := make([]*rwlock.RWLock, contenders)
	for i := range locks {
		locks[i] = ss.lock(b, i, path, append([]rwlock.Option{rwlock.WithObserver(&rec)}, opts...)...)
		acquire := locks[i].Lock
		if mx == onlyReads {
			acquire = locks[i].RLock
		}
		g, err := acquire(ctx) // one unmeasured cycle per client (creates the lock dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}

	hold := time.Duration(0)
	if mx == mixed {
		hold = w5Hold
	}
	var chk checker
	clients := make([]client, contenders)
	start := make(chan struct{})
	var deadline time.Duration // written before start is closed
	var wg sync.WaitGroup
	for i := range clients {
		c := &clients[i]
		c.acq = make([]time.Duration, 0, 1<<14)
		c.rel = make([]time.Duration, 0, 1<<14)
		wg.Go(func() {
			rnd := splitmix64{uint64(i + 1)}
			<-start
			for now() < deadline {
				write := mx == onlyWrites || mx == mixed && rnd.next() >= w5ReadShare
				acquire := locks[i].RLock
				if write {
					acquire = locks[i].Lock
				}
				actx, cancel := context.WithTimeout(ctx, acquireTimeout)
				t0 := now()
				g, err := acquire(actx)
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
				chk.enter(write)
				if hold > 0 {
					c.held += sleepPrecisely(hold)
				}
				chk.leave(write)
				t2 := now()
				if err := g.Release(ctx); err != nil {
					c.err = err
					return
				}
				c.acq, c.rel = append(c.acq, t1-t0), append(c.rel, now()-t2)
				c.count++
				if write {
					c.writes++
				}
			}
		})
	}

	st0 := rec.Stats()
	p0 := s.mustMntr(b, "zk_packets_received")
	use := startUsage()
	b.StartTimer()
	t0 := now()
	deadline = t0 + p.duration
	close(start)
	wg.Wait()
	elapsed := now() - t0
	b.StopTimer()
	spent := use.since()
	p1 := s.mustMntr(b, "zk_packets_received")
	st := rec.Stats().Sub(st0)

	var total, writes, timeouts int64
	var held time.Duration
	lo, hi := int64(math.MaxInt64), int64(0)
	var acq, rel []time.Duration
	var errs []error
	for _, c := range clients {
		total, writes, timeouts = total+c.count, writes+c.writes, timeouts+c.timeouts
		held += c.held
		lo, hi = min(lo, c.count), max(hi, c.count)
		acq, rel = append(acq, c.acq...), append(rel, c.rel...)
		if c.err != nil {
			errs = append(errs, c.err)
		}
	}
	r := newRecord(name)
	r.put("clients", contenders)
	r.put("hold_ms", int(hold/time.Millisecond))
	r.put("elapsed_s", elapsed.Seconds())
	r.put("acquisitions", total)
	r.put("acq_per_s", float64(total)/elapsed.Seconds())
	r.put("per_client_min", lo)
	r.put("per_client_max", hi)
	if mx == mixed {
		r.put("writes", writes)
		r.put("hold_mean_us", float64(held.Microseconds())/float64(max(total, 1)))
	}
	r.put("timeouts", timeouts)
	r.put("violations", chk.violations.Load())
	req := r.reqPerAcq(s, p0, p1, 0, total)
	r.relistsPerAcq(m, st, total)
	r.put("acq_p50_us", pct(acq, 50))
	r.put("acq_p99_us", pct(acq, 99))
	r.put("rel_p50_us", pct(rel, 50))
	r.put("rel_p99_us", pct(rel, 99))
	r.usagePerAcq(m, spent, total)

	m.add("acquisitions/s", float64(total)/elapsed.Seconds())
	m.add("min-per-client", float64(lo))
	m.add("max-per-client", float64(hi))
	m.add("timeouts", float64(timeouts))
	m.add("violations", float64(chk.violations.Load()))
	m.add("p50-us/acquire", pct(acq, 50))
	m.add("p99-us/acquire", pct(acq, 99))
	m.add("p50-us/release", pct(rel, 50))
	m.add("p99-us/release", pct(rel, 99))
	m.add("req/acquire", req)
	if mx == mixed {
		m.add("writes", float64(writes))
		m.add("us/hold", float64(held.Microseconds())/float64(max(total, 1)))
	}

	if v := chk.violations.Load(); v > 0 {
		errs = append(errs, fmt.Errorf("%d mutual exclusion violations", v))
	}
	if err := errors.Join(errs...); err != nil {
		r.put("error", err.Error())
		return r, err
	}
	return r, nil
}
