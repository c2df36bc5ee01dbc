package zkclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// When is a grant lost? The promise is that its holder is told (Done
// closes, Err fails, WithWrite's function sees its context cancelled)
// before another client can be granted the lock. Another client can be
// granted it only once our node is gone: deleted by someone, or by the
// server when it expires our session.
//
// # The lease
//
// A ZooKeeper server expires a session T (the granted session timeout)
// after it last heard from the client, never sooner: every packet from the
// client renews the session, and the expiry is rounded up to the server's
// next tick. So a request sent at time s by our clock, and answered in the
// session, proves that the session lives until s + T by our clock (the
// server received it after s). The lock keeps that proof itself, per
// connection: it records when it sent each request that counts, and the
// latest one answered in the session is the lease. It never infers the
// lease from go-zookeeper's connection state or from packets received:
// go-zookeeper resets its read deadline on every packet, watch
// notifications included, and a notification proves that the server sent
// something, not that it heard from us. go-zookeeper's own pings are
// invisible to a library.
//
// Only writes and syncs count. In an ensemble, the leader alone expires
// sessions; a follower tells it which sessions it heard from only in its
// replies to the leader's pings, every tickTime/2 (Learner.ping). A
// follower cut off from the leader goes on answering reads for up to
// syncLimit ticks while the leader may expire our session, so a read
// proves nothing. A write or a sync is passed on to the leader, and the
// follower answers only after the leader has: the answer proves that the
// follower was in touch with the leader after s. It still does not prove
// that the leader heard of us: if the follower loses the leader right
// after answering, what it heard since its last ping reply is never
// relayed, and the leader may expire the session up to tickTime/2, plus
// the gap between our requests, before s + T.
//
// # The keepalive and the head start
//
// While a grant is held on a connection, the lock sends a sync every T/16
// unless a write renewed the lease meanwhile: one request per connection,
// however many grants it holds. One that goes unanswered is tried again
// within 100 ms, so that a keepalive waits in go-zookeeper's queue while it
// reconnects and goes out the moment it has. A grant is lost at
// lease end − H, the head start, H = T/4 ([HeadStart]). A connection may
// stay silent (a partition, a server restart, a leader election) for up to
// T − H − T/16, about 0.69·T, without losing its grants: 6.9 s with
// T = 10 s.
//
// On a standalone server, the holder has all of H to stop before the
// session can expire. In an ensemble the server it talks to may be out of
// touch with the leader at the worst moment, and the leader then expires
// the session earlier than the lease says: up to tickTime/2 plus the gap
// between our requests through a follower (above); up to a tick plus that
// gap through an observer behind an ObserverMaster (two relays); up to a
// tick through a deposed leader, which answers syncs as reads until it sees
// it has lost its quorum (syncLimit+1 ticks), while the followers give it
// up after syncLimit ticks and the new leader counts every session's T
// afresh. With T at least eight ticks (16 s with ZooKeeper's default
// tickTime of 2 s) all of these are at most T/8 + T/16, and the holder has
// at least T/16 left; Grant.Deadline reports the earliest expiry under
// that assumption. With fewer ticks, such a worst case can let another
// client in first; the fencing token is the defence that does not depend
// on time.
//
// Time is the monotonic clock, or the wall clock where it says more: the
// monotonic clock stands still while a machine is suspended, the server's
// does not. (A wall clock stepped forward can only end grants early.)
// Err and Done consult the clock at every call, so a process that was
// paused (SIGSTOP, a stopped VM) sees the loss at its first check after
// resuming, even before the clock's timer has fired.
//
// # Which T
//
// The T of the lease is the one the server granted, never the one asked
// for: a server clamps what a client asks for to its own
// [minSessionTimeout, maxSessionTimeout] (2 and 20 ticks by default), and
// a reconnection may land on a server that grants less. A connection made
// by rwlock.Dial reads the granted T from the server's answer to every
// handshake (dial.go), and a grant is judged by the smallest T granted in
// its session so far, capped by WithSessionTimeout if given: the
// judgement, the keepalive pace, the next look and Grant.Deadline all
// use it, and a change makes the clock look at once. An answered
// handshake renews the lease too: the server touched the session after it
// was sent, a follower only once the leader had (it revalidates the
// session with the leader before it answers). Why the smallest, and the
// one case of a T the lock does not hear (a lost answer), are in dial.go.
// On any other connection the lock cannot check what the server granted
// (go-zookeeper does not expose it), so it does not know T.
//
// # Without the granted T
//
// On a connection that does not tell T, any disconnection of a holder is
// a loss, checked at every Err and Done and every 20 ms: the safe default
// of Curator's SUSPENDED rule. It catches a disconnection only once
// go-zookeeper has noticed it.
//
// With WithSessionTimeout(d), the lease clock runs there too, with d as an
// upper bound: the judgement, the keepalive pace and the next look use d as
// they would a granted T. A bound can end a grant, never keep one. The
// server may have granted less than d, so a disconnection is still a loss,
// and Deadline knows no time: the session may expire at any moment.
//
// If the server granted at least d at every handshake of the session, the
// lease by d ends no later than the real one. (Each handshake sets the
// session's timeout anew: a reconnection to a member with a lower
// maxSessionTimeout grants less.) So a grant is then lost, with the head
// start, before the server can expire its session: through a silent
// partition that go-zookeeper has not noticed, or a pause. In an ensemble
// the margins above need d of at least eight ticks: the keepalives go
// every d/16, and a tick must be at most d/8. If the smallest T the server
// granted in the session is below d but above 3d/4, a standalone server
// still cannot expire the session before the grant is lost at 3d/4 of
// silence, but the head start is only T - 3d/4; at 3d/4 or below, nothing
// is promised.
//
// The clock is consulted before go-zookeeper's state: a process back from
// a pause sees its loss even while go-zookeeper still says it has its
// session (its receive loop has not yet read the server's close).
//
// Without either, the lock has only go-zookeeper's state, and keeps its
// blind spot: connect with Dial, or pass WithSessionTimeout.
//
// # Other causes
//
// A session found replaced (go-zookeeper opens a new one after an expiry)
// ends its grants at once. A node deleted by someone else is learnt from
// the watch on it, which fires when the next waiter's does: no client can
// promise a head start for that cause, and the fencing token
// (Grant.Token) is the defence.

