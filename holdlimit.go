package rwlock

import (
	"fmt"
	"time"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A hold limit ends a grant by itself, for a holder that is alive but
// stuck. The session, ZooKeeper's watchdog, frees the lock only when the
// holder dies. The limit keeps the lock's promise that a holder is told
// before anyone else can be granted. The holder is told a head start before
// the limit, as WithMaxHold says. The node is what lets the next waiter in.
// The holder's own client deletes it at the limit, through the background
// deletion that a lost grant's node gets. Nobody else deletes it, so no
// other client can be granted before then.
//
// The limit counts from the grant, on the holder's monotonic clock. It is
// the node's, so a nested grant, the readers of a coalesced node and a
// downgrade share it. Two releases are the holder's own, and may land after
// the notice. A Release called before the notice deletes the node at once.
// A Downgrade called before it lets readers in with its mark, since the
// holder only reads from the call on. The simulation checks all of this, in
// checkLimits of sim_test.go.

// WithMaxHold limits every grant of the lock to d. A head start before d,
// the grant ends by itself. Then Done closes, Err returns an error wrapping
// ErrLost and ErrHoldLimit, and the function of WithRead or WithWrite sees
// its context cancelled with that cause. At d the lock deletes the node, so
// that the next waiter may go; a Release after the notice deletes nothing.
// A holder whose process was stopped across the notice is told as it
// resumes, and the node goes no sooner than the head start after that. The
// head start is a quarter of the session timeout the server granted, as for
// a lost lease. Where the lock does not know that, it is a quarter of d, or
// of WithSessionTimeout's bound if longer. In either case it is at most
// half of d.
func WithMaxHold(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.err = fmt.Errorf("%w: max hold %v", ErrInvalidArgument, d)
		}
		o.maxHold = d
	}
}

// holdLimit is the capability that gives every hold of the lock a limit.
type holdLimit struct{}

// A limit is one hold's. It says when its holder is told, and how long
// before the node goes.
type limit struct {
	h      *hold
	notice time.Time
	head   time.Duration
}

func (holdLimit) begin(h *hold) {
	l := h.l
	// The head start is the holder's time to stop before its own client
	// deletes the node. Without a granted timeout it is a quarter of the
	// limit. A bound only ends grants. So it may lengthen the head start,
	// which tells the holder sooner. It never shortens it, which would tell
	// the holder later than without the bound.
	t, granted := h.c.Timeout(l.sessionTimeout, h.session)
	head := zkclient.HeadStart(t)
	if !granted {
		// mutant: bound-shortens-hold-head
		head = max(head, l.maxHold/4)
	}
	lim := &limit{h: h, head: min(head, l.maxHold/2)}
	end := h.since.Add(l.maxHold)
	lim.notice = end.Add(-lim.head)
	h.slot(holdLimit{}, func() any { return lim })
	h.mu.Lock()
	h.until = end
	h.mu.Unlock()
	h.lookAlso(lim.look)
	timer := holdTimer(h.c, time.Until(lim.notice), lim.reached)
	h.whenEnded(func(error) { timer.Stop() })
}

func (holdLimit) changed(*hold, change) {}

// holdTimer starts the timer that tells a holder of its limit. Tests
// replace it with one that never fires. So they play a process paused past
// the notice, whose timer's goroutine has not run yet when it resumes.
var holdTimer = (*zkclient.Client).AfterFunc

// look tells the holder at its own look once the notice is due. So a
// process that was paused sees it before the timer's goroutine runs.
func (lim *limit) look() {
	// mutant: judge-ignores-hold-limit
	if !time.Now().Before(lim.notice) {
		lim.reached()
	}
}

// reached ends the hold with ErrHoldLimit. It deletes the node at the
// limit, or a head start after now if that is later. A process stopped
// across the notice is told only as it resumes, and its holder still gets
// its head start. The lease is judged first. A grant whose session may be
// gone already is lost for that, with the lease's deadline. The deadline of
// a grant ended here is when its node goes, or the lease's end if earlier.
// After its end, nothing renews its lease for it.
func (lim *limit) reached() {
	h := lim.h
	h.c.Judge(h)
	finish, cancel := h.l.reserveFinish(h.c)
	lease, leased := h.c.Deadline(h)
	now := time.Now()
	h.mu.Lock()
	if h.held() {
		at := h.until
		// mutant: told-late
		if told := now.Add(lim.head); told.After(at) {
			at = told
		}
		h.deadline, h.until = at, at
		if leased && lease.Before(at) {
			h.deadline = lease
		}
		if h.deadline.Before(now) {
			h.deadline = now
		}
	}
	h.mu.Unlock()
	if !h.end(lostError(h.path, fmt.Errorf("%w: held for %v", ErrHoldLimit, h.l.maxHold))) {
		cancel()
		return
	}
	// Another call may have moved the time before our end won. The timer's
	// call and a look of the holder's can both run as a stopped process
	// resumes. The node goes when the deadline says.
	h.mu.Lock()
	at := h.until
	h.mu.Unlock()
	h.l.debug("hold limit: told; the node goes at the limit", h.path)
	// mutant: delete-at-limit
	time.AfterFunc(time.Until(at), func() { finish(h.path, "", h.session) })
}
