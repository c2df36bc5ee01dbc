package integration

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

var holdTrials = flag.Int("hold.trials", 100, "trials of TestHoldLimit's fault-free part (its partitioned part runs a fifth as many)")

// A holder that never looks at its grant: with a hold limit, it is told
// (Done closes) before anyone else is granted, by the head start, in
// fault-free trials and with the holder's connection partitioned around
// the limit; and no node is left.
func TestHoldLimit(t *testing.T) {
	const (
		limit   = time.Second
		timeout = 4 * time.Second // the head start: min(timeout/4, limit/2) = 500 ms
		head    = limit / 2
	)
	srv := sharedServer(t)
	waiter := connect(t, srv.ConnectString(), timeout)
	holders := connect(t, srv.ConnectString(), timeout)

	// trial holds a fresh lock on holder with the limit, has the waiter
	// queue behind it, and returns how long before the waiter's grant the
	// holder was told; partition, if not nil, runs while the holder holds.
	trial := func(t *testing.T, holder *client, partition func()) (margin time.Duration, path string) {
		path = zktest.LockPath(t, "/hold")
		ctx := testContext(t)
		g, err := holder.lock(t, path, rwlock.WithMaxHold(limit)).Lock(ctx)
		require.NoError(t, err)
		told := make(chan time.Time, 1)
		go func() { <-g.Done(); told <- time.Now() }() // the holder never looks but to note the time
		if partition != nil {
			partition()
		}
		w, err := waiter.lock(t, path).Lock(ctx)
		require.NoError(t, err)
		grantedAt := time.Now()
		defer w.Release(ctx)
		// Done itself says whether the holder was told by now. The goroutine
		// that notes the time may not have run yet, on a loaded machine.
		select {
		case <-g.Done():
		default:
			t.Fatalf("another client was granted while the holder had not been told")
		}
		require.ErrorIs(t, g.Err(), rwlock.ErrLost)
		select {
		case at := <-told:
			return grantedAt.Sub(at), path
		case <-time.After(10 * time.Second):
			t.Fatalf("Done closed, but its goroutine did not note the time within 10s")
		}
		return 0, path
	}

	check := func(t *testing.T, name string, n int, holderOf func(i int) (*client, func())) {
		margins := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				holder, partition := holderOf(i)
				var path string
				margins[i], path = trial(t, holder, partition)
				zktest.Poll(t, 20*time.Second, func() bool { return len(lockNodes(t, waiter.conn, path)) == 0 },
					func() string { return fmt.Sprintf("nodes left in %s: %v", path, lockNodes(t, waiter.conn, path)) })
			})
		}
		wg.Wait()
		least := margins[0]
		for _, m := range margins {
			least = min(least, m)
		}
		t.Logf("%s: %d trials, the holder was told at least %v before the next grant (head start %v)", name, n, least, head)
		assert.Greater(t, least, head/2, "told about the head start before the next grant")
	}

	t.Run("fault-free", func(t *testing.T) {
		check(t, "fault-free", *holdTrials, func(int) (*client, func()) { return holders, nil })
	})
	t.Run("partitioned", func(t *testing.T) {
		tier.NoRace(t, zk35)
		check(t, "partitioned", max(*holdTrials/5, 1), func(i int) (*client, func()) {
			p := faultproxy.Start(t, srv.Addr(0))
			holder := connect(t, p.Addr(), timeout)
			// Cut off from 300 to 1,300 ms after the grant, across the notice
			// and the limit, for less than the session timeout; then the
			// connection breaks, as TCP's would, rather than resume with a
			// hole in its stream.
			return holder, func() {
				go func() {
					time.Sleep(300 * time.Millisecond) // the fault's schedule, not a synchronisation
					p.Blackhole()
					time.Sleep(time.Second)
					p.Pass()
					p.Cut()
				}()
			}
		})
	})
}

// The holder's function sees its context end with ErrHoldLimit, and
// WithWrite returns an error wrapping ErrLost and ErrHoldLimit.
func TestHoldLimitCancelsTheFunction(t *testing.T) {
	srv := sharedServer(t)
	a := connect(t, srv.ConnectString(), 0)
	l := a.lock(t, zktest.LockPath(t, "/hold"), rwlock.WithMaxHold(time.Second))
	err := l.WithWrite(testContext(t), func(ctx context.Context) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, rwlock.ErrLost)
	require.ErrorIs(t, err, rwlock.ErrHoldLimit)
}
