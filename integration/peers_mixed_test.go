package integration

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A mixed fleet fails loudly (issue 23): a zkrwlock client whose dialect
// a real peer does not see. A holder is told, with a cause that names the
// dialect to use, as soon as the peer's node appears (the peer, blind to
// our node, is granted at once); an acquisition that finds the peer's node
// refuses to queue, and leaves no node. kazoo's default ReadLock and
// WriteLock, made without extra_lock_patterns, are such peers on a native
// path (issue 31): for our reader and writer, against each; and its Lock.
// The advice for kazoo's nodes is DialectKazooLock, which every kazoo lock
// class counts, and DialectKazoo only where no kazoo Lock uses the path.
func TestPeersMixedFleetFailsLoudly(t *testing.T) {
	const kazooFix = "WithDialect(DialectKazooLock); or WithDialect(DialectKazoo) if no kazoo Lock uses the path"
	const nativeKazooFix = kazooFix + "; or WithDialect(DialectKazooPatterns) if every kazoo lock there is made with " +
		`extra_lock_patterns, ("write-", "read-") for WriteLock and Lock and ("write-",) for ReadLock`
	runs := []struct {
		peer    string
		dialect rwlock.Dialect
		mode    rwlock.Mode // ours
		spec    peerSpec
		fix     string
	}{
		{"curator", rwlock.DialectNative, rwlock.Write, peerSpec{name: "curator-writer", kind: "rwwrite"}, "WithDialect(DialectCurator)"},
		{"kazoo", rwlock.DialectMutex, rwlock.Write, peerSpec{name: "kazoo-writer", kind: "write"}, kazooFix},
		{"kazoo", rwlock.DialectNative, rwlock.Write, peerSpec{name: "kazoo-writer", kind: "write"}, nativeKazooFix},
		{"kazoo", rwlock.DialectNative, rwlock.Write, peerSpec{name: "kazoo-reader", kind: "read"}, nativeKazooFix},
		{"kazoo", rwlock.DialectNative, rwlock.Read, peerSpec{name: "kazoo-writer", kind: "write"}, nativeKazooFix},
		{"kazoo", rwlock.DialectNative, rwlock.Read, peerSpec{name: "kazoo-reader", kind: "read"}, nativeKazooFix},
		{"kazoo", rwlock.DialectNative, rwlock.Read, peerSpec{name: "kazoo-lock", kind: "lock"}, nativeKazooFix},
	}
	for _, run := range runs {
		t.Run(run.peer+"/"+run.dialect.String()+"/"+run.mode.String()+"/"+run.spec.kind, func(t *testing.T) {
			requirePeer(t, run.peer)
			srv := sharedServer(t)
			path := zktest.LockPath(t, "/it")
			ctx := testContext(t)
			l := connect(t, srv.Addr(0), peerSession).lock(t, path, rwlock.WithDialect(run.dialect))
			acquire := l.Lock
			if run.mode == rwlock.Read {
				acquire = l.RLock
			}
			op := connect(t, srv.Addr(0), 0)

			// Ours first: the peer is granted at once, and our holder is told.
			g, err := acquire(ctx)
			require.NoError(t, err)
			rec := newRecord()
			var p *peerProc
			if run.peer == "curator" {
				p = startCurator(t, rec, srv.Addr(0), path, peerSession, peerHold, run.spec)
			} else {
				p = startKazoo(t, rec, srv.Addr(0), path, peerSession, peerHold, run.spec)
			}
			p.start(t)
			var told int64
			select {
			case <-g.Done():
				told = monotonic()
				require.ErrorIs(t, g.Err(), rwlock.ErrLost)
				require.ErrorIs(t, g.Err(), rwlock.ErrInvalidArgument)
				assert.Contains(t, g.Err().Error(), run.fix)
			case <-time.After(10 * time.Second):
				// Not fatal: the other order is judged too, on its own.
				t.Error("the holder was not told of the peer that does not see it")
				mustRelease(t, g)
			}
			var grants []grant
			zktest.WaitFor(t, 10*time.Second, func() bool {
				var bad []string
				grants, bad = rec.snapshot()
				require.Empty(t, bad)
				return len(grants) == 1
			}, "the peer is granted, blind to our node")
			if told != 0 {
				// Negative: told before the peer's acquire returned.
				t.Logf("the holder was told %v after the peer's grant", time.Duration(told-grants[0].acq))
			}
			waitNodes(t, op.conn, path, 10*time.Second, grants[0].node)

			// The peer first: we refuse to queue (rather than wait behind it,
			// or be granted beside it).
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err = acquire(wctx)
			require.ErrorIs(t, err, rwlock.ErrInvalidArgument)
			assert.Contains(t, err.Error(), run.fix)
			assert.Equal(t, []string{grants[0].node}, lockNodes(t, op.conn, path), "no node of ours is left")
			p.letGo(t)
			p.finish(t, peerDeadline)
		})
	}
}

