// Package stats adds up what locks do: a [Recorder] is an
// [rwlock.Observer] that counts the acquisitions and grants of the locks
// it observes, and [Recorder.Stats] reads the figures at any time.
//
//	var rec stats.Recorder
//	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithObserver(&rec))
//	...
//	s := rec.Stats()
//	log.Printf("%d reads, p99 wait %v, %d lost", s.Read.Granted, s.Read.Wait.Quantile(0.99), s.Lost.Total())
//
// Recording costs a few atomic adds, a short critical section for what is
// under way, and no allocation once its tables have grown; the package
// rwlocktest reports the figures from a benchmark.
package stats

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkrwlock/rwlock"
)

// A Recorder adds up the events of the locks that it observes: give it to
// one lock, or to several to count them together. For the figures of each
// lock, give each its own Recorder ([Stats.Add] sums them). The zero value
// is ready to use; a Recorder must not be copied after first use.
//
// It is an [rwlock.StartObserver]: it knows the waits in progress and the
// grants held (see [ModeStats.Waiting]).
type Recorder struct {
	modes    [2]modeRecord // Read, Write
	lost     lostRecord
	election electionRecord
	requests atomic.Uint64
	now      live
}

// live is what is under way: the waits and the grants begun and not yet
// ended. An end is counted only if its start was, so an Observer that
// wraps a Recorder and passes on only the ends leaves these figures at 0
// rather than below it.
type live struct {
	mu     sync.Mutex
	waits  map[wait]int           // by start; starts of one lock and mode may coincide
	grants map[string]rwlock.Mode // by node
	terms  map[string]bool        // the grants that are leaderships, by node
}

type wait struct {
	lock  string
	mode  rwlock.Mode
	start time.Time // the event's own value, so == matches it
}

func (n *live) begin(w wait) {
	n.mu.Lock()
	if n.waits == nil {
		n.waits = map[wait]int{}
	}
	n.waits[w]++
	n.mu.Unlock()
}

func (n *live) end(w wait) {
	n.mu.Lock()
	switch c := n.waits[w]; c {
	case 0:
	case 1:
		delete(n.waits, w)
	default:
		n.waits[w] = c - 1
	}
	n.mu.Unlock()
}

func (n *live) hold(node string, m rwlock.Mode, term bool) {
	n.mu.Lock()
	if n.grants == nil {
		n.grants, n.terms = map[string]rwlock.Mode{}, map[string]bool{}
	}
	n.grants[node] = m
	if term {
		n.terms[node] = true
	}
	n.mu.Unlock()
}

func (n *live) release(node string) {
	n.mu.Lock()
	delete(n.grants, node)
	delete(n.terms, node)
	n.mu.Unlock()
}

// read fills in s's figures of what is under way.
func (n *live) read(s *Stats) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var oldest time.Time
	for w, c := range n.waits {
		s.mode(w.mode).Waiting += uint64(c)
		if oldest.IsZero() || w.start.Before(oldest) {
			oldest = w.start
		}
	}
	for _, m := range n.grants {
		s.mode(m).Held++
	}
	s.Election.Leading = uint64(len(n.terms))
	if !oldest.IsZero() {
		s.OldestWait = time.Since(oldest)
	}
}

type modeRecord struct {
	granted, wouldBlock, cancelled, failed, oneRoundTrip, relists atomic.Uint64

	wait, hold histogram
}

type electionRecord struct {
	campaigns, terms, lost atomic.Uint64
}

type lostRecord struct {
	nodeDeleted, sessionExpired, leaseLapsed, disconnected, holdLimit, other atomic.Uint64
}

func (r *Recorder) mode(m rwlock.Mode) *modeRecord {
	if m == rwlock.Read {
		return &r.modes[0]
	}
	return &r.modes[1]
}

// ObserveAcquireStart counts an acquisition as waiting, until its
// ObserveAcquire.
func (r *Recorder) ObserveAcquireStart(_ context.Context, e rwlock.AcquireEvent) {
	r.now.begin(wait{lock: e.Lock, mode: e.Mode, start: e.Start})
}

// ObserveGrantStart counts a grant as held, until its ObserveGrant.
func (r *Recorder) ObserveGrantStart(e rwlock.GrantEvent) { r.now.hold(e.Node, e.Mode, e.Term) }

// ObserveAcquire counts an acquisition: its outcome, its requests, its
// relists and, if granted, its wait.
func (r *Recorder) ObserveAcquire(_ context.Context, e rwlock.AcquireEvent) {
	r.now.end(wait{lock: e.Lock, mode: e.Mode, start: e.Start})
	m := r.mode(e.Mode)
	r.requests.Add(uint64(e.Requests))
	m.relists.Add(uint64(e.Relists))
	if e.Campaign {
		r.election.campaigns.Add(1)
		if e.Outcome == "granted" {
			r.election.terms.Add(1)
		}
	}
	switch e.Outcome {
	case "granted":
		m.granted.Add(1)
		m.wait.record(e.Wait)
		if e.OneRoundTrip {
			m.oneRoundTrip.Add(1)
		}
	case "would_block":
		m.wouldBlock.Add(1)
	case "cancelled":
		m.cancelled.Add(1)
	default:
		m.failed.Add(1)
	}
}

