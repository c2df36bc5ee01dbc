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
//   - A data change, then its deletion: a mark rode on the deletion. Clean.
//   - Pruned by a later writer's mark: that writer held, having waited out
//     the delay of every loss it heard of. We come after its grant. A loss
//     it never heard of, as when its listing came after the node went, we
//     never heard of either, since we watched that writer alone. Clean.
//   - Its deletion with a data watch still set, an answer that it is
//     missing with no data change seen, or absence from a later listing.
//     Nothing proves it released. Unclean: the grant waits until d after we
//     learned it.
//
// Everything else errs towards waiting. A waiter that gave up deletes
// plainly, and so costs the one behind it d. A node that went before the
// waiter's first look at it costs d too: a candidate that queues as the
// leader resigns waits, since nothing can tell it how the node went. A
// deletion by hand, an ACL that forbids the mark, a hold limit reached and
// a queue again after a session expiry all count as losses.
//
// A data change is a release's mark, a Proclaim or a downgrade. The last
// two leave the node in place. So after a data change the waiter reads the
// node again, with a new data watch, and only a missing node counts as
// marked. A loss between the change and that read passes for clean. A
// session expiry cannot come so soon: the server heard the session at the
// change, and expires it a timeout later at the earliest. The holder's own
// client can: a hold limit, or a lost grant's node deleted in the
// background, right after a Proclaim. So can a deletion by hand, or a
// closed session. The simulation finds such a loss, and its check leaves
// it out (checkLockDelay).
//
// A peer's node never marks, so its every release counts as a loss.
//
// Not the immediate successor. A writer behind a run of readers watches
// them all. A reader of the run that expires fires its data watch with a
// deletion, so the writer owes the delay, though it waits on for the
// readers left. A node two places back, behind that writer, waits for the
// writer's release, which comes after the writer's delayed grant. So it too
// starts no sooner than d after the loss was seen. A reader watches the
// nearest writer before it alone; readers lost ahead never exclude it.
//
// What it cannot cover: a node made after the loss sees nothing go. Only
// waiters that heard of the loss are held back, and later acquisitions of
// the same RWLock, which remembers. A newcomer elsewhere that finds the
// queue empty is granted at once. The delay counts on the waiter's
// monotonic clock, from when its goroutine took the event, which is after
// the server's deletion.

// WithLockDelay makes every grant wait d more after an unclean loss ahead
// of it: a holder whose session expired, or whose node was deleted by hand,
// lets the next waiter in only d after the waiter learned of the deletion.
// A Release, a Resign, or a waiter giving up hands over at once, or after
// d for a give-up. Every release then marks its node as it deletes it, in
// one multi. TryLock and TryRLock fail with ErrWouldBlock while a delay is
// owed. It applies to elections as to locks.
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
	until   time.Time       // no grant before; zero when nothing is owed
	changed map[string]bool // nodes whose last watch event was a data change
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

// changedData notes a data change of a node ahead, which may be a
// release's mark.
func (m *member) changedData(name string) {
	if m.l.lockDelay <= 0 {
		return
	}
	if m.delay.changed == nil {
		m.delay.changed = make(map[string]bool)
	}
	m.delay.changed[name] = true
}

// readData notes a node ahead read in place: its last data change was not
// a release.
func (m *member) readData(name string) { delete(m.delay.changed, name) }

// goneAfterChange reports whether a node's last watch event was a data
// change, so that a release's mark may have ridden on its deletion.
func (m *member) goneAfterChange(name string) bool { return m.delay.changed[name] }

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
// children lacks, unless their last event was a data change. Nothing told
// how they went.
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
		if !present[n.name] && !m.goneAfterChange(n.name) {
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
// a release's mark if the node is gone. Its child watch having fired tells
// that without a request. Otherwise the read tells, and its data watch tells
// the node's next change or deletion.
func (m *member) lookAgain(ctx context.Context, w *watching, l *look) (step, error) {
	// mutant: lock-delay-trusts-change
	if l.going.FiredNow() {
		m.gone(l, true)
		return stepWait, nil
	}
	r, x := m.a.c.GetW(ctx, m.l.path+"/"+l.node.name)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		m.gone(l, true)
		return stepWait, nil
	case r.Err != nil:
		return m.after(r.Err)
	case !m.ours(r.Session):
		return stepRequeue, nil
	}
	m.readData(l.node.name)
	l.r, l.data = r, x
	w.subscribe(x, fire{look: l})
	return stepWait, nil
}
