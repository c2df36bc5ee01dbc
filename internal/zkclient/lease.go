package zkclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// When is a grant lost? The promise is that its holder is told before
// another client can be granted the lock. Being told means that Done
// closes, Err fails, and WithWrite's function sees its context cancelled.
// Another client can be granted the lock only once our node is gone.
// Either someone deleted it, or the server did when it expired our
// session.
//
// # The lease
//
// A ZooKeeper server expires a session T after it last heard from the
// client, never sooner. T is the session timeout the server granted. Every
// packet from the client renews the session. The server rounds the expiry
// up to its next tick. Now take a request sent at time s by our clock, and
// answered in the session. The server received it after s, so the answer
// proves that the session lives until s + T by our clock.
//
// The lock keeps that proof itself, per connection. It records when it
// sent each request that counts. The latest one answered in the session is
// the lease. The lock never infers the lease from go-zookeeper's
// connection state, nor from packets received. Every packet resets
// go-zookeeper's read deadline, watch notifications included. But a
// notification proves that the server sent something, not that it heard
// from us. A library cannot see go-zookeeper's own pings.
//
// Only writes and syncs count. In an ensemble, the leader alone expires
// sessions. A follower tells the leader which sessions it heard from only
// in its replies to the leader's pings. Those come every tickTime/2, and
// Learner.ping answers them. A follower cut off from the leader goes on
// answering reads for up to syncLimit ticks. Meanwhile the leader may
// expire our session, so a read proves nothing. A follower passes a write
// or a sync on to the leader, and answers only after the leader has. So
// the answer proves that the follower was in touch with the leader after
// s. It still does not prove that the leader heard of us. If the follower
// loses the leader right after answering, what it heard since its last
// ping reply is never relayed. The leader may then expire the session
// before s + T, by up to tickTime/2 plus the gap between our requests.
//
// # The keepalive and the head start
//
// While a grant is held on a connection, the lock sends a sync every T/16,
// unless a write renewed the lease meanwhile. That is one request per
// connection, however many grants it holds. A keepalive that goes
// unanswered is tried again within retryUnanswered, 100 ms. So while
// go-zookeeper reconnects, a keepalive waits in its queue, and goes out
// the moment it has reconnected.
//
// A grant is lost at the lease's end minus the head start H. HeadStart
// gives H = T/4. So a connection may stay silent for up to T − H − T/16
// without losing its grants. A partition, a server restart and a leader
// election are such silences. The figure in seconds is in
// docs/guarantees.md, "Server loss is ridden out".
//
// On a standalone server, the holder has all of H to stop before the
// session can expire. In an ensemble, the server it talks to may lose
// touch with the leader at the worst moment. The leader then expires the
// session earlier than the lease says. How much earlier depends on the
// server the client talks to:
//   - A follower: up to tickTime/2 plus the gap between our requests, as
//     above.
//   - An observer behind an ObserverMaster: up to a tick plus that gap.
//     There are two relays.
//   - A deposed leader: up to a tick. It answers syncs as reads until it
//     sees it has lost its quorum, after syncLimit+1 ticks. The followers
//     give it up after syncLimit ticks. The new leader then counts every
//     session's T afresh.
//
// Take T of at least eight ticks, so that a tick is at most T/8. The gap
// between our requests is at most the keepalive interval, T/16. Then each
// of these is at most T/8 + T/16, which RelayAllowance returns. So the
// holder has at least T/16 left. Grant.Deadline reports the earliest expiry
// under that assumption. Below eight ticks, such a worst case can let
// another client in first. The fencing token is the defence that does not
// depend on time. What eight ticks are with the server's defaults is in
// docs/guarantees.md.
//
// Time is the monotonic clock, or the wall clock where that says more.
// The monotonic clock stands still while a machine is suspended, and the
// server's clock does not. A wall clock stepped forward can only end
// grants early. Err and Done consult the clock at every call. So a paused
// process sees the loss at its first check after resuming, even before
// the clock's timer has fired. SIGSTOP and a stopped VM are such pauses.
//
// # Which T
//
// The T of the lease is the one the server granted, never the one asked
// for. A server clamps what a client asks for to its own range, from
// minSessionTimeout to maxSessionTimeout, by default 2 to 20 ticks. And a
// reconnection may land on a server that grants less.
//
// A connection made by rwlock.Dial reads the granted T from the server's
// answer to every handshake; see dial.go. A grant is judged by the
// smallest T granted in its session so far, capped by WithSessionTimeout
// if given. The judgement, the keepalive pace, the next look and
// Grant.Deadline all use that T. A change of T makes the clock look at
// once.
//
// An answered handshake renews the lease too. The server touched the
// session after the handshake was sent. A follower revalidates the session
// with the leader before it answers. So through a follower, the leader too
// touched the session after the handshake was sent. The comment after
// Handshakes, in dial.go, says why the lock takes the smallest T. It also
// covers the one case of a T the lock does not hear, an answer that is
// lost.
//
// On any other connection, go-zookeeper does not expose what the server
// granted. So the lock cannot check it, and it does not know T.
//
// # Without the granted T
//
// On a connection that does not tell T, any disconnection of a holder is
// a loss. That is the safe default of Curator's SUSPENDED rule. The lock
// checks for it at every Err and Done, and every UnknownTimeoutPoll. It
// catches a disconnection only once go-zookeeper has noticed it.
//
// With WithSessionTimeout(d), the lease clock runs there too, with d as
// an upper bound. The judgement, the keepalive pace and the next look use
// d as they would a granted T. A bound can end a grant, never keep one.
// The server may have granted less than d, so a disconnection is still a
// loss. And Deadline knows no time, since the session may expire at any
// moment.
//
// Say the server granted at least d at every handshake of the session.
// Then the lease by d ends no later than the real one. Every handshake
// matters, since each one sets the session's timeout anew. A
// reconnection to a member with a lower maxSessionTimeout grants less.
// Under that condition, a grant is lost with the head start before the
// server can expire its session. That holds through a silent partition
// that go-zookeeper has not noticed, and through a pause. In an ensemble,
// the margins above need d of at least eight ticks. The keepalives go
// every d/16, and a tick must be at most d/8.
//
// Now say the smallest T granted in the session is below d but above
// 3d/4. A standalone server still cannot expire the session before the
// grant is lost, at 3d/4 of silence. But the head start is only T − 3d/4.
// At 3d/4 or below, nothing is promised.
//
// The clock is consulted before go-zookeeper's state. So a process back
// from a pause sees its loss even while go-zookeeper still says it has
// its session. That happens when its receive loop has not yet read the
// server's close.
//
// Without either, the lock has only go-zookeeper's state, and keeps its
// blind spot. To close it, connect with Dial, or pass WithSessionTimeout.
//
// # Other causes
//
// After an expiry, go-zookeeper opens a new session. A session found
// replaced that way ends its grants at once. A node deleted by someone else
// is learnt from the watch on it, which fires when the next waiter's does.
// So no client can promise a head start for that cause. The fencing token,
// Grant.Token, is the defence.

