package integration

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/delayproxy"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// configPath returns a znode for a test's config, outside any lock
// directory, created with data.
func configPath(t *testing.T, conn *zk.Conn, data string) string {
	t.Helper()
	p := zktest.LockPath(t, "/config")
	_, err := conn.CreateContainer("/config", nil, zk.FlagContainer, zk.WorldACL(zk.PermAll))
	if err != nil && err != zk.ErrNodeExists {
		require.NoError(t, err)
	}
	_, err = conn.Create(p, []byte(data), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	return p
}

func configData(t *testing.T, conn *zk.Conn, p string) string {
	t.Helper()
	data, _, err := conn.Get(p)
	require.NoError(t, err)
	return string(data)
}

func TestGuardedWritesCommitWhileHeld(t *testing.T) {
	srv := sharedServer(t)
	a := connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	lock := a.lock(t, zktest.LockPath(t, "/guard"))
	cfg := configPath(t, a.conn, "v1")
	g, err := lock.Lock(ctx)
	require.NoError(t, err)
	defer g.Release(ctx)

	require.NoError(t, g.Check(ctx))
	res, err := g.Multi(ctx,
		&zk.SetDataRequest{Path: cfg, Data: []byte("v2"), Version: 0},
		&zk.CreateRequest{Path: cfg + "-audit", Data: []byte("by the job"), Acl: zk.WorldACL(zk.PermAll)},
	)
	require.NoError(t, err)
	require.Len(t, res, 2, "one response per op, the guard's left out")
	assert.Equal(t, cfg+"-audit", res[1].String)
	assert.Equal(t, "v2", configData(t, a.conn, cfg))

	// An op that fails on its own fails the transaction, not the grant.
	_, err = g.Multi(ctx, &zk.SetDataRequest{Path: cfg, Data: []byte("v3"), Version: 0})
	require.ErrorIs(t, err, zk.ErrBadVersion)
	assert.NotErrorIs(t, err, rwlock.ErrLost)
	require.NoError(t, g.Err())
	assert.Equal(t, "v2", configData(t, a.conn, cfg))

	for _, op := range []any{
		&zk.SetDataRequest{Path: g.Node(), Data: []byte("x"), Version: -1}, // the lock's own node
		&zk.CreateRequest{Path: lock.Path() + "/x"},                        // a child in the lock's directory
		(*zk.DeleteRequest)(nil),
		"a string",
	} {
		_, err := g.Multi(ctx, op)
		require.ErrorIs(t, err, rwlock.ErrInvalidArgument, "%T", op)
	}
	require.NoError(t, g.Err())

	require.NoError(t, g.Release(ctx))
	_, err = g.Multi(ctx, &zk.SetDataRequest{Path: cfg, Data: []byte("late"), Version: -1})
	require.ErrorIs(t, err, rwlock.ErrReleased)
	require.ErrorIs(t, g.Check(ctx), rwlock.ErrReleased)
	assert.Equal(t, "v2", configData(t, a.conn, cfg))
}

// A node deleted by hand: the holder hears of it one notification later,
// and a write sent before that must not land. The holder's connection goes
// through a proxy that delays each direction by 300 ms, so its write
// reaches the server after the deletion, before the holder could know of
// it. Without the guard the write would commit.
func TestGuardedWriteAfterHandDeletion(t *testing.T) {
	srv := sharedServer(t)
	p, err := delayproxy.Listen("127.0.0.1:0", srv.Addr(0), 300*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	holder := connect(t, p.Addr(), 20*time.Second)
	operator := connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/guard")
	cfg := configPath(t, operator.conn, "v1")
	g, err := holder.lock(t, path).Lock(ctx)
	require.NoError(t, err)

	require.NoError(t, operator.conn.Delete(g.Node(), -1))
	require.NoError(t, g.Err(), "the notification is still on its way: the holder believes it holds")
	_, err = g.Multi(ctx, &zk.SetDataRequest{Path: cfg, Data: []byte("stale"), Version: -1})
	require.ErrorIs(t, err, rwlock.ErrLost)
	assert.Equal(t, "v1", configData(t, operator.conn, cfg), "nothing committed")
	select {
	case <-g.Done():
	default:
		t.Fatal("the guard found the node gone, but the grant did not end")
	}
	require.ErrorIs(t, g.Check(ctx), rwlock.ErrLost)
}

// A holder that did not look while its session expired (paused, say) and
// another client took the lock and wrote: the stale holder's guarded write
// and check fail, and nothing it sends commits.
func TestGuardedWriteAfterExpiry(t *testing.T) {
	srv := sharedServer(t)
	stale, next := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/guard")
	cfg := configPath(t, next.conn, "v1")
	g, err := stale.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	stale.expire(t, srv.Addr(0))

	w, err := next.lock(t, path).Lock(ctx)
	require.NoError(t, err)
	_, err = w.Multi(ctx, &zk.SetDataRequest{Path: cfg, Data: []byte("v2"), Version: -1})
	require.NoError(t, err)

	_, err = g.Multi(ctx, &zk.SetDataRequest{Path: cfg, Data: []byte("stale"), Version: -1})
	require.Error(t, err)
	require.Error(t, g.Check(ctx))
	require.ErrorIs(t, g.Err(), rwlock.ErrLost)
	assert.Equal(t, "v2", configData(t, next.conn, cfg))
	require.NoError(t, w.Release(ctx))
}
