package rwlock

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dialWithin runs Dial on a goroutine and fails the test if it has not
// returned within limit, rather than hanging.
func dialWithin(t *testing.T, limit time.Duration, ctx context.Context, servers []string, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		conn, err := Dial(ctx, servers, timeout)
		if conn != nil {
			conn.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Dial still waiting after %v", limit)
		return nil
	}
}

// A closed port, and a context without deadline: Dial gives up after the
// session timeout, naming the address and its refusal.
func TestDialWithoutDeadlineGivesUp(t *testing.T) {
	const addr = "127.0.0.1:1" // closed: connection refused
	start := time.Now()
	err := dialWithin(t, 20*time.Second, context.Background(), []string{addr}, time.Second)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.GreaterOrEqual(t, time.Since(start), time.Second)
	assert.ErrorIs(t, err, zk.ErrNoServer)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "tried "+addr+" (dial tcp "+addr)
	assert.Contains(t, err.Error(), "connection refused")
	assert.Contains(t, err.Error(), "session timeout 1s")
}

// A server that takes the connection and never answers: Dial gives up
// all the same, and the address is named. With a deadline of the caller's,
// the deadline is the bound, and the error does not speak of the session
// timeout.
func TestDialSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	defer func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	err = dialWithin(t, 20*time.Second, context.Background(), []string{addr}, time.Second)
	require.ErrorIs(t, err, zk.ErrNoServer)
	assert.Contains(t, err.Error(), "tried "+addr+" (")

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = dialWithin(t, 20*time.Second, ctx, []string{addr}, 30*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotContains(t, err.Error(), "session timeout")
}
