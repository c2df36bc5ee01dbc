package rwlock

import (
	"context"
	"path"
	"strings"
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

// A revocation reaches the holders of the moment, and only them: the
// waiter granted after it is not revoked, and nobody's grant changes.
func TestRevokeReachesTheHoldersOfTheMoment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder := newLock(t, s.conn())
		g, err := holder.Lock(ctx)
		require.NoError(t, err)
		revoked := g.Revoked()
		w := start(ctx, newLock(t, s.conn()).Lock)
		synctest.Wait()

		operator := newLock(t, s.conn())
		require.NoError(t, operator.Revoke(ctx, "the migration is stuck"))
		synctest.Wait()
		assert.True(t, isClosed(revoked), "the holder was told")
		require.NoError(t, g.Err(), "and still holds: a revocation changes no grant")
		select {
		case <-w:
			t.Fatal("the waiter was granted by a revocation")
		default:
		}
		require.NoError(t, g.Release(ctx))
		synctest.Wait()
		next := granted(t, w)
		assert.False(t, isClosed(next.Revoked()), "a grant made after the revocation")
		synctest.Wait()
		assert.False(t, isClosed(next.Revoked()))
		require.NoError(t, next.Release(ctx))
	})
}

// WithWrite's function sees its context cancelled with ErrRevoked, and
// WithWrite returns an error wrapping it.
func TestRevokeCancelsWithWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn())
		running := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- l.WithWrite(ctx, func(ctx context.Context) error {
				close(running)
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}()
		<-running
		synctest.Wait()
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "stop"))
		err := <-done
		require.ErrorIs(t, err, ErrRevoked)
		require.NotErrorIs(t, err, ErrLost)
		assert.Regexp(t, `^grant revoked by \S+ at \S+: stop$`, err.Error(), "who asked, when and why")
		assert.Empty(t, s.lockNodes(dir), "released")
	})
}

// Revoking a lock nobody holds reaches nobody: its request names no node,
// and the next holder is not revoked. A lock that nobody asks to listen
// pays no request for revocations.
func TestRevokeOfNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		assert.Equal(t, int64(1), c.cost(func() { require.NoError(t, l.Revoke(ctx, "nobody")) }),
			"no directory even: the first write finds none")
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		assert.Equal(t, int64(3), c.cost(func() { require.NoError(t, l.Revoke(ctx, "nobody")) }),
			"the read that keeps the other records, the first write and the listing; no names to write")
		data, _, err := c.Get(dir)
		require.NoError(t, err)
		rev, ok := lockname.ParseRevocation(data)
		require.True(t, ok)
		assert.Empty(t, rev.Nodes)
		next, err := l.Lock(ctx)
		require.NoError(t, err)
		revoked := listens(next)
		assert.False(t, isClosed(revoked))
		require.NoError(t, next.Release(ctx))
	})
}

// A listening holder is told by the notification of Revoke's first write,
// before Revoke has listed the queue: whether it listened before the read
// that set the watch, or was granted while the watch was set. A grant
// made after that notification, before the listing, is told by the
// second write: by its notification where the watch was set again before
// the grant, else by the names.
func TestRevokeToldByTheFirstWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		early, err := l.RLock(ctx)
		require.NoError(t, err)
		earlyRevoked := listens(early) // the first listener: its read sets the watch
		set, err := l.RLock(ctx)       // granted while the watch is set
		require.NoError(t, err)
		setRevoked := set.Revoked()

		op := s.conn()
		listed := make(chan struct{})
		var late, elsewhere *Grant
		op.setBefore(func(o, p string) error {
			if o == "children" && p == dir {
				synctest.Wait()
				assert.True(t, isClosed(earlyRevoked), "told before the listing: it listened before the read")
				assert.True(t, isClosed(setRevoked), "told before the listing: granted while the watch was set")
				// Granted after the first write's notification: on c, whose
				// watch is set again by now; and on a connection with none.
				late, err = l.RLock(ctx)
				assert.NoError(t, err)
				elsewhere, err = newLock(t, s.conn()).RLock(ctx)
				assert.NoError(t, err)
				close(listed)
			}
			return nil
		})
		require.NoError(t, newLock(t, op).Revoke(ctx, "stop"))
		<-listed
		lateRevoked, elsewhereRevoked := late.Revoked(), elsewhere.Revoked()
		synctest.Wait()
		assert.True(t, isClosed(lateRevoked), "held at the second write: told by its notification")
		assert.True(t, isClosed(elsewhereRevoked), "held at the listing: named by the second write")
		require.NoError(t, early.Release(ctx))
		require.NoError(t, set.Release(ctx))
		require.NoError(t, late.Release(ctx))
		require.NoError(t, elsewhere.Release(ctx))
	})
}

