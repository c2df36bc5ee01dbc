package rwlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// How a hold ends without Release. This file holds the causes of a loss,
// the telling, and the node watch from which a hold learns that its node is
// gone.

// errNodeDeleted is the cause of a loss when our node was deleted by
// someone else, an operator or another client, while the session lived.
var errNodeDeleted = errors.New("lock node deleted")

// errMayLive marks causes after which the session, and the node with it,
// may live on. The node must then be deleted once the holder has been told.
var errMayLive = errors.New("the node may outlive the grant")

func lostError(node string, cause error) error {
	return fmt.Errorf("%w: %s: %w", ErrLost, node, cause)
}

// lost ends the hold, and every grant on it, with a cause wrapping ErrLost,
// unless it has ended already. The session may live on after the lease ran
// out, after the connection dropped with no known timeout, or after a
// downgrade of unknown outcome. Then the node is deleted in the background
// once the holder has been told, since the deletion lets the next waiter
// in.
func (h *hold) lost(cause error) {
	var lapsed *zkclient.LeaseLapsedError
	mayLive := errors.As(cause, &lapsed) || errors.Is(cause, zkclient.ErrDisconnected) || errors.Is(cause, errMayLive)
	h.mu.Lock()
	if h.held() {
		now := time.Now()
		h.deadline = now
		// A lease by a bound tells no deadline. The server may have granted
		// less, and the session may be gone already.
		if t, granted := h.c.Timeout(h.l.sessionTimeout, h.session); lapsed != nil && !lapsed.Bound && granted {
			h.deadline = now.Add(max(lapsed.Left-zkclient.RelayAllowance(t), 0))
		}
	}
	h.mu.Unlock()
	var finish func(path, guid string, session int64)
	if mayLive {
		// Reserved before the holder is told, so that anyone who waits for
		// the lock's background work after Done waits for this deletion.
		var cancel func()
		finish, cancel = h.l.reserveFinish(h.c)
		defer cancel()
	}
	if !h.end(lostError(h.path, cause)) {
		return
	}
	h.l.debug("lost: "+cause.Error(), h.path)
	if finish != nil {
		finish(h.path, "", h.session)
	}
}

// whyDeleted names the cause of our node's disappearance, the end of our
// session or someone's delete.
func (h *hold) whyDeleted() error {
	if h.c.Conn().SessionID() != h.session {
		return zk.ErrSessionExpired
	}
	return errNodeDeleted
}

// setReleasing marks our own delete under way, or over. It reports whether
// a deletion event was ignored meanwhile.
func (h *hold) setReleasing(on bool) (ignored bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releasing, ignored, h.ignored = on, h.ignored, false
	return ignored
}

// isReleasing reports whether the last handle's delete is under way.
func (h *hold) isReleasing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.releasing
}

// countUnlessReleasing counts a request among the hold's, unless its
// last handle is releasing it or it ended: then its figures may be told.
func (h *hold) countUnlessReleasing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.releasing || !h.held() {
		return false
	}
	h.requests.Add(1)
	return true
}

// The node watch. A hold learns that its node was deleted from a watch set
// from the start. Where the acquisition left one, it costs no extra
// request. That is the data watch on its own node that a waiter sets, or
// the child watch on the directory that the first listing sets. A child
// watch also fires on the changes of other nodes. Then the hold sets a data
// watch on its own node, with one request. That watch fires only when the
// node goes or its data changes, as a Downgrade does.

// watchFrom starts watching the node with what the acquisition left.
func (h *hold) watchFrom(own, dir *zkclient.Watch) {
	switch {
	case own != nil:
		h.subscribe(own)
	case dir != nil:
		h.subscribe(dir)
	default:
		h.watchNode()
	}
}

// watchNode sets a data watch on the node, on a goroutine of its own,
// retrying through disconnections until it is set or the hold ends.
func (h *hold) watchNode() {
	h.c.Ref()
	go func() {
		defer h.c.Unref()
		var retry zkclient.Backoff
		for h.held() {
			r, w := h.c.GetW(h.ctx, h.path)
			switch {
			case r.Err == nil:
				h.subscribe(w)
				return
			case errors.Is(r.Err, zk.ErrNoNode):
				if !h.ownRelease() {
					h.lost(h.whyDeleted())
				}
				return
			case zkclient.SessionGone(r.Err):
				h.lost(r.Err)
				return
			case !zkclient.ConnectionLoss(r.Err):
				h.l.log.Warn("rwlock: cannot watch lock node; its deletion will not be noticed",
					"lock", h.l.path, "node", h.path, "err", r.Err)
				return
			}
			if retry.Wait(h.ctx, h.c.Conn()) != nil {
				return
			}
		}
	}()
}

// subscribe hands the node watch's event to watchEvent.
func (h *hold) subscribe(w *zkclient.Watch) {
	cancel := w.Subscribe(h.watchEvent)
	h.mu.Lock()
	if !h.held() {
		h.mu.Unlock()
		cancel()
		return
	}
	h.unwatch = cancel
	h.mu.Unlock()
}

func (h *hold) watchEvent(ev zk.Event) {
	switch {
	case !h.held(), h.ownRelease():
	case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired) && h.c.Conn().SessionID() == h.session:
		h.watchNode() // a shared watch of an earlier session ended, and ours lives on
	case ev.Type == zk.EventNotWatching:
		h.lost(ev.Err) // the session expired, or the connection was closed
	case ev.Type == zk.EventNodeDeleted && ev.Path == h.path:
		h.lost(h.whyDeleted())
	default:
		h.watchNode() // another node changed, or ours was downgraded, so watch ours
	}
}

// ownRelease reports whether our own Release is under way, so that an event
// about the node is no loss. It notes that such an event was set aside.
func (h *hold) ownRelease() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ignored = h.ignored || h.releasing
	return h.releasing
}
