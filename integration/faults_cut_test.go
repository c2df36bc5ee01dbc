package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Connections are cut over and over while many acquisitions, cancellations
// and releases are in flight: creates and deletes lose their responses or
// fail, holders lose grants or ride the cuts out. Mutual exclusion holds
// throughout, and afterwards no node of a live session is left that no
// grant or waiter owns: a fresh client acquires as soon as the clients have
// reconnected and finished their deletions.
func TestFaultCutsInFlight(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	// The clients know their session timeouts, short (a holder whose
	// connection is cut loses its grant: the client redials only after 1s)
	// or long (holders ride cuts out), or do not (any cut is a loss).
	type setup struct {
		timeout time.Duration
		known   bool // the lock knows the timeout; else it has a zk.Connect connection
	}
	setups := []setup{{4 * time.Second, true}, {9 * time.Second, true}, {4 * time.Second, false}, {9 * time.Second, true}}
	const workersPerClient = 3
	proxies := make([]*faultproxy.Proxy, len(setups))
	clients := make([]*client, len(setups))
	locks := make([]*rwlock.RWLock, len(setups))
	var debug debugLog
	for i, s := range setups {
		proxies[i] = proxied(t, srv.Addr(0))
		var opts []connectOption
		if !s.known {
			opts = append(opts, withZKConnect())
		}
		clients[i] = connect(t, proxies[i].Addr(), s.timeout, opts...)
		locks[i] = clients[i].lock(t, path, rwlock.WithLogger(debug.logger().With("client", i)))
	}
	sessions := make([]int64, len(clients))
	for i, c := range clients {
		sessions[i] = c.conn.SessionID()
	}
	checker := connect(t, srv.Addr(0), 0)

	var x exclusion
	var st cutStats
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	eg, ectx := errgroup.WithContext(ctx)
	for _, l := range locks {
		for range workersPerClient {
			eg.Go(func() error { return cutWorker(ectx, l, &x, &st) })
		}
	}

	// The cuts: 20, one every 100-300ms, each of a random client's proxy.
	zktest.WaitFor(t, 10*time.Second, func() bool { return st.grants.Load() >= 20 }, "no progress before the cuts")
	for range 20 {
		select {
		case <-time.After(100*time.Millisecond + rand.N(200*time.Millisecond)):
		case <-ectx.Done():
		}
		proxies[rand.N(len(proxies))].Cut()
	}
	stop()
	ended := time.Now()
	require.NoError(t, eg.Wait())
	t.Logf("%d grants, %d lost, %d acquisitions given up (timeout or would block), %d releases failed; %d violations",
		st.grants.Load(), st.lost.Load(), st.gaveUp.Load(), st.releaseFailed.Load(), x.violations.Load())
	for _, n := range st.notes {
		t.Logf("a call reported: %s", n)
	}
	require.Zero(t, x.violations.Load(), "mutual exclusion violated")
	for i, c := range clients {
		require.Equal(t, sessions[i], c.conn.SessionID(), "client %d's session should have survived the cuts", i)
	}

	// Every call has returned: no grant or waiter is left, and neither may
	// any node be. A fresh client is granted once the clients have finished
	// their deletions (each redials 1s after a cut).
	fresh := connect(t, srv.Addr(0), 0)
	fctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	g, err := fresh.lock(t, path).Lock(fctx)
	if err != nil {
		left, _ := nodesNow(checker.conn, path)
		t.Logf("what the locks logged about the nodes left behind:\n%s", debug.about(guidsOf(left)...))
	}
	require.NoError(t, err, "a fresh client could not acquire; left behind: %s (sessions of the clients: %#x)",
		describeNodes(checker.conn, path), sessions)
	t.Logf("all calls returned → a fresh client granted %v", msec(time.Since(ended)))
	require.LessOrEqual(t, time.Since(ended), 5*time.Second)
	waitNodes(t, checker.conn, path, time.Second, nodeName(g.Node()))
	mustRelease(t, g)
	waitNodes(t, checker.conn, path, 5*time.Second)
}

type cutStats struct {
	grants, lost, gaveUp, releaseFailed atomic.Int64

	mu    sync.Mutex
	notes []string // failures to delete a node, reported by the calls
}

// note records err if it reports a failed deletion.
func (st *cutStats) note(err error) {
	if strings.Contains(err.Error(), "delete ") {
		st.mu.Lock()
		st.notes = append(st.notes, err.Error())
		st.mu.Unlock()
	}
}

// cutWorker acquires over and over until ctx ends: shared or exclusive,
// blocking with a deadline of 20ms to 1.5s or trying, holding for up to
// 50ms, or one time in eight for over a second (less if the grant is lost),
// then releasing. Deadlines, would-block and failed releases are the point;
// any other failure is an error.
func cutWorker(ctx context.Context, l *rwlock.RWLock, x *exclusion, st *cutStats) error {
	for ctx.Err() == nil {
		mode := rwlock.Read
		if rand.N(10) < 3 {
			mode = rwlock.Write
		}
		try := rand.N(5) == 0
		actx, cancel := context.WithTimeout(ctx, 20*time.Millisecond+rand.N(1480*time.Millisecond))
		var g *rwlock.Grant
		var err error
		switch {
		case try && mode == rwlock.Write:
			g, err = l.TryLock(actx)
		case try:
			g, err = l.TryRLock(actx)
		case mode == rwlock.Write:
			g, err = l.Lock(actx)
		default:
			g, err = l.RLock(actx)
		}
		cancel()
		if err != nil {
			st.note(err)
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rwlock.ErrWouldBlock):
			st.gaveUp.Add(1)
			continue
		default:
			return fmt.Errorf("%v (try %v): %w", mode, try, err)
		}
		x.enter(mode)
		st.grants.Add(1)
		hold := rand.N(50 * time.Millisecond)
		if rand.N(8) == 0 {
			hold = time.Second + rand.N(500*time.Millisecond) // long enough to be cut
		}
		select {
		case <-g.Done():
			st.lost.Add(1)
		case <-time.After(hold):
		}
		x.leave(mode)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := g.Release(rctx); err != nil {
			st.releaseFailed.Add(1)
			st.note(err)
		}
		rcancel()
	}
	return nil
}

