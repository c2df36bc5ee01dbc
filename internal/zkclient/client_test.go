package zkclient

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
)

// heldConn answers a Delete only when the test says.
type heldConn struct {
	Conn   // nil: only Delete and SessionID are called
	answer chan error
}

func (c *heldConn) Delete(string, int32) error { return <-c.answer }
func (c *heldConn) SessionID() int64           { return 1 }

// A request whose caller stopped waiting keeps its Client in use until
// its late answer has been handled: the handler (a background deletion)
// may use the Client after the caller has let go of it, and a Client
// that left the registry meanwhile would come back beside a new one.
func TestLateAnswerKeepsItsClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &heldConn{answer: make(chan error)}
		c := For(conn)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		handled := make(chan struct{})
		r := c.Delete(ctx, "/x", func(Reply[struct{}]) { close(handled) })
		require.ErrorIs(t, r.Err, context.Canceled)
		c.Unref() // the caller lets go before the answer comes

		again := For(conn)
		require.Same(t, c, again, "the pending answer still uses the Client")
		again.Unref()
		conn.answer <- zk.ErrConnectionClosed
		<-handled
		synctest.Wait()
		clients.mu.Lock()
		defer clients.mu.Unlock()
		require.NotContains(t, clients.m, Conn(conn), "and lets go of it once handled")
	})
}

// A Client that its last user left is retired: RefIfLive refuses it, so
// that no new use of it starts beside its successor.
func TestRefIfLive(t *testing.T) {
	conn := &heldConn{answer: make(chan error)}
	c := For(conn)
	require.True(t, c.RefIfLive())
	c.Unref()
	c.Unref() // retired
	require.False(t, c.RefIfLive())
	c.Ref() // as a late answer's handler does, on the Client it started with
	defer c.Unref()
	require.False(t, c.RefIfLive(), "used, but no longer the connection's Client")
	next := For(conn)
	defer next.Unref()
	require.NotSame(t, c, next)
	require.True(t, next.RefIfLive())
	next.Unref()
}
