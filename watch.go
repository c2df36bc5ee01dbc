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

// wait waits until nothing in the snapshot blocks us, watching one node at
// a time, or a writer behind readers all of them at once (see runAhead).
// When a watched node goes and the snapshot holds no other candidate
// blocker, the lock is ours without another request, provided our own node
// is still there (see acquire.go); when the snapshot holds one, we list
// again.
//
// The watch on our own node goes out together with the first look at the
// node in our way, and the child watch that a writer behind a writer needs
// with its look at that writer: none waits for another's answer. The proof
// needs only that both answers be in before we are granted.
func (a *acquisition) wait(ctx context.Context) (step, error) {
	if !a.block {
		return a.tryPass(ctx)
	}
	var own <-chan ownResult
	if a.own == nil {
		a.ownConnects, a.ownConnectsKnown = a.connects()
		own = a.watchOwnBehind(ctx)
	}
	if ahead := a.runAhead(); ahead != nil {
		return a.waitAll(ctx, own, ahead)
	}
	for {
		b, blocked := a.snap.blocker(a.isDowngraded)
		var r zkclient.Reply[zkclient.Node]
		var data, deleted *zkclient.Watch
		var going <-chan *zkclient.Watch
		path := a.l.path + "/" + b.name
		if blocked {
			if a.mode == Write && b.mode == Write && b.ours {
				// b's going proves the way clear only if b held the lock,
				// which a writer tells by marking its node as it goes (see
				// Grant.Release). The mark uses up the data watch; a child
				// watch, which fires only when b goes, tells the rest.
				going = a.watchGoingBehind(ctx, path)
			}
			r, data = a.c.GetW(ctx, path)
			if going != nil {
				deleted = <-going
			}
		}
		if own != nil {
			next, err, ok := a.settleOwn(<-own)
			if own = nil; !ok {
				return next, err
			}
		}
		if ev, gone := a.ownGone(); gone {
			return a.ownEvent(ev)
		}
		if !blocked {
			return a.confirmOwn(ctx)
		}
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			if a.forget(b.name) {
				return stepList, nil
			}
			continue // the answer came after any event about our own node: looked at above
		case r.Err != nil:
			return a.after(r.Err)
		case !a.ours(r.Session):
			return stepRequeue, nil
		}
		// Marks count only on our own nodes: a peer's data is its own
		// business (Curator's is an address, kazoo's an identifier), and a
		// peer, which does not read our marks, holds its node until it
		// deletes it.
		if b.ours && lockname.Held(r.V.Data) {
			a.snap.pruneBefore(b) // b held the lock: nothing before it is left
		}
		if a.mode == Read && b.ours && lockname.Downgraded(r.V.Data) {
			a.markDowngraded(b.name)
			continue
		}
		a.waited = true
		a.l.debug("waiting for", path)
		bGone, next, err := a.await(ctx, b, data, deleted)
		switch {
		case err != nil || next != stepWait:
			return next, err
		case bGone && a.forget(b.name):
			return stepList, nil
		}
		// Look again: at our node, at b's data, or at what blocks us now.
	}
}

type ownResult struct {
	ownWatch
	err error
}

// watchOwnBehind sets the data watch on our own node on its own goroutine.
func (a *acquisition) watchOwnBehind(ctx context.Context) <-chan ownResult {
	ch := make(chan ownResult, 1)
	go func() {
		w, err := a.watchOwn(ctx, a.path)
		ch <- ownResult{w, err}
	}()
	return ch
}

// settleOwn takes the answer to the watch on our own node; ok is false when
// the acquisition cannot go on waiting (next and err say what then).
func (a *acquisition) settleOwn(r ownResult) (next step, err error, ok bool) {
	switch {
	case errors.Is(r.err, zk.ErrNoNode):
		next, err = a.ownDeleted()
		return next, err, false
	case r.err != nil:
		next, err = a.after(r.err)
		return next, err, false
	case !a.ours(r.session):
		return stepRequeue, nil, false
	}
	a.own, a.tok, a.exact = r.watch, r.stat.Czxid, true
	return 0, nil, true
}

// watchGoingBehind sets, on its own goroutine, a child watch on path, which
// fires when path goes (lock nodes have no children); nil if it could not
// be set.
func (a *acquisition) watchGoingBehind(ctx context.Context, path string) <-chan *zkclient.Watch {
	ch := make(chan *zkclient.Watch, 1)
	go func() {
		r, w := a.c.ChildrenW(ctx, path, false)
		if r.Err != nil {
			w = nil
		}
		ch <- w
	}()
	return ch
}

