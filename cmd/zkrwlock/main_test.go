package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The tests run the command against a ZooKeeper server they start
// themselves: in this process (runIn) when it reads its arguments and
// writes its output and nothing more, and else as a subprocess built once
// (start, runCLI), as an operator would run it, for what needs a process of
// its own: signals sent to it, the command exec runs, its death.

// binary is the zkrwlock built by TestMain (with -race when the tests run
// with it).
var binary string

func TestMain(m *testing.M) {
	catchIgnoredSignals()
	os.Exit(testMain(m))
}

// catchIgnoredSignals makes every process the tests start begin with the
// forwarded signals at their defaults, whatever this one inherited. The
// tests send zkrwlock signals and expect what it does with them. Under
// nohup, SIGHUP comes ignored, and exec keeps an ignored signal ignored:
// zkrwlock would rightly leave it so. Exec resets a caught signal to its
// default instead. So a signal ignored here is caught, on a channel never
// read: this process still drops it.
func catchIgnoredSignals() {
	for _, sig := range forwarded {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "zkrwlock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "zkrwlock")
	args := []string{"build", "-o", binary}
	if tier.RaceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build:", err)
		return 1
	}

	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "zkserver:", err)
	}
	if code == 0 {
		if err := zktest.FindLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}

// shared is one standalone server for the tests that do not break theirs.
// Its short tick lets sessions as short as 1s be granted.
var shared = zkserver.Shared{Config: zkserver.Config{
	TickTime:          500 * time.Millisecond,
	MinSessionTimeout: time.Second,
}}

func server(t *testing.T) *zkserver.Cluster { return shared.Get(t) }

// outcome is how a zkrwlock run ended.
type outcome struct {
	code   int
	stdout string
	stderr string
	took   time.Duration
}

// proc is a zkrwlock process.
type proc struct {
	cmd    *exec.Cmd
	stdout zktest.SyncBuffer
	stderr zktest.SyncBuffer
	start  time.Time
	done   chan struct{}
	res    outcome
}

// runTimeout bounds every zkrwlock run of the tests.
const runTimeout = 2 * time.Minute

// start starts zkrwlock with args, with ZOOKEEPER_SERVERS set to the
// shared server when there is one (and env added). The test's cleanup
// kills it (by its pid) if it still runs, and waits for it.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startVia(t, nil, env, args...)
}

// startVia starts zkrwlock as start does, through the command prefix
// (nohup, say), which must exec it: the process is zkrwlock's.
func startVia(t *testing.T, prefix, env []string, args ...string) *proc {
	t.Helper()
	argv := append(append(slices.Clone(prefix), binary), args...)
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second // for leftovers of a killed command that keep the pipes open
	p.start = time.Now()
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.done)
		err := p.cmd.Wait()
		p.res = outcome{code: p.cmd.ProcessState.ExitCode(), took: time.Since(p.start)}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.res.code = 128 + int(ws.Signal())
		}
		if err != nil && p.cmd.ProcessState == nil {
			p.res.code = -1
		}
		p.res.stdout, p.res.stderr = p.stdout.String(), p.stderr.String()
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func baseEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "ZOOKEEPER_SERVERS=") || strings.HasPrefix(kv, "ZKRWLOCK_")
	})
	if c := shared.Started(); c != nil {
		env = append(env, "ZOOKEEPER_SERVERS="+c.ConnectString())
	}
	// A -race binary sleeps 1s before it exits, unless told not to.
	return append(env, "GORACE=atexit_sleep_ms=0")
}

// wait waits for p to exit, for at most timeout, and logs its stderr.
func (p *proc) wait(t *testing.T, timeout time.Duration) outcome {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("zkrwlock %v still running after %v; stderr so far:\n%s", p.cmd.Args[1:], timeout, p.stderr.String())
	}
	if p.res.stderr != "" {
		t.Logf("zkrwlock %s: stderr:\n%s", strings.Join(p.cmd.Args[1:], " "), p.res.stderr)
	}
	return p.res
}

// signal sends sig to the zkrwlock process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// runCLI runs zkrwlock to completion.
func runCLI(t *testing.T, env []string, args ...string) outcome {
	t.Helper()
	return start(t, env, args...).wait(t, runTimeout)
}

