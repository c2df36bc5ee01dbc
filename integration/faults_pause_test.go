package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkclient"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// pausedEnv makes TestHelperPausedHolder run, with the server, lock path
// and session timeout in holderEnvServer, holderEnvPath, holderEnvTimeout.
const pausedEnv = "ZKRWLOCK_FAULT_PAUSED_HOLDER"

// pauseReport is what the paused holder prints, after "resumed ", once it
// has seen its own pause.
type pauseReport struct {
	Gap         time.Duration // between the last call before the pause and the first after
	InsideCall  bool          // the pause fell inside a call to Err, so the report is of the next call
	FirstErr    string        // what the first call to Err after the pause returned ("" for nil)
	FirstLost   bool          // it wraps rwlock.ErrLost
	NilFor      time.Duration // how long after the pause Err still returned nil (0: never)
	NeverLostIn time.Duration // if not 0: Err was still nil this long after the pause, when the holder gave up looking
}

// TestHelperPausedHolder is not a test: TestFaultPausedHolder runs the test
// binary again as a process that takes the write lock (session timeout from
// rwlock.Dial), prints "held <node>", then calls Err about every
// millisecond, timing each call on its own clock. A gap of more than half
// the session timeout between two calls is a pause (SIGSTOP): it prints a
// pauseReport about the first call made after it, and exits. Without the
// environment above it returns at once.
func TestHelperPausedHolder(t *testing.T) {
	if os.Getenv(pausedEnv) == "" {
		return
	}
	_, g, _, timeout, fail := helperHold("paused holder")
	if err := g.Err(); err != nil { // also starts watching the grant
		fail(err)
	}
	fmt.Printf("held %s\n", g.Node())

	var r pauseReport
	var resumed time.Time // end of the pause, as far as this process can tell
	prevEnd := time.Now()
	for {
		time.Sleep(time.Millisecond)
		start := time.Now()
		err := g.Err()
		end := time.Now()
		switch {
		case resumed.IsZero() && start.Sub(prevEnd) > timeout/2:
			// Paused between two calls: this call is the first after.
			resumed, r.Gap = start, start.Sub(prevEnd)
			r.FirstLost = errors.Is(err, rwlock.ErrLost)
			if err != nil {
				r.FirstErr = err.Error()
			}
		case resumed.IsZero() && end.Sub(start) > timeout/2:
			// Paused inside this call, which may have looked before the
			// pause: the next call is the first after it.
			r.InsideCall, r.Gap = true, end.Sub(start)
			prevEnd = end
			continue
		case resumed.IsZero() && r.InsideCall:
			resumed = start
			r.FirstLost = errors.Is(err, rwlock.ErrLost)
			if err != nil {
				r.FirstErr = err.Error()
			}
		}
		prevEnd = end
		if resumed.IsZero() {
			continue
		}
		if err != nil || end.Sub(resumed) > 2*timeout {
			if err == nil {
				r.NeverLostIn = end.Sub(resumed)
			} else if !r.FirstLost {
				r.NilFor = start.Sub(resumed)
			}
			b, _ := json.Marshal(r)
			fmt.Printf("resumed %s\n", b)
			os.Exit(0) // not return: TestMain would count go-zookeeper's goroutines as leaks
		}
	}
}

