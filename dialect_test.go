package rwlock

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

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

// Every peer's node queues like one of ours of its mode, in every dialect:
// a writer blocks everyone after it, a reader blocks writers.
func TestPeersQueue(t *testing.T) {
	for _, d := range []Dialect{DialectNative, DialectCurator, DialectMutex, DialectKazoo, DialectKazooLock} {
		for _, p := range peerNodes {
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
		marks := string(lockname.Data("forged", 0, true, true))
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

		q, err := first.l.Queue(ctx)
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

// A lock warns, once, of peers on its path that do not see its nodes; not
// of those that do, and not of our own nodes in another dialect.
func TestWarnsOnceOfPeersThatDoNotSeeUs(t *testing.T) {
	tests := []struct {
		dialect Dialect
		peer    string // "" for one of our own nodes in another dialect
		warns   string // "" for no warning
	}{
		{DialectNative, "_c_" + uuid + "-__WRIT__", "Curator InterProcessReadWriteLock"},
		{DialectNative, "_c_" + guid + "-lock-", "Curator InterProcessMutex or go-zookeeper zk.Lock"},
		{DialectNative, guid + "__lock__", ""}, // kazoo with extra_lock_patterns
		{DialectCurator, "_c_" + uuid + "-__READ__", ""},
		{DialectCurator, guid + "__rlock__", "kazoo ReadLock"},
		{DialectCurator, "write-", "unprotected read-/write- names"},
		{DialectCurator, "_c_" + guid + "-write-", ""},
		{DialectMutex, "_c_" + uuid + "-lock-", ""},
		{DialectMutex, "_c_" + uuid + "-__WRIT__", "Curator InterProcessReadWriteLock"},
		{DialectKazoo, guid + "__lock__", ""},
		{DialectKazoo, "_c_" + uuid + "-lock-", "Curator InterProcessMutex or go-zookeeper zk.Lock"},
		{DialectKazooLock, guid + "__lock__", ""},
		{DialectKazooLock, guid + "__rlock__", ""},
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
				peerNode(t, s.conn(), tc.peer, "")
				for range 3 {
					g, err := l.TryRLock(ctx)
					if err == nil {
						require.NoError(t, g.Release(ctx))
					} else {
						require.ErrorIs(t, err, ErrWouldBlock)
					}
					_, err = l.Queue(ctx)
					require.NoError(t, err)
				}
				if tc.warns == "" {
					assert.Empty(t, log.String())
					return
				}
				assert.Equal(t, 1, strings.Count(log.String(), "level=WARN"), log.String())
				assert.Contains(t, log.String(), tc.warns)
				assert.Contains(t, log.String(), "dialect="+tc.dialect.String())
			})
		})
	}
}

func TestWithDialectRejectsUnknown(t *testing.T) {
	_, err := newRWLock(newFakeServer().conn(), dir, WithDialect(Dialect(5)))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = newRWLock(newFakeServer().conn(), dir, WithDialect(-1))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Equal(t, "Dialect(7)", Dialect(7).String())
}