// await waits for b to go or to change its data, on its data watch and, if
// not nil, its child watch, and for our own node's watch and ctx. A change
// of one of our own nodes' data means that b held the lock (only holders
// change their data), so nothing before b is left; that is taken from the
// event itself, since b may be gone before its mark could be read. To a
// reader, b is then out of the way too: downgraded, or going. A peer's
// change proves nothing: we look again. next is stepWait unless our node
// or our session is gone.
func (a *acquisition) await(ctx context.Context, b lockNode, data, deleted *zkclient.Watch) (gone bool, next step, err error) {
	var deletedFired <-chan struct{}
	if deleted != nil {
		deletedFired = deleted.Fired()
	}
	dataFired := data.Fired()
	for {
		select {
		case <-a.own.Fired():
			next, err := a.ownEvent(a.own.Event())
			return false, next, err
		case <-dataFired:
			dataFired = nil
			switch ev := data.Event(); ev.Type {
			case zk.EventNodeDeleted:
				return true, stepWait, nil
			case zk.EventNodeDataChanged:
				// mutant: reader-trusts-peer
				if b.ours && a.mode == Read {
					// b held, and is now shared (downgraded) or on its
					// way out (the held mark rides on its deletion):
					// either way out of a reader's way, and only readers
					// are between b and us. Which of the two, we need
					// not read.
					a.snap.pruneBefore(b)
					a.markDowngraded(b.name)
					return false, stepWait, nil
				}
				if b.ours {
					a.snap.pruneBefore(b)
				}
				if deletedFired == nil {
					return false, stepWait, nil
				}
			case zk.EventNotWatching:
				next, err := a.notWatching(ev)
				return false, next, err
			default:
				return false, stepWait, nil
			}
		case <-deletedFired:
			if ev := deleted.Event(); ev.Type == zk.EventNotWatching {
				next, err := a.notWatching(ev)
				return false, next, err
			}
			if dataFired != nil {
				// b's deletion fires its data watch too, with the mark if
				// the mark came first: go-zookeeper has both events in
				// their channels already, but the goroutines that relay
				// them may run in either order, so wait for this one.
				select {
				case <-dataFired:
					if data.Event().Type == zk.EventNodeDataChanged && b.ours {
						a.snap.pruneBefore(b)
					}
				case <-ctx.Done():
					return false, 0, ctx.Err()
				}
			}
			return true, stepWait, nil
		case <-ctx.Done():
			return false, 0, ctx.Err()
		}
	}
}

// confirmOwn makes sure, before a grant that a wake cleared (an event, or
// an answer that a node in our way is gone), that our node was still there:
// see the proofs at the top of acquire.go. Its watch tells without a
// request, unless the connection has been re-established since the watch
// was set: go-zookeeper then sends its watches again in one SetWatches
// request, in the order of a map, and the server fires the events of the
// nodes gone meanwhile in that order, not in the order of the changes; and
// requests waiting in go-zookeeper's queue go out before SetWatches. A
// connection made by Dial counts its sessions (zkclient); on any other
// connection, we cannot tell, and read our node.
func (a *acquisition) confirmOwn(ctx context.Context) (step, error) {
	if n, known := a.connects(); known && a.ownConnectsKnown && n == a.ownConnects {
		return stepGrant, nil
	}
	r := a.c.Get(ctx, a.path)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		return a.ownDeleted()
	case r.Err != nil:
		return a.after(r.Err)
	case !a.ours(r.Session):
		return stepRequeue, nil
	}
	return stepGrant, nil // read after what cleared our way: our node outlived it
}

// connects returns the connection's session count, if it keeps one.
func (a *acquisition) connects() (uint64, bool) {
	return a.c.ConnectCount()
}

// ownEvent handles an event about our own node while we wait.
func (a *acquisition) ownEvent(ev zk.Event) (step, error) {
	if ev.Type == zk.EventNotWatching {
		return a.notWatching(ev)
	}
	return a.ownDeleted()
}

// ownDeleted: someone deleted our node while we waited. It lost its place
// in the queue, and the waiter behind it may already hold the lock.
func (a *acquisition) ownDeleted() (step, error) {
	path := a.path
	a.node, a.own = "", nil
	return 0, lostError(path, errNodeDeleted)
}

// notWatching handles the end of a watch: the session expired (queue
// again, unless the session is still ours: then the end was that of a
// shared watch of an earlier session, and we look again) or the connection
// was closed.
func (a *acquisition) notWatching(ev zk.Event) (step, error) {
	switch {
	case !errors.Is(ev.Err, zk.ErrSessionExpired):
		return 0, ev.Err // closing
	case a.c.Conn().SessionID() == a.session:
		return stepList, nil
	}
	return stepRequeue, nil
}

