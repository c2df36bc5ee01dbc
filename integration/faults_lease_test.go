package integration

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The lease tests: a holder must learn of a lost grant before another
// client can be granted the lock, however the partition falls among the
// packets the holder receives (issue 9), and must ride out a partition or
// disconnection that its session survives with room to spare.
//
// The rule they check, with T the session timeout: a request sent at s and
// answered proves the session alive until s+T; the library renews that
// lease every T/10 while grants are held and declares a grant lost at lease
// end minus a head start of T/4. Packets received prove nothing: a
// notification or ping reply shows that the server sent something, not
// that it heard from the holder.

var leaseReps = flag.Int("lease.reps", 3, "repetitions of each cut-after-a-frame test and of TestFaultPausedHolder")

// The session timeout of the cut-after-a-frame tests. go-zookeeper pings
// every T/3; a partition late in that cycle, right after a notification,
// leaves the server about T/3 since it last heard from the holder, more
// than the slack of a rule that trusts packets received (T/10 and change)
// plus the server's rounding of expiry up to its next tick (faultTick).
const cutTimeout = 4 * time.Second

// A WithWrite holder's lock directory gets a new waiter, whose create
// notifies the holder through the child watch its acquisition left (the
// test skips if none comes: the library no longer watches so); the
// partition starts right after that notification, late in the holder's
// ping cycle. The holder must learn of its loss before the waiter is
// granted.
func TestFaultCutAfterDirectoryNotification(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	srv := faultServer(t, 1) // its own: the times measured are the point
	var heads []time.Duration
	for i := range *leaseReps {
		t.Run(fmt.Sprint("rep", i), func(t *testing.T) {
			p := faultproxy.StartFramed(t, srv.Addr(0))
			holder := connect(t, p.Addr(), cutTimeout)
			other := connect(t, srv.Addr(0), cutTimeout)
			path := zktest.LockPath(t, "/it")
			hl, ol := holder.lock(t, path), other.lock(t, path)
			ctx := t.Context()

			h := holdWithWrite(t, ctx, hl)
			lastPing := lateInPingCycle(t, p, cutTimeout)
			pings := p.Next(faultproxy.PingReply)
			cut := p.BlackholeAfter(faultproxy.Notification)
			w := goAcquire(t, ctx, ol.Lock) // its create is the notification
			var cutAt time.Time
			select {
			case cutAt = <-cut:
			case <-time.After(5 * time.Second):
				waitNodeCount(t, other.conn, path, 2, 5*time.Second)
				t.Skip("the waiter queued, but no notification reached the holder: the WithWrite grant " +
					"left no child watch on its lock directory (TestFaultCutAfterAppNotification still covers a notification)")
			}
			r := raceAfterCut(t, cutAt, pings, lastPing, h.lost, w)
			heads = append(heads, r.head())
			heal(p)

			r.requireHolderFirst(t)
			require.ErrorIs(t, h.wait(t), rwlock.ErrLost, "WithWrite returns the loss")
			mustRelease(t, r.grant)
		})
	}
	t.Logf("head start (other client's grant − holder's loss) per repetition: %v", heads)
}

