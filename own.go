package rwlock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The own-node proof. A waiter sets a data watch on its own node after the
// create. When the event or answer that clears its way arrives, it looks at
// that watch without a request. On one connection, ZooKeeper sends the
// events and answers of a session in the order of the changes. And
// go-zookeeper puts each event in its channel before it reads the next
// packet. So if our node had been deleted before the change that cleared
// our way, its event is in the watch's channel when we look.
//
// That order holds only while the connection lasts. After a reconnection,
// go-zookeeper sends its watches again in one SetWatches request, in the
// order of a map. The server fires the events of the nodes gone meanwhile
// in that order, not in the order of the changes. And requests waiting in
// go-zookeeper's queue go out before SetWatches. A connection made by Dial
// counts its sessions (see zkclient), so we know when it reconnected. On
// any other connection we cannot tell. In both cases we read our node
// before the grant.

// ownWatch is the data watch on our own node.
type ownWatch struct {
	watch    *zkclient.Watch
	connects uint64 // the connection's session count when it was set
	counted  bool   // the connection counts them
}

type ownResult struct {
	r     zkclient.Reply[zkclient.Node]
	watch *zkclient.Watch
}

// watchOwnBehind sets the data watch on our own node on its own goroutine.
func (m *member) watchOwnBehind(ctx context.Context) <-chan ownResult {
	ch := make(chan ownResult, 1)
	go func() {
		r, w := m.a.c.GetW(ctx, m.path)
		ch <- ownResult{r, w}
	}()
	return ch
}

// settleOwn takes the answer to the watch on our own node. It returns
// stepWait when the member can go on waiting.
func (m *member) settleOwn(o ownResult) (step, error) {
	switch {
	case errors.Is(o.r.Err, zk.ErrNoNode):
		return m.ownDeleted()
	case o.r.Err != nil:
		return m.after(o.r.Err)
	case !m.ours(o.r.Session):
		return stepRequeue, nil
	}
	m.own.watch, m.tok, m.exact = o.watch, o.r.V.Stat.Czxid, true
	return stepWait, nil
}

// confirmOwn makes sure, before a grant that a wake cleared, that our node
// was still there. Its watch tells without a request (see the own-node
// proof). It cannot tell when the connection has been made anew since the
// watch was set, or when the connection does not count its sessions. Then
// confirmOwn reads our node.
func (m *member) confirmOwn(ctx context.Context) (step, error) {
	if n, known := m.a.c.ConnectCount(); known && m.own.counted && n == m.own.connects {
		return stepGrant, nil
	}
	r := m.a.c.Get(ctx, m.path)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		return m.ownDeleted()
	case r.Err != nil:
		return m.after(r.Err)
	case !m.ours(r.Session):
		return stepRequeue, nil
	}
	return stepGrant, nil // read after what cleared our way, so our node outlived it
}

// ownGone reports, without a request, whether an event about our node has
// come. Then our node was deleted, or the session ended, since we set the
// watch.
func (m *member) ownGone() (zk.Event, bool) {
	if m.own.watch != nil && m.own.watch.FiredNow() {
		return m.own.watch.Event(), true
	}
	return zk.Event{}, false
}

// ownEvent handles an event about our own node while we wait.
func (m *member) ownEvent(ev zk.Event) (step, error) {
	switch {
	case ev.Type == zk.EventNotWatching:
		return m.notWatching(ev)
	case ev.Type == zk.EventNodeDataChanged && m.marked:
		// Our own held mark, written while a set waits (see markMember). A
		// listing proves our place again, and a new watch is set.
		m.own.watch = nil
		return stepList, nil
	}
	return m.ownDeleted()
}

// ownDeleted fails a member whose node someone deleted while it waited. The
// node lost its place in the queue, and the waiter behind it may already
// hold the lock.
func (m *member) ownDeleted() (step, error) {
	path := m.path
	m.node, m.own.watch = "", nil
	return 0, lostError(path, errNodeDeleted)
}

// watchOwn sets the data watch on a node of ours (see adopt).
func (m *member) watchOwn(ctx context.Context, path string) (ownNode, error) {
	r, w := m.a.c.GetW(ctx, path)
	return ownNode{stat: r.V.Stat, watch: w, session: r.Session}, r.Err
}

type ownNode struct {
	stat    *zk.Stat
	watch   *zkclient.Watch
	session int64
}
