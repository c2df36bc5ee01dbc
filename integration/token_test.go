package integration

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The facts acquisition.dated relies on, as the server shows them: a
// sequential child is named after its parent's count of creates, a create
// sets pzxid to its czxid, a deletion moves pzxid but not the count (so
// numbers do not skip after deletions), and the cversion a client sees is
// creates and deletions together, 2·creates − children.
func TestServerSequenceNumbering(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	c := connect(t, srv.ConnectString(), 0).conn
	dir := "/numbering"
	_, err := c.Create(dir, nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	create := func() (string, *zk.Stat) {
		p, err := c.Create(dir+"/n-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		_, st, err := c.Exists(p)
		require.NoError(t, err)
		return p, st
	}
	dirStat := func() *zk.Stat {
		_, st, err := c.Children(dir)
		require.NoError(t, err)
		return st
	}
	first, st := create()
	assert.Equal(t, dir+"/n-0000000000", first)
	d := dirStat()
	assert.Equal(t, int32(1), d.Cversion)
	assert.Equal(t, st.Czxid, d.Pzxid)

	require.NoError(t, c.Delete(first, -1))
	after := dirStat()
	assert.Equal(t, int32(2), after.Cversion, "2·1 create − 0 children")
	assert.Greater(t, after.Pzxid, st.Czxid, "a deletion moves pzxid")

	second, st := create()
	assert.Equal(t, dir+"/n-0000000001", second, "no number skipped for the deletion")
	d = dirStat()
	assert.Equal(t, int32(3), d.Cversion, "2·2 creates − 1 child")
	assert.Equal(t, st.Czxid, d.Pzxid)
}

// Issue 23, item 3: a grant's token is its node's czxid (read by another
// client), known at the grant: Token sends no request, for an uncontended
// grant, a writer that waited, both grants of a downgrade, a nested grant
// and every grant of a LockAll set; and Lock+Token+Release stays three
// requests.
func TestTokenIsTheNodesCzxid(t *testing.T) {
	srv := zkserver.StartStandalone(t)
	// A long session timeout: the lease's renewals (every T/16) stay out
	// of the windows that count requests.
	const timeout = 60 * time.Second
	a := connect(t, srv.ConnectString(), timeout)
	other := connect(t, srv.ConnectString(), timeout).conn
	ctx := testContext(t)
	czxid := func(t *testing.T, g *rwlock.Grant) int64 {
		t.Helper()
		_, st, err := other.Exists(g.Node())
		require.NoError(t, err)
		require.NotNil(t, st, "%s exists", g.Node())
		return st.Czxid
	}
	// token reads g's token, and checks that it costs no request. A grant
	// may list its directory for peers, on a goroutine of its own (the
	// fleet watch, fleet.go), which a window may catch: a
	// Token that sent a request would be caught in every window.
	token := func(t *testing.T, g *rwlock.Grant) int64 {
		t.Helper()
		var tok int64
		var n int64
		for range 5 {
			if n = requestCount(t, srv, func() { tok = g.Token() }); n == 0 {
				break
			}
		}
		assert.Zero(t, n, "Token sends no request")
		return tok
	}
	path := zktest.LockPath(t, "/token")
	l := a.lock(t, path)

	t.Run("uncontended", func(t *testing.T) {
		warm, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		var g *rwlock.Grant
		n := requestCount(t, srv, func() {
			g, err = l.Lock(ctx)
			require.NoError(t, err)
		})
		assert.Equal(t, czxid(t, g), token(t, g))
		n += requestCount(t, srv, func() { require.NoError(t, g.Release(ctx)) })
		assert.LessOrEqual(t, n, int64(4), "create, list, delete (and a second listing if the first overtook the create)")
		r, err := l.RLock(ctx)
		require.NoError(t, err)
		assert.Equal(t, czxid(t, r), token(t, r))
		require.NoError(t, r.Release(ctx))
	})
	t.Run("contended writer", func(t *testing.T) {
		holder, err := l.Lock(ctx)
		require.NoError(t, err)
		holderTok := token(t, holder)
		waiter := goAcquire(t, ctx, connect(t, srv.ConnectString(), timeout).lock(t, path).Lock)
		waitQueue(t, l, 2)
		waiter.stillWaiting(t, "behind the holder")
		require.NoError(t, holder.Release(ctx))
		g := waiter.granted(t, 10*time.Second)
		assert.Equal(t, czxid(t, g), token(t, g))
		assert.Greater(t, token(t, g), holderTok)
		require.NoError(t, g.Release(ctx))
	})
	t.Run("downgraded and nested", func(t *testing.T) {
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		want := czxid(t, w)
		nested, err := l.RLock(rwlock.ContextWithGrant(ctx, w))
		require.NoError(t, err)
		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, token(t, w), "the write grant it came from")
		assert.Equal(t, want, token(t, r), "the read grant")
		assert.Equal(t, want, token(t, nested), "nested in the write grant")
		require.NoError(t, nested.Release(ctx))
		require.NoError(t, r.Release(ctx))
	})
	t.Run("set", func(t *testing.T) {
		l2 := a.lock(t, zktest.LockPath(t, "/token2"))
		grants, err := rwlock.LockAll(ctx, rwlock.Request{Lock: l, Mode: rwlock.Write}, rwlock.Request{Lock: l2, Mode: rwlock.Read})
		require.NoError(t, err)
		want := czxid(t, grants[0])
		assert.Equal(t, want, czxid(t, grants[1]), "one transaction")
		for _, g := range grants {
			assert.Equal(t, want, token(t, g))
		}
		for _, g := range grants {
			require.NoError(t, g.Release(ctx))
		}
	})
}
