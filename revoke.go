package rwlock

import (
	"context"
	"errors"
	"path"
	"slices"
	"sync"

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
		return errorf("rwlock: revoke: %w: the RWLock was not made by New", ErrInvalidArgument)
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
		return errorf("rwlock: revoke %s: %w", l.path, err)
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
// downgraded grant and a nested one are revoked with the node they hold.
// It costs one request when the connection's watch on the lock directory
// is not set (for the first listener, and the first after a revocation
// that came while nobody listened), or when the last read named this
// grant's node but the data may have changed since (see revoke.go); else
// none.
func (g *Grant) Revoked() <-chan struct{} {
	r := g.root()
	r.mu.Lock()
	listen := r.revoked == nil
	if listen {
		r.revoked = make(chan struct{})
	}
	ch := r.revoked
	r.mu.Unlock()
	if listen && r.ctx.Err() == nil {
		r.l.revocationsOn(r.c, true).listen(r)
	}
	return ch
}

// revoke closes g's Revoked channel, once.
func (g *Grant) revoke() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.revoked:
	default:
		close(g.revoked)
	}
}

// revocations are the listening grants of one lock directory on one
// connection, and their watch on the directory: one per connection and
// path, whatever the number of RWLock values (see revocationsOn).
//
// go-zookeeper fires every channel it has for a node when an event comes,
// so a second channel on the directory, set before a reconnection and sent
// again after it, would fire a channel set by a read after the
// reconnection for a change that read already showed. So one goroutine
// reads, and it sends a read only once the channel of its last read has
// fired (or none was set): never two channels at once. The goroutine
// holds a reference to the Client, and so does the channel until it fires
// (see zkclient's relay): the Client, and these revocations with it, stay
// the connection's while a channel is set.
//
// The watch outlives its listeners: once set, it costs nothing until the
// directory's data changes, which only a revocation does (or the
// directory's deletion, or the session's end). So a listener finds it set
// unless a revocation came while nobody listened, and a grant made while
// it is set and unfired is known to come before whatever fires it (see
// the top of this file).
type revocations struct {
	mu        sync.Mutex
	listeners map[*Grant]listener
	reading   bool            // the goroutine runs
	idle      chan struct{}   // closed when the last listener leaves: the goroutine stops if it waits
	watch     *zkclient.Watch // the directory's data watch, private to the last read; nil before
	readNo    uint64          // the number of that read
	connects  uint64          // the connection's session count when that read was sent and answered
	steady    bool            // connects is known, and the same before and after that read
	named     []int32         // the nodes named by the request that read found
	sent      uint64          // the reads sent so far
}

// A listener is a listening grant: its node's sequence number, and how
// many reads had been sent when it began to listen (any later read was
// sent after its grant).
type listener struct {
	seq  int32
	sent uint64
}

// revocationsOn returns the revocations of the lock's directory on c;
// with none made yet, nil, unless make.
func (l *RWLock) revocationsOn(c *zkclient.Client, make bool) *revocations {
	var fn func() any
	if make {
		fn = func() any { return new(revocations) }
	}
	rv, _ := c.Shared(l.path, fn).(*revocations)
	return rv
}