// A plain Lock holder watches its grant (Done) while the application, on
// the same *zk.Conn, has a watch of its own; the partition starts right
// after that watch's notification, late in the holder's ping cycle. The
// holder must learn of its loss before the waiter is granted.
func TestFaultCutAfterAppNotification(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	srv := faultServer(t, 1)
	var heads []time.Duration
	for i := range *leaseReps {
		t.Run(fmt.Sprint("rep", i), func(t *testing.T) {
			p := faultproxy.StartFramed(t, srv.Addr(0))
			holder := connect(t, p.Addr(), cutTimeout)
			other := connect(t, srv.Addr(0), cutTimeout)
			path := zktest.LockPath(t, "/it")
			hl, ol := holder.lock(t, path), other.lock(t, path) // WithSessionTimeout
			ctx := t.Context()

			g, err := hl.Lock(ctx)
			require.NoError(t, err)
			lost := closedAt(ctx, g.Done())
			waitWatched(t, srv, g)
			w := goAcquire(t, ctx, ol.Lock)
			waitNodeCount(t, other.conn, path, 2, 5*time.Second)

			// The application's node and its watch on it, beside the lock.
			app := path + "-app"
			_, err = other.conn.Create(app, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			_, _, appWatch, err := holder.conn.GetW(app)
			require.NoError(t, err)

			lastPing := lateInPingCycle(t, p, cutTimeout)
			pings := p.Next(faultproxy.PingReply)
			cut := p.BlackholeAfter(faultproxy.Notification)
			_, err = other.conn.Set(app, []byte("changed"), -1)
			require.NoError(t, err)
			r := raceAfterCut(t, waitCut(t, cut), pings, lastPing, lost, w)
			heads = append(heads, r.head())
			select {
			case ev := <-appWatch:
				require.Equal(t, zk.EventNodeDataChanged, ev.Type, "the application's watch fired")
			default:
				t.Fatal("the application's watch did not fire before the cut")
			}
			heal(p)

			r.requireHolderFirst(t)
			require.ErrorIs(t, g.Err(), rwlock.ErrLost)
			mustRelease(t, r.grant)
		})
	}
	t.Logf("head start (other client's grant − holder's loss) per repetition: %v", heads)
}

// The control: the partition starts right after a ping reply, the last
// packet in either direction, so that the server last heard from the
// holder when it answered. Rules old and new agree here; the holder must
// learn of its loss first.
func TestFaultCutAfterPingReply(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	srv := faultServer(t, 1)
	var heads []time.Duration
	for i := range *leaseReps {
		t.Run(fmt.Sprint("rep", i), func(t *testing.T) {
			p := faultproxy.StartFramed(t, srv.Addr(0))
			holder := connect(t, p.Addr(), cutTimeout)
			other := connect(t, srv.Addr(0), cutTimeout)
			path := zktest.LockPath(t, "/it")
			hl, ol := holder.lock(t, path), other.lock(t, path)
			ctx := t.Context()

			h := holdWithWrite(t, ctx, hl)
			w := goAcquire(t, ctx, ol.Lock)
			waitNodeCount(t, other.conn, path, 2, 5*time.Second)
			cut := p.BlackholeAfter(faultproxy.PingReply)
			r := raceAfterCut(t, waitCut(t, cut), nil, time.Time{}, h.lost, w)
			heads = append(heads, r.head())
			heal(p)

			r.requireHolderFirst(t)
			require.ErrorIs(t, h.wait(t), rwlock.ErrLost, "WithWrite returns the loss")
			mustRelease(t, r.grant)
		})
	}
	t.Logf("head start (other client's grant − holder's loss) per repetition: %v", heads)
}

// lateInPingCycle waits for the next ping reply to reach the holder through
// p, then until just before the holder's next ping (go-zookeeper pings
// every third of the session timeout): for a client that sends nothing
// else, the moment of the cycle when the server last heard from it longest
// ago. That waiting places the fault; it returns the time of the ping
// reply.
func lateInPingCycle(t *testing.T, p *faultproxy.Proxy, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	select {
	case at = <-p.Next(faultproxy.PingReply):
	case <-time.After(timeout):
		t.Fatalf("no ping reply within the session timeout %v", timeout)
	}
	time.Sleep(time.Until(at.Add(timeout / 3 * 9 / 10)))
	return at
}

// cutRace is what one repetition measured, on the test process's clock.
type cutRace struct {
	cut       time.Time     // the frame after which the partition began was forwarded
	lastPing  time.Time     // the last ping reply the holder got, up to the cut
	lost      time.Time     // the holder learned of its loss
	grantedAt time.Time     // the other client's Lock returned
	grant     *rwlock.Grant // what it returned
}

// head is the holder's head start: from its loss to the other client's
// grant. Negative, it is the overlap of the two grants.
func (r cutRace) head() time.Duration { return msec(r.grantedAt.Sub(r.lost)) }

// waitCut waits for a cut armed with BlackholeAfter and returns its time.
func waitCut(t *testing.T, cut <-chan time.Time) time.Time {
	t.Helper()
	select {
	case at := <-cut:
		return at
	case <-time.After(10 * time.Second):
	}
	t.Fatal("the frame to cut after never came")
	return time.Time{}
}

// raceAfterCut waits for both the holder's loss and the other client's
// grant after the cut at cutAt, and logs their times. pings, if not nil, is
// a p.Next(PingReply) armed with the cut: a ping that slipped through
// before the cut replaces lastPing. With neither, the cut is taken to have
// come after a ping reply.
func raceAfterCut(t *testing.T, cutAt time.Time, pings <-chan time.Time, lastPing time.Time, lost <-chan time.Time, w *acquisition) cutRace {
	t.Helper()
	r := cutRace{cut: cutAt, lastPing: lastPing}
	if lastPing.IsZero() && pings == nil {
		r.lastPing = r.cut // the cut came after a ping reply
	}
	select {
	case at := <-pings:
		if !at.After(r.cut) {
			r.lastPing = at
		}
	default:
	}
	limit := time.After(cutTimeout + 2*faultTick + 5*time.Second)
	returned := w.done
	for r.lost.IsZero() || r.grantedAt.IsZero() {
		select {
		case r.lost = <-lost:
		case <-returned:
			returned = nil // closed: take the result once
			g, err := w.wait(t)
			require.NoError(t, err)
			r.grant, r.grantedAt = g, w.at
		case <-limit:
			t.Fatalf("partitioned for %v: holder's loss known: %v; other client granted: %v",
				msec(time.Since(r.cut)), !r.lost.IsZero(), !r.grantedAt.IsZero())
		}
	}
	t.Logf("last ping reply → cut %v; cut → holder's loss %v, → other client's grant %v: head start %v (session timeout %v, tick %v)",
		msec(r.cut.Sub(r.lastPing)), msec(r.lost.Sub(r.cut)), msec(r.grantedAt.Sub(r.cut)), r.head(), cutTimeout, faultTick)
	return r
}

// requireHolderFirst is the promise: the holder learned of its loss
// strictly before the other client was granted, which happened once the
// holder's session had expired.
func (r cutRace) requireHolderFirst(t *testing.T) {
	t.Helper()
	require.True(t, r.lost.Before(r.grantedAt),
		"the holder learned of its loss %v AFTER another client was granted", -r.head())
	require.LessOrEqual(t, r.grantedAt.Sub(r.cut), cutTimeout+2*faultTick+time.Second,
		"the other client must be granted once the holder's session has expired")
}

// writeHolder is a WithWrite call on a goroutine of its own, holding until
// its function's context ends.
type writeHolder struct {
	lost <-chan time.Time // when the function's context ended
	done chan struct{}    // closed when WithWrite has returned, with err
	err  error
}

// holdWithWrite runs WithWrite until its function's context ends, and
// returns once the function runs. Cleanup ends a holder still holding and
// waits for it.
func holdWithWrite(t *testing.T, ctx context.Context, l *rwlock.RWLock) *writeHolder {
	t.Helper()
	held := make(chan struct{})
	lost := make(chan time.Time, 1)
	stop := make(chan struct{})
	h := &writeHolder{lost: lost, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.err = l.WithWrite(ctx, func(fctx context.Context) error {
			close(held)
			select {
			case <-fctx.Done():
				lost <- time.Now()
				return fctx.Err()
			case <-stop:
				return nil
			}
		})
	}()
	t.Cleanup(func() {
		close(stop)
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Errorf("WithWrite did not return within 30s of the test's end")
		}
	})
	select {
	case <-held:
	case <-h.done:
		t.Fatalf("WithWrite returned without holding: %v", h.err)
	case <-time.After(10 * time.Second):
		t.Fatal("WithWrite did not hold within 10s")
	}
	return h
}

