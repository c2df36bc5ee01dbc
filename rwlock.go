package rwlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
)

// Errors returned by the lock. Match them with [errors.Is]: they are
// wrapped together with the context of the failure (path, node, the
// ZooKeeper error that caused it).
var (
	// ErrWouldBlock is returned by TryLock and TryRLock when another grant
	// is in the way. They leave no node behind.
	ErrWouldBlock = errors.New("rwlock: would block")
	// ErrLost means a grant ended without Release: its node was deleted,
	// its session expired, or the connection was down for so long that the
	// server may have expired the session.
	ErrLost = errors.New("rwlock: grant lost")
	// ErrReleased is what Err returns after Release (or Downgrade).
	ErrReleased = errors.New("rwlock: grant released")
	// ErrInvalidPath is returned by New for a path ZooKeeper would reject
	// or that cannot hold a lock.
	ErrInvalidPath = errors.New("rwlock: invalid path")
	// ErrUpgrade is returned by Lock when the context carries a read grant
	// of the same lock: upgrading in place can deadlock two readers.
	ErrUpgrade = errors.New("rwlock: cannot upgrade a read grant to a write grant")
	// ErrInvalidArgument is returned by New for a nil connection or an
	// invalid option.
	ErrInvalidArgument = errors.New("rwlock: invalid argument")
)

// Mode says whether a grant is shared or exclusive.
type Mode int

const (
	// Read is a shared grant: any number of readers hold the lock together.
	Read Mode = iota + 1
	// Write is an exclusive grant.
	Write
)

// String returns "read" or "write".
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// An Option configures an RWLock.
type Option func(*options)

type options struct {
	acl            []zk.ACL
	owner          string
	log            *slog.Logger
	sessionTimeout time.Duration
	cleanupTimeout time.Duration
	err            error
}

// WithACL sets the ACL of the lock directory, of any parent the lock
// creates, and of every lock node. The default is world:anyone with all
// permissions ([zk.WorldACL]([zk.PermAll])).
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.err = fmt.Errorf("%w: empty ACL", ErrInvalidArgument)
		}
		o.acl = acl
	}
}

// WithOwner sets the text stored in every lock node this lock creates, so
// that Queue, the CLI and `zkCli get` can tell who holds or waits. The
// default is "host:pid". Line breaks are replaced by spaces.
func WithOwner(owner string) Option {
	return func(o *options) { o.owner = strings.NewReplacer("\n", " ", "\r", " ").Replace(owner) }
}

// WithLogger sets the logger for debug lines about each protocol step.
// The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithSessionTimeout tells the lock the session timeout the connection was
// made with (the one the server granted). With it a holder rides out
// disconnections shorter than about a fifth of it; without it (and unless
// the connection was made by [Dial]) any disconnection of a holder counts
// as a loss. See [Grant.Done] for the reasoning. Do not pass more than the
// server granted: the server clamps timeouts to its maxSessionTimeout.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.err = fmt.Errorf("%w: session timeout %v", ErrInvalidArgument, d)
		}
		o.sessionTimeout = d
	}
}

// WithCleanupTimeout bounds how long a failed or cancelled acquisition waits
// for the deletion of its node before it hands the deletion to a background
// goroutine and returns. The default is 5s.
func WithCleanupTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.err = fmt.Errorf("%w: cleanup timeout %v", ErrInvalidArgument, d)
		}
		o.cleanupTimeout = d
	}
}

// RWLock is a distributed read/write lock: a ZooKeeper directory whose
// children are the queue of grants and waiters, in the order of their
// sequence numbers. It is safe for concurrent use, and one RWLock may hold
// any number of grants at once.
//
// Fairness is that order, so FIFO: a waiting writer blocks every reader that
// queues after it, and no one can overtake a waiter. A grant lasts until it
// is released or lost; [Grant.Done] tells which.
type RWLock struct {
	conn    zkConn
	path    string
	acl     []zk.ACL
	data    []byte // node data: who holds or waits
	owner   string
	log     *slog.Logger
	timeout time.Duration        // from WithSessionTimeout; 0 when not given
	granted func() time.Duration // what the server granted a Dial connection; nil for others
	cleanup time.Duration

	noContainers atomic.Bool    // the server refused container nodes
	background   sync.WaitGroup // deletions that outlived the call that needed them
}

