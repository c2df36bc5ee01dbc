package rwlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// An Observer hears of every acquisition and every grant of a lock as it
// ends; set one with [WithObserver]. A [StartObserver] hears of them as
// they begin too. Its methods run on the goroutine that ends the
// acquisition or the grant, inside the lock's call. So they must be quick,
// and must not block or call the lock. An Observer shared by several locks
// must be safe for concurrent use.
//
// The package github.com/zkrwlock/rwlock/stats adds the events up, into
// acquisitions by mode and outcome, wait and hold histograms, grants lost
// by cause, and requests. The package github.com/zkrwlock/rwlock/rwlocktest
// reports those from a benchmark through testing.B.ReportMetric. The module
// github.com/zkrwlock/rwlock/otelrwlock feeds the events to OpenTelemetry.
type Observer interface {
	// ObserveAcquire is called as an acquisition returns, with the
	// caller's context.
	ObserveAcquire(ctx context.Context, e AcquireEvent)
	// ObserveGrant is called as a grant ends, when it is released,
	// downgraded or lost. It is called after the grant's Done closes, so
	// that an observer never delays the news of a loss.
	ObserveGrant(e GrantEvent)
}

// An AcquireEvent is one acquisition: a call of Lock, RLock, TryLock or
// TryRLock, or the one that WithRead, WithWrite, ReadGroup or ReadBatch
// makes. A nested grant makes none, since it sends no request and never
// waits.
type AcquireEvent struct {
	Lock string // the lock's path
	Mode Mode   // Read or Write
	Try  bool   // TryLock or TryRLock
	// Outcome is how the call ended, in words fit for a metric's label.
	// "granted" is a grant, and "would_block" a TryLock or TryRLock that
	// found the lock taken. "cancelled" means the call's context ended
	// first. "failed" is any other error, such as a closed connection, a
	// refused request, or the node deleted while waiting.
	Outcome  string
	Start    time.Time     // when the call began
	Wait     time.Duration // how long it took
	Requests int           // the requests it sent to ZooKeeper
	// Relists counts its listings after the one that first showed its node.
	// See stats.ModeStats.Relists.
	Relists int
	// OneRoundTrip is true for a call granted from its first listing, which
	// rode behind its create, without waiting for anyone: the uncontended
	// case.
	OneRoundTrip bool
	// Campaign is true for an Election's Campaign. Its grant is a term, a
	// write grant whose GrantEvent has Term set.
	Campaign bool
	Err      error // why it failed, which the call returns wrapped; nil when granted
}

// A GrantEvent is the end of a grant.
type GrantEvent struct {
	Lock string        // the lock's path
	Node string        // the grant's node, full path
	Mode Mode          // Read or Write
	Hold time.Duration // from the grant, or the downgrade that made it, to its end
	// Loss is why the grant was lost, in words fit for a metric's label, or
	// "" for a release or a downgrade. "node_deleted" means someone else
	// deleted its node. "session_expired" means the session expired, or was
	// replaced. "lease_lapsed" means the connection was silent too long for
	// the lease clock to show the session alive; see Grant.Done.
	// "disconnected" means the connection dropped, and the lock does not
	// know the session timeout. "hold_limit" is the end WithMaxHold sets.
	// "other" is the rest, such as a closed connection, or a downgrade
	// whose outcome is unknown.
	Loss string
	// Requests counts the requests the grant sent. They are its release,
	// watches, Downgrade, and listings for peers; see WithDialect.
	Requests int
	// Term is true for a leadership, the write grant of an Election's
	// Campaign. A leadership lost is a write grant lost, with its Loss; a
	// Resign is a release.
	Term bool
	Err  error // ErrReleased, or an error wrapping ErrLost
}

// A StartObserver is an Observer that also hears of every acquisition and
// every grant as it begins. So it can tell what is under way: the
// acquisitions waiting now, the grants held now, the oldest wait's age. An
// Observer hears of a wait only when it ends, which may be minutes later.
// The lock finds a StartObserver with a type assertion, as io.Copy finds an
// io.WriterTo, so Observers written before it still compile and work.
//
// Every ObserveAcquireStart is followed by one ObserveAcquire with the same
// Lock, Mode and Start, and every ObserveGrantStart by one ObserveGrant
// with the same Node. So an observer counts what is under way exactly.
// Grants are those that own a node, as for ObserveGrant. A nested grant is
// none, and the readers that share a node are one grant. A Downgrade ends
// the write grant and then starts a read grant of the same node.
type StartObserver interface {
	Observer
	// ObserveAcquireStart is called as an acquisition begins, with the
	// caller's context and an event that has only Lock, Mode, Try and
	// Start.
	ObserveAcquireStart(ctx context.Context, e AcquireEvent)
	// ObserveGrantStart is called as a grant begins, with an event that
	// has only Lock, Node and Mode.
	ObserveGrantStart(e GrantEvent)
}

// WithObserver makes the lock tell o of every acquisition and grant; see
// [Observer] and [StartObserver]. Each WithObserver adds one observer.
// Observers hear every event, in the order they were given.
func WithObserver(o Observer) Option {
	return func(opts *options) {
		if o == nil {
			opts.err = fmt.Errorf("%w: nil Observer", ErrInvalidArgument)
			return
		}
		opts.observers = append(opts.observers, o)
		if so, ok := o.(StartObserver); ok {
			opts.starters = append(opts.starters, so)
		}
	}
}

