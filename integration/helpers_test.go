package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// sessionTimeout is the default for test clients: short enough for fault
// tests to finish quickly, long enough for a loaded 2-core machine.
const sessionTimeout = 4 * time.Second

// client is one ZooKeeper session, closed when the test ends.
type client struct {
	conn    *zk.Conn
	session *zkserver.SessionRecorder
}

// connect opens a session to servers (a connect string: addresses joined
// by commas), asking for timeout (sessionTimeout when 0), and closes it
// when the test ends. It dials with rwlock.Dial, which tells the session's
// locks the timeout the server granted, unless opts say otherwise.
func connect(t *testing.T, servers string, timeout time.Duration, opts ...connectOption) *client {
	t.Helper()
	if timeout == 0 {
		timeout = sessionTimeout
	}
	var o connectOptions
	for _, opt := range opts {
		opt(&o)
	}
	addrs := strings.Split(servers, ",")
	if o.zkConnect {
		if o.dialer != nil || o.home != nil || o.zkOpts != nil {
			t.Fatal("connect: withZKConnect takes no other option")
		}
		conn, rec := zkserver.Connect(t, addrs, timeout)
		return &client{conn: conn, session: rec}
	}
	rec := &zkserver.SessionRecorder{}
	dial := zk.Dialer(rec.Dial)
	if o.dialer != nil {
		dial = o.dialer(dial)
	}
	zkOpts := []func(*zk.Conn){zk.WithLogger(quietZK{}), zk.WithLogInfo(false), zk.WithDialer(dial)}
	if o.home != nil {
		zkOpts = append(zkOpts, zk.WithHostProvider(newHomeFirst(addrs, *o.home)))
	}
	zkOpts = append(zkOpts, o.zkOpts...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := rwlock.Dial(ctx, addrs, timeout, zkOpts...)
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	return &client{conn: conn, session: rec}
}

// connectOption changes how connect dials.
type connectOption func(*connectOptions)

type connectOptions struct {
	zkConnect bool
	dialer    func(next zk.Dialer) zk.Dialer
	home      *int
	zkOpts    []func(*zk.Conn)
}

// withZKConnect dials with go-zookeeper's own zk.Connect, as an application
// that never heard of rwlock.Dial does: the session's locks do not know its
// timeout (WithSessionTimeout gives them a bound, no more).
func withZKConnect() connectOption {
	return func(o *connectOptions) { o.zkConnect = true }
}

// withDialer puts a dialer of the test's own (one that breaks, delays or
// refuses connections) between the client and the network. wrap gets the
// dialer connect would use, which records the session for expire, and
// returns one that dials through it.
func withDialer(wrap func(next zk.Dialer) zk.Dialer) connectOption {
	return func(o *connectOptions) { o.dialer = wrap }
}

// withZKOptions passes go-zookeeper's options to rwlock.Dial, after
// connect's own.
func withZKOptions(opts ...func(*zk.Conn)) connectOption {
	return func(o *connectOptions) { o.zkOpts = append(o.zkOpts, opts...) }
}

// withHome makes the client try the home'th server first and the others
// in order after it, where go-zookeeper shuffles them (see homeFirst).
func withHome(home int) connectOption {
	return func(o *connectOptions) { o.home = &home }
}

// lock returns the lock at path on c.
func (c *client) lock(t *testing.T, path string, opts ...rwlock.Option) *rwlock.RWLock {
	t.Helper()
	l, err := rwlock.New(c.conn, path, opts...)
	require.NoError(t, err)
	return l
}

// expire makes the server expire c's session.
func (c *client) expire(t *testing.T, addr string) {
	t.Helper()
	id, passwd, _, ok := c.session.Session()
	require.True(t, ok)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, zkserver.ExpireSession(ctx, addr, id, passwd))
}

// lockNodes returns the children of a lock directory (none if it does not
// exist), sorted by name.
func lockNodes(t *testing.T, conn *zk.Conn, path string) []string {
	t.Helper()
	children, _, err := conn.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	require.NoError(t, err)
	slices.Sort(children)
	return children
}

// exclusion checks mutual exclusion in-process, as sync's HammerRWMutex
// does: a reader adds 1, a writer 1000, and any other combination inside a
// critical section is a violation.
type exclusion struct {
	active     atomic.Int64
	violations atomic.Int64
}

func (x *exclusion) enter(m rwlock.Mode) {
	if m == rwlock.Write {
		if n := x.active.Add(1000); n != 1000 {
			x.violations.Add(1)
		}
		return
	}
	if n := x.active.Add(1); n < 1 || n >= 1000 {
		x.violations.Add(1)
	}
}

func (x *exclusion) leave(m rwlock.Mode) {
	if m == rwlock.Write {
		x.active.Add(-1000)
		return
	}
	x.active.Add(-1)
}

// watchers parses the server's wchp output: watched path -> session ids.
func watchers(t *testing.T, c *zkserver.Cluster, i int) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.FourLetter(ctx, i, "wchp")
	require.NoError(t, err)
	w := map[string][]string{}
	var path string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			path = strings.TrimSpace(line)
		case strings.TrimSpace(line) != "" && path != "":
			w[path] = append(w[path], strings.TrimSpace(line))
		}
	}
	return w
}

