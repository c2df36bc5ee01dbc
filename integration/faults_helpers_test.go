package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Helpers of the fault tests (faults_*_test.go).
//
// Timing facts they rely on, measured on go-zookeeper v1.0.4 and Debian's
// ZooKeeper 3.8: a client pings every T/3 of its session timeout T and
// drops a connection after 2T/3 without a packet; with a single server in
// its list it waits 1s before every redial; the server expires a session T
// after it last heard from it, rounded up to its next tick.

// faultTick is the tick of the servers the fault tests start: sessions
// expire within one tick of their timeout.
const faultTick = 500 * time.Millisecond

// zk35 is why most fault tests run without the race detector
// (tier.NoRace). go-zookeeper v1.0.4 has a data race of its own on a
// reconnection: recvLoop writes Conn.lastZxid as answers come, while
// sendSetWatches reads it (go-zookeeper/zk#35, still open). A test that
// reconnects with requests in flight fails under -race on a busy machine.
// The root package's simulation keeps the race detector on our
// reconnection code.
const zk35 = "go-zookeeper/zk#35"

// faultServer starts servers of the test's own (n members), for tests that
// break a server or measure times on one nobody else loads. Such a test is
// a soak test: faultServer says so (tier.Long) if the test did not.
func faultServer(t *testing.T, n int) *zkserver.Cluster {
	t.Helper()
	tier.Long(t)
	return zkserver.Start(t, zkserver.Config{Servers: n, TickTime: faultTick, MinSessionTimeout: time.Second})
}

// proxied returns a proxy to addr, for clients the test will partition.
func proxied(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	return faultproxy.Start(t, addr)
}

// heal ends a partition as a real network does: connections that lost
// bytes to the blackhole are dropped (TCP would have retransmitted them or
// reset), and the client reconnects through a passing proxy. A client with
// one server redials only after 1s, so nothing dials in between.
func heal(p *faultproxy.Proxy) {
	p.Cut()
	p.Pass()
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// homeFirst is a zk.HostProvider that tries the servers in a fixed order
// starting at home, where go-zookeeper shuffles them: it puts a client on
// the member a test is going to break, and still lets it fail over to the
// others. Next and Connected follow go-zookeeper's DNSHostProvider.
type homeFirst struct {
	mu         sync.Mutex
	servers    []string
	curr, last int
}

func newHomeFirst(servers []string, home int) *homeFirst {
	n := len(servers)
	order := make([]string, n)
	for i := range order {
		order[i] = servers[(home+i)%n]
	}
	return &homeFirst{servers: order, curr: -1, last: -1}
}

func (h *homeFirst) Init([]string) error { return nil } // the list comes shuffled; keep ours

func (h *homeFirst) Len() int { return len(h.servers) }

func (h *homeFirst) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

func (h *homeFirst) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}

// ZooKeeper opcodes (jute's ZooDefs.OpCode) of the requests a faultDialer
// can single out.
const (
	opCreate = 1
	opDelete = 2
	opMulti  = 14 // singled out by the path of its first operation
)

// multiHeader is the size of jute's MultiHeader {type int32, done bool,
// err int32}, which starts each operation of a multi and each of its
// results.
const multiHeader = 9

// faultDialer wraps a zk.Dialer (see wrap) so that, once armed, it singles
// out the next request of one opcode on a path under prefix, on a real
// connection to a real server, and breaks the connection around it:
//
//   - withhold: the request reaches the server, which carries it out, but
//     its reply (when it is a success) is dropped and the connection closed,
//     so the client never learns the outcome: a lost create response;
//   - otherwise the request's write fails as a write to a connection the
//     peer has reset fails (EPIPE), and the connection is closed: the
//     request never reaches the server.
//
// fired receives the path of the request, or for a withheld create the
// path the server created. The connect handshake is never touched.
type faultDialer struct {
	op       int32
	prefix   string
	withhold bool
	armed    atomic.Bool
	fired    chan string
}

func newFaultDialer(op int32, prefix string, withhold bool) *faultDialer {
	return &faultDialer{op: op, prefix: prefix, withhold: withhold, fired: make(chan string, 1)}
}

// wrap returns a dialer that dials with next and breaks the connection as
// armed: pass it to connect's withDialer.
func (d *faultDialer) wrap(next zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := next(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &faultConn{Conn: c, d: d, in: bufio.NewReader(c)}, nil
	}
}

// faultConn reads the server's stream packet by packet, so that it can drop
// one reply whole. go-zookeeper writes every request with one Write and
// reads from one goroutine.
type faultConn struct {
	net.Conn
	d       *faultDialer
	in      *bufio.Reader
	writes  atomic.Int64
	xid     atomic.Int32 // the request whose reply to withhold; 0: none
	pending []byte       // the rest of the packet being read
}

var errBrokenPipe = &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}

func (c *faultConn) Write(p []byte) (int, error) {
	if c.writes.Add(1) > 1 { // the first is the connect request
		if xid, op, path, ok := parseRequest(p); ok && op == c.d.op && strings.HasPrefix(path, c.d.prefix) &&
			c.d.armed.CompareAndSwap(true, false) {
			if !c.d.withhold {
				c.Conn.Close()
				c.d.fired <- path
				return 0, errBrokenPipe
			}
			c.xid.Store(xid)
		}
	}
	return c.Conn.Write(p)
}

