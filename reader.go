package rwlock

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"
)

// readBlocker is the read predicate: a reader holds the lock when no writer
// precedes it, and otherwise waits for the NEAREST preceding writer (not the
// first, as Curator's readers do: that would wake it once per writer ahead).
// A downgraded writer is a reader now. before is in queue order.
func readBlocker(before []lockNode, shared func(name string) bool) (lockNode, bool) {
	for i := len(before) - 1; i >= 0; i-- {
		if n := before[i]; n.mode == Write && !shared(n.name) {
			return n, true
		}
	}
	return lockNode{}, false
}

// RLock blocks until it holds the lock shared, or ctx ends. It queues behind
// every grant and waiter already there: a waiting writer blocks it. On
// failure, including a cancelled ctx, it returns an error (wrapping ctx's
// error when ctx ended) and leaves no node behind. It rides out connection
// loss and server restarts while it waits, and queues again if the session
// expires.
//
// If ctx carries a grant of this lock (see [ContextWithGrant]), RLock
// returns a nested grant of it at once.
func (l *RWLock) RLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, Read, true, false)
}

// TryRLock returns a shared grant if it can have one without waiting, and
// otherwise an error wrapping ErrWouldBlock, leaving no node behind. It
// still makes its requests (create, list, delete), so ctx bounds them.
func (l *RWLock) TryRLock(ctx context.Context) (*Grant, error) {
	return l.acquire(ctx, Read, false, false)
}

// WithRead runs fn while holding the lock shared, and releases it when fn
// returns. fn's context carries the grant, and is cancelled, with a cause
// wrapping ErrLost, if the grant is lost; WithRead then returns an error
// wrapping ErrLost (joined with fn's error). Errors acquiring the lock are
// returned as from RLock, without running fn.
func (l *RWLock) WithRead(ctx context.Context, fn func(context.Context) error) error {
	return l.with(ctx, Read, fn)
}

// A Group runs functions concurrently under ONE shared grant: one node, one
// grant, any number of goroutines. It has the semantics of
// [errgroup.Group]: the first error cancels the group's context and is
// what Wait returns. A lost grant counts as an error wrapping ErrLost.
type Group struct {
	eg      *errgroup.Group
	grant   *Grant
	cancel  context.CancelCauseFunc
	stop    func() bool
	release context.Context

	mu  sync.Mutex
	err error // the first error
}

// ReadGroup acquires a shared grant (as RLock) and returns a Group that runs
// functions under it, with the context they should use: it carries the
// grant and is cancelled when a function fails, when the grant is lost
// (with a cause wrapping ErrLost), and when Wait returns. The grant is
// released by Wait, which must be called.
func (l *RWLock) ReadGroup(ctx context.Context) (*Group, context.Context, error) {
	g, err := l.acquire(ctx, Read, true, true)
	if err != nil {
		return nil, nil, err
	}
	gr := &Group{grant: g, release: context.WithoutCancel(ctx)}
	gctx, cancel, stop := guard(ctx, g, gr.fail)
	gr.eg, gctx = errgroup.WithContext(gctx)
	gr.cancel, gr.stop = cancel, stop
	return gr, gctx, nil
}

// Go runs fn in a new goroutine, blocking first while SetLimit's limit of
// active goroutines is reached.
func (gr *Group) Go(fn func() error) {
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
// first; else an error from the release.
func (gr *Group) Wait() error {
	gr.eg.Wait()
	gr.stop()
	if lost := gr.grant.lossErr(); lost != nil {
		gr.fail(lost)
	}
	ctx, cancel := context.WithTimeout(gr.release, gr.grant.l.cleanup)
	defer cancel()
	rerr := gr.grant.Release(ctx)
	gr.cancel(context.Canceled)
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
// first error, as a ReadGroup would. Uncontended, the whole batch costs
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
