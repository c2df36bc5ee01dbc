package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// A writer queued behind a writer and a run of readers watches them all,
// and is granted on the last reader's deletion: its one listing is the
// first (its debug log names each listing that found its node). The writer
// ahead waited, so it marks its node as it goes, which tells the writer
// behind that the reader before it is gone too.
func TestWriterBehindReadersListsOnce(t *testing.T) {
	srv := sharedServer(t)
	p := zktest.LockPath(t, "/it")
	ctx := testContext(t)
	var x exclusion
	hold := func(a *acquisition, m rwlock.Mode) *rwlock.Grant {
		t.Helper()
		g := a.granted(t, 30*time.Second)
		x.enter(m)
		return g
	}
	release := func(g *rwlock.Grant) {
		t.Helper()
		x.leave(g.Mode())
		require.NoError(t, g.Release(ctx))
	}

	var sessions []string
	var l *rwlock.RWLock
	var log debugLog
	queue := func(m rwlock.Mode, opts ...rwlock.Option) *acquisition {
		c := connect(t, srv.ConnectString(), 0)
		sessions = append(sessions, sessionHex(c.conn.SessionID()))
		l = c.lock(t, p, opts...)
		acquire := l.RLock
		if m == rwlock.Write {
			acquire = l.Lock
		}
		a := goAcquire(t, ctx, acquire)
		waitQueue(t, l, len(sessions)) // queue them one by one, in this order
		return a
	}
	r0 := hold(queue(rwlock.Read), rwlock.Read)
	w0 := queue(rwlock.Write)
	var readers []*acquisition
	for range 3 {
		readers = append(readers, queue(rwlock.Read))
	}
	w := queue(rwlock.Write, rwlock.WithLogger(log.logger()))

	// Everyone watches before anyone goes: else a node may be gone before
	// it is watched, and its mark unread.
	q := waitQueue(t, l, 6)
	want := map[string][]string{}
	watch := func(node int, by ...int) {
		for _, i := range by {
			want[q[node].Node] = append(want[q[node].Node], sessions[i])
		}
		slices.Sort(want[q[node].Node])
	}
	watch(0, 1)          // w0 waits for r0
	watch(1, 2, 3, 4, 5) // the readers for w0, and w
	watch(2, 5)
	watch(3, 5)
	watch(4, 5) // w watches the whole run
	var got map[string][]string
	zktest.Poll(t, 20*time.Second, func() bool {
		got = lockWatchers(t, srv, p)
		for node, ids := range got {
			if !strings.HasPrefix(node, p+"/") {
				delete(got, node) // the directory's watchers: first listings, holders
				continue
			}
			// A node's own session watches it too; the others are the point.
			owner := sessions[slices.IndexFunc(q, func(e rwlock.Entry) bool { return e.Node == node })]
			if got[node] = slices.DeleteFunc(ids, func(id string) bool { return id == owner }); len(got[node]) == 0 {
				delete(got, node)
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, func() string { return fmt.Sprintf("who watches what: %v, want %v", got, want) })

	release(r0)
	release(hold(w0, rwlock.Write))
	var held []*rwlock.Grant
	for _, r := range readers {
		held = append(held, hold(r, rwlock.Read))
	}
	for _, g := range held {
		w.stillWaiting(t, "a reader ahead still holds")
		release(g)
	}
	release(hold(w, rwlock.Write))
	assert.Zero(t, x.violations.Load())
	assert.Equal(t, 1, strings.Count(log.about(`msg=listed`), "\n"), "listings that found w's node:\n%s", log.about(""))
	assert.Contains(t, log.about("waiting for the run ahead"), "run ahead")
}
