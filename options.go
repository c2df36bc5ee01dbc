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
	observers      []Observer
	starters       []StartObserver // the observers that are StartObservers too
	dialect        Dialect
	coalesce       bool // WithReadCoalescing
	err            error
}

// maxOwner bounds the text WithOwner stores in every node: a node's data
// travels in requests that ZooKeeper caps at jute.maxbuffer (1 MiB by
// default).
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
	return o, nil
}

// WithACL sets the ACL of the lock directory, of any parent the lock
// creates, and of every lock node. The default is world:anyone with all
// permissions ([zk.WorldACL]([zk.PermAll])). The client must be able to
// create and delete nodes under it: an acquisition checks the DELETE
// permission before it queues, and fails with an error wrapping
// [zk.ErrNoAuth] if it is missing.
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
// default is "host:pid". Line breaks are replaced by spaces; at most 64 KiB.
func WithOwner(owner string) Option {
	return func(o *options) {
		if len(owner) > maxOwner {
			o.err = fmt.Errorf("%w: owner of %d bytes (at most %d)", ErrInvalidArgument, len(owner), maxOwner)
		}
		o.owner = strings.NewReplacer("\n", " ", "\r", " ").Replace(owner)
	}
}

// WithDialect sets the names this lock gives its nodes, so that the peer
// library it shares its path with counts them in its queue (see
// [Dialect]); the default is DialectNative. Every zkrwlock client of one
// path should use the same dialect, and the path must hold no names the
// peer does not know: go-zookeeper's zk.Lock fails on them, and Curator
// misorders them. In a kazoo dialect the lock directory is created
// persistent, not as a container (kazoo fails once its directory is
// reaped). An unknown dialect makes New fail with ErrInvalidArgument.
func WithDialect(d Dialect) Option {
	return func(o *options) {
		if !d.valid() {
			o.err = fmt.Errorf("%w: dialect %v", ErrInvalidArgument, d)
		}
		o.dialect = d
	}
}

// WithLogger sets the logger for debug lines about each protocol step,
// and for warnings: peers on the path that do not see this lock's nodes
// (once per lock; see [WithDialect]), a node that cannot be deleted or
// watched. The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithSessionTimeout caps the session timeout the lock's lease clock
// believes (see [Grant.Done]). On a connection made by [Dial] the lock
// already knows what the server granted, on every reconnection, and uses
// the smaller of the two. Where members' maxSessionTimeout differ, or a
// member may be restarted with a lower one, pass at most the smallest: a
// handshake whose answer is lost (the connection dies after the server
// took it) changes the timeout without the lock hearing of it.
//
// On any other connection the lock cannot check what the server granted
// (it may have clamped the timeout asked for), so d only ends grants,
// never keeps one. The lease clock runs by d as it would by a granted
// timeout: its keepalives, and a grant lost once the lease by d runs low.
// Any disconnection of a holder is still a loss, and [Grant.Deadline]
// takes no time from d: while a grant is held it reports only a hold
// limit's end ([WithMaxHold]), and a grant lost by d must stop at once. If
// the server granted at least d at every handshake of the session (a
// reconnection to a member with a lower maxSessionTimeout grants less), a
// paused holder, or one cut off without go-zookeeper noticing, is told
// before the server can expire its session; in an ensemble, only if d is
// at least eight ticks of the server, as on a connection made by Dial.
// Without this option there, only go-zookeeper's connection state judges
// a grant.
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
