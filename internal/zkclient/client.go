package zkclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Conn is the part of *zk.Conn a Client uses. The lock's unit tests drive
// it through an in-memory fake.
type Conn interface {
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

var _ Conn = (*zk.Conn)(nil)

// Pauser is a Conn whose process can be stopped. Only the simulation's
// fake is one. Pause blocks while the process is stopped, since the lock's
// goroutines would not run then. It is called before a request is timed
// and sent. It is also called as a timer of the lock's fires, the lease
// clock's and any made with AfterFunc.
type Pauser interface{ Pause() }

func pause(conn Conn) {
	if p, ok := conn.(Pauser); ok {
		p.Pause()
	}
}

// AfterFunc is time.AfterFunc for a timer of the lock's on c. In a
// stopped process, as a Pauser tells, f runs only once the process
// resumes, as it would in a real one.
func (c *Client) AfterFunc(d time.Duration, f func()) *time.Timer {
	return time.AfterFunc(d, func() {
		pause(c.zk)
		f()
	})
}

// A Client is what every lock on one connection shares. It makes their
// requests, each with a context and timed for the session's lease; see
// lease.go. It keeps the watches they set; see watch.go. And it keeps the
// holders the lease clock judges. Locks made on the same *zk.Conn share
// one Client, whatever their paths. So the lease costs one keepalive per
// connection, and a node is watched at most once per connection.
//
// A Client lives while something uses it. A user is an acquisition, a
// grant, a watch registration or a deletion in the background; refs
// counts them. The registry forgets the Client when the last user is
// done. So the library does not keep alive a connection that is no longer
// used.
type Client struct {
	zk       Conn
	sessions Sessions // what the connection tells of its sessions; nil if nothing
	unlisten func()   // stops listening to the connection's handshakes

	mu      sync.Mutex
	refs    int                 // guarded by clients.mu, not mu
	lease   lease               // guarded by mu
	holders map[Holder]struct{} // judged by the lease clock; guarded by mu
	timer   *time.Timer         // the lease clock's next look; guarded by mu
	pinging bool                // a keepalive is in flight; guarded by mu
	pinged  time.Time           // when the last keepalive was sent; guarded by mu
	watches map[watchKey]*Watch // guarded by mu
	checks  map[string]*check   // by path (see Check); guarded by mu
	shared  map[string]any      // by lock path (see Shared); guarded by mu
}

// clients is the registry of clients by connection.
var clients struct {
	mu sync.Mutex
	m  map[Conn]*Client
}

// For returns conn's Client, and counts one more user. The user calls
// Unref when done.
func For(conn Conn) *Client {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	c := clients.m[conn]
	if c == nil {
		if clients.m == nil {
			clients.m = make(map[Conn]*Client)
		}
		c = &Client{zk: conn, sessions: sessionsOf(conn), holders: make(map[Holder]struct{}), watches: make(map[watchKey]*Watch)}
		if c.sessions != nil {
			c.unlisten = c.sessions.OnHandshake(c.handshake)
		}
		clients.m[conn] = c
	}
	c.refs++
	return c
}

// Ref counts one more user of a Client its caller already uses.
func (c *Client) Ref() {
	clients.mu.Lock()
	c.refs++
	clients.mu.Unlock()
}

// RefIfLive counts one more user of c, unless c was retired when its
// last user left. Then it reports false, and the caller must not use c.
func (c *Client) RefIfLive() bool {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	if c.refs == 0 || clients.m[c.zk] != c {
		return false
	}
	c.refs++
	return true
}

// Unref counts one user less.
func (c *Client) Unref() {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	if c.refs--; c.refs == 0 && clients.m[c.zk] == c {
		delete(clients.m, c.zk)
		if c.unlisten != nil {
			c.unlisten()
		}
	}
}

// Shared returns what the locks of path on c keep together. It is the
// lock package's state that must be one per lock directory and
// connection. init makes it on first use. It lives as long as c, which a
// user keeps alive with Ref.
func (c *Client) Shared(path string, init func() any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.shared[path]
	if !ok && init != nil {
		if c.shared == nil {
			c.shared = map[string]any{}
		}
		v = init()
		c.shared[path] = v
	}
	return v
}

// Conn returns the connection c makes its requests on.
func (c *Client) Conn() Conn { return c.zk }

// ConnectCount returns how many times the connection has had a session,
// if it tells, as a connection made by Dial does. The count moves before
// the watches of a new connection are set again.
func (c *Client) ConnectCount() (uint64, bool) {
	if c.sessions == nil {
		return 0, false
	}
	return c.sessions.ConnectCount(), true
}

// Reply is the outcome of one request: its value, the session that
// served it, and its error. Session is 0 when the session changed while
// the request was under way, so that it is not known which one served it.
type Reply[T any] struct {
	V       T
	Session int64
	Err     error
}

// A Counter counts the requests made with a context that carries it; see
// WithCounter. The lock keeps its figures per acquisition and grant with
// it. The zero value is ready.
type Counter struct{ n atomic.Int64 }

// Load returns the count.
func (c *Counter) Load() int64 { return c.n.Load() }

// Add adds n to the count. It counts a request made for several at once.
func (c *Counter) Add(n int64) { c.n.Add(n) }

// Reset sets the count to 0, and returns what it was.
func (c *Counter) Reset() int64 { return c.n.Swap(0) }

type counterKey struct{}

// WithCounter returns a copy of ctx whose requests c counts, or ctx itself
// if c counts them already.
func WithCounter(ctx context.Context, c *Counter) context.Context {
	if ctx.Value(counterKey{}) == c {
		return ctx
	}
	return context.WithValue(ctx, counterKey{}, c)
}

func countRequest(ctx context.Context) {
	if c, ok := ctx.Value(counterKey{}).(*Counter); ok {
		c.n.Add(1)
	}
}

// request sends one request with op. It returns early with ctx's error
// when ctx ends first. That is needed because go-zookeeper's calls take no
// context, and can block for most of a session timeout while it
// reconnects. A request left behind finishes on its own goroutine, and
// then late, if not nil, receives its outcome. So a node it created or
// failed to delete is not forgotten. With late, the request is sent even
// when ctx has already ended. Without late, an ended ctx skips the
// request.
//
// The session is read before and after the request. Only if it is the
// same is the request known to have run in it. A request queued across an
// expiry is sent in the new session. A write or a sync that the server
// answered in a known session renews that session's lease; see lease.go.
func request[T any](ctx context.Context, c *Client, renews bool, op func() (T, error), late func(Reply[T])) Reply[T] {
	run := func() Reply[T] {
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
		return Reply[T]{v, session, err}
	}
	if ctx.Done() == nil {
		countRequest(ctx)
		return run()
	}
	if err := ctx.Err(); err != nil && late == nil {
		return Reply[T]{Err: err}
	}
	countRequest(ctx)
	ch := make(chan Reply[T], 1)
	go func() { ch <- run() }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		if late != nil {
			// The caller may let go of c before the answer comes. The
			// handler, a background deletion say, uses c until it returns.
			c.Ref()
			go func() {
				defer c.Unref()
				late(<-ch)
			}()
		}
		return Reply[T]{Err: ctx.Err()}
	}
}

