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
// waiter in, is deleted by the holder's own client at the limit, through
// the background deletion that a lost grant's node gets (retried, and
// finished after a reconnection). Nobody else deletes it, so no other
// client can be granted before the limit. The limit counts from the grant
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
// node, so that the next waiter may go. The head start is a quarter of the
// session timeout in effect, as for a lost lease (a quarter of d where the
// lock does not know the session timeout), and at most half of d. Release
// after the notice deletes nothing: the node goes at d.
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
	t := g.c.Timeout(g.l.sessionTimeout, g.session)
	head := zkclient.HeadStart(t)
	if t == 0 {
		head = g.l.maxHold / 4
	}
	g.holdNotice = end.Add(-min(head, g.l.maxHold/2))
	timer := holdTimer(time.Until(g.holdNotice), g.holdLimitReached)
	g.whenEnded(func(error) { timer.Stop() })
}

// holdTimer starts the timer that tells a holder of its limit. Tests
// replace it with one that never fires, as in a process paused past the
// notice, whose timer's goroutine has not run yet when it resumes.
var holdTimer = time.AfterFunc

// overHold reports whether g's hold limit has come: a process that was
// paused sees it at its first look, before the timer's goroutine runs.
func (g *Grant) overHold() bool {
	return !g.holdNotice.IsZero() && !time.Now().Before(g.holdNotice)
}

// holdLimitReached ends g with ErrHoldLimit, and deletes its node at the
// limit.
func (g *Grant) holdLimitReached() {
	finish, cancel := g.l.reserveFinish(g.c)
	g.mu.Lock()
	if g.ctx.Err() == nil {
		g.deadline = g.holdEnd
	}
	g.mu.Unlock()
	if !g.end(lostError(g.node, fmt.Errorf("%w: held for %v", ErrHoldLimit, g.l.maxHold))) {
		cancel()
		return
	}
	g.l.debug("hold limit: told; the node goes at the limit", g.node)
	// mutant: delete-at-limit
	time.AfterFunc(time.Until(g.holdEnd), func() { finish(g.node, "", g.session) })
}
