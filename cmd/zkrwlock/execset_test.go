package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Two execs that name the same two locks in opposite orders: if each took
// its first lock and then waited for its second, some round would
// deadlock (each run is bounded); they must not overlap either.
func TestExecSetOppositeOrders(t *testing.T) {
	server(t)
	a, b := zktest.LockPath(t, "/cli-a"), zktest.LockPath(t, "/cli-b")
	logFile := filepath.Join(t.TempDir(), "log")
	// The command records what it holds, as it starts and as it ends.
	const script = `echo "start $ID" >> "$LOG"; sleep 0.05; echo "end $ID" >> "$LOG"`
	const rounds = 15
	orders := [][]string{{"--write", a, "--write", b}, {"--write", b, "--write", a}}
	var eg errgroup.Group
	for w, order := range orders {
		eg.Go(func() error {
			for i := range rounds {
				id := fmt.Sprintf("w%d.%d", w, i)
				args := append(append([]string{"exec"}, order...), "--", "sh", "-c", script)
				p := start(t, []string{"ID=" + id, "LOG=" + logFile}, args...)
				select {
				case <-p.done:
				case <-time.After(runTimeout):
					return fmt.Errorf("%s: still running after %v: a deadlock", id, runTimeout)
				}
				if p.res.code != 0 {
					return fmt.Errorf("%s: exit %d: %s", id, p.res.code, p.res.stderr)
				}
			}
			return nil
		})
	}
	require.NoError(t, eg.Wait())

	lines := strings.Split(strings.TrimSpace(readFile(t, logFile)), "\n")
	require.Len(t, lines, 2*len(orders)*rounds)
	for i := 0; i < len(lines); i += 2 {
		// Appended in order: each start is followed by its own end, or two
		// commands held both locks at once.
		start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		require.Equal(t, "start", start[0], "line %d:\n%s", i, strings.Join(lines, "\n"))
		require.Equal(t, []string{"end", start[1]}, end, "line %d: two holders at once:\n%s", i+1, strings.Join(lines, "\n"))
	}
}

// A member's node deleted by hand ends the run as a single lost lock
// does, naming that member; the other member is released.
func TestExecSetMemberDeleted(t *testing.T) {
	server(t)
	a, b := zktest.LockPath(t, "/cli-a"), zktest.LockPath(t, "/cli-b")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", a, "--read", b, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)

	nodes := children(t, conn, b)
	require.Len(t, nodes, 1)
	require.Len(t, children(t, conn, a), 1)
	require.NoError(t, conn.Delete(b+"/"+nodes[0], -1))
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code, r.stderr)
	require.Contains(t, r.stderr, "lost the read lock on "+b+" while the command ran")
	require.Contains(t, r.stderr, "the command was stopped because the read lock on "+b+" was lost")
	requireGone(t, sleeper)
	require.Empty(t, children(t, conn, a), "the member still held is released")
}

// The set's command sees one token and every node, one a line, in the
// order given.
func TestExecSetEnvironment(t *testing.T) {
	server(t)
	a, b := zktest.LockPath(t, "/cli-a"), zktest.LockPath(t, "/cli-b")
	r := runCLI(t, nil, "exec", "--read", b, "--write", a, "--", "sh", "-c", `echo "$ZKRWLOCK_TOKEN"; echo "$ZKRWLOCK_NODE"`)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.NotEqual(t, "0", lines[0])
	require.True(t, strings.HasPrefix(lines[1], b+"/") && strings.Contains(lines[1], "read-"), lines[1])
	require.True(t, strings.HasPrefix(lines[2], a+"/") && strings.Contains(lines[2], "write-"), lines[2])
}

// One member revoked stops the set's command as one revoked lock does
// (exit 113, naming that member), and every member is released.
func TestExecSetMemberRevoked(t *testing.T) {
	server(t)
	a, b := zktest.LockPath(t, "/cli-a"), zktest.LockPath(t, "/cli-b")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--read", a, "--write", b, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)
	rv := runCLI(t, nil, "revoke", b)
	require.Equal(t, 0, rv.code, rv.stderr)
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitRevoked, r.code, r.stderr)
	require.Contains(t, r.stderr, "the command was stopped because the write lock on "+b+" was revoked")
	requireGone(t, sleeper)
	require.Empty(t, children(t, conn, a))
	require.Empty(t, children(t, conn, b))
}

// --max-hold limits every member: the command is stopped as for one lock
// (exit 112), and the locks are freed.
func TestExecSetMaxHold(t *testing.T) {
	server(t)
	a, b := zktest.LockPath(t, "/cli-a"), zktest.LockPath(t, "/cli-b")
	conn := client(t)
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", a, "--read", b, "--max-hold", "2s", "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitHoldLimit, r.code, r.stderr)
	require.Contains(t, r.stderr, "a head start before --max-hold 2s")
	requireGone(t, sleeper)
	zktest.Poll(t, 10*time.Second, func() bool { return len(children(t, conn, a))+len(children(t, conn, b)) == 0 },
		func() string { return fmt.Sprintf("nodes left: %v %v", children(t, conn, a), children(t, conn, b)) })
}
