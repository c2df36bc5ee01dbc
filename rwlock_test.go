package rwlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	dir  = "/locks/x"
	dir2 = "/locks/y" // a second lock, for sets
)

func newLock(t *testing.T, c *fakeConn, opts ...Option) *RWLock {
	t.Helper()
	l, err := newRWLock(c, dir, opts...)
	require.NoError(t, err)
	t.Cleanup(l.background.Wait)
	t.Cleanup(c.close) // ends the watches still set, as closing a *zk.Conn does
	return l
}

// start runs an acquisition on its own goroutine; the channel gets its result.
func start(ctx context.Context, acquire func(context.Context) (*Grant, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		g, err := acquire(ctx)
		ch <- result{g, err}
	}()
	return ch
}

type result struct {
	g   *Grant
	err error
}

// pending asserts that an acquisition has not returned (call after synctest.Wait).
func pending(t *testing.T, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("acquisition returned early: %v, %v", r.g, r.err)
	default:
	}
}

func granted(t *testing.T, ch <-chan result) *Grant {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.g
	default:
		t.Fatal("acquisition still waiting")
		return nil
	}
}

func TestUncontendedCostsThreeRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		g, err := l.Lock(t.Context()) // first: creates /locks and /locks/x too
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))

		for _, acquire := range []func(context.Context) (*Grant, error){l.Lock, l.RLock, l.TryLock, l.TryRLock} {
			before, first := c.calls.Load(), c.appliedCount()
			g, err := acquire(t.Context())
			require.NoError(t, err)
			require.NoError(t, g.Release(t.Context()))
			assert.Equal(t, int64(3+c.overtaken(first)), c.calls.Load()-before, "create, list, delete")
		}
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestSharedAndExclusive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		a, b := newLock(t, s.conn()), newLock(t, s.conn())
		ctx := t.Context()

		r1, err := a.RLock(ctx)
		require.NoError(t, err)
		r2, err := b.RLock(ctx)
		require.NoError(t, err, "readers share")

		w := start(ctx, a.Lock)
		synctest.Wait()
		pending(t, w)

		r3 := start(ctx, b.RLock)
		synctest.Wait()
		pending(t, r3) // a waiting writer blocks later readers

		require.NoError(t, r1.Release(ctx))
		synctest.Wait()
		pending(t, w)
		require.NoError(t, r2.Release(ctx))
		synctest.Wait()
		wg := granted(t, w)
		pending(t, r3)

		_, err = b.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrWouldBlock)
		require.NoError(t, wg.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, r3).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Watches stay linear in the queue: a reader watches the nearest writer
// before it, a writer its predecessor or, behind readers, the run of them
// and the writer before them (see runAhead); so each reader is watched by
// one writer, and each writer by the readers after it and the next writer.
func TestOneWatchPerWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		var waits []<-chan result
		var conns []*fakeConn
		for i := range 7 {
			c := s.conn()
			l := newLock(t, c)
			acquire := l.Lock
			if i%2 == 0 || i == 5 {
				acquire = l.RLock // r w r w r r r: the last three share a writer
			}
			waits = append(waits, start(ctx, acquire))
			conns = append(conns, c)
			synctest.Wait()
		}
		byWatchers := map[int]int{}
		for _, name := range s.lockNodes(dir) {
			byWatchers[s.othersWatching(dir+"/"+name)]++
		}
		// H r w r w r r r: each reader is watched by the writer after it,
		// each writer by the readers after it and the next writer, which
		// watches its run ahead (see runAhead).
		assert.Equal(t, map[int]int{0: 3, 1: 2, 2: 2, 3: 1}, byWatchers)
		for i, c := range conns {
			want := 1 // a reader watches the nearest writer before it
			if i == 1 || i == 3 {
				want = 2 // a writer, the writer before it and the reader between
			}
			assert.Len(t, s.othersWatchedBy(c), want, "waiter %d", i)
		}

		require.NoError(t, holder.Release(ctx))
		for _, w := range waits {
			synctest.Wait()
			var g *Grant
			select {
			case r := <-w:
				require.NoError(t, r.err)
				g = r.g
			case <-time.After(time.Second):
				t.Fatal("no progress")
			}
			require.NoError(t, g.Release(ctx))
		}
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Readers released together by one writer need no second listing: the
// snapshot taken after their create proves nothing else can block them.
func TestWakeWithoutRelist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		c := s.conn()
		l := newLock(t, c)
		before, first := c.calls.Load(), c.appliedCount()
		r := start(ctx, l.RLock)
		synctest.Wait()
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		g := granted(t, r)
		assert.Equal(t, int64(5+c.overtaken(first)), c.calls.Load()-before,
			"the DELETE check (first acquisition of a lock), create, list, watch our own node, watch the writer")
		time.Sleep(fleetInterval)
		synctest.Wait()
		assert.Equal(t, int64(6+c.overtaken(first)), c.calls.Load()-before,
			"and the holder's check for peers, one interval after the listing it was granted on (fleet.go)")
		require.NoError(t, g.Release(ctx))
	})
}

func TestPredecessorGoneBeforeWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		owner := s.conn()
		w, err := newLock(t, owner).Lock(ctx)
		require.NoError(t, err)

		c := s.conn()
		c.setBefore(func(op, p string) error {
			if op == "get" && p == w.Node() {
				assert.NoError(t, owner.Delete(p, -1)) // between our list and our watch
			}
			return nil
		})
		g, err := newLock(t, c).Lock(ctx)
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, int64(6+c.overtaken(0)), c.calls.Load(),
			"the DELETE check, create, list, watch our own node, the writer's child watch (see wait), get the writer: "+
				"NoNode is the way clear")
		time.Sleep(fleetInterval)
		synctest.Wait()
		assert.Equal(t, int64(7+c.overtaken(0)), c.calls.Load(),
			"and the holder's check for peers, one interval after the listing it was granted on (fleet.go)")
		require.NoError(t, g.Release(ctx))
		assert.NoError(t, w.Release(ctx))
	})
}

func TestOwnNodeMissingIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		other := s.conn()
		c := s.conn()
		deleteOwnNodeBeforeListing(c, s, other, dir)
		_, err = newLock(t, c).Lock(ctx)
		assert.ErrorIs(t, err, ErrLost, "never 'we are first'")
		assert.Equal(t, []string{w.Node()[len(dir)+1:]}, s.lockNodes(dir))

		// A waiter whose node is deleted notices at its next listing: here
		// when the node it watches goes and another candidate remains.
		c.setBefore(nil)
		ctx2, cancel2 := context.WithCancel(ctx)
		r2 := start(ctx2, newLock(t, s.conn()).Lock)
		synctest.Wait()
		r3 := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		q, err := newLock(t, other).Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 3)
		require.NoError(t, other.Delete(q[2].Node, -1))
		cancel2()
		synctest.Wait()
		assert.ErrorIs(t, (<-r2).err, context.Canceled)
		res := <-r3
		assert.ErrorIs(t, res.err, ErrLost)
		require.NoError(t, w.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestCreateResponseLost(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				l := newLock(t, c)
				var lost atomic.Bool
				c.setBefore(func(op, p string) error {
					if op == "create" && p != "/locks" && p != dir && !applied && !lost.Swap(true) {
						return zk.ErrConnectionClosed
					}
					return nil
				})
				c.setAfter(func(op, p string, err error) error {
					if op == "create" && err == nil && p != "/locks" && p != dir && applied && !lost.Swap(true) {
						return zk.ErrConnectionClosed
					}
					return err
				})
				g, err := l.Lock(t.Context())
				require.NoError(t, err)
				assert.Equal(t, []string{g.Node()[len(dir)+1:]}, s.lockNodes(dir), "exactly one node, found by its guid")
				require.NoError(t, g.Release(t.Context()))
				assert.Empty(t, s.lockNodes(dir))
			})
		})
	}
}

func TestCancelWhileWaitingLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		w, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		r := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		require.Len(t, s.lockNodes(dir), 2)
		cancel()
		synctest.Wait()
		res := <-r
		assert.ErrorIs(t, res.err, context.Canceled)
		assert.Equal(t, []string{w.Node()[len(dir)+1:]}, s.lockNodes(dir))

		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = newLock(t, s.conn()).Lock(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = newLock(t, s.conn()).TryLock(t.Context())
		assert.ErrorIs(t, err, ErrWouldBlock)
		assert.Len(t, s.lockNodes(dir), 1, "TryLock leaves nothing behind")
		require.NoError(t, w.Release(t.Context()))
	})
}

// A grant that arrives as the context ends is given back: a cancelled call
// returns the context's error and leaves no node.
func TestCancelRacingGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		w, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		c := s.conn()
		released := make(chan struct{})
		var once sync.Once
		c.setAfter(func(op, p string, err error) error {
			if op == "get" {
				once.Do(func() {
					cancel() // the watch is set, we are cancelled, and the holder leaves
					assert.NoError(t, w.Release(context.Background()))
					close(released)
				})
			}
			return err
		})
		_, err = newLock(t, c).Lock(ctx)
		assert.ErrorIs(t, err, context.Canceled)
		<-released // Lock may return on the cancel while the holder is still leaving
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestCancelDuringCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))

		ctx, cancel := context.WithCancel(t.Context())
		release := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "create" {
				cancel()
				<-release // the create is in flight when the caller gives up
			}
			return nil
		})
		_, err = l.Lock(ctx)
		assert.ErrorIs(t, err, context.Canceled)
		c.setBefore(nil)
		close(release)
		l.background.Wait()
		synctest.Wait()
		assert.Empty(t, s.lockNodes(dir), "the late create's node is deleted")
	})
}

func TestSessionExpiresWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		c := s.conn()
		r := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		c.expire()
		synctest.Wait()
		pending(t, r) // queued again, under the new session
		nodes := s.lockNodes(dir)
		require.Len(t, nodes, 2)
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		g := granted(t, r)
		require.NoError(t, g.Release(ctx))
	})
}

func TestForeignChildrenIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		require.NoError(t, g.Release(t.Context()))
		for _, name := range []string{"foo", "read-abc", "write-", "lock-0000000000", "x__lock__0000000001"} {
			_, err := c.Create(dir+"/"+name, nil, 0, nil)
			require.NoError(t, err)
		}
		g, err = l.Lock(t.Context())
		require.NoError(t, err)
		r, err := l.TryRLock(t.Context())
		assert.ErrorIs(t, err, ErrWouldBlock)
		assert.Nil(t, r)
		require.NoError(t, g.Release(t.Context()))
	})
}

// ZooKeeper 3.8's counter sticks at 2147483647: every node created past
// it gets that number again. An acquisition that gets it, or sees it
// shared, fails and leaves no node; the grants before it are unharmed.
func TestSequenceCounterAtItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.conn().Create("/locks", nil, 0, nil)
		s.setCounter(dir, 2147483645)
		ctx := t.Context()
		w1, err := newLock(t, s.conn()).Lock(ctx) // 2147483645
		require.NoError(t, err)
		r2 := start(ctx, newLock(t, s.conn()).RLock) // 2147483646, the last usable number
		synctest.Wait()
		for _, acquire := range []func(*RWLock) func(context.Context) (*Grant, error){
			func(l *RWLock) func(context.Context) (*Grant, error) { return l.Lock },
			func(l *RWLock) func(context.Context) (*Grant, error) { return l.TryRLock },
			func(l *RWLock) func(context.Context) (*Grant, error) { return l.RLock },
		} {
			_, err := acquire(newLock(t, s.conn()))(ctx) // 2147483647, again and again
			assert.ErrorIs(t, err, ErrSequenceExhausted)
			assert.ErrorContains(t, err, "fresh lock directory")
		}
		assert.Len(t, s.lockNodes(dir), 2, "the failed acquisitions left nothing")
		pending(t, r2)
		require.NoError(t, w1.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, r2).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Serial-number arithmetic would let a grant held across 2^31 later
// creates be overtaken; plain integers do not.
func TestAGrantHeldAcrossTheCounterIsNotOvertaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w1, err := newLock(t, s.conn()).Lock(ctx) // 0
		require.NoError(t, err)
		s.mu.Lock()
		s.nodes[dir].counter = 1 << 30 * 3 / 2 // more than 2^31 / 2 later
		s.mu.Unlock()
		w2 := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		pending(t, w2)
		require.NoError(t, w1.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w2).Release(ctx))
	})
}

func TestClosedConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		w, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		c := s.conn()
		r := start(ctx, newLock(t, c).Lock)
		synctest.Wait()
		c.close()
		synctest.Wait()
		res := <-r
		assert.ErrorIs(t, res.err, zk.ErrClosing)

		_, err = newLock(t, c).Lock(ctx)
		assert.ErrorIs(t, err, zk.ErrConnectionClosed)
		require.NoError(t, w.Release(ctx))
	})
}

func TestNewRejectsBadInput(t *testing.T) {
	_, err := New(nil, "/a")
	assert.ErrorIs(t, err, ErrInvalidArgument)
	c := newFakeServer().conn()
	_, err = newRWLock(c, "a/b")
	assert.ErrorIs(t, err, ErrInvalidPath)
	for _, opt := range []Option{WithACL(nil), WithSessionTimeout(0), WithCleanupTimeout(-1)} {
		_, err = newRWLock(c, "/a", opt)
		assert.ErrorIs(t, err, ErrInvalidArgument)
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		g, err := newLock(t, s.conn()).RLock(t.Context())
		require.NoError(t, err)
		assert.NoError(t, g.Err())
		require.NoError(t, g.Release(t.Context()))
		require.NoError(t, g.Release(t.Context()))
		assert.ErrorIs(t, g.Err(), ErrReleased)
		<-g.Done()
	})
}

func TestReleaseAfterConnectionLossFinishesInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		c.setGranted(10 * time.Second) // held through a short disconnection
		l := newLock(t, c)
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		c.disconnect()
		err = g.Release(t.Context())
		assert.ErrorIs(t, err, zk.ErrNoServer)
		time.Sleep(3 * time.Second)
		assert.Len(t, s.lockNodes(dir), 1, "still there while disconnected")
		c.reconnect()
		l.background.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		a, err := newRWLock(s.conn(), dir, WithOwner("alice"))
		require.NoError(t, err)
		b, err := newRWLock(s.conn(), dir, WithOwner("bob"))
		require.NoError(t, err)
		r1, err := a.RLock(ctx)
		require.NoError(t, err)
		r2, err := b.RLock(ctx)
		require.NoError(t, err)
		w := start(ctx, a.Lock)
		synctest.Wait()
		r3 := start(ctx, b.RLock)
		synctest.Wait()

		q, err := a.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 4)
		type row struct {
			mode  Mode
			owner string
			held  bool
		}
		var got []row
		for i, e := range q {
			got = append(got, row{e.Mode, e.Owner, e.Held})
			assert.Equal(t, int32(i), e.Seq)
			assert.NotZero(t, e.SessionID)
		}
		assert.Equal(t, []row{{Read, "alice", true}, {Read, "bob", true}, {Write, "alice", false}, {Read, "bob", false}}, got)
		assert.Equal(t, r1.Node(), q[0].Node)

		require.NoError(t, r1.Release(ctx))
		require.NoError(t, r2.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, r3).Release(ctx))
		q, err = a.Queue(ctx)
		require.NoError(t, err)
		assert.Empty(t, q)
	})
}

func TestErrorsNameTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		c.setBefore(func(op, p string) error {
			if op == "create" {
				return zk.ErrNoAuth
			}
			return nil
		})
		_, err := newLock(t, c).RLock(t.Context())
		require.ErrorIs(t, err, zk.ErrNoAuth)
		assert.Contains(t, err.Error(), "rwlock: rlock /locks/x")
		assert.False(t, errors.Is(err, ErrLost))
	})
}