// A waiter granted after the first write's notification, before Revoke's
// listing, is named by the second write; a grant made after Revoke
// returned is not told.
func TestRevokeReachesAGrantMadeBeforeTheListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		holder, err := l.Lock(ctx)
		require.NoError(t, err)
		holderRevoked := listens(holder)
		w := start(ctx, newLock(t, s.conn()).Lock) // a connection with no watch: judged by the names
		synctest.Wait()
		pending(t, w)

		op := s.conn()
		var next *Grant
		var nextRevoked <-chan struct{}
		op.setBefore(func(o, p string) error {
			if o == "children" && p == dir {
				synctest.Wait()
				assert.True(t, isClosed(holderRevoked), "the holder, told by the first write")
				assert.NoError(t, holder.Release(ctx))
				synctest.Wait()
				next = granted(t, w)
				nextRevoked = next.Revoked()
				synctest.Wait()
			}
			return nil
		})
		require.NoError(t, newLock(t, op).Revoke(ctx, "the holder"))
		synctest.Wait()
		assert.True(t, isClosed(nextRevoked), "it held at the listing: named")
		require.NoError(t, next.Release(ctx))

		// And one granted after Revoke returned is not told.
		after, err := l.Lock(ctx)
		require.NoError(t, err)
		afterRevoked := listens(after)
		assert.False(t, isClosed(afterRevoked))
		require.NoError(t, after.Release(ctx))
	})
}

// After a reconnection, go-zookeeper sets its watches again on a goroutine
// of its own: a revocation made while the connection was down may be
// notified after the answer that grants a waiter, which came after it. So
// a grant made after a reconnection is not taken to come before the watch
// set until then: it is judged by the names.
func TestRevokeAcrossAReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		holder, err := l.RLock(ctx)
		require.NoError(t, err)
		holderRevoked := listens(holder) // the watch is set

		c.lateReplay = true
		c.disconnect()
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "the holder"))
		c.reconnect()
		next, err := l.RLock(ctx) // granted on an answer that shows the revocation
		require.NoError(t, err)
		nextRevoked := listens(next)
		require.False(t, isClosed(holderRevoked), "the notification is still on its way")
		c.replay()
		synctest.Wait()
		assert.True(t, isClosed(holderRevoked), "the holder, which held at the revocation")
		assert.False(t, isClosed(nextRevoked), "granted after the revocation")
		require.NoError(t, holder.Release(ctx))
		require.NoError(t, next.Release(ctx))
	})
}

// Two locks of one path on one connection share the directory's watch:
// go-zookeeper fires every channel it has for a node, so a watch of one
// lock, sent again after a reconnection, would fire the other's, set by a
// read that came later and already showed the revocation.
func TestRevokeTwoLocksAcrossAReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		a, b := newLock(t, c), newLock(t, c)
		holder, err := a.RLock(ctx)
		require.NoError(t, err)
		holderRevoked := listens(holder) // the watch is set

		c.lateReplay = true
		c.disconnect()
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "the holder"))
		c.reconnect()
		next, err := b.RLock(ctx) // granted after the revocation
		require.NoError(t, err)
		nextRevoked := listens(next)
		c.replay()
		synctest.Wait()
		assert.True(t, isClosed(holderRevoked), "the holder, which held at the revocation")
		assert.False(t, isClosed(nextRevoked), "granted after the revocation")
		require.NoError(t, holder.Release(ctx))
		require.NoError(t, next.Release(ctx))
	})
}

