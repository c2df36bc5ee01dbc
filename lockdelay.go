package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Lock-delay: after an unclean loss ahead, the next grant waits d more.
//
// A holder that vanished without releasing may still act: a process paused
// past the head start, or a command that runs on while its exec is stopped.
// A resource that checks no token is safe from it only if the next holder
// starts later. Chubby and Consul wait a fixed delay for that.
//
// How a waiter tells a release from a loss. With the option, every release
// marks its node in the transaction that deletes it (see releaseMark). So a
// holder that went cleanly fires a data change at the nodes watching it,
// never a plain deletion. Without the option only a writer that waited
// marks. A reader, a writer granted at first try and a waiter that gives up
// delete plainly. So the option costs each release a two-operation multi in
// place of a delete, in one round trip still, and each watcher one event
// more. And a writer that waits behind one of our writers reads it again
// after a data change, unless its child watch told the deletion already:
// at worst a request and a round trip more per handoff (see lookAgain).
//
// A node leaves the snapshot (see watch.go) in one of these ways:
//   - A writer's data change and its deletion that came together, as one
//     release's transaction sends them (see markedRelease). Clean.
//   - A reader's data change: a reader changes its data only with its
//     release's mark, in the transaction that deletes it. Clean.
//   - Pruned by a later writer's mark: that writer held, having waited out
//     the delay of every loss it heard of. We come after its grant. A loss
//     it never heard of, as when its listing came after the node went, we
//     never heard of either, since we watched that writer alone. Clean.
//   - Its deletion with a data watch still set, an answer that it is
//     missing, or absence from a later listing, whatever data change came
//     before. Nothing proves it released. Unclean: the grant waits until d
//     after we learned it.
//
// Everything else errs towards waiting. A waiter that gave up deletes
// plainly, and so costs the one behind it d. A node that went before the
// waiter's first look at it costs d too: a candidate that queues as the
// leader resigns waits, since nothing can tell it how the node went. A
// deletion by hand, an ACL that forbids the mark, a hold limit reached and
// a queue again after a session expiry all count as losses.
//
// A writer's data change is a release's mark, a Proclaim or a downgrade.
// The last two leave the node in place, and its session may expire after.
// The server expires it a timeout after the change at the earliest. But the
// waiter may hear of both late and at once, and it has no clock of the
// server's: a pause of its own, or its read queued behind a slow network.
// So a change proves a release only when the deletion came with it, as one
// release's transaction sends them: read within markGap of the change, on
// the connection that set the watches. Otherwise the waiter reads the node
// again. A node still there was changed in place; a missing node counts as
// a loss.
//
// What still defeats it: a change and a deletion of much later that reach
// the waiter's client in one burst. A lagging follower that catches up does
// that, and so does a waiter whose process was stopped between them. Its
// session must outlive the stop; a longer timeout than the leader's allows
// that. And a plain deletion within markGap after a Proclaim or a
// downgrade: a hold limit reached, a lost grant's node deleted in the
// background, a deletion by hand.
//
// What it costs a clean release: the delay, when go-zookeeper reads the
// deletion over markGap after the change. Also on a connection that does
// not count its sessions, as one not made by Dial. And when the release
// comes while the waiter reconnects: go-zookeeper sets the watches again,
// and the server answers a gone node with a plain deletion. A waiter that
// lists after a data change owes the delay for the same reason. And a
// successor reads its leader again markGap after each Proclaim. A reader
// behind a leader sets a child watch on it too: a request more per look.
//
// A peer's node never marks, so its every release counts as a loss.
//
// Every client of a path must give the same delay, as it must the same
// dialect. The proofs below lean on the nodes between a loss and a waiter
// waiting as long.
//
// Not the immediate successor. A writer behind a run of readers watches
// them all. A reader of the run that expires fires its data watch with a
// deletion, so the writer owes the delay, though it waits on for the
// readers left. A node two places back, behind that writer, waits for the
// writer's release, which comes after the writer's delayed grant. So it too
// starts no sooner than d after the loss was seen. A reader watches the
// nearest writer before it alone; readers lost ahead never exclude it.
//
// What it cannot cover: a node first listed after the loss sees nothing
// go. Only waiters that heard of the loss are held back, and later
// acquisitions of the same RWLock, which remembers. A newcomer elsewhere
// that finds the queue empty is granted at once. The delay counts on the
// waiter's monotonic clock, from when its goroutine took the event, which
// is after the server's deletion.

// WithLockDelay makes every grant wait d more after an unclean loss ahead
// of it: a holder whose session expired, or whose node was deleted by hand,
// lets the next waiter in only d after the waiter learned of the deletion.
// A Release, a Resign, or a waiter giving up hands over at once, or after
// d for a give-up. Every release then marks its node as it deletes it, in
// one multi. TryLock and TryRLock fail with ErrWouldBlock while a delay is
// owed. It applies to elections as to locks. Every client of the lock's
// path must give the same d: a waiter between the loss and a later node
// holds that node back only as long as its own delay.
func WithLockDelay(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.err = fmt.Errorf("%w: lock delay %v", ErrInvalidArgument, d)
		}
		o.lockDelay = d
	}
}

// heardLoss is when the lock's acquisitions may be granted again after the
// losses they heard of. A waiter that heard of a loss, gave up and asks
// again makes a new node, which sees nothing go; the lock remembers.
type heardLoss struct {
	mu    sync.Mutex
	until time.Time
}

