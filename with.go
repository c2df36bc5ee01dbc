package rwlock

import (
	"context"
	"errors"
)

// A grantContext is the context a function runs under while a grant is
// held, in WithRead, WithWrite and ReadGroup. It carries the grant. It is
// cancelled when the grant is lost, with the loss as its cause. Its Err and
// Done consult the lease clock first, as the grant's own do. So a function
// that checks its context right after its process was paused sees the loss,
// before the clock's timer has had a chance to fire.
type grantContext struct {
	context.Context
	g *Grant
}

func (c grantContext) Done() <-chan struct{} {
	c.g.h.judge()
	return c.Context.Done()
}

func (c grantContext) Err() error {
	c.g.h.judge()
	return c.Context.Err()
}

// grantCtx derives the context a function runs under while g is held. If
// onLoss is not nil, it hears of a loss before the context is cancelled.
// The loss cancels the context on the goroutine that ends g. Calling stop
// before releasing g keeps the release from cancelling it. Calling cancel
// ends it.
func grantCtx(ctx context.Context, g *Grant, onLoss func(error)) (_ context.Context, cancel context.CancelCauseFunc, stop func()) {
	ctx, cancel = context.WithCancelCause(ContextWithGrant(ctx, g))
	stop = g.whenEnded(func(cause error) {
		if onLoss != nil {
			onLoss(cause)
		}
		cancel(cause)
	})
	return grantContext{ctx, g}, cancel, stop
}

// lostCause returns the loss that ended g, or nil if g is held or was
// released.
func (g *Grant) lostCause() error {
	if g.ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(g.ctx); errors.Is(cause, ErrLost) {
		return cause
	}
	return nil
}

// with runs fn under a grant of mode, for WithRead and WithWrite.
func (l *RWLock) with(ctx context.Context, mode Mode, fn func(context.Context) error) (err error) {
	g, err := l.acquire(ctx, want{mode: mode, block: true})
	if err != nil {
		return err
	}
	fctx, cancel, stop := grantCtx(ctx, g, nil)
	revoked, unlisten := g.Revoked(), make(chan struct{})
	go func() {
		select {
		case <-revoked:
			cancel(g.revokedError())
		case <-unlisten:
		}
	}()
	defer func() { // also when fn panics, since the node must not outlive the call
		close(unlisten)
		if err != nil && isClosed(revoked) && !errors.Is(err, ErrRevoked) {
			err = errors.Join(g.revokedError(), err) // fn stopped because it was asked to
		}
		stop()
		g.h.judge()
		lost := g.lostCause()
		// Cancel before the release. A goroutine fn left running must see
		// its context end before the next holder can be granted.
		cancel(context.Canceled)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanupTimeout)
		defer rcancel()
		rerr := ignoreBackground(g.Release(rctx))
		if lost != nil {
			err = errors.Join(lost, err)
		} else {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx)
}

// ignoreBackground drops a release error that only says the deletion goes
// on in the background. The grant was held until the release was sent, so
// fn ran under the lock and its result stands. A failover under the
// release, which cuts the connection before its answer, is no failure of
// the caller's work. The node goes as soon as the client is back, or with
// its session.
func ignoreBackground(err error) error {
	if errors.Is(err, errFinishing) {
		return nil
	}
	return err
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
