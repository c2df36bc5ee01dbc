package integration

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The bounded lock (WithCapacity) on a real server. TestChaos checks its
// permits under every fault the nemesis makes, kill -9, SIGSTOP past T,
// partitions and a leader's loss, with the history checker's weighted sum
// (pastCapacity).

// Strict queue order, and the herd-free watch set: each release of one
// permit admits the first waiter alone, and wakes at most one waiter more.
// Each waiter's connection counts the node events the server sends it; a
// Sync on it afterwards makes sure every event of the release's changes
// has arrived.
func TestPermitsFIFOAndWakeups(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	const capacity = 4
	ctx := testContext(t)
	var holders []*rwlock.Grant
	for range capacity {
		g, err := connect(t, srv.Addr(0), 0).lock(t, path, rwlock.WithCapacity(capacity)).RLock(ctx)
		require.NoError(t, err)
		holders = append(holders, g)
	}
	type waiter struct {
		conn   *zk.Conn
		events *atomic.Int64
		a      *acquisition
	}
	var waiters []waiter
	for i := range 8 {
		events := new(atomic.Int64)
		count := zk.WithEventCallback(func(ev zk.Event) {
			if strings.HasPrefix(ev.Path, path+"/") && (ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeDataChanged) {
				events.Add(1)
			}
		})
		c := connect(t, srv.Addr(0), 0, withZKOptions(count))
		l := c.lock(t, path, rwlock.WithCapacity(capacity))
		a := goAcquire(t, ctx, l.RLock)
		waitQueue(t, l, capacity+i+1)
		waiters = append(waiters, waiter{c.conn, events, a})
	}
	for _, w := range waiters {
		w.a.stillWaiting(t, "every permit is held")
	}
	held := holders
	for round := range len(waiters) {
		first := waiters[round:]
		before := make([]int64, len(first))
		for i, w := range first {
			before[i] = w.events.Load()
		}
		mustRelease(t, held[0])
		held = held[1:]
		g := first[0].a.granted(t, 10*time.Second) // the first waiter, none other
		held = append(held, g)
		// Its admission mark wakes the next waiter: once it is written, the
		// release's chain is over.
		require.Eventually(t, func() bool {
			data, _, err := first[0].conn.Get(g.Node())
			return err == nil && strings.Contains(string(data), "state=held")
		}, 10*time.Second, 5*time.Millisecond)
		woken := 0
		for i, w := range first {
			_, err := w.conn.Sync(path)
			require.NoError(t, err)
			if w.events.Load() > before[i] {
				woken++
			}
		}
		for _, w := range first[1:] {
			w.a.stillWaiting(t, "one permit came free")
		}
		assert.LessOrEqual(t, woken, 2, "release %d admitted one and woke %d", round, woken)
	}
	for _, g := range held {
		mustRelease(t, g)
	}
}

// A large request holds back a later small one that would fit, on a real
// server, and the release that makes room admits both. A permit's guarded
// write commits.
func TestPermitsLargeRequestHoldsBackSmall(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	lock := func() *rwlock.RWLock { return connect(t, srv.Addr(0), 0).lock(t, path, rwlock.WithCapacity(4)) }
	g3, err := lock().Acquire(ctx, 3)
	require.NoError(t, err)
	big := lock()
	a2 := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return big.Acquire(ctx, 2) })
	waitQueue(t, big, 2)
	small := lock()
	a1 := goAcquire(t, ctx, small.RLock)
	waitQueue(t, small, 3)
	a2.stillWaiting(t, "3 of 4 held")
	a1.stillWaiting(t, "the 2 ahead of it waits")
	mustRelease(t, g3)
	g2, g1 := a2.granted(t, 10*time.Second), a1.granted(t, 10*time.Second)
	assert.Less(t, g2.Token(), g1.Token())
	// A guarded write under a permit commits while it holds.
	_, err = g2.Multi(ctx, &zk.CreateRequest{Path: path + "-guarded", Data: []byte("x"), Acl: zk.WorldACL(zk.PermAll)})
	require.NoError(t, err)
	mustRelease(t, g2)
	mustRelease(t, g1)
}

