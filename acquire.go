package rwlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// One acquisition makes one node per lock asked for: one for Lock, RLock,
// TryLock and TryRLock, one per lock for LockAll. It is a small state
// machine. Each step makes its requests and returns the next step. Every
// failure after a node may exist deletes it before the call returns.
//
//	create ──▶ list ──▶ wait ──▶ ready ──▶ grant
//	  ▲         ▲ │      │
//	  │         │ ▼      │       reconnect: wait for the session, then list
//	  │      reconnect ◀─┘       (our node may exist) or create
//	  └─── requeue               requeue: the session was replaced, and our
//	                             nodes went with it: new ones
//
// Only making nodes is the acquisition's: one create for one lock, one
// multi for several. Each lock's node then lists, waits and proves its
// place on its own (a member; see watch.go). A member that would make a
// node again stops, and the acquisition makes every member's node again,
// after deleting what is left of the old ones.
//
// No grant without a node. A grant is returned only when one of two
// proofs shows that our node existed at a moment when nothing before it
// was in our way:
//
//   - a listing that shows our node and no blocker before it (a listing
//     sees one consistent state of the directory);
//   - while waiting, a data watch on our own node, set after the create and
//     not fired when the event or answer that cleared our way arrived (see
//     confirmOwn).
//
// What clears our way is read off the snapshot of our first listing. It
// holds every node that can ever precede ours, since numbers only grow. A
// node leaves it only when shown gone, or when a node after it shows that
// it held (see watch.go). Anything else lists again before the grant.
//
// Why several locks cannot deadlock: in every directory, sequence numbers
// follow the order in which the leader applied the creates, so a node of
// an earlier multi precedes a node of a later one. A member waits only for
// nodes before its own: nodes of earlier multis. So every wait points from
// a later multi to an earlier one, and a cycle of waits would need a multi
// earlier than itself. This holds for callers that take all their locks in
// one call. A caller that holds a grant and asks for more can deadlock, as
// can peers that take the same paths one by one.

type step int

const (
	stepCreate    step = iota // make our node, and the lock directory when it is missing
	stepList                  // list the directory: find our node, take the snapshot
	stepWait                  // wait for the nodes in our way
	stepGrant                 // nothing is in our way: the grant
	stepReconnect             // the connection failed: wait for the session, then go on
	stepRequeue               // the session was replaced: queue again with a new node
)

// want is what the caller asked of one lock.
type want struct {
	mode  Mode
	block bool // false for TryLock and TryRLock
}

// acquisition is one call that makes nodes, in progress.
type acquisition struct {
	c       *zkclient.Client // every member's: one connection
	guid    string           // in every member's node name, to find them after a lost answer
	members []*member        // one per lock, in the order asked

	connects      uint64 // the connection's session count when the members' proofs began
	connectsKnown bool
	granted       bool // the holds are made, and took over the members' uses of the client
}

// member is one lock's node in an acquisition.
type member struct {
	l *RWLock
	a *acquisition
	want
	lines []byte // its node's data lines besides the lock's (a set's: lockname.InSet)

	node    string // our node, relative to the lock directory; "" until known
	path    string // its full path
	session int64  // the session that owns node
	unsure  bool   // a create's outcome is unknown: a node with the guid may exist
	created []string

	snap       snapshot
	downgraded map[string]bool // writers seen downgraded (readers only)
	waited     bool            // we watched a node before being granted
	retry      zkclient.Backoff

	dir     *zkclient.Watch // child watch on the directory, from our first listing
	own     ownWatch        // data watch on our own node, set before we wait
	tok     int64           // our node's token, once known (see dated)
	exact   bool            // tok was read from our node's stat, not dated by a listing
	oneTrip bool            // the listing sent behind the create showed our node

	listed func(*member) // hears of each listing that found our node (coalescing)

	requests zkclient.Counter // the requests it sent, for its AcquireEvent
	relists  atomic.Int32     // its listings after the one that first showed its node
}