// HeadStart returns how long before its session may expire a grant is
// declared lost, for a session timeout t: a quarter of it. See Grant.Done.
func HeadStart(t time.Duration) time.Duration {
	// mutant: headstart
	return t / 4
}

// RelayAllowance is how much earlier than the lease's end the leader may
// expire a session whose server was out of touch with it at the worst
// moment: at most a tick plus the keepalive interval, T/8 + T/16 for a
// session of eight ticks or more (see above).
func RelayAllowance(t time.Duration) time.Duration { return t/8 + RenewInterval(t) }

// retryUnanswered is how soon a keepalive that was not answered is tried
// again, at most.
const retryUnanswered = 100 * time.Millisecond

// RenewInterval is how often the lease is renewed while it is needed.
func RenewInterval(t time.Duration) time.Duration { return t / 16 }

// UnknownTimeoutPoll is how often holders whose session timeout is
// unknown are judged by the connection's state.
const UnknownTimeoutPoll = 20 * time.Millisecond

// lease is what the requests of one connection prove: session lives until
// since + T.
type lease struct {
	session int64
	since   time.Time // when the latest counting request answered in session was sent
}

// elapsed is the time since t, by the monotonic clock or, if it says
// more, by the wall clock (see above).
func elapsed(t, now time.Time) time.Duration {
	return max(now.Sub(t), now.Round(0).Sub(t.Round(0)))
}

// renew records that a counting request sent at sent was answered in
// session. A late answer in a session the connection has left renews
// nothing.
func (c *Client) renew(session int64, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if session != c.zk.SessionID() {
		return
	}
	if session != c.lease.session || sent.After(c.lease.since) {
		c.lease = lease{session, sent}
	}
}

// leaseEnd returns when session surely lives until, for timeout t, and
// whether the lease knows (it does not for another session than the one it
// last renewed). Call with c.mu held.
func (c *Client) leaseEndLocked(session int64, t time.Duration) (time.Time, bool) {
	if t <= 0 || c.lease.session != session || c.lease.since.IsZero() {
		return time.Time{}, false
	}
	return c.lease.since.Add(t), true
}

