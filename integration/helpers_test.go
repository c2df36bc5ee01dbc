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

// connect opens a session to servers (a connect string or address list)
// with rwlock.Dial, which tells its locks the session timeout the server
// granted, asking for timeout (sessionTimeout when 0).
func connect(t *testing.T, servers string, timeout time.Duration) *client {
	t.Helper()
	if timeout == 0 {
		timeout = sessionTimeout
	}
	rec := &zkserver.SessionRecorder{}
	return &client{conn: dialZK(t, strings.Split(servers, ","), timeout, rec.Dial, nil), session: rec}
}

// connectZK opens a session with go-zookeeper's own Connect: its locks do
// not know the session timeout, whatever they are told.
func connectZK(t *testing.T, servers string, timeout time.Duration) *client {
	t.Helper()
	conn, rec := zkserver.Connect(t, strings.Split(servers, ","), timeout)
	return &client{conn: conn, session: rec}
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

// pending is an acquisition running on a goroutine of its own (see
// goAcquire).
type pending struct {
	done chan struct{}
	g    *rwlock.Grant
	err  error
}

// goAcquire runs acquire(ctx) on a new goroutine. When the test ends, its
// cleanup waits for the goroutine (t.Context is cancelled by then) and
// releases a grant nobody took with wait.
func goAcquire(t *testing.T, ctx context.Context, acquire func(context.Context) (*rwlock.Grant, error)) *pending {
	t.Helper()
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.g, p.err = acquire(ctx)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			if p.g != nil {
				p.g.Release(context.Background())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("an acquisition did not return within 30s of the test's end")
		}
	})
	return p
}

// returned reports whether the acquisition has returned.
func (p *pending) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to 30s for the acquisition to return, and returns its
// result; the caller owns the grant from then on.
func (p *pending) wait(t *testing.T) (*rwlock.Grant, error) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("acquisition still blocked after 30s")
	}
	g := p.g
	p.g = nil // the caller's now: cleanup must not release it behind its back
	return g, p.err
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
