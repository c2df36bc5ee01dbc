package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
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
	tier.Long(t)
	tier.NoRace(t, zk35)
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
					conn := connect(t, home.Addr()+","+low.Addr(), asked, withHome(0)).conn
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
	w := goAcquire(t, ctx, other.lock(t, path).Lock)
	waitNodeCount(t, other.conn, path, 2, 10*time.Second)
	low.Blackhole()
	cutAt := time.Now()
	select {
	case <-w.done:
	case <-time.After(asked + 10*time.Second):
		t.Fatalf("not granted: holder session %#x (state %v, Err %v), nodes %v, other's session %#x",
			session, conn.State(), g.Err(), describeNodes(other.conn, path), other.conn.SessionID())
	}
	wg, err := w.wait(t)
	require.NoError(t, err)
	requireToldFirst(t, g, done, w.at, cutAt)
	mustRelease(t, wg)
	low.Pass()
}

// requireToldFirst checks that the holder of g, cut off at cutAt, was
// told of its loss (done) before the other client was granted, at grantedAt.
func requireToldFirst(t *testing.T, g *rwlock.Grant, done <-chan time.Time, grantedAt, cutAt time.Time) {
	t.Helper()
	// Done itself says whether the holder was told by now. The goroutine
	// that notes the time may not have run yet, on a loaded machine.
	select {
	case <-g.Done():
	default:
		t.Fatalf("the other client was granted %v after the cut, and the holder has not been told (Err %v)",
			msec(grantedAt.Sub(cutAt)), g.Err())
	}
	var told time.Time
	select {
	case told = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Done closed, but its goroutine did not note the time within 10s")
	}
	require.True(t, told.Before(grantedAt), "the holder was told %v after the other client was granted", msec(told.Sub(grantedAt)))
	require.ErrorIs(t, g.Err(), rwlock.ErrLost)
	t.Logf("cut → holder told %v, → other granted %v (told %v before)",
		msec(told.Sub(cutAt)), msec(grantedAt.Sub(cutAt)), msec(grantedAt.Sub(told)))
}

// A connection asks for more than the server's maximum. Made by Dial, it
// learns what the server granted; made by zk.Connect, the lock cannot know
// it and treats any disconnection as a loss, whatever WithSessionTimeout
// says.
func TestFaultGrantedAskedMoreThanMax(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
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
						holder = connect(t, p.Addr(), asked, withZKConnect())
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
					w := goAcquire(t, ctx, other.lock(t, path).Lock)
					waitNodeCount(t, other.conn, path, 2, 10*time.Second)
					p.Blackhole()
					cutAt := time.Now()
					wg := w.granted(t, 2*maxGranted+10*time.Second)
					requireToldFirst(t, g, done, w.at, cutAt)
					mustRelease(t, wg)
					p.Pass()
				})
			}
		})
	}
}

// nestedEnv makes TestHelperGrantedNested run, with the server, lock
// path and session timeout in holderEnvServer, holderEnvPath,
// holderEnvTimeout; its value is the order of the calls to make after the
// pause, comma-separated names from nestedCalls.
const nestedEnv = "ZKRWLOCK_FAULT_GRANTED_NESTED"

// nestedCalls are the checks of a grant that TestHelperGrantedNested makes
// after its pause, by name.
var nestedCalls = map[string]func(ctx context.Context, l *rwlock.RWLock, g *rwlock.Grant) (*rwlock.Grant, error){
	"Lock": func(ctx context.Context, l *rwlock.RWLock, _ *rwlock.Grant) (*rwlock.Grant, error) {
		return l.Lock(ctx)
	},
	"RLock": func(ctx context.Context, l *rwlock.RWLock, _ *rwlock.Grant) (*rwlock.Grant, error) {
		return l.RLock(ctx)
	},
	"Downgrade": func(ctx context.Context, _ *rwlock.RWLock, g *rwlock.Grant) (*rwlock.Grant, error) {
		return g.Downgrade(ctx)
	},
}

