package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
)

// W8: several locks at once. One client takes 4 locks (2 write, 2 read)
// with LockAll and releases them together, ops cycles after warmup; then
// 4 clients each take the same 4 locks, in an order of their own each
// time, for the contention duration. One record, as the peers' harnesses
// write it: ops_per_s, the set's acquire and release times and the
// requests per set of the first part; contended_sets_per_s and deadlocks
// (a set not granted within 30 s; there must be none) of the second.

const w8Locks = 4

func benchMulti(b *testing.B) {
	s := sharedServers(b)
	p := params(b)
	std := p.ops == standard.ops && p.warmup == standard.warmup && p.duration == standard.duration
	var m metrics
	for b.Loop() {
		b.StopTimer()
		r := newRecord(workload("W8", std))
		runMultiOne(b, s, p, r, &m)
		runMultiContended(b, s, p, r, &m)
		emit(b, r)
		b.StartTimer()
	}
	m.report(b)
}

// w8Requests is a set of W8: locks 0 and 1 written, 2 and 3 read, in the
// order of perm.
func w8Requests(locks []*rwlock.RWLock, perm []int) []rwlock.Request {
	reqs := make([]rwlock.Request, len(perm))
	for j, i := range perm {
		mode := rwlock.Read
		if i < 2 {
			mode = rwlock.Write
		}
		reqs[j] = rwlock.Request{Lock: locks[i], Mode: mode}
	}
	return reqs
}

// releaseAll releases a set as its users are told to (LockAll's doc): with
// ReleaseAll, in one transaction.
func releaseAll(b *testing.B, ctx context.Context, grants []*rwlock.Grant) {
	if err := rwlock.ReleaseAll(ctx, grants...); err != nil {
		b.Error(err)
	}
}

func runMultiOne(b *testing.B, s *servers, p sizes, r *record, m *metrics) {
	ss := s.dial(b, 1)
	defer ss.close()
	root := lockPath("W8-1")
	locks := make([]*rwlock.RWLock, w8Locks)
	for i := range locks {
		locks[i] = ss.lock(b, 0, fmt.Sprintf("%s/%d", root, i))
	}
	ctx := context.Background()
	order := []int{0, 1, 2, 3}
	for range p.warmup {
		grants, err := rwlock.LockAll(ctx, w8Requests(locks, order)...)
		if err != nil {
			b.Fatal(err)
		}
		releaseAll(b, ctx, grants)
	}
	acq := make([]time.Duration, p.ops)
	rel := make([]time.Duration, p.ops)
	p0 := s.mustMntr(b, "zk_packets_received")
	start := now()
	for i := range p.ops {
		t0 := now()
		grants, err := rwlock.LockAll(ctx, w8Requests(locks, order)...)
		acq[i] = now() - t0
		if err != nil {
			b.Fatal(err)
		}
		t1 := now()
		releaseAll(b, ctx, grants)
		rel[i] = now() - t1
	}
	elapsed := now() - start
	p1 := s.mustMntr(b, "zk_packets_received")
	r.put("locks", w8Locks)
	r.put("ops", p.ops)
	r.put("ops_per_s", float64(p.ops)/elapsed.Seconds())
	r.put("acq_p50_us", pct(acq, 50))
	r.put("acq_p99_us", pct(acq, 99))
	r.put("rel_p50_us", pct(rel, 50))
	r.put("rel_p99_us", pct(rel, 99))
	req := r.reqPerAcq(s, p0, p1, 0, int64(p.ops)) // per set: its multi, listings and releases
	m.add("sets/s", float64(p.ops)/elapsed.Seconds())
	m.add("p50-us/set", pct(acq, 50))
	m.add("req/set", req)
}

func runMultiContended(b *testing.B, s *servers, p sizes, r *record, m *metrics) {
	const clients = 4
	ss := s.dial(b, clients)
	defer ss.close()
	root := lockPath("W8-4")
	ctx := context.Background()
	var sets, deadlocks atomic.Int64
	var x [w8Locks]checker
	deadline := now() + p.duration
	start := now()
	var wg sync.WaitGroup
	for c := range clients {
		locks := make([]*rwlock.RWLock, w8Locks)
		for i := range locks {
			locks[i] = ss.lock(b, c, fmt.Sprintf("%s/%d", root, i))
		}
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c)+1, 8))
			for now() < deadline {
				perm := rnd.Perm(w8Locks)
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				grants, err := rwlock.LockAll(tctx, w8Requests(locks, perm)...)
				cancel()
				if err != nil {
					if tctx.Err() != nil {
						deadlocks.Add(1)
						continue
					}
					b.Error(err)
					return
				}
				for _, i := range perm {
					x[i].enter(i < 2) // locks 0 and 1 are written
				}
				for _, i := range perm {
					x[i].leave(i < 2)
				}
				releaseAll(b, ctx, grants)
				sets.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := now() - start
	var violations int64
	for i := range x {
		violations += x[i].violations.Load()
	}
	r.put("contended_clients", clients)
	r.put("contended_sets", sets.Load())
	r.put("contended_sets_per_s", float64(sets.Load())/elapsed.Seconds())
	r.put("deadlocks", deadlocks.Load())
	r.put("violations", violations)
	if violations > 0 || deadlocks.Load() > 0 {
		b.Errorf("W8: %d violations, %d deadlocks", violations, deadlocks.Load())
	}
	m.add("contended-sets/s", float64(sets.Load())/elapsed.Seconds())
}
