package rwlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The simulation runs several clients of one lock over the in-memory fake
// and the model of go-zookeeper's connection (zkNet, fake_test.go), and
// lets a seeded random scheduler decide everything that can happen in
// between: when a request reaches the server; which connection is reset,
// and whether the answer in flight is lost with it; when a client's link
// is cut, both ways or one way, and how its dials fail, at any moment or
// right after a watch notification reached it; when a client's process is
// stopped (SIGSTOP) and for how long; when an application elsewhere fires
// a client's watch; when an acquisition is cancelled; whether a client
// asks for a longer session than the server grants, and when the server
// is restarted with a lower maxSessionTimeout, so that reconnections are
// granted less than the session had; and when time passes. What follows from those, the model decides as go-zookeeper and
// the server would: when the client notices a dead connection, what its
// requests get, when the server expires a session.
//
// After every step it checks that no two conflicting grants are held by
// holders who have not been told of a loss (their Done closed), except a
// stopped process, which cannot be told anything: its first look after it
// resumes (Err, or a nested Lock) must report the loss if a conflicting
// grant was given, or its session expired, meanwhile. A grant whose
// session timeout the lock does not know is held to what the lock promises
// for it (internal/zkclient/lease.go): lost within zkclient.UnknownTimeoutPoll of
// go-zookeeper reporting a disconnection or a new session. Without a bound
// (WithSessionTimeout) it keeps go-zookeeper's blind spot; with one, and a
// server that granted the session at least the bound at every handshake,
// it is held to everything a grant whose timeout the lock knows is. Some
// clients' locks have a hold limit (WithMaxHold, shorter than many holds):
// as each grant is given, no conflicting grant ended by its limit may still
// have the limit, or the head start after its holder was told, ahead: its
// own client deletes its node then (checkLimits). Its timers, like the lease clock's,
// fire in a stopped process only once it resumes. At the end,
// no node may be left behind, and every call must have returned.
//
// Each request runs alone while the others wait for the scheduler, and
// requests made at the same instant are put in an order of their own, so
// a seed replays the same schedule, up to the rare race between two of the
// lock's goroutines woken at the same instant by timers (about one seed in
// a hundred replays differently now and then). Reproduce a failure with
// the flags the failure prints (-sim.seed, and -sim.nofreeze and the like).
//
// The scheduler aims some faults: at a holder that means to hold past its
// session, it may plan the schedules at the worst moment of the
// ping cycle (plan), it may cut a client's link right after a watch
// notification reached it (react), and, with coalesced reads, it may cut
// a reading process's link from server to client as a writer queues, so
// that the process does not hear of the writer (sharedReader), or as its
// sync reaches the server, to be read frame by frame at the heal
// (sharedSync).
// TestSimulationCatchesMutants (mutants_test.go) shows that deliberate
// bugs are found, the rule the lock had before its lease clock among them.

var (
	simSchedules = flag.Int("sim.schedules", 2000, "number of schedules TestSimulation runs")
	simFirst     = flag.Uint64("sim.first", 1, "seed of the first schedule")
	simSeed      = flag.Uint64("sim.seed", 0, "run only the schedule with this seed, logging each step")
	simParallel  = flag.Int("sim.parallel", runtime.GOMAXPROCS(0), "schedules run at once")
	simNoFreeze  = flag.Bool("sim.nofreeze", false, "no stopped processes")
	simNoCut     = flag.Bool("sim.nocut", false, "no cut links")
	simBothWays  = flag.Bool("sim.bothways", false, "links are cut both ways only")
	simCoalesce  = flag.Bool("sim.coalesce", false, "TestSimulation with coalesced reads (see TestSimulationCoalesced)")
	simCoalesced = flag.Int("sim.coalesced", 1000, "number of schedules TestSimulationCoalesced runs")
	simWithSets  = flag.Bool("sim.set", false, "TestSimulation with sets of locks (see TestSimulationSets)")
	simSets      = flag.Int("sim.sets", 1000, "number of schedules TestSimulationSets runs")
	simWithPeer  = flag.Bool("sim.peer", false, "TestSimulation with a blind peer (see TestSimulationBlindPeer)")
	simPeers     = flag.Int("sim.peers", 1000, "number of schedules TestSimulationBlindPeer runs")
	simElect     = flag.Bool("sim.elect", false, "TestSimulation with elections (see TestSimulationElections)")
	simElections = flag.Int("sim.elections", 1000, "number of schedules TestSimulationElections runs")
	simWithDelay = flag.Bool("sim.lockdelay", false, "TestSimulation with WithLockDelay (see TestSimulationLockDelay)")
	simDelays    = flag.Int("sim.delays", 1000, "number of schedules TestSimulationLockDelay runs")
	simCapacity  = flag.Bool("sim.capacity", false, "TestSimulation with a bounded lock (see TestSimulationPermits)")
	simPermits   = flag.Int("sim.permits", 1000, "number of schedules TestSimulationPermits runs")
	simCache     = flag.Bool("sim.cache", false, "TestSimulation with lock caching (see TestSimulationCaching)")
	simCached    = flag.Int("sim.cached", 1000, "number of schedules TestSimulationCaching runs")
	// Schedules take milliseconds: a schedule that runs this long in real
	// time is livelocked, not slow.
	simStuck = flag.Duration("sim.stuck", 2*time.Minute, "real time after which a schedule counts as livelocked")
)

func TestSimulation(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, coalesce: *simCoalesce, sets: *simWithSets,
		peer: *simWithPeer, elect: *simElect, lockDelay: *simWithDelay,
		capacity: *simCapacity, cache: *simCache}
	simulate(t, cfg, *simSchedules)
}

// TestSimulationLockDelay runs the simulation with WithLockDelay on every
// lock, with elections half the time (see lockdelay.go). Besides the other
// checks, it checks the delay's promise against the server's record. Take
// a grant whose node the server deleted without a release's held mark: its
// session expired, or its hold limit or a lost release deleted it plainly.
// No grant that conflicts with it goes to a node that was in the queue
// before it, and listed it, sooner than the delay after the deletion.
func TestSimulationLockDelay(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, lockDelay: true}
	simulate(t, cfg, *simDelays/2)
	cfg.elect = true
	simulate(t, cfg, *simDelays/2)
}

// TestSimulationPermits runs the simulation with a bounded lock (see
// capacity.go): every client's lock has simPermitCapacity permits, and each
// step takes a weight of its own, all of them now and then, under every
// fault. Most steps take a second bounded lock with it, in a set (see
// TestSimulationSets). It checks liveness too: a waiter whose node fits
// is granted soon, while every process concerned runs (see checkWaiters). Besides the holders' weights, which must fit in the capacity
// unless one was told of its loss, it checks the rule at every grant: the
// nodes before the grant's on the server, held or waiting, leave room for
// its weight. A grant past the capacity or out of queue order fails it.
func TestSimulationPermits(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, capacity: true, sets: true}
	simulate(t, cfg, *simPermits)
}

// simPermitCapacity is the capacity of TestSimulationPermits's lock.
const simPermitCapacity = 4

// simFitBound is how long a waiter whose node fits may go on waiting, when
// every process concerned runs on a healthy link (see checkWaiters). It is
// a retried mark's longest backoff, 500 ms, and round trips to spare.
const simFitBound = time.Second

// TestSimulationCaching runs the simulation with WithCaching: each client
// keeps its node after a release, and re-grants it to its next step of the
// same mode, under every fault. Silent cuts are aimed at a keeping process
// as a node is created, and as its sync goes (see keeper). Besides mutual
// exclusion, it checks the promise (checkRegrants): no re-grant passes a
// conflicting node created on the server more than δ before it began. And
// the nodes left at the end are idle kept nodes only, each gone with its
// session.
func TestSimulationCaching(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, cache: true}
	simulate(t, cfg, *simCached)
}

// TestSimulationBlindPeer runs the simulation with a blind peer: a Curator
// writer from a process outside the simulation, which does not see our
// nodes and holds regardless, created at a random moment while a client
// holds, and released at another. Besides mutual exclusion among our
// clients, it checks the fleet watch's promise (fleet.go). A holder whose
// connection was healthy from a second before the peer's create on (the
// longest backoff of the watching) sends a listing within fleetInterval of
// the later of the create and its grant, and is told once that listing is
// answered. And no acquisition is granted on a listing sent after the
// create while the peer holds.
func TestSimulationBlindPeer(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, peer: true}
	simulate(t, cfg, *simPeers)
}

// TestSimulationElections runs the simulation with elections (see
// election.go): each client campaigns, with a value of its own, and may
// proclaim a new value halfway through its term, under every fault. An
// election is a write queue with values, so the check is the write lock's:
// no two leaders hold at once unless one was told. A Proclaim changes the
// leader's node while candidates wait behind it, which no plain write grant
// does. A reader of the path now and then queues behind a leader that may
// proclaim, and must not be let in by it. Besides, an observer on a session
// of its own follows the election; what it reports must never go backwards.
func TestSimulationElections(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, elect: true}
	simulate(t, cfg, *simElections)
}

// TestSimulationSets runs the simulation with sets of locks (LockAll, see
// multi.go): besides its steps on the lock, each client takes the lock and
// a second one together, in an order and modes of its own each time, under
// every fault. Mutual exclusion is checked on each lock; a deadlock shows
// as a run that makes no progress.
func TestSimulationSets(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, sets: true}
	simulate(t, cfg, *simSets)
}

