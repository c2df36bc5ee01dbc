package rwlock

import (
	"bytes"
	"log/slog"
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

// Peers' nodes, as their libraries name them (with the number ZooKeeper
// appends left out).
var peerNodes = []struct {
	prefix string
	mode   Mode
	family Dialect
}{
	{"_c_" + uuid + "-__READ__", Read, DialectCurator},
	{"_c_" + uuid + "-__WRIT__", Write, DialectCurator},
	{"_c_" + uuid + "-lock-", Write, DialectMutex},
	{"_c_" + guid + "-lock-", Write, DialectMutex},
	{guid + "__rlock__", Read, DialectKazoo},
	{guid + "__lock__", Write, DialectKazoo},
}

// peerNode creates a node as a peer would, with data of its own, and
// returns its name.
func peerNode(t *testing.T, c *fakeConn, prefix string, data string) string {
	t.Helper()
	p, err := c.Create(dir+"/"+prefix, []byte(data), zk.FlagEphemeral|zk.FlagSequence, nil)
	require.NoError(t, err)
	return p[len(dir)+1:]
}

// Every peer's node queues like one of ours of its mode, in every dialect
// that the peer sees (see TestRefusesPeersThatDoNotSeeUs for the others):
// a writer blocks everyone after it, a reader blocks writers.
func TestPeersQueue(t *testing.T) {
	for d := range Dialect(numDialects) {
		for _, p := range peerNodes {
			if n, _ := parseNode(p.prefix + "0000000001"); (&RWLock{dialect: d}).blind(1<<n.marker) != nil {
				continue
			}
			t.Run(d.String()+"/"+p.prefix, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newFakeServer()
					ctx := t.Context()
					l := newLock(t, s.conn(), WithDialect(d))
					g, err := l.Lock(ctx) // makes the directory
					require.NoError(t, err)
					require.NoError(t, g.Release(ctx))
					peer := s.conn()
					name := peerNode(t, peer, p.prefix, "10.0.0.7")

					r := start(ctx, newLock(t, s.conn(), WithDialect(d)).RLock)
					synctest.Wait()
					var rg *Grant
					if p.mode == Read {
						rg = granted(t, r) // readers share with a peer's reader
					} else {
						pending(t, r)
					}
					w := start(ctx, l.Lock)
					synctest.Wait()
					pending(t, w)

					q, err := l.Queue(ctx)
					require.NoError(t, err)
					require.Len(t, q, 3)
					assert.Equal(t, dir+"/"+name, q[0].Node)
					assert.Equal(t, p.mode, q[0].Mode)
					assert.Equal(t, p.family, q[0].Family)
					assert.True(t, q[0].Peer)
					assert.Equal(t, "10.0.0.7", q[0].Owner)
					assert.True(t, q[0].Held)
					assert.False(t, q[1].Peer)
					assert.Equal(t, d, q[1].Family)

					require.NoError(t, peer.Delete(dir+"/"+name, -1)) // the peer releases
					synctest.Wait()
					if rg == nil {
						rg = granted(t, r)
					}
					pending(t, w)
					require.NoError(t, rg.Release(ctx))
					synctest.Wait()
					require.NoError(t, granted(t, w).Release(ctx))
					assert.Empty(t, s.lockNodes(dir))
				})
			})
		}
	}
}

