package rwlock

import (
	"context"
	"errors"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// How an acquisition recovers: a create whose answer was lost, a member
// that needs a new node, a session replaced while it waited. No node it
// made may outlive it, and none of an old create may turn up later as a
// node it would queue behind.

// settle, after a create whose answer was lost, waits for the session and
// syncs the server it is on with the leader before the members look for
// their nodes by guid (adopt). The create either committed before the sync,
// and every listing after it shows all of its nodes, or it never will (a
// request of the old connection that reaches the leader after the session
// has moved is refused), and none shows any. Without the sync, a server
// behind the leader could show none of a create it applies a moment later,
// and the members would queue again in front of their own nodes.
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

// unsure marks every member's create of unknown outcome: a node with the
// guid may exist in every directory, or in none.
func (a *acquisition) unsure(next step) []step {
	for _, m := range a.members {
		m.unsure = true
	}
	return a.all(next)
}

// finishCreate receives the outcome of a multi its caller stopped waiting
// for, and makes sure no node outlives the call (see RWLock.finishCreate).
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
// node when the session was replaced (its nodes went with it), or when its
// node is not found after a lost answer (then none of the multi's are: see
// settle) or was deleted by hand. What is left of the others is deleted:
// by path where it is known, by guid for a member still unsure. The guid
// is kept where no member is unsure, so that no node of the old create can
// turn up later as a stranger to queue behind; where one is, the
// acquisition takes a new guid, so that deleting by the old one cannot
// touch its new nodes.
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
		m.node, m.path, m.session, m.unsure = "", "", 0, false
		m.snap, m.dir, m.own, m.tok, m.exact = snapshot{}, nil, ownWatch{}, 0, false
	}
}

// dropTwins deletes, and leaves out of children, the nodes other than ours
// that carry our guid: a create whose answer was lost and that was carried
// out only after the listing adopt looked at, so that we created again.
// Left alone, such a twin would stand in our own way, and outlive the
// acquisition.
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

// adopt settles a create whose outcome we did not learn: the node that
// carries our guid is ours if the session we have now owns it (its
// ephemeral owner says so, read with the data watch we need anyway). If a
// lost create was retried and both happened, the first is kept and the
// others are deleted. With no such node, we create again.
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
			m.l.debug("found the node of a create whose answer was lost", path)
			return stepList, nil
		}
	}
	return stepCreate, nil
}
