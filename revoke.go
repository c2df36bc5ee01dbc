package rwlock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Cooperative revocation: anyone may ask the holders of a lock to let go.
//
// Why it cannot change who is granted: a revocation is a write of the lock
// directory's own data, which no family reads for its queue; it creates,
// deletes and changes no lock node, so every grant, wait and proof of the
// protocol is what it would be without it. A holder that is told lets go by
// releasing, as it would anyway; one that never looks keeps its grant.
// Peers see nothing: the directory keeps its children.
//
// Whom it reaches. Revoke writes the request twice: first naming no node,
// then, after a listing of the queue, naming the nodes (by sequence
// number) that hold at that listing. So it reaches every grant that holds
// at the listing, and a listening holder as soon as the first write's
// notification reaches it, if the holder knows that its grant came before
// that write (below). It never reaches a node first held after Revoke's
// last write, in ZooKeeper's order of events: the names are of nodes that
// held before it, and a notification revokes only grants known to come
// before the write that fired it. A grant made between the listing and
// the second write may or may not be reached.
//
// How fast: a listening holder is told by the notification of the first
// write alone, with no request, when it knows that its grant came before
// that write. In one session ZooKeeper sends a watch's notification before
// any answer or notification that shows a later state, so a grant decided
// on a packet read before the notification of the directory's data watch
// came before the write that fired it. A grant knows that when:
//   - the watch was set, and had not fired, when the grant was made, with no
//     new connection since the read that set it (after a reconnection, the
//     watches set again may fire after answers that show a later state); or
//   - it listened before the read that set the watch was sent: that read
//     was answered after the grant, and the watch fires only for a change
//     that the read did not show, since it is the only channel that
//     go-zookeeper has for the directory's data on the connection (see
//     revocations).
// Any other listener (one granted while the watch was being set again) is
// judged by the names of the read that follows, as a late listener is; a
// listener named by the last read is told at once if the watch says the
// data is unchanged since, else after one more read, without a watch (a
// reconnection, or a connection that does not count them). Names count
// only in the directory they were listed in (a directory made anew
// numbers its nodes from 0 again). So a revocation reaches a listening
// holder in one notification after the write; the listing and the second
// write are for the rest. Any change of
// the directory's data is taken for a revocation: it belongs to the lock
// (an application must not watch it on the lock's connection either).
//
// What it costs: Revoke sends the two writes and the listing, and a read
// only when a writer of ours holds with a reader of ours queued behind it
// (see holders). An acquisition pays nothing. Grant.Revoked, WithRead and
// WithWrite listen: the connection keeps one data watch on the directory,
// set with one read by a listener that finds none, kept while nobody
// listens (a watch costs nothing until it fires), and read again, with a
// new watch, each time it fires while anyone listens; a listener named by
// the last read, where the data may have changed since, reads it once
// more.

// Revoke asks the grants that hold the lock, in this process or any other,
// to let go, for reason: their Revoked channels close, and WithRead's and
// WithWrite's functions see their context cancelled with cause ErrRevoked.
// It reaches every grant that holds when it lists the queue, and a holder
// that listens as soon as its first write reaches it; never a node first
// held after it wrote for the last time (a nested, coalesced or downgraded
// grant shares its node's fate). It never deletes a node and never
// changes who is granted: a holder that does not look keeps its grant.
// Revoking a lock nobody holds reaches nobody. A later Revoke replaces an
// earlier one.
func (l *RWLock) Revoke(ctx context.Context, reason string) error {
	if l.conn == nil {
		return &opError{"revoke", l.path, fmt.Errorf("%w: the RWLock was not made by New", ErrInvalidArgument)}
	}
	c := zkclient.For(l.conn)
	defer c.Unref()
	// The first write reaches the holders that listen; the names, the rest.
	rev := lockname.Revocation{Reason: reason, By: l.owner}
	gone, err := l.writeRevocation(ctx, c, rev)
	if err == nil && !gone {
		if rev.Nodes, rev.Dir, err = l.holders(ctx, c); err == nil && len(rev.Nodes) > 0 {
			_, err = l.writeRevocation(ctx, c, rev)
		}
	}
	if err != nil {
		return &opError{"revoke", l.path, err}
	}
	return nil
}

// writeRevocation writes rev into the directory's data; gone reports a
// missing directory, where nobody holds the lock.
func (l *RWLock) writeRevocation(ctx context.Context, c *zkclient.Client, rev lockname.Revocation) (gone bool, err error) {
	r := c.Set(ctx, l.path, rev.Data())
	if errors.Is(r.Err, zk.ErrNoNode) {
		return true, nil
	}
	return false, r.Err
}

// holders returns the sequence numbers of the nodes that hold the lock, as
// Queue judges them, from one listing and, only where a downgrade mark can
// change the answer, the first node's data: so a typical Revoke is one
// listing and one write, where Queue reads every node.
//
// Only the first node's mark can matter: one of our writers is granted
// when no node precedes it, and no node is ever created before it after
// that, so a writer of ours that is not first has never been granted and
// is not downgraded; a peer's mark is never trusted. And the first's
// matters only if a reader of ours follows it before any other writer:
// that reader holds if and only if the first was downgraded.
func (l *RWLock) holders(ctx context.Context, c *zkclient.Client) (held []int32, dir int64, err error) {
	nodes, dir, err := l.listQueue(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	for len(nodes) > 0 {
		first := nodes[0]
		if !first.ours || first.mode != Write || !readerJoins(nodes) {
			return heldSeqs(nodes, false), dir, nil
		}
		r := c.Get(ctx, l.path+"/"+first.name)
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			// It left since the listing: judged without it, as Queue
			// leaves out the nodes that vanish; the next may be a writer
			// granted and downgraded since.
			nodes = nodes[1:]
		case r.Err != nil:
			return nil, 0, r.Err
		default:
			return heldSeqs(nodes, lockname.Downgraded(r.V.Data)), dir, nil
		}
	}
	return nil, dir, nil
}

