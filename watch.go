package rwlock

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

type watched struct {
	data  []byte
	stat  *zk.Stat
	watch <-chan zk.Event
}

// getW reads a node and leaves a data watch on it. A data watch, unlike
// the exists watch of ExistsW, is never set on a missing node, so a node
// that vanished before we looked leaves no stray watch behind.
func getW(ctx context.Context, c zkConn, path string) (watched, error) {
	return call(ctx, func() (watched, error) {
		data, stat, ch, err := c.GetW(path)
		return watched{data, stat, ch}, err
	}, nil)
}

// await waits until nothing in the snapshot blocks us, watching one node at
// a time. When a watched node goes and the snapshot holds no other
// candidate blocker, the lock is ours without another round trip; when it
// holds one, await returns relist so that the caller lists again.
func (a *acquisition) await(ctx context.Context) (relist bool, err error) {
	for {
		// A request queued across an expiry runs in the new session, which
		// has no node of ours: never grant or watch on its behalf.
		if a.l.conn.SessionID() != a.session {
			return false, errRestart
		}
		b, blocked := a.snap.blocker(a.isShared)
		if !blocked {
			return false, nil
		}
		path := a.l.path + "/" + b.name
		if !a.block {
			pass, err := a.readerMayPass(ctx, b, path)
			if err != nil {
				return false, err
			}
			if !pass {
				return false, ErrWouldBlock
			}
			continue
		}
		w, err := getW(ctx, a.l.conn, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if a.gone(b.name) {
				return true, nil
			}
			continue
		case err != nil:
			return false, err
		}
		if heldMark(w.data) {
			a.snap.pruneBefore(b) // b held the lock: nothing before it is left
		}
		if a.mode == Read && downgraded(w.data) {
			a.markShared(b.name)
			continue
		}
		a.waited = true
		var deleted <-chan zk.Event
		if a.mode == Write && b.mode == Write && len(a.snap.before) > 1 {
			// b's going proves the way clear only if b held the lock,
			// which a writer tells by marking its node as it goes (see
			// deleteNode). The mark uses up the data watch; a child
			// watch, which fires only when b goes, tells the rest.
			deleted = watchGoing(ctx, a.l.conn, path)
		}
		a.l.debug("waiting for", path)
		gone, err := a.wait(ctx, b, w.watch, deleted)
		switch {
		case err != nil:
			return false, err
		case gone && a.gone(b.name):
			return true, nil
		}
		// Look again: at b's data, or at what blocks us now.
	}
}

