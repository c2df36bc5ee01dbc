package rwlock

import (
	"context"
	"errors"
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

// How long may a holder stay disconnected before it must assume the worst?
//
// The server expires a session T (the granted session timeout) after it last
// heard from the client, and only then can another client be granted the
// lock. go-zookeeper pings every T/3 and closes the connection when it has
// read nothing for 2T/3. So when the client sees itself disconnected, the
// server heard from it no more than 2T/3 plus one round trip earlier: at
// least T/3 minus a round trip remains before the session can expire. A
// holder that has not regained its session within that margin, less our
// polling delay and an allowance for round trips and for a busy machine
// delaying our goroutines (T/10 + 100ms), declares the grant lost. When T is unknown we cannot compute the margin, and any
// disconnection is a loss: Curator's SUSPENDED rule.
//
// lossGrace returns that margin for a session timeout t (0: unknown) and a
// polling interval poll.
func lossGrace(t, poll time.Duration) time.Duration {
	if t <= 0 {
		return 0
	}
	return max(t/3-poll-t/10-100*time.Millisecond, 0)
}

// pollInterval is how often a holder's monitor looks at the connection
// state: go-zookeeper reports state changes only to the channel returned by
// zk.Connect, which belongs to the caller.
func pollInterval(t time.Duration) time.Duration {
	if t <= 0 {
		return 20 * time.Millisecond
	}
	return min(max(t/40, 10*time.Millisecond), 100*time.Millisecond)
}

// sessionTimeout is the smallest session timeout we know of, 0 if none.
func (l *RWLock) sessionTimeout() time.Duration {
	t := l.timeout
	if l.granted != nil {
		if g := l.granted(); g > 0 && (t == 0 || g < t) {
			t = g
		}
	}
	return t
}

// health tracks how long a holder's connection has been without its
// session, and decides when a grant is lost.
type health struct {
	session int64
	grace   time.Duration
	lastUp  time.Time // last time the session was seen connected
}

var errDisconnected = errors.New("disconnected")

func (h *health) check(c zkConn, now time.Time) error {
	if c.SessionID() != h.session {
		return zk.ErrSessionExpired // go-zookeeper silently made a new session
	}
	if c.State() == zk.StateHasSession {
		h.lastUp = now
		return nil
	}
	if down := now.Sub(h.lastUp); down >= h.grace {
		return fmt.Errorf("%w for %v, long enough for the server to expire the session", errDisconnected, down.Round(time.Millisecond))
	}
	return nil
}

// backoff spaces out retries after a connection loss, and notices a
// connection that its owner closed for good.
type backoff struct{ next time.Duration }

var errConnClosed = fmt.Errorf("%w: the *zk.Conn was closed", zk.ErrConnectionClosed)

// wait sleeps, longer each time, and then until the client has a session
// again. A request made while go-zookeeper reconnects would wait in its
// queue anyway, and sent the moment it reconnects, it races with
// go-zookeeper re-registering its watches (an upstream data race on
// lastZxid, go-zookeeper/zk#35).
func (b *backoff) wait(ctx context.Context, c zkConn) error {
	b.next = min(max(2*b.next, 10*time.Millisecond), 500*time.Millisecond)
	if err := sleep(ctx, b.next); err != nil {
		return err
	}
	suspect := false
	for {
		switch c.State() {
		case zk.StateHasSession:
			return nil
		case zk.StateDisconnected:
			// While it reconnects, go-zookeeper passes through this state
			// in an instant; it stays in it only after Close.
			if suspect {
				return errConnClosed
			}
			suspect = true
		default:
			suspect = false
		}
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dial connects to the ZooKeeper servers like [zk.Connect] and waits until
// the client has a session, or ctx ends (then it closes the connection).
// It remembers the session timeout the server granted, which go-zookeeper
// does not expose, so that locks on this connection know how long a holder
// may stay disconnected without losing its grant (see [WithSessionTimeout]).
// go-zookeeper's own log lines go to [slog.Default] at debug level.
func Dial(ctx context.Context, servers []string, sessionTimeout time.Duration) (*zk.Conn, error) {
	g := &grantLogger{learned: make(chan struct{})}
	conn, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(g))
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
			remember(conn, &g.granted)
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

// dialed maps connections made by Dial to their granted timeouts. It holds
// them weakly: an entry goes when its connection is garbage collected.
var dialed sync.Map // weak.Pointer[zk.Conn] -> *atomic.Int64

func remember(c *zk.Conn, granted *atomic.Int64) {
	key := weak.Make(c)
	dialed.Store(key, granted)
	runtime.AddCleanup(c, func(key weak.Pointer[zk.Conn]) { dialed.Delete(key) }, key)
}

// grantedTimeout returns the granted timeout of a Dial connection, or nil.
func grantedTimeout(c *zk.Conn) func() time.Duration {
	v, ok := dialed.Load(weak.Make(c))
	if !ok {
		return nil
	}
	granted := v.(*atomic.Int64)
	return func() time.Duration { return time.Duration(granted.Load()) }
}
