package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// doneClosed reports whether g's Done channel is closed.
func doneClosed(g *Grant) bool {
	select {
	case <-g.Done():
		return true
	default:
		return false
	}
}

func TestLostWhenNodeDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		g, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		done := g.Done()
		synctest.Wait()
		assert.False(t, doneClosed(g))
		require.NoError(t, s.conn().Delete(g.Node(), -1))
		<-done
		assert.ErrorIs(t, g.Err(), ErrLost)
		assert.ErrorIs(t, g.Err(), errNodeDeleted)
		assert.NoError(t, g.Release(t.Context()))
		assert.ErrorIs(t, g.Err(), ErrLost, "Release does not hide the loss")
	})
}

func TestLostWhenSessionExpires(t *testing.T) {
	for _, mode := range []Mode{Read, Write} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				l := newLock(t, c)
				g, err := l.acquire(t.Context(), want{mode: mode, block: true})
				require.NoError(t, err)
				require.NoError(t, g.Err())
				synctest.Wait()
				c.expire()
				<-g.Done()
				assert.ErrorIs(t, g.Err(), ErrLost)
				assert.ErrorIs(t, g.Err(), zk.ErrSessionExpired)
				require.NoError(t, g.Release(t.Context()))
			})
		})
	}
}

// go-zookeeper replaces an expired session silently; a monitor started
// after that compares session ids.
func TestLostWhenSessionReplacedBeforeWatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		g, err := newLock(t, c).Lock(t.Context())
		require.NoError(t, err)
		c.expire()
		<-g.Done()
		assert.ErrorIs(t, g.Err(), ErrLost)
	})
}

// With or without WithSessionTimeout: a timeout given is only a bound, and
// the server may have granted less.
func TestDisconnectionWithUnknownTimeoutIsLoss(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithSessionTimeout(8 * time.Second)}} {
		synctest.Test(t, func(t *testing.T) {
			s := newFakeServer()
			c := s.conn()
			l := newLock(t, c, opts...)
			g, err := l.Lock(t.Context())
			require.NoError(t, err)
			start := time.Now()
			c.disconnect()
			<-g.Done()
			assert.LessOrEqual(t, time.Since(start), zkclient.UnknownTimeoutPoll)
			assert.ErrorIs(t, g.Err(), ErrLost)
			assert.ErrorIs(t, g.Err(), zkclient.ErrDisconnected)

			// The session lived on: the node is deleted once reconnected.
			time.Sleep(time.Second)
			assert.Len(t, s.lockNodes(dir), 1)
			c.reconnect()
			l.background.Wait()
			assert.Empty(t, s.lockNodes(dir))
		})
	}
}

// answeredSyncs records when the lease's keepalives were answered.
type answeredSyncs struct {
	mu sync.Mutex
	at []time.Time
}

func recordSyncs(c *fakeConn) *answeredSyncs {
	a := &answeredSyncs{}
	c.setAfter(func(op, p string, err error) error {
		if op == "sync" && err == nil {
			a.mu.Lock()
			a.at = append(a.at, time.Now())
			a.mu.Unlock()
		}
		return err
	})
	return a
}

func (a *answeredSyncs) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at)
}

func TestLeaseRidesOutASilentConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 8 * time.Second
		s := newFakeServer()
		c := s.conn()
		c.setGranted(timeout)
		g, err := newLock(t, c).Lock(t.Context())
		require.NoError(t, err)
		answered := recordSyncs(c)
		time.Sleep(timeout)
		assert.GreaterOrEqual(t, len(answered.times()), 15, "a keepalive every T/16 while held")
		assert.LessOrEqual(t, len(answered.times()), 16)

		c.disconnect() // no answers: a partition, a restart, an election
		time.Sleep(timeout / 2)
		c.reconnect()
		time.Sleep(time.Minute)
		assert.NoError(t, g.Err(), "a silence of T/2 is ridden out")
		require.NoError(t, g.Release(t.Context()))
	})
}

