package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A 3-member ensemble loses its leader to kill -9 while a mixed workload
// runs on clients spread over every member: mutual exclusion holds
// throughout, the workload makes progress again once a leader is elected,
// and nothing is left in the end. A dozen workers with requests in flight
// as the leader dies make go-zookeeper's own race (zk35) likely.
func TestFaultEnsembleLeaderKillMixedRun(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	t.Parallel()
	const timeout = 6 * time.Second
	cl := faultServer(t, 3)
	const clients, workersPerClient, batch = 6, 2, 50
	leader, err := cl.Leader()
	require.NoError(t, err)
	path := zktest.LockPath(t, "/it")
	locks := make([]*rwlock.RWLock, clients)
	conns := make([]*zk.Conn, clients)
	onLeader := 0
	for i := range locks {
		conn := connect(t, cl.ConnectString(), timeout, withHome(i%3)).conn
		conns[i] = conn
		if conn.Server() == cl.Addr(leader) {
			onLeader++
		}
		locks[i], err = rwlock.New(conn, path, rwlock.WithSessionTimeout(timeout))
		require.NoError(t, err)
	}
	require.NotZero(t, onLeader, "some clients are on the leader")
	checker := connect(t, cl.ConnectString(), timeout, withHome((leader+1)%3)).conn

	var x exclusion
	var st mixedStats
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	eg, ectx := errgroup.WithContext(ctx)
	for _, l := range locks {
		for range workersPerClient {
			eg.Go(func() error { return mixedWorker(ectx, l, &x, &st) })
		}
	}
	finished := make(chan error, 1)
	go func() { finished <- eg.Wait() }()
	progress := func(n int64, when string) {
		t.Helper()
		// Counted from a leader's election (cl.Leader waits for one), and
		// far sooner than a worker gives up (a minute), so that a stall
		// of ours is reported while it lasts.
		zktest.WaitFor(t, 10*time.Second, func() bool {
			select {
			case err := <-finished:
				t.Fatalf("the workload stopped %s: %v\n%s", when, err, stallReport(checker, path, conns))
			default:
			}
			return st.grants.Load() >= n
		}, "%s grants, want %d %s\n%s", lazyText(func() string { return fmt.Sprint(st.grants.Load()) }), n, when,
			stallReport(checker, path, conns))
	}

	progress(batch, "before the kill")
	before := st.grants.Load()
	killed := time.Now()
	require.NoError(t, cl.Kill(leader))
	newLeader, err := cl.Leader()
	require.NoError(t, err)
	elected := time.Since(killed)
	progress(before+batch, "after the kill")
	resumed := time.Since(killed)
	stalled := st.longestGap(killed, time.Now())

	restarted := restartMember(t, cl, leader)
	progress(st.grants.Load()+batch, "after the restart")

	stop()
	require.NoError(t, <-finished)
	t.Logf("leader %d killed → member %d leads %v, → %d more grants %v (longest time without a grant %v); "+
		"member %d back in %v; %d grants (%d writes), %d lost, %d releases cut short; %d violations",
		leader, newLeader, msec(elected), batch, msec(resumed), msec(stalled), leader, msec(restarted),
		st.grants.Load(), st.writes.Load(), st.lost.Load(), st.releaseCut.Load(), x.violations.Load())
	require.Zero(t, x.violations.Load(), "mutual exclusion violated")
	waitNodes(t, checker, path, 15*time.Second)
}

// stallReport describes a stalled queue: its nodes and their sessions,
// each client's session and state, and where the lock's goroutines are.
func stallReport(checker *zk.Conn, path string, conns []*zk.Conn) lazyText {
	return func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "queue: %s\n", describeNodes(checker, path)())
		for i, c := range conns {
			fmt.Fprintf(&b, "client %d: session %#x, %v, server %s\n", i, c.SessionID(), c.State(), c.Server())
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "zkrwlock/rwlock.") && !strings.Contains(g, "stallReport") {
				b.WriteString(g)
				b.WriteString("\n\n")
			}
		}
		return b.String()
	}
}

// mixedStats counts what a mixed workload did.
type mixedStats struct {
	grants, writes, lost, releaseCut atomic.Int64

	mu    sync.Mutex
	times []time.Time // of every grant
}

func (s *mixedStats) granted(m rwlock.Mode) {
	s.mu.Lock()
	s.times = append(s.times, time.Now())
	s.mu.Unlock()
	s.grants.Add(1)
	if m == rwlock.Write {
		s.writes.Add(1)
	}
}

// longestGap returns the longest time between from and to without a grant.
func (s *mixedStats) longestGap(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	last := from
	for _, at := range s.times {
		if at.After(from) && at.Before(to) {
			longest = max(longest, at.Sub(last))
			last = at
		}
	}
	return max(longest, to.Sub(last))
}

// mixedWorker takes the lock over and over, 80% shared, 20% exclusive, for
// a millisecond or two each time, until ctx ends. A lost grant, or a release
// that the connection cut short (its node is deleted in the background), is
// what a fault may cause; any other failure is an error.
func mixedWorker(ctx context.Context, l *rwlock.RWLock, x *exclusion, st *mixedStats) error {
	for ctx.Err() == nil {
		mode := rwlock.Read
		if rand.N(5) == 0 {
			mode = rwlock.Write
		}
		fn := func(fctx context.Context) error {
			x.enter(mode)
			st.granted(mode)
			hold := time.NewTimer(time.Millisecond + rand.N(2*time.Millisecond))
			select {
			case <-hold.C:
			case <-fctx.Done(): // lost: stop at once
				hold.Stop()
			}
			x.leave(mode)
			return nil
		}
		// Longer than the longest election the test's ensemble may hold,
		// during which nobody is granted: a round that times out waiting
		// for followers (initLimit, 20 s) and the next (CI saw 20.7 s).
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		var err error
		if mode == rwlock.Write {
			err = l.WithWrite(actx, fn)
		} else {
			err = l.WithRead(actx, fn)
		}
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil // stopping
		case errors.Is(err, rwlock.ErrLost):
			st.lost.Add(1)
		case releaseCutShort(err):
			st.releaseCut.Add(1)
		default:
			return fmt.Errorf("%v: %w", mode, err)
		}
	}
	return nil
}

// releaseCutShort reports a Release that failed because the connection
// did: its node is deleted in the background once the client is back.
func releaseCutShort(err error) bool {
	return strings.Contains(err.Error(), "rwlock: release ") &&
		(errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved))
}
