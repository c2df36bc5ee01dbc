package rwlock

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/go-zookeeper/zk"
)

// Dial connects to the ZooKeeper servers like [zk.Connect] and waits until
// the client has a session, or ctx ends (then it closes the connection).
// opts are go-zookeeper's own connection options (zk.WithDialer for TLS or
// a proxy, zk.WithHostProvider, zk.WithLogger, …), applied as zk.Connect
// applies them. go-zookeeper's log lines go to [slog.Default] at debug
// level unless opts set a logger.
//
// Locks on a connection made by Dial know the session timeout T the server
// granted, which go-zookeeper does not expose: Dial reads it from the
// server's answer to each handshake, on every (re)connection, whoever the
// dialer is, and the lock judges its grants by the smallest T the server
// granted in the session (see [WithSessionTimeout]). On any other
// connection the lock cannot check what the server granted, and any
// disconnection of a holder counts as a loss.
//
// A sessionTimeout below 100ms fails at once with an error wrapping
// ErrInvalidArgument: no ZooKeeper server grants one (the minimum is two
// ticks, 4s with the default tickTime), and go-zookeeper would time out its
// own handshake; it is nearly always a forgotten unit (10 for 10*time.Second).
func Dial(ctx context.Context, servers []string, sessionTimeout time.Duration, opts ...func(*zk.Conn)) (*zk.Conn, error) {
	if sessionTimeout < minSessionTimeout {
		return nil, fmt.Errorf("rwlock: dial %v: %w: session timeout %v is below %v, less than any server grants (a forgotten unit? %d*time.Second)",
			servers, ErrInvalidArgument, sessionTimeout, minSessionTimeout, int64(sessionTimeout))
	}
	log := &dialLogger{}
	info := &dialInfo{}
	tapped := true
	conn, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(log), func(c *zk.Conn) {
		for _, o := range opts {
			o(c)
		}
		tapped = info.tap(c)
	})
	if err != nil {
		return nil, fmt.Errorf("rwlock: dial %v: %w", servers, err)
	}
	if tapped {
		remember(conn, info)
	} else {
		slog.Warn("rwlock: Dial cannot read the session timeout from this go-zookeeper version; " +
			"locks on the connection treat any disconnection as a loss")
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, fmt.Errorf("rwlock: dial %v: %w", servers, zk.ErrClosing)
			}
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-ctx.Done():
			conn.Close()
			err := fmt.Errorf("rwlock: dial %v: %w", servers, ctx.Err())
			if last := log.lastFailure(); last != "" {
				err = fmt.Errorf("%w (last attempt: %s)", err, last)
			}
			return nil, err
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

// dialInfo is what a connection made by Dial learnt of its sessions from
// the server's answers to its handshakes.
//
// Why the wire, and why the smallest T: go-zookeeper asks each server it
// (re)connects to for the timeout it was last granted, and each server
// clamps that to its own [minSessionTimeout, maxSessionTimeout] and
// applies it at once (ZooKeeperServer.processConnectRequest, then
// touchSession). The leader expires the session T after the touch it
// processed last, for that touch's T, which is not always the latest
// connection's: a follower relays its last touch, with its own
// connection's T, at its next ping, which may come after the client moved
// to another server (seen in TestFaultGrantedReconnectShorter); and after
// a leader election or a restart the new leader counts every session
// afresh by the T it was created with (getSessionWithTimeOuts). Every one
// of those is a T the client was answered with, so the lock uses the
// smallest answered in the session. The answer is read before
// go-zookeeper reports the session and before it starts the loops that
// answer requests, on the same goroutine, so any request answered on a
// connection is judged with that connection's T. go-zookeeper's own log
// line of it is not used: an application may silence or replace the
// logger.
//
// A handshake the server took but whose answer never arrives (the
// connection dies in between) changes T unheard; WithSessionTimeout at or
// below the smallest maxSessionTimeout of any member covers it.
//
// An answer with the session also renews the lease: the server, and
// through it the leader, touched the session after the handshake was sent.
type dialInfo struct {
	last     atomic.Pointer[sessionTimeout]
	connects atomic.Uint64 // handshakes answered with a session: one per connection

	mu        sync.Mutex
	listeners map[*func(session int64, sent time.Time)]struct{} // told of each answer; guarded by mu
}

// sessionTimeout is the smallest timeout the server granted in a session.
type sessionTimeout struct {
	session int64
	timeout time.Duration // 0 if an answer made no sense: unknown
}