// sessionHex formats a session id as the server's four-letter words print
// it (wchp, cons): 0x followed by lowercase hex.
func sessionHex(id int64) string { return fmt.Sprintf("0x%x", id) }

// lockWatchers returns the part of watchers(t, c, 0) that concerns the lock
// directory path and its children, each watcher list sorted.
func lockWatchers(t *testing.T, c *zkserver.Cluster, path string) map[string][]string {
	t.Helper()
	w := map[string][]string{}
	for p, ids := range watchers(t, c, 0) {
		if p == path || strings.HasPrefix(p, path+"/") {
			w[p] = slices.Sorted(slices.Values(ids))
		}
	}
	return w
}

// waitQueue polls l's queue until it has exactly n entries and returns
// them; it fails the test if that takes more than 20s.
func waitQueue(t *testing.T, l *rwlock.RWLock, n int) []rwlock.Entry {
	t.Helper()
	var (
		q   []rwlock.Entry
		err error
	)
	zktest.Poll(t, 20*time.Second, func() bool {
		q, err = l.Queue(t.Context())
		return err == nil && len(q) == n
	}, func() string {
		return fmt.Sprintf("the queue of %s never had %d entries (last: %+v, %v)", l.Path(), n, q, err)
	})
	return q
}

// requestCount returns how many requests the members of c received while
// fn ran. zk_packets_received counts each mntr of the measurement itself
// too, one per member, which it subtracts. Every client of c counts:
// measure on a server of the test's own, and mind that go-zookeeper pings
// every third of the session timeout.
func requestCount(t *testing.T, c *zkserver.Cluster, fn func()) int64 {
	t.Helper()
	const key = "zk_packets_received"
	before, err := c.SumMntr(t.Context(), key)
	require.NoError(t, err)
	fn()
	after, err := c.SumMntr(t.Context(), key)
	require.NoError(t, err)
	return after - before - int64(c.Len())
}

// requestCountAwaiting is requestCount for an fn whose last request may go
// out after it returns (a watch set again on an event's goroutine): it
// polls the servers' count until want() requests have arrived, and fails
// the test if they do not within 5s. want is called after fn.
func requestCountAwaiting(t *testing.T, c *zkserver.Cluster, want func() int64, fn func()) int64 {
	t.Helper()
	const key = "zk_packets_received"
	before, err := c.SumMntr(t.Context(), key)
	require.NoError(t, err)
	fn()
	w := want()
	var n, looks int64
	zktest.Poll(t, 5*time.Second, func() bool {
		after, err := c.SumMntr(t.Context(), key)
		require.NoError(t, err)
		looks++
		n = after - before - looks*int64(c.Len()) // each look is a packet on every member
		return n >= w
	}, func() string { return fmt.Sprintf("%d requests arrived, want %d", n, w) })
	return n
}

// acquisition is a Lock or RLock call running on a goroutine of its own
// (see goAcquire).
type acquisition struct {
	done chan struct{} // closed when the call has returned, for a select
	g    *rwlock.Grant
	err  error
	at   time.Time // when the call returned; read it once done is closed
}

// goAcquire runs acquire(ctx) (l.Lock, l.RLock or a function of the
// test's) on a new goroutine. When the test ends, its cleanup waits for the
// goroutine (t.Context is cancelled by then) and releases a grant nobody
// took with wait or granted.
func goAcquire(t *testing.T, ctx context.Context, acquire func(context.Context) (*rwlock.Grant, error)) *acquisition {
	t.Helper()
	a := &acquisition{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		g, err := acquire(ctx)
		a.g, a.err, a.at = g, err, time.Now()
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
			if a.g != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				a.g.Release(ctx)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("an acquisition did not return within 30s of the test's end")
		}
	})
	return a
}

// returned reports whether the call has returned.
func (a *acquisition) returned() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// wait waits up to 30s for the call to return, and returns its result; the
// caller owns the grant from then on.
func (a *acquisition) wait(t *testing.T) (*rwlock.Grant, error) {
	t.Helper()
	return a.waitWithin(t, 30*time.Second)
}

// granted waits for the call to return a grant, and fails the test if it
// fails or takes longer than within; the caller owns the grant.
func (a *acquisition) granted(t *testing.T, within time.Duration) *rwlock.Grant {
	t.Helper()
	g, err := a.waitWithin(t, within)
	require.NoError(t, err)
	return g
}

func (a *acquisition) waitWithin(t *testing.T, within time.Duration) (*rwlock.Grant, error) {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(within):
		t.Fatalf("acquisition still blocked after %v", within)
	}
	g := a.g
	a.g = nil // the caller's now: cleanup must not release it behind its back
	return g, a.err
}

// stillWaiting fails the test if the call has returned: why says what
// should keep it waiting.
func (a *acquisition) stillWaiting(t *testing.T, why string) {
	t.Helper()
	select {
	case <-a.done:
		t.Fatalf("%s, but the acquisition returned (err %v)", why, a.err)
	default:
	}
}

// timeline records events from any goroutine, in the order they happen.
type timeline struct {
	mu     sync.Mutex
	events []string
}

func (tl *timeline) add(event string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, event)
}

func (tl *timeline) get() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.events)
}

// testContext returns t.Context() bounded by a minute: a test that would
// otherwise block for ever (a deadlock is a likely bug in a lock) fails
// with a deadline instead of hanging until go test's timeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
