package rwlock

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
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

// RWLock is a distributed read/write lock: a ZooKeeper directory whose
// children are the queue of grants and waiters, in the order of their
// sequence numbers. It is safe for concurrent use, and one RWLock may hold
// any number of grants at once. Make it with New: the zero value is not
// usable (its methods return an error wrapping ErrInvalidArgument).
//
// Fairness is that order, so FIFO: a waiting writer blocks every reader that
// queues after it, and no one can overtake a waiter. A grant lasts until it
// is released or lost; [Grant.Done] tells which.
type RWLock struct {
	conn           zkclient.Conn
	path           string
	acl            []zk.ACL
	data           []byte // node data: who holds or waits
	owner          string
	log            *slog.Logger
	sessionTimeout time.Duration // from WithSessionTimeout; 0 when not given
	cleanupTimeout time.Duration
	maxHold        time.Duration // from WithMaxHold; 0 for none
	dialect        Dialect

	observers []Observer      // from WithObserver
	starters  []StartObserver // those of observers that hear of starts too
	caps      []capability    // what follows every hold (see hold.go)
	coalesce  *coalescer      // the shared read node; nil without WithReadCoalescing

	peersWarned  atomic.Bool    // warned of peers that do not see our nodes (see notePeers)
	noContainers atomic.Bool    // the server refused container nodes
	deletable    atomic.Bool    // this client may delete nodes in the directory (see checkDeletable)
	background   sync.WaitGroup // deletions that outlived the call that needed them
}

// New returns the lock whose directory is path, using conn, which it never
// closes or replaces. It makes no request: the directory and its parents
// are created, as container nodes (the directory itself persistent in a
// kazoo dialect), by the first acquisition. New returns an error wrapping
// ErrInvalidPath for a path that cannot be a lock directory (not absolute,
// a trailing slash, an empty or relative segment, a control character, the
// root, anything under /zookeeper, more than 64 KiB), and one wrapping
// ErrInvalidArgument for a nil conn or option, or an invalid option.
func New(conn *zk.Conn, path string, opts ...Option) (*RWLock, error) {
	if conn == nil {
		return nil, &opError{"new", path, fmt.Errorf("%w: nil *zk.Conn", ErrInvalidArgument)}
	}
	return newRWLock(conn, path, opts...)
}

func newRWLock(conn zkclient.Conn, path string, opts ...Option) (*RWLock, error) {
	if err := lockname.CheckPath(path); err != nil {
		return nil, &opError{"new", path, fmt.Errorf("%w: %w", ErrInvalidPath, err)}
	}
	o, err := makeOptions(opts)
	if err != nil {
		return nil, &opError{"new", path, err}
	}
	l := &RWLock{
		conn:           conn,
		path:           path,
		acl:            o.acl,
		data:           lockname.Data(o.owner, o.maxHold, 0),
		owner:          o.owner,
		log:            o.log,
		sessionTimeout: o.sessionTimeout,
		cleanupTimeout: o.cleanupTimeout,
		maxHold:        o.maxHold,
		observers:      o.observers,
		starters:       o.starters,
		dialect:        o.dialect,
	}
	if o.coalesce {
		l.coalesce = &coalescer{live: map[string]*sharedRead{}}
	}
	l.caps = l.capabilities()
	return l, nil
}

// capabilities returns what follows every hold of l, as its options ask:
// the observers first, so that a grant's start is told before anything
// else can end it.
func (l *RWLock) capabilities() []capability {
	var caps []capability
	if len(l.observers) > 0 {
		caps = append(caps, observing{})
	}
	if l.maxHold > 0 {
		caps = append(caps, holdLimit{})
	}
	return append(caps, revocation{}, &fleetWatch{})
}

