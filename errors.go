package rwlock

import "errors"

// Errors returned by the lock. Match them with [errors.Is]. Each is wrapped
// with the context of the failure: the operation, the path, and the
// ZooKeeper error that caused it.
var (
	// ErrWouldBlock is returned by TryLock and TryRLock when another grant
	// is in the way. They leave no node behind.
	ErrWouldBlock = errors.New("would block")
	// ErrLost means a grant ended without Release. Its node was deleted,
	// its session expired, or the lock could no longer show the session
	// alive for long enough, as Grant.Done says. Lock and RLock return it
	// when their node was deleted while they waited: by someone else, or
	// by the server as it expired the session of a paused process.
	ErrLost = errors.New("grant lost")
	// ErrReleased is what Err returns after Release or Downgrade.
	ErrReleased = errors.New("grant released")
	// ErrInvalidPath is returned by New for a path ZooKeeper would reject
	// or that cannot hold a lock.
	ErrInvalidPath = errors.New("invalid path")
	// ErrUpgrade is returned by Lock when the context carries a read grant
	// of the same lock. Two readers upgrading in place at once would wait
	// for each other forever.
	ErrUpgrade = errors.New("cannot upgrade a read grant to a write grant")
	// ErrInvalidArgument is returned for a nil connection, an invalid
	// option, or an RWLock not made by New.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrSequenceExhausted is returned by an acquisition that finds the
	// lock directory's sequence counter at its end, so that the queue
	// cannot be ordered. The acquisition leaves no node behind. The remedy
	// is a fresh lock directory, at a new path or at this one deleted and
	// created again while nobody uses it.
	ErrSequenceExhausted = errors.New("the lock directory's sequence numbers are exhausted")
	// ErrHoldLimit is the cause, with ErrLost, of a grant that reached the
	// lock's hold limit. See WithMaxHold.
	ErrHoldLimit = errors.New("hold limit reached")
	// ErrRevoked is the cause with which WithRead and WithWrite cancel
	// their function's context when the grant is revoked. See
	// RWLock.Revoke. The cause wraps it, and its text says who asked,
	// when and why (see Grant.Revocation).
	ErrRevoked = errors.New("grant revoked")
	// ErrMixedFleet is wrapped, with ErrInvalidArgument, by the error of an
	// acquisition refused because peers on the path do not count this
	// lock's nodes, and by the cause of a grant lost for that. The fleet
	// on the path needs one dialect: see WithDialect. A loss for it is
	// GrantEvent.Loss "mixed_fleet", so that it can be alerted on.
	ErrMixedFleet = errors.New("a mixed fleet")
)

// An opError is the failure of one operation of the lock on one path. It
// says "rwlock: " once, as fs.PathError names its operation and path.
type opError struct {
	op   string // lock, rlock, trylock, tryrlock, lockall, release, ...
	path string // the lock directory, or a node
	err  error
}

func (e *opError) Error() string { return "rwlock: " + e.op + " " + e.path + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }
