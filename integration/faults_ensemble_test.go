package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A 3-member ensemble loses its leader to kill -9 and elects another; the
// member comes back later. Waiters keep their sessions, nodes and places in
// the queue. (A mixed workload through the same fault:
// faults_ensemble_mixed_test.go.)
func TestFaultEnsembleLeaderKill(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	t.Parallel()
	const timeout = 6 * time.Second
	cl := faultServer(t, 3)

	t.Run("WaiterSurvives", func(t *testing.T) {
		leader, err := cl.Leader()
		require.NoError(t, err)
		ctx := t.Context()
		// The waiter is on the leader; the holder and the checker elsewhere.
		waiter := connect(t, cl.ConnectString(), timeout, withHome(leader)).conn
		holder := connect(t, cl.ConnectString(), timeout, withHome((leader+1)%3)).conn
		checker := connect(t, cl.ConnectString(), timeout, withHome((leader+2)%3)).conn
		require.Equal(t, cl.Addr(leader), waiter.Server())
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
		w := goAcquire(t, ctx, wl.Lock)
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
		require.NotEqual(t, cl.Addr(leader), waiter.Server(), "the waiter moved to another member")

		w.stillWaiting(t, "the holder has not released")
		waitNodes(t, checker, path, 10*time.Second, nodeName(g.Node()), waiting)
		released := time.Now()
		mustRelease(t, g)
		wg := w.granted(t, 10*time.Second)
		t.Logf("release → waiter granted %v", msec(w.at.Sub(released)))
		require.Equal(t, waiting, nodeName(wg.Node()), "the waiter kept its node across the leader change")
		mustRelease(t, wg)
		waitNodes(t, checker, path, 5*time.Second)
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
