package rwlock

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
)

// The simulation runs several clients of one lock over the in-memory fake,
// and lets a seeded random scheduler decide everything that can happen in
// between: which pending ZooKeeper call runs next, which response is lost,
// when a client is partitioned (and for how long), when an acquisition is
// cancelled, and when time passes; the server expires a partitioned
// client's session exactly one session timeout after it last heard from
// it, as a real server would at the earliest. After every step it checks the invariant over the
// grants that are held and not yet announced lost (one writer alone, or
// readers together), and at the end that no node is left behind and every
// call returned.
//
// Each call runs alone while the others wait for the scheduler, so a seed
// replays the same schedule (up to the rare select between two ready
// channels). Reproduce a failure with -sim.seed.

var (
	simSchedules = flag.Int("sim.schedules", 2000, "number of schedules TestSimulation runs")
	simFirst     = flag.Uint64("sim.first", 1, "seed of the first schedule")
	simSeed      = flag.Uint64("sim.seed", 0, "run only the schedule with this seed, logging each step")
)

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		runSchedule(t, *simSeed, true)
		return
	}
	n := *simSchedules
	if testing.Short() {
		n = min(n, 200)
	}
	start := time.Now()
	for seed := *simFirst; seed < *simFirst+uint64(n); seed++ {
		if !runSchedule(t, seed, false) {
			t.Fatalf("schedule %d failed; replay it with: go test -run 'TestSimulation$' -sim.seed=%d -v .", seed, seed)
		}
	}
	t.Logf("%d schedules in %v", n, time.Since(start).Round(time.Millisecond))
}

const simTimeout = 6 * time.Second // every client's session timeout

type simCall struct {
	client int
	op     string
	path   string
	run    chan simOutcome
}

type simOutcome int

const (
	apply        simOutcome = iota // the call happens and its caller hears of it
	loseResponse                   // the call happens, the caller gets zk.ErrConnectionClosed
	failUnsent                     // the call never reaches the server
)

type simClient struct {
	id    int
	conn  *fakeConn
	lock  *RWLock
	steps []simStep // what it will do

	// Guarded by sim.mu:
	cancel       context.CancelFunc // cancels the acquisition in progress
	holding      *Grant
	finished     bool
	partitioned  bool
	noticedAt    time.Time // when the client will notice the partition
	partitionAt  time.Time
	notice       chan struct{} // closed when the client notices
	heal         chan struct{} // closed when the partition heals
	hang         bool          // calls after the notice wait for the heal
	healAt       time.Time
	serverExpiry bool // the server has expired its session
}

type simStep struct {
	mode Mode
	try  bool
	hold time.Duration // unless the grant is lost first
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	verbose bool
	server  *fakeServer
	clients []*simClient

	mu       sync.Mutex
	pending  []*simCall
	failed   string
	draining bool // the schedule is over: calls run at once
}

func (s *sim) logf(format string, args ...any) {
	if s.verbose {
		s.t.Logf("%8v "+format, append([]any{time.Since(simEpoch).Round(time.Millisecond)}, args...)...)
	}
}

var simEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // synctest's clock starts here

func (s *sim) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == "" {
		s.failed = fmt.Sprintf(format, args...)
	}
}

func runSchedule(t *testing.T, seed uint64, verbose bool) (ok bool) {
	ok = true
	synctest.Test(t, func(t *testing.T) {
		s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed>>32^0x9e3779b97f4a7c15)), verbose: verbose, server: newFakeServer()}
		s.run()
		if s.failed != "" {
			t.Errorf("seed %d: %s", seed, s.failed)
			ok = false
		}
	})
	return ok
}

func (s *sim) run() {
	if s.rng.IntN(4) == 0 {
		s.server.conn().Create("/locks", nil, 0, nil)
		s.server.setCounter(dir, math.MaxInt32-int32(s.rng.IntN(4))) // the counter reaches its end
	}
	nClients := 2 + s.rng.IntN(3)
	for i := range nClients {
		c := &simClient{id: i, conn: s.server.conn()}
		opts := []Option{WithOwner(fmt.Sprintf("c%d", i)), WithCleanupTimeout(2 * time.Second)}
		if s.rng.IntN(4) != 0 {
			opts = append(opts, WithSessionTimeout(simTimeout)) // else: any disconnection is a loss
		}
		l, err := newRWLock(c.conn, dir, opts...)
		if err != nil {
			s.fail("newRWLock: %v", err)
			return
		}
		c.lock = l
		for range 1 + s.rng.IntN(3) {
			hold := time.Duration(s.rng.IntN(50)) * time.Millisecond
			if s.rng.IntN(3) == 0 {
				hold = time.Duration(s.rng.Int64N(int64(2 * simTimeout))) // through a partition, maybe
			}
			c.steps = append(c.steps, simStep{mode: Mode(1 + s.rng.IntN(2)), try: s.rng.IntN(8) == 0, hold: hold})
		}
		c.conn.setIntercept(s.intercept(c))
		s.clients = append(s.clients, c)
	}

	var wg sync.WaitGroup
	for _, c := range s.clients {
		wg.Go(func() { s.client(c) })
	}
	s.schedule()
	wg.Wait()
	for _, c := range s.clients {
		c.lock.background.Wait()
	}
	synctest.Wait()
	if nodes := s.server.lockNodes(dir); len(nodes) > 0 {
		s.fail("nodes left behind: %v", nodes)
	}
	for _, c := range s.clients {
		c.conn.close()
	}
}

