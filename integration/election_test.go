package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/delayproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Environment of TestHelperLeader when an election test runs it as the
// leader's process.
const (
	leaderEnvServer  = "ZKRWLOCK_LEADER_SERVER"
	leaderEnvPath    = "ZKRWLOCK_LEADER_PATH"
	leaderEnvTimeout = "ZKRWLOCK_LEADER_TIMEOUT"
	leaderEnvValue   = "ZKRWLOCK_LEADER_VALUE"
	leaderEnvDelay   = "ZKRWLOCK_LEADER_DELAY" // WithLockDelay's, if set
)

// TestHelperLeader is not a test: the election tests run the test binary
// again as a process that campaigns, with the environment above. It prints
// "leading <term>" once it leads, and "told <ns>" with CLOCK_MONOTONIC as
// its leadership's Done closes; then it exits. Without that environment it
// returns at once.
func TestHelperLeader(t *testing.T) {
	server := os.Getenv(leaderEnvServer)
	if server == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(2)
	}
	timeout, err := time.ParseDuration(os.Getenv(leaderEnvTimeout))
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := rwlock.Dial(ctx, []string{server}, timeout)
	if err != nil {
		fail(err)
	}
	var opts []rwlock.Option
	if d, err := time.ParseDuration(os.Getenv(leaderEnvDelay)); err == nil {
		opts = append(opts, rwlock.WithLockDelay(d))
	}
	e, err := rwlock.NewElection(conn, os.Getenv(leaderEnvPath), opts...)
	if err != nil {
		fail(err)
	}
	g, err := e.Campaign(ctx, []byte(os.Getenv(leaderEnvValue)))
	if err != nil {
		fail(err)
	}
	fmt.Printf("leading %d\n", g.Token())
	<-g.Done()
	fmt.Printf("told %d\n", monotonic())
	os.Exit(0)
}

// leaderProcess is a leader in a process of its own.
type leaderProcess struct {
	*helperProcess
	term int64
	told chan int64 // CLOCK_MONOTONIC as its Done closed
}

// startLeader runs TestHelperLeader against server, and waits until it
// leads.
func startLeader(t *testing.T, server, path string, timeout time.Duration, value string) *leaderProcess {
	t.Helper()
	p := &leaderProcess{told: make(chan int64, 1)}
	p.helperProcess = startHelper(t, "TestHelperLeader", leaderEnvServer+"="+server, leaderEnvPath+"="+path,
		leaderEnvTimeout+"="+timeout.String(), leaderEnvValue+"="+value)
	p.term, _ = strconv.ParseInt(strings.TrimPrefix(p.line(t, time.Minute, "leading "), "leading "), 10, 64)
	go func() {
		for line := range p.lines {
			if v, ok := strings.CutPrefix(line, "told "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				p.told <- n
			}
		}
	}()
	return p
}

// observed is what an observer reported, each with CLOCK_MONOTONIC.
type observed struct {
	mu     sync.Mutex
	states []rwlock.Leadership
	at     []int64
	seen   chan struct{} // a value each time a state comes
}

// observe follows e until ctx ends; the test's cleanup waits for it.
func observe(t *testing.T, ctx context.Context, e *rwlock.Election) *observed {
	o := &observed{seen: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(ctx)
	states := e.Observe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range states {
			o.mu.Lock()
			o.states, o.at = append(o.states, s), append(o.at, monotonic())
			o.mu.Unlock()
			select {
			case o.seen <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return o
}

// firstAt returns when the observer first reported term, and whether it did.
func (o *observed) firstAt(term int64) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, s := range o.states {
		if s.Term == term {
			return o.at[i], true
		}
	}
	return 0, false
}

// waitFor waits until the observer has reported term.
func (o *observed) waitFor(t *testing.T, term int64, within time.Duration) int64 {
	t.Helper()
	limit := time.After(within)
	for {
		if at, ok := o.firstAt(term); ok {
			return at
		}
		select {
		case <-o.seen:
		case <-limit:
			t.Fatalf("the observer did not report term %d within %v; it reported %v", term, within, o.all())
		}
	}
}

func (o *observed) all() []rwlock.Leadership {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]rwlock.Leadership(nil), o.states...)
}

// checkOrder checks that the observer never went backwards: terms never
// decrease, and a term's value is reported once per change.
func (o *observed) checkOrder(t *testing.T) {
	t.Helper()
	var last int64
	for i, s := range o.all() {
		if s.Term != 0 {
			require.GreaterOrEqual(t, s.Term, last, "state %d went backwards: %v", i, o.all())
			last = s.Term
		}
	}
}

