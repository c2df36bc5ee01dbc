package rwlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// lockSet takes a set of three locks on c: two written, one read.
func lockSet(t *testing.T, c *fakeConn) []*Grant {
	t.Helper()
	reqs := []Request{{Mode: Write}, {Mode: Read}, {Mode: Write}}
	for i, p := range []string{dir + "/a", dir + "/b", dir + "/c"} {
		l, err := newRWLock(c, p)
		require.NoError(t, err)
		t.Cleanup(l.background.Wait)
		reqs[i].Lock = l
	}
	t.Cleanup(c.close)
	grants, err := LockAll(t.Context(), reqs...)
	require.NoError(t, err)
	return grants
}

// setNodes counts the nodes left in the set's directories.
func setNodes(s *fakeServer) int {
	return len(s.lockNodes(dir+"/a")) + len(s.lockNodes(dir+"/b")) + len(s.lockNodes(dir+"/c"))
}

// One transaction deletes the set.
func TestReleaseAllOneTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		var ops []string
		c.setBefore(func(op, _ string) error {
			ops = append(ops, op)
			return nil
		})
		require.NoError(t, ReleaseAll(t.Context(), grants...))
		assert.Equal(t, []string{"multi"}, ops)
		assert.Zero(t, setNodes(s))
		for _, g := range grants {
			assert.ErrorIs(t, g.Err(), ErrReleased)
		}
		require.NoError(t, ReleaseAll(t.Context(), grants...), "released already")
	})
}

// A transaction the server refuses changed nothing: each grant is released
// alone, and only a refused one stays held.
func TestReleaseAllRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		refused := grants[1].Node()
		c.setBefore(func(op, p string) error {
			if op == "multi" || p == refused {
				return zk.ErrNoAuth // an ACL changed since the set was taken
			}
			return nil
		})
		err := ReleaseAll(t.Context(), grants...)
		require.ErrorIs(t, err, zk.ErrNoAuth)
		assert.Equal(t, 1, setNodes(s), "only the refused grant's node stays")
		assert.NoError(t, grants[1].Err(), "and its grant with it")
		assert.ErrorIs(t, grants[0].Err(), ErrReleased)
		assert.ErrorIs(t, grants[2].Err(), ErrReleased)
		c.setBefore(nil)
		require.NoError(t, ReleaseAll(t.Context(), grants...))
		assert.Zero(t, setNodes(s))
	})
}

// A transaction whose answer is lost, or that never reached the server:
// the grants end, ReleaseAll says the deletion goes on, and no node
// outlives it.
func TestReleaseAllLostAnswer(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(map[bool]string{true: "applied", false: "not sent"}[applied], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				grants := lockSet(t, c)
				if applied {
					c.setAfter(func(op, _ string, err error) error {
						if op == "multi" {
							return zk.ErrConnectionClosed
						}
						return err
					})
				} else {
					c.setBefore(func(op, _ string) error {
						if op == "multi" {
							return zk.ErrConnectionClosed
						}
						return nil
					})
				}
				err := ReleaseAll(t.Context(), grants...)
				require.ErrorIs(t, err, errFinishing)
				for _, g := range grants {
					assert.ErrorIs(t, g.Err(), ErrReleased)
				}
				synctest.Wait()
				for _, g := range grants {
					g.h.l.background.Wait()
				}
				assert.Zero(t, setNodes(s))
			})
		})
	}
}

// Grants that are not the owners of held nodes are released as Release
// releases them: a downgraded write grant (its read grant is released), a
// nested grant, a lost grant, a grant of another connection, nil, and a
// grant named twice.
func TestReleaseAllMixed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		ctx := t.Context()
		read, err := grants[0].Downgrade(ctx)
		require.NoError(t, err)
		nested, err := grants[1].h.l.RLock(ContextWithGrant(ctx, grants[1]))
		require.NoError(t, err)
		require.NoError(t, c.Delete(grants[2].Node(), -1)) // by hand: grants[2] is lost
		synctest.Wait()
		other := newLock(t, s.conn())
		alone, err := other.Lock(ctx)
		require.NoError(t, err)

		require.NoError(t, ReleaseAll(ctx, grants[0], nil, nested, grants[1], grants[2], alone, grants[1]))
		assert.Zero(t, setNodes(s))
		assert.Empty(t, s.lockNodes(dir))
		assert.ErrorIs(t, read.Err(), ErrReleased)
		assert.ErrorIs(t, nested.Err(), ErrReleased)
		assert.ErrorIs(t, grants[2].Err(), ErrLost)
	})
}

