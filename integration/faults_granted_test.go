package integration

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The lease clock must use the session timeout the server granted, never
// more (internal/zkclient/lease.go, "Which T"). Each test here gives the lock a reason to
// believe more than the server granted, cuts the holder off, and checks
// that the holder is told before another client is granted the lock.

var grantedTrials = flag.Int("granted.trials", 2, "trials of each granted-timeout test")

// A reconnection lands on a member that grants less (it was restarted with
// a lower maxSessionTimeout). The holder's grant is then judged, paced and
// reported by the smaller timeout. The same holds when the application
// silenced go-zookeeper's logger, from which the lock once learnt T.
func TestFaultGrantedReconnectShorter(t *testing.T) {
	const asked, lower = 24 * time.Second, 3 * time.Second
	cl := faultServer(t, 3)
	// Member 2 restarted with a lower maximum.
	require.NoError(t, cl.SetSessionLimits(2, time.Second, lower))
	require.NoError(t, cl.Stop(2))
	require.NoError(t, cl.Start(t.Context(), 2))
	for _, silenced := range []bool{false, true} {
		name := "Logger"
		if silenced {
			name = "SetLogger"
		}
		t.Run(name, func(t *testing.T) {
			for i := range *grantedTrials {
				t.Run(fmt.Sprint("trial", i), func(t *testing.T) {
					home, low := proxied(t, cl.Addr(0)), proxied(t, cl.Addr(2))
					conn := dialZK(t, []string{home.Addr(), low.Addr()}, asked, nil, newHomeFirst([]string{home.Addr(), low.Addr()}, 0))
					if silenced {
						conn.SetLogger(quietZK{})
					}
					shorterGrantCutOff(t, cl, conn, home, low, asked, lower)
				})
			}
		})
	}
}

// shorterGrantCutOff moves conn's holder from home to low, which grants
// lower, checks what its grant reports, then partitions it and races it
// against a waiter on another member.
//
// The session may outlive the lower timeout: home relays its last touch of
// the session to the leader, with its own timeout, at its next ping, which
// may come after low's revalidation. That only makes the session live
// longer; it is why the lock takes the smallest timeout granted in the
// session (internal/zkclient/dial.go), since a relay can shorten it just as well.
func shorterGrantCutOff(t *testing.T, cl *zkserver.Cluster, conn *zk.Conn, home, low *faultproxy.Proxy, asked, lower time.Duration) {
	ctx := t.Context()
	path := zktest.LockPath(t, "/it")
	l, err := rwlock.New(conn, path)
	require.NoError(t, err)
	g, err := l.Lock(ctx)
	require.NoError(t, err)
	session := conn.SessionID()

	home.Refuse(true)
	home.Cut()
	zktest.WaitFor(t, 20*time.Second, func() bool {
		return conn.Server() == low.Addr() && conn.State() == zk.StateHasSession
	}, "the client should reconnect through %s", low.Addr())
	require.Equal(t, session, conn.SessionID(), "the session must have survived")
	back := time.Now()
	deadline, ok := g.Deadline()
	switch {
	case g.Err() != nil:
		// Judged by the smaller timeout, the lease from before the
		// move may already be too old: a loss at the reconnection is
		// safe, and nothing is left to race.
		t.Logf("lost at the reconnection: %v", g.Err())
		waitNodes(t, conn, path, 10*time.Second)
		return
	case ok:
		require.False(t, deadline.After(back.Add(lower)),
			"Deadline %v after the reconnection, beyond the %v granted", msec(deadline.Sub(back)), lower)
	}
	done := closedAt(ctx, g.Done())

	other := connect(t, cl.Addr(1), 0)
	w := acquireAsync(ctx, other.lock(t, path), rwlock.Write)
	waitNodeCount(t, other.conn, path, 2, 10*time.Second)
	low.Blackhole()
	cutAt := time.Now()
	var r outcome
	select {
	case r = <-w:
		require.NoError(t, r.err)
	case <-time.After(asked + 10*time.Second):
		t.Fatalf("not granted: holder session %#x (state %v, Err %v), nodes %v, other's session %#x",
			session, conn.State(), g.Err(), describeNodes(other.conn, path), other.conn.SessionID())
	}
	requireToldFirst(t, g, done, r, cutAt)
	mustRelease(t, r.g)
	low.Pass()
}

// requireToldFirst checks that the holder of g, cut off at cutAt, was
// told of its loss (done) before the other client's grant r returned.
func requireToldFirst(t *testing.T, g *rwlock.Grant, done <-chan time.Time, r outcome, cutAt time.Time) {
	t.Helper()
	var told time.Time
	select {
	case told = <-done:
	default:
		t.Fatalf("the other client was granted %v after the cut, and the holder has not been told (Err %v)",
			msec(r.at.Sub(cutAt)), g.Err())
	}
	require.True(t, told.Before(r.at), "the holder was told %v after the other client was granted", msec(told.Sub(r.at)))
	require.ErrorIs(t, g.Err(), rwlock.ErrLost)
	t.Logf("cut → holder told %v, → other granted %v (told %v before)",
		msec(told.Sub(cutAt)), msec(r.at.Sub(cutAt)), msec(r.at.Sub(told)))
}

