package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestWritersNeverOverlap(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	logFile := filepath.Join(t.TempDir(), "log")
	// Each run appends "start <id> <ns>" and "end <id> <ns>" under the lock.
	const script = `echo "start $ID $(date +%s%N)" >> "$LOG"; sleep 0.2; echo "end $ID $(date +%s%N)" >> "$LOG"`
	const workers, runs = 3, 3
	var eg errgroup.Group
	for w := range workers {
		eg.Go(func() error {
			for i := range runs {
				id := fmt.Sprintf("w%d.%d", w, i)
				p := start(t, []string{"ID=" + id, "LOG=" + logFile}, "exec", "--write", path, "--", "sh", "-c", script)
				select {
				case <-p.done:
				case <-time.After(runTimeout):
					return fmt.Errorf("%s: still running after %v", id, runTimeout)
				}
				if p.res.code != 0 {
					return fmt.Errorf("%s: exit %d: %s", id, p.res.code, p.res.stderr)
				}
			}
			return nil
		})
	}
	require.NoError(t, eg.Wait())

	type interval struct {
		id         string
		start, end int64
	}
	var ivs []interval
	open := map[string]int64{}
	lines := strings.Split(strings.TrimSpace(readFile(t, logFile)), "\n")
	require.Len(t, lines, 2*workers*runs)
	for i, line := range lines {
		var kind, id string
		var ns int64
		_, err := fmt.Sscan(line, &kind, &id, &ns)
		require.NoError(t, err, line)
		// The file is appended to in order: an exclusive lock means every
		// start is followed by its own end.
		if i%2 == 0 {
			require.Equal(t, "start", kind, "line %d: %q: two holders at once:\n%s", i, line, strings.Join(lines, "\n"))
			open[id] = ns
		} else {
			require.Equal(t, "end", kind, line)
			require.Contains(t, open, id, "line %d: %q ends a run that did not start last", i, line)
			ivs = append(ivs, interval{id, open[id], ns})
			delete(open, id)
		}
	}
	slices.SortFunc(ivs, func(a, b interval) int { return int(a.start - b.start) })
	for i := 1; i < len(ivs); i++ {
		require.LessOrEqual(t, ivs[i-1].end, ivs[i].start, "%s and %s overlap", ivs[i-1].id, ivs[i].id)
	}
	require.Empty(t, children(t, client(t), path), "nodes left behind")
}

func TestReadersOverlap(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	dir := t.TempDir()
	// Each reader marks that it holds the lock, then waits, holding it, for
	// the other's mark: both can finish only if they hold it together.
	const script = `touch "$DIR/$ME"; i=0
while [ ! -e "$DIR/$OTHER" ]; do i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.1; done`
	a := start(t, []string{"DIR=" + dir, "ME=a", "OTHER=b"}, "exec", "--read", path, "--", "sh", "-c", script)
	b := start(t, []string{"DIR=" + dir, "ME=b", "OTHER=a"}, "exec", "--read", path, "--", "sh", "-c", script)
	require.Equal(t, 0, a.wait(t, runTimeout).code, "reader a did not see reader b while holding the lock")
	require.Equal(t, 0, b.wait(t, runTimeout).code, "reader b did not see reader a while holding the lock")
}

func TestExitCodePassesThrough(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 255", 255},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
	} {
		t.Run(tc.script, func(t *testing.T) {
			r := runCLI(t, nil, "exec", "--read", path, "--", "sh", "-c", tc.script)
			require.Equal(t, tc.want, r.code, r.stderr)
			require.Empty(t, r.stderr, "zkrwlock adds nothing to the command's own failure")
		})
	}
	require.Empty(t, children(t, client(t), path), "nodes left behind")
}

func TestEnvironment(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	var last int64
	for i, mode := range []string{"--write", "--read", "--write"} {
		r := runCLI(t, nil, "exec", mode, path, "--", "sh", "-c", `echo "$ZKRWLOCK_TOKEN $ZKRWLOCK_NODE"`)
		require.Equal(t, 0, r.code, r.stderr)
		fields := strings.Fields(r.stdout)
		require.Len(t, fields, 2, r.stdout)
		token, err := strconv.ParseInt(fields[0], 10, 64)
		require.NoError(t, err, "ZKRWLOCK_TOKEN %q is not an integer", fields[0])
		require.Positive(t, token)
		require.Greater(t, token, last, "run %d: tokens grow with every grant", i)
		last = token
		node := fields[1]
		require.True(t, strings.HasPrefix(node, path+"/"), node)
		require.Contains(t, node, strings.TrimPrefix(mode, "--")+"-")
	}
}

