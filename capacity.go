package rwlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A bounded shared lock: a semaphore on the read/write queue. A lock made
// WithCapacity(n) has n permits. Every acquisition takes a weight w of
// them, 1 ≤ w ≤ n: Lock takes all n, RLock one, Acquire w. Its node's name
// declares w and n (see internal/lockname's capacity.go). A read/write
// lock is the case where a writer takes every permit and a reader one of
// infinitely many.
//
// The rule. A node of weight w holds when the weights of every node before
// it, held or waiting, plus w, are at most n. Nodes go in queue order only:
// a large request holds back later small ones, as x/sync/semaphore does.
//
// Why the permits held never exceed n. Take the latest node h that holds
// now. When h was granted, every node before it that holds now was there
// already, since no node joins the queue before an existing one. So the
// holders' weights are at most those before h then, plus h's, which the
// rule bounded by n. A snapshot that still shows a node that has gone only
// makes the sum larger, so a grant on it is safe too.

// WithCapacity makes the lock a bounded shared lock of n permits, 1 ≤ n ≤
// 999,999,999. [RWLock.Acquire] takes w of them, Lock all n and RLock one,
// in queue order: nobody passes a waiter ahead, and a release wakes at most
// one waiter more than it admits. Every client of the path must give the
// same n. A node made under another capacity, or without one, fails the
// acquisition with an error wrapping ErrInvalidArgument, as a mixed fleet
// does. So do the nodes of Curator's InterProcessSemaphoreV2, which counts
// its permits apart. New fails with ErrInvalidArgument when n is out of
// range, with WithReadCoalescing (many readers on one node of weight 1
// would take more permits than they count), and with a dialect other than
// DialectNative (no peer counts a weighted node), and with WithLockDelay.
func WithCapacity(n int64) Option {
	return func(o *options) {
		if n < 1 || n > lockname.MaxCapacity {
			o.err = fmt.Errorf("%w: capacity %d (1 to %d)", ErrInvalidArgument, n, lockname.MaxCapacity)
		}
		o.capacity = n
	}
}

// checkCapacity refuses the options a capacity cannot go with.
func (o *options) checkCapacity() error {
	switch {
	case o.capacity == 0:
	case o.coalesce:
		return fmt.Errorf("%w: WithReadCoalescing with WithCapacity: one node of weight 1 would hold many readers' permits",
			ErrInvalidArgument)
	case o.dialect != DialectNative:
		return fmt.Errorf("%w: WithCapacity with %s: no peer counts a weighted node", ErrInvalidArgument, o.dialect.constName())
	case o.lockDelay > 0:
		// A permit's node changes at its grant (the held mark), so a data
		// change before the deletion would not tell a release (see
		// lockdelay.go).
		return fmt.Errorf("%w: WithLockDelay with WithCapacity: a permit's mark tells its grant, not its release",
			ErrInvalidArgument)
	}
	return nil
}

// Acquire blocks until it holds w of the permits of a lock made
// [WithCapacity], or ctx ends. It behaves as Lock does in every other way:
// the grant has a token, a hold limit, revocation and guarded writes, and
// one round trip suffices when the permits are free. Its Mode is Write when
// w is the capacity, and Read otherwise. A nested Acquire shares the outer
// grant's node, and fails with ErrUpgrade for more permits than it holds.
// Acquire fails with ErrInvalidArgument on a lock without a capacity, or
// for w outside 1…capacity.
func (l *RWLock) Acquire(ctx context.Context, w int64) (*Grant, error) {
	return l.acquireWeight(ctx, "acquire", w, true)
}

// TryAcquire is Acquire without the wait, as TryLock is Lock's: it fails
// with ErrWouldBlock, leaving no node, when the w permits are not free for
// it now, or a waiter is ahead.
func (l *RWLock) TryAcquire(ctx context.Context, w int64) (*Grant, error) {
	return l.acquireWeight(ctx, "tryacquire", w, false)
}

