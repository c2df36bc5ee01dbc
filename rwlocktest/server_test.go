package rwlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/rwlocktest"
)

// A test that uses the kit gets a server that serves locks, and the test's
// cleanup stops it: afterwards nothing listens on its address.
func TestStartServerStopsAtCleanup(t *testing.T) {
	var addrs []string
	t.Run("user", func(t *testing.T) {
		zk := rwlocktest.StartServer(t)
		addrs = zk.Addrs()
		require.Len(t, addrs, 1)
		assert.Equal(t, addrs[0], zk.ConnectString())
		lock, err := rwlock.New(zk.Dial(t, 10*time.Second), "/kit/lock")
		require.NoError(t, err)
		g, err := lock.Lock(t.Context())
		require.NoError(t, err)
		_, ok := g.Deadline()
		assert.True(t, ok, "Dial's connection tells the lock the session timeout")
		require.NoError(t, g.Release(t.Context()))
	})
	require.Len(t, addrs, 1)
	c, err := net.DialTimeout("tcp", addrs[0], time.Second)
	if err == nil {
		c.Close()
	}
	assert.Error(t, err, "the server still listens after its test ended")
}

// fatalRecorder records a test's fatal message, and ends its goroutine as
// testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartEnsembleOfAnEvenNumberFails(t *testing.T) {
	for _, n := range []int{0, 2, -1} {
		r := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			rwlocktest.StartEnsemble(r, n)
		}()
		<-done
		assert.Contains(t, r.msg, "want an odd number", "members %d", n)
	}
}

// An ensemble keeps a lock through a member's crash and a member's stop,
// and a member started again serves.
func TestEnsembleOutages(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, "go-zookeeper/zk#35: its reconnection races with itself")
	zk := rwlocktest.StartEnsemble(t, 3)
	require.Len(t, zk.Addrs(), 3)
	lock, err := rwlock.New(zk.Dial(t, 10*time.Second), "/kit/ensemble")
	require.NoError(t, err)
	ctx := t.Context()
	g, err := lock.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, zk.Kill(0))
	require.NoError(t, zk.Stop(1))
	require.Error(t, zk.Stop(1), "already stopped")
	start := make(chan error, 2)
	for _, i := range []int{0, 1} {
		go func() { start <- zk.Start(ctx, i) }()
	}
	require.NoError(t, errors.Join(<-start, <-start))
	require.NoError(t, g.Err(), "a restart of two members within the session timeout keeps the grant")
	// The client may still be moving to a member that serves: a release
	// that connection cuts says so, and its deletion goes on in the
	// background. The read lock below waits for it.
	if err := g.Release(ctx); err != nil {
		require.ErrorIs(t, err, gozk.ErrConnectionClosed)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, lock.WithRead(rctx, func(context.Context) error { return nil }))
	assert.Error(t, zk.Kill(3), "no member 3")
}
