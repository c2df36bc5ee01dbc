package rwlock

import (
	"context"
	"fmt"
)

type grantKey struct{}

// ContextWithGrant returns a copy of ctx that carries g. Lock and RLock on
// the same lock path and connection, called with such a context, return a
// nested grant of g at once, without a new node: a read grant inside a
// write or read grant, or a write grant inside a write grant. A write grant
// inside a read grant fails with ErrUpgrade, because two readers upgrading
// at once would wait for each other forever. Releasing a nested grant
// leaves g held; when g ends, so do the grants nested in it, and theirs.
//
// The contexts that WithRead, WithWrite and ReadGroup hand to their
// functions already carry their grant.
func ContextWithGrant(ctx context.Context, g *Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, g)
}

// nested returns a nested grant when ctx carries a grant of this lock (same
// path, same connection); ok is false when it does not.
func (l *RWLock) nested(ctx context.Context, w want) (g *Grant, err error, ok bool) {
	outer, _ := ctx.Value(grantKey{}).(*Grant)
	if outer == nil || outer.l.path != l.path || outer.l.conn != l.conn {
		return nil, nil, false
	}
	outer.judge() // as Err does: a holder back from a pause may have lost it
	switch {
	case outer.ctx.Err() != nil:
		err = fmt.Errorf("the grant in the context has ended: %w", context.Cause(outer.ctx))
	case w.mode == Write && outer.mode == Read:
		err = fmt.Errorf("%w (%s)", ErrUpgrade, outer.node)
	}
	if err != nil {
		return nil, errorf("rwlock: %s %s: %w", verb(w), l.path, err), true
	}
	return nestIn(outer, w.mode), nil, true
}

// nestIn makes a grant of mode nested in outer: it holds outer's node, and
// ends when outer does (at once if outer has ended).
func nestIn(outer *Grant, mode Mode) *Grant {
	r := outer.root()
	g := &Grant{l: r.l, c: r.c, mode: mode, node: r.node, session: r.session, outer: outer}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	// Ended by its outer grant on the goroutine that ends that one, so that
	// its own hooks (a WithRead's function context) run in time too.
	stop := outer.whenEnded(func(cause error) { g.end(cause) })
	g.mu.Lock()
	g.unnest = stop
	g.mu.Unlock()
	return g
}

// root returns the grant that owns the node.
func (g *Grant) root() *Grant {
	for g.outer != nil {
		g = g.outer
	}
	return g
}
