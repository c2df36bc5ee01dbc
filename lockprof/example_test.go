package lockprof_test

import (
	"context"
	"log"
	"os"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/lockprof"
)

// In a _test.go file of the package whose benchmarks take locks, TestMain
// wraps the tests: then go test -bench . -lockprofile lock.pprof writes the
// contention profile of the run, for go tool pprof -top lock.pprof.
func ExampleWrap() {
	testMain := func(m *testing.M) {
		os.Exit(lockprof.Wrap(m).Run())
	}
	_ = testMain // func TestMain(m *testing.M)
}

// A program turns the profile on, and writes it when it has seen enough.
func ExampleWriteFile() {
	rwlock.SetContentionProfileRate(10) // about one acquisition in 10

	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	lock, err := rwlock.New(conn, "/locks/schema")
	if err != nil {
		log.Fatal(err)
	}
	for range 1000 {
		if err := lock.WithRead(ctx, func(context.Context) error { return nil }); err != nil {
			log.Fatal(err)
		}
	}

	if err := lockprof.WriteFile("lock.pprof"); err != nil { // then: go tool pprof -top lock.pprof
		log.Fatal(err)
	}
}
