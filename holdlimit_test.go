package rwlock

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The holder is told a head start before the limit; the node, and with it
// the next waiter's way, goes at the limit. A bound (WithSessionTimeout on
// a connection that does not tell the granted timeout) may tell the holder
// sooner than a quarter of the limit would, never later.
func TestHoldLimitTellsTheHolderFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		granted time.Duration // the session timeout the lock knows; 0: none
		bound   time.Duration // WithSessionTimeout's, where the lock knows none; 0: none
		notice  time.Duration // when the holder is told
	}{
		{"timeout known", 8 * time.Second, 0, 8 * time.Second},                                  // a quarter of 8s before 10s
		{"timeout unknown", 0, 0, 7500 * time.Millisecond},                                      // a quarter of 10s
		{"long session", 40 * time.Second, 0, 5 * time.Second},                                  // at most half of 10s
		{"short bound", 0, 2 * time.Second, 7500 * time.Millisecond},                            // a quarter of 10s, not of 2s
		{"bound", 0, 16 * time.Second, 6 * time.Second},                                         // a quarter of 16s
		{"long bound", 0, 40 * time.Second, 5 * time.Second},                                    // at most half of 10s
		{"timeout known, short cap", 8 * time.Second, 2 * time.Second, 9500 * time.Millisecond}, // a quarter of the cap: the server granted at least it
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit = 10 * time.Second
				s := newFakeServer()
				c := s.conn()
				c.setGranted(tc.granted)
				var rec recorder
				opts := []Option{WithMaxHold(limit), WithObserver(&rec)}
				if tc.bound > 0 {
					opts = append(opts, WithSessionTimeout(tc.bound))
				}
				l := newLock(t, c, opts...)
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
// goroutine runs: the first Err already fails, and the next writer is kept
// out until the limit and the holder's head start after it was told,
// whichever is later; a pause past the limit too gets the whole head start.
func TestHoldLimitAfterAPause(t *testing.T) {
	for _, tc := range []struct {
		name   string
		paused time.Duration // from the grant; the limit is 10s, the head start 2s
		goes   time.Duration // when the node goes, from the grant
	}{
		{"past the notice", 9 * time.Second, 11 * time.Second},
		{"past the limit", 10500 * time.Millisecond, 12500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit = 10 * time.Second
				defer func(t func(*zkclient.Client, time.Duration, func()) *time.Timer) { holdTimer = t }(holdTimer)
				holdTimer = func(*zkclient.Client, time.Duration, func()) *time.Timer { return time.AfterFunc(time.Hour, func() {}) }
				s := newFakeServer()
				c := s.conn()
				c.setGranted(8 * time.Second) // told 2s before the limit
				l := newLock(t, c, WithMaxHold(limit))
				began := time.Now()
				g, err := l.Lock(t.Context())
				require.NoError(t, err)
				next := start(t.Context(), newLock(t, s.conn()).Lock)

				time.Sleep(tc.paused) // the timer unheard
				synctest.Wait()
				pending(t, next)
				require.ErrorIs(t, g.Err(), ErrHoldLimit, "the first look after the pause")
				require.ErrorIs(t, g.Err(), ErrLost)
				deadline, ok := g.Deadline()
				require.True(t, ok)
				assert.Equal(t, began.Add(tc.goes), deadline)

				time.Sleep(time.Until(began.Add(tc.goes)) - time.Millisecond)
				synctest.Wait()
				pending(t, next)
				time.Sleep(time.Millisecond)
				synctest.Wait()
				w := granted(t, next)
				require.NoError(t, w.Release(t.Context()))
				require.NoError(t, g.Release(t.Context()))
			})
		})
	}
}

// The notice judges the lease first: a grant whose keepalives go
// unanswered keeps the lease's deadline once told of its limit, which can
// only come earlier, never later.
func TestHoldLimitKeepsTheLeaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10300 * time.Millisecond // head start 2s: the notice at 8.3s
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second)
		began := time.Now()
		c.setBefore(func(op, _ string) error {
			if op == "sync" && time.Since(began) > 2600*time.Millisecond {
				return zk.ErrConnectionClosed // keepalives unanswered from 2.6s
			}
			return nil
		})
		g, err := newLock(t, c, WithMaxHold(limit)).Lock(t.Context())
		require.NoError(t, err)
		time.Sleep(8200 * time.Millisecond)
		before, ok := g.Deadline()
		require.True(t, ok)
		time.Sleep(200 * time.Millisecond) // past the notice
		require.ErrorIs(t, g.Err(), ErrLost)
		after, ok := g.Deadline()
		require.True(t, ok)
		assert.False(t, after.After(before), "the deadline moved from %v to %v after the loss",
			before.Sub(began), after.Sub(began))
	})
}

