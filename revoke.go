package rwlock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Cooperative revocation. Anyone may ask the holders of a lock to let go.
//
// Why it cannot change who is granted. A revocation is a write of the
// revocation record in the lock directory's own data, which no family
// reads for its queue. It creates,
// deletes and changes no lock node. So every grant, wait and proof of the
// protocol is what it would be without it. A holder that is told lets go by
// releasing, as it would anyway. One that never looks keeps its grant.
// Peers see nothing, since the directory keeps its children.
//
// Whom it reaches, as Revoke's doc promises. Revoke writes the request
// twice. The first write names no node. The second, after a listing of the
// queue, names by sequence number the nodes that hold at that listing. So
// every grant that holds at the listing is named. A listening holder is
// reached by the first write's notification and the read after it, if the
// holder knows that its grant came before that write (see How fast). A node first held after
// Revoke's last write, in ZooKeeper's order of events, is never reached.
// The names are of nodes that held before that write. And a notification
// revokes only grants known to come before the write that fired it. A grant
// made between the listing and the second write may or may not be reached.
//
// How fast. A listening holder is told by the notification of the first
// write and the read the goroutine sends after it anyway, with no request
// of its own, when it knows that its grant came before that write. The
// read shows the reason, and whether the revocation record changed at all
// (see keep). In one session, ZooKeeper sends a watch's notification before
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
// and one round trip after the write. The listing and the second write are
// for the rest.
//
// Only a change of the revocation record is a revocation. The directory's
// data holds one record per purpose (see lockname.WithRevocation). Each
// Revoke's record carries a new id, so a change is seen even when the
// words are the same. Clients before this format take any change for a
// revocation: a false alarm for them, never a missed one. An application
// must not watch the directory's data on the lock's connection.
//
// What it costs. Revoke sends a read of the directory's data, so as to
// keep the other records, the two writes and the listing. It reads a
// node's data too only when a writer of ours holds with a reader of ours
// queued behind it (see holders). An acquisition pays nothing. Grant.Revoked, WithRead
// and WithWrite listen, at the cost Grant.Revoked states. The connection
// keeps one data watch on the directory. It is kept while nobody listens,
// since a watch costs nothing until it fires. Each time it fires while
// anyone listens, the data is read again with a new watch.

// Revoke asks the grants that hold the lock, in this process or any other,
// to let go, for reason. Their Revoked channels close, Grant.Revocation
// tells them the reason, who asked (the lock's owner, see WithOwner) and
// when, and WithRead's and WithWrite's functions see their context
// cancelled with a cause wrapping ErrRevoked.
// It reaches every grant that holds when it lists the queue, and a
// listening holder one round trip after its first write arrives. It never reaches a
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
	rev := lockname.Revocation{Reason: reason, By: l.owner, ID: lockname.NewGUID()[:16]}
	var last zkclient.Node // the directory's data and stat as last read or written
	gone, err := l.writeRevocation(ctx, c, rev, &last)
	if err == nil && !gone {
		if rev.Nodes, rev.Dir, err = l.holders(ctx, c); err == nil && len(rev.Nodes) > 0 {
			_, err = l.writeRevocation(ctx, c, rev, &last)
		}
	}
	if err != nil {
		return &opError{"revoke", l.path, err}
	}
	return nil
}

// writeRevocation writes rev as the revocation record of the directory's
// data, keeping the other records (see lockname.WithRevocation). It writes
// on the version last read or written, and reads again if another write
// came first. gone reports a missing directory, where nobody holds the
// lock.
func (l *RWLock) writeRevocation(ctx context.Context, c *zkclient.Client, rev lockname.Revocation, last *zkclient.Node) (gone bool, err error) {
	for {
		if last.Stat == nil {
			r := c.Get(ctx, l.path)
			if errors.Is(r.Err, zk.ErrNoNode) {
				return true, nil
			}
			if r.Err != nil {
				return false, r.Err
			}
			*last = r.V
		}
		data := lockname.WithRevocation(last.Data, rev)
		r := c.SetVersion(ctx, l.path, data, last.Stat.Version)
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			return true, nil
		case errors.Is(r.Err, zk.ErrBadVersion):
			last.Stat = nil // another purpose's write came first: keep it
		case r.Err != nil:
			return false, r.Err
		default:
			*last = zkclient.Node{Data: data, Stat: r.V}
			return false, nil
		}
	}
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
// one node, downgraded, nested or coalesced, are revoked together. A
// revocation made before the first call is seen by it: the channel is
// closed as it returns. Where that takes a read, the first call waits for
// it, one round trip: when the connection does not watch the lock
// directory yet, when a change since the grant is not judged yet, or when
// the data may have changed since the last read named this grant's node.
// Otherwise it costs no request and does not wait. During an outage it
// does not wait, nor longer than the session timeout for a slow server,
// and the channel closes once a read can tell. Later calls
// never wait. An acquisition pays nothing for any of this.
func (g *Grant) Revoked() <-chan struct{} { return g.revokedChan(true) }

