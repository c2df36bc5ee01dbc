package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestSmoke(t *testing.T) {
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb := a.lock(t, path), b.lock(t, path)
	ctx := t.Context()

	r1, err := la.RLock(ctx)
	require.NoError(t, err)
	r2, err := lb.RLock(ctx)
	require.NoError(t, err)
	_, err = lb.TryLock(ctx)
	assert.ErrorIs(t, err, rwlock.ErrWouldBlock)
	require.NoError(t, r1.Release(ctx))
	require.NoError(t, r2.Release(ctx))
	w, err := la.Lock(ctx)
	require.NoError(t, err)
	assert.NotZero(t, w.Token())
	select {
	case <-w.Done():
		t.Fatal("lost")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, w.Release(ctx))
	assert.Empty(t, lockNodes(t, a.conn, path))
}