// A grant named by the last read, that listens after a reconnection, is
// told: the data may have changed unseen, so it is read again, without a
// watch, and it names the grant still.
func TestRevokeNamedAcrossAReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		late, err := l.RLock(ctx) // granted before any watch: judged by the names
		require.NoError(t, err)
		early, err := l.RLock(ctx)
		require.NoError(t, err)
		earlyRevoked := listens(early) // the watch is set
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "both"))
		synctest.Wait()
		require.True(t, isClosed(earlyRevoked))
		require.NoError(t, early.Release(ctx))
		// One more listener, so that the last read came after the second
		// write, whenever the first write's read came.
		again, err := l.RLock(ctx)
		require.NoError(t, err)
		againRevoked := listens(again)
		require.False(t, isClosed(againRevoked))
		require.NoError(t, again.Release(ctx))
		synctest.Wait() // the last read named both; nobody listens

		c.disconnect()
		c.reconnect()
		assert.Equal(t, int64(1), c.cost(func() {
			revoked := listens(late)
			assert.True(t, isClosed(revoked), "named, and still named")
		}), "the read that confirms the names")
		require.NoError(t, late.Release(ctx))
	})
}

// A read lost after a revocation's notification is sent again once the
// connection is back. The holder is told by the read that succeeds, which
// shows the revocation. The notification it followed is not taken again
// for a new one: a grant made after Revoke returned, listening meanwhile,
// is not told.
func TestRevokeAfterLostReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		holder, err := l.RLock(ctx)
		require.NoError(t, err)
		holderRevoked := listens(holder) // the watch is set

		gate := make(chan struct{})
		var lost atomic.Int32
		c.setBefore(func(op, p string) error {
			if op == "get" && p == dir && lost.Load() < 2 {
				<-gate
				lost.Add(1)
				return zk.ErrConnectionClosed
			}
			return nil
		})
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "the holder"))
		synctest.Wait()
		require.False(t, isClosed(holderRevoked), "told by the read after the notification, which waits at the gate")
		next, err := l.RLock(ctx)
		require.NoError(t, err)
		nextRevoked := next.revokedChan(false) // the read waits at the gate
		gate <- struct{}{}                     // lost
		gate <- struct{}{}                     // lost again, once the backoff has passed
		time.Sleep(time.Second)                // the bubble's clock: past the backoff, and the read that then succeeds
		synctest.Wait()
		assert.EqualValues(t, 2, lost.Load())
		require.True(t, isClosed(holderRevoked), "told by the read that succeeded")
		rev, ok := holder.Revocation()
		require.True(t, ok)
		assert.Equal(t, "the holder", rev.Reason)
		require.NoError(t, holder.Release(ctx))
		assert.False(t, isClosed(nextRevoked), "granted after Revoke returned")
		require.NoError(t, next.Release(ctx))
	})
}

// The names count only in the directory they were listed in: a directory
// made anew between Revoke's listing and its second write numbers its
// nodes from 0 again, and its node numbered as the named holder was is not
// revoked.
func TestRevokeNamesOfAnotherDirectory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		holder, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		op := s.conn()
		var fresh *Grant
		op.setAfter(func(o, p string, err error) error {
			if o == "children" && p == dir && fresh == nil {
				assert.NoError(t, holder.Release(ctx))
				assert.NoError(t, s.conn().Delete(dir, -1)) // as the server reaps an empty container
				var ferr error
				fresh, ferr = newLock(t, s.conn()).Lock(ctx)
				assert.NoError(t, ferr)
			}
			return err
		})
		require.NoError(t, newLock(t, op).Revoke(ctx, "the holder"))
		require.Equal(t, seqOf(t, path.Base(holder.h.path)), seqOf(t, path.Base(fresh.h.path)), "numbered as the holder was")
		data, _, err := op.Get(dir)
		require.NoError(t, err)
		rev, ok := lockname.ParseRevocation(data)
		require.True(t, ok)
		require.Equal(t, []int32{seqOf(t, path.Base(holder.h.path))}, rev.Nodes, "the second write, in the new directory")
		freshRevoked := listens(fresh)
		assert.False(t, isClosed(freshRevoked), "a node of the new directory")
		require.NoError(t, fresh.Release(ctx))
	})
}

