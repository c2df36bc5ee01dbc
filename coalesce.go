package rwlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// WithReadCoalescing makes the blocking shared acquisitions of this RWLock
// (RLock, WithRead, ReadGroup, ReadBatch; not TryRLock) that run at the
// same time share one read node, as long as that keeps the queue's order:
// 64 goroutines reading at once make one node instead of 64 (BENCHMARKS.md,
// W7, has what a burst costs).
//
// A reader joins the shared node, waiting or held, only while nothing has
// queued behind that node since its listing, as a sync sent after the
// reader arrived proves (one sync for all the readers that arrive
// together); otherwise it makes a new node, which later readers may join.
// So, on a standalone server, a writer that queued behind a shared node
// never waits for a reader that arrived after the writer's node was
// created, even if this process has not heard of that node yet. In an
// ensemble the same holds, with two exceptions, both on a leader: a reader
// whose session is on the leader may pass a writer's node that the leader
// had committed but not yet applied when the reader's sync reached it (a
// follower may have told the writer of its node already); and a reader
// answered by a deposed leader, before it sees it has lost its quorum, may
// pass a node the new leader created. While the sync goes unanswered (a
// silent cut) the reader waits: it gets the node's loss (ErrLost) if the
// node is lost meanwhile, or makes a node of its own once the connection
// fails. docs/guarantees.md tells what a connection not made by Dial adds.
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

// The fairness argument. A shared node N takes a reader that did not make
// it (a joiner) only if
//
//	(1) the listing of N's acquisition that first showed N showed no lock
//	    node after N, and set a child watch on the directory; and
//	(2) a sync sent after the joiner arrived was answered in N's session,
//	    on the connection that set the watch (see connected), and the
//	    watch had not fired when the answer came (Watch.FiredNow, read
//	    after it).
//
// Every node created behind N after that listing fires the watch: a child
// watch fires on any change of the directory's children. The server sends
// a session's notifications before any later answer on one connection.
// go-zookeeper puts each notification in its channel before it reads the
// next packet. So if the watch has not fired when the sync's answer is in,
// the server that answered had applied no node behind N.
//
// The sync makes that server at least as new as the joiner's arrival. A
// standalone server runs its requests in the order they come: a node
// created before the sync came is applied before the sync is answered. In
// an ensemble, a follower passes the sync to the leader, and answers it
// once it has applied every change the leader had committed by then, so
// every node created before the joiner arrived. A plain read would not do:
// a follower that lags answers it from an older state. So a writer W that
// queued behind N never waits for a reader that arrived after W's node,
// whether or not this process had heard of W by then (a silent cut holds
// notifications back for up to 2T/3).
//
// Two cases escape in an ensemble, both on a leader. A sync sent to the
// leader itself is run as a plain read (ZooKeeper's CommitProcessor, with
// matchSyncs false in LeaderZooKeeperServer): it may be answered before
// the leader applies a change it has committed. A follower may have
// applied that create, and told its writer, already. So a joiner whose
// session is on the leader may pass a node for as long as the leader takes
// to apply it. And a sync is no quorum operation: a deposed leader answers
// it as a read until it sees it has lost its quorum, as lease.go counts. A
// joiner answered by it may pass a node that the new leader created
// meanwhile.
//
// N's maker needs no sync: N was created after it arrived, and every node
// behind N was created after N. A reader that arrives before N's first
// listing is judged needs one all the same: that listing may come from a
// follower that lags.
//
// One sync serves every joiner that arrived before it was sent. A joiner
// that arrives while one is under way waits for the next, sent when that
// one's answer is in. The first is sent once the first listing is judged,
// so the readers that arrive as N is made share it: a burst costs N's
// create, its listing, one sync and N's deletion.
//
// A joiner waits for its sync. If its context ends, it leaves. If N is lost
// meanwhile (its lease runs out while a silent cut holds the answer back,
// say), the joiner gets N's loss. If the sync fails or proves nothing (the
// connection changed, the watch fired), the joiner makes a node of its own.
//
// A reader that joins N is behind whatever N is behind, exactly as a node
// of its own made at that moment would be, and ahead of nothing that
// queued before it. Once the watch has fired, or a later listing shows a
// node after N, or N's acquisition was queued again, N takes no more
// joiners, for good: a change that is not a node behind N (a deletion that
// clears N's way, a foreign child) closes it too, which costs a node, never
// fairness. A node that was lost, released or never granted takes nobody.
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
	defer co.mu.Unlock()
	if s := co.live[path]; s != nil {
		return s.waiting + s.holding
	}
	return 0
}

