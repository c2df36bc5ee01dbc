package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
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
// with the given session timeout (sessionTimeout when 0).
func connect(t *testing.T, servers string, timeout time.Duration) *client {
	t.Helper()
	if timeout == 0 {
		timeout = sessionTimeout
	}
	conn, rec := zkserver.Connect(t, strings.Split(servers, ","), timeout)
	return &client{conn: conn, session: rec}
}

// lock returns the lock at path on c, telling it the session timeout.
func (c *client) lock(t *testing.T, path string, opts ...rwlock.Option) *rwlock.RWLock {
	t.Helper()
	_, _, timeout, ok := c.session.Session()
	require.True(t, ok, "no session")
	l, err := rwlock.New(c.conn, path, append([]rwlock.Option{rwlock.WithSessionTimeout(timeout)}, opts...)...)
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

// lockPath returns a lock path no other test uses.
func lockPath(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/it/%s-%s", name, hex.EncodeToString(b[:]))
}

// lockNodes returns the children of a lock directory (none if it does not
// exist), sorted by name.
func lockNodes(t *testing.T, conn *zk.Conn, path string) []string {
	t.Helper()
	children, _, err := conn.Children(path)
	if err == zk.ErrNoNode {
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