func (h *heardLoss) raise(until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if until.After(h.until) {
		h.until = until
	}
}

func (h *heardLoss) get() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until
}

// lockDelay is one member's knowledge of the losses ahead of it.
type lockDelay struct {
	until time.Time // no grant before; zero when nothing is owed
}

// lost notes a node ahead gone without proof of a release.
func (m *member) lost(name string) {
	if m.l.lockDelay <= 0 {
		return
	}
	// mutant: lock-delay-early
	until := time.Now().Add(m.l.lockDelay)
	if until.After(m.delay.until) {
		m.delay.until = until
	}
	m.l.heardLoss.raise(until)
	m.l.debug("a node ahead went without a release; the grant waits", m.l.path+"/"+name)
}

// markGap bounds the time between a release's two events, its mark's data
// change and its deletion. The server sends them back to back, as one
// transaction's. A session expiry comes a session timeout after the change
// at the earliest, and ZooKeeper grants none shorter than two ticks.
const markGap = 100 * time.Millisecond

// markedRelease reports whether a writer's data change and its deletion
// came as one release's transaction sends them: the change, then the
// deletion within markGap, on the connection that set the look's watches.
// A reconnection between them can join a Proclaim's change to a deletion
// of much later, replayed at the new connection from the server's state.
func (m *member) markedRelease(l *look) bool {
	if l.going == nil || !l.going.FiredNow() || l.going.Event().Type != zk.EventNodeDeleted {
		return false
	}
	if !l.data.FiredNow() || l.data.Event().Type != zk.EventNodeDataChanged {
		return false
	}
	if l.going.FiredAt().Sub(l.data.FiredAt()) >= markGap {
		return false
	}
	n, known := m.a.c.ConnectCount()
	// mutant: lock-delay-mark-across-reconnection
	return known && l.counted && n == l.connects
}

// awaitDeletion waits, up to markGap after a writer's data change, for the
// deletion that comes with a release's mark.
func (m *member) awaitDeletion(ctx context.Context, l *look) {
	if l.going.FiredNow() {
		return
	}
	t := time.NewTimer(time.Until(l.data.FiredAt().Add(markGap)))
	defer t.Stop()
	select {
	case <-l.going.Fired():
	case <-t.C:
	case <-ctx.Done():
	}
}

// owesDelay reports whether a grant must wait now.
func (m *member) owesDelay() bool {
	if m.l.lockDelay <= 0 {
		return false
	}
	if until := m.l.heardLoss.get(); until.After(m.delay.until) {
		m.delay.until = until
	}
	return time.Now().Before(m.delay.until)
}

// vanished notes as lost the nodes of the snapshot that a new listing of
// children lacks. Nothing told how they went. A data change seen before
// proves nothing: it may have been a Proclaim or a downgrade.
func (m *member) vanished(children []string) {
	if m.l.lockDelay <= 0 || len(m.snap.before) == 0 {
		return
	}
	present := make(map[string]bool, len(children))
	for _, c := range children {
		present[c] = true
	}
	for _, n := range m.snap.before {
		// mutant: lock-delay-vanished
		if !present[n.name] {
			m.lost(n.name)
		}
	}
}

// adoptSnapshot keeps the nodes before ours that the listing which found
// our node showed, so that the next listing tells which of them went.
func (m *member) adoptSnapshot(children []string) {
	if m.l.lockDelay <= 0 {
		return
	}
	if snap, err := takeSnapshot(children, m.node, nil); err == nil {
		m.snap = snap
	}
}

// waitDelay waits out the delay owed, while our node's watch is quiet. It
// returns stepWait when the wait is over, and the grant may go on.
func (m *member) waitDelay(ctx context.Context) (step, error) {
	if !m.owesDelay() {
		return stepWait, nil
	}
	m.waited = true
	t := time.NewTimer(time.Until(m.delay.until))
	defer t.Stop()
	var own <-chan struct{}
	if m.own.watch != nil {
		own = m.own.watch.Fired()
	}
	select {
	case <-t.C:
		return stepWait, nil
	case <-own:
		return m.ownEvent(m.own.watch.Event())
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// lookAgain reads a writer of ours ahead again after a data change, with a
// new data watch, for a writer that waits with a lock-delay. The change was
// a release's mark if the node's deletion came with it (markedRelease), so
// it waits for that a moment. Otherwise the read tells. A node still there was changed in place, and
// its new data watch tells its next change or deletion. A missing node went
// after the change, at a time nothing tells. A session expiry may have
// come between, so it counts as a loss.
func (m *member) lookAgain(ctx context.Context, w *watching, l *look) (step, error) {
	m.awaitDeletion(ctx, l)
	// mutant: lock-delay-trusts-change
	if m.markedRelease(l) {
		m.gone(l, true)
		return stepWait, nil
	}
	r, x := m.a.c.GetW(ctx, m.l.path+"/"+l.node.name)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		// mutant: lock-delay-late-read-clean
		m.gone(l, false)
		return stepWait, nil
	case r.Err != nil:
		return m.after(r.Err)
	case !m.ours(r.Session):
		return stepRequeue, nil
	}
	l.r, l.data = r, x
	w.subscribe(x, fire{look: l})
	return stepWait, nil
}