func (c *faultConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		pkt, err := readFrame(c.in)
		if err != nil {
			return 0, err
		}
		// A reply starts with ReplyHeader{xid int32, zxid int64, err int32}.
		if xid := c.xid.Load(); xid != 0 && len(pkt) >= 20 && int32(binary.BigEndian.Uint32(pkt[4:])) == xid {
			c.xid.Store(0)
			if code := int32(binary.BigEndian.Uint32(pkt[16:])); code != 0 {
				c.d.armed.Store(true) // it failed (no directory yet?): wait for the next one
			} else {
				body := pkt[20:]
				if c.d.op == opMulti && len(body) >= multiHeader {
					body = body[multiHeader:] // the first operation's result
				}
				created, _ := parseString(body)
				c.Conn.Close()
				c.d.fired <- created
				return 0, io.ErrUnexpectedEOF
			}
		}
		c.pending = pkt
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// readFrame reads one whole ZooKeeper frame, its length prefix included.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	pkt := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
	copy(pkt, size[:])
	if _, err := io.ReadFull(r, pkt[4:]); err != nil {
		return nil, err
	}
	return pkt, nil
}

// parseRequest reads RequestHeader{xid, type} and the path that starts the
// body of create and delete requests.
func parseRequest(p []byte) (xid, op int32, path string, ok bool) {
	if len(p) < 12 {
		return 0, 0, "", false
	}
	xid = int32(binary.BigEndian.Uint32(p[4:]))
	op = int32(binary.BigEndian.Uint32(p[8:]))
	body := p[12:]
	if op == opMulti && len(body) >= multiHeader {
		body = body[multiHeader:]
	}
	path, ok = parseString(body)
	return xid, op, path, ok
}

// parseString reads a jute string: int32 length, then the bytes.
func parseString(b []byte) (string, bool) {
	if len(b) < 4 {
		return "", false
	}
	n := int32(binary.BigEndian.Uint32(b))
	if n < 0 || int(n) > len(b)-4 {
		return "", false
	}
	return string(b[4 : 4+n]), true
}

// nodesNow lists a lock directory (nil when it does not exist); ok is false
// when the listing failed, as it may while servers restart.
func nodesNow(conn *zk.Conn, dir string) (nodes []string, ok bool) {
	children, _, err := conn.Children(dir)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil, true
	case err != nil:
		return nil, false
	}
	return children, true
}

// waitNodes waits until the lock directory holds exactly want (in any order).
func waitNodes(t *testing.T, conn *zk.Conn, dir string, timeout time.Duration, want ...string) {
	t.Helper()
	zktest.WaitFor(t, timeout, func() bool {
		nodes, ok := nodesNow(conn, dir)
		return ok && sameNodes(nodes, want)
	}, "%s should hold %v; it holds %s", dir, want, describeNodes(conn, dir))
}

// waitNodeCount waits until the lock directory holds n nodes, and returns them.
func waitNodeCount(t *testing.T, conn *zk.Conn, dir string, n int, timeout time.Duration) []string {
	t.Helper()
	var nodes []string
	zktest.WaitFor(t, timeout, func() bool {
		var ok bool
		nodes, ok = nodesNow(conn, dir)
		return ok && len(nodes) == n
	}, "%s should hold %d nodes; it holds %s", dir, n, describeNodes(conn, dir))
	return nodes
}

// otherThan returns the node of nodes that is not node.
func otherThan(nodes []string, node string) string {
	for _, n := range nodes {
		if n != node {
			return n
		}
	}
	return ""
}

func sameNodes(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]int, len(a))
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// lazyText defers formatting to when a failure message is printed.
type lazyText func() string

func (f lazyText) String() string { return f() }

// describeNodes lists a lock directory's children with the session that
// owns each, for failure messages.
func describeNodes(conn *zk.Conn, dir string) lazyText {
	return func() string {
		nodes, ok := nodesNow(conn, dir)
		if !ok {
			return "(cannot list)"
		}
		var b strings.Builder
		b.WriteString("[")
		for i, n := range nodes {
			if i > 0 {
				b.WriteString(" ")
			}
			owner := "?"
			if _, st, err := conn.Get(dir + "/" + n); err == nil {
				owner = fmt.Sprintf("%#x", st.EphemeralOwner)
			}
			fmt.Fprintf(&b, "%s(session %s)", n, owner)
		}
		b.WriteString("]")
		return b.String()
	}
}

// waitSession waits until conn has its session back: connected, and the
// same session as before.
func waitSession(t *testing.T, conn *zk.Conn, session int64, timeout time.Duration) {
	t.Helper()
	zktest.WaitFor(t, timeout, func() bool {
		return conn.State() == zk.StateHasSession && conn.SessionID() == session
	}, "no session %#x (state %v, session %#x)", session, lazyText(func() string { return conn.State().String() }), lazyText(func() string { return fmt.Sprintf("%#x", conn.SessionID()) }))
	require.Equal(t, session, conn.SessionID(), "the session must have survived")
}

// closedAt returns a channel that receives the time ch closes, unless the
// test ends first.
func closedAt(ctx context.Context, ch <-chan struct{}) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		select {
		case <-ch:
			at <- time.Now()
		case <-ctx.Done():
		}
	}()
	return at
}

// mustRelease releases g with a bounded context.
func mustRelease(t *testing.T, g *rwlock.Grant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, g.Release(ctx))
}

// nodeName is the name of a lock node in its directory.
func nodeName(node string) string { return path.Base(node) }

// msec rounds a duration for logs.
func msec(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// debugLog collects the debug lines of the locks that log to it, so that a
// failing test can show what the lock did with the nodes it left behind.
type debugLog struct {
	mu    sync.Mutex
	lines []string
}

func (d *debugLog) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lines = append(d.lines, string(p))
	return len(p), nil
}

// logger returns a debug logger writing to d.
func (d *debugLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(d, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// about returns the lines that mention any of the words.
func (d *debugLog) about(words ...string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, line := range d.lines {
		for _, w := range words {
			if strings.Contains(line, w) {
				b.WriteString(line)
				break
			}
		}
	}
	return b.String()
}
