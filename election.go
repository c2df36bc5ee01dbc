package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// An election is a write lock, with the candidate's value in its node.
//
// A campaign queues a write node, as Lock does, and leads once it holds.
// So the leader is the head of the write queue. Every promise of a write
// grant is a promise of a leadership. The old leader is told, its Done
// closed, before any successor's Campaign can return. The term is the
// grant's token, made the czxid of the leader's node (see exactTerm), which
// observers read from its stat. The queue is in the order of creation, so
// terms strictly increase.
//
// The value rides in the node's data, in a line of its own (see
// lockname.ValueLine). It costs the create nothing, and an operator reads
// it with `zkCli get`. It is not in the lock directory's data, which stays
// revocation's alone. So observers watch the leader's node, where the
// value and the leader's end both show. No record can lag behind the queue
// it describes, since the queue is the record.

// ErrNoLeader is returned by Leader when nobody leads, and by Proclaim
// when the Election holds no leadership.
var ErrNoLeader = errors.New("no leader")

// An Election elects one leader at a time among the processes that
// campaign on its path. It is a write lock on the path, so the campaigns
// queue in FIFO order, and the leader's value lives in its node's data.
// An Election is safe for concurrent use, and campaigns once at a time.
// Make it with NewElection.
//
// Readers of the same path wait for the leader as for any writer. A
// Proclaim does not let them in: a reader behind a campaign's node reads
// it again at each change, and passes only on a downgrade mark.
type Election struct {
	l *RWLock

	mu         sync.Mutex
	campaign   bool   // a Campaign is under way
	leadership *Grant // what the last Campaign returned; nil before
}

// Leadership is one state of an election, as Observe reports it.
type Leadership struct {
	// Value is the leader's value, from Campaign or its latest Proclaim.
	Value []byte
	// Term is the leader's term: its grant's token, the czxid of its node.
	// Terms strictly increase. Term is 0 while nobody leads.
	Term int64
}

// NewElection returns the election whose lock directory is path, on conn.
// It takes the options of New, and fails as New does. A WithMaxHold
// limits every term. NewElection makes no request.
func NewElection(conn *zk.Conn, path string, opts ...Option) (*Election, error) {
	if conn == nil {
		return nil, &opError{"election", path, fmt.Errorf("%w: nil *zk.Conn", ErrInvalidArgument)}
	}
	return newElection(conn, path, opts...)
}

func newElection(conn zkclient.Conn, path string, opts ...Option) (*Election, error) {
	l, err := newRWLock(conn, path, opts...)
	if err != nil {
		return nil, err
	}
	return &Election{l: l}, nil
}

// lock returns the election's lock. For a zero Election it is a zero
// RWLock, whose methods fail with ErrInvalidArgument.
func (e *Election) lock() *RWLock {
	if e == nil || e.l == nil {
		return &RWLock{}
	}
	return e.l
}

// Campaign blocks until this process leads, or ctx ends, and returns the
// leadership: a write grant whose Token is the term. Its Done closes when
// the leadership ends, and the holder is told before any successor's
// Campaign can return, as for any write grant. Its Multi writes only while
// it leads. Release it, or call Resign, to hand over at once.
//
// The value, at most 64 KiB, is what Leader and Observe report until a
// Proclaim changes it. On failure Campaign leaves no node behind, as Lock
// does. A Campaign while the Election already campaigns or leads fails
// with an error wrapping ErrInvalidArgument, since it would queue behind
// itself. Campaign does not nest in a grant the context carries.
func (e *Election) Campaign(ctx context.Context, value []byte) (*Grant, error) {
	l := e.lock()
	fail := func(err error) (*Grant, error) { return nil, &opError{"campaign", l.path, err} }
	switch {
	case l.conn == nil:
		return fail(fmt.Errorf("%w: the Election was not made by NewElection", ErrInvalidArgument))
	case len(value) > lockname.MaxValue:
		return fail(fmt.Errorf("%w: value of %d bytes (at most %d)", ErrInvalidArgument, len(value), lockname.MaxValue))
	}
	if err := e.begin(); err != nil {
		return fail(err)
	}
	a := newAcquisition(Request{Lock: l, Mode: Write})
	a.members[0].lines = lockname.ValueLine(value)
	a.members[0].campaign = true
	start := time.Now()
	l.starting(ctx, a.members[0].want, start)
	holds, err := a.run(ctx)
	l.acquired(ctx, a.members[0], start, err)
	if err != nil {
		a.release()
		e.end(nil)
		return fail(err)
	}
	if !a.members[0].exact {
		if err := exactTerm(ctx, holds[0]); err != nil {
			holds[0].drop(ctx)
			e.end(nil)
			return fail(err)
		}
	}
	g := holds[0].grant(Write)
	e.end(g)
	return g, nil
}

