package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// A Grant is one hold on the lock, shared or exclusive, from the moment an
// acquisition returns it until Release, Downgrade or its loss.
//
// It is NOT safe to assume that the lock is still held just because Release
// has not been called. ZooKeeper ends a grant without asking: when its node
// is deleted, when its session expires, or when the client has been cut off
// long enough that the server may have expired the session. [Grant.Done]
// and [Grant.Err] report that, and the Token lets a store reject a holder
// that did not notice in time.
//
// A Grant's methods are safe for concurrent use.
type Grant struct {
	l       *RWLock
	mode    Mode
	node    string // full path
	session int64  // the session that owns node
	outer   *Grant // for a nested grant: the grant that owns the node

	ctx       context.Context         // done when the grant ends; its cause says why
	end       context.CancelCauseFunc // first cause wins
	trip      <-chan zk.Event         // a child watch the acquisition left; see monitor
	grantedAt time.Time

	token       atomic.Int64 // czxid of node; 0 until read
	markRelease bool         // release marks the node held (see deleteNode)

	ops      sync.Mutex // serialises Release and Downgrade
	released bool       // guarded by ops: Release or Downgrade has run

	arm         sync.Once
	monitorDone chan struct{} // nil unless a monitor was started
}

func newGrant(l *RWLock, mode Mode, node string, session int64, trip <-chan zk.Event) *Grant {
	ctx, end := context.WithCancelCause(context.Background())
	return &Grant{
		l: l, mode: mode, node: node, session: session,
		ctx: ctx, end: end, trip: trip, grantedAt: time.Now(),
	}
}

// errNodeDeleted is the cause of a loss when our node was deleted by
// someone else (an operator, another client) while the session lived.
var errNodeDeleted = errors.New("lock node deleted")

func lostErr(node string, cause error) error {
	return fmt.Errorf("%w: %s: %w", ErrLost, node, cause)
}

// lose ends the grant with a cause wrapping ErrLost, unless it has already
// ended. Call it when the node is gone already.
func (g *Grant) lose(cause error) {
	if g.ctx.Err() == nil {
		g.l.debug("lost: "+cause.Error(), g.node)
	}
	g.end(lostErr(g.node, cause))
}

// loseAndDelete ends the grant, then deletes its node, which may live on
// with the session, in the background: after the holder has been told,
// since the deletion lets the next waiter in.
func (g *Grant) loseAndDelete(cause error) {
	g.l.background.Add(1)
	g.lose(cause)
	go g.l.finishing(g.node, "", g.session)
}

// root returns the grant that owns the node.
func (g *Grant) root() *Grant {
	if g.outer != nil {
		return g.outer
	}
	return g
}

// Mode returns Read or Write.
func (g *Grant) Mode() Mode { return g.mode }

// Node returns the full path of the lock node the grant holds.
func (g *Grant) Node() string { return g.node }

// Done returns a channel that is closed when the grant ends: after Release
// or Downgrade, or as soon as the grant is lost. The holder learns of a loss
// no later than the moment another client could be granted the lock:
//
//   - when the node is deleted, or the session is found expired or
//     replaced (go-zookeeper quietly opens a new session after expiry);
//   - when the connection has been down for longer than the session can be
//     trusted: about a fifth of the session timeout if the lock knows it
//     (from [WithSessionTimeout] or [Dial]), else at once. go-zookeeper
//     notices a dead connection only after 2/3 of the session timeout
//     without a packet, which leaves at most the last third as margin, less
//     allowances for round trips and a busy machine (see lossGrace).
//
// The first call to Done, Err or Token starts watching: it checks the
// session at once, then sets a watch on the node (one request, unless the
// grant came from WithRead, WithWrite or ReadGroup, which set one for free)
// and polls the connection state from a goroutine that ends with the
// grant. Grants that are never asked cost nothing beyond their node.
func (g *Grant) Done() <-chan struct{} {
	g.root().startMonitor()
	return g.ctx.Done()
}

// Err returns nil while the grant is held, ErrReleased after Release or
// Downgrade, or an error wrapping ErrLost (and the cause, such as
// [zk.ErrSessionExpired]) once it is lost. Like Done, it starts watching,
// and it checks the session on every call.
func (g *Grant) Err() error {
	r := g.root()
	r.startMonitor()
	if r.ctx.Err() == nil && r.l.conn.SessionID() != r.session {
		r.lose(zk.ErrSessionExpired) // the monitor would see it at its next tick
	}
	if g.ctx.Err() == nil {
		return nil
	}
	return context.Cause(g.ctx)
}