// sharedRead is one shared read node: the acquisition that makes it, run
// with a context of its own, and then its grant (the root grant, which
// owns the node and is never handed to a caller: each reader gets a grant
// nested in it).
type sharedRead struct {
	co     *coalescer
	l      *RWLock
	a      *acquisition
	cancel context.CancelFunc
	done   chan struct{} // closed when the acquisition ended: root or err is set

	connects uint64 // the connection's count of connections before the node's create
	counted  bool   // the connection counts them (one made by Dial)

	// guarded by co.mu
	node     string          // its full path, once listed
	session  int64           // the session that owns it, once listed
	verdict  bool            // its first listing is judged, or the acquisition ended
	dir      *zkclient.Watch // the child watch of the listing that first showed the node
	open     bool            // joiners are admitted (see the fairness argument)
	next     *joinSync       // the sync that joiners arriving now wait for, not sent yet; nil for none
	syncing  bool            // a sync is under way
	finished bool            // the acquisition ended
	root     *Grant          // its grant
	err      error           // or why it failed
	waiting  int             // readers waiting for the grant
	holding  int             // readers holding a grant nested in root
}

// joinSync is one sync for the joiners that arrived before it was sent
// (see the fairness argument).
type joinSync struct {
	done     chan struct{} // closed when it is answered, or will never be sent
	ok       bool          // answered, in the node's session; guarded by co.mu
	requests atomic.Int64  // its requests, for the first joiner's event
}

// readShared is RLock (and WithRead, ReadGroup, ReadBatch) on a lock with
// WithReadCoalescing: one acquisition of the caller, with its own event.
func (l *RWLock) readShared(ctx context.Context, w want) (*Grant, error) {
	start := time.Now()
	l.starting(ctx, w, start)
	g, a, syncs, err := l.coalesce.read(ctx, l)
	if a == nil {
		a = &acquisition{l: l, want: w} // a joiner's event: only the syncs it opened
	}
	a.requests.Add(syncs)
	l.acquired(ctx, a, start, err)
	if err != nil {
		return nil, errorf("rwlock: %s %s: %w", verb(w), l.path, err)
	}
	return g, nil
}

// read returns a grant nested in a shared node, joined or made. a is the
// node's acquisition if this caller made it and the acquisition ended
// (for the caller's event), else nil. syncs counts the requests of the
// syncs that this caller was the first to wait for, which it reports.
func (co *coalescer) read(ctx context.Context, l *RWLock) (g *Grant, a *acquisition, syncs int64, err error) {
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
		s, sy, first := co.enter(ctx, l)
		made := sy == nil
		if first {
			opened = append(opened, sy)
		}
		if !made {
			lost, err := s.await(ctx, sy)
			switch {
			case err != nil:
				return nil, nil, 0, s.leave(ctx, true)
			case lost != nil:
				s.leave(ctx, false)
				return nil, nil, 0, lost
			case !s.admits(sy):
				s.leave(ctx, false) // not proven fair to join: a node of our own
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
			return nil, nil, 0, s.leave(ctx, true)
		}
		if made {
			a = s.a
		}
		g, err := s.take()
		return g, a, 0, err
	}
}

// enter joins the current node if it may take joiners (or its first
// listing is not judged yet), and returns the sync the joiner waits for,
// and whether it is the first to wait for it; otherwise it makes a new
// node, and returns no sync.
func (co *coalescer) enter(ctx context.Context, l *RWLock) (s *sharedRead, sy *joinSync, first bool) {
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
		sy, first = s.nextSyncLocked()
		return s, sy, first
	}
	s = &sharedRead{
		co: co, l: l, waiting: 1, done: make(chan struct{}),
		a: &acquisition{l: l, c: zkclient.For(l.conn), want: want{mode: Read, block: true}, guid: lockname.NewGUID()},
	}
	s.a.share = s
	s.connects, s.counted = s.a.c.ConnectCount()
	co.cur = s
	var sctx context.Context
	sctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.background.Add(1)
	go s.run(sctx)
	return s, nil, false
}