// A holder process is paused (SIGSTOP) until its session has expired and
// another client has been granted the lock, then resumed (SIGCONT). The
// first Err it calls after resuming must report the loss: Err consults the
// lease clock itself, and must not wait for a goroutine of the library,
// or for go-zookeeper, to notice. Whether those goroutines happen to run
// before the holder's first call is up to the scheduler, hence the
// repetitions (-lease.reps), each with a process of its own.
func TestFaultPausedHolder(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 2 * time.Second
	srv := faultServer(t, 1)
	var firsts []string
	for i := range *leaseReps {
		t.Run(fmt.Sprint("rep", i), func(t *testing.T) {
			path := zktest.LockPath(t, "/it")
			ctx := t.Context()
			child := startHelper(t, "TestHelperPausedHolder",
				pausedEnv+"=1", holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path, holderEnvTimeout+"="+timeout.String())
			node, _ := strings.CutPrefix(child.line(t, 60*time.Second, "held "), "held ")

			other := connect(t, srv.Addr(0), 0)
			w := goAcquire(t, ctx, other.lock(t, path).Lock)
			nodes := waitNodeCount(t, other.conn, path, 2, 10*time.Second)
			require.Contains(t, nodes, nodeName(node))
			w.stillWaiting(t, "the holder process holds the lock")

			// The pause is dated from inside: after the SIGSTOP's kill returned
			// and before the SIGCONT's kill, so that it lasted at least as long
			// as resumed, less the stop's delivery.
			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGSTOP))
			stopped := time.Now()
			wg := w.granted(t, timeout+2*faultTick+10*time.Second)
			granted := w.at.Sub(stopped)
			resumed := time.Since(stopped)
			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGCONT))

			line := child.line(t, 4*timeout+10*time.Second, "resumed ")
			var rep pauseReport
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "resumed ")), &rep), "report %q", line)
			child.wait(t)
			nilFor := msec(rep.NilFor).String()
			if rep.NeverLostIn > 0 {
				nilFor = fmt.Sprintf("more than %v (gave up looking)", msec(rep.NeverLostIn))
			}
			firsts = append(firsts, fmt.Sprintf("lost %v (nil for %s)", rep.FirstLost, nilFor))
			t.Logf("holder SIGSTOPped → other client granted %v, → SIGCONT %v; the holder saw a pause of %v (inside a call: %v); "+
				"its first Err after it: %s; Err returned nil for %s after the pause",
				msec(granted), msec(resumed), msec(rep.Gap), rep.InsideCall, errText(rep.FirstErr), nilFor)
			// The session can expire up to a third of its timeout before
			// the pause does (go-zookeeper pings every T/3): the pause
			// lasted until the grant, which is what the holder must see.
			// The 50 ms allow for the stop's delivery after its kill returned.
			require.GreaterOrEqual(t, rep.Gap, resumed-50*time.Millisecond, "the holder saw the whole pause")
			require.True(t, rep.FirstLost,
				"the first Err after the holder resumed returned %s, not ErrLost, though another client had been granted the lock",
				errText(rep.FirstErr))
			mustRelease(t, wg)
		})
	}
	t.Logf("the first Err after each pause: %v", firsts)
}

// connectNestedEnv makes TestHelperConnectNested run, with the server,
// lock path and session timeout in holderEnvServer, holderEnvPath and
// holderEnvTimeout.
const connectNestedEnv = "ZKRWLOCK_PAUSED_CONNECT_NESTED"

// holderEnvZKConnect makes helperHold connect with zk.Connect, not Dial.
const holderEnvZKConnect = "ZKRWLOCK_FAULT_HOLDER_ZKCONNECT"

var connectRounds = flag.Int("connect.rounds", 20, "rounds of TestPausedHolderOnZKConnect, with each GOMAXPROCS")

// connectBatch is how many holder processes TestPausedHolderOnZKConnect
// pauses at once, each with a lock of its own: the rounds wait out a
// session each, so they share the wait.
const connectBatch = 5

// continuedLine is what TestPausedHolderOnZKConnect writes to a holder's
// stdin once it has sent it SIGCONT.
const continuedLine = "continued"

// connectGap is a time TestHelperConnectNested's loop did not run for more
// than half the session timeout: the pause (SIGSTOP), or a stall of its
// own, which a loaded machine or the race detector can cause. From and To
// are wall clock times, which the test compares with its own: this
// process's monotonic clock means nothing to another process.
type connectGap struct {
	From, To    time.Time     // the end of the last call before the gap, and the start of the first call that counts after it
	Inside      bool          // the gap was inside a call, which may have judged the grant before it: it does not count
	State       string        // go-zookeeper's state as the first call that counts after the gap began
	Granted     int           // nested grants returned by calls begun after the gap, and before the next one
	LastGranted time.Duration // from To to the return of the last of them
}