// A listener that comes while the read fails for good (the directory
// gone, as far as that read could tell) is served by a read of its own:
// the next revocation reaches it.
func TestRevokeServesAListenerAfterAFailedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		first, err := l.RLock(ctx)
		require.NoError(t, err)
		firstRevoked := listens(first)

		gate := make(chan struct{})
		var refused atomic.Bool
		c.setBefore(func(op, p string) error {
			if op == "get" && p == dir && !refused.Load() {
				<-gate
				refused.Store(true)
				return zk.ErrNoNode
			}
			return nil
		})
		op := newLock(t, s.conn())
		require.NoError(t, op.Revoke(ctx, "first"))
		synctest.Wait()
		later, err := l.RLock(ctx)
		require.NoError(t, err)
		laterRevoked := later.revokedChan(false) // while the read waits at the gate
		gate <- struct{}{}
		synctest.Wait()
		require.True(t, isClosed(firstRevoked), "told by the read sent again for the later listener")
		require.NoError(t, first.Release(ctx))
		require.False(t, isClosed(laterRevoked))
		require.NoError(t, op.Revoke(ctx, "later"))
		synctest.Wait()
		assert.True(t, isClosed(laterRevoked))
		require.NoError(t, later.Release(ctx))
	})
}

// A refused read (throttling, an ACL being changed) is tried again after
// a pause, growing, while anyone listens: the listener is not dropped.
func TestRevokeRetriesARefusedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		var refused atomic.Int32
		var refusing atomic.Bool
		refusing.Store(true)
		c.setBefore(func(op, p string) error {
			if op == "get" && p == dir && refusing.Load() {
				refused.Add(1)
				return zk.ErrNoAuth
			}
			return nil
		})
		g, err := l.RLock(ctx)
		require.NoError(t, err)
		revoked := listens(g)
		assert.EqualValues(t, 1, refused.Load(), "the next read waits for its pause")
		time.Sleep(10 * time.Millisecond) // the bubble's clock: the first pause
		synctest.Wait()
		assert.EqualValues(t, 2, refused.Load())
		time.Sleep(10 * time.Millisecond) // half the second pause
		synctest.Wait()
		assert.EqualValues(t, 2, refused.Load(), "the pause grows")
		refusing.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		require.False(t, isClosed(revoked))
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "g"))
		synctest.Wait()
		assert.True(t, isClosed(revoked), "still served after the refusals")
		require.NoError(t, g.Release(ctx))
	})
}

// A listener that came while a read was under way, and that the read
// names, is told: it reads the data again (see the next test for why),
// which names it still.
func TestRevokeConfirmsAListenerThatCameDuringARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		late, err := l.RLock(ctx) // granted before any watch: judged by the names
		require.NoError(t, err)
		early, err := l.RLock(ctx)
		require.NoError(t, err)
		earlyRevoked := listens(early)

		revoked := make(chan struct{})
		var reads atomic.Int32
		var lateRevoked <-chan struct{}
		c.setBefore(func(op, p string) error {
			if op == "get" && p == dir && reads.Add(1) == 1 {
				<-revoked // the read after the first write comes after the second
			}
			return nil
		})
		c.setAfter(func(op, p string, err error) error {
			if op == "get" && p == dir && lateRevoked == nil {
				lateRevoked = late.revokedChan(false) // as the read's answer travels
			}
			return err
		})
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "both"))
		synctest.Wait()
		require.False(t, isClosed(earlyRevoked), "told by the read after the notification")
		close(revoked)
		synctest.Wait()
		require.True(t, isClosed(earlyRevoked))
		require.NotNil(t, lateRevoked)
		assert.True(t, isClosed(lateRevoked), "named by the second write")
		require.NoError(t, early.Release(ctx))
		require.NoError(t, late.Release(ctx))
	})
}

