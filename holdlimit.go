package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/zkrwlock/rwlock/internal/lockname"
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
// So does the last of the Releases called after it (see releasedLate).
// A Downgrade called before it lets readers in with its mark, since the
// holder only reads from the call on. The simulation checks all of this, in
// checkLimits of sim_test.go.

// WithMaxHold limits every grant of the lock to d. d must be positive: 0
// is refused, and a lock without WithMaxHold has no limit. A head start
// before d, the grant ends by itself. Then Done closes, Err returns an
// error wrapping ErrLost and ErrHoldLimit, whose text says when the holder
// was told, and the function of WithRead or WithWrite sees its context
// cancelled with that cause. The node goes at d, so that the next waiter
// may go, or as soon as every grant on it is released after the notice,
// whichever comes first. A holder whose process was stopped across the
// notice is told as it resumes, and the node goes no sooner than the head
// start after that, unless released. The head start is a quarter of the
// session timeout the server granted, as for a lost lease. Where the lock
// does not know that, it is a quarter of d, or of WithSessionTimeout's
// bound if longer. In either case it is at most half of d. So a short
// limit tells the holder at half of it: with d = 6s and a session timeout
// of 30s, after 3s.
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

	mu     sync.Mutex
	told   bool        // the limit ended the hold
	open   int         // the grants on the node not released since, nested ones aside
	early  int         // the grants released after the end, before told was set
	timer  *time.Timer // deletes the node at the limit; nil once the node goes early
	cancel func()      // gives back the deletion reserved for the limit
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

// noticeError is the cause of a hold ended at now by its limit. It says
// when the holder was told, and why then.
func (lim *limit) noticeError(now time.Time) error {
	d := lim.h.l.maxHold
	granted := lim.notice.Add(lim.head - d)
	return fmt.Errorf("%w: told %v after the grant, a head start of %v before the limit of %v "+
		"(a quarter of the session timeout, at most half the limit); the node goes at the limit, "+
		"or as soon as every grant on it is released", ErrHoldLimit, now.Sub(granted).Round(time.Millisecond), lim.head, d)
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
	if !h.end(lostError(h.path, lim.noticeError(now))) {
		cancel()
		return
	}
	// Another call may have moved the time before our end won. The timer's
	// call and a look of the holder's can both run as a stopped process
	// resumes. The node goes when the deadline says.
	h.mu.Lock()
	at := h.until
	h.mu.Unlock()
	h.l.debug("hold limit: told; the node goes at the limit, or as the holder releases", h.path)
	lim.mu.Lock()
	lim.told, lim.open, lim.cancel = true, h.handleCount()-lim.early, cancel
	if lim.open <= 0 { // all released as the end's hooks ran: the node goes now
		lim.mu.Unlock()
		finish(h.path, "", h.session)
		return
	}
	// mutant: delete-at-limit
	lim.timer = time.AfterFunc(time.Until(at), func() { finish(h.path, "", h.session) })
	lim.mu.Unlock()
}

// Once told, the holder may release early. Then the node goes at once,
// once every grant on it is released, not at the limit.
//
// Why that is safe. The node lives on to the limit so that nobody is
// granted before the holder has stopped. A Release says the holder has
// stopped with that grant, as it says when no limit is near. Once every
// grant on the node is released, nobody in the process uses the node. So
// its deletion lets in nobody the holder still works beside, as any
// release's does. Until then the node stays, for the grants still open.
//
// Why it matters. A process that exits after its Release, without closing
// its connection, would leave its node until its session expires: the
// timer that deletes it at the limit dies with the process.

// releasedLate hears that a grant of h, not nested, was released after h
// ended. If the hold limit ended h, and that was the last grant on the
// node, it deletes the node now, within ctx, and stops the timer that
// would have at the limit.
func (h *hold) releasedLate(ctx context.Context) {
	lim, ok := h.slot(holdLimit{}, nil).(*limit)
	if !ok {
		return
	}
	lim.mu.Lock()
	if !lim.told {
		lim.early++ // reached has ended h, and counts this one as it goes on
		lim.mu.Unlock()
		return
	}
	if lim.timer == nil {
		lim.mu.Unlock()
		return
	}
	// mutant: early-delete-open-grants
	if lim.open--; lim.open > 0 {
		lim.mu.Unlock()
		return
	}
	timer, cancel := lim.timer, lim.cancel
	lim.timer = nil
	lim.mu.Unlock()
	lim.deleteEarly(ctx, cancel, timer)
}

// deleteEarly deletes the node before the limit, within ctx, unless timer
// has fired. It gives back the deletion reserved for the limit.
func (lim *limit) deleteEarly(ctx context.Context, cancel func(), timer *time.Timer) {
	if !timer.Stop() {
		return // the limit came: its deletion is under way
	}
	cancel()
	h := lim.h
	h.l.debug("hold limit: every grant released after the notice; the node goes now", h.path)
	// A deletion that cannot finish within ctx goes on in the background.
	if err := h.l.deleteNode(ctx, h.c, h.path, h.session, lockname.Unmarked); err != nil && !errors.Is(err, errFinishing) {
		h.l.log.Warn("rwlock: cannot delete lock node after its hold limit; it goes when its session ends",
			"lock", h.l.path, "node", h.path, "err", err)
	}
}