// New returns the lock whose directory is path, using conn, which it never
// closes or replaces. It makes no request: the directory and its parents
// are created, as container nodes, by the first acquisition. New returns an
// error wrapping ErrInvalidPath for a path ZooKeeper would reject (relative,
// trailing slash, empty or relative segments, control characters), for the
// root and for /zookeeper.
func New(conn *zk.Conn, path string, opts ...Option) (*RWLock, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: nil *zk.Conn", ErrInvalidArgument)
	}
	l, err := newRWLock(conn, path, opts...)
	if err != nil {
		return nil, err
	}
	l.granted = grantedTimeout(conn)
	return l, nil
}

func newRWLock(conn zkConn, path string, opts ...Option) (*RWLock, error) {
	if err := ValidatePath(path); err != nil {
		return nil, err
	}
	o := options{
		acl:            zk.WorldACL(zk.PermAll),
		owner:          defaultOwner(),
		log:            slog.New(slog.DiscardHandler),
		cleanupTimeout: 5 * time.Second,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	return &RWLock{
		conn:    conn,
		path:    path,
		acl:     o.acl,
		data:    encodeNodeData(o.owner, false, false),
		owner:   o.owner,
		log:     o.log,
		timeout: o.sessionTimeout,
		cleanup: o.cleanupTimeout,
	}, nil
}

// Path returns the lock directory.
func (l *RWLock) Path() string { return l.path }

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// ValidatePath reports whether New would accept path as a lock directory,
// with an error wrapping ErrInvalidPath if not: ZooKeeper's own rules
// (absolute, no trailing slash, no empty or relative segments, no control
// characters), and ours: a lock needs a directory of its own, so not the
// root, and nothing under /zookeeper, which the server reserves.
func ValidatePath(path string) error { return validatePath(path) }

func validatePath(p string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrInvalidPath, p, why) }
	switch {
	case p == "":
		return bad("empty")
	case p[0] != '/':
		return bad("must start with /")
	case p == "/":
		return bad("the root cannot be a lock directory")
	case strings.HasSuffix(p, "/"):
		return bad("must not end with /")
	case p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/"):
		return bad("/zookeeper is reserved by the server")
	case !utf8.ValidString(p):
		return bad("not valid UTF-8")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return bad("empty segment")
		case ".", "..":
			return bad("relative segment")
		}
	}
	for _, r := range p {
		if r == 0 || r < 0x20 || 0x7f <= r && r <= 0x9f || 0xd800 <= r && r <= 0xf8ff || 0xfff0 <= r {
			return bad(fmt.Sprintf("invalid character %U", r))
		}
	}
	return nil
}

func newGUID() string {
	var b [guidLen / 2]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b[:])
}

// verb names an acquisition in errors: "lock", "rlock", "trylock", "tryrlock".
func verb(mode Mode, block bool) string {
	v := "lock"
	if mode == Read {
		v = "rlock"
	}
	if !block {
		v = "try" + v
	}
	return v
}

// acquisition is one Lock, RLock, TryLock or TryRLock call in progress.
type acquisition struct {
	l       *RWLock
	mode    Mode
	block   bool // false for TryLock and TryRLock
	trip    bool // leave a child watch for the grant's monitor (see Grant.monitor)
	guid    string
	node    string // our node, relative to the lock directory; "" until known
	path    string // its full path
	session int64  // the session that created node
	unsure  bool   // a create's outcome was lost: a node with guid may exist
	snap    snapshot
	waited  bool            // we watched a node before being granted
	writers bool            // a listing showed a writer before ours
	shared  map[string]bool // writers seen downgraded (readers only)
	tripCh  <-chan zk.Event
}

// acquire runs the protocol: create our node, list the directory, and wait
// for the one node in our way to go until nothing is, recovering from
// connection loss and session expiry as it goes. Every failure after our
// node may exist deletes it before returning.
func (l *RWLock) acquire(ctx context.Context, mode Mode, block, trip bool) (*Grant, error) {
	if g, err, ok := l.nested(ctx, mode, block); ok {
		return g, err
	}
	a := &acquisition{l: l, mode: mode, block: block, trip: trip, guid: newGUID()}
	g, err := a.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("rwlock: %s %s: %w", verb(mode, block), l.path, err)
	}
	return g, nil
}

