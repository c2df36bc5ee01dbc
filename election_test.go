package rwlock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

func newElectionOn(t *testing.T, c *fakeConn, opts ...Option) *Election {
	t.Helper()
	e, err := newElection(c, dir, opts...)
	require.NoError(t, err)
	t.Cleanup(e.l.background.Wait)
	t.Cleanup(c.close)
	return e
}

// Bad input is an error wrapping a sentinel, never a panic, and leaves no
// node behind.
func TestElectionBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		_, err := NewElection(nil, dir)
		require.ErrorIs(t, err, ErrInvalidArgument)
		s := newFakeServer()
		_, err = newElection(s.conn(), "relative")
		require.ErrorIs(t, err, ErrInvalidPath)
		_, err = newElection(s.conn(), dir, nil)
		require.ErrorIs(t, err, ErrInvalidArgument)

		var zero Election
		_, err = zero.Campaign(ctx, nil)
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, _, err = zero.Leader(ctx)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorIs(t, zero.Proclaim(ctx, nil), ErrNoLeader)
		require.NoError(t, zero.Resign(ctx))
		_, open := <-zero.Observe(ctx)
		require.False(t, open, "a zero Election's Observe is closed at once")

		e := newElectionOn(t, s.conn())
		_, err = e.Campaign(ctx, make([]byte, lockname.MaxValue+1))
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorIs(t, e.Proclaim(ctx, []byte("x")), ErrNoLeader, "no campaign won yet")
		require.NoError(t, e.Resign(ctx), "nothing to resign")
		_, _, err = e.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)

		g, err := e.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		_, err = e.Campaign(ctx, []byte("again"))
		require.ErrorIs(t, err, ErrInvalidArgument, "a second campaign would queue behind itself")
		require.ErrorIs(t, e.Proclaim(ctx, make([]byte, lockname.MaxValue+1)), ErrInvalidArgument)
		require.NoError(t, e.Resign(ctx))
		require.ErrorIs(t, g.Err(), ErrReleased)
		require.ErrorIs(t, e.Proclaim(ctx, []byte("late")), ErrReleased)
		children, _, _ := s.conn().Children(dir)
		require.Empty(t, children)
	})
}

// The leader's value rides in its node, any bytes. Proclaim changes it
// without letting the next candidate in; Resign hands over at once, and
// the old leader's Done is closed before the successor's Campaign returns.
func TestElectionProclaimAndHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		a, b, watcher := newElectionOn(t, s.conn()), newElectionOn(t, s.conn()), newElectionOn(t, s.conn())
		value := []byte("10.0.0.7:8080\nvalue=forged\x00")
		ga, err := a.Campaign(ctx, value)
		require.NoError(t, err)
		got, term, err := watcher.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, value, got, "any bytes, newlines included")
		assert.Equal(t, ga.Token(), term, "the term is the leadership's token")
		data, _, _ := s.conn().Get(ga.Node())
		assert.False(t, lockname.Held(data), "a value cannot pass for a mark")
		assert.True(t, strings.HasPrefix(string(data), "owner="), "the node data stays the lock's")

		next := start(ctx, func(ctx context.Context) (*Grant, error) { return b.Campaign(ctx, []byte("b")) })
		synctest.Wait()
		pending(t, next)
		require.NoError(t, a.Proclaim(ctx, []byte("a2")))
		synctest.Wait()
		pending(t, next) // the change is the leader's, not its end
		got, term, err = watcher.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, "a2", string(got))
		assert.Equal(t, ga.Token(), term, "a Proclaim keeps the term")

		require.NoError(t, a.Resign(ctx))
		r := <-next
		require.NoError(t, r.err)
		select {
		case <-ga.Done():
		default:
			t.Fatal("the old leader was not told before its successor led")
		}
		assert.Greater(t, r.g.Token(), ga.Token(), "terms increase")
		got, term, err = watcher.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, "b", string(got))
		assert.Equal(t, r.g.Token(), term)
		require.NoError(t, r.g.Release(ctx))
	})
}

// A Proclaim on a node deleted by hand writes nothing, and the leadership
// is lost.
func TestProclaimOnADeletedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		e := newElectionOn(t, s.conn())
		g, err := e.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		admin := s.conn()
		t.Cleanup(admin.close)
		// Delete it behind the hold's watch: the hold learns it from the set.
		c := e.l.conn.(*fakeConn)
		var once sync.Once
		c.setBefore(func(op, p string) error {
			if op == "set" {
				once.Do(func() { assert.NoError(t, admin.Delete(g.Node(), -1)) })
			}
			return nil
		})
		err = e.Proclaim(ctx, []byte("b"))
		require.ErrorIs(t, err, ErrLost)
		require.ErrorIs(t, g.Err(), ErrLost)
		_, _, err = admin.Get(g.Node())
		require.ErrorIs(t, err, zk.ErrNoNode)
	})
}