// A leader partitioned from the ensemble, in a process of its own, is told
// (its Done closes) before its successor's Campaign returns, and before an
// observer on a third client reports the successor. The order is taken
// with CLOCK_MONOTONIC across the processes.
func TestElectionLeaderPartitioned(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1)
	p := proxied(t, srv.Addr(0))
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()

	leader := startLeader(t, p.Addr(), path, timeout, "10.0.0.1:80")

	watcher, err := rwlock.NewElection(connect(t, srv.Addr(0), timeout).conn, path)
	require.NoError(t, err)
	o := observe(t, ctx, watcher)
	o.waitFor(t, leader.term, 10*time.Second)
	value, term, err := watcher.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:80", string(value))
	require.Equal(t, leader.term, term)

	sc := connect(t, srv.Addr(0), timeout)
	successor, err := rwlock.NewElection(sc.conn, path)
	require.NoError(t, err)
	var returnedAt atomic.Int64 // CLOCK_MONOTONIC as the successor's Campaign returned
	next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
		g, err := successor.Campaign(ctx, []byte("10.0.0.2:80"))
		if err == nil {
			returnedAt.Store(monotonic())
		}
		return g, err
	})
	waitNodeCount(t, sc.conn, path, 2, 10*time.Second)
	next.stillWaiting(t, "the leader leads")

	start := monotonic()
	p.Blackhole()
	g := next.granted(t, timeout+2*faultTick+10*time.Second)
	defer mustRelease(t, g)
	var told int64
	select {
	case told = <-leader.told:
	case <-time.After(5 * time.Second):
		t.Fatal("the partitioned leader was never told")
	}
	heal(p)
	leader.wait(t)
	seen := o.waitFor(t, g.Token(), 10*time.Second)
	returned := returnedAt.Load()
	t.Logf("partition → leader told %v, → successor's Campaign returned %v, → observer saw it %v (session timeout %v)",
		msec(time.Duration(told-start)), msec(time.Duration(returned-start)), msec(time.Duration(seen-start)), timeout)
	require.Less(t, told, returned, "the successor led before the old leader was told")
	require.Less(t, told, seen, "the observer reported the successor before the old leader was told")
	require.Greater(t, g.Token(), leader.term, "terms increase")
	o.checkOrder(t)
	value, term, err = watcher.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.2:80", string(value))
	assert.Equal(t, g.Token(), term)
}

// A leader killed with SIGKILL leads until the server expires its session;
// then its successor leads, in a larger term, and an observer on a third
// client reports the two in order, with nobody or the successor after the
// dead leader, never backwards.
func TestElectionLeaderKilled(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1)
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()

	leader := startLeader(t, srv.Addr(0), path, timeout, "first")

	watcher, err := rwlock.NewElection(connect(t, srv.Addr(0), timeout).conn, path)
	require.NoError(t, err)
	o := observe(t, ctx, watcher)
	o.waitFor(t, leader.term, 10*time.Second)

	sc := connect(t, srv.Addr(0), timeout)
	successor, err := rwlock.NewElection(sc.conn, path)
	require.NoError(t, err)
	next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
		return successor.Campaign(ctx, []byte("second"))
	})
	waitNodeCount(t, sc.conn, path, 2, 10*time.Second)
	next.stillWaiting(t, "the leader leads")

	killed := time.Now()
	require.NoError(t, syscall.Kill(leader.pid(), syscall.SIGKILL))
	require.ErrorContains(t, leader.reap(), "killed")
	g := next.granted(t, timeout+2*faultTick+10*time.Second)
	defer mustRelease(t, g)
	took := next.at.Sub(killed)
	t.Logf("leader SIGKILLed → successor leads %v (session timeout %v, tick %v)", msec(took), timeout, faultTick)
	require.GreaterOrEqual(t, took, timeout/2, "the successor led before the dead leader's session could have expired")
	require.Greater(t, g.Token(), leader.term, "terms increase")
	o.waitFor(t, g.Token(), 10*time.Second)
	o.checkOrder(t)
	for _, s := range o.all() {
		require.Contains(t, []int64{0, leader.term, g.Token()}, s.Term, "a term nobody led in: %v", o.all())
	}
	value, _, err := watcher.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "second", string(value))
}

