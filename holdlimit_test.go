package rwlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The holder is told a head start before the limit; the node, and with it
// the next waiter's way, goes at the limit.
func TestHoldLimitTellsTheHolderFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		granted time.Duration // the session timeout the lock knows; 0: none
		notice  time.Duration // when the holder is told
	}{
		{"timeout known", 8 * time.Second, 8 * time.Second}, // a quarter of 8s before 10s
		{"timeout unknown", 0, 7500 * time.Millisecond},     // a quarter of 10s
		{"long session", 40 * time.Second, 5 * time.Second}, // at most half of 10s
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit = 10 * time.Second
				s := newFakeServer()
				c := s.conn()
				c.setGranted(tc.granted)
				var rec recorder
				l := newLock(t, c, WithMaxHold(limit), WithObserver(&rec))
				ctx := t.Context()
				began := time.Now()
				g, err := l.Lock(ctx)
				require.NoError(t, err)
				deadline, ok := g.Deadline()
				require.True(t, ok, "a hold limit is a deadline the lock knows")
				assert.False(t, deadline.After(began.Add(limit)))

				next := start(ctx, newLock(t, s.conn()).Lock)
				<-g.Done()
				synctest.Wait()
				select {
				case <-next:
					t.Fatal("the next writer was granted as the holder was told")
				default:
				}
				told := time.Since(began)
				assert.Equal(t, tc.notice, told, "told when")
				require.ErrorIs(t, g.Err(), ErrLost)
				require.ErrorIs(t, g.Err(), ErrHoldLimit)
				deadline, ok = g.Deadline()
				assert.True(t, ok)
				assert.Equal(t, began.Add(limit), deadline, "by when the holder must have stopped")

				time.Sleep(time.Until(began.Add(limit)))
				synctest.Wait()
				w := granted(t, next)
				assert.Equal(t, limit, time.Since(began), "the next writer goes at the limit, not before")
				require.NoError(t, w.Release(ctx))
				require.NoError(t, g.Release(ctx), "a release after the notice is no error")
				synctest.Wait()
				_, grants := rec.events()
				require.NotEmpty(t, grants)
				assert.Equal(t, "hold_limit", grants[0].Loss)
			})
		})
	}
}

// A downgrade and a nested grant keep the limit of the grant they come
// from; WithWrite's function sees its context end with ErrHoldLimit.
func TestHoldLimitCarriesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 8 * time.Second
		s := newFakeServer()
		c := s.conn()
		c.setGranted(4 * time.Second) // told 1s before the limit
		l := newLock(t, c, WithMaxHold(limit))
		start := time.Now()
		err := l.WithWrite(t.Context(), func(ctx context.Context) error {
			time.Sleep(3 * time.Second)
			return l.WithRead(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				assert.Equal(t, limit-time.Second, time.Since(start))
				assert.ErrorIs(t, context.Cause(ctx), ErrHoldLimit)
				return ctx.Err()
			})
		})
		require.ErrorIs(t, err, ErrLost)
		require.ErrorIs(t, err, ErrHoldLimit)

		w, err := l.Lock(t.Context()) // at the first grant's limit, when its node goes
		require.NoError(t, err)
		start = time.Now()
		time.Sleep(5 * time.Second)
		r, err := w.Downgrade(t.Context())
		require.NoError(t, err)
		<-r.Done()
		assert.Equal(t, limit-time.Second, time.Since(start), "the downgrade keeps the write grant's limit")
		require.ErrorIs(t, r.Err(), ErrHoldLimit)
	})
}

// A grant released before its limit is an ordinary release: no timer left.
func TestHoldLimitOfAReleasedGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn(), WithMaxHold(time.Minute))
		g, err := l.RLock(t.Context())
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))
		time.Sleep(2 * time.Minute)
		require.ErrorIs(t, g.Err(), ErrReleased)
		_, err = newRWLock(s.conn(), dir, WithMaxHold(0))
		require.ErrorIs(t, err, ErrInvalidArgument)
	})
}

// Queue shows each node's hold limit, read from the data its create wrote,
// to any client; a downgrade's rewrite of the data keeps it.
func TestQueueShowsHoldLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = time.Hour
		s := newFakeServer()
		ctx := t.Context()
		g, err := newLock(t, s.conn(), WithMaxHold(limit)).Lock(ctx)
		require.NoError(t, err)
		next := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		observer := newLock(t, s.conn())
		q, err := observer.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 2)
		assert.Equal(t, []time.Duration{limit, 0}, []time.Duration{q[0].MaxHold, q[1].MaxHold})

		down, err := g.Downgrade(ctx)
		require.NoError(t, err)
		q, err = observer.Queue(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, q)
		assert.Equal(t, Read, q[0].Mode, "downgraded")
		assert.Equal(t, limit, q[0].MaxHold, "a downgrade keeps the limit")
		require.NoError(t, down.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, next).Release(ctx))
	})
}

// A process paused past the notice resumes before its hold timer's
// goroutine runs: the first Err already fails, and the next writer is
// still kept out until the limit.
func TestHoldLimitAfterAPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		defer func(t func(time.Duration, func()) *time.Timer) { holdTimer = t }(holdTimer)
		holdTimer = func(time.Duration, func()) *time.Timer { return time.AfterFunc(time.Hour, func() {}) }
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second) // told 2s before the limit
		l := newLock(t, c, WithMaxHold(limit))
		began := time.Now()
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		next := start(t.Context(), newLock(t, s.conn()).Lock)

		time.Sleep(limit - time.Second) // past the notice, the timer unheard
		synctest.Wait()
		select {
		case <-next:
			t.Fatal("the next writer was granted before the limit")
		default:
		}
		require.ErrorIs(t, g.Err(), ErrHoldLimit, "the first look after the pause")
		require.ErrorIs(t, g.Err(), ErrLost)

		time.Sleep(time.Until(began.Add(limit)))
		synctest.Wait()
		w := granted(t, next)
		assert.Equal(t, limit, time.Since(began), "the node goes at the limit")
		require.NoError(t, w.Release(t.Context()))
		require.NoError(t, g.Release(t.Context()))
	})
}
