package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/zkrwlock/rwlock"
)

// The examples need a ZooKeeper server on 127.0.0.1:2181, so they have no
// Output line: go test compiles them but does not run them. The integration
// tests run the same flows against real servers.

func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Dial waits for a session, and remembers the session timeout T the
	// server granted: holders of locks on this connection then ride out a
	// silent connection (docs/guarantees.md says for how long). 20s is at
	// least eight ticks of a server with the default tickTime of 2s, as
	// the guarantees ask, and within its default maxSessionTimeout of 40s.
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err) // the context's error if no session came in time
	}
	defer conn.Close() // ends the session: its lock nodes go with it

	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithOwner("billing-api@build-7"))
	if err != nil {
		log.Fatal(err) // an invalid path; New itself sends no request
	}
	fmt.Println("ready to lock", lock.Path())
}

func ExampleRWLock_RLock() {
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

	// Any number of config readers hold the lock together, but none while
	// a migration holds it, or waits for it: a waiting writer goes first.
	// Do not wait for ever: fall back to the cached config.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := lock.RLock(rctx)
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Println("schema migration in progress; serving the cached config")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := loadConfig(ctx)
	if rerr := g.Release(ctx); rerr != nil {
		log.Print(rerr) // the node is deleted in the background, or goes with the session
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("schema version", cfg.SchemaVersion)
}

func ExampleRWLock_Lock() {
	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithOwner("schema-migration"))
	if err != nil {
		log.Fatal(err)
	}

	// The migration waits for the readers in front of it and holds back
	// the ones that come after it.
	g, err := lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Release(context.Background())

	var store schemaStore
	for _, step := range []string{"add column plan_id", "backfill plan_id", "drop column plan"} {
		select {
		case <-g.Done():
			// Lost: the node was deleted, the session expired, or the
			// connection was down too long. Someone else may hold the lock.
			log.Printf("migration stopped before %q: %v", step, g.Err())
			return
		default:
		}
		// The token fences out a holder that lost the lock without noticing
		// in time: the store rejects tokens older than one it has seen.
		if err := store.Apply(ctx, step, g.Token()); err != nil {
			log.Printf("migration stopped at %q: %v", step, err)
			return
		}
	}
	fmt.Println("migrated")
}

func ExampleRWLock_WithWrite() {
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

	// WithWrite acquires, runs fn, and releases. fn's context is cancelled
	// when the grant is lost, so a migration written to stop when its
	// context ends stops in time.
	err = lock.WithWrite(ctx, func(ctx context.Context) error {
		return migrate(ctx, "add column plan_id")
	})
	switch {
	case errors.Is(err, rwlock.ErrLost):
		log.Printf("lost the lock mid-migration; run it again: %v", err)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("migrated")
	}
}

func ExampleRWLock_ReadBatch() {
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

	// The reads run concurrently under one shared grant: one lock node and
	// three requests to ZooKeeper for the whole batch. The first error
	// cancels the others' context and is returned.
	var users, plans []string
	err = lock.ReadBatch(ctx,
		func(ctx context.Context) (err error) {
			users, err = readTable(ctx, "users")
			return err
		},
		func(ctx context.Context) (err error) {
			plans, err = readTable(ctx, "plans")
			return err
		},
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(users), "users,", len(plans), "plans")
}

func ExampleGrant_Done() {
	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	lock, err := rwlock.New(conn, "/locks/reports")
	if err != nil {
		log.Fatal(err)
	}

	g, err := lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Release(context.Background())

	// Done closes when the grant ends, released or lost; tie the work's
	// context to it, so that the work stops when the lock is no longer
	// ours.
	work, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-g.Done():
			stop()
		case <-work.Done():
		}
	}()
	err = rebuildReports(work)
	if lost := g.Err(); errors.Is(lost, rwlock.ErrLost) {
		log.Printf("lost the lock while rebuilding: %v", lost)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reports rebuilt")
}

// What the examples lock: stand-ins for an application's own code.

type config struct{ SchemaVersion int }

func loadConfig(context.Context) (config, error) { return config{SchemaVersion: 42}, nil }

// schemaStore stands for a store that keeps the highest fencing token it has
// seen and rejects writes that carry a smaller one.
type schemaStore struct{ highest int64 }

func (s *schemaStore) Apply(_ context.Context, step string, token int64) error {
	if token < s.highest {
		return fmt.Errorf("%s: stale fencing token %d < %d", step, token, s.highest)
	}
	s.highest = token
	return nil
}

