package rwlock

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// One acquisition (Lock, RLock, TryLock, TryRLock) from create to grant or
// abort is a small state machine: each step makes its requests and returns
// the next step. Every failure after our node may exist deletes it before
// the call returns.
//
//	create ──▶ list ──▶ wait ──▶ grant
//	  ▲         ▲ │      │
//	  │         │ ▼      │        reconnect: wait for the session, then list
//	  │      reconnect ◀─┘        (our node may exist) or create
//	  └─── requeue                requeue: the session was replaced, and our
//	                              node went with it: a new node
//
// No grant without a node. A grant is returned only when one of two
// proofs shows that our node existed at a moment when nothing before it
// was in our way:
//
//   - a listing that shows our node and no blocker before it (the
//     listing, a read, sees one consistent state of the directory);
//   - while waiting, a data watch on our own node, set after the create and
//     never fired, at the moment the event or answer that cleared our way
//     arrived. On one connection ZooKeeper sends the events and answers of
//     a session in the order of the changes, and go-zookeeper puts each
//     event in its channel before it reads the next packet: so if our node
//     had been deleted before the change that cleared our way, its event is
//     already in our watch's channel when we look, without a request. That
//     order holds only while the connection lasts (see confirmOwn): after a
//     reconnection, or on a connection that does not tell, we read our node
//     before the grant.
//
// What clears our way is read off the snapshot of our first listing: it
// holds every node that can ever precede ours (numbers only grow), and a
// node leaves it only when shown gone, or, for the nodes before one of ours
// that held, by a change of that node's data (see runAhead). Anything else
// (a TryRLock that read a writer gone or downgraded, a writer ahead that
// went without its mark) lists again before granting.

type step int

const (
	stepCreate    step = iota // make our node, and the lock directory when it is missing
	stepList                  // list the directory: find our node, take the snapshot
	stepWait                  // wait for the one node in our way
	stepGrant                 // nothing is in our way: the grant
	stepReconnect             // the connection failed: wait for the session, then go on
	stepRequeue               // the session was replaced: queue again with a new node
)

// want is what the caller asked for.
type want struct {
	mode  Mode
	block bool // false for TryLock and TryRLock
}

// acquisition is one Lock, RLock, TryLock or TryRLock call in progress.
type acquisition struct {
	l *RWLock
	c *zkclient.Client
	want

	guid    string
	node    string // our node, relative to the lock directory; "" until known
	path    string // its full path
	session int64  // the session that owns node
	unsure  bool   // a create's outcome is unknown: a node with guid may exist
	created []string

	snap       snapshot
	downgraded map[string]bool // writers seen downgraded (readers only)
	waited     bool            // we watched a node before being granted
	writers    bool            // a listing showed a writer before ours
	retry      zkclient.Backoff

	dir     *zkclient.Watch // child watch on the directory, from our first listing
	own     *zkclient.Watch // data watch on our own node, set before we wait
	tok     int64           // our node's czxid (or a listing's stand-in: see dated), once known
	exact   bool            // tok was read from our node's stat, not dated by a listing
	oneTrip bool            // the listing sent behind the create showed our node

	setLines []byte      // for a member: its node data's set lines (lockname.InSet)
	member   bool        // one of a set's acquisitions (see multi.go)
	share    *sharedRead // the shared read node it makes (see coalesce.go); nil for any other

	ownConnects      uint64 // the connection's session count when own was set
	ownConnectsKnown bool   // the connection counts them (see confirmOwn)

	acqStats // for its event (observer.go)
}

// acquire runs the protocol for ctx's caller.
func (l *RWLock) acquire(ctx context.Context, w want) (*Grant, error) {
	if l.conn == nil {
		return nil, errorf("rwlock: %s: %w: the RWLock was not made by New", verb(w), ErrInvalidArgument)
	}
	if g, err, ok := l.nested(ctx, w); ok {
		return g, err
	}
	if l.coalesce != nil && w.mode == Read && w.block {
		return l.readShared(ctx, w)
	}
	a := &acquisition{l: l, c: zkclient.For(l.conn), want: w, guid: lockname.NewGUID()}
	start := time.Now()
	l.starting(ctx, w, start)
	g, err := a.run(a.counting(ctx))
	l.acquired(ctx, a, start, err)
	if err != nil {
		a.c.Unref()
		return nil, errorf("rwlock: %s %s: %w", verb(w), l.path, err)
	}
	return g, nil
}