// TestSimulationCoalesced runs the simulation with WithReadCoalescing: each
// client's process has a second goroutine that only reads, so that reads
// of one process share nodes, under every fault. Besides mutual exclusion
// and no node left behind, it checks the join rule's promise: no reader
// joins a node behind which a writer's node had been created, on the
// server, when the reader arrived, even if its process had not been told
// yet (a link cut from server to client holds the notification back).
func TestSimulationCoalesced(t *testing.T) {
	cfg := simConfig{noFreeze: *simNoFreeze, noCut: *simNoCut, bothWays: *simBothWays, coalesce: true}
	simulate(t, cfg, *simCoalesced)
}

func simulate(t *testing.T, cfg simConfig, n int) {
	if *simSeed != 0 {
		if failure := runSchedule(t, *simSeed, true, cfg); failure != "" {
			t.Errorf("seed %d: %s", *simSeed, failure)
		}
		return
	}
	if testing.Short() {
		n = min(n, 200)
	}
	start := time.Now()
	if seed, failure, _ := runSchedules(t, *simFirst, n, cfg); failure != "" {
		t.Fatalf("schedule %d failed: %s\nreplay it with: go test -run 'TestSimulation$' %s -v .", seed, failure, cfg.flags(seed))
	}
	t.Logf("%d schedules in %v", n, time.Since(start).Round(time.Millisecond))
}

// simConfig selects what a schedule may do.
type simConfig struct {
	noFreeze bool // no stopped processes
	noCut    bool // no cut links
	bothWays bool // links are cut both ways only
	coalesce bool // coalesced reads, and a reading goroutine more per process
	sets     bool // sets of two locks, taken with LockAll
	peer     bool // a blind peer (see TestSimulationBlindPeer)
	elect    bool // elections: every step a Campaign, perhaps with a Proclaim
	// every lock WithLockDelay(simLockDelay(timeout)), and its check
	lockDelay bool
	// a bounded lock, and weighted steps (see TestSimulationPermits)
	capacity bool
	// lock caching: each client keeps its node after a release
	cache bool
}

// simLockDelay is the lock-delay of a run whose sessions' timeout is t.
func simLockDelay(t time.Duration) time.Duration { return t / 2 }

// flags are the test flags that replay seed with c.
func (c simConfig) flags(seed uint64) string {
	f := fmt.Sprintf("-sim.seed=%d", seed)
	if c.noFreeze {
		f += " -sim.nofreeze"
	}
	if c.noCut {
		f += " -sim.nocut"
	}
	if c.bothWays {
		f += " -sim.bothways"
	}
	if c.coalesce {
		f += " -sim.coalesce"
	}
	if c.sets {
		f += " -sim.set"
	}
	if c.peer {
		f += " -sim.peer"
	}
	if c.lockDelay {
		f += " -sim.lockdelay"
	}
	if c.elect {
		f += " -sim.elect"
	}
	if c.capacity {
		f += " -sim.capacity"
	}
	if c.cache {
		f += " -sim.cache"
	}
	return f
}