func TestCommandCheckedBeforeQueueing(t *testing.T) {
	// A command that cannot run fails at once, even behind a holder: it
	// does not wait its turn, take the lock, and only then fail.
	server(t)
	path := zktest.LockPath(t, "/cli")
	holder := hold(t, path, rwlock.Write, "holder-C")
	conn := client(t)
	for _, tc := range commandCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			r := runIn(t, nil, "exec", "--read", "--timeout", "5s", path, "--", tc.command)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.Less(t, r.took, 5*time.Second, "it waited for the lock")
			require.Equal(t, []string{filepath.Base(holder.Node())}, children(t, conn, path), "it queued")
		})
	}
}

func TestTimeout(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	holder := hold(t, path, rwlock.Write, "holder-T")
	conn := client(t)

	t.Run("timeout", func(t *testing.T) {
		r := runCLI(t, nil, "exec", "--read", "--timeout", "1s", path, "--", "echo", "ran")
		require.Equal(t, exitTimeout, r.code, r.stderr)
		require.Empty(t, r.stdout, "the command must not run")
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		last := lines[len(lines)-1]
		require.Contains(t, last, "timed out after 1s")
		require.Contains(t, last, "owned by holder-T")
		require.GreaterOrEqual(t, r.took, time.Second)
		require.Equal(t, []string{filepath.Base(holder.Node())}, children(t, conn, path), "node left behind")
	})
	t.Run("no-wait", func(t *testing.T) {
		r := runCLI(t, nil, "exec", "--write", "--no-wait", path, "--", "echo", "ran")
		require.Equal(t, exitTimeout, r.code, r.stderr)
		requireOneLine(t, r.stderr)
		require.Empty(t, r.stdout)
		require.Equal(t, []string{filepath.Base(holder.Node())}, children(t, conn, path), "node left behind")
	})
	// --timeout 0 waits no time at all, as flock -w 0 does, not forever.
	for _, args := range [][]string{{"--timeout", "0s"}, {"--timeout", "0"}, {"--timeout", "0s", "--no-wait"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			p := start(t, nil, append(append([]string{"exec", "--read"}, args...), path, "--", "echo", "ran")...)
			r := p.wait(t, 30*time.Second)
			require.Equal(t, exitTimeout, r.code, r.stderr)
			requireOneLine(t, r.stderr)
			require.Contains(t, r.stderr, "is not free (holder write-")
			require.Empty(t, r.stdout)
			require.Equal(t, []string{filepath.Base(holder.Node())}, children(t, conn, path), "node left behind")
		})
	}
	t.Run("timeout 0 on a free lock", func(t *testing.T) {
		r := runCLI(t, nil, "exec", "--read", "--timeout", "0s", path+"-free", "--", "echo", "ran")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "ran\n", r.stdout)
	})
}

func TestProgress(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	holder := hold(t, path, rwlock.Write, "holder-P")
	p := start(t, nil, "exec", "--write", path, "--", "echo", "ran")
	zktest.WaitFor(t, 30*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "waiting: 1 ahead, holder write-")
	}, "%s", "a progress line")
	require.Contains(t, p.stderr.String(), "owned by holder-P")
	require.NoError(t, holder.Release(t.Context()))
	r := p.wait(t, runTimeout)
	require.Equal(t, 0, r.code)
	require.Equal(t, "ran\n", r.stdout)
	require.Contains(t, r.stderr, "acquired the write lock on "+path+" after")
}

func TestInterruptWhileWaiting(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	holder := hold(t, path, rwlock.Write, "holder-I")
	conn := client(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(signalName(sig), func(t *testing.T) {
			p := start(t, nil, "exec", "--write", path, "--", "echo", "ran")
			zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "zkrwlock's node")
			p.signal(t, sig)
			r := p.wait(t, 30*time.Second)
			require.Equal(t, 128+int(sig), r.code)
			require.Empty(t, r.stdout)
			require.Contains(t, r.stderr, "left the queue")
			require.NotContains(t, r.stderr, "goroutine ")
			require.Equal(t, []string{filepath.Base(holder.Node())}, children(t, conn, path), "node left behind")
		})
	}
}