// run is the node's acquisition, on a goroutine of its own.
func (s *sharedRead) run(ctx context.Context) {
	defer s.l.background.Done()
	defer s.cancel()
	a := s.a
	g, err := a.run(a.counting(ctx))
	if err != nil {
		a.c.Unref()
	}
	co := s.co
	co.mu.Lock()
	s.finished, s.root, s.err = true, g, err
	orphan := g != nil && s.waiting+s.holding == 0 // every reader left as it was granted
	if err != nil || orphan {
		s.closeLocked()
		s.forgetLocked()
	}
	s.judgedLocked()
	co.mu.Unlock()
	if orphan {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.cleanupTimeout)
		g.Release(rctx) // as an abort: the deletion goes on in the background if it must
		cancel()
	}
	close(s.done)
}

// listedBy judges a listing of the node's acquisition that showed the node
// (acquisition.locate): the first tells whether it may take joiners; any
// later one that shows a node behind it, or belongs to a new node (the
// acquisition queued again), stops it for good.
func (s *sharedRead) listedBy(a *acquisition) {
	co := s.co
	co.mu.Lock()
	defer co.mu.Unlock()
	if s.node != a.path { // the first listing, or one of a new node
		s.forgetLocked()
		s.node, s.session = a.path, a.session
		if s.waiting+s.holding > 0 {
			co.live[s.node] = s
		}
	}
	switch {
	case !s.verdict:
		s.dir, s.open = a.dir, a.dir != nil && !a.snap.after && s.connected()
		s.judgedLocked()
	case a.dir != s.dir || a.snap.after:
		s.open = false
	}
	if !s.open {
		s.closeLocked()
	}
}

// judgedLocked records the first listing's verdict (or the end of the
// acquisition): the joiners' first sync may go.
func (s *sharedRead) judgedLocked() {
	s.verdict = true
	s.sendSyncLocked()
}

// nextSyncLocked returns the sync for a joiner arriving now: the next one,
// sent after this moment, and whether the joiner is the first to wait for
// it. It goes at once if it may.
func (s *sharedRead) nextSyncLocked() (sy *joinSync, first bool) {
	if s.next == nil {
		s.next, first = &joinSync{done: make(chan struct{})}, true
	}
	sy = s.next
	s.sendSyncLocked()
	return sy, first
}

// sendSyncLocked sends the next sync, if joiners wait for it, the first
// listing is judged, and no other sync is under way (whose answer sends
// it). A node that takes no joiners sends none, nor one that a sync could
// not serve: it closes, and its joiners make nodes of their own.
func (s *sharedRead) sendSyncLocked() {
	if s.next == nil || !s.verdict || s.syncing {
		return
	}
	// A sync sent while the connection is down waits in go-zookeeper's
	// queue, and goes out ahead of the watches set again: see connected.
	if !s.open || !s.connected() || !s.a.c.RefIfLive() { // RefIfLive: the Client went with the node
		s.closeLocked()
		return
	}
	sy := s.next
	s.next, s.syncing = nil, true
	s.l.background.Add(1)
	go s.sync(sy)
}

// sync sends sy and records its answer; the next sync follows it.
func (s *sharedRead) sync(sy *joinSync) {
	defer s.l.background.Done()
	defer s.a.c.Unref()
	// mutant: joiner-without-sync
	r := s.a.c.Sync(&tally{Context: context.Background(), n: &sy.requests})
	co := s.co
	co.mu.Lock()
	defer co.mu.Unlock()
	s.syncing = false
	// mutant: joiner-sync-any-session
	sy.ok = r.Err == nil && r.Session == s.session
	if !sy.ok {
		s.closeLocked() // the connection failed, or the session changed: a node costs less than a doubt
	}
	close(sy.done)
	// The joiners that arrived while sy was under way wait for the next
	// sync: sy may have reached the server before a node behind N did.
	// mutant: joiner-on-an-earlier-sync
	s.sendSyncLocked()
}

// forgetLocked takes the node out of co.live: no reader is left.
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