// A connection asks for more than the server's maximum. Made by Dial, it
// learns what the server granted; made by zk.Connect, the lock cannot know
// it and treats any disconnection as a loss, whatever WithSessionTimeout
// says.
func TestFaultGrantedAskedMoreThanMax(t *testing.T) {
	const asked, maxGranted = 4 * time.Second, 2 * time.Second
	srv := zkserver.Start(t, zkserver.Config{TickTime: faultTick, MinSessionTimeout: time.Second, MaxSessionTimeout: maxGranted})
	for _, how := range []string{"Dial", "Connect"} {
		t.Run(how, func(t *testing.T) {
			for i := range *grantedTrials {
				t.Run(fmt.Sprint("trial", i), func(t *testing.T) {
					ctx := t.Context()
					path := zktest.LockPath(t, "/it")
					p := proxied(t, srv.Addr(0))
					var holder *client
					var l *rwlock.RWLock
					if how == "Dial" {
						holder = connect(t, p.Addr(), asked)
						l = holder.lock(t, path)
					} else {
						holder = connectZK(t, p.Addr(), asked)
						l = holder.lock(t, path, rwlock.WithSessionTimeout(asked))
					}
					_, _, granted, _ := holder.session.Session()
					require.Equal(t, maxGranted, granted, "the server clamps the timeout")
					g, err := l.Lock(ctx)
					require.NoError(t, err)
					if d, ok := g.Deadline(); ok {
						require.False(t, d.After(time.Now().Add(maxGranted)), "Deadline beyond the timeout granted")
					}
					done := closedAt(ctx, g.Done())

					other := connect(t, srv.Addr(0), 0)
					w := acquireAsync(ctx, other.lock(t, path), rwlock.Write)
					waitNodeCount(t, other.conn, path, 2, 10*time.Second)
					p.Blackhole()
					cutAt := time.Now()
					r := waitGranted(t, w, 2*maxGranted+10*time.Second)
					requireToldFirst(t, g, done, r, cutAt)
					mustRelease(t, r.g)
					p.Pass()
				})
			}
		})
	}
}

// nestedEnv makes TestHelperNestedAfterPause run, with the server, lock
// path and session timeout in holderEnvServer, holderEnvPath,
// holderEnvTimeout.
const nestedEnv = "ZKRWLOCK_FAULT_NESTED_HOLDER"

// nestedReport is what the paused holder prints, after "resumed ": the
// errors of what it tried first after its pause ("" for nil), and whether
// each wraps rwlock.ErrLost.
type nestedReport struct {
	Lock, RLock, Downgrade             string
	LockLost, RLockLost, DowngradeLost bool
}

// TestHelperNestedAfterPause is not a test: TestFaultGrantedNestedAfterPause
// runs the test binary again as a process that takes the write lock on a
// connection made by Dial, prints "held <node>", and sleeps a millisecond
// at a time, asking nothing of the lock, until it sees a gap of more than
// half the session timeout (it was stopped). Then it asks, at once, for a
// nested Lock and RLock under its grant and for a Downgrade, prints a
// nestedReport and exits.
func TestHelperNestedAfterPause(t *testing.T) {
	if os.Getenv(nestedEnv) == "" {
		return
	}
	l, g, timeout, _ := helperHold("nested holder")
	ctx := context.Background()
	for prev := time.Now(); ; {
		time.Sleep(time.Millisecond)
		if now := time.Now(); now.Sub(prev) <= timeout/2 {
			prev = now
			continue
		}
		break
	}
	inner := rwlock.ContextWithGrant(ctx, g)
	var r nestedReport
	_, err := l.Lock(inner)
	r.Lock, r.LockLost = errString(err), errors.Is(err, rwlock.ErrLost)
	_, err = l.RLock(inner)
	r.RLock, r.RLockLost = errString(err), errors.Is(err, rwlock.ErrLost)
	_, err = g.Downgrade(ctx)
	r.Downgrade, r.DowngradeLost = errString(err), errors.Is(err, rwlock.ErrLost)
	b, _ := json.Marshal(r)
	fmt.Printf("resumed %s\n", b)
	os.Exit(0) // not return: TestMain would count go-zookeeper's goroutines as leaks
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A holder process is paused (SIGSTOP) until another client has been
// granted the lock, then resumed. The first thing it asks for, a nested
// grant or a Downgrade, must fail with ErrLost: they consult the lease
// clock as Err does, and must not wait for the clock's timer.
func TestFaultGrantedNestedAfterPause(t *testing.T) {
	const timeout = 2 * time.Second
	srv := faultServer(t, 1)
	for i := range *grantedTrials {
		t.Run(fmt.Sprint("trial", i), func(t *testing.T) {
			path := zktest.LockPath(t, "/it")
			ctx := t.Context()
			child := startHelper(t, "TestHelperNestedAfterPause",
				nestedEnv+"=1", holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path, holderEnvTimeout+"="+timeout.String())
			node, _ := strings.CutPrefix(child.line(t, 60*time.Second, "held "), "held ")

			other := connect(t, srv.Addr(0), 0)
			w := acquireAsync(ctx, other.lock(t, path), rwlock.Write)
			nodes := waitNodeCount(t, other.conn, path, 2, 10*time.Second)
			require.Contains(t, nodes, nodeName(node))
			requireStillWaiting(t, w, "the holder process holds the lock")

			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGSTOP))
			r := waitGranted(t, w, timeout+2*faultTick+10*time.Second)
			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGCONT))

			line := child.line(t, 30*time.Second, "resumed ")
			var rep nestedReport
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "resumed ")), &rep), "report %q", line)
			child.wait(t)
			t.Logf("after the pause: Lock %s, RLock %s, Downgrade %s", errText(rep.Lock), errText(rep.RLock), errText(rep.Downgrade))
			require.True(t, rep.LockLost, "a nested Lock after the pause returned %s, not ErrLost", errText(rep.Lock))
			require.True(t, rep.RLockLost, "a nested RLock after the pause returned %s, not ErrLost", errText(rep.RLock))
			require.True(t, rep.DowngradeLost, "a Downgrade after the pause returned %s, not ErrLost", errText(rep.Downgrade))
			mustRelease(t, r.g)
		})
	}
}