// countingConn counts the requests a client sends, pings and the
// handshake aside.
type countingConn struct {
	net.Conn
	writes atomic.Int64
	n      *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	const opPing = 11
	if c.writes.Add(1) > 1 { // the first is the handshake
		if _, op, _, ok := parseRequest(p); !ok || op != opPing {
			c.n.Add(1)
		}
	}
	return c.Conn.Write(p)
}

// countRequests returns a connect option that counts the client's
// requests in n.
func countRequests(n *atomic.Int64) connectOption {
	return withDialer(func(next zk.Dialer) zk.Dialer {
		return func(network, address string, timeout time.Duration) (net.Conn, error) {
			c, err := next(network, address, timeout)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, n: n}, nil
		}
	})
}

// Observers cost the server nothing while the queue behind the leader
// changes, one read each per Proclaim, and a bounded few per change of
// leader; never a listing per candidate.
func TestObserveRequests(t *testing.T) {
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()
	const observers = 10
	counts := make([]*atomic.Int64, observers)
	watched := make([]*observed, observers)
	for i := range observers {
		counts[i] = &atomic.Int64{}
		e, err := rwlock.NewElection(connect(t, srv.ConnectString(), 0, countRequests(counts[i])).conn, path)
		require.NoError(t, err)
		watched[i] = observe(t, ctx, e)
	}
	leader, err := rwlock.NewElection(connect(t, srv.ConnectString(), 0).conn, path)
	require.NoError(t, err)
	g, err := leader.Campaign(ctx, []byte("a"))
	require.NoError(t, err)
	for _, o := range watched {
		o.waitFor(t, g.Token(), 10*time.Second)
	}
	// seenValue waits until every observer has reported value.
	seenValue := func(value string) {
		t.Helper()
		for _, o := range watched {
			zktest.WaitFor(t, 10*time.Second, func() bool {
				all := o.all()
				return len(all) > 0 && string(all[len(all)-1].Value) == value
			}, "an observer did not report %q: %v", value, lazyText(func() string { return fmt.Sprint(o.all()) }))
		}
	}
	snapshot := func() []int64 {
		n := make([]int64, observers)
		for i, c := range counts {
			n[i] = c.Load()
		}
		return n
	}

	// Candidates queue behind the leader, and some give up.
	before := snapshot()
	cc := connect(t, srv.ConnectString(), 0)
	var waiting []*acquisition
	var first *rwlock.Election // the first candidate's
	live := 1                  // the leader's node
	for i := range 6 {
		e, err := rwlock.NewElection(cc.conn, path)
		require.NoError(t, err)
		if i == 0 {
			first = e
		}
		cctx, cancel := context.WithCancel(ctx)
		waiting = append(waiting, goAcquire(t, cctx, func(ctx context.Context) (*rwlock.Grant, error) {
			return e.Campaign(ctx, []byte(fmt.Sprint("candidate ", i)))
		}))
		live++
		waitNodeCount(t, cc.conn, path, live, 10*time.Second)
		if i == 0 {
			// The first candidate behind a lone leader: each observer
			// lists once, and sees it. The others cost nothing.
			for j, c := range counts {
				zktest.WaitFor(t, 10*time.Second, func() bool { return c.Load() > before[j] },
					"observer %d did not list the first candidate", j)
			}
		}
		if i%2 == 1 {
			cancel()
			_, err := waiting[i].wait(t)
			require.ErrorIs(t, err, context.Canceled)
			live--
			waitNodeCount(t, cc.conn, path, live, 10*time.Second)
		} else {
			t.Cleanup(cancel)
		}
	}
	// A Proclaim's notification comes after every change before it, so an
	// observer that reported it has answered any wake the queue caused.
	require.NoError(t, leader.Proclaim(ctx, []byte("a2")))
	seenValue("a2")
	after := snapshot()
	for i := range observers {
		require.Equal(t, int64(3), after[i]-before[i],
			"observer %d: three candidates queued and three gave up, then one Proclaim: a listing at the first candidate, and reads of the leader and of that candidate", i)
	}

	// The leader resigns: the first candidate left leads.
	require.NoError(t, leader.Resign(ctx))
	next := waiting[0].granted(t, 10*time.Second)
	defer mustRelease(t, next)
	seenValue("candidate 0")
	// The new leader's Proclaim comes after the observers' listing behind
	// it: each handles one change at a time.
	require.NoError(t, first.Proclaim(ctx, []byte("candidate 0, again")))
	seenValue("candidate 0, again")
	changed := snapshot()
	for i := range observers {
		n := changed[i] - after[i]
		require.Equal(t, int64(4), n, "observer %d: a change of leader to the listed candidate: a read, a listing since nobody was listed behind it; then a Proclaim: two reads", i)
	}
}

