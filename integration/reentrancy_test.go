package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Reentrancy travels in the context: the contexts of WithRead, WithWrite and
// ReadGroup, and those made by ContextWithGrant, carry their grant, and the
// same lock (path and *zk.Conn) acquired with them nests without a node.
// That it costs no request is checked in TestRequestCosts.

func TestNestedGrants(t *testing.T) {
	srv := sharedServer(t)
	a := connect(t, srv.ConnectString(), 0)
	p := zktest.LockPath(t, "/it")
	l := a.lock(t, p)
	// A second RWLock value on the same path and conn nests too: what
	// counts is the lock, not the Go value.
	same := a.lock(t, p)
	ctx, cancel := context.WithTimeout(testContext(t), 30*time.Second)
	defer cancel()

	// nest acquires inside ctx and checks that it got a nested grant of
	// outer: same node, mode as asked, and still only one node.
	nest := func(ctx context.Context, acquire func(context.Context) (*rwlock.Grant, error), mode rwlock.Mode, outer string) error {
		g, err := acquire(ctx)
		if err != nil {
			return err
		}
		defer g.Release(ctx)
		children, _, err := a.conn.Children(p)
		switch {
		case err != nil:
			return err
		case g.Node() != outer:
			return fmt.Errorf("nested grant holds %s, want the outer grant's %s", g.Node(), outer)
		case g.Mode() != mode:
			return fmt.Errorf("nested grant is %v, want %v", g.Mode(), mode)
		case len(children) != 1:
			return fmt.Errorf("%d nodes under the lock, want the outer grant's only: %v", len(children), children)
		}
		return nil
	}
	outerNode := func() string {
		children := lockNodes(t, a.conn, p)
		require.Len(t, children, 1)
		return p + "/" + children[0]
	}

	t.Run("WithRead", func(t *testing.T) {
		require.NoError(t, l.WithRead(ctx, func(ctx context.Context) error {
			outer := outerNode()
			return errors.Join(
				nest(ctx, l.RLock, rwlock.Read, outer),
				nest(ctx, same.RLock, rwlock.Read, outer),
				nest(ctx, l.TryRLock, rwlock.Read, outer),
				l.WithRead(ctx, func(ctx context.Context) error { return nest(ctx, l.RLock, rwlock.Read, outer) }),
			)
		}))
		require.Empty(t, lockNodes(t, a.conn, p))
	})

	t.Run("WithWrite", func(t *testing.T) {
		require.NoError(t, l.WithWrite(ctx, func(ctx context.Context) error {
			outer := outerNode()
			return errors.Join(
				nest(ctx, l.Lock, rwlock.Write, outer),
				nest(ctx, l.RLock, rwlock.Read, outer), // read inside write is fine
				nest(ctx, same.TryLock, rwlock.Write, outer),
				l.WithRead(ctx, func(ctx context.Context) error { return nest(ctx, l.RLock, rwlock.Read, outer) }),
			)
		}))
		require.Empty(t, lockNodes(t, a.conn, p))
	})

	t.Run("ReadGroup", func(t *testing.T) {
		gr, gctx, err := l.ReadGroup(ctx)
		require.NoError(t, err)
		outer := outerNode()
		for range 8 {
			gr.Go(func() error { return nest(gctx, l.RLock, rwlock.Read, outer) })
		}
		require.NoError(t, gr.Wait())
		require.Empty(t, lockNodes(t, a.conn, p))
	})

	t.Run("ContextWithGrant", func(t *testing.T) {
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, nest(rwlock.ContextWithGrant(ctx, w), l.Lock, rwlock.Write, w.Node()))
		require.NoError(t, nest(rwlock.ContextWithGrant(ctx, w), l.RLock, rwlock.Read, w.Node()))
		n, err := l.RLock(rwlock.ContextWithGrant(ctx, w))
		require.NoError(t, err)
		require.Equal(t, w.Token(), n.Token(), "a nested grant fences with its outer grant's token")
		require.NoError(t, n.Release(ctx))
		require.NoError(t, w.Release(ctx))
		require.Empty(t, lockNodes(t, a.conn, p))
	})

	t.Run("write inside read fails with ErrUpgrade", func(t *testing.T) {
		other := connect(t, srv.ConnectString(), 0).lock(t, p)
		err := l.WithRead(ctx, func(ctx context.Context) error {
			// Another reader holds too: an upgrade that waited for the
			// other readers would wait for ever if they did the same.
			r, err := other.RLock(ctx)
			if err != nil {
				return err
			}
			defer r.Release(ctx)
			for _, acquire := range []func(context.Context) (*rwlock.Grant, error){l.Lock, l.TryLock} {
				start := time.Now()
				g, err := acquire(ctx)
				if !errors.Is(err, rwlock.ErrUpgrade) || g != nil {
					return fmt.Errorf("got %v, %v; want ErrUpgrade", g, err)
				}
				if took := time.Since(start); took > 5*time.Second {
					return fmt.Errorf("ErrUpgrade after %v, want at once", took)
				}
			}
			if n := len(lockNodes(t, a.conn, p)); n != 2 {
				return fmt.Errorf("%d nodes, want the two readers'", n)
			}
			return nil
		})
		require.NoError(t, err)
		require.Empty(t, lockNodes(t, a.conn, p))
	})

	t.Run("releasing a nested grant leaves the outer held", func(t *testing.T) {
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		nctx := rwlock.ContextWithGrant(ctx, w)
		n1, err := l.RLock(nctx)
		require.NoError(t, err)
		n2, err := l.Lock(nctx)
		require.NoError(t, err)
		require.NoError(t, n1.Release(ctx))
		require.ErrorIs(t, n1.Err(), rwlock.ErrReleased)
		select {
		case <-n1.Done():
		default:
			t.Fatal("a released nested grant's Done must be closed")
		}
		require.NoError(t, n1.Release(ctx), "releasing twice")
		require.NoError(t, w.Err())
		require.NoError(t, n2.Err())
		require.Equal(t, []string{grantNodes(w)[0]}, lockNodes(t, a.conn, p))
		_, err = connect(t, srv.ConnectString(), 0).lock(t, p).TryRLock(ctx)
		require.ErrorIs(t, err, rwlock.ErrWouldBlock, "the outer write grant still excludes others")

		require.NoError(t, w.Release(ctx))
		require.ErrorIs(t, n2.Err(), rwlock.ErrReleased, "the outer's release ends the nested grants")
		require.Empty(t, lockNodes(t, a.conn, p))
		_, err = l.RLock(nctx)
		require.Error(t, err, "nesting in an ended grant")
		require.Empty(t, lockNodes(t, a.conn, p), "nesting in an ended grant must not queue either")
	})

	t.Run("another conn is not reentrant", func(t *testing.T) {
		b := connect(t, srv.ConnectString(), 0)
		lb := b.lock(t, p)
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		wctx := rwlock.ContextWithGrant(ctx, w)
		_, err = lb.TryRLock(wctx)
		require.ErrorIs(t, err, rwlock.ErrWouldBlock, "another session must queue, not nest")
		_, err = lb.TryLock(wctx)
		require.ErrorIs(t, err, rwlock.ErrWouldBlock)
		require.NoError(t, w.Release(ctx))

		r, err := l.RLock(ctx)
		require.NoError(t, err)
		r2, err := lb.RLock(rwlock.ContextWithGrant(ctx, r))
		require.NoError(t, err)
		require.NotEqual(t, r.Node(), r2.Node(), "another session gets a node of its own")
		require.Len(t, lockNodes(t, a.conn, p), 2)
		require.NoError(t, r.Release(ctx))
		require.NoError(t, r2.Err(), "it does not end with the other session's grant")
		require.NoError(t, r2.Release(ctx))

		// Nor is another lock on the same conn.
		r, err = l.RLock(ctx)
		require.NoError(t, err)
		elsewhere := a.lock(t, zktest.LockPath(t, "/it"))
		w2, err := elsewhere.TryLock(rwlock.ContextWithGrant(ctx, r))
		require.NoError(t, err, "a grant of another lock neither nests nor forbids an upgrade")
		require.NotEqual(t, r.Node(), w2.Node())
		require.NoError(t, w2.Release(ctx))
		require.NoError(t, r.Release(ctx))
		require.Empty(t, lockNodes(t, a.conn, p))
	})
}