func (l *RWLock) acquireWeight(ctx context.Context, verb string, w int64, block bool) (*Grant, error) {
	switch {
	case l.conn == nil:
		return nil, &opError{verb, l.path, fmt.Errorf("%w: the RWLock was not made by New", ErrInvalidArgument)}
	case l.capacity == 0:
		return nil, &opError{verb, l.path, fmt.Errorf("%w: %s on a lock made without WithCapacity", ErrInvalidArgument, verb)}
	case w < 1 || w > l.capacity:
		return nil, &opError{verb, l.path, fmt.Errorf("%w: weight %d (1 to %d)", ErrInvalidArgument, w, l.capacity)}
	}
	return l.acquire(ctx, want{mode: l.permitMode(w), block: block, weight: w})
}

// permitMode is the mode of a grant of w permits: Write for all of them.
func (l *RWLock) permitMode(w int64) Mode {
	if w == l.capacity {
		return Write
	}
	return Read
}

// weigh returns the weight of a request for mode, or weight when given, on
// l. It is 0 on a lock without a capacity.
func (l *RWLock) weigh(mode Mode, weight int64) int64 {
	switch {
	case l.capacity == 0:
		return 0
	case weight > 0:
		return weight
	case mode == Write:
		return l.capacity
	}
	return 1
}

// checkWeight says why a request's weight does not fit its lock.
func (l *RWLock) checkWeight(weight int64) error {
	switch {
	case weight == 0:
	case l.capacity == 0:
		return fmt.Errorf("%w: weight %d on %s, made without WithCapacity", ErrInvalidArgument, weight, l.path)
	case weight < 0 || weight > l.capacity:
		return fmt.Errorf("%w: weight %d on %s (1 to %d)", ErrInvalidArgument, weight, l.path, l.capacity)
	}
	return nil
}

// holdWeight returns the weight its name gives a held node.
func holdWeight(h *hold) int64 {
	n, _ := lockname.Parse(h.path[strings.LastIndexByte(h.path, '/')+1:])
	return n.Weight
}

// prefix is the path ZooKeeper extends with the member's node's number.
func (m *member) prefix(guid string) string {
	if m.weight > 0 {
		return lockname.CapacityPrefix(m.l.path, guid, m.weight, m.l.capacity)
	}
	return nodePrefix(m.l.path, guid, m.mode, m.l.dialect)
}

// permitBlocker is the rule: a node of weight self.weight fits behind
// before when their weights add up to at most the capacity.
func permitBlocker(before []lockNode, self lockNode) (lockNode, bool) {
	var sum int64
	for _, n := range before {
		// mutant: permit-out-of-order
		sum += n.weight // waiters too: nobody passes a waiter
	}
	// mutant: permit-past-capacity
	if sum+self.weight <= self.capacity {
		return lockNode{}, false
	}
	return before[len(before)-1], true
}

// A capacityError says that the lock directory holds nodes made under
// different capacities: the fleet on the path disagrees. It wraps
// ErrInvalidArgument.
type capacityError struct {
	ours   int64
	a, b   lockNode // two nodes whose capacities differ
	listed string   // the path
}

func (e *capacityError) Error() string {
	return fmt.Sprintf("invalid argument: a mixed fleet: %s holds %s and %s; every client of the path must give "+
		"the same WithCapacity (this lock: %s)", e.listed, describeCapacity(e.a), describeCapacity(e.b), capacityText(e.ours))
}

func (e *capacityError) Unwrap() error { return ErrInvalidArgument }

func describeCapacity(n lockNode) string { return n.name + " (" + capacityText(n.capacity) + ")" }

func capacityText(n int64) string {
	if n == 0 {
		return "no capacity"
	}
	return fmt.Sprintf("capacity %d", n)
}

// disagree refuses a snapshot whose nodes were made under different
// capacities. Every node agrees with ours if they all agree with each
// other, since ours is among them.
func (l *RWLock) disagree(s *snapshot) error {
	if s.odd[0].name == "" {
		return nil
	}
	return &capacityError{ours: l.capacity, a: s.odd[0], b: s.odd[1], listed: l.path}
}