// The requests the lock makes. Writes and Sync renew the lease.

// Create creates path. If sending is not nil, it is closed as the call to
// go-zookeeper begins. The lock pipelines a listing behind it.
func (c *Client) Create(ctx context.Context, path string, data []byte, flags int32, acl []zk.ACL,
	sending chan struct{}, late func(Reply[string])) Reply[string] {
	return request(ctx, c, true, func() (string, error) {
		if sending != nil {
			close(sending)
		}
		return c.zk.Create(path, data, flags, acl)
	}, late)
}

// CreateContainer creates path as a container node.
func (c *Client) CreateContainer(ctx context.Context, path string, acl []zk.ACL) Reply[string] {
	return request(ctx, c, true, func() (string, error) { return c.zk.CreateContainer(path, nil, zk.FlagContainer, acl) }, nil)
}

// Children lists path's children.
func (c *Client) Children(ctx context.Context, path string) Reply[[]string] {
	r := c.List(ctx, path)
	return Reply[[]string]{r.V.Names, r.Session, r.Err}
}

// A Listing is a directory's children, with the directory's stat as of
// the same moment. The stat's Cversion and Pzxid date the last change of
// its children.
type Listing struct {
	Names []string
	Stat  *zk.Stat
}

// List lists path's children, with path's stat.
func (c *Client) List(ctx context.Context, path string) Reply[Listing] {
	return request(ctx, c, false, func() (Listing, error) {
		children, stat, err := c.zk.Children(path)
		return Listing{children, stat}, err
	}, nil)
}

// Node is a node's data and stat.
type Node struct {
	Data []byte
	Stat *zk.Stat
}

// Get reads path.
func (c *Client) Get(ctx context.Context, path string) Reply[Node] {
	return request(ctx, c, false, func() (Node, error) {
		data, stat, err := c.zk.Get(path)
		return Node{data, stat}, err
	}, nil)
}

// Set writes path's data, whatever its version.
func (c *Client) Set(ctx context.Context, path string, data []byte) Reply[*zk.Stat] {
	return request(ctx, c, true, func() (*zk.Stat, error) { return c.zk.Set(path, data, -1) }, nil)
}

// Delete deletes path, whatever its version; late as for Create.
func (c *Client) Delete(ctx context.Context, path string, late func(Reply[struct{}])) Reply[struct{}] {
	return request(ctx, c, true, func() (struct{}, error) { return struct{}{}, c.zk.Delete(path, -1) }, late)
}

