package rwlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// live is a StartObserver that keeps what is under way, as package stats
// does, and notes every end that had no start.
type live struct {
	mu       sync.Mutex
	waits    map[liveWait]int
	held     map[string]Mode
	unpaired []string
}

type liveWait struct {
	lock  string
	mode  Mode
	start time.Time
}

var _ StartObserver = (*live)(nil)

func (o *live) ObserveAcquireStart(_ context.Context, e AcquireEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waits == nil {
		o.waits = map[liveWait]int{}
	}
	o.waits[liveWait{e.Lock, e.Mode, e.Start}]++
}

func (o *live) ObserveAcquire(_ context.Context, e AcquireEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := liveWait{e.Lock, e.Mode, e.Start}
	if o.waits[k] == 0 {
		o.unpaired = append(o.unpaired, fmt.Sprintf("acquisition %+v", k))
		return
	}
	if o.waits[k]--; o.waits[k] == 0 {
		delete(o.waits, k)
	}
}

func (o *live) ObserveGrantStart(e GrantEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil {
		o.held = map[string]Mode{}
	}
	if _, ok := o.held[e.Node]; ok {
		o.unpaired = append(o.unpaired, "grant started twice: "+e.Node)
	}
	o.held[e.Node] = e.Mode
}

func (o *live) ObserveGrant(e GrantEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.held[e.Node]; !ok {
		o.unpaired = append(o.unpaired, "grant "+e.Node)
	}
	delete(o.held, e.Node)
}

// liveFigures are what is under way, by mode.
type liveFigures struct {
	readWaiting, writeWaiting, readHeld, writeHeld int
	oldest                                         time.Duration
}

func (o *live) now() liveFigures {
	o.mu.Lock()
	defer o.mu.Unlock()
	var f liveFigures
	var oldest time.Time
	for w, n := range o.waits {
		if w.mode == Read {
			f.readWaiting += n
		} else {
			f.writeWaiting += n
		}
		if oldest.IsZero() || w.start.Before(oldest) {
			oldest = w.start
		}
	}
	if !oldest.IsZero() {
		f.oldest = time.Since(oldest)
	}
	for _, m := range o.held {
		if m == Read {
			f.readHeld++
		} else {
			f.writeHeld++
		}
	}
	return f
}

// TestWaitingAndHeldEveryPath takes every path an acquisition or a grant
// can end by, and checks what is under way at each step, and that nothing
// is once all has ended.
func TestWaitingAndHeldEveryPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		var o live
		c := s.conn()
		l := newLock(t, c, WithObserver(&o))
		check := func(want liveFigures, msg string) {
			t.Helper()
			synctest.Wait() // a grant's end is heard after its Done closes
			assert.Equal(t, want, o.now(), msg)
		}

		// Waits that end by grant, cancel, timeout and would-block.
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		check(liveFigures{writeHeld: 1}, "a writer holds")
		r := start(ctx, l.RLock)
		time.Sleep(time.Second)
		cctx, cancel := context.WithCancel(ctx)
		cancelled := start(cctx, l.RLock)
		tctx, cancelT := context.WithTimeout(ctx, 2*time.Second)
		defer cancelT()
		timedOut := start(tctx, l.Lock)
		time.Sleep(time.Second)
		check(liveFigures{readWaiting: 2, writeWaiting: 1, writeHeld: 1, oldest: 2 * time.Second}, "three wait")
		cancel()
		require.ErrorIs(t, (<-cancelled).err, context.Canceled)
		_, err = l.TryRLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock)
		check(liveFigures{readWaiting: 1, writeWaiting: 1, writeHeld: 1, oldest: 2 * time.Second}, "cancelled")
		time.Sleep(time.Second)
		require.ErrorIs(t, (<-timedOut).err, context.DeadlineExceeded)
		check(liveFigures{readWaiting: 1, writeHeld: 1, oldest: 3 * time.Second}, "timed out")
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		rg := granted(t, r)
		check(liveFigures{readHeld: 1}, "the reader holds")

		// Nested grants make no node: they are not counted.
		err = l.WithRead(ContextWithGrant(ctx, rg), func(context.Context) error {
			check(liveFigures{readHeld: 1}, "nested")
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, rg.Release(ctx))
		check(liveFigures{}, "released")

		// A downgrade keeps one grant held, in read mode.
		w, err = l.Lock(ctx)
		require.NoError(t, err)
		d, err := w.Downgrade(ctx)
		require.NoError(t, err)
		assert.Equal(t, Read, d.Mode())
		check(liveFigures{readHeld: 1}, "downgraded")
		require.NoError(t, w.Release(ctx)) // releases d
		check(liveFigures{}, "downgraded and released")

		// ReadGroup and ReadBatch hold one grant while their functions run.
		gr, gctx, err := l.ReadGroup(ctx)
		require.NoError(t, err)
		gr.Go(func() error { return gctx.Err() })
		check(liveFigures{readHeld: 1}, "group")
		require.NoError(t, gr.Wait())
		require.NoError(t, l.ReadBatch(ctx, func(context.Context) error {
			check(liveFigures{readHeld: 1}, "batch")
			return nil
		}))
		check(liveFigures{}, "group and batch")

		// LockAll (the fake has no create in a transaction) is in
		// integration's TestStatsUnderWay.

		// A lost grant, and an acquisition that fails.
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, s.conn().Delete(g.Node(), -1))
		<-g.Done()
		check(liveFigures{}, "lost")
		other := s.conn()
		deleteOwnNodeBeforeListing(c, s, other, dir)
		_, err = l.Lock(ctx)
		require.ErrorIs(t, err, ErrLost)
		c.setBefore(nil)
		check(liveFigures{}, "failed")

		o.mu.Lock()
		defer o.mu.Unlock()
		assert.Empty(t, o.unpaired, "every end had its start")
	})
}

// Coalesced readers wait each on their own, and hold one grant: the
// node they share.
func TestWaitingAndHeldCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		var o live
		l := newLock(t, s.conn(), WithObserver(&o), WithReadCoalescing())
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		var readers []<-chan result
		for range 3 {
			readers = append(readers, start(ctx, l.RLock))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, liveFigures{readWaiting: 3, oldest: time.Second}, o.now())
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		var grants []*Grant
		for _, r := range readers {
			grants = append(grants, granted(t, r))
		}
		assert.Equal(t, liveFigures{readHeld: 1}, o.now(), "one shared node")
		for _, g := range grants {
			require.NoError(t, g.Release(ctx))
		}
		synctest.Wait()
		assert.Equal(t, liveFigures{}, o.now())
		o.mu.Lock()
		defer o.mu.Unlock()
		assert.Empty(t, o.unpaired)
	})
}
