package rwlock

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

// A permit costs what a lock does uncontended: create, list, delete. Its
// node declares its weight and the capacity.
func TestPermitUncontendedCostsThreeRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c, WithCapacity(4))
		g, err := l.Acquire(t.Context(), 2) // first: creates the directories too
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))
		for _, w := range []int64{1, 3, 4} {
			before, first := c.calls.Load(), c.appliedCount()
			g, err := l.Acquire(t.Context(), w)
			require.NoError(t, err)
			name := s.lockNodes(dir)[0]
			assert.Contains(t, name, "-sem-"+string(rune('0'+w))+"of4-")
			assert.Equal(t, l.permitMode(w), g.Mode())
			require.NoError(t, g.Release(t.Context()))
			assert.Equal(t, int64(3+c.overtaken(first)), c.calls.Load()-before, "create, list, delete")
		}
		assert.Empty(t, s.lockNodes(dir))

		one := newLock(t, c, WithCapacity(1))
		g, err = one.RLock(t.Context())
		require.NoError(t, err)
		assert.Equal(t, Write, g.Mode(), "one permit of one is all of them")
		require.NoError(t, g.Release(t.Context()))
	})
}

// Strict queue order: a large request holds back a later small one that
// would fit, and both are admitted by the release that makes room.
func TestPermitsInQueueOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		a, b, c := newLock(t, s.conn(), WithCapacity(4)), newLock(t, s.conn(), WithCapacity(4)), newLock(t, s.conn(), WithCapacity(4))
		g3, err := a.Acquire(ctx, 3)
		require.NoError(t, err)
		w2 := start(ctx, func(ctx context.Context) (*Grant, error) { return b.Acquire(ctx, 2) })
		synctest.Wait()
		pending(t, w2)
		w1 := start(ctx, func(ctx context.Context) (*Grant, error) { return c.Acquire(ctx, 1) })
		synctest.Wait()
		pending(t, w1) // 3+1 fits, but the 2 waits ahead of it
		_, err = c.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrWouldBlock)
		_, err = c.TryAcquire(ctx, 1)
		assert.ErrorIs(t, err, ErrWouldBlock)
		assert.Len(t, s.lockNodes(dir), 3, "a TryAcquire that would block leaves no node")

		require.NoError(t, g3.Release(ctx))
		synctest.Wait()
		g2, g1 := granted(t, w2), granted(t, w1)
		assert.Less(t, g2.Token(), g1.Token())
		writer := start(ctx, a.Lock) // all four
		synctest.Wait()
		pending(t, writer)
		require.NoError(t, g2.Release(ctx))
		synctest.Wait()
		pending(t, writer)
		require.NoError(t, g1.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, writer).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// The watch set (see the herd-free wait in capacity.go): the first waiter