// The holder is told at lease end minus the head start, counted from the
// last keepalive the server answered, whatever go-zookeeper's connection
// state says: here it still says connected (a notification arrived just
// before a partition moved go-zookeeper's read deadline on), but nothing
// is answered any more.
func TestLeaseLapsesWhileGoZookeeperSaysConnected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 8 * time.Second
		s := newFakeServer()
		c := s.conn()
		c.setGranted(timeout)
		l := newLock(t, c)
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		answered := recordSyncs(c)
		time.Sleep(timeout / 2)
		require.NotEmpty(t, answered.times())

		partitioned := make(chan struct{})
		c.setBefore(func(op, p string) error {
			<-partitioned // sent, never answered
			return zk.ErrConnectionClosed
		})
		synctest.Wait() // a keepalive under way when the partition began has been answered
		last := answered.times()[len(answered.times())-1]
		<-g.Done()
		lost := time.Now()
		assert.Equal(t, zk.StateHasSession, c.State())
		assert.ErrorIs(t, g.Err(), ErrLost)
		var lapsed *zkclient.LeaseLapsedError
		assert.ErrorAs(t, g.Err(), &lapsed)
		// The last answered keepalive was sent at most T/16 before it was
		// answered, here at once; the server may expire the session T after
		// it was sent.
		assert.LessOrEqual(t, lost.Sub(last), timeout-zkclient.HeadStart(timeout))
		assert.Greater(t, lost.Sub(last), timeout-zkclient.HeadStart(timeout)-zkclient.RenewInterval(timeout))
		deadline, ok := g.Deadline()
		require.True(t, ok)
		assert.True(t, deadline.After(lost), "the holder has until Deadline to stop")
		assert.False(t, deadline.After(last.Add(timeout-zkclient.RelayAllowance(timeout))))
		close(partitioned)
		c.setBefore(nil)
		l.background.Wait()
		assert.Empty(t, s.lockNodes(dir), "the node of a session that may live on is deleted")
	})
}

// Err consults the clock itself: a process paused past its lease sees the
// loss at its first call after resuming, before the clock's timer could
// fire. (The timer is stopped here to stand for a process whose goroutines
// did not run.) So do Done, a nested Lock and WithWrite's context; and so
// does a lock judged by WithSessionTimeout's bound on a connection that
// does not tell the granted timeout, though go-zookeeper still says it has
// its session.
func TestFirstErrAfterAPauseSeesTheLoss(t *testing.T) {
	for _, told := range []bool{true, false} {
		for _, check := range []struct {
			name string
			lost func(g *Grant) bool
		}{
			{"Err", func(g *Grant) bool { return g.Err() != nil }},
			{"Done", func(g *Grant) bool { return doneClosed(g) }},
			{"nested Lock", func(g *Grant) bool {
				ctx := ContextWithGrant(context.Background(), g)
				n, err := g.h.l.Lock(ctx)
				if n != nil {
					n.Release(ctx)
				}
				return errors.Is(err, ErrLost)
			}},
			{"WithWrite's context", nil},
		} {
			name := check.name + "/granted"
			if !told {
				name = check.name + "/bound"
			}
			t.Run(name, func(t *testing.T) { pausedHolderSeesTheLoss(t, told, check.lost) })
		}
	}
}

// pausedHolderSeesTheLoss is a case of TestFirstErrAfterAPauseSeesTheLoss:
// told, the connection tells the granted timeout; else the lock is given
// it with WithSessionTimeout. lost is the first check (nil: WithWrite's
// context).
func pausedHolderSeesTheLoss(t *testing.T, told bool, lost func(g *Grant) bool) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 8 * time.Second
		s := newFakeServer()
		c := s.conn()
		var opts []Option
		if told {
			c.setGranted(timeout)
		} else {
			opts = append(opts, WithSessionTimeout(timeout))
		}
		l := newLock(t, c, opts...)
		// The process is stopped: nothing is sent, and the lease
		// clock's timer, should it fire, waits at Pause. Resumed,
		// the holder looks before anything else runs.
		pause := func() (resume func()) {
			c.setBefore(func(string, string) error { return zk.ErrNoServer })
			synctest.Wait()
			c.freeze()
			time.Sleep(timeout)
			return func() { c.setBefore(nil); c.thaw() }
		}
		if lost == nil {
			err := l.WithWrite(t.Context(), func(ctx context.Context) error {
				resume := pause()
				defer resume()
				assert.Error(t, ctx.Err(), "the first check after resuming")
				assert.ErrorIs(t, context.Cause(ctx), ErrLost)
				return nil
			})
			assert.ErrorIs(t, err, ErrLost)
			return
		}
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		resume := pause()
		assert.Equal(t, zk.StateHasSession, c.State())
		assert.True(t, lost(g), "the first check after resuming")
		resume()
		assert.ErrorIs(t, g.Err(), ErrLost)
	})
}

