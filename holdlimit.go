package rwlock

import (
	"fmt"
	"time"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A hold limit ends a grant by itself, for a holder that is alive but
// stuck: the session, ZooKeeper's watchdog, frees the lock only when the
// holder dies. It keeps the lock's promise that a holder is told before
// anyone else can be granted: the grant ends (Done closes, Err fails) a
// head start before the limit, and the node, which is what lets the next
// waiter in, is deleted by the holder's own client at the limit (a holder
// told late, its process stopped across the notice, keeps its head start
// from when it is told), through the background deletion that a lost
// grant's node gets (retried, and finished after a reconnection). Nobody
// else deletes it, so no other client can be granted before then. The limit counts from the grant
// on the holder's monotonic clock; a nested grant and a downgrade keep the
// limit of the grant they come from. Two releases are the holder's own
// and may land after the notice: a Release called before it deletes the
// node at once, and a Downgrade called before it lets readers in with its
// mark (the holder only reads from the call on). The simulation checks all
// of this (sim_test.go, checkLimits).

// WithMaxHold limits every grant of the lock to d. The grant ends by itself
// a head start before d: Done closes, Err returns an error wrapping ErrLost
// and ErrHoldLimit, and WithRead's and WithWrite's function sees its
// context cancelled with that cause. At d the lock deletes the grant's
// node, so that the next waiter may go; a holder whose process was stopped
// across the notice is told as it resumes, and the node goes no sooner
// than the head start after that. The head start is a quarter of the
// session timeout the server granted, as for a lost lease; where the lock
// does not know it, a quarter of d, or of WithSessionTimeout's bound if
// that is longer; at most half of d in either case. Release after the
// notice deletes nothing: the node goes as said.
func WithMaxHold(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.err = fmt.Errorf("%w: max hold %v", ErrInvalidArgument, d)
		}
		o.maxHold = d
	}
}

// limitHold puts g, a grant that owns its node, under the lock's hold
// limit, which ends at end; a zero end is no limit.
func (g *Grant) limitHold(end time.Time) {
	if end.IsZero() {
		return
	}
	g.holdEnd = end
	// The head start is the holder's time to stop before its own client
	// deletes the node. Without a granted timeout it is a quarter of the
	// limit. A bound only ends grants: it may lengthen the head start,
	// which tells the holder sooner, never shorten it, which would tell the
	// holder later than without the bound.
	t, granted := g.c.Timeout(g.l.sessionTimeout, g.session)
	head := zkclient.HeadStart(t)
	if !granted {
		// mutant: bound-shortens-hold-head
		head = max(head, g.l.maxHold/4)
	}
	g.holdHead = min(head, g.l.maxHold/2)
	g.holdNotice = end.Add(-g.holdHead)
	timer := holdTimer(g.c, time.Until(g.holdNotice), g.holdLimitReached)
	g.whenEnded(func(error) { timer.Stop() })
}

// holdTimer starts the timer that tells a holder of its limit. Tests
// replace it with one that never fires, as in a process paused past the
// notice, whose timer's goroutine has not run yet when it resumes.
var holdTimer = (*zkclient.Client).AfterFunc

// overHold reports whether g's hold limit has come: a process that was
// paused sees it at its first look, before the timer's goroutine runs.
func (g *Grant) overHold() bool {
	return !g.holdNotice.IsZero() && !time.Now().Before(g.holdNotice)
}

// holdLimitReached ends g with ErrHoldLimit, and deletes its node at the
// limit, or a head start after now if that is later: a process stopped
// across the notice is told only as it resumes, and its holder still gets
// its head start. The lease is judged first: a grant whose session may be
// gone already is lost for that, with the lease's deadline. The deadline
// of a grant ended here is when its node goes, or the lease's end if
// earlier, since after its end nothing renews its lease for it.
func (g *Grant) holdLimitReached() {
	g.c.Judge((*holder)(g))
	finish, cancel := g.l.reserveFinish(g.c)
	lease, leased := g.c.Deadline((*holder)(g))
	now := time.Now()
	g.mu.Lock()
	if g.ctx.Err() == nil {
		at := g.holdEnd
		// mutant: told-late
		if told := now.Add(g.holdHead); told.After(at) {
			at = told
		}
		g.deadline, g.holdEnd = at, at
		if leased && lease.Before(at) {
			g.deadline = lease
		}
		if g.deadline.Before(now) {
			g.deadline = now
		}
	}
	g.mu.Unlock()
	if !g.end(lostError(g.node, fmt.Errorf("%w: held for %v", ErrHoldLimit, g.l.maxHold))) {
		cancel()
		return
	}
	// Another call (the timer's, and a look of the holder's, as a stopped
	// process resumes) may have moved the time before our end won: the node
	// goes when the deadline says.
	g.mu.Lock()
	at := g.holdEnd
	g.mu.Unlock()
	g.l.debug("hold limit: told; the node goes at the limit", g.node)
	// mutant: delete-at-limit
	time.AfterFunc(time.Until(at), func() { finish(g.node, "", g.session) })
}