// When the outer grant is lost, its nested grants end with it.
func TestNestedGrantsEndWithOuterLoss(t *testing.T) {
	srv := sharedServer(t)
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, holder, operator *client, g *rwlock.Grant)
	}{
		{"node deleted", func(t *testing.T, _, operator *client, g *rwlock.Grant) {
			require.NoError(t, operator.conn.Delete(g.Node(), -1))
		}},
		{"session expired", func(t *testing.T, holder, _ *client, _ *rwlock.Grant) {
			holder.expire(t, srv.Addr(0))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := zktest.LockPath(t, "/it")
			holder, operator := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
			l := holder.lock(t, p)
			ctx := testContext(t)

			// Through WithWrite: fn's context ends with the loss too.
			fnErr := make(chan error, 1)
			err := l.WithWrite(ctx, func(ctx context.Context) error {
				w, err := l.Lock(ctx)
				require.NoError(t, err)
				r, err := l.RLock(ctx)
				require.NoError(t, err)
				require.NoError(t, w.Err())

				tc.lose(t, holder, operator, w)
				for _, g := range []*rwlock.Grant{w, r} {
					select {
					case <-g.Done():
					case <-time.After(20 * time.Second):
						t.Fatal("a nested grant's Done did not close after the loss")
					}
					require.ErrorIs(t, g.Err(), rwlock.ErrLost)
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Second):
					t.Fatal("fn's context did not end after the loss")
				}
				require.ErrorIs(t, context.Cause(ctx), rwlock.ErrLost)
				fnErr <- ctx.Err()
				return ctx.Err()
			})
			require.ErrorIs(t, err, rwlock.ErrLost)
			require.ErrorIs(t, err, <-fnErr, "fn's error is joined")
			require.Empty(t, lockNodes(t, operator.conn, p))
		})
	}
}

