package rwlock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// An Option configures an RWLock.
type Option func(*options)

type options struct {
	acl            []zk.ACL
	owner          string
	log            *slog.Logger
	sessionTimeout time.Duration
	cleanupTimeout time.Duration
	maxHold        time.Duration
	lockDelay      time.Duration // WithLockDelay
	observers      []Observer
	starters       []StartObserver // the observers that are StartObservers too
	dialect        Dialect
	coalesce       bool  // WithReadCoalescing
	capacity       int64 // WithCapacity; 0 for none
	cache          bool  // WithCaching
	err            error
}

// maxOwner bounds the text WithOwner stores in every node. A node's data
// travels in requests, which ZooKeeper caps at jute.maxbuffer, 1 MiB by
// default.
const maxOwner = 64 << 10

func makeOptions(opts []Option) (options, error) {
	o := options{
		acl:            zk.WorldACL(zk.PermAll),
		owner:          defaultOwner(),
		log:            slog.New(slog.DiscardHandler),
		cleanupTimeout: 5 * time.Second,
	}
	for i, opt := range opts {
		if opt == nil {
			return options{}, fmt.Errorf("%w: option %d is nil", ErrInvalidArgument, i)
		}
		opt(&o)
		if o.err != nil {
			return options{}, o.err
		}
	}
	if err := o.checkCapacity(); err != nil {
		return options{}, err
	}
	if err := o.checkCaching(); err != nil {
		return options{}, err
	}
	return o, nil
}

// WithACL sets the ACL of the lock directory, of any parent the lock
// creates, and of every lock node. The default is world:anyone with all
// permissions, [zk.WorldACL]([zk.PermAll]). The client must be able to
// create and delete nodes under it. An acquisition checks the DELETE
// permission before it queues, and fails without it with an error wrapping
// [zk.ErrNoAuth].
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
// default is "host:pid". Line breaks become spaces, and the text may be at
// most 64 KiB.
func WithOwner(owner string) Option {
	return func(o *options) {
		if len(owner) > maxOwner {
			o.err = fmt.Errorf("%w: owner of %d bytes (at most %d)", ErrInvalidArgument, len(owner), maxOwner)
		}
		o.owner = strings.NewReplacer("\n", " ", "\r", " ").Replace(owner)
	}
}

// WithDialect sets the names this lock gives its nodes, so that the peer
// library it shares its path with counts them in its queue. The default is
// DialectNative, and [Dialect] says which to choose. In a kazoo dialect the
// lock directory is created persistent, not as a container, because kazoo
// fails once its directory is reaped. An unknown dialect makes New fail
// with ErrInvalidArgument.
func WithDialect(d Dialect) Option {
	return func(o *options) {
		if !d.valid() {
			o.err = fmt.Errorf("%w: dialect %v", ErrInvalidArgument, d)
		}
		o.dialect = d
	}
}

// WithLogger sets the logger for debug lines about each protocol step, and
// for warnings. It warns once per lock of peers on the path that do not see
// this lock's nodes, and of a node that cannot be deleted or watched. The
// default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithSessionTimeout caps the session timeout the lock's lease clock
// believes. On a connection made by [Dial], the lock uses the smaller of d
// and what the server granted at every reconnection. Pass at most the
// smallest maxSessionTimeout of the members where they differ, or where a
// member may be restarted with a lower one. A handshake whose answer is
// lost changes the timeout without the lock hearing of it.
//
// On any other connection the lock cannot check what the server granted,
// which may have clamped the timeout asked for. There d only ends grants,
// and never keeps one. The lease clock runs by d as by a granted timeout,
// with its keepalives, and ends a grant once the lease by d runs low. Any
// disconnection of a holder is still a loss, [Grant.Deadline] takes no time
// from d, and a grant lost by d must stop at once. A paused or silently
// cut-off holder is told before the server can expire its session, if the
// server granted at least d at every handshake. The file docs/guarantees.md
// says what an ensemble needs. Without this option there, only
// go-zookeeper's connection state judges a grant.
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
