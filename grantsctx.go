package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// GrantsContext returns a copy of ctx that is cancelled as soon as any of
// grants ends or is revoked, for work that must stop when its locks go:
// the grants of a LockAll, or of a Lock. Its cause (see [context.Cause])
// says why. A loss gives the grant's own cause, which wraps ErrLost. A
// Release or Downgrade gives an error wrapping ErrReleased, and a
// revocation (see [RWLock.Revoke]) one wrapping ErrRevoked. Either names
// the grant's node. Like the context WithWrite hands its function, its Done
// and Err consult the lease clock at every call, as [Grant.Err] does.
//
// The context does not carry the grants. A Lock inside it makes a node of
// its own, unless [ContextWithGrant] adds one grant to nest in.
//
// Call cancel once the work is done, as for [context.WithCancel]: it
// stops watching the grants and ends the context with context.Canceled.
// It releases no grant. A grant that has already ended, or is nil, ends
// the context at once; a nil one with an error wrapping ErrInvalidArgument.
// Watching a grant's revocation costs what [Grant.Revoked] does.
func GrantsContext(ctx context.Context, grants ...*Grant) (_ context.Context, cancel context.CancelFunc) {
	gctx, end := context.WithCancelCause(ctx)
	grants = slices.Clone(grants)
	unlisten := make(chan struct{})
	var stops []func()
	for i, g := range grants {
		if g == nil || g.h == nil {
			end(fmt.Errorf("rwlock: GrantsContext: %w: grant %d is nil or not made by the lock", ErrInvalidArgument, i))
			grants[i] = nil
			continue
		}
		// The hook runs on the goroutine that ends g, before that goroutine
		// goes on. So the context ends as soon as g's Done closes, as
		// WithWrite's does, not a scheduling delay later.
		stops = append(stops, g.whenEnded(func(cause error) {
			if errors.Is(cause, ErrReleased) {
				cause = &opError{"grant", g.Node(), cause}
			}
			end(cause)
		}))
		revoked := g.Revoked()
		go func() {
			select {
			case <-revoked:
				end(&opError{"grant", g.Node(), ErrRevoked})
			case <-unlisten:
			case <-gctx.Done():
			}
		}()
	}
	var once sync.Once
	cancel = func() {
		once.Do(func() {
			close(unlisten)
			for _, stop := range stops {
				stop()
			}
			end(context.Canceled)
		})
	}
	return grantsContext{gctx, slices.DeleteFunc(grants, func(g *Grant) bool { return g == nil })}, cancel
}

// A grantsContext judges its grants at every Done and Err, as a
// grantContext does its one. So work that checks its context right after
// its process was paused sees a loss before the clock's timer fires.
type grantsContext struct {
	context.Context
	grants []*Grant
}

func (c grantsContext) Done() <-chan struct{} {
	c.judge()
	return c.Context.Done()
}

func (c grantsContext) Err() error {
	c.judge()
	return c.Context.Err()
}

func (c grantsContext) judge() {
	for _, g := range c.grants {
		g.h.judge()
	}
}

// GrantFromContext returns the grant ctx carries: the one WithRead,
// WithWrite or ReadGroup hands its function in the context, or one
// [ContextWithGrant] added. The function reads its Token, or calls its
// Multi, through it. It must not Release it: WithRead and WithWrite do
// that when the function returns. A grant made by the lock of the function
// instead, with Lock inside it, is a nested grant of the same node and
// token, which the function must release.
func GrantFromContext(ctx context.Context) (*Grant, bool) {
	g := carried(ctx)
	return g, g != nil
}