// A leader stopped (SIGSTOP) past its session leads nobody: its successor
// leads once the server expires the session, and the old leader's Done
// closes as soon as it resumes (SIGCONT), before it could act on its stale
// leadership. Observe on a third client goes from the one to the other.
func TestElectionLeaderPaused(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1)
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()

	leader := startLeader(t, srv.Addr(0), path, timeout, "paused")
	watcher, err := rwlock.NewElection(connect(t, srv.Addr(0), timeout).conn, path)
	require.NoError(t, err)
	o := observe(t, ctx, watcher)
	o.waitFor(t, leader.term, 10*time.Second)

	sc := connect(t, srv.Addr(0), timeout)
	successor, err := rwlock.NewElection(sc.conn, path)
	require.NoError(t, err)
	next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
		return successor.Campaign(ctx, []byte("next"))
	})
	waitNodeCount(t, sc.conn, path, 2, 10*time.Second)

	stopped := time.Now() // before the stop, which the successor must lead well after
	require.NoError(t, syscall.Kill(leader.pid(), syscall.SIGSTOP))
	g := next.granted(t, timeout+2*faultTick+10*time.Second)
	defer mustRelease(t, g)
	t.Logf("leader SIGSTOPped → successor leads %v", msec(next.at.Sub(stopped)))
	require.GreaterOrEqual(t, next.at.Sub(stopped), timeout/2, "the successor led before the stopped leader's session could have expired")
	o.waitFor(t, g.Token(), 10*time.Second)

	resumed := monotonic()
	require.NoError(t, syscall.Kill(leader.pid(), syscall.SIGCONT))
	var told int64
	select {
	case told = <-leader.told:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed leader was never told")
	}
	leader.wait(t)
	t.Logf("SIGCONT → the old leader told %v", msec(time.Duration(told-resumed)))
	require.Less(t, time.Duration(told-resumed), timeout/4, "the resumed leader must be told at its first look")
	require.Greater(t, g.Token(), leader.term)
	o.checkOrder(t)
}

// Observe's latency: the observer reports a new leader within one round
// trip of its Campaign's return. The successor learns of the handoff from
// one notification; the observer from the same one. It listed the
// successor when it queued, since that notification came first on its
// connection. So it reads the old head and the successor together: one
// round trip, where reading them one after the other takes two. A proxy
// delays every packet by 20 ms each way, so that round trips, not the
// scheduling of a loaded machine, make the lag.
func TestObserveLatency(t *testing.T) {
	tier.Long(t) // rounds of handoffs, timed
	srv := sharedServer(t)
	const delay = 20 * time.Millisecond
	p, err := delayproxy.Listen("127.0.0.1:0", srv.Addr(0), delay)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()
	elections := make([]*rwlock.Election, 2)
	for i := range elections {
		elections[i], err = rwlock.NewElection(connect(t, p.Addr(), 0).conn, path)
		require.NoError(t, err)
	}
	watcher, err := rwlock.NewElection(connect(t, p.Addr(), 0).conn, path)
	require.NoError(t, err)
	o := observe(t, ctx, watcher)
	direct := connect(t, srv.ConnectString(), 0).conn
	var returnedAt atomic.Int64 // CLOCK_MONOTONIC as the last Campaign returned

	leader, err := elections[0].Campaign(ctx, []byte("0"))
	require.NoError(t, err)
	o.waitFor(t, leader.Token(), 10*time.Second)
	const rounds = 20
	var lags []time.Duration
	for i := 1; i <= rounds; i++ {
		next := elections[i%2]
		a := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			g, err := next.Campaign(ctx, []byte(strconv.Itoa(i)))
			if err == nil {
				returnedAt.Store(monotonic())
			}
			return g, err
		})
		waitNodeCount(t, direct, path, 2, 10*time.Second)
		require.NoError(t, leader.Release(ctx))
		leader = a.granted(t, 10*time.Second)
		seen := o.waitFor(t, leader.Token(), 10*time.Second)
		lags = append(lags, time.Duration(seen-returnedAt.Load()))
	}
	mustRelease(t, leader)
	slices.Sort(lags)
	rtt := 2 * delay
	p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
	t.Logf("observer's lag behind the new leader's Campaign: p50 %v, p99 %v, max %v (a round trip through the proxy: %v or more)",
		p50, p99, lags[len(lags)-1], rtt)
	require.LessOrEqual(t, p50, rtt+rtt/2, "the median lag should be one round trip")
}