// watches the holders, every other waiter its predecessor alone. A release
// wakes at most one waiter more than it admits. (The server still notifies
// a granted waiter of the watches it set; go-zookeeper cannot remove them.
// That wakes nobody.)
func TestPermitWakeups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		var holders []*Grant
		for range 4 {
			g, err := newLock(t, s.conn(), WithCapacity(4)).RLock(ctx)
			require.NoError(t, err)
			holders = append(holders, g)
		}
		var waits []<-chan result
		var conns []*fakeConn
		for range 6 {
			c := s.conn()
			waits = append(waits, start(ctx, newLock(t, c, WithCapacity(4)).RLock))
			conns = append(conns, c)
			synctest.Wait()
		}
		assert.Len(t, s.othersWatchedBy(conns[0]), 4, "the first waiter watches every holder")
		for i, c := range conns[1:] {
			assert.Len(t, s.othersWatchedBy(c), 1, "waiter %d watches its predecessor alone", i+1)
		}
		for _, name := range s.lockNodes(dir) {
			assert.LessOrEqual(t, s.othersWatching(dir+"/"+name), 1, name)
		}

		admitted := 0
		var got []*Grant
		for round, h := range holders {
			before := make([]int64, len(conns))
			for i, c := range conns {
				before[i] = c.notified.Load()
			}
			require.NoError(t, h.Release(ctx))
			synctest.Wait()
			woken, now := 0, 0
			for i, c := range conns[admitted:] { // those that wait: a watch left by a waiter since granted wakes nobody
				if c.notified.Load() > before[admitted+i] {
					woken++
				}
			}
			for _, w := range waits[admitted:] {
				select {
				case r := <-w:
					require.NoError(t, r.err)
					got = append(got, r.g)
					now++
				default:
				}
			}
			assert.Equal(t, 1, now, "release %d admits one", round)
			assert.LessOrEqual(t, woken, 1+now, "release %d", round)
			admitted += now
		}
		for _, g := range got {
			require.NoError(t, g.Release(ctx))
		}
		synctest.Wait()
		for _, w := range waits[admitted:] {
			require.NoError(t, granted(t, w).Release(ctx))
		}
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A path holds one fleet: nodes of another capacity, of a lock without one,
// or of Curator's semaphore are refused, and the refused acquisition
// leaves no node.
func TestPermitsRefuseAMixedFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		four, eight, plain := newLock(t, s.conn(), WithCapacity(4)), newLock(t, s.conn(), WithCapacity(8)), newLock(t, s.conn())
		g, err := four.RLock(ctx)
		require.NoError(t, err)
		_, err = eight.RLock(ctx)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.ErrorContains(t, err, "capacity 4")
		_, err = plain.RLock(ctx)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.ErrorContains(t, err, "no capacity")
		assert.Len(t, s.lockNodes(dir), 1)
		require.NoError(t, g.Release(ctx))

		g, err = plain.Lock(ctx)
		require.NoError(t, err)
		_, err = four.TryLock(ctx)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		require.NoError(t, g.Release(ctx))

		// Curator's InterProcessSemaphoreV2 on the path: locks/ and leases/.
		c := s.conn()
		_, err = c.Create(dir+"/leases", nil, 0, nil)
		require.NoError(t, err)
		for _, l := range []*RWLock{four, plain} {
			_, err = l.RLock(ctx)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.ErrorContains(t, err, "InterProcessSemaphoreV2")
		}
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Bad input is refused with ErrInvalidArgument, never a panic.
func TestPermitsBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		for _, opts := range [][]Option{
			{WithCapacity(0)}, {WithCapacity(-1)}, {WithCapacity(1_000_000_000)},
			{WithCapacity(4), WithReadCoalescing()}, {WithReadCoalescing(), WithCapacity(4)},
			{WithCapacity(4), WithDialect(DialectCurator)},
		} {
			_, err := newRWLock(s.conn(), dir, opts...)
			assert.ErrorIs(t, err, ErrInvalidArgument)
		}
		plain, four := newLock(t, s.conn()), newLock(t, s.conn(), WithCapacity(4))
		for _, tc := range []struct {
			l *RWLock
			w int64
		}{{plain, 1}, {four, 0}, {four, 5}, {four, -1}, {&RWLock{}, 1}} {
			_, err := tc.l.Acquire(ctx, tc.w)
			assert.ErrorIs(t, err, ErrInvalidArgument, "weight %d", tc.w)
			_, err = tc.l.TryAcquire(ctx, tc.w)
			assert.ErrorIs(t, err, ErrInvalidArgument, "weight %d", tc.w)
		}
		_, err := LockAll(ctx, Request{Lock: plain, Mode: Read, Weight: 1})
		assert.ErrorIs(t, err, ErrInvalidArgument)
		_, err = LockAll(ctx, Request{Lock: four, Mode: Read, Weight: 5})
		assert.ErrorIs(t, err, ErrInvalidArgument)

		g, err := four.Lock(ctx)
		require.NoError(t, err)
		_, err = g.Downgrade(ctx)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		require.NoError(t, g.Release(ctx))

		one, err := four.Acquire(ctx, 1)
		require.NoError(t, err)
		_, err = four.Acquire(ContextWithGrant(ctx, one), 2)
		assert.ErrorIs(t, err, ErrUpgrade)
		inner, err := four.Acquire(ContextWithGrant(ctx, one), 1)
		require.NoError(t, err)
		require.NoError(t, inner.Release(ctx))
		require.NoError(t, one.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// LockAll takes weighted permits with plain locks in one multi, with one
// token.
func TestPermitsInASet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		four := newLock(t, c, WithCapacity(4))
		other, err := newRWLock(c, dir2)
		require.NoError(t, err)
		gs, err := LockAll(ctx, Request{Lock: four, Mode: Read, Weight: 3}, Request{Lock: other, Mode: Write})
		require.NoError(t, err)
		assert.Equal(t, gs[0].Token(), gs[1].Token())
		assert.Equal(t, Read, gs[0].Mode())
		assert.True(t, strings.Contains(s.lockNodes(dir)[0], "-sem-3of4-"))
		one, err := four.TryRLock(ctx) // 3+1 fits
		require.NoError(t, err)
		_, err = four.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrWouldBlock)
		require.NoError(t, ReleaseAll(ctx, append(gs, one)...))
		other.background.Wait()
	})
}

