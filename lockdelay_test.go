package rwlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
)

// A leader Proclaims, then its session expires (it was paused or cut right
// after), and the successor's read of the node comes after the expiry (its
// read was delayed: a longer session, a pause, a lagging server). The data
// change alone is no release's mark: the successor waits the delay.
func TestLockDelayProclaimThenLateExpiryIsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl, cs := s.conn(), s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		leader, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		var proclaimed atomic.Bool
		var lossAt time.Time
		cs.setBefore(func(op, p string) error {
			if proclaimed.Load() && p == leader.Node() && lossAt.IsZero() {
				cl.serverExpire() // the leader's session ends before the successor's read arrives
				lossAt = time.Now()
			}
			return nil
		})
		type res struct {
			at  time.Time
			err error
		}
		got := make(chan res, 1)
		go func() {
			g, err := newElectionOn(t, cs, WithLockDelay(d)).Campaign(ctx, []byte("b"))
			at := time.Now()
			if err == nil {
				err = g.Release(ctx) // before the test ends, as the bubble wants
			}
			got <- res{at, err}
		}()
		synctest.Wait() // the successor watches the leader
		proclaimed.Store(true)
		require.NoError(t, el.Proclaim(ctx, []byte("a2")))
		r := <-got
		require.NoError(t, r.err)
		require.False(t, lossAt.IsZero())
		require.GreaterOrEqual(t, r.at.Sub(lossAt), d, "the successor led %v after the leader's unclean loss; the lock-delay is %v", r.at.Sub(lossAt), d)
		settle(cl, el)
	})
}

// The same through a reconnection. The successor's read after the Proclaim
// is lost with its connection; the leader's session expires while the
// successor is away, whose session outlives it (a longer timeout). Its
// listing after the reconnection lacks the leader's node, whose last event
// was a data change. That counts as a loss too.
func TestLockDelayProclaimThenExpiryAcrossReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl, cs := s.conn(), s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		leader, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		var proclaimed, cut atomic.Bool
		lossAt := make(chan time.Time, 1)
		cs.setBefore(func(op, p string) error {
			if proclaimed.Load() && p == leader.Node() && op == "get" && cut.CompareAndSwap(false, true) {
				cs.disconnect()
				go func() {
					time.Sleep(time.Second)
					cl.serverExpire()
					lossAt <- time.Now()
					time.Sleep(time.Second)
					cs.reconnect()
				}()
				return zk.ErrConnectionClosed
			}
			return nil
		})
		type res struct {
			at  time.Time
			err error
		}
		got := make(chan res, 1)
		go func() {
			g, err := newElectionOn(t, cs, WithLockDelay(d)).Campaign(ctx, []byte("b"))
			at := time.Now()
			if err == nil {
				err = g.Release(ctx) // before the test ends, as the bubble wants
			}
			got <- res{at, err}
		}()
		synctest.Wait()
		proclaimed.Store(true)
		require.NoError(t, el.Proclaim(ctx, []byte("a2")))
		r := <-got
		require.NoError(t, r.err)
		loss := <-lossAt
		require.GreaterOrEqual(t, r.at.Sub(loss), d, "the successor led %v after the leader's unclean loss; the lock-delay is %v", r.at.Sub(loss), d)
		settle(cl, el)
	})
}

// The same expiry without a Proclaim costs the full delay.
func TestLockDelayExpiryWithoutProclaimWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl, cs := s.conn(), s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		_, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		got := successorLeads(t, ctx, cs, d)
		synctest.Wait()
		cl.serverExpire()
		loss := time.Now()
		require.GreaterOrEqual(t, (<-got).Sub(loss), d)
		settle(cl, el)
	})
}

// A Proclaim's change and the leader's later deletion can reach the
// successor's wait together after its reconnection: the change read just
// before the cut, the deletion replayed as go-zookeeper sets its watches
// again. They did not come on one connection, so they count as a loss.
func TestLockDelayChangeAndDeletionAcrossReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl, cs := s.conn(), s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		_, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		got := successorLeads(t, ctx, cs, d)
		synctest.Wait() // the successor watches the leader
		cs.disconnect()
		require.NoError(t, el.Proclaim(ctx, []byte("a2")))
		cl.serverExpire()
		loss := time.Now()
		cs.reconnect()
		require.GreaterOrEqual(t, (<-got).Sub(loss), d)
		settle(cl, el)
	})
}

// A clean Resign after a Proclaim hands over at once: the successor reads
// the node again after the Proclaim, and the Resign's mark and deletion
// come together.
func TestLockDelayProclaimThenResignHandsOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl, cs := s.conn(), s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		leader, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		got := successorLeads(t, ctx, cs, d)
		synctest.Wait() // the successor watches the leader
		require.NoError(t, el.Proclaim(ctx, []byte("a2")))
		synctest.Wait() // the successor reads the node again
		require.NoError(t, leader.Release(ctx))
		resigned := time.Now()
		require.Equal(t, resigned, <-got)
		settle(cl, el)
	})
}

// A waiter whose session expired while cut off queues again with a new
// node. What went ahead of its old node meanwhile, nothing told: the
// leader here expired too. So the new node waits the delay from the
// requeue, though it finds the queue empty.
func TestLockDelayQueueAgainAfterExpiryWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl, cs := s.conn(), s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		_, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		got := successorLeads(t, ctx, cs, d)
		synctest.Wait() // the successor watches the leader
		cs.disconnect()
		cl.serverExpire()
		cs.serverExpire()
		back := time.Now()
		cs.reconnect()
		require.GreaterOrEqual(t, (<-got).Sub(back), d)
		settle(cl, el)
	})
}

// successorLeads campaigns on c with the delay d in the background. It
// sends the time the campaign won, and resigns before the test ends, as the
// bubble wants.
func successorLeads(t *testing.T, ctx context.Context, c *fakeConn, d time.Duration) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		g, err := newElectionOn(t, c, WithLockDelay(d)).Campaign(ctx, []byte("b"))
		require.NoError(t, err)
		at := time.Now()
		require.NoError(t, g.Release(ctx))
		got <- at
	}()
	return got
}

// settle closes c and waits for e's deletions in the background, which
// retry until they see the connection closed: a bubble must end with none
// left. The close starts some: its holds end.
func settle(c *fakeConn, e *Election) {
	c.close()
	synctest.Wait()
	e.l.background.Wait()
}

// A reader of an election's path behind the leader, both with the delay:
// the leader's clean Resign lets it in at once.
func TestLockDelayReaderBehindLeaderCleanResign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const d = time.Minute
		s := newFakeServer()
		cl := s.conn()
		el := newElectionOn(t, cl, WithLockDelay(d))
		_, err := el.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		r := newLock(t, s.conn(), WithLockDelay(d))
		next := start(ctx, r.RLock)
		synctest.Wait()
		pending(t, next)
		require.NoError(t, el.Proclaim(ctx, []byte("a2")))
		synctest.Wait()
		pending(t, next)
		require.NoError(t, el.Resign(ctx))
		resigned := time.Now()
		res := <-next
		require.NoError(t, res.err)
		require.Equal(t, resigned, time.Now(), "the reader waited after a clean Resign")
		require.NoError(t, res.g.Release(ctx))
		settle(cl, el)
	})
}