// exactTerm makes the hold's token its node's czxid, the term observers
// read from the node's stat.
//
// A lock's token may be a stand-in: the pzxid of the listing that granted
// it, when nothing was created after the node (see dated in list.go). It
// orders grants as well, but an observer cannot know it. So a campaign
// granted on a stand-in reads its node once. A campaign that waited has
// the czxid from the watch on its own node, at no cost. No handle exists
// yet, so nobody has read the token.
//
// It rides out connection loss, as the acquisition does, while the hold
// lasts. It fails if the hold has ended.
func exactTerm(ctx context.Context, h *hold) error {
	var retry zkclient.Backoff
	for {
		r := h.c.Get(zkclient.WithCounter(ctx, &h.requests), h.path)
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			return lostError(h.path, h.whyDeleted())
		case zkclient.SessionGone(r.Err):
			return lostError(h.path, r.Err)
		case zkclient.ConnectionLoss(r.Err) && ctx.Err() == nil:
			if err := h.ended(); err != nil {
				return err // the lease clock gave it up meanwhile
			}
			if err := retry.Wait(ctx, h.c.Conn()); err != nil {
				return err
			}
			continue
		case r.Err != nil:
			return r.Err
		}
		// mutant: term-stand-in
		h.token = r.V.Stat.Czxid
		// A leadership lost while we read, as by a hold limit reached in
		// a pause, fails the Campaign. Its holder was never handed it, so
		// it would have its head start counted from before it could look.
		return h.ended()
	}
}

// begin marks a campaign under way, unless one is, or a leadership is held.
func (e *Election) begin() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.campaign:
		return fmt.Errorf("%w: a campaign of this Election is under way", ErrInvalidArgument)
	case e.leadership != nil && e.leadership.Err() == nil: // Err consults the lease clock
		return fmt.Errorf("%w: this Election leads already (%s)", ErrInvalidArgument, e.leadership.h.path)
	}
	e.campaign = true
	return nil
}

// end marks the campaign over, with the leadership it won, if any.
func (e *Election) end(g *Grant) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.campaign = false
	if g != nil {
		e.leadership = g
	}
}

// held returns the leadership the Election holds, or nil.
func (e *Election) held() *Grant {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leadership
}

// Proclaim changes the leader's value without an election: Leader and
// Observe report value from then on. It fails with an error wrapping
// ErrNoLeader if the Election never won a Campaign, and with one wrapping
// the leadership's Err once it has ended. If the node is gone, nothing is
// written, the leadership ends, and the error wraps ErrLost. If ctx ends or
// the connection fails before the answer, the value may or may not have
// changed; the leadership goes on.
func (e *Election) Proclaim(ctx context.Context, value []byte) error {
	l := e.lock()
	fail := func(err error) error { return &opError{"proclaim", l.path, err} }
	if len(value) > lockname.MaxValue {
		return fail(fmt.Errorf("%w: value of %d bytes (at most %d)", ErrInvalidArgument, len(value), lockname.MaxValue))
	}
	g := e.held()
	if g == nil {
		return fail(fmt.Errorf("%w: this Election has not won a campaign", ErrNoLeader))
	}
	return g.proclaim(ctx, value)
}