// On a connection that does not tell the granted timeout (zk.Connect's),
// the lease clock runs only with WithSessionTimeout(d), and by d: a
// keepalive every d/16 while a grant is held, and the grant lost once
// nothing was answered for 3d/4, though go-zookeeper still says it has its
// session. d is only a bound (the server may have granted less): Deadline
// promises nothing while the grant is held, and a lost grant's holder must
// stop at once. Without d the lock has go-zookeeper's state alone: no
// keepalive, and the silence goes unseen.
func TestTimeoutNotTold(t *testing.T) {
	for _, limit := range []time.Duration{0, 8 * time.Second} {
		t.Run(fmt.Sprintf("limit=%v", limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const d = 8 * time.Second
				s := newFakeServer()
				c := s.conn()
				var opts []Option
				if limit > 0 {
					opts = append(opts, WithSessionTimeout(limit))
				}
				l := newLock(t, c, opts...)
				g, err := l.Lock(t.Context())
				require.NoError(t, err)
				answered := recordSyncs(c)
				time.Sleep(d)
				_, ok := g.Deadline()
				assert.False(t, ok, "no deadline from a timeout the server may not have granted")
				if limit == 0 {
					assert.Empty(t, answered.times(), "no lease clock without a bound")
				} else {
					assert.GreaterOrEqual(t, len(answered.times()), 15, "a keepalive every d/16 while held")
					assert.LessOrEqual(t, len(answered.times()), 16)
				}

				partitioned := make(chan struct{})
				c.setBefore(func(op, p string) error {
					<-partitioned // sent, never answered
					return zk.ErrConnectionClosed
				})
				synctest.Wait() // a keepalive under way when the partition began has been answered
				silent := time.Now()
				if times := answered.times(); len(times) > 0 {
					silent = times[len(times)-1]
				}
				select {
				case <-g.Done():
				case <-time.After(d):
				}
				lost := time.Now()
				assert.Equal(t, zk.StateHasSession, c.State())
				if limit == 0 {
					assert.NoError(t, g.Err(), "go-zookeeper's blind spot, without a bound")
				} else {
					var lapsed *zkclient.LeaseLapsedError
					require.ErrorAs(t, g.Err(), &lapsed)
					assert.True(t, lapsed.Bound)
					assert.LessOrEqual(t, lost.Sub(silent), limit-zkclient.HeadStart(limit))
					assert.Greater(t, lost.Sub(silent), limit-zkclient.HeadStart(limit)-zkclient.RenewInterval(limit))
					deadline, ok := g.Deadline()
					require.True(t, ok)
					assert.Equal(t, lost, deadline, "stop at once: the session may be gone already")
				}
				close(partitioned)
				c.setBefore(nil)
				require.NoError(t, g.Release(t.Context()))
				l.background.Wait()
				assert.Empty(t, s.lockNodes(dir))
			})
		})
	}
}

// The token is the czxid of the grant's node, known when the grant is
// made: Token sends no request, uncontended or after a wait, and stays
// after the release.
func TestTokenIsFixedAtTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		g1, err := l.Lock(t.Context())
		require.NoError(t, err)
		before := c.calls.Load()
		t1 := g1.Token()
		assert.Zero(t, c.calls.Load()-before, "no request")
		assert.Equal(t, s.czxid(g1.Node()), t1)

		waiter := start(t.Context(), newLock(t, s.conn()).Lock)
		synctest.Wait()
		require.NoError(t, g1.Release(t.Context()))
		assert.Equal(t, t1, g1.Token())
		synctest.Wait()
		g2 := granted(t, waiter)
		assert.Equal(t, s.czxid(g2.Node()), g2.Token(), "a writer that waited")
		assert.Greater(t, g2.Token(), t1, "tokens grow")
		require.NoError(t, g2.Release(t.Context()))
	})
}

func TestNestedGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		l := newLock(t, c)
		ctx := t.Context()
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		wctx := ContextWithGrant(ctx, w)
		before := c.calls.Load()

		r, err := l.RLock(wctx)
		require.NoError(t, err, "read inside write")
		assert.Equal(t, w.Node(), r.Node())
		assert.Equal(t, Read, r.Mode())
		_, err = l.Lock(ContextWithGrant(ctx, r))
		assert.ErrorIs(t, err, ErrUpgrade, "write inside a read grant, even one nested in a write grant")
		w2, err := l.Lock(wctx)
		require.NoError(t, err, "write inside write")
		r2, err := l.RLock(ContextWithGrant(ctx, w2))
		require.NoError(t, err, "read inside write inside write")
		assert.Equal(t, before, c.calls.Load(), "no request")
		require.NoError(t, w2.Release(ctx))
		assert.ErrorIs(t, r2.Err(), ErrReleased, "a grant nested in a nested grant ends with it")
		require.NoError(t, r.Release(ctx))
		assert.NoError(t, w.Err(), "releasing nested grants leaves the outer one held")

		_, err = newLock(t, c).RLock(wctx)
		require.NoError(t, err, "another *RWLock, same path, same conn: still nested")
		_, err = newLock(t, s.conn()).TryRLock(wctx)
		assert.ErrorIs(t, err, ErrWouldBlock, "another connection is another client")
		r3, err := l.RLock(wctx)
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		assert.ErrorIs(t, r3.Err(), ErrReleased, "the outer grant's end ends its nested grants")
		_, err = l.RLock(wctx)
		assert.ErrorIs(t, err, ErrReleased)

		rd, err := l.RLock(ctx)
		require.NoError(t, err)
		_, err = l.Lock(ContextWithGrant(ctx, rd))
		assert.ErrorIs(t, err, ErrUpgrade)
		require.NoError(t, rd.Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestNestedGrantsEndWithALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		l := newLock(t, s.conn())
		w, err := l.Lock(t.Context())
		require.NoError(t, err)
		r, err := l.RLock(ContextWithGrant(t.Context(), w))
		require.NoError(t, err)
		done := r.Done()
		synctest.Wait()
		require.NoError(t, s.conn().Delete(w.Node(), -1))
		<-done
		assert.ErrorIs(t, r.Err(), ErrLost)
	})
}

// A reader queued behind our write grant joins on Downgrade; a writer
// queued behind it waits for both readers.
func TestDowngrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		token := w.Token()
		reader := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		writer := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()
		late := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()

		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		assert.Equal(t, Read, r.Mode())
		assert.Equal(t, w.Node(), r.Node())
		assert.Equal(t, token, r.Token())
		assert.Equal(t, token, w.Token(), "the write grant keeps it too")
		assert.Equal(t, s.czxid(w.Node()), token)
		assert.ErrorIs(t, w.Err(), ErrReleased)
		synctest.Wait()
		joined := granted(t, reader)
		pending(t, writer)
		pending(t, late) // behind the waiting writer

		q, err := l.Queue(ctx)
		require.NoError(t, err)
		assert.Equal(t, Read, q[0].Mode)
		assert.True(t, q[0].Held)

		require.NoError(t, r.Release(ctx))
		synctest.Wait()
		pending(t, writer)
		require.NoError(t, joined.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, writer).Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, late).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

func TestDowngradeEdgeCases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		r, err := l.RLock(ctx)
		require.NoError(t, err)
		same, err := r.Downgrade(ctx)
		require.NoError(t, err)
		assert.Same(t, r, same)
		require.NoError(t, r.Release(ctx))

		w, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		_, err = w.Downgrade(ctx)
		assert.ErrorIs(t, err, ErrReleased)

		w, err = l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, s.conn().Delete(w.Node(), -1))
		_, err = w.Downgrade(ctx)
		assert.ErrorIs(t, err, ErrLost)
		assert.ErrorIs(t, w.Err(), ErrLost)
	})
}

// The README's pattern: `defer g.Release(ctx)`, then `g, err = g.Downgrade(ctx)`.
// The deferred call releases the write grant, which must release the node
// the read grant now owns.
func TestReleasingTheDowngradedWriteGrantReleasesTheNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		var r *Grant
		func() {
			g, err := l.Lock(ctx)
			require.NoError(t, err)
			defer g.Release(ctx)
			g, err = g.Downgrade(ctx)
			require.NoError(t, err)
			r = g
		}()
		assert.ErrorIs(t, r.Err(), ErrReleased)
		assert.Empty(t, s.lockNodes(dir))
		assert.NoError(t, r.Release(ctx), "and releasing the read grant afterwards is a no-op")
	})
}

