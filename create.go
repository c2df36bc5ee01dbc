package rwlock

import (
	"context"
	"errors"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// create makes every member's node, and the lock directories that are
// missing. It sends one create for one lock, and one multi for several.
// Each member's first listing goes out right behind it (see listBehind). It
// returns each member's next step.
func (a *acquisition) create(ctx context.Context) ([]step, error) {
	for tries := 0; ; tries++ {
		sending := make(chan struct{})
		behind := make([]<-chan listing, len(a.members))
		for i, m := range a.members {
			if m.dir == nil {
				behind[i] = m.listBehind(m.counting(ctx), sending)
			}
		}
		r := a.send(a.members[0].counting(ctx), sending)
		firsts := make([]listing, len(a.members))
		for i, ch := range behind {
			if ch != nil {
				firsts[i] = <-ch
			}
		}
		switch {
		case r.err == nil && r.session == 0:
			// Made, but the session changed while we waited. The nodes are
			// ours only if the session that has them now made them. Find
			// out as after a lost answer.
			return a.unsure(stepList), nil
		case r.err == nil:
			// Every member knows its node before any looks at its queue, so
			// that a failure of one deletes them all (see abort).
			for i, m := range a.members {
				m.path, m.node, m.session = r.paths[i], r.paths[i][len(m.l.path)+1:], r.session
				m.l.debug("created", m.path)
			}
			next := make([]step, len(a.members))
			for i, m := range a.members {
				first := firsts[i]
				if first.Err != nil || first.Session != m.session || !slices.Contains(first.V, m.node) {
					next[i] = stepList // the listing overtook the create, or failed, so list again
					continue
				}
				m.dir, m.oneTrip = first.watch, true
				var err error
				if next[i], err = m.locate(first.Reply, first.stat, first.sent); err != nil {
					return nil, err
				}
			}
			return next, nil
		case errors.Is(r.err, zk.ErrNoNode) && r.failed >= 0 && tries < 4+len(a.members):
			// A lock directory is missing. Or the server reaped it, as an
			// empty container, between our mkdir and our create. A parent
			// may go the same way while we make the directory. We make one
			// directory per try, since a multi names only its first
			// failure.
			m := a.members[r.failed]
			if err := m.mkdirs(m.counting(ctx)); err != nil && !errors.Is(err, zk.ErrNoNode) {
				next, err := m.after(err)
				return a.all(next), err
			}
			if err := m.recheckDeletable(m.counting(ctx)); err != nil {
				return nil, err
			}
		case errors.Is(r.err, zk.ErrNoAuth) && r.failed >= 0:
			return nil, cannotCreate(a.members[r.failed].l.path, r.err)
		case zkclient.ConnectionLoss(r.err):
			return a.settle(a.members[0].counting(ctx))
		default:
			next, err := a.members[0].after(r.err)
			return a.all(next), err
		}
	}
}

// created is the outcome of a create or a multi. It holds the paths made,
// in the members' order, and the session that made them. The session is 0
// if it changed meanwhile. It also holds the error, with the member whose
// node failed.
type created struct {
	paths   []string
	session int64
	err     error
	failed  int // the member the error is about; -1 if none is known
}

// send sends the create, or the multi, and waits for its answer. A late
// answer after ctx ended goes to finishCreate, so that no node outlives
// the call.
func (a *acquisition) send(ctx context.Context, sending chan struct{}) created {
	if len(a.members) == 1 {
		m := a.members[0]
		r := a.c.Create(ctx, m.prefix(a.guid), m.data(), zk.FlagEphemeral|zk.FlagSequence, m.l.acl,
			sending, func(r zkclient.Reply[string]) { m.l.finishCreate(a.c, r, a.guid) })
		return created{paths: []string{r.V}, session: r.Session, err: r.Err}
	}
	ops := make([]any, len(a.members))
	for i, m := range a.members {
		ops[i] = &zk.CreateRequest{
			Path: m.prefix(a.guid), Data: m.data(), Acl: m.l.acl,
			Flags: zk.FlagEphemeral | zk.FlagSequence,
		}
	}
	r := a.c.Multi(ctx, ops, sending, a.finishCreate)
	c := created{session: r.Session, err: r.Err, failed: -1}
	if r.Err == nil {
		for _, m := range r.V {
			c.paths = append(c.paths, m.String)
		}
	}
	// The failing op carries the multi's error. The others carry none, or a
	// "runtime inconsistency".
	c.failed = slices.IndexFunc(r.V, func(m zk.MultiResponse) bool { return r.Err != nil && errors.Is(m.Error, r.Err) })
	return c
}

// data is the member's node data: the lock's, and its own lines.
func (m *member) data() []byte {
	if m.keepable && m.l.keptData != nil && len(m.lines) == 0 { // as adopt keeps
		return m.l.keptData
	}
	return append(slices.Clip(m.l.data), m.lines...)
}

// How an acquisition recovers from a create whose answer was lost, a member
// that needs a new node, or a session replaced while it waited. No node it
// made may outlive it. No node of an old create may turn up later as a node
// it would queue behind.

// settle handles a create whose answer was lost. It waits for the session,
// and syncs the server it is on with the leader. Only then do the members
// look for their nodes by guid (see adopt). Either the create committed
// before the sync, and every listing after it shows all of its nodes. Or it
// never will, and no listing shows any of them. A request of the old
// connection that reaches the leader after the session has moved is
// refused. Without the sync, a server behind the leader could show none of
// a create it applies a moment later. The members would then queue again in
// front of their own nodes.
func (a *acquisition) settle(ctx context.Context) ([]step, error) {
	next := a.unsure(stepList) // if we give up meanwhile, abort deletes by guid
	var retry zkclient.Backoff
	for {
		if err := retry.Wait(ctx, a.c.Conn()); err != nil {
			return nil, err
		}
		r := a.c.Sync(ctx)
		switch {
		case r.Err == nil && r.Session != 0:
			return next, nil
		case r.Err == nil || zkclient.ConnectionLoss(r.Err):
			continue
		}
		n, err := a.members[0].after(r.Err)
		return a.all(n), err
	}
}

// unsure marks every member's create as of unknown outcome. A node with the
// guid may exist in every directory, or in none.
func (a *acquisition) unsure(next step) []step {
	for _, m := range a.members {
		m.unsure = true
	}
	return a.all(next)
}

// finishCreate receives the outcome of a multi its caller stopped waiting
// for. It makes sure no node outlives the call (see RWLock.finishCreate).
func (a *acquisition) finishCreate(r zkclient.Reply[[]zk.MultiResponse]) {
	for i, m := range a.members {
		one := zkclient.Reply[string]{Session: r.Session, Err: r.Err}
		if r.Err == nil {
			one.V = r.V[i].String
		}
		m.l.finishCreate(a.c, one, a.guid)
	}
}

// requeue readies the acquisition for a new create. A member needs a new
// node in three cases. The session was replaced, and its nodes went with
// it. Or its node was not found after a lost answer, and then none of the
// multi's are (see settle). Or its node was deleted by hand.
//
// What is left of the others is deleted. A known node is deleted by path,
// and a member still unsure deletes by guid. Where no member is unsure and
// the session lives on, the guid is kept. So no node of the old create can
// turn up later as a stranger to queue behind. Where one is unsure, the
// acquisition takes a new guid. So deleting by the old guid cannot touch
// its new nodes. A replaced session took its nodes along: a new guid then
// costs nothing.
func (a *acquisition) requeue(sessionReplaced bool) {
	fresh := sessionReplaced
	for _, m := range a.members {
		switch session := a.c.Conn().SessionID(); {
		case m.node != "" && m.session == session:
			m.l.finish(a.c, m.path, "", m.session)
		case m.unsure:
			m.l.finish(a.c, "", a.guid, session)
			fresh = true
		}
	}
	if fresh {
		a.guid = lockname.NewGUID()
		a.members[0].l.debug("queueing again with new nodes", a.members[0].path)
	}
	for _, m := range a.members {
		// mutant: lock-delay-requeue-forgets
		m.vanished(nil) // what went ahead of the old node, nothing told (see lockdelay.go)
		m.node, m.path, m.session, m.unsure, m.marked = "", "", 0, false, false
		m.snap, m.dir, m.own, m.tok, m.exact = snapshot{}, nil, ownWatch{}, 0, false
	}
}

// dropTwins deletes the nodes other than ours that carry our guid, and
// leaves them out of children. Such a twin comes from a create whose answer
// was lost, carried out only after the listing adopt looked at. So we
// created again. Left alone, a twin would stand in our own way, and outlive
// the acquisition.
func (m *member) dropTwins(children []string) []string {
	twin := func(name string) bool {
		g, ok := lockname.GUID(name)
		return ok && g == m.a.guid && name != m.node
	}
	if !slices.ContainsFunc(children, twin) {
		return children
	}
	for _, name := range children {
		if twin(name) {
			m.l.finish(m.a.c, m.l.path+"/"+name, "", m.session)
		}
	}
	return slices.DeleteFunc(slices.Clone(children), twin)
}

// adopt settles a create whose outcome we did not learn. The node that
// carries our guid is ours if the session we have now owns it. Its
// ephemeral owner tells, read with the data watch we need anyway. If a lost
// create was retried and both happened, the first is kept and the others
// are deleted. With no such node, we create again.
func (m *member) adopt(ctx context.Context, r zkclient.Reply[[]string]) (step, error) {
	m.unsure = false
	var mine []lockNode
	for _, name := range r.V {
		if g, ok := lockname.GUID(name); ok && g == m.a.guid {
			if n, ok := parseNode(name); ok {
				mine = append(mine, n)
			}
		}
	}
	slices.SortFunc(mine, queueOrder)
	for i, n := range mine {
		path := m.l.path + "/" + n.name
		if i > 0 {
			m.l.finish(m.a.c, path, "", r.Session)
			continue
		}
		w, err := m.watchOwn(ctx, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			m.unsure = true
			return m.after(err)
		case w.stat.EphemeralOwner != w.session || w.session == 0:
			// A node of a session that is gone, and takes it along.
		default:
			m.node, m.path, m.session, m.tok = n.name, path, w.session, w.stat.Czxid
			m.own = ownWatch{watch: w.watch}
			m.adoptSnapshot(r.V) // what went ahead since, the next listing tells (see lockdelay.go)
			m.l.debug("found the node of a create whose answer was lost", path)
			return stepList, nil
		}
	}
	return stepCreate, nil
}
