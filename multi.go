package rwlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Several locks in one transaction. One multi creates the nodes of every
// lock of a set, so they share one zxid, and the set is granted once every
// member is.
//
// Why no deadlock: in every directory, sequence numbers follow the order
// in which the leader applied the creates, so a node of an earlier
// transaction precedes a node of a later one. A member waits only for
// nodes before its own (a reader for the nearest writer, a writer for its
// predecessor): nodes of earlier transactions. So every wait points from a
// later transaction to an earlier one, and a cycle of waits would need a
// transaction earlier than itself. This holds for every caller that takes
// all of its locks in one call (Lock is a set of one); it does not hold for
// a caller that holds a grant and then asks for more, nor for peers that
// take the same paths one by one: they can still deadlock, as with any
// lock.
//
// Everything else is the single acquisition's, member by member: each
// waits as Lock or RLock waits, with the same proofs before its grant.
// Only making nodes is the set's: a member that would create a node of its
// own (after the session was replaced, or a create's answer lost and no
// node found) stops, and the set makes every member's node again in one
// transaction, after deleting what is left of the old ones. A lost answer
// to the multi is settled by the guid the set's nodes share, member by
// member, as for a lost create. A failed or cancelled set deletes every
// node it made before it returns.

// A Request asks LockAll for one lock, in one mode.
type Request struct {
	Lock *RWLock
	Mode Mode // Read or Write
}

// LockAll blocks until it holds every lock of reqs in its mode, or ctx
// ends, and returns the grants in the order asked. The nodes of every lock
// are created in one ZooKeeper transaction, so callers that take their
// locks with LockAll cannot deadlock, whatever the order of their
// requests (a caller that holds a grant and then asks for more still can).
// When nothing is in the way it takes one round trip. The grants are
// ordinary grants (each can be released, downgraded or lost alone) and
// share one token, the transaction's zxid. Release them with [ReleaseAll]:
// one transaction deletes them all, where Release takes a request each.
//
// Every lock must use the same *zk.Conn, and no path may appear twice;
// otherwise LockAll returns an error wrapping ErrInvalidArgument, as it
// does for a context that carries a grant of one of the locks (LockAll does
// not nest). If ctx ends, or the set fails, LockAll deletes every node it
// made before it returns the error, as Lock does.
func LockAll(ctx context.Context, reqs ...Request) ([]*Grant, error) {
	s, err := newSet(ctx, reqs)
	if err != nil {
		return nil, errorf("rwlock: lockall: %w", err)
	}
	if len(s.members) == 0 {
		return nil, nil
	}
	start := time.Now()
	for _, a := range s.members {
		a.l.starting(ctx, a.want, start)
	}
	grants, err := s.run(ctx)
	for _, a := range s.members {
		a.l.acquired(ctx, a, start, err)
	}
	if err != nil {
		if !s.granted { // grants give their use of the client back as they end
			for _, a := range s.members {
				a.c.Unref()
			}
		}
		return nil, errorf("rwlock: lockall %s: %w", s, err)
	}
	return grants, nil
}

