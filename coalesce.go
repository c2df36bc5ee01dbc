package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// WithReadCoalescing lets the blocking shared acquisitions of this RWLock
// that run at the same time share one read node, as long as that keeps the
// queue's order. These are RLock, WithRead, ReadGroup and ReadBatch, but
// not TryRLock. So 64 goroutines reading at once make one node instead of
// 64; BENCHMARKS.md, W7, has what a burst costs.
//
// On a standalone server, a writer queued behind a shared node never waits
// for a reader that arrived after the writer's node was created, even if
// this process has not heard of that node yet. A reader that may not join
// makes a new node, which later readers may join. The file
// docs/guarantees.md tells how a sync proves it fair to join, the two
// exceptions in an ensemble, what a silent cut does, and what a connection
// not made by Dial adds.
//
// Each reader gets a grant of its own. Its Release is its own, and later
// calls return nil. Its Done closes when the shared node is lost. The node
// is deleted when the last of its readers releases, or when the last
// waiting reader leaves before the grant. A reader whose context ends while
// it waits leaves. All the readers of one node share its token, its
// Deadline and its hold limit, counted from the node's grant. Observers
// hear of one acquisition per reader, and of one grant per node.
func WithReadCoalescing() Option {
	return func(o *options) { o.coalesce = true }
}

// coalescer is a lock's shared read node, if any. Only a lock made with
// WithReadCoalescing has one.
type coalescer struct {
	mu   sync.Mutex
	cur  *sharedRead            // the node the next reader may join; nil for none; guarded by mu
	live map[string]*sharedRead // the nodes with readers, by full path, for Queue; guarded by mu
}

// readers returns how many readers of this process hold or wait on the
// shared node at path; 0 for any other node.
func (co *coalescer) readers(path string) int {
	if co == nil {
		return 0
	}
	co.mu.Lock()
	s := co.live[path]
	var n int
	var h *hold
	if s != nil {
		h = s.hold
		for _, me := range s.seats {
			if me.g == nil { // a filled seat's grant is among the hold's
				n++
			}
		}
	}
	co.mu.Unlock()
	if h != nil {
		n += h.handleCount()
	}
	return n
}

// sharedRead is one shared read node. It holds the acquisition that makes
// the node, which runs with a context of its own. Then it holds the node's
// hold, on which each reader gets a grant of its own.
type sharedRead struct {
	co     *coalescer
	l      *RWLock
	a      *acquisition // of one member
	cancel context.CancelFunc
	done   chan struct{} // closed when the acquisition ended, with hold or err set

	connects uint64 // the connection's count of connections before the node's create
	counted  bool   // the connection counts them, as one made by Dial does

	// guarded by co.mu
	node     string          // its full path, once listed
	session  int64           // the session that owns it, once listed
	verdict  bool            // its first listing is judged, or the acquisition ended
	dir      *zkclient.Watch // the child watch of the listing that first showed the node
	open     bool            // joiners are admitted, as the fairness argument allows
	next     *joinSync       // the sync that joiners arriving now wait for, not sent yet; nil for none
	syncing  bool            // a sync is under way
	finished bool            // the acquisition ended
	hold     *hold           // its hold, once granted
	err      error           // or why it failed
	seats    []*seat         // the readers waiting for the grant
}

// A seat is one reader's place on a shared node while it waits. At the
// grant, each reader waiting then gets its grant there.
type seat struct{ g *Grant }

// readShared is RLock on a lock with WithReadCoalescing, and so also
// WithRead, ReadGroup and ReadBatch. It is one acquisition of the caller,
// with its own event.
func (l *RWLock) readShared(ctx context.Context) (*Grant, error) {
	w := want{mode: Read, block: true}
	start := time.Now()
	l.starting(ctx, w, start)
	g, m, syncs, err := l.coalesce.read(ctx, l)
	if m == nil {
		m = &member{l: l, want: w} // a joiner's event counts only the syncs it opened
	}
	m.requests.Add(syncs)
	l.acquired(ctx, m, start, err)
	if err != nil {
		return nil, &opError{verb(w), l.path, err}
	}
	return g, nil
}

