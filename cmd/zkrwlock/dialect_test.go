package main

import (
	"path"
	"strings"
	"testing"

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