func (a *acquisition) run(ctx context.Context) (*Grant, error) {
	if err := a.l.checkDeletable(ctx, a.c); err != nil {
		return nil, err
	}
	next := stepCreate
	for {
		var err error
		if next, err = a.advance(ctx, next); err == nil {
			if next, err = a.ready(ctx); err == nil && next == stepGrant {
				return a.newGrant(), nil
			}
		}
		if err != nil {
			return nil, a.abort(ctx, err)
		}
	}
}

// advance takes the steps from next until nothing is in our way
// (stepGrant), or an error. A member of a set (see multi.go) stops instead
// where it would make a node of its own (stepCreate, stepRequeue): its
// set makes the nodes of all its members together.
func (a *acquisition) advance(ctx context.Context, next step) (step, error) {
	for {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		var err error
		switch next {
		case stepCreate:
			if a.member {
				return next, nil
			}
			next, err = a.create(ctx)
		case stepList:
			next, err = a.list(ctx)
		case stepWait:
			next, err = a.wait(ctx)
		case stepGrant:
			return next, nil
		case stepReconnect:
			if err = a.retry.Wait(ctx, a.c.Conn()); err == nil {
				next = stepCreate
				if a.node != "" || a.unsure {
					next = stepList
				}
			}
		case stepRequeue:
			if a.member {
				return next, nil
			}
			a.l.debug("session replaced while waiting; queueing again", a.node)
			a.requeue(lockname.NewGUID())
			next = stepCreate // go-zookeeper has opened the new session, or the create finds out
		}
		if err != nil {
			return next, err
		}
	}
}

// after maps a failed request to the next step: reconnect after a
// connection loss, requeue after the end of the session; any other error
// ends the acquisition.
func (a *acquisition) after(err error) (step, error) {
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
func (a *acquisition) ours(session int64) bool { return session == a.session && session != 0 }

func (a *acquisition) requeue(guid string) {
	a.guid = guid
	a.node, a.path, a.session, a.unsure = "", "", 0, false
	a.snap, a.dir, a.own, a.tok, a.exact = snapshot{}, nil, nil, 0, false
}

// create makes our node, and the lock directory when it is missing; the
// first listing goes out right behind it (see listBehind).
func (a *acquisition) create(ctx context.Context) (step, error) {
	l := a.l
	for tries := 0; ; tries++ {
		var behind <-chan listing
		sending := make(chan struct{})
		if a.dir == nil {
			behind = a.listBehind(ctx, sending)
		}
		r := a.c.Create(ctx, nodePrefix(l.path, a.guid, a.mode, l.dialect), append(slices.Clip(l.data), a.setLines...), zk.FlagEphemeral|zk.FlagSequence, l.acl,
			sending, func(r zkclient.Reply[string]) { l.finishCreate(a.c, r, a.guid) })
		var first listing
		if behind != nil {
			first = <-behind
		}
		switch {
		case r.Err == nil && r.Session == 0:
			// Created, but the session changed while we waited: the node
			// is ours only if the session that has it now made it. Find
			// out as after a lost answer.
			a.unsure = true
			return stepList, nil
		case r.Err == nil:
			a.path, a.node, a.session = r.V, r.V[len(l.path)+1:], r.Session
			l.debug("created", a.path)
			if first.Err == nil && first.Session == a.session && slices.Contains(first.V, a.node) {
				a.dir, a.oneTrip = first.watch, true
				return a.locate(first.Reply, first.stat)
			}
			return stepList, nil // the listing overtook the create, or failed: list again
		case errors.Is(r.Err, zk.ErrNoNode) && tries < 5:
			// The directory is missing, or the server reaped it (an empty
			// container) between our mkdir and our create; a parent may go
			// the same way while we make the directory.
			if err := a.mkdirs(ctx); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return a.after(err)
			}
			if err := a.recheckDeletable(ctx); err != nil {
				return 0, err
			}
		case errors.Is(r.Err, zk.ErrNoAuth):
			a.removeCreatedDirs()
			return 0, cannotCreate(l.path, r.Err)
		case zkclient.ConnectionLoss(r.Err):
			a.unsure = true // look for it by guid once we can list again
			return stepReconnect, nil
		default:
			return a.after(r.Err)
		}
	}
}

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

