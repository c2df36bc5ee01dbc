package rwlock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// advance takes a member's steps from next until nothing is in its way
// (stepGrant), or an error. It stops where the member would make a node
// (stepCreate, stepRequeue): the acquisition makes the nodes of all its
// members together.
func (m *member) advance(ctx context.Context, next step) (step, error) {
	for {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		var err error
		switch next {
		case stepCreate, stepRequeue, stepGrant:
			return next, nil
		case stepList:
			next, err = m.list(ctx)
		case stepWait:
			next, err = m.wait(ctx)
		case stepReconnect:
			if err = m.retry.Wait(ctx, m.a.c.Conn()); err == nil {
				next = stepCreate
				if m.node != "" || m.unsure {
					next = stepList
				}
			}
		}
		if err != nil {
			return next, err
		}
	}
}

// after maps a failed request to the next step: reconnect after a
// connection loss, requeue after the end of the session; any other error
// ends the acquisition.
func (m *member) after(err error) (step, error) {
	switch {
	case zkclient.ConnectionLoss(err):
		return stepReconnect, nil
	case errors.Is(err, zk.ErrSessionExpired):
		return stepRequeue, nil
	}
	return 0, err
}

// ours reports whether a request was served in the session that owns our
// node; if not, the session was replaced, and our node went with it.
func (m *member) ours(session int64) bool { return session == m.session && session != 0 }

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

// ready checks, once nothing is in our way, that the grant can be made,
// unless ctx ended meanwhile: then, as a cancelled call promises, the node
// goes and ctx's error returns. A grant starts with more than its head
// start to run on the lease: after a long wait, one sync renews it first.
// If that fails, the member goes on as after any failed request: its place
// in the queue is kept, and a later listing proves it again.
func (m *member) ready(ctx context.Context) (step, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c := m.a.c
	t := c.Timeout(m.l.sessionTimeout, m.session)
	if t <= 0 && c.Conn().State() != zk.StateHasSession {
		// Without T, a disconnection is a loss: the grant's first Err
		// would report it. Wait for the session, and prove our place again.
		return stepReconnect, nil
	}
	if t > 0 && !c.Fresh(m.session, t, zkclient.RenewInterval(t)) {
		r := c.Sync(ctx)
		switch {
		case r.Err != nil:
			return m.after(r.Err)
		case !m.ours(r.Session):
			return stepRequeue, nil
		}
	}
	return stepGrant, nil
}

func (m *member) isDowngraded(name string) bool { return m.downgraded[name] }

func (m *member) markDowngraded(name string) {
	if m.downgraded == nil {
		m.downgraded = make(map[string]bool)
	}
	m.downgraded[name] = true
}
