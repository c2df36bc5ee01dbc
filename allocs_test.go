package rwlock

import (
	"context"
	"testing"
)

// BenchmarkUncontended is one uncontended acquisition and release against
// the in-memory fake: the library's own allocations per cycle, without
// go-zookeeper's and the network's (make bench measures the whole process
// against a real server, where those dominate and vary from run to run).
// With a context that can be cancelled, every request runs on a goroutine
// of its own (see request), as in W3-W5.
func BenchmarkUncontended(b *testing.B) {
	for _, bc := range []struct {
		name        string
		cancellable bool
		mode        Mode
	}{
		{"Lock", false, Write},
		{"RLock", false, Read},
		{"Lock/cancellable", true, Write},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newFakeServer()
			c := s.conn()
			l, err := newRWLock(c, dir)
			if err != nil {
				b.Fatal(err)
			}
			defer c.close()
			defer l.background.Wait()
			ctx := context.Background()
			if bc.cancellable {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			acquire := l.Lock
			if bc.mode == Read {
				acquire = l.RLock
			}
			cycle := func() {
				g, err := acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			cycle() // creates the lock directory
			b.ReportAllocs()
			for b.Loop() {
				cycle()
			}
		})
	}
}
