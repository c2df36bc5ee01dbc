package main

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// exec --dialect names its node in that dialect.
func TestExecDialect(t *testing.T) {
	server(t)
	for _, tc := range []struct{ dialect, mode, token string }{
		{"curator", "--write", "__WRIT__"},
		{"kazoo", "--read", "__rlock__"},
		{"kazoo-lock", "--read", "read__lock__"},
		{"mutex", "--write", "wlock-"},
		{"kazoo-patterns", "--write", "write-"},
	} {
		r := runIn(t, nil, "exec", tc.mode, "--dialect", tc.dialect, zktest.LockPath(t, "/cli"), "--", "sh", "-c", `echo "$ZKRWLOCK_NODE"`)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr)
		require.Regexp(t, `/_c_[0-9a-f]{32}-`+tc.token+`\d{10}\n$`, r.stdout, tc.dialect)
	}
	r := runIn(t, nil, "exec", "--write", "--dialect", "etcd", zktest.LockPath(t, "/cli"), "--", "true")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown dialect "etcd"`)
}

// --dialect's help names kazoo's extra_lock_patterns as kazoo-patterns
// needs them, and that kazoo declares no kazoo Lock on the path. ls makes
// no node: its --dialect says how it reads the names, not how it makes
// them.
func TestDialectHelp(t *testing.T) {
	help := func(cmd string) string {
		r := runIn(t, nil, cmd, "--help")
		require.Equal(t, 0, r.code, r.stderr)
		return strings.Join(strings.Fields(r.stdout), " ")
	}
	execHelp := help("exec")
	require.Contains(t, execHelp, `kazoo (kazoo ReadLock/WriteLock, where no kazoo Lock uses the path)`)
	require.Contains(t, execHelp, `extra_lock_patterns: ("write-", "read-") for WriteLock and Lock, ("write-",) for ReadLock`)
	lsHelp := help("ls")
	require.Contains(t, lsHelp, "--dialect DIALECT the DIALECT of the zkrwlock clients under PREFIX, which says how to read the names there (ls makes no node)")
	require.Contains(t, lsHelp, "extra_lock_patterns (see docs/peers.md)")
	require.NotContains(t, lsHelp, "our lock nodes' names")
}

// A peer's node on the path: queue and ls show its family, and queue
// --dialect warns when the peer does not see that dialect's names.
func TestPeerNodesShown(t *testing.T) {
	server(t)
	p := zktest.LockPath(t, "/cli")
	// Our holder in the dialect the peer sees: in any other, the peer's
	// node would end its grant (a mixed fleet fails loudly).
	hold(t, p, rwlock.Read, "ours", rwlock.WithDialect(rwlock.DialectCurator))
	conn := client(t)
	const uuid = "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"
	peer, err := conn.Create(p+"/_c_"+uuid+"-__WRIT__", []byte("10.0.0.7"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	r := runIn(t, nil, "queue", p)
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "no dialect asked for, no warning")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 3, r.stdout)
	row := strings.Fields(lines[2])
	require.Equal(t, []string{"write", "waiting", "curator", "10.0.0.7"}, row[:4])
	require.Equal(t, nodeName(peer), row[7])
	require.True(t, strings.HasPrefix(row[7], "__WRIT__"), row[7])

	r = runIn(t, nil, "queue", "--dialect", "native", p)
	require.Equal(t, 0, r.code, r.stderr)
	requireOneLine(t, r.stderr)
	require.Contains(t, r.stderr, "zkrwlock queue: warning: peers on this lock path do not see its nodes")
	require.Contains(t, r.stderr, "Curator InterProcessReadWriteLock")

	r = runIn(t, nil, "queue", "--dialect", "curator", "--json", p)
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "Curator sees the curator dialect's names")
	require.Contains(t, r.stdout, `"family": "curator"`)
	require.Contains(t, r.stdout, `"peer": true`)

	r = runIn(t, nil, "ls", path.Dir(p))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, " zkrwlock/curator,curator")
	require.NotContains(t, r.stdout, "exclusion not guaranteed")

	// A zk.Lock node too: neither Curator nor zk.Lock counts the other's
	// (and our holder, which zk.Lock does not count, lets go).
	_, err = conn.Create(p+"/_c_"+uuid+"-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	r = runIn(t, nil, "queue", p)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "exclusion not guaranteed: not every library here counts every node (curator, curator-mutex do not)")
	r = runIn(t, nil, "queue", "--json", p)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, `"blind": true`), r.stdout)
	r = runIn(t, nil, "ls", path.Dir(p))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, p+": exclusion not guaranteed")
	r = runIn(t, nil, "ls", "--json", path.Dir(p))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"mixed": true`)
}

