package rwlock

import (
	"context"
	"time"
)

// An Observer hears of every acquisition and every grant of a lock as it
// ends: the events that [RWLock.Stats] adds up, one by one, for exports
// that want them so (OpenTelemetry histograms and spans: see the module
// github.com/zkrwlock/rwlock/otelrwlock). Set one with [WithObserver].
//
// Its methods run on the goroutine that ends the acquisition or the
// grant, inside the lock's call, so they must be quick and must not block
// or call the lock; an Observer shared by several locks must be safe for
// concurrent use.
type Observer interface {
	// ObserveAcquire is called as an acquisition returns, with the
	// caller's context.
	ObserveAcquire(ctx context.Context, e AcquireEvent)
	// ObserveGrant is called as a grant ends: released, downgraded or
	// lost. It is called after the grant's Done closes, so that an
	// observer never delays the news of a loss; Stats count the end
	// before Done closes.
	ObserveGrant(e GrantEvent)
}

// An AcquireEvent is one acquisition: a call of Lock, RLock, TryLock or
// TryRLock, or the one that WithRead, WithWrite, ReadGroup or ReadBatch
// makes. Nested grants (see [ContextWithGrant]) are none.
type AcquireEvent struct {
	Lock         string        // the lock's path
	Mode         Mode          // Read or Write
	Try          bool          // TryLock or TryRLock
	Outcome      Outcome       // granted, would block, cancelled, failed
	Start        time.Time     // when the call began
	Wait         time.Duration // how long it took
	Requests     int           // the requests it sent to ZooKeeper
	OneRoundTrip bool          // granted from its first listing, without waiting (see ModeStats.OneRoundTrip)
	Err          error         // why it failed (the call returns it wrapped); nil when granted
}

// A GrantEvent is the end of a grant.
type GrantEvent struct {
	Lock     string        // the lock's path
	Node     string        // the grant's node, full path
	Mode     Mode          // Read or Write
	Hold     time.Duration // from the grant (or the downgrade that made it) to its end
	Cause    LossCause     // NotLost for a release or downgrade
	Requests int           // the requests the grant sent: its release, Token, watch, Downgrade
	Err      error         // ErrReleased, or an error wrapping ErrLost
}

// WithObserver makes the lock tell o of every acquisition and grant (see
// [Observer]). The lock's own figures ([RWLock.Stats]) are kept with or
// without one.
func WithObserver(o Observer) Option {
	return func(opts *options) { opts.observer = o }
}
