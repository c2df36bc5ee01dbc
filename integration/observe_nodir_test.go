package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// An observer on a path that does not exist writes nothing: it reports
// that nobody leads and waits, and reports the first leader once a
// Campaign has made the directory, parents and all.
func TestObserveMissingDirectory(t *testing.T) {
	srv := sharedServer(t).Addr(0)
	path := zktest.LockPath(t, "/observe") + "/deep/election"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	wc := connect(t, srv, 10*time.Second)
	watcher, err := rwlock.NewElection(wc.conn, path)
	require.NoError(t, err)
	states := watcher.Observe(ctx)
	require.Equal(t, rwlock.Leadership{}, <-states, "nobody leads")
	_, _, err = watcher.Leader(ctx)
	require.ErrorIs(t, err, rwlock.ErrNoLeader)
	for _, p := range []string{path, path[:len(path)-len("/election")]} {
		exists, _, err := wc.conn.Exists(p)
		require.NoError(t, err)
		require.False(t, exists, "%s made by a reader", p)
	}

	e, err := rwlock.NewElection(connect(t, srv, 10*time.Second).conn, path)
	require.NoError(t, err)
	g, err := e.Campaign(ctx, []byte("first"))
	require.NoError(t, err)
	defer g.Release(context.Background())
	select {
	case s := <-states:
		require.Equal(t, g.Token(), s.Term)
		require.Equal(t, "first", string(s.Value))
	case <-ctx.Done():
		t.Fatal("the observer did not report the first leader")
	}
	cancel()
	for range states {
	}
}