// The marks in our nodes' data (held, downgraded) are trusted only on our
// own nodes: a peer's data that happens to read like them, or changes,
// lets no one in.
func TestPeersMarksAreNotTrusted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		lock := func() *RWLock { return newLock(t, s.conn(), WithDialect(DialectCurator)) }
		peer := s.conn()
		marks := string(lockname.Data("forged", 0, lockname.MarkHeld|lockname.MarkDowngraded))
		g, err := lock().Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		p0 := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", marks)
		try, err := lock().TryRLock(ctx)
		require.ErrorIs(t, err, ErrWouldBlock, "a peer's mode=read is no downgrade")
		assert.Nil(t, try)
		require.NoError(t, peer.Delete(dir+"/"+p0, -1))

		first, err := lock().Lock(ctx)
		require.NoError(t, err)
		p1 := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", marks)
		reader := start(ctx, lock().RLock)
		synctest.Wait()

		// The peer in front of a writer of ours writes the marks, and goes:
		// the writer must not take that for a sign that the nodes before
		// it are gone.
		p2 := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", "")
		writer := start(ctx, lock().Lock)
		synctest.Wait()
		_, err = peer.Set(dir+"/"+p2, []byte(marks), -1)
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, peer.Delete(dir+"/"+p2, -1))
		synctest.Wait()
		pending(t, reader)
		pending(t, writer)

		q, err := first.h.l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 4)
		assert.Equal(t, Write, q[1].Mode, "a peer's node is never shown downgraded")

		require.NoError(t, first.Release(ctx))
		synctest.Wait()
		pending(t, reader)
		pending(t, writer)
		require.NoError(t, peer.Delete(dir+"/"+p1, -1))
		synctest.Wait()
		rg := granted(t, reader)
		pending(t, writer)
		require.NoError(t, rg.Release(ctx))
		synctest.Wait()
		require.NoError(t, granted(t, writer).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// Downgrade in a peer dialect keeps the node and its writer's name: our
// readers join, and peers, which do not read the mark, wait for the node to
// go (here a peer's writer behind a reader of ours).
func TestDowngradeInAPeerDialect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn(), WithDialect(DialectCurator))
		w, err := l.Lock(ctx)
		require.NoError(t, err)
		reader := start(ctx, newLock(t, s.conn(), WithDialect(DialectCurator)).RLock)
		synctest.Wait()
		peer := s.conn()
		pw := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", "")
		late := start(ctx, newLock(t, s.conn(), WithDialect(DialectCurator)).RLock)
		synctest.Wait()

		r, err := w.Downgrade(ctx)
		require.NoError(t, err)
		assert.Contains(t, r.Node(), "-__WRIT__", "the node keeps its name: peers see a writer")
		synctest.Wait()
		joined := granted(t, reader)
		pending(t, late) // behind the peer's writer
		require.NoError(t, joined.Release(ctx))
		require.NoError(t, r.Release(ctx))
		require.NoError(t, peer.Delete(dir+"/"+pw, -1))
		synctest.Wait()
		require.NoError(t, granted(t, late).Release(ctx))
		assert.Empty(t, s.lockNodes(dir))
	})
}

