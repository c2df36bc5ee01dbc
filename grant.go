package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A Grant is one hold on the lock, shared or exclusive, from the moment an
// acquisition returns it until Release, Downgrade or its loss.
//
// It is NOT safe to assume that the lock is still held just because Release
// has not been called. ZooKeeper ends a grant without asking: when its node
// is deleted, when its session expires, or when the client has been cut off
// long enough that the server may expire the session. [Grant.Done] and
// [Grant.Err] report that, and the Token lets a store reject a holder that
// did not notice in time.
//
// A Grant's methods are safe for concurrent use.
type Grant struct {
	l       *RWLock
	c       *zkclient.Client
	mode    Mode
	node    string      // full path
	session int64       // the session that owns node
	outer   *Grant      // for a nested grant, the grant it is nested in
	share   *sharedRead // for a reader of a shared node (WithReadCoalescing): the node; outer is its grant

	ctx    context.Context         // done when the grant ends; its cause says why
	cancel context.CancelCauseFunc // first cause wins

	mu        sync.Mutex
	onEnd     map[*func(error)]struct{} // run as the grant ends; guarded by mu
	deadline  time.Time                 // when lost: by when the holder must have stopped; guarded by mu
	releasing bool                      // our own delete is under way: its event is no loss; guarded by mu
	ignored   bool                      // a deletion event came while releasing; guarded by mu
	unwatch   func()                    // stops the node watch's callback; guarded by mu
	unnest    func()                    // for a nested grant: stops the outer's hook; guarded by mu

	revoked    chan struct{}   // Revoked's; nil until asked for; guarded by mu
	precedes   *zkclient.Watch // the directory's data watch, if the grant is known to come before it fires (see revoke.go)
	holdEnd    time.Time       // WithMaxHold: when the node goes (guarded by mu once granted); zero for no limit
	holdNotice time.Time       // WithMaxHold: when the grant ends (see holdlimit.go)
	holdHead   time.Duration   // WithMaxHold: the head start, from holdNotice or from a later notice to the node's going

	token       atomic.Int64 // czxid of node (see acquisition.dated), set before the grant is returned
	markRelease bool         // release marks the node held (see Release)
	setLines    []byte       // a LockAll member's set lines: a downgrade's rewrite of the data keeps them

	ops       sync.Mutex // serialises Release and Downgrade
	released  bool       // guarded by ops: Release or Downgrade has run
	successor *Grant     // guarded by ops: the read grant a Downgrade made of this one

	grantStats // for its event (observer.go)
}

// newGrant makes the grant of a node, and puts it under the lease clock.
// The grant takes over the acquisition's use of the client.
func newGrant(l *RWLock, c *zkclient.Client, mode Mode, node string, session int64) *Grant {
	g := &Grant{l: l, c: c, mode: mode, node: node, session: session}
	g.initContext()
	l.granted(g)
	c.Hold((*holder)(g))
	return g
}

// Mode returns Read or Write.
func (g *Grant) Mode() Mode { return g.mode }

// Node returns the full path of the lock node the grant holds.
func (g *Grant) Node() string { return g.node }

// Done returns a channel that is closed when the grant ends: after Release
// or Downgrade, or as soon as the grant is lost. The holder is told of a
// loss before another client can be granted the lock:
//
//   - when the session cannot be shown alive for more than the head start
//     (the head start, a quarter of the session timeout T), by the lock's own
//     lease clock: a request the server answered proves the session alive
//     for T from the moment it was sent, and the lock sends one every T/16
//     while grants are held. A silent connection (a partition, a restarted
//     server, a leader election) is ridden out for about 0.69·T. The
//     holder then has until [Grant.Deadline] to stop: the whole head start
//     on a standalone server; in an ensemble whose server loses touch with
//     the leader at the worst moment, at least T/16 if T is at least eight
//     ticks of the server (16 s with ZooKeeper's default tickTime);
//   - when the session is found expired or replaced (go-zookeeper quietly
//     opens a new session after an expiry);
//   - when its node is deleted by someone else: the holder learns it from
//     its watch, at about the moment the next waiter does. No client can
//     promise more for that cause; the fencing token ([Grant.Token]) is
//     the defence.
//
// Done and Err consult the clock at every call: a process that was paused
// (SIGSTOP, a long GC or VM pause) sees the loss at its first call after
// resuming; a Done channel obtained before the pause closes within T/16
// after it.
//
// All of this needs the session timeout the server granted, which the lock
// knows on a connection made by [Dial] (the smallest granted in the
// session, on any of its connections). On any other connection, any
// disconnection is a loss, noticed when go-zookeeper notices, and the
// lease clock runs only with [WithSessionTimeout], by its d as an upper
// bound: the grant is lost as above with T = d. If the server granted at
// least d at every handshake of the session, the holder is then told as
// above, in an ensemble too if d is at least eight ticks. But Deadline
// takes no time from d, since the server may have granted less: while the
// grant is held it reports only a hold limit's end, and for a grant lost
// by d or a disconnection, the moment of the loss. Without d, or if the
// server granted less at some handshake, a paused process, or a partition
// that begins right after a watch notification, can let another client in
// before the holder is told.
func (g *Grant) Done() <-chan struct{} {
	g.judge()
	return g.ctx.Done()
}

