package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// WithReadCoalescing makes the blocking shared acquisitions of this RWLock
// (RLock, WithRead, ReadGroup, ReadBatch; not TryRLock) that run at the
// same time share one read node, as long as that keeps the queue's order:
// 64 goroutines reading at once cost one node and three requests instead of
// 64 nodes and 192 requests.
//
// A reader joins the shared node, waiting or held, only while nothing has
// queued behind that node since its listing; otherwise it makes a new node,
// which later readers may join. So a writer that queued behind a shared
// node never waits for a reader that arrived after the writer's node.
//
// Each reader gets a grant of its own: its Release is its own (and later
// calls return nil), its Done closes when the shared node is lost, and
// the node is deleted when the last of its readers releases. A reader
// whose context ends while it waits leaves; the node is deleted when the
// last waiting reader leaves before the grant. All the readers of one node
// share its token, its Deadline and its hold limit (see WithMaxHold),
// counted from the node's grant. Observers hear of one acquisition per
// reader, and of one grant per node.
func WithReadCoalescing() Option {
	return func(o *options) { o.coalesce = true }
}

// The fairness argument. A shared node N takes a joiner only if
//
//	(1) the listing of N's acquisition that first showed N showed no lock
//	    node after N, and set a child watch on the directory; and
//	(2) that watch has not fired (as of the last packet go-zookeeper
//	    read: Watch.FiredNow) when the joiner arrives, or, for a joiner
//	    that arrived before that listing, when the listing's verdict is in.
//
// Every node created after that listing fires the watch (a child watch
// fires on any change of the directory's children, and ZooKeeper sends
// our session the event before it answers any later request of ours, as
// long as the connection lasts: see connected, which is part of (2)). So
// when a joiner is admitted, every lock node behind N was created after
// the joiner's arrival, up to the time the event takes to reach us: a
// writer W that queued behind N never waits for a reader that arrived
// after W's node. A reader that joins N is behind whatever N is behind,
// exactly as a node of its own made at that moment would be, and ahead of
// nothing that queued before it. Once the watch has fired, or a later
// listing shows a node after N, or N's acquisition was queued again, N
// takes no more joiners, for good: a change that is not a node behind N
// (a deletion that clears N's way, a foreign child) closes it too, which
// costs a node, never fairness. A node that was lost, released or never
// granted takes nobody.
//
// Holding on: a node with joiners lives while any of them holds it, and
// takes joiners only while nothing has queued behind it, so once a writer
// queues, the readers of N are a fixed set, and N goes when the last of
// them releases: a stream of readers cannot starve the writer.

// coalescer is a lock's shared read node, if any (only with
// WithReadCoalescing).
type coalescer struct {
	mu   sync.Mutex
	cur  *sharedRead            // the node the next reader may join; nil for none; guarded by mu
	live map[string]*sharedRead // the nodes with readers, by full path (for Queue); guarded by mu
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
		n, h = s.waiting, s.hold
	}
	co.mu.Unlock()
	if h != nil {
		n += h.handleCount()
	}
	return n
}

// sharedRead is one shared read node: the acquisition that makes it, run
// with a context of its own, and then its hold, on which each reader gets
// a grant of its own.
type sharedRead struct {
	co     *coalescer
	l      *RWLock
	a      *acquisition // of one member
	cancel context.CancelFunc
	listed chan struct{} // closed when the first listing of the node is judged, or the acquisition ended
	done   chan struct{} // closed when the acquisition ended: hold or err is set

	connects uint64 // the connection's count of connections before the node's create
	counted  bool   // the connection counts them (one made by Dial)

	// guarded by co.mu
	node     string          // its full path, once listed
	verdict  bool            // listed is closed
	dir      *zkclient.Watch // the child watch of the listing that first showed the node
	open     bool            // joiners are admitted (see the fairness argument)
	finished bool            // the acquisition ended
	hold     *hold           // its hold, once granted
	err      error           // or why it failed
	waiting  int             // readers waiting for the grant
	grants   []*Grant        // made at the grant for the readers waiting then
}

