package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Grant is one hold on the lock, shared or exclusive, from the moment an
// acquisition returns it until Release, Downgrade or its loss. Its methods
// are safe for concurrent use.
//
// It is NOT safe to assume that the lock is still held just because Release
// has not been called. ZooKeeper ends a grant without asking, when its node
// is deleted, when its session expires, or when the client has been cut off
// long enough that the server may expire the session. The methods
// [Grant.Done] and [Grant.Err] report that, and the Token lets a store
// reject a holder that did not notice in time.
type Grant struct {
	h      *hold
	mode   Mode
	parent *Grant // for a nested grant, the grant it is nested in

	ctx    context.Context // ends when the grant does; its cause says why
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	onEnd hooks // guarded by mu

	released bool   // Release or Downgrade has run; guarded by mu
	next     *Grant // the read grant a Downgrade made of this one; guarded by mu
}

// newHandle makes a grant of mode on h, nested in parent if not nil. The
// caller makes it end with what it hangs on.
func newHandle(h *hold, mode Mode, parent *Grant) *Grant {
	g := &Grant{h: h, mode: mode, parent: parent}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	return g
}

// Mode returns Read or Write.
func (g *Grant) Mode() Mode { return g.mode }

// Node returns the full path of the lock node the grant holds.
func (g *Grant) Node() string { return g.h.path }

// Done returns a channel that is closed when the grant ends: after Release
// or Downgrade, or as soon as the grant is lost. The holder is told of a
// loss before another client can be granted the lock. The lease clock tells
// it once the session can no longer be shown alive for more than the head
// start, a quarter of the session timeout. The holder is also told as soon
// as the lock learns that the session expired. If someone else deletes its
// node, the holder learns it at about the moment the next waiter does, and
// the fencing token is the defence.
//
// Done and Err consult the clock at every call, so a process that was
// paused sees the loss at its first call after resuming. On a connection
// not made by [Dial], the lock trusts only what [WithSessionTimeout] bounds
// and go-zookeeper's state. The file docs/guarantees.md explains the clock,
// and what an ensemble changes.
func (g *Grant) Done() <-chan struct{} {
	g.h.judge()
	return g.ctx.Done()
}

// Err returns nil while the grant is held, and ErrReleased after Release or
// Downgrade. Once the grant is lost, it returns an error wrapping ErrLost
// and the cause, such as [zk.ErrSessionExpired]. Like Done, it consults the
// lease clock at every call.
func (g *Grant) Err() error {
	g.h.judge()
	if g.ctx.Err() == nil {
		return nil
	}
	return context.Cause(g.ctx)
}

// Deadline returns the earliest time at which another client could be
// granted the lock, as far as the lease clock knows, and never past a hold
// limit. While the grant is held, it moves on with every renewal of the
// lease. Once the grant is lost, it is the time by which the holder must
// have stopped. The result ok is false after Release. It is false too while
// the grant is held without a hold limit, on a connection whose session
// timeout the lock does not know.
func (g *Grant) Deadline() (deadline time.Time, ok bool) {
	h := g.h
	h.judge()
	h.mu.Lock()
	defer h.mu.Unlock()
	if g.ctx.Err() != nil || !h.held() {
		if errors.Is(g.ended(), ErrReleased) || errors.Is(context.Cause(h.ctx), ErrReleased) {
			return time.Time{}, false // a loss that lost the race to Release may have set it
		}
		return h.deadline, !h.deadline.IsZero()
	}
	deadline, ok = h.c.Deadline(h)
	if !h.until.IsZero() && (!ok || h.until.Before(deadline)) {
		return h.until, true
	}
	return deadline, ok
}

// Token returns the fencing token of the grant, the czxid of its node, and
// sends no request. For one lock, a grant that conflicts with an earlier
// one carries a larger token: a write after any grant, or a read after a
// write. That is because grants come in the order of their nodes' creation.
// Pass the token to the store you protect, and have the store reject writes
// that carry a token smaller than one it has seen for this lock.
//
// Tokens of different locks are not ordered by grant time. Readers granted
// together carry tokens in no particular order. A nested grant and a
// Downgrade's read grant share their node's token. The file
// docs/guarantees.md tells how a token can be known without reading the
// node.
func (g *Grant) Token() int64 { return g.h.token }