// wait waits for WithWrite to return and returns its error.
func (h *writeHolder) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-h.done:
		return h.err
	case <-time.After(10 * time.Second):
	}
	t.Fatal("WithWrite did not return within 10s of its loss")
	return nil
}

// A holder that knows its session timeout (10s) rides out what its session
// survives with room to spare: a partition of half the timeout, healed as a
// network heals (the connection is dropped, the client redials 1s later);
// or a cut connection and a server that refuses connections for a third of
// the timeout. Its grant survives: Done stays open past the moment the
// lease it had before the fault would have ended, Err is nil, the other
// client is still kept out, and Release deletes the node.
func TestFaultPartitionRiddenOut(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	srv := sharedServer(t)
	const timeout = 10 * time.Second
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, p *faultproxy.Proxy, conn *zk.Conn)
	}{
		{"blackhole", func(t *testing.T, p *faultproxy.Proxy, conn *zk.Conn) {
			p.Blackhole()
			time.Sleep(timeout / 2) // the partition
			heal(p)
			waitDisconnected(t, conn)
		}},
		{"refused", func(t *testing.T, p *faultproxy.Proxy, conn *zk.Conn) {
			p.Refuse(true)
			p.Cut()
			waitDisconnected(t, conn)
			time.Sleep(timeout / 3) // the outage
			p.Refuse(false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := proxied(t, srv.Addr(0))
			conn := connect(t, p.Addr(), timeout).conn
			other := connect(t, srv.Addr(0), 0)
			path := zktest.LockPath(t, "/it")
			l, err := rwlock.New(conn, path)
			require.NoError(t, err)
			ol := other.lock(t, path)
			ctx := t.Context()

			g, err := l.Lock(ctx)
			require.NoError(t, err)
			done := closedAt(ctx, g.Done())
			waitWatched(t, srv, g)
			session := conn.SessionID()

			start := time.Now()
			tc.fault(t, p, conn)
			over := time.Since(start)
			waitSession(t, conn, session, 10*time.Second)
			back := time.Since(start)
			// Hold on until a lease taken just before the fault would have
			// ended (and the grant with it): only a lease renewed once
			// the session was back keeps the grant past that.
			keep := time.Until(start.Add(timeout*3/4 + 500*time.Millisecond))
			select {
			case at := <-done:
				t.Fatalf("grant lost %v after the fault began (fault over after %v, session back after %v): %v",
					msec(at.Sub(start)), msec(over), msec(back), g.Err())
			case <-time.After(keep):
			}
			require.NoError(t, g.Err())
			_, err = ol.TryLock(ctx)
			require.ErrorIs(t, err, rwlock.ErrWouldBlock, "the grant still holds the lock")
			t.Logf("fault began → over %v, → session back %v; grant kept until %v and beyond",
				msec(over), msec(back), msec(time.Since(start)))
			mustRelease(t, g)
			waitNodes(t, other.conn, path, 5*time.Second)
			require.Equal(t, session, conn.SessionID())
		})
	}
}

// waitDisconnected waits until conn has noticed that its connection was
// cut, so that a wait for its session that follows is not fooled.
func waitDisconnected(t *testing.T, conn *zk.Conn) {
	t.Helper()
	zktest.WaitFor(t, 2*time.Second, func() bool { return conn.State() != zk.StateHasSession }, "the client should notice the cut")
}