// ObserveGrant counts the end of a grant: its hold, its requests and, if
// it was lost, its cause.
func (r *Recorder) ObserveGrant(e rwlock.GrantEvent) {
	r.now.release(e.Node)
	r.mode(e.Mode).hold.record(e.Hold)
	r.requests.Add(uint64(e.Requests))
	if e.Term && e.Loss != "" {
		r.election.lost.Add(1)
	}
	switch e.Loss {
	case "":
	case "node_deleted":
		r.lost.nodeDeleted.Add(1)
	case "session_expired":
		r.lost.sessionExpired.Add(1)
	case "lease_lapsed":
		r.lost.leaseLapsed.Add(1)
	case "disconnected":
		r.lost.disconnected.Add(1)
	case "hold_limit":
		r.lost.holdLimit.Add(1)
	default:
		r.lost.other.Add(1)
	}
}

// Stats returns a snapshot of the figures. It is cheap enough to call at
// any time, and safe to call concurrently with everything else; the
// figures are read one at a time, so a snapshot taken while locks are
// busy may count an event in some figures and not yet in others.
func (r *Recorder) Stats() Stats {
	var s Stats
	for i, m := range []*ModeStats{&s.Read, &s.Write} {
		rec := &r.modes[i]
		m.Granted, m.WouldBlock = rec.granted.Load(), rec.wouldBlock.Load()
		m.Cancelled, m.Failed = rec.cancelled.Load(), rec.failed.Load()
		m.OneRoundTrip, m.Relists = rec.oneRoundTrip.Load(), rec.relists.Load()
		m.Wait, m.Hold = rec.wait.snapshot(), rec.hold.snapshot()
	}
	s.Lost = LostStats{
		NodeDeleted: r.lost.nodeDeleted.Load(), SessionExpired: r.lost.sessionExpired.Load(),
		LeaseLapsed: r.lost.leaseLapsed.Load(), Disconnected: r.lost.disconnected.Load(),
		HoldLimit: r.lost.holdLimit.Load(), Other: r.lost.other.Load(),
	}
	s.Election = ElectionStats{
		Campaigns: r.election.campaigns.Load(), Terms: r.election.terms.Load(), Lost: r.election.lost.Load(),
	}
	s.Requests = r.requests.Load()
	r.now.read(&s)
	return s
}

func (s *Stats) mode(m rwlock.Mode) *ModeStats {
	if m == rwlock.Read {
		return &s.Read
	}
	return &s.Write
}

// Stats are the figures of what the observed locks' acquisitions and
// grants did. They only grow, but for those of what is under way (Waiting,
// Held, OldestWait), so the figures of a stretch of time are the
// difference of two snapshots ([Stats.Sub]).
type Stats struct {
	Read, Write ModeStats
	Lost        LostStats
	// Election counts the Elections' campaigns and terms. They count in
	// Write too: a campaign is a write acquisition, a term a write grant.
	Election ElectionStats
	// OldestWait is the age of the oldest acquisition in progress; 0 when
	// none is.
	OldestWait time.Duration
	// Requests counts the requests the acquisitions and the ended grants
	// sent to ZooKeeper: creates, listings, reads and watches, releases,
	// Token's read, Downgrade's write, including those of failed and
	// cancelled acquisitions. A grant's are counted when it ends. Not
	// counted: the lease's keepalives (one per connection, whatever the
	// locks on it), Queue, and deletions that finish in the background
	// after a connection loss.
	Requests uint64
}

// ModeStats are the figures of one mode's acquisitions and grants.
type ModeStats struct {
	// The acquisitions (Lock or RLock, TryLock or TryRLock, and those of
	// WithRead, WithWrite, ReadGroup and ReadBatch) by outcome (see
	// rwlock.AcquireEvent.Outcome).
	Granted, WouldBlock, Cancelled, Failed uint64
	// OneRoundTrip counts the grants that the first listing of the
	// directory, sent right behind the create, proved without waiting for
	// anyone: the uncontended acquisitions.
	OneRoundTrip uint64
	// Relists counts the listings of the directory that the acquisitions
	// made after the one that first showed their node: listing again after
	// a wake (the node in the way went, and another may be left), a
	// reconnection, a lost answer, or a TryRLock's pass of a writer gone.
	// Each is a round trip between what let the acquisition go on and its
	// grant (or its end), so a handoff that needs none counts 0. Not
	// counted: the listing that first shows the node, which every
	// acquisition makes, also for a node made again after its session
	// ended. Failed and cancelled acquisitions' relists count too.
	Relists uint64
	// Wait is the time the granted acquisitions took, from the call to
	// the grant. (The time spent by the others is in the contention
	// profile and the events.)
	Wait Histogram
	// Hold is the time grants were held, from the grant to its release,
	// downgrade or loss.
	Hold Histogram
	// Waiting counts the acquisitions in progress; Held the grants held
	// now: grants of a node, so neither nested grants nor each of the
	// readers that share a node (see rwlock.StartObserver).
	Waiting, Held uint64
}