// firstLookBound bounds the first call's wait where the session timeout is
// not known.
const firstLookBound = 10 * time.Second

// revokedChan is Revoked. Its first call waits for the read that judges
// it only if wait is set. Tests that hold that read back pass false.
func (g *Grant) revokedChan(wait bool) <-chan struct{} {
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
		judged := h.l.listenRevocations(h.c).listen(h)
		// The first call waits for the read that judges it, if any, so
		// that a revocation made before is seen now. Not through an
		// outage: a read that fails ends the wait, and the channel closes
		// later, when a read can tell. A server too slow to answer within
		// the session timeout does not hold the caller longer either.
		if wait && judged != nil && h.c.Conn().State() == zk.StateHasSession {
			t, _ := h.c.Timeout(h.l.sessionTimeout, h.session)
			if t <= 0 {
				t = firstLookBound
			}
			bound := time.NewTimer(t)
			defer bound.Stop()
			select {
			case <-judged:
			case <-ch:
			case <-h.ctx.Done():
			case <-bound.C:
			}
		}
	}
	return ch
}

// A Revocation is a request to let go, as the holder it reached sees it.
type Revocation struct {
	Reason string    // as passed to Revoke, on one line; may be empty
	By     string    // who asked: the revoking lock's owner (WithOwner; host:pid by default)
	At     time.Time // the server's time of the write: the lock directory's modification time
}

// Revocation returns the revocation that reached g's holder, and true, once
// Revoked's channel is closed. Until then it returns false. At is the
// directory's modification time as the holder read it. So another purpose's
// write to the directory since can make it later than the request.
func (g *Grant) Revocation() (Revocation, bool) {
	st, ok := g.h.slot(revocation{}, nil).(*revoked)
	if !ok {
		return Revocation{}, false
	}
	g.h.mu.Lock()
	defer g.h.mu.Unlock()
	return st.info, st.ch != nil && isClosed(st.ch)
}

// revokedError returns the error that says g was revoked, and why. It
// wraps ErrRevoked.
func (g *Grant) revokedError() error {
	if rev, ok := g.Revocation(); ok {
		return &revokedError{rev}
	}
	return ErrRevoked
}

// A revokedError is ErrRevoked with the revocation's reason, author and
// time.
type revokedError struct{ rev Revocation }

func (e *revokedError) Error() string {
	msg := ErrRevoked.Error()
	if e.rev.By != "" {
		msg += " by " + e.rev.By
	}
	if !e.rev.At.IsZero() {
		msg += " at " + e.rev.At.UTC().Format(time.RFC3339)
	}
	if e.rev.Reason != "" {
		msg += ": " + e.rev.Reason
	}
	return msg
}

func (e *revokedError) Unwrap() error { return ErrRevoked }

// revocation is the capability. As a hold begins, it notes whether the hold
// is known to come before whatever fires the directory's data watch (see
// How fast, at the top of this file), and the revocation record then.
type revocation struct{}

// A revoked is one hold's revocation state, guarded by the hold's mu.
type revoked struct {
	precedes *zkclient.Watch // the directory's data watch, if the hold is known to come before it fires
	seen     []byte          // the directory's data read as that watch was set
	ch       chan struct{}   // Revoked's channel, nil until asked for
	info     Revocation      // the revocation that closed ch
}

func (revocation) begin(h *hold) {
	if w, seen := h.l.revocationsOn(h.c).before(h.c); w != nil {
		st := h.revoked()
		h.mu.Lock()
		st.precedes, st.seen = w, seen
		h.mu.Unlock()
	}
}

func (revocation) changed(*hold, change) {}

// revoked returns h's revocation state, made on first use.
func (h *hold) revoked() *revoked {
	return h.slot(revocation{}, func() any { return new(revoked) }).(*revoked)
}

// precedes returns the directory's watch that h is known to come before,
// and the data read as it was set.
func (h *hold) precedes() (*zkclient.Watch, []byte) {
	if st, ok := h.slot(revocation{}, nil).(*revoked); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		return st.precedes, st.seen
	}
	return nil, nil
}