// Release ends the grant, and deletes its node so that the next waiter may
// go, unless other grants still hold it, as the readers of a coalesced node
// do. It returns nil if the grant had already ended, and on later calls.
// Releasing a write grant that was downgraded releases the read grant it
// became, so `defer g.Release(ctx)` before a Downgrade still releases the
// node. Releasing a nested grant ends only that grant.
//
// If the server refuses the deletion, over an ACL changed since the lock
// was taken, Release returns the error and the grant stays held. If ctx
// ends or the connection fails before the deletion is confirmed, the grant
// ends and Release returns the error. The deletion then goes on in the
// background until it succeeds or the session ends. Once the *zk.Conn is
// closed, Release returns nil, since closing ends the session and its nodes
// with it.
func (g *Grant) Release(ctx context.Context) error {
	h := g.h
	h.judge() // a grant the clock has given up is lost, not released
	if g.parent != nil {
		return g.releaseNested(ctx)
	}
	h.ops.Lock()
	released, next := g.state()
	if next != nil {
		h.ops.Unlock()
		return next.Release(ctx)
	}
	defer h.ops.Unlock()
	switch {
	case released:
		return nil
	case g.ctx.Err() != nil || !h.held():
		g.setReleased(nil) // lost, so its node is gone or being deleted
		h.releasedLate(ctx)
		return nil
	case h.leave():
		g.setReleased(nil)
		g.endAlone(ErrReleased)
		return nil
	case h.kept():
		g.setReleased(nil)
		return nil
	}
	err := h.release(ctx)
	if err != nil && !errors.Is(err, errFinishing) {
		return &opError{"release", h.path, err} // still held
	}
	g.setReleased(nil)
	if err != nil {
		return &opError{"release", h.path, err}
	}
	return nil
}

// releaseNested releases a nested grant. It ends, and so does its outer
// grant's hold on it. It sends no request, and takes none of the hold's
// ops, since its outer grant's holder may be releasing the node meanwhile.
func (g *Grant) releaseNested(ctx context.Context) error {
	_, next := g.state()
	if next != nil {
		return next.Release(ctx)
	}
	g.setReleased(nil)
	g.endAlone(ErrReleased)
	return nil
}

// state returns whether Release or Downgrade has run, and the read grant
// a Downgrade made.
func (g *Grant) state() (released bool, next *Grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.released, g.next
}

// setReleased records that Release or Downgrade has run, and the read
// grant a Downgrade made, if any.
func (g *Grant) setReleased(next *Grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.released, g.next = true, next
}

// Downgrade turns a write grant into a read grant without letting go of the
// lock for a moment. It keeps the node, its place in the queue and its
// token, and marks the node shared in its data. Readers queued behind it
// join at once, while writers wait for it to go. Curator 5.4 instead
// deletes the node and queues a new one, which lets a waiting writer in
// between; see CURATOR-276. With a peer on the path, the node keeps its
// writer's name, so to peers it stays exclusive until it goes.
//
// On success the write grant ends with ErrReleased, and the returned read
// grant holds the node; releasing either releases it. Readers may be
// granted as soon as the mark is written, so finish every write first. If
// ctx has ended, or the server refuses the change over an ACL, the write
// grant is unchanged. Once sent, the request is waited for up to the
// cleanup timeout, whatever ctx does. If its outcome stays unknown, readers
// may have joined, so the grant is lost and its node deleted. Downgrade of
// a read grant returns the grant itself. On a lock made WithCapacity,
// Downgrade fails with ErrInvalidArgument, since a node's name fixes its
// weight.
func (g *Grant) Downgrade(ctx context.Context) (*Grant, error) {
	if g.mode == Read {
		return g, nil
	}
	h := g.h
	fail := func(err error) (*Grant, error) { return nil, &opError{"downgrade", h.path, err} }
	if g.parent != nil {
		// A write grant nested in another becomes a read grant nested in the
		// same.
		h.judge()
		if released, _ := g.state(); released || g.ctx.Err() != nil {
			return fail(g.ended())
		}
		r, err := h.l.nested(ContextWithGrant(ctx, g.parent), want{mode: Read, block: true})
		if err != nil {
			return nil, err
		}
		g.setReleased(r)
		g.endAlone(ErrReleased)
		return r, nil
	}
	if h.l.capacity > 0 {
		// Its name declares its weight, which no data change can make smaller.
		return fail(fmt.Errorf("%w: a grant of every permit cannot be downgraded: release it and Acquire fewer", ErrInvalidArgument))
	}
	h.ops.Lock()
	defer h.ops.Unlock()
	h.judge() // a grant the clock has given up must not let readers in
	switch released, _ := g.state(); {
	case released || g.ctx.Err() != nil:
		return fail(g.ended())
	case ctx.Err() != nil:
		return fail(ctx.Err())
	}
	if err := h.markDowngraded(ctx); err != nil {
		return fail(err)
	}
	// The write grant's count passes to the read grant, so it is still one
	// handle.
	h.forget(g)
	d := h.grant(Read)
	g.setReleased(d)
	g.end(ErrReleased)
	for _, cp := range h.l.caps {
		cp.changed(h, downgraded)
	}
	h.l.debug("downgraded", h.path)
	return d, nil
}

