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

	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	removeJavaBuild()
	if code == 0 {
		if err := zktest.FindLeaks(); err != nil {
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
