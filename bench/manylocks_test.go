package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/stats"
)

// W9: many locks on a 3-node ensemble. 64 sessions over 1,000 locks, each
// cycle a write acquire and release of a lock drawn at random. Beside them,
// the same sessions make raw pairs: a node of the lock's own kind (name,
// data, ACL, ephemeral sequential) created in a lock's directory and
// deleted, with no lock protocol. A write cycle cannot cost less than one
// create and one delete, so lock cycles/s over raw pairs/s says how close
// the lock runs to the ensemble's write ceiling.
//
// One run: the sessions; the directories, made by the harness as
// persistent nodes, as a user's locks would find them; then every session
// takes every lock once, unmeasured. That warms the servers' JIT. It also
// leaves out of the measure each session's first acquisition in each
// directory, which checks the DELETE permission (once per directory and
// connection: directory.go).
// Then four measured phases of the contention duration: raw, lock, lock,
// raw, so that a drift of the machine over the run weighs on both sides.

// manyPhases are W9's measured phases in order: true for a lock phase.
var manyPhases = []bool{false, true, true, false}

func benchManyLocks(b *testing.B) {
	s := ensembleServers(b)
	p := params(b)
	std := p.duration == standard.duration && p.w9Clients == standard.w9Clients && p.w9Locks == standard.w9Locks
	name := workload("W9", std)
	var m metrics
	for b.Loop() {
		b.StopTimer()
		r, err := runManyLocks(b, s, p, name, &m)
		emit(b, r)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	m.report(b)
}

// manyClient is one W9 session.
type manyClient struct {
	conn  *zk.Conn
	locks []*rwlock.RWLock // by lock index, each made at its first use, then reused
	rnd   splitmix64       // which lock each cycle takes, over all phases
	opts  []rwlock.Option
}

func (c *manyClient) lock(dirs []string, i int) (*rwlock.RWLock, error) {
	if c.locks[i] == nil {
		l, err := rwlock.New(c.conn, dirs[i], c.opts...)
		if err != nil {
			return nil, err
		}
		c.locks[i] = l
	}
	return c.locks[i], nil
}

// manyTally is one client's count in one phase.
type manyTally struct {
	count, timeouts int64
	first, second   []time.Duration // acquire and release, or create and delete
	err             error           // the first failure, after which it stopped
}

// manyPhase is one measured phase of every client.
type manyPhase struct {
	lock            bool
	count, timeouts int64
	lo, hi          int64 // the least and most cycles a client made
	first, second   []time.Duration
	elapsed         time.Duration
	packets         int64
	spent           usage
	gcs             uint32        // the client's garbage collections
	server          time.Duration // the servers' CPU, when the harness started them; else 0
	watches         int64         // the servers' zk_watch_count at its end
	t0, t1          cpuTicks
}

// runManyLocks is one run. It returns an error, after which the benchmark
// fails, for violations and for failures other than acquire timeouts.
func runManyLocks(b *testing.B, s *servers, p sizes, name string, m *metrics) (*record, error) {
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
	defer removeDirs(ss, root, dirs) // before the sessions close: deferred later

	var rec stats.Recorder
	clients := make([]*manyClient, len(ss.conns))
	for i, conn := range ss.conns {
		clients[i] = &manyClient{
			conn: conn, locks: make([]*rwlock.RWLock, len(dirs)),
			rnd: splitmix64{uint64(i + 1)}, opts: []rwlock.Option{rwlock.WithObserver(&rec)},
		}
	}
	chk := make([]checker, len(dirs))

	w0 := s.mustMntr(b, "zk_packets_received")
	tw := now()
	if err := warmManyLocks(clients, dirs, chk); err != nil {
		return nil, err
	}
	warm := now() - tw
	w1 := s.mustMntr(b, "zk_packets_received")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	st0 := rec.Stats()
	var phases []manyPhase
	var errs []error
	// Per lock phase, the lock's own counts: the share of grants made from
	// the listing behind the create, and its requests per acquisition.
	var oneTrip, libReq []float64
	for _, lock := range manyPhases {
		s0 := rec.Stats()
		ph, err := runManyPhase(b, s, clients, dirs, lock, p.duration, chk)
		if err != nil {
			errs = append(errs, err)
			break
		}
		phases = append(phases, ph)
		if d := rec.Stats().Sub(s0); lock && d.Write.Granted > 0 {
			oneTrip = append(oneTrip, math.Round(1000*float64(d.Write.OneRoundTrip)/float64(d.Write.Granted))/1000)
			libReq = append(libReq, math.Round(100*float64(d.Requests)/float64(d.Write.Granted))/100)
		}
	}
	st := rec.Stats().Sub(st0)

	// The sums of the lock phases and of the raw phases.
	var lk, raw manyPhase
	lk.lo, raw.lo = math.MaxInt64, math.MaxInt64
	var rates, reqs, cpus, servers []float64
	var gcs []uint32
	var watches []int64
	for _, ph := range phases {
		rates = append(rates, math.Round(float64(ph.count)/ph.elapsed.Seconds()))
		n := float64(max(ph.count, 1))
		reqs = append(reqs, math.Round(100*float64(ph.packets)/n)/100)
		cpus = append(cpus, math.Round(us(ph.spent.cpu)/n))
		servers = append(servers, math.Round(us(ph.server)/n))
		gcs = append(gcs, ph.gcs)
		watches = append(watches, ph.watches)
		sum := &raw
		if ph.lock {
			sum = &lk
		}
		sum.count, sum.timeouts = sum.count+ph.count, sum.timeouts+ph.timeouts
		sum.lo, sum.hi = min(sum.lo, ph.lo), max(sum.hi, ph.hi)
		sum.first, sum.second = append(sum.first, ph.first...), append(sum.second, ph.second...)
		sum.elapsed += ph.elapsed
		sum.packets += ph.packets
		sum.spent = usage{sum.spent.mallocs + ph.spent.mallocs, sum.spent.bytes + ph.spent.bytes, sum.spent.cpu + ph.spent.cpu}
		sum.t0 = cpuTicks{sum.t0.busy + ph.t0.busy, sum.t0.all + ph.t0.all}
		sum.t1 = cpuTicks{sum.t1.busy + ph.t1.busy, sum.t1.all + ph.t1.all}
	}
	rate := func(ph manyPhase) float64 {
		if ph.elapsed == 0 {
			return 0
		}
		return float64(ph.count) / ph.elapsed.Seconds()
	}
	per := func(v float64, n int64) any {
		if n <= 0 {
			return nil
		}
		return v / float64(n)
	}
	var violations int64
	for i := range chk {
		violations += chk[i].violations.Load()
	}

	r := newRecord(name)
	r.put("clients", len(clients))
	r.put("locks", len(dirs))
	r.put("servers", len(s.addrs))
	r.put("phase_s", p.duration.Seconds())
	r.put("phases", []string{"raw", "lock", "lock", "raw"})
	r.put("phase_rates", rates)
	r.put("phase_req_per_op", reqs)
	r.put("phase_client_cpu_us_per_op", cpus)
	r.put("phase_gcs", gcs)
	r.put("phase_end_watches", watches)
	if s.cluster != nil {
		r.put("phase_server_cpu_us_per_op", servers)
	}
	r.put("lock_phase_one_round_trip_share", oneTrip)
	r.put("lock_phase_lib_req_per_acq", libReq)
	r.put("warmup_s", warm.Seconds())
	r.put("warmup_cycles_per_s", float64(len(clients)*len(dirs))/warm.Seconds())
	r.put("warmup_req_per_acq", per(float64(w1-w0-int64(len(s.addrs))), int64(len(clients)*len(dirs))))
	r.put("client_heap_mb", float64(ms.HeapAlloc)/(1<<20))
	r.put("elapsed_s", lk.elapsed.Seconds())
	r.put("acquisitions", lk.count)
	r.put("cycles_per_s", rate(lk))
	r.put("raw_pairs", raw.count)
	r.put("raw_pairs_per_s", rate(raw))
	if rate(raw) > 0 {
		r.put("lock_over_raw", rate(lk)/rate(raw))
	}
	r.put("per_client_min", lk.lo)
	r.put("per_client_max", lk.hi)
	r.put("timeouts", lk.timeouts)
	r.put("violations", violations)
	r.put("acq_p50_us", pct(lk.first, 50))
	r.put("acq_p99_us", pct(lk.first, 99))
	r.put("rel_p50_us", pct(lk.second, 50))
	r.put("rel_p99_us", pct(lk.second, 99))
	r.put("create_p50_us", pct(raw.first, 50))
	r.put("create_p99_us", pct(raw.first, 99))
	r.put("delete_p50_us", pct(raw.second, 50))
	r.put("delete_p99_us", pct(raw.second, 99))
	r.put("zk_packets", lk.packets)
	r.put("zk_req_per_acq", per(float64(lk.packets), lk.count))
	r.put("zk_req_per_pair", per(float64(raw.packets), raw.count))
	r.relistsPerAcq(m, st, lk.count)
	r.put("machine_busy", busyShare(lk.t0, lk.t1))
	r.put("raw_machine_busy", busyShare(raw.t0, raw.t1))
	r.put("client_cpu_us_per_acq", per(us(lk.spent.cpu), lk.count))
	r.put("client_cpu_us_per_pair", per(us(raw.spent.cpu), raw.count))
	r.put("allocs_per_acq", per(float64(lk.spent.mallocs), lk.count))

	m.add("cycles/s", rate(lk))
	m.add("raw-pairs/s", rate(raw))
	if rate(raw) > 0 {
		m.add("lock/raw", rate(lk)/rate(raw))
	}
	m.add("p50-us/acquire", pct(lk.first, 50))
	m.add("timeouts", float64(lk.timeouts))
	m.add("violations", float64(violations))

	if violations > 0 {
		errs = append(errs, fmt.Errorf("%d mutual exclusion violations", violations))
	}
	if err := errors.Join(errs...); err != nil {
		r.put("error", err.Error())
		return r, err
	}
	return r, nil
}

// runManyPhase runs every client for d: lock cycles, or raw pairs. The
// timer runs during the phase only.
func runManyPhase(b *testing.B, s *servers, clients []*manyClient, dirs []string, lock bool, d time.Duration, chk []checker) (manyPhase, error) {
	ph := manyPhase{lock: lock, lo: math.MaxInt64}
	p0, err := s.mntr("zk_packets_received")
	if err != nil {
		return ph, err
	}
	data := lockname.Data(owner, 0, lockname.Unmarked) // a lock node's, as rwlock.New makes it
	acl := zk.WorldACL(zk.PermAll)
	tallies := make([]manyTally, len(clients))
	start := make(chan struct{})
	var deadline time.Duration // written before start is closed
	var wg sync.WaitGroup
	for ci, c := range clients {
		t := &tallies[ci]
		t.first = make([]time.Duration, 0, 1<<10)
		t.second = make([]time.Duration, 0, 1<<10)
		wg.Go(func() {
			ctx := context.Background()
			<-start
			for now() < deadline {
				i := int(c.rnd.next() * float64(len(dirs)))
				if !lock {
					t0 := now()
					path, err := c.conn.Create(lockname.Prefix(dirs[i], lockname.NewGUID(), true, lockname.Native),
						data, zk.FlagEphemeral|zk.FlagSequence, acl)
					t1 := now()
					if err == nil {
						err = c.conn.Delete(path, -1)
					}
					if err != nil {
						t.err = fmt.Errorf("raw pair in %s: %w", dirs[i], err)
						return
					}
					t.first, t.second = append(t.first, t1-t0), append(t.second, now()-t1)
					t.count++
					continue
				}
				l, err := c.lock(dirs, i)
				if err != nil {
					t.err = err
					return
				}
				actx, cancel := context.WithTimeout(ctx, acquireTimeout)
				t0 := now()
				g, err := l.Lock(actx)
				t1 := now()
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					t.timeouts++
					continue
				}
				if err != nil {
					t.err = err
					return
				}
				chk[i].enter(true)
				chk[i].leave(true)
				t2 := now()
				if err := g.Release(ctx); err != nil {
					t.err = err
					return
				}
				t.first, t.second = append(t.first, t1-t0), append(t.second, now()-t2)
				t.count++
			}
		})
	}
	ph.t0 = machineTicks()
	gc0 := numGC()
	var sv0 time.Duration
	if s.cluster != nil {
		sv0 = serverCPU(s.cluster.Dir())
	}
	use := startUsage()
	b.StartTimer()
	t0 := now()
	deadline = t0 + d
	close(start)
	wg.Wait()
	ph.elapsed = now() - t0
	b.StopTimer()
	ph.spent = use.since()
	ph.gcs = numGC() - gc0
	if s.cluster != nil {
		ph.server = serverCPU(s.cluster.Dir()) - sv0
	}
	ph.t1 = machineTicks()
	p1, err := s.mntr("zk_packets_received")
	if err != nil {
		return ph, err
	}
	ph.packets = p1 - p0 - int64(len(s.addrs))
	if ph.watches, err = s.mntr("zk_watch_count"); err != nil {
		return ph, err
	}
	var errs []error
	for _, t := range tallies {
		ph.count, ph.timeouts = ph.count+t.count, ph.timeouts+t.timeouts
		ph.lo, ph.hi = min(ph.lo, t.count), max(ph.hi, t.count)
		ph.first, ph.second = append(ph.first, t.first...), append(ph.second, t.second...)
		if t.err != nil {
			errs = append(errs, t.err)
		}
	}
	return ph, errors.Join(errs...)
}