func (a *acquisition) run(ctx context.Context) (*Grant, error) {
	var retry backoff
	for {
		if err := ctx.Err(); err != nil {
			return nil, a.abort(ctx, err)
		}
		if a.node == "" && !a.unsure {
			err := a.create(ctx)
			switch {
			case err == nil:
			case connectionLoss(err):
				a.unsure = true // look for it by guid once we can list again
			case errors.Is(err, zk.ErrSessionExpired):
				// Nothing of ours survived; the client makes a new session.
			default:
				return nil, a.abort(ctx, err)
			}
			if err != nil {
				if err := retry.wait(ctx, a.l.conn); err != nil {
					return nil, a.abort(ctx, err)
				}
				continue
			}
		}
		children, err := a.list(ctx)
		if err == nil {
			err = a.locate(children)
		}
		if err == nil {
			var relist bool
			relist, err = a.await(ctx)
			if err == nil && !relist {
				return a.granted(ctx)
			}
		}
		switch {
		case err == nil, errors.Is(err, errCreateAgain): // list, or create, again
		case errors.Is(err, errRestart) || errors.Is(err, zk.ErrSessionExpired):
			a.restart()
		case connectionLoss(err):
			if err := retry.wait(ctx, a.l.conn); err != nil {
				return nil, a.abort(ctx, err)
			}
		default:
			return nil, a.abort(ctx, err)
		}
	}
}

// errRestart means our session, and with it our node and our place in the
// queue, is gone while we waited: queue again with a new node.
var errRestart = errors.New("session replaced while waiting")

func (a *acquisition) restart() {
	a.l.debug("session replaced while waiting; queueing again", a.node)
	a.node, a.path, a.unsure, a.tripCh = "", "", false, nil
	a.guid = newGUID()
}

