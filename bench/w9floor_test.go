package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/lockname"
)

// W9-floor: what each shape of request costs W9's ensemble. The same
// sessions and directories as W9, and the same warm-up; then rounds of
// one phase per shape, each for the contention duration:
//
//   - pair: create, then delete (W9's raw pair);
//   - list: create, then a listing, then delete (Curator's uncontended
//     cycle, one request after another);
//   - piped: create with a watched listing sent right behind it, then
//     delete (a zkrwlock cycle's requests, without the lock);
//   - lock: zkrwlock's Lock and Release.
//
// Per shape, the median over the rounds after the first of operations/s
// and of the servers' CPU per operation. The servers' CPU is read from
// /proc, so it needs an ensemble the harness started: without one
// (ZKRWLOCK_BENCH_ENSEMBLE) the benchmark skips.

// floorShapes are W9-floor's phases, in the order each round runs them.
var floorShapes = []string{"pair", "list", "piped", "lock"}

// floorRounds are W9-floor's rounds. The first is left out of the medians:
// the servers' JIT still learns the shapes the warm-up did not send.
const floorRounds = 4

func benchFloor(b *testing.B) {
	s := ensembleServers(b)
	if s.cluster == nil {
		b.Skip("W9-floor reads the servers' CPU: it needs an ensemble of its own, not " + ensembleEnv)
	}
	p := params(b)
	std := p.duration == standard.duration && p.w9Clients == standard.w9Clients && p.w9Locks == standard.w9Locks
	name := workload("W9-floor", std)
	for b.Loop() {
		b.StopTimer()
		r, err := runFloor(b, s, p, name)
		emit(b, r)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func runFloor(b *testing.B, s *servers, p sizes, name string) (*record, error) {
	ss := s.dial(b, p.w9Clients)
	defer ss.close()
	root := lockPath(name)
	dirs := make([]string, p.w9Locks)
	for i := range dirs {
		dirs[i] = fmt.Sprintf("%s/%d", root, i)
	}
	if err := makeDirs(ss, root, dirs); err != nil {
		return nil, err
	}
	defer removeDirs(ss, root, dirs)
	clients := make([]*manyClient, len(ss.conns))
	for i, conn := range ss.conns {
		clients[i] = &manyClient{conn: conn, locks: make([]*rwlock.RWLock, len(dirs)), rnd: splitmix64{uint64(i + 1)}}
	}
	if err := warmManyLocks(clients, dirs, make([]checker, len(dirs))); err != nil {
		return nil, err
	}

	rates := map[string][]float64{}
	cpu := map[string][]float64{}
	reqs := map[string][]float64{}
	for round := range floorRounds {
		for _, shape := range floorShapes {
			n, elapsed, server, packets, err := runFloorPhase(s, clients, dirs, shape, p.duration)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", shape, err)
			}
			if round == 0 || n == 0 {
				continue
			}
			rates[shape] = append(rates[shape], float64(n)/elapsed.Seconds())
			cpu[shape] = append(cpu[shape], us(server)/float64(n))
			reqs[shape] = append(reqs[shape], float64(packets)/float64(n))
		}
	}
	r := newRecord(name)
	r.put("clients", len(clients))
	r.put("locks", len(dirs))
	r.put("phase_s", p.duration.Seconds())
	r.put("rounds", floorRounds-1)
	for _, shape := range floorShapes {
		r.put(shape+"_per_s", medianOf(rates[shape]))
		r.put(shape+"_server_cpu_us", medianOf(cpu[shape]))
		r.put(shape+"_req", medianOf(reqs[shape]))
		b.ReportMetric(medianOf(rates[shape]), shape+"/s")
		b.ReportMetric(medianOf(cpu[shape]), "server-us/"+shape)
	}
	return r, nil
}

// runFloorPhase runs every client in one shape for d. It returns the
// operations made, the time they took, the servers' CPU and the requests
// they received.
func runFloorPhase(s *servers, clients []*manyClient, dirs []string, shape string, d time.Duration) (n int64, elapsed, server time.Duration, packets int64, err error) {
	data := lockname.Data(owner, 0, lockname.Unmarked)
	acl := zk.WorldACL(zk.PermAll)
	flags := int32(zk.FlagEphemeral | zk.FlagSequence)
	counts := make([]int64, len(clients))
	errs := make([]error, len(clients))
	p0, err := s.mntr("zk_packets_received")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	sv0 := serverCPU(s.cluster.Dir())
	t0 := now()
	deadline := t0 + d
	var wg sync.WaitGroup
	for ci, c := range clients {
		wg.Go(func() {
			ctx := context.Background()
			for now() < deadline {
				i := int(c.rnd.next() * float64(len(dirs)))
				if shape == "lock" {
					l, err := c.lock(dirs, i)
					if err == nil {
						var g *rwlock.Grant
						if g, err = l.Lock(ctx); err == nil {
							err = g.Release(ctx)
						}
					}
					if err != nil {
						errs[ci] = err
						return
					}
					counts[ci]++
					continue
				}
				prefix := lockname.Prefix(dirs[i], lockname.NewGUID(), true, lockname.Native)
				var path string
				var err error
				switch shape {
				case "pair", "list":
					path, err = c.conn.Create(prefix, data, flags, acl)
					if err == nil && shape == "list" {
						_, _, err = c.conn.Children(dirs[i])
					}
				case "piped":
					// The create goes first; the listing is queued right
					// behind it, before its answer, as the lock sends them.
					sending, created := make(chan struct{}), make(chan struct{})
					go func() {
						close(sending)
						path, err = c.conn.Create(prefix, data, flags, acl)
						close(created)
					}()
					<-sending
					runtime.Gosched()
					// The watch's channel holds its one event: nobody need read it.
					_, _, _, lerr := c.conn.ChildrenW(dirs[i])
					<-created
					err = errors.Join(err, lerr)
				}
				if err == nil {
					err = c.conn.Delete(path, -1)
				}
				if err != nil {
					errs[ci] = err
					return
				}
				counts[ci]++
			}
		})
	}
	wg.Wait()
	elapsed = now() - t0
	server = serverCPU(s.cluster.Dir()) - sv0
	p1, err := s.mntr("zk_packets_received")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	for _, c := range counts {
		n += c
	}
	return n, elapsed, server, p1 - p0 - int64(len(s.addrs)), errors.Join(errs...)
}

// medianOf returns the median of vs; 0 for none.
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
