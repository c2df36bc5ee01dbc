package zkclient

import (
	"encoding/binary"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/go-zookeeper/zk"
)

// Connect connects like zk.Connect, with go-zookeeper's options opts. It
// also taps the connection, so that Clients on it know the session timeout
// the server granted at every handshake; see Handshakes. A go-zookeeper
// version may keep its dialer where tap cannot find it. Then the connection
// is left untapped, with a warning, and locks on it treat any disconnection
// as a loss.
func Connect(servers []string, timeout time.Duration, opts ...func(*zk.Conn)) (*zk.Conn, <-chan zk.Event, error) {
	info := &Handshakes{}
	tapped := true
	conn, events, err := zk.Connect(servers, timeout, func(c *zk.Conn) {
		for _, o := range opts {
			o(c)
		}
		tapped = info.tap(c)
	})
	if err != nil {
		return nil, nil, err
	}
	if tapped {
		remember(conn, info)
	} else {
		slog.Warn("rwlock: cannot read the session timeout from this go-zookeeper version; " +
			"locks on the connection treat any disconnection as a loss")
	}
	return conn, events, nil
}

// Handshakes is what a connection made by Connect learns of its sessions
// from the server's answers to its handshakes. It keeps the smallest
// session timeout the server granted in each session, and tells its
// listeners of every answer. The zero value is ready.
type Handshakes struct {
	last     atomic.Pointer[sessionTimeout]
	connects atomic.Uint64 // handshakes answered with a session: one per connection

	mu        sync.Mutex
	listeners map[*func(session int64, sent time.Time)]struct{} // told of each answer; guarded by mu
}

// Why read the wire, and why take the smallest T? On each connection,
// go-zookeeper asks the server for the timeout it was last granted. Each
// server clamps that to its own range, from minSessionTimeout to
// maxSessionTimeout. It applies the result at once, in
// ZooKeeperServer.processConnectRequest and then touchSession.
//
// The leader expires the session T after the touch it processed last, by
// that touch's T. That is not always the latest connection's T, in two
// cases:
//   - A follower relays its last touch at its next ping, with its own
//     connection's T. That ping may come after the client moved to
//     another server. TestFaultGrantedReconnectShorter shows it.
//   - After a leader election or a restart, the new leader counts every
//     session afresh, by the T it was created with. See
//     getSessionWithTimeOuts.
//
// Every one of those is a T the client was answered with. So the lock uses
// the smallest T answered in the session. The answer is read on the
// goroutine that dials, before go-zookeeper reports the session and before
// it starts the loops that answer requests. So any request answered on a
// connection is judged with that connection's T. The lock does not use
// go-zookeeper's own log line of the answer, since an application may
// silence or replace the logger.
//
// The server may take a handshake whose answer never arrives, when the
// connection dies in between. That changes T unheard. WithSessionTimeout
// at or below the smallest maxSessionTimeout of any member covers it.
//
// An answer with the session also renews the lease, as lease.go says
// under "Which T".

// sessionTimeout is the smallest timeout the server granted in a session.
type sessionTimeout struct {
	session int64
	timeout time.Duration // 0 if an answer made no sense: unknown
}

// tap wraps the dialer opts left on c, so that every connection reports
// its handshake's answer. It reports false when it cannot. The dialer is
// in an unexported field of go-zookeeper's. Tap reads it while zk.Connect
// applies its options, before its goroutines start. A go-zookeeper version
// that moved the field leaves the lock without T on the connection, never
// with a wrong one. Then any disconnection is a loss.
func (d *Handshakes) tap(c *zk.Conn) bool {
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

// tapConn passes a connection's bytes through untouched. It hands the
// head of the first packet it reads, the server's answer to the
// handshake, to its Handshakes. go-zookeeper reads the answer with
// io.ReadFull, length first. So it may arrive in any number of Reads, all
// on the goroutine that dialed. Later Reads come from a goroutine started
// after it.
type tapConn struct {
	net.Conn
	info *Handshakes
	sent time.Time // when the handshake was written
	head []byte
	done bool
}

// AnswerHead is the part of a handshake's answer the tap reads. It holds
// the packet's length, then the protocol version, the timeout in
// milliseconds and the session id, all big-endian. This is the head of
// go-zookeeper's connectResponse.
const AnswerHead = 4 + 4 + 4 + 8

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
		if len(c.head) >= AnswerHead {
			c.done = true
			c.info.Answered(c.head[:AnswerHead], c.sent)
			c.head = nil
		}
	}
	return n, err
}

// Answered records the answer to a handshake sent at sent. Session 0
// means the session had expired, and go-zookeeper opens a new one next. A
// new session starts a new record. The same session keeps the smallest
// timeout. The listeners hear of every answer with a session.
func (d *Handshakes) Answered(head []byte, sent time.Time) {
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

// TimeoutOf returns the smallest session timeout the server granted
// session so far, or 0 if unknown.
func (d *Handshakes) TimeoutOf(session int64) time.Duration {
	if last := d.last.Load(); last != nil && last.session == session {
		return last.timeout
	}
	return 0
}

// ConnectCount returns how many answers carried a session.
func (d *Handshakes) ConnectCount() uint64 { return d.connects.Load() }

// OnHandshake calls fn with every answer to a handshake that carries a
// session, until stop. It calls fn on go-zookeeper's goroutine, after
// TimeoutOf has taken the answer in. So fn must not block.
func (d *Handshakes) OnHandshake(fn func(session int64, sent time.Time)) (stop func()) {
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

// dialed maps connections made by Connect to what Connect learns of
// them. It holds them weakly, so an entry goes when its connection is
// garbage collected.
var dialed sync.Map // weak.Pointer[zk.Conn] -> *Handshakes

func remember(c *zk.Conn, info *Handshakes) {
	key := weak.Make(c)
	dialed.Store(key, info)
	runtime.AddCleanup(c, func(key weak.Pointer[zk.Conn]) { dialed.Delete(key) }, key)
}

// sessionsOf returns what conn tells of its sessions. A connection made
// by Connect tells, and so does one that tells itself, as the unit tests'
// fake does. It returns nil for any other.
func sessionsOf(conn Conn) Sessions {
	switch c := conn.(type) {
	case *zk.Conn:
		if v, ok := dialed.Load(weak.Make(c)); ok {
			return v.(*Handshakes)
		}
	case Sessions:
		return c
	}
	return nil
}

// Sessions is what a connection tells of its sessions. Handshakes is one,
// for a connection made by Connect. The lock's unit tests' fake is
// another.
type Sessions interface {
	// TimeoutOf returns the smallest session timeout the server granted
	// session so far, or 0 if unknown.
	TimeoutOf(session int64) time.Duration
	// ConnectCount returns how many times the client has had a session.
	// It moves before the watches of a new connection are set again.
	ConnectCount() uint64
	// OnHandshake calls fn with each answer to a handshake, sent at sent,
	// that carries a session. The server touched the session after sent.
	OnHandshake(fn func(session int64, sent time.Time)) (stop func())
}
