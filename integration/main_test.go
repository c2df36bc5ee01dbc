// Package integration tests the lock against real ZooKeeper servers that
// the tests start themselves (internal/zkserver): a standalone server shared
// by the tests that need nothing special, and servers of their own for the
// tests that break things.
package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is one standalone server for every test that does not break its
// server; each test uses lock paths of its own (see lockPath).
var shared struct {
	once    sync.Once
	cluster *zkserver.Cluster
	err     error
}

// sharedServer returns the shared standalone server, starting it on first
// use. Like zkserver.Start, it skips the test when ZooKeeper is not
// installed, unless ZKRWLOCK_REQUIRE_ZK=1.
func sharedServer(t *testing.T) *zkserver.Cluster {
	t.Helper()
	zkserver.SkipUnlessAvailable(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.cluster, shared.err = zkserver.StartCluster(ctx, zkserver.Config{
			TickTime:          500 * time.Millisecond,
			MinSessionTimeout: time.Second,
		})
	})
	if shared.err != nil {
		t.Fatalf("shared server: %v", shared.err)
	}
	return shared.cluster
}
