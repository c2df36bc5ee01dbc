package stats_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/stats"
)

// A Recorder counts what a lock's acquisitions and grants did: a service
// can log it, or compare two snapshots to see a stretch of time.
func ExampleRecorder() {
	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	var rec stats.Recorder
	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithObserver(&rec))
	if err != nil {
		log.Fatal(err)
	}

	before := rec.Stats()
	for range 100 {
		if err := lock.WithRead(ctx, func(context.Context) error { return nil }); err != nil {
			log.Fatal(err)
		}
	}
	s := rec.Stats().Sub(before)
	fmt.Printf("%d reads, wait p50 %v p99 %v, %.1f requests each, %d uncontended, %d grants lost\n",
		s.Read.Granted, s.Read.Wait.Quantile(0.5), s.Read.Wait.Quantile(0.99),
		float64(s.Requests)/float64(s.Acquisitions()), s.Read.OneRoundTrip, s.Lost.Total())
}
