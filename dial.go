package rwlock

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/go-zookeeper/zk"
)

// Dial connects to the ZooKeeper servers like [zk.Connect] and waits until
// the client has a session, or ctx ends (then it closes the connection).
// It remembers the session timeout the server granted, which go-zookeeper
// does not expose, so that locks on this connection know how long a holder
// may stay disconnected without losing its grant (see [WithSessionTimeout]).
// go-zookeeper's own log lines go to [slog.Default] at debug level.
//
// A sessionTimeout below 100ms fails at once with an error wrapping
// ErrInvalidArgument: no ZooKeeper server grants one (the minimum is two
// ticks, 4s with the default tickTime), and go-zookeeper would time out its
// own handshake; it is nearly always a forgotten unit (10 for 10*time.Second).
func Dial(ctx context.Context, servers []string, sessionTimeout time.Duration) (*zk.Conn, error) {
	if sessionTimeout < minSessionTimeout {
		return nil, fmt.Errorf("rwlock: dial %v: %w: session timeout %v is below %v, less than any server grants (a forgotten unit? %d*time.Second)",
			servers, ErrInvalidArgument, sessionTimeout, minSessionTimeout, int64(sessionTimeout))
	}
	g := &grantLogger{learned: make(chan struct{})}
	info := &dialInfo{}
	conn, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(g), zk.WithEventCallback(info.event))
	if err != nil {
		return nil, fmt.Errorf("rwlock: dial %v: %w", servers, err)
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, fmt.Errorf("rwlock: dial %v: %w", servers, zk.ErrClosing)
			}
			if ev.State != zk.StateHasSession {
				continue
			}
			// go-zookeeper logs the timeout just after it reports the
			// session; without it, locks are merely stricter.
			select {
			case <-g.learned:
			case <-time.After(time.Second):
			}
			info.granted = &g.granted
			remember(conn, info)
			return conn, nil
		case <-ctx.Done():
			conn.Close()
			err := fmt.Errorf("rwlock: dial %v: %w", servers, ctx.Err())
			if last := g.lastFailure(); last != "" {
				err = fmt.Errorf("%w (last attempt: %s)", err, last)
			}
			return nil, err
		}
	}
}

// minSessionTimeout is the smallest timeout Dial asks a server for.
const minSessionTimeout = 100 * time.Millisecond

// grantLogger passes go-zookeeper's log to slog and picks the granted
// session timeout out of its "authenticated" line, the only place the
// client reveals it. If a later version words it differently, locks fall
// back to treating any disconnection as a loss: safe, only stricter.
type grantLogger struct {
	granted atomic.Int64 // nanoseconds
	once    sync.Once
	learned chan struct{} // closed when granted is first set

	failure atomic.Pointer[string] // the last failed connection attempt, for Dial's error
}

func (g *grantLogger) lastFailure() string {
	if f := g.failure.Load(); f != nil {
		return *f
	}
	return ""
}

// Printf is zk.Logger's method.
func (g *grantLogger) Printf(format string, args ...any) {
	if format == "failed to connect to %s: %v" || strings.HasPrefix(format, "authentication failed") {
		msg := fmt.Sprintf(format, args...)
		g.failure.Store(&msg)
	}
	if format == "authenticated: id=%d, timeout=%d" && len(args) == 2 {
		if ms, ok := args[1].(int32); ok {
			g.granted.Store(int64(ms) * int64(time.Millisecond))
			g.once.Do(func() { close(g.learned) })
		}
	}
	if slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		slog.Debug("zk: " + fmt.Sprintf(format, args...))
	}
}

// dialInfo is what a lock learns of a connection that Dial made.
type dialInfo struct {
	granted  *atomic.Int64 // the session timeout the server granted, in nanoseconds
	connects atomic.Uint64 // the times go-zookeeper has had a session: one per connection
}

// event is go-zookeeper's event callback. It runs on go-zookeeper's
// connection goroutine as the session is (re)established, before the
// connection's goroutines start and before the watches are sent again, so
// that a lock that sees a replayed watch event has seen the count move
// (see acquisition.confirmOwn).
func (d *dialInfo) event(ev zk.Event) {
	if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
		d.connects.Add(1)
	}
}

// dialed maps connections made by Dial to what Dial learnt of them. It holds
// them weakly: an entry goes when its connection is garbage collected.
var dialed sync.Map // weak.Pointer[zk.Conn] -> *dialInfo

func remember(c *zk.Conn, info *dialInfo) {
	key := weak.Make(c)
	dialed.Store(key, info)
	runtime.AddCleanup(c, func(key weak.Pointer[zk.Conn]) { dialed.Delete(key) }, key)
}

func dialInfoOf(c *zk.Conn) *dialInfo {
	v, ok := dialed.Load(weak.Make(c))
	if !ok {
		return nil
	}
	return v.(*dialInfo)
}

// grantedTimeout returns the granted timeout of a Dial connection, or nil.
func grantedTimeout(c *zk.Conn) func() time.Duration {
	d := dialInfoOf(c)
	if d == nil {
		return nil
	}
	return func() time.Duration { return time.Duration(d.granted.Load()) }
}

// connectCount returns the connection count of a Dial connection, or nil.
func connectCount(c *zk.Conn) func() uint64 {
	d := dialInfoOf(c)
	if d == nil {
		return nil
	}
	return d.connects.Load
}