// revoke closes h's Revoked channel, once, for rev.
func (h *hold) revoke(rev Revocation) {
	st := h.revoked()
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.ch == nil {
		st.ch = make(chan struct{})
	}
	select {
	case <-st.ch:
	default:
		st.info = rev
		close(st.ch)
	}
}

// revocationOf returns the revocation in directory data read with stat.
func revocationOf(n zkclient.Node) Revocation {
	rev, _ := lockname.ParseRevocation(n.Data)
	r := Revocation{Reason: rev.Reason, By: rev.By}
	if n.Stat != nil && n.Stat.Mtime != 0 {
		r.At = time.UnixMilli(n.Stat.Mtime)
	}
	return r
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
// directory's data or neither. A read that failed keeps the last record.
//
// Only a change of the revocation record is a revocation. The watch's
// notification does not say what changed. So a fire is judged by the read
// after it, which the goroutine sends anyway: if the record differs from
// the one the fired watch's read found, the listeners granted before the
// fire are revoked. That costs no request, and delays the holder by one
// round trip. Then the listeners the record names are revoked. Both happen
// under mu with the record's update. So a listener either is judged here,
// or sees this read's record in listen.
func (rv *revocations) keep(w *zkclient.Watch, n, connects uint64, steady bool, dir zkclient.Node) {
	var named []int32
	if w != nil {
		rev, _ := lockname.ParseRevocation(dir.Data)
		// mutant: revoke-names-dir
		named = rev.Names(dir.Stat.Czxid)
	}
	rv.mu.Lock()
	rv.watch, rv.readNo, rv.connects, rv.steady, rv.named = w, n, connects, steady, named
	if w == nil {
		// A failed read judges nobody, but the first looks of those
		// waiting stop waiting: they are not kept waiting through an
		// outage. A later read still tells them.
		for h := range rv.listeners {
			rv.judgedLocked(h)
		}
		rv.mu.Unlock()
		return
	}
	// mutant: revoke-any-change
	changed := !lockname.SameRevocation(rv.record, dir.Data)
	if changed {
		rv.info = revocationOf(dir)
	}
	var hit, later []*hold
	for h, ls := range rv.listeners {
		p, _ := h.precedes()
		switch {
		case rv.pending != nil && changed && (ls.sent < rv.pendingNo || p == rv.pending):
			hit = append(hit, h) // granted before the fired watch's write
		case !slices.Contains(named, ls.seq):
		// mutant: revoke-names-later
		case ls.sent >= n:
			// Came after this read was sent. Its node may be of a
			// directory made anew since, numbered as a named one was.
			later = append(later, h)
		default:
			hit = append(hit, h)
		}
	}
	for h := range rv.listeners {
		// The hit are told by their Revoked channel; the later ones, when
		// their own read is judged.
		if !slices.Contains(hit, h) && !slices.Contains(later, h) {
			rv.judgedLocked(h)
		}
	}
	rv.pending = nil
	rv.record, rv.recordWatch, rv.recordNo = dir.Data, w, n
	rv.revokeLocked(hit)
	info := rv.info
	rv.mu.Unlock()
	revokeAll(hit, info)
	for _, h := range later {
		seq, _ := lockname.Parse(path.Base(h.path))
		// mutant: revoke-confirm-later
		go rv.confirm(h, seq.Seq)
	}
}

// fired notes that w, the watch set by read number n, fired for a change
// of the directory's data. The next read judges it (see keep).
func (rv *revocations) fired(w *zkclient.Watch, n uint64) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.pending == nil && rv.recordWatch == w {
		rv.pending, rv.pendingNo = w, n
	}
}

// revokeIf revokes the listeners hit picks, for rev.
func (rv *revocations) revokeIf(hit func(*hold, listener) bool, rev Revocation) {
	rv.mu.Lock()
	var revoked []*hold
	for h, ls := range rv.listeners {
		if hit(h, ls) {
			revoked = append(revoked, h)
		}
	}
	rv.revokeLocked(revoked)
	rv.mu.Unlock()
	revokeAll(revoked, rev)
}

// revokeLocked removes hs from the listeners.
func (rv *revocations) revokeLocked(hs []*hold) {
	for _, h := range hs {
		delete(rv.listeners, h)
	}
	rv.idleLocked()
}

func revokeAll(hs []*hold, rev Revocation) {
	for _, h := range hs {
		h.l.debug("revoked", h.path)
		h.revoke(rev)
	}
}