// Token returns the fencing token of the grant: the czxid of its node, which
// ZooKeeper makes strictly larger for every later grant of any lock. Pass it
// to the store you protect and have the store reject writes carrying a token
// smaller than one it has seen: a holder that lost its grant without
// noticing (a long GC pause, a partition) is then turned away.
//
// The first call reads the node (one request) and starts watching as Done
// does (one more, unless watching already); through a disconnection it
// waits for the client to reconnect or the grant to be lost. It returns 0 if the grant ended before the token could
// be read, or if the node cannot be read (an ACL without read permission).
func (g *Grant) Token() int64 {
	r := g.root()
	if t := r.token.Load(); t != 0 {
		return t
	}
	r.startMonitor()
	var retry backoff
	for {
		st, err := call(r.ctx, func() (*zk.Stat, error) {
			_, st, err := r.l.conn.Get(r.node)
			return st, err
		}, nil)
		switch {
		case err == nil:
			r.token.CompareAndSwap(0, st.Czxid)
			return r.token.Load()
		case errors.Is(err, zk.ErrNoNode):
			r.lose(r.whyDeleted())
			return 0
		case r.ctx.Err() != nil:
			return r.token.Load()
		case !connectionLoss(err):
			return 0
		}
		if retry.wait(r.ctx, r.l.conn) != nil {
			return r.token.Load()
		}
	}
}

// Release ends the grant and deletes its node, so the next waiter may go. It
// returns nil if the grant had already ended (then there is nothing left to
// delete: a lost grant's node is gone or being deleted), and on later calls.
// ctx bounds the wait: if it ends, or the connection fails, before the
// deletion is confirmed, the deletion goes on in the background until it
// succeeds or the session ends, and Release returns the error.
//
// Releasing a nested grant (see [ContextWithGrant]) ends only that grant.
func (g *Grant) Release(ctx context.Context) error {
	g.ops.Lock()
	defer g.ops.Unlock()
	if g.released {
		return nil
	}
	g.released = true
	ended := g.ctx.Err() != nil
	g.end(ErrReleased)
	if g.outer != nil {
		return nil
	}
	g.stopMonitor()
	if ended {
		return nil
	}
	if err := g.l.deleteNode(ctx, g.node, g.session, g.markRelease); err != nil {
		return fmt.Errorf("rwlock: release %s: %w", g.node, err)
	}
	return nil
}

// startMonitor starts the lost-grant monitor once, if the grant is held.
// Its first look is now, not a poll later, so that Err never calls a grant
// held whose session is already gone.
func (g *Grant) startMonitor() {
	g.arm.Do(func() {
		if g.ctx.Err() != nil {
			return
		}
		t := g.l.sessionTimeout()
		poll := pollInterval(t)
		h := &health{session: g.session, grace: lossGrace(t, poll), lastUp: g.grantedAt}
		if err := h.check(g.l.conn, time.Now()); err != nil {
			g.lostHealth(err)
			return
		}
		g.monitorDone = make(chan struct{})
		go g.monitor(h, poll)
	})
}

// lostHealth ends the grant for a failed health check.
func (g *Grant) lostHealth(err error) {
	if errors.Is(err, errDisconnected) {
		g.loseAndDelete(err) // the session, and the node, may well live on
		return
	}
	g.lose(err)
}

// stopMonitor waits for the monitor, if any, after the grant has ended; it
// also prevents one from starting later.
func (g *Grant) stopMonitor() {
	g.arm.Do(func() {})
	if g.monitorDone != nil {
		<-g.monitorDone
	}
}

type grantKey struct{}

// ContextWithGrant returns a copy of ctx that carries g. Lock and RLock on
// the same lock path and connection, called with such a context, return a
// nested grant of g at once, without a new node: a read grant inside a write
// grant, or a grant of the same mode. A write grant inside a read grant fails
// with ErrUpgrade, because two readers upgrading at once would wait for each
// other forever. Releasing a nested grant leaves g held; when g ends, so do
// its nested grants.
//
// The contexts that WithRead, WithWrite and ReadGroup hand to their
// functions already carry their grant.
func ContextWithGrant(ctx context.Context, g *Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, g)
}

// nested returns a nested grant when ctx carries a grant of this lock (same
// path, same connection); ok is false when it does not.
func (l *RWLock) nested(ctx context.Context, mode Mode, block bool) (g *Grant, err error, ok bool) {
	outer, _ := ctx.Value(grantKey{}).(*Grant)
	if outer == nil || outer.l.path != l.path || outer.l.conn != l.conn {
		return nil, nil, false
	}
	r := outer.root()
	switch {
	case outer.ctx.Err() != nil:
		err = fmt.Errorf("the grant in the context has ended: %w", context.Cause(outer.ctx))
	case mode == Write && r.mode == Read:
		err = fmt.Errorf("%w (%s)", ErrUpgrade, r.node)
	}
	if err != nil {
		return nil, fmt.Errorf("rwlock: %s %s: %w", verb(mode, block), l.path, err), true
	}
	ctx, end := context.WithCancelCause(r.ctx)
	return &Grant{
		l: r.l, mode: mode, node: r.node, session: r.session, outer: r,
		ctx: ctx, end: end, grantedAt: time.Now(),
	}, nil, true
}