// A create whose response is lost (the connection drops after the server
// made the node): the acquisition adopts its permit's node by guid, or,
// if its caller gave up, deletes it. No orphaned permit either way.
func TestPermitsLostCreateLeavesNoOrphan(t *testing.T) {
	tier.NoRace(t, zk35)
	t.Parallel()
	srv := sharedServer(t)
	for _, giveUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "adopted", true: "abandoned"}[giveUp], func(t *testing.T) {
			t.Parallel()
			const timeout = 6 * time.Second
			path := zktest.LockPath(t, "/it")
			d := newFaultDialer(opCreate, path+"/", true)
			conn := connect(t, srv.Addr(0), timeout, withDialer(d.wrap)).conn
			checker := connect(t, srv.Addr(0), 0)
			l, err := rwlock.New(conn, path, rwlock.WithSessionTimeout(timeout), rwlock.WithCapacity(4))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			d.armed.Store(true)
			w := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return l.Acquire(ctx, 2) })
			var created string
			select {
			case created = <-d.fired:
			case <-w.done:
				t.Fatalf("the acquisition returned (%v) but no create response was withheld", w.err)
			case <-time.After(10 * time.Second):
				t.Fatal("no create response withheld within 10s")
			}
			assert.Contains(t, created, "-sem-2of4-")
			if giveUp {
				cancel()
				_, err := w.wait(t)
				require.ErrorIs(t, err, context.Canceled)
				waitNodes(t, checker.conn, path, 10*time.Second)
				return
			}
			g := w.granted(t, 10*time.Second)
			require.Equal(t, created, g.Node(), "the acquisition adopted the node the server created")
			waitNodes(t, checker.conn, path, time.Second, nodeName(created))
			mustRelease(t, g)
			waitNodes(t, checker.conn, path, 5*time.Second)
		})
	}
}

// A holder of two of three permits, in another process, dies by SIGKILL:
// its permits stay counted until the server expires its session, and only
// then is a waiter that needs them granted, beside the holder of the third.
func TestFaultPermitHolderKilled(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1) // its own: the times measured are the point
	path := zktest.LockPath(t, "/it")
	ctx := t.Context()

	// The child gets SIGKILL if this thread ends (Pdeathsig is per thread):
	// keep the thread until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path,
		holderEnvTimeout+"="+timeout.String(), holderEnvPermits+"=3,2")
	cmd.SysProcAttr = childAttr()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	reaped := false
	defer func() {
		if !reaped { // the test failed before the kill
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	held := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if node, ok := strings.CutPrefix(sc.Text(), "held "); ok {
				held <- node
			}
		}
	}()
	var node string
	select {
	case node = <-held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the holder process did not print \"held\" within 60s; stderr:\n%s", stderr.String())
	}
	require.Contains(t, node, "-sem-2of3-")

	third, err := connect(t, srv.Addr(0), timeout).lock(t, path, rwlock.WithCapacity(3)).Acquire(ctx, 1)
	require.NoError(t, err)
	waiter := connect(t, srv.Addr(0), timeout)
	wl := waiter.lock(t, path, rwlock.WithCapacity(3))
	w := goAcquire(t, ctx, func(ctx context.Context) (*rwlock.Grant, error) { return wl.Acquire(ctx, 2) })
	waitNodeCount(t, waiter.conn, path, 3, 10*time.Second)
	w.stillWaiting(t, "the holder process holds two permits of three")

	killed := time.Now()
	require.NoError(t, syscall.Kill(cmd.Process.Pid, syscall.SIGKILL))
	err = cmd.Wait()
	reaped = true
	require.ErrorContains(t, err, "killed")
	g := w.granted(t, timeout+2*faultTick+10*time.Second)
	took := w.at.Sub(killed)
	t.Logf("holder of 2 permits SIGKILLed → waiter of 2 granted %v (session timeout %v)", msec(took), timeout)
	require.GreaterOrEqual(t, took, timeout/2, "granted before the dead holder's session could have expired")
	exists, _, err := waiter.conn.Exists(node)
	require.NoError(t, err)
	require.False(t, exists, "the dead holder's node went first")
	require.NoError(t, third.Err(), "the third permit is held throughout")
	mustRelease(t, g)
	mustRelease(t, third)
}

// oneTrip records whether each acquisition took one round trip.
type oneTrip struct{ trips chan bool }

func (o oneTrip) ObserveAcquire(_ context.Context, e rwlock.AcquireEvent) { o.trips <- e.OneRoundTrip }
func (oneTrip) ObserveGrant(rwlock.GrantEvent)                            {}

// An uncontended permit takes one round trip, its listing sent behind its
// create, as any uncontended grant does: the listing proves its place and
// dates its token.
func TestPermitUncontendedOneRoundTrip(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	o := oneTrip{make(chan bool, 8)}
	l := connect(t, srv.Addr(0), 0).lock(t, path, rwlock.WithCapacity(4), rwlock.WithObserver(o))
	g, err := l.Acquire(ctx, 2) // the first makes the directory
	require.NoError(t, err)
	mustRelease(t, g)
	<-o.trips
	// A listing that overtakes its create costs one more (see listBehind):
	// on a busy machine that happens to one acquisition in a few, so each
	// is taken again, up to 5 times, until one is not overtaken.
	for _, w := range []int64{1, 2, 4} {
		one := false
		for try := 0; try < 5 && !one; try++ {
			g, err := l.Acquire(ctx, w)
			require.NoError(t, err)
			one = <-o.trips
			mustRelease(t, g)
		}
		assert.True(t, one, "weight %d: never one round trip in 5 tries", w)
	}
}
