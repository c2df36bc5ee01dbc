package lockprof_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/lockprof"
)

// TestMain takes -lockprofile like any package that uses lockprof, and
// stops the shared server before goleak looks for leftover goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(lockprof.Wrap(stopServerAfter{m})) }

type stopServerAfter struct{ m *testing.M }

func (s stopServerAfter) Run() int {
	code := s.m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "lockprof: stopping the ZooKeeper server: %v\n", err)
		code = 1
	}
	return code
}

// shared is one standalone server for the package's tests and benchmarks.
var shared zkserver.Shared

const sessionTimeout = 10 * time.Second
