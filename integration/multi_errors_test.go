package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/tier"
)

// Grant.Multi during an outage fails with zk.ErrNoServer, as its doc says,
// and that transaction never commits: not when the server is back, and not
// after a retry, which commits once.
func TestMultiNoServerIsNeverSent(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35) // the grant's watches are re-set on the reconnection
	srv := faultServer(t, 1)
	ctx := testContext(t)
	c := connect(t, srv.ConnectString(), 10*time.Second)
	_, err := c.conn.Create("/multi-outage", []byte("0"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	g, err := c.lock(t, "/locks/multi-outage").Lock(ctx)
	require.NoError(t, err)
	set := &zk.SetDataRequest{Path: "/multi-outage", Data: []byte("1"), Version: 0}

	require.NoError(t, srv.Stop(0))
	start := time.Now()
	_, err = g.Multi(ctx, set)
	require.ErrorIs(t, err, zk.ErrNoServer, "during the outage (after %v)", time.Since(start))
	require.NoError(t, g.Err(), "the grant outlives a short outage")
	require.NoError(t, srv.Start(ctx, 0))

	check := connect(t, srv.ConnectString(), 0)
	// The first transaction, had it been kept in a queue, would have gone
	// out on the new connection at once. A check of the lock's own makes
	// a round trip on that connection after it.
	require.Eventually(t, func() bool { return g.Check(ctx) == nil }, 30*time.Second, 50*time.Millisecond)
	data, st, err := check.conn.Get("/multi-outage")
	require.NoError(t, err)
	assert.Equal(t, "0", string(data), "the transaction that failed with ErrNoServer committed")
	assert.Zero(t, st.Version)

	_, err = g.Multi(ctx, set)
	require.NoError(t, err, "the retry")
	data, _, err = check.conn.Get("/multi-outage")
	require.NoError(t, err)
	assert.Equal(t, "1", string(data))
	_, err = g.Multi(ctx, set)
	assert.True(t, errors.Is(err, zk.ErrBadVersion), "a second retry with the version is refused: %v", err)
	require.NoError(t, g.Release(ctx))
}
