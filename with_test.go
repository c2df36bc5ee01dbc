package rwlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadBatchCostsThreeRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		require.NoError(t, l.ReadBatch(t.Context())) // creates the directories
		before, first := c.calls.Load(), c.appliedCount()

		var ran, nodes atomic.Int32
		fns := make([]func(context.Context) error, 32)
		for i := range fns {
			fns[i] = func(ctx context.Context) error {
				ran.Add(1)
				g, _ := ctx.Value(grantKey{}).(*Grant)
				if g == nil || g.Err() != nil {
					return errors.New("no grant in the context")
				}
				nodes.Store(int32(len(s.lockNodes(dir))))
				return nil
			}
		}
		require.NoError(t, l.ReadBatch(t.Context(), fns...))
		assert.Equal(t, int32(32), ran.Load())
		assert.Equal(t, int32(1), nodes.Load(), "one node for the whole batch")
		assert.Equal(t, int64(3+c.overtaken(first)), c.calls.Load()-before, "create, list (with a child watch), delete")
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestReadGroupFirstErrorWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		gr, ctx, err := l.ReadGroup(t.Context())
		require.NoError(t, err)
		boom := errors.New("boom")
		gr.SetLimit(2)
		gr.Go(func() error { return boom })
		gr.Go(func() error { <-ctx.Done(); return ctx.Err() })
		assert.ErrorIs(t, gr.Wait(), boom)
		assert.ErrorIs(t, ctx.Err(), context.Canceled)
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestReadGroupCancelledOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		gr, ctx, err := l.ReadGroup(t.Context())
		require.NoError(t, err)
		for range 4 {
			gr.Go(func() error {
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}
		synctest.Wait()
		c.expire()
		err = gr.Wait()
		assert.ErrorIs(t, err, ErrLost)
		assert.ErrorIs(t, context.Cause(ctx), ErrLost)
	})
}

// The child watch left by the listing notices a deleted node even before
// any node watch is set.
func TestReadGroupNoticesDeletedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		gr, ctx, err := l.ReadGroup(t.Context())
		require.NoError(t, err)
		gr.Go(func() error {
			<-ctx.Done()
			return nil // even a function that ignores the loss cannot hide it
		})
		synctest.Wait()
		require.NoError(t, s.conn().Delete(dir+"/"+s.lockNodes(dir)[0], -1))
		assert.ErrorIs(t, gr.Wait(), ErrLost)
	})
}

func TestWithWriteStopsOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		err := l.WithWrite(t.Context(), func(ctx context.Context) error {
			g, _ := ctx.Value(grantKey{}).(*Grant)
			require.NotNil(t, g)
			assert.Equal(t, Write, g.Mode())
			c.expire()
			<-ctx.Done()
			return ctx.Err()
		})
		assert.ErrorIs(t, err, ErrLost)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestWithReadReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		boom := errors.New("boom")
		err := l.WithRead(t.Context(), func(ctx context.Context) error {
			assert.Len(t, s.lockNodes(dir), 1)
			// Reentrant: a nested read needs no node.
			return l.WithRead(ctx, func(context.Context) error {
				assert.Len(t, s.lockNodes(dir), 1)
				return boom
			})
		})
		assert.ErrorIs(t, err, boom)
		assert.Empty(t, s.lockNodes(dir))

		err = l.WithRead(t.Context(), func(ctx context.Context) error {
			return l.WithWrite(ctx, func(context.Context) error { return nil })
		})
		assert.ErrorIs(t, err, ErrUpgrade)
	})
}
