package integration

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A standalone server restarted (stopped, then started on the same port and
// data) keeps its sessions: a waiter keeps its node and its place in the
// queue, and is granted once the holder releases. The holder knows a
// session timeout long enough to ride out the restart, and keeps its grant.
func TestFaultWaiterSurvivesRestart(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	t.Parallel()
	const timeout = 30 * time.Second // a third of it covers a JVM restart on a loaded machine
	srv := faultServer(t, 1)
	holder := connect(t, srv.Addr(0), timeout)
	waiter := connect(t, srv.Addr(0), timeout)
	path := zktest.LockPath(t, "/it")
	ctx := t.Context()

	g, err := holder.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	done := closedAt(ctx, g.Done())
	w := goAcquire(t, ctx, waiter.lock(t, path).RLock)
	waiting := otherThan(waitNodeCount(t, waiter.conn, path, 2, 10*time.Second), nodeName(g.Node()))
	hs, ws := holder.conn.SessionID(), waiter.conn.SessionID()

	start := time.Now()
	require.NoError(t, srv.Stop(0))
	zktest.WaitFor(t, 5*time.Second, func() bool { return waiter.conn.State() != zk.StateHasSession }, "the waiter should notice the server is gone")
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, srv.Start(sctx, 0))
	restarted := time.Since(start)
	waitSession(t, holder.conn, hs, 20*time.Second)
	waitSession(t, waiter.conn, ws, 20*time.Second)
	back := time.Since(start)
	t.Logf("server stopped → serving again %v, → both clients have their sessions back %v", msec(restarted), msec(back))

	w.stillWaiting(t, "the holder has not released")
	select {
	case <-done:
		t.Fatalf("the holder lost its grant across the restart: %v", g.Err())
	default:
	}
	require.NoError(t, g.Err())
	waitNodes(t, waiter.conn, path, time.Second, nodeName(g.Node()), waiting)

	released := time.Now()
	mustRelease(t, g)
	wg := w.granted(t, 10*time.Second)
	t.Logf("release → waiter granted %v", msec(w.at.Sub(released)))
	require.Equal(t, waiting, nodeName(wg.Node()), "the waiter kept its node across the restart")
	mustRelease(t, wg)
	waitNodes(t, waiter.conn, path, 5*time.Second)
}
