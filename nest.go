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

// carried returns the grant ctx carries, if any.
func carried(ctx context.Context) *Grant {
	g, _ := ctx.Value(grantKey{}).(*Grant)
	return g
}

// nested returns a grant nested in the one ctx carries, when that is a
// grant of this lock (same path, same connection); nil, nil when it is not.
func (l *RWLock) nested(ctx context.Context, w want) (*Grant, error) {
	outer := carried(ctx)
	if outer == nil || outer.h.l.path != l.path || outer.h.l.conn != l.conn {
		return nil, nil
	}
	outer.h.judge() // as Err does: a holder back from a pause may have lost it
	var err error
	switch {
	case outer.ctx.Err() != nil:
		err = fmt.Errorf("the grant in the context has ended: %w", context.Cause(outer.ctx))
	case w.mode == Write && outer.mode == Read:
		err = fmt.Errorf("%w (%s)", ErrUpgrade, outer.h.path)
	}
	if err != nil {
		return nil, &opError{verb(w), l.path, err}
	}
	return nestIn(outer, w.mode), nil
}

// nestIn makes a grant of mode nested in outer: it holds outer's node, and
// ends when outer does (at once if outer has ended), on the goroutine that
// ends outer, so that its own hooks run in time too.
func nestIn(outer *Grant, mode Mode) *Grant {
	g := newHandle(outer.h, mode, outer)
	outer.whenEndedAs(g, g.end)
	return g
}