// SetAndDelete sets path's data and deletes it in one transaction. The
// lock writes its held mark this way, so that whoever reads the node as
// it goes sees the mark.
func (c *Client) SetAndDelete(ctx context.Context, path string, data []byte, late func(Reply[struct{}])) Reply[struct{}] {
	return request(ctx, c, true, func() (struct{}, error) {
		_, err := c.zk.Multi(
			&zk.SetDataRequest{Path: path, Data: data, Version: -1},
			&zk.DeleteRequest{Path: path, Version: -1},
		)
		return struct{}{}, err // a failed transaction reports the failing operation's error
	}, late)
}

// Multi runs ops in one transaction. All commit, or none. A failed
// transaction reports the failing operation's error. The replies carry
// each operation's error. The arguments sending and late are as for
// Create.
func (c *Client) Multi(ctx context.Context, ops []any, sending chan struct{}, late func(Reply[[]zk.MultiResponse])) Reply[[]zk.MultiResponse] {
	return request(ctx, c, true, func() ([]zk.MultiResponse, error) {
		if sending != nil {
			close(sending)
		}
		return c.zk.Multi(ops...)
	}, late)
}

// Sync is the lease's keepalive. It is the cheapest request that a
// follower must pass on to the leader; see lease.go. For the same reason,
// it orders a moment of ours against the server's changes. The lock's
// coalesced readers wait for one; see the lock's coalesce.go.
func (c *Client) Sync(ctx context.Context) Reply[struct{}] {
	return request(ctx, c, true, func() (struct{}, error) {
		_, err := c.zk.Sync("/")
		return struct{}{}, err
	}, nil)
}

// answered reports whether err is the server's answer to a write, given
// only once the leader has seen the write. That is success, or an error
// the leader found.
func answered(err error) bool {
	switch {
	case err == nil:
		return true
	case ConnectionLoss(err), SessionGone(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	// Only the errors the leader's PrepRequestProcessor finds count. It
	// proposes them as error transactions, so a follower answers them
	// only after the leader has. A follower or an observer with eager ACL
	// checks answers ZNOAUTH and INVALIDACL on its own, in
	// ZooKeeperServer.authWriteRequest. So those prove nothing about the
	// leader.
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNotEmpty, zk.ErrBadVersion} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ConnectionLoss reports errors after which the request may or may not
// have reached the server, and the session may still be alive. Retry once
// the client has reconnected. Treat the outcome of a create as unknown.
func ConnectionLoss(err error) bool {
	if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionMoved) {
		return true
	}
	// A request whose write failed gets that write's own error from
	// go-zookeeper, such as EPIPE, or ECONNRESET when the server has just
	// dropped the connection. Then go-zookeeper reconnects, as after any
	// connection loss.
	var netErr net.Error
	return errors.As(err, &netErr)
}

// SessionGone reports errors that mean the session, and with it every
// ephemeral node it owned, no longer exists.
func SessionGone(err error) bool {
	return errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing)
}

// Unimplemented reports the server's UNIMPLEMENTED error, code -6. There
// is no sentinel for it in go-zookeeper.
func Unimplemented(err error) bool {
	return err != nil && err.Error() == "unknown error: -6"
}

// Backoff spaces out retries after a connection loss. It notices a
// connection that its owner closed for good. The zero value is ready.
type Backoff struct{ next time.Duration }

var errConnClosed = fmt.Errorf("%w: the *zk.Conn was closed", zk.ErrConnectionClosed)

// Closed reports the error with which Wait found the connection closed by
// its owner.
func Closed(err error) bool { return errors.Is(err, errConnClosed) }

// Wait sleeps, longer each time, and then until the client has a session
// again. A request made while go-zookeeper reconnects would wait in its
// queue anyway. And sent the moment it reconnects, the request races with
// go-zookeeper re-registering its watches. That is an upstream data race
// on lastZxid, go-zookeeper/zk#35.
func (b *Backoff) Wait(ctx context.Context, c Conn) error {
	b.next = min(max(2*b.next, 10*time.Millisecond), 500*time.Millisecond)
	down := c.State() != zk.StateHasSession // as the wait begins: once it is back, settle as below
	if err := sleep(ctx, b.next); err != nil {
		return err
	}
	suspect, waited := false, down
	for {
		switch c.State() {
		case zk.StateHasSession:
			if waited {
				// Just reconnected. Give go-zookeeper the moment it takes
				// to re-register its watches before our request goes out.
				return sleep(ctx, settleAfterReconnect)
			}
			return nil
		case zk.StateDisconnected:
			// While it reconnects, go-zookeeper passes through this state
			// in an instant. It stays in it only after Close.
			if suspect {
				return errConnClosed
			}
			suspect = true
		default:
			suspect = false
		}
		waited = true
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return err
		}
	}
}

// settleAfterReconnect is how long a retry waits after the session is
// back; see Wait.
const settleAfterReconnect = 10 * time.Millisecond

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