// create makes our node, and the lock directory when it is missing.
func (a *acquisition) create(ctx context.Context) error {
	l := a.l
	prefix := nodePrefix(l.path, a.guid, a.mode)
	for tries := 0; ; tries++ {
		path, err := call(ctx, func() (string, error) {
			return l.conn.Create(prefix, l.data, zk.FlagEphemeral|zk.FlagSequence, l.acl)
		}, func(path string, err error) { l.finishCreate(path, err, a.guid) })
		if errors.Is(err, zk.ErrNoNode) && tries < 5 {
			// The directory is missing, or the server reaped it (an empty
			// container) between our mkdir and our create.
			if err := l.mkdirs(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		// The node belongs to the session whose connection answered: a
		// request queued across an expiry is sent in the new session.
		a.path, a.node, a.session = path, path[len(l.path)+1:], l.conn.SessionID()
		l.debug("created", path)
		return nil
	}
}

// mkdirs creates the lock directory and its missing parents as containers,
// which the server deletes once they are empty again, or as persistent
// nodes on a server that has no containers (before 3.5.3).
func (l *RWLock) mkdirs(ctx context.Context) error {
	for i := 1; i <= len(l.path); i++ {
		if i < len(l.path) && l.path[i] != '/' {
			continue
		}
		dir := l.path[:i]
		_, err := call(ctx, func() (string, error) {
			if l.noContainers.Load() {
				return l.conn.Create(dir, nil, zk.FlagPersistent, l.acl)
			}
			return l.conn.CreateContainer(dir, nil, zk.FlagContainer, l.acl)
		}, nil)
		if unimplemented(err) && !l.noContainers.Swap(true) {
			i-- // again, as a persistent node
			continue
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	return nil
}

// unimplemented reports the server's UNIMPLEMENTED (-6) error, which
// go-zookeeper has no sentinel for.
func unimplemented(err error) bool {
	return err != nil && err.Error() == "unknown error: -6"
}

type listing struct {
	children []string
	watch    <-chan zk.Event
}

// list reads the directory. The first listing of an acquisition that will
// need a lost-grant watch sets a child watch: if we are granted at once,
// that watch costs no extra request (see Grant.monitor).
func (a *acquisition) list(ctx context.Context) ([]string, error) {
	c, dir := a.l.conn, a.l.path
	watch := a.trip && a.tripCh == nil
	r, err := call(ctx, func() (listing, error) {
		if watch {
			children, _, ch, err := c.ChildrenW(dir)
			return listing{children, ch}, err
		}
		children, _, err := c.Children(dir)
		return listing{children: children}, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil // no directory, so no node of ours in it
	}
	if err != nil {
		return nil, err
	}
	if watch {
		a.tripCh = r.watch
	}
	return r.children, nil
}

// locate finds our node among children and takes the snapshot of the nodes
// before it. After a create whose outcome was lost it adopts the node that
// carries our guid, or creates again when there is none.
func (a *acquisition) locate(children []string) error {
	if a.unsure {
		a.unsure = false
		if a.node = a.adopt(children); a.node == "" {
			return errCreateAgain
		}
		a.path = a.l.path + "/" + a.node
	}
	snap, ok := takeSnapshot(children, a.node, a.snap.before)
	if !ok {
		if a.l.conn.SessionID() != a.session {
			return errRestart
		}
		// Never "we are first": someone deleted our node while we waited.
		a.node = ""
		return lostErr(a.path, errNodeDeleted)
	}
	a.snap = snap
	a.writers = a.writers || slices.ContainsFunc(snap.before, func(n lockNode) bool { return n.mode == Write })
	return nil
}

// errCreateAgain means a create whose response was lost did not happen.
var errCreateAgain = errors.New("lost create did not happen")

// adopt returns the node that carries our guid, the first one if a lost
// create was retried and both happened; the others are deleted.
func (a *acquisition) adopt(children []string) string {
	var mine lockNode
	for _, name := range children {
		n, ok := parseNode(name)
		if g, _ := guidOf(name); !ok || g != a.guid {
			continue
		}
		if mine.name == "" || precedes(n.seq, mine.seq) {
			if mine.name != "" {
				a.l.finish(a.l.path+"/"+mine.name, "", a.l.conn.SessionID())
			}
			mine = n
		} else {
			a.l.finish(a.l.path+"/"+name, "", a.l.conn.SessionID())
		}
	}
	if mine.name != "" {
		a.session = a.l.conn.SessionID()
		a.l.debug("found the node of a create whose response was lost", mine.name)
	}
	return mine.name
}

// granted turns the acquisition into a Grant, unless ctx ended meanwhile:
// then, as a cancelled call promises, the node goes and ctx's error returns.
func (a *acquisition) granted(ctx context.Context) (*Grant, error) {
	if err := ctx.Err(); err != nil {
		return nil, a.abort(ctx, err)
	}
	a.l.debug("granted", a.path)
	g := newGrant(a.l, a.mode, a.path, a.session, a.tripCh)
	// A writer that waited behind writers may be followed by a waiter whose
	// listing still shows them: its release mark spares that waiter a
	// listing (see deleteNode). Behind readers only, it would spare no
	// reader anything, and cost a reader waiting on us a request.
	g.markRelease = a.mode == Write && a.waited && a.writers
	return g, nil
}

// abort deletes whatever node the acquisition made, with a fresh bounded
// context since ctx may be the reason we stop, and returns cause joined with
// a failed deletion's error.
func (a *acquisition) abort(ctx context.Context, cause error) error {
	l := a.l
	switch {
	case sessionGone(cause):
		// Expired or closed: the node went with the session.
	case a.node != "":
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanup)
		defer cancel()
		if err := l.deleteNode(ctx, a.path, a.session, false); err != nil {
			return errors.Join(cause, err)
		}
	case a.unsure:
		l.finish("", a.guid, l.conn.SessionID())
	}
	return cause
}

// deleteNode deletes one of our nodes. When ctx ends or the connection
// fails first, a background goroutine finishes the job (see finish).
//
// With markHeld, the node's data is marked held in the same transaction
// (see nodedata.go): the waiter behind it, whose data watch fires on the
// mark, learns that every node before it is gone, and need not list the
// whole queue to find out. A queue of writers then drains in constant time
// per handoff instead of time proportional to its length.
func (l *RWLock) deleteNode(ctx context.Context, path string, session int64, markHeld bool) error {
	err := call0(ctx, func() error {
		if markHeld {
			return l.markAndDelete(path)
		}
		return l.conn.Delete(path, -1)
	}, func(err error) {
		if connectionLoss(err) {
			l.finish(path, "", session)
		}
	})
	switch {
	case err == nil:
		l.debug("deleted", path)
		return nil
	case errors.Is(err, zk.ErrNoNode), sessionGone(err):
		return nil // gone already
	case connectionLoss(err):
		l.finish(path, "", session)
	}
	return fmt.Errorf("delete %s: %w", path, err)
}

// markAndDelete sets the held mark and deletes path in one transaction, or,
// where an ACL forbids writing data, just deletes it.
func (l *RWLock) markAndDelete(path string) error {
	_, err := l.conn.Multi(
		&zk.SetDataRequest{Path: path, Data: encodeNodeData(l.owner, true, false), Version: -1},
		&zk.DeleteRequest{Path: path, Version: -1},
	)
	// A failed transaction reports the error of the operation that failed.
	if err == nil || errors.Is(err, zk.ErrNoNode) || connectionLoss(err) || sessionGone(err) {
		return err
	}
	return l.conn.Delete(path, -1)
}

// debug logs one protocol step. It takes plain strings, not ...any, so
// that the hot path allocates nothing while debug logging is off.
func (l *RWLock) debug(msg, node string) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(msg, "lock", l.path, "node", node)
	}
}
