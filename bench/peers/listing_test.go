package peers

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Curator's client refuses an answer longer than its jute.maxbuffer,
// 1,048,575 bytes by default, and drops its connection instead
// (apache/helix#962). Curator's lock lists its directory with
// ZooKeeper.getChildren(path, watcher, stat), which sends getChildren2
// even without a stat. Its answer is the reply header (16 bytes), the
// count (4), each name with its length, and the stat (68). Curator's
// names, _c_<uuid>-__READ__<seq>, are 58 characters. So the largest
// directory a default Curator client can list holds
// (1,048,575-88)/62 = 16,911 of them.
const (
	curatorMaxAnswer = 1_048_575
	curatorNameLen   = 3 + 36 + 1 + 8 + 10
	curatorMaxNodes  = (curatorMaxAnswer - 16 - 4 - 68) / (4 + curatorNameLen)
)

// TestCuratorListingLimit fills a Curator read/write lock's directory
// with readers up to the computed limit, less Curator's own node, and
// shows that a default Curator client takes the read lock; one node more,
// and its listing no longer fits: the lock is never granted, and the
// client's connection is dropped again and again.
func TestCuratorListingLimit(t *testing.T) {
	tier.Long(t) // 16,912 creates, and a Curator client that waits out its retries
	zktest.RequirePeer(t, "curator")
	require.Equal(t, 16_911, curatorMaxNodes)
	srv := server.Get(t)
	conn, _ := zkserver.Connect(t, srv.Addrs(), 10*time.Second)
	path := zktest.LockPath(t, "/curator-listing")
	var parent string
	for part := range strings.SplitSeq(strings.TrimPrefix(path, "/"), "/") {
		parent += "/" + part
		if _, err := conn.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			require.ErrorIs(t, err, zk.ErrNodeExists)
		}
	}
	fill := func(n int) {
		var eg errgroup.Group
		eg.SetLimit(64)
		for range n {
			eg.Go(func() error {
				_, err := conn.Create(path+"/_c_0123abcd-4567-89ef-0123-456789abcdef-__READ__", nil,
					zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
				return err
			})
		}
		require.NoError(t, eg.Wait())
	}

	fill(curatorMaxNodes - 1) // Curator's own node makes the listing's last
	got := runPeer(t, "curator-listing", []string{srv.ConnectString(), path, "30"})
	require.Len(t, got, 1)
	require.Equal(t, "granted", got[0]["result"], "%v", got[0])

	fill(1)
	got = runPeer(t, "curator-listing", []string{srv.ConnectString(), path, "15"})
	require.Len(t, got, 1)
	require.NotEqual(t, "granted", got[0]["result"], "%v", got[0])
	require.Positive(t, got[0]["suspended"], "the connection dropped at each listing: %v", got[0])
	t.Logf("one node past the limit: %v", got[0])

	// The server sends such answers: go-zookeeper, unlimited by default,
	// lists one node more than Curator could.
	fill(1)
	children, _, err := conn.Children(path)
	require.NoError(t, err)
	require.Len(t, children, curatorMaxNodes+1)
}