// syncBuffer is an io.Writer for a logger that goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A mixed fleet fails loudly: an acquisition that lists a node of a peer
// that does not see its names refuses to queue, leaving no node, with an
// error that names the dialect to use, and Queue warns once; a peer that
// sees them, or one of our own nodes in another dialect, is no error.
func TestRefusesPeersThatDoNotSeeUs(t *testing.T) {
	tests := []struct {
		dialect Dialect
		peer    string // "" for one of our own nodes in another dialect
		refuses string // who, or "" for none
		fix     string
	}{
		{DialectNative, "_c_" + uuid + "-__WRIT__", "Curator InterProcessReadWriteLock", "WithDialect(DialectCurator)"},
		{DialectNative, "_c_" + guid + "-lock-", "Curator InterProcessMutex or go-zookeeper zk.Lock", "WithDialect(DialectMutex)"},
		// kazoo's default locks do not count native names, and with
		// extra_lock_patterns their nodes look the same.
		{DialectNative, guid + "__lock__", "kazoo WriteLock or Lock", "WithDialect(DialectKazooLock); or WithDialect(DialectKazoo) if no kazoo Lock uses the path; or WithDialect(DialectKazooPatterns) if every kazoo lock there is made with extra_lock_patterns"},
		{DialectNative, guid + "__rlock__", "kazoo ReadLock", "WithDialect(DialectKazooLock); or WithDialect(DialectKazoo) if no kazoo Lock uses the path; or WithDialect(DialectKazooPatterns) if every kazoo lock there is made with extra_lock_patterns"},
		{DialectNative, "write-", "", ""},
		{DialectKazooPatterns, guid + "__lock__", "", ""},
		{DialectKazooPatterns, guid + "__rlock__", "", ""},
		{DialectKazooPatterns, "write-", "", ""},
		{DialectKazooPatterns, "_c_" + guid + "-__lock__", "", ""},
		{DialectKazooPatterns, "_c_" + uuid + "-__WRIT__", "Curator InterProcessReadWriteLock", "WithDialect(DialectCurator)"},
		{DialectCurator, "_c_" + uuid + "-__READ__", "", ""},
		{DialectCurator, guid + "__rlock__", "kazoo ReadLock", "WithDialect(DialectKazooLock); or WithDialect(DialectKazoo) if no kazoo Lock uses the path"},
		{DialectCurator, "write-", "unprotected read-/write- names", "WithDialect(DialectNative)"},
		{DialectCurator, "_c_" + guid + "-write-", "", ""},
		{DialectMutex, "_c_" + uuid + "-lock-", "", ""},
		{DialectMutex, "_c_" + uuid + "-__WRIT__", "Curator InterProcessReadWriteLock", "WithDialect(DialectCurator)"},
		{DialectKazoo, guid + "__lock__", "", ""},
		{DialectKazoo, "_c_" + uuid + "-lock-", "Curator InterProcessMutex or go-zookeeper zk.Lock", "WithDialect(DialectMutex)"},
		{DialectKazooLock, guid + "__lock__", "", ""},
		{DialectKazooLock, guid + "__rlock__", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.dialect.String()+"/"+tc.peer, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				ctx := t.Context()
				var log syncBuffer
				logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
				l := newLock(t, s.conn(), WithDialect(tc.dialect), WithLogger(logger))
				g, err := l.Lock(ctx)
				require.NoError(t, err)
				require.NoError(t, g.Release(ctx))
				peer := peerNode(t, s.conn(), tc.peer, "")
				for range 3 {
					g, err := l.TryRLock(ctx)
					switch {
					case err == nil:
						require.NoError(t, g.Release(ctx))
					case tc.refuses == "":
						require.ErrorIs(t, err, ErrWouldBlock)
					default:
						require.ErrorIs(t, err, ErrInvalidArgument)
						assert.Contains(t, err.Error(), tc.refuses)
						assert.Contains(t, err.Error(), tc.fix)
						assert.Contains(t, err.Error(), "this lock's "+tc.dialect.String()+" names")
					}
					assert.Equal(t, []string{peer}, s.lockNodes(dir), "no node of ours is left")
					_, err = l.Queue(ctx)
					require.NoError(t, err)
				}
				if tc.refuses == "" {
					assert.Empty(t, log.String())
					return
				}
				assert.Equal(t, 1, strings.Count(log.String(), "level=WARN"), log.String())
				assert.Contains(t, log.String(), tc.refuses)
			})
		})
	}
}

// The advice of a mixed-fleet error: first a dialect that every peer there
// counts, whoever else uses the path; then, each with its condition, the
// dialects that declare what the path's kazoo locks count. kazoo's Lock
// makes __lock__ nodes as WriteLock does and does not count __rlock__, so
// DialectKazoo is never offered without "no kazoo Lock".
func TestMixedFleetAdvice(t *testing.T) {
	const (
		kazooLock     = "give every zkrwlock client of the path WithDialect(DialectKazooLock)"
		noKazooLock   = "; or WithDialect(DialectKazoo) if no kazoo Lock uses the path"
		kazooPatterns = "WithDialect(DialectKazooPatterns) if every kazoo lock there is made with " +
			`extra_lock_patterns, ("write-", "read-") for WriteLock and Lock and ("write-",) for ReadLock (see docs/peers.md)`
	)
	tests := []struct {
		dialect Dialect
		markers []string // the peers' markers on the path
		fix     string
	}{
		{DialectNative, []string{"__lock__"}, kazooLock + noKazooLock + "; or " + kazooPatterns},
		{DialectNative, []string{"__rlock__"}, kazooLock + noKazooLock + "; or " + kazooPatterns},
		{DialectNative, []string{"__rlock__", "__lock__"}, kazooLock + noKazooLock + "; or " + kazooPatterns},
		{DialectMutex, []string{"__lock__"}, kazooLock + noKazooLock + "; or " + kazooPatterns},
		{DialectCurator, []string{"write-"}, "give every zkrwlock client of the path WithDialect(DialectNative)"},
		{DialectCurator, []string{"write-", "__lock__"}, "give every zkrwlock client of the path " + kazooPatterns +
			"; else keep one family of lock on the path"},
		{DialectNative, []string{"__WRIT__"}, "give every zkrwlock client of the path WithDialect(DialectCurator)"},
		{DialectNative, []string{"__WRIT__", "__lock__"}, "keep one family of lock on the path"},
		{DialectKazoo, []string{"lock-"}, "give every zkrwlock client of the path WithDialect(DialectMutex)"},
	}
	for _, tc := range tests {
		var peers uint16
		for _, text := range tc.markers {
			i := slices.IndexFunc(lockname.Markers[:], func(m lockname.Marker) bool { return m.Text == text })
			require.GreaterOrEqual(t, i, 0, text)
			peers |= 1 << i
		}
		m := (&RWLock{dialect: tc.dialect}).blind(peers)
		require.NotNil(t, m, "%v %v", tc.dialect, tc.markers)
		_, fix, ok := strings.Cut(m.detail(), "does not hold: ")
		require.True(t, ok, m.detail())
		assert.Equal(t, tc.fix, fix, "%v %v", tc.dialect, tc.markers)
	}
}

