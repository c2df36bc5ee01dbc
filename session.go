package rwlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// How long may a holder stay disconnected before it must assume the worst?
//
// The server expires a session T (the granted session timeout) after it last
// heard from the client, and only then can another client be granted the
// lock. go-zookeeper pings every T/3 and closes the connection when it has
// read nothing for 2T/3. So when the client sees itself disconnected, the
// server heard from it no more than 2T/3 plus one round trip earlier: at
// least T/3 minus a round trip remains before the session can expire. A
// holder that has not regained its session within that margin, less our
// polling delay and an allowance for round trips and for a busy machine
// delaying our goroutines (T/10 + 100ms), declares the grant lost. When T is unknown we cannot compute the margin, and any
// disconnection is a loss: Curator's SUSPENDED rule.
//
// One case escapes the rule: a one-way partition that loses the client's
// packets but delivers the server's. A watch notification arriving then
// pushes go-zookeeper's read deadline on while the server hears nothing.
// Watches fire once, so only the few events already due can do that; the
// fencing token (Grant.Token) is the defence that does not depend on time.
//
// lossGrace returns that margin for a session timeout t (0: unknown) and a
// polling interval poll.
func lossGrace(t, poll time.Duration) time.Duration {
	if t <= 0 {
		return 0
	}
	return max(t/3-poll-t/10-100*time.Millisecond, 0)
}

// pollInterval is how often a holder's monitor looks at the connection
// state: go-zookeeper reports state changes only to the channel returned by
// zk.Connect, which belongs to the caller.
func pollInterval(t time.Duration) time.Duration {
	if t <= 0 {
		return 20 * time.Millisecond
	}
	return min(max(t/40, 10*time.Millisecond), 100*time.Millisecond)
}

// sessionTimeout is the smallest session timeout we know of, 0 if none.
func (l *RWLock) sessionTimeout() time.Duration {
	t := l.timeout
	if l.granted != nil {
		if g := l.granted(); g > 0 && (t == 0 || g < t) {
			t = g
		}
	}
	return t
}

// health tracks how long a holder's connection has been without its
// session, and decides when a grant is lost.
type health struct {
	session int64
	grace   time.Duration
	lastUp  time.Time // last time the session was seen connected
}

var errDisconnected = errors.New("disconnected")

func (h *health) check(c zkConn, now time.Time) error {
	if c.SessionID() != h.session {
		return zk.ErrSessionExpired // go-zookeeper silently made a new session
	}
	if c.State() == zk.StateHasSession {
		h.lastUp = now
		return nil
	}
	if down := now.Sub(h.lastUp); down >= h.grace {
		return fmt.Errorf("%w for %v, long enough for the server to expire the session", errDisconnected, down.Round(time.Millisecond))
	}
	return nil
}

// backoff spaces out retries after a connection loss, and notices a
// connection that its owner closed for good.
type backoff struct{ next time.Duration }

var errConnClosed = fmt.Errorf("%w: the *zk.Conn was closed", zk.ErrConnectionClosed)

// wait sleeps, longer each time, and then until the client has a session
// again. A request made while go-zookeeper reconnects would wait in its
// queue anyway, and sent the moment it reconnects, it races with
// go-zookeeper re-registering its watches (an upstream data race on
// lastZxid, go-zookeeper/zk#35).
func (b *backoff) wait(ctx context.Context, c zkConn) error {
	b.next = min(max(2*b.next, 10*time.Millisecond), 500*time.Millisecond)
	if err := sleep(ctx, b.next); err != nil {
		return err
	}
	suspect := false
	for {
		switch c.State() {
		case zk.StateHasSession:
			return nil
		case zk.StateDisconnected:
			// While it reconnects, go-zookeeper passes through this state
			// in an instant; it stays in it only after Close.
			if suspect {
				return errConnClosed
			}
			suspect = true
		default:
			suspect = false
		}
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
