package rwlock

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// This file holds the parts of an acquisition (see acquire.go). They are
// its steps, its members, and what every step needs of them.

type step int

const (
	stepCreate    step = iota // make our node, and the lock directory when it is missing
	stepList                  // list the directory, find our node and take the snapshot
	stepWait                  // wait for the nodes in our way
	stepGrant                 // nothing is in our way, so grant
	stepReconnect             // the connection failed, so wait for the session and go on
	stepRequeue               // the session was replaced, so queue again with a new node
)

// want is what the caller asked of one lock.
type want struct {
	mode     Mode
	block    bool  // false for TryLock and TryRLock
	campaign bool  // an Election's Campaign (see election.go), for the observers
	weight   int64 // the permits it takes under a capacity; 0 without one (see capacity.go)
}

// acquisition is one call that makes nodes, in progress.
type acquisition struct {
	c       *zkclient.Client // one connection, every member's
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
	lines    []byte // its node's data lines besides the lock's, as lockname.InSet for a set
	keepable bool   // a lone node of a caching lock, which it may keep: its data says so

	node    string // our node, relative to the lock directory; "" until known
	path    string // its full path
	session int64  // the session that owns node
	unsure  bool   // a create's outcome is unknown, so a node with the guid may exist
	created []string

	snap       snapshot
	downgraded map[string]bool // writers seen downgraded (readers only)
	admitted   map[string]bool // nodes ahead seen holding, under a capacity (see capacity.go)
	waited     bool            // we watched a node before being granted
	delay      lockDelay       // what WithLockDelay makes us wait (see lockdelay.go)
	retry      zkclient.Backoff

	// Under a capacity (see capacity.go's herd-free wait): listedWaiting says
	// a listing showed our node waiting, and marked that our node bears the
	// held mark already.
	listedWaiting, marked bool

	dir     *zkclient.Watch // child watch on the directory, from our first listing
	own     ownWatch        // data watch on our own node, set before we wait
	tok     int64           // our node's token, once known (see dated)
	exact   bool            // tok was read from our node's stat, not dated by a listing
	oneTrip bool            // the listing sent behind the create showed our node
	// listedAt is when the last listing that showed our node was sent. It
	// dates what the fleet watch knows at the grant (see fleetWatch).
	listedAt time.Time

	listed func(*member) // hears of each listing that found our node, for coalescing

	requests zkclient.Counter // the requests it sent, for its AcquireEvent
	relists  atomic.Int32     // its listings after the one that first showed its node
}

// newAcquisition makes an acquisition that blocks, of one member per
// request. Each member takes a use of the connection's client. Its hold
// keeps that use, and a failed acquisition gives it back (see release).
func newAcquisition(reqs ...Request) *acquisition {
	a := &acquisition{guid: lockname.NewGUID()}
	for _, r := range reqs {
		a.c = zkclient.For(r.Lock.conn)
		w := want{mode: r.Mode, block: true, weight: r.Lock.weigh(r.Mode, r.Weight)}
		if w.weight > 0 {
			w.mode = r.Lock.permitMode(w.weight)
		}
		a.members = append(a.members, &member{l: r.Lock, a: a, want: w})
	}
	return a
}

// release gives back the members' uses of the client after a failure,
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

// counting returns ctx for the member's requests. It counts them, for the
// member's AcquireEvent.
func (m *member) counting(ctx context.Context) context.Context {
	return zkclient.WithCounter(ctx, &m.requests)
}

// after maps a failed request to the next step. A connection loss leads to
// stepReconnect, and the end of the session to stepRequeue. Any other error
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
// node. If not, the session was replaced, and our node went with it.
func (m *member) ours(session int64) bool { return session == m.session && session != 0 }

func (m *member) isDowngraded(name string) bool { return m.downgraded[name] }

func (m *member) markDowngraded(name string) {
	if m.downgraded == nil {
		m.downgraded = make(map[string]bool)
	}
	m.downgraded[name] = true
}