// nestedReport is what TestHelperGrantedNested prints, after "nested ".
type nestedReport struct {
	Slept time.Duration // the holder's sleep, the pause included
	Calls []nestedCall  // in the order made
}

type nestedCall struct {
	Name  string
	Err   string        // "" for nil
	Lost  bool          // Err wraps rwlock.ErrLost
	After time.Duration // from the end of the sleep to the call's return
}

// nestedSleep is how long TestHelperGrantedNested sleeps across its pause,
// for a session timeout t: longer than go-zookeeper's read deadline (2t/3)
// and the lease clock's next look (t/16 at most), so that the holder's own
// timer is the last of its timers due when the pause ends; shorter than the
// pause (see TestFaultGrantedNestedAfterPause).
func nestedSleep(t time.Duration) time.Duration { return t * 17 / 20 }

// TestHelperGrantedNested is not a test: TestFaultGrantedNestedAfterPause
// runs the test binary again, with GOMAXPROCS=1, as a process that takes the
// write lock on a connection made by rwlock.Dial, checks it once (Err),
// prints "held <node>" and waits for SIGUSR1. Then it stops itself
// (SIGSTOP, from a goroutine of its own) while its main goroutine sleeps
// (nestedSleep); once continued, it makes the calls named in its
// environment, with a context carrying the grant, prints a nestedReport and
// exits. Without the environment it returns at once.
//
// Why it is built so: with one P, when the process continues, the runtime
// runs every timer that came due during the pause in the order they were
// due, and the goroutine readied last runs first. The main goroutine's
// sleep ends after every other timer of the process (the lease clock's
// next look, go-zookeeper's ping and read deadline), so it runs before the
// lease clock's timer has had a chance to judge the grant: the calls see
// the loss only if they consult the clock themselves, as Err and Done do.
// (The race detector shuffles the scheduler's choice between the two, so
// under -race that order is only likely.)
func TestHelperGrantedNested(t *testing.T) {
	order := os.Getenv(nestedEnv)
	if order == "" {
		return
	}
	l, g, _, timeout, fail := helperHold("nested holder")
	if err := g.Err(); err != nil {
		fail(err)
	}

	// Everything the calls need is made before the pause, so that the first
	// call after it is the first thing the holder does.
	gctx, gcancel := context.WithCancel(rwlock.ContextWithGrant(context.Background(), g)) // no timer either
	defer gcancel()
	names := strings.Split(order, ",")
	calls := make([]func() (*rwlock.Grant, error), len(names))
	for k, name := range names {
		call := nestedCalls[name]
		if call == nil {
			fail(fmt.Errorf("no call %q", name))
		}
		calls[k] = func() (*rwlock.Grant, error) { return call(gctx, l, g) }
	}
	errs := make([]error, len(calls))
	returned := make([]time.Time, len(calls))
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)

	fmt.Printf("held %s\n", g.Node())
	wait := time.NewTimer(time.Minute)
	select {
	case <-usr1:
		wait.Stop()
	case <-wait.C:
		fail(errors.New("no SIGUSR1 within a minute"))
	}
	sleep := nestedSleep(timeout)
	asleep := time.Now()
	go syscall.Kill(os.Getpid(), syscall.SIGSTOP) // runs once main sleeps
	time.Sleep(sleep)
	resumed := time.Now()
	for k, call := range calls {
		_, errs[k] = call()
		returned[k] = time.Now()
	}

	r := nestedReport{Slept: resumed.Sub(asleep)}
	for k, err := range errs {
		c := nestedCall{Name: names[k], Lost: errors.Is(err, rwlock.ErrLost), After: returned[k].Sub(resumed)}
		if err != nil {
			c.Err = err.Error()
		}
		r.Calls = append(r.Calls, c)
	}
	b, _ := json.Marshal(r)
	fmt.Printf("nested %s\n", b)
	os.Exit(0) // not return: TestMain would count go-zookeeper's goroutines as leaks
}