// connectReport is what TestHelperConnectNested prints, after "resumed ".
type connectReport struct {
	Gaps        []connectGap  // in order; the test finds the pause among them
	Err         string        // the first failed call's error
	Lost        bool          // it wraps rwlock.ErrLost
	Bound       bool          // its cause is the lease by WithSessionTimeout's bound: a LeaseLapsedError with Bound
	LostAfter   time.Duration // from the end of the last gap to its return
	NeverLostIn time.Duration // if not 0: no call failed this long after the last gap and the test's word, when the holder gave up
}

// TestHelperConnectNested is not a test: TestPausedHolderOnZKConnect runs
// the test binary again as a process that connects with zk.Connect, takes
// the write lock with WithSessionTimeout, and calls Lock with a context
// carrying its grant about every millisecond, releasing each nested grant
// at once; it prints "held <node>" once the first such call has succeeded.
// Every gap of more than half the session timeout, between two calls or
// inside one, is noted with the nested grants returned after it. It prints
// a connectReport and exits when a call fails after a gap, or when none
// has failed for twice the session timeout since the test wrote
// continuedLine and since the last gap. Without the environment above it
// returns at once.
func TestHelperConnectNested(t *testing.T) {
	if os.Getenv(connectNestedEnv) == "" {
		return
	}
	l, g, conn, timeout, fail := helperHold("zk.Connect holder")
	gctx := rwlock.ContextWithGrant(context.Background(), g)
	nested := func() error {
		n, err := l.Lock(gctx)
		if n != nil {
			n.Release(gctx) // a nested grant's release sends nothing
		}
		return err
	}
	if err := nested(); err != nil {
		fail(err)
	}
	var continued atomic.Pointer[time.Time] // when the test's word came
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == continuedLine {
				now := time.Now()
				continued.CompareAndSwap(nil, &now)
			}
		}
	}()
	fmt.Printf("held %s\n", g.Node())

	var r connectReport
	var gapEnd time.Time // the end of the last gap, on this process's monotonic clock
	prevEnd := time.Now()
	for {
		time.Sleep(time.Millisecond)
		start := time.Now()
		if start.Sub(prevEnd) > timeout/2 {
			r.Gaps = append(r.Gaps, connectGap{From: prevEnd, To: start})
			gapEnd = start
		}
		if n := len(r.Gaps); n > 0 && r.Gaps[n-1].State == "" {
			r.Gaps[n-1].State = conn.State().String()
		}
		err := nested()
		end := time.Now()
		if end.Sub(start) > timeout/2 {
			// Stopped inside this call: the calls that count begin after it.
			r.Gaps = append(r.Gaps, connectGap{From: start, To: end, Inside: true})
			gapEnd, prevEnd = end, end
			continue
		}
		prevEnd = end
		switch {
		case len(r.Gaps) == 0 && err != nil:
			fail(fmt.Errorf("lost before any pause: %w", err))
		case err != nil:
			var lapsed *zkclient.LeaseLapsedError
			r.Err, r.Lost, r.LostAfter = err.Error(), errors.Is(err, rwlock.ErrLost), end.Sub(gapEnd)
			r.Bound = errors.As(err, &lapsed) && lapsed.Bound
			report("resumed", r)
		case len(r.Gaps) > 0:
			last := &r.Gaps[len(r.Gaps)-1]
			last.Granted, last.LastGranted = last.Granted+1, end.Sub(gapEnd)
		}
		if c := continued.Load(); c != nil {
			since := *c
			if gapEnd.After(since) {
				since = gapEnd
			}
			if end.Sub(since) > 2*timeout {
				r.NeverLostIn = end.Sub(since)
				report("resumed", r)
			}
		}
	}
}

// report prints v as JSON after prefix, and ends the helper process.
func report(prefix string, v any) {
	b, _ := json.Marshal(v)
	fmt.Printf("%s %s\n", prefix, b)
	os.Exit(0) // not return: TestMain would count go-zookeeper's goroutines as leaks
}