// tap wraps the dialer opts left on c, so that every connection reports
// its handshake's answer. It reports false when it cannot: go-zookeeper
// keeps the dialer in an unexported field, read here while zk.Connect
// applies its options, before its goroutines start; a version that moved
// it leaves the lock without T on the connection (any disconnection is a
// loss), never with a wrong one.
func (d *dialInfo) tap(c *zk.Conn) bool {
	field := reflect.ValueOf(c).Elem().FieldByName("dialer")
	if !field.IsValid() || field.Type() != reflect.TypeFor[zk.Dialer]() {
		return false
	}
	dialer := *(*zk.Dialer)(unsafe.Pointer(field.UnsafeAddr()))
	if dialer == nil {
		dialer = net.DialTimeout
	}
	zk.WithDialer(func(network, address string, timeout time.Duration) (net.Conn, error) {
		conn, err := dialer(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &tapConn{Conn: conn, info: d}, nil
	})(c)
	return true
}

// tapConn passes a connection's bytes through untouched, and hands the
// head of the first packet it reads, the server's answer to the handshake,
// to its dialInfo. go-zookeeper reads that answer with io.ReadFull, length
// first, so it may arrive in any number of Reads, all on the goroutine
// that dialed; later Reads come from a goroutine started after it.
type tapConn struct {
	net.Conn
	info *dialInfo
	sent time.Time // when the handshake was written
	head []byte
	done bool
}

// answerHead is the part of a handshake's answer the tap reads: the
// packet's length, then the protocol version, the timeout in milliseconds
// and the session id, big-endian (go-zookeeper's connectResponse).
const answerHead = 4 + 4 + 4 + 8

func (c *tapConn) Write(p []byte) (int, error) {
	if c.sent.IsZero() {
		c.sent = time.Now() // before the write: the server sees it after
	}
	return c.Conn.Write(p)
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.head = append(c.head, p[:n]...)
		if len(c.head) >= answerHead {
			c.done = true
			c.info.answered(c.head[:answerHead], c.sent)
			c.head = nil
		}
	}
	return n, err
}

// answered records the answer to a handshake sent at sent: session 0
// means the session had expired (go-zookeeper opens a new one next); a
// new session starts a new record; the same one keeps the smallest
// timeout. The listeners hear of every answer with a session.
func (d *dialInfo) answered(head []byte, sent time.Time) {
	ms := int32(binary.BigEndian.Uint32(head[8:12]))
	session := int64(binary.BigEndian.Uint64(head[12:20]))
	if session == 0 || sent.IsZero() {
		return
	}
	d.connects.Add(1)
	t := max(time.Duration(ms)*time.Millisecond, 0)
	// mutant: shorter-grant-unheard
	if last := d.last.Load(); last == nil || last.session != session || t < last.timeout {
		d.last.Store(&sessionTimeout{session, t})
	}
	d.mu.Lock()
	fns := make([]func(int64, time.Time), 0, len(d.listeners))
	for fn := range d.listeners {
		fns = append(fns, *fn)
	}
	d.mu.Unlock()
	for _, fn := range fns {
		fn(session, sent)
	}
}

// timeoutOf returns the smallest session timeout the server granted
// session so far, or 0 if unknown.
func (d *dialInfo) timeoutOf(session int64) time.Duration {
	if last := d.last.Load(); last != nil && last.session == session {
		return last.timeout
	}
	return 0
}

func (d *dialInfo) connectCount() uint64 { return d.connects.Load() }

// onHandshake calls fn, on go-zookeeper's goroutine, with every answer to
// a handshake that carries a session, after timeoutOf has taken it in,
// until stop. fn must not block.
func (d *dialInfo) onHandshake(fn func(session int64, sent time.Time)) (stop func()) {
	key := &fn
	d.mu.Lock()
	if d.listeners == nil {
		d.listeners = make(map[*func(int64, time.Time)]struct{})
	}
	d.listeners[key] = struct{}{}
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(d.listeners, key)
		d.mu.Unlock()
	}
}

// dialed maps connections made by Dial to what Dial learns of them. It holds
// them weakly: an entry goes when its connection is garbage collected.
var dialed sync.Map // weak.Pointer[zk.Conn] -> *dialInfo

func remember(c *zk.Conn, info *dialInfo) {
	key := weak.Make(c)
	dialed.Store(key, info)
	runtime.AddCleanup(c, func(key weak.Pointer[zk.Conn]) { dialed.Delete(key) }, key)
}

// sessionsOf returns what conn tells of its sessions: a connection made
// by Dial, or one that tells itself (the unit tests' fake); nil for any
// other.
func sessionsOf(conn zkConn) sessions {
	switch c := conn.(type) {
	case *zk.Conn:
		if v, ok := dialed.Load(weak.Make(c)); ok {
			return v.(*dialInfo)
		}
	case sessions:
		return c
	}
	return nil
}

// sessions is what a connection tells the lock of its sessions.
type sessions interface {
	// timeoutOf returns the smallest session timeout the server granted
	// session so far, or 0 if unknown.
	timeoutOf(session int64) time.Duration
	// connectCount returns how many times the client has had a session:
	// it moves before the watches of a new connection are set again.
	connectCount() uint64
	// onHandshake calls fn with each answer to a handshake, sent at sent,
	// that carries a session: the server touched it after sent.
	onHandshake(fn func(session int64, sent time.Time)) (stop func())
}