// newAcquisition makes an acquisition that blocks, of one member per
// request. Each member takes a use of the connection's client: its hold
// keeps it, and a failed acquisition gives it back (release).
func newAcquisition(reqs ...Request) *acquisition {
	a := &acquisition{guid: lockname.NewGUID()}
	for _, r := range reqs {
		a.c = zkclient.For(r.Lock.conn)
		a.members = append(a.members, &member{l: r.Lock, a: a, want: want{mode: r.Mode, block: true}})
	}
	return a
}

// release gives back the members' uses of the client, after a failure,
// unless their holds took them over.
func (a *acquisition) release() {
	if a.granted {
		return
	}
	for range a.members {
		a.c.Unref()
	}
}

// all returns next for every member.
func (a *acquisition) all(next step) []step { return slices.Repeat([]step{next}, len(a.members)) }

// run takes the steps until every member is granted, and returns their
// holds in the order asked; or it fails, with no node left behind.
func (a *acquisition) run(ctx context.Context) ([]*hold, error) {
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

// counting returns ctx for the member's requests: it counts them, for its
// AcquireEvent.
func (m *member) counting(ctx context.Context) context.Context {
	return zkclient.WithCounter(ctx, &m.requests)
}

// advance runs every member's steps from next until each has nothing in
// its way (stepGrant), or one must make a node again (the acquisition makes
// them all again), or one fails: the others then stop where they are.
func (a *acquisition) advance(ctx context.Context, next []step) ([]step, error) {
	a.connects, a.connectsKnown = a.c.ConnectCount()
	if len(a.members) == 1 { // on the caller's goroutine
		m := a.members[0]
		n, err := m.advance(m.counting(ctx), next[0])
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
			next[i], errs[i] = m.advance(m.counting(members), next[i])
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

// ready checks that every member, with nothing in its way, can be granted,
// and grants them: it returns their holds. Otherwise it returns the
// members' next steps: after a reconnection, all of them prove their place
// again.
//
// Each member's proof was for the moment its own way cleared, which may be
// long before the last member's did: its node may have been deleted by hand
// since, and the lock given to the writer behind it. Its watches tell
// without a request, as confirmOwn's do: the data watch on its own node if
// it waited, else the child watch of the listing that proved it, which any
// change of the directory fires. Events come in the order of the changes,
// so if neither has fired as of the last packet read, its node outlived the
// change that cleared the last member's way. Where one has fired, or the
// connection was made anew since the proofs began, the member reads its
// node. A lone member's proof is of this moment: it needs none of this.
func (a *acquisition) ready(ctx context.Context) ([]*hold, []step, error) {
	for _, m := range a.members {
		next, err := m.ready(m.counting(ctx))
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
	if next, err := a.token(ctx); next != nil || err != nil {
		return nil, next, err
	}
	return a.grant(ctx)
}

// confirm reads, for a set, the nodes of the members whose proof is older
// than the last member's, unless their watches vouch for them (see ready).
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

// grant makes every member's hold, with one token: the smallest a member
// knows (see token). A member already known lost fails the acquisition:
// every hold is released.
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

// abort deletes every node the acquisition made, in one multi when it can,
// and returns cause joined with a failed deletion's error.
func (a *acquisition) abort(ctx context.Context, cause error) error {
	if zkclient.SessionGone(cause) {
		return cause // the nodes went with the session
	}
	if len(a.members) > 1 && a.deleteAll(a.members[0].counting(ctx)) {
		return cause
	}
	// A node is not known, or the multi failed: each member deletes its
	// own, as a lone member does.
	errs := make([]error, len(a.members))
	var wg sync.WaitGroup
	for i, m := range a.members {
		wg.Go(func() { errs[i] = m.abort(m.counting(ctx), cause) })
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
// known; it reports whether they are gone.
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

// abort deletes whatever node the member made, with a fresh bounded
// context since ctx may be the reason we stop, and returns cause joined
// with a failed deletion's error.
func (m *member) abort(ctx context.Context, cause error) error {
	l := m.l
	switch {
	case zkclient.SessionGone(cause):
		// Expired or closed: the node went with the session.
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
		m.removeCreatedDirs() // made, and never used: a container that never had a child stays
	}
	return cause
}
