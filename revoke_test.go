package rwlock

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
