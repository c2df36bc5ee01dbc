package rwlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// How a grant ends without Release: the causes of a loss, the telling,
// and the node watch from which a grant learns that its node is gone.

// errNodeDeleted is the cause of a loss when our node was deleted by
// someone else (an operator, another client) while the session lived.
var errNodeDeleted = errors.New("lock node deleted")

// errMayLive marks causes after which the session, and the node with it,
// may live on: the node must be deleted once the holder has been told.
var errMayLive = errors.New("the node may outlive the grant")

// holder is a grant as the lease clock judges it (zkclient.Holder): the
// same pointer, so that a grant is held and unheld by its identity.
type holder Grant

func (h *holder) Session() int64       { return h.session }
func (h *holder) Limit() time.Duration { return h.l.sessionTimeout }
func (h *holder) Lost(cause error)     { (*Grant)(h).lost(cause) }

func lostError(node string, cause error) error {
	return fmt.Errorf("%w: %s: %w", ErrLost, node, cause)
}

// lost ends the grant with a cause wrapping ErrLost, unless it has ended
// already. Where the session may live on (the lease ran out, the
// connection dropped with no known timeout, a downgrade of unknown
// outcome), its node is deleted in the background, after the holder has
// been told, since the deletion lets the next waiter in.
func (g *Grant) lost(cause error) {
	var lapsed *zkclient.LeaseLapsedError
	mayLive := errors.As(cause, &lapsed) || errors.Is(cause, zkclient.ErrDisconnected) || errors.Is(cause, errMayLive)
	g.mu.Lock()
	if g.ctx.Err() == nil {
		now := time.Now()
		g.deadline = now
		// A lease by a bound tells no deadline: the server may have
		// granted less, and the session may be gone already.
		if t, granted := g.c.Timeout(g.l.sessionTimeout, g.session); lapsed != nil && !lapsed.Bound && granted {
			g.deadline = now.Add(max(lapsed.Left-zkclient.RelayAllowance(t), 0))
		}
	}
	g.mu.Unlock()
	var finish func(path, guid string, session int64)
	if mayLive {
		// Reserved before the holder is told, so that anyone who waits for
		// the lock's background work after Done waits for this deletion.
		var cancel func()
		finish, cancel = g.l.reserveFinish(g.c)
		defer cancel()
	}
	if !g.end(lostError(g.node, cause)) {
		return
	}
	g.l.debug("lost: "+cause.Error(), g.node)
	if finish != nil {
		finish(g.node, "", g.session)
	}
}

// whyDeleted names the cause of our node's disappearance: the end of our
// session, or someone's delete.
func (g *Grant) whyDeleted() error {
	if g.c.Conn().SessionID() != g.session {
		return zk.ErrSessionExpired
	}
	return errNodeDeleted
}

// setReleasing marks our own delete under way, or over; it reports
// whether a deletion event was ignored meanwhile.
func (g *Grant) setReleasing(on bool) (ignored bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releasing, ignored, g.ignored = on, g.ignored, false
	return ignored
}

// The node watch: a grant learns that its node was deleted from a watch
// that is set from the start, at no extra request where the acquisition
// left one: the data watch on its own node that a waiter sets, or the
// child watch on the directory that the first listing sets. A child watch
// also fires on the changes of other nodes; then the grant sets a data
// watch on its own node (one request), which fires only when the node
// goes or its data changes (a Downgrade).

// watchFrom starts watching the node with what the acquisition left.
func (g *Grant) watchFrom(own, dir *zkclient.Watch) {
	switch {
	case own != nil:
		g.subscribe(own)
	case dir != nil:
		g.subscribe(dir)
	default:
		g.watchNode()
	}
}

// watchNode sets a data watch on the node, on a goroutine of its own,
// retrying through disconnections until it is set or the grant ends.
func (g *Grant) watchNode() {
	g.c.Ref()
	go func() {
		defer g.c.Unref()
		var retry zkclient.Backoff
		for g.ctx.Err() == nil {
			r, w := g.c.GetW(g.ctx, g.node)
			switch {
			case r.Err == nil:
				g.token.CompareAndSwap(0, r.V.Stat.Czxid)
				g.subscribe(w)
				return
			case errors.Is(r.Err, zk.ErrNoNode):
				if !g.ownRelease() {
					g.lost(g.whyDeleted())
				}
				return
			case zkclient.SessionGone(r.Err):
				g.lost(r.Err)
				return
			case !zkclient.ConnectionLoss(r.Err):
				g.l.log.Warn("rwlock: cannot watch lock node; its deletion will not be noticed",
					"lock", g.l.path, "node", g.node, "err", r.Err)
				return
			}
			if retry.Wait(g.ctx, g.c.Conn()) != nil {
				return
			}
		}
	}()
}

// subscribe hands the node watch's event to watchEvent.
func (g *Grant) subscribe(w *zkclient.Watch) {
	cancel := w.Subscribe(g.watchEvent)
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		cancel()
		return
	}
	g.unwatch = cancel
	g.mu.Unlock()
}

func (g *Grant) watchEvent(ev zk.Event) {
	switch {
	case g.ctx.Err() != nil, g.ownRelease():
	case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired) && g.c.Conn().SessionID() == g.session:
		g.watchNode() // a shared watch of an earlier session ended: ours lives on
	case ev.Type == zk.EventNotWatching:
		g.lost(ev.Err) // the session expired, or the connection was closed
	case ev.Type == zk.EventNodeDeleted && ev.Path == g.node:
		g.lost(g.whyDeleted())
	default:
		g.watchNode() // another node changed, or ours was downgraded: watch ours
	}
}

// ownRelease reports whether our own Release is under way, so that an
// event about the node is no loss; it notes that one was set aside.
func (g *Grant) ownRelease() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ignored = g.ignored || g.releasing
	return g.releasing
}
