package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// ignoredAtStart are the ways zkrwlock gets started with a signal ignored:
// nohup ignores SIGHUP; a shell without job control (a script, cron)
// starts a background job (cmd &) with SIGINT and SIGQUIT ignored, which
// a trap with an empty action stands in for. Each prefix execs zkrwlock.
var ignoredAtStart = []struct {
	name   string
	prefix []string
	sig    syscall.Signal
}{
	{"nohup", []string{"nohup"}, syscall.SIGHUP},
	{"background job of a script", []string{"sh", "-c", `trap '' INT; exec "$0" "$@"`}, syscall.SIGINT},
}

// ignores reports whether process pid ignores sig, from the SigIgn mask in
// /proc/pid/status.
func ignores(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for line := range strings.Lines(string(status)) {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			require.NoError(t, err)
			return mask&(1<<(sig-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}

func TestIgnoredSignalStaysIgnored(t *testing.T) {
	server(t)
	for _, tc := range ignoredAtStart {
		t.Run(tc.name, func(t *testing.T) {
			path := zktest.LockPath(t, "/cli")
			f := filepath.Join(t.TempDir(), "pid")
			// The command records its pid and becomes a sleep that dies
			// of the first signal it does not ignore.
			p := startVia(t, tc.prefix, []string{"F=" + f}, "exec", "--write", path, "--", "sh", "-c",
				`echo "$$" > "$F"; exec sleep 60`)
			zktest.WaitFor(t, 30*time.Second, func() bool { return strings.HasSuffix(readFile(t, f), "\n") }, "%s", "the command to start")
			pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, f)))
			require.NoError(t, err)

			require.True(t, ignores(t, p.cmd.Process.Pid, tc.sig), "zkrwlock no longer ignores %s", signalName(tc.sig))
			require.True(t, ignores(t, pid, tc.sig), "the command does not inherit the ignored %s", signalName(tc.sig))
			// Sent to zkrwlock, as a shell that exits sends SIGHUP to its
			// jobs, and to the command's group, as a terminal would: both
			// ignore it. SIGTERM comes after it and is passed on: had the
			// first signal been passed on, the command would have died of
			// it first (the lower-numbered pending signal is delivered
			// first) and zkrwlock would exit 128+it.
			p.signal(t, tc.sig)
			require.NoError(t, syscall.Kill(-pid, tc.sig))
			p.signal(t, syscall.SIGTERM)
			r := p.wait(t, 30*time.Second)
			require.Equal(t, 128+int(syscall.SIGTERM), r.code, r.stderr)
		})
	}
}

func TestIgnoredSignalDoesNotEndTheWait(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	hold(t, path, rwlock.Write, "holder-S")
	conn := client(t)
	for _, tc := range ignoredAtStart {
		t.Run(tc.name, func(t *testing.T) {
			p := startVia(t, tc.prefix, nil, "exec", "--write", path, "--", "echo", "ran")
			zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, conn, path)) == 2 }, "%s", "zkrwlock's node")
			p.signal(t, tc.sig)
			p.signal(t, syscall.SIGTERM) // delivered after it
			r := p.wait(t, 30*time.Second)
			require.Equal(t, 128+int(syscall.SIGTERM), r.code, r.stderr)
			require.Contains(t, r.stderr, "interrupted by SIGTERM while waiting")
			require.Empty(t, r.stdout)
		})
	}
}

func TestSIGHUPReachesTheCommand(t *testing.T) {
	// Not ignored at start, SIGHUP is passed on like the others.
	server(t)
	path := zktest.LockPath(t, "/cli")
	f := filepath.Join(t.TempDir(), "f")
	p := start(t, []string{"F=" + f}, "exec", "--write", path, "--", "sh", "-c", `echo started > "$F"; exec sleep 60`)
	zktest.WaitFor(t, 30*time.Second, func() bool { return readFile(t, f) != "" }, "%s", "the command to start")
	p.signal(t, syscall.SIGHUP)
	require.Equal(t, 128+int(syscall.SIGHUP), p.wait(t, 30*time.Second).code)
}