// A holder hears of a blind peer's node that comes after its grant within
// fleetInterval (the fake's round trip takes no time), and its grant is
// lost with a cause that names the dialect to use; its node goes. Every
// way of holding: granted at once, after waiting, downgraded, several
// grants of one process. The peers: a Curator writer, and a reader of
// kazoo's default ReadLock, which does not count native names either.
func TestHolderLosesToABlindPeer(t *testing.T) {
	peers := map[string]string{ // the peer's node -> the dialect to use
		"_c_" + uuid + "-__WRIT__": "WithDialect(DialectCurator)",
		guid + "__rlock__":         "WithDialect(DialectKazooLock); or WithDialect(DialectKazoo) if no kazoo Lock uses the path",
	}
	holds := map[string]func(t *testing.T, s *fakeServer, l *RWLock) []*Grant{
		"at once": func(t *testing.T, _ *fakeServer, l *RWLock) []*Grant {
			g, err := l.Lock(t.Context())
			require.NoError(t, err)
			return []*Grant{g}
		},
		"after waiting": func(t *testing.T, s *fakeServer, l *RWLock) []*Grant {
			first, err := newLock(t, s.conn()).Lock(t.Context())
			require.NoError(t, err)
			w := start(t.Context(), l.Lock)
			synctest.Wait()
			require.NoError(t, first.Release(t.Context()))
			synctest.Wait()
			return []*Grant{granted(t, w)}
		},
		"downgraded": func(t *testing.T, _ *fakeServer, l *RWLock) []*Grant {
			g, err := l.Lock(t.Context())
			require.NoError(t, err)
			r, err := g.Downgrade(t.Context())
			require.NoError(t, err)
			return []*Grant{r}
		},
		"three readers": func(t *testing.T, _ *fakeServer, l *RWLock) []*Grant {
			var gs []*Grant
			for range 3 {
				g, err := l.RLock(t.Context())
				require.NoError(t, err)
				gs = append(gs, g)
			}
			return gs
		},
	}
	for name, hold := range holds {
		for prefix, fix := range peers {
			t.Run(name+"/"+prefix, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newFakeServer()
					l := newLock(t, s.conn())
					gs := hold(t, s, l)
					synctest.Wait()
					for _, g := range gs {
						require.NoError(t, g.Err())
					}
					peer := peerNode(t, s.conn(), prefix, "")
					time.Sleep(fleetInterval)
					synctest.Wait()
					for _, g := range gs {
						require.True(t, isClosed(g.Done()), "told")
						require.ErrorIs(t, g.Err(), ErrLost)
						require.ErrorIs(t, g.Err(), ErrInvalidArgument)
						assert.Contains(t, g.Err().Error(), fix)
					}
					assert.Equal(t, []string{peer}, s.lockNodes(dir), "the holders' nodes went")
				})
			})
		}
	}
}

// In DialectKazooPatterns, kazoo's nodes are a peer's that counts ours: a
// holder keeps its grant when one comes, and Queue shows it waiting, not
// blind. Read in the native dialect, the same queue is a mixed fleet, and
// the kazoo writer holds as far as kazoo can tell.
func TestKazooPatternsDeclaresKazooSeesUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn(), WithDialect(DialectKazooPatterns))
		g, err := l.Lock(ctx)
		require.NoError(t, err)
		assert.Regexp(t, `/_c_[0-9a-f]{32}-write-\d{10}$`, g.Node(), "native names")
		kazoo := peerNode(t, s.conn(), guid+"__lock__", "")
		synctest.Wait()
		require.NoError(t, g.Err())
		require.False(t, isClosed(g.Done()))

		q, err := l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 2)
		assert.Equal(t, DialectKazooPatterns, q[0].Family)
		assert.True(t, q[0].Held)
		assert.Equal(t, dir+"/"+kazoo, q[1].Node)
		assert.False(t, q[1].Held, "kazoo counts our writer")
		assert.False(t, q[1].Blind)

		q, err = newLock(t, s.conn()).Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 2)
		assert.Equal(t, DialectNative, q[0].Family)
		assert.True(t, q[0].Held)
		assert.True(t, q[1].Held, "kazoo's default WriteLock does not count our writer")
		assert.True(t, q[1].Blind)

		require.NoError(t, g.Release(ctx))
		assert.Equal(t, []string{kazoo}, s.lockNodes(dir))
	})
}

