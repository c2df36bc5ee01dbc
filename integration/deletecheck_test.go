package integration

import (
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
	"github.com/zkrwlock/rwlock/stats"
)

// RWLocks of one path on one connection make the DELETE check once: the
// first pays create, listing and the check; the others create and list.
// A listing that overtakes its create costs one more request (see
// acquisition.listBehind), rarely: the test allows for a few.
func TestDeleteCheckOncePerConnection(t *testing.T) {
	srv := sharedServer(t)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/it")
	g, err := connect(t, srv.ConnectString(), 0).lock(t, path).Lock(ctx) // the directory
	require.NoError(t, err)
	require.NoError(t, g.Release(ctx))

	c := connect(t, srv.ConnectString(), 0)
	const locks = 4
	var rec stats.Recorder
	for range locks {
		g, err := c.lock(t, path, rwlock.WithObserver(&rec)).RLock(ctx) // held: readers share
		require.NoError(t, err)
		t.Cleanup(func() { g.Release(ctx) })
	}
	s := rec.Stats()
	require.Equal(t, uint64(locks), s.Read.Granted)
	extra := int64(s.Requests) - 2*locks // beyond create and listing
	t.Logf("%d requests for %d new RWLocks on one connection (%d one round trip)", s.Requests, locks, s.Read.OneRoundTrip)
	assert.GreaterOrEqual(t, extra, int64(1), "one check")
	assert.Less(t, extra, int64(locks), "a check per RWLock: the connection did not remember it")
}

// A refused DELETE check is not remembered, even while the connection is
// in use: once the client authenticates (AddAuth), the same RWLock and a
// new one on the connection queue.
func TestDeleteCheckAfterAddAuth(t *testing.T) {
	srv := sharedServer(t)
	ctx := testContext(t)
	owner, c := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	require.NoError(t, owner.conn.AddAuth("digest", []byte("owner:secret")))
	top := randomTop("acl-addauth")
	_, err := owner.conn.Create(top, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	t.Cleanup(func() { deleteTree(owner.conn, top) })
	p := top + "/lock"
	acl := append(zk.DigestACL(zk.PermAll, "owner", "secret"), zk.WorldACL(zk.PermCreate|zk.PermRead|zk.PermWrite)...)
	_, err = owner.conn.Create(p, nil, 0, acl)
	require.NoError(t, err)

	// Another lock on the connection, held throughout: the connection's
	// client, and whatever it remembers, lives on.
	other, err := c.lock(t, zktest.LockPath(t, "/it")).Lock(ctx)
	require.NoError(t, err)
	defer other.Release(ctx)

	refused := c.lock(t, p)
	_, err = refused.Lock(ctx)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = c.lock(t, p).RLock(ctx)
	require.ErrorIs(t, err, zk.ErrNoAuth, "a new RWLock on the connection is refused too")
	assert.Empty(t, lockNodes(t, owner.conn, p), "refused before queueing")

	require.NoError(t, c.conn.AddAuth("digest", []byte("owner:secret")))
	g, err := c.lock(t, p).RLock(ctx)
	require.NoError(t, err, "a new RWLock, after AddAuth")
	require.NoError(t, g.Release(ctx))
	g, err = refused.Lock(ctx)
	require.NoError(t, err, "the refused RWLock, after AddAuth")
	require.NoError(t, g.Release(ctx))
}