// readerJoins reports whether a reader of ours follows nodes[0] before any
// other writer: it would hold with nodes[0] downgraded.
func readerJoins(nodes []lockNode) bool {
	for _, n := range nodes[1:] {
		if n.mode == Write {
			return false
		}
		if n.ours {
			return true
		}
	}
	return false
}

// heldSeqs returns the sequence numbers of the nodes in queue order that
// hold, by Queue's rules, with nodes[0] a reader if downgraded.
func heldSeqs(nodes []lockNode, downgraded bool) []int32 {
	modes := make([]Mode, len(nodes))
	for i, n := range nodes {
		modes[i] = n.mode
	}
	if downgraded {
		modes[0] = Read
	}
	var held []int32
	for i, h := range holding(nodes, modes) {
		if h {
			held = append(held, nodes[i].seq)
		}
	}
	return held
}

// Revoked returns a channel that is closed when a revocation (see
// RWLock.Revoke) made while this grant's node held reaches its holder. A
// downgraded grant, a nested one and the readers of a coalesced node are
// revoked with the node they hold. It costs one request when the
// connection's watch on the lock directory is not set (for the first
// listener, and the first after a revocation that came while nobody
// listened), or when the last read named this grant's node but the data
// may have changed since; else none.
func (g *Grant) Revoked() <-chan struct{} {
	h := g.h
	st := h.revoked()
	h.mu.Lock()
	listen := st.ch == nil
	if listen {
		st.ch = make(chan struct{})
	}
	ch := st.ch
	h.mu.Unlock()
	if listen && h.held() {
		h.l.listenRevocations(h.c).listen(h)
	}
	return ch
}

// revocation is the capability: it notes, as a hold begins, whether the
// hold is known to come before whatever fires the directory's data watch
// (see the top of this file).
type revocation struct{}

// A revoked is one hold's revocation state, guarded by the hold's mu.
type revoked struct {
	precedes *zkclient.Watch // the directory's data watch, if the hold is known to come before it fires
	ch       chan struct{}   // Revoked's; nil until asked for
}

func (revocation) begin(h *hold) {
	if w := h.l.revocationsOn(h.c).before(h.c); w != nil {
		st := h.revoked()
		h.mu.Lock()
		st.precedes = w
		h.mu.Unlock()
	}
}

func (revocation) changed(*hold, change) {}

// revoked returns h's revocation state, made on first use.
func (h *hold) revoked() *revoked {
	return h.slot(revocation{}, func() any { return new(revoked) }).(*revoked)
}

// precedes returns the directory's watch that h is known to come before.
func (h *hold) precedes() *zkclient.Watch {
	if st, ok := h.slot(revocation{}, nil).(*revoked); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		return st.precedes
	}
	return nil
}

// revoke closes h's Revoked channel, once.
func (h *hold) revoke() {
	st := h.revoked()
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.ch == nil {
		st.ch = make(chan struct{})
	}
	select {
	case <-st.ch:
	default:
		close(st.ch)
	}
}

// keep records what read number n of the directory found (a watch and
// the directory's data, or neither), and returns the nodes its request
// names.
func (rv *revocations) keep(w *zkclient.Watch, n, connects uint64, steady bool, dir zkclient.Node) []int32 {
	var named []int32
	if w != nil {
		rev, _ := lockname.ParseRevocation(dir.Data)
		// mutant: revoke-names-dir
		named = rev.Names(dir.Stat.Czxid)
	}
	rv.mu.Lock()
	rv.watch, rv.readNo, rv.connects, rv.steady, rv.named = w, n, connects, steady, named
	rv.mu.Unlock()
	return named
}

// revokeBefore revokes the listeners known to have been granted before w,
// set by read number n, fired: those that listened before that read was
// sent, and those granted while w was set and unfired.
func (rv *revocations) revokeBefore(w *zkclient.Watch, n uint64) {
	rv.revokeIf(func(h *hold, ls listener) bool { return ls.sent < n || h.precedes() == w })
}

// revoke revokes the listeners whose nodes are named by read number n.
// Only those that listened before it was sent are judged by its names:
// their node is in the directory it read, or gone. One that came later may
// hold a node of a directory made anew since, numbered as a named one was:
// it reads the data again (see confirm).
func (rv *revocations) revoke(nodes []int32, n uint64) {
	if len(nodes) == 0 {
		return
	}
	var later []*hold
	rv.revokeIf(func(h *hold, ls listener) bool {
		if !slices.Contains(nodes, ls.seq) {
			return false
		}
		// mutant: revoke-names-later
		if ls.sent >= n {
			later = append(later, h)
			return false
		}
		return true
	})
	for _, h := range later {
		n, _ := lockname.Parse(path.Base(h.path))
		// mutant: revoke-confirm-later
		go rv.confirm(h, n.Seq)
	}
}

func (rv *revocations) revokeIf(hit func(*hold, listener) bool) {
	rv.mu.Lock()
	var revoked []*hold
	for h, ls := range rv.listeners {
		if hit(h, ls) {
			revoked = append(revoked, h)
			delete(rv.listeners, h)
		}
	}
	rv.idleLocked()
	rv.mu.Unlock()
	for _, h := range revoked {
		h.l.debug("revoked", h.path)
		h.revoke()
	}
}