// listBehind sends the acquisition's first listing, with its child watch
// on the directory, right behind the create that the caller is about to
// make, without waiting for the create's answer: when nobody is in the way,
// the acquisition takes one round trip instead of two.
//
// ZooKeeper carries out one session's requests in the order they arrive, so
// a listing that reaches the server after the create shows our node. But
// go-zookeeper has no call that keeps two requests in order; it sends
// concurrent calls as they come. The listing waits until the create's call
// has begun (sending is closed then), and yields once: the create then
// nearly always reaches go-zookeeper's queue first. It must be correct
// either way:
//
//   - a listing that shows our node was carried out after our create, so it
//     is as good as one sent after the create's answer: it shows every node
//     that can ever precede ours (lower numbers are never given out later);
//   - a listing that lacks our node may simply have overtaken the create:
//     it proves nothing, is never taken for "our node was deleted", and the
//     acquisition lists again; the child watch it set fires on our own
//     create, and is dropped;
//   - a listing made in another session than the create, or that failed,
//     is dropped the same way.
func (a *acquisition) listBehind(ctx context.Context, sending <-chan struct{}) <-chan listing {
	ch := make(chan listing, 1)
	go func() {
		select {
		case <-sending:
			runtime.Gosched()
		case <-ctx.Done():
		}
		r, w := a.c.ListW(ctx, a.l.path)
		ch <- listing{listed(r), w, r.V.Stat}
	}()
	return ch
}

// list reads the directory, finds our node and takes the snapshot of the
// nodes before it. Only a listing after a failed first listing (see
// listBehind) sets a child watch on the directory; the first one's is the
// grant's watch for its node's deletion, if we are granted at once (see
// Grant.watchFrom).
func (a *acquisition) list(ctx context.Context) (step, error) {
	a.listing() // counted for the observers (observer.go)
	var lr zkclient.Reply[zkclient.Listing]
	if a.dir == nil {
		lr, a.dir = a.c.ListW(ctx, a.l.path)
	} else {
		lr = a.c.List(ctx, a.l.path)
	}
	r := listed(lr)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		r.Err, r.V = nil, nil // no directory, so no node of ours in it
	case r.Err != nil:
		return a.after(r.Err)
	}
	if a.unsure {
		return a.adopt(ctx, r)
	}
	return a.locate(r, lr.V.Stat)
}

// locate finds our node in a listing and takes the snapshot of the nodes
// before it.
func (a *acquisition) locate(r zkclient.Reply[[]string], dir *zk.Stat) (step, error) {
	if !a.ours(r.Session) {
		return stepRequeue, nil
	}
	snap, err := takeSnapshot(a.dropTwins(r.V), a.node, a.snap.before)
	switch {
	case errors.Is(err, errNotListed):
		// Never "we are first": someone deleted our node while we waited.
		a.node = ""
		return 0, lostError(a.path, errNodeDeleted)
	case err != nil:
		return 0, err
	}
	a.l.debug("listed", a.path)
	if m := a.l.blind(snap.peers); m != nil {
		// Before or after ours, such a node breaks exclusion: refuse to
		// queue (abort deletes our node), loudly.
		return 0, m
	}
	a.snap = snap
	a.dated(dir)
	a.writers = a.writers || slices.ContainsFunc(snap.before, func(n lockNode) bool { return n.mode == Write })
	if a.share != nil {
		a.share.listedBy(a)
	}
	if _, blocked := a.snap.blocker(a.isDowngraded); !blocked {
		return stepGrant, nil // the listing is the proof: our node, and nothing in our way
	}
	return stepWait, nil
}

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
func (a *acquisition) dated(dir *zk.Stat) {
	if a.tok != 0 || dir == nil {
		return
	}
	creates := (int64(dir.Cversion) + int64(dir.NumChildren)) / 2
	switch {
	// mutant: token-any-listing
	case creates == int64(a.snap.self.seq)+1:
		a.tok = dir.Pzxid
	// mutant: reader-token-any-listing
	case a.mode == Read && !a.snap.laterWriter && a.snap.peers == 0:
		a.tok = dir.Pzxid
	}
}