// before returns the directory's watch if a grant made now is known to
// come before whatever fires it: set and not fired, with no new connection
// since the read that set it. Else nil. The check is made after the
// packet that decided the grant was read, which can only make it say nil
// more often.
func (rv *revocations) before(c *zkclient.Client) *zkclient.Watch {
	if rv == nil {
		return nil
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.unchangedLocked(c)
}

// unchangedLocked returns the directory's watch if it is set and has not
// fired, with no new connection since the read that set it: then the
// directory's data is as that read found it. Else nil.
func (rv *revocations) unchangedLocked(c *zkclient.Client) *zkclient.Watch {
	w := rv.watch
	if w == nil || !rv.steady {
		return nil
	}
	// mutant: revoke-base-reconnected
	if n, known := c.ConnectCount(); !known || n != rv.connects {
		return nil
	}
	if w.FiredNow() {
		return nil
	}
	return w
}

// revoking reports whether w, a directory watch, fired for a change of the
// directory's data: a revocation.
func revoking(w *zkclient.Watch) bool {
	return w != nil && w.FiredNow() && w.Event().Type == zk.EventNodeDataChanged
}

// listen adds g, a grant that owns its node, to the listeners until it
// ends, and makes sure the directory is watched.
func (rv *revocations) listen(g *Grant) {
	n, ok := lockname.Parse(path.Base(g.node))
	if !ok {
		return
	}
	rv.mu.Lock()
	// Under mu: a fire that these checks miss is handled by revokeBefore,
	// which finds g among the listeners.
	named := slices.Contains(rv.named, n.Seq)
	// mutant: revoke-listen-precedes
	if revoking(g.precedes) || named && rv.unchangedLocked(g.c) != nil {
		// A revocation was written while g held, before it listened; or
		// the last read named g, and nothing changed since.
		rv.mu.Unlock()
		g.l.debug("revoked", g.node)
		g.revoke()
		return
	}
	if rv.listeners == nil {
		rv.listeners = make(map[*Grant]listener)
	}
	rv.listeners[g] = listener{n.Seq, rv.sent}
	// mutant: revoke-retired-client
	start := !rv.reading && g.c.RefIfLive()
	rv.reading = rv.reading || start
	w, no := rv.watch, rv.readNo
	rv.mu.Unlock()
	g.whenEnded(func(error) { rv.leave(g) })
	if start {
		// Not the lock's background work: it ends when the listeners
		// leave, whichever lock they are of. A Client retired meanwhile
		// (g ended, and with it the last use) starts nothing.
		go rv.read(g.l, g.c, w, no)
	}
	// mutant: revoke-confirm
	if named {
		// Named by the last read, but the data may have changed since,
		// unseen (a reconnection, a connection that does not count
		// them): read it again, without a watch.
		go rv.confirm(g, n.Seq)
	}
}

// confirm reads the directory's data without a watch, and revokes g if
// the request names its node. A read that fails is tried again after a
// pause while g listens, unless the directory or the session is gone (and
// g with it).
func (rv *revocations) confirm(g *Grant, seq int32) {
	var retry zkclient.Backoff
	for {
		r := g.c.Get(g.ctx, g.l.path)
		switch {
		case r.Err == nil:
			rev, _ := lockname.ParseRevocation(r.V.Data)
			if slices.Contains(rev.Names(r.V.Stat.Czxid), seq) {
				rv.revokeIf(func(h *Grant, _ listener) bool { return h == g })
			}
			return
		case g.ctx.Err() != nil || errors.Is(r.Err, zk.ErrNoNode) || zkclient.SessionGone(r.Err):
			return
		}
		if !rv.listening(g) || retry.Wait(g.ctx, g.c.Conn()) != nil {
			return
		}
	}
}

// listening reports whether g is among the listeners.
func (rv *revocations) listening(g *Grant) bool {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	_, ok := rv.listeners[g]
	return ok
}

// leave removes g from the listeners.
func (rv *revocations) leave(g *Grant) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if _, ok := rv.listeners[g]; !ok {
		return
	}
	delete(rv.listeners, g)
	rv.idleLocked()
}

// idleLocked tells the goroutine, if nobody listens.
func (rv *revocations) idleLocked() {
	if len(rv.listeners) == 0 && rv.idle != nil {
		close(rv.idle)
		rv.idle = nil
	}
}

// carryOn returns, while anyone listens, the channel that closes when the
// last listener leaves. Else it marks the goroutine stopped, and stop is
// true: a listener that comes later starts another.
func (rv *revocations) carryOn() (idle chan struct{}, stop bool) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if len(rv.listeners) == 0 {
		rv.reading = false
		return nil, true
	}
	if rv.idle == nil {
		rv.idle = make(chan struct{})
	}
	return rv.idle, false
}

// stop marks the goroutine stopped after read number n failed for good
// (the directory gone, the session or the connection ended), and reports
// whether a listener came after that read was sent: a grant of a new
// session, which another goroutine must serve.
func (rv *revocations) stop(n uint64) (again bool) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	for _, ls := range rv.listeners {
		// mutant: revoke-stop-again
		if ls.sent >= n {
			return true
		}
	}
	rv.reading = false
	return false
}