// Err returns nil while the grant is held, ErrReleased after Release or
// Downgrade, or an error wrapping ErrLost (and the cause, such as
// [zk.ErrSessionExpired]) once it is lost. Like Done, it consults the
// lease clock at every call.
func (g *Grant) Err() error {
	g.judge()
	if g.ctx.Err() == nil {
		return nil
	}
	return context.Cause(g.ctx)
}

// judge ends the grant if the lease clock or the session says it is lost.
func (g *Grant) judge() {
	r := g.root()
	// mutant: judge-on-timer-only
	if r.ctx.Err() == nil {
		r.c.Judge((*holder)(r))
	}
	// mutant: judge-ignores-hold-limit
	if r.ctx.Err() == nil && r.overHold() {
		r.holdLimitReached()
	}
}

// Deadline returns the earliest time at which the server may expire the
// grant's session, so that another client could be granted the lock, as
// far as the lease clock knows: while the grant is held, it moves on with
// every renewal of the lease; once the grant is lost, it is the time by
// which the holder must have stopped (at once for a deleted node or an
// expired session). It counts the worst case of an ensemble (see
// [Grant.Done]); it moves earlier when a reconnection is granted a shorter
// session timeout. With a hold limit (WithMaxHold) it is never later than
// the limit, or, for a holder told of it late (its process stopped across
// the notice), the head start after it was told. ok is false while the
// grant is held, without a hold limit, on a connection whose session
// timeout the lock does not know, and after Release.
func (g *Grant) Deadline() (deadline time.Time, ok bool) {
	r := g.root()
	r.judge()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		if errors.Is(context.Cause(r.ctx), ErrReleased) {
			return time.Time{}, false // a loss that lost the race to Release may have set it
		}
		return r.deadline, !r.deadline.IsZero()
	}
	deadline, ok = r.c.Deadline((*holder)(r))
	if !r.holdEnd.IsZero() && (!ok || r.holdEnd.Before(deadline)) {
		return r.holdEnd, true
	}
	return deadline, ok
}

// Token returns the fencing token of the grant: the czxid of its node. For
// one lock, a grant that conflicts with an earlier one (a write after any
// grant, a read after a write) carries a larger token, because grants come
// in the order of their nodes' creation. Pass it to the store you protect,
// and have the store reject writes carrying a token smaller than one it has
// seen for this lock: a holder that lost its grant without noticing (a long
// pause, a partition) is then turned away. Tokens of different locks are
// not ordered by grant time (a node created early may be granted late), so
// a store that several locks protect keeps the largest token per lock.
// Readers granted together carry tokens in no particular order.
//
// The token is recorded when the grant is made, from the listing or watch
// that granted it or a read of the node before the grant: Token never
// blocks and sends no request. A nested grant, the read grant a Downgrade
// made and the write grant it came from, and every grant of one LockAll set
// carry the same token. (Where a node ahead was deleted between the create
// and the listing that granted it, the token is that deletion's zxid, which
// orders against every other node's czxid exactly as this node's does; a
// reader whose listing shows only readers after it may carry the listing's
// zxid, which orders against every write's token as its czxid does; see
// docs/guarantees.md.)
func (g *Grant) Token() int64 { return g.root().token.Load() }

