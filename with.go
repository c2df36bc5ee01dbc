package rwlock

import (
	"context"
	"errors"
)

// guard derives the context a function runs under while g is held: it
// carries g, and is cancelled with g's loss as its cause when g is lost
// (onLoss, if not nil, hears of the loss first). Call stop before
// releasing g, and cancel after.
func guard(ctx context.Context, g *Grant, onLoss func(error)) (_ context.Context, cancel context.CancelCauseFunc, stop func() bool) {
	ctx, cancel = context.WithCancelCause(ContextWithGrant(ctx, g))
	stop = context.AfterFunc(g.ctx, func() {
		cause := context.Cause(g.ctx)
		if onLoss != nil {
			onLoss(cause)
		}
		cancel(cause)
	})
	g.root().startMonitor()
	return ctx, cancel, stop
}

// lossErr returns the loss that ended g, or nil if g is held or was
// released.
func (g *Grant) lossErr() error {
	if g.ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(g.ctx); errors.Is(cause, ErrLost) {
		return cause
	}
	return nil
}

// with runs fn under a grant of mode: WithRead and WithWrite.
func (l *RWLock) with(ctx context.Context, mode Mode, fn func(context.Context) error) (err error) {
	g, err := l.acquire(ctx, mode, true, true)
	if err != nil {
		return err
	}
	fctx, cancel, stop := guard(ctx, g, nil)
	defer func() { // also when fn panics: the node must not outlive the call
		stop()
		lost := g.lossErr()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanup)
		defer rcancel()
		rerr := g.Release(rctx)
		cancel(context.Canceled)
		if lost != nil {
			err = errors.Join(lost, err)
		} else {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx)
}
