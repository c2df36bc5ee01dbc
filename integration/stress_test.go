package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// TestStress is the invariant hammer of sync.RWMutex's tests, on a real server:
// clients with a session each take the lock in random modes, hold it for a
// random while, and now and then give up on a wait (a tiny deadline, or a
// cancel in the middle of the wait) or try without waiting. Inside every
// critical section the exclusion checker must see either readers only or
// one writer; at the end the lock directory must be empty, cancelled calls
// included.
func TestStress(t *testing.T) {
	srv := sharedServer(t)
	clients, rounds := 8, 150
	if testing.Short() {
		clients, rounds = 4, 30
	}
	p := zktest.LockPath(t, "/it")
	ctx := testContext(t)

	var (
		x                                         exclusion
		reads, writes, cancels, wouldBlock, raced atomic.Int64
		locks                                     []*rwlock.RWLock
		observer                                  = connect(t, srv.ConnectString(), 0)
	)
	for range clients {
		locks = append(locks, connect(t, srv.ConnectString(), 0).lock(t, p))
	}

	start := time.Now()
	eg, ctx := errgroup.WithContext(ctx)
	for i, l := range locks {
		rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
		eg.Go(func() error {
			for round := range rounds {
				mode, kind := rwlock.Read, rng.IntN(100)
				if rng.IntN(100) < 30 {
					mode = rwlock.Write
				}
				g, err := acquireOnce(ctx, l, mode, kind, rng)
				switch {
				case err == nil:
				case errors.Is(err, rwlock.ErrWouldBlock):
					wouldBlock.Add(1)
					continue
				case ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
					cancels.Add(1)
					continue
				default:
					return fmt.Errorf("client %d, round %d, %v: %w", i, round, mode, err)
				}
				if kind < 15 {
					raced.Add(1) // a call that was to be cancelled got the lock first
				}
				if mode == rwlock.Write {
					writes.Add(1)
				} else {
					reads.Add(1)
				}
				x.enter(mode)
				time.Sleep(time.Duration(rng.IntN(5001)) * time.Microsecond) // the hold time: 0-5ms
				x.leave(mode)
				if err := g.Release(ctx); err != nil {
					return fmt.Errorf("client %d, round %d: release: %w", i, round, err)
				}
			}
			return nil
		})
	}
	err := eg.Wait()
	took := time.Since(start)
	t.Logf("%d clients x %d rounds in %v: %d reads, %d writes, %d cancelled (%d cancellable calls got the lock in time), %d TryLocks would block, %d violations",
		clients, rounds, took.Round(time.Millisecond), reads.Load(), writes.Load(), cancels.Load(), raced.Load(),
		wouldBlock.Load(), x.violations.Load())
	require.NoError(t, err)
	require.Zero(t, x.violations.Load(), "mutual exclusion violated")
	require.Equal(t, int64(clients*rounds), reads.Load()+writes.Load()+cancels.Load()+wouldBlock.Load())
	if !testing.Short() { // with -short, too few rounds to be sure
		require.Positive(t, cancels.Load(), "no acquisition was cancelled: the test did not test that")
	}

	// Cancelled calls delete their node before they return; deletions cut
	// short by a connection failure finish in the background. Either way
	// nothing may stay.
	var left []string
	zktest.Poll(t, 20*time.Second, func() bool {
		left = lockNodes(t, observer.conn, p)
		return len(left) == 0
	}, func() string { return fmt.Sprintf("nodes left behind: %v", left) })
}

// acquireOnce makes one acquisition of the stress test. kind picks how:
// below 10 with a deadline of 0-10ms (gone before the create, during it,
// or during the wait), 10-14 cancelled after 0-10ms, 15-19 TryLock or TryRLock,
// else a plain blocking call.
func acquireOnce(ctx context.Context, l *rwlock.RWLock, mode rwlock.Mode, kind int, rng *rand.Rand) (*rwlock.Grant, error) {
	acquire, try := l.RLock, l.TryRLock
	if mode == rwlock.Write {
		acquire, try = l.Lock, l.TryLock
	}
	switch {
	case kind < 10:
		ctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(10001))*time.Microsecond)
		defer cancel()
		return acquire(ctx)
	case kind < 15:
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := time.AfterFunc(time.Duration(rng.IntN(10001))*time.Microsecond, cancel)
		defer stop.Stop()
		return acquire(ctx)
	case kind < 20:
		return try(ctx)
	}
	return acquire(ctx)
}