// proclaim writes value into the leadership's node.
//
// The write is guarded by the node's existence, as Multi's are. A set of a
// path that does not exist fails with no node, and changes nothing. The
// node's path is its own: its guid and sequence number are never given
// again. And an ephemeral node exists only in its session. So the set
// commits only while the leadership is held, in ZooKeeper's order.
//
// The waiter behind sees the change with its data watch. It takes any
// change of one of our writers' data for proof that the writer held, so
// that nothing before it is left (see watch.go). A leader holds, so that
// is true. The waiter then waits for the node to go, with its child watch
// on the node, or else by looking again.
func (g *Grant) proclaim(ctx context.Context, value []byte) error {
	h := g.h
	fail := func(err error) error { return &opError{"proclaim", h.path, err} }
	h.ops.Lock() // a Release or Downgrade waits, so that the lines stay the node's
	defer h.ops.Unlock()
	if released, _ := g.state(); released {
		return fail(g.ended())
	}
	if err := g.Err(); err != nil {
		return fail(err)
	}
	if g.mode != Write || h.currentMode() != Write {
		return fail(fmt.Errorf("%w: the leadership was downgraded", ErrNoLeader))
	}
	lines := lockname.ValueLine(value)
	data := append(lockname.Data(h.l.owner, h.l.maxHold, lockname.Unmarked), lines...)
	r := h.c.Set(zkclient.WithCounter(ctx, &h.requests), h.path, data)
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		h.deletedUnderGuard()
		return fail(g.Err())
	case zkclient.SessionGone(r.Err):
		h.lost(r.Err)
		return fail(g.Err())
	case r.Err != nil:
		return fail(r.Err)
	}
	h.lines = slices.Clip(lines) // a Downgrade keeps it, under ops as here
	return nil
}

// Resign ends the leadership this Election won, and deletes its node, so
// that the next candidate leads at once. It returns nil if the Election
// does not lead, and otherwise as [Grant.Release] does.
func (e *Election) Resign(ctx context.Context) error {
	g := e.held()
	if g == nil {
		return nil
	}
	return g.Release(ctx)
}

// Leader returns the current leader's value and term, read now with one
// listing and a read of the head of the queue. It returns an error wrapping ErrNoLeader when
// nobody leads: the queue is empty, or readers of the same path hold it.
// A leader's value is empty if it campaigned with none, or if its node was
// made by a plain write lock on the path. The read is the connected
// server's, which may lag the ensemble by a moment, as any ZooKeeper read.
func (e *Election) Leader(ctx context.Context) (value []byte, term int64, err error) {
	l := e.lock()
	if l.conn == nil {
		return nil, 0, &opError{"leader", l.path, fmt.Errorf("%w: the Election was not made by NewElection", ErrInvalidArgument)}
	}
	c := zkclient.For(l.conn)
	defer c.Unref()
	now, err := l.leaderNow(ctx, c)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil, 0, &opError{"leader", l.path, fmt.Errorf("%w: no lock directory", ErrNoLeader)}
	case err != nil:
		return nil, 0, &opError{"leader", l.path, err}
	case now.Term == 0:
		return nil, 0, &opError{"leader", l.path, ErrNoLeader}
	}
	return now.Value, now.Term, nil
}

// leaderNow lists the queue and reads its head, without a watch.
func (l *RWLock) leaderNow(ctx context.Context, c *zkclient.Client) (Leadership, error) {
	r := c.Children(ctx, l.path)
	if r.Err != nil {
		return Leadership{}, r.Err
	}
	for _, head := range queueOf(r.V) {
		n := c.Get(ctx, l.path+"/"+head.name)
		switch {
		case errors.Is(n.Err, zk.ErrNoNode):
			continue // gone: the next listed node is the head, if it exists (see observe.go)
		case n.Err != nil:
			return Leadership{}, n.Err
		}
		return readHead(head, n.V).Leadership, nil
	}
	return Leadership{}, nil
}

// A headRead is what an observer read of the head of the queue: the
// leadership, and the version of the node's data it was read from.
type headRead struct {
	Leadership
	version int32
}

// readHead returns the leadership that the head of the queue shows. The
// head leads if it is a writer, since a writer holds once nothing precedes
// it. A reader, or a writer downgraded, leads nobody. Only our own nodes
// carry a value.
func readHead(head lockNode, n zkclient.Node) headRead {
	if head.mode != Write || head.ours && lockname.Downgraded(n.Data) {
		return headRead{version: n.Stat.Version}
	}
	var value []byte
	if head.ours {
		value, _ = lockname.Value(n.Data)
	}
	return headRead{Leadership{Value: value, Term: n.Stat.Czxid}, n.Stat.Version}
}
