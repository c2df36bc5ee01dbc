package rwlock

import (
	"context"
	"errors"
	"slices"

	"github.com/go-zookeeper/zk"
)

// The fencing token of a grant is its node's czxid, or a stand-in that
// orders against every other grant's token exactly as the czxid does. It
// is known before the grant is returned, so Token never blocks.

// dated takes our node's token from the listing that found it, at no
// request, when the directory's stat proves it. ZooKeeper names a
// sequential node after its parent's count of creates, and a create sets
// that count to the node's number + 1 and the parent's pzxid to the
// create's zxid; a deletion moves pzxid and leaves the count alone
// (PrepRequestProcessor, DataTree.createNode/deleteNode). The stat a client
// gets shows cversion = 2·creates − children, creates and deletions
// together (DataNode.copyStat); TestServerSequenceNumbering checks all of
// this against the server. So when (cversion + children)/2 = our number +
// 1, no child was created after ours, and pzxid is our czxid, unless a
// child created before ours was deleted in between: then it is that
// deletion's zxid, still smaller than the czxid of every node created
// after the listing and larger than that of every node created before
// ours. Either way it orders against every other grant's token exactly as
// our czxid does: no later holder is turned away, no earlier one let in.
// Past the top of the counter (no count change) the rule never holds. A
// token read from our node (a waiter's own watch) is exact and is kept.
//
// A reader needs less: its token must order only against writers' (readers
// granted together carry tokens in no particular order). If the listing
// shows no writer after ours, and none of a peer, pzxid will do whatever
// was created after ours: pzxid is at least our czxid (the listing shows
// our node), every writer created after the listing has a larger czxid,
// and one created after ours and deleted before the listing never held
// (it queued behind us, and we are still here). So contended readers, which
// the first rule rarely fits, need no read of their node either.
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
	case m.mode == Read && !m.snap.laterWriter && m.snap.peers == 0:
		m.tok = dir.Pzxid
	}
}

// readToken reads our node's czxid when no listing or watch told it: the
// token is known when the grant is made. It returns stepGrant when it is.
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

// token makes sure that the members' one token is known at the grant. The
// members of a set share one czxid, the multi's zxid. A listing's stand-in
// (see dated) is below every node created later in its own directory only:
// the smallest stand-in is below every later node of every member's
// directory only if each member has one. Otherwise one member's node is
// read.
// It returns stepGrant once the token is known.
func (a *acquisition) token(ctx context.Context) (step, error) {
	exact := slices.ContainsFunc(a.members, func(m *member) bool { return m.exact })
	dated := !slices.ContainsFunc(a.members, func(m *member) bool { return m.tok == 0 })
	if exact || dated {
		return stepGrant, nil
	}
	return a.members[0].readToken(ctx)
}
