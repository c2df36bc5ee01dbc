package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// told waits for a revocation to reach a holder.
func told(t *testing.T, revoked <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-revoked:
	case <-time.After(within):
		t.Fatalf("the revocation did not reach the holder within %v", within)
	}
}

// Another client revokes: the holder is told in one notification, keeps
// its grant until it releases, the waiter behind it is granted only then,
// and is not revoked.
func TestRevokeFromAnotherClient(t *testing.T) {
	srv := sharedServer(t)
	a, b, op := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/revoke")
	g, err := a.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	revoked := g.Revoked()
	w := goAcquire(t, ctx, b.lock(t, path).Lock)
	waitNodeCount(t, op.conn, path, 2, 10*time.Second)
	w.stillWaiting(t, "the holder holds")

	start := time.Now()
	require.NoError(t, op.lock(t, path).Revoke(ctx, "the migration is stuck"))
	told(t, revoked, 10*time.Second)
	t.Logf("revoked → told in %v", msec(time.Since(start)))
	require.NoError(t, g.Err(), "a revocation changes no grant")
	w.stillWaiting(t, "the revoked holder has not released yet")
	require.NoError(t, g.Release(ctx))
	next := w.granted(t, 10*time.Second)
	select {
	case <-next.Revoked():
		t.Fatal("a grant made after the revocation was revoked")
	case <-time.After(300 * time.Millisecond): // the listener's first read has long come back
	}
	require.NoError(t, next.Release(ctx))

	empty := zktest.LockPath(t, "/revoke")
	require.NoError(t, op.lock(t, empty).Revoke(ctx, "nobody holds it"), "a revocation of nobody is a no-op")
}

// A listening holder learns the reason, who asked, and the server's time
// of the write. (That it is told before Revoke lists the queue is checked
// against the fake, TestRevokeToldByTheFirstWrite: a proxy holding
// Revoke's answers would hold the read Revoke sends before its write.)
func TestRevokeTellsWhoWhyAndWhen(t *testing.T) {
	srv := sharedServer(t)
	a, op := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/revoke")
	g, err := a.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	revoked := g.Revoked()
	waitWatchedBy(t, srv, path, path, a) // the directory's data watch: the holder listens
	before := time.Now()
	require.NoError(t, op.lock(t, path, rwlock.WithOwner("ops-1")).Revoke(ctx, "the migration is stuck"))
	told(t, revoked, 10*time.Second)
	rev, ok := g.Revocation()
	require.True(t, ok)
	assert.Equal(t, "the migration is stuck", rev.Reason)
	assert.Equal(t, "ops-1", rev.By)
	assert.WithinDuration(t, before, rev.At, 10*time.Second, "the server's time of the write")
	require.NoError(t, g.Err(), "a revocation changes no grant")
	require.NoError(t, g.Release(ctx))
}

// A revocation made before the holder first looks is seen at that look:
// a select with default on Revoked's first channel finds it closed.
func TestRevokeSeenAtTheFirstLook(t *testing.T) {
	srv := sharedServer(t)
	a, op := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/revoke")
	g, err := a.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, op.lock(t, path).Revoke(ctx, "before the first look"))
	select {
	case <-g.Revoked():
	default:
		t.Fatal("a revocation made before the first look was not seen by it")
	}
	rev, ok := g.Revocation()
	require.True(t, ok)
	assert.Equal(t, "before the first look", rev.Reason)
	require.NoError(t, g.Release(ctx))
}

// The holder's connection breaks as the revocation is made: the watch,
// sent again when the client reconnects, fires for the change it missed.
func TestRevokeThroughAReconnection(t *testing.T) {
	tier.NoRace(t, zk35)
	srv := sharedServer(t)
	p := faultproxy.Start(t, srv.Addr(0))
	a, op := connect(t, p.Addr(), 10*time.Second), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/revoke")
	err := a.lock(t, path).WithWrite(ctx, func(fctx context.Context) error {
		p.Refuse(true)
		p.Cut()
		require.NoError(t, op.lock(t, path).Revoke(ctx, "while the holder was away"))
		p.Refuse(false)
		select {
		case <-fctx.Done():
			require.ErrorIs(t, context.Cause(fctx), rwlock.ErrRevoked)
			return context.Cause(fctx)
		case <-time.After(20 * time.Second):
			t.Fatal("the revocation did not reach the holder after it reconnected")
		}
		return nil
	})
	require.ErrorIs(t, err, rwlock.ErrRevoked)
	require.NotErrorIs(t, err, rwlock.ErrLost, "the holder kept its grant until it let go")
	assert.Empty(t, lockNodes(t, op.conn, path))
}

// The holder is on the leader of a 3-member ensemble, which dies (kill -9)
// before the revocation is made: the holder hears of it on the member it
// moves to.
func TestRevokeThroughLeaderKill(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 10 * time.Second
	cl := faultServer(t, 3)
	leader, err := cl.Leader()
	require.NoError(t, err)
	a := connect(t, cl.ConnectString(), timeout, withHome(leader))
	require.Equal(t, cl.Addrs()[leader], a.conn.Server())
	op := connect(t, cl.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/revoke")
	g, err := a.lock(t, path).RLock(ctx)
	require.NoError(t, err)
	revoked := g.Revoked()
	require.NoError(t, cl.Kill(leader))
	defer restartMember(t, cl, leader)
	_, err = cl.Leader()
	require.NoError(t, err)
	require.NoError(t, op.lock(t, path).Revoke(ctx, "after a leader kill"))
	told(t, revoked, 30*time.Second)
	require.NoError(t, g.Err())
	require.NoError(t, g.Release(ctx))
}