// The herd-free wait. Strict queue order means that only the first waiter
// can be admitted next: a later waiter's sum includes the earlier one's
// weight. So the watch set is:
//
//   - The first waiter, whose nodes ahead all hold, watches all of them,
//     at most n nodes. Its snapshot then stays exact: every deletion ahead
//     fires one of its watches. So it is granted on the deletion that makes
//     room, with no listing, and woken by no deletion that cannot.
//   - Any other waiter watches only its immediate predecessor, a waiter
//     too. Nothing but that waiter's admission, or its going, can let it in.
//
// A waiter tells which case it is in from its snapshot alone. The longest
// prefix of the snapshot whose weights fit in n may hold. Where that
// prefix ends before our predecessor, our predecessor waits, or did at the
// listing. The snapshot is a superset of the nodes ahead, so it can only
// take a holder for a waiter, never the other way round.
//
// An admission is announced. A grant that waited, or whose listing showed
// a node behind it, writes the held mark into its node at once (announce).
// Its follower, which watches it as a waiter, wakes on the data change and
// learns that every node up to it holds. So it is the first waiter now, and
// watches them all. Its snapshot may still show nodes that went while it
// watched its predecessor alone: if the nodes up to the marked one weigh
// more than n, it lists once first. A chain of admissions rides these
// marks, one per admission. A grant whose listing showed nobody behind it
// marks nothing. Any later listing was made after it fitted, so it shows
// that grant in the prefix that may hold: the nodes ahead only go.
//
// Wake-ups per release. A deletion wakes only the waiters that watch the
// holders. Such a waiter's snapshot fitted whole, and a snapshot only
// overstates, so every node ahead of it may hold. It is the first waiter,
// or a waiter that fits already and is admitted when it wakes. A woken
// waiter that is admitted wakes its follower with its mark. So every waiter
// woken is admitted, but the last of the chain: one release wakes at most
// one waiter more than it admits. A waiter granted keeps the watches it
// set, as go-zookeeper cannot remove them. The server still sends their
// events, which wake nobody.
//
// The marks carry no safety. A grant rests on the snapshot's sum alone, a
// sum that can only be too large. A lost mark delays a follower until its
// predecessor goes; announce retries to keep that short.

