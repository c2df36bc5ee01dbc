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
// Whom it reaches: the request names the nodes that held the lock when it
// was made (Revoke lists the queue first), by sequence number, so a grant
// made later, a waiter granted later included, is not revoked.
//
// What it costs: Revoke sends a listing and the write, and a read between
// them only when a writer of ours holds with a reader of ours queued
// behind it (see holders). An acquisition pays nothing. Grant.Revoked,
// WithRead and WithWrite listen: the lock keeps one data watch on its
// directory, set with one read by the first grant of the session that
// listens, kept while nobody listens (a watch costs nothing until it
// fires), and read again, with a new watch, each time it fires while
// someone listens. A revocation reaches a listening holder in one
// notification and that read.

// Revoke asks the grants that hold the lock now, in this process or any
// other, to let go, for reason: their Revoked channels close, and WithRead's
// and WithWrite's functions see their context cancelled with cause
// ErrRevoked. It never deletes a node and never changes who is granted: a
// holder that does not look keeps its grant. Revoking a lock nobody holds
// does nothing. A later Revoke replaces an earlier one.
func (l *RWLock) Revoke(ctx context.Context, reason string) error {
	if l.conn == nil {
		return errorf("rwlock: revoke: %w: the RWLock was not made by New", ErrInvalidArgument)
	}
	c := zkclient.For(l.conn)
	defer c.Unref()
	held, err := l.holders(ctx, c)
	if err != nil {
		return errorf("rwlock: revoke %s: %w", l.path, err)
	}
	if len(held) == 0 {
		return nil
	}
	r := c.Set(ctx, l.path, lockname.Revocation(reason, l.owner, held))
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		return nil // every holder left, and the directory with them
	case r.Err != nil:
		return errorf("rwlock: revoke %s: %w", l.path, r.Err)
	}
	return nil
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
func (l *RWLock) holders(ctx context.Context, c *zkclient.Client) ([]int32, error) {
	nodes, err := l.listQueue(ctx, c)
	if err != nil {
		return nil, err
	}
	for len(nodes) > 0 {
		first := nodes[0]
		if !first.ours || first.mode != Write || !readerJoins(nodes) {
			return heldSeqs(nodes, false), nil
		}
		r := c.Get(ctx, l.path+"/"+first.name)
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			// It left since the listing: judged without it, as Queue
			// leaves out the nodes that vanish; the next may be a writer
			// granted and downgraded since.
			nodes = nodes[1:]
		case r.Err != nil:
			return nil, r.Err
		default:
			return heldSeqs(nodes, lockname.Downgraded(r.V.Data)), nil
		}
	}
	return nil, nil
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
// RWLock.Revoke) that names this grant reaches its holder. A downgraded
// grant and a nested one are revoked with the node they hold. The first
// call of a session on a lock costs one request; later ones cost none.
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
		r.l.revocations.listen(r)
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

// revocations are one lock's listening grants and its directory watch.
//
// The watch outlives its listeners: once set, it costs nothing until the
// directory's data changes, which only a revocation does (or the
// directory's deletion, or the session's end). So only the first listener
// of a lock in a session pays the read that sets it; later ones find it
// set and unfired, check the request it last read (a revocation that came
// between their grant and their listening), and wait on it.
type revocations struct {
	mu        sync.Mutex
	listeners map[*Grant]int32 // listening grants, by their node's sequence number
	reading   bool             // a goroutine reads the directory or waits on watch
	idle      chan struct{}    // closed when the last listener leaves: the goroutine stops
	watch     *zkclient.Watch  // the directory's data watch, set by the last read; nil before
	named     []int32          // the nodes named by the request the last read found
}

