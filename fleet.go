package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// fleetWatch is the holders' watch for a mixed fleet. A peer that does not
// count our names (see RWLock.blind) and queues while we hold is granted at
// once, as far as it can tell. An acquisition that lists such a node
// refuses to queue. A holder must hear of one that comes later, and stop.
//
// So while a process holds grants of a lock, it keeps a child watch on the
// lock directory. It lists the directory each time the watch fires. A node
// of a blind peer ends every grant of the lock in the process, with a cause
// that names the dialect to use. That happens within one notification and
// one listing of the peer's create.
//
// Its cost, and why it is the least we found. The event does not say which
// child changed. So each change to the directory while the process holds
// costs the process one listing. It costs none while nothing changes. In W1
// (see BENCHMARKS.md), a lone holder's watch fires only when its own
// release deletes its node, and then nobody is left to list for. And it
// costs one listing per holding process, not per grant, since the grants of
// a process share the watch. A grant made in one round trip brings the
// watch that its listing set. A grant made after waiting lists once more,
// since the directory changed while it waited.
type fleetWatch struct {
	mu       sync.Mutex
	holders  map[*hold]struct{}
	watching bool               // a goroutine lists and watches
	idle     chan struct{}      // closed when the last holder leaves, which stops the goroutine
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
		dir = nil // changed since the listing that granted h, so list again
	}
	// Else the listing that granted h showed no blind peer, and nothing has
	// changed since. So wait on its watch. This goroutine is not the lock's
	// background work, which ends without waiting for holders. It ends when
	// they do.
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

// watch waits for w to fire, or not at all if w is nil. It then lists the
// directory with a new watch, and ends the holders' grants if a blind
// peer's node is listed. It goes on for as long as anyone holds.
func (pw *fleetWatch) watch(ctx context.Context, l *RWLock, c *zkclient.Client, w *zkclient.Watch, idle chan struct{}) {
	defer c.Unref()
	// ctx ends with the last holder. A listing given up may still set its
	// watch, private, which fires when the directory next changes.
	var retry zkclient.Backoff
	for {
		if w != nil {
			select {
			case <-w.Fired():
			case <-idle:
				return
			}
		}
		if !pw.count(idle) {
			return // every holder is releasing: nothing to look for
		}
		lr, next := c.ListW(ctx, l.path)
		r := listed(lr)
		switch {
		case isClosed(idle):
			return
		case r.Err != nil && !zkclient.ConnectionLoss(r.Err) && !zkclient.SessionGone(r.Err) && !errors.Is(r.Err, zk.ErrNoNode):
			// Refused, say by an ACL that changed. Looking again would not
			// help.
			l.log.Warn("rwlock: cannot list the lock directory; a peer that does not see this lock's nodes "+
				"will not be noticed", "lock", l.path, "err", r.Err)
			pw.stopIf(idle)
			return
		case r.Err != nil:
			// A connection loss, the session's end, or the directory's
			// deletion. The latter two end the holders of the moment, who
			// hear of it from their own watches and the lease. They do not
			// end the holders of a new session that may join meanwhile. So
			// look again, until the last holder leaves and ends ctx, or the
			// client is closed.
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

// count counts a listing among the requests of a holder that is not
// releasing, for its GrantEvent, and reports whether there was one. A
// holder that is releasing may have told its figures already. The listing
// is made for them all. If every holder is releasing, there is nothing to
// look for: a change of the directory was our own releases, and a grant
// released before its first look needs none. The watching stops here,
// and the next grant to join starts it again.
func (pw *fleetWatch) count(idle chan struct{}) bool {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if isClosed(idle) {
		return false
	}
	for h := range pw.holders {
		if h.countUnlessReleasing() {
			return true
		}
	}
	pw.stopLocked()
	return false
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
// stops the watching. It does nothing if the watching stopped and started
// again since the listing that found the peer, so that idle is not the
// current one. The new watching looks for itself.
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
		// The peer may hold already. So the grant is lost, and its node is
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