// readShared is RLock (and WithRead, ReadGroup, ReadBatch) on a lock with
// WithReadCoalescing: one acquisition of the caller, with its own event.
func (l *RWLock) readShared(ctx context.Context) (*Grant, error) {
	w := want{mode: Read, block: true}
	start := time.Now()
	l.starting(ctx, w, start)
	g, m, err := l.coalesce.read(ctx, l)
	if m == nil {
		m = &member{l: l, want: w} // a joiner's event: no request of its own
	}
	l.acquired(ctx, m, start, err)
	if err != nil {
		return nil, &opError{verb(w), l.path, err}
	}
	return g, nil
}

// read returns a grant on a shared node, joined or made. m is the node's
// member if this caller made it and its acquisition ended (for the
// caller's event), else nil.
func (co *coalescer) read(ctx context.Context, l *RWLock) (g *Grant, m *member, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		s, made := co.enter(ctx, l)
		if !made {
			select {
			case <-s.listed:
			case <-ctx.Done():
				return nil, nil, s.leave(ctx, true)
			}
			if !s.admits() {
				s.leave(ctx, false) // not fair to join any more: a node of our own
				continue
			}
		}
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			// As a cancelled RLock promises: the context's error, even if
			// the grant came at the same moment.
			return nil, nil, s.leave(ctx, true)
		}
		g, again, err := s.take()
		if again {
			continue // the node is going as we came: a node of our own
		}
		if made {
			m = s.a.members[0]
		}
		return g, m, err
	}
}