// A create whose response is lost to a dropped connection, on a real
// server: the server created the node, the client never heard. The
// acquisition finds its node by its guid once reconnected and goes on with
// it; or, if its caller gave up meanwhile, the node is deleted by guid in the
// background. Either way no second node and no orphan.
func TestFaultLostCreateResponse(t *testing.T) {
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	for _, tc := range []struct {
		name   string
		giveUp bool // the caller cancels while the outcome is unknown
	}{
		{"adopted", false},
		{"abandoned", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 6 * time.Second
			path := zktest.LockPath(t, "/it")
			d := newFaultDialer(opCreate, path+"/", true)
			conn := connect(t, srv.Addr(0), timeout, withDialer(d.wrap)).conn
			checker := connect(t, srv.Addr(0), 0)
			l, err := rwlock.New(conn, path, rwlock.WithSessionTimeout(timeout))
			require.NoError(t, err)
			session := conn.SessionID()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()

			d.armed.Store(true)
			start := time.Now()
			w := goAcquire(t, ctx, l.Lock)
			var created string
			select {
			case created = <-d.fired:
			case <-w.done:
				t.Fatalf("the acquisition returned (%v) but no create response was withheld", w.err)
			case <-time.After(10 * time.Second):
				t.Fatal("no create response withheld within 10s")
			}
			// The client redials 1s after the drop: the node is still there.
			ok, _, err := checker.conn.Exists(created)
			require.NoError(t, err)
			require.True(t, ok, "the server created %s", created)

			if tc.giveUp {
				cancel()
				select {
				case <-w.done:
				case <-time.After(10 * time.Second):
					t.Fatal("the cancelled acquisition did not return")
				}
				require.ErrorIs(t, w.err, context.Canceled)
				waitNodes(t, checker.conn, path, 10*time.Second)
				require.Equal(t, session, conn.SessionID(), "deleted by guid, with the session alive")
				t.Logf("create response lost → caller gave up → node deleted in the background %v", msec(time.Since(start)))
				return
			}
			g := w.granted(t, 10*time.Second)
			t.Logf("create response lost → granted with the node found by guid %v", msec(w.at.Sub(start)))
			require.Equal(t, created, g.Node(), "the acquisition adopted the node the server created")
			require.Equal(t, session, conn.SessionID())
			waitNodes(t, checker.conn, path, time.Second, nodeName(created))
			mustRelease(t, g)
			waitNodes(t, checker.conn, path, 5*time.Second)
		})
	}
}

// A request whose write fails because the connection just died (EPIPE, as
// when the server reset it) never reached the server. go-zookeeper returns
// the write's own error for it, not zk.ErrConnectionClosed. It is still a
// connection loss: an acquisition rides it out, and a failed release's
// delete is finished in the background once the client is back.
func TestFaultRequestWriteFails(t *testing.T) {
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	for _, tc := range []struct {
		name string
		op   int32
	}{
		{"create", opCreate},
		{"delete", opDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 6 * time.Second
			path := zktest.LockPath(t, "/it")
			d := newFaultDialer(tc.op, path+"/", false)
			conn := connect(t, srv.Addr(0), timeout, withDialer(d.wrap)).conn
			checker := connect(t, srv.Addr(0), 0)
			l, err := rwlock.New(conn, path, rwlock.WithSessionTimeout(timeout))
			require.NoError(t, err)
			session := conn.SessionID()
			ctx := t.Context()

			if tc.op == opCreate {
				d.armed.Store(true)
				start := time.Now()
				g, err := l.Lock(ctx)
				require.Len(t, d.fired, 1, "no create write failed")
				require.NoError(t, err, "an acquisition should ride out a connection that died under its create")
				t.Logf("create's write failed → granted %v", msec(time.Since(start)))
				waitNodes(t, checker.conn, path, time.Second, nodeName(g.Node()))
				mustRelease(t, g)
				waitNodes(t, checker.conn, path, 5*time.Second)
				return
			}

			g, err := l.Lock(ctx)
			require.NoError(t, err)
			d.armed.Store(true)
			rerr := g.Release(ctx)
			require.Len(t, d.fired, 1, "no delete write failed")
			require.Error(t, rerr)
			t.Logf("Release: %v", rerr)
			start := time.Now()
			zktest.WaitFor(t, 10*time.Second, func() bool {
				nodes, ok := nodesNow(checker.conn, path)
				return ok && len(nodes) == 0
			}, "the node of a live session was left behind: %s; the client's session %#x, connection %v", describeNodes(checker.conn, path), session, lazyText(func() string { return conn.State().String() }))
			require.Equal(t, session, conn.SessionID(), "deleted by the client, with its session alive")
			t.Logf("delete's write failed → node deleted in the background %v", msec(time.Since(start)))
		})
	}
}

// guidsOf returns the guids in lock node names (_c_<guid>-...).
func guidsOf(nodes []string) []string {
	var guids []string
	for _, n := range nodes {
		if g, ok := strings.CutPrefix(n, "_c_"); ok && len(g) > 32 {
			guids = append(guids, g[:32])
		}
	}
	return guids
}
