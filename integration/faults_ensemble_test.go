package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A 3-member ensemble loses its leader to kill -9 and elects another; the
// member comes back later. Waiters keep their sessions, nodes and places in
// the queue; a mixed workload on clients spread over every member keeps
// mutual exclusion throughout and makes progress again; nothing is left in
// the end.
func TestFaultEnsembleLeaderKill(t *testing.T) {
	t.Parallel()
	const timeout = 6 * time.Second
	cl := faultServer(t, 3)
	addrs := cl.Addrs()

	t.Run("WaiterSurvives", func(t *testing.T) {
		leader, err := cl.Leader()
		require.NoError(t, err)
		ctx := t.Context()
		// The waiter is on the leader; the holder and the checker elsewhere.
		waiter := dialZK(t, addrs, timeout, nil, newHomeFirst(addrs, leader))
		holder := dialZK(t, addrs, timeout, nil, newHomeFirst(addrs, (leader+1)%3))
		checker := dialZK(t, addrs, timeout, nil, newHomeFirst(addrs, (leader+2)%3))
		require.Equal(t, addrs[leader], waiter.Server())
		path := zktest.LockPath(t, "/it")
		// The holder knows its session timeout, so its lease rides out the
		// election (a grant whose lock does not know it is lost at the
		// first disconnection): the test is about the waiter.
		hl, err := rwlock.New(holder, path, rwlock.WithSessionTimeout(timeout))
		require.NoError(t, err)
		wl, err := rwlock.New(waiter, path, rwlock.WithSessionTimeout(timeout))
		require.NoError(t, err)

		g, err := hl.Lock(ctx)
		require.NoError(t, err)
		w := acquireAsync(ctx, wl, rwlock.Write)
		waiting := otherThan(waitNodeCount(t, checker, path, 2, 10*time.Second), nodeName(g.Node()))
		hs, ws := holder.SessionID(), waiter.SessionID()

		killed := time.Now()
		require.NoError(t, cl.Kill(leader))
		defer restartMember(t, cl, leader) // also if the test fails: MixedRun needs every member
		newLeader, err := cl.Leader()
		require.NoError(t, err)
		elected := time.Since(killed)
		waitSession(t, waiter, ws, 20*time.Second)
		waitSession(t, holder, hs, 20*time.Second)
		back := time.Since(killed)
		t.Logf("leader %d killed → member %d leads %v, → the clients have their sessions back %v",
			leader, newLeader, msec(elected), msec(back))
		require.NotEqual(t, addrs[leader], waiter.Server(), "the waiter moved to another member")

		requireStillWaiting(t, w, "the holder has not released")
		waitNodes(t, checker, path, 10*time.Second, nodeName(g.Node()), waiting)
		released := time.Now()
		mustRelease(t, g)
		r := waitGranted(t, w, 10*time.Second)
		t.Logf("release → waiter granted %v", msec(r.at.Sub(released)))
		require.Equal(t, waiting, nodeName(r.g.Node()), "the waiter kept its node across the leader change")
		mustRelease(t, r.g)
		waitNodes(t, checker, path, 5*time.Second)
	})

	t.Run("MixedRun", func(t *testing.T) {
		const clients, workersPerClient, batch = 6, 2, 50
		leader, err := cl.Leader()
		require.NoError(t, err)
		path := zktest.LockPath(t, "/it")
		locks := make([]*rwlock.RWLock, clients)
		onLeader := 0
		for i := range locks {
			conn := dialZK(t, addrs, timeout, nil, newHomeFirst(addrs, i%3))
			if conn.Server() == addrs[leader] {
				onLeader++
			}
			locks[i], err = rwlock.New(conn, path, rwlock.WithSessionTimeout(timeout))
			require.NoError(t, err)
		}
		require.NotZero(t, onLeader, "some clients are on the leader")
		checker := dialZK(t, addrs, timeout, nil, newHomeFirst(addrs, (leader+1)%3))

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
			zktest.WaitFor(t, 30*time.Second, func() bool {
				select {
				case err := <-finished:
					t.Fatalf("the workload stopped %s: %v", when, err)
				default:
				}
				return st.grants.Load() >= n
			}, "%s grants, want %d %s", lazyText(func() string { return fmt.Sprint(st.grants.Load()) }), n, when)
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
	})
}

// restartMember starts member i again, if it is not running, and waits
// until it serves; it returns how long that took.
func restartMember(t *testing.T, cl *zkserver.Cluster, i int) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cl.Start(ctx, i)
	switch {
	case err != nil && strings.Contains(err.Error(), "already running"):
		return 0
	case err != nil:
		t.Errorf("restart member %d: %v", i, err) // not FailNow: it may run deferred
		return 0
	}
	took := time.Since(start)
	t.Logf("member %d restarted and serving in %v", i, msec(took))
	return took
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
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
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
