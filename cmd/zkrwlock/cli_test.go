package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tests of the command line itself, in process; they need no ZooKeeper
// server.

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		flags []string // each must be mentioned
	}{
		{[]string{"--help"}, []string{"exec", "queue", "ls", "dev", "version", "ZOOKEEPER_SERVERS", "111", "77"}},
		{[]string{"help"}, []string{"exec", "queue", "ls", "dev"}},
		{[]string{"exec", "--help"}, []string{"--write", "--read", "--timeout", "--timeout 0 does not wait", "--no-wait", "--grace", "--owner",
			"--quiet", "--zk", "--connect-timeout", "--session-timeout", "--debug", "--auth", "ZKRWLOCK_AUTH", "ZKRWLOCK_TOKEN", "ZKRWLOCK_NODE",
			"64", "69", "75", "77", "111", "126", "127", "130"}},
		{[]string{"exec", "-h"}, []string{"--write"}},
		{[]string{"help", "exec"}, []string{"--write"}},
		{[]string{"queue", "--help"}, []string{"--json", "--zk", "--auth", "session_id", "age_seconds", "escaped"}},
		{[]string{"ls", "--help"}, []string{"--json", "--older-than", "--zk", "--auth", "stuck", "oldest_holder", "oldest_waiter", "skipped"}},
		{[]string{"help", "ls"}, []string{"--older-than"}},
		{[]string{"dev", "--help"}, []string{"--servers", "--log", "Ctrl-C", "stop it with SIGTERM", "kill -TERM"}},
		{[]string{"version", "--help"}, []string{"build"}},
		{[]string{"leader", "--help"}, []string{"--watch", "--json", "--zk", "value_base64", "term", "no leader"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runIn(t, nil, tc.args...)
			require.Equal(t, 0, r.code, r.stderr)
			require.Contains(t, r.stdout, "Usage: zkrwlock")
			require.Empty(t, r.stderr)
			for _, f := range tc.flags {
				require.Contains(t, r.stdout, f)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error line
	}{
		{"no command", nil, "Usage"},
		{"unknown command", []string{"lock"}, `unknown command "lock"`},
		{"no mode", []string{"exec", "/locks/x", "--", "true"}, "--write"},
		{"both modes", []string{"exec", "--read", "--write", "/locks/x", "--", "true"}, "exactly one"},
		{"no path", []string{"exec", "--write"}, "PATH"},
		{"no command to run", []string{"exec", "--write", "/locks/x"}, "COMMAND"},
		{"set no command", []string{"exec", "--write", "/locks/x", "--read", "/locks/y"}, "COMMAND"},
		{"lock named twice", []string{"exec", "--write", "/locks/x", "--read", "/locks/x", "--", "true"},
			"/locks/x is named twice (--write and --read)"},
		{"forms mixed", []string{"exec", "--write", "/locks/x", "--read", "/locks/y", "--write", "--", "true"},
			"without a PATH right after it"},
		{"set without waiting", []string{"exec", "--write", "/locks/x", "--read", "/locks/y", "--no-wait", "true"},
			"--no-wait takes one lock"},
		{"unknown flag", []string{"exec", "--write", "--wait", "/locks/x", "--", "true"}, "-wait"},
		{"relative path", []string{"exec", "--write", "locks/x", "--", "true"}, "invalid path"},
		{"trailing slash", []string{"exec", "--read", "/locks/x/", "--", "true"}, "invalid path"},
		{"root", []string{"queue", "/"}, "invalid path"},
		{"reserved path", []string{"queue", "/zookeeper/x"}, "invalid path"},
		{"bad duration", []string{"exec", "--write", "--timeout", "soon", "/locks/x", "--", "true"}, "timeout"},
		{"negative grace", []string{"exec", "--write", "--grace", "-1s", "/locks/x", "--", "true"}, "--grace"},
		{"queue extra argument", []string{"queue", "/locks/x", "/locks/y"}, "unexpected argument"},
		{"chroot", []string{"queue", "--zk", "127.0.0.1:2181/app", "/locks/x"}, "chroot"},
		{"dev servers", []string{"dev", "--servers", "2"}, "--servers"},
		{"leader no path", []string{"leader", "--watch"}, "missing lock PATH"},
		{"ls no prefix", []string{"ls", "--json"}, "missing PREFIX"},
		{"ls extra argument", []string{"ls", "/locks", "/more"}, "unexpected argument"},
		{"ls relative prefix", []string{"ls", "locks"}, "invalid path"},
		{"ls negative age", []string{"ls", "--older-than", "-1h", "/locks"}, "--older-than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A closed port: none of these may get as far as connecting.
			r := runIn(t, []string{"ZOOKEEPER_SERVERS=127.0.0.1:1"}, tc.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			if tc.args != nil {
				requireOneLine(t, r.stderr)
			}
			require.Less(t, r.took, 5*time.Second)
		})
	}
}

// commandCases are commands that cannot run, with the exit code and the
// message a shell gives them.
func commandCases(t *testing.T) []struct {
	name, command string
	code          int
	want          string
} {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\necho ran\n"), 0o644))
	return []struct {
		name, command string
		code          int
		want          string
	}{
		{"bare name not in PATH", "no-such-command-zkrwlock", exitNotFound, "no-such-command-zkrwlock: command not found"},
		{"absolute path not found", filepath.Join(dir, "missing.sh"), exitNotFound, "no such file or directory"},
		{"relative path not found", "./no-such-job-zkrwlock", exitNotFound, "./no-such-job-zkrwlock: no such file or directory"},
		{"not executable", notExec, exitCannotRun, "permission denied"},
		{"a directory", dir, exitCannotRun, "is a directory"},
		{"under a file", notExec + "/x", exitCannotRun, "not a directory"},
	}
}

func TestCommandNotFound(t *testing.T) {
	// Checked before connecting (the port is closed): a bare name is
	// looked up in $PATH, anything with a slash is a path, as in a shell.
	for _, tc := range commandCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			r := runIn(t, []string{"ZOOKEEPER_SERVERS=127.0.0.1:1"}, "exec", "--write", "/locks/x", "--", tc.command)
			require.Equal(t, tc.code, r.code, r.stderr)
			requireOneLine(t, r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}

func TestUnreachableServer(t *testing.T) {
	// A closed port: connection refused. Not one a listener just gave
	// back: the tests of other packages, run at the same time, may listen
	// on it next (a proxy that takes the connection and drops it).
	const addr = "127.0.0.1:1"

	for _, args := range [][]string{
		{"exec", "--write", "/locks/x", "--", "true"},
		{"queue", "--json", "/locks/x"},
		{"ls", "--json", "/locks"},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := runIn(t, nil, append([]string{args[0], "--zk", addr}, args[1:]...)...)
			require.Equal(t, exitUnavailable, r.code, r.stderr)
			requireOneLine(t, r.stderr)
			require.Contains(t, r.stderr, "cannot reach ZooKeeper at "+addr)
			require.Contains(t, r.stderr, "connection refused")
			require.Empty(t, r.stdout)
			// Refused twice a second apart: given up before the default
			// --connect-timeout, 5s.
			require.Less(t, r.took, 5*time.Second)
		})
	}

	t.Run("connect-timeout", func(t *testing.T) {
		r := runIn(t, nil, "queue", "--zk", addr, "--connect-timeout", "500ms", "/locks/x")
		require.Equal(t, exitUnavailable, r.code, r.stderr)
		require.Less(t, r.took, 5*time.Second)
	})
}

func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^zkrwlock (v[0-9]\S*|\(devel\)|\(unknown\)) \((revision [0-9a-f]+(, modified)?; )?` +
		regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := runIn(t, nil, args...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr)
		require.Regexp(t, want, r.stdout)
	}
	// The binary built from this checkout, as an operator runs it.
	r := runCLI(t, nil, "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, want, r.stdout)

	r = runIn(t, nil, "version", "extra")
	require.Equal(t, exitUsage, r.code)
	requireOneLine(t, r.stderr)
}
