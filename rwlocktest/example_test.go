package rwlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/rwlocktest"
	"github.com/zkrwlock/rwlock/stats"
)

// A benchmark of your own code reports the lock's figures after its loop (a stats.Recorder observes it):
// go test -bench prints p50-ns/acquire, p99-ns/acquire, req/acquire,
// relists/acquire and lost/grant beside ns/op, and benchstat compares them.
func ExampleReportMetrics() {
	benchmarkConfigReload := func(b *testing.B) {
		ctx := context.Background()
		conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		var rec stats.Recorder
		lock, err := rwlock.New(conn, "/locks/config", rwlock.WithObserver(&rec))
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			err := lock.WithRead(ctx, func(ctx context.Context) error {
				return nil // read the config
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		rwlocktest.ReportMetrics(b, rec.Stats())
	}
	_ = benchmarkConfigReload // func BenchmarkConfigReload(b *testing.B) in a _test.go file
}

// For the loop alone, leave out what came before it (here, a warm-up):
// report the difference of two snapshots.
func ExampleReportMetrics_loop() {
	benchmarkMigration := func(b *testing.B, lock *rwlock.RWLock, rec *stats.Recorder) {
		ctx := context.Background()
		for range 10 { // warm-up, not measured
			if err := lock.WithWrite(ctx, func(context.Context) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		before := rec.Stats()
		for b.Loop() {
			g, err := lock.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			// migrate one step
			if err := g.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		rwlocktest.ReportMetrics(b, rec.Stats().Sub(before))
	}
	_ = benchmarkMigration
}

// A test of your own code starts a throwaway ZooKeeper, and its cleanup
// stops it. Here the test checks that a second writer waits for the first.
func ExampleStartServer() {
	testMigrationExcludesWriters := func(t *testing.T) {
		zk := rwlocktest.StartServer(t) // or rwlocktest.StartEnsemble(t, 3)
		lock, err := rwlock.New(zk.Dial(t, 10*time.Second), "/locks/schema")
		if err != nil {
			t.Fatal(err)
		}
		g, err := lock.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release(context.Background())
		if _, err := lock.TryLock(t.Context()); !errors.Is(err, rwlock.ErrWouldBlock) {
			t.Fatalf("a second writer got %v, want ErrWouldBlock", err)
		}
	}
	_ = testMigrationExcludesWriters // func TestMigrationExcludesWriters(t *testing.T) in a _test.go file
}