// Timeout returns the session timeout t that the lease clock judges a
// holder in session by, whose lock caps it at limit (0: no cap), and whether
// the server granted at least t (see above). On a connection that tells, t
// is the smallest the server granted in the session, no more than limit,
// and granted is true. On any other, t is limit, an upper bound that only
// ends grants, and granted is false. t is 0 when there is neither.
func (c *Client) Timeout(limit time.Duration, session int64) (t time.Duration, granted bool) {
	if c.sessions != nil {
		// mutant: state-rule
		t = c.sessions.TimeoutOf(session)
	}
	if t > 0 {
		// mutant: trust-asked-timeout
		if limit > 0 && t > limit {
			t = limit
		}
		return t, true
	}
	// mutant: bound-ignored
	return limit, false
}

// A Holder is what the lease clock judges: one grant of the lock.
type Holder interface {
	// Session is the session that owns the holder's node.
	Session() int64
	// Limit caps the session timeout the holder is judged by (the lock's
	// WithSessionTimeout); on a connection that does not tell T, it is the
	// bound the holder is judged by. 0 for none.
	Limit() time.Duration
	// Lost tells the holder it is lost, and why. The clock calls it
	// holding none of its locks, once for each time it finds the holder
	// lost; the holder ends itself (and is removed) on the first.
	Lost(cause error)
}

// handshake takes in an answer to a handshake sent at sent: it renews the
// lease (the server touched the session after sent), and makes the clock
// look at once, since the timeout may have changed. It runs on
// go-zookeeper's goroutine, so it only moves the timer.
func (c *Client) handshake(session int64, sent time.Time) {
	c.renew(session, sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil && len(c.holders) > 0 {
		c.timer.Reset(0)
	}
}

// Fresh reports whether session's lease still has more than the head start
// and margin to run, for timeout t.
func (c *Client) Fresh(session int64, t, margin time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.leaseEndLocked(session, t)
	return ok && elapsed(c.lease.since, time.Now()) < t-HeadStart(t)-margin
}

// LeaseLapsedError is the cause of a loss when the lease ran out.
type LeaseLapsedError struct {
	Silent time.Duration // since the last answered request was sent
	Left   time.Duration // until the server may expire the session; unknown (0) when Bound
	Bound  bool          // judged by an upper bound, not a granted T: the session may be gone already
}

func (e *LeaseLapsedError) Error() string {
	silent := e.Silent.Round(time.Millisecond)
	if e.Bound {
		return fmt.Sprintf("no answer from ZooKeeper for %v: the server may expire the session at any moment "+
			"(it may have granted less than the session timeout given)", silent)
	}
	return fmt.Sprintf("no answer from ZooKeeper for %v: the server may expire the session in %v",
		silent, max(e.Left, 0).Round(time.Millisecond))
}

// ErrDisconnected is the cause of a loss when the connection dropped and
// the lock does not know the session timeout the server granted.
var ErrDisconnected = errors.New("disconnected, and the session timeout is unknown")

// judgeLocked returns why h is lost at now, or nil if it is held as far as
// the clock and the session can tell. Call with c.mu held.
func (c *Client) judgeLocked(h Holder, now time.Time) error {
	session := h.Session()
	if c.zk.SessionID() != session {
		return zk.ErrSessionExpired // go-zookeeper silently made a new session
	}
	t, granted := c.Timeout(h.Limit(), session)
	// The clock first: go-zookeeper's state lags behind a pause or a
	// silent partition, and the clock does not.
	if t > 0 {
		if _, ok := c.leaseEndLocked(session, t); !ok {
			return &LeaseLapsedError{Bound: !granted} // never renewed in this session: nothing proves it alive
		}
		if silent := elapsed(c.lease.since, now); silent >= t-HeadStart(t) {
			if !granted {
				return &LeaseLapsedError{Silent: silent, Bound: true}
			}
			return &LeaseLapsedError{Silent: silent, Left: t - silent}
		}
	}
	// A lease by a bound proves the session alive only if the server
	// granted at least the bound; it may have granted less, and a
	// disconnection may be the session's end.
	if !granted && c.zk.State() != zk.StateHasSession {
		return ErrDisconnected
	}
	return nil
}

// Judge tells h it is lost if the clock says so. The lock calls it at
// every Err and Done; the clock's timer calls it for every holder in time.
func (c *Client) Judge(h Holder) {
	c.mu.Lock()
	why := c.judgeLocked(h, time.Now())
	c.mu.Unlock()
	if why != nil {
		h.Lost(why)
	}
}

// Deadline returns the earliest time at which the server may expire h's
// session as far as the lease knows, counting the worst case of an
// ensemble (RelayAllowance); ok is false if the lease does not know. A
// lease by a bound knows nothing of the sort: the server may have granted
// less.
func (c *Client) Deadline(h Holder) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, granted := c.Timeout(h.Limit(), h.Session())
	end, ok := c.leaseEndLocked(h.Session(), t)
	if !ok || !granted {
		return time.Time{}, false
	}
	return end.Add(-RelayAllowance(t)), true
}

