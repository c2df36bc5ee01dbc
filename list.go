package rwlock

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Listing the directory. A listing finds our node, and takes the snapshot
// of the nodes before it. The first listing is sent behind the create.

// A listing is the outcome of a listing with its child watch, and the
// directory's stat.
type listing struct {
	zkclient.Reply[[]string]
	watch *zkclient.Watch
	stat  *zk.Stat
	sent  time.Time
}

func listed(r zkclient.Reply[zkclient.Listing]) zkclient.Reply[[]string] {
	return zkclient.Reply[[]string]{V: r.V.Names, Session: r.Session, Err: r.Err}
}

// listBehind sends the member's first listing, with its child watch on the
// directory. It goes right behind the create the acquisition is about to
// send, without waiting for its answer. When nobody is in the way, the
// acquisition then takes one round trip instead of two.
//
// ZooKeeper carries out one session's requests in the order they arrive. So
// a listing that reaches the server after the create shows our node. But
// go-zookeeper has no call that keeps two requests in order. It sends
// concurrent calls as they come. The listing waits until the create's call
// has begun, which closes sending, and yields once. The create then nearly
// always reaches go-zookeeper's queue first. It is correct either way.
//
//   - A listing that shows our node was carried out after our create. It
//     shows every node that can ever precede ours.
//   - A listing that lacks our node may have overtaken the create. It
//     proves nothing, and the member lists again. Its child watch fires on
//     our own create, and is dropped.
//   - A listing made in another session than the create, or that failed, is
//     dropped the same way.
func (m *member) listBehind(ctx context.Context, sending <-chan struct{}) <-chan listing {
	ch := make(chan listing, 1)
	go func() {
		select {
		case <-sending:
			runtime.Gosched()
		case <-ctx.Done():
		}
		sent := time.Now()
		r, w := m.a.c.ListW(ctx, m.l.path)
		ch <- listing{listed(r), w, r.V.Stat, sent}
	}()
	return ch
}

// list reads the directory, finds our node and takes the snapshot of the
// nodes before it. Only a listing after a failed first listing sets a child
// watch on the directory (see listBehind). The first one's watch is the
// hold's watch for its node's deletion, if we are granted at once (see
// hold.watchFrom).
func (m *member) list(ctx context.Context) (step, error) {
	if m.snap.self.name != "" {
		m.relists.Add(1) // a listing after one that showed our node
	}
	var lr zkclient.Reply[zkclient.Listing]
	sent := time.Now()
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
	return m.locate(r, lr.V.Stat, sent)
}

// locate finds our node in a listing, sent at sent, and takes the snapshot
// of the nodes before it.
func (m *member) locate(r zkclient.Reply[[]string], dir *zk.Stat, sent time.Time) (step, error) {
	if !m.ours(r.Session) {
		return stepRequeue, nil
	}
	m.vanished(r.V) // before takeSnapshot reuses the snapshot's memory
	snap, err := takeSnapshot(m.dropTwins(r.V), m.node, m.snap.before)
	switch {
	case errors.Is(err, errNotListed):
		// Never "we are first". Someone deleted our node while we waited.
		m.node = ""
		return 0, lostError(m.path, errNodeDeleted)
	case err != nil:
		return 0, err
	}
	m.l.debug("listed", m.path)
	// mutant: queue-beside-blind-peer
	if mixed := m.l.blind(snap.peers); mixed != nil {
		// Before or after ours, such a node breaks exclusion. Refuse to
		// queue, loudly. abort deletes our node.
		return 0, mixed
	}
	if err := m.l.disagree(&snap); err != nil {
		return 0, err // a node made under another capacity: refuse, as above
	}
	m.snap, m.listedAt = snap, sent
	m.dated(dir)
	if m.listed != nil {
		m.listed(m)
	}
	if _, blocked := m.snap.blocker(m.isDowngraded); !blocked {
		if m.owesDelay() { // see lockdelay.go
			if !m.block {
				return 0, ErrWouldBlock
			}
			return stepWait, nil
		}
		return stepGrant, nil // the listing proves our node there, and nothing in our way
	}
	return stepWait, nil
}

// The fencing token of a grant is its node's czxid, or a stand-in that
// orders against every other grant's token exactly as the czxid does. It
// is known before the grant is returned, so Token never blocks.

// dated takes our node's token from the listing that found it, at no
// request, when the directory's stat proves it.
//
// ZooKeeper names a sequential node after its parent's count of creates. A
// create sets that count to the node's number + 1. It also sets the
// parent's pzxid to the create's zxid. A deletion moves pzxid and leaves
// the count alone (PrepRequestProcessor, DataTree.createNode and
// deleteNode). The stat a client gets shows cversion = 2·creates −
// children, since it counts creates and deletions together
// (DataNode.copyStat). TestServerSequenceNumbering checks all of this
// against the server.
//
// So when (cversion + children)/2 = our number + 1, no child was created
// after ours. Then pzxid is our czxid, unless a child created before ours
// was deleted between our create and the listing. In that case pzxid is
// that deletion's zxid. It is still smaller than the czxid of every node
// created after the listing. And it is larger than that of every node
// created before ours. Either way it orders against every other grant's
// token exactly as our czxid does. No later holder is turned away, and no
// earlier one let in. Past the top of the counter the count does not
// change, so the rule never holds. A token read from our node, by a
// waiter's own watch, is exact and is kept.
//
// A reader needs less. Its token must order only against writers' tokens,
// since readers granted together carry tokens in no particular order.
// Suppose the listing shows no writer after ours, and no node of a peer.
// Then pzxid will do, whatever was created after ours. pzxid is at least
// our czxid, since the listing shows our node. Every writer created after
// the listing has a larger czxid. A writer created after ours and deleted
// before the listing never held. It queued behind us, and we are still
// here. So contended readers, which the first rule rarely fits, need no
// read of their node either.
func (m *member) dated(dir *zk.Stat) {
	if m.tok != 0 || dir == nil {
		return
	}
	creates := (int64(dir.Cversion) + int64(dir.NumChildren)) / 2
	switch {
	// mutant: token-any-listing
	case creates == int64(m.snap.self.seq)+1:
		m.tok = dir.Pzxid
	// mutant: reader-token-any-listing
	case m.mode == Read && m.weight == 0 && !m.snap.laterWriter && m.snap.peers == 0:
		m.tok = dir.Pzxid
	}
}

// readToken reads our node's czxid when no listing or watch told it, so
// that the token is known when the grant is made. It returns stepGrant once
// it is.
func (m *member) readToken(ctx context.Context) (step, error) {
	r := m.a.c.Get(ctx, m.path)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		m.node = "" // not ours to delete any more
		return 0, lostError(m.path, errNodeDeleted)
	case r.Err != nil:
		return m.after(r.Err)
	case !m.ours(r.Session):
		return stepRequeue, nil
	}
	m.tok, m.exact = r.V.Stat.Czxid, true
	m.l.debug("read the token", m.path)
	return stepGrant, nil
}

// token makes sure that the members' one token is known at the grant. It
// returns stepGrant once the token is known. The members of a set share one
// czxid, the multi's zxid. A listing's stand-in (see dated) is below every
// node created later in its own directory only. So the smallest stand-in is
// below every later node of every member's directory only if each member
// has one. Otherwise one member's node is read.
func (a *acquisition) token(ctx context.Context) (step, error) {
	exact := slices.ContainsFunc(a.members, func(m *member) bool { return m.exact })
	dated := !slices.ContainsFunc(a.members, func(m *member) bool { return m.tok == 0 })
	if exact || dated {
		return stepGrant, nil
	}
	return a.members[0].readToken(ctx)
}