// tryPass is TryLock's and TryRLock's look at the node in their way. A
// reader may pass a writer that is gone, or one of ours that is downgraded
// (a blocking RLock learns the same from its watch); it then lists again,
// which proves our node still there. A writer, or a node in TryLock's way,
// blocks.
func (a *acquisition) tryPass(ctx context.Context) (step, error) {
	b, _ := a.snap.blocker(a.isDowngraded)
	if a.mode == Write {
		return 0, ErrWouldBlock
	}
	r := a.c.Get(ctx, a.l.path+"/"+b.name)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		a.snap.remove(b.name)
		return stepList, nil
	case r.Err != nil:
		return a.after(r.Err)
	case b.ours && lockname.Downgraded(r.V.Data):
		a.markDowngraded(b.name)
		return stepList, nil
	}
	return 0, ErrWouldBlock
}

// forget removes a deleted node from the snapshot and reports whether a
// candidate blocker remains, so that we must list again to learn which
// nodes still exist.
func (a *acquisition) forget(name string) (relist bool) {
	a.snap.remove(name)
	_, blocked := a.snap.blocker(a.isDowngraded)
	return blocked
}

type ownWatch struct {
	stat    *zk.Stat
	watch   *zkclient.Watch
	session int64
}

// watchOwn sets the data watch on our own node. Its fire is read without
// a request at the moment we are cleared (see firedNow), which keeps
// go-zookeeper's ordering of events.
func (a *acquisition) watchOwn(ctx context.Context, path string) (ownWatch, error) {
	r, w := a.c.GetW(ctx, path)
	return ownWatch{stat: r.V.Stat, watch: w, session: r.Session}, r.Err
}

// ownGone reports, without a request, whether an event about our node has
// come: it was deleted (or the session ended) since we set the watch.
func (a *acquisition) ownGone() (zk.Event, bool) {
	if a.own.FiredNow() {
		return a.own.Event(), true
	}
	return zk.Event{}, false
}

func (a *acquisition) isDowngraded(name string) bool { return a.downgraded[name] }

func (a *acquisition) markDowngraded(name string) {
	if a.downgraded == nil {
		a.downgraded = make(map[string]bool)
	}
	a.downgraded[name] = true
}

// A writer behind a run of readers watches all of them at once, and the
// nearest writer before them (w0), instead of its predecessor alone, and is
// granted, with no listing, on the deletion that leaves its snapshot empty:
//
//   - the snapshot, from a listing that showed our node, holds every node
//     that precedes ours: sequence numbers only grow, so none can join it
//     later;
//   - a node leaves it only when shown gone: its deletion event, an answer
//     that it is missing, or, for the nodes before w0, a change of w0's data
//     (the held mark its release writes, or a downgrade): only a holder
//     changes its node's data (Grant.Release, Grant.Downgrade; Grant.Multi
//     refuses its own lock's nodes, though not another lock's: writing a
//     lock node's data through another lock's grant forges a release, as a
//     node made by hand does), and a writer holds only once nothing before
//     it is left;
//   - so an empty snapshot means that, when the last event came, no node
//     was before ours; that our own node was still there is the own-node
//     watch's proof (see acquire.go).
//
// When the watched nodes are all gone but nodes before w0 are left (w0 went
// without its mark: a waiter that gave up, a session that expired, a
// release that could not write the mark or finished in the background, a
// writer that never waited), we list once. Each reader is watched by one writer, the next one after it, and
// w0 by the one writer behind its readers (and by those readers): watches
// stay linear in the queue.
//
// It does not hold where a node can join the queue out of sequence: a peer
// (Curator's downgrade since 5.5 makes a node of its own), or a node made
// by hand with our names; nor are a peer's data changes proofs. So only a
// snapshot without peers' nodes takes this path; with any, the writer waits
// for its predecessor and lists again, as before. A node made by hand with
// our names breaks every proof of the lock: do not make one.

// runAhead returns the nodes that a writer watches all at once (w0 first,
// if there is one, then the readers after it), or nil where the writer
// waits for its predecessor alone: a reader, a writer behind a writer, or a
// snapshot with a peer's node.
func (a *acquisition) runAhead() []lockNode {
	before := a.snap.before
	// mutant: run-with-peers
	if a.mode != Write || a.snap.peers != 0 || len(before) == 0 || before[len(before)-1].mode == Write {
		return nil
	}
	i := len(before) - 1
	for i > 0 && before[i].mode == Read {
		i--
	}
	return before[i:]
}

