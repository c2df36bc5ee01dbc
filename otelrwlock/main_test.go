package otelrwlock_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// TestMain stops the shared server before goleak looks for leftover
// goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(stopServerAfter{m}) }

type stopServerAfter struct{ m *testing.M }

func (s stopServerAfter) Run() int {
	code := s.m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "otelrwlock: stopping the ZooKeeper server: %v\n", err)
		code = 1
	}
	return code
}

// shared is one standalone server for the package's tests.
var shared zkserver.Shared
