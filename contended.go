package rwlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Contended returns a channel that is closed once a conflicting request has
// queued behind this grant's node: a writer behind a read grant, or anyone
// behind a write grant. A long job can then finish its step and release
// early. It is the cooperative half of preemption, and nothing ends the
// grant for it.
//
// It costs no request while nobody queues, when the listing that granted
// the node set a child watch that has not fired. Otherwise its first call
// lists the lock directory once. Every change of the directory's children
// then costs one listing, until a conflict shows or the grant ends. The
// channel closes within one notification of the conflicting create on a
// healthy connection. It stays open after the grant ends if nobody
// conflicting queued meanwhile. The grants on one node share it.
func (g *Grant) Contended() <-chan struct{} { return g.h.tailOf().contended }

// A tail watches the lock directory for a conflicting node queued behind
// one node of ours. It keeps a child watch on the directory, set by a
// listing that showed no conflicting node after ours. Any create fires
// it. It then lists again, with a new watch, until a listing shows a
// conflict, or our node gone. A watch that has not fired costs nothing.
// So a node nobody queues behind is watched for free.
//
// The tail is what a cached node's re-grant proves its place with (see
// cache.go). It records the connection's count of sessions before each
// listing, so that a re-grant can tell a watch set on the current
// connection from one set again after a reconnection.
type tail struct {
	l       *RWLock
	c       *zkclient.Client
	name    string // our node, relative to the lock directory
	session int64  // the session that owns it
	mode    Mode   // whom it conflicts with; guarded by mu, since a Downgrade changes it

	contended chan struct{}   // closed when a conflicting node is listed behind ours
	gone      chan struct{}   // closed when the tail stops: our node gone, a conflict, or stop
	onEnd     func(live bool) // told whether our node may live on: a conflict, or a refusal
	running   *sync.WaitGroup // counts the goroutine, if not nil
	onFire    func() bool     // asked, if not nil, as the watch fires; true ends the tail without a listing

	mu       sync.Mutex
	w        *zkclient.Watch // the child watch of the last listing that showed no conflict; nil while listing
	listedAt time.Time       // when that listing was sent
	connects uint64          // the connection's count of sessions before it was sent
	settled  chan struct{}   // closed, and replaced, each time w changes
	stopped  bool
	cancel   context.CancelFunc
}

// newTail makes the tail of our node, from the child watch of a listing
// sent at listedAt that showed no conflicting node behind ours, if not nil.
// connects is the connection's count of sessions before that listing. It
// does not start.
func newTail(l *RWLock, c *zkclient.Client, path string, session int64, mode Mode) *tail {
	return &tail{
		l: l, c: c, name: path[len(l.path)+1:], session: session, mode: mode,
		contended: make(chan struct{}), gone: make(chan struct{}), settled: make(chan struct{}),
	}
}

