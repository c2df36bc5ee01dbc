package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock/internal/zktest"
)

// exec --limit N --weight W: the commands' weights under the lock never
// add up to more than N. Each run appends "start <id> <weight> <ns>" and
// "end <id> <weight> <ns>" to one file while it holds its permits.
func TestLimitBoundsTheCommands(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	logFile := filepath.Join(t.TempDir(), "log")
	const script = `echo "start $ID $W" >> "$LOG"; sleep 0.2; echo "end $ID $W" >> "$LOG"`
	weights := []int{1, 2, 1, 3, 1, 2}
	var eg errgroup.Group
	for i, w := range weights {
		eg.Go(func() error {
			id := fmt.Sprint("r", i)
			p := start(t, []string{"ID=" + id, "W=" + fmt.Sprint(w), "LOG=" + logFile},
				"exec", "--limit", "3", "--weight", fmt.Sprint(w), path, "--", "sh", "-c", script)
			select {
			case <-p.done:
			case <-time.After(runTimeout):
				return fmt.Errorf("%s: still running after %v", id, runTimeout)
			}
			if p.res.code != 0 {
				return fmt.Errorf("%s: exit %d: %s", id, p.res.code, p.res.stderr)
			}
			return nil
		})
	}
	require.NoError(t, eg.Wait())
	lines := strings.Split(strings.TrimSpace(readFile(t, logFile)), "\n")
	require.Len(t, lines, 2*len(weights))
	held, most := 0, 0
	for _, line := range lines {
		var kind, id string
		var w int
		_, err := fmt.Sscan(line, &kind, &id, &w)
		require.NoError(t, err, line)
		if kind == "start" {
			held += w
		} else {
			held -= w
		}
		require.LessOrEqual(t, held, 3, "past the limit at %q:\n%s", line, strings.Join(lines, "\n"))
		most = max(most, held)
	}
	assert.Greater(t, most, 1, "the commands never ran together")
	require.Empty(t, children(t, client(t), path), "nodes left behind")
}

// queue and ls show a bounded lock's permits: each node's weight of the
// capacity, the permits in use and the waiters' weights.
func TestLimitShownByQueueAndLs(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	script := `while [ ! -e "` + gate + `" ]; do sleep 0.05; done`
	holder := start(t, nil, "exec", "--limit", "4", "--weight", "3", path, "--", "sh", "-c", script)
	conn := client(t)
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 1 }, "%s", "the holder to queue")
	waiter := start(t, nil, "exec", "--limit", "4", "--weight", "2", "--quiet", path, "--", "true")
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "the waiter to queue")

	r := runIn(t, nil, "queue", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^3/4 +held .*sem-3of4-`, r.stdout)
	assert.Regexp(t, `(?m)^2/4 +waiting .*sem-2of4-`, r.stdout)
	assert.Contains(t, r.stdout, "permits: 3 of 4 in use; 1 waiting for 2")
	r = runIn(t, nil, "queue", path, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"weight": 3`)
	assert.Contains(t, r.stdout, `"capacity": 4`)
	r = runIn(t, nil, "ls", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, path+": permits: 3 of 4 in use; 1 waiting for 2")
	r = runIn(t, nil, "ls", path, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, strings.Join(strings.Fields(r.stdout), ""), `"permits":{"capacity":4,"in_use":3,"waiting":[2]}`)

	require.NoError(t, touch(gate))
	require.Equal(t, 0, holder.wait(t, runTimeout).code)
	require.Equal(t, 0, waiter.wait(t, runTimeout).code)
}

// --limit's usage errors, and a fleet that disagrees on it.
func TestLimitUsage(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	for _, args := range [][]string{
		{"--weight", "2", path},
		{"--limit", "4", "--write", path},
		{"--limit", "0", path},
		{"--limit", "4", "--weight", "5", path},
		{"--limit", "4", "--weight", "0", path},
		{"--limit", "4", "--read", path, "--write", path + "-b"},
	} {
		r := runIn(t, nil, slices.Concat([]string{"exec"}, args, []string{"--", "true"})...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
	r := runIn(t, nil, "exec", "--limit", "2", path, "--", "true")
	require.Equal(t, 0, r.code, r.stderr)

	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	holder := start(t, nil, "exec", "--limit", "2", path, "--", "sh", "-c", `while [ ! -e "`+gate+`" ]; do sleep 0.05; done`)
	conn := client(t)
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 1 }, "%s", "the holder to queue")
	for _, args := range [][]string{{"--limit", "3"}, {"--read"}} {
		r := runIn(t, nil, slices.Concat([]string{"exec"}, args, []string{path, "--", "true"})...)
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, "mixed fleet", "%v", args)
	}
	require.NoError(t, touch(gate))
	require.Equal(t, 0, holder.wait(t, runTimeout).code)
}

func touch(name string) error { return os.WriteFile(name, nil, 0o600) }