// A leader partitioned until the server expired its session, and then
// reconnected (CURATOR-696): it was told before its successor led, comes
// back to find its node gone and its leadership lost, never leads on a
// stale node, and may campaign again, behind its successor, in a larger
// term.
func TestElectionLeaderExpiredAndBack(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1)
	p := proxied(t, srv.Addr(0))
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()
	lc := connect(t, p.Addr(), timeout)
	old, err := rwlock.NewElection(lc.conn, path)
	require.NoError(t, err)
	g, err := old.Campaign(ctx, []byte("old"))
	require.NoError(t, err)
	done := closedAt(ctx, g.Done())
	watcher, err := rwlock.NewElection(connect(t, srv.Addr(0), timeout).conn, path)
	require.NoError(t, err)
	o := observe(t, ctx, watcher)
	o.waitFor(t, g.Token(), 10*time.Second)
	sc := connect(t, srv.Addr(0), timeout)
	successor, err := rwlock.NewElection(sc.conn, path)
	require.NoError(t, err)
	next := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return successor.Campaign(ctx, []byte("new")) })
	waitNodeCount(t, sc.conn, path, 2, 10*time.Second)
	session := lc.conn.SessionID()

	p.Blackhole()
	ng := next.granted(t, timeout+2*faultTick+10*time.Second)
	defer mustRelease(t, ng)
	var doneAt time.Time
	select {
	case doneAt = <-done:
	case <-time.After(time.Second):
		t.Fatal("the old leader was not told")
	}
	require.True(t, doneAt.Before(next.at), "the old leader was told %v after its successor led", next.at.Sub(doneAt))
	heal(p)
	zktest.WaitFor(t, 20*time.Second, func() bool {
		return lc.conn.State() == zk.StateHasSession && lc.conn.SessionID() != session
	}, "the old leader should come back with a new session")
	require.ErrorIs(t, g.Err(), rwlock.ErrLost)
	require.ErrorIs(t, old.Proclaim(ctx, []byte("stale")), rwlock.ErrLost, "no write on a stale node")
	value, term, err := old.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "new", string(value))
	require.Equal(t, ng.Token(), term)

	again := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return old.Campaign(ctx, []byte("old again")) })
	waitNodeCount(t, sc.conn, path, 2, 10*time.Second)
	again.stillWaiting(t, "the successor leads")
	require.NoError(t, successor.Resign(ctx))
	g2 := again.granted(t, 10*time.Second)
	defer mustRelease(t, g2)
	require.Greater(t, g2.Token(), ng.Token(), "terms increase")
	o.waitFor(t, g2.Token(), 10*time.Second)
	o.checkOrder(t)
}

// A reader queued on an election's path, behind the leader, is not let in
// by the leader's Proclaim: the leader still holds its write. The reader
// reads the node again, and is granted only once the leader resigns. The
// reader's debug log tells when it has taken the Proclaim's notification:
// it logs "waiting for" at each look, and "granted" as it is let in.
func TestReaderBehindLeaderWaitsThroughProclaim(t *testing.T) {
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/elect")
	ctx := t.Context()
	leader, err := rwlock.NewElection(connect(t, srv.ConnectString(), 0).conn, path)
	require.NoError(t, err)
	g, err := leader.Campaign(ctx, []byte("a"))
	require.NoError(t, err)

	var log debugLog
	r := connect(t, srv.ConnectString(), 0).lock(t, path, rwlock.WithLogger(log.logger()))
	reader := goAcquire(t, ctx, r.RLock)
	looks := func() int { return strings.Count(log.about("waiting for"), "\n") }
	zktest.WaitFor(t, 10*time.Second, func() bool { return looks() == 1 }, "the reader did not look at the leader")

	require.NoError(t, leader.Proclaim(ctx, []byte("a2")))
	zktest.WaitFor(t, 10*time.Second, func() bool { return looks() == 2 || reader.returned() },
		"the reader did not take the Proclaim's notification: %s", lazyText(func() string { return log.about("msg=") }))
	reader.stillWaiting(t, "a Proclaim is no downgrade: the leader still holds")
	require.NoError(t, g.Err())

	require.NoError(t, leader.Resign(ctx))
	mustRelease(t, reader.granted(t, 10*time.Second))
}