// fleetD is D, the delay within which a holder finds a blind peer's node by
// its own check (docs/guarantees.md): the check's interval, 100 ms, plus a
// listing's round trip on a healthy connection.
const fleetD = 200 * time.Millisecond

// A holder that nobody tells finds a blind peer by its own check, within D
// of the peer's create (issue 33). The reference point is the node's ctime,
// the server's clock as it ran the create, which is this machine's clock.
// Alone: nobody else queues, so the holder's watch is the one its grant's
// listing set. Queueing: a writer waits behind the holder, and another
// client queues and gives up every few milliseconds, so the holder lists
// once per interval, and the peer comes at any point of one. The first of
// those attempts that lists the peer's node is refused at once. The waiter
// is refused once the holder's node goes, or, granted on its listing from
// before the peer, told at its first check.
func TestPeersBlindPeerToldWithinD(t *testing.T) {
	runs := []struct {
		name, peer string
		spec       peerSpec
		queueing   bool
	}{
		{"curator/alone", "curator", peerSpec{name: "curator-writer", kind: "rwwrite"}, false},
		{"kazoo/queueing", "kazoo", peerSpec{name: "kazoo-writer", kind: "write"}, true},
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			requirePeer(t, run.peer)
			srv := sharedServer(t)
			path := zktest.LockPath(t, "/it")
			ctx := testContext(t)
			op := connect(t, srv.Addr(0), 0)
			g, err := connect(t, srv.Addr(0), peerSession).lock(t, path).Lock(ctx)
			require.NoError(t, err)
			rec := newRecord()
			var p *peerProc
			if run.peer == "curator" {
				p = startCurator(t, rec, srv.Addr(0), path, peerSession, peerHold, run.spec)
			} else {
				p = startKazoo(t, rec, srv.Addr(0), path, peerSession, peerHold, run.spec)
			}

			// The other client: each TryLock creates a node, lists, is
			// refused and deletes it, two changes to the directory.
			refused := make(chan time.Time, 1)
			stop := make(chan struct{})
			var wait func(*testing.T, time.Duration)
			var waiter *acquisition
			if run.queueing {
				waiter = goAcquire(t, ctx, connect(t, srv.Addr(0), peerSession).lock(t, path).Lock)
				zktest.WaitFor(t, 10*time.Second, func() bool { return len(lockNodes(t, op.conn, path)) == 2 }, "the waiter queues")
				other := connect(t, srv.Addr(0), peerSession).lock(t, path)
				var tries atomic.Int64
				wait = goAll(func() error {
					for {
						_, err := other.TryLock(ctx)
						tries.Add(1)
						switch {
						case errors.Is(err, rwlock.ErrInvalidArgument):
							refused <- time.Now()
							return nil
						case !errors.Is(err, rwlock.ErrWouldBlock):
							return fmt.Errorf("the other client's TryLock: %v", err)
						}
						select {
						case <-stop:
							return nil
						case <-time.After(5 * time.Millisecond):
						}
					}
				})
				// Enough changes for several intervals: the holder's watch
				// has fired, and it lists once per interval.
				zktest.WaitFor(t, 10*time.Second, func() bool { return tries.Load() >= 50 }, "the other client's attempts")
			}

			p.start(t)
			var told time.Time
			select {
			case <-g.Done():
				told = time.Now()
				require.ErrorIs(t, g.Err(), rwlock.ErrLost)
				require.ErrorIs(t, g.Err(), rwlock.ErrInvalidArgument)
			case <-time.After(10 * time.Second):
				t.Fatal("the holder was not told of the peer that does not see it")
			}
			var grants []grant
			zktest.WaitFor(t, 10*time.Second, func() bool {
				var bad []string
				grants, bad = rec.snapshot()
				require.Empty(t, bad)
				return len(grants) == 1
			}, "the peer is granted, blind to our node")
			_, st, err := op.conn.Get(path + "/" + grants[0].node)
			require.NoError(t, err)
			delay := told.Sub(time.UnixMilli(st.Ctime))
			t.Logf("the holder was told %v after the peer's create (D is %v)", delay, fleetD)
			assert.LessOrEqual(t, delay, fleetD, "told within D")
			if run.queueing {
				select {
				case at := <-refused:
					t.Logf("the other client was refused %v after the peer's create", at.Sub(time.UnixMilli(st.Ctime)))
				case <-time.After(10 * time.Second):
					t.Error("the other client was not refused")
					close(stop)
				}
				wait(t, 10*time.Second)
				w, err := waiter.wait(t)
				if err == nil {
					select {
					case <-w.Done():
						err = w.Err()
						t.Logf("the waiter was granted on its listing from before the peer, and told within %v", time.Since(waiter.at))
					case <-time.After(10 * time.Second):
						mustRelease(t, w)
						t.Fatal("the waiter was granted beside the peer, and not told")
					}
				}
				require.ErrorIs(t, err, rwlock.ErrInvalidArgument, "the waiter refused, or told")
			}
			waitNodes(t, op.conn, path, 10*time.Second, grants[0].node)
			p.letGo(t)
			p.finish(t, peerDeadline)
		})
	}
}
