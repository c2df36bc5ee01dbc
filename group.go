package rwlock

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// A Group runs functions concurrently under ONE shared grant: one node, one
// grant, any number of goroutines. It has the semantics of
// [errgroup.Group]: the first error cancels the group's context and is
// what Wait returns. A lost grant counts as an error wrapping ErrLost.
type Group struct {
	eg         *errgroup.Group
	grant      *Grant
	cancel     context.CancelCauseFunc
	stop       func()
	releaseCtx context.Context

	mu     sync.Mutex
	err    error // the first error
	waited bool  // Wait has run: the grant is released
}

// ReadGroup acquires a shared grant (as RLock) and returns a Group that runs
// functions under it, with the context they should use: it carries the
// grant and is cancelled when a function fails, when the grant is lost
// (with a cause wrapping ErrLost), and when Wait returns. The grant is
// released by Wait, which must be called.
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
// active goroutines is reached. Go after Wait panics: the group's grant is
// released then, and fn would run without the lock (a Group is not
// reusable, unlike an errgroup.Group).
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

// SetLimit limits the number of functions running at once; see
// [errgroup.Group.SetLimit].
func (gr *Group) SetLimit(n int) { gr.eg.SetLimit(n) }

// Wait waits for every function, then releases the grant. It returns the
// first error: a function's, or one wrapping ErrLost if the grant was lost
// first; else an error from the release. A release cut short by the
// connection (a failover) is no error: the grant was held until it was
// sent, and its deletion goes on in the background (see [Grant.Release]).
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
	// Before the release: a goroutine a function left running must see its
	// context end before the next holder can be granted.
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

// ReadBatch runs fns concurrently under one shared grant and returns the
// first error, as a ReadGroup's Wait would (nil when only the release was
// cut short by the connection). Uncontended, the whole batch costs
// three requests to ZooKeeper: create, list, delete.
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