// A writer that waited marks its node held once granted, so the writer
// behind it knows, when the node goes, that nothing before it is left: a
// queue drains without listing the whole queue at every handoff. A grant
// released before its first check for peers lists nothing either.
func TestHeldMarkSparesListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		var conns []*fakeConn
		var waits []<-chan result
		for range 4 {
			c := s.conn()
			l := newLock(t, c)
			waits = append(waits, start(ctx, l.Lock))
			conns = append(conns, c)
			synctest.Wait()
		}
		listed := func() (n int64) {
			for _, c := range conns {
				n += c.lists.Load()
			}
			return n
		}
		before := listed()
		require.NoError(t, holder.Release(ctx))
		for _, w := range waits {
			synctest.Wait()
			require.NoError(t, granted(t, w).Release(ctx))
		}
		assert.Equal(t, before, listed(), "no listing during the drain, nor for peers (fleet.go)")
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A node that goes without a held mark (a waiter gave up) proves nothing
// about the nodes before it: the writer behind it lists again.
func TestUnmarkedDeletionMeansListAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		quitter, cancel := context.WithCancel(ctx)
		q := start(quitter, newLock(t, s.conn()).Lock)
		synctest.Wait()
		c := s.conn()
		l := newLock(t, c)
		w := start(ctx, l.Lock)
		synctest.Wait()
		lists := c.lists.Load()
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, (<-q).err, context.Canceled)
		pending(t, w) // the holder is still there
		assert.Equal(t, lists+1, c.lists.Load())
		require.NoError(t, holder.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
	})
}

// The first listing goes out behind the create without waiting for its
// answer (listBehind); here it overtakes the create. It lacks our node,
// which must not be taken for a deleted node: the acquisition lists again.
func TestListingThatOvertakesTheCreate(t *testing.T) {
	for _, holder := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder=%v", holder), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				ctx := t.Context()
				var h *Grant
				if holder {
					var err error
					h, err = newLock(t, s.conn()).Lock(ctx)
					require.NoError(t, err)
				}
				c := s.conn()
				l := newLock(t, c)
				warm, err := l.TryRLock(ctx) // the directory and the DELETE check
				if holder {
					require.ErrorIs(t, err, ErrWouldBlock)
				} else {
					require.NoError(t, err)
					require.NoError(t, warm.Release(ctx))
				}

				listed := make(chan struct{})
				var order []string
				var mu sync.Mutex
				c.setBefore(func(op, p string) error {
					if op == "create" {
						<-listed // the listing reaches the server first
					}
					return nil
				})
				c.setAfter(func(op, p string, err error) error {
					mu.Lock()
					order = append(order, op)
					first := len(order) == 1
					mu.Unlock()
					if op == "children" && first {
						close(listed)
					}
					return err
				})
				w := start(ctx, l.Lock)
				synctest.Wait()
				if holder {
					pending(t, w)
					require.NoError(t, h.Release(ctx))
					synctest.Wait()
				}
				g := granted(t, w)
				mu.Lock()
				assert.Equal(t, []string{"children", "create", "children"}, order[:3], "the listing overtook the create, and is made again")
				mu.Unlock()
				c.setBefore(nil)
				c.setAfter(nil)
				require.NoError(t, g.Release(ctx))
				assert.Empty(t, s.lockNodes(dir))
			})
		})
	}
}

// In the usual order the listing behind the create shows our node: one
// round trip, and the acquisition says so.
func TestListingBehindTheCreateTakesOneRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))

		created := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "children" {
				<-created // the listing reaches the server behind the create
			}
			return nil
		})
		c.setAfter(func(op, p string, err error) error {
			if op == "create" {
				close(created)
			}
			return err
		})
		a := newAcquisition(Request{Lock: l, Mode: Write})
		holds, err := a.run(ctx)
		require.NoError(t, err)
		assert.True(t, a.members[0].oneTrip)
		g = holds[0].grant(Write)
		c.setBefore(nil)
		c.setAfter(nil)
		require.NoError(t, g.Release(ctx))
	})
}

// A message says "rwlock: " once, however deep the errors it wraps.
func TestErrorsSayRwlockOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		_, err = newLock(t, s.conn()).TryLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock)
		assert.Equal(t, "rwlock: trylock "+dir+": would block", err.Error())
		require.NoError(t, g.Release(ctx))
		_, err = g.Downgrade(ctx)
		require.ErrorIs(t, err, ErrReleased)
		assert.Equal(t, 1, strings.Count(err.Error(), "rwlock: "), err.Error())
	})
}