// A grant whose listing cannot date its node (a node was created behind
// it before the listing) reads its node once before the grant: the token
// is then its czxid, and Token sends nothing. A reader needs no read when
// the node behind is one of our readers: a writer created later has a
// larger czxid than the listing's pzxid, which stands in.
func TestTokenReadWhenTheListingCannotTell(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   Mode
		behind func() string
		reads  int64
	}{
		{"reader behind a reader of ours", Read, func() string { return nodePrefix(dir, lockname.NewGUID(), Read, DialectNative) }, 0},
		{"reader behind a writer of ours", Read, func() string { return nodePrefix(dir, lockname.NewGUID(), Write, DialectNative) }, 1},
		{"reader behind a peer's reader", Read, func() string { return dir + "/read-" }, 1},
		{"writer behind a reader of ours", Write, func() string { return nodePrefix(dir, lockname.NewGUID(), Read, DialectNative) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				l := newLock(t, c)
				warm, err := l.Lock(t.Context()) // makes the directory
				require.NoError(t, err)
				require.NoError(t, warm.Release(t.Context()))
				other := s.conn()
				// Another node, created after ours and before the first
				// listing that can show ours (one that overtook our
				// create cannot).
				var once sync.Once
				var gets atomic.Int64
				c.setBefore(func(op, p string) error {
					switch {
					case op == "get":
						gets.Add(1)
					case op == "children" && len(s.lockNodes(dir)) > 0: // ours is there
						once.Do(func() {
							_, err := other.Create(tc.behind(), nil, zk.FlagEphemeral|zk.FlagSequence, nil)
							require.NoError(t, err)
						})
					}
					return nil
				})
				acquire := l.RLock
				if tc.mode == Write {
					acquire = l.Lock
				}
				g, err := acquire(t.Context())
				require.NoError(t, err)
				assert.Equal(t, tc.reads, gets.Load(), "reads of the node")
				before := c.calls.Load()
				if tc.reads == 1 {
					assert.Equal(t, s.czxid(g.Node()), g.Token())
				} else {
					assert.Empty(t, s.checkToken(g.Node(), g.Mode(), g.Token()))
					assert.Greater(t, g.Token(), s.czxid(g.Node()), "the listing's pzxid")
				}
				assert.Equal(t, before, c.calls.Load(), "Token sends nothing")
				require.NoError(t, g.Release(t.Context()))
			})
		})
	}
}

// A refused deletion is a refusal even if the context ends right after
// the answer came: the grant stays held and Release says why, rather than
// report a deletion in the background that nobody started.
func TestReleaseRefusedAsTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		g, err := newLock(t, c).Lock(t.Context())
		require.NoError(t, err)
		ctx := &endsUnseen{Context: t.Context()}
		c.setBefore(func(op, p string) error {
			if op == "delete" && p == g.Node() {
				ctx.ended.Store(true)
				return zk.ErrNoAuth // an ACL changed since the lock was taken
			}
			return nil
		})
		require.ErrorIs(t, g.Release(ctx), zk.ErrNoAuth)
		require.NoError(t, g.Err(), "still held: its node is there")
		c.setBefore(nil)
		require.NoError(t, g.Release(t.Context()))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// A release whose context ends before the answer, and whose held mark the
// server then refuses (an ACL without WRITE, which WithACL allows): the
// node still goes, deleted without its mark in the background.
func TestReleaseLateRefusedMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		first, err := newLock(t, s.conn()).Lock(t.Context())
		require.NoError(t, err)
		next := start(t.Context(), newLock(t, c).Lock)
		synctest.Wait()
		require.NoError(t, first.Release(t.Context()))
		synctest.Wait()
		g := granted(t, next)
		require.True(t, (g.h.releaseMark != lockname.Unmarked), "a writer that waited marks its node as it goes")

		ctx, cancel := context.WithCancel(t.Context())
		answer := make(chan struct{})
		c.setBefore(func(op, _ string) error {
			if op == "multi" { // the mark and the delete
				<-answer
				return zk.ErrNoAuth
			}
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- g.Release(ctx) }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, errFinishing)
		assert.ErrorIs(t, g.Err(), ErrReleased)
		close(answer)
		synctest.Wait()
		g.h.l.background.Wait()
		assert.Empty(t, s.lockNodes(dir))
	})
}
