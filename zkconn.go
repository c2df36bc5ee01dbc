package rwlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkConn is the part of *zk.Conn the lock uses. The unit tests drive the
// protocol through an in-memory fake of it.
type zkConn interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	CreateContainer(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Children(path string) ([]string, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Delete(path string, version int32) error
	Multi(ops ...any) ([]zk.MultiResponse, error)
	Sync(path string) (string, error)
	State() zk.State
	SessionID() int64
}

var _ zkConn = (*zk.Conn)(nil)

// pauser is a connection whose process can be stopped: only the
// simulation's fake is one. pause blocks while the process is stopped, as
// the lock's goroutines would not run then: before a request is timed and
// sent, and as the lease clock's timer fires.
type pauser interface{ pause() }

func pause(conn zkConn) {
	if p, ok := conn.(pauser); ok {
		p.pause()
	}
}

// A client is what every lock on one connection shares: the requests they
// make, each with a context and timed for the session's lease (lease.go),
// the watches they set (watches.go), and the grants they hold. Locks made
// on the same *zk.Conn share one client, whatever their paths, so that the
// lease costs one keepalive per connection and a node is watched at most
// once per connection.
//
// A client lives while something uses it: an acquisition, a grant, a
// watch registration, a deletion in the background (refs). The registry
// forgets it when the last user is done, so a connection that is no longer
// used is not kept alive by the library.
type client struct {
	zk       zkConn
	sessions sessions // what the connection tells of its sessions; nil if nothing
	unlisten func()   // stops listening to the connection's handshakes

	mu      sync.Mutex
	refs    int                      // guarded by clients.mu, not mu
	lease   lease                    // guarded by mu
	grants  map[*Grant]struct{}      // held grants, judged by the lease clock; guarded by mu
	timer   *time.Timer              // the lease clock's next look; guarded by mu
	pinging bool                     // a keepalive is in flight; guarded by mu
	pinged  time.Time                // when the last keepalive was sent; guarded by mu
	watches map[watchKey]*watchEntry // guarded by mu
}

// clients is the registry of clients by connection.
var clients struct {
	mu sync.Mutex
	m  map[zkConn]*client
}

// acquireClient returns conn's client, counting one more user; the user
// calls release when done.
func acquireClient(conn zkConn) *client {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	c := clients.m[conn]
	if c == nil {
		if clients.m == nil {
			clients.m = make(map[zkConn]*client)
		}
		c = &client{zk: conn, sessions: sessionsOf(conn), grants: make(map[*Grant]struct{}), watches: make(map[watchKey]*watchEntry)}
		if c.sessions != nil {
			c.unlisten = c.sessions.onHandshake(c.handshake)
		}
		clients.m[conn] = c
	}
	c.refs++
	return c
}

// retain counts one more user of a client its caller already uses.
func (c *client) retain() {
	clients.mu.Lock()
	c.refs++
	clients.mu.Unlock()
}

func (c *client) release() {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	if c.refs--; c.refs == 0 {
		delete(clients.m, c.zk)
		if c.unlisten != nil {
			c.unlisten()
		}
	}
}

// reply is the outcome of one request: its value, the session that served
// it (0 when the session changed while it was under way, so that it is not
// known which one did), and its error.
type reply[T any] struct {
	v       T
	session int64
	err     error
}

// request sends one request with op, and returns early with ctx's error
// when ctx ends first: go-zookeeper's calls take no context, and can block
// for most of a session timeout while it reconnects. A request left behind
// finishes on its own goroutine; late, if not nil, then receives its
// outcome, so that a node it created or failed to delete is not forgotten,
// and the request is sent even when ctx has already ended. Without late,
// an ended ctx skips the request.
//
// The session is read before and after the request: only if it is the
// same is the request known to have run in it (a request queued across an
// expiry is sent in the new session). A write (or a sync) that the server
// answered in a known session renews that session's lease: see lease.go.
func request[T any](c *client, ctx context.Context, renews bool, op func() (T, error), late func(reply[T])) reply[T] {
	run := func() reply[T] {
		pause(c.zk)
		before, sent := c.zk.SessionID(), time.Now()
		v, err := op()
		session := c.zk.SessionID()
		if session != before {
			session = 0
		}
		if renews && session != 0 && answered(err) {
			// mutant: lease-from-answer
			c.renew(session, sent)
		}
		return reply[T]{v, session, err}
	}
	if ctx.Done() == nil {
		countRequest(ctx)
		return run()
	}
	if err := ctx.Err(); err != nil && late == nil {
		return reply[T]{err: err}
	}
	countRequest(ctx)
	ch := make(chan reply[T], 1)
	go func() { ch <- run() }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		if late != nil {
			go func() { late(<-ch) }()
		}
		return reply[T]{err: ctx.Err()}
	}
}

