package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// WithACL protects the lock directory, the parents the lock creates, and
// every lock node: a session without the credentials can neither read nor
// delete them, nor queue on the lock.
func TestACL(t *testing.T) {
	srv := sharedServer(t)
	acl := zk.DigestACL(zk.PermAll, "user", "secret")
	var b [4]byte
	rand.Read(b[:])
	root := "/acl-" + hex.EncodeToString(b[:]) // a fresh top: every parent is the lock's to create
	p := root + "/locks/schema"
	ctx := testContext(t)

	owner, owner2, stranger := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	for _, c := range []*client{owner, owner2} {
		require.NoError(t, c.conn.AddAuth("digest", []byte("user:secret")))
	}
	l, l2 := owner.lock(t, p, rwlock.WithACL(acl)), owner2.lock(t, p, rwlock.WithACL(acl))

	w, err := l.Lock(ctx)
	require.NoError(t, err)
	for _, node := range []string{root, root + "/locks", p, w.Node()} {
		got, _, err := owner.conn.GetACL(node)
		require.NoError(t, err, node)
		require.Equal(t, acl, got, "ACL of %s", node)
	}

	t.Run("a stranger cannot touch the nodes", func(t *testing.T) {
		_, _, err := stranger.conn.Get(w.Node())
		require.ErrorIs(t, err, zk.ErrNoAuth)
		require.ErrorIs(t, stranger.conn.Delete(w.Node(), -1), zk.ErrNoAuth)
		_, _, err = stranger.conn.Children(p)
		require.ErrorIs(t, err, zk.ErrNoAuth)
	})

	t.Run("a stranger cannot queue", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			path string
		}{
			{"on the lock", p},
			{"on a new lock under a protected parent", root + "/locks/other"},
		} {
			ls := stranger.lock(t, tc.path) // world ACL: it has no say over the parents'
			for name, acquire := range map[string]func(context.Context) (*rwlock.Grant, error){
				"Lock": ls.Lock, "RLock": ls.RLock, "TryLock": ls.TryLock,
			} {
				start := time.Now()
				g, err := acquire(ctx)
				require.Nil(t, g, "%s %s", name, tc.name)
				require.ErrorIs(t, err, zk.ErrNoAuth, "%s %s", name, tc.name)
				require.Less(t, time.Since(start), 10*time.Second, "%s %s: must fail at once, not retry", name, tc.name)
				// The remedy is to authenticate: WithACL cannot change an
				// ACL someone else set.
				assert.Contains(t, err.Error(), "AddAuth", "%s %s", name, tc.name)
				assert.NotContains(t, err.Error(), "see WithACL", "%s %s", name, tc.name)
				t.Logf("%s %s: %v", name, tc.name, err)
			}
		}
		require.Equal(t, grantNodes(w), lockNodes(t, owner.conn, p), "the stranger's calls left nothing")
		ok, _, err := owner.conn.Exists(root + "/locks/other")
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("the owners lock as usual", func(t *testing.T) {
		reader := goAcquire(t, ctx, l2.RLock)
		waitQueue(t, l, 2)
		reader.stillWaiting(t, "the owner's writer holds the lock")
		require.NoError(t, w.Release(ctx))
		r, err := reader.wait(t)
		require.NoError(t, err)
		got, _, err := owner.conn.GetACL(r.Node())
		require.NoError(t, err)
		require.Equal(t, acl, got)
		require.NoError(t, l.WithRead(ctx, func(context.Context) error { return nil }), "readers share")
		require.NoError(t, r.Release(ctx))
		require.Empty(t, lockNodes(t, owner.conn, p))
	})
}

// Lock node data tells an operator who holds the lock: "owner=host:pid" by
// default, WithOwner's text otherwise, and a "mode=read" line once
// downgraded.
func TestNodeData(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, op := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	ctx := testContext(t)
	host, err := os.Hostname()
	require.NoError(t, err)

	get := func(node string) string {
		data, _, err := op.conn.Get(node)
		require.NoError(t, err)
		return string(data)
	}

	g, err := a.lock(t, p).Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("owner=%s:%d\n", host, os.Getpid()), get(g.Node()))
	require.NoError(t, g.Release(ctx))

	l := a.lock(t, p, rwlock.WithOwner("schema-migration\nbuild-7"))
	g, err = l.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, "owner=schema-migration build-7\n", get(g.Node()), "one line, whatever the owner")
	r, err := g.Downgrade(ctx)
	require.NoError(t, err)
	require.Equal(t, "owner=schema-migration build-7\nmode=read\n", get(r.Node()))
	q, err := l.Queue(ctx)
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, "schema-migration build-7", q[0].Owner)
	require.NoError(t, r.Release(ctx))

	r, err = l.RLock(ctx)
	require.NoError(t, err)
	require.Equal(t, "owner=schema-migration build-7\n", get(r.Node()))
	require.NoError(t, r.Release(ctx))
}