// Observe reports the latest state, never going backwards, and costs no
// request for changes of the queue behind the leader.
func TestObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		a, b, c := newElectionOn(t, s.conn()), newElectionOn(t, s.conn()), newElectionOn(t, s.conn())
		oc := s.conn()
		o := newElectionOn(t, oc)
		var requests sync.Map // op -> count
		count := func() int {
			n := 0
			requests.Range(func(_, v any) bool { n += v.(int); return true })
			return n
		}
		var mu sync.Mutex
		oc.setBefore(func(op, p string) error {
			mu.Lock()
			defer mu.Unlock()
			v, _ := requests.LoadOrStore(op, 0)
			requests.Store(op, v.(int)+1)
			return nil
		})
		octx, stop := context.WithCancel(ctx)
		states := o.Observe(octx)
		expect := func(value string, term int64) {
			t.Helper()
			synctest.Wait()
			select {
			case got := <-states:
				assert.Equal(t, value, string(got.Value))
				assert.Equal(t, term, got.Term)
			default:
				t.Fatalf("no state sent; want %q in term %d", value, term)
			}
			synctest.Wait()
			select {
			case got := <-states:
				t.Fatalf("a state more: %q in term %d", got.Value, got.Term)
			default:
			}
		}
		expect("", 0) // nobody leads yet
		ga, err := a.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		expect("a", ga.Token())

		before := count()
		waitB := start(ctx, func(ctx context.Context) (*Grant, error) { return b.Campaign(ctx, []byte("b")) })
		synctest.Wait() // b queues first: c, which gives up, comes behind it
		cctx, cancelC := context.WithCancel(ctx)
		waitC := start(cctx, func(ctx context.Context) (*Grant, error) { return c.Campaign(ctx, []byte("c")) })
		synctest.Wait()
		cancelC()
		require.ErrorIs(t, (<-waitC).err, context.Canceled)
		synctest.Wait()
		assert.Equal(t, before+1, count(), "the first candidate behind a lone leader costs a listing; the queue's other changes nothing")

		before = count()
		require.NoError(t, a.Proclaim(ctx, []byte("a2")))
		expect("a2", ga.Token())
		assert.Equal(t, before+2, count(), "a Proclaim costs a read, and a read of the listed successor")

		before = count()
		require.NoError(t, a.Resign(ctx))
		r := <-waitB
		require.NoError(t, r.err)
		expect("b", r.g.Token())
		assert.LessOrEqual(t, count()-before, 3, "a change of leader costs at most three requests")

		// A leader that vanishes (its session expired) hands over too.
		before = count()
		r.g.h.c.Conn().(*fakeConn).serverExpire()
		expect("", 0)
		assert.LessOrEqual(t, count()-before, 3)
		stop()
		for range states {
		}
	})
}

// observed is what an Observe call reported, and when, until its channel
// closed (done).
type observed struct {
	mu   sync.Mutex
	got  []Leadership
	at   []time.Time
	done chan struct{}
}

// collect reads states until the channel closes.
func collect(states <-chan Leadership) *observed {
	o := &observed{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for st := range states {
			o.mu.Lock()
			o.got, o.at = append(o.got, st), append(o.at, time.Now())
			o.mu.Unlock()
		}
	}()
	return o
}

// states returns what was reported so far.
func (o *observed) states() []Leadership {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// first returns when term was first reported.
func (o *observed) first(term int64) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, st := range o.got {
		if st.Term == term {
			return o.at[i], true
		}
	}
	return time.Time{}, false
}

