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

// RWLock is a distributed read/write lock. The children of its ZooKeeper
// directory are the queue of grants and waiters, in the order of their
// sequence numbers. So the lock is FIFO. A waiting writer blocks every
// reader that queues after it, and no one can overtake a waiter. A grant
// lasts until it is released or lost, and [Grant.Done] tells which. An
// RWLock is safe for concurrent use, and may hold any number of grants at
// once. Make it with New; the zero value's methods return an error wrapping
// ErrInvalidArgument.
type RWLock struct {
	conn           zkclient.Conn
	path           string
	acl            []zk.ACL
	data           []byte // the node data, which says who holds or waits
	keptData       []byte // the data of a node WithCaching may keep; nil without it
	owner          string
	log            *slog.Logger
	sessionTimeout time.Duration // from WithSessionTimeout; 0 when not given
	cleanupTimeout time.Duration
	maxHold        time.Duration // from WithMaxHold; 0 for none
	lockDelay      time.Duration // from WithLockDelay; 0 for none
	heardLoss      heardLoss     // the latest grant any acquisition owes a lock-delay (see lockdelay.go)
	dialect        Dialect
	capacity       int64 // WithCapacity's permits; 0 for a read/write lock (see capacity.go)

	observers []Observer      // from WithObserver
	starters  []StartObserver // those of observers that hear of starts too
	caps      []capability    // what follows every hold, as hold.go says
	coalesce  *coalescer      // the shared read node; nil without WithReadCoalescing
	cache     *cache          // the kept node; nil without WithCaching

	peersWarned  atomic.Bool    // notePeers warned of peers that do not see our nodes
	noContainers atomic.Bool    // the server refused container nodes
	deletable    atomic.Bool    // checkDeletable found that this client may delete nodes in the directory
	background   sync.WaitGroup // deletions that outlived the call that needed them
}

// New returns the lock whose directory is path, on conn, which it never
// closes or replaces. New makes no request. The first acquisition creates
// the directory and its parents, as container nodes except as [WithDialect]
// says.
//
// New returns an error wrapping ErrInvalidPath for a path that is not
// absolute, or that has a trailing slash, an empty or relative segment, or
// a control character. The root, anything under /zookeeper and a path over
// 64 KiB get that error too. A nil conn or option, or an invalid option,
// gets an error wrapping ErrInvalidArgument.
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
		data:           lockname.Data(o.owner, o.maxHold, lockname.Unmarked),
		keptData:       keptData(o),
		owner:          o.owner,
		log:            o.log,
		sessionTimeout: o.sessionTimeout,
		cleanupTimeout: o.cleanupTimeout,
		maxHold:        o.maxHold,
		lockDelay:      o.lockDelay,
		observers:      o.observers,
		starters:       o.starters,
		dialect:        o.dialect,
		capacity:       o.capacity,
	}
	if o.coalesce {
		l.coalesce = &coalescer{live: map[string]*sharedRead{}}
	}
	if o.cache {
		l.cache = &cache{}
	}
	l.caps = l.capabilities()
	return l, nil
}

// capabilities returns what follows every hold of l, as its options ask.
// The observers come first, so that a grant's start is told before anything
// else can end it.
func (l *RWLock) capabilities() []capability {
	var caps []capability
	if len(l.observers) > 0 {
		caps = append(caps, observing{})
	}
	if l.maxHold > 0 {
		caps = append(caps, holdLimit{})
	}
	caps = append(caps, revocation{}, &fleetWatch{}, contentionCap{})
	if l.cache != nil {
		caps = append(caps, l.cache)
	}
	return caps
}