// The holders' watch costs nothing while the directory does not change, and
// at most one listing per interval while it does and a process holds,
// whatever its grants.
func TestHolderPeerWatchCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		l := newLock(t, c)
		warm, err := l.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		for range 3 {
			assert.Equal(t, int64(3), c.cost(func() {
				g, err := l.Lock(ctx)
				require.NoError(t, err)
				require.NoError(t, g.Release(ctx))
			}), "Lock and Release: create, list, delete")
		}

		gs := make([]*Grant, 3)
		for i := range gs {
			gs[i], err = l.RLock(ctx)
			require.NoError(t, err)
		}
		other := newLock(t, s.conn())
		comesAndGoes := func() {
			g, err := other.RLock(ctx)
			require.NoError(t, err)
			synctest.Wait()
			require.NoError(t, g.Release(ctx))
		}
		assert.Equal(t, int64(1), c.cost(comesAndGoes), "another process's reader comes and goes: "+
			"the newest holder's watch on its own node, which its listing's watch left to it; "+
			"no listing yet, since the first check is one interval after the holders' listing")
		assert.Equal(t, int64(1), c.cost(func() { time.Sleep(fleetInterval) }), "one listing for the three holders, when due")
		assert.Equal(t, int64(0), c.cost(func() {
			comesAndGoes()
			comesAndGoes()
			time.Sleep(fleetInterval - time.Millisecond)
		}), "the reader comes and goes twice more: no listing within the interval")
		assert.Equal(t, int64(1), c.cost(func() { time.Sleep(time.Millisecond) }), "then one, for both")
		assert.Equal(t, int64(0), c.cost(func() { time.Sleep(3 * fleetInterval) }), "and none while nothing changes")
		for _, g := range gs {
			require.NoError(t, g.Release(ctx))
		}
	})
}

func TestWithDialectRejectsUnknown(t *testing.T) {
	_, err := newRWLock(newFakeServer().conn(), dir, WithDialect(numDialects))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = newRWLock(newFakeServer().conn(), dir, WithDialect(-1))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Equal(t, "Dialect(7)", Dialect(7).String())
}

// Queue judges a peer's node by its library's own rules, and flags a peer
// that does not count another node of the queue: a Curator writer and a
// zk.Lock node after it each hold, as far as their libraries can tell (our
// own acquisitions refuse to queue there).
func TestQueueJudgesPeersByTheirOwnRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		l := newLock(t, s.conn(), WithDialect(DialectCurator))
		g, err := l.Lock(ctx) // makes the directory
		require.NoError(t, err)
		require.NoError(t, g.Release(ctx))
		peer := s.conn()
		curator := peerNode(t, peer, "_c_"+uuid+"-__WRIT__", "")
		q, err := l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 1)
		assert.True(t, q[0].Held)
		assert.False(t, q[0].Blind, "alone")

		mutex := peerNode(t, peer, "_c_"+uuid+"-lock-", "")
		q, err = l.Queue(ctx)
		require.NoError(t, err)
		require.Len(t, q, 2)
		assert.Equal(t, dir+"/"+curator, q[0].Node)
		assert.True(t, q[0].Held)
		assert.True(t, q[0].Blind, "Curator does not count zk.Lock's node")
		assert.Equal(t, dir+"/"+mutex, q[1].Node)
		assert.True(t, q[1].Held, "zk.Lock counts no node before its own")
		assert.True(t, q[1].Blind)
		_, err = l.TryRLock(ctx)
		require.ErrorIs(t, err, ErrInvalidArgument, "ours refuses to queue there")
	})
}
