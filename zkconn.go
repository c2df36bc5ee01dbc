package rwlock

import (
	"context"
	"errors"
	"net"

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
	State() zk.State
	SessionID() int64
}

var _ zkConn = (*zk.Conn)(nil)

// call runs op, a blocking call on the connection, and returns early with
// ctx's error when ctx ends first. go-zookeeper's calls take no context and
// can block for most of a session timeout when the network is partitioned.
// A call left behind finishes on its own goroutine once its response or the
// connection's failure arrives.
//
// late, if not nil, receives the outcome of a call the caller stopped
// waiting for, so that a node it created or failed to delete is not
// forgotten; such a call runs even when ctx has already ended. Without
// late, an ended ctx skips the call.
func call[T any](ctx context.Context, op func() (T, error), late func(T, error)) (T, error) {
	var zero T
	if ctx.Done() == nil {
		return op()
	}
	if err := ctx.Err(); err != nil && late == nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := op()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if late != nil {
			go func() {
				r := <-ch
				late(r.v, r.err)
			}()
		}
		return zero, ctx.Err()
	}
}

// call0 is call for operations that return only an error.
func call0(ctx context.Context, op func() error, late func(error)) error {
	var lateT func(struct{}, error)
	if late != nil {
		lateT = func(_ struct{}, err error) { late(err) }
	}
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, op() }, lateT)
	return err
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
