package rwlock

import (
	"context"
	"errors"
	"fmt"
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
// was made (Revoke reads the queue first), by sequence number, so a grant
// made later, a waiter granted later included, is not revoked.
//
// What it costs: nothing, unless a holder listens. Grant.Revoked, WithRead
// and WithWrite listen: the lock keeps one data watch on its directory
// (zkclient shares it among the lock's grants) while any of its grants
// listen, set with one read when the first one starts, and read again, with
// a new watch, each time it fires. A revocation reaches a listening holder
// in one notification and that read.

// Revoke asks the grants that hold the lock now, in this process or any
// other, to let go, for reason: their Revoked channels close, and WithRead's
// and WithWrite's functions see their context cancelled with cause
// ErrRevoked. It never deletes a node and never changes who is granted: a
// holder that does not look keeps its grant. Revoking a lock nobody holds
// does nothing. A later Revoke replaces an earlier one.
func (l *RWLock) Revoke(ctx context.Context, reason string) error {
	q, err := l.Queue(ctx)
	if err != nil {
		return fmt.Errorf("rwlock: revoke %s: %w", l.path, err)
	}
	var held []int32
	for _, e := range q {
		if e.Held {
			held = append(held, e.Seq)
		}
	}
	if len(held) == 0 {
		return nil
	}
	c := zkclient.For(l.conn)
	defer c.Unref()
	r := c.Set(ctx, l.path, lockname.Revocation(reason, l.owner, held))
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		return nil // every holder left, and the directory with them
	case r.Err != nil:
		return fmt.Errorf("rwlock: revoke %s: %w", l.path, r.Err)
	}
	return nil
}

// Revoked returns a channel that is closed when a revocation (see
// RWLock.Revoke) that names this grant reaches its holder. A downgraded
// grant and a nested one are revoked with the node they hold. The first
// call starts listening, which costs one request per lock.
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
type revocations struct {
	mu        sync.Mutex
	listeners map[*Grant]int32 // listening grants, by their node's sequence number
	reading   bool             // a read of the directory is under way, or its watch is set
	idle      chan struct{}    // closed when the last listener leaves: the reader stops
}

// listen adds g, a grant that owns its node, to the listeners until it
// ends, and makes sure the directory is watched.
func (rv *revocations) listen(g *Grant) {
	n, ok := lockname.Parse(path.Base(g.node))
	if !ok {
		return
	}
	rv.mu.Lock()
	if rv.listeners == nil {
		rv.listeners = make(map[*Grant]int32)
	}
	rv.listeners[g] = n.Seq
	start := !rv.reading
	if start {
		rv.reading, rv.idle = true, make(chan struct{})
	}
	rv.mu.Unlock()
	g.whenEnded(func(error) { rv.leave(g) })
	if start {
		g.l.background.Add(1)
		go rv.read(g.l, g.c)
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

func (rv *revocations) stopIfIdleLocked() {
	if len(rv.listeners) == 0 && rv.reading {
		rv.reading = false
		close(rv.idle)
	}
}

// read reads the directory's data with a watch, revokes the listeners it
// names, and reads again when the watch fires, while anyone listens. The
// client is the grant's that started it; grants hold a reference to it.
func (rv *revocations) read(l *RWLock, c *zkclient.Client) {
	defer l.background.Done()
	rv.mu.Lock()
	idle := rv.idle
	rv.mu.Unlock()
	// No context ends the read: a read given up would still set its watch
	// later, and leave it behind; the client's close ends it instead.
	ctx := context.Background()
	var retry zkclient.Backoff
	for {
		r, w := c.GetW(ctx, l.path)
		switch {
		case isClosed(idle):
			return // nobody listens any more
		case r.Err != nil && zkclient.ConnectionLoss(r.Err):
			if retry.Wait(ctx, c.Conn()) != nil {
				return
			}
			continue
		case r.Err != nil:
			// The directory is gone (with every node in it) or the client
			// closed: the listeners' grants end too.
			l.debug("no longer listening for revocations: "+r.Err.Error(), l.path)
			return
		}
		if _, _, nodes, ok := lockname.ParseRevocation(r.V.Data); ok {
			rv.revoke(nodes)
		}
		select {
		case <-w.Fired():
		case <-idle:
			return
		}
	}
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
