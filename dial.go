package rwlock

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Dial connects to the ZooKeeper servers like [zk.Connect], and waits until
// the client has a session or ctx ends. If ctx ends first, Dial closes the
// connection. The opts are go-zookeeper's own connection options, applied
// as zk.Connect applies them, such as zk.WithDialer for TLS or a proxy,
// zk.WithHostProvider and zk.WithLogger. Unless opts set a logger,
// go-zookeeper logs to [slog.Default] at debug level.
//
// Locks on a connection made by Dial know the session timeout T the server
// granted, which go-zookeeper does not expose. Dial reads it from the
// server's answer to every handshake, whoever the dialer is. The lock
// judges its grants by the smallest T granted in the session.
// [WithSessionTimeout] says what the lock promises on any other connection.
//
// A sessionTimeout below 100ms fails at once with an error wrapping
// ErrInvalidArgument. No server grants one, since the minimum is two ticks,
// 4s with the default tickTime, and go-zookeeper would time out its own
// handshake. It is nearly always a forgotten unit, 10 for 10*time.Second.
func Dial(ctx context.Context, servers []string, sessionTimeout time.Duration, opts ...func(*zk.Conn)) (*zk.Conn, error) {
	if sessionTimeout < minSessionTimeout {
		return nil, &opError{"dial", fmt.Sprint(servers), fmt.Errorf("%w: session timeout %v is below %v, less than any server grants (a forgotten unit? %d*time.Second)",
			ErrInvalidArgument, sessionTimeout, minSessionTimeout, int64(sessionTimeout))}
	}
	log := &dialLogger{}
	conn, events, err := zkclient.Connect(servers, sessionTimeout, append([]func(*zk.Conn){zk.WithLogger(log)}, opts...)...)
	if err != nil {
		return nil, &opError{"dial", fmt.Sprint(servers), err}
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, &opError{"dial", fmt.Sprint(servers), zk.ErrClosing}
			}
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-ctx.Done():
			conn.Close()
			err := ctx.Err()
			if last := log.lastFailure(); last != "" {
				err = fmt.Errorf("%w (last attempt: %s)", err, last)
			}
			return nil, &opError{"dial", fmt.Sprint(servers), err}
		}
	}
}

// minSessionTimeout is the smallest timeout Dial asks a server for.
const minSessionTimeout = 100 * time.Millisecond

// dialLogger passes go-zookeeper's log to slog, and keeps the last failed
// connection attempt for Dial's error.
type dialLogger struct {
	failure atomic.Pointer[string]
}

func (g *dialLogger) lastFailure() string {
	if f := g.failure.Load(); f != nil {
		return *f
	}
	return ""
}

// Printf is zk.Logger's method.
func (g *dialLogger) Printf(format string, args ...any) {
	if format == "failed to connect to %s: %v" || strings.HasPrefix(format, "authentication failed") {
		msg := fmt.Sprintf(format, args...)
		g.failure.Store(&msg)
	}
	if slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		slog.Debug("zk: " + fmt.Sprintf(format, args...))
	}
}
