package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
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
	_, g, timeout, fail := helperHold("paused holder")
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

			stopped := time.Now()
			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGSTOP))
			wg := w.granted(t, timeout+2*faultTick+10*time.Second)
			granted := w.at.Sub(stopped)
			require.NoError(t, syscall.Kill(child.pid(), syscall.SIGCONT))
			resumed := time.Since(stopped)

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
			require.GreaterOrEqual(t, rep.Gap, resumed-50*time.Millisecond, "the holder saw the whole pause")
			require.True(t, rep.FirstLost,
				"the first Err after the holder resumed returned %s, not ErrLost, though another client had been granted the lock",
				errText(rep.FirstErr))
			mustRelease(t, wg)
		})
	}
	t.Logf("the first Err after each pause: %v", firsts)
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
// timeout in holderEnvTimeout, and takes the lock at holderEnvPath; the
// caller prints "held <node>" once it is ready. fail reports an error as
// name's and exits. opts are the lock's.
func helperHold(name string, opts ...rwlock.Option) (l *rwlock.RWLock, g *rwlock.Grant, timeout time.Duration, fail func(error)) {
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
	conn, err := rwlock.Dial(ctx, []string{os.Getenv(holderEnvServer)}, timeout)
	if err != nil {
		fail(err)
	}
	if l, err = rwlock.New(conn, os.Getenv(holderEnvPath), opts...); err != nil {
		fail(err)
	}
	if g, err = l.Lock(ctx); err != nil {
		fail(err)
	}
	return l, g, timeout, fail
}

// helperProcess is the test binary run again as a helper process.
type helperProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
	reaped bool
}

// startHelper runs the test binary again with -test.run=^name$ and env
// added to its environment. Its stdout is read line by line. Cleanup kills
// it (SIGKILL, by its pid) unless it was waited for, and so does the end
// of this thread (Pdeathsig), which the test keeps until then.
func startHelper(t *testing.T, name string, env ...string) *helperProcess {
	t.Helper()
	runtime.LockOSThread() // Pdeathsig is per thread
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	h := &helperProcess{cmd: cmd, lines: make(chan string, 16), stderr: &bytes.Buffer{}}
	cmd.Stderr = h.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
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