// AddHolder puts h under the lease clock until RemoveHolder.
func (c *Client) AddHolder(h Holder) {
	c.mu.Lock()
	c.holders[h] = struct{}{}
	c.mu.Unlock()
	c.tick()
}

// RemoveHolder takes h from under the lease clock.
func (c *Client) RemoveHolder(h Holder) {
	c.mu.Lock()
	delete(c.holders, h)
	c.stopIfIdleLocked()
	c.mu.Unlock()
}

func (c *Client) stopIfIdleLocked() {
	if len(c.holders) == 0 && c.timer != nil {
		c.timer.Stop()
	}
}

// tick is the lease clock's look: it tells the holders that are lost,
// renews the lease when it is due, and sets its timer for the next look.
func (c *Client) tick() {
	pause(c.zk)
	now := time.Now()
	c.mu.Lock()
	var lost []Holder
	var causes []error
	var next time.Time
	minT := time.Duration(0)
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for h := range c.holders {
		if why := c.judgeLocked(h, now); why != nil {
			lost, causes = append(lost, h), append(causes, why)
			delete(c.holders, h)
			continue
		}
		t, granted := c.Timeout(h.Limit(), h.Session())
		if !granted {
			soonest(now.Add(UnknownTimeoutPoll)) // a disconnection is a loss
		}
		if t <= 0 {
			continue
		}
		minT = minNonZero(minT, t)
		soonest(c.lease.since.Add(t - HeadStart(t)))
	}
	if minT > 0 {
		// Renew when the lease is a keepalive interval old, with at most
		// one keepalive in flight, and the next sent an interval after the
		// last, or soon if that one went unanswered (a disconnected
		// client fails them at once, or holds them until it reconnects).
		every := RenewInterval(minT)
		due := c.lease.since.Add(every)
		if c.lease.session != c.zk.SessionID() {
			due = now
		}
		if c.lease.since.Before(c.pinged) {
			due = later(due, c.pinged.Add(min(every, retryUnanswered)))
		} else {
			due = later(due, c.pinged.Add(every))
		}
		switch {
		case c.pinging:
			// The keepalive in flight looks again when it returns.
		case !now.Before(due):
			c.pinging, c.pinged = true, now
			c.Ref()
			go c.keepalive()
		default:
			soonest(due)
		}
		// And at least every keepalive interval: timers run on the
		// monotonic clock, which stands still while the machine is
		// suspended, so a deadline set before a suspend would fire late;
		// each look reads the wall clock too (see elapsed).
		soonest(now.Add(every))
	}
	switch d := max(next.Sub(now), time.Millisecond); {
	case next.IsZero():
		c.stopIfIdleLocked()
	case c.timer == nil:
		c.timer = time.AfterFunc(d, c.tick)
	default:
		c.timer.Reset(d)
	}
	c.mu.Unlock()
	for i, h := range lost {
		h.Lost(causes[i])
	}
}

// keepalive renews the lease with one sync, then looks again.
func (c *Client) keepalive() {
	defer c.Unref()
	c.Sync(context.Background())
	c.mu.Lock()
	c.pinging = false
	c.mu.Unlock()
	c.tick()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minNonZero(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}