func TestSignalsReachTheCommand(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", path, "--", "sh", "-c",
		`trap 'echo "got TERM" >> "$F"; exit 3' TERM; echo started >> "$F"; sleep 60 & wait`)
	zktest.WaitFor(t, 30*time.Second, func() bool { return readFile(t, f) != "" }, "%s", "the command to start")
	p.signal(t, syscall.SIGTERM)
	r := p.wait(t, 30*time.Second)
	require.Equal(t, 3, r.code, "zkrwlock exits with the command's status")
	require.Equal(t, "started\ngot TERM\n", readFile(t, f))
	require.Empty(t, children(t, client(t), path), "not released")
}

// lostScript records in $F that it started, its background job's pid, and
// SIGTERM when it comes.
const lostScript = `trap 'echo term >> "$F"; exit 143' TERM
sleep 60 & echo "started $!" >> "$F"; wait`

// startedPid waits until the command of lostScript has started and returns
// the pid of its background job.
func startedPid(t *testing.T, f string) int {
	t.Helper()
	zktest.WaitFor(t, 30*time.Second, func() bool { return strings.HasPrefix(readFile(t, f), "started ") }, "%s", "the command to start")
	pid, err := strconv.Atoi(strings.Fields(readFile(t, f))[1])
	require.NoError(t, err)
	return pid
}

// requireGone checks that a process of the command's group was stopped too.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	zktest.WaitFor(t, 10*time.Second, func() bool { return gone(pid) }, "%s", fmt.Sprintf("pid %d to be gone", pid))
}

// gone reports whether pid has ended: no such process, or a zombie, which
// the init of a container may be slow to reap.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func TestLostNodeDeleted(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", path, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)

	nodes := children(t, conn, path)
	require.Len(t, nodes, 1)
	require.NoError(t, conn.Delete(path+"/"+nodes[0], -1)) // an operator's zkCli delete
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code)
	require.Contains(t, r.stderr, "lost the write lock on "+path+" while the command ran")
	// The next waiter may hold the lock already: SIGKILL follows SIGTERM
	// at once (TestLostNodeDeletedKillsAtOnce), so the command may not get
	// to run its trap.
	require.Contains(t, r.stderr, "sent SIGTERM to the command, SIGKILL follows in 0s")
	requireGone(t, sleeper)
}

// stubbornScript is a command whose shell and background job ignore
// SIGTERM: only SIGKILL ends them.
const stubbornScript = `trap '' TERM; sleep 60 & echo "started $!" >> "$F"; wait`

// A node deleted by someone else may already have let the next waiter in:
// the command gets SIGKILL at once, whatever --grace says (the most that
// fits the default session timeout, 1.775s, here).
func TestLostNodeDeletedKillsAtOnce(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", "--grace", "1.7s", path, "--", "sh", "-c", stubbornScript)
	sleeper := startedPid(t, f)

	nodes := children(t, conn, path)
	require.Len(t, nodes, 1)
	require.NoError(t, conn.Delete(path+"/"+nodes[0], -1))
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code)
	require.Contains(t, r.stderr, "SIGKILL follows in 0s")
	require.Contains(t, r.stderr, "sent SIGKILL")
	requireGone(t, sleeper)
}

// A holder cut off from ZooKeeper: its command, which ignores SIGTERM, must
// be dead before the server lets another client have the lock, with the
// longest --grace there is (the default: all the time the lock allows).
func TestLostPartitionKillsBeforeAnotherGrant(t *testing.T) {
	srv := server(t)
	path := zktest.LockPath(t, "/cli")
	proxy := faultproxy.Start(t, srv.Addr(0))
	f := filepath.Join(t.TempDir(), "f")
	const sessionTimeout = 4 * time.Second
	p := start(t, []string{"F=" + f}, "exec", "--write", "--zk", proxy.Addr(),
		"--session-timeout", sessionTimeout.String(), path, "--", "sh", "-c", stubbornScript)
	sleeper := startedPid(t, f)

	conn := client(t)
	other := lockOf(t, conn, path)
	type outcome struct {
		err         error
		sleeperDead bool
	}
	granted := make(chan outcome, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() {
		g, err := other.Lock(ctx)
		o := outcome{err: err, sleeperDead: gone(sleeper)} // looked at the moment of the grant
		if err == nil {
			g.Release(context.Background())
		}
		granted <- o
	}()
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "the other client to queue")

	proxy.Blackhole()
	o := <-granted
	require.NoError(t, o.err)
	require.True(t, o.sleeperDead, "another client got the lock while the command still ran")
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code)
	require.Contains(t, r.stderr, "sent SIGKILL")
}

