package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A Request asks LockAll for one lock, in one mode.
type Request struct {
	Lock *RWLock
	Mode Mode // Read or Write
	// Weight is the permits it takes of a lock made WithCapacity, 1 to its
	// capacity; its grant's Mode is then Write for all of them, else Read.
	// With 0, Write takes them all and Read one.
	Weight int64
}

// LockAll blocks until it holds every lock of reqs in its mode, or ctx
// ends, and returns the grants in the order asked. One ZooKeeper
// transaction creates the nodes of every lock. So callers that take their
// locks with LockAll cannot deadlock, whatever the order of their requests,
// though a caller that holds a grant and then asks for more still can. When
// nothing is in the way, LockAll takes one round trip. The grants are
// ordinary grants, each released, downgraded or lost alone, and they share
// one token, the transaction's zxid. Release them with [ReleaseAll], which
// deletes them all in one transaction, where Release takes a request each.
//
// Every lock must use the same *zk.Conn, and no path may appear twice.
// Otherwise LockAll returns an error wrapping ErrInvalidArgument, as it
// does for a context that carries a grant of one of the locks, since
// LockAll does not nest. If ctx ends, or the set fails, LockAll deletes
// every node it made before it returns the error, as Lock does.
func LockAll(ctx context.Context, reqs ...Request) ([]*Grant, error) {
	if err := checkRequests(ctx, reqs); err != nil {
		return nil, &opError{"lockall", "", err}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	a := newAcquisition(reqs...)
	paths := make([]string, len(reqs))
	for i, r := range reqs {
		paths[i] = r.Lock.path
	}
	for i, m := range a.members {
		m.lines = lockname.InSet(nil, paths, i)
	}
	start := time.Now()
	for _, m := range a.members {
		m.l.starting(ctx, m.want, start)
	}
	holds, err := a.run(ctx)
	for _, m := range a.members {
		m.l.acquired(ctx, m, start, err)
	}
	if err != nil {
		a.release()
		return nil, &opError{"lockall", fmt.Sprint(paths), err}
	}
	grants := make([]*Grant, len(holds))
	for i, h := range holds {
		grants[i] = h.grant(a.members[i].mode)
	}
	return grants, nil
}

// checkRequests says why LockAll cannot take reqs, if it cannot.
func checkRequests(ctx context.Context, reqs []Request) error {
	outer := carried(ctx)
	for i, r := range reqs {
		switch {
		case r.Lock == nil || r.Lock.conn == nil:
			return fmt.Errorf("%w: request %d: an RWLock not made by New", ErrInvalidArgument, i)
		case r.Mode != Read && r.Mode != Write:
			return fmt.Errorf("%w: request %d: mode %v", ErrInvalidArgument, i, r.Mode)
		case r.Lock.checkWeight(r.Weight) != nil:
			return fmt.Errorf("request %d: %w", i, r.Lock.checkWeight(r.Weight))
		case r.Lock.conn != reqs[0].Lock.conn:
			return fmt.Errorf("%w: %s and %s are on different connections", ErrInvalidArgument, reqs[0].Lock.path, r.Lock.path)
		case slices.ContainsFunc(reqs[:i], func(o Request) bool { return o.Lock.path == r.Lock.path }):
			return fmt.Errorf("%w: %s is asked for twice", ErrInvalidArgument, r.Lock.path)
		case outer != nil && outer.h.l.path == r.Lock.path:
			return fmt.Errorf("%w: the context carries a grant of %s", ErrInvalidArgument, r.Lock.path)
		}
	}
	return nil
}

// ReleaseAll releases every grant, as Release releases each, and skips nil
// grants. It deletes the nodes of grants on one connection in one ZooKeeper
// transaction. For a LockAll set that is one round trip and one write,
// where Release takes a write per grant. If the server refuses the
// transaction, over a node gone already or an ACL, each grant is released
// alone, as Release would. ReleaseAll returns Release's errors, joined, and
// one error for the grants of a transaction whose outcome it did not learn.
// Those grants are released, and their deletion goes on in the background,
// as Release's does.
func ReleaseAll(ctx context.Context, grants ...*Grant) error {
	var alone []*Grant
	together := make(map[*zkclient.Client][]*Grant)
	for _, g := range grants {
		if g == nil {
			continue
		}
		g = g.latest()
		g.h.judge() // as in Release
		if g.parent != nil {
			alone = append(alone, g)
		} else if !slices.Contains(together[g.h.c], g) {
			together[g.h.c] = append(together[g.h.c], g)
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

// latest returns the grant that g became through Downgrades, the one that
// holds its node now.
func (g *Grant) latest() *Grant {
	for {
		_, next := g.state()
		if next == nil {
			return g
		}
		g = next
	}
}

// releaseTogether deletes the nodes of gs, grants on c, in one transaction,
// and ends them. See deleteNodes. It returns the grants left for Release.
// Those are the grants that changed meanwhile, by a Downgrade or a loss,
// and those whose node other grants still hold. If the server refused the
// transaction, it returns all of them.
//
// Each hold's ops stays locked from its check until the deletion's outcome
// is known and the hold has ended, as in Release. The holds are locked in
// the order of their nodes, so that calls with overlapping grants cannot
// deadlock. A hold's end runs hooks that take no ops, and observers, which
// must not call the lock.
func releaseTogether(ctx context.Context, c *zkclient.Client, gs []*Grant) (left []*Grant, err error) {
	slices.SortFunc(gs, func(a, b *Grant) int { return strings.Compare(a.h.path, b.h.path) })
	var locked []*Grant
	for i, g := range gs {
		if i > 0 && gs[i-1].h == g.h { // a second grant of one hold goes alone
			left = append(left, g)
			continue
		}
		g.h.ops.Lock()
		// The last handle, marked releasing at once: nobody joins it from
		// now on (see hold.join).
		if released, next := g.state(); next != nil || released || g.ctx.Err() != nil || !g.h.claimLast() {
			g.h.ops.Unlock()
			left = append(left, g)
			continue
		}
		locked = append(locked, g)
	}
	unlock := func() {
		for _, g := range locked {
			g.h.ops.Unlock()
		}
	}
	if len(locked) < 2 {
		for _, g := range locked {
			g.h.refused() // not ours to release together: its Release runs alone
		}
		unlock()
		return append(left, locked...), nil
	}
	holds := make([]*hold, len(locked))
	for i, g := range locked {
		holds[i] = g.h
	}
	err = deleteNodes(zkclient.WithCounter(ctx, &holds[0].requests), c, holds)
	// mutant: set-release-refused
	if err != nil && !errors.Is(err, errFinishing) {
		for _, h := range holds {
			h.refused() // still held, so each is released alone
		}
		unlock()
		return append(left, locked...), nil
	}
	for _, g := range locked {
		g.setReleased(nil)
		g.h.end(ErrReleased)
	}
	unlock()
	if err != nil {
		nodes := make([]string, len(locked))
		for i, g := range locked {
			nodes[i] = g.h.path
		}
		return left, &opError{"release", fmt.Sprint(nodes), err}
	}
	return left, nil
}