// runIn runs zkrwlock's entry point in this process to completion, with
// the environment of start (and env, "KEY=value" each, set for the test),
// stdin from /dev/null, and stdout and stderr captured.
func runIn(t *testing.T, env []string, args ...string) outcome {
	t.Helper()
	servers := ""
	if c := shared.Started(); c != nil {
		servers = c.ConnectString()
	}
	t.Setenv("ZOOKEEPER_SERVERS", servers)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	in, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer in.Close()
	out, errOut := open("stdout"), open("stderr")
	// The connection flags set the default logger, which redirects the log
	// package too: put both back for the tests that follow.
	defer slog.SetDefault(slog.Default())
	defer log.SetFlags(log.Flags())
	defer log.SetOutput(log.Writer())

	begin := time.Now()
	code := run(stdio{in, out, errOut}, args)
	r := outcome{code: code, took: time.Since(begin)}
	r.stdout, r.stderr = readFile(t, out.Name()), readFile(t, errOut.Name())
	if r.stderr != "" {
		t.Logf("zkrwlock %s: stderr:\n%s", strings.Join(args, " "), r.stderr)
	}
	return r
}

// client opens a session of the test's own to the shared server, closed
// when the test ends.
func client(t *testing.T) *zk.Conn {
	t.Helper()
	conn, _ := zkserver.Connect(t, server(t).Addrs(), 4*time.Second)
	return conn
}

// lockOf returns the lock at path on conn.
func lockOf(t *testing.T, conn *zk.Conn, path string, opts ...rwlock.Option) *rwlock.RWLock {
	t.Helper()
	l, err := rwlock.New(conn, path, append([]rwlock.Option{rwlock.WithSessionTimeout(4 * time.Second)}, opts...)...)
	require.NoError(t, err)
	return l
}

// hold takes the lock at path in mode on a session of the test's own, and
// releases it when the test ends.
func hold(t *testing.T, path string, mode rwlock.Mode, owner string, opts ...rwlock.Option) *rwlock.Grant {
	t.Helper()
	l := lockOf(t, client(t), path, append([]rwlock.Option{rwlock.WithOwner(owner)}, opts...)...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var g *rwlock.Grant
	var err error
	if mode == rwlock.Write {
		g, err = l.Lock(ctx)
	} else {
		g, err = l.RLock(ctx)
	}
	require.NoError(t, err)
	t.Cleanup(func() { g.Release(context.Background()) })
	return g
}

// queueWaiter queues a waiter for the lock at path in mode on a session of
// the test's own, and returns that session's connection once its node is
// listed. It leaves the queue when the test ends.
func queueWaiter(t *testing.T, path string, mode rwlock.Mode, owner string) *zk.Conn {
	t.Helper()
	conn := client(t)
	before := len(children(t, conn, path))
	l := lockOf(t, conn, path, rwlock.WithOwner(owner))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var g *rwlock.Grant
		var err error
		if mode == rwlock.Write {
			g, err = l.Lock(ctx)
		} else {
			g, err = l.RLock(ctx)
		}
		if err == nil { // the test ended before it was cancelled
			g.Release(context.Background())
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == before+1 }, "%s", owner+" to queue")
	return conn
}

// sessionOf returns the session that owns g's node.
func sessionOf(t *testing.T, g *rwlock.Grant) int64 {
	t.Helper()
	_, stat, err := client(t).Get(g.Node())
	require.NoError(t, err)
	return stat.EphemeralOwner
}

// children returns the children of a lock directory (none if it does not
// exist), sorted.
func children(t *testing.T, conn *zk.Conn, path string) []string {
	t.Helper()
	c, _, err := conn.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	require.NoError(t, err)
	slices.Sort(c)
	return c
}

// requireOneLine checks that an error output is one line and no crash.
func requireOneLine(t *testing.T, stderr string) {
	t.Helper()
	require.Equal(t, 1, strings.Count(stderr, "\n"), "want exactly one line on stderr, got:\n%s", stderr)
	require.NotContains(t, stderr, "goroutine ")
	require.NotContains(t, stderr, "panic")
	require.True(t, strings.HasPrefix(stderr, "zkrwlock"), "the line names the program: %q", stderr)
}

// readFile returns the content of path, "" if it does not exist.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}