// Holder processes connected with plain zk.Connect, their locks told the
// session timeout (2 s, which the server grants) with WithSessionTimeout,
// hold the write lock while another client waits for it. They are stopped
// (SIGSTOP) until their sessions have expired and the other client has
// been granted every lock, then continued (SIGCONT); each at once calls
// Lock with a context carrying its grant, in a loop. No call may return a
// nested grant, and the first must fail with ErrLost. The lock does not
// know what the server granted, but the lease by the timeout told ends
// the grant, and every check consults it before go-zookeeper's state,
// which says "has session" until its receive loop reads the server's
// close. Some rounds end otherwise: go-zookeeper noticed first, or the
// notification of the node's deletion, which the server may send as it
// expires the session, woke the node watch first. Those prove nothing of
// the lease, so at least one round of each run must end by it (without
// the lease by the timeout told, none does). Rounds run with GOMAXPROCS=1 (the
// goroutine that wins after SIGCONT is the scheduler's pick) and with every
// CPU. No request is in flight across a reconnection (the lost grant's
// node went with its session), so it runs under the race detector.
func TestPausedHolderOnZKConnect(t *testing.T) {
	tier.Long(t)
	const timeout = 2 * time.Second
	srv := faultServer(t, 1)
	for _, procs := range []int{1, runtime.NumCPU()} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			var outcomes []string
			var rounds, noticed, byLease int
			for first := 0; first < *connectRounds; first += connectBatch {
				t.Run(fmt.Sprintf("rounds%d-%d", first, min(first+connectBatch, *connectRounds)-1), func(t *testing.T) {
					for _, r := range pauseConnectHolders(t, srv.Addr(0), timeout, procs, min(connectBatch, *connectRounds-first)) {
						outcomes = append(outcomes, r.outcome)
						rounds++
						if r.state != zk.StateHasSession.String() {
							noticed++
						}
						if r.bound {
							byLease++
						}
					}
				})
			}
			t.Logf("after SIGCONT: %s", strings.Join(outcomes, "; "))
			t.Logf("go-zookeeper had seen the session's end before the holder's first call after the pause in %d of %d rounds", noticed, rounds)
			t.Logf("%d of %d rounds ended by the lease by the timeout told", byLease, rounds)
			assert.Positive(t, byLease, "no round ended by the lease by the timeout told")
		})
	}
}

// connectRound is what one holder of TestPausedHolderOnZKConnect saw.
type connectRound struct {
	outcome string // its nested Lock calls after the pause
	state   string // go-zookeeper's state as the first of them began
	bound   bool   // the first failed for the lease by the timeout told
}

