package lockprof_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/rwlocktest"
	"github.com/zkrwlock/rwlock/stats"
)

// BenchmarkDemo is cmd/demo's workload in a loop, for the contention profile in
// docs/observability.md: three config readers read under the shared lock,
// each on its own session, while a migration job takes it exclusively,
// migrates, downgrades to check its work, and releases. One iteration is
// one migration. Run it with
//
//	go test -run '^$' -bench Demo -benchtime 100x -lockprofile demo.pprof
//	go tool pprof -top demo.pprof
func BenchmarkDemo(b *testing.B) {
	path := lockPath(b)
	var rec stats.Recorder // of every lock
	counted := rwlock.WithObserver(&rec)
	readers := []*rwlock.RWLock{newLock(b, path, counted), newLock(b, path, counted), newLock(b, path, counted)}
	job := newLock(b, path, counted)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(readers))
	for _, l := range readers {
		wg.Go(func() {
			if err := configReader(ctx, l); err != nil && ctx.Err() == nil {
				errs <- err
			}
		})
	}
	for b.Loop() {
		if err := migration(context.Background(), job); err != nil {
			b.Fatal(err)
		}
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Error(err)
	}
	rwlocktest.ReportMetrics(b, rec.Stats())
}

// configReader reads the config under the shared lock, again and again.
func configReader(ctx context.Context, l *rwlock.RWLock) error {
	for ctx.Err() == nil {
		err := l.WithRead(ctx, func(ctx context.Context) error {
			return pause(ctx, 2*time.Millisecond) // read the config
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// migration takes the lock exclusively, migrates, and downgrades to check
// its work while readers join.
func migration(ctx context.Context, l *rwlock.RWLock) error {
	w, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	defer w.Release(ctx)
	if err := pause(ctx, 5*time.Millisecond); err != nil { // migrate
		return err
	}
	r, err := w.Downgrade(ctx)
	if err != nil {
		return err
	}
	if err := pause(ctx, 2*time.Millisecond); err != nil { // verify
		return err
	}
	return r.Release(ctx)
}

// pause stands for work under the lock.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