// A listener that comes while a read is under way is not judged by that
// read's names: its node may be of a directory made anew since, numbered
// as a named one was. It reads the data again.
func TestRevokeNamesOfAReadUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		holder, err := l.Lock(ctx)
		require.NoError(t, err)
		holderRevoked := listens(holder)

		revoked := make(chan struct{})
		var reads atomic.Int32
		var fresh *Grant
		var freshRevoked <-chan struct{}
		c.setBefore(func(op, p string) error {
			if op == "get" && p == dir && reads.Add(1) == 1 {
				<-revoked // the read after the first write comes after the second
			}
			return nil
		})
		c.setAfter(func(op, p string, err error) error {
			if op == "get" && p == dir && fresh == nil {
				// As the read's answer travels: the holder goes, the
				// directory is made anew, and a node numbered as the
				// holder's is granted there, and listens.
				assert.NoError(t, holder.Release(ctx))
				assert.NoError(t, s.conn().Delete(dir, -1))
				var ferr error
				fresh, ferr = newLock(t, c).Lock(ctx)
				assert.NoError(t, ferr)
				assert.Equal(t, seqOf(t, path.Base(holder.h.path)), seqOf(t, path.Base(fresh.h.path)))
				freshRevoked = fresh.revokedChan(false)
			}
			return err
		})
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "the holder"))
		synctest.Wait()
		// Told by the read after the notification; it released first.
		require.False(t, isClosed(holderRevoked))
		close(revoked)
		synctest.Wait()
		require.NotNil(t, fresh)
		assert.False(t, isClosed(freshRevoked), "a node of the directory made anew")
		require.NoError(t, fresh.Release(ctx))
	})
}

// While the connection is down, the reading waits for it only while
// anyone listens: once the last listener has left, it stops, and sends no
// read when the connection comes back.
func TestRevokeStopsWaitingWhenNobodyListens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		holder, err := l.RLock(ctx)
		require.NoError(t, err)
		holderRevoked := listens(holder)

		gate := make(chan struct{})
		var lost atomic.Bool
		c.setBefore(func(op, p string) error {
			if op == "get" && p == dir && !lost.Load() {
				<-gate
				lost.Store(true)
				c.disconnect()
				return zk.ErrConnectionClosed
			}
			return nil
		})
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "the holder"))
		synctest.Wait()
		require.False(t, isClosed(holderRevoked), "told by the read after the notification, which waits")
		require.NoError(t, holder.Release(ctx))
		other, err := l.RLock(ctx)
		require.NoError(t, err)
		other.revokedChan(false) // a listener while the read after the notification is lost
		gate <- struct{}{}
		time.Sleep(time.Second) // the bubble's clock: the reading waits for the connection
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = other.Release(rctx) // the deletion goes on once the connection is back
		synctest.Wait()
		require.Error(t, other.Err(), "the last listener left")
		before := reads(c)
		c.reconnect()
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, before, reads(c), "no read of the directory once it is back")
	})
}

// reads counts c's reads of the lock directory.
func reads(c *fakeConn) int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	n := 0
	for _, op := range c.applied {
		if op == "get "+dir {
			n++
		}
	}
	return n
}

// A grant that ends as it begins to listen, its Client retired with it,
// starts no reading on that Client: a channel set there would be a second
// one beside its successor's.
func TestRevokeListeningOnARetiredClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		synctest.Wait()
		next := zkclient.For(c)
		retired := next != g.h.c
		next.Unref()
		require.True(t, retired, "the grant was the Client's last user")
		assert.Zero(t, c.cost(func() {
			l.listenRevocations(g.h.c).listen(g.h)
			synctest.Wait()
		}))
	})
}