// ReleaseAll releases every grant, as Release releases each. The nodes of
// grants on one connection are deleted in one ZooKeeper transaction: one
// round trip and one write for a LockAll set, where Release takes a write
// per grant. If the server refuses the transaction (a node gone already,
// an ACL), each grant is released alone, as Release would. It returns
// Release's errors, joined, and one error for the grants of a transaction
// whose outcome it did not learn: they are released, and their deletion
// goes on in the background, as Release's does. nil grants are skipped.
func ReleaseAll(ctx context.Context, grants ...*Grant) error {
	var alone []*Grant
	together := make(map[*zkclient.Client][]*Grant)
	for _, g := range grants {
		if g == nil {
			continue
		}
		g = g.latest()
		g.judge() // a grant the clock has given up is lost, not released
		if g.outer != nil {
			alone = append(alone, g)
		} else if !slices.Contains(together[g.c], g) {
			together[g.c] = append(together[g.c], g)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	report := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	release := func(g *Grant) { wg.Go(func() { report(g.Release(ctx)) }) }
	for c, gs := range together {
		if len(gs) == 1 {
			alone = append(alone, gs[0])
			continue
		}
		wg.Go(func() {
			left, err := releaseTogether(ctx, c, gs)
			report(err)
			for _, g := range left {
				release(g)
			}
		})
	}
	for _, g := range alone {
		release(g)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// latest returns the grant that g became through Downgrades: the one that
// owns its node now.
func (g *Grant) latest() *Grant {
	for {
		g.ops.Lock()
		s := g.successor
		g.ops.Unlock()
		if s == nil {
			return g
		}
		g = s
	}
}

// releaseTogether deletes the nodes of gs, grants on c that own their
// nodes, in one transaction (see deleteNodes), and ends the grants. It
// returns the grants left for Release: those that changed meanwhile (a
// Downgrade, a loss), or all of them if the server refused the
// transaction.
//
// Each grant's ops stays locked from its check until the deletion's
// outcome is known and the grant has ended, as in Release; they are
// locked in the order of node and mode, which is one grant's alone (a
// downgraded write grant and its read grant share a node), so that calls
// with overlapping grants cannot deadlock. (A grant's end runs hooks that
// take no ops, and observers, which must not call the lock.)
func releaseTogether(ctx context.Context, c *zkclient.Client, gs []*Grant) (left []*Grant, err error) {
	slices.SortFunc(gs, func(a, b *Grant) int {
		return cmp.Or(strings.Compare(a.node, b.node), cmp.Compare(a.mode, b.mode))
	})
	var locked []*Grant
	for _, g := range gs {
		g.ops.Lock()
		if g.successor != nil || !g.ownsHeldNode() {
			g.ops.Unlock()
			left = append(left, g)
			continue
		}
		locked = append(locked, g)
	}
	unlock := func() {
		for _, g := range locked {
			g.ops.Unlock()
		}
	}
	if len(locked) < 2 {
		unlock()
		return append(left, locked...), nil
	}
	for _, g := range locked {
		g.setReleasing(true)
	}
	err = deleteNodes(locked[0].counting(ctx), c, locked)
	// mutant: set-release-refused
	if err != nil && !errors.Is(err, errFinishing) {
		for _, g := range locked {
			g.afterDelete(err) // still held: each is released alone
		}
		unlock()
		return append(left, locked...), nil
	}
	for _, g := range locked {
		g.afterDelete(nil)
	}
	unlock()
	if err != nil {
		nodes := make([]string, len(locked))
		for i, g := range locked {
			nodes[i] = g.node
		}
		return left, errorf("rwlock: release %v: %w", nodes, err)
	}
	return left, nil
}

// set is one LockAll call in progress: an acquisition per lock, in the
// order asked, on one client, with one guid.
type set struct {
	members []*acquisition
	c       *zkclient.Client
	guid    string
	granted bool // the members' grants are made: each holds its own use of the client

	connects      uint64 // the connection's session count when the members' proofs began
	connectsKnown bool
}

func newSet(ctx context.Context, reqs []Request) (*set, error) {
	s := &set{guid: lockname.NewGUID()}
	carried, _ := ctx.Value(grantKey{}).(*Grant)
	for i, r := range reqs {
		switch {
		case r.Lock == nil || r.Lock.conn == nil:
			return nil, fmt.Errorf("%w: request %d: an RWLock not made by New", ErrInvalidArgument, i)
		case r.Mode != Read && r.Mode != Write:
			return nil, fmt.Errorf("%w: request %d: mode %v", ErrInvalidArgument, i, r.Mode)
		case r.Lock.conn != reqs[0].Lock.conn:
			return nil, fmt.Errorf("%w: %s and %s are on different connections", ErrInvalidArgument, reqs[0].Lock.path, r.Lock.path)
		case slices.ContainsFunc(reqs[:i], func(o Request) bool { return o.Lock.path == r.Lock.path }):
			return nil, fmt.Errorf("%w: %s is asked for twice", ErrInvalidArgument, r.Lock.path)
		case carried != nil && carried.root().l.path == r.Lock.path:
			return nil, fmt.Errorf("%w: the context carries a grant of %s", ErrInvalidArgument, r.Lock.path)
		}
	}
	for _, r := range reqs {
		a := &acquisition{l: r.Lock, c: zkclient.For(r.Lock.conn), want: want{mode: r.Mode, block: true}, guid: s.guid, member: true}
		s.members = append(s.members, a)
	}
	if len(s.members) > 0 {
		s.c = s.members[0].c
	}
	paths := make([]string, len(reqs))
	for i, r := range reqs {
		paths[i] = r.Lock.path
	}
	for i, a := range s.members {
		a.setLines = lockname.InSet(nil, paths, i)
	}
	return s, nil
}

// String names the set's locks, for errors.
func (s *set) String() string {
	paths := make([]string, len(s.members))
	for i, a := range s.members {
		paths[i] = a.l.path
	}
	return fmt.Sprint(paths)
}

func (s *set) run(ctx context.Context) ([]*Grant, error) {
	for _, a := range s.members {
		if err := a.l.checkDeletable(a.counting(ctx), a.c); err != nil {
			return nil, err
		}
	}
	next := slices.Repeat([]step{stepCreate}, len(s.members))
	for {
		var err error
		if next[0] == stepCreate {
			next, err = s.create(ctx)
		}
		if err == nil {
			next, err = s.advance(ctx, next)
		}
		if err == nil && !slices.ContainsFunc(next, func(n step) bool { return n != stepGrant }) {
			if next, err = s.ready(ctx); err == nil && next == nil {
				return s.grant(ctx)
			}
		}
		if err != nil {
			return nil, s.abort(ctx, err)
		}
	}
}

// create makes every member's node in one transaction, and the lock
// directories that are missing; each member's first listing goes out
// right behind it (see acquisition.listBehind). It returns each member's
// next step.
func (s *set) create(ctx context.Context) ([]step, error) {
	for tries := 0; ; tries++ {
		sending := make(chan struct{})
		behind := make([]<-chan listing, len(s.members))
		ops := make([]any, len(s.members))
		counted := make([]context.Context, len(s.members))
		for i, a := range s.members {
			l := a.l
			ops[i] = &zk.CreateRequest{
				Path: nodePrefix(l.path, s.guid, a.mode, l.dialect), Data: append(slices.Clip(l.data), a.setLines...), Acl: l.acl,
				Flags: zk.FlagEphemeral | zk.FlagSequence,
			}
			counted[i] = a.counting(ctx)
			behind[i] = a.listBehind(counted[i], sending)
		}
		r := s.c.Multi(counted[0], ops, sending, s.finishCreate)
		firsts := make([]listing, len(s.members))
		for i, ch := range behind {
			firsts[i] = <-ch
		}
		// The failing op carries the transaction's error; the others, none
		// or a "runtime inconsistency".
		failed := slices.IndexFunc(r.V, func(m zk.MultiResponse) bool { return r.Err != nil && errors.Is(m.Error, r.Err) })
		switch {
		case r.Err == nil && r.Session == 0:
			// Made, but the session changed while we waited: the nodes are
			// ours only if the session that has them now made them.
			return s.unsure(stepList), nil
		case r.Err == nil:
			// Every member knows its node before any looks at its queue, so
			// that a failure of one deletes them all (abort).
			for i, a := range s.members {
				a.path, a.node, a.session = r.V[i].String, r.V[i].String[len(a.l.path)+1:], r.Session
				a.l.debug("created in a set", a.path)
			}
			next := make([]step, len(s.members))
			for i, a := range s.members {
				first := firsts[i]
				if first.Err == nil && first.Session == a.session && slices.Contains(first.V, a.node) {
					a.dir, a.oneTrip = first.watch, true
					var err error
					if next[i], err = a.locate(first.Reply, first.stat); err != nil {
						return nil, err
					}
					continue
				}
				next[i] = stepList // the listing overtook the multi, or failed: list again
			}
			return next, nil
		case errors.Is(r.Err, zk.ErrNoNode) && failed >= 0 && tries < 5+len(s.members):
			// A lock directory is missing (or was reaped): make it, as the
			// create of a single acquisition does, and try again (one
			// directory per try: a transaction names only its first failure).
			a := s.members[failed]
			if err := a.mkdirs(counted[failed]); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return s.after(err)
			}
			if err := a.recheckDeletable(counted[failed]); err != nil {
				return nil, err
			}
		case errors.Is(r.Err, zk.ErrNoAuth) && failed >= 0:
			return nil, cannotCreate(s.members[failed].l.path, r.Err)
		case zkclient.ConnectionLoss(r.Err):
			return s.settle(ctx)
		default:
			return s.after(r.Err)
		}
	}
}

// advance runs every member's steps at once, from next, until each has
// nothing in its way (stepGrant), one must make a node (stepCreate: the
// set makes them all again), or one fails: the others then stop where
// they are.
func (s *set) advance(ctx context.Context, next []step) ([]step, error) {
	s.connects, s.connectsKnown = s.c.ConnectCount()
	members, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, a := range s.members {
		wg.Go(func() {
			next[i], errs[i] = a.advance(a.counting(members), next[i])
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
	if slices.Contains(next, stepCreate) || slices.Contains(next, stepRequeue) {
		s.requeue(slices.Contains(next, stepRequeue))
		return slices.Repeat([]step{stepCreate}, len(s.members)), nil
	}
	return next, nil
}

// ready checks that every member, with nothing in its way, can be granted
// (see acquisition.ready: the first may renew the session's lease, the
// others then need no request), and that every member's node is still
// there. It returns nil if so, or the members' next steps: all of them
// prove their place again after a reconnection.
//
// Each member's proof (see the top of acquire.go) was for the moment its
// own way cleared, which may be long before the last member's did: its
// node may have been deleted by hand since, and the lock given to the
// writer behind it. Its watches tell without a request, as confirmOwn's
// do: the data watch on its own node if it waited, else the child watch of
// the listing that proved it, which any change of the directory fires.
// Events come in the order of the changes, so if neither has fired as of
// the last packet read, its node outlived the change that cleared the
// last member's way. Where one has fired (the child watch fires for any
// child), or the connection was re-established since the proofs began
// (the watches' events are then sent again in no order), the member reads
// its node.
func (s *set) ready(ctx context.Context) ([]step, error) {
	all := func(next step) []step { return slices.Repeat([]step{next}, len(s.members)) }
	for _, a := range s.members {
		next, err := a.ready(a.counting(ctx))
		switch {
		case err != nil:
			return nil, err
		case next == stepRequeue:
			s.requeue(true)
			return all(stepCreate), nil
		case next != stepGrant:
			return all(next), nil
		}
	}
	n, known := s.c.ConnectCount()
	reconnected := !known || !s.connectsKnown || n != s.connects
	for _, a := range s.members {
		watch := a.own
		if watch == nil {
			watch = a.dir
		}
		if !reconnected && watch != nil && !watch.FiredNow() {
			continue
		}
		r := a.c.Get(a.counting(ctx), a.path)
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			a.node = "" // not ours to delete any more
			return nil, lostError(a.path, errNodeDeleted)
		case r.Err != nil:
			next, err := a.after(r.Err)
			if next == stepRequeue {
				s.requeue(true)
				return all(stepCreate), err
			}
			return all(next), err
		case !a.ours(r.Session):
			s.requeue(true)
			return all(stepCreate), nil
		}
		a.tok, a.exact = r.V.Stat.Czxid, true
	}
	exact := slices.ContainsFunc(s.members, func(a *acquisition) bool { return a.exact })
	dated := !slices.ContainsFunc(s.members, func(a *acquisition) bool { return a.tok == 0 })
	if !exact && !dated {
		// The members share one czxid, and no watch read it. A listing's
		// stand-in (see acquisition.dated) is below every node created
		// later in its own directory only: the smallest stand-in is below
		// every later node of every member's directory only if each
		// member has one. Otherwise read one member's node, so that the
		// token is known at the grant.
		next, err := s.members[0].readToken(s.members[0].counting(ctx))
		switch {
		case next == stepRequeue:
			s.requeue(true)
			return all(stepCreate), err
		case err != nil || next != stepGrant:
			return all(next), err
		}
	}
	return nil, nil
}

// grant makes every member's grant. They share the token of the set's
// transaction: the smallest a member knows, since a member's token is its
// node's czxid (the transaction's zxid) or a listing's stand-in no smaller
// (see acquisition.dated), and ready made sure that it is exact or that
// every member has a stand-in. A member already known lost (its node went
// between its proof and now) fails the set: every grant is released.
func (s *set) grant(ctx context.Context) ([]*Grant, error) {
	var tok int64
	for _, a := range s.members {
		if a.tok != 0 && (tok == 0 || a.tok < tok) {
			tok = a.tok
		}
	}
	grants := make([]*Grant, len(s.members))
	for i, a := range s.members {
		a.tok = tok
		grants[i] = a.newGrant()
	}
	s.granted = true // each grant has taken over its member's use of the client
	for _, g := range grants {
		if err := g.Err(); err != nil {
			for _, g := range grants {
				g.Release(context.WithoutCancel(ctx))
			}
			return nil, err
		}
	}
	return grants, nil
}