// The rest of this file is how the lock makes the events. It counts the
// requests of every acquisition and grant as they are sent, with a
// zkclient.Counter. It makes an event only where there is an observer to
// hear it. So a lock without one pays a few atomic adds and two readings of
// the clock per acquisition. A round trip costs hundreds of microseconds.

// outcomeOf says how an acquisition ended, as AcquireEvent.Outcome does.
func outcomeOf(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "granted"
	case errors.Is(err, ErrWouldBlock):
		return "would_block"
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "failed"
}

// lossOf says why a grant ended with cause, as GrantEvent.Loss does.
func lossOf(cause error) string {
	switch {
	case !errors.Is(cause, ErrLost):
		return ""
	case errors.Is(cause, errNodeDeleted):
		return "node_deleted"
	case errors.Is(cause, ErrHoldLimit):
		return "hold_limit"
	case errors.Is(cause, zk.ErrSessionExpired):
		return "session_expired"
	case leaseLapsed(cause):
		return "lease_lapsed"
	case errors.Is(cause, zkclient.ErrDisconnected):
		return "disconnected"
	}
	return "other"
}

// leaseLapsed reports whether err wraps an *zkclient.LeaseLapsedError. It
// is a function of its own because errors.As's target escapes to the heap.
// A release, which never gets this far, must not pay for it.
func leaseLapsed(err error) bool {
	var lapsed *zkclient.LeaseLapsedError
	return errors.As(err, &lapsed)
}

// oneRoundTrip reports whether a granted acquisition took a single round
// trip. Its only requests were its create and the listing that listBehind
// sent right behind it. Change the definition here, the only place that
// makes it.
func oneRoundTrip(m *member) bool { return m.oneTrip && !m.waited && m.requests.Load() <= 2 }

// starting tells the StartObservers that an acquisition in mode w begins at
// start. Its ObserveAcquire comes from acquired, with the same start.
func (l *RWLock) starting(ctx context.Context, w want, start time.Time) {
	if len(l.starters) == 0 {
		return
	}
	ev := AcquireEvent{Lock: l.path, Mode: w.mode, Try: !w.block, Start: start, Campaign: w.campaign}
	for _, o := range l.starters {
		o.ObserveAcquireStart(ctx, ev)
	}
}

// acquired ends an acquisition's figures as it returns. It records the
// contention profile's sample, and the observers' event. It runs on the
// caller's goroutine, inside the public entry point, so that the profile
// can take the caller's stack.
func (l *RWLock) acquired(ctx context.Context, a *member, start time.Time, err error) {
	rate := contentionRate.Load()
	if rate <= 0 && len(l.observers) == 0 {
		return
	}
	wait := time.Since(start)
	outcome := outcomeOf(ctx, err)
	if rate > 0 && sampled(rate) {
		recordContention(l.path, a.mode, outcome, a.waited || outcome == "would_block", wait, rate)
	}
	if len(l.observers) == 0 {
		return
	}
	ev := AcquireEvent{
		Lock: l.path, Mode: a.mode, Try: !a.block, Outcome: outcome,
		Start: start, Wait: wait, Requests: int(a.requests.Load()), Relists: int(a.relists.Load()), Err: err,
		Campaign: a.campaign,
	}
	ev.OneRoundTrip = err == nil && oneRoundTrip(a)
	for _, o := range l.observers {
		o.ObserveAcquire(ctx, ev)
	}
}

// observing is the observers' capability. It tells them of each hold as it
// begins, and as it ends. A Downgrade ends the write grant and begins a
// read grant of the same node.
type observing struct{}

func (observing) begin(h *hold) {
	h.observeStart()
	h.whenEnded(func(cause error) { h.observeEnd(h.currentMode(), cause, h.requests.Load()) })
}

func (observing) changed(h *hold, c change) {
	if c != downgraded {
		return
	}
	// The write grant's count is taken and cleared at once. A request
	// counted later, while its observers run, is the read grant's.
	h.observeEnd(Write, ErrReleased, h.requests.Reset())
	h.mu.Lock()
	h.since = time.Now()
	h.mu.Unlock()
	h.observeStart()
}

// observeStart tells the StartObservers that h begins, in its mode now.
func (h *hold) observeStart() {
	mode := h.currentMode()
	ev := GrantEvent{Lock: h.l.path, Node: h.path, Mode: mode, Term: h.term(mode)}
	for _, o := range h.l.starters {
		o.ObserveGrantStart(ev)
	}
}

// term reports whether h's grant of mode is a leadership: the write grant
// of a Campaign's node, which carries a value line. A Downgrade's read
// grant is none.
func (h *hold) term(mode Mode) bool { return mode == Write && lockname.Elected(h.lines) }

// observeEnd tells the observers that h's grant of mode ended with cause,
// having sent requests. It runs as the hold's end hooks do, after its
// grants' Done closed.
func (h *hold) observeEnd(mode Mode, cause error, requests int64) {
	h.mu.Lock()
	since := h.since
	h.mu.Unlock()
	ev := GrantEvent{
		Lock: h.l.path, Node: h.path, Mode: mode, Hold: time.Since(since), Loss: lossOf(cause),
		Requests: int(requests), Err: cause, Term: h.term(mode),
	}
	for _, o := range h.l.observers {
		o.ObserveGrant(ev)
	}
}
