package rwlock

import (
	"context"
	"errors"
	"runtime"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Listing the directory: the first listing, sent behind the create, and
// any later one, which find our node and take the snapshot of the nodes
// before it.

// A listing is the outcome of a listing with its child watch, and the
// directory's stat.
type listing struct {
	zkclient.Reply[[]string]
	watch *zkclient.Watch
	stat  *zk.Stat
}

func listed(r zkclient.Reply[zkclient.Listing]) zkclient.Reply[[]string] {
	return zkclient.Reply[[]string]{V: r.V.Names, Session: r.Session, Err: r.Err}
}

// listBehind sends the member's first listing, with its child watch on the
// directory, right behind the create the acquisition is about to send,
// without waiting for its answer. When nobody is in the way, the
// acquisition takes one round trip instead of two.
//
// ZooKeeper carries out one session's requests in the order they arrive,
// so a listing that reaches the server after the create shows our node.
// But go-zookeeper has no call that keeps two requests in order; it sends
// concurrent calls as they come. The listing waits until the create's call
// has begun (sending is closed then), and yields once: the create then
// nearly always reaches go-zookeeper's queue first. It is correct either
// way:
//
//   - a listing that shows our node was carried out after our create: it
//     shows every node that can ever precede ours;
//   - a listing that lacks our node may have overtaken the create: it
//     proves nothing, and the member lists again. Its child watch fires on
//     our own create, and is dropped;
//   - a listing made in another session than the create, or that failed,
//     is dropped the same way.
func (m *member) listBehind(ctx context.Context, sending <-chan struct{}) <-chan listing {
	ch := make(chan listing, 1)
	go func() {
		select {
		case <-sending:
			runtime.Gosched()
		case <-ctx.Done():
		}
		r, w := m.a.c.ListW(ctx, m.l.path)
		ch <- listing{listed(r), w, r.V.Stat}
	}()
	return ch
}

// list reads the directory, finds our node and takes the snapshot of the
// nodes before it. Only a listing after a failed first listing (see
// listBehind) sets a child watch on the directory. The first one's is the
// hold's watch for its node's deletion, if we are granted at once (see
// hold.watchFrom).
func (m *member) list(ctx context.Context) (step, error) {
	if m.snap.self.name != "" {
		m.relists.Add(1) // a listing after one that showed our node
	}
	var lr zkclient.Reply[zkclient.Listing]
	if m.dir == nil {
		lr, m.dir = m.a.c.ListW(ctx, m.l.path)
	} else {
		lr = m.a.c.List(ctx, m.l.path)
	}
	r := listed(lr)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		r.Err, r.V = nil, nil // no directory, so no node of ours in it
	case r.Err != nil:
		return m.after(r.Err)
	}
	if m.unsure {
		return m.adopt(ctx, r)
	}
	return m.locate(r, lr.V.Stat)
}

// locate finds our node in a listing and takes the snapshot of the nodes
// before it.
func (m *member) locate(r zkclient.Reply[[]string], dir *zk.Stat) (step, error) {
	if !m.ours(r.Session) {
		return stepRequeue, nil
	}
	snap, err := takeSnapshot(m.dropTwins(r.V), m.node, m.snap.before)
	switch {
	case errors.Is(err, errNotListed):
		// Never "we are first": someone deleted our node while we waited.
		m.node = ""
		return 0, lostError(m.path, errNodeDeleted)
	case err != nil:
		return 0, err
	}
	m.l.debug("listed", m.path)
	if mixed := m.l.blind(snap.peers); mixed != nil {
		// Before or after ours, such a node breaks exclusion: refuse to
		// queue (abort deletes our node), loudly.
		return 0, mixed
	}
	m.snap = snap
	m.dated(dir)
	if m.listed != nil {
		m.listed(m)
	}
	if _, blocked := m.snap.blocker(m.isDowngraded); !blocked {
		return stepGrant, nil // the listing is the proof: our node, and nothing in our way
	}
	return stepWait, nil
}
