package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// exec --elect runs a hot standby: the standby's command starts only once
// the leader's exec resigned, which it does as its command exits; the
// leader's value is what 'zkrwlock leader' shows. A leader's node deleted
// by hand stops its command at once, as a lost lock does.
func TestExecElectHotStandby(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	dir := t.TempDir()
	fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a := start(t, []string{"F=" + fa}, "exec", "--elect", path, "--value", "10.0.0.1:80", "--", "sh", "-c", lostScript)
	startedPid(t, fa)
	b := start(t, []string{"F=" + fb}, "exec", "--elect", path, "--value", "10.0.0.2:80", "--", "sh", "-c", lostScript)
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "the standby to queue")

	r := runIn(t, nil, "leader", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "10.0.0.1:80 term="), r.stdout)
	require.Empty(t, readFile(t, fb), "the standby's command started while another led")

	a.signal(t, syscall.SIGTERM) // passed on to the command, whose exit resigns
	ra := a.wait(t, 30*time.Second)
	require.Equal(t, 143, ra.code, ra.stderr)
	require.Equal(t, "term\n", strings.Join(strings.Fields(readFile(t, fa))[2:], "\n")+"\n", "the leader's command was told")
	sleeper := startedPid(t, fb)
	r = runIn(t, nil, "leader", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "10.0.0.2:80 term="), r.stdout)

	nodes := children(t, conn, path)
	require.Len(t, nodes, 1)
	require.NoError(t, conn.Delete(path+"/"+nodes[0], -1)) // an operator's zkCli delete
	rb := b.wait(t, 30*time.Second)
	require.Equal(t, exitLost, rb.code, rb.stderr)
	require.Contains(t, rb.stderr, "SIGKILL follows in 0s")
	requireGone(t, sleeper)
}

// A leader cut off from ZooKeeper: its command, which ignores SIGTERM, is
// dead before a successor's Campaign returns, with the longest --grace.
func TestExecElectStoppedBeforeSuccessor(t *testing.T) {
	tier.Long(t) // waits out a session timeout
	srv := server(t)
	path := zktest.LockPath(t, "/cli")
	proxy := faultproxy.Start(t, srv.Addr(0))
	f := filepath.Join(t.TempDir(), "f")
	const sessionTimeout = 4 * time.Second
	p := start(t, []string{"F=" + f}, "exec", "--elect", path, "--zk", proxy.Addr(),
		"--session-timeout", sessionTimeout.String(), "--", "sh", "-c", stubbornScript)
	sleeper := startedPid(t, f)

	conn := client(t)
	e, err := rwlock.NewElection(conn, path)
	require.NoError(t, err)
	type outcome struct {
		err         error
		sleeperDead bool
	}
	led := make(chan outcome, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() {
		g, err := e.Campaign(ctx, []byte("successor"))
		o := outcome{err: err, sleeperDead: gone(sleeper)} // looked at the moment it leads
		if err == nil {
			g.Release(context.Background())
		}
		led <- o
	}()
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "the successor to queue")

	proxy.Blackhole()
	o := <-led
	require.NoError(t, o.err)
	require.True(t, o.sleeperDead, "a successor led while the old leader's command still ran")
	r := p.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code)
	require.Contains(t, r.stderr, "sent SIGKILL")
}

// The election's flags are checked before anything is dialled.
func TestExecElectUsage(t *testing.T) {
	for _, args := range [][]string{
		{"exec", "--elect", "/x", "--write", "--", "true"},
		{"exec", "--elect", "/x", "--no-wait", "--", "true"},
		{"exec", "--elect", "/x", "--timeout", "0", "--", "true"},
		{"exec", "--value", "v", "--write", "/x", "--", "true"},
		{"exec", "--elect", "/x", "--lock-delay", "-1s", "--", "true"},
		{"exec", "--elect", "/x"},
	} {
		r := runCLI(t, nil, args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		requireOneLine(t, r.stderr)
	}
}