// waitPermits is the wait of a member under a capacity. It returns
// stepGrant once its node fits, stepList where a listing must tell more,
// or the step after a failure.
func (m *member) waitPermits(ctx context.Context) (step, error) {
	if !m.block {
		return 0, ErrWouldBlock // the listing, exact, showed it does not fit
	}
	var own <-chan ownResult
	if m.own.watch == nil {
		m.own.connects, m.own.counted = m.a.c.ConnectCount()
		own = m.watchOwnBehind(ctx)
	}
	w := &watching{fired: make(chan struct{}, 1)}
	defer w.stop()
	for {
		ahead, stale := m.permitsAhead()
		if own != nil && (stale || len(ahead) == 0) {
			if next, err := m.settleOwn(<-own); next != stepWait || err != nil {
				return next, err
			}
			own = nil
		}
		if stale {
			return stepList, nil // the first waiter's snapshot shows nodes long gone
		}
		if len(ahead) == 0 {
			if ev, gone := m.ownGone(); gone {
				return m.ownEvent(ev)
			}
			return m.confirmOwn(ctx)
		}
		if fresh := unwatched(w, ahead); len(fresh) > 0 {
			if next, err := m.lookPermits(ctx, w, fresh, own); next != stepWait || err != nil {
				return next, err
			}
			own = nil
			continue
		}
		m.waited = true
		select {
		case <-m.own.watch.Fired():
			return m.ownEvent(m.own.watch.Event())
		case <-w.fired:
			for _, f := range w.take() {
				if next, err := m.firePermit(f); next != stepWait || err != nil {
					return next, err
				}
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// permitsAhead returns the nodes to watch, or nil when our node fits (see
// the herd-free wait). It reports stale when we are the first waiter but
// the snapshot holds more weight ahead than can hold at once. Some of
// those nodes went unseen while we watched our predecessor alone. One
// listing then costs less than a look at each.
func (m *member) permitsAhead() (ahead []lockNode, stale bool) {
	before := m.snap.before
	if _, blocked := permitBlocker(before, m.snap.self); !blocked {
		return nil, false
	}
	var k int // before[:k] may hold
	var sum int64
	for ; k < len(before) && sum+before[k].weight <= m.l.capacity; k++ {
		sum += before[k].weight
	}
	for i := len(before) - 1; i >= k; i-- {
		if m.admitted[before[i].name] {
			return nil, true // it holds, with every node before it, and they weigh more than n
		}
	}
	if k < len(before) {
		// mutant: permit-watches-wrong-node
		return before[len(before)-1:], false // our predecessor waits
	}
	return before, false // we are the first waiter
}

// unwatched returns the nodes of ahead without a look that still waits for
// them to go.
func unwatched(w *watching, ahead []lockNode) []lockNode {
	var fresh []lockNode
	for _, n := range ahead {
		live := false
		for _, l := range w.looks {
			live = live || l.node.name == n.name && !l.gone && !l.spent
		}
		if !live {
			fresh = append(fresh, n)
		}
	}
	return fresh
}

// lookPermits sets data watches on nodes all at once, and on our own node
// with them if own is not nil. A node already gone leaves the snapshot. A
// node with the held mark holds, with every node before it.
func (m *member) lookPermits(ctx context.Context, w *watching, nodes []lockNode, own <-chan ownResult) (step, error) {
	looks := make([]*look, len(nodes))
	done := make(chan struct{}, len(nodes))
	for i, n := range nodes {
		l := &look{node: n}
		looks[i] = l
		go func() {
			l.r, l.data = m.a.c.GetW(ctx, m.l.path+"/"+n.name)
			done <- struct{}{}
		}()
	}
	for range nodes {
		<-done
	}
	if own != nil {
		if next, err := m.settleOwn(<-own); next != stepWait || err != nil {
			return next, err
		}
	}
	if ev, gone := m.ownGone(); gone {
		return m.ownEvent(ev)
	}
	m.l.debug("waiting for permits", m.path)
	for _, l := range looks {
		w.looks = append(w.looks, l)
		switch r := l.r; {
		case errors.Is(r.Err, zk.ErrNoNode):
			m.gone(l, false) // no lock-delay with a capacity: see checkCapacity
			continue
		case r.Err != nil:
			return m.after(r.Err)
		case !m.ours(r.Session):
			return stepRequeue, nil
		}
		if lockname.Held(l.r.V.Data) {
			m.markAdmitted(l.node.name)
		}
		w.subscribe(l.data, fire{look: l})
	}
	return stepWait, nil
}

// firePermit takes the event of a watched node. A data change is its held
// mark, its admission: only a holder changes its node. Its watch is spent,
// and the node is looked at again if it is still in our way.
func (m *member) firePermit(f fire) (step, error) {
	l := f.look
	if l.gone || l.spent {
		return stepWait, nil
	}
	switch ev := l.data.Event(); ev.Type {
	case zk.EventNotWatching:
		return m.notWatching(ev)
	case zk.EventNodeDeleted:
		m.gone(l, false)
	case zk.EventNodeDataChanged:
		m.markAdmitted(l.node.name)
		l.spent = true
	default:
		l.spent = true
	}
	return stepWait, nil
}

func (m *member) markAdmitted(name string) {
	if m.admitted == nil {
		m.admitted = make(map[string]bool)
	}
	m.admitted[name] = true
}

// announce writes the held mark into a granted node whose follower may
// wait for it (see the herd-free wait). It does not delay the grant. It
// retries through disconnections while the node is held.
func (m *member) announce(h *hold) {
	if m.weight == 0 || !m.waited && !m.snap.after {
		return
	}
	data := append(lockname.Data(h.l.owner, h.l.maxHold, lockname.MarkHeld), h.lines...)
	h.c.Ref()
	go func() {
		defer h.c.Unref()
		var retry zkclient.Backoff
		for h.held() {
			r := h.c.Set(zkclient.WithCounter(h.ctx, &h.requests), h.path, data)
			if !zkclient.ConnectionLoss(r.Err) || retry.Wait(h.ctx, h.c.Conn()) != nil {
				return
			}
		}
	}()
}