// runSchedules runs n schedules from first on -sim.parallel goroutines
// until one fails, and returns the lowest failing seed found, and how many
// schedules ran.
func runSchedules(t *testing.T, first uint64, n int, cfg simConfig) (seed uint64, failure string, ran int) {
	var next atomic.Uint64
	next.Store(first)
	var stop atomic.Bool
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(*simParallel, 1) {
		wg.Go(func() {
			for !stop.Load() {
				s := next.Add(1) - 1
				if s >= first+uint64(n) {
					return
				}
				f := make(chan string, 1)
				go func() { f <- runSchedule(t, s, false, cfg) }()
				var failed string
				select {
				case failed = <-f:
				case <-time.After(*simStuck):
					// Its goroutines never all block, so synctest.Wait never
					// returns: a livelock, which no step count can catch. It
					// is left running; the test fails.
					failed = fmt.Sprintf("no progress: it ran for %v of real time, its goroutines never all blocked (a livelock)", *simStuck)
				}
				mu.Lock()
				ran++
				if failed != "" && (failure == "" || s < seed) {
					seed, failure = s, failed
					stop.Store(true)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return seed, failure, ran
}

func runSchedule(t *testing.T, seed uint64, verbose bool, cfg simConfig) (failure string) {
	synctest.Test(t, func(t *testing.T) {
		s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed>>32^0x9e3779b97f4a7c15)), verbose: verbose, cfg: cfg,
			server: newFakeServer(), wake: make(chan struct{}, 1)}
		s.run()
		failure = s.failed
	})
	return failure
}

type simClient struct {
	id    int
	conn  *fakeConn
	zk    *zkClient
	lock  *RWLock
	steps []simStep     // what it will do
	known bool          // its connection is made by Dial: it tells the lock the session timeout, and counts its connections
	bound time.Duration // WithSessionTimeout's, given to a lock whose connection does not tell; 0: none
	twin  bool          // a second goroutine of another client's process (coalesce), or a set's member
	lock2 *RWLock       // the set's second lock (sets)
	elect *Election     // the election on the lock (elect)
	other *simClient    // holds the grant of lock2 while c holds a set (sets)

	// Guarded by net.mu:
	cancel      context.CancelFunc // cancels the acquisition in progress
	holding     *Grant
	downgrading bool      // its write grant is being downgraded: it reads only
	holdEnd     time.Time // when it means to release
	heldSince   time.Time // when it was granted what it holds
	planned     *Grant    // the grant plan last considered
	finished    bool
	reacted     time.Time // the notification after which a cut was last considered
	cutAt       time.Time
	resumed     time.Time // when its process last resumed
	stopped     int       // the grants given before its process was last stopped
	// waitFrom is the server's zxid when its blocking acquisition of one
	// bounded lock began; 0 while none is under way. fitSince is since when
	// its node has fitted on the server, its process running on a healthy
	// link (see checkWaiters).
	waitFrom int64
	fitSince time.Time
}

type simStep struct {
	mode   Mode
	try    bool
	weight int64         // its permits, on a bounded lock (capacity)
	hold   time.Duration // unless the grant is lost first
	// downgrade a write grant halfway through hold: its readers join,
	// which they learn from the mark alone (see await)
	downgrade bool
	set       *simSet // a set of the lock and lock2, instead of mode and try
	// proclaim a new value halfway through hold (elect)
	proclaim bool
}

// simSet is a LockAll of the client's two locks.
type simSet struct {
	mode2    Mode // lock2's; the lock's is the step's
	reversed bool // lock2 asked for first
	together bool // released with ReleaseAll, in one transaction
}

// simGrant is a grant given, for the check after a stopped process resumes
// and the hold limits' (see checkLimits).
type simGrant struct {
	client int
	lock   string
	mode   Mode
	at     time.Time
	g      *Grant
	head   time.Duration // its hold limit's head start
	void   bool          // lost at its holder's first look, its process stopped past its session: never held
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	verbose bool
	cfg     simConfig
	timeout time.Duration // every session's
	server  *fakeServer
	net     *zkNet
	clients []*simClient
	wake    chan struct{} // a request went on the wire while the scheduler slept
	probe   chan struct{} // closed when the lock's background work was done

	// Guarded by net.mu:
	budget     simBudget // faults left: after them, the run settles
	plans      []simPlan
	quiet      bool // every client is done: no more faults
	failed     string
	settled    bool
	grants     []simGrant
	release    map[*Grant]time.Time // when the holder called Release
	from       map[*Grant]*Grant    // the write grant a Downgrade made a read grant of
	downgraded map[*Grant]time.Time // when the holder of a write grant called Downgrade

	endedMu  sync.Mutex
	ended    map[*hold]time.Time // when a node's hold ended (its holder was told)
	joins    []simJoin
	regrants []simRegrant

	peer *simPeer // guarded by net.mu
}

// simPeer is the blind peer of TestSimulationBlindPeer, and its node.
type simPeer struct {
	conn    *fakeConn
	node    string
	created time.Time
	until   time.Time // when it releases
	gone    bool
	lists   map[*zkClient]int // each client's listings of the directory the server read before the create
}

// simPeerQuiet is how long before the peer's create a client's connection
// must have been healthy for the fleet watch's promise to hold: the
// longest backoff of the watching after a failed listing, and more.
const simPeerQuiet = time.Second

// simRegrant is a grant on a node made before the acquisition began: a
// kept node granted again (caching).
type simRegrant struct {
	client  int
	node    string
	mode    Mode
	began   time.Time // when the acquisition began
	granted int64     // the server's zxid when it was granted
}

// simJoin is a coalesced read granted: the node it holds, and the
// server's zxid when the read began and when it was granted.
type simJoin struct {
	client  int
	node    string
	arrived int64 // the server's zxid when the read began
	granted int64 // the server's zxid when it was granted
}

func (s *sim) logf(format string, args ...any) {
	if s.verbose {
		s.t.Logf("%8v "+format, append([]any{at(time.Now())}, args...)...)
	}
}

var simEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // synctest's clock starts here

// at formats a time of the simulation.
func at(t time.Time) time.Duration { return t.Sub(simEpoch).Round(time.Millisecond) }

func (s *sim) fail(format string, args ...any) {
	s.net.mu.Lock()
	defer s.net.mu.Unlock()
	if s.failed == "" {
		s.failed = fmt.Sprintf(format, args...)
	}
}

func appPath(id int) string { return fmt.Sprintf("/app/c%d", id) }

func (s *sim) run() {
	r := s.rng
	s.timeout = []time.Duration{3 * time.Second, 6 * time.Second}[r.IntN(2)]
	tick := time.Millisecond // expiry at once, as good as
	if r.IntN(2) == 0 {
		tick = s.timeout / 3 // three ticks, ZooKeeper's default ratio
	}
	setup := s.server.conn()
	if r.IntN(4) == 0 {
		setup.Create("/locks", nil, 0, nil)
		s.server.setCounter(dir, math.MaxInt32-int32(r.IntN(4))) // the counter reaches its end
	}
	// The server's maxSessionTimeout: none, or s.timeout, which clients
	// that ask for more are granted instead (see session below).
	maxT := time.Duration(0)
	if r.IntN(3) == 0 {
		maxT = s.timeout
	}
	s.net = newZKNet(s.server, maxT, tick, time.Duration(r.Int64N(int64(tick))))
	if s.verbose {
		s.net.verbose, s.net.logf = true, s.logf
	}
	s.net.onWire = func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	replay := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
	var replayMu sync.Mutex
	s.net.shuffle = func(n int, swap func(i, j int)) {
		replayMu.Lock()
		defer replayMu.Unlock()
		replay.Shuffle(n, swap)
	}
	hosts := 1 + 2*r.IntN(2)
	s.budget = simBudget{resets: r.IntN(3), cancels: r.IntN(3), cuts: r.IntN(3), freezes: r.IntN(2), planned: r.IntN(2), lowers: r.IntN(2)}
	if s.cfg.noCut {
		s.budget.cuts = 0
	}
	if s.cfg.noFreeze {
		s.budget.freezes = 0
	}
	if (s.cfg.coalesce || s.cfg.cache) && !s.cfg.noCut {
		s.budget.silent = r.IntN(3)
	}
	setup.Create("/app", nil, 0, nil)
	nClients := 2 + r.IntN(3)
	for i := range nClients {
		setup.Create(appPath(i), nil, 0, nil)
		ask := s.timeout
		if maxT > 0 && r.IntN(2) == 0 {
			ask = 2 * maxT // more than the server grants
		}
		known := r.IntN(4) != 0 // a Dial connection; else zk.Connect's: any disconnection is a loss
		conn := s.net.session(hosts, ask, known)
		c := &simClient{id: i, conn: conn, zk: conn.cl, known: known}
		lockConn := zkclient.Conn(conn)
		if !known {
			lockConn = conn.asConnect() // it counts no connections either
		}
		opts := []Option{WithOwner(fmt.Sprintf("c%d", i)), WithCleanupTimeout(2 * time.Second)}
		if known && r.IntN(4) != 0 {
			opts = append(opts, WithSessionTimeout(ask)) // what the caller asked for: no more than a cap
		}
		if !known {
			// A bound the server may grant (the timeout asked for), or one
			// below any grant here, or none.
			if bound := []time.Duration{0, ask, s.timeout / 2}[r.IntN(3)]; bound > 0 {
				c.bound = bound
				opts = append(opts, WithSessionTimeout(bound))
			}
		}
		if s.cfg.coalesce {
			opts = append(opts, WithReadCoalescing())
		}
		if s.cfg.lockDelay {
			opts = append(opts, WithLockDelay(simLockDelay(s.timeout)))
		}
		if s.cfg.capacity {
			opts = append(opts, WithCapacity(simPermitCapacity))
		}
		if s.cfg.cache {
			opts = append(opts, WithCaching())
		}
		if r.IntN(3) == 0 {
			// Holds that run past it, sometimes through a fault.
			opts = append(opts, WithMaxHold(time.Duration(10+r.Int64N(int64(s.timeout/time.Millisecond)))*time.Millisecond))
		}
		l, err := newRWLock(lockConn, dir, opts...)
		if err != nil {
			s.fail("newRWLock: %v", err)
			return
		}
		c.lock = l
		if s.cfg.elect {
			c.elect = &Election{l: l}
		}
		if s.cfg.sets {
			if c.lock2, err = newRWLock(lockConn, dir2, opts...); err != nil {
				s.fail("newRWLock: %v", err)
				return
			}
		}
		for range 1 + r.IntN(3) {
			hold := time.Duration(r.IntN(50)) * time.Millisecond
			if r.IntN(3) == 0 {
				hold = time.Duration(r.Int64N(int64(2 * s.timeout))) // through a partition, maybe
			}
			step := simStep{mode: Mode(1 + r.IntN(2)), try: r.IntN(8) == 0, hold: hold}
			step.downgrade = step.mode == Write && r.IntN(4) == 0
			if s.cfg.sets && r.IntN(3) != 0 {
				how := r.IntN(4)
				step.try, step.set = false, &simSet{mode2: Mode(1 + r.IntN(2)), reversed: how&1 == 0, together: how&2 != 0}
			}
			if s.cfg.capacity {
				step.weight = 1 + r.Int64N(simPermitCapacity)
				step.mode, step.downgrade = l.permitMode(step.weight), false
			}
			if s.cfg.elect {
				// Mostly campaigns. A reader of the path now and then
				// waits for the leader as for any writer, Proclaims or not.
				step = simStep{mode: Write, hold: hold, proclaim: r.IntN(2) == 0}
				if r.IntN(4) == 0 {
					step = simStep{mode: Read, hold: hold}
				}
			}
			c.steps = append(c.steps, step)
		}
		s.clients = append(s.clients, c)
	}
	if s.cfg.coalesce {
		// A second goroutine in each process, reading: its reads and the
		// first goroutine's share nodes when they may.
		for _, c := range s.clients[:nClients] {
			t := &simClient{id: len(s.clients), conn: c.conn, zk: c.zk, lock: c.lock, known: c.known, bound: c.bound, twin: true}
			for range 1 + r.IntN(4) {
				hold := time.Duration(r.IntN(100)) * time.Millisecond
				if r.IntN(4) == 0 {
					hold = time.Duration(r.Int64N(int64(2 * s.timeout)))
				}
				t.steps = append(t.steps, simStep{mode: Read, hold: hold})
			}
			s.clients = append(s.clients, t)
		}
	}
	if s.cfg.sets {
		// Who holds each client's grant of lock2, for the checks; it takes
		// no steps of its own.
		for _, c := range s.clients[:nClients] {
			c.other = &simClient{id: len(s.clients), conn: c.conn, zk: c.zk, lock: c.lock2, known: c.known, bound: c.bound, twin: true}
			s.clients = append(s.clients, c.other)
		}
	}
	s.logf("session timeout %v, server tick %v, %d host(s), %d clients, faults: %+v", s.timeout, tick, hosts, nClients, s.budget)

	var clients, apps sync.WaitGroup
	stopObserving := func() {}
	if s.cfg.elect {
		stopObserving = s.observe(hosts)
	}
	for _, c := range s.clients {
		clients.Go(func() { s.client(c) })
		if !c.twin {
			apps.Go(func() { s.app(c) })
		}
	}
	clientsDone := make(chan struct{})
	go func() {
		clients.Wait()
		close(clientsDone)
	}()
	s.schedule(clientsDone)
	stopObserving()
	for _, d := range []string{dir, dir2} {
		if nodes := s.keptAside(s.server.lockNodes(d)); len(nodes) > 0 {
			s.fail("nodes left behind in %s: %v", d, nodes)
		}
	}
	s.checkJoins()
	s.checkRegrants()
	for _, c := range s.clients {
		if !c.twin {
			c.conn.close()
		}
	}
	apps.Wait()
	// Time stops in the bubble once run returns: a client still in a
	// backoff after the scheduler gave up (no progress) must see its
	// connection closed first, or synctest reports a deadlock in place of
	// the failure.
	<-clientsDone
	for _, c := range s.clients {
		if c.lock.cache != nil {
			c.lock.cache.tails.Wait() // they end with the sessions, and may leave a deletion to the background
		}
		c.lock.background.Wait()
	}
	if s.cfg.cache {
		if nodes := s.server.lockNodes(dir); len(nodes) > 0 {
			s.fail("kept nodes outlived their sessions: %v", nodes)
		}
	}
}

// keptAside returns nodes less the clients' idle kept nodes (see
// WithCaching), which may be left at the end.
func (s *sim) keptAside(nodes []string) []string {
	return slices.DeleteFunc(nodes, func(name string) bool {
		for _, c := range s.clients {
			if cached, idle := c.lock.cache.cachedAt(dir + "/" + name); cached && idle {
				return true
			}
		}
		return false
	})
}

// checkJoins checks the join rule's promise (see coalesce.go) over the
// coalesced reads granted: no writer waits for a reader of a node N that
// arrived after the writer's node was created behind N. A reader holds N
// only if, when it began, the server had created no writer's node behind
// N that was still there when the reader was granted. What the reader's
// process had been told by then does not matter: the promise is about
// the server's order.
func (s *sim) checkJoins() {
	if !s.cfg.coalesce {
		return
	}
	s.server.mu.Lock()
	czxids, dzxids := maps.Clone(s.server.czxids), maps.Clone(s.server.dzxids)
	s.server.mu.Unlock()
	for _, j := range s.joins {
		n, ok := parseNode(path.Base(j.node))
		if !ok {
			continue
		}
		for p, czxid := range czxids {
			w, ok := parseNode(path.Base(p))
			if !ok || path.Dir(p) != dir || w.mode != Write || !lockname.Precedes(n.seq, w.seq) || czxid > j.arrived {
				continue
			}
			if dzxid, gone := dzxids[p]; gone && dzxid <= j.granted {
				continue // it had given up (or held and released) before the reader held N
			}
			s.fail("c%d joined %s though writer %s had queued behind it (created at zxid %d, deleted at %d; the reader began at %d, was granted at %d)",
				j.client, path.Base(j.node), path.Base(p), czxid, dzxids[p], j.arrived, j.granted)
			return
		}
	}
}

// checkRegrants checks WithCaching's promise over the re-grants: none
// passes a conflicting node created behind the kept node, on the server,
// more than δ before the re-grant began, and still there when it was
// granted. What the process had been told does not matter.
func (s *sim) checkRegrants() {
	if !s.cfg.cache {
		return
	}
	s.server.mu.Lock()
	ctimes, dzxids := maps.Clone(s.server.ctimes), maps.Clone(s.server.dzxids)
	s.server.mu.Unlock()
	for _, r := range s.regrants {
		n, ok := parseNode(path.Base(r.node))
		if !ok {
			continue
		}
		for p, created := range ctimes {
			w, ok := parseNode(path.Base(p))
			if !ok || path.Dir(p) != dir || !lockname.Precedes(n.seq, w.seq) || r.mode == Read && w.mode != Write ||
				created.After(r.began.Add(-cacheDelta)) {
				continue
			}
			if dzxid, gone := dzxids[p]; gone && dzxid <= r.granted {
				continue
			}
			s.fail("c%d was granted %s again though %s had queued behind it at %v (the re-grant began at %v)",
				r.client, path.Base(r.node), path.Base(p), at(created), at(r.began))
			return
		}
	}
}

// done reports whether the run is over: every client has returned, no
// request is outstanding (a request a cancelled call left behind may yet
// hand the lock work to do in the background), and the lock's background
// deletions are done. Call after synctest.Wait.
func (s *sim) done(clientsDone <-chan struct{}) bool {
	s.net.mu.Lock()
	idle := isClosed(clientsDone) && s.net.idle()
	s.net.mu.Unlock()
	if !idle {
		s.probe = nil // background work may have begun since it looked
		return false
	}
	if s.probe == nil {
		probe := make(chan struct{})
		s.probe = probe
		go func() {
			for _, c := range s.clients {
				c.lock.background.Wait()
			}
			close(probe)
		}()
		synctest.Wait()
	}
	return isClosed(s.probe)
}

// client runs c's steps: acquire, hold until the scheduler says so or the
// grant is lost, release. While c's process is stopped it does nothing.
func (s *sim) client(c *simClient) {
	n := s.net
	defer func() {
		n.mu.Lock()
		c.finished = true
		n.mu.Unlock()
	}()
	for i, step := range c.steps {
		c.zk.pause()
		ctx, cancel := context.WithCancel(context.Background())
		n.mu.Lock()
		c.cancel = cancel
		n.mu.Unlock()
		w := want{mode: step.mode, block: !step.try, weight: step.weight}
		s.server.mu.Lock()
		arrived := s.server.zxid
		s.server.mu.Unlock()
		if s.cfg.capacity && step.set == nil && !step.try {
			n.mu.Lock()
			c.waitFrom, c.fitSince = arrived, time.Time{}
			n.mu.Unlock()
		}
		var g, g2 *Grant
		var err error
		start := time.Now()
		if step.set != nil {
			g, g2, err = s.lockSet(ctx, c, step)
		} else if c.elect != nil && step.mode == Write {
			g, err = c.elect.Campaign(ctx, []byte(fmt.Sprintf("c%d/%d", c.id, i)))
		} else {
			g, err = c.lock.acquire(ctx, w)
		}
		cancel()
		c.zk.pause()
		n.mu.Lock()
		c.cancel, c.waitFrom = nil, 0
		n.mu.Unlock()
		if err != nil {
			s.logf("c%d step %d: %s: %v", c.id, i, verb(w), err)
			if !expectedFailure(err) && !(s.cfg.peer && errors.As(err, new(*mixedError))) {
				s.fail("c%d: unexpected error: %v", c.id, err)
			}
			continue
		}
		for _, g := range []*Grant{g, g2} {
			if g == nil {
				continue
			}
			if msg := s.server.checkToken(g.Node(), g.Mode(), g.Token()); msg != "" {
				s.fail("c%d: %s", c.id, msg)
			}
		}
		if s.cfg.capacity {
			if msg := s.server.checkRule(g.Node()); msg != "" {
				s.fail("c%d: %s", c.id, msg)
			}
		}
		done, done2 := g.Done(), (<-chan struct{})(nil) // a careful holder watches from the start
		// Its first look. A grant lost by then because its process was
		// stopped during the call and its session expired meanwhile (after
		// the lock's last look, as far as the lock can know) was never
		// held, and proves nothing against the grants of others. Lost at
		// once for any other reason, it still counts.
		lost := errors.Join(g.Err(), g2.errIfAny()) != nil
		n.mu.Lock()
		expiredAt, expired := s.net.expired[g.h.session]
		void := lost && expired && !c.zk.frozenAt.Before(start) && !expiredAt.Before(start)
		c.holding, c.holdEnd, c.heldSince = g, time.Now().Add(step.hold), time.Now()
		if p := s.peer; p != nil && !p.gone && g.h.listedAt.After(p.created) {
			s.failed = fmt.Sprintf("c%d was granted %s on a listing sent at %v, after the blind peer's node came at %v",
				c.id, g.Mode(), at(g.h.listedAt), at(p.created))
		}
		if !void {
			s.checkLimits(c, g)
			s.checkLockDelay(c, g)
		}
		s.grants = append(s.grants, s.given(c.id, dir, g, void))
		if g2 != nil {
			done2 = g2.Done()
			c.other.holding, c.other.holdEnd, c.other.heldSince = g2, c.holdEnd, c.heldSince
			if !void {
				s.checkLimits(c.other, g2)
			}
			s.grants = append(s.grants, s.given(c.other.id, dir2, g2, void))
		}
		if s.cfg.coalesce && w.mode == Read && w.block {
			s.server.mu.Lock()
			s.joins = append(s.joins, simJoin{c.id, g.Node(), arrived, s.server.zxid})
			s.server.mu.Unlock()
		}
		if s.cfg.cache {
			s.server.mu.Lock()
			if created, ok := s.server.ctimes[g.Node()]; ok && created.Before(start) {
				s.regrants = append(s.regrants, simRegrant{c.id, g.Node(), g.Mode(), start, s.server.zxid})
			}
			s.server.mu.Unlock()
		}
		n.mu.Unlock()
		s.logf("c%d holds %s %s for %v", c.id, g.Mode(), g.Node(), step.hold)
		held := func(d time.Duration) bool {
			hold := time.NewTimer(d)
			defer hold.Stop()
			select {
			case <-hold.C:
				return true
			case <-done:
			case <-done2:
			}
			return false
		}
		if step.proclaim {
			if held(step.hold / 2) {
				c.zk.pause()
				s.proclaim(c, fmt.Sprintf("c%d/%d'", c.id, i))
				held(step.hold - step.hold/2)
			}
		} else if !step.downgrade || g2 != nil {
			held(step.hold)
		} else if held(step.hold / 2) {
			c.zk.pause()
			if d := s.downgrade(c, g); d != nil {
				g, done = d, d.Done()
				held(step.hold - step.hold/2)
			}
		}
		c.zk.pause()
		if err := errors.Join(g.Err(), g2.errIfAny()); err != nil {
			s.logf("c%d lost: %v", c.id, err)
		} else {
			s.logf("c%d releases", c.id)
		}
		n.mu.Lock()
		c.holding = nil
		if s.release == nil {
			s.release = make(map[*Grant]time.Time)
		}
		// Releasing the read grant a Downgrade made releases the node of
		// the write grant it came from too.
		for x := g; x != nil; x = s.from[x] {
			s.release[x] = time.Now()
		}
		if g2 != nil {
			c.other.holding = nil
			s.release[g2] = time.Now()
		}
		n.mu.Unlock()
		if step.set != nil && step.set.together {
			ReleaseAll(context.Background(), g, g2)
			continue
		}
		if c.elect != nil && step.mode == Write {
			c.elect.Resign(context.Background())
			continue
		}
		g.Release(context.Background())
		if g2 != nil {
			g2.Release(context.Background())
		}
	}
}

// observe follows the election from a session of its own, which the
// scheduler may reset like any other. Each state it reports must be no
// older than the last, and a new leader's must come after every earlier
// leader has been told (check's rule, seen by a third party). stop ends
// it and waits for it.
func (s *sim) observe(hosts int) (stop func()) {
	conn := s.net.session(hosts, s.timeout, true)
	e, err := newElection(conn, dir)
	if err != nil {
		s.fail("newElection: %v", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	states := e.Observe(ctx)
	done := make(chan struct{})
	var terms []int64 // reported; read once done is closed
	go func() {
		defer close(done)
		var last Leadership
		for st := range states {
			s.logf("the observer sees %q in term %d", st.Value, st.Term)
			if st.Term != 0 && st.Term < last.Term {
				s.fail("the observer went back from term %d to term %d", last.Term, st.Term)
			}
			if st.Term != 0 {
				last = st
				terms = append(terms, st.Term)
				s.checkLeader(st.Term)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		conn.close()
		s.checkHeads(terms)
	}
}

// checkHeads checks that each term the observer reported was a node that
// headed the queue at some moment of the server's order: every node
// before it went before it did. A candidate that gave up before it led
// never did, and must never be reported.
func (s *sim) checkHeads(terms []int64) {
	s.server.mu.Lock()
	czxids, dzxids := maps.Clone(s.server.czxids), maps.Clone(s.server.dzxids)
	s.server.mu.Unlock()
	nodeOf := map[int64]string{}
	for p, czxid := range czxids {
		if path.Dir(p) == dir {
			nodeOf[czxid] = p
		}
	}
	for _, term := range slices.Compact(terms) {
		p, ok := nodeOf[term]
		if !ok {
			s.fail("the observer reported term %d, which no node of %s has", term, dir)
			return
		}
		n, _ := parseNode(path.Base(p))
		end, gone := dzxids[p]
		for _, q := range nodeOf {
			m, ok := parseNode(path.Base(q))
			if !ok || !lockname.Precedes(m.seq, n.seq) {
				continue
			}
			if qend, qgone := dzxids[q]; !qgone || gone && qend > end {
				s.fail("the observer reported term %d, whose node %s never led: %s, before it, went later",
					term, path.Base(p), path.Base(q))
				return
			}
		}
	}
}

// checkLeader checks that no client leads in a term before term, untold,
// as the observer reports term. Its rule is check's, and a stopped process
// is judged at its first look.
func (s *sim) checkLeader(term int64) {
	s.net.mu.Lock()
	defer s.net.mu.Unlock()
	for _, c := range s.clients {
		g := c.holding
		if g == nil || g.mode != Write || c.zk.frozen || isClosed(g.ctx.Done()) || !c.known || g.Token() >= term {
			continue
		}
		if s.failed == "" {
			s.failed = fmt.Sprintf("the observer reported term %d while %s, untold", term, s.status(c))
		}
	}
}

// proclaim changes the value of c's leadership. It may fail as the
// leadership is lost, or as the connection fails.
func (s *sim) proclaim(c *simClient, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := c.elect.Proclaim(ctx, []byte(value))
	s.logf("c%d proclaims %q: %v", c.id, value, err)
	if err != nil && !expectedFailure(err) && !zkclient.ConnectionLoss(err) {
		s.fail("c%d: unexpected error from Proclaim: %v", c.id, err)
	}
}

// downgrade downgrades g, c's write grant, and returns the read grant, or
// nil if the downgrade failed. From the call on, c counts as a reader: it
// writes no more, and readers may join as soon as the mark is written.
func (s *sim) downgrade(c *simClient, g *Grant) *Grant {
	n := s.net
	n.mu.Lock()
	c.downgrading = true
	if s.downgraded == nil {
		s.downgraded = make(map[*Grant]time.Time)
	}
	s.downgraded[g] = time.Now()
	n.mu.Unlock()
	d, err := g.Downgrade(context.Background())
	n.mu.Lock()
	defer n.mu.Unlock()
	c.downgrading = false
	if err != nil {
		s.logf("c%d's downgrade: %v", c.id, err)
		return nil
	}
	s.logf("c%d downgrades", c.id)
	if s.from == nil {
		s.from = make(map[*Grant]*Grant)
	}
	s.from[d] = g
	c.holding, c.heldSince = d, time.Now()
	s.grants = append(s.grants, s.given(c.id, d.h.l.path, d, false)) // with the write's hold limit
	return d
}

// given records g, granted to client id on lock, and when it ends. Call
// with net.mu held.
func (s *sim) given(id int, lock string, g *Grant, void bool) simGrant {
	h := g.h
	h.whenEnded(func(error) {
		s.endedMu.Lock()
		defer s.endedMu.Unlock()
		if s.ended == nil {
			s.ended = make(map[*hold]time.Time)
		}
		if _, ok := s.ended[h]; !ok {
			s.ended[h] = time.Now()
		}
	})
	var head time.Duration
	if lim := limitOf(h); lim != nil {
		head = lim.head
	}
	return simGrant{id, lock, g.Mode(), time.Now(), g, head, void}
}

// checkLockDelay checks WithLockDelay's promise (see lockdelay.go) as g is
// granted to c. Take an earlier grant o that conflicts with g, whose node
// the server deleted unmarked: no release's held mark rode on it. Suppose
// g's node came after o's, and g's session set a watch on o's node after
// g's create, which the deletion fired. Then g is granted no sooner than
// the delay after the deletion. Later nodes wait for g, so this covers
// them too. A child watch on a node whose data changed counts unless g's
// client read the change and the deletion together (readTogether): a
// waiter takes those for a release's mark, as lockdelay.go says. A write grant downgraded before the deletion conflicts as the read
// grant it became. A session's own nodes watched by its holds do not
// count: it deleted them, or saw them go, as their holder. Call with
// net.mu held.
func (s *sim) checkLockDelay(c *simClient, g *Grant) {
	if !s.cfg.lockDelay {
		return
	}
	now, d := time.Now(), simLockDelay(s.timeout)
	s.server.mu.Lock()
	defer s.server.mu.Unlock()
	created, session := s.server.czxids[g.Node()], g.h.session
	for _, o := range s.grants {
		if o.void || o.lock != g.h.l.path || o.mode == Read && g.Mode() == Read || o.g.h.session == session {
			continue
		}
		death, gone := s.server.deaths[o.g.Node()]
		if !gone || death.marked || s.server.czxids[o.g.Node()] > created {
			continue
		}

		if at, ok := s.downgraded[o.g]; ok && o.mode == Write && g.Mode() == Read && !at.After(death.at) {
			continue
		}
		together := death.changed && s.net.readTogether(session, o.g.Node())
		told := slices.ContainsFunc(death.watchers, func(w fakeWatcher) bool {
			return w.session == session && w.since >= created && (w.data || !together)
		})
		if told && now.Before(death.at.Add(d)) {
			s.failed = fmt.Sprintf("c%d was granted %s %s at %v, %v after %s went unmarked at %v; the lock-delay is %v",
				c.id, g.Mode(), g.Node(), at(now), now.Sub(death.at), o.g.Node(), at(death.at), d)
		}
	}
}

// checkLimits checks the hold limit's promise (see holdlimit.go) as g is
// granted to c: no grant that conflicts with g and ended by its hold limit
// still has the limit ahead, when its holder's own client deletes its
// node; unless its holder released it before the notice (the release
// deletes it, and the notice may still come while it does) or, for a
// reader, downgraded it before the notice (it reads only from then on, and
// its mark lets readers in), or the server ended its session (which took
// the node). Call with net.mu held.
func (s *sim) checkLimits(c *simClient, g *Grant) {
	now := time.Now()
	for _, o := range s.grants {
		h := o.g.h // a coalesced reader's node is its node's
		if o.lock != g.h.l.path || o.mode == Read && g.Mode() == Read || !errors.Is(context.Cause(h.ctx), ErrHoldLimit) {
			continue
		}
		s.endedMu.Lock()
		told := s.ended[h]
		s.endedMu.Unlock()
		goes := h.nodeGoes()
		if t := told.Add(o.head); t.After(goes) {
			goes = t // told late: the head start counts from then
		}
		if !now.Before(goes) {
			continue
		}
		notice := limitOf(h).notice
		if t, ok := s.release[o.g]; ok && t.Before(notice) {
			continue
		}
		if s.allReleased(h) {
			continue // after the notice, every grant on the node released: it goes at once
		}
		if t, ok := s.downgraded[o.g]; ok && t.Before(notice) && g.Mode() == Read {
			continue
		}
		if _, expired := s.net.expired[h.session]; expired {
			continue
		}
		if s.failed == "" {
			s.failed = fmt.Sprintf("c%d was granted %s at %v, before c%d's %s grant's node was to go at its hold limit "+
				"or a head start after its holder was told at %v (%v)", c.id, g.Mode(), at(now), o.client, o.mode, at(told), at(goes))
		}
	}
}

// allReleased reports whether the holder called Release on every grant of
// h's node. The caller holds net.mu.
func (s *sim) allReleased(h *hold) bool {
	for _, o := range s.grants {
		if o.g.h != h || o.g.parent != nil {
			continue
		}
		if _, ok := s.release[o.g]; !ok {
			return false
		}
	}
	return true
}

// nodeGoes is when the hold limit deletes h's node: the limit, or later
// for a holder told late (see limit.reached).
func (h *hold) nodeGoes() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until
}

// limitOf returns h's hold limit; nil for none.
func limitOf(h *hold) *limit {
	lim, _ := h.slot(holdLimit{}, nil).(*limit)
	return lim
}

// lockSet takes c's two locks with LockAll, in the step's order and modes,
// and returns the grants of the lock and of lock2.
func (s *sim) lockSet(ctx context.Context, c *simClient, step simStep) (g, g2 *Grant, err error) {
	reqs := []Request{{Lock: c.lock, Mode: step.mode, Weight: step.weight}, {Lock: c.lock2, Mode: step.set.mode2}}
	if step.set.reversed {
		reqs[0], reqs[1] = reqs[1], reqs[0]
	}
	gs, err := LockAll(ctx, reqs...)
	if err != nil {
		return nil, nil, err
	}
	if step.set.reversed {
		return gs[1], gs[0], nil
	}
	return gs[0], gs[1], nil
}

// errIfAny is g's Err, or nil for no grant.
func (g *Grant) errIfAny() error {
	if g == nil {
		return nil
	}
	return g.Err()
}

// app is an application sharing c's connection: it keeps a watch on a node
// of its own, which the scheduler fires at will, so that a notification
// can reach c at any moment.
func (s *sim) app(c *simClient) {
	for {
		c.zk.pause()
		_, _, ch, err := c.conn.GetW(appPath(c.id))
		if err != nil {
			if c.conn.State() == zk.StateDisconnected {
				return // closed
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if ev := <-ch; ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrClosing) {
			return
		}
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

const simMaxSteps = 200000

// schedule is the scheduler loop: it ends when every client and every
// background deletion is done.
func (s *sim) schedule(clientsDone <-chan struct{}) {
	n := s.net
	for step := 0; ; step++ {
		synctest.Wait()
		if s.peerReleases(clientsDone) {
			continue
		}
		if s.done(clientsDone) {
			return
		}
		select {
		case <-s.wake: // on the wire, and seen below
		default:
		}
		n.mu.Lock()
		n.fast = false
		n.raceSends()
		s.check()
		if step == simMaxSteps && s.failed == "" {
			s.failed = fmt.Sprintf("no progress after %d steps", simMaxSteps)
		}
		if step > 2*simMaxSteps {
			n.mu.Unlock()
			return // closing the connections ends the rest
		}
		if s.failed != "" && !s.settled {
			s.settle()
		}
		if !s.quiet {
			s.quiet = true
			for _, c := range s.clients {
				s.quiet = s.quiet && c.finished
			}
		}
		now := time.Now()
		n.advance(now)
		if ev, ok := n.nextEvent(); ok && !ev.at.After(now) {
			if ev.kind == evThaw {
				n.mu.Unlock()
				s.thaw(s.clients[ev.cl.id])
				continue
			}
			n.process(ev)
			n.mu.Unlock()
			continue
		}
		if s.react(now) {
			n.mu.Unlock()
			continue
		}
		for _, c := range s.clients {
			s.plan(c)
		}
		if i := s.nextPlan(); i >= 0 && !s.plans[i].at.After(now) {
			p := s.plans[i]
			s.plans = slices.Delete(s.plans, i, i+1)
			p.do()
			n.mu.Unlock()
			continue
		}
		actions := s.actions()
		if len(actions) == 0 || s.rng.IntN(5) == 0 {
			d := time.Duration(1+s.rng.IntN(int(s.timeout/2/time.Millisecond))) * time.Millisecond
			if len(actions) > 0 {
				d = time.Duration(1+s.rng.IntN(50)) * time.Millisecond
			}
			if ev, ok := n.nextEvent(); ok {
				d = min(d, ev.at.Sub(now)) // land on the model's next event
			}
			if i := s.nextPlan(); i >= 0 {
				d = min(d, s.plans[i].at.Sub(now))
			}
			if p := s.peer; p != nil && !p.gone {
				d = min(d, p.until.Sub(now))
			}
			n.fast = true
			n.mu.Unlock()
			s.sleep(d)
			continue
		}
		actions[s.rng.IntN(len(actions))]()
		n.mu.Unlock()
	}
}

// sleep lets d pass, or less if a request goes on the wire meanwhile.
func (s *sim) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.wake:
	}
}

// actions are what the scheduler may do next. Call with net.mu held.
func (s *sim) actions() []func() {
	n := s.net
	b := &s.budget
	var actions []func()
	for _, r := range n.heads() {
		cl := r.cl
		switch {
		case b.resets > 0 && !s.quiet && !cl.frozen && s.rng.IntN(12) == 0:
			lose := s.rng.IntN(2) == 0
			actions = append(actions, func() {
				b.resets--
				if lose {
					s.logf("c%d's connection is reset, %s %s run and its answer lost", cl.id, r.op, r.path)
					n.drop(cl, r)
				} else {
					s.logf("c%d's connection is reset before %s %s reaches the server", cl.id, r.op, r.path)
					n.drop(cl, nil)
				}
			})
		default:
			actions = append(actions, func() { n.apply(r, true) })
		}
		if c := s.sharedReader(r); c != nil && b.silent > 0 && !s.quiet {
			d := time.Duration(1 + s.rng.Int64N(int64(s.timeout)))
			actions = append(actions, func() {
				b.silent--
				s.logf("c%d's reads share a node: before %s %s reaches the server,", c.id, r.op, r.path)
				s.cut(c, false, true, dialTimeout, d)
				n.apply(r, true)
			})
		}
		if c := s.sharedSync(r); c != nil && b.silent > 0 && !s.quiet {
			d := time.Duration(1 + s.rng.Int64N(int64(s.timeout)))
			actions = append(actions, func() {
				b.silent--
				s.logf("c%d's reads share a node: before its sync reaches the server, frames to be read one by one at the heal,", c.id)
				s.cut(c, false, true, dialTimeout, d)
				cl.trickle = true
				n.apply(r, true)
			})
		}
	}
	for _, cl := range n.clients {
		if cl.trickling() {
			actions = append(actions, func() { n.readNext(cl) })
		}
	}
	if b.lowers > 0 && !s.quiet && s.rng.IntN(20) == 0 {
		actions = append(actions, func() {
			b.lowers--
			n.maxT = s.timeout * 2 / 3
			s.logf("the server restarts with maxSessionTimeout %v: every connection is reset", n.maxT)
			for _, cl := range n.clients {
				if cl.tcp != nil && !cl.frozen {
					n.drop(cl, nil)
				}
			}
		})
	}
	if s.cfg.peer && s.peer == nil && !s.quiet && s.rng.IntN(3) == 0 && slices.ContainsFunc(s.clients, func(c *simClient) bool { return c.holding != nil }) {
		actions = append(actions, s.peerCreates)
	}
	for _, c := range s.clients {
		cl := c.zk
		if !s.quiet && !cl.frozen {
			if b.cancels > 0 && c.cancel != nil && c.holding == nil && s.rng.IntN(6) == 0 {
				actions = append(actions, func() { s.logf("c%d cancels", c.id); b.cancels--; c.cancel() })
			}
			targeted := c.holding != nil || s.rng.IntN(4) == 0 // holders are what tests the loss rule
			if b.cuts > 0 && !cl.cut() && targeted {
				actions = append(actions, func() { b.cuts--; s.cutAtRandom(c) })
			}
			if b.freezes > 0 && !cl.cut() && targeted && s.rng.IntN(2) == 0 {
				actions = append(actions, func() { b.freezes--; s.freeze(c) })
			}
			if c.holding != nil && s.rng.IntN(10) == 0 {
				actions = append(actions, func() {
					s.logf("c%d's next keepalive waits for the scheduler", c.id)
					cl.holdSync = true
				})
			}
		}
		if !s.quiet && s.rng.IntN(40) == 0 {
			actions = append(actions, func() {
				s.logf("an application elsewhere writes %s", appPath(c.zk.id))
				s.server.touchData(appPath(c.zk.id))
			})
		}
	}
	return actions
}

// keeper returns, with caching, a client that keeps a node: of r's own
// process if own, else of another. Cutting its link from server to client
// as a node is created holds the notification back; as its sync reaches
// the server, holds the answer back too, to be read frame by frame at the
// heal. A re-grant meanwhile must not pass the node. Call with net.mu
// held.
func (s *sim) keeper(r *zkReq, own bool) *simClient {
	for _, c := range s.clients {
		cl := c.zk
		if (cl == r.cl) != own || cl.cut() || cl.frozen || !own && cl.tcp == nil {
			continue
		}
		if cached, _ := c.lock.cache.keptNode(); cached {
			return c
		}
	}
	return nil
}

// sharedReader returns, when r is the create of a writer's node, a client
// of another process that holds a coalesced read: cutting its link from
// server to client as the writer queues holds the notification back (a
// silent cut), and a reader of that process that arrives meanwhile must
// not join the node the writer waits for. Call with net.mu held.
func (s *sim) sharedReader(r *zkReq) *simClient {
	if s.cfg.cache && r.op == "create" {
		return s.keeper(r, false)
	}
	if !s.cfg.coalesce || r.op != "create" || !strings.Contains(r.path, "-"+Write.String()+"-") {
		return nil
	}
	for _, c := range s.clients {
		cl := c.zk
		if cl != r.cl && c.holding != nil && c.holding.Mode() == Read && !cl.cut() && !cl.frozen && cl.tcp != nil {
			return c
		}
	}
	return nil
}

// sharedSync returns, when r is a sync, a client of its process that
// holds a coalesced read: the sync may be a joiner's. Cutting the link
// from server to client as it reaches the server holds its answer back;
// a writer may queue meanwhile, and another reader of the process arrive
// after it. At the heal, that reader must not be let in by the earlier
// sync's answer, read before the writer's notification. Call with net.mu
// held.
func (s *sim) sharedSync(r *zkReq) *simClient {
	if s.cfg.cache && r.op == "sync" {
		return s.keeper(r, true)
	}
	if !s.cfg.coalesce || r.op != "sync" {
		return nil
	}
	for _, c := range s.clients {
		cl := c.zk
		if cl == r.cl && c.holding != nil && c.holding.Mode() == Read && !cl.cut() && !cl.frozen {
			return c
		}
	}
	return nil
}

// plan considers, once per grant, a planned fault for a holder that means
// to hold past its session, at the moment that hurts most:
//
//   - the issue's: late in a ping cycle, a notification (which pushes
//     go-zookeeper's read deadline furthest past the server's expiry), and
//     at once a partition longer than the session;
//   - its process stopped (the other report);
//   - a stalled answer: the link cut from server to client, so that a
//     keepalive the server has run is answered late, and as it heals, late
//     in a ping cycle, cut both ways for longer than the session: a lease
//     dated from the answer instead of the request outlives the session.
//
// Call with net.mu held.
func (s *sim) plan(c *simClient) {
	cl := c.zk
	if c.holding == nil || c.planned == c.holding {
		return
	}
	c.planned = c.holding
	if s.budget.planned == 0 || s.quiet || cl.tcp == nil || c.holdEnd.Sub(time.Now()) <= s.timeout {
		return
	}
	every := cl.pingInterval()
	late := func(after time.Time) time.Time { // late in a ping cycle of cl's connection
		when := cl.tcp.nextPing.Add(-time.Duration(1 + s.rng.Int64N(int64(every/4))))
		for when.Before(after) {
			when = when.Add(every)
		}
		return when
	}
	g := c.holding
	ready := func() bool {
		return c.holding == g && !cl.cut() && !cl.frozen && cl.tcp != nil && s.budget.planned > 0
	}
	long := func() time.Duration { return s.timeout + time.Duration(s.rng.Int64N(int64(2*s.timeout))) }
	kind := s.rng.IntN(4)
	switch {
	case s.cfg.noCut:
		kind = 1
	case s.cfg.noFreeze && kind == 1, s.cfg.bothWays && kind == 2:
		kind = 0
	}
	switch kind {
	case 1:
		s.plans = append(s.plans, simPlan{late(time.Now()), func() {
			if ready() {
				s.budget.planned--
				s.freeze(c)
			}
		}})
	case 2:
		start := time.Now().Add(time.Duration(s.rng.Int64N(int64(every))))
		s.plans = append(s.plans, simPlan{start, func() {
			if !ready() {
				return
			}
			s.budget.planned--
			// Healed before go-zookeeper gives the connection up.
			heal := late(time.Now().Add(every / 4))
			if deadline := cl.tcp.lastRecv.Add(cl.recvTimeout() - time.Millisecond); heal.After(deadline) {
				heal = deadline
			}
			s.cut(c, false, true, dialTimeout, heal.Sub(time.Now()))
			s.plans = append(s.plans, simPlan{heal, func() {
				if c.holding == g && !cl.cut() && !cl.frozen && cl.tcp != nil {
					s.logf("as it heals:")
					s.cut(c, true, true, dialTimeout, long())
				}
			}})
		}})
	default:
		s.plans = append(s.plans, simPlan{late(time.Now()), func() {
			if !ready() {
				return
			}
			s.budget.planned--
			s.logf("an application elsewhere writes %s, and at once:", appPath(c.zk.id))
			s.server.touchData(appPath(c.zk.id))
			s.cut(c, true, true, dialTimeout, long())
		}})
	}
}

// simBudget is how many faults of each kind a schedule has left.
type simBudget struct {
	resets, cancels, cuts, freezes int
	planned                        int // see plan
	silent                         int // silent cuts under a coalesced reader as a writer queues or a sync goes (see sharedReader, sharedSync)
	lowers                         int // restarts of the server with a lower maxSessionTimeout
}

type simPlan struct {
	at time.Time
	do func()
}

// nextPlan returns the index of the earliest plan, or -1.
func (s *sim) nextPlan() int {
	next := -1
	for i, p := range s.plans {
		if next < 0 || p.at.Before(s.plans[next].at) {
			next = i
		}
	}
	return next
}

// react cuts, with even odds, the link of a client that has just read a
// watch notification: go-zookeeper then notices a partition up to 2T/3
// after the notification, while the server counts T from the last packet
// it heard, which may be a ping up to T/3 older.
func (s *sim) react(now time.Time) bool {
	if s.budget.cuts == 0 || s.quiet {
		return false
	}
	for _, c := range s.clients {
		cl := c.zk
		if !cl.notified.Equal(now) || c.reacted.Equal(now) || cl.cut() || cl.frozen || cl.tcp == nil {
			continue
		}
		c.reacted = now
		if s.rng.IntN(2) == 0 {
			s.budget.cuts--
			d := s.timeout + time.Duration(s.rng.Int64N(int64(2*s.timeout)))
			s.logf("right after that notification:")
			s.cut(c, true, true, dialTimeout, d)
			return true
		}
	}
	return false
}

// cutAtRandom cuts c's link: both ways or one, for a short while (ridden
// out with a known timeout), up to T, or longer than a session survives.
func (s *sim) cutAtRandom(c *simClient) {
	r := s.rng
	c2s, s2c := true, true
	switch r.IntN(4) {
	case 2:
		s2c = s.cfg.bothWays
	case 3:
		c2s = s.cfg.bothWays
	}
	fails := dialTimeout
	if c2s && s2c {
		fails = zkDial(r.IntN(3))
	}
	var d time.Duration
	switch r.IntN(3) {
	case 0:
		d = time.Duration(1 + r.Int64N(int64(s.timeout/3)))
	case 1:
		d = s.timeout/3 + time.Duration(r.Int64N(int64(s.timeout*2/3)))
	default:
		d = s.timeout + time.Duration(r.Int64N(int64(2*s.timeout)))
	}
	s.cut(c, c2s, s2c, fails, d)
}

func (s *sim) cut(c *simClient, c2s, s2c bool, fails zkDial, d time.Duration) {
	now := time.Now()
	c.cutAt = now
	s.net.cutLink(c.zk, c2s, s2c, fails, now.Add(d))
	way := "both ways"
	switch {
	case !s2c:
		way = "client to server"
	case !c2s:
		way = "server to client"
	}
	dials := map[zkDial]string{dialTimeout: "time out", dialRefused: "are refused", dialBlackhole: "connect to a black hole"}[fails]
	s.logf("c%d's link is cut %s for %v; its dials %s", c.id, way, d, dials)
}

// freeze stops c's process for a while, or past its session.
func (s *sim) freeze(c *simClient) {
	d := time.Duration(1 + s.rng.Int64N(int64(s.timeout/2)))
	if s.rng.IntN(2) == 0 {
		d = s.timeout/2 + time.Duration(s.rng.Int64N(int64(2*s.timeout)))
	}
	s.logf("c%d's process is stopped for %v", c.id, d)
	s.net.freeze(c.zk, time.Now().Add(d))
	for _, o := range s.clients {
		if o.zk == c.zk { // c, and the other goroutine of its process
			o.stopped = len(s.grants)
		}
	}
}

// thaw resumes c's process. Its holder's first look (Err, or a nested
// Lock) comes first, before go-zookeeper or the lock's timers have run: it
// must see a loss that happened while the process was stopped.
func (s *sim) thaw(c *simClient) {
	n := s.net
	for _, o := range s.clients {
		if o.zk != c.zk { // c, and the other goroutine of its process
			continue
		}
		n.mu.Lock()
		g, from, failed := o.holding, o.zk.frozenAt, s.failed != ""
		checked := g != nil && s.protected(o, g)
		nested := checked && s.rng.IntN(2) == 0
		n.mu.Unlock()
		if checked && !failed {
			look, err := "Err", error(nil)
			if nested {
				look, err = "nested Lock", s.lockNested(o, g)
			} else {
				err = g.Err()
			}
			s.logf("c%d resumes; its first %s: %v", o.id, look, err)
			n.mu.Lock()
			if why := s.lostDuring(o, g); err == nil && why != "" && s.failed == "" {
				s.failed = fmt.Sprintf("c%d's process was stopped from %v to %v, and its first %s after resuming succeeded, though %s",
					o.id, at(from), at(time.Now()), look, why)
			}
			n.mu.Unlock()
			synctest.Wait() // what the look started runs up to its first request
		}
	}
	n.mu.Lock()
	n.raceSends()
	s.logf("c%d's process resumes", c.id)
	now := time.Now()
	for _, o := range s.clients {
		if o.zk == c.zk {
			o.resumed = now
		}
	}
	n.thaw(c.zk, s.rng.IntN(2) == 0)
	n.mu.Unlock()
}

// lockNested takes a grant nested in g, c's grant, as a holder that calls
// Lock (RLock in a read grant) with a context carrying g; it releases it at
// once, and returns the call's error.
func (s *sim) lockNested(c *simClient, g *Grant) error {
	ctx := ContextWithGrant(context.Background(), g)
	lock := c.lock.Lock
	if g.Mode() == Read {
		lock = c.lock.RLock
	}
	ng, err := lock(ctx)
	if ng != nil {
		ng.Release(ctx)
	}
	return err
}

// protected reports whether g, held by c, is promised a head start before
// its session may expire: the lock knows the session timeout the server
// granted, or judges g by a bound that the server granted at every
// handshake of g's session so far. Call with net.mu held.
func (s *sim) protected(c *simClient, g *Grant) bool {
	if c.known {
		return true
	}
	least, ok := s.net.least[g.h.session]
	return c.bound > 0 && ok && least >= c.bound
}

// lostDuring says why g, held by c, was lost while c's process was
// stopped, if it was: a conflicting grant given, its session expired, or
// its hold limit's notice came.
// Call with net.mu held.
func (s *sim) lostDuring(c *simClient, g *Grant) string {
	for _, o := range s.grants[c.stopped:] {
		if o.client != c.id && !o.void && o.lock == g.h.l.path && (o.mode == Write || g.Mode() == Write && !c.downgrading) {
			if t, ok := s.net.expired[o.g.h.session]; ok && !s.protected(s.clients[o.client], o.g) && !t.After(o.at) {
				continue // go-zookeeper's blind spot, as in check: proves nothing of c's grant
			}
			return fmt.Sprintf("c%d was granted %s at %v", o.client, o.mode, at(o.at))
		}
	}
	if t, ok := s.net.expired[g.h.session]; ok && !t.Before(c.zk.frozenAt) {
		return fmt.Sprintf("the server expired its session at %v", at(t))
	}
	if lim := limitOf(g.h); lim != nil && !time.Now().Before(lim.notice) {
		return fmt.Sprintf("its hold limit's notice came at %v", at(lim.notice))
	}
	return ""
}

// settle ends a failed schedule: every wait is cancelled, every link heals
// and every process resumes, so that the clients return. Call with net.mu
// held.
func (s *sim) settle() {
	s.settled, s.quiet, s.budget = true, true, simBudget{}
	now := time.Now()
	for _, c := range s.clients {
		if c.cancel != nil {
			c.cancel()
		}
		cl := c.zk
		cl.holdSync = false
		if cl.cut() {
			cl.healAt = now
		}
		if cl.frozen {
			cl.thawAt = now
		}
	}
}

// check verifies mutual exclusion over the grants whose holders can
// observe, and have not been told of a loss. Call with net.mu held.
func (s *sim) check() {
	if s.failed != "" {
		return
	}
	now := time.Now()
	if s.checkPeer(now); s.failed != "" {
		return
	}
	if s.checkWaiters(now); s.failed != "" {
		return
	}
	writers, readers := map[string][]*simClient{}, map[string][]*simClient{}
	var permits []*simClient // the holders of a bounded lock
	for _, c := range s.clients {
		g := c.holding
		if g == nil || c.zk.frozen || isClosed(g.ctx.Done()) {
			continue
		}
		if !c.known {
			if noticed, what := s.noticed(c, g); what != "" && now.Sub(noticed) > zkclient.UnknownTimeoutPoll+time.Millisecond {
				s.failed = fmt.Sprintf("c%d's grant, whose session timeout is unknown, is not lost %v after go-zookeeper reported %s",
					c.id, now.Sub(noticed), what)
				return
			}
			if _, expired := s.net.expired[g.h.session]; expired && !s.protected(c, g) {
				continue // go-zookeeper's blind spot, which such a grant keeps without a bound the server granted
			}
		}
		if g.h.l.capacity > 0 {
			permits = append(permits, c)
		}
		if p := g.h.l.path; g.Mode() == Write && !c.downgrading {
			writers[p] = append(writers[p], c)
		} else {
			readers[p] = append(readers[p], c)
		}
	}
	for p, ws := range writers {
		if len(ws) > 1 || len(ws) == 1 && len(readers[p]) > 0 {
			var b strings.Builder
			b.WriteString("mutual exclusion violated on " + p + ", none told of a loss:")
			for _, c := range append(ws, readers[p]...) {
				b.WriteString("\n\t")
				b.WriteString(s.status(c))
			}
			s.failed = b.String()
			return
		}
	}
	held := map[string]int64{} // per lock: a set's grants are on two paths
	for _, c := range permits {
		held[c.holding.h.l.path] += holdWeight(c.holding.h)
	}
	for p, n := range held {
		if n <= simPermitCapacity {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d permits of %s held of %d, none told of a loss:", n, p, simPermitCapacity)
		for _, c := range permits {
			if c.holding.h.l.path == p {
				b.WriteString("\n\t")
				b.WriteString(s.status(c))
			}
		}
		s.failed = b.String()
		return
	}
}

// checkWaiters is the bounded lock's liveness check. It fails a blocking
// acquisition of one lock whose node has fitted on the server for longer
// than simFitBound, while its process and those of every node before it ran
// on healthy links. A waiter may rely on a node ahead for a wake-up: its
// mark, or its deletion. A stopped process writes no mark, and its node
// goes only with its session. Call with net.mu held.
func (s *sim) checkWaiters(now time.Time) {
	healthy := map[int64]bool{}
	for _, c := range s.clients {
		if cl := c.zk; !cl.frozen && cl.c2s && cl.s2c && cl.phase == phaseSession {
			healthy[cl.c.session.Load()] = true
		}
	}
	for _, c := range s.clients {
		session := c.zk.c.session.Load()
		if c.waitFrom == 0 || !healthy[session] {
			c.fitSince = time.Time{}
			continue
		}
		node, fits, ahead := s.server.fits(dir, session, c.waitFrom)
		switch {
		case !fits || slices.ContainsFunc(ahead, func(owner int64) bool { return !healthy[owner] }):
			c.fitSince = time.Time{}
		case c.fitSince.IsZero():
			c.fitSince = now
		case now.Sub(c.fitSince) > simFitBound:
			s.failed = fmt.Sprintf("c%d still waits, though its node %s has fitted for %v, every process concerned running on a healthy link",
				c.id, node, now.Sub(c.fitSince))
			return
		}
	}
}

// noticed returns since when go-zookeeper has reported g's connection lost
// (a state other than StateHasSession) or its session replaced, if it has.
func (s *sim) noticed(c *simClient, g *Grant) (since time.Time, what string) {
	cl := c.zk
	switch {
	case cl.c.session.Load() != g.h.session:
		since, what = s.net.left[g.h.session], "another session"
	case cl.c.State() != zk.StateHasSession:
		since, what = cl.downSince, cl.c.State().String()
	default:
		return time.Time{}, ""
	}
	return later(since, c.resumed), what
}

// status describes c's grant and connection, for a failure message.
func (s *sim) status(c *simClient) string {
	cl, g := c.zk, c.holding
	var b strings.Builder
	fmt.Fprintf(&b, "c%d holds %s %s (session %d", c.id, g.Mode(), path.Base(g.Node()), g.h.session)
	if t, granted := g.h.c.Timeout(g.h.l.sessionTimeout, g.h.session); granted {
		fmt.Fprintf(&b, ", timeout %v)", t)
	} else if t > 0 {
		fmt.Fprintf(&b, ", timeout unknown, judged by the bound %v)", t)
	} else {
		b.WriteString(", timeout unknown)")
	}
	if t, ok := s.net.expired[g.h.session]; ok {
		fmt.Fprintf(&b, "; the server expired the session at %v", at(t))
	}
	fmt.Fprintf(&b, "; the server last heard it at %v", at(cl.lastHeard))
	if tcp := cl.tcp; tcp != nil {
		fmt.Fprintf(&b, "; go-zookeeper read its last frame at %v", at(tcp.lastRecv))
	} else if !cl.downSince.IsZero() {
		fmt.Fprintf(&b, "; go-zookeeper gave up its connection at %v", at(cl.downSince))
	}
	if !cl.notified.IsZero() {
		fmt.Fprintf(&b, ", its last watch notification came at %v", at(cl.notified))
	}
	if !c.cutAt.IsZero() {
		fmt.Fprintf(&b, "; its link was last cut at %v", at(c.cutAt))
	}
	return b.String()
}

// peerCreates makes the blind peer's node, a Curator writer's, from a
// process outside the simulation: the watches of our clients fire at once.
// It holds for up to twice the session timeout. Call with net.mu held.
func (s *sim) peerCreates() {
	p := &simPeer{conn: s.server.conn(), lists: map[*zkClient]int{}}
	node, err := p.conn.Create(dir+"/_c_"+uuid+"-__WRIT__", nil, zk.FlagEphemeral|zk.FlagSequence, nil)
	if err != nil {
		s.logf("the blind peer cannot queue: %v", err)
		return
	}
	now := time.Now()
	p.node, p.created, p.until = node, now, now.Add(time.Duration(1+s.rng.Int64N(int64(2*s.timeout))))
	// A listing on its way as the peer queues counts as one sent after it.
	// The server reads it after the create, so it shows the peer's node
	// unless the peer has gone by then. Only the listings it read before
	// the create are left out.
	for _, cl := range s.net.clients {
		p.lists[cl] = len(cl.dirLists)
		if i := slices.IndexFunc(cl.dirLists, func(r *zkReq) bool { return r.stage < stageApplied }); i >= 0 {
			p.lists[cl] = i
		}
	}
	s.peer = p
	s.logf("a blind peer queues %s, and holds until %v", path.Base(node), at(p.until))
}

// peerReleases deletes the blind peer's node when its hold ends, when
// every client is done, or when the run settles, and reports whether it
// did.
func (s *sim) peerReleases(clientsDone <-chan struct{}) bool {
	s.net.mu.Lock()
	defer s.net.mu.Unlock()
	p := s.peer
	if p == nil || p.gone || time.Now().Before(p.until) && !isClosed(clientsDone) && !s.settled {
		return false
	}
	p.gone = true
	if err := p.conn.Delete(p.node, -1); err != nil {
		s.failed = fmt.Sprintf("the blind peer's release: %v", err)
	}
	s.logf("the blind peer releases %s", path.Base(p.node))
	return true
}

// checkPeer checks the fleet watch's promise (fleet.go) while the blind
// peer holds. A client that holds a grant of the peer's lock, not told of
// a loss, and whose connection has been healthy since simPeerQuiet before
// the peer's create, must have sent a listing of the directory within
// fleetInterval of the later of the create and its grant, or had one on
// its way at the create. Once those listings are answered (the
// model's round trip, which the scheduler chooses), its grant must be
// lost. Call with net.mu held.
func (s *sim) checkPeer(now time.Time) {
	p := s.peer
	if p == nil || p.gone {
		return
	}
	for _, c := range s.clients {
		g, cl := c.holding, c.zk
		if g == nil || g.h.l.path != dir || isClosed(g.ctx.Done()) || cl.frozen || cl.cut() || cl.tcp == nil || len(cl.tcp.s2c) > 0 ||
			!cl.faultAt.Before(p.created.Add(-simPeerQuiet)) {
			continue
		}
		due := later(p.created.Add(fleetInterval), c.heldSince)
		if !now.After(due) {
			continue
		}
		sent, answered := 0, true
		for _, r := range cl.dirLists[p.lists[cl]:] {
			if r.at.After(due) {
				break
			}
			sent++
			answered = answered && r.stage == stageDone
		}
		switch {
		case sent == 0:
			s.failed = fmt.Sprintf("c%d holds %s, granted at %v; the blind peer queued at %v, and c%d's process sent no listing by %v",
				c.id, g.Mode(), at(c.heldSince), at(p.created), c.id, at(due))
		case answered:
			s.failed = fmt.Sprintf("c%d holds %s, granted at %v; the blind peer queued at %v, and c%d's listings sent by %v are answered, "+
				"yet it is not told", c.id, g.Mode(), at(c.heldSince), at(p.created), c.id, at(due))
		}
		if s.failed != "" {
			return
		}
	}
}
