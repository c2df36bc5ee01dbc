package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// ZooKeeper 3.8 numbers a directory's sequential children with its count
// of child creations, a signed 32-bit counter that does not wrap where it
// is stored: past 2147483647 the stored count sticks there, so every later
// child gets 2147483647 again (duplicates). Creates prepared while earlier
// ones are still being committed (pipelined, or within one multi) are
// numbered from the in-flight count, which does wrap: they get negative
// numbers, and the next create after them gets 2147483647, which serial
// arithmetic puts BEFORE them. Neither the queue order nor uniqueness
// holds any more, so an acquisition whose node got 2147483647 or a
// negative number, or that sees two lock nodes share a number, must delete
// its node and fail with an error telling the operator to use a fresh lock
// directory. These tests start a server whose lock directories begin near
// the end of the counter (zkserver's Config.Seed writes the snapshot).
func TestSequenceCounterAtItsEnd(t *testing.T) {
	const top = math.MaxInt32
	srv := zkserver.Start(t, zkserver.Config{
		TickTime:          faultTick,
		MinSessionTimeout: time.Second,
		Seed: []zkserver.Node{
			{Path: "/seq/evidence", Cversion: top - 4},
			{Path: "/seq/serial", Cversion: top - 3},
			{Path: "/seq/stuck", Cversion: top},
			{Path: "/seq/pipelined", Cversion: top - 3},
		},
	})

	t.Run("what the server does", func(t *testing.T) {
		c := connect(t, srv.ConnectString(), 0)
		const dir = "/seq/evidence"
		var serial []int32
		for i := range 7 {
			p, err := c.conn.Create(fmt.Sprintf("%s/n%d-", dir, i), nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			serial = append(serial, seqOfName(t, p))
		}
		t.Logf("one create at a time from %d: %v", top-4, serial)
		require.Equal(t, []int32{top - 4, top - 3, top - 2, top - 1, top, top, top}, serial,
			"the counter climbs to 2147483647 and sticks there")

		var ops []any
		for i := range 3 {
			ops = append(ops, &zk.CreateRequest{Path: fmt.Sprintf("%s/m%d-", dir, i), Flags: zk.FlagEphemeral | zk.FlagSequence, Acl: zk.WorldACL(zk.PermAll)})
		}
		res, err := c.conn.Multi(ops...)
		require.NoError(t, err)
		var multi []int32
		for _, r := range res {
			require.NoError(t, r.Error)
			multi = append(multi, seqOfName(t, r.String))
		}
		t.Logf("three creates in one multi at the top: %v", multi)
		require.Equal(t, []int32{top, math.MinInt32, math.MinInt32 + 1}, multi, "in-flight creates wrap")

		p, err := c.conn.Create(dir+"/after-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		t.Logf("the next create after the multi: %d", seqOfName(t, p))
		require.Equal(t, int32(top), seqOfName(t, p), "the stored counter did not wrap")

		var wg sync.WaitGroup
		var mu sync.Mutex
		var piped []int32
		var errs []error
		for i := range 8 {
			wg.Go(func() {
				p, err := c.conn.Create(fmt.Sprintf("%s/p%d-", dir, i), nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				piped = append(piped, seqOfName(t, p))
			})
		}
		wg.Wait()
		require.Empty(t, errs)
		slices.Sort(piped)
		t.Logf("eight creates at once on one connection, at the top: %v", piped)
	})

	t.Run("serial acquisitions reach the top", func(t *testing.T) {
		const dir = "/seq/serial"
		c := connect(t, srv.ConnectString(), 0)
		l := c.lock(t, dir)
		ctx := testContext(t)
		var granted []int32
		failed := 0
		for i := range 6 {
			acquire := l.Lock
			if i%2 == 1 {
				acquire = l.RLock
			}
			g, err := acquire(ctx)
			if err == nil {
				n, _ := seqOf(g.Node())
				t.Logf("acquisition %d: granted %s", i, nodeName(g.Node()))
				require.NoError(t, g.Release(ctx))
				require.Zero(t, failed, "acquisition %d was granted after one failed at the top", i)
				require.Less(t, n, int32(top), "acquisition %d was granted %s: at the top of the counter, "+
					"its number may be shared with a later node", i, nodeName(g.Node()))
				require.GreaterOrEqual(t, n, int32(top-3))
				granted = append(granted, n)
				continue
			}
			t.Logf("acquisition %d: %v", i, err)
			requireFreshDirError(t, err)
			requireNoNodeOf(t, c, dir)
			failed++
		}
		// Three numbers are left below the top (fewer if the lock creates
		// other children, which count too): at least three acquisitions
		// fail, and the first is granted.
		require.NotEmpty(t, granted)
		require.True(t, slices.IsSorted(granted), "%v", granted)
		require.GreaterOrEqual(t, failed, 3)
	})

	t.Run("duplicate numbers never make two writers", func(t *testing.T) {
		const dir = "/seq/stuck" // every child gets 2147483647
		a, b := connect(t, srv.ConnectString(), 0), connect(t, srv.ConnectString(), 0)
		la, lb := a.lock(t, dir), b.lock(t, dir)
		ctx := testContext(t)

		ga, errA := la.Lock(ctx)
		if errA != nil {
			t.Logf("a: %v", errA)
			requireFreshDirError(t, errA)
			requireNoNodeOf(t, a, dir)
		} else {
			t.Logf("a: granted %s", nodeName(ga.Node()))
			defer ga.Release(ctx)
		}
		// b must not wait for ever if a holds and b is queued properly.
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		gb, errB := lb.Lock(bctx)
		if errB != nil {
			t.Logf("b: %v", errB)
			requireNoNodeOf(t, b, dir)
		} else {
			t.Logf("b: granted %s", nodeName(gb.Node()))
			defer gb.Release(ctx)
		}
		require.False(t, ga != nil && gb != nil, "two writers hold at once: %s and %s (%s)",
			nameOf(ga), nameOf(gb), describeNodes(a.conn, dir))
		require.Error(t, errA, "a's node got 2147483647, a number any later node shares")
		require.NotErrorIs(t, errB, context.DeadlineExceeded, "b must fail as a did, not wait")
		requireFreshDirError(t, errB)
		require.Empty(t, lockNodes(t, a.conn, dir))
	})

	t.Run("pipelined acquisitions past the top", func(t *testing.T) {
		const dir = "/seq/pipelined"
		ctx := testContext(t)
		op := connect(t, srv.ConnectString(), 0)
		var x exclusion
		type result struct {
			node string
			err  error
		}
		var (
			mu      sync.Mutex
			results []result
			wg      sync.WaitGroup
		)
		var logs debugLog
		for range 3 {
			c := connect(t, srv.ConnectString(), 0)
			l := c.lock(t, dir, rwlock.WithLogger(logs.logger()))
			for i := range 6 {
				wg.Go(func() {
					mode, acquire := rwlock.Write, l.Lock
					if i%3 == 2 {
						mode, acquire = rwlock.Read, l.RLock
					}
					g, err := acquire(ctx)
					r := result{err: err}
					if err == nil {
						r.node = g.Node()
						x.enter(mode)
						// Hold across a few scheduler slices, so that a
						// second holder, if any, overlaps.
						for range 100 {
							runtime.Gosched()
						}
						x.leave(mode)
						if err := g.Release(ctx); err != nil {
							r.err = fmt.Errorf("release: %w", err)
						}
					}
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		var created []int32
		for _, line := range strings.Split(logs.about("msg=created"), "\n") {
			if i := strings.Index(line, "node="); i >= 0 {
				n, _ := seqOf(strings.Fields(line[i+len("node="):])[0])
				created = append(created, n)
			}
		}
		slices.Sort(created)
		t.Logf("numbers the 18 acquisitions' nodes got: %v", created)
		var unsure []string // granted at or past the top: their place in the queue is not known
		for _, r := range results {
			if r.err != nil {
				t.Logf("failed: %v", r.err)
				continue
			}
			t.Logf("granted %s", nodeName(r.node))
			if n, _ := seqOf(r.node); n < top-3 || n >= top {
				unsure = append(unsure, nodeName(r.node))
			}
		}
		require.Zero(t, x.violations.Load(), "mutual exclusion violated")
		require.Empty(t, unsure, "granted at or past the top of the counter")
		for _, r := range results {
			if r.err != nil {
				requireFreshDirError(t, r.err)
			}
		}
		require.Empty(t, lockNodes(t, op.conn, dir), "every node must be gone")
	})
}

// seqOf parses the sequence number at the end of a lock node name or path
// (after "read-" or "write-"), negative numbers included.
func seqOf(node string) (int32, bool) {
	name := nodeName(node)
	for _, kind := range []string{"write-", "read-"} {
		if i := strings.LastIndex(name, kind); i >= 0 {
			n, err := strconv.ParseInt(name[i+len(kind):], 10, 32)
			return int32(n), err == nil
		}
	}
	return 0, false
}

// seqOfName parses the number ZooKeeper appended to a sequential node
// created with a name ending in "-".
func seqOfName(t *testing.T, p string) int32 {
	t.Helper()
	i := strings.Index(p[strings.LastIndex(p, "/"):], "-") + strings.LastIndex(p, "/")
	n, err := strconv.ParseInt(p[i+1:], 10, 32)
	require.NoError(t, err, p)
	return int32(n)
}

func nameOf(g *rwlock.Grant) string {
	if g == nil {
		return "(none)"
	}
	return nodeName(g.Node())
}

// requireFreshDirError checks that err tells the operator the remedy: a
// fresh lock directory.
func requireFreshDirError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	msg := strings.ToLower(err.Error())
	require.True(t, strings.Contains(msg, "fresh") || strings.Contains(msg, "new lock directory"),
		"the error must name the remedy, a fresh lock directory: %v", err)
}

// requireNoNodeOf checks that no child of dir belongs to c's session.
func requireNoNodeOf(t *testing.T, c *client, dir string) {
	t.Helper()
	for _, name := range lockNodes(t, c.conn, dir) {
		_, st, err := c.conn.Get(dir + "/" + name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		require.NoError(t, err)
		require.NotEqual(t, c.conn.SessionID(), st.EphemeralOwner, "%s/%s is still there", dir, name)
	}
}