// Release ends the grant and deletes its node, so the next waiter may go.
// It returns nil if the grant had already ended (a lost grant's node is
// gone or being deleted), and on later calls. Releasing a write grant that
// was downgraded releases the read grant it became, so that
// `defer g.Release(ctx)` before a Downgrade still releases the node.
//
// The grant ends once its node is gone. If the server refuses the deletion
// (an ACL that changed since the lock was taken), Release returns the error
// and the grant stays held: the lock never reports a grant released while
// its node exists. If ctx ends, or the connection fails, before the
// deletion is confirmed, the deletion goes on in the background until it
// succeeds or the session ends (or the server refuses it, which is logged:
// the node then goes with the session); the grant ends, and Release
// returns the error.
//
// Once the *zk.Conn is closed, Release returns nil: closing ends the
// session, and its nodes with it.
//
// Releasing a nested grant (see [ContextWithGrant]) ends only that grant.
func (g *Grant) Release(ctx context.Context) error {
	g.judge() // a grant the clock has given up is lost, not released
	g.ops.Lock()
	if s := g.successor; s != nil {
		g.ops.Unlock()
		return s.Release(ctx)
	}
	defer g.ops.Unlock()
	if !g.ownsHeldNode() {
		return g.releaseWithoutDelete(ctx)
	}
	g.setReleasing(true)
	return g.afterDelete(g.l.deleteNode(g.counting(ctx), g.c, g.node, g.session, g.markRelease))
}

// ownsHeldNode reports whether Release must delete g's node: g is held,
// and is not nested in another grant. The caller holds g.ops.
func (g *Grant) ownsHeldNode() bool {
	return !g.released && g.outer == nil && g.ctx.Err() == nil
}

// releaseWithoutDelete releases g, which does not own a held node (see
// ownsHeldNode). The caller holds g.ops.
func (g *Grant) releaseWithoutDelete(ctx context.Context) error {
	switch {
	case g.released:
		return nil
	case g.outer != nil:
		var err error
		if g.share != nil {
			// The last reader of a shared node deletes it.
			if err = g.share.drop(ctx); err != nil && g.outer.ctx.Err() == nil {
				return err // refused: the node is still held, and so is this grant
			}
		}
		g.released = true
		g.end(ErrReleased)
		return err
	}
	g.released = true // lost: its node is gone, or being deleted
	return nil
}

// afterDelete ends g once the deletion of its node, begun with
// setReleasing(true), has returned err (see deleteNode): a refused
// deletion leaves g held. The caller holds g.ops.
func (g *Grant) afterDelete(err error) error {
	if err != nil && !errors.Is(err, errFinishing) {
		if g.setReleasing(false) {
			g.watchNode() // someone else's delete may have come meanwhile: look again
		}
		g.l.peerWatch.join(g, nil) // the watching may have stopped for our release
		return errorf("rwlock: release %s: %w", g.node, err)
	}
	g.released = true
	g.end(ErrReleased)
	if err != nil {
		return errorf("rwlock: release %s: %w", g.node, err)
	}
	return nil
}

