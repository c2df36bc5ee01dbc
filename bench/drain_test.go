package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/stats"
)

// W6, W6r and the scale series: a queue of waiters behind one writer.

func benchDrain(b *testing.B, name string, waiters int, readers bool) {
	runDrains(b, drainShape{name: name, waiters: waiters, perSession: 1, readers: readers})
}

// benchDrainShared is the scale series' drain: perSession waiters on each
// session, a warm-up round of at most scaleWarmup waiters, and the
// waiting process's memory reported.
func benchDrainShared(b *testing.B, name string, waiters, perSession int, readers bool) {
	runDrains(b, drainShape{name: name, waiters: waiters, perSession: perSession, readers: readers,
		warmup: min(waiters, scaleWarmup), memory: true, timeout: *flagScaleTimeout})
}

// scaleWarmup bounds the scale series' warm-up round: filling a queue
// costs O(n²) listed bytes, and the server's JIT is warm long before.
const scaleWarmup = 1000

// drainShape is one drain workload.
type drainShape struct {
	name       string
	waiters    int
	perSession int           // waiters sharing a session
	readers    bool          // readers behind the writer, else writers
	warmup     int           // waiters in the warm-up round; 0: as many as measured
	memory     bool          // report the waiting process's memory
	timeout    time.Duration // each waiter's, if not waiterTimeout
}

// waitLimit is how long a waiter waits for its grant, and for everyone's.
func (d drainShape) waitLimit() time.Duration { return cmp.Or(d.timeout, waiterTimeout) }

// sessions is how many sessions the waiters use.
func (d drainShape) sessions() int { return (d.waiters + d.perSession - 1) / d.perSession }

