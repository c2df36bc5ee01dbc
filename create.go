package rwlock

import (
	"context"
	"errors"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// create makes every member's node, in one create for one lock and in one
// multi for several, and the lock directories that are missing. Each
// member's first listing goes out right behind it (see listBehind). It
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
			// Made, but the session changed while we waited: the nodes are
			// ours only if the session that has them now made them. Find
			// out as after a lost answer.
			return a.unsure(stepList), nil
		case r.err == nil:
			// Every member knows its node before any looks at its queue, so
			// that a failure of one deletes them all (abort).
			for i, m := range a.members {
				m.path, m.node, m.session = r.paths[i], r.paths[i][len(m.l.path)+1:], r.session
				m.l.debug("created", m.path)
			}
			next := make([]step, len(a.members))
			for i, m := range a.members {
				first := firsts[i]
				if first.Err != nil || first.Session != m.session || !slices.Contains(first.V, m.node) {
					next[i] = stepList // the listing overtook the create, or failed: list again
					continue
				}
				m.dir, m.oneTrip = first.watch, true
				var err error
				if next[i], err = m.locate(first.Reply, first.stat); err != nil {
					return nil, err
				}
			}
			return next, nil
		case errors.Is(r.err, zk.ErrNoNode) && r.failed >= 0 && tries < 4+len(a.members):
			// A lock directory is missing, or the server reaped it (an
			// empty container) between our mkdir and our create; a parent
			// may go the same way while we make the directory. One
			// directory per try: a multi names only its first failure.
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

// created is the outcome of a create or a multi: the paths made, in the
// members' order, the session that made them (0 if it changed meanwhile),
// and the error, with the member whose node failed.
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
		r := a.c.Create(ctx, nodePrefix(m.l.path, a.guid, m.mode, m.l.dialect), m.data(), zk.FlagEphemeral|zk.FlagSequence, m.l.acl,
			sending, func(r zkclient.Reply[string]) { m.l.finishCreate(a.c, r, a.guid) })
		return created{paths: []string{r.V}, session: r.Session, err: r.Err}
	}
	ops := make([]any, len(a.members))
	for i, m := range a.members {
		ops[i] = &zk.CreateRequest{
			Path: nodePrefix(m.l.path, a.guid, m.mode, m.l.dialect), Data: m.data(), Acl: m.l.acl,
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
	// The failing op carries the multi's error; the others none, or a
	// "runtime inconsistency".
	c.failed = slices.IndexFunc(r.V, func(m zk.MultiResponse) bool { return r.Err != nil && errors.Is(m.Error, r.Err) })
	return c
}

// data is the member's node data: the lock's, and its own lines.
func (m *member) data() []byte { return append(slices.Clip(m.l.data), m.lines...) }