// intercept puts every call of client c in the scheduler's hands.
func (s *sim) intercept(c *simClient) func(op, path string, apply func() error) error {
	return func(op, path string, do func() error) error {
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			return do()
		}
		if c.partitioned {
			notice, heal, hang := c.notice, c.heal, c.hang
			noticed := !c.noticedAt.After(time.Now())
			s.mu.Unlock()
			switch {
			case !noticed:
				<-notice // no answer until the client gives up on the connection
				return zk.ErrConnectionClosed
			case hang:
				// go-zookeeper dialled a server it cannot hear from: the
				// request waits in its queue through the handshake.
				<-heal
				return zk.ErrConnectionClosed
			}
			return zk.ErrNoServer
		}
		call := &simCall{client: c.id, op: op, path: path, run: make(chan simOutcome, 1)}
		s.pending = append(s.pending, call)
		s.mu.Unlock()

		switch <-call.run {
		case loseResponse:
			do()
			return zk.ErrConnectionClosed
		case failUnsent:
			return zk.ErrConnectionClosed
		}
		return do()
	}
}

// client runs c's steps: acquire, hold until the scheduler says so or the
// grant is lost, release.
func (s *sim) client(c *simClient) {
	defer func() {
		s.mu.Lock()
		c.finished = true
		s.mu.Unlock()
	}()
	for i, step := range c.steps {
		ctx, cancel := context.WithCancel(context.Background())
		s.mu.Lock()
		c.cancel = cancel
		s.mu.Unlock()
		w := want{mode: step.mode, block: !step.try}
		g, err := c.lock.acquire(ctx, w)
		cancel()
		if err != nil {
			s.logf("c%d step %d: %s: %v", c.id, i, verb(w), err)
			if !expectedFailure(err) {
				s.fail("c%d: unexpected error: %v", c.id, err)
			}
			continue
		}
		done := g.Done() // a careful holder watches from the start
		s.mu.Lock()
		c.holding = g
		s.mu.Unlock()
		s.logf("c%d holds %s %s for %v", c.id, g.Mode(), g.Node(), step.hold)
		hold := time.NewTimer(step.hold)
		select {
		case <-hold.C:
			s.logf("c%d releases", c.id)
		case <-done:
			hold.Stop()
			s.logf("c%d lost: %v", c.id, g.Err())
		}
		s.mu.Lock()
		c.holding = nil
		s.mu.Unlock()
		g.Release(context.Background())
	}
}

