package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/stats"
)

// The scale series (issue 33): memory per connection, readers granted
// together, and drains to 10,000 waiters. They are too big for make bench
// and for a shared machine, so they run only with -bench.scale:
//
//	go test -run '^$' -bench 'Scale' -benchtime 1x -timeout 120m ./bench/ -bench.scale -bench.json=FILE
//
// Their sizes are flags; the defaults are BENCHMARKS.md's series.

var (
	flagScale            = flag.Bool("bench.scale", false, "run the scale series (BenchmarkScale*), which are skipped without it")
	flagScaleIdle        = flag.Int("bench.scale.idle", 200, "BenchmarkScaleMemory: idle sessions measured together")
	flagScaleLocks       = flag.Int("bench.scale.locks", 1000, "BenchmarkScaleMemory: locks held, and readers waiting, on one session")
	flagScaleCaps        = flag.String("bench.scale.caps", "", "BenchmarkScaleMemory: more buffer settings to measure, recv/send in bytes: 1048576/262144,...")
	flagScaleTogether    = flag.String("bench.scale.together", "100,200,500,1000,2000", "BenchmarkScaleTogether: readers queued behind a writer")
	flagScaleTogetherPer = flag.Int("bench.scale.together.persession", 10, "BenchmarkScaleTogether: readers per session")
	flagScaleDrain       = flag.String("bench.scale.drain", "1000,10000;1000,10000", "BenchmarkScaleDrain: writers,...;readers,...")
	flagScalePer         = flag.Int("bench.scale.persession", 100, "BenchmarkScaleDrain: waiters per session")
	flagScaleSession     = flag.Duration("bench.scale.session", 30*time.Second, "with -bench.scale, every session's timeout: "+
		"thousands of sessions on a loaded machine outlast 10 s silences")
	flagScaleTimeout = flag.Duration("bench.scale.timeout", 30*time.Minute, "BenchmarkScaleTogether, BenchmarkScaleDrain: "+
		"how long a waiter waits (queueing 10,000 lists O(n²) bytes: minutes on a loaded machine)")
)

func scaleOnly(b *testing.B) {
	b.Helper()
	if !*flagScale {
		b.Skip("a scale series: run it with -bench.scale")
	}
}

func intList(b *testing.B, name, v string) []int {
	b.Helper()
	var ns []int
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: %q is not a count", name, v, f)
		}
		ns = append(ns, n)
	}
	return ns
}

// bufferSetting is a choice of go-zookeeper's two buffers for a session.
type bufferSetting struct {
	name string
	opts []func(*zk.Conn)
}

// goZKBufferSize is go-zookeeper's size for both buffers (conn.go's
// bufferSize), which it uses when no option changes them.
const goZKBufferSize = 1536 * 1024

func bufferSettings(b *testing.B) []bufferSetting {
	b.Helper()
	settings := []bufferSetting{
		{"rwlock.Dial", nil},
		// go-zookeeper's own: no limit on answers, 1.5 MiB buffers.
		{"go-zookeeper", []func(*zk.Conn){zk.WithMaxBufferSize(0), zk.WithMaxConnBufferSize(goZKBufferSize)}},
	}
	for f := range strings.SplitSeq(*flagScaleCaps, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, s, ok := strings.Cut(f, "/")
		recv, err1 := strconv.Atoi(r)
		send, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || send < 1 {
			b.Fatalf("-bench.scale.caps: %q is not recv/send", f)
		}
		settings = append(settings, bufferSetting{"recv=" + r + ",send=" + s,
			[]func(*zk.Conn){zk.WithMaxBufferSize(recv), zk.WithMaxConnBufferSize(send)}})
	}
	return settings
}

