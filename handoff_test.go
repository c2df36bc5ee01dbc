package rwlock

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

// One notification per handoff, whatever the shape of the queue (see
// runAhead and await).

// applied counts the requests of c that the server has seen with op on p.
func (c *fakeConn) appliedOf(op, p string) (n int) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, a := range c.applied {
		if a == op+" "+p {
			n++
		}
	}
	return n
}

// A reader waiting on a writer of ours is granted on the writer's data
// change, downgrade or held mark, without reading the writer again.
func TestReaderGrantedOnDataChange(t *testing.T) {
	for _, change := range []string{"downgrade", "held mark"} {
		t.Run(change, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				ctx := t.Context()
				var w *Grant
				if change == "held mark" {
					// A writer that waited marks its node as it goes.
					r0, err := newLock(t, s.conn()).RLock(ctx)
					require.NoError(t, err)
					wait := start(ctx, newLock(t, s.conn()).Lock)
					synctest.Wait()
					require.NoError(t, r0.Release(ctx))
					synctest.Wait()
					w = granted(t, wait)
					require.True(t, (w.h.releaseMark != lockname.Unmarked))
				} else {
					var err error
					w, err = newLock(t, s.conn()).Lock(ctx)
					require.NoError(t, err)
				}
				c := s.conn()
				r := start(ctx, newLock(t, c).RLock)
				synctest.Wait()
				pending(t, r)
				looks := c.appliedOf("get", w.Node())
				if change == "held mark" {
					require.NoError(t, w.Release(ctx))
				} else {
					d, err := w.Downgrade(ctx)
					require.NoError(t, err)
					defer d.Release(ctx)
				}
				synctest.Wait()
				require.NoError(t, granted(t, r).Release(ctx))
				assert.Equal(t, looks, c.appliedOf("get", w.Node()), "no look at the writer after its change")
			})
		})
	}
}

// A writer behind a writer and a run of readers watches them all, and is
// granted on the last reader's deletion with no listing after its first;
// the mark of the writer ahead, which waited, tells that the reader before
// it is gone too.
func TestWriterBehindReadersGrantedOnLastDeletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		r0, err := newLock(t, s.conn()).RLock(ctx)
		require.NoError(t, err)
		w0 := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		var readers []<-chan result
		for range 3 {
			readers = append(readers, start(ctx, newLock(t, s.conn()).RLock))
			synctest.Wait()
		}
		c := s.conn()
		w := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		listings := c.lists.Load()

		require.NoError(t, r0.Release(ctx))
		synctest.Wait()
		g0 := granted(t, w0)
		require.NoError(t, g0.Release(ctx))
		synctest.Wait()
		for i, r := range readers {
			g := granted(t, r)
			pending(t, w)
			require.NoError(t, g.Release(ctx), "reader %d", i)
			synctest.Wait()
		}
		g := granted(t, w)
		assert.Equal(t, listings, c.lists.Load(),
			"no listing on the way to the grant, nor for peers: it is released before its first check (fleet.go)")
		require.NoError(t, g.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A writer ahead that goes without its mark (it gave up) proves nothing
// about the nodes before it: once the run ahead is gone, the writer behind
// lists once, and waits for what is left.
func TestUnmarkedRunLeaderMeansOneListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		r0, err := newLock(t, s.conn()).RLock(ctx)
		require.NoError(t, err)
		quitter, cancel := context.WithCancel(ctx)
		q := start(quitter, newLock(t, s.conn()).Lock)
		synctest.Wait()
		r1 := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		c := s.conn()
		w := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		listings := c.lists.Load()

		cancel()
		synctest.Wait()
		assert.ErrorIs(t, (<-q).err, context.Canceled)
		require.NoError(t, granted(t, r1).Release(ctx))
		synctest.Wait()
		pending(t, w) // r0 still holds
		assert.Equal(t, listings+1, c.lists.Load())
		require.NoError(t, r0.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
		assert.Equal(t, listings+1, c.lists.Load(), "and none for peers: released before its first check (fleet.go)")
	})
}

// With a peer's node in the queue, a writer behind readers waits for its
// predecessor alone and lists again, as before: a peer's data is no mark
// (here forged), and a peer may make nodes out of sequence.
func TestRunAheadWithAPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		lock := func(c *fakeConn) *RWLock { return newLock(t, c, WithDialect(DialectCurator)) }
		r0, err := lock(s.conn()).RLock(ctx)
		require.NoError(t, err)
		peer := s.conn()
		p := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", "")
		r1 := start(ctx, lock(s.conn()).RLock)
		synctest.Wait()
		c := s.conn()
		w := start(ctx, lock(c).Lock)
		synctest.Wait()
		assert.Len(t, s.othersWatchedBy(c), 1, "the predecessor alone")

		_, err = peer.Set(dir+"/"+p, lockname.Data("forged", 0, lockname.MarkHeld), -1)
		require.NoError(t, err)
		require.NoError(t, peer.Delete(dir+"/"+p, -1))
		synctest.Wait()
		require.NoError(t, granted(t, r1).Release(ctx))
		synctest.Wait()
		pending(t, w) // r0 still holds
		require.NoError(t, r0.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
	})
}

// A reader waiting on a peer's writer takes no change of the peer's data
// for a downgrade or a mark: it waits for the node to go.
func TestReaderIgnoresAPeersChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		peer := s.conn()
		g, err := newLock(t, s.conn(), WithDialect(DialectCurator)).Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		p := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", "")
		r := start(ctx, newLock(t, s.conn(), WithDialect(DialectCurator)).RLock)
		synctest.Wait()
		_, err = peer.Set(dir+"/"+p, lockname.Data("forged", 0, lockname.MarkHeld|lockname.MarkDowngraded), -1)
		require.NoError(t, err)
		synctest.Wait()
		pending(t, r)
		require.NoError(t, peer.Delete(dir+"/"+p, -1))
		synctest.Wait()
		require.NoError(t, granted(t, r).Release(ctx))
	})
}

// Where the child watch on the writer ahead could not be set, its mark
// uses up its data watch, and nothing would tell its deletion: the writer
// behind looks again.
func TestRunLeaderWithoutGoingWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		r0, err := newLock(t, s.conn()).RLock(ctx)
		require.NoError(t, err)
		w0 := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		var leader string
		for _, n := range s.lockNodes(dir) {
			if strings.Contains(n, "-write-") {
				leader = dir + "/" + n
			}
		}
		r1 := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		c := s.conn()
		c.setBefore(func(op, p string) error {
			if op == "children" && p == leader {
				return zk.ErrNoNode // as if it went between the look at its data and this
			}
			return nil
		})
		w := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		require.NoError(t, r0.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w0).Release(ctx)) // with its mark
		synctest.Wait()
		require.NoError(t, granted(t, r1).Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
	})
}