// The requests the lock makes. Writes and sync renew the lease.

// create creates path; sending, if not nil, is closed as the call to
// go-zookeeper begins (see acquisition.listBehind).
func (c *client) create(ctx context.Context, path string, data []byte, flags int32, acl []zk.ACL,
	sending chan struct{}, late func(reply[string])) reply[string] {
	return request(c, ctx, true, func() (string, error) {
		if sending != nil {
			close(sending)
		}
		return c.zk.Create(path, data, flags, acl)
	}, late)
}

func (c *client) createContainer(ctx context.Context, path string, acl []zk.ACL) reply[string] {
	return request(c, ctx, true, func() (string, error) { return c.zk.CreateContainer(path, nil, zk.FlagContainer, acl) }, nil)
}

func (c *client) children(ctx context.Context, path string) reply[[]string] {
	return request(c, ctx, false, func() ([]string, error) {
		children, _, err := c.zk.Children(path)
		return children, err
	}, nil)
}

type node struct {
	data []byte
	stat *zk.Stat
}

func (c *client) get(ctx context.Context, path string) reply[node] {
	return request(c, ctx, false, func() (node, error) {
		data, stat, err := c.zk.Get(path)
		return node{data, stat}, err
	}, nil)
}

func (c *client) set(ctx context.Context, path string, data []byte) reply[*zk.Stat] {
	return request(c, ctx, true, func() (*zk.Stat, error) { return c.zk.Set(path, data, -1) }, nil)
}

func (c *client) delete(ctx context.Context, path string, late func(reply[struct{}])) reply[struct{}] {
	return request(c, ctx, true, func() (struct{}, error) { return struct{}{}, c.zk.Delete(path, -1) }, late)
}

// markAndDelete sets data (the held mark) and deletes path in one
// transaction.
func (c *client) markAndDelete(ctx context.Context, path string, data []byte, late func(reply[struct{}])) reply[struct{}] {
	return request(c, ctx, true, func() (struct{}, error) {
		_, err := c.zk.Multi(
			&zk.SetDataRequest{Path: path, Data: data, Version: -1},
			&zk.DeleteRequest{Path: path, Version: -1},
		)
		return struct{}{}, err // a failed transaction reports the failing operation's error
	}, late)
}

// sync is the lease's keepalive: the cheapest request that a follower must
// pass on to the leader (see lease.go).
func (c *client) sync(ctx context.Context) reply[struct{}] {
	return request(c, ctx, true, func() (struct{}, error) {
		_, err := c.zk.Sync("/")
		return struct{}{}, err
	}, nil)
}

// answered reports whether err is the server's answer to a write, given
// only once the leader has seen it: success, or an error the leader found.
func answered(err error) bool {
	switch {
	case err == nil:
		return true
	case connectionLoss(err), sessionGone(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	// Only the errors the leader's PrepRequestProcessor finds, which it
	// proposes as error transactions: a follower answers them only after
	// the leader has. A follower (or observer) with eager ACL checks answers
	// ZNOAUTH and INVALIDACL on its own (ZooKeeperServer.authWriteRequest),
	// so those prove nothing about the leader.
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNotEmpty, zk.ErrBadVersion} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// connectionLoss reports errors after which the request may or may not have
// reached the server and the session may still be alive: retry once the
// client has reconnected, and treat the outcome of a create as unknown.
func connectionLoss(err error) bool {
	if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionMoved) {
		return true
	}
	// go-zookeeper hands a request whose write failed that write's own
	// error (EPIPE, ECONNRESET when the server has just dropped the
	// connection), and then reconnects as after any connection loss.
	var netErr net.Error
	return errors.As(err, &netErr)
}

// sessionGone reports errors that mean the session, and with it every
// ephemeral node it owned, no longer exists.
func sessionGone(err error) bool {
	return errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing)
}

// unimplemented reports the server's UNIMPLEMENTED (-6) error, which
// go-zookeeper has no sentinel for.
func unimplemented(err error) bool {
	return err != nil && err.Error() == "unknown error: -6"
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
