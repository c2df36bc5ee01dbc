package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// Every lock keeps its own figures, always: counters and histograms of
// atomics, written where an acquisition returns (acquire.go), where a grant
// ends (Grant.end) and where a request is sent (request, through a tally).
// None of it allocates, so it costs an acquisition a few atomic adds and
// two readings of the clock, against round trips of hundreds of
// microseconds. Stats reads them; an Observer (observer.go) hears of each
// event, for exports that want them one by one (OpenTelemetry); the
// contention profile (contention.go) samples where the waits came from.

// An Outcome is how an acquisition ended.
type Outcome int

const (
	// OutcomeGranted: the call returned a grant.
	OutcomeGranted Outcome = iota
	// OutcomeWouldBlock: TryLock or TryRLock found the lock taken.
	OutcomeWouldBlock
	// OutcomeCancelled: the call's context ended first.
	OutcomeCancelled
	// OutcomeFailed: any other error (a closed connection, a refused
	// request, the node deleted while waiting, ...).
	OutcomeFailed
)

// String returns "granted", "would_block", "cancelled" or "failed", the
// names the exports use.
func (o Outcome) String() string {
	switch o {
	case OutcomeGranted:
		return "granted"
	case OutcomeWouldBlock:
		return "would_block"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeFailed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// outcomeOf classifies an acquisition's result.
func outcomeOf(ctx context.Context, err error) Outcome {
	switch {
	case err == nil:
		return OutcomeGranted
	case errors.Is(err, ErrWouldBlock):
		return OutcomeWouldBlock
	case ctx.Err() != nil:
		return OutcomeCancelled
	}
	return OutcomeFailed
}

// A LossCause says why a grant ended without Release.
type LossCause int

const (
	// NotLost: the grant was released, or downgraded.
	NotLost LossCause = iota
	// LostNodeDeleted: someone else deleted the grant's node.
	LostNodeDeleted
	// LostSessionExpired: the session expired (or was replaced).
	LostSessionExpired
	// LostLeaseLapsed: the lease clock ran out: the connection was silent
	// for too long for the session to be shown alive (see Grant.Done).
	LostLeaseLapsed
	// LostDisconnected: the connection dropped, and the lock does not
	// know the session timeout (a connection not made by Dial).
	LostDisconnected
	// LostOther: anything else, such as a closed connection or a
	// downgrade whose outcome is unknown.
	LostOther
	numLossCauses = iota - 1 // the causes of loss, NotLost aside
)

// String returns "none", "node_deleted", "session_expired",
// "lease_lapsed", "disconnected" or "other", the names the exports use.
func (c LossCause) String() string {
	switch c {
	case NotLost:
		return "none"
	case LostNodeDeleted:
		return "node_deleted"
	case LostSessionExpired:
		return "session_expired"
	case LostLeaseLapsed:
		return "lease_lapsed"
	case LostDisconnected:
		return "disconnected"
	case LostOther:
		return "other"
	}
	return fmt.Sprintf("LossCause(%d)", int(c))
}

// lossCauseOf classifies the cause a grant ended with.
func lossCauseOf(cause error) LossCause {
	switch {
	case !errors.Is(cause, ErrLost):
		return NotLost
	case errors.Is(cause, errNodeDeleted):
		return LostNodeDeleted
	case errors.Is(cause, zk.ErrSessionExpired):
		return LostSessionExpired
	case leaseLapsed(cause):
		return LostLeaseLapsed
	case errors.Is(cause, zkclient.ErrDisconnected):
		return LostDisconnected
	}
	return LostOther
}

// leaseLapsed reports whether err wraps an *zkclient.LeaseLapsedError. It is a
// function of its own because errors.As's target escapes to the heap:
// a release, which never gets this far, must not pay for it.
func leaseLapsed(err error) bool {
	var lapsed *zkclient.LeaseLapsedError
	return errors.As(err, &lapsed)
}

// Stats are a lock's figures since New: what its acquisitions and grants
// did. Read them with [RWLock.Stats]; they only grow, so the figures of
// a stretch of time are the difference of two snapshots ([Stats.Sub]).
// Nested grants (see [ContextWithGrant]) are not counted: they make no
// request and never wait.
type Stats struct {
	Read, Write ModeStats
	Lost        LostStats
	// Requests counts the requests the lock's acquisitions and grants sent
	// to ZooKeeper: creates, listings, reads and watches, releases,
	// Token's read, Downgrade's write, including those of failed and
	// cancelled acquisitions. Not counted: the lease's keepalives (one per
	// connection, whatever the locks on it), Queue, and deletions that
	// finish in the background after a connection loss.
	Requests uint64
}

// ModeStats are the figures of one mode's acquisitions and grants.
type ModeStats struct {
	// The acquisitions (Lock or RLock, TryLock or TryRLock, and those of
	// WithRead, WithWrite, ReadGroup and ReadBatch) by outcome.
	Granted, WouldBlock, Cancelled, Failed uint64
	// OneRoundTrip counts the grants that the first listing of the
	// directory proved, without waiting for anyone: the uncontended
	// acquisitions. (Today their create and that listing are two round
	// trips in a row; the count is of those that one pipelined round trip
	// can serve.)
	OneRoundTrip uint64
	// Wait is the time the granted acquisitions took, from the call to
	// the grant. (The time spent by the others is in the contention
	// profile and the Observer's events.)
	Wait Histogram
	// Hold is the time grants were held, from the grant to its release,
	// downgrade or loss.
	Hold Histogram
}

// Acquisitions returns the number of acquisitions, whatever their outcome.
func (m ModeStats) Acquisitions() uint64 { return m.Granted + m.WouldBlock + m.Cancelled + m.Failed }

// LostStats count the grants lost, by cause (see [LossCause]).
type LostStats struct {
	NodeDeleted, SessionExpired, LeaseLapsed, Disconnected, Other uint64
}

// Total returns the number of grants lost.
func (l LostStats) Total() uint64 {
	return l.NodeDeleted + l.SessionExpired + l.LeaseLapsed + l.Disconnected + l.Other
}

// Acquisitions returns the number of acquisitions of both modes, whatever
// their outcome.
func (s Stats) Acquisitions() uint64 { return s.Read.Acquisitions() + s.Write.Acquisitions() }

// Granted returns the number of grants of both modes.
func (s Stats) Granted() uint64 { return s.Read.Granted + s.Write.Granted }

// Wait returns the wait histogram of both modes together.
func (s Stats) Wait() Histogram { return s.Read.Wait.Add(s.Write.Wait) }

// Add returns the figures of s and o together: of several locks, say.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Read:     s.Read.combine(o.Read, 1),
		Write:    s.Write.combine(o.Write, 1),
		Lost:     s.Lost.combine(o.Lost, 1),
		Requests: s.Requests + o.Requests,
	}
}