// kazoo's default locks do not count native names: a kazoo node that comes
// while 'exec --write' holds ends the command as a lost lock; one that is
// there makes a native exec refuse to queue. queue shows it held beside our
// writer, as kazoo takes it to be, and ls calls the lock mixed. --dialect
// kazoo-patterns declares that kazoo's locks count native names: the same
// node then queues, and nothing is mixed.
func TestPlainKazooBesideNative(t *testing.T) {
	server(t)
	p := zktest.LockPath(t, "/cli")
	conn := client(t)
	create := func(name, data string) string {
		n, err := conn.Create(p+"/"+name, []byte(data), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		return path.Base(n)
	}
	const hex = "0123456789abcdef0123456789abcdef"
	kazooWriter := func() string { return create(hex+"__lock__", "kazoo-1") } // as kazoo's WriteLock names it

	f := filepath.Join(t.TempDir(), "f")
	h := start(t, []string{"F=" + f}, "exec", "--write", p, "--", "sh", "-c", lostScript)
	sleeper := startedPid(t, f)
	kazoo := kazooWriter()
	r := h.wait(t, 30*time.Second)
	require.Equal(t, exitLost, r.code, r.stderr)
	require.Contains(t, r.stderr, "a mixed fleet: nodes of kazoo WriteLock or Lock are on the path")
	require.Contains(t, r.stderr, "--dialect kazoo-lock; or --dialect kazoo if no kazoo Lock uses the path; "+
		`or --dialect kazoo-patterns if every kazoo lock there is made with extra_lock_patterns, ("write-", "read-") for WriteLock and Lock`,
		"advice in the command line's words")
	require.NotContains(t, r.stderr, "WithDialect")
	requireGone(t, sleeper)
	require.Equal(t, []string{kazoo}, children(t, conn, p), "exec's node went")

	r = runIn(t, nil, "exec", "--write", p, "--", "true")
	require.Equal(t, exitConfig, r.code, "a mixed fleet is a configuration error: %s", r.stderr)
	require.Contains(t, r.stderr, "refused the write lock on "+p+": a mixed fleet: nodes of kazoo WriteLock or Lock are on the path")
	require.Contains(t, r.stderr, "--dialect kazoo-lock")
	require.NotContains(t, r.stderr, "waiting for", "it failed at once")
	require.NotContains(t, r.stderr, "WithDialect")
	r = runIn(t, nil, "exec", "--write", "--no-wait", "--dialect", "kazoo-patterns", p, "--", "true")
	require.Equal(t, exitTimeout, r.code, "queued behind the kazoo writer: %s", r.stderr)
	require.Equal(t, []string{kazoo}, children(t, conn, p), "no node of ours is left")

	// Our writer first, then kazoo's, made by hand: nobody watches them.
	// (The directory, a container, is never empty meanwhile.)
	ours := create("_c_"+strings.Repeat("f", 32)+"-write-", "ours")
	require.NoError(t, conn.Delete(p+"/"+kazoo, -1))
	kazoo = kazooWriter()
	rows := func(r outcome) [][]string {
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.GreaterOrEqual(t, len(lines), 3, r.stdout)
		return [][]string{strings.Fields(lines[1]), strings.Fields(lines[2])}
	}
	r = runIn(t, nil, "queue", p)
	q := rows(r)
	require.Equal(t, []string{"write", "held", "zkrwlock"}, q[0][:3])
	require.Equal(t, nodeName(ours), q[0][7])
	require.Equal(t, []string{"write", "held", "kazoo", "kazoo-1"}, q[1][:4], "kazoo takes itself to hold")
	require.Contains(t, r.stdout, "exclusion not guaranteed: not every library here counts every node (kazoo do not)")
	r = runIn(t, nil, "queue", "--dialect", "kazoo-patterns", p)
	q = rows(r)
	require.Equal(t, []string{"write", "held", "zkrwlock/kazoo-patterns"}, q[0][:3])
	require.Equal(t, []string{"write", "waiting", "kazoo", "kazoo-1"}, q[1][:4])
	require.NotContains(t, r.stdout, "exclusion not guaranteed")
	require.Empty(t, r.stderr, "kazoo's locks count kazoo-patterns' names")

	ls := func(args ...string) lsEntry {
		r := runIn(t, nil, append([]string{"ls", "--json"}, append(args, p)...)...)
		require.Equal(t, 0, r.code, r.stderr)
		var locks []lsEntry
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks), r.stdout)
		require.Len(t, locks, 1)
		return locks[0]
	}
	l := ls()
	require.True(t, l.Mixed)
	require.Equal(t, []string{"zkrwlock", "kazoo"}, l.Families)
	require.Equal(t, 2, l.Holders)
	l = ls("--dialect", "kazoo-patterns")
	require.False(t, l.Mixed)
	require.Equal(t, []string{"zkrwlock/kazoo-patterns", "kazoo"}, l.Families)
	require.Equal(t, 1, l.Holders)
	r = runIn(t, nil, "ls", p)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, p+": exclusion not guaranteed")
}