// A look is one node of a run ahead (see runAhead): its data watch, and
// for w0, the child watch that tells its deletion after its mark used up
// the data watch (see wait).
type look struct {
	node  lockNode
	r     zkclient.Reply[zkclient.Node]
	data  *zkclient.Watch
	going *zkclient.Watch
	gone  bool
}

// A fire is one of a look's watches that fired.
type fire struct {
	look  *look
	going bool // the child watch, not the data watch
}

// waitAll waits for every node of ahead to go, setting all the watches at
// once, together with the one on our own node (own, if not nil).
func (a *acquisition) waitAll(ctx context.Context, own <-chan ownResult, ahead []lockNode) (step, error) {
	looks := make([]look, len(ahead))
	var wg sync.WaitGroup
	for i, n := range ahead {
		l := &looks[i]
		l.node = n
		path := a.l.path + "/" + n.name
		if n.mode == Write {
			wg.Go(func() {
				if r, w := a.c.ChildrenW(ctx, path, false); r.Err == nil {
					l.going = w
				}
			})
		}
		wg.Go(func() { l.r, l.data = a.c.GetW(ctx, path) })
	}
	wg.Wait()
	if own != nil {
		if next, err, ok := a.settleOwn(<-own); !ok {
			return next, err
		}
	}
	if ev, gone := a.ownGone(); gone {
		return a.ownEvent(ev)
	}
	fired := make(chan fire, 2*len(looks))
	for i := range looks {
		l := &looks[i]
		switch r := l.r; {
		case errors.Is(r.Err, zk.ErrNoNode):
			a.gone(l)
			continue
		case r.Err != nil:
			return a.after(r.Err)
		case !a.ours(r.Session):
			return stepRequeue, nil
		case l.node.mode == Write && (lockname.Held(r.V.Data) || lockname.Downgraded(r.V.Data)):
			a.snap.pruneBefore(l.node) // w0 held: nothing before it is left
		}
		defer l.data.Subscribe(func(zk.Event) { fired <- fire{look: l} })()
		if l.going != nil {
			defer l.going.Subscribe(func(zk.Event) { fired <- fire{look: l, going: true} })()
		}
	}
	a.waited = true
	a.l.debug("waiting for the run ahead", a.path)
	for {
		if len(a.snap.before) == 0 {
			if ev, gone := a.ownGone(); gone {
				return a.ownEvent(ev)
			}
			return a.confirmOwn(ctx)
		}
		if !slices.ContainsFunc(looks, func(l look) bool { return !l.gone }) {
			// mutant: run-unmarked-w0
			return stepList, nil // w0 went without its mark: what is left, a listing tells
		}
		select {
		case <-a.own.Fired():
			return a.ownEvent(a.own.Event())
		case f := <-fired:
			if next, err, waiting := a.fired(ctx, f); !waiting {
				return next, err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// fired takes the event of one of a run's watches; waiting is true while
// we keep waiting on them, and else next and err say what then.
func (a *acquisition) fired(ctx context.Context, f fire) (next step, err error, waiting bool) {
	l := f.look
	if l.gone {
		return 0, nil, true // its other watch told already
	}
	w := l.data
	if f.going {
		w = l.going
	}
	ev := w.Event()
	switch {
	case ev.Type == zk.EventNotWatching:
		next, err = a.notWatching(ev)
		return next, err, false
	case f.going:
		// w0's deletion fires its data watch too, with the mark if the
		// mark came first: wait for that event, as await does.
		select {
		case <-l.data.Fired():
		case <-ctx.Done():
			return 0, ctx.Err(), false
		}
		if ev := l.data.Event(); ev.Type == zk.EventNodeDataChanged {
			a.snap.pruneBefore(l.node)
		}
		a.gone(l)
	case ev.Type == zk.EventNodeDeleted:
		a.gone(l)
	case ev.Type == zk.EventNodeDataChanged && l.node.mode == Write:
		a.snap.pruneBefore(l.node) // w0 held
		if l.going == nil {
			return stepWait, nil, false // nothing tells its deletion now: look again
		}
	default:
		return stepList, nil, false // a reader's data never changes: whatever this is, a listing tells
	}
	return 0, nil, true
}

// gone forgets a node of a run that is known to be gone.
func (a *acquisition) gone(l *look) {
	l.gone = true
	a.snap.remove(l.node.name)
}