// Sub returns the figures of what happened since o, an earlier snapshot of
// the same lock (or the same locks, added up).
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		Read:     s.Read.combine(o.Read, -1),
		Write:    s.Write.combine(o.Write, -1),
		Lost:     s.Lost.combine(o.Lost, -1),
		Requests: s.Requests - o.Requests,
	}
}

// combine adds (sign 1) or subtracts (sign -1) o; unsigned arithmetic
// wraps, so subtracting is adding the negation.
func (m ModeStats) combine(o ModeStats, sign int) ModeStats {
	f := func(a, b uint64) uint64 { return a + uint64(sign)*b }
	r := ModeStats{
		Granted: f(m.Granted, o.Granted), WouldBlock: f(m.WouldBlock, o.WouldBlock),
		Cancelled: f(m.Cancelled, o.Cancelled), Failed: f(m.Failed, o.Failed),
		OneRoundTrip: f(m.OneRoundTrip, o.OneRoundTrip),
	}
	if sign > 0 {
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
		Other: f(l.Other, o.Other),
	}
}

// lockStats is the recording side of Stats, one per RWLock.
type lockStats struct {
	modes    [2]modeStats // Read, Write
	lost     [numLossCauses]atomic.Uint64
	requests atomic.Uint64
}

type modeStats struct {
	outcomes     [4]atomic.Uint64 // by Outcome
	oneRoundTrip atomic.Uint64
	wait, hold   histogram
}

func (s *lockStats) mode(m Mode) *modeStats {
	if m == Read {
		return &s.modes[0]
	}
	return &s.modes[1]
}

// Stats returns a snapshot of the lock's figures since New. It is cheap
// enough to call at any time, and safe to call concurrently with
// everything else; the figures are read one at a time, so a snapshot taken
// while acquisitions run may count one in some figures and not yet in
// others.
func (l *RWLock) Stats() Stats {
	var s Stats
	for i, m := range []*ModeStats{&s.Read, &s.Write} {
		r := &l.stats.modes[i]
		m.Granted = r.outcomes[OutcomeGranted].Load()
		m.WouldBlock = r.outcomes[OutcomeWouldBlock].Load()
		m.Cancelled = r.outcomes[OutcomeCancelled].Load()
		m.Failed = r.outcomes[OutcomeFailed].Load()
		m.OneRoundTrip = r.oneRoundTrip.Load()
		m.Wait, m.Hold = r.wait.snapshot(), r.hold.snapshot()
	}
	lost := func(c LossCause) uint64 { return l.stats.lost[c-1].Load() }
	s.Lost = LostStats{
		NodeDeleted: lost(LostNodeDeleted), SessionExpired: lost(LostSessionExpired),
		LeaseLapsed: lost(LostLeaseLapsed), Disconnected: lost(LostDisconnected), Other: lost(LostOther),
	}
	s.Requests = l.stats.requests.Load()
	return s
}