// start runs the tail from w, or from a new listing if w is nil or has
// fired. onEnd, if not nil, hears once of its end, on its goroutine.
func (t *tail) start(w *zkclient.Watch, listedAt time.Time, connects uint64, onEnd func(live bool)) {
	if w != nil && w.FiredNow() {
		w = nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.mu.Lock()
	if t.stopped {
		// Stopped before it started, as when the hold ended first: a tail
		// started now would run, with a use of the client, until its watch
		// fired. So it just ends.
		t.mu.Unlock()
		cancel()
		close(t.gone)
		return
	}
	t.w, t.listedAt, t.connects, t.cancel, t.onEnd = w, listedAt, connects, cancel, onEnd
	t.mu.Unlock()
	t.c.Ref()
	if t.running != nil {
		t.running.Add(1)
	}
	go t.run(ctx)
}

// stop ends the tail. Its listing under way is given up.
func (t *tail) stop() {
	t.mu.Lock()
	t.stopped = true
	cancel := t.cancel
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// state returns the watch of the last listing that showed no conflict, when
// it was sent, and the count of sessions before it. w is nil while a
// listing is under way. settled is closed when that changes.
func (t *tail) state() (w *zkclient.Watch, listedAt time.Time, connects uint64, settled <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w, t.listedAt, t.connects, t.settled
}

// set records a listing that showed no conflict behind ours.
func (t *tail) set(w *zkclient.Watch, listedAt time.Time, connects uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w, t.listedAt, t.connects = w, listedAt, connects
	close(t.settled)
	t.settled = make(chan struct{})
}

func (t *tail) run(ctx context.Context) {
	if t.running != nil {
		defer t.running.Done()
	}
	defer t.c.Unref()
	conflict, refused := false, false
	defer func() {
		t.mu.Lock()
		t.w, t.stopped = nil, true
		close(t.settled)
		t.settled = make(chan struct{})
		onEnd := t.onEnd
		t.mu.Unlock()
		close(t.gone)
		if onEnd != nil {
			onEnd(conflict || refused)
		}
	}()
	var retry zkclient.Backoff
	w, _, _, _ := t.state()
	for {
		if w != nil {
			select {
			case <-w.Fired():
			case <-ctx.Done():
				return
			}
			if w.Event().Type == zk.EventNotWatching {
				return // the session ended, and our node with it, or the connection was closed
			}
			if t.onFire != nil && t.onFire() {
				return // the owner gave the node up, with no need to know why
			}
		}
		t.set(nil, time.Time{}, 0) // listing: no re-grant rests on a fired watch
		connects, _ := t.c.ConnectCount()
		sent := time.Now()
		lr, next := t.c.ListW(ctx, t.l.path)
		r := listed(lr)
		switch {
		case ctx.Err() != nil:
			return
		case r.Err != nil && zkclient.ConnectionLoss(r.Err):
			if retry.Wait(ctx, t.c.Conn()) != nil {
				return
			}
			w = nil
			continue
		case errors.Is(r.Err, zk.ErrClosing):
			return // the connection was closed, which ends the session
		case r.Err != nil && !zkclient.SessionGone(r.Err) && !errors.Is(r.Err, zk.ErrNoNode):
			refused = true // by an ACL, say: our node may live on
			return
		case r.Err != nil, r.Session != t.session:
			return // the directory or the session is gone, and our node with it
		}
		snap, err := takeSnapshot(r.V, t.name, nil)
		switch {
		case errors.Is(err, errNotListed):
			return // our node is gone, and its holder hears of that from its own watch
		case err != nil:
			return
		case t.conflicts(snap):
			conflict = true
			close(t.contended)
			return
		}
		retry = zkclient.Backoff{}
		w = next
		t.set(w, sent, connects)
	}
}

// conflicts reports whether a listing shows a node behind ours that would
// wait for it. That is a writer behind a reader, anyone behind a writer,
// or a peer's node that does not see ours, which the fleet watch handles.
func (t *tail) conflicts(snap snapshot) bool {
	if t.l.blind(snap.peers) != nil {
		return true
	}
	t.mu.Lock()
	mode := t.mode
	t.mu.Unlock()
	if mode == Write {
		return snap.after
	}
	return snap.laterWriter
}

// tailKey is the slot of a hold's tail.
type tailKey struct{}

// A tailSlot keeps what the hold's grant listing told, until a call
// of Contended, or the cache, starts the tail.
type tailSlot struct {
	once     sync.Once
	dir      *zkclient.Watch // the child watch of the listing that granted the node
	listedAt time.Time
	behind   bool // that listing showed a conflicting node behind ours

	mu sync.Mutex
	t  *tail // set once, in once; guarded by mu for changed
}

// set records the tail, in once.
func (cs *tailSlot) set(t *tail) {
	cs.mu.Lock()
	cs.t = t
	cs.mu.Unlock()
}

// tailOf returns the hold's tail, started. A hold of a cached node
// shares the node's tail; any other starts its own on first use, which
// stops when the hold ends.
func (h *hold) tailOf() *tail {
	cs := h.slot(tailKey{}, func() any { return &tailSlot{} }).(*tailSlot)
	cs.once.Do(func() {
		if cs.t != nil {
			return // the cache's
		}
		t := newTail(h.l, h.c, h.path, h.session, h.currentMode())
		cs.set(t)
		if cs.behind {
			close(t.contended)
			close(t.gone)
			return
		}
		n, _ := h.c.ConnectCount()
		t.start(cs.dir, cs.listedAt, n, nil)
		h.whenEnded(func(error) { t.stop() })
	})
	return cs.t
}

// contentionCap is the capability that keeps, for Contended, what the
// listing that granted the node told. It sends nothing.
type contentionCap struct{}

func (contentionCap) begin(h *hold) {
	cs := h.slot(tailKey{}, func() any { return &tailSlot{} }).(*tailSlot)
	cs.dir, cs.listedAt, cs.behind = h.listing, h.listedAt, h.behind
}

// changed makes a downgraded node's tail judge conflicts as a reader's.
func (contentionCap) changed(h *hold, c change) {
	if c != downgraded {
		return
	}
	cs := h.slot(tailKey{}, func() any { return &tailSlot{} }).(*tailSlot)
	cs.mu.Lock()
	t := cs.t // if not started yet, the start takes the hold's mode
	cs.mu.Unlock()
	if t != nil {
		t.mu.Lock()
		t.mode = Read
		t.mu.Unlock()
	}
}