// Downgrade turns a write grant into a read grant on the same node: the
// reader queued behind it joins at once, the writer queued behind that
// reader still waits for both.
func TestDowngradeLetsQueuedReaderIn(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, b, c := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb, lc := a.lock(t, p), b.lock(t, p), c.lock(t, p)
	ctx := testContext(t)
	var x exclusion

	for round := range 20 {
		var tl timeline
		w, err := la.Lock(ctx)
		require.NoError(t, err)
		x.enter(rwlock.Write)
		reader := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			g, err := lb.RLock(ctx)
			if err == nil {
				tl.add("reader granted")
				x.enter(rwlock.Read)
			}
			return g, err
		})
		waitQueue(t, la, 2)
		writer := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) {
			g, err := lc.Lock(ctx)
			if err == nil {
				tl.add("writer granted")
				x.enter(rwlock.Write)
			}
			return g, err
		})
		waitQueue(t, la, 3)

		tl.add("downgrade")
		x.leave(rwlock.Write)
		x.enter(rwlock.Read)
		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		rb, err := reader.wait(t)
		require.NoError(t, err, "round %d: the queued reader joins the downgraded grant", round)
		writer.stillWaiting(t, fmt.Sprintf("round %d: the writer must wait for both readers", round))
		q := waitQueue(t, la, 3)
		require.Equal(t, []bool{true, true, false}, heldFlags(q), "round %d", round)
		require.Equal(t, rwlock.Read, q[0].Mode, "round %d: Queue shows the downgraded node as Read", round)

		// Release the two readers in either order.
		first, second := r, rb
		if round%2 == 1 {
			first, second = rb, r
		}
		tl.add("first reader releases")
		x.leave(rwlock.Read)
		require.NoError(t, first.Release(ctx))
		tl.add("second reader releases")
		x.leave(rwlock.Read)
		require.NoError(t, second.Release(ctx))
		wc, err := writer.wait(t)
		require.NoError(t, err)
		x.leave(rwlock.Write)
		require.NoError(t, wc.Release(ctx))

		require.Equal(t, []string{"downgrade", "reader granted", "first reader releases", "second reader releases", "writer granted"},
			tl.get(), "round %d", round)
		require.Zero(t, x.violations.Load(), "round %d: mutual exclusion violated", round)
		require.Empty(t, lockNodes(t, a.conn, p))
	}
}