// refresh brings what the node knows up to date, outside co.mu: the watch
// takes an event go-zookeeper has read already, and the lease clock judges
// the root grant (either may end the root, whose hooks must not run under
// co.mu).
func (s *sharedRead) refresh() {
	s.co.mu.Lock()
	dir, root := s.dir, s.root
	s.co.mu.Unlock()
	if dir != nil {
		dir.FiredNow()
	}
	if root != nil {
		root.judge()
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
	if s.root != nil && s.root.ctx.Err() != nil || !s.connected() {
		s.closeLocked() // lost: never joined; or see connected
		return false
	}
	return true
}

// connected reports whether the connection is still the one that made
// the node's create and listing. The watch's event comes before any later
// answer only on one connection: after a reconnection, go-zookeeper sets
// its watches again with a request that requests queued earlier overtake,
// and the server tells of the changes missed meanwhile only then. A
// connection made by Dial counts its connections, so a node takes no
// joiner after a reconnection. On any other, a node takes none while the
// connection is down; but a joiner whose sync was queued in the instant
// the connection went, or as it came back, may be answered before the
// missed events, and join.
func (s *sharedRead) connected() bool {
	if n, counted := s.a.c.ConnectCount(); counted {
		return s.counted && n == s.connects
	}
	// mutant: joiner-connect-state
	return s.a.c.Conn().State() == zk.StateHasSession
}

// await waits for sy, a joiner's sync. It returns the node's loss if the
// node was lost first, or ctx's error if ctx ended first.
func (s *sharedRead) await(ctx context.Context, sy *joinSync) (lost, err error) {
	for {
		co := s.co
		co.mu.Lock()
		finished, root, failed := s.finished, s.root, s.err
		co.mu.Unlock()
		ended, gone := s.done, (<-chan struct{})(nil)
		switch {
		case failed != nil:
			return failed, nil
		case finished:
			ended = nil
			gone = root.ctx.Done() // closed by the lease clock, among others
		}
		select {
		case <-sy.done:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ended:
		case <-gone:
			return context.Cause(root.ctx), nil
		}
	}
}

// admits reports whether a joiner whose sync sy is answered may stay (see
// the fairness argument).
func (s *sharedRead) admits(sy *joinSync) bool {
	s.refresh() // after the answer: FiredNow sees any event that came before it
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return sy.ok && s.joinableLocked()
}

// leave takes a waiting reader away: its context ended (cancelled), or
// it may not join (to make a node of its own). The last reader to leave
// before the grant cancels the acquisition, whose node goes as any
// cancelled acquisition's; a cancelled reader then waits for that, as a
// cancelled RLock leaves no node behind. After the grant, the last reader
// releases the root. It returns ctx's error for a cancelled reader.
func (s *sharedRead) leave(ctx context.Context, cancelled bool) error {
	co := s.co
	co.mu.Lock()
	s.waiting--
	last := s.waiting+s.holding == 0
	finished, root := s.finished, s.root
	if last {
		s.closeLocked()
		s.forgetLocked()
		if !finished {
			s.cancel()
		}
	}
	co.mu.Unlock()
	var err error
	if cancelled {
		err = ctx.Err()
	}
	switch {
	case !last:
	case !finished:
		if cancelled {
			<-s.done // the node is deleted, or its deletion handed to the background
		}
	case root != nil:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.l.cleanupTimeout)
		defer cancel()
		if rerr := root.Release(rctx); rerr != nil && err != nil {
			err = fmt.Errorf("%w (and: %w)", err, rerr)
		}
	}
	return err
}

// take turns a waiting reader into a holder of a grant nested in the
// node's grant, once the acquisition ended.
func (s *sharedRead) take() (*Grant, error) {
	co := s.co
	co.mu.Lock()
	if s.err != nil {
		s.waiting--
		err := s.err
		co.mu.Unlock()
		return nil, err
	}
	s.waiting--
	s.holding++
	root := s.root
	co.mu.Unlock()
	g := nestIn(root, Read)
	g.share = s
	if g.ctx.Err() != nil {
		// The node was lost before this reader took it: no grant for a
		// node that may no longer exist.
		cause := context.Cause(g.ctx)
		s.drop(context.Background())
		g.released = true
		return nil, cause
	}
	return g, nil
}

// drop ends one reader's hold (Release of its grant); the last one's
// releases the node's grant. If the server refuses that deletion, the
// reader still holds, and may release again.
func (s *sharedRead) drop(ctx context.Context) error {
	co := s.co
	co.mu.Lock()
	s.holding--
	last := s.waiting+s.holding == 0
	root := s.root
	if last {
		s.closeLocked()
		s.forgetLocked()
	}
	co.mu.Unlock()
	if !last {
		return nil
	}
	if err := root.Release(ctx); err != nil {
		if root.Err() == nil { // still held: by this reader, who may release again
			co.mu.Lock()
			s.holding++
			if s.node != "" {
				co.live[s.node] = s
			}
			co.mu.Unlock()
		}
		return err
	}
	return nil
}