// Downgrade turns a write grant into a read grant without releasing the
// lock for a moment. It keeps the same node, and so the same place in the
// queue and the same token, and marks the node shared in its data: readers
// queued behind it (before any other writer) join at once, while writers
// keep waiting for the node to go. (Deleting the node and queueing a new
// read node, as Curator 5.4 does, lets a writer that queued meanwhile in
// between: CURATOR-276.)
//
// With a peer on the path (see [WithDialect]) the node keeps its writer's
// name, and peers do not read the mark: to a peer it stays a writer until
// it is deleted, so the downgraded grant stays exclusive towards peers —
// their readers and their writers wait — and only zkrwlock's readers
// join. No peer writer can come in between, since none queued behind the
// node passes it before it is deleted.
//
// On success the write grant ends (its Err returns ErrReleased) and the
// returned read grant owns the node; releasing either of them releases it.
// Readers may be granted as soon as the mark is written, before the write
// grant's Done closes: finish every write before calling Downgrade, and do
// not go on writing in goroutines that watch the write grant's Done.
// If ctx has ended when it is called, or the server refuses the change (an
// ACL), the write grant is unchanged. Once the request is sent it is waited
// for up to the cleanup timeout (see [WithCleanupTimeout]), whatever ctx
// does: if its outcome stays unknown, readers may have joined, so the write
// grant is lost and its node deleted. Downgrade of a read grant returns the
// grant itself.
func (g *Grant) Downgrade(ctx context.Context) (*Grant, error) {
	if g.mode == Read {
		return g, nil
	}
	g.ops.Lock()
	defer g.ops.Unlock()
	fail := func(err error) (*Grant, error) { return nil, errorf("rwlock: downgrade %s: %w", g.node, err) }
	g.judge() // a grant the clock has given up must not let readers in
	switch {
	case g.released || g.ctx.Err() != nil:
		return fail(g.ended())
	case ctx.Err() != nil:
		return fail(ctx.Err())
	case g.outer != nil:
		r, err, _ := g.l.nested(ContextWithGrant(ctx, g.outer), want{mode: Read, block: true})
		if err != nil {
			return nil, err
		}
		g.released, g.successor = true, r
		g.end(ErrReleased)
		return r, nil
	}

	l := g.l
	sctx, cancel := context.WithTimeout(context.WithoutCancel(g.counting(ctx)), l.cleanupTimeout)
	defer cancel()
	r := g.c.Set(sctx, g.node, append(lockname.Data(l.owner, l.maxHold, false, true), g.setLines...))
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		g.lost(g.whyDeleted())
		return fail(g.ended())
	case zkclient.SessionGone(r.Err):
		g.lost(r.Err)
		return fail(g.ended())
	case zkclient.ConnectionLoss(r.Err) || sctx.Err() != nil:
		g.lost(fmt.Errorf("%w: outcome of the downgrade unknown: %w", errMayLive, r.Err))
		return fail(g.ended())
	case r.Err != nil:
		return fail(r.Err)
	case g.ctx.Err() != nil:
		return fail(g.ended()) // lost while we marked it
	}
	d := &Grant{
		l: l, c: g.c, mode: Read, node: g.node, session: g.session,
		markRelease: g.markRelease, setLines: g.setLines, precedes: g.precedes,
	}
	d.initContext()
	d.token.Store(g.token.Load())
	g.released, g.successor = true, d
	g.c.Ref() // the read grant's own use of the client
	g.c.Hold((*holder)(d))
	l.peerWatch.join(d, nil) // before g leaves, so that the watching goes on
	if !g.end(ErrReleased) {
		// Lost since the mark was written (its node is being deleted):
		// the read grant is no better.
		d.end(g.ended())
		return fail(g.ended())
	}
	l.granted(d) // after g's end, so that the node is never counted twice
	// Once d is on the lease clock and counted: its limit, g's, may be due
	// already, and ends it at once.
	d.limitHold(g.holdEnd)
	d.watchNode()
	l.debug("downgraded", g.node)
	return d, nil
}

// ended returns why a grant is no longer held.
func (g *Grant) ended() error {
	if g.ctx.Err() != nil {
		return context.Cause(g.ctx)
	}
	return ErrReleased
}

// end ends the grant with cause, unless it has ended already, and runs its
// onEnd hooks on the caller's goroutine, so that the contexts derived from
// it are cancelled before end returns. A grant that owns its node leaves
// the lease clock and stops watching its node.
func (g *Grant) end(cause error) bool {
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		return false
	}
	var ev GrantEvent
	if g.outer == nil {
		ev = g.l.endEvent(g, cause)
	}
	g.cancel(cause)
	hooks, unwatch, unnest := g.onEnd, g.unwatch, g.unnest
	g.onEnd, g.unwatch, g.unnest = nil, nil, nil
	g.mu.Unlock()
	for h := range hooks {
		(*h)(cause)
	}
	if unnest != nil {
		unnest()
	}
	if g.outer == nil {
		if unwatch != nil {
			unwatch()
		}
		g.c.Unhold((*holder)(g))
		g.c.Unref()
		g.l.observeEnd(ev)
	}
	return true
}

// whenEnded runs fn with the cause as g ends (at once if it has), on the
// goroutine that ends it. stop forgets fn if it has not run.
func (g *Grant) whenEnded(fn func(cause error)) (stop func()) {
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		fn(context.Cause(g.ctx))
		return func() {}
	}
	if g.onEnd == nil {
		g.onEnd = make(map[*func(error)]struct{})
	}
	key := &fn
	g.onEnd[key] = struct{}{}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.onEnd, key)
		g.mu.Unlock()
	}
}
