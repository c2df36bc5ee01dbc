package rwlock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The fairness argument. A joiner is a reader that did not make the shared
// node N. N takes a joiner only if both of these hold.
//
//	(1) the listing of N's acquisition that first showed N showed no lock
//	    node after N, and set a child watch on the directory; and
//	(2) a sync sent after the joiner arrived was answered in N's session,
//	    on the connection that set the watch (see connected), and the
//	    watch had not fired when the answer came (Watch.FiredNow, read
//	    after it).
//
// Every node created behind N after that listing fires the watch, since a
// child watch fires on any change of the directory's children. On one
// connection, the server sends a session's notifications before any later
// answer. go-zookeeper puts each notification in its channel before it
// reads the next packet. So if the watch has not fired when the sync's
// answer is in, the server that answered had applied no node behind N.
//
// The sync makes that server at least as new as the joiner's arrival. A
// standalone server runs its requests in the order they come. So a node
// created before the sync came is applied before the sync is answered. In
// an ensemble, a follower passes the sync to the leader. It answers the
// sync once it has applied every change the leader had committed by then.
// That includes every node created before the joiner arrived. A plain read
// would not do, since a follower that lags answers it from an older state.
// So a writer W that queued behind N never waits for a reader that arrived
// after W's node. This holds whether or not this process had heard of W by
// then. A silent cut holds notifications back for a while (the figure is in
// docs/guarantees.md, "Coalesced reads keep FIFO").
//
// Two cases escape in an ensemble, both on a leader. A sync sent to the
// leader itself is run as a plain read. ZooKeeper's CommitProcessor does
// that, with matchSyncs false in LeaderZooKeeperServer. Such a sync may be
// answered before the leader applies a change it has committed. A follower
// may have applied that create, and told its writer, already. So a joiner
// whose session is on the leader may pass a node for as long as the leader
// takes to apply it. And a sync is no quorum operation. A deposed leader
// answers it as a read until it sees it has lost its quorum, as lease.go
// counts. A joiner answered by it may pass a node that the new leader
// created meanwhile.
//
// N's maker needs no sync. N was created after it arrived, and every node
// behind N was created after N. A reader that arrives before N's first
// listing is judged needs one all the same. That listing may come from a
// follower that lags.
//
// One sync serves every joiner that arrived before it was sent. A joiner
// that arrives while one is under way waits for the next. The next is sent
// when the answer of the one under way is in. The first is sent once the
// first listing is judged. So the readers that arrive as N is made share
// it. A burst costs N's create, its listing, one sync and N's deletion.
//
// A joiner waits for its sync. If its context ends, it leaves. N may be
// lost meanwhile, say when its lease runs out while a silent cut holds the
// answer back. The joiner then gets N's loss. The sync may fail, or prove
// nothing because the connection changed or the watch fired. The joiner
// then makes a node of its own.
//
// A reader that joins N is behind whatever N is behind, exactly as a node
// of its own made at that moment would be. It is ahead of nothing that
// queued before it. N takes no more joiners, for good, once the watch has
// fired, or a later listing shows a node after N, or N's acquisition was
// queued again. A change that is not a node behind N closes it too, such as
// a deletion that clears N's way or a foreign child. That costs a node,
// never fairness. A node that was lost, released or never granted takes
// nobody.
//
// Holding on. A node with joiners lives while any of them holds it. It
// takes joiners only while nothing has queued behind it. So once a writer
// queues, the readers of N are a fixed set, and N goes when the last of
// them releases. A stream of readers cannot starve the writer.

// joinSync is one sync for the joiners that arrived before it was sent
// (see the fairness argument).
type joinSync struct {
	done     chan struct{}    // closed when it is answered, or will never be sent
	ok       bool             // answered, in the node's session; guarded by co.mu
	requests zkclient.Counter // its requests, for the first joiner's event
}

// judgedLocked records the first listing's verdict, or the end of the
// acquisition. The joiners' first sync may then go.
func (s *sharedRead) judgedLocked() {
	s.verdict = true
	s.sendSyncLocked()
}

