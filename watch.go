package rwlock

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The wait is one algorithm over the nodes ahead of ours that we watch.
//
// A reader watches the nearest writer before it, and a writer its
// predecessor (see reader.go and writer.go). Each watches one node, so
// there is no herd. A writer behind a run of readers watches all of them at
// once. It also watches w0, the nearest writer before them. So it is
// granted on the deletion that empties its snapshot, with no listing. Each
// reader is watched by the writer after it. The writer w0 is watched by
// that writer and by its readers. So watches stay linear in the queue.
//
// The snapshot comes from a listing that showed our node. It holds every
// node that precedes ours, since sequence numbers only grow. A node leaves
// it only when shown gone, by its deletion event or by an answer that it is
// missing. The nodes before one of our writers leave it too, when that
// writer's data changes. Only a holder changes its node's data, with the
// held mark its release writes or with a downgrade. And a writer holds only
// once nothing before it is left. An empty snapshot, or one where nothing
// blocks us, means that no node was in our way when the last event came.
// That our own node was still there is the own-node watch's proof (see
// own.go).
//
// Every node we watched may be gone while nodes before them are left. Then
// a watched writer went without its mark. It was a waiter that gave up, or
// its session expired, or its release could not write the mark. We then
// list once.
//
// A peer's node proves less. A peer can queue out of sequence; Curator's
// downgrade since 5.5 makes a node of its own. And a peer's data changes
// are its own business. So a writer watches a run only in a snapshot
// without peers' nodes. A peer's data change only makes us look again. A
// node made by hand with our names breaks every proof of the lock. Do not
// make one.