// readToken reads our node's czxid when no listing or watch told it: the
// token is known when the grant is made. It returns stepGrant when it is.
func (a *acquisition) readToken(ctx context.Context) (step, error) {
	r := a.c.Get(ctx, a.path)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		a.node = "" // not ours to delete any more
		return 0, lostError(a.path, errNodeDeleted)
	case r.Err != nil:
		return a.after(r.Err)
	case !a.ours(r.Session):
		return stepRequeue, nil
	}
	a.tok, a.exact = r.V.Stat.Czxid, true
	a.l.debug("read the token", a.path)
	return stepGrant, nil
}

// ready checks, once nothing is in our way, that the grant can be made,
// unless ctx ended meanwhile: then, as a cancelled call promises, the node
// goes and ctx's error returns. A grant starts with more than its head
// start to run on the lease: after a long wait, one sync renews it first,
// and if that fails, the acquisition goes on as after any failed request
// (our place in the queue is kept; a later listing proves it again). It
// returns stepGrant when newGrant may follow.
func (a *acquisition) ready(ctx context.Context) (step, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t, granted := a.c.Timeout(a.l.sessionTimeout, a.session)
	if !granted && a.c.Conn().State() != zk.StateHasSession {
		// Without a granted T, a disconnection is a loss: the grant's first
		// Err would report it. Wait for the session, and prove our place again.
		return stepReconnect, nil
	}
	if t > 0 && !a.c.Fresh(a.session, t, zkclient.RenewInterval(t)) {
		r := a.c.Sync(ctx)
		switch {
		case r.Err != nil:
			return a.after(r.Err)
		case !a.ours(r.Session):
			return stepRequeue, nil
		}
	}
	if a.tok == 0 && !a.member { // a set shares one token (see set.ready)
		return a.readToken(ctx)
	}
	return stepGrant, nil
}

// newGrant turns the acquisition, found ready, into a Grant.
func (a *acquisition) newGrant() *Grant {
	a.l.debug("granted", a.path)
	g := newGrant(a.l, a.c, a.mode, a.path, a.session)
	g.token.Store(a.tok)
	g.setLines = a.setLines
	if a.l.maxHold > 0 {
		g.limitHold(g.since.Add(a.l.maxHold))
	}
	// A writer that waited may be followed by a waiter whose listing still
	// shows the nodes it waited for: its release mark tells that waiter
	// they are gone, without a listing (see Grant.Release). A reader
	// waiting on us takes the mark as our deletion, at no request (see
	// await).
	g.markRelease = a.mode == Write && a.waited
	g.precedes = a.l.revocationsOn(a.c, false).before(a.c)
	g.watchFrom(a.own, a.dir)
	a.l.peerWatch.join(g, a.dir)
	return g
}

// abort deletes whatever node the acquisition made, with a fresh bounded
// context since ctx may be the reason we stop, and returns cause joined
// with a failed deletion's error.
func (a *acquisition) abort(ctx context.Context, cause error) error {
	l := a.l
	switch {
	case zkclient.SessionGone(cause):
		// Expired or closed: the node went with the session.
	// mutant: abort-leaves-node
	case a.node != "":
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanupTimeout)
		defer cancel()
		// mutant: abort-marks-held
		if err := l.deleteNode(ctx, a.c, a.path, a.session, false); err != nil {
			return errors.Join(cause, err)
		}
	case a.unsure:
		l.finish(a.c, "", a.guid, a.c.Conn().SessionID())
	default:
		a.removeCreatedDirs() // made, and never used: a container that never had a child stays
	}
	return cause
}