// read waits for w, the directory's data watch set by read number n, to
// fire (it reads at once if w is nil), revokes the listeners known to
// have been granted before, then reads the directory's data with a new
// watch, revokes the listeners it names, and waits again, while anyone
// listens. A read once sent is always answered and kept, so that the
// watch it sets is known, listeners or not. It holds a reference to c,
// which it drops as it returns.
func (rv *revocations) read(l *RWLock, c *zkclient.Client, w *zkclient.Watch, n uint64) {
	defer c.Unref()
	// No context ends a read: a read given up would still set its watch
	// later, and another read would set a second; the client's close ends
	// it instead.
	ctx := context.Background()
	var retry zkclient.Backoff
	warned := false
	for {
		if w != nil {
			idle, stop := rv.carryOn()
			if stop {
				return // nobody listens; the watch stays
			}
			select {
			case <-w.Fired():
			case <-idle:
				continue
			}
			if revoking(w) {
				// mutant: revoke-no-notice
				rv.revokeBefore(w, n)
			}
		}
		if c.Conn().State() != zk.StateHasSession && !rv.backOff(c, &retry) {
			return // a read sent now would race go-zookeeper setting its watches again
		}
		rv.mu.Lock()
		rv.sent++
		n = rv.sent
		rv.mu.Unlock()
		connects, known := c.ConnectCount()
		r, next := c.GetWPrivate(ctx, l.path)
		after, _ := c.ConnectCount()
		steady := known && after == connects
		if r.Err == nil {
			retry, warned = zkclient.Backoff{}, false
			rv.revoke(rv.keep(next, n, connects, steady, r.V), n)
			w = next
			continue
		}
		rv.keep(nil, n, 0, false, zkclient.Node{})
		// mutant: revoke-stale-watch
		w = nil // fired, and handled: the next read is sent at once
		switch {
		// mutant: revoke-final-errors
		case errors.Is(r.Err, zk.ErrNoNode) || zkclient.SessionGone(r.Err):
			// The directory is gone (with every node in it) or the
			// session ended: so did the grants of the listeners of the
			// moment.
			l.debug("no longer listening for revocations: "+r.Err.Error(), l.path)
			if rv.stop(n) {
				continue // read again, for the listeners that came since
			}
			return
		case !zkclient.ConnectionLoss(r.Err) && !warned:
			warned = true
			l.log.Warn("rwlock: cannot read the lock directory's data; revocations wait until it can be read",
				"lock", l.path, "err", r.Err)
		}
		// No watch was set: read again after a pause (a refusal may pass:
		// throttling, an ACL being changed), once the connection is back.
		if !rv.backOff(c, &retry) {
			return
		}
	}
}

// backOff waits a pause, then until the connection has a session, while
// anyone listens; false: the goroutine stops (nobody listens, or the
// connection was closed for good).
func (rv *revocations) backOff(c *zkclient.Client, retry *zkclient.Backoff) bool {
	for {
		idle, stop := rv.carryOn()
		if stop {
			return false
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-idle:
			case <-ctx.Done():
			}
			cancel()
		}()
		// mutant: revoke-wait-idle
		err := retry.Wait(ctx, c.Conn())
		cancel()
		switch {
		case err == nil:
			return true
		case !isClosed(idle): // the connection was closed for good
			rv.mu.Lock()
			rv.reading = false
			rv.mu.Unlock()
			return false
		}
		// The last listener left: stop, unless one came back since.
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
	rv.revokeIf(func(g *Grant, ls listener) bool { return ls.sent < n || g.precedes == w })
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
	var later []*Grant
	rv.revokeIf(func(g *Grant, ls listener) bool {
		if !slices.Contains(nodes, ls.seq) {
			return false
		}
		// mutant: revoke-names-later
		if ls.sent >= n {
			later = append(later, g)
			return false
		}
		return true
	})
	for _, g := range later {
		n, _ := lockname.Parse(path.Base(g.node))
		// mutant: revoke-confirm-later
		go rv.confirm(g, n.Seq)
	}
}

func (rv *revocations) revokeIf(hit func(*Grant, listener) bool) {
	rv.mu.Lock()
	var revoked []*Grant
	for g, ls := range rv.listeners {
		if hit(g, ls) {
			revoked = append(revoked, g)
			delete(rv.listeners, g)
		}
	}
	rv.idleLocked()
	rv.mu.Unlock()
	for _, g := range revoked {
		g.l.debug("revoked", g.node)
		g.revoke()
	}
}