// BenchmarkScaleMemory measures this process's memory per idle session
// (for each buffer setting), per lock held and per reader waiting (on one
// session): the live heap, the heap's spans in use and the resident set,
// each after a collection that returns free pages to the system, and what
// was allocated on the way (a dial's buffers included). The resident set
// depends on the process's past: a buffer on pages fresh from the system
// is not resident until written, but one on recycled pages is cleared,
// and so resident. So the first measurement is of a fresh process
// (idle-fresh), and each of the others follows a churn: as many sessions
// dialed and closed first, as a long-running process reconnects.
func BenchmarkScaleMemory(b *testing.B) {
	scaleOnly(b)
	s := sharedServers(b)
	idle := func(b *testing.B, workload string, bs bufferSetting, churn bool) {
		for b.Loop() {
			n := *flagScaleIdle
			if churn {
				s.dial(b, n).close()
			}
			m0 := memNow()
			ss := s.dial(b, n, bs.opts...)
			m1 := memNow()
			ss.close()
			r := newRecord(workload)
			r.put("buffers", bs.name)
			r.put("sessions", n)
			r.memPer("per_session", m0, m1, n)
			emit(b, r)
		}
	}
	settings := bufferSettings(b)
	b.Run("idle-fresh/"+settings[0].name, func(b *testing.B) { idle(b, "MEM-idle-fresh", settings[0], false) })
	for _, bs := range settings {
		b.Run("idle/"+bs.name, func(b *testing.B) { idle(b, "MEM-idle", bs, true) })
	}
	b.Run("held", func(b *testing.B) {
		for b.Loop() {
			memHeld(b, s)
		}
	})
	b.Run("waiting", func(b *testing.B) {
		for b.Loop() {
			memWaiting(b, s)
		}
	})
}