// A refusal is a refusal even if the context ends right after it came:
// every node still goes (each grant released alone), none is left to a
// background deletion that nobody started.
func TestReleaseAllRefusedAsTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		ctx := &endsUnseen{Context: t.Context()}
		c.setBefore(func(op, _ string) error {
			if op == "multi" {
				ctx.ended.Store(true)
				return zk.ErrNoNode // as if a node had gone since the check
			}
			return nil
		})
		ReleaseAll(ctx, grants...)
		synctest.Wait()
		for _, g := range grants {
			g.h.l.background.Wait()
		}
		require.Zero(t, setNodes(s))
	})
}

// endsUnseen is a context that ends between an answer and the caller's
// next look: Err reports it, while its Done channel, which the request
// waited on, has not been closed yet.
type endsUnseen struct {
	context.Context
	ended atomic.Bool
}

func (c *endsUnseen) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}

// ReleaseAll judges the grant that owns each node now: the read grant a
// Downgrade made of a write grant it is given. Its process paused across
// the read grant's hold-limit notice, that grant is lost to its limit. Its
// node goes at once all the same, as the holder released its only grant on
// it (see releasedLate).
func TestReleaseAllJudgesDowngradedGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		defer func(t func(*zkclient.Client, time.Duration, func()) *time.Timer) { holdTimer = t }(holdTimer)
		holdTimer = func(*zkclient.Client, time.Duration, func()) *time.Timer { return time.AfterFunc(time.Hour, func() {}) }
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second) // told 2s before the limit
		la, err := newRWLock(c, dir+"/a", WithMaxHold(limit))
		require.NoError(t, err)
		lb, err := newRWLock(c, dir+"/b")
		require.NoError(t, err)
		t.Cleanup(c.close)
		t.Cleanup(la.background.Wait)
		began := time.Now()
		ws, err := LockAll(t.Context(), Request{Lock: la, Mode: Write}, Request{Lock: lb, Mode: Write})
		require.NoError(t, err)
		ra, err := ws[0].Downgrade(t.Context())
		require.NoError(t, err)
		rb, err := ws[1].Downgrade(t.Context())
		require.NoError(t, err)

		time.Sleep(9 * time.Second) // the timer unheard
		require.NoError(t, ReleaseAll(t.Context(), ws...))
		require.ErrorIs(t, ra.Err(), ErrHoldLimit)
		require.ErrorIs(t, rb.Err(), ErrReleased)
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir+"/a"), "released: no head start to wait for")
		assert.Empty(t, s.lockNodes(dir+"/b"))
		assert.Less(t, time.Since(began), limit)
	})
}

// ReleaseAll marks held, as Release does, the node of a writer that waited
// (the waiter behind it learns from the mark that nothing before it is
// left), and no other: a reader's node is not proof that nothing before it
// is left.
func TestReleaseAllMarksWaitedWriters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		first, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		lw, err := newRWLock(c, dir)
		require.NoError(t, err)
		lr, err := newRWLock(c, dir+"-read")
		require.NoError(t, err)
		t.Cleanup(c.close)
		t.Cleanup(lw.background.Wait)
		set := make(chan []*Grant, 1)
		go func() {
			gs, err := LockAll(t.Context(), Request{Lock: lw, Mode: Write}, Request{Lock: lr, Mode: Read})
			assert.NoError(t, err)
			set <- gs
		}()
		synctest.Wait()
		require.NoError(t, first.Release(t.Context()))
		grants := <-set

		watcher := s.conn()
		t.Cleanup(watcher.close)
		events := make([]<-chan zk.Event, len(grants))
		for i, g := range grants {
			_, _, events[i], err = watcher.GetW(g.Node())
			require.NoError(t, err)
		}
		require.NoError(t, ReleaseAll(t.Context(), grants...))
		assert.Equal(t, zk.EventNodeDataChanged, (<-events[0]).Type, "the writer that waited: marked held")
		assert.Equal(t, zk.EventNodeDeleted, (<-events[1]).Type, "the reader: deleted, unmarked")
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A set whose context ends before the answer: ReleaseAll returns, the
// grants end, and whatever the answer (carried out, or refused as if a
// node had gone meanwhile), no node outlives it.
func TestReleaseAllContextEndsFirst(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(map[bool]string{false: "carried out", true: "refused"}[refused], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				grants := lockSet(t, c)
				ctx, cancel := context.WithCancel(t.Context())
				answer := make(chan struct{})
				c.setBefore(func(op, _ string) error {
					if op != "multi" {
						return nil
					}
					<-answer
					if refused {
						return zk.ErrNoNode
					}
					return nil
				})
				done := make(chan error, 1)
				go func() { done <- ReleaseAll(ctx, grants...) }()
				synctest.Wait()
				cancel()
				require.ErrorIs(t, <-done, errFinishing)
				for _, g := range grants {
					assert.ErrorIs(t, g.Err(), ErrReleased)
				}
				close(answer)
				synctest.Wait()
				for _, g := range grants {
					g.h.l.background.Wait()
				}
				require.Zero(t, setNodes(s))
			})
		})
	}
}
