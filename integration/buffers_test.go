package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The smaller buffers that docs/operators.md offers an application with
// many sessions: go-zookeeper's answer buffer holds a listing of 10,000
// lock nodes, its request buffer twice its largest set-watches packet.
const (
	cappedAnswers  = 640 << 10 // zk.WithMaxBufferSize
	cappedRequests = 256 << 10 // zk.WithMaxConnBufferSize
	listedNodes    = 10_000
)

// TestCappedBuffersList10000Nodes queues a reader behind 10,000 readers
// with the longest names of any family, on a connection with the smaller
// buffers. Its acquisition lists the directory behind its create, so the
// answer holds 10,001 names. A cap one byte below that answer fails the
// same listing, which shows the size computed here is the one on the wire.
func TestCappedBuffersList10000Nodes(t *testing.T) {
	tier.Long(t) // 10,000 creates: about a minute under the race detector on a loaded machine
	srv := sharedServer(t)
	ctx := testContext(t)
	path := zktest.LockPath(t, "/it")
	filler := connect(t, srv.ConnectString(), 0)
	// Curator's readers, _c_<uuid>-__READ__<seq>: 58 characters, as long
	// as any lock node with a 10-digit number.
	const uuid = "0123abcd-4567-89ef-0123-456789abcdef"
	name := "_c_" + uuid + "-__READ__"
	require.NoError(t, createParents(filler.conn, path))
	var eg errgroup.Group
	eg.SetLimit(64)
	for range listedNodes {
		eg.Go(func() error {
			_, err := filler.conn.Create(path+"/"+name, nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			return err
		})
	}
	require.NoError(t, eg.Wait())

	// The answer to the listing after our create: the reply header (xid,
	// zxid, error), the count, each name with its length, then the stat.
	// Ours is _c_<guid>-__READ__<seq>, with a 32-digit guid.
	const seq, ours = 10, 3 + 32 + 1 + 8 + 10
	answer := 16 + 4 + listedNodes*(4+len(name)+seq) + 4 + ours + 68
	require.Greater(t, answer, cappedAnswers*9/10, "the test lists close to the cap")
	require.LessOrEqual(t, answer, cappedAnswers)

	capped := connect(t, srv.ConnectString(), 0, withZKOptions(
		zk.WithMaxBufferSize(cappedAnswers), zk.WithMaxConnBufferSize(cappedRequests)))
	l := capped.lock(t, path, rwlock.WithDialect(rwlock.DialectCurator))
	g, err := l.RLock(ctx)
	require.NoError(t, err)
	queue, err := l.Queue(ctx)
	require.NoError(t, err)
	require.Len(t, queue, listedNodes+1)
	require.NoError(t, g.Release(ctx))

	exact := connect(t, srv.ConnectString(), 0, withZKOptions(zk.WithMaxBufferSize(answer)))
	short := connect(t, srv.ConnectString(), 0, withZKOptions(zk.WithMaxBufferSize(answer-1)))
	gExact, err := exact.lock(t, path, rwlock.WithDialect(rwlock.DialectCurator)).RLock(ctx)
	require.NoError(t, err, "a cap of exactly the computed answer")
	children, _, err := short.conn.Children(path)
	require.Error(t, err, "a cap one byte short of the computed answer listed %d children", len(children))
	require.NoError(t, gExact.Release(ctx))
}

// createParents creates path and its missing ancestors, empty and open.
func createParents(conn *zk.Conn, path string) error {
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		_, err := conn.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", path[:i], err)
		}
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("%s is not absolute", path)
	}
	return nil
}