// HeadStart returns how long before its session may expire a grant is
// declared lost, for a session timeout t. It is a quarter of t. See
// Grant.Done.
func HeadStart(t time.Duration) time.Duration {
	// mutant: headstart
	return t / 4
}

// RelayAllowance is how much earlier than the lease's end the leader may
// expire a session. That happens when the session's server lost touch
// with the leader at the worst moment. It is at most a tick plus the
// keepalive interval, for a session of eight ticks or more. The proof in
// lease.go gives the steps.
func RelayAllowance(t time.Duration) time.Duration { return t/8 + RenewInterval(t) }

// retryUnanswered is how soon a keepalive that was not answered is tried
// again, at most.
const retryUnanswered = 100 * time.Millisecond

// RenewInterval is how often the lease is renewed while it is needed.
func RenewInterval(t time.Duration) time.Duration { return t / 16 }

// UnknownTimeoutPoll is how often holders whose session timeout is
// unknown are judged by the connection's state.
const UnknownTimeoutPoll = 20 * time.Millisecond

// lease is what the requests of one connection prove. The session lives
// until since + T.
type lease struct {
	session int64
	since   time.Time // when the latest counting request answered in session was sent
}

// elapsed is the time from t to now. It reads the monotonic clock, or the
// wall clock if that says more; see above.
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