// enter joins the current node if it may take joiners (or its first
// listing is not judged yet), and otherwise makes a new one; made reports
// the latter.
func (co *coalescer) enter(ctx context.Context, l *RWLock) (s *sharedRead, made bool) {
	co.mu.Lock()
	s = co.cur
	co.mu.Unlock()
	if s != nil {
		s.refresh()
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if s = co.cur; s != nil && (!s.verdict || s.joinableLocked()) {
		s.waiting++
		return s, false
	}
	s = &sharedRead{
		co: co, l: l, waiting: 1,
		listed: make(chan struct{}), done: make(chan struct{}),
		a: newAcquisition(Request{l, Read}),
	}
	s.a.members[0].listed = s.listedBy
	s.connects, s.counted = s.a.c.ConnectCount()
	co.cur = s
	var sctx context.Context
	sctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.background.Add(1)
	go s.run(sctx)
	return s, true
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
	s.judgedLocked()
	var h *hold
	if err == nil {
		h = holds[0]
		s.hold = h
		if s.waiting > 0 {
			s.grants = append(s.grants, h.grant(Read))
		}
		for len(s.grants) < s.waiting {
			g, ok := h.join()
			if !ok {
				break // lost already: the others take the loss
			}
			s.grants = append(s.grants, g)
		}
	}
	orphan := h != nil && s.waiting == 0 // every reader left as it was granted
	if err != nil || orphan {
		s.closeLocked()
		s.forgetLocked()
	}
	co.mu.Unlock()
	switch {
	case orphan:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.cleanupTimeout)
		h.drop(rctx) // as an abort: the deletion goes on in the background if it must
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

// listedBy judges a listing of the node's member that showed the node
// (member.locate). The first tells whether it may take joiners. Any later
// one that shows a node behind it, or belongs to a new node (the
// acquisition queued again), stops it for good.
func (s *sharedRead) listedBy(m *member) {
	co := s.co
	co.mu.Lock()
	defer co.mu.Unlock()
	if s.node != m.path { // the first listing, or one of a new node
		s.forgetLocked()
		s.node = m.path
		if s.waiting > 0 {
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

// judgedLocked closes listed, once.
func (s *sharedRead) judgedLocked() {
	if !s.verdict {
		s.verdict = true
		close(s.listed)
	}
}

// forgetLocked takes the node out of co.live: no reader is left.
func (s *sharedRead) forgetLocked() {
	if s.node != "" && s.co.live[s.node] == s {
		delete(s.co.live, s.node)
	}
}

// closeLocked stops the node taking joiners.
func (s *sharedRead) closeLocked() {
	s.open = false
	if s.co.cur == s {
		s.co.cur = nil
	}
}

// refresh brings what the node knows up to date, outside co.mu: the watch
// takes an event go-zookeeper has read already, and the lease clock judges
// the hold (either may end the hold, whose hooks must not run under
// co.mu).
func (s *sharedRead) refresh() {
	s.co.mu.Lock()
	dir, h := s.dir, s.hold
	s.co.mu.Unlock()
	if dir != nil {
		dir.FiredNow()
	}
	if h != nil {
		h.judge()
	}
}

// joinableLocked is the rule (see the fairness argument), once the first
// listing is judged.
func (s *sharedRead) joinableLocked() bool {
	if !s.open || s.dir == nil || s.err != nil {
		return false
	}
	select {
	case <-s.dir.Fired():
		s.closeLocked()
		return false
	default:
	}
	if s.hold != nil && (!s.hold.held() || s.hold.isReleasing()) || !s.connected() {
		s.closeLocked() // lost or going: never joined; or see connected
		return false
	}
	return true
}

// connected reports whether the connection is still the one that made
// the node's create and listing. The watch's event comes before any later
// answer only on one connection: after a reconnection, go-zookeeper sets
// its watches again with a request that answers sent earlier may overtake,
// and the server tells of the changes missed meanwhile only then. A
// connection made by Dial counts its connections, so a node takes no
// joiner after a reconnection; on any other, a node takes none while the
// connection is down, but a reader that arrives right after a
// reconnection, before the missed events, may join.
func (s *sharedRead) connected() bool {
	if n, counted := s.a.c.ConnectCount(); counted {
		return s.counted && n == s.connects
	}
	return s.a.c.Conn().State() == zk.StateHasSession
}

// admits reports whether a reader that came before the first listing's
// verdict may stay.
func (s *sharedRead) admits() bool {
	s.refresh()
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return s.joinableLocked()
}

// leave takes a waiting reader away: its context ended (cancelled), or it
// may not join (to make a node of its own). The last reader to leave
// before the grant cancels the acquisition, whose node goes as any
// cancelled acquisition's; a cancelled reader then waits for that, as a
// cancelled RLock leaves no node behind. After the grant, the reader
// releases the grant made for it. It returns ctx's error for a cancelled
// reader.
func (s *sharedRead) leave(ctx context.Context, cancelled bool) error {
	co := s.co
	co.mu.Lock()
	s.waiting--
	finished := s.finished
	var mine *Grant
	if finished && len(s.grants) > 0 {
		mine, s.grants = s.grants[len(s.grants)-1], s.grants[:len(s.grants)-1]
	}
	last := !finished && s.waiting == 0
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
	case mine != nil:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.cleanupTimeout)
		defer cancel()
		if rerr := mine.Release(rctx); rerr != nil && err != nil {
			err = fmt.Errorf("%w (and: %w)", err, rerr)
		}
	}
	return err
}

// take turns a waiting reader into the holder of a grant on the node, once
// the acquisition ended: the grant made for it at the grant, or, for a
// reader that joined the node held, a new one. again reports a node that
// is going as the reader came: it makes a node of its own.
func (s *sharedRead) take() (g *Grant, again bool, err error) {
	co := s.co
	co.mu.Lock()
	s.waiting--
	if s.err != nil {
		co.mu.Unlock()
		return nil, false, s.err
	}
	if n := len(s.grants); n > 0 {
		g, s.grants = s.grants[n-1], s.grants[:n-1]
	}
	h := s.hold
	co.mu.Unlock()
	if g == nil {
		var ok bool
		if g, ok = h.join(); !ok {
			if err := h.ended(); err != nil && !errors.Is(err, ErrReleased) {
				return nil, false, err // lost
			}
			co.mu.Lock()
			s.closeLocked() // going: the next reader makes a node of its own
			co.mu.Unlock()
			return nil, true, nil
		}
	}
	if err := g.Err(); err != nil {
		// The node was lost before this reader took it: no grant for a
		// node that may no longer exist.
		return nil, false, err
	}
	return g, false, nil
}
