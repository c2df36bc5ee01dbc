// Command demo starts a throwaway ZooKeeper server on 127.0.0.1 and shows
// the lock at work: config readers share it, a migration job takes it
// exclusively (readers that come later queue behind the job), then
// downgrades to read its own result. It prints a timeline and stops the
// server.
//
//	go run ./cmd/demo      (or: make demo)
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

const lockPath = "/demo/locks/schema"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// timeline prints events with the time since the start.
type timeline struct {
	mu    sync.Mutex
	start time.Time
}

func (t *timeline) say(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Printf("%+6dms  %-10s %s\n", time.Since(t.start).Milliseconds(), who, fmt.Sprintf(format, args...))
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := zkserver.Available(); err != nil {
		return err
	}
	tl := &timeline{start: time.Now()}
	cluster, err := zkserver.StartCluster(ctx, zkserver.Config{})
	if err != nil {
		return err
	}
	defer cluster.Close()
	tl.say("zookeeper", "throwaway server up on %s", cluster.ConnectString())

	// One session per actor, as separate processes would have.
	dial := func(owner string) (*rwlock.RWLock, *zk.Conn, error) {
		conn, err := rwlock.Dial(ctx, []string{cluster.ConnectString()}, 10*time.Second)
		if err != nil {
			return nil, nil, err
		}
		l, err := rwlock.New(conn, lockPath, rwlock.WithOwner(owner))
		return l, conn, err
	}

	var version atomic.Int64 // the "schema" the lock protects
	version.Store(1)
	g, ctx := errgroup.WithContext(ctx)
	var conns []*zk.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("reader-%d", i)
		l, conn, err := dial(name)
		if err != nil {
			return err
		}
		conns = append(conns, conn)
		g.Go(func() error { return configReader(ctx, tl, name, l, &version, time.Duration(i)*100*time.Millisecond) })
	}
	l, conn, err := dial("migration")
	if err != nil {
		return err
	}
	conns = append(conns, conn)
	g.Go(func() error { return migration(ctx, tl, l, &version) })
	if err := g.Wait(); err != nil {
		return err
	}

	q, err := l.Queue(context.Background())
	if err != nil {
		return err
	}
	tl.say("zookeeper", "queue at the end: %d nodes (every node is deleted on release)", len(q))
	return nil
}

// configReader reads the config under a shared lock, four times.
func configReader(ctx context.Context, tl *timeline, name string, l *rwlock.RWLock, version *atomic.Int64, pause time.Duration) error {
	for range 4 {
		time.Sleep(pause)
		start := time.Now()
		err := l.WithRead(ctx, func(ctx context.Context) error {
			waited := ""
			if w := time.Since(start); w > 50*time.Millisecond {
				waited = fmt.Sprintf(" after waiting %dms", w.Milliseconds())
			}
			tl.say(name, "reads schema v%d under a shared lock%s", version.Load(), waited)
			time.Sleep(300 * time.Millisecond)
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// migration takes the lock exclusively, migrates, and downgrades to check
// its work while readers join.
func migration(ctx context.Context, tl *timeline, l *rwlock.RWLock, version *atomic.Int64) error {
	time.Sleep(350 * time.Millisecond)
	q, err := l.Queue(ctx)
	if err != nil {
		return err
	}
	tl.say("migration", "wants the write lock; now: %s", describe(q))
	w, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	tl.say("migration", "holds the write lock (fencing token %d); readers that came later wait", w.Token())
	for step := 1; step <= 3; step++ {
		select {
		case <-w.Done(): // a migration must stop when it loses the lock
			return fmt.Errorf("migration: %w", w.Err())
		case <-time.After(150 * time.Millisecond):
		}
		tl.say("migration", "step %d/3 of v%d -> v%d", step, version.Load(), version.Load()+1)
	}
	version.Add(1)
	if q, err = l.Queue(ctx); err == nil {
		tl.say("migration", "done; queue: %s", describe(q))
	}
	r, err := w.Downgrade(ctx)
	if err != nil {
		return err
	}
	tl.say("migration", "downgraded to a read lock in place: waiting readers join, no writer can slip in")
	time.Sleep(200 * time.Millisecond)
	tl.say("migration", "verified schema v%d; releasing", version.Load())
	return r.Release(ctx)
}

// describe summarises a queue: "2 holding (read reader-1, read reader-2), 1 waiting (write migration)".
func describe(q []rwlock.Entry) string {
	var held, waiting []string
	for _, e := range q {
		s := e.Mode.String() + " " + e.Owner
		if e.Held {
			held = append(held, s)
		} else {
			waiting = append(waiting, s)
		}
	}
	return fmt.Sprintf("%d holding (%s), %d waiting (%s)", len(held), strings.Join(held, ", "), len(waiting), strings.Join(waiting, ", "))
}