// The directory's watch outlives its listeners: only the first grant of a
// session that listens pays a request for it. A revocation that came
// between a grant and its listening still reaches it.
func TestRevokeListeningIsFreeOnceSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		noop := func(context.Context) error { return nil }
		warm, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		assert.Equal(t, int64(4), c.cost(func() { require.NoError(t, l.WithRead(ctx, noop)) }),
			"the first WithRead: create, list, delete, and the read that sets the watch")
		for range 3 {
			assert.Equal(t, int64(3), c.cost(func() { require.NoError(t, l.WithRead(ctx, noop)) }),
				"a later WithRead: create, list, delete")
		}

		// a listens; b, read by the same read as a, only asks later.
		a, err := l.RLock(ctx)
		require.NoError(t, err)
		aRevoked := listens(a)
		b, err := l.RLock(ctx)
		require.NoError(t, err)
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "a and b"))
		synctest.Wait()
		require.True(t, isClosed(aRevoked))
		assert.Zero(t, c.cost(func() {
			assert.True(t, isClosed(b.Revoked()), "b, revoked before it listened")
		}), "b was granted while the watch was set, which the revocation fired")
		require.NoError(t, a.Release(ctx))
		require.NoError(t, b.Release(ctx))

		// Whether the revocation's second write fired the watch again
		// depends on when the read after its first write came: listen
		// once more, so that the watch is set and unfired.
		again, err := l.Lock(ctx)
		require.NoError(t, err)
		revoked := listens(again)
		assert.False(t, isClosed(revoked), "named by neither write")
		require.NoError(t, again.Release(ctx))
		synctest.Wait() // nobody listens: the reading stops, and the watch stays

		// A revocation while nobody listens fires the watch. A grant made
		// while it was set is known to come before it: told by the one
		// read that sets the watch again, which shows the revocation. The
		// next listener pays nothing.
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, newLock(t, s.conn()).Revoke(ctx, "g"))
		synctest.Wait()
		assert.Equal(t, int64(1), c.cost(func() {
			revoked := listens(g)
			assert.True(t, isClosed(revoked))
		}), "granted while the watch was set, which a revocation fired since")
		require.NoError(t, g.Release(ctx))
		later, err := l.Lock(ctx)
		require.NoError(t, err)
		assert.Zero(t, c.cost(func() {
			revoked := listens(later)
			assert.False(t, isClosed(revoked))
		}), "the watch is set again")
		require.NoError(t, later.Release(ctx))
	})
}

// Revoke reads the directory's data (to keep its other records), the
// queue's names, and a node's data only where a
// downgrade mark decides who holds: the first node when it is a writer of
// ours with a reader of ours behind it. Whatever it reads, it names the
// holders of the moment, and only them.
func TestRevokeReadsOnlyTheMarksThatDecide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		queue     []Mode // acquired in this order, each on its own session
		downgrade bool   // the first, a writer, downgrades once granted
		held      int    // how many, from the first, hold when Revoke runs
		requests  int64  // Revoke's
	}{
		{name: "a writer alone", queue: []Mode{Write}, held: 1, requests: 4},
		{name: "a writer before a writer", queue: []Mode{Write, Write}, held: 1, requests: 4},
		{name: "readers before a writer", queue: []Mode{Read, Read, Write, Read}, held: 2, requests: 4},
		{name: "a writer before readers", queue: []Mode{Write, Read, Read}, held: 1, requests: 5},
		{name: "a downgraded writer and the readers that joined it", queue: []Mode{Write, Read, Read, Write, Read},
			downgrade: true, held: 3, requests: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				ctx := t.Context()
				waits := make([]<-chan result, len(tc.queue))
				for i, m := range tc.queue {
					l := newLock(t, s.conn())
					acquire := l.Lock
					if m == Read {
						acquire = l.RLock
					}
					waits[i] = start(ctx, acquire)
					synctest.Wait() // queued in this order
				}
				grants := make([]*Grant, len(tc.queue))
				grants[0] = granted(t, waits[0])
				if tc.downgrade {
					d, err := grants[0].Downgrade(ctx)
					require.NoError(t, err)
					grants[0] = d
					synctest.Wait()
				}
				var revoked []<-chan struct{}
				for i := range tc.queue {
					if i >= tc.held {
						pending(t, waits[i])
						continue
					}
					if i > 0 {
						grants[i] = granted(t, waits[i])
					}
					revoked = append(revoked, grants[i].Revoked())
				}

				c := s.conn()
				operator := newLock(t, c)
				assert.Equal(t, tc.requests, c.cost(func() { require.NoError(t, operator.Revoke(ctx, "all")) }))
				for i, ch := range revoked {
					assert.True(t, isClosed(ch), "holder %d told", i)
				}
				for i := range tc.queue {
					if grants[i] == nil {
						grants[i] = granted(t, waits[i])
						revoked := listens(grants[i])
						assert.False(t, isClosed(revoked), "grant %d, made after the revocation", i)
					}
					require.NoError(t, grants[i].Release(ctx))
					synctest.Wait()
				}
				assert.Empty(t, s.lockNodes(dir))
			})
		})
	}
}

