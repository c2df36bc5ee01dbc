package rwlock

import (
	"context"
	"path"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

// A revocation reaches the holders of the moment, and only them: the
// waiter granted after it is not revoked, and nobody's grant changes.
func TestRevokeReachesTheHoldersOfTheMoment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder := newLock(t, s.conn())
		g, err := holder.Lock(ctx)
		require.NoError(t, err)
		revoked := g.Revoked()
		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()

		operator := newLock(t, s.conn())
		require.NoError(t, operator.Revoke(ctx, "the migration is stuck"))
		synctest.Wait()
		assert.True(t, isClosed(revoked), "the holder was told")
		require.NoError(t, g.Err(), "and still holds: a revocation changes no grant")
		select {
		case <-w:
			t.Fatal("the waiter was granted by a revocation")
		default:
		}
		require.NoError(t, g.Release(ctx))
		synctest.Wait()
		next := granted(t, w)
		assert.False(t, isClosed(next.Revoked()), "a grant made after the revocation")
		synctest.Wait()
		assert.False(t, isClosed(next.Revoked()))
		require.NoError(t, next.Release(ctx))
	})
}

// WithWrite's function sees its context cancelled with ErrRevoked, and
// WithWrite returns an error wrapping it.
func TestRevokeCancelsWithWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		running := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- l.WithWrite(ctx, func(ctx context.Context) error {
				close(running)
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}()
		<-running
		synctest.Wait()
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "stop"))
		err := <-done
		require.ErrorIs(t, err, ErrRevoked)
		require.NotErrorIs(t, err, ErrLost)
		assert.Empty(t, s.lockNodes(dir), "released")
	})
}

// Revoking a lock nobody holds writes nothing; a lock that nobody asks to
// listen pays no request for revocations.
func TestRevokeOfNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		require.NoError(t, l.Revoke(ctx, "nobody")) // no directory even
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		require.NoError(t, l.Revoke(ctx, "nobody"))
		data, _, err := c.Get(dir)
		require.NoError(t, err)
		assert.Empty(t, data)
	})
}

// The directory's watch outlives its listeners: only the first grant of a
// session that listens pays a request for it. A revocation that came
// between a grant and its listening still reaches it.
func TestRevokeListeningIsFreeOnceSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		noop := func(context.Context) error { return nil }
		warm, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		assert.Equal(t, int64(4), c.cost(func() { require.NoError(t, l.WithRead(ctx, noop)) }),
			"the first WithRead: create, list, delete, and the read that sets the watch")
		for range 3 {
			assert.Equal(t, int64(3), c.cost(func() { require.NoError(t, l.WithRead(ctx, noop)) }),
				"a later WithRead: create, list, delete")
		}

		// a listens; b, read by the same read as a, only asks later.
		a, err := l.RLock(ctx)
		require.NoError(t, err)
		aRevoked := a.Revoked()
		b, err := l.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "a and b"))
		synctest.Wait()
		require.True(t, isClosed(aRevoked))
		assert.Zero(t, c.cost(func() {
			assert.True(t, isClosed(b.Revoked()), "b, revoked before it listened")
		}), "the last read named b")
		require.NoError(t, a.Release(ctx))
		require.NoError(t, b.Release(ctx))

		// A revocation while nobody listens fires the watch: the next
		// listener reads again.
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "g"))
		synctest.Wait()
		assert.Equal(t, int64(1), c.cost(func() {
			revoked := g.Revoked()
			synctest.Wait()
			assert.True(t, isClosed(revoked))
		}), "the read that finds the revocation and sets the watch again")
		require.NoError(t, g.Release(ctx))
	})
}