func runDrains(b *testing.B, d drainShape) {
	s := sharedServers(b)
	b.ReportAllocs()
	var m metrics
	for b.Loop() {
		b.StopTimer()
		r, err := runDrain(b, s, d, &m)
		emit(b, r)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	m.report(b)
}

// runDrain is one run: the holder's session and the waiters', an
// unmeasured warm-up round on another lock path, then the measured round.
func runDrain(b *testing.B, s *servers, d drainShape, m *metrics) (*record, error) {
	var base memSnap
	if d.memory {
		base = memNow()
	}
	ss := s.dial(b, 1+d.sessions())
	defer ss.close()
	path := lockPath(d.name)
	var chk checker // over both rounds, as the peers' process-wide counters
	warm := d
	if d.warmup > 0 {
		warm.waiters = d.warmup
	}
	if r, err := drainRound(b, s, ss, warm, path+"-warmup", &chk, nil, nil); err != nil {
		return r, fmt.Errorf("warm-up round: %w", err)
	}
	var mem *memSnap
	if d.memory {
		mem = &base
	}
	return drainRound(b, s, ss, d, path, &chk, m, mem)
}

// drainRound queues d.waiters waiters behind a writer on session 0, with
// d.perSession on each of the sessions after it. It is measured (timer,
// metrics) unless m is nil: the warm-up round. With base, it reports the
// process's memory while all wait, beyond base.
func drainRound(b *testing.B, s *servers, ss *sessions, d drainShape, path string, chk *checker, m *metrics, base *memSnap) (*record, error) {
	name, readers := d.name, d.readers
	measured := m != nil
	if !measured {
		m = &metrics{}
	}
	ctx := context.Background()
	n := d.waiters
	holder, err := ss.lock(b, 0, path).Lock(ctx)
	if err != nil {
		return nil, err
	}
	chk.enter(true)
	// The holder stops holding at its release, or when its grant is lost,
	// whichever comes first: the lock promises the loss (Done) before anyone
	// else can be granted, so a waiter granted after it is no violation. A
	// loss voids the run all the same (see below).
	var holderOut sync.Once
	leave := func() { holderOut.Do(func() { chk.leave(true) }) }
	stopWatching := make(chan struct{})
	defer close(stopWatching)
	go func() {
		select {
		case <-holder.Done():
			leave()
		case <-stopWatching:
		}
	}()
	var rec stats.Recorder // the waiters'
	locks := make([]*rwlock.RWLock, n)
	for i := range locks {
		locks[i] = ss.lock(b, 1+i/d.perSession, path, rwlock.WithObserver(&rec))
	}

	acqT, relT := make([]time.Duration, n), make([]time.Duration, n)
	var failed atomic.Int64
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		failed.Add(1)
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	allHeld := newCountdown(n)

	watch0 := s.mustMntr(b, "zk_watch_count")
	p0 := s.mustMntr(b, "zk_packets_received")
	use := startUsage()
	if measured {
		b.StartTimer()
	}
	tq := now()
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			acquire := l.Lock
			if readers {
				acquire = l.RLock
			}
			actx, cancel := context.WithTimeout(ctx, d.waitLimit())
			g, err := acquire(actx)
			cancel()
			if err != nil {
				fail(err)
				allHeld.arrive()
				return
			}
			acqT[i] = now()
			chk.enter(!readers)
			if readers {
				allHeld.arrive()
				if !allHeld.wait(d.waitLimit()) {
					fail(errors.New("not every reader held the lock"))
				}
			}
			chk.leave(!readers)
			relT[i] = now()
			if err := g.Release(ctx); err != nil {
				fail(err)
			}
		})
	}

	// Wait until all n lock nodes exist, then until every waiter's watch is
	// set, counting the holder's requests and our mntr calls, which are not
	// the workload's: the peers subtract them.
	polls, mntrPolls := int64(1), int64(1)
	for {
		children, _, err := ss.conns[0].Children(path)
		// A loaded machine may drop the connection; the session rides it out.
		if err != nil && !errors.Is(err, zk.ErrConnectionClosed) {
			fail(fmt.Errorf("holder: list %s: %w", path, err))
			break
		}
		if (err == nil && len(children) >= n+1) || failed.Load() > 0 {
			break
		}
		polls++
		time.Sleep(pollEvery)
	}
	// Every waiter watching: a reader watches the writer with one data
	// watch; a writer watches its predecessor with a data watch and, when
	// more nodes were ahead of it (all but the first), a child watch too
	// (see watch.go). The server keeps one watch per path and session, so
	// readers sharing a session share their watch, and so do writers
	// their child watch: at least the sessions but one have one.
	sessions := int64(d.sessions())
	watching := sessions
	if !readers {
		watching = int64(n) + sessions - 1
	}
	watchDeadline := now() + watchTimeout
	for failed.Load() == 0 {
		w, err := s.mntr("zk_watch_count")
		if err != nil {
			fail(err)
			break
		}
		if w-watch0 >= watching || now() >= watchDeadline {
			break
		}
		mntrPolls++
		time.Sleep(pollEvery)
	}
	var mem memSnap
	if base != nil {
		mem = memNow()
	}
	// The enqueue's garbage is not the drain's to collect.
	runtime.GC()
	if err := holder.Err(); err != nil {
		fail(fmt.Errorf("the holder lost its grant while the waiters queued: %w", err))
	}
	leave()
	tRel := now()
	if err := holder.Release(ctx); err != nil {
		fail(err)
	}
	wg.Wait()
	end := now()
	if measured {
		b.StopTimer()
	}
	spent := use.since()
	p1 := s.mustMntr(b, "zk_packets_received")

	var ok []int // waiters that held the lock
	var last time.Duration
	for i := range n {
		if acqT[i] == 0 {
			continue
		}
		ok = append(ok, i)
		if readers {
			last = max(last, acqT[i])
		} else {
			last = max(last, relT[i])
		}
	}
	r := newRecord(name)
	r.put("waiters", n)
	r.put("enqueue_s", (tRel - tq).Seconds())
	r.put("failed", failed.Load())
	r.put("drain_s", (last - tRel).Seconds())
	m.add("drain-s", (last - tRel).Seconds())
	m.add("enqueue-s", (tRel - tq).Seconds())
	if readers {
		wake := make([]time.Duration, 0, len(ok))
		for _, i := range ok {
			wake = append(wake, acqT[i]-tRel)
		}
		r.put("wake_mean_us", mean(wake))
		r.put("wake_p50_us", pct(wake, 50))
		r.put("wake_max_us", pct(wake, 100))
		m.add("wake-mean-us", mean(wake))
		m.add("wake-p50-us", pct(wake, 50))
		m.add("wake-max-us", pct(wake, 100))
	} else {
		slices.SortFunc(ok, func(x, y int) int { return cmp.Compare(acqT[x], acqT[y]) })
		handoff := make([]time.Duration, 0, len(ok))
		prev := tRel
		for _, i := range ok {
			handoff = append(handoff, acqT[i]-prev)
			prev = relT[i]
		}
		r.put("handoff_mean_us", mean(handoff))
		r.put("handoff_p50_us", pct(handoff, 50))
		r.put("handoff_p99_us", pct(handoff, 99))
		m.add("handoff-mean-us", mean(handoff))
		m.add("handoff-p50-us", pct(handoff, 50))
		m.add("handoff-p99-us", pct(handoff, 99))
	}
	r.put("violations", chk.violations.Load())
	if base != nil {
		r.put("sessions", sessions)
		r.put("waiting_heap_bytes", int64(mem.heapAlloc)-int64(base.heapAlloc))
		r.put("waiting_stack_bytes", int64(mem.stack)-int64(base.stack))
		r.put("waiting_rss_bytes", int64(mem.rss)-int64(base.rss))
		r.memPer("per_waiter", *base, mem, n)
	}
	other := polls + mntrPolls*int64(len(s.addrs))
	req := r.reqPerAcq(s, p0, p1, other, int64(n))
	r.relistsPerAcq(m, rec.Stats(), int64(n))
	r.usagePerAcq(m, spent, int64(n))
	r.put("round_s", (end - tq).Seconds())
	m.add("req/acquire", req)
	m.add("violations", float64(chk.violations.Load()))

	if v := chk.violations.Load(); v > 0 {
		errs = append(errs, fmt.Errorf("%d mutual exclusion violations", v))
	}
	if err := errors.Join(errs...); err != nil {
		if len(errs) > 3 {
			err = fmt.Errorf("%d failures, the first: %w", len(errs), errors.Join(errs[:3]...))
		}
		r.put("error", err.Error())
		return r, err
	}
	return r, nil
}