// read returns a grant on a shared node, joined or made. For the caller's
// event, it returns as m the node's member if this caller made it and its
// acquisition ended. Otherwise m is nil. It returns as syncs the requests
// of the syncs that this caller was the first to wait for, which it
// reports.
func (co *coalescer) read(ctx context.Context, l *RWLock) (g *Grant, m *member, syncs int64, err error) {
	var opened []*joinSync
	defer func() {
		for _, sy := range opened {
			syncs += sy.requests.Load()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, 0, err
		}
		s, me, sy, first := co.enter(ctx, l)
		made := sy == nil
		if first {
			opened = append(opened, sy)
		}
		if !made {
			lost, err := s.await(ctx, sy)
			switch {
			case err != nil:
				return nil, nil, 0, s.leave(ctx, me, true)
			case lost != nil:
				s.leave(ctx, me, false)
				return nil, nil, 0, lost
			case !s.admits(sy):
				s.leave(ctx, me, false) // not proven fair to join, so make a node of our own
				continue
			}
		}
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			// A cancelled RLock promises the context's error, even if the
			// grant came at the same moment.
			return nil, nil, 0, s.leave(ctx, me, true)
		}
		g, again, err := s.take(me)
		if again {
			continue // the node is going as we came, so make a node of our own
		}
		if made {
			m = s.a.members[0]
		}
		return g, m, 0, err
	}
}

// enter joins the current node if it may take joiners, or if its first
// listing is not judged yet. It then returns the sync the joiner waits for,
// and whether it is the first to wait for it. Otherwise it makes a new
// node, and returns no sync.
func (co *coalescer) enter(ctx context.Context, l *RWLock) (s *sharedRead, me *seat, sy *joinSync, first bool) {
	co.mu.Lock()
	s = co.cur
	co.mu.Unlock()
	if s != nil {
		s.refresh()
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	me = &seat{}
	if s = co.cur; s != nil && (!s.verdict || s.joinableLocked()) {
		s.seats = append(s.seats, me)
		sy, first = s.nextSyncLocked()
		return s, me, sy, first
	}
	s = &sharedRead{
		co: co, l: l, seats: []*seat{me}, done: make(chan struct{}),
		a: newAcquisition(Request{Lock: l, Mode: Read}),
	}
	s.a.members[0].listed = s.listedBy
	s.connects, s.counted = s.a.c.ConnectCount()
	co.cur = s
	var sctx context.Context
	sctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.background.Add(1)
	go s.run(sctx)
	return s, me, nil, false
}

// run is the node's acquisition, on a goroutine of its own. At the grant,
// each reader waiting then gets its grant on the node's hold.
func (s *sharedRead) run(ctx context.Context) {
	defer s.l.background.Done()
	defer s.cancel()
	holds, err := s.a.run(ctx)
	if err != nil {
		s.a.release()
	}
	co := s.co
	co.mu.Lock()
	s.finished, s.err = true, err
	var h *hold
	if err == nil {
		h = holds[0]
		s.hold = h
		for i, me := range s.seats {
			if i == 0 {
				me.g = h.grant(Read) // the hold's first grant, counted as it was made
			} else if me.g, _ = h.join(); me.g == nil {
				break // lost already, so the others take the loss
			}
		}
	}
	orphan := h != nil && len(s.seats) == 0 // every reader left as it was granted
	if err != nil || orphan {
		s.closeLocked()
		s.forgetLocked()
	}
	s.judgedLocked()
	co.mu.Unlock()
	switch {
	case orphan:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.cleanupTimeout)
		h.drop(rctx) // as an abort does, with the deletion in the background if it must
		cancel()
	case h != nil:
		// The node takes nobody once it is no longer held.
		h.whenEnded(func(error) {
			co.mu.Lock()
			defer co.mu.Unlock()
			s.closeLocked()
			s.forgetLocked()
		})
	}
	close(s.done)
}