// warmManyLocks is W9's warm-up: client c takes every lock once, from lock
// c*locks/clients on, so that the clients start apart.
func warmManyLocks(clients []*manyClient, dirs []string, chk []checker) error {
	var eg errgroup.Group
	for ci, c := range clients {
		eg.Go(func() error {
			ctx := context.Background()
			for k := range dirs {
				i := (ci*len(dirs)/len(clients) + k) % len(dirs)
				l, err := c.lock(dirs, i)
				if err != nil {
					return err
				}
				g, err := l.Lock(ctx)
				if err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
				chk[i].enter(true)
				chk[i].leave(true)
				if err := g.Release(ctx); err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// owner is the owner text rwlock.New writes into its nodes by default,
// host:pid, so that a raw pair's node carries the same bytes.
var owner = func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}()

// makeDirs makes W9's lock directories and their parents, as persistent
// nodes, spreading the creates over the sessions.
func makeDirs(ss *sessions, root string, dirs []string) error {
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{parentOf(parentOf(root)), parentOf(root), root} {
		if _, err := ss.conns[0].Create(p, nil, zk.FlagPersistent, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("W9: make %s: %w", p, err)
		}
	}
	var eg errgroup.Group
	eg.SetLimit(len(ss.conns))
	for i, dir := range dirs {
		eg.Go(func() error {
			if _, err := ss.conns[i%len(ss.conns)].Create(dir, nil, zk.FlagPersistent, acl); err != nil {
				return fmt.Errorf("W9: make %s: %w", dir, err)
			}
			return nil
		})
	}
	return eg.Wait()
}

// removeDirs deletes W9's lock directories and their root after a run, so
// that the servers' tree does not grow from run to run. A failure leaves
// them: nothing measured depends on it.
func removeDirs(ss *sessions, root string, dirs []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, len(ss.conns))
	for i, dir := range dirs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ss.conns[i%len(ss.conns)].Delete(dir, -1)
		})
	}
	wg.Wait()
	ss.conns[0].Delete(root, -1)
}

// parentOf returns the parent of an absolute path below the root.
func parentOf(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

// numGC is the number of garbage collections the process has completed.
func numGC() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}