// Acquisitions returns the number of acquisitions, whatever their outcome.
func (m ModeStats) Acquisitions() uint64 { return m.Granted + m.WouldBlock + m.Cancelled + m.Failed }

// LostStats count the grants lost, by cause (see rwlock.GrantEvent.Loss).
type LostStats struct {
	NodeDeleted, SessionExpired, LeaseLapsed, Disconnected, HoldLimit, Other uint64
}

// Total returns the number of grants lost.
func (l LostStats) Total() uint64 {
	return l.NodeDeleted + l.SessionExpired + l.LeaseLapsed + l.Disconnected + l.HoldLimit + l.Other
}

// ElectionStats are the figures of the observed locks' Elections.
type ElectionStats struct {
	// Campaigns counts the Campaigns, whatever their outcome; Terms those
	// that led; Lost the terms that ended lost, not resigned (their causes
	// are in Stats.Lost, with every grant's).
	Campaigns, Terms, Lost uint64
	// Leading counts the terms held now.
	Leading uint64
}

// Acquisitions returns the number of acquisitions of both modes, whatever
// their outcome.
func (s Stats) Acquisitions() uint64 { return s.Read.Acquisitions() + s.Write.Acquisitions() }

// Granted returns the number of grants of both modes.
func (s Stats) Granted() uint64 { return s.Read.Granted + s.Write.Granted }

// Wait returns the wait histogram of both modes together.
func (s Stats) Wait() Histogram { return s.Read.Wait.Add(s.Write.Wait) }

// Add returns the figures of s and o together: of two Recorders, say. Of
// what is under way, it sums the counts and keeps the older wait.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Read:       s.Read.combine(o.Read, 1),
		Write:      s.Write.combine(o.Write, 1),
		Lost:       s.Lost.combine(o.Lost, 1),
		Election:   s.Election.combine(o.Election, 1),
		OldestWait: max(s.OldestWait, o.OldestWait),
		Requests:   s.Requests + o.Requests,
	}
}

// Sub returns the figures of what happened since o, an earlier snapshot of
// the same Recorder, and of what is under way at s.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		Read:       s.Read.combine(o.Read, -1),
		Write:      s.Write.combine(o.Write, -1),
		Lost:       s.Lost.combine(o.Lost, -1),
		Election:   s.Election.combine(o.Election, -1),
		OldestWait: s.OldestWait,
		Requests:   s.Requests - o.Requests,
	}
}

// combine adds (sign 1) or subtracts (sign -1) o; unsigned arithmetic
// wraps, so subtracting is adding the negation.
func (m ModeStats) combine(o ModeStats, sign int) ModeStats {
	f := func(a, b uint64) uint64 { return a + uint64(sign)*b }
	r := ModeStats{
		Granted: f(m.Granted, o.Granted), WouldBlock: f(m.WouldBlock, o.WouldBlock),
		Cancelled: f(m.Cancelled, o.Cancelled), Failed: f(m.Failed, o.Failed),
		OneRoundTrip: f(m.OneRoundTrip, o.OneRoundTrip), Relists: f(m.Relists, o.Relists),
		Waiting: m.Waiting, Held: m.Held, // under way at m
	}
	if sign > 0 {
		r.Waiting, r.Held = m.Waiting+o.Waiting, m.Held+o.Held
		r.Wait, r.Hold = m.Wait.Add(o.Wait), m.Hold.Add(o.Hold)
	} else {
		r.Wait, r.Hold = m.Wait.Sub(o.Wait), m.Hold.Sub(o.Hold)
	}
	return r
}

func (l LostStats) combine(o LostStats, sign int) LostStats {
	f := func(a, b uint64) uint64 { return a + uint64(sign)*b }
	return LostStats{
		NodeDeleted: f(l.NodeDeleted, o.NodeDeleted), SessionExpired: f(l.SessionExpired, o.SessionExpired),
		LeaseLapsed: f(l.LeaseLapsed, o.LeaseLapsed), Disconnected: f(l.Disconnected, o.Disconnected),
		HoldLimit: f(l.HoldLimit, o.HoldLimit), Other: f(l.Other, o.Other),
	}
}

func (e ElectionStats) combine(o ElectionStats, sign int) ElectionStats {
	f := func(a, b uint64) uint64 { return a + uint64(sign)*b }
	r := ElectionStats{Campaigns: f(e.Campaigns, o.Campaigns), Terms: f(e.Terms, o.Terms), Lost: f(e.Lost, o.Lost), Leading: e.Leading}
	if sign > 0 {
		r.Leading += o.Leading
	}
	return r
}