// acquire runs one acquisition of this lock for w. It returns a nested
// grant when ctx carries one of the lock's, and a coalesced read when the
// lock coalesces them. Otherwise it makes a node of its own.
func (l *RWLock) acquire(ctx context.Context, w want) (*Grant, error) {
	if l.conn == nil {
		return nil, &opError{verb(w), l.path, fmt.Errorf("%w: the RWLock was not made by New", ErrInvalidArgument)}
	}
	if w.weight = l.weigh(w.mode, w.weight); w.weight > 0 {
		w.mode = l.permitMode(w.weight) // RLock of a lock of one permit takes them all
	}
	if g, err := l.nested(ctx, w); g != nil || err != nil {
		return g, err
	}
	if l.cache != nil {
		if g, err := l.cache.regrant(ctx, l, w); g != nil || err != nil {
			return g, err
		}
	}
	if l.coalesce != nil && w.mode == Read && w.block {
		return l.readShared(ctx)
	}
	a := newAcquisition(Request{Lock: l, Mode: w.mode, Weight: w.weight})
	a.members[0].block = w.block
	a.members[0].keepable = l.cache != nil
	connects, _ := a.c.ConnectCount() // before its listings, for a kept node's tail
	start := time.Now()
	l.starting(ctx, w, start)
	holds, err := a.run(ctx)
	l.acquired(ctx, a.members[0], start, err)
	if err != nil {
		a.release()
		return nil, &opError{verb(w), l.path, err}
	}
	if l.cache != nil {
		l.cache.adopt(holds[0], a.members[0], connects)
	}
	return holds[0].grant(w.mode), nil
}

// Path returns the lock directory.
func (l *RWLock) Path() string { return l.path }

// Lock blocks until it holds the lock exclusively, or ctx ends. It queues
// behind every grant and waiter already there. On failure, a cancelled ctx
// included, it returns an error and leaves no node behind. The error wraps
// ctx's error when ctx ended. While it waits, Lock rides out connection
// loss and server restarts, and queues again if the session expires. If its
// node is deleted while it waits, Lock fails with an error wrapping
// ErrLost. Someone else may have deleted the node. Or the server did, as it
// expired the session of a process paused past it, which learns of the
// deletion before the expiry.
//
// With a context that carries a write grant of this lock, Lock returns a
// nested grant at once; see [ContextWithGrant]. Inside a read grant it
// fails with ErrUpgrade, and inside a grant the lease clock has given up,
// with ErrLost.
func (l *RWLock) Lock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Write, block: true})
}

// RLock blocks until it holds the lock shared, or ctx ends. It queues
// behind every grant and waiter already there, so a waiting writer blocks
// it. On failure it behaves as Lock does. If ctx carries a grant of this
// lock, RLock returns a nested grant of it at once.
func (l *RWLock) RLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Read, block: true})
}

// TryLock returns an exclusive grant if it can have one without waiting.
// Otherwise it returns an error wrapping ErrWouldBlock, and leaves no node
// behind. Use it sparingly. A caller that retries TryLock in a loop loses
// its place in the queue each time; Lock with a deadline is nearly always
// better.
func (l *RWLock) TryLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Write})
}

// TryRLock returns a shared grant if it can have one without waiting, and
// otherwise fails as TryLock does. It still makes its requests, a create, a
// list and a delete, so ctx bounds them.
func (l *RWLock) TryRLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, want{mode: Read})
}

// WithWrite runs fn while holding the lock exclusively, and releases it
// when fn returns. Errors acquiring the lock are returned as from Lock, and
// fn does not run. The context fn gets carries the grant, which
// [GrantFromContext] returns, for its Token and Multi. It is cancelled
// with a cause wrapping ErrLost when the grant is lost, and a migration
// must stop writing then. Its Err and Done consult the lease clock as
// [Grant.Err] does. Contexts derived from it see a loss at the clock's next
// look, which docs/guarantees.md bounds. WithWrite then returns an error
// wrapping ErrLost, joined with fn's error.
//
// If fn succeeded under a grant never lost, WithWrite returns nil, even if
// a failover cut the release's deletion short. The deletion then goes on in
// the background, as [Grant.Release] says.
func (l *RWLock) WithWrite(ctx context.Context, fn func(context.Context) error) error {
	return l.with(ctx, Write, fn)
}

// WithRead runs fn while holding the lock shared, and releases it when fn
// returns. Otherwise it behaves as WithWrite does.
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