// pauseConnectHolders is one batch of TestPausedHolderOnZKConnect: n holder
// processes, paused and continued together. It returns what each saw.
func pauseConnectHolders(t *testing.T, addr string, timeout time.Duration, procs, n int) []connectRound {
	ctx := t.Context()
	other := connect(t, addr, 0)
	children := make([]*helperProcess, n)
	waiters := make([]*acquisition, n)
	for i := range n {
		path := zktest.LockPath(t, "/it")
		children[i] = startHelperWithInput(t, "TestHelperConnectNested", connectNestedEnv+"=1", holderEnvZKConnect+"=1",
			holderEnvServer+"="+addr, holderEnvPath+"="+path, holderEnvTimeout+"="+timeout.String(), fmt.Sprintf("GOMAXPROCS=%d", procs))
		node, _ := strings.CutPrefix(children[i].line(t, 60*time.Second, "held "), "held ")
		waiters[i] = goAcquire(t, ctx, other.lock(t, path).Lock)
		require.Contains(t, waitNodeCount(t, other.conn, path, 2, 10*time.Second), nodeName(node))
	}
	for _, w := range waiters {
		w.stillWaiting(t, "the holder process holds the lock")
	}

	// Each child's own times: the test, too, may stall between two kills.
	// A child is surely stopped from just after its SIGSTOP's kill returns
	// (a thread not running then stops before it runs again) until its
	// SIGCONT's kill is called.
	stopped := make([]time.Time, n)
	for i, c := range children {
		require.NoError(t, syscall.Kill(c.pid(), syscall.SIGSTOP))
		stopped[i] = time.Now()
	}
	grants := make([]*rwlock.Grant, n)
	for i, w := range waiters {
		grants[i] = w.granted(t, timeout+2*faultTick+10*time.Second)
	}
	continued := make([]time.Time, n)
	for i, c := range children {
		continued[i] = time.Now()
		require.NoError(t, syscall.Kill(c.pid(), syscall.SIGCONT))
	}
	for _, c := range children {
		c.tell(t, continuedLine)
	}

	var rounds []connectRound
	for i, c := range children {
		line := c.line(t, 4*timeout+10*time.Second, "resumed ")
		var rep connectReport
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "resumed ")), &rep), "report %q", line)
		c.wait(t)
		// The pause is the gap that covers the stop: it began before the
		// stop took hold, a signal's delivery after the kill returned
		// allowed for, and ended after SIGCONT was sent.
		const delivery = 50 * time.Millisecond
		pause := slices.IndexFunc(rep.Gaps, func(g connectGap) bool {
			return !g.From.After(stopped[i].Add(delivery)) && !g.To.Before(continued[i])
		})
		require.GreaterOrEqual(t, pause, 0, "holder %d: none of the gaps it saw %v covers its stop, from %v to %v",
			i, rep.Gaps, stopped[i].Format(time.StampMicro), continued[i].Format(time.StampMicro))
		gap, granted, last := rep.Gaps[pause], 0, time.Duration(0)
		for _, g := range rep.Gaps[pause:] {
			granted += g.Granted
			if g.Granted > 0 {
				last = g.To.Sub(gap.To) + g.LastGranted
			}
		}
		outcome := fmt.Sprintf("%s after %v", errText(rep.Err), msec(rep.LostAfter))
		switch {
		case rep.NeverLostIn > 0:
			outcome = fmt.Sprintf("never lost in %v", msec(rep.NeverLostIn))
		case rep.Lost && rep.Bound:
			outcome = fmt.Sprintf("ErrLost by the lease after %v", msec(rep.LostAfter))
		}
		if granted > 0 {
			outcome += fmt.Sprintf(", %d nested grants, the last %v after the pause", granted, msec(last))
		}
		if pause > 0 {
			outcome += fmt.Sprintf(" (%d stalls of its own before the pause)", pause)
		}
		rounds = append(rounds, connectRound{outcome: outcome, state: gap.State, bound: rep.Lost && rep.Bound})
		t.Logf("holder %d: SIGSTOP → other client granted %v, → SIGCONT %v; the holder saw a pause of %v; "+
			"go-zookeeper said %s at its first call after it; its nested Lock calls: %s",
			i, msec(waiters[i].at.Sub(stopped[i])), msec(continued[i].Sub(stopped[i])), msec(gap.To.Sub(gap.From)), gap.State, outcome)
		require.Zero(t, granted, "nested grants handed to a holder back from a pause, while another client holds the lock")
		require.True(t, rep.Lost, "the nested Lock after the pause failed with %s, not ErrLost", errText(rep.Err))
	}
	for _, g := range grants {
		mustRelease(t, g)
	}
	return rounds
}

