package rwlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Guarded writes close a gap that no head start can, for data kept in
// ZooKeeper itself. A holder paused past its lease may still believe it
// holds the lock when it writes. So may a holder whose node was deleted by
// hand. Multi puts a check that the grant's node exists in front of the
// caller's operations, in one transaction. The leader applies the
// transaction only if the node exists at that point in the ensemble's
// order. While the node exists, no conflicting grant can exist. A writer's
// successors wait for its deletion, and so do a reader's successors that
// are writers. A node exists only in its own session, so the check also
// proves the session alive. Check is the same transaction with nothing else
// in it. It is a write-path request, so it is ordered through the leader,
// as a read from a follower is not.

// Multi runs ops in one transaction that commits only while the grant's
// node exists: all of them commit, or none. Each op is a *zk.CreateRequest,
// *zk.SetDataRequest, *zk.DeleteRequest or *zk.CheckVersionRequest. Multi
// returns one response per op, as the Multi of *zk.Conn does.
//
// If the node is gone, nothing commits, the grant ends and the error wraps
// ErrLost. If the grant had already ended, Multi sends nothing and returns
// an error wrapping Err's. An op that fails on its own, such as on a
// version mismatch or a missing parent, fails the transaction. The error is
// then that op's, as go-zookeeper reports it, and the grant is unchanged.
// Ops on the lock's own nodes, and ops of other types, are refused with an
// error wrapping ErrInvalidArgument.
//
// Whether a failed Multi committed, by its error:
//   - Never sent, nothing committed, safe to retry: ErrInvalidArgument, an
//     ended grant's error, a ctx that had ended before the call, and
//     zk.ErrNoServer. go-zookeeper returns that for requests still queued
//     once it has tried every server, about a second into an outage.
//   - Answered, nothing committed: ErrLost, and an op's own error, such as
//     zk.ErrBadVersion, zk.ErrNodeExists or zk.ErrNoAuth.
//   - Outcome unknown: zk.ErrConnectionClosed, zk.ErrClosing,
//     zk.ErrSessionExpired, a network error, and ctx's error when ctx
//     ended during the call. The transaction may have committed. After
//     ctx's error it may even commit later, when go-zookeeper sends it on
//     a new connection, though only while the node exists. Read the data
//     back before a retry, or make the retry safe with a version in the
//     ops.
func (g *Grant) Multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	h := g.h
	fail := func(err error) error { return &opError{"multi", h.path, err} }
	for i, op := range ops {
		if err := h.guardable(op); err != nil {
			return nil, fail(fmt.Errorf("op %d: %w", i, err))
		}
	}
	if err := g.Err(); err != nil {
		return nil, fail(err)
	}
	all := make([]any, 0, 1+len(ops))
	all = append(all, &zk.CheckVersionRequest{Path: h.path, Version: -1}) // version -1 matches any, so this checks that it exists
	all = append(all, ops...)
	reply := h.c.Multi(zkclient.WithCounter(ctx, &h.requests), all, nil, nil)
	if len(reply.V) > 0 && errors.Is(reply.V[0].Error, zk.ErrNoNode) {
		h.deletedUnderGuard()
		return nil, fail(g.Err())
	}
	if reply.Err != nil {
		return reply.V[min(1, len(reply.V)):], fail(reply.Err)
	}
	return reply.V[1:], nil
}

// Check returns nil if the grant's node exists now, as the leader orders
// it, with a transaction that only checks the node. If the node is gone,
// the grant ends and the error wraps ErrLost. An ended grant's Check sends
// nothing and returns an error wrapping Err's.
func (g *Grant) Check(ctx context.Context) error {
	_, err := g.Multi(ctx)
	return err
}

// guardable says why op cannot run in a guarded transaction, if it cannot.
func (h *hold) guardable(op any) error {
	var path string
	switch op := op.(type) {
	case *zk.CreateRequest:
		if op != nil {
			path = op.Path
		}
	case *zk.SetDataRequest:
		if op != nil {
			path = op.Path
		}
	case *zk.DeleteRequest:
		if op != nil {
			path = op.Path
		}
	case *zk.CheckVersionRequest:
		if op != nil {
			path = op.Path
		}
	default:
		return fmt.Errorf("%w: %T is not a create, set, delete or check", ErrInvalidArgument, op)
	}
	if path == "" {
		return fmt.Errorf("%w: %T without a path", ErrInvalidArgument, op)
	}
	if path == h.l.path || strings.HasPrefix(path, h.l.path+"/") {
		return fmt.Errorf("%w: %s is the lock's own", ErrInvalidArgument, path)
	}
	return nil
}

// deletedUnderGuard ends the hold whose node a guarded transaction found
// gone, unless our own release deleted it.
func (h *hold) deletedUnderGuard() {
	if !h.isReleasing() {
		h.lost(h.whyDeleted())
	}
}