// A first writer that leaves between Revoke's listing and its read of the
// writer's mark is left out of the names, as Queue leaves out a node that
// vanishes: the reader its release granted is the holder named. The
// writer, which held at the first write, was told by it.
func TestRevokeAfterTheFirstLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		g, err := newLock(t, s.conn()).Lock(ctx)
		require.NoError(t, err)
		gRevoked := g.Revoked()
		r := start(ctx, newLock(t, s.conn()).RLock)
		synctest.Wait()
		pending(t, r)

		c := s.conn()
		c.setAfter(func(op, p string, err error) error {
			if op == "children" {
				synctest.Wait() // the holder's process has the first write's notification
				assert.NoError(t, g.Release(ctx))
			}
			return err
		})
		assert.Equal(t, int64(5), c.cost(func() { require.NoError(t, newLock(t, c).Revoke(ctx, "r")) }),
			"the read of the data, the first write, the listing, the writer's mark (gone), the second write")
		rg := granted(t, r)
		rRevoked := listens(rg)
		assert.True(t, isClosed(rRevoked), "the reader the release granted")
		assert.True(t, isClosed(gRevoked), "the writer, which held at the first write")
		data, st, err := c.Get(dir)
		require.NoError(t, err)
		rev, ok := lockname.ParseRevocation(data)
		require.True(t, ok)
		assert.Equal(t, []int32{seqOf(t, path.Base(rg.h.path))}, rev.Nodes)
		assert.Equal(t, st.Czxid, rev.Dir, "the directory the names were listed in")
		require.NoError(t, rg.Release(ctx))
	})
}

// A peer's node is judged by its name alone, as Queue judges it: a peer's
// writer, even with data that reads like a downgrade, holds alone, and
// Revoke reads no node's data for it; a peer's reader holds with ours.
// The peer's node is named, and untouched.
func TestRevokeWithPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		lock := func(c *fakeConn) *RWLock { return newLock(t, c, WithDialect(DialectCurator)) }
		g, err := lock(s.conn()).Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		peer := s.conn()
		marks := string(lockname.Data("forged", 0, lockname.MarkHeld|lockname.MarkDowngraded))
		writer := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", marks)
		r := start(ctx, lock(s.conn()).RLock)
		synctest.Wait()
		pending(t, r)

		c := s.conn()
		operator := lock(c)
		named := func() []int32 {
			data, _, err := c.Get(dir)
			require.NoError(t, err)
			rev, ok := lockname.ParseRevocation(data)
			require.True(t, ok)
			return rev.Nodes
		}
		assert.Equal(t, int64(4), c.cost(func() { require.NoError(t, operator.Revoke(ctx, "peer")) }))
		assert.Equal(t, []int32{seqOf(t, writer)}, named())
		data, _, err := peer.Get(dir + "/" + writer)
		require.NoError(t, err)
		assert.Equal(t, marks, string(data), "the peer's node untouched")

		reader := peerNode(t, peer, "_c_"+uuid+"-__READ__", "")
		require.NoError(t, peer.Delete(dir+"/"+writer, -1))
		synctest.Wait()
		rg := granted(t, r)
		rRevoked := listens(rg)
		assert.False(t, isClosed(rRevoked), "granted after the revocation")
		w := start(ctx, lock(s.conn()).Lock)
		synctest.Wait()
		pending(t, w)
		assert.Equal(t, int64(4), c.cost(func() { require.NoError(t, operator.Revoke(ctx, "readers")) }))
		assert.Equal(t, []int32{seqOf(t, path.Base(rg.h.path)), seqOf(t, reader)}, named())
		assert.True(t, isClosed(rRevoked))
		require.NoError(t, rg.Release(ctx))
		require.NoError(t, peer.Delete(dir+"/"+reader, -1))
		synctest.Wait()
		require.NoError(t, granted(t, w).Release(ctx))
	})
}

// listens has g listen for revocations, and returns its Revoked channel
// once the reading it started has settled.
func listens(g *Grant) <-chan struct{} {
	ch := g.Revoked()
	synctest.Wait()
	return ch
}

func seqOf(t *testing.T, name string) int32 {
	t.Helper()
	n, ok := parseNode(name)
	require.True(t, ok, name)
	return n.seq
}

