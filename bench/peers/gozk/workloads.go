package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// uncontended is W1: one client, warm-up cycles, then measured
// Lock/Unlock cycles.
func (h *harness) uncontended(r *record) error {
	ss, err := h.dial(1)
	if err != nil {
		return err
	}
	defer closeAll(ss)
	l := zk.NewLock(ss[0].conn, lockPath("W1"), acl)
	for range h.sizes.warmup {
		if err := cycle(l); err != nil {
			return err
		}
	}
	ops := h.sizes.ops
	acq, rel := make([]time.Duration, ops), make([]time.Duration, ops)
	p0, err := h.mntr("zk_packets_received")
	if err != nil {
		return err
	}
	start := now()
	for i := range ops {
		t0 := now()
		if err := l.Lock(); err != nil {
			return err
		}
		t1 := now()
		if err := l.Unlock(); err != nil {
			return err
		}
		acq[i], rel[i] = t1-t0, now()-t1
	}
	elapsed := (now() - start).Seconds()
	p1, err := h.mntr("zk_packets_received")
	if err != nil {
		return err
	}
	r.put("clients", 1)
	r.put("warmup_cycles", h.sizes.warmup)
	r.put("ops", ops)
	r.put("elapsed_s", elapsed)
	r.put("ops_per_s", float64(ops)/elapsed)
	r.put("acq_p50_us", pct(acq, 50))
	r.put("acq_p99_us", pct(acq, 99))
	r.put("rel_p50_us", pct(rel, 50))
	r.put("rel_p99_us", pct(rel, 99))
	h.requests(r, p0, p1, 0, int64(ops))
	return nil
}

func cycle(l *zk.Lock) error {
	if err := l.Lock(); err != nil {
		return err
	}
	return l.Unlock()
}

// contended is W3: 8 clients loop Lock/Unlock, holding for no time, until
// the run time is up. zk.Lock has no timeout, so none is counted.
func (h *harness) contended(r *record) error {
	ss, err := h.dial(contenders)
	if err != nil {
		return err
	}
	defer closeAll(ss)
	path := lockPath("W3")
	locks := make([]*zk.Lock, len(ss))
	for i, s := range ss {
		locks[i] = zk.NewLock(s.conn, path, acl)
		if err := cycle(locks[i]); err != nil { // unmeasured; creates the lock's parents
			return err
		}
	}

	var x holders
	counts := make([]int64, len(ss))
	errs := make([]error, len(ss))
	start := make(chan struct{})
	var deadline time.Duration // set before start is closed
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			<-start
			for now() < deadline {
				if err := l.Lock(); err != nil {
					errs[i] = err
					return
				}
				x.enter()
				x.leave()
				if err := l.Unlock(); err != nil {
					errs[i] = err
					return
				}
				counts[i]++
			}
		})
	}
	p0, err := h.mntr("zk_packets_received")
	if err != nil {
		close(start) // deadline 0: the clients stop at once
		wg.Wait()
		return err
	}
	t0 := now()
	deadline = t0 + h.sizes.duration
	close(start)
	wg.Wait()
	elapsed := (now() - t0).Seconds()
	p1, err := h.mntr("zk_packets_received")
	if err != nil {
		return err
	}

	var total int64
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, n := range counts {
		total += n
		lo, hi = min(lo, n), max(hi, n)
	}
	r.put("clients", len(ss))
	r.put("hold_ms", 0)
	r.put("elapsed_s", elapsed)
	r.put("acquisitions", total)
	r.put("acq_per_s", float64(total)/elapsed)
	r.put("per_client_min", lo)
	r.put("per_client_max", hi)
	r.put("timeouts", 0)
	r.put("violations", x.count())
	h.requests(r, p0, p1, 0, total)
	return errors.Join(errs...)
}

// drain is W6: a writer holds the lock while the other sessions each queue
// one Lock; once every waiter's node exists and the server counts a watch
// for each, the holder releases, and the queue drains. An unmeasured round
// on another path comes first, on the same sessions.
func (h *harness) drain(r *record) error {
	n := h.sizes.waiters
	ss, err := h.dial(n + 1)
	if err != nil {
		return err
	}
	defer closeAll(ss)
	path := lockPath(h.sizes.name("W6"))
	var x holders // counts over both rounds
	if err := h.drainRound(newRecord("warm-up"), ss, path+"-warmup", &x); err != nil {
		return fmt.Errorf("warm-up round: %w", err)
	}
	return h.drainRound(r, ss, path, &x)
}

func (h *harness) drainRound(r *record, ss []session, path string, x *holders) error {
	n := len(ss) - 1
	holder := zk.NewLock(ss[0].conn, path, acl)
	if err := holder.Lock(); err != nil {
		return err
	}
	x.enter()
	watch0, err := h.mntr("zk_watch_count")
	if err != nil {
		return err
	}
	p0, err := h.mntr("zk_packets_received")
	if err != nil {
		return err
	}

	acqT, relT := make([]time.Duration, n), make([]time.Duration, n)
	errs := make([]error, n)
	tq := now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l := zk.NewLock(ss[i+1].conn, path, acl)
			if err := l.Lock(); err != nil {
				errs[i] = err
				return
			}
			acqT[i] = now()
			x.enter()
			x.leave()
			relT[i] = now()
			errs[i] = l.Unlock()
		})
	}

	// The holder's listings and the mntr polls are not the workload's
	// requests: count them, to subtract them.
	var polls, mntrPolls int64
	for {
		children, _, err := ss[0].conn.Children(path)
		polls++
		if err != nil {
			return err // the waiters hang: the watchdog ends the process
		}
		if len(children) >= n+1 {
			break
		}
		time.Sleep(pollEvery)
	}
	for watchDeadline := now() + watchTimeout; ; {
		w, err := h.mntr("zk_watch_count")
		mntrPolls++
		if err != nil {
			return err
		}
		if w-watch0 >= int64(n) || now() >= watchDeadline {
			break
		}
		time.Sleep(pollEvery)
	}
	x.leave()
	tRel := now()
	if err := holder.Unlock(); err != nil {
		return err
	}
	wg.Wait()
	p1, err := h.mntr("zk_packets_received")
	if err != nil {
		return err
	}

	var failed int
	var last time.Duration
	var order []int // the waiters that held, in the order they did
	for i := range n {
		if errs[i] != nil || acqT[i] == 0 {
			failed++
			continue
		}
		order = append(order, i)
		last = max(last, relT[i])
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(acqT[a], acqT[b]) })
	handoffs := make([]time.Duration, 0, len(order))
	prev := tRel
	for _, i := range order {
		handoffs = append(handoffs, acqT[i]-prev)
		prev = relT[i]
	}
	r.put("waiters", n)
	r.put("enqueue_s", (tRel - tq).Seconds())
	r.put("failed", failed)
	r.put("drain_s", (last - tRel).Seconds())
	r.put("handoff_mean_us", mean(handoffs))
	r.put("handoff_p50_us", pct(handoffs, 50))
	r.put("handoff_p99_us", pct(handoffs, 99))
	r.put("violations", x.count())
	h.requests(r, p0, p1, polls+mntrPolls*int64(len(h.servers)), int64(n))
	return errors.Join(errs...)
}