// memHeld holds -bench.scale.locks write locks, each on a path of its own,
// from one session.
func memHeld(b *testing.B, s *servers) {
	n := *flagScaleLocks
	ctx := context.Background()
	ss := s.dial(b, 1)
	defer ss.close()
	path := lockPath("MEM-held")
	locks := make([]*rwlock.RWLock, n)
	for i := range locks {
		locks[i] = ss.lock(b, 0, fmt.Sprintf("%s/%d", path, i))
	}
	m0 := memNow()
	grants := make([]*rwlock.Grant, n)
	for i, l := range locks {
		g, err := l.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		grants[i] = g
	}
	m1 := memNow()
	for _, g := range grants {
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	r := newRecord("MEM-held")
	r.put("locks", n)
	r.memPer("per_lock", m0, m1, n)
	emit(b, r)
}

// memWaiting queues -bench.scale.locks readers, each with a lock object of
// its own, behind a writer on another session, all on one session.
func memWaiting(b *testing.B, s *servers) {
	n := *flagScaleLocks
	ctx := context.Background()
	ss := s.dial(b, 2)
	defer ss.close()
	path := lockPath("MEM-waiting")
	holder, err := ss.lock(b, 0, path).Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	locks := make([]*rwlock.RWLock, n)
	for i := range locks {
		locks[i] = ss.lock(b, 1, path)
	}
	m0 := memNow()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, l := range locks {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, waiterTimeout)
			defer cancel()
			g, err := l.RLock(actx)
			if err == nil {
				err = g.Release(ctx)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	if err := waitChildren(ss.conns[0], path, n+1, watchTimeout); err != nil {
		b.Fatal(err)
	}
	m1 := memNow()
	if err := holder.Release(ctx); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	r := newRecord("MEM-waiting")
	r.put("waiters", n)
	r.memPer("per_waiter", m0, m1, n)
	emit(b, r)
}

// waitChildren polls until path has at least n children, or stop (if
// any) fails. A loaded machine may drop the connection: the session rides
// it out, and so does the poll, until within has passed.
func waitChildren(c *zk.Conn, path string, n int, within time.Duration, stop ...func() error) error {
	deadline := time.Now().Add(within)
	for {
		for _, fn := range stop {
			if err := fn(); err != nil {
				return err
			}
		}
		children, _, err := c.Children(path)
		switch {
		case err == nil && len(children) >= n:
			return nil
		case err != nil && !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer):
			return fmt.Errorf("list %s: %w", path, err)
		case time.Now().After(deadline):
			return fmt.Errorf("%s: %d children after %v, want %d (last error: %v)", path, len(children), within, n, err)
		}
		time.Sleep(pollEvery)
	}
}

// BenchmarkScaleTogether is the readers-granted-together series: N readers,
// -bench.scale.together.persession to a session, queued behind one writer
// on another session.
// From the writer's release to the last reader's grant, it counts what the
// servers sent the readers' sessions and the requests those sent, per
// reader (pings left out), and the same until the readers' sessions fall
// quiet. It also counts the queueing: the creates and the listings behind
// them, from the first reader's RLock until all are queued.
func BenchmarkScaleTogether(b *testing.B) {
	scaleOnly(b)
	s := sharedServers(b)
	per := *flagScaleTogetherPer
	for _, n := range intList(b, "-bench.scale.together", *flagScaleTogether) {
		b.Run(fmt.Sprintf("readers=%d/persession=%d", n, per), func(b *testing.B) {
			var m metrics
			for b.Loop() {
				b.StopTimer()
				r, err := runTogether(b, s, n, per, &m)
				emit(b, r)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			m.report(b)
		})
	}
}

// quiet is how long the readers' sessions must send and receive nothing
// (pings aside) before the settled counts are taken.
const quiet = time.Second

func runTogether(b *testing.B, s *servers, n, perSession int, m *metrics) (*record, error) {
	ctx := context.Background()
	var w wire
	holderSS := s.dial(b, 1)
	defer holderSS.close()
	sessions := (n + perSession - 1) / perSession
	ss := s.dial(b, sessions, w.dialer())
	defer ss.close()
	name := fmt.Sprintf("TOG-%d", n)
	if perSession > 1 {
		name = fmt.Sprintf("TOG-%d-per%d", n, perSession)
	}
	path := lockPath(name)
	holder, err := holderSS.lock(b, 0, path).Lock(ctx)
	if err != nil {
		return nil, err
	}
	var rec stats.Recorder
	locks := make([]*rwlock.RWLock, n)
	for i := range locks {
		locks[i] = ss.lock(b, i/perSession, path, rwlock.WithObserver(&rec))
	}
	granted := make([]time.Duration, n)
	allHeld := newCountdown(n)
	release := make(chan struct{})
	errs := make(chan error, n+1)
	// A reader granted before the writer's release, while its grant
	// stands, is a violation; one granted after the writer lost its grant
	// (its session expired on an overloaded machine) is not, but the run
	// is void.
	var releasing atomic.Bool
	var chk checker
	writerLost := func() error {
		if err := holder.Err(); err != nil && !releasing.Load() {
			return fmt.Errorf("the writer lost its grant while the readers queued: %w", err)
		}
		return nil
	}
	watch0 := s.mustMntr(b, "zk_watch_count")
	w0, t0 := w.snap(), now()
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, *flagScaleTimeout)
			defer cancel()
			g, err := l.RLock(actx)
			if err != nil {
				errs <- err
				allHeld.arrive()
				return
			}
			granted[i] = now()
			if !releasing.Load() && holder.Err() == nil {
				chk.violations.Add(1)
			}
			allHeld.arrive()
			<-release
			if err := g.Release(ctx); err != nil {
				errs <- err
			}
		})
	}
	defer func() { wg.Wait() }()
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()

	if err := waitChildren(holderSS.conns[0], path, n+1, *flagScaleTimeout, writerLost); err != nil {
		return nil, err
	}
	// Every reader watching the writer's node: one data watch a session,
	// which readers on one session share.
	for deadline := now() + watchTimeout; ; {
		wc, err := s.mntr("zk_watch_count")
		if err != nil {
			return nil, err
		}
		if wc-watch0 >= int64(sessions) || now() >= deadline {
			break
		}
		time.Sleep(pollEvery)
	}
	if err := writerLost(); err != nil {
		return nil, err
	}
	w1, t1 := w.snap(), now()
	p0 := s.mustMntr(b, "zk_packets_received")
	b.StartTimer()
	tRel := now()
	releasing.Store(true)
	if err := holder.Release(ctx); err != nil {
		return nil, err
	}
	if !allHeld.wait(*flagScaleTimeout) {
		return nil, errors.New("not every reader held the lock")
	}
	b.StopTimer()
	w2 := w.snap()
	last := slices.Max(granted)
	// Until the readers' sessions are quiet: what follows the grants.
	w3, w3at := w2, now()
	for deadline := now() + watchTimeout; now() < deadline; {
		time.Sleep(quiet)
		w4 := w.snap()
		if d := w4.since(w3); d.bytes == 0 && d.requests == 0 {
			break
		}
		w3, w3at = w4, now()
	}
	p1 := s.mustMntr(b, "zk_packets_received")
	releaseAll()
	wg.Wait()
	close(errs)

	enq, grant, settled := w1.since(w0), w2.since(w1), w3.since(w1)
	per := func(v int64) float64 { return float64(v) / float64(n) }
	r := newRecord(name)
	r.put("readers", n)
	r.put("sessions", sessions)
	r.put("enqueue_s", (t1 - t0).Seconds())
	r.put("enqueue_bytes_per_reader", per(enq.bytes))
	r.put("enqueue_req_per_reader", per(enq.requests))
	r.put("enqueue_ops", enq.ops)
	r.put("enqueue_op_bytes", enq.opBytes)
	r.put("wake_s", (last - tRel).Seconds())
	r.put("grant_bytes_per_reader", per(grant.bytes))
	r.put("grant_req_per_reader", per(grant.requests))
	r.put("grant_ops", grant.ops)
	r.put("grant_op_bytes", grant.opBytes)
	r.put("settled_bytes_per_reader", per(settled.bytes))
	r.put("settled_req_per_reader", per(settled.requests))
	r.put("settled_ops", settled.ops)
	r.put("settled_op_bytes", settled.opBytes)
	r.put("settled_s", (w3at - tRel).Seconds())
	r.put("lease_syncs", settled.syncs)
	r.reqPerAcq(s, p0, p1, 0, int64(n))
	r.relistsPerAcq(m, rec.Stats(), int64(n))
	r.put("violations", chk.violations.Load())
	m.add("wake-s", (last - tRel).Seconds())
	m.add("B/reader", per(settled.bytes))
	m.add("req/reader", per(settled.requests))
	m.add("enqueue-B/reader", per(enq.bytes))
	var failed error
	if v := chk.violations.Load(); v > 0 {
		failed = fmt.Errorf("%d readers granted beside the writer", v)
	}
	for e := range errs {
		failed = errors.Join(failed, e)
	}
	if failed != nil {
		r.put("error", failed.Error())
	}
	return r, failed
}

// BenchmarkScaleDrain is the drain series to 10,000 waiters: W6 (writers)
// and W6r (readers behind a writer), with -bench.scale.persession waiters
// on each session, and the waiting process's memory.
func BenchmarkScaleDrain(b *testing.B) {
	scaleOnly(b)
	w, r, err := parseDrain(*flagScaleDrain)
	if err != nil {
		b.Fatal(err)
	}
	per := *flagScalePer
	for _, n := range w {
		b.Run(fmt.Sprintf("writers=%d", n), func(b *testing.B) {
			benchDrainShared(b, fmt.Sprintf("W6-%d-per%d", n, per), n, per, false)
		})
	}
	for _, n := range r {
		b.Run(fmt.Sprintf("readers=%d", n), func(b *testing.B) {
			benchDrainShared(b, fmt.Sprintf("W6r-%d-per%d", n, per), n, per, true)
		})
	}
}