// wait waits until nothing in the snapshot blocks us. The watch on our own
// node goes out together with the first look at the nodes in our way. None
// of these requests waits for another's answer. The proof needs only that
// both answers be in before we are granted.
func (m *member) wait(ctx context.Context) (step, error) {
	if m.weight > 0 {
		return m.waitPermits(ctx) // a bounded lock's wait (see capacity.go)
	}
	if !m.block {
		return m.tryPass(ctx)
	}
	var own <-chan ownResult
	if m.own.watch == nil {
		m.own.connects, m.own.counted = m.a.c.ConnectCount()
		own = m.watchOwnBehind(ctx)
	}
	w := &watching{fired: make(chan struct{}, 1)}
	defer w.stop()
	for {
		ahead := m.ahead()
		if len(ahead) == 0 {
			if own != nil { // a lock-delay owed from the listing (see lockdelay.go)
				if next, err := m.settleOwn(<-own); next != stepWait || err != nil {
					return next, err
				}
				own = nil
			}
			if ev, gone := m.ownGone(); gone {
				return m.ownEvent(ev)
			}
			if next, err := m.waitDelay(ctx); next != stepWait || err != nil {
				return next, err
			}
			return m.confirmOwn(ctx)
		}
		if !w.live() {
			if w.looked() {
				// mutant: run-unmarked-w0
				return stepList, nil // what is left before them, a listing tells
			}
			if next, err := m.look(ctx, w, ahead, own); next != stepWait || err != nil {
				return next, err
			}
			own = nil
			continue
		}
		m.waited = true
		select {
		case <-m.own.watch.Fired():
			return m.ownEvent(m.own.watch.Event())
		case <-w.fired:
			for _, f := range w.take() {
				if next, err := m.fire(ctx, w, f); next != stepWait || err != nil {
					return next, err
				}
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// ahead returns the nodes to watch, or nil when nothing blocks us.
func (m *member) ahead() []lockNode {
	b, blocked := m.snap.blocker(m.isDowngraded)
	if !blocked {
		return nil
	}
	if run := m.runAhead(); run != nil {
		return run
	}
	return []lockNode{b}
}

// runAhead returns the nodes that a writer watches all at once. They are w0
// first, if there is one, then the readers after it. It returns nil for a
// reader, for a writer behind a writer, and for a snapshot with a peer's
// node. There the member waits for its blocker alone.
func (m *member) runAhead() []lockNode {
	before := m.snap.before
	// mutant: run-with-peers
	if m.mode != Write || m.snap.peers != 0 || len(before) == 0 || before[len(before)-1].mode == Write {
		return nil
	}
	i := len(before) - 1
	for i > 0 && before[i].mode == Read {
		i--
	}
	return before[i:]
}

// A look is one node we watch, with its data watch. Where a writer of ours
// waits, and the node is one of our writers, the look also has a child
// watch. The child watch tells the node's deletion once the node's mark has
// used up the data watch.
type look struct {
	node  lockNode
	data  *zkclient.Watch
	going *zkclient.Watch
	r     zkclient.Reply[zkclient.Node]
	gone  bool // shown gone
	spent bool // its watches told all they can; look again if it still matters
	// elected: the node is a campaign's, whose leader may Proclaim (see
	// election.go). Its data changes while it holds, so a change is no downgrade.
	elected bool
}

// A fire is one of a look's watches that fired.
type fire struct {
	look  *look
	going bool // the child watch, not the data watch
}

// watching is the looks of one wait, and the fires of their watches.
type watching struct {
	looks  []*look
	stops  []func()
	mu     sync.Mutex
	queue  []fire
	fired  chan struct{} // has a value while queue may hold fires
	closed bool
}

// live reports whether a look still waits for its node to go.
func (w *watching) live() bool {
	return slices.ContainsFunc(w.looks, func(l *look) bool { return !l.gone && !l.spent })
}

// looked reports whether every look made is of a node shown gone.
func (w *watching) looked() bool {
	return len(w.looks) > 0 && !slices.ContainsFunc(w.looks, func(l *look) bool { return !l.gone })
}

func (w *watching) subscribe(x *zkclient.Watch, f fire) {
	w.stops = append(w.stops, x.Subscribe(func(zk.Event) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.closed {
			return
		}
		w.queue = append(w.queue, f)
		select {
		case w.fired <- struct{}{}:
		default:
		}
	}))
}

// take returns the fires queued so far.
func (w *watching) take() []fire {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

func (w *watching) stop() {
	for _, stop := range w.stops {
		stop()
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// look sets the watches on the nodes of ahead all at once, together with
// the one on our own node if own is not nil. It takes their answers.
func (m *member) look(ctx context.Context, w *watching, ahead []lockNode, own <-chan ownResult) (step, error) {
	looks := make([]*look, len(ahead))
	var wg sync.WaitGroup
	for i, n := range ahead {
		l := &look{node: n}
		looks[i] = l
		path := m.l.path + "/" + n.name
		if m.mode == Write && n.mode == Write && n.ours {
			// Its going proves the way clear only if it held. A writer
			// tells that by marking its node as it goes (see writer.go).
			// The mark uses up the data watch. A child watch, which fires
			// only when the node goes, tells the rest.
			wg.Go(func() {
				if r, x := m.a.c.ChildrenW(ctx, path); r.Err == nil {
					l.going = x
				}
			})
		}
		wg.Go(func() { l.r, l.data = m.a.c.GetW(ctx, path) })
	}
	wg.Wait()
	if own != nil {
		if next, err := m.settleOwn(<-own); next != stepWait || err != nil {
			return next, err
		}
	}
	if ev, gone := m.ownGone(); gone {
		return m.ownEvent(ev)
	}
	if len(looks) > 1 {
		m.l.debug("waiting for the run ahead", m.path)
	} else {
		m.l.debug("waiting for", m.l.path+"/"+looks[0].node.name)
	}
	for _, l := range looks {
		w.looks = append(w.looks, l)
		switch r := l.r; {
		case errors.Is(r.Err, zk.ErrNoNode):
			m.gone(l, m.goneAfterChange(l.node.name))
			continue
		case r.Err != nil:
			return m.after(r.Err)
		case !m.ours(r.Session):
			return stepRequeue, nil
		}
		m.readData(l.node.name)
		// Marks count only on our own nodes. A peer's data is its own
		// business, and a peer holds its node until it deletes it.
		l.elected = l.node.ours && l.node.mode == Write && lockname.Elected(l.r.V.Data)
		if l.node.ours && l.node.mode == Write && lockname.Held(l.r.V.Data) {
			m.snap.pruneBefore(l.node) // it held, so nothing before it is left
			if m.mode == Read && lockname.Downgraded(l.r.V.Data) {
				m.markDowngraded(l.node.name)
			}
		}
		w.subscribe(l.data, fire{look: l})
		if l.going != nil {
			w.subscribe(l.going, fire{look: l, going: true})
		}
	}
	return stepWait, nil
}

// fire takes the event of one of a look's watches. It returns stepWait
// while we go on waiting.
func (m *member) fire(ctx context.Context, w *watching, f fire) (step, error) {
	l := f.look
	if l.gone {
		return stepWait, nil // its other watch told already
	}
	x := l.data
	if f.going {
		x = l.going
	}
	switch ev := x.Event(); {
	case ev.Type == zk.EventNotWatching:
		return m.notWatching(ev)
	case f.going:
		// Its deletion fires its data watch too, with the mark if the mark
		// came first. Both events are in go-zookeeper's channels already.
		// But the goroutines that relay them may run in either order, so
		// wait for the data watch's event.
		select {
		case <-l.data.Fired():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		marked := l.data.Event().Type == zk.EventNodeDataChanged
		if marked {
			m.snap.pruneBefore(l.node)
			m.changedData(l.node.name)
		}
		m.gone(l, marked)
	case ev.Type == zk.EventNodeDeleted:
		// mutant: lock-delay-deletion-clean
		m.gone(l, false) // no mark came first: a loss (see lockdelay.go)
	case ev.Type == zk.EventNodeDataChanged && l.node.mode == Read && l.node.ours && m.l.lockDelay > 0:
		m.gone(l, true) // with the option, a reader's data changes only with its release's mark
	case ev.Type == zk.EventNodeDataChanged && l.node.mode == Read:
		return stepList, nil // a reader's data never changes, so a listing tells what this is
	// mutant: reader-trusts-peer
	case ev.Type == zk.EventNodeDataChanged && l.node.ours:
		m.snap.pruneBefore(l.node) // it held, so nothing before it is left
		m.changedData(l.node.name)
		if l.going != nil && m.l.lockDelay > 0 {
			return m.lookAgain(ctx, w, l)
		}
		// A leader's Proclaim changes its data while it holds. So a reader
		// reads the node again, and passes on the downgrade mark alone.
		// mutant: reader-takes-proclaim-for-downgrade
		if m.mode == Read && l.elected {
			l.spent = true
			return stepWait, nil
		}
		if m.mode == Read {
			// It is shared now, downgraded, or on its way out with the held
			// mark riding on its deletion. Either way it is out of a
			// reader's way. We need not read which of the two.
			m.markDowngraded(l.node.name)
		}
		// mutant: data-change-as-deletion
		l.spent = l.going == nil
	default:
		l.spent = true // a peer's change proves nothing, so look again
	}
	return stepWait, nil
}

// gone forgets a node that is known to be gone. Unless clean, it went
// without a release, and WithLockDelay holds our grant back.
func (m *member) gone(l *look, clean bool) {
	l.gone = true
	m.snap.remove(l.node.name)
	if !clean {
		m.lost(l.node.name)
	}
}

// tryPass is TryLock's and TryRLock's look at the node in their way. A
// reader may pass a writer that is gone, or one of ours that is downgraded.
// A blocking RLock learns the same from its watch. The reader then lists
// again, which proves our node still there. A writer, or a node in
// TryLock's way, blocks.
func (m *member) tryPass(ctx context.Context) (step, error) {
	b, _ := m.snap.blocker(m.isDowngraded)
	if m.mode == Write {
		return 0, ErrWouldBlock
	}
	r := m.a.c.Get(ctx, m.l.path+"/"+b.name)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode) && m.l.lockDelay > 0:
		return 0, ErrWouldBlock // it may have gone without a release (see lockdelay.go)
	case errors.Is(r.Err, zk.ErrNoNode):
		m.snap.remove(b.name)
		return stepList, nil
	case r.Err != nil:
		return m.after(r.Err)
	case b.ours && lockname.Downgraded(r.V.Data):
		m.markDowngraded(b.name)
		return stepList, nil
	}
	return 0, ErrWouldBlock
}

// notWatching handles the end of a watch. The connection was closed, or the
// session expired. After an expiry we queue again, unless the session is
// still ours. Then the end was that of a shared watch of an earlier
// session, and we look again.
func (m *member) notWatching(ev zk.Event) (step, error) {
	switch {
	case !errors.Is(ev.Err, zk.ErrSessionExpired):
		return 0, ev.Err // closing
	case m.a.c.Conn().SessionID() == m.session:
		return stepList, nil
	}
	return stepRequeue, nil
}