// oneRoundTrip reports whether a granted acquisition took a single round
// trip: its create and the listing sent right behind it (listBehind), and
// no other request. Change the definition here: it is the only place that
// makes it.
func oneRoundTrip(a *acquisition) bool { return a.oneTrip && !a.waited && a.requests.Load() == 2 }

// acquired records an acquisition as it returns: its outcome, its wait,
// the contention profile's sample, and the observer's event. It runs on
// the caller's goroutine, inside the public entry point, so that the
// profile can take the caller's stack.
func (l *RWLock) acquired(ctx context.Context, a *acquisition, start time.Time, err error) {
	wait := time.Since(start)
	outcome := outcomeOf(ctx, err)
	m := l.stats.mode(a.mode)
	m.outcomes[outcome].Add(1)
	oneRT := false
	if outcome == OutcomeGranted {
		m.wait.record(wait)
		if oneRT = oneRoundTrip(a); oneRT {
			m.oneRoundTrip.Add(1)
		}
	}
	if rate := contentionRate.Load(); rate > 0 && sampled(rate) {
		recordContention(l.path, a.mode, outcome, wait, rate)
	}
	if l.obs != nil {
		l.obs.ObserveAcquire(ctx, AcquireEvent{
			Lock: l.path, Mode: a.mode, Try: !a.block, Outcome: outcome,
			Start: start, Wait: wait, Requests: int(a.requests.Load()), OneRoundTrip: oneRT, Err: err,
		})
	}
}

// countEnd counts the end of a grant that owns its node, as it ends: its
// hold time, and its cause if it was lost. It returns the event for
// observeEnd, which tells the observer once the grant has ended.
func (l *RWLock) countEnd(g *Grant, cause error) GrantEvent {
	hold := time.Since(g.since)
	l.stats.mode(g.mode).hold.record(hold)
	c := lossCauseOf(cause)
	if c != NotLost {
		l.stats.lost[c-1].Add(1)
	}
	return GrantEvent{
		Lock: l.path, Node: g.node, Mode: g.mode, Hold: hold, Cause: c,
		Requests: int(g.requests.Load()), Err: cause,
	}
}

func (l *RWLock) observeEnd(ev GrantEvent) {
	if l.obs != nil {
		l.obs.ObserveGrant(ev)
	}
}

// A tally is the context an acquisition or a grant sends its requests
// with: its caller's context, and where to count them (see request). It
// lives inside the acquisition or the grant, so that counting costs no
// allocation; it carries no values of its own to the caller's code.
type tally struct {
	context.Context
	stats *lockStats
	n     *atomic.Int64 // the acquisition's or the grant's own count
}

// Value makes t the context's zkclient.Counter: the client counts each
// request made with it.
func (t *tally) Value(key any) any {
	if key == zkclient.CounterKey {
		return t
	}
	return t.Context.Value(key)
}

// CountRequest is zkclient.Counter's method.
func (t *tally) CountRequest() {
	t.stats.requests.Add(1)
	t.n.Add(1)
}

// counting returns the acquisition's context for its requests: ctx, with
// its tally.
func (a *acquisition) counting(ctx context.Context) context.Context {
	a.tally = tally{Context: ctx, stats: &a.l.stats, n: &a.requests}
	return &a.tally
}

// counting returns a context for a request g makes on its caller's
// behalf (Release, Downgrade) with ctx. It is g's one tally for them,
// so the caller holds g.ops.
func (g *Grant) counting(ctx context.Context) context.Context {
	g.opTally = tally{Context: ctx, stats: &g.l.stats, n: &g.requests}
	return &g.opTally
}

// initContext makes g's own context, which ends when g does; the
// requests g makes with it (Token, its node watch) are counted for g.
func (g *Grant) initContext() {
	g.tally = tally{Context: context.Background(), stats: &g.l.stats, n: &g.requests}
	g.since = time.Now()
	g.ctx, g.cancel = context.WithCancelCause(&g.tally)
}

// acqStats are an acquisition's own figures, for Stats and the Observer.
type acqStats struct {
	tally    tally        // its context for requests (see counting)
	requests atomic.Int64 // the requests it sent
	lists    int          // the listings of the directory it made
}

// grantStats are a grant's own figures, for Stats and the Observer.
type grantStats struct {
	since    time.Time    // when it was granted
	requests atomic.Int64 // the requests it sent
	tally    tally        // the parent of its context (see initContext)
	opTally  tally        // Release's and Downgrade's (see counting); guarded by ops
}
