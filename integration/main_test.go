// Package integration tests the lock against real ZooKeeper servers that
// the tests start themselves (internal/zkserver): a standalone server shared
// by the tests that need nothing special, and servers of their own for the
// tests that break things.
package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	removeJavaBuild()
	if code == 0 {
		// go-zookeeper v1.0.4's own loop can stay blocked after Close in
		// flushRequests: a request that met Close in queueRequest's "tie"
		// gets ErrConnectionClosed there, then its answer or a flush, and
		// a third send on a channel of two never returns. Its goroutine,
		// not ours; the lock's own goroutines are still checked.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/go-zookeeper/zk.(*Conn).flushRequests")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is one standalone server for the tests that do not break theirs.
// Its short tick lets sessions as short as 1s be granted.
var shared = zkserver.Shared{Config: zkserver.Config{
	TickTime:          500 * time.Millisecond,
	MinSessionTimeout: time.Second,
}}

func sharedServer(t *testing.T) *zkserver.Cluster { return shared.Get(t) }