// acquire runs one acquisition of this lock for w: a nested grant when ctx
// carries one of the lock's, a coalesced read when the lock coalesces
// them, and otherwise a node of its own.
func (l *RWLock) acquire(ctx context.Context, w want) (*Grant, error) {
	if l.conn == nil {
		return nil, &opError{verb(w), l.path, fmt.Errorf("%w: the RWLock was not made by New", ErrInvalidArgument)}
	}
	if g, err := l.nested(ctx, w); g != nil || err != nil {
		return g, err
	}
	if l.coalesce != nil && w.mode == Read && w.block {
		return l.readShared(ctx)
	}
	a := newAcquisition(Request{l, w.mode})
	a.members[0].block = w.block
	start := time.Now()
	l.starting(ctx, w, start)
	holds, err := a.run(ctx)
	l.acquired(ctx, a.members[0], start, err)
	if err != nil {
		a.release()
		return nil, &opError{verb(w), l.path, err}
	}
	return holds[0].grant(w.mode), nil
}

// Path returns the lock directory.
func (l *RWLock) Path() string { return l.path }

// Lock blocks until it holds the lock exclusively, or ctx ends. It queues
// behind every grant and waiter already there. On failure, including a
// cancelled ctx, it returns an error (wrapping ctx's error when ctx ended)
// and leaves no node behind. It rides out connection loss and server
// restarts while it waits, and queues again if the session expires. If its
// node is deleted while it waits, it fails with an error wrapping ErrLost:
// deleted by someone else, or by the server as it expired the session of
// a process paused past it, which learns of the deletion before it learns
// of the expiry.
//
// If ctx carries a grant of this lock (see [ContextWithGrant]), Lock returns
// a nested grant of a write grant at once, and fails with ErrUpgrade inside
// a read grant; a grant the lease clock has given up fails with ErrLost.
func (l *RWLock) Lock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Write, block: true})
}

// RLock blocks until it holds the lock shared, or ctx ends. It queues behind
// every grant and waiter already there: a waiting writer blocks it. On
// failure it behaves as Lock does.
//
// If ctx carries a grant of this lock (see [ContextWithGrant]), RLock
// returns a nested grant of it at once.
func (l *RWLock) RLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Read, block: true})
}

// TryLock returns an exclusive grant if it can have one without waiting,
// and otherwise an error wrapping ErrWouldBlock, leaving no node behind.
// Use it sparingly: a caller that retries TryLock in a loop loses its place
// in the queue every time, and Lock with a deadline is nearly always better.
func (l *RWLock) TryLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Write})
}

// TryRLock returns a shared grant if it can have one without waiting, and
// otherwise an error wrapping ErrWouldBlock, leaving no node behind. It
// still makes its requests (create, list, delete), so ctx bounds them.
func (l *RWLock) TryRLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Read})
}

// WithWrite runs fn while holding the lock exclusively, and releases it when
// fn returns. fn's context carries the grant, and is cancelled, with a cause
// wrapping ErrLost, when the grant is lost: a migration must stop writing
// then. Its Err and Done consult the lease clock as [Grant.Err] does, so a
// check right after a pause sees the loss; contexts derived from it see it
// at the clock's next look, within a sixteenth of the session timeout.
// WithWrite then returns an error wrapping ErrLost (joined with fn's
// error). Errors acquiring the lock are returned as from Lock, without
// running fn. When fn succeeded under a grant that was never lost, it
// returns nil even if the release's deletion was cut short by the
// connection (a failover): the deletion then goes on in the background
// until the node is gone or its session ends, as [Grant.Release] describes.
func (l *RWLock) WithWrite(ctx context.Context, fn func(context.Context) error) error {
	return l.with(ctx, Write, fn)
}

// WithRead runs fn while holding the lock shared, and releases it when fn
// returns; otherwise as WithWrite.
func (l *RWLock) WithRead(ctx context.Context, fn func(context.Context) error) error {
	return l.with(ctx, Read, fn)
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// debug logs one protocol step. It takes plain strings, not ...any, so
// that the hot path allocates nothing while debug logging is off.
func (l *RWLock) debug(msg, node string) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(msg, "lock", l.path, "node", node)
	}
}

// verb names an acquisition in errors: "lock", "rlock", "trylock", "tryrlock".
func verb(w want) string {
	v := "lock"
	if w.mode == Read {
		v = "rlock"
	}
	if !w.block {
		v = "try" + v
	}
	return v
}