// ended returns why a grant is no longer held.
func (g *Grant) ended() error {
	if g.ctx.Err() != nil {
		return context.Cause(g.ctx)
	}
	return ErrReleased
}

// end ends the grant with cause, unless it has ended already. It runs the
// grant's hooks on the caller's goroutine. So the contexts derived from the
// grant, and the grants nested in it, end before end returns.
func (g *Grant) end(cause error) {
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		return
	}
	g.cancel(cause)
	hooks := g.onEnd
	g.onEnd = nil
	g.mu.Unlock()
	for _, h := range hooks {
		h.fn(cause)
	}
}

// endAlone ends a grant whose hold goes on. It first stops hanging on its
// outer grant, or on its hold.
func (g *Grant) endAlone(cause error) {
	if g.parent != nil {
		g.parent.forget(g)
	} else {
		g.h.forget(g)
	}
	g.end(cause)
}

// whenEnded runs fn with the cause as g ends, on the goroutine that ends
// it. If g has ended, it runs fn at once. The returned stop forgets fn if
// it has not run.
func (g *Grant) whenEnded(fn func(cause error)) (stop func()) {
	key := &fn
	g.whenEndedAs(key, fn)
	return func() { g.forget(key) }
}

func (g *Grant) whenEndedAs(key any, fn func(cause error)) {
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		fn(context.Cause(g.ctx))
		return
	}
	g.onEnd.add(key, fn)
	g.mu.Unlock()
}

func (g *Grant) forget(key any) {
	g.mu.Lock()
	g.onEnd.remove(key)
	g.mu.Unlock()
}

type grantKey struct{}

// ContextWithGrant returns a copy of ctx that carries g. Lock and RLock on
// the same lock path and connection, called with such a context, return a
// nested grant of g at once, without a new node. A read grant may nest in a
// write or read grant, and a write grant in a write grant. A write grant
// inside a read grant fails with ErrUpgrade. Releasing a nested grant
// leaves g held. When g ends, so do the grants nested in it, and theirs.
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
// grant of this lock, with the same path and connection. It returns nil,
// nil when it is not.
func (l *RWLock) nested(ctx context.Context, w want) (*Grant, error) {
	outer := carried(ctx)
	if outer == nil || outer.h.l.path != l.path || outer.h.l.conn != l.conn {
		return nil, nil
	}
	outer.h.judge() // as Err does, since a holder back from a pause may have lost it
	var err error
	switch {
	case outer.ctx.Err() != nil:
		err = fmt.Errorf("the grant in the context has ended: %w", context.Cause(outer.ctx))
	case w.mode == Write && outer.mode == Read, w.weight > holdWeight(outer.h):
		err = fmt.Errorf("%w (%s)", ErrUpgrade, outer.h.path)
	}
	if err != nil {
		return nil, &opError{verb(w), l.path, err}
	}
	return nestIn(outer, w.mode), nil
}

// nestIn makes a grant of mode nested in outer. It holds outer's node, and
// ends when outer does, at once if outer has ended. It ends on the
// goroutine that ends outer, so that its own hooks run in time too.
func nestIn(outer *Grant, mode Mode) *Grant {
	g := newHandle(outer.h, mode, outer)
	outer.whenEndedAs(g, g.end)
	return g
}
