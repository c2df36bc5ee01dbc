package main

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestDev(t *testing.T) {
	server(t) // skips without ZooKeeper, like the rest
	p := start(t, nil, "dev")
	var addr string
	zktest.WaitFor(t, 2*time.Minute, func() bool {
		line, ok := strings.CutSuffix(p.stdout.String(), "\n")
		addr = line
		// The instructions go to stderr just after the address: wait for both.
		return ok && strings.Contains(p.stderr.String(), "In other terminals:")
	}, "%s", "the connect string on stdout, and the instructions on stderr")
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, addr)
	require.Contains(t, p.stderr.String(), "export ZOOKEEPER_SERVERS="+addr)

	r := runCLI(t, []string{"ZOOKEEPER_SERVERS=" + addr}, "exec", "--write", "/locks/demo", "--", "echo", "ran")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "ran\n", r.stdout)

	p.signal(t, syscall.SIGINT) // Ctrl-C
	r = p.wait(t, time.Minute)
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "stopped")
	_, err := net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the server still listens")
}

func TestDevMissingServer(t *testing.T) {
	r := runIn(t, []string{"ZOOKEEPER_CLASSPATH=", "JAVA=/nonexistent/java"}, "dev")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
	requireOneLine(t, r.stderr)
	require.Contains(t, r.stderr, "apt-get install zookeeper")
}
