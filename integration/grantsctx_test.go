package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
)

// lockTwo takes two locks with LockAll, and returns the grants and a
// client of its own for hand-made faults.
func lockTwo(t *testing.T, dir string) ([]*rwlock.Grant, *client, *rwlock.RWLock) {
	srv := sharedServer(t)
	c := connect(t, srv.ConnectString(), 0)
	a, b := c.lock(t, dir+"/a"), c.lock(t, dir+"/b")
	gs, err := rwlock.LockAll(testContext(t), rwlock.Request{Lock: a, Mode: rwlock.Write}, rwlock.Request{Lock: b, Mode: rwlock.Read})
	require.NoError(t, err)
	t.Cleanup(func() { rwlock.ReleaseAll(context.Background(), gs...) })
	return gs, connect(t, srv.ConnectString(), 0), b
}

// awaitEnd waits for ctx to end and returns its cause.
func awaitEnd(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the grants' context still open 30s after a grant ended")
		return nil
	}
}

func TestGrantsContextEndsWhenAGrantIsLost(t *testing.T) {
	gs, other, _ := lockTwo(t, "/grantsctx/lost")
	ctx, cancel := rwlock.GrantsContext(t.Context(), gs...)
	defer cancel()
	require.NoError(t, ctx.Err())
	require.NoError(t, other.conn.Delete(gs[1].Node(), -1)) // as an operator's hand would
	cause := awaitEnd(t, ctx)
	assert.ErrorIs(t, cause, rwlock.ErrLost)
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	assert.NoError(t, gs[0].Err(), "the other grant is still held")
}

func TestGrantsContextEndsWhenAGrantIsReleased(t *testing.T) {
	gs, _, _ := lockTwo(t, "/grantsctx/released")
	ctx, cancel := rwlock.GrantsContext(t.Context(), gs...)
	defer cancel()
	require.NoError(t, gs[0].Release(t.Context()))
	cause := awaitEnd(t, ctx)
	assert.ErrorIs(t, cause, rwlock.ErrReleased)
	assert.Contains(t, cause.Error(), gs[0].Node())
}

func TestGrantsContextEndsWhenAGrantIsRevoked(t *testing.T) {
	gs, other, b := lockTwo(t, "/grantsctx/revoked")
	ctx, cancel := rwlock.GrantsContext(t.Context(), gs...)
	defer cancel()
	revoker, err := rwlock.New(other.conn, b.Path())
	require.NoError(t, err)
	require.NoError(t, revoker.Revoke(t.Context(), "test"))
	cause := awaitEnd(t, ctx)
	assert.ErrorIs(t, cause, rwlock.ErrRevoked)
	assert.Contains(t, cause.Error(), gs[1].Node())
	assert.NoError(t, gs[1].Err(), "a revocation asks; the grant is still held")
}

func TestGrantsContextCancelAndBadInput(t *testing.T) {
	gs, _, _ := lockTwo(t, "/grantsctx/cancel")
	ctx, cancel := rwlock.GrantsContext(t.Context(), gs...)
	cancel()
	cancel()
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
	assert.NoError(t, gs[0].Err(), "cancel releases nothing")

	ctx, cancel = rwlock.GrantsContext(t.Context(), gs[0], nil)
	defer cancel()
	assert.ErrorIs(t, context.Cause(ctx), rwlock.ErrInvalidArgument)

	ctx, cancel = rwlock.GrantsContext(t.Context())
	defer cancel()
	assert.NoError(t, ctx.Err(), "no grant: ends with its parent or cancel only")
}

// WithWrite's function reaches its grant through its context, and guards
// a write with it.
func TestGrantFromContextInWithWrite(t *testing.T) {
	srv := sharedServer(t)
	c := connect(t, srv.ConnectString(), 0)
	l := c.lock(t, "/grantsctx/with")
	_, err := c.conn.Create("/grantsctx-data", nil, 0, zk.WorldACL(zk.PermAll))
	if !errors.Is(err, zk.ErrNodeExists) {
		require.NoError(t, err)
	}
	_, ok := rwlock.GrantFromContext(t.Context())
	assert.False(t, ok)
	err = l.WithWrite(testContext(t), func(ctx context.Context) error {
		g, ok := rwlock.GrantFromContext(ctx)
		require.True(t, ok)
		assert.Equal(t, rwlock.Write, g.Mode())
		assert.Positive(t, g.Token())
		_, err := g.Multi(ctx, &zk.SetDataRequest{Path: "/grantsctx-data", Data: []byte("x"), Version: -1})
		return err
	})
	require.NoError(t, err)
	data, _, err := c.conn.Get("/grantsctx-data")
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))
}
