package rwlock

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// One acquisition makes one node per lock asked for. Lock, RLock, TryLock
// and TryRLock ask for one lock, and LockAll for several. The acquisition
// is a small state machine. Each step makes its requests and returns the
// next step. Every failure after a node may exist deletes it before the
// call returns.
//
//	create ──▶ list ──▶ wait ──▶ ready ──▶ grant
//	  ▲         ▲ │      │
//	  │         │ ▼      │       reconnect: wait for the session, then list
//	  │      reconnect ◀─┘       (our node may exist) or create
//	  └─── requeue               requeue: the session was replaced, and our
//	                             nodes went with it: new ones
//
// Only making nodes is the acquisition's job. It sends one create for one
// lock, and one multi for several. Each lock's node then lists, waits and
// proves its place on its own, as a member (see watch.go). A member that
// would make a node again stops. The acquisition then deletes what is left
// of the old nodes, and makes every member's node again.
//
// No grant without a node. A grant is returned only when one of two proofs
// shows that our node existed at a moment when nothing before it was in our
// way.
//
//   - A listing shows our node and no blocker before it. A listing sees one
//     consistent state of the directory.
//   - While we waited, a data watch on our own node had not fired when the
//     event or answer that cleared our way arrived. The watch was set after
//     the create (see own.go).
//
// What clears our way is read off the snapshot of our first listing (see
// watch.go). Anything else lists again before the grant.
//
// Why several locks cannot deadlock. In every directory, sequence numbers
// follow the order in which the leader applied the creates. So a node of an
// earlier multi precedes a node of a later one. A member waits only for
// nodes before its own, which are nodes of earlier multis. So every wait
// points from a later multi to an earlier one. A cycle of waits would need
// a multi earlier than itself. This holds for callers that take all their
// locks in one call. A caller that holds a grant and asks for more can
// deadlock. So can peers that take the same paths one by one.

// run takes the steps until every member is granted. It returns their holds
// in the order asked. If it fails, it leaves no node behind.
func (a *acquisition) run(ctx context.Context) ([]*hold, error) {
	if len(a.members) == 1 {
		ctx = a.members[0].counting(ctx) // once for every step (see WithCounter)
	}
	for _, m := range a.members {
		if err := m.l.checkDeletable(m.counting(ctx), a.c); err != nil {
			return nil, err
		}
	}
	next := a.all(stepCreate)
	for {
		var err error
		if next[0] == stepCreate {
			next, err = a.create(ctx)
		}
		if err == nil {
			next, err = a.advance(ctx, next)
		}
		if err == nil && !slices.ContainsFunc(next, func(n step) bool { return n != stepGrant }) {
			var holds []*hold
			if holds, next, err = a.ready(ctx); holds != nil {
				return holds, nil
			}
		}
		if err != nil {
			return nil, a.abort(ctx, err)
		}
	}
}

// advance runs every member's steps from next. It returns once each member
// has nothing in its way (stepGrant), or once one must make a node again.
// The acquisition then makes them all again. If one member fails, the
// others stop where they are.
func (a *acquisition) advance(ctx context.Context, next []step) ([]step, error) {
	a.connects, a.connectsKnown = a.c.ConnectCount()
	if len(a.members) == 1 { // on the caller's goroutine
		m := a.members[0]
		n, err := m.proceed(m.counting(ctx), next[0])
		if err != nil || n != stepCreate && n != stepRequeue {
			next[0] = n
			return next, err
		}
		return a.again(n), nil
	}
	members, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(a.members))
	var wg sync.WaitGroup
	for i, m := range a.members {
		wg.Go(func() {
			next[i], errs[i] = m.proceed(m.counting(members), next[i])
			// mutant: set-partial
			if errs[i] != nil || next[i] == stepCreate || next[i] == stepRequeue {
				stop()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return next, err
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) { // not the stop above
			return next, err
		}
	}
	for _, n := range next {
		if n == stepCreate || n == stepRequeue {
			return a.again(n), nil
		}
	}
	return next, nil
}

// again returns every member's next step when one member's is next. A
// member that must make a node makes the acquisition make them all again.
func (a *acquisition) again(next step) []step {
	if next == stepCreate || next == stepRequeue {
		a.requeue(next == stepRequeue)
		next = stepCreate
	}
	return a.all(next)
}

// ready checks that every member, with nothing in its way, can be granted.
// Then it grants them and returns their holds. Otherwise it returns the
// members' next steps. After a reconnection, all of them prove their place
// again.
//
// Each member's proof was for the moment its own way cleared. That may be
// long before the last member's way cleared. Its node may have been deleted
// by hand since, and the lock given to the writer behind it. Its watch
// tells without a request, as confirmOwn's does. That is the data watch on
// its own node if it waited. Else it is the child watch of the listing that
// proved it, which any change of the directory fires. Events come in the
// order of the changes (see own.go). So if the watch has not fired as of
// the last packet read, its node outlived the change that cleared the last
// member's way. The member reads its node where the watch has fired, or
// where the connection was made anew since the proofs began. A lone
// member's proof is of this moment, so it needs none of this.
func (a *acquisition) ready(ctx context.Context) ([]*hold, []step, error) {
	for _, m := range a.members {
		next, err := m.prepare(m.counting(ctx))
		switch {
		case err != nil:
			return nil, nil, err
		case next != stepGrant:
			return nil, a.again(next), nil
		}
	}
	if len(a.members) > 1 {
		if next, err := a.confirm(ctx); next != nil || err != nil {
			return nil, next, err
		}
	}
	if next, err := a.token(a.members[0].counting(ctx)); next != stepGrant || err != nil {
		if err != nil {
			return nil, nil, err
		}
		return nil, a.again(next), nil
	}
	return a.grant(ctx)
}

// confirm is ready's check for a set. It reads the nodes of the members
// whose proof is older than the last member's, unless their watches vouch
// for them (see ready).
func (a *acquisition) confirm(ctx context.Context) ([]step, error) {
	n, known := a.c.ConnectCount()
	reconnected := !known || !a.connectsKnown || n != a.connects
	for _, m := range a.members {
		watch := m.own.watch
		if watch == nil {
			watch = m.dir
		}
		if !reconnected && watch != nil && !watch.FiredNow() {
			continue
		}
		r := a.c.Get(m.counting(ctx), m.path)
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			m.node = "" // not ours to delete any more
			return nil, lostError(m.path, errNodeDeleted)
		case r.Err != nil:
			next, err := m.after(r.Err)
			if err != nil {
				return nil, err
			}
			return a.again(next), nil
		case !m.ours(r.Session):
			return a.again(stepRequeue), nil
		}
		m.tok, m.exact = r.V.Stat.Czxid, true
	}
	return nil, nil
}