// The directory's data holds one record per purpose. A write of another
// purpose's record is no revocation, for a holder listening or one that
// listens after it. Revoke keeps that record, and the holder learns who
// asked, why and when.
func TestRevokeOnlyItsOwnRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		early, err := l.RLock(ctx)
		require.NoError(t, err)
		earlyRevoked := listens(early) // sets the watch
		set, err := l.RLock(ctx)       // granted while the watch is set
		require.NoError(t, err)

		other := s.conn()
		_, err = other.Set(dir, []byte("leader=node-7\n"), -1)
		require.NoError(t, err)
		synctest.Wait()
		assert.False(t, isClosed(earlyRevoked), "another purpose's record")
		assert.False(t, isClosed(listens(set)), "granted before that write, listening after it")
		_, ok := early.Revocation()
		assert.False(t, ok)

		op := newLock(t, s.conn(), WithOwner("ops-1"))
		start := time.Now()
		require.NoError(t, op.Revoke(ctx, "DB maintenance, OPS-42"))
		synctest.Wait()
		require.True(t, isClosed(earlyRevoked))
		require.True(t, isClosed(set.Revoked()))
		for _, g := range []*Grant{early, set} {
			rev, ok := g.Revocation()
			require.True(t, ok)
			assert.Equal(t, "DB maintenance, OPS-42", rev.Reason)
			assert.Equal(t, "ops-1", rev.By)
			assert.False(t, rev.At.Before(start.Truncate(time.Millisecond)), "the server's time of the write")
		}
		data, _, err := other.Get(dir)
		require.NoError(t, err)
		assert.Contains(t, string(data), "leader=node-7\n", "the other record is kept")
		assert.True(t, strings.HasPrefix(string(data), "revoke=DB maintenance, OPS-42\n"),
			"the revocation record first, where older clients read it")
		require.NoError(t, early.Release(ctx))
		require.NoError(t, set.Release(ctx))
	})
}

// A grant made while the watch was set, which listens only after a read
// judged the revocation that fired it, is told, though no names reach
// it: here Revoke's listing failed, so its first write was its only one.
func TestRevokeFirstWriteReachesALateListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		early, err := l.RLock(ctx)
		require.NoError(t, err)
		earlyRevoked := listens(early) // sets the watch
		set, err := l.RLock(ctx)       // granted while the watch is set
		require.NoError(t, err)

		op := s.conn()
		op.setBefore(func(o, p string) error {
			if o == "children" {
				return zk.ErrNoAuth
			}
			return nil
		})
		require.Error(t, newLock(t, op).Revoke(ctx, "first write only"))
		synctest.Wait()
		require.True(t, isClosed(earlyRevoked), "judged by the read after the notification")
		assert.True(t, isClosed(set.Revoked()), "granted before the write, listening after the read")
		rev, ok := set.Revocation()
		require.True(t, ok)
		assert.Equal(t, "first write only", rev.Reason)
		require.NoError(t, early.Release(ctx))
		require.NoError(t, set.Release(ctx))
	})
}

// A revocation made before the holder first looks is seen at that look:
// Revoked's first call waits for the read that judges it. Whether the
// connection watched the directory at the grant or not, and whether the
// grant is named or only known to come before the write.
func TestRevokeSeenAtTheFirstLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		op := newLock(t, s.conn())

		// No watch on c yet: the first call reads, and finds the names.
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, op.Revoke(ctx, "before the first look"))
		synctest.Wait()
		assert.Equal(t, int64(1), c.cost(func() {
			assert.True(t, isClosed(g.Revoked()), "seen at the first look")
		}), "the read that sets the watch")
		rev, ok := g.Revocation()
		require.True(t, ok)
		assert.Equal(t, "before the first look", rev.Reason)
		require.NoError(t, g.Release(ctx))

		// The watch set and unfired at the grant: the first call costs
		// nothing while nothing changed.
		quiet, err := l.Lock(ctx)
		require.NoError(t, err)
		assert.Zero(t, c.cost(func() { assert.False(t, isClosed(quiet.Revoked())) }))
		require.NoError(t, quiet.Release(ctx))
		synctest.Wait() // nobody listens: the reading stops, the watch stays

		// Granted while the watch was set; a revocation fires it while
		// nobody listens, and no read has judged it when the holder looks.
		h, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, op.Revoke(ctx, "while nobody listened"))
		synctest.Wait()
		assert.True(t, isClosed(h.Revoked()), "seen at the first look")
		require.NoError(t, h.Release(ctx))
	})
}