// checkRule checks the rule at the grant of the node at p (see
// capacity.go): the weights of the nodes before it on the server, held or
// waiting, plus its own, fit in its capacity. Nodes with its guid are left
// out: they are its process's leftovers of a lost create, on their way out,
// which the lock leaves out too (see dropTwins). A node gone already is
// not checked.
func (s *fakeServer) checkRule(p string) string {
	dir, name := path.Split(p)
	self, ok := lockname.Parse(name)
	if !ok || self.Capacity == 0 {
		return fmt.Sprintf("granted %s, which is not a bounded node", p)
	}
	nodes := s.lockNodes(strings.TrimSuffix(dir, "/"))
	if !slices.Contains(nodes, name) {
		return ""
	}
	guid, _ := lockname.GUID(name)
	sum := self.Weight
	var ahead []string
	for _, other := range nodes {
		n, ok := lockname.Parse(other)
		if g, _ := lockname.GUID(other); !ok || g == guid || !lockname.Precedes(n.Seq, self.Seq) {
			continue
		}
		sum += n.Weight
		ahead = append(ahead, n.Bare())
	}
	if sum > self.Capacity {
		return fmt.Sprintf("granted %s, though the nodes before it, %v, leave less than its weight (capacity %d)",
			self.Bare(), ahead, self.Capacity)
	}
	return ""
}

// A permit is a grant like any other: it has a token, revocation reaches
// its holders, and its hold limit ends it. (Guarded writes: see
// TestPermitsLargeRequestHoldsBackSmall in integration.)
func TestPermitIsAGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		a, b := newLock(t, s.conn(), WithCapacity(3)), newLock(t, s.conn(), WithCapacity(3), WithMaxHold(2*time.Second))
		g1, err := a.Acquire(ctx, 2)
		require.NoError(t, err)
		g2, err := b.Acquire(ctx, 1)
		require.NoError(t, err)
		assert.NotZero(t, g1.Token())
		assert.Less(t, g1.Token(), g2.Token())

		r1, r2 := g1.Revoked(), g2.Revoked()
		synctest.Wait()
		require.NoError(t, newLock(t, s.conn(), WithCapacity(3)).Revoke(ctx, "stop"))
		synctest.Wait()
		assert.True(t, isClosed(r1))
		assert.True(t, isClosed(r2))

		w := start(ctx, func(ctx context.Context) (*Grant, error) { return a.Acquire(ctx, 2) })
		synctest.Wait()
		pending(t, w)
		time.Sleep(3 * time.Second) // past g2's hold limit
		synctest.Wait()
		assert.ErrorIs(t, g2.Err(), ErrHoldLimit)
		require.NoError(t, g1.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}
