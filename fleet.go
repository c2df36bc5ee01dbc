package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// fleetWatch is the holders' watch for a mixed fleet. A peer that does not
// count our names (see RWLock.blind) and queues while we hold is granted at
// once, as far as it can tell. Nothing we do can prevent that overlap. We
// can only end it, and refuse to add to it. An acquisition that lists such
// a node refuses to queue (see member.locate). A holder finds one that
// comes later by a check of its own, and stops.
//
// The promise. A grant made before a blind peer's create is told within D
// of that create, as the server orders it. D is fleetInterval plus one
// listing's round trip, on a healthy connection. A grant made after the
// create, on a listing from before it, is told by then too, or a round
// trip after its grant if that is later. A node of a blind peer ends every
// grant of the lock in the process, with a cause that names the dialect to
// use.
//
// How. While a process holds grants of a lock, it keeps a child watch on
// the lock directory. When the watch fires, it lists the directory with a
// new watch. But it sends a listing no sooner than one interval after the
// one before. So it lists at most once per interval while the directory
// changes, and never once per change. While nothing changes, it lists
// nothing.
//
// Why D holds. A listing that showed no blind peer proves that none was
// there when the server read it. So only a peer created later matters. Its
// create fires the watch that listing set. The next listing goes out at the
// later of that event and one interval after the listing before was sent.
// That listing was sent before the create. And on a healthy connection the
// event arrives within the interval. So the next listing goes out at most
// one interval after the create. It shows the peer's node a round trip
// later, unless the peer has gone.
//
// A grant starts the watching from the listing it was granted on, which
// showed no blind peer. If that listing's watch has not fired, nothing has
// changed since, so the watching waits for it. Else the first check is due
// one interval after that listing was sent. A grant that finds the watching
// under way adds nothing to do. If its listing came later, the watching's
// watch fires for every create since. If the watching's came later, it
// would show a peer that the grant's listing missed. Then the watching
// ends the holders of the moment and stops. A grant that joins after that
// starts it again from its own listing, as above.
//
// What it costs. At most one listing per interval per holding process
// while the directory changes, none while it does not. The grants of a
// process share the watching. A grant released before its first check
// lists nothing, as in W3 (see BENCHMARKS.md). A grant made more than an
// interval after its listing, after a long wait, lists once at its grant,
// as in W6r. A lone holder lists nothing, as in W1. Its watch fires only
// when its own release deletes its node, and then nobody is left to list
// for.
//
// Why no announcement. An acquisition that finds a blind peer could tell
// the holders through the lock directory's data, in one notification. We
// do not. That data holds one record per purpose (see lockname's data
// format), but clients older than the format take any change of it for a
// revocation. And every holder would have to watch the data from its
// grant. The check above keeps the promise without either. The other uses
// need no announcement either. Revocation reasons live in the revocation
// record. Leader election's observers watch the leader's node. Caching's
// marker is in the node's own data.
type fleetWatch struct {
	mu       sync.Mutex
	holders  map[*hold]struct{}
	watching bool               // a goroutine lists and watches
	idle     chan struct{}      // closed when the last holder leaves, which stops the goroutine
	stop     context.CancelFunc // ends the goroutine's requests and retries, with idle
}

// fleetInterval is the least time between two listings of the fleet watch.
// With 100 ms, D is at most 200 ms while a listing's round trip takes at
// most 100 ms. A shorter interval would list more often in a busy
// directory; a longer one would leave the overlap with a peer longer.
const fleetInterval = 100 * time.Millisecond

func (pw *fleetWatch) begin(h *hold) { pw.join(h) }

func (pw *fleetWatch) changed(h *hold, c change) {
	if c == releaseRefused {
		// mutant: fleet-refused-restart
		pw.join(h) // the watching may have stopped for our release
	}
}

// join adds h to the holders until it ends. If no goroutine watches, it
// starts one from the listing that granted h.
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
	// mutant: fleet-due-from-grant
	dir, due := h.listing, h.listedAt.Add(fleetInterval)
	if dir != nil && dir.FiredNow() {
		dir = nil // changed since the listing that granted h, so check when due
	}
	// This goroutine is not the lock's background work, which ends without
	// waiting for holders. It ends when they do.
	h.c.Ref()
	go pw.watch(ctx, h.l, h.c, dir, due, idle)
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

// watch waits for w to fire, or not at all if w is nil. It then waits until
// due, lists the directory with a new watch, and ends the holders' grants
// if a blind peer's node is listed. It goes on for as long as anyone holds.
func (pw *fleetWatch) watch(ctx context.Context, l *RWLock, c *zkclient.Client, w *zkclient.Watch, due time.Time, idle chan struct{}) {
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
		// The holders' own releases change the directory too. They need no
		// look, and a grant released before the check costs no listing:
		// count then finds no holder that is not releasing.
		if !pw.await(due, idle) || !pw.count(idle) {
			return
		}
		sent := time.Now()
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
			// client is closed. The backoff spaces the listings.
			if retry.Wait(ctx, c.Conn()) != nil {
				return
			}
			w, due = nil, time.Time{}
			continue
		}
		if m := l.blind(peersOf(r.V)); m != nil {
			pw.endAll(idle, m)
			return
		}
		if err := l.uncounted(r.V); err != nil {
			pw.endAll(idle, err) // a release that predates capacities holds regardless (see capacity.go)
			return
		}
		// mutant: fleet-due-from-answer
		w, due, retry = next, sent.Add(fleetInterval), zkclient.Backoff{}
	}
}

// await waits until due, the earliest the next listing may go out. It
// reports false if the last holder left meanwhile.
func (pw *fleetWatch) await(due time.Time, idle chan struct{}) bool {
	// mutant: fleet-never-checks
	wait := time.Until(due)
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-idle:
		return false
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

// endAll ends every holder's grant with a mixed fleet, m, as the cause, and
// stops the watching. It does nothing if the watching stopped and started
// again since the listing that found the peer, so that idle is not the
// current one. The new watching looks for itself.
func (pw *fleetWatch) endAll(idle chan struct{}, m error) {
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
		n, ok := parseNode(name)
		switch {
		case ok && !n.ours:
			peers |= 1 << n.marker
		// mutant: fleet-ignores-curator-semaphore
		case !ok && lockname.CuratorSemaphore(name):
			peers |= 1 << lockname.LeaseMarker() // as takeSnapshot counts them
		}
	}
	return peers
}