// listen adds g, a grant that owns its node, to the listeners until it
// ends, and makes sure the directory is watched.
func (rv *revocations) listen(g *Grant) {
	n, ok := lockname.Parse(path.Base(g.node))
	if !ok {
		return
	}
	rv.mu.Lock()
	if slices.Contains(rv.named, n.Seq) && rv.watch != nil && !rv.watch.FiredNow() {
		// Asked to let go between its grant and now, as the last read
		// found, and nothing changed since.
		rv.mu.Unlock()
		g.l.debug("revoked", g.node)
		g.revoke()
		return
	}
	if rv.listeners == nil {
		rv.listeners = make(map[*Grant]int32)
	}
	rv.listeners[g] = n.Seq
	start := !rv.reading
	if start {
		rv.reading, rv.idle = true, make(chan struct{})
	}
	w := rv.watch
	rv.mu.Unlock()
	g.whenEnded(func(error) { rv.leave(g) })
	if start {
		g.l.background.Add(1)
		go rv.read(g.l, g.c, w)
	}
}

// leave removes g from the listeners.
func (rv *revocations) leave(g *Grant) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if _, ok := rv.listeners[g]; !ok {
		return
	}
	delete(rv.listeners, g)
	rv.stopIfIdleLocked()
}

// stopIf marks the reading stopped, if it is still the one that idle ends.
func (rv *revocations) stopIf(idle chan struct{}) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.idle == idle && rv.reading {
		rv.reading = false
		close(rv.idle)
	}
}

func (rv *revocations) stopIfIdleLocked() {
	if len(rv.listeners) == 0 && rv.reading {
		rv.reading = false
		close(rv.idle)
	}
}

// read waits for w, the directory's data watch, to fire (it reads at once
// if w is nil or has fired), then reads the directory's data with a new
// watch, revokes the listeners it names, and waits again, while anyone
// listens. The client is the grant's that started it; grants hold a
// reference to it.
func (rv *revocations) read(l *RWLock, c *zkclient.Client, w *zkclient.Watch) {
	defer l.background.Done()
	rv.mu.Lock()
	idle := rv.idle
	rv.mu.Unlock()
	// No context ends the read: a read given up would still set its watch
	// later, and leave it behind; the client's close ends it instead.
	ctx := context.Background()
	var retry zkclient.Backoff
	for {
		if w != nil {
			select {
			case <-w.Fired():
			case <-idle:
				return
			}
		}
		r, next := c.GetW(ctx, l.path)
		switch {
		case isClosed(idle):
			rv.keep(next, r.V.Data, r.Err)
			return // nobody listens any more
		case r.Err != nil && zkclient.ConnectionLoss(r.Err):
			if retry.Wait(ctx, c.Conn()) != nil {
				rv.stopIf(idle)
				return
			}
			w = nil
			continue
		case r.Err != nil:
			// The directory is gone (with every node in it) or the client
			// closed or expired: the listeners' grants end too. A listener
			// that comes later starts reading again.
			l.debug("no longer listening for revocations: "+r.Err.Error(), l.path)
			rv.stopIf(idle)
			return
		}
		rv.revoke(rv.keep(next, r.V.Data, nil))
		w = next
	}
}

// keep records what a read of the directory found, and returns the nodes
// it names.
func (rv *revocations) keep(w *zkclient.Watch, data []byte, err error) []int32 {
	var named []int32
	if err == nil {
		_, _, named, _ = lockname.ParseRevocation(data)
	} else {
		w = nil
	}
	rv.mu.Lock()
	rv.watch, rv.named = w, named
	rv.mu.Unlock()
	return named
}

// revoke revokes the listeners whose nodes are named.
func (rv *revocations) revoke(nodes []int32) {
	rv.mu.Lock()
	var hit []*Grant
	for g, seq := range rv.listeners {
		if slices.Contains(nodes, seq) {
			hit = append(hit, g)
			delete(rv.listeners, g)
		}
	}
	rv.stopIfIdleLocked()
	rv.mu.Unlock()
	for _, g := range hit {
		g.l.debug("revoked", g.node)
		g.revoke()
	}
}
