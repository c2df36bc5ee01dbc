package rwlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// writeBlocker is the write predicate: a writer holds the lock when no node
// at all precedes it, and otherwise waits for its IMMEDIATE predecessor, so
// that each node is watched by at most one waiter (no herd effect).
func writeBlocker(before []lockNode) (lockNode, bool) {
	if len(before) == 0 {
		return lockNode{}, false
	}
	return before[len(before)-1], true
}

// Lock blocks until it holds the lock exclusively, or ctx ends. It queues
// behind every grant and waiter already there. On failure, including a
// cancelled ctx, it returns an error (wrapping ctx's error when ctx ended)
// and leaves no node behind. It rides out connection loss and server
// restarts while it waits, and queues again if the session expires.
//
// If ctx carries a grant of this lock (see [ContextWithGrant]), Lock returns
// a nested grant of a write grant at once, and fails with ErrUpgrade inside
// a read grant.
func (l *RWLock) Lock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, Write, true, false)
}

// TryLock returns an exclusive grant if it can have one without waiting,
// and otherwise an error wrapping ErrWouldBlock, leaving no node behind.
// Use it sparingly: a caller that retries TryLock in a loop loses its place
// in the queue every time, and Lock with a deadline is nearly always better.
func (l *RWLock) TryLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, Write, false, false)
}

// WithWrite runs fn while holding the lock exclusively, and releases it when
// fn returns. fn's context carries the grant, and is cancelled, with a cause
// wrapping ErrLost, if the grant is lost: a migration must stop writing
// then. WithWrite then returns an error wrapping ErrLost (joined with fn's
// error). Errors acquiring the lock are returned as from Lock, without
// running fn.
func (l *RWLock) WithWrite(ctx context.Context, fn func(context.Context) error) error {
	return l.with(ctx, Write, fn)
}

// Downgrade turns a write grant into a read grant without releasing the
// lock for a moment. It keeps the same node, and so the same place in the
// queue and the same token, and marks the node shared in its data: readers
// queued behind it (before any other writer) join at once, while writers
// keep waiting for the node to go. (Deleting the node and queueing a new
// read node, as Curator 5.4 does, lets a writer that queued meanwhile in
// between: CURATOR-276.)
//
// On success the write grant ends (its Err returns ErrReleased, its Release
// does nothing) and the returned read grant owns the node. If ctx has ended
// when it is called, or the server refuses the change (an ACL), the write
// grant is unchanged. Once the request is sent it is waited for up to the
// cleanup timeout (see [WithCleanupTimeout]), whatever ctx does: if its
// outcome stays unknown, readers may have joined, so the write grant is lost
// and its node deleted. Downgrade of a read grant returns the grant itself.
func (g *Grant) Downgrade(ctx context.Context) (*Grant, error) {
	if g.mode == Read {
		return g, nil
	}
	g.ops.Lock()
	defer g.ops.Unlock()
	fail := func(err error) (*Grant, error) { return nil, fmt.Errorf("rwlock: downgrade %s: %w", g.node, err) }
	switch {
	case g.released || g.ctx.Err() != nil:
		return fail(g.ended())
	case ctx.Err() != nil:
		return fail(ctx.Err())
	case g.outer != nil:
		r, err, _ := g.l.nested(ContextWithGrant(ctx, g.outer), Read, true)
		if err != nil {
			return nil, err
		}
		g.released = true
		g.end(ErrReleased)
		return r, nil
	}

	l := g.l
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanup)
	defer cancel()
	_, err := call(sctx, func() (*zk.Stat, error) {
		return l.conn.Set(g.node, encodeNodeData(l.owner, false, true), -1)
	}, nil)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		g.lose(g.whyDeleted())
		return fail(g.ended())
	case sessionGone(err):
		g.lose(err)
		return fail(g.ended())
	case connectionLoss(err) || sctx.Err() != nil:
		g.loseAndDelete(fmt.Errorf("outcome of the downgrade unknown: %w", err))
		return fail(g.ended())
	case err != nil:
		return fail(err)
	case g.ctx.Err() != nil:
		return fail(g.ended()) // lost while we marked it
	}
	g.released = true
	r := newGrant(l, Read, g.node, g.session, nil)
	r.token.Store(g.token.Load())
	r.markRelease = g.markRelease
	g.end(ErrReleased)
	g.stopMonitor()
	l.debug("downgraded", g.node)
	return r, nil
}

// ended returns why a grant is no longer held.
func (g *Grant) ended() error {
	if g.ctx.Err() != nil {
		return context.Cause(g.ctx)
	}
	return ErrReleased
}
