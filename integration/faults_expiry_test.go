package integration

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// When the holder's session expires, the grant is lost: Done closes, Err
// wraps ErrLost and zk.ErrSessionExpired, the contexts of WithRead,
// WithWrite and ReadGroup are cancelled with that cause and the calls
// return an error wrapping ErrLost, though go-zookeeper quietly carries on
// with a new session on the same *zk.Conn. The server deleted the node, so
// another client acquires at once.
func TestFaultSessionExpiry(t *testing.T) {
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	// Long enough that the reconnection which learns of the expiry comes
	// well within the third of the timeout a disconnected holder may wait:
	// the loss is then reported as what it is, the session's expiry.
	const timeout = 20 * time.Second

	// A holdFunc holds the lock in one of the ways the API offers until the
	// grant ends; it reports what the holder sees of the grant once it is
	// held, and returns the error the call finally returns.
	type holdFunc func(ctx context.Context, l *rwlock.RWLock, held chan<- holding) error
	grant := func(mode rwlock.Mode) holdFunc {
		return func(ctx context.Context, l *rwlock.RWLock, held chan<- holding) error {
			g, err := acquireNow(ctx, l, mode)
			if err != nil {
				return err
			}
			held <- holding{g.Done(), g.Err}
			<-g.Done()
			return g.Err()
		}
	}
	with := func(mode rwlock.Mode) holdFunc {
		return func(ctx context.Context, l *rwlock.RWLock, held chan<- holding) error {
			fn := func(fctx context.Context) error {
				held <- holding{fctx.Done(), func() error { return context.Cause(fctx) }}
				<-fctx.Done()
				return fctx.Err()
			}
			if mode == rwlock.Write {
				return l.WithWrite(ctx, fn)
			}
			return l.WithRead(ctx, fn)
		}
	}
	readGroup := func(ctx context.Context, l *rwlock.RWLock, held chan<- holding) error {
		gr, gctx, err := l.ReadGroup(ctx)
		if err != nil {
			return err
		}
		held <- holding{gctx.Done(), func() error { return context.Cause(gctx) }}
		for range 3 {
			gr.Go(func() error {
				<-gctx.Done()
				return gctx.Err()
			})
		}
		return gr.Wait()
	}
	for _, tc := range []struct {
		name string
		hold holdFunc
	}{
		{"RLock", grant(rwlock.Read)},
		{"Lock", grant(rwlock.Write)},
		{"WithRead", with(rwlock.Read)},
		{"WithWrite", with(rwlock.Write)},
		{"ReadGroup", readGroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			holder := connect(t, srv.Addr(0), timeout)
			other := connect(t, srv.Addr(0), 0)
			path := zktest.LockPath(t, "/it")
			l, ol := holder.lock(t, path), other.lock(t, path)
			ctx := t.Context()

			held := make(chan holding, 1)
			result := make(chan error, 1)
			go func() { result <- tc.hold(ctx, l, held) }()
			var h holding
			select {
			case h = <-held:
			case err := <-result:
				t.Fatalf("not held: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("not held after 10s")
			}
			done := closedAt(ctx, h.done)
			session := holder.conn.SessionID()

			start := time.Now()
			holder.expire(t, srv.Addr(0))
			expired := time.Since(start)
			var doneAt time.Time
			select {
			case doneAt = <-done:
			case <-time.After(15 * time.Second):
				t.Fatalf("grant still held 15s after its session expired (%v)", h.cause())
			}
			var err error
			select {
			case err = <-result:
			case <-time.After(10 * time.Second):
				t.Fatal("the holder did not return after its grant was lost")
			}
			t.Logf("expiring the session took %v; expiry began → Done %v; holder returned: %v", msec(expired), msec(doneAt.Sub(start)), err)

			require.ErrorIs(t, h.cause(), rwlock.ErrLost)
			require.ErrorIs(t, h.cause(), zk.ErrSessionExpired)
			require.ErrorIs(t, err, rwlock.ErrLost, "the call returns the loss")

			// The node went with the session; another client need not wait.
			g2, err := ol.TryLock(ctx)
			require.NoError(t, err)
			mustRelease(t, g2)
			// go-zookeeper carries on with a new session, and the lock with it.
			zktest.WaitFor(t, 10*time.Second, func() bool {
				return holder.conn.State() == zk.StateHasSession && holder.conn.SessionID() != session
			}, "the holder's connection should have a new session")
			g3, err := l.TryLock(ctx)
			require.NoError(t, err)
			mustRelease(t, g3)
			waitNodes(t, other.conn, path, 5*time.Second)
		})
	}
}

// holding is what a holder sees of its grant: a channel closed when it ends
// (Done, or the context handed to its function), and why it ended (Err, or
// that context's cause).
type holding struct {
	done  <-chan struct{}
	cause func() error
}

// acquireNow runs Lock or RLock.
func acquireNow(ctx context.Context, l *rwlock.RWLock, mode rwlock.Mode) (*rwlock.Grant, error) {
	if mode == rwlock.Write {
		return l.Lock(ctx)
	}
	return l.RLock(ctx)
}