// Revoke reads the queue's names, and a node's data only where a
// downgrade mark decides who holds: the first node when it is a writer of
// ours with a reader of ours behind it. Whatever it reads, it names the
// holders of the moment, and only them.
func TestRevokeReadsOnlyTheMarksThatDecide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		queue     []Mode // acquired in this order, each on its own session
		downgrade bool   // the first, a writer, downgrades once granted
		held      int    // how many, from the first, hold when Revoke runs
		requests  int64  // Revoke's
	}{
		{name: "a writer alone", queue: []Mode{Write}, held: 1, requests: 2},
		{name: "a writer before a writer", queue: []Mode{Write, Write}, held: 1, requests: 2},
		{name: "readers before a writer", queue: []Mode{Read, Read, Write, Read}, held: 2, requests: 2},
		{name: "a writer before readers", queue: []Mode{Write, Read, Read}, held: 1, requests: 3},
		{name: "a downgraded writer and the readers that joined it", queue: []Mode{Write, Read, Read, Write, Read},
			downgrade: true, held: 3, requests: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				ctx := t.Context()
				waits := make([]<-chan result, len(tc.queue))
				for i, m := range tc.queue {
					l := newLock(t, s.conn())
					acquire := l.Lock
					if m == Read {
						acquire = l.RLock
					}
					waits[i] = start(ctx, acquire)
					synctest.Wait() // queued in this order
				}
				grants := make([]*Grant, len(tc.queue))
				grants[0] = granted(t, waits[0])
				if tc.downgrade {
					d, err := grants[0].Downgrade(ctx)
					require.NoError(t, err)
					grants[0] = d
					synctest.Wait()
				}
				var revoked []<-chan struct{}
				for i := range tc.queue {
					if i >= tc.held {
						pending(t, waits[i])
						continue
					}
					if i > 0 {
						grants[i] = granted(t, waits[i])
					}
					revoked = append(revoked, grants[i].Revoked())
				}

				c := s.conn()
				operator := newLock(t, c)
				assert.Equal(t, tc.requests, c.cost(func() { require.NoError(t, operator.Revoke(ctx, "all")) }))
				for i, ch := range revoked {
					assert.True(t, isClosed(ch), "holder %d told", i)
				}
				for i := range tc.queue {
					if grants[i] == nil {
						grants[i] = granted(t, waits[i])
						revoked := grants[i].Revoked()
						synctest.Wait()
						assert.False(t, isClosed(revoked), "grant %d, made after the revocation", i)
					}
					require.NoError(t, grants[i].Release(ctx))
					synctest.Wait()
				}
				assert.Empty(t, s.lockNodes(dir))
			})
		})
	}
}

// A first writer that leaves between Revoke's listing and its read of the
// writer's mark is left out, as Queue leaves out a node that vanishes: the
// reader its release granted is the holder named.
func TestRevokeAfterTheFirstLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		g, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		gRevoked := g.Revoked()
		r := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		pending(t, r)

		c := s.conn()
		c.setAfter(func(op, p string, err error) error {
			if op == "children" {
				require.NoError(t, g.Release(ctx))
			}
			return err
		})
		assert.Equal(t, int64(3), c.cost(func() { require.NoError(t, newLock(t, c).Revoke(ctx, "r")) }),
			"the listing, the writer's mark (gone), the write")
		rg := granted(t, r)
		rRevoked := rg.Revoked()
		synctest.Wait()
		assert.True(t, isClosed(rRevoked), "the reader the release granted")
		assert.False(t, isClosed(gRevoked), "the writer was gone before the revocation")
		require.NoError(t, rg.Release(ctx))
	})
}

// A peer's node is judged by its name alone, as Queue judges it: a peer's
// writer, even with data that reads like a downgrade, holds alone, and
// Revoke reads no node's data for it; a peer's reader holds with ours.
// The peer's node is named, and untouched.
func TestRevokeWithPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		lock := func(c *fakeConn) *RWLock { return newLock(t, c, WithDialect(DialectCurator)) }
		g, err := lock(s.conn()).Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		peer := s.conn()
		marks := string(lockname.Data("forged", 0, true, true))
		writer := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", marks)
		r := start(ctx, lock(s.conn()).RLock)
		synctest.Wait()
		pending(t, r)

		c := s.conn()
		operator := lock(c)
		named := func() []int32 {
			data, _, err := c.Get(dir)
			require.NoError(t, err)
			_, _, nodes, ok := lockname.ParseRevocation(data)
			require.True(t, ok)
			return nodes
		}
		assert.Equal(t, int64(2), c.cost(func() { require.NoError(t, operator.Revoke(ctx, "peer")) }))
		assert.Equal(t, []int32{seqOf(t, writer)}, named())
		data, _, err := peer.Get(dir + "/" + writer)
		require.NoError(t, err)
		assert.Equal(t, marks, string(data), "the peer's node untouched")

		reader := peerNode(t, peer, "_c_"+uuid+"-__READ__", "")
		require.NoError(t, peer.Delete(dir+"/"+writer, -1))
		synctest.Wait()
		rg := granted(t, r)
		rRevoked := rg.Revoked()
		synctest.Wait()
		assert.False(t, isClosed(rRevoked), "granted after the revocation")
		w := start(ctx, lock(s.conn()).Lock)
		synctest.Wait()
		pending(t, w)
		assert.Equal(t, int64(2), c.cost(func() { require.NoError(t, operator.Revoke(ctx, "readers")) }))
		assert.Equal(t, []int32{seqOf(t, path.Base(rg.node)), seqOf(t, reader)}, named())
		assert.True(t, isClosed(rRevoked))
		require.NoError(t, rg.Release(ctx))
		require.NoError(t, peer.Delete(dir+"/"+reader, -1))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
	})
}

func seqOf(t *testing.T, name string) int32 {
	t.Helper()
	n, ok := parseNode(name)
	require.True(t, ok, name)
	return n.seq
}
