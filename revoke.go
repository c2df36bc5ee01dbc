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

// Cooperative revocation. Anyone may ask the holders of a lock to let go.
//
// Why it cannot change who is granted. A revocation is a write of the lock
// directory's own data, which no family reads for its queue. It creates,
// deletes and changes no lock node. So every grant, wait and proof of the
// protocol is what it would be without it. A holder that is told lets go by
// releasing, as it would anyway. One that never looks keeps its grant.
// Peers see nothing, since the directory keeps its children.
//
// Whom it reaches, as Revoke's doc promises. Revoke writes the request
// twice. The first write names no node. The second, after a listing of the
// queue, names by sequence number the nodes that hold at that listing. So
// every grant that holds at the listing is named. A listening holder is
// reached by the first write's notification, if the holder knows that its
// grant came before that write (see How fast). A node first held after
// Revoke's last write, in ZooKeeper's order of events, is never reached.
// The names are of nodes that held before that write. And a notification
// revokes only grants known to come before the write that fired it. A grant
// made between the listing and the second write may or may not be reached.
//
// How fast. A listening holder is told by the notification of the first
// write alone, with no request, when it knows that its grant came before
// that write. In one session, ZooKeeper sends a watch's notification before
// any answer or notification that shows a later state. So a grant decided
// on a packet read before the notification of the directory's data watch
// came before the write that fired it. A grant knows that in two cases.
//
//   - The watch was set, and had not fired, when the grant was made. And no
//     new connection came since the read that set it. After a reconnection,
//     the watches set again may fire after answers that show a later state.
//   - The grant listened before the read that set the watch was sent. That
//     read was answered after the grant. The watch it set is the only
//     channel go-zookeeper has for the directory's data on the connection
//     (see revocations). So it fires only for a change that the read did
//     not show.
//
// Any other listener is judged by the names of the read that follows, as a
// late listener is. Such a listener was granted while the watch was being
// set again. A listener named by the last read is told at once if the watch
// says the data is unchanged since. Else it is told after one more read,
// without a watch. That happens after a reconnection, or on a connection
// that does not count its sessions. Names count only in the directory they
// were listed in, since a directory made anew numbers its nodes from 0
// again. So a revocation reaches a listening holder in one notification
// after the write. The listing and the second write are for the rest.
//
// Any change of the directory's data is taken for a revocation, since that
// data belongs to the lock. An application must not watch it on the lock's
// connection either.
//
// What it costs. Revoke sends the two writes and the listing. It sends a
// read only when a writer of ours holds with a reader of ours queued behind
// it (see holders). An acquisition pays nothing. Grant.Revoked, WithRead
// and WithWrite listen, at the cost Grant.Revoked states. The connection
// keeps one data watch on the directory. It is kept while nobody listens,
// since a watch costs nothing until it fires. Each time it fires while
// anyone listens, the data is read again with a new watch.

// Revoke asks the grants that hold the lock, in this process or any other,
// to let go, for reason. Their Revoked channels close, and WithRead's and
// WithWrite's functions see their context cancelled with cause ErrRevoked.
// It reaches every grant that holds when it lists the queue, and a
// listening holder as soon as its first write arrives. It never reaches a
// node first held after its last write. It never deletes a node or changes
// who is granted, so a holder that does not look keeps its grant. Revoking
// a lock nobody holds reaches nobody. A later Revoke replaces an earlier
// one.
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

// writeRevocation writes rev into the directory's data. gone reports a
// missing directory, where nobody holds the lock.
func (l *RWLock) writeRevocation(ctx context.Context, c *zkclient.Client, rev lockname.Revocation) (gone bool, err error) {
	r := c.Set(ctx, l.path, rev.Data())
	if errors.Is(r.Err, zk.ErrNoNode) {
		return true, nil
	}
	return false, r.Err
}

// holders returns the sequence numbers of the nodes that hold the lock, as
// Queue judges them. It reads one listing. It reads the first node's data
// only where a downgrade mark can change the answer. So a typical Revoke
// sends one listing besides its two writes, where Queue reads every node.
//
// Only the first node's mark can matter. One of our writers is granted when
// no node precedes it, and no node is ever created before it after that. So
// a writer of ours that is not first has never been granted, and is not
// downgraded. A peer's mark is never trusted. And the first node's mark
// matters only if a reader of ours follows it before any other writer. That
// reader holds if and only if the first was downgraded.
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
			// It left since the listing. Judge without it, as Queue leaves
			// out the nodes that vanish. The next may be a writer granted
			// and downgraded since.
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
// other writer. That reader would hold with nodes[0] downgraded.
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

// Revoked returns a channel that is closed when a revocation made while the
// grant's node held reaches its holder (see RWLock.Revoke). The grants on
// one node, downgraded, nested or coalesced, are revoked together. It costs
// one request when the connection does not watch the lock directory yet, or
// when the data may have changed since the last read named this grant's
// node. Otherwise it costs none.
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

// revocation is the capability. As a hold begins, it notes whether the hold
// is known to come before whatever fires the directory's data watch (see
// How fast, at the top of this file).
type revocation struct{}

// A revoked is one hold's revocation state, guarded by the hold's mu.
type revoked struct {
	precedes *zkclient.Watch // the directory's data watch, if the hold is known to come before it fires
	ch       chan struct{}   // Revoked's channel, nil until asked for
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

// wasRevoked reports whether h's Revoked channel was closed.
func (h *hold) wasRevoked() bool {
	st, ok := h.slot(revocation{}, nil).(*revoked)
	if !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return st.ch != nil && isClosed(st.ch)
}

// names reports whether the last read of the directory's data found a
// request that names seq. It is false if no read was made on c.
func (rv *revocations) names(seq int32) bool {
	if rv == nil {
		return false
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return slices.Contains(rv.named, seq)
}

// keep records what read number n of the directory found, a watch and the
// directory's data or neither. It returns the nodes that the revocation
// request in the data names.
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

// revokeBefore revokes the listeners known to have been granted before w
// fired, w being the watch set by read number n. They are those that
// listened before that read was sent, and those granted while w was set and
// unfired.
func (rv *revocations) revokeBefore(w *zkclient.Watch, n uint64) {
	rv.revokeIf(func(h *hold, ls listener) bool { return ls.sent < n || h.precedes() == w })
}

// revoke revokes the listeners whose nodes are named by read number n. Only
// those that listened before it was sent are judged by its names, since
// their node is in the directory it read, or gone. One that came later may
// hold a node of a directory made anew since, numbered as a named one was.
// That one reads the data again (see confirm).
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
