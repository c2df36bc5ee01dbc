package integration

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A partitioned holder must learn of its loss before another client can be
// granted the lock, and that client must be granted once the holder's
// session expires: within the session timeout, the server's tick and a
// margin.
func TestFaultPartitionHolderLearnsFirst(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1) // its own: the times measured are the point
	p := proxied(t, srv.Addr(0))
	holder := connect(t, p.Addr(), timeout)
	other := connect(t, srv.Addr(0), timeout)
	path := zktest.LockPath(t, "/it")
	hl, ol := holder.lock(t, path), other.lock(t, path)
	ctx := t.Context()

	g, err := hl.Lock(ctx)
	require.NoError(t, err)
	done := closedAt(ctx, g.Done())
	waitWatched(t, srv, g)
	waiter := goAcquire(t, ctx, ol.Lock)
	waitNodeCount(t, other.conn, path, 2, 5*time.Second)
	session := holder.conn.SessionID()

	start := time.Now()
	p.Blackhole()
	var doneAt, grantAt time.Time
	var wg *rwlock.Grant
	returned := waiter.done
	limit := time.After(timeout + 2*faultTick + 5*time.Second)
	for doneAt.IsZero() || grantAt.IsZero() {
		select {
		case doneAt = <-done:
		case <-returned:
			returned = nil // closed: take the result once
			wg, err = waiter.wait(t)
			require.NoError(t, err)
			grantAt = waiter.at
		case <-limit:
			t.Fatalf("partitioned for %v: holder's Done closed: %v; other client granted: %v",
				msec(time.Since(start)), !doneAt.IsZero(), !grantAt.IsZero())
		}
	}
	heal(p)
	t.Logf("partition → holder's Done %v, → other client's grant %v (%v later); session timeout %v, tick %v",
		msec(doneAt.Sub(start)), msec(grantAt.Sub(start)), msec(grantAt.Sub(doneAt)), timeout, faultTick)

	require.True(t, doneAt.Before(grantAt),
		"the holder learned of its loss %v AFTER another client was granted", grantAt.Sub(doneAt))
	require.ErrorIs(t, g.Err(), rwlock.ErrLost)
	require.LessOrEqual(t, grantAt.Sub(start), timeout+2*faultTick+time.Second,
		"the other client must be granted once the holder's session has expired")
	require.NoError(t, g.Release(ctx), "releasing a lost grant does nothing")

	// The holder's session expired; go-zookeeper made it a new one, and the
	// lock works on it.
	zktest.WaitFor(t, 10*time.Second, func() bool {
		return holder.conn.State() == zk.StateHasSession && holder.conn.SessionID() != session
	}, "the holder should reconnect with a new session")
	mustRelease(t, wg)
	g2, err := hl.Lock(ctx)
	require.NoError(t, err)
	mustRelease(t, g2)
	waitNodes(t, other.conn, path, 5*time.Second)
}

// waitWatched checks that a grant is held. A grant watches its node from
// the moment it is returned (on its directory, with the listing that
// granted it, or on its node, with the watch a waiter sets), so there is no
// watch request left in flight for a partition to swallow.
func waitWatched(t *testing.T, _ *zkserver.Cluster, g *rwlock.Grant) {
	t.Helper()
	require.NoError(t, g.Err())
}