// A holder process (session timeout 2s, learnt by rwlock.Dial) holds a write
// grant and is stopped (SIGSTOP) until its session has expired and another
// client has been granted the lock, and for longer than the session
// timeout; continued (SIGCONT), it at once calls Lock and RLock with a
// context carrying its grant, and Downgrade. Each must fail with an error
// wrapping ErrLost: like Err and Done, they consult the lease clock, and do
// not rely on a goroutine of the library to have noticed first (the helper
// makes sure none has had the chance: see TestHelperGrantedNested). Each
// trial puts another of the three calls first (after the first, the grant
// has ended whoever noticed), each in a process of its own.
func TestFaultGrantedNestedAfterPause(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 2 * time.Second
	srv := faultServer(t, 1)
	orders := []string{"Lock,RLock,Downgrade", "RLock,Downgrade,Lock", "Downgrade,Lock,RLock"}
	var firsts []string
	for n := range *grantedTrials {
		t.Run(fmt.Sprint("trial", n), func(t *testing.T) {
			order := orders[n%len(orders)]
			path := zktest.LockPath(t, "/it")
			ctx := t.Context()
			child := startHelper(t, "TestHelperGrantedNested",
				nestedEnv+"="+order, holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path,
				holderEnvTimeout+"="+timeout.String(), "GOMAXPROCS=1")
			node, _ := strings.CutPrefix(child.line(t, 60*time.Second, "held "), "held ")

			other := connect(t, srv.Addr(0), 0)
			w := goAcquire(t, ctx, other.lock(t, path).Lock)
			nodes := waitNodeCount(t, other.conn, path, 2, 10*time.Second)
			require.Contains(t, nodes, nodeName(node))
			w.stillWaiting(t, "the holder process holds the lock")

			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGUSR1))
			stopped := waitStopped(t, child.pid(), 10*time.Second)
			wg := w.granted(t, timeout+2*faultTick+10*time.Second)
			// The pause lasts the session timeout and a tick at least, past
			// the holder's sleep, which must end within it.
			time.Sleep(time.Until(stopped.Add(timeout + faultTick)))
			resumed := time.Since(stopped) // before the SIGCONT: the pause lasted at least this
			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGCONT))

			line := child.line(t, 30*time.Second, "nested ")
			var rep nestedReport
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "nested ")), &rep), "report %q", line)
			child.wait(t)
			var calls []string
			for _, c := range rep.Calls {
				calls = append(calls, fmt.Sprintf("%s → %s after %v", c.Name, errText(c.Err), msec(c.After)))
			}
			t.Logf("holder stopped → other client granted %v, → SIGCONT %v; the holder slept %v (%v asked); then %s",
				msec(w.at.Sub(stopped)), msec(resumed), msec(rep.Slept), nestedSleep(timeout), strings.Join(calls, "; "))
			require.GreaterOrEqual(t, rep.Slept, resumed-50*time.Millisecond, "the holder slept through the whole pause")
			require.Len(t, rep.Calls, 3)
			firsts = append(firsts, fmt.Sprintf("%s lost %v", rep.Calls[0].Name, rep.Calls[0].Lost))
			for _, c := range rep.Calls {
				assert.True(t, c.Lost, "after the pause, %s with the grant returned %s, not ErrLost, though another client had been granted the lock",
					c.Name, errText(c.Err))
			}
			mustRelease(t, wg)
		})
	}
	t.Logf("the first call after each pause: %v", firsts)
}

// waitStopped waits until process pid is stopped (state T in
// /proc/<pid>/stat), and returns when it saw it so.
func waitStopped(t *testing.T, pid int, timeout time.Duration) time.Time {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	var state string
	zktest.WaitFor(t, timeout, func() bool {
		b, err := os.ReadFile(stat)
		require.NoError(t, err)
		// pid (comm) state ...: comm may hold spaces and parentheses.
		_, rest, _ := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
		state, _, _ = strings.Cut(rest, " ")
		return state == "T"
	}, "process %d should stop (state %q)", pid, lazyText(func() string { return state }))
	return time.Now()
}