func expectedFailure(err error) bool {
	for _, e := range []error{context.Canceled, ErrWouldBlock, ErrLost, ErrSequenceExhausted} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// schedule is the scheduler loop.
func (s *sim) schedule() {
	faults := s.rng.IntN(5) // budget: after it, the run settles
	for step := 0; ; step++ {
		synctest.Wait()
		s.check()
		s.mu.Lock()
		if step > 5000 && s.failed == "" {
			s.failed = "no progress after 5000 steps"
		}
		if s.failed != "" {
			s.settle()
			s.mu.Unlock()
			return
		}
		due := s.partitionEvents()
		var actions []func()
		slices.SortFunc(s.pending, func(a, b *simCall) int {
			return cmp.Or(cmp.Compare(a.client, b.client), strings.Compare(a.op, b.op), strings.Compare(a.path, b.path))
		})
		for i, call := range s.pending {
			outcome := apply
			if faults > 0 && s.rng.IntN(12) == 0 {
				outcome = loseResponse + simOutcome(s.rng.IntN(2))
			}
			actions = append(actions, func() {
				s.pending = slices.Delete(s.pending, i, i+1)
				s.logf("c%d %s %s (%d)", call.client, call.op, call.path, outcome)
				if outcome != apply {
					faults--
				}
				call.run <- outcome
			})
		}
		allDone := true
		for _, c := range s.clients {
			allDone = allDone && c.finished
			if c.cancel != nil && c.holding == nil && faults > 0 && s.rng.IntN(6) == 0 {
				actions = append(actions, func() { s.logf("c%d cancels", c.id); faults--; c.cancel() })
			}
			actions = append(actions, s.partitionActions(c, &faults)...)
		}
		if allDone && len(s.pending) == 0 && !s.anyPartitioned() {
			s.draining = true
			s.mu.Unlock()
			return
		}
		if len(actions) == 0 || s.rng.IntN(5) == 0 {
			d := time.Duration(1+s.rng.IntN(int(simTimeout/2/time.Millisecond))) * time.Millisecond
			if len(actions) > 0 {
				d = time.Duration(1+s.rng.IntN(50)) * time.Millisecond
			}
			if !due.IsZero() {
				d = min(d, time.Until(due)) // land on the next partition event
			}
			s.mu.Unlock()
			s.logf("time passes: %v", d)
			time.Sleep(d)
			continue
		}
		actions[s.rng.IntN(len(actions))]()
		s.mu.Unlock()
	}
}

// settle ends a failed schedule: every call runs, every wait is cancelled,
// every holder releases and every partition heals, so that the clients
// return. Call with s.mu held.
func (s *sim) settle() {
	s.draining = true
	for _, call := range s.pending {
		call.run <- apply
	}
	s.pending = nil
	for _, c := range s.clients {
		if c.cancel != nil {
			c.cancel()
		}
		if c.partitioned {
			c.partitioned = false
			heal := c.heal
			time.AfterFunc(time.Until(c.noticedAt)+time.Millisecond, func() { c.conn.reconnect(); close(heal) })
		}
	}
}

// partitionActions are the ways a partition of c can start. Its course is
// decided then: when the client notices (go-zookeeper notices a dead
// connection up to 2/3 of the session timeout after the last packet), and
// how long it lasts; partitionEvents plays it out. Call with s.mu held.
func (s *sim) partitionActions(c *simClient, faults *int) []func() {
	if c.partitioned || *faults == 0 || s.anyPartitioned() {
		return nil
	}
	if c.holding == nil && s.rng.IntN(4) != 0 {
		return nil // partitioning holders is what tests the loss rule
	}
	return []func(){func() {
		*faults--
		now := time.Now()
		c.partitioned, c.partitionAt, c.serverExpiry = true, now, false
		c.noticedAt = now.Add(time.Duration(s.rng.Int64N(int64(simTimeout * 2 / 3))))
		if s.rng.IntN(3) == 0 {
			c.noticedAt = now.Add(simTimeout * 2 / 3) // the latest go-zookeeper notices
		}
		// Short (ridden out with a known timeout), or longer than the
		// session can survive.
		c.healAt = now.Add(time.Duration(s.rng.Int64N(int64(simTimeout/3) + 1)))
		if s.rng.IntN(2) == 0 {
			c.healAt = now.Add(simTimeout + time.Duration(s.rng.Int64N(int64(2*simTimeout))))
		}
		c.healAt = later(c.healAt, c.noticedAt)
		c.notice, c.heal, c.hang = make(chan struct{}), make(chan struct{}), s.rng.IntN(2) == 0
		notice := c.notice
		time.AfterFunc(c.noticedAt.Sub(now), func() { c.conn.disconnect(); close(notice) })
		s.logf("c%d partitioned: notices at +%v, heals at +%v", c.id, c.noticedAt.Sub(now), c.healAt.Sub(now))
	}}
}

// partitionEvents plays out partitions: the server expires the session
// exactly one session timeout after it last heard from the client, and the
// partition heals when planned. It returns when the next such event is due.
// Call with s.mu held.
func (s *sim) partitionEvents() (next time.Time) {
	now := time.Now()
	for _, c := range s.clients {
		if !c.partitioned {
			continue
		}
		if expiry := c.partitionAt.Add(simTimeout); !c.serverExpiry {
			if now.Before(expiry) {
				next = earliest(next, expiry)
			} else {
				c.serverExpiry = true
				s.logf("server expires c%d's session", c.id)
				c.conn.serverExpire()
			}
		}
		if now.Before(c.healAt) {
			next = earliest(next, c.healAt)
			continue
		}
		c.partitioned = false
		s.logf("c%d reconnects", c.id)
		c.conn.reconnect()
		close(c.heal)
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func (s *sim) anyPartitioned() bool {
	for _, c := range s.clients {
		if c.partitioned {
			return true
		}
	}
	return false
}

// check verifies mutual exclusion over the grants that are held and whose
// loss has not been announced.
func (s *sim) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var readers, writers []string
	for _, c := range s.clients {
		g := c.holding
		if g == nil || ended(g) {
			continue
		}
		if g.Mode() == Write {
			writers = append(writers, fmt.Sprintf("c%d", c.id))
		} else {
			readers = append(readers, fmt.Sprintf("c%d", c.id))
		}
	}
	if len(writers) > 1 || len(writers) == 1 && len(readers) > 0 {
		if s.failed == "" {
			s.failed = fmt.Sprintf("mutual exclusion violated: writers %v, readers %v", writers, readers)
		}
	}
}