// A leader that waited releases with its mark, a data change. The
// observer, which listed the successor when it queued, reads the head and
// the successor together: it reports the new leader one round trip after
// the notification that tells the successor it leads, not two. Each of
// the observer's requests takes trip; the others' take no time.
func TestObserverReadsTheSuccessorBesideTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const trip = time.Millisecond
		ctx := t.Context()
		s := newFakeServer()
		oc := s.conn()
		oc.setBefore(func(op, p string) error {
			time.Sleep(trip)
			return nil
		})
		octx, stop := context.WithCancel(ctx)
		seen := collect(newElectionOn(t, oc).Observe(octx))
		// settle lets the observer finish what it does, its round trips
		// included.
		settle := func() {
			time.Sleep(10 * trip)
			synctest.Wait()
		}

		first, a, b := newElectionOn(t, s.conn()), newElectionOn(t, s.conn()), newElectionOn(t, s.conn())
		_, err := first.Campaign(ctx, []byte("first"))
		require.NoError(t, err)
		waitA := start(ctx, func(ctx context.Context) (*Grant, error) { return a.Campaign(ctx, []byte("a")) })
		settle()
		require.NoError(t, first.Resign(ctx))
		ra := <-waitA
		require.NoError(t, ra.err) // a waited: its release marks its node
		waitB := start(ctx, func(ctx context.Context) (*Grant, error) { return b.Campaign(ctx, []byte("b")) })
		settle()

		require.NoError(t, a.Resign(ctx))
		rb := <-waitB
		require.NoError(t, rb.err)
		returned := time.Now()
		settle()
		at, ok := seen.first(rb.g.Token())
		require.True(t, ok, "the observer never reported the new leader")
		assert.Equal(t, trip, at.Sub(returned), "the observer's lag behind the new leader's Campaign")
		require.NoError(t, b.Resign(ctx))
		stop()
		<-seen.done
		settle() // the requests under way when it stopped
	})
}

// A candidate S queued behind leader H gives up while H leads; H then
// resigns. S never led: H led, then nobody. The observer, told of H's
// Proclaim, reads S and H in parallel; S's read is answered first (S
// still there), H's after both went. The observer must not report S.
func TestObserverNeverReportsACandidateThatNeverLed(t *testing.T) {
	bogus := 0
	const rounds = 16
	for range rounds {
		synctest.Test(t, func(t *testing.T) {
			ctx := t.Context()
			s := newFakeServer()
			oc := s.conn()
			h, sc := newElectionOn(t, s.conn()), newElectionOn(t, s.conn())
			gh, err := h.Campaign(ctx, []byte("h"))
			require.NoError(t, err)
			sctx, cancelS := context.WithCancel(ctx)
			waitS := start(sctx, func(ctx context.Context) (*Grant, error) { return sc.Campaign(ctx, []byte("s")) })
			synctest.Wait()

			octx, stop := context.WithCancel(ctx)
			seen := collect(newElectionOn(t, oc).Observe(octx))
			synctest.Wait() // the observer shows h and has listed s behind it

			proceed := make(chan struct{})
			var once sync.Once
			oc.setBefore(func(op, p string) error {
				if op == "get" && p == gh.Node() {
					once.Do(func() { <-proceed }) // the head's read comes late
				}
				return nil
			})
			require.NoError(t, h.Proclaim(ctx, []byte("h2")))
			synctest.Wait() // the successor's read is answered; the head's waits
			cancelS()
			require.ErrorIs(t, (<-waitS).err, context.Canceled)
			require.NoError(t, h.Resign(ctx))
			close(proceed)
			synctest.Wait()
			stop()
			<-seen.done

			got := seen.states()
			for _, st := range got {
				if st.Term != 0 && st.Term != gh.Token() {
					bogus++
					t.Logf("reported %q in term %d, a candidate that never led (states: %v)", st.Value, st.Term, got)
				}
			}
			require.Equal(t, int64(0), got[len(got)-1].Term, "nobody leads at the end")
		})
	}
	require.Zero(t, bogus, "rounds (of %d) in which the observer reported a leader that never led", rounds)
}

// A leader that waited releases with its mark while the listed successor
// has given up. The observer reads both together and learns both are
// gone; it should not then read the successor again.
func TestObserverDoesNotReadAGoneSuccessorTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		oc := s.conn()
		first, h, sc, tc := newElectionOn(t, s.conn()), newElectionOn(t, s.conn()), newElectionOn(t, s.conn()), newElectionOn(t, s.conn())
		gf, err := first.Campaign(ctx, []byte("first"))
		require.NoError(t, err)
		waitH := start(ctx, func(ctx context.Context) (*Grant, error) { return h.Campaign(ctx, []byte("h")) })
		synctest.Wait()
		require.NoError(t, gf.Release(ctx))
		rh := <-waitH
		require.NoError(t, rh.err) // h waited: its release marks its node

		octx, stop := context.WithCancel(ctx)
		seen := collect(newElectionOn(t, oc).Observe(octx))
		synctest.Wait()
		sctx, cancelS := context.WithCancel(ctx)
		waitS := start(sctx, func(ctx context.Context) (*Grant, error) { return sc.Campaign(ctx, []byte("s")) })
		synctest.Wait() // the observer lists s behind h
		cancelS()
		require.ErrorIs(t, (<-waitS).err, context.Canceled)
		waitT := start(ctx, func(ctx context.Context) (*Grant, error) { return tc.Campaign(ctx, []byte("t")) })
		synctest.Wait()

		var mu sync.Mutex
		var ops []string
		gone := map[string]bool{}
		var wasted []string
		oc.setAfter(func(op, p string, err error) error {
			mu.Lock()
			defer mu.Unlock()
			ops = append(ops, op+" "+p+" "+fmt.Sprint(err))
			if op == "get" {
				if gone[p] {
					wasted = append(wasted, p)
				}
				if errors.Is(err, zk.ErrNoNode) {
					gone[p] = true
				}
			}
			return err
		})
		require.NoError(t, rh.g.Release(ctx))
		rt := <-waitT
		require.NoError(t, rt.err)
		synctest.Wait()
		mu.Lock()
		t.Logf("requests after h's release:\n%s", strings.Join(ops, "\n"))
		assert.Empty(t, wasted, "nodes read again after a read found them gone")
		mu.Unlock()
		got := seen.states()
		assert.Equal(t, "t", string(got[len(got)-1].Value))
		require.NoError(t, rt.g.Release(ctx))
		stop()
		<-seen.done
	})
}