// leaseEndLocked returns the time until which session surely lives, for
// timeout t. It also reports whether the lease knows. It does not know for
// a session other than the one it last renewed. Call it with c.mu held.
func (c *Client) leaseEndLocked(session int64, t time.Duration) (time.Time, bool) {
	if t <= 0 || c.lease.session != session || c.lease.since.IsZero() {
		return time.Time{}, false
	}
	return c.lease.since.Add(t), true
}

// Timeout returns the session timeout t by which the lease clock judges a
// holder in session. The holder's lock caps t at limit, unless limit is 0.
// Timeout also reports whether the server granted at least t.
//
// On a connection that tells, granted is true, and t is the smallest
// timeout the server granted in the session, capped at limit. On any
// other connection, granted is false, and t is limit, an upper bound that
// only ends grants. When there is neither, t is 0.
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

// A Holder is what the lease clock judges. It is one node the lock holds,
// whatever the number of grants on it.
type Holder interface {
	// Session is the session that owns the holder's node.
	Session() int64
	// Limit caps the session timeout the holder is judged by. It is the
	// lock's WithSessionTimeout, or 0 for none. On a connection that does
	// not tell T, it is the bound the holder is judged by.
	Limit() time.Duration
	// Lost tells the holder it is lost, and why. The clock calls it
	// holding none of its locks, once for each time it finds the holder
	// lost. The holder ends itself on the first call, and is removed.
	Lost(cause error)
}

// handshake takes in an answer to a handshake sent at sent. It renews the
// lease, since the server touched the session after sent. And it makes the
// clock look at once, since the timeout may have changed. It runs on
// go-zookeeper's goroutine, so it only moves the timer.
func (c *Client) handshake(session int64, sent time.Time) {
	c.renew(session, sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil && len(c.holders) > 0 {
		c.timer.Reset(0)
	}
}

// Fresh reports whether session's lease still has more than the head
// start and margin to run, for timeout t.
func (c *Client) Fresh(session int64, t, margin time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.leaseEndLocked(session, t)
	return ok && elapsed(c.lease.since, time.Now()) < t-HeadStart(t)-margin
}

// AnsweredAt returns when the latest write, sync or handshake answered in
// session was sent, or the zero time if none was since the connection last
// changed session. The server ran that request after the time returned, and
// this client has read its answer. The answer may have come on any of the
// session's connections: a caller that needs one reads ConnectCount after.
func (c *Client) AnsweredAt(session int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease.session != session || session == 0 {
		return time.Time{}
	}
	return c.lease.since
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

// judgeLocked returns why h is lost at now. It returns nil if h is held,
// as far as the clock and the session can tell. Call it with c.mu held.
func (c *Client) judgeLocked(h Holder, now time.Time) error {
	session := h.Session()
	if c.zk.SessionID() != session {
		return zk.ErrSessionExpired // go-zookeeper silently made a new session
	}
	t, granted := c.Timeout(h.Limit(), session)
	// The clock first, since go-zookeeper's state lags behind a pause or
	// a silent partition, and the clock does not.
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
	// granted at least the bound. It may have granted less, and then a
	// disconnection may be the session's end.
	if !granted && c.zk.State() != zk.StateHasSession {
		return ErrDisconnected
	}
	return nil
}

// Judge tells h it is lost if the clock says so. The lock calls it at
// every Err and Done. The clock's timer judges every holder in time too.
func (c *Client) Judge(h Holder) {
	c.mu.Lock()
	why := c.judgeLocked(h, time.Now())
	c.mu.Unlock()
	if why != nil {
		h.Lost(why)
	}
}

// Deadline returns the earliest time at which the server may expire h's
// session, as far as the lease knows. It counts the worst case of an
// ensemble, RelayAllowance. It returns false if the lease does not know. A
// lease by a bound never knows, since the server may have granted less.
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

// tick is the lease clock's look. It tells the holders that are lost, and
// renews the lease when it is due. Then it sets its timer for the next
// look.
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
		// Renew when the lease is a keepalive interval old. At most one
		// keepalive is in flight. The next goes an interval after the
		// last, or soon if that one went unanswered. A disconnected client
		// fails keepalives at once, or holds them until it reconnects.
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
		// And look at least every keepalive interval. Timers run on the
		// monotonic clock, which stands still while the machine is
		// suspended. So a deadline set before a suspend would fire late.
		// Each look reads the wall clock too; see elapsed.
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