// zkConnect connects to addr with zk.Connect, asking for timeout, and waits
// for the session.
func zkConnect(ctx context.Context, addr string, timeout time.Duration) (*zk.Conn, error) {
	conn, events, err := zk.Connect([]string{addr}, timeout, zk.WithLogger(quietZK{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	for conn.State() != zk.StateHasSession { // the state changes before its event is sent
		select {
		case <-events:
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("no session with %s: %w", addr, ctx.Err())
		}
	}
	return conn, nil
}

// errText quotes an error's text, or says nil.
func errText(s string) string {
	if s == "" {
		return "nil"
	}
	return fmt.Sprintf("%q", s)
}

// helperHold is the start of a helper process that holds the write lock:
// it dials the server in holderEnvServer with rwlock.Dial and the session
// timeout in holderEnvTimeout, and takes the lock at holderEnvPath on that
// connection, conn; the caller prints "held <node>" once it is ready. fail
// reports an error as name's and exits. opts are the lock's. With
// holderEnvZKConnect set, it connects with go-zookeeper's zk.Connect
// instead, as an application that never heard of Dial, and tells the lock
// the timeout (WithSessionTimeout).
func helperHold(name string, opts ...rwlock.Option) (l *rwlock.RWLock, g *rwlock.Grant, conn *zk.Conn, timeout time.Duration, fail func(error)) {
	fail = func(err error) {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	}
	timeout, err := time.ParseDuration(os.Getenv(holderEnvTimeout))
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if os.Getenv(holderEnvZKConnect) != "" {
		conn, err = zkConnect(ctx, os.Getenv(holderEnvServer), timeout)
		opts = append(opts, rwlock.WithSessionTimeout(timeout))
	} else {
		conn, err = rwlock.Dial(ctx, []string{os.Getenv(holderEnvServer)}, timeout)
	}
	if err != nil {
		fail(err)
	}
	if l, err = rwlock.New(conn, os.Getenv(holderEnvPath), opts...); err != nil {
		fail(err)
	}
	if g, err = l.Lock(ctx); err != nil {
		fail(err)
	}
	return l, g, conn, timeout, fail
}

// helperProcess is the test binary run again as a helper process.
type helperProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
	stdin  io.WriteCloser // nil unless started with startHelperWithInput
	reaped bool
}

// startHelper runs the test binary again with -test.run=^name$ and env
// added to its environment. Its stdout is read line by line. Cleanup kills
// it (SIGKILL, by its pid) unless it was waited for, and so does the end
// of this thread (Pdeathsig), which the test keeps until then.
func startHelper(t *testing.T, name string, env ...string) *helperProcess {
	t.Helper()
	return launchHelper(t, name, false, env)
}

// startHelperWithInput is startHelper with a pipe to the helper's stdin,
// through which the test tells it things (tell).
func startHelperWithInput(t *testing.T, name string, env ...string) *helperProcess {
	t.Helper()
	return launchHelper(t, name, true, env)
}

func launchHelper(t *testing.T, name string, input bool, env []string) *helperProcess {
	t.Helper()
	runtime.LockOSThread() // Pdeathsig is per thread
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	h := &helperProcess{cmd: cmd, lines: make(chan string, 16), stderr: &bytes.Buffer{}}
	cmd.Stderr = h.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if input {
		h.stdin, err = cmd.StdinPipe()
		require.NoError(t, err)
	}
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !h.reaped {
			cmd.Process.Kill()
			h.reap()
		}
		runtime.UnlockOSThread()
	})
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	return h
}

func (h *helperProcess) pid() int { return h.cmd.Process.Pid }

// tell writes line to the helper's stdin. A helper that has exited
// already has nothing more to be told.
func (h *helperProcess) tell(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("telling the helper process %q: %v", line, err)
	}
}

// line returns the next line the helper prints that starts with prefix,
// skipping others (go test's own), within timeout.
func (h *helperProcess) line(t *testing.T, timeout time.Duration, prefix string) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				err := h.reap()
				t.Fatalf("the helper process ended (%v) before printing %q; stderr:\n%s", err, prefix, h.stderr)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-deadline:
			t.Fatalf("the helper process did not print %q within %v", prefix, timeout)
		}
	}
}

// wait waits for the helper to exit by itself, and requires success.
func (h *helperProcess) wait(t *testing.T) {
	t.Helper()
	err := h.reap()
	require.NoError(t, err, "helper process; stderr:\n%s", h.stderr)
}

// reap waits for the helper's exit once its stdout is drained (as
// exec.Cmd.Wait requires); only then is stderr complete.
func (h *helperProcess) reap() error {
	for range h.lines {
	}
	h.reaped = true
	return h.cmd.Wait()
}
