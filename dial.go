package rwlock

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Dial connects to the ZooKeeper servers like [zk.Connect], and waits until
// the client has a session or ctx ends. If ctx has no deadline, Dial gives
// up after sessionTimeout: no server reached in that time would have kept a
// session alive either, and a caller who would wait longer passes a
// deadline. On giving up, or if ctx ends first, Dial closes the connection.
// The error then names each address tried and how its last attempt failed,
// and wraps zk.ErrNoServer, with context.DeadlineExceeded for the bound
// or ctx's error. The opts are go-zookeeper's own connection options, applied
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
	bounded := ""
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sessionTimeout)
		defer cancel()
		bounded = fmt.Sprintf(" (no session within the session timeout %v, Dial's bound for a context without deadline)", sessionTimeout)
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
			err := fmt.Errorf("%w%s: %w", zk.ErrNoServer, bounded, ctx.Err())
			if tried := log.tried(); tried != "" {
				err = fmt.Errorf("%w; tried %s", err, tried)
			}
			return nil, &opError{"dial", fmt.Sprint(servers), err}
		}
	}
}

// minSessionTimeout is the smallest timeout Dial asks a server for.
const minSessionTimeout = 100 * time.Millisecond

// dialLogger passes go-zookeeper's log to slog, and keeps each address
// tried with how its last attempt failed, for Dial's error.
type dialLogger struct {
	mu       sync.Mutex
	current  string            // the address of the connection go-zookeeper made last
	addrs    []string          // the addresses tried, in their first attempt's order
	outcomes map[string]string // each address's last failure, or "connected"
}

// tried lists the addresses tried with their last outcome.
func (g *dialLogger) tried() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	parts := make([]string, len(g.addrs))
	for i, a := range g.addrs {
		parts[i] = a + " (" + g.outcomes[a] + ")"
	}
	return strings.Join(parts, ", ")
}

func (g *dialLogger) note(addr, outcome string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.outcomes == nil {
		g.outcomes = map[string]string{}
	}
	if _, ok := g.outcomes[addr]; !ok {
		g.addrs = append(g.addrs, addr)
	}
	g.outcomes[addr] = outcome
	g.current = addr
}

// Printf is zk.Logger's method. It reads go-zookeeper v1.0.4's messages
// of connectLoop and authenticate; another version's only lose detail.
func (g *dialLogger) Printf(format string, args ...any) {
	switch {
	case format == "connected to %s" && len(args) == 1:
		g.note(fmt.Sprint(args[0]), "connected, no session")
	case format == "failed to connect to %s: %v" && len(args) == 2:
		g.note(fmt.Sprint(args[0]), fmt.Sprint(args[1]))
	case strings.HasPrefix(format, "authentication failed"):
		g.mu.Lock()
		current := g.current
		g.mu.Unlock()
		// go-zookeeper calls the handshake "authentication", which has
		// nothing to do with credentials.
		msg := strings.TrimPrefix(fmt.Sprintf(format, args...), "authentication failed: ")
		g.note(current, "handshake failed: "+msg)
	}
	if slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		slog.Debug("zk: " + fmt.Sprintf(format, args...))
	}
}