// The observer's guard: a state older than one shown is never reported.
func TestObserverNeverGoesBackwards(t *testing.T) {
	var o observer
	steps := []struct {
		now  headRead
		want bool
	}{
		{headRead{Leadership{Term: 0}, 0}, true},
		{headRead{Leadership{Term: 0}, 0}, false},
		{headRead{Leadership{Term: 7}, 0}, true},
		{headRead{Leadership{Term: 7}, 0}, false},
		{headRead{Leadership{Term: 7}, 1}, true},
		{headRead{Leadership{Term: 5}, 3}, false},
		{headRead{Leadership{Term: 0}, 0}, true},
		{headRead{Leadership{Term: 7}, 2}, false},
		{headRead{Leadership{Term: 9}, 0}, true},
	}
	for i, s := range steps {
		got := o.newer(s.now)
		require.Equal(t, s.want, got, "step %d", i)
		if got {
			o.show(s.now)
		}
	}
}

// The term is the leadership's token and the czxid observers read, even
// where the lock would take a stand-in for its token: a listing's pzxid,
// when a node went between our create and the listing behind it.
func TestCampaignTermIsTheNodesCzxid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		first, watcher := newElectionOn(t, s.conn()), newElectionOn(t, s.conn())
		old, err := first.Campaign(ctx, []byte("old"))
		require.NoError(t, err)
		admin := s.conn()
		t.Cleanup(admin.close)
		c := s.conn()
		e := newElectionOn(t, c)
		gone := make(chan struct{})
		c.setAfter(func(op, p string, err error) error {
			if op == "create" && err == nil && strings.HasPrefix(p, dir+"/") {
				assert.NoError(t, admin.Delete(old.Node(), -1)) // a deletion after our create: pzxid moves past our czxid
				close(gone)
			}
			return err
		})
		c.setBefore(func(op, p string) error {
			if op == "children" {
				<-gone
			}
			return nil
		})
		g, err := e.Campaign(ctx, []byte("new"))
		require.NoError(t, err)
		_, st, err := admin.Get(g.Node())
		require.NoError(t, err)
		assert.Equal(t, st.Czxid, g.Token(), "the term is the node's czxid")
		_, term, err := watcher.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, g.Token(), term, "observers read the same term")
		require.NoError(t, e.Resign(ctx))
		// The old leader's node was deleted under it: it must hear so. Its
		// goroutines then end before the bubble's time stops with this
		// function.
		<-old.Done()
	})
}

// A reader of the election's path, queued behind the leader, must not be
// let in by the leader's Proclaim: the leader still holds its write.
func TestReaderBehindLeaderNotLetInByProclaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		a := newElectionOn(t, s.conn())
		ga, err := a.Campaign(ctx, []byte("a"))
		require.NoError(t, err)
		r := newLock(t, s.conn())
		next := start(ctx, r.RLock)
		synctest.Wait()
		pending(t, next)
		require.NoError(t, a.Proclaim(ctx, []byte("a2")))
		synctest.Wait()
		pending(t, next) // the leader still holds; a reader must wait
		require.NoError(t, ga.Err())
		require.NoError(t, a.Resign(ctx))
		res := <-next
		require.NoError(t, res.err)
		require.NoError(t, res.g.Release(ctx))
	})
}

