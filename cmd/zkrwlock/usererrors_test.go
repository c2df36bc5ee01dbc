package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Messages in the operator's terms, through the built binary.

// An empty --zk (an unset variable in a script) is a usage error, never
// the default server.
func TestEmptyZK(t *testing.T) {
	for _, zkFlag := range []string{"", " ", ","} {
		r := runCLI(t, []string{"ZOOKEEPER_SERVERS=127.0.0.1:1"}, "queue", "--zk", zkFlag, "/locks/x")
		require.Equal(t, exitUsage, r.code, r.stderr)
		requireOneLine(t, r.stderr)
		require.Contains(t, r.stderr, "--zk: no ZooKeeper servers")
	}
}

// A refused connection at every address ends the dial after the second
// round, about a second in, not at --connect-timeout.
func TestRefusedConnectionGivesUpEarly(t *testing.T) {
	// Closed ports: connection refused. Not ones a listener just gave
	// back, which other packages' tests may take meanwhile.
	r := runCLI(t, nil, "queue", "--zk", "127.0.0.1:1,127.0.0.1:2", "--connect-timeout", "30s", "/locks/x")
	require.Equal(t, exitUnavailable, r.code, r.stderr)
	requireOneLine(t, r.stderr)
	require.Contains(t, r.stderr, "cannot reach ZooKeeper at 127.0.0.1:1,127.0.0.1:2: connection refused, twice a second apart, at every address")
	require.Less(t, r.took, 10*time.Second, "waited out --connect-timeout 30s")
	require.GreaterOrEqual(t, r.took, time.Second, "gave up before the second round")
}

// The exit table of --help names every command that exits 0.
func TestHelpExitTableNamesEveryCommand(t *testing.T) {
	r := runCLI(t, nil, "--help")
	require.Equal(t, 0, r.code, r.stderr)
	_, table, ok := strings.Cut(r.stdout, "Exit status:")
	require.True(t, ok)
	line := ""
	for l := range strings.SplitSeq(table, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "0 ") {
			line = l
		}
	}
	for _, cmd := range []string{"queue", "ls", "revoke", "leader", "dev", "version", "--help"} {
		require.Contains(t, line, cmd)
	}
}

// A build that records no VCS information (go build -buildvcs=false, a
// git worktree) prints the revision that make install passes it.
func TestVersionRevisionOfMakeInstall(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "zkrwlock")
	mk, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	require.Contains(t, string(mk), `-X main.revision=`)
	require.Contains(t, string(mk), `-X main.modified=`)
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X main.revision=0123456789abcdef0123 -X main.modified=true", ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.Contains(t, string(got), "(revision 0123456789ab, modified; go")
}

// A path only alice may use (digest:alice:secret). Without --auth, the
// message gives the CLI's advice alone. With the scheme forgotten
// (--auth alice:secret), it suggests digest, and never shows the password.
func TestNoAuthMessages(t *testing.T) {
	server(t)
	protected := zktest.LockPath(t, "/cli-noauth")
	alice := client(t)
	require.NoError(t, alice.AddAuth("digest", []byte("alice:secret")))
	for p := protected; p != "/"; p = filepath.Dir(p) {
		defer alice.Delete(p, -1)
	}
	parts := strings.Split(strings.TrimPrefix(protected, "/"), "/")
	for i := range parts[:len(parts)-1] {
		_, err := alice.Create("/"+strings.Join(parts[:i+1], "/"), nil, 0, zk.WorldACL(zk.PermAll))
		if err != zk.ErrNodeExists {
			require.NoError(t, err)
		}
	}
	_, err := alice.Create(protected, nil, 0, zk.DigestACL(zk.PermAll, "alice", "secret"))
	require.NoError(t, err)

	r := runCLI(t, nil, "exec", "--write", protected, "--", "true")
	require.Equal(t, exitNoPerm, r.code, r.stderr)
	requireOneLine(t, r.stderr)
	require.Contains(t, r.stderr, "authenticate with --auth SCHEME:CREDENTIALS (or $ZKRWLOCK_AUTH) as an identity the ACL allows")
	for _, library := range []string{"AddAuth", "WithACL", "DELETE", "zk.Conn"} {
		require.NotContains(t, r.stderr, library, "library advice in the CLI's message")
	}

	r = runCLI(t, nil, "queue", "--auth", "alice:secret", protected)
	require.Equal(t, exitNoPerm, r.code, r.stderr)
	requireOneLine(t, r.stderr)
	require.Contains(t, r.stderr, `ZooKeeper has no scheme "alice": for a user and password, name the scheme first, --auth digest:alice:PASSWORD`)
	require.NotContains(t, r.stderr, "secret")

	r = runCLI(t, nil, "queue", "--auth", "digest:alice:wrong", protected)
	require.Equal(t, exitNoPerm, r.code, r.stderr)
	require.NotContains(t, r.stderr, "no scheme", "digest is a scheme")
}