// listedBy judges a listing of the node's member that showed the node; see
// member.locate. The first tells whether the node may take joiners. Any
// later one that shows a node behind it stops it for good. So does a
// listing that belongs to a new node, after the acquisition queued again.
func (s *sharedRead) listedBy(m *member) {
	co := s.co
	co.mu.Lock()
	defer co.mu.Unlock()
	if s.node != m.path { // the first listing, or one of a new node
		s.forgetLocked()
		s.node, s.session = m.path, m.session
		if len(s.seats) > 0 {
			co.live[s.node] = s
		}
	}
	switch {
	case !s.verdict:
		s.dir, s.open = m.dir, m.dir != nil && !m.snap.after && s.connected()
		s.judgedLocked()
	case m.dir != s.dir || m.snap.after:
		s.open = false
	}
	if !s.open {
		s.closeLocked()
	}
}

// forgetLocked takes the node out of co.live, once no reader is left.
func (s *sharedRead) forgetLocked() {
	if s.node != "" && s.co.live[s.node] == s {
		delete(s.co.live, s.node)
	}
}

// closeLocked stops the node taking joiners. The sync not sent yet never
// will be: the joiners that wait for it make nodes of their own.
func (s *sharedRead) closeLocked() {
	s.open = false
	if s.co.cur == s {
		s.co.cur = nil
	}
	if s.next != nil {
		close(s.next.done)
		s.next = nil
	}
}

// leave takes a waiting reader away. Either its context ended, and it is
// cancelled, or it may not join and makes a node of its own. The last
// reader to leave before the grant cancels the acquisition. Its node goes
// as any cancelled acquisition's does. A cancelled reader then waits for
// that, as a cancelled RLock leaves no node behind. After the grant, the
// reader releases the grant made for it, if one was. It returns ctx's error
// for a cancelled reader.
func (s *sharedRead) leave(ctx context.Context, me *seat, cancelled bool) error {
	co := s.co
	co.mu.Lock()
	s.unseatLocked(me)
	finished := s.finished
	last := !finished && len(s.seats) == 0
	if last {
		s.closeLocked()
		s.forgetLocked()
		s.cancel()
	}
	co.mu.Unlock()
	var err error
	if cancelled {
		err = ctx.Err()
	}
	switch {
	case last && cancelled:
		<-s.done // the node is deleted, or its deletion handed to the background
	case me.g != nil:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.cleanupTimeout)
		defer cancel()
		if rerr := me.g.Release(rctx); rerr != nil && err != nil {
			err = fmt.Errorf("%w (and: %w)", err, rerr)
		}
	}
	return err
}

// unseatLocked takes me from the waiting readers.
func (s *sharedRead) unseatLocked(me *seat) {
	s.seats = slices.DeleteFunc(s.seats, func(x *seat) bool { return x == me })
}

// take turns a waiting reader into the holder of a grant on the node, once
// the acquisition ended. The grant is the one made for it at the grant, or
// a new one for a reader that came later. The result again reports a node
// that is going as the reader came. The reader then makes a node of its
// own.
func (s *sharedRead) take(me *seat) (g *Grant, again bool, err error) {
	co := s.co
	co.mu.Lock()
	s.unseatLocked(me)
	if s.err != nil {
		co.mu.Unlock()
		return nil, false, s.err
	}
	h := s.hold
	co.mu.Unlock()
	if g = me.g; g == nil {
		var ok bool
		if g, ok = h.join(); !ok {
			if err := h.ended(); err != nil && !errors.Is(err, ErrReleased) {
				return nil, false, err // lost
			}
			co.mu.Lock()
			s.closeLocked() // going, so the next reader makes a node of its own
			co.mu.Unlock()
			return nil, true, nil
		}
	}
	if err := g.Err(); err != nil {
		// The node was lost before this reader took it. No grant for a node
		// that may no longer exist.
		return nil, false, err
	}
	return g, false, nil
}