// nextSyncLocked returns the sync for a joiner arriving now. That is the
// next one, sent after this moment. first reports whether the joiner is the
// first to wait for it. The sync goes at once if it may.
func (s *sharedRead) nextSyncLocked() (sy *joinSync, first bool) {
	if s.next == nil {
		s.next, first = &joinSync{done: make(chan struct{})}, true
	}
	sy = s.next
	s.sendSyncLocked()
	return sy, first
}

// sendSyncLocked sends the next sync if joiners wait for it, the first
// listing is judged, and no other sync is under way. A sync under way sends
// the next one when its answer comes. A node that takes no joiners sends
// none. Nor does a node that a sync could not serve. It closes, and its
// joiners make nodes of their own.
func (s *sharedRead) sendSyncLocked() {
	if s.next == nil || !s.verdict || s.syncing {
		return
	}
	// A sync sent while the connection is down waits in go-zookeeper's
	// queue, and goes out ahead of the watches set again (see connected).
	if !s.open || !s.connected() || !s.a.c.RefIfLive() { // RefIfLive fails if the Client went with the node
		s.closeLocked()
		return
	}
	sy := s.next
	s.next, s.syncing = nil, true
	s.l.background.Add(1)
	go s.sync(sy)
}

// sync sends sy and records its answer. The next sync follows it.
func (s *sharedRead) sync(sy *joinSync) {
	defer s.l.background.Done()
	defer s.a.c.Unref()
	// mutant: joiner-without-sync
	r := s.a.c.Sync(zkclient.WithCounter(context.Background(), &sy.requests))
	co := s.co
	co.mu.Lock()
	defer co.mu.Unlock()
	s.syncing = false
	// mutant: joiner-sync-any-session
	sy.ok = r.Err == nil && r.Session == s.session
	if !sy.ok {
		s.closeLocked() // the connection failed, or the session changed; a node costs less than a doubt
	}
	close(sy.done)
	// The joiners that arrived while sy was under way wait for the next
	// sync. For sy may have reached the server before a node behind N did.
	// mutant: joiner-on-an-earlier-sync
	s.sendSyncLocked()
}

// await waits for sy, a joiner's sync. It returns the node's loss if the
// node was lost first, or ctx's error if ctx ended first.
func (s *sharedRead) await(ctx context.Context, sy *joinSync) (lost, err error) {
	for {
		co := s.co
		co.mu.Lock()
		finished, h, failed := s.finished, s.hold, s.err
		co.mu.Unlock()
		ended, gone := s.done, (<-chan struct{})(nil)
		switch {
		case failed != nil:
			return failed, nil
		case finished:
			ended = nil
			gone = h.ctx.Done() // closed by the lease clock, among others
		}
		select {
		case <-sy.done:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ended:
		case <-gone:
			if err := h.ended(); !errors.Is(err, ErrReleased) {
				return err, nil
			}
			return nil, nil // released by its last reader as this one came, so admits says no
		}
	}
}

// admits reports whether a joiner whose sync sy is answered may stay (see
// the fairness argument).
func (s *sharedRead) admits(sy *joinSync) bool {
	s.refresh() // after the answer, so FiredNow sees any event that came before it
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return sy.ok && s.joinableLocked()
}

// refresh brings what the node knows up to date, outside co.mu. The watch
// takes an event go-zookeeper has read already, and the lease clock judges
// the hold. Either may end the hold, whose hooks must not run under co.mu.
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
		s.closeLocked() // lost or going, so never joined; or see connected
		return false
	}
	return true
}

// connected reports whether the connection is still the one that made the
// node's create and listing. The watch's event comes before any later
// answer only on one connection (see own.go). After a reconnection,
// go-zookeeper sets its watches again with a request that requests queued
// earlier overtake. The server tells of the changes missed meanwhile only
// then. A connection made by Dial counts its sessions, so a node takes
// no joiner after a reconnection. On any other, a node takes none while the
// connection is down. But a joiner whose sync was queued in the instant the
// connection went, or as it came back, may be answered before the missed
// events, and join.
func (s *sharedRead) connected() bool {
	if n, counted := s.a.c.ConnectCount(); counted {
		return s.counted && n == s.connects
	}
	// mutant: joiner-connect-state
	return s.a.c.Conn().State() == zk.StateHasSession
}