func TestLostPartition(t *testing.T) {
	srv := server(t)
	path := zktest.LockPath(t, "/cli")
	proxy := faultproxy.Start(t, srv.Addr(0))
	f := filepath.Join(t.TempDir(), "f")
	const sessionTimeout = 3 * time.Second
	p := start(t, []string{"F=" + f}, "exec", "--debug", "--write", "--zk", proxy.Addr(),
		"--session-timeout", sessionTimeout.String(), path, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)

	// Another client queues for the lock, then the holder is cut off. The
	// other client may be granted the lock only once the server has
	// expired the holder's session, and by then the command must have
	// been told to stop.
	conn := client(t)
	other := lockOf(t, conn, path)
	granted := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var g *rwlock.Grant
	go func() {
		var err error
		g, err = other.Lock(ctx)
		granted <- err
	}()
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "the other client to queue")

	cut := time.Now()
	proxy.Blackhole()
	var grantedAfter time.Duration
	var termBeforeGrant bool
	select {
	case err := <-granted:
		require.NoError(t, err)
		t.Cleanup(func() { g.Release(context.Background()) })
		grantedAfter = time.Since(cut)
		termBeforeGrant = strings.Contains(readFile(t, f), "\nterm\n")
	case <-time.After(time.Minute):
		t.Fatal("the other client was never granted the lock")
	}
	r := p.wait(t, 30*time.Second)
	t.Logf("cut off at 0; other client granted after %v", grantedAfter)
	require.True(t, termBeforeGrant, "another client got the lock %v after the cut, before the command was told to stop", grantedAfter)
	require.Equal(t, exitLost, r.code)
	require.Contains(t, r.stderr, "lost the write lock on "+path+" while the command ran")
	requireGone(t, sleeper)
}

func TestLostSessionExpired(t *testing.T) {
	srv := server(t)
	path := zktest.LockPath(t, "/cli")
	proxy := startSessionProxy(t, srv.Addr(0))
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--read", "--zk", proxy.addr(), path, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)

	proxy.expire(t, srv.Addr(0))
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code)
	require.Contains(t, r.stderr, "lost the read lock on "+path+" while the command ran")
	require.Contains(t, r.stderr, "sent SIGTERM to the command, SIGKILL follows in 0s", "the session is gone: another client may hold the lock")
	requireGone(t, sleeper)
}

func TestCommandStoppedWhenZkrwlockDies(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	server(t)
	path := zktest.LockPath(t, "/cli")
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", path, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)
	require.NoError(t, p.cmd.Process.Kill()) // kill -9: zkrwlock can do nothing
	// Its session, and so the lock, ends within the session timeout; the
	// command must not go on as if it still held the lock.
	zktest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(readFile(t, f), "\nterm\n") }, "%s", "the command to get SIGTERM")
	// Only the command's first process gets the signal: its background job
	// lives on, as the docs say. It holds zkrwlock's stderr open.
	syscall.Kill(sleeper, syscall.SIGKILL)
	require.Equal(t, 128+int(syscall.SIGKILL), p.wait(t, 30*time.Second).code)
}

