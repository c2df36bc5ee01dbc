package zkserver

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/tier"
)

// A seeded cluster starts with the nodes of Config.Seed, and the server
// numbers a seeded node's next sequential child from its Cversion. A member
// restarted later keeps what happened since: the seed is written once.
func TestSeed(t *testing.T) {
	tier.Long(t)
	const top = 2147483000
	c := Start(t, Config{Seed: []Node{
		{Path: "/locks/top", Cversion: top},
		{Path: "/plain"},
	}})
	conn, _ := Connect(t, c.Addrs(), 10*time.Second)

	ok, st, err := conn.Exists("/locks/top")
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, st.EphemeralOwner, "persistent")
	// The server counts creates, and reports creates plus deletes: twice
	// the count less the children still there, in int32 arithmetic.
	wrapped := int32(top)
	require.Equal(t, 2*wrapped, st.Cversion)
	ok, st, err = conn.Exists("/plain")
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, st.Cversion)

	create := func() string {
		t.Helper()
		p, err := conn.Create("/locks/top/n-", nil, zk.FlagSequence, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		return p
	}
	require.Equal(t, "/locks/top/n-2147483000", create())

	require.NoError(t, c.Stop(0))
	require.NoError(t, c.Start(t.Context(), 0))
	require.Eventually(t, func() bool {
		_, _, err = conn.Exists("/locks/top")
		return err == nil
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, "/locks/top/n-2147483001", create(), "a restart must not seed again")
}

func TestSeedRejectsBadNodes(t *testing.T) {
	for _, n := range []Node{{Path: "locks"}, {Path: "/locks/"}, {Path: "/a", Cversion: -1}, {Path: "/a\nb"}} {
		c := &Cluster{cfg: Config{Seed: []Node{n}}, dir: t.TempDir()}
		require.Error(t, c.seed(t.Context()), "%+v", n)
	}
}
