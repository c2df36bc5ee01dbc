package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// pausedLimitEnv makes TestHelperPausedOverHold run, with the server, lock
// path and session timeout in holderEnvServer, holderEnvPath,
// holderEnvTimeout, and the hold limit in pausedLimitEnv itself.
const pausedLimitEnv = "ZKRWLOCK_FAULT_PAUSED_OVER_HOLD"

// overHoldReport is what the paused holder prints, after "resumed ".
type overHoldReport struct {
	Gap       time.Duration // between the last call to Err before the pause and the first after
	FirstErr  string        // what that first call returned ("" for nil)
	HoldLimit bool          // it wraps rwlock.ErrHoldLimit
	Told      int64         // when it was called, in Unix nanoseconds: no later than the telling
}

// TestHelperPausedOverHold is not a test: TestFaultPausedOverHold runs the
// test binary again as a process that takes the write lock with
// WithMaxHold, prints "held <node> <limit in Unix nanoseconds>", then
// calls Err about every millisecond. After a gap of more than a second
// between two calls (its SIGSTOP), it prints an overHoldReport of the
// first call after the gap, and lives on, so that its client deletes the
// node, until the test kills it.
func TestHelperPausedOverHold(t *testing.T) {
	env := os.Getenv(pausedLimitEnv)
	if env == "" {
		return
	}
	limit, err := time.ParseDuration(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, g, _, _, fail := helperHold("paused over hold", rwlock.WithMaxHold(limit))
	end, ok := g.Deadline()
	if err := g.Err(); err != nil || !ok {
		fail(fmt.Errorf("no hold limit: %v, %v", ok, err))
	}
	fmt.Printf("held %s %d\n", g.Node(), end.UnixNano())
	prevEnd := time.Now()
	for {
		time.Sleep(time.Millisecond)
		start := time.Now()
		err := g.Err()
		returned := time.Now()
		if start.Sub(prevEnd) <= time.Second {
			if err != nil {
				fail(fmt.Errorf("lost before the pause: %w", err))
			}
			prevEnd = returned
			continue
		}
		r := overHoldReport{Gap: start.Sub(prevEnd), HoldLimit: errors.Is(err, rwlock.ErrHoldLimit), Told: start.UnixNano()}
		if err != nil {
			r.FirstErr = err.Error()
		}
		b, _ := json.Marshal(r)
		fmt.Printf("resumed %s\n", b)
		select {} // not return: TestMain would count go-zookeeper's goroutines as leaks
	}
}

// A holder with a hold limit is paused (SIGSTOP) before its notice and
// resumed (SIGCONT) after its limit, within its session. Its first Err
// after resuming already fails with ErrHoldLimit: the judge sees the limit
// passed, whether or not the hold timer's goroutine has run. The node is
// deleted by the holder's own client, so the waiter is granted only after
// the holder was told.
func TestFaultPausedOverHold(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	// The session outlives the pause (a silence of about 0.69·10s is
	// ridden out), so the limit, not the lease, ends the grant; the notice
	// comes min(10s/4, 5s/2) = 2.5s before the limit.
	const timeout, limit, head = 10 * time.Second, 5 * time.Second, 2500 * time.Millisecond
	srv := faultServer(t, 1)
	path := zktest.LockPath(t, "/it")
	child := startHelper(t, "TestHelperPausedOverHold", pausedLimitEnv+"="+limit.String(),
		holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path, holderEnvTimeout+"="+timeout.String())
	fields := strings.Fields(child.line(t, 60*time.Second, "held "))
	require.Len(t, fields, 3)
	ns, err := strconv.ParseInt(fields[2], 10, 64)
	require.NoError(t, err)
	end := time.Unix(0, ns)
	notice := end.Add(-head)

	other := connect(t, srv.Addr(0), 0)
	w := goAcquire(t, t.Context(), other.lock(t, path).Lock)
	nodes := waitNodeCount(t, other.conn, path, 2, 10*time.Second)
	require.Contains(t, nodes, nodeName(fields[1]))
	require.NoError(t, syscall.Kill(child.pid(), syscall.SIGSTOP))
	stopped := time.Now()
	require.True(t, stopped.Before(notice), "paused %v after the notice: the machine is too slow for this test", stopped.Sub(notice))

	time.Sleep(time.Until(end.Add(500 * time.Millisecond))) // the pause itself: past the limit, within the session
	w.stillWaiting(t, "the paused holder's client alone deletes its node")
	require.NoError(t, syscall.Kill(child.pid(), syscall.SIGCONT))
	resumed := time.Now()

	line := child.line(t, 30*time.Second, "resumed ")
	var rep overHoldReport
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "resumed ")), &rep), "report %q", line)
	require.True(t, rep.HoldLimit, "the first Err after the pause returned %s, not ErrHoldLimit", errText(rep.FirstErr))
	wg := w.granted(t, 30*time.Second)
	told := time.Unix(0, rep.Told)
	// Told late, the holder still gets its head start: its client deletes
	// the node no sooner. Told is dated from below, by the call that told
	// it (the clocks of two processes: a little slack).
	require.GreaterOrEqual(t, w.at.Sub(told), head-50*time.Millisecond,
		"the waiter was granted %v after the holder was told, within its head start", w.at.Sub(told))
	t.Logf("paused %v before the notice, for %v (the holder saw %v); the waiter was granted %v after the holder was told",
		msec(notice.Sub(stopped)), msec(resumed.Sub(stopped)), msec(rep.Gap), msec(w.at.Sub(told)))
	mustRelease(t, wg)
}