// grant makes every member's hold, with one token. The token is the
// smallest a member knows (see token). A member already known lost fails
// the acquisition, and every hold is released.
func (a *acquisition) grant(ctx context.Context) ([]*hold, []step, error) {
	var tok int64
	for _, m := range a.members {
		if m.tok != 0 && (tok == 0 || m.tok < tok) {
			tok = m.tok
		}
	}
	holds := make([]*hold, len(a.members))
	for i, m := range a.members {
		m.tok = tok
		m.l.debug("granted", m.path)
		holds[i] = newHold(m.l, a.c, m)
		m.announce(holds[i]) // under a capacity, tell the waiter behind (see capacity.go)
	}
	a.granted = true
	for _, h := range holds {
		h.judge()
		if err := h.ended(); err != nil {
			for _, h := range holds {
				h.drop(context.WithoutCancel(ctx))
			}
			return nil, nil, err
		}
	}
	return holds, nil, nil
}

// abort deletes every node the acquisition made, in one multi when it can.
// It returns cause, joined with a failed deletion's error.
func (a *acquisition) abort(ctx context.Context, cause error) error {
	if zkclient.SessionGone(cause) {
		return cause // the nodes went with the session
	}
	if len(a.members) > 1 && a.deleteAll(a.members[0].counting(ctx)) {
		return cause
	}
	// A node is not known, or the multi failed. Each member deletes its
	// own, as a lone member does.
	errs := make([]error, len(a.members))
	var wg sync.WaitGroup
	for i, m := range a.members {
		wg.Go(func() { errs[i] = m.undo(m.counting(ctx), cause) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != cause {
			return err // cause, joined with the deletion's error
		}
	}
	return cause
}

// deleteAll deletes every member's node in one multi, if every node is
// known. It reports whether they are gone.
func (a *acquisition) deleteAll(ctx context.Context) bool {
	var ops []any
	for _, m := range a.members {
		if m.node == "" || m.unsure {
			return false
		}
		ops = append(ops, &zk.DeleteRequest{Path: m.path, Version: -1})
	}
	m0 := a.members[0]
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m0.l.cleanupTimeout)
	defer cancel()
	r := a.c.Multi(dctx, ops, nil, nil)
	if r.Err != nil || r.Session != m0.session {
		return false
	}
	for _, m := range a.members {
		m.node = ""
	}
	return true
}

// proceed takes a member's steps from next until nothing is in its way
// (stepGrant), or until an error. It stops at stepCreate and stepRequeue,
// where the member would make a node. The acquisition makes the nodes of
// all its members together.
func (m *member) proceed(ctx context.Context, next step) (step, error) {
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

// prepare checks, once nothing is in our way, that the grant can be made.
// If ctx ended meanwhile, the node goes and ctx's error returns, as a
// cancelled call promises. A grant starts with more than its head start to
// run on the lease. So after a long wait, one sync renews the lease first.
// If that fails, the member goes on as after any failed request. It keeps
// its place in the queue, and a later listing proves it again.
func (m *member) prepare(ctx context.Context) (step, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c := m.a.c
	t, granted := c.Timeout(m.l.sessionTimeout, m.session)
	if !granted && c.Conn().State() != zk.StateHasSession {
		// Without a granted T, a disconnection is a loss. The grant's first
		// Err would report it. So wait for the session, and prove our place
		// again.
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

// undo deletes whatever node the member made. It uses a fresh bounded
// context, since ctx may be the reason we stop. It returns cause, joined
// with a failed deletion's error.
func (m *member) undo(ctx context.Context, cause error) error {
	l := m.l
	switch {
	case zkclient.SessionGone(cause):
		// The session expired or was closed, and the node went with it.
	// mutant: abort-leaves-node
	case m.node != "":
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanupTimeout)
		defer cancel()
		// mutant: abort-marks-held
		if err := l.deleteNode(ctx, m.a.c, m.path, m.session, lockname.Unmarked); err != nil {
			return errors.Join(cause, err)
		}
	case m.unsure:
		l.finish(m.a.c, "", m.a.guid, m.a.c.Conn().SessionID())
	default:
		m.removeCreatedDirs() // made and never used; a container that never had a child stays
	}
	return cause
}
