package rwlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/zkrwlock/rwlock"
)

// The contention profile, like the mutex profile, is off until a rate is
// set. The module github.com/zkrwlock/rwlock/lockprof writes it for go tool
// pprof; the records can also be read as they are.
func ExampleSetContentionProfileRate() {
	rwlock.SetContentionProfileRate(1) // every acquisition; 100 samples about one in 100

	// ... the program takes its locks ...

	for _, r := range rwlock.ContentionRecords() { // the longest delay first
		caller := r.Frames[1] // [0] is the lock's entry point: Lock, RLock, WithRead, ...
		fmt.Printf("%s %s: %d waits, %v in all, from %s (%s:%d)\n",
			r.Lock, r.Mode, r.Count, r.Delay, caller.Function, caller.File, caller.Line)
	}
}

// waitLogger is an Observer that logs the long waits.
type waitLogger struct{ threshold time.Duration }

func (w waitLogger) ObserveAcquire(ctx context.Context, e rwlock.AcquireEvent) {
	if e.Wait > w.threshold {
		log.Printf("%s: %s waited %v (%s)", e.Lock, e.Mode, e.Wait, e.Outcome)
	}
}

func (w waitLogger) ObserveGrant(e rwlock.GrantEvent) {
	if e.Loss != "" {
		log.Printf("%s: grant of %s lost after %v: %v", e.Lock, e.Node, e.Hold, e.Err)
	}
}

// An Observer hears of every acquisition and grant as it ends. The module
// github.com/zkrwlock/rwlock/otelrwlock has one that feeds OpenTelemetry.
func ExampleWithObserver() {
	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithObserver(waitLogger{threshold: time.Second}))
	if err != nil {
		log.Fatal(err)
	}
	g, err := lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Release(ctx)
}