// --max-hold: the command is stopped a head start before the limit, and
// the lock is freed at the limit, not before; exec exits 112.
func TestMaxHoldStopsTheCommand(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	began := time.Now()
	p := start(t, []string{"F=" + f}, "exec", "--write", "--max-hold", "2s", path, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitHoldLimit, r.code, r.stderr)
	// The messages say when the command was told, and why then: the head
	// start is half of a short limit.
	require.Regexp(t, `told 1(\.\d+)?s after the grant, a head start of 1s before the limit of 2s`, r.stderr)
	// The command starts after the grant, as late as its fork and exec make
	// it on a loaded machine: it is stopped about 1s after it started, not
	// at once, nor as the limit comes 2s after the grant.
	m := regexp.MustCompile(`stopped (\S+) after it started, a head start before --max-hold 2s on the write lock on ` +
		regexp.QuoteMeta(path)).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	stopped, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	require.GreaterOrEqual(t, stopped, 500*time.Millisecond, "stopped long before the head start")
	require.LessOrEqual(t, stopped, 1500*time.Millisecond, "stopped at the limit rather than a head start before it")
	requireGone(t, sleeper)
	require.Less(t, time.Since(began), 10*time.Second)
	zktest.Poll(t, 10*time.Second, func() bool { return len(children(t, conn, path)) == 0 },
		func() string { return fmt.Sprintf("nodes left: %v", children(t, conn, path)) })
}

// 'zkrwlock revoke' makes a running exec stop its command and exit 113,
// saying who asked, when and why, on stderr and in the file its command's
// environment names, written before the signal. revoke says whom it asked,
// and --wait returns once they have let go.
func TestRevokeStopsExec(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	// The TERM handler copies the revocation file: it exists by then.
	script := `trap 'cat "$ZKRWLOCK_REVOCATION_FILE" >> "$F"; echo term >> "$F"; exit 143' TERM
test -e "$ZKRWLOCK_REVOCATION_FILE" && echo "early" >> "$F"
sleep 60 & echo "started $!" >> "$F"; wait`
	p := start(t, []string{"F=" + f}, "exec", "--write", path, "--", "sh", "-c", script)
	sleeper := startedPid(t, f)
	rv := runCLI(t, nil, "revoke", "--reason", "DB maintenance, OPS-42", "--by", "ops-1", "--wait", "--timeout", "20s", path)
	require.Equal(t, 0, rv.code, rv.stderr)
	require.Regexp(t, `asked `+regexp.QuoteMeta(path)+` \(write lock, write-\d+ owned by \S+\) to let go`, rv.stdout)
	require.Contains(t, rv.stdout, "the holders asked have let go of "+path)
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitRevoked, r.code, r.stderr)
	require.Regexp(t, `the write lock on `+regexp.QuoteMeta(path)+` was revoked by ops-1 at \S+Z: DB maintenance, OPS-42; sent SIGTERM`, r.stderr)
	require.Regexp(t, `stopped because the write lock on `+regexp.QuoteMeta(path)+` was revoked by ops-1 at \S+: DB maintenance, OPS-42`, r.stderr)
	out := readFile(t, f)
	require.NotContains(t, out, "early", "the file does not exist before a revocation")
	require.Regexp(t, `(?s)reason=DB maintenance, OPS-42\nby=ops-1\nat=\S+Z\nlock=`+regexp.QuoteMeta(path)+`\nmode=write\nnode=\S+\nterm\n`, out,
		"written before the signal")
	requireGone(t, sleeper)
	require.Empty(t, children(t, conn, path), "released once the command was gone")

	nobody := runCLI(t, nil, "revoke", path)
	require.Equal(t, 0, nobody.code, "revoking a lock nobody holds does nothing")
	require.Contains(t, nobody.stdout, "nobody holds "+path+" now: nobody was asked")
	missing := runCLI(t, nil, "revoke", path+"-misspelt")
	require.Equal(t, exitNoInput, missing.code, missing.stderr)
	require.Contains(t, missing.stderr, "no lock at "+path+"-misspelt")
}

// revoke --wait --timeout gives up, exit 75, while a holder that does not
// listen keeps the lock; it names that holder.
func TestRevokeWaitTimesOut(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	l, err := rwlock.New(conn, path, rwlock.WithOwner("deaf-holder"))
	require.NoError(t, err)
	g, err := l.Lock(t.Context())
	require.NoError(t, err)
	r := runCLI(t, nil, "revoke", "--wait", "--timeout", "500ms", path)
	require.Equal(t, exitTimeout, r.code, r.stderr)
	require.Contains(t, r.stderr, "still holding: write-")
	require.Contains(t, r.stderr, "owned by deaf-holder")
	require.NoError(t, g.Release(t.Context()))
	bad := runCLI(t, nil, "revoke", "--timeout", "1s", path)
	require.Equal(t, exitUsage, bad.code)
}
