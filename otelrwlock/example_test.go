package otelrwlock_test

import (
	"context"
	"log"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/otelrwlock"
)

// A service that has set up OpenTelemetry (otel.SetMeterProvider,
// otel.SetTracerProvider) makes one Observer and gives it to every lock:
// its dashboards get rwlock.wait.duration by lock path, mode and outcome,
// and its traces a span for every wait.
func ExampleNewObserver() {
	obs, err := otelrwlock.NewObserver() // the global providers
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	err = lock.WithRead(ctx, func(ctx context.Context) error {
		return nil // read the config
	})
	if err != nil {
		log.Fatal(err)
	}
}