// wait waits for b to go or to change its data, on its data watch and, if
// not nil, its child watch. A change of b's data means that b held the lock
// (only holders change their data), so nothing before b is left; that is
// taken from the event itself, since b may be gone before its mark could be
// read.
func (a *acquisition) wait(ctx context.Context, b lockNode, data, deleted <-chan zk.Event) (gone bool, err error) {
	for {
		select {
		case ev := <-data:
			data = nil
			switch ev.Type {
			case zk.EventNodeDeleted:
				return true, nil
			case zk.EventNodeDataChanged:
				a.snap.pruneBefore(b)
				if deleted == nil {
					return false, nil
				}
			case zk.EventNotWatching:
				return false, notWatching(ev)
			default:
				return false, nil
			}
		case ev := <-deleted:
			if ev.Type == zk.EventNotWatching {
				return false, notWatching(ev)
			}
			// A mark came before: go-zookeeper hands each notification to
			// its channel before it reads the next.
			select {
			case ev := <-data:
				if ev.Type == zk.EventNodeDataChanged {
					a.snap.pruneBefore(b)
				}
			default:
			}
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func notWatching(ev zk.Event) error {
	if errors.Is(ev.Err, zk.ErrSessionExpired) {
		return errRestart
	}
	return ev.Err // closing
}

// watchGoing sets a child watch on path, which fires when path goes (lock
// nodes have no children); nil if it could not be set.
func watchGoing(ctx context.Context, c zkConn, path string) <-chan zk.Event {
	ch, err := call(ctx, func() (<-chan zk.Event, error) {
		_, _, ch, err := c.ChildrenW(path)
		return ch, err
	}, nil)
	if err != nil {
		return nil
	}
	return ch
}

// readerMayPass is TryRLock's look at the writer in its way: one that is
// gone or downgraded no longer blocks it (a blocking RLock learns the same
// from its watch). A writer in TryLock's way always blocks it.
func (a *acquisition) readerMayPass(ctx context.Context, b lockNode, path string) (bool, error) {
	if a.mode == Write {
		return false, nil
	}
	data, err := call(ctx, func() ([]byte, error) {
		data, _, err := a.l.conn.Get(path)
		return data, err
	}, nil)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		a.snap.remove(b.name)
		return true, nil
	case err != nil:
		return false, err
	case downgraded(data):
		a.markShared(b.name)
		a.snap.pruneBefore(b)
		return true, nil
	}
	return false, nil
}

// gone removes a deleted node from the snapshot and reports whether a
// candidate blocker remains, so that we must list again to learn which
// nodes still exist.
func (a *acquisition) gone(name string) (relist bool) {
	a.snap.remove(name)
	_, blocked := a.snap.blocker(a.isShared)
	return blocked
}

func (a *acquisition) isShared(name string) bool { return a.shared[name] }

func (a *acquisition) markShared(name string) {
	if a.shared == nil {
		a.shared = make(map[string]bool)
	}
	a.shared[name] = true
}

// monitor notices a lost grant. It watches the grant's node and polls the
// connection state (see lossGrace for the rule), and ends with the grant.
//
// Its watch on the node is set with one request when the monitor starts,
// unless the acquisition left a child watch on the directory, set for free
// by the listing that granted us: that one fires on any change among the
// children, and only then is the node watch set. The grant's token comes
// with the node watch.
//
// The request runs beside the loop, never in it: a request can wait for
// most of a session timeout (go-zookeeper queues it while it reconnects),
// and the polling must go on meanwhile.
func (g *Grant) monitor(h *health, poll time.Duration) {
	defer close(g.monitorDone)
	l := g.l
	tick := time.NewTicker(poll)
	defer tick.Stop()

	events, needWatch := g.trip, g.trip == nil
	var watching <-chan watchResult // the node watch request in flight
	for {
		if needWatch && watching == nil && l.conn.State() == zk.StateHasSession {
			watching = g.watchSelf()
		}
		select {
		case <-g.ctx.Done():
			return
		case r := <-watching:
			watching = nil
			switch {
			case r.err == nil:
				events, needWatch = r.watch, false
				g.token.CompareAndSwap(0, r.stat.Czxid)
			case errors.Is(r.err, zk.ErrNoNode):
				g.lose(g.whyDeleted())
				return
			case sessionGone(r.err):
				g.lose(r.err)
				return
			} // otherwise a transient failure: try again when connected
		case ev := <-events:
			events, needWatch = nil, true
			switch {
			case ev.Type == zk.EventNotWatching:
				g.lose(ev.Err)
				return
			case ev.Type == zk.EventNodeDeleted && ev.Path == g.node:
				g.lose(g.whyDeleted())
				return
			}
		case <-tick.C:
			if err := h.check(l.conn, time.Now()); err != nil {
				g.lostHealth(err)
				return
			}
		}
	}
}

type watchResult struct {
	watched
	err error
}

// watchSelf sets a data watch on the grant's node, on its own goroutine;
// the channel gets the outcome.
func (g *Grant) watchSelf() <-chan watchResult {
	ch := make(chan watchResult, 1)
	go func() {
		data, stat, watch, err := g.l.conn.GetW(g.node)
		ch <- watchResult{watched{data, stat, watch}, err}
	}()
	return ch
}

// whyDeleted names the cause of our node's disappearance: the end of our
// session, or someone's delete.
func (g *Grant) whyDeleted() error {
	if g.l.conn.SessionID() != g.session {
		return zk.ErrSessionExpired
	}
	return errNodeDeleted
}