// A stop longer than the session: as the process resumes, the hold timer
// may run before the lease clock; the grant is lost for its session all
// the same, with a deadline that has passed, not for its hold limit.
func TestHoldLimitAfterTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 20 * time.Second // the notice at 18s
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second)
		g, err := newLock(t, c, WithMaxHold(limit)).Lock(t.Context())
		require.NoError(t, err)
		time.Sleep(time.Second)
		c.freeze() // the lease clock and requests stop; so does the hold timer
		time.Sleep(9 * time.Second)
		c.serverExpire() // T after the server last heard of it
		time.Sleep(9 * time.Second)
		synctest.Wait()
		c.thaw()
		synctest.Wait()
		require.ErrorIs(t, g.Err(), ErrLost)
		require.NotErrorIs(t, g.Err(), ErrHoldLimit)
		deadline, ok := g.Deadline()
		require.True(t, ok)
		assert.False(t, deadline.After(time.Now()), "a deadline %v ahead", time.Until(deadline))
	})
}

// A Downgrade whose mark lands after the write grant's notice, while that
// grant's timer has not run yet: the read grant, due at once, ends, and
// leaves nothing on the lease clock (no keepalives once all is released).
func TestHoldLimitDowngradeAtTheNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		var writeTimer func()
		timers := 0
		defer func(t func(*zkclient.Client, time.Duration, func()) *time.Timer) { holdTimer = t }(holdTimer)
		holdTimer = func(c *zkclient.Client, d time.Duration, f func()) *time.Timer {
			if timers++; timers == 1 { // the write grant's: its goroutine is late
				writeTimer = f
				return time.AfterFunc(time.Hour, func() {})
			}
			if d <= 0 { // the read grant's: its goroutine runs first
				f()
			}
			return time.AfterFunc(d, f)
		}
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second) // the notice at 8s
		began := time.Now()
		c.setBefore(func(op, _ string) error {
			if op == "set" {
				time.Sleep(time.Until(began.Add(8500 * time.Millisecond)))
			}
			return nil
		})
		g, err := newLock(t, c, WithMaxHold(limit)).Lock(t.Context())
		require.NoError(t, err)
		time.Sleep(7 * time.Second)
		d, err := g.Downgrade(t.Context())
		require.NoError(t, err)
		require.ErrorIs(t, d.Err(), ErrHoldLimit)
		writeTimer()
		require.NoError(t, d.Release(t.Context()))
		require.NoError(t, g.Release(t.Context()))
		time.Sleep(limit)
		synctest.Wait()
		sent := c.calls.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Zero(t, c.calls.Load()-sent, "requests with nothing held")
		assert.Empty(t, s.lockNodes(dir))
	})
}

// As a stopped process resumes, its hold timer and its holder's first look
// may both tell the holder at once: whichever ends the grant, the node
// goes when Deadline says, not before and not later.
func TestHoldLimitToldTwiceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		var timer func()
		defer func(t func(*zkclient.Client, time.Duration, func()) *time.Timer) { holdTimer = t }(holdTimer)
		holdTimer = func(_ *zkclient.Client, _ time.Duration, f func()) *time.Timer {
			timer = f
			return time.AfterFunc(time.Hour, func() {})
		}
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second) // told 2s before the limit
		g, err := newLock(t, c, WithMaxHold(limit)).Lock(t.Context())
		require.NoError(t, err)
		next := start(t.Context(), newLock(t, s.conn()).Lock)
		time.Sleep(9 * time.Second) // stopped across the notice
		synctest.Wait()
		var wg sync.WaitGroup
		wg.Go(timer)
		wg.Go(func() { g.Err() })
		wg.Wait()
		deadline, ok := g.Deadline()
		require.True(t, ok)
		time.Sleep(time.Until(deadline) - time.Millisecond)
		synctest.Wait()
		pending(t, next)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.NoError(t, granted(t, next).Release(t.Context()))
		require.NoError(t, g.Release(t.Context()))
	})
}

// After the notice, the node goes as soon as every grant on it is
// released, not at the limit: a process that exits after its Release
// leaves nothing for the next writer to wait on. Until the last release,
// it stays for the grants still open.
func TestHoldLimitReleasedAfterTheNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn(), WithMaxHold(limit), WithReadCoalescing())
		begin := time.Now()
		r1, err := l.RLock(ctx)
		require.NoError(t, err)
		r2, err := l.RLock(ctx)
		require.NoError(t, err)
		require.Equal(t, r1.Node(), r2.Node(), "one node, two grants")
		w := start(ctx, newLock(t, s.conn()).Lock)
		<-r1.Done()
		require.ErrorIs(t, r1.Err(), ErrHoldLimit)
		told := time.Since(begin)
		require.Less(t, told, limit)
		assert.Regexp(t, `hold limit reached: told \S+ after the grant, a head start of \S+ before the limit of 10s`, r1.Err().Error(),
			"says when the holder was told, and why then")

		require.NoError(t, r1.Release(ctx))
		synctest.Wait()
		pending(t, w)
		assert.Len(t, s.lockNodes(dir), 2, "kept for the grant still open")
		require.NoError(t, r2.Release(ctx))
		synctest.Wait()
		next := granted(t, w)
		assert.Equal(t, told, time.Since(begin), "granted as the last grant was released, not at the limit")
		require.NoError(t, next.Release(ctx))
		time.Sleep(limit)
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}
