package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The fleet watch: the holders' watch for a mixed fleet: a peer that does not count our
// names (see RWLock.blind) and queues while we hold is granted at once, as
// far as it can tell. An acquisition that lists such a node refuses to
// queue; a holder must hear of one that comes later, and stop.
//
// So while a process holds grants of a lock, it keeps a child watch on the
// lock directory, and lists the directory each time the watch fires: a
// node of a blind peer ends every grant of the lock in the process, with a
// cause that names the dialect to use, within one notification and one
// listing of the peer's create. Its cost, and why it is the least we found:
// the event does not say which child changed, so each change to the
// directory while the process holds costs the process one listing; none
// while nothing changes (W1: a lone holder's watch fires only when its own
// release deletes its node, and then nobody is left to list for), and one
// per holding process, not per grant (the grants of a process share the
// watch). A grant made in one round trip brings the watch that its
// listing set; a grant made after waiting lists once more, since the
// directory changed while it waited.
type fleetWatch struct {
	mu       sync.Mutex
	holders  map[*hold]struct{}
	watching bool               // a goroutine lists and watches
	idle     chan struct{}      // closed when the last holder leaves: the goroutine stops
	stop     context.CancelFunc // ends the goroutine's requests and retries, with idle
}

func (pw *fleetWatch) begin(h *hold) { pw.join(h) }

func (pw *fleetWatch) changed(h *hold, c change) {
	if c == releaseRefused {
		pw.join(h) // the watching may have stopped for our release
	}
}

// join adds h to the holders until it ends. The child watch of the listing
// that granted it, if any, tells of every change since.
func (pw *fleetWatch) join(h *hold) {
	pw.mu.Lock()
	if pw.holders == nil {
		pw.holders = make(map[*hold]struct{})
	}
	_, joined := pw.holders[h]
	pw.holders[h] = struct{}{}
	start := !pw.watching
	var ctx context.Context
	if start {
		pw.watching, pw.idle = true, make(chan struct{})
		ctx, pw.stop = context.WithCancel(context.Background())
	}
	idle := pw.idle
	pw.mu.Unlock()
	if !joined { // a Release refused joins again
		h.whenEnded(func(error) { pw.leave(h) })
	}
	if !start {
		return
	}
	dir := h.listing
	if dir != nil && dir.FiredNow() {
		dir = nil // changed since the listing that granted h: list again
	}
	// Else the listing that granted h showed no blind peer, and nothing has
	// changed since: wait on its watch.
	// Not the lock's background work, which ends without waiting for
	// holders: this ends when they do.
	h.c.Ref()
	go pw.watch(ctx, h.l, h.c, dir, idle)
}

// leave removes h from the holders.
func (pw *fleetWatch) leave(h *hold) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if _, ok := pw.holders[h]; !ok {
		return
	}
	delete(pw.holders, h)
	if len(pw.holders) == 0 && pw.watching {
		pw.stopLocked()
	}
}

func (pw *fleetWatch) stopLocked() {
	pw.watching = false
	close(pw.idle)
	pw.stop()
}

// watch waits for w to fire (at once if nil), lists the directory with a
// new watch, and ends the holders' grants if a blind peer's node is
// listed, for as long as anyone holds.
func (pw *fleetWatch) watch(ctx context.Context, l *RWLock, c *zkclient.Client, w *zkclient.Watch, idle chan struct{}) {
	defer c.Unref()
	// ctx ends with the last holder: a listing given up may still set
	// its watch, private, which fires when the directory next changes.
	var retry zkclient.Backoff
	for {
		if w != nil {
			select {
			case <-w.Fired():
			case <-idle:
				return
			}
			if !pw.anyHolding(idle) {
				return // the change was our own releases
			}
		}
		pw.count()
		lr, next := c.ListW(ctx, l.path)
		r := listed(lr)
		switch {
		case isClosed(idle):
			return
		case r.Err != nil && !zkclient.ConnectionLoss(r.Err) && !zkclient.SessionGone(r.Err) && !errors.Is(r.Err, zk.ErrNoNode):
			// Refused (an ACL that changed): looking again would not help.
			l.log.Warn("rwlock: cannot list the lock directory; a peer that does not see this lock's nodes "+
				"will not be noticed", "lock", l.path, "err", r.Err)
			pw.stopIf(idle)
			return
		case r.Err != nil:
			// A connection loss; or the session's end, or the directory's
			// deletion, which end the holders of the moment (they hear of it
			// from their own watches and the lease), but not those of a new
			// session that may join meanwhile: look again, until the last
			// holder leaves (ctx) or the client is closed.
			if retry.Wait(ctx, c.Conn()) != nil {
				return
			}
			w = nil
			continue
		}
		if m := l.blind(peersOf(r.V)); m != nil {
			pw.endAll(idle, m)
			return
		}
		w, retry = next, zkclient.Backoff{}
	}
}

// anyHolding reports whether a holder is not releasing: a change made by
// our own releases needs no look. If none is, the watching stops here, and
// the next grant to join starts it again.
func (pw *fleetWatch) anyHolding(idle chan struct{}) bool {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if isClosed(idle) {
		return false
	}
	for h := range pw.holders {
		if !h.isReleasing() {
			return true
		}
	}
	pw.stopLocked()
	return false
}

// count counts a listing among the requests of one of the holders (it is
// made for them all), for its GrantEvent.
func (pw *fleetWatch) count() {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for h := range pw.holders {
		h.requests.Add(1)
		return
	}
}

// stopIf stops the watching, if it is still the one that idle ends.
func (pw *fleetWatch) stopIf(idle chan struct{}) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.idle == idle && !isClosed(idle) {
		pw.stopLocked()
	}
}

// endAll ends every holder's grant with a mixed fleet as the cause, and
// stops the watching; unless the watching stopped and started again since
// the listing that found the peer (idle is not the current one): the new
// watching looks for itself.
func (pw *fleetWatch) endAll(idle chan struct{}, m *mixedError) {
	pw.mu.Lock()
	if pw.idle != idle {
		pw.mu.Unlock()
		return
	}
	var hit []*hold
	for h := range pw.holders {
		hit = append(hit, h)
	}
	clear(pw.holders)
	if !isClosed(idle) {
		pw.stopLocked()
	}
	pw.mu.Unlock()
	for _, h := range hit {
		h.l.log.Warn("rwlock: "+m.Error(), "lock", h.l.path, "node", h.path)
		// The peer may hold already: the grant is lost, and its node is
		// deleted once the holder has been told.
		h.lost(fmt.Errorf("%w: %w", errMayLive, m))
	}
}

// peersOf returns the markers of the peers' nodes among children (see
// snapshot.peers).
func peersOf(children []string) uint16 {
	var peers uint16
	for _, name := range children {
		if n, ok := parseNode(name); ok && !n.ours {
			peers |= 1 << n.marker
		}
	}
	return peers
}
