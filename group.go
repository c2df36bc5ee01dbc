package rwlock

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// A Group runs functions concurrently under ONE shared grant: one node, any
// number of goroutines. It has the semantics of [errgroup.Group]. The first
// error cancels the group's context, and is what Wait returns. A lost grant
// counts as an error wrapping ErrLost.
type Group struct {
	eg         *errgroup.Group
	grant      *Grant
	cancel     context.CancelCauseFunc
	stop       func()
	releaseCtx context.Context

	mu     sync.Mutex
	err    error // the first error
	waited bool  // Wait has run, so the grant is released
}

// ReadGroup acquires a shared grant, as RLock does, and returns a Group
// that runs functions under it, with the context they should use. That
// context carries the grant. It is cancelled when a function fails, when
// Wait returns, and when the grant is lost, with a cause wrapping ErrLost.
// Wait releases the grant, and must be called.
func (l *RWLock) ReadGroup(ctx context.Context) (*Group, context.Context, error) {
	g, err := l.acquire(ctx, want{mode: Read, block: true})
	if err != nil {
		return nil, nil, err
	}
	gr := &Group{grant: g, releaseCtx: context.WithoutCancel(ctx)}
	gctx, cancel, stop := grantCtx(ctx, g, gr.fail)
	var ectx context.Context
	gr.eg, ectx = errgroup.WithContext(gctx)
	gr.cancel, gr.stop = cancel, stop
	return gr, grantContext{ectx, g}, nil
}

// Go runs fn in a new goroutine, blocking first while SetLimit's limit of
// active goroutines is reached. Go after Wait panics, since the grant is
// released then and fn would run without the lock. Unlike an
// errgroup.Group, a Group is not reusable.
func (gr *Group) Go(fn func() error) {
	gr.mu.Lock()
	waited := gr.waited
	gr.mu.Unlock()
	if waited {
		panic(fmt.Sprintf("rwlock: Group.Go after Wait: the read grant on %s is released", gr.grant.h.l.path))
	}
	gr.eg.Go(func() error {
		err := fn()
		if err != nil {
			gr.fail(err)
		}
		return err
	})
}

// SetLimit limits the number of functions running at once. See
// [errgroup.Group.SetLimit].
func (gr *Group) SetLimit(n int) { gr.eg.SetLimit(n) }

// Wait waits for every function, then releases the grant. It returns the
// first error: a function's, or one wrapping ErrLost if the grant was lost
// first. Otherwise it returns the release's error. A release that the
// connection cut short is no error, as for [RWLock.WithWrite].
func (gr *Group) Wait() error {
	gr.eg.Wait()
	gr.mu.Lock()
	gr.waited = true
	gr.mu.Unlock()
	gr.stop()
	gr.grant.h.judge()
	if lost := gr.grant.lostCause(); lost != nil {
		gr.fail(lost)
	}
	// Cancel before the release, as RWLock.with does and for its reason.
	gr.cancel(context.Canceled)
	ctx, cancel := context.WithTimeout(gr.releaseCtx, gr.grant.h.l.cleanupTimeout)
	defer cancel()
	rerr := ignoreBackground(gr.grant.Release(ctx))
	gr.mu.Lock()
	defer gr.mu.Unlock()
	if gr.err != nil {
		return gr.err
	}
	return rerr
}

func (gr *Group) fail(err error) {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	if gr.err == nil {
		gr.err = err
	}
}

// ReadBatch runs fns concurrently under one shared grant, and returns the
// first error as a ReadGroup's Wait would. Uncontended, the whole batch
// costs three requests to ZooKeeper: create, list and delete.
func (l *RWLock) ReadBatch(ctx context.Context, fns ...func(context.Context) error) error {
	gr, gctx, err := l.ReadGroup(ctx)
	if err != nil {
		return err
	}
	for _, fn := range fns {
		gr.Go(func() error { return fn(gctx) })
	}
	return gr.Wait()
}
