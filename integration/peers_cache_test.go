package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A node that a caching lock keeps looks to a peer like a held lock, which
// it is, and a peer's write lock that queues behind it is noticed as a
// conflicting request. Behind an idle kept node, our process deletes the
// node at once. Behind a busy one, a read grant's Contended closes, and
// its release deletes the node rather than keep it. Either way the peer is
// granted after that deletion. Real Curator and kazoo write locks, in the
// dialects made for them.
//
// The busy case dates the deletion from below, by the moment before our
// Release. A watcher's notification would date it from above, and the
// peer may hear of the deletion before the watcher does. The idle case has
// no Release to date it by; there the peer waits by the same recipe, on
// the same node's name, that the busy case checks.
func TestPeersBehindAKeptNode(t *testing.T) {
	for _, tc := range []struct {
		dialect rwlock.Dialect
		peer    mix
	}{
		{rwlock.DialectCurator, mix{curator: specs("curator", "rwwrite", 1, 1)}},
		{rwlock.DialectKazoo, mix{kazoo: specs("kazoo", "write", 1, 1)}},
	} {
		for _, busy := range []bool{false, true} {
			name := tc.dialect.String() + "/idle"
			if busy {
				name = tc.dialect.String() + "/busy"
			}
			t.Run(name, func(t *testing.T) {
				tc.peer.require(t)
				srv := sharedServer(t)
				path := zktest.LockPath(t, "/it")
				ctx := t.Context()
				l := connect(t, srv.Addr(0), peerSession).lock(t, path, rwlock.WithDialect(tc.dialect), rwlock.WithCaching())
				g, err := l.RLock(ctx)
				require.NoError(t, err)
				kept := g.Node()
				if !busy {
					require.NoError(t, g.Release(ctx))
					queue, err := l.Queue(ctx)
					require.NoError(t, err)
					require.Len(t, queue, 1, "the released node is kept")
					require.True(t, queue[0].Cached)
				}
				op := connect(t, srv.Addr(0), 0)
				gone := existedUntil(t, op.conn, kept)

				rec := newRecord()
				procs := tc.peer.start(t, rec, srv.Addr(0), path, peerSession)
				for _, p := range procs {
					p.start(t)
				}
				var released int64
				if busy {
					select {
					case <-g.Contended():
					case <-time.After(10 * time.Second):
						t.Fatal("Contended did not close for the peer's writer queued behind")
					}
					released = monotonic()
					require.NoError(t, g.Release(ctx))
				}
				for _, p := range procs {
					p.finish(t, peerDeadline)
				}
				grants, bad := rec.snapshot()
				require.Empty(t, bad)
				require.Len(t, grants, 1)
				select {
				case <-gone:
				case <-time.After(10 * time.Second):
					t.Fatal("the kept node was never deleted")
				}
				if busy {
					require.Greater(t, grants[0].acq, released, "the peer was granted while our read grant was held")
				}

				// The next acquisition queues afresh.
				g, err = l.RLock(ctx)
				require.NoError(t, err)
				require.NotEqual(t, kept, g.Node())
				mustRelease(t, g)
			})
		}
	}
}