func TestDowngrade(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb := a.lock(t, p), b.lock(t, p)
	ctx := testContext(t)

	// No one waits.
	w, err := la.Lock(ctx)
	require.NoError(t, err)
	token := w.Token()
	r, err := w.Downgrade(ctx)
	require.NoError(t, err)
	require.Equal(t, rwlock.Read, r.Mode())
	require.Equal(t, w.Node(), r.Node(), "the same node")
	require.Equal(t, token, r.Token(), "the same token")
	require.ErrorIs(t, w.Err(), rwlock.ErrReleased)
	select {
	case <-w.Done():
	default:
		t.Fatal("the write grant's Done must be closed after Downgrade")
	}
	require.NoError(t, r.Err())
	require.Equal(t, grantNodes(r), lockNodes(t, a.conn, p), "Downgrade keeps the node")
	_, err = w.Downgrade(ctx)
	require.ErrorIs(t, err, rwlock.ErrReleased, "downgrading twice")

	q, err := lb.Queue(ctx)
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, r.Node(), q[0].Node)
	require.Equal(t, rwlock.Read, q[0].Mode)
	require.True(t, q[0].Held)

	// A reader that comes after the downgrade, with no writer queued, joins
	// at once (TryRLock: TestTryRLockJoinsDowngradedGrant); a writer still
	// cannot.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r2, err := lb.RLock(rctx)
	require.NoError(t, err, "a reader after the downgrade joins at once")
	q = waitQueue(t, lb, 2)
	require.Equal(t, []bool{true, true}, heldFlags(q))
	_, err = lb.TryLock(ctx)
	require.ErrorIs(t, err, rwlock.ErrWouldBlock)
	require.NoError(t, r2.Release(ctx))

	// A read grant downgrades to itself.
	same, err := r.Downgrade(ctx)
	require.NoError(t, err)
	require.Same(t, r, same)

	// Releasing the write grant releases the read grant it became: the
	// README's `defer g.Release(ctx)` before `g, err = g.Downgrade(ctx)`.
	require.NoError(t, w.Release(ctx))
	require.Empty(t, lockNodes(t, a.conn, p))
	require.ErrorIs(t, r.Err(), rwlock.ErrReleased)
	require.NoError(t, r.Release(ctx), "then releasing the read grant is a no-op")
}

// TryRLock behind a downgraded grant, with no writer queued, must succeed:
// the lock is shared, so nothing blocks a reader.
func TestTryRLockJoinsDowngradedGrant(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
	la, lb := a.lock(t, p), b.lock(t, p)
	ctx := testContext(t)

	w, err := la.Lock(ctx)
	require.NoError(t, err)
	r, err := w.Downgrade(ctx)
	require.NoError(t, err)
	r2, err := lb.TryRLock(ctx)
	require.NoError(t, err, "TryRLock behind a downgraded grant")
	require.Len(t, lockNodes(t, a.conn, p), 2)
	require.NoError(t, r2.Release(ctx))
	require.NoError(t, r.Release(ctx))
	require.Empty(t, lockNodes(t, a.conn, p))
}