// A holder on a connection made by rwlock.Dial, which learns the timeout
// the server granted, rides out a partition or disconnection much shorter
// than a third of it. One on a connection made by zk.Connect does not know
// it, even when told with WithSessionTimeout (the server may have granted
// less): it loses its grant on any disconnection, at once, and deletes its
// node once it has its session back.
//
// A blackhole shorter than a third of the timeout never disconnects the
// client (it drops a connection after 2/3 of the timeout without a packet):
// only the cases that cut the connection tell a lock that knows the timeout
// from one that does not.
func TestFaultShortDisconnection(t *testing.T) {
	tier.NoRace(t, zk35)
	srv := sharedServer(t)
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		conn     string // "connect": zk.Connect; "dial": rwlock.Dial
		tell     bool   // WithSessionTimeout
		cut      bool   // cut the connection; else blackhole it for timeout/6
		wantLost bool
	}{
		{name: "SessionTimeout/blackhole", timeout: 6 * time.Second, conn: "connect", tell: true},
		{name: "SessionTimeout/cut", timeout: 9 * time.Second, conn: "connect", tell: true, cut: true, wantLost: true},
		{name: "Dial/blackhole", timeout: 6 * time.Second, conn: "dial"},
		{name: "Dial/cut", timeout: 9 * time.Second, conn: "dial", cut: true},
		{name: "NoTimeout/cut", timeout: 9 * time.Second, conn: "connect", cut: true, wantLost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := proxied(t, srv.Addr(0))
			path := zktest.LockPath(t, "/it")
			var conn *zk.Conn
			var l *rwlock.RWLock
			var err error
			if tc.conn == "dial" {
				conn = connect(t, p.Addr(), tc.timeout).conn
				l, err = rwlock.New(conn, path)
			} else {
				c := connect(t, p.Addr(), tc.timeout, withZKConnect())
				conn = c.conn
				if tc.tell {
					l = c.lock(t, path, rwlock.WithSessionTimeout(tc.timeout))
				} else {
					l, err = rwlock.New(conn, path)
				}
			}
			require.NoError(t, err)
			other := connect(t, srv.Addr(0), 0)
			ol := other.lock(t, path)
			ctx := t.Context()

			g, err := l.Lock(ctx)
			require.NoError(t, err)
			done := closedAt(ctx, g.Done())
			waitWatched(t, srv, g)
			session := conn.SessionID()

			start := time.Now()
			if tc.cut {
				p.Cut()
				zktest.WaitFor(t, 2*time.Second, func() bool { return conn.State() != zk.StateHasSession }, "the client should notice the cut")
			} else {
				p.Blackhole()
				time.Sleep(tc.timeout / 6) // the partition
				p.Pass()
			}

			if tc.wantLost {
				var doneAt time.Time
				select {
				case doneAt = <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("a lock on a connection not made by Dial kept its grant across a disconnection")
				}
				require.ErrorIs(t, g.Err(), rwlock.ErrLost)
				// go-zookeeper redials its only server after 1s: the loss
				// is known before the client could even be back.
				require.Less(t, doneAt.Sub(start), time.Second, "the loss should be known at once")
				waitSession(t, conn, session, 10*time.Second)
				waitNodes(t, other.conn, path, 10*time.Second) // deleted by the lock ...
				gone := time.Since(start)
				require.Equal(t, session, conn.SessionID(), "... with its session alive, not by expiry")
				t.Logf("cut → Done %v, → node deleted %v (session %#x still alive)", msec(doneAt.Sub(start)), msec(gone), session)
				g2, err := ol.TryLock(ctx)
				require.NoError(t, err, "nothing left to block the other client")
				mustRelease(t, g2)
				return
			}

			waitSession(t, conn, session, 10*time.Second)
			back := time.Since(start)
			select {
			case at := <-done:
				t.Fatalf("grant lost %v after the fault began (session back after %v): %v", msec(at.Sub(start)), msec(back), g.Err())
			case <-time.After(500 * time.Millisecond): // several polls of the monitor after the session is back
			}
			require.NoError(t, g.Err())
			_, err = ol.TryLock(ctx)
			require.ErrorIs(t, err, rwlock.ErrWouldBlock, "the grant still holds the lock")
			waitNodes(t, other.conn, path, time.Second, nodeName(g.Node()))
			t.Logf("fault began → fault over and session confirmed %v; grant kept", msec(back))
			mustRelease(t, g)
			waitNodes(t, other.conn, path, 5*time.Second)
		})
	}
}

// Release while the holder is cut off fails, but the node is deleted in the
// background once the session is back: no node of a live session is left.
func TestFaultReleaseWhilePartitioned(t *testing.T) {
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	for _, tc := range []struct {
		name      string
		blackhole bool // the delete is swallowed; else the client cannot reach the server at all
	}{
		{name: "blackholed", blackhole: true},
		{name: "disconnected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 9 * time.Second
			p := proxied(t, srv.Addr(0))
			holder := connect(t, p.Addr(), timeout)
			checker := connect(t, srv.Addr(0), 0)
			path := zktest.LockPath(t, "/it")
			ctx := t.Context()
			g, err := holder.lock(t, path).Lock(ctx)
			require.NoError(t, err)
			session := holder.conn.SessionID()

			var rerr error
			if tc.blackhole {
				p.Blackhole()
				rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				rerr = g.Release(rctx)
				cancel()
				require.ErrorIs(t, rerr, context.DeadlineExceeded)
			} else {
				p.Refuse(true)
				p.Cut()
				zktest.WaitFor(t, 2*time.Second, func() bool { return holder.conn.State() != zk.StateHasSession }, "the client should notice the cut")
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				rerr = g.Release(rctx)
				cancel()
				require.Error(t, rerr)
				require.NotErrorIs(t, rerr, context.DeadlineExceeded, "the connection loss should fail the delete at once")
			}
			t.Logf("Release: %v", rerr)
			require.ErrorIs(t, g.Err(), rwlock.ErrReleased)
			waitNodes(t, checker.conn, path, time.Second, nodeName(g.Node())) // the delete never reached the server

			start := time.Now()
			if tc.blackhole {
				heal(p)
			} else {
				p.Refuse(false)
			}
			waitNodes(t, checker.conn, path, 10*time.Second)
			require.Equal(t, session, holder.conn.SessionID(), "deleted by the client, with its session alive")
			t.Logf("partition healed → node deleted in the background %v", msec(time.Since(start)))
		})
	}
}