// Candidates an observer listed that gave up cost it no walk: when the
// leader goes, it reads at most one listed node found gone before it lists
// again, so a change of leader costs a bounded number of requests.
func TestObserverDoesNotWalkGoneCandidates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		leader := newElectionOn(t, s.conn())
		oc := s.conn()
		o := newElectionOn(t, oc)
		var mu sync.Mutex
		requests := 0
		oc.setBefore(func(op, p string) error {
			mu.Lock()
			defer mu.Unlock()
			requests++
			return nil
		})
		count := func() int { mu.Lock(); defer mu.Unlock(); return requests }
		g, err := leader.Campaign(ctx, []byte("leader"))
		require.NoError(t, err)
		const gaveUp = 8
		var cancels []context.CancelFunc
		var waits []<-chan result
		for i := range gaveUp + 1 {
			e := newElectionOn(t, s.conn())
			cctx, cancel := context.WithCancel(ctx)
			cancels = append(cancels, cancel)
			waits = append(waits, start(cctx, func(ctx context.Context) (*Grant, error) { return e.Campaign(ctx, []byte(fmt.Sprint("c", i))) }))
			synctest.Wait()
		}
		octx, stop := context.WithCancel(ctx)
		states := o.Observe(octx)
		synctest.Wait()
		require.Equal(t, "leader", string((<-states).Value))
		for i := range gaveUp {
			cancels[i]()
			require.ErrorIs(t, (<-waits[i]).err, context.Canceled)
		}
		synctest.Wait()
		before := count()
		require.NoError(t, g.Release(ctx))
		r := <-waits[gaveUp]
		require.NoError(t, r.err)
		synctest.Wait()
		require.Equal(t, fmt.Sprint("c", gaveUp), string((<-states).Value))
		assert.LessOrEqual(t, count()-before, 3, "a change of leader costs at most three requests, however many listed candidates gave up")
		require.NoError(t, r.g.Release(ctx))
		cancels[gaveUp]()
		stop()
		for range states {
		}
	})
}

// Observers hear of a Campaign as a write acquisition with Campaign set,
// and of its term as a write grant with Term set; a lost term has its
// Loss, a Resign none. A plain write grant and a downgraded term are no
// terms.
func TestElectionObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := newFakeServer()
		var r recorder
		e := newElectionOn(t, s.conn(), WithObserver(&r))
		g, err := e.Campaign(ctx, []byte("v"))
		require.NoError(t, err)
		require.NoError(t, e.Resign(ctx))
		g, err = e.Campaign(ctx, []byte("v"))
		require.NoError(t, err)
		require.NoError(t, s.conn().Delete(g.Node(), -1)) // by hand
		synctest.Wait()
		<-g.Done()
		d, err := e.Campaign(ctx, []byte("v"))
		require.NoError(t, err)
		rd, err := d.Downgrade(ctx)
		require.NoError(t, err)
		require.NoError(t, rd.Release(ctx))

		r.mu.Lock()
		defer r.mu.Unlock()
		require.Len(t, r.acquires, 3)
		for _, a := range r.acquires {
			assert.True(t, a.Campaign)
			assert.Equal(t, Write, a.Mode)
		}
		require.Len(t, r.grants, 4)
		assert.True(t, r.grants[0].Term)
		assert.Empty(t, r.grants[0].Loss, "a Resign is a release")
		assert.True(t, r.grants[1].Term)
		assert.Equal(t, "node_deleted", r.grants[1].Loss)
		assert.True(t, r.grants[2].Term, "the term ends at its Downgrade")
		assert.Equal(t, Read, r.grants[3].Mode)
		assert.False(t, r.grants[3].Term, "a downgraded term leads nobody")
	})
}

// An observer writes nothing: on a path that does not exist it reports
// that nobody leads, and makes no directory. Once a Campaign makes it, the
// observer reports the leader. Leader makes nothing either.
func TestObserveMakesNoDirectory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s := newFakeServer()
		watcher := newElectionOn(t, s.conn())
		states := watcher.Observe(ctx)
		require.Equal(t, Leadership{}, <-states, "nobody leads")
		synctest.Wait()
		_, _, err := watcher.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)
		for _, p := range []string{dir, path.Dir(dir)} {
			_, _, err := s.conn().Get(p)
			require.ErrorIs(t, err, zk.ErrNoNode, "%s made by a reader", p)
		}

		g, err := newElectionOn(t, s.conn()).Campaign(ctx, []byte("v"))
		require.NoError(t, err)
		got := <-states
		assert.Equal(t, g.Token(), got.Term)
		assert.Equal(t, "v", string(got.Value))
		require.NoError(t, g.Release(ctx))
		assert.Equal(t, int64(0), (<-states).Term)
		cancel()
		for range states {
		}
	})
}