func migrate(ctx context.Context, step string) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", step, context.Cause(ctx))
	case <-time.After(time.Second): // the step's work
		return nil
	}
}

func readTable(context.Context, string) ([]string, error) { return []string{"a", "b"}, nil }

func rebuildReports(ctx context.Context) error { return migrate(ctx, "rebuild reports") }

// lock stands for a lock made as in the Dial example; the examples below
// are compiled, never run.
var lock *rwlock.RWLock

func ExampleRWLock_WithRead() {
	err := lock.WithRead(context.Background(), func(ctx context.Context) error {
		// ctx is cancelled, with a cause wrapping ErrLost, if the grant is
		// lost: pass it to everything that reads.
		_, err := loadConfig(ctx)
		return err
	})
	if errors.Is(err, rwlock.ErrLost) {
		log.Print("the read lock was lost while loading; the config may be half-read")
	}
}

func ExampleRWLock_ReadGroup() {
	g, ctx, err := lock.ReadGroup(context.Background()) // one node for all of them
	if err != nil {
		log.Fatal(err)
	}
	g.SetLimit(4)
	for _, shard := range []string{"eu", "us", "ap"} {
		g.Go(func() error { return loadShard(ctx, shard) })
	}
	if err := g.Wait(); err != nil { // waits for all, then releases
		log.Fatal(err)
	}
}

func ExampleRWLock_TryLock() {
	g, err := lock.TryLock(context.Background())
	if errors.Is(err, rwlock.ErrWouldBlock) {
		fmt.Println("another job holds the lock; skipping this run") // no node was left behind
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer g.Release(context.Background())
	fmt.Println("running")
}

func ExampleGrant_Downgrade() {
	ctx := context.Background()
	w, err := lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// ... migrate ...

	// Keep reading what we wrote, and let the readers queued behind us in,
	// without letting in a writer that queued meanwhile.
	r, err := w.Downgrade(ctx)
	if err != nil {
		log.Fatal(err) // the write grant is unchanged, or lost (errors.Is ErrLost)
	}
	defer r.Release(ctx)
	fmt.Println("verifying the migration under a read lock, token", r.Token())
}

func ExampleContextWithGrant() {
	ctx := context.Background()
	w, err := lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Release(ctx)

	// A helper that takes the read lock itself, called with a context that
	// carries our write grant, gets a nested grant at once, without a new
	// node, instead of waiting behind us for ever.
	ctx = rwlock.ContextWithGrant(ctx, w)
	err = lock.WithRead(ctx, func(ctx context.Context) error {
		_, err := loadConfig(ctx)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleRWLock_Queue() {
	q, err := lock.Queue(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range q {
		state := "waits"
		if e.Held {
			state = "holds"
		}
		fmt.Printf("%s %s %s (session %#x, since %s)\n", e.Owner, state, e.Mode, e.SessionID, e.Created.Format(time.TimeOnly))
	}
}

// A Java service locks /locks/schema with Curator's
// InterProcessReadWriteLock: this job queues with it, as one of its writers.
func ExampleWithDialect() {
	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	schema, err := rwlock.New(conn, "/locks/schema", rwlock.WithDialect(rwlock.DialectCurator))
	if err != nil {
		log.Fatal(err)
	}
	err = schema.WithWrite(ctx, func(ctx context.Context) error {
		return migrate(ctx, "add column")
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A job that copies data from one store to another takes both locks in one
// call: no deadlock with a job that asks for them in the other order, and
// nothing held if it fails.
func ExampleLockAll() {
	ctx := context.Background()
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	source, err := rwlock.New(conn, "/locks/store-a")
	if err != nil {
		log.Fatal(err)
	}
	target, err := rwlock.New(conn, "/locks/store-b")
	if err != nil {
		log.Fatal(err)
	}

	grants, err := rwlock.LockAll(ctx,
		rwlock.Request{Lock: source, Mode: rwlock.Read},
		rwlock.Request{Lock: target, Mode: rwlock.Write})
	if err != nil {
		log.Fatal(err) // no node of the set is left behind
	}
	defer func() {
		// One transaction deletes the set.
		if err := rwlock.ReleaseAll(context.Background(), grants...); err != nil {
			log.Print(err) // a node is deleted in the background, or goes with the session
		}
	}()
	if err := migrate(ctx, "copy store-a to store-b"); err != nil {
		log.Fatal(err)
	}
}

func loadShard(context.Context, string) error { return nil }
