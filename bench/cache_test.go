package bench

import (
	"context"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/delayproxy"
)

// Lock caching (rwlock.WithCaching).

// BenchmarkW1c is W1 with caching: one client, acquire and release of one
// write lock, nobody else. After the first cycle the node is kept, and
// each acquisition is a re-grant: req/acquire is the share of cycles that
// sent a request (the target is at most 0.01), and p50-us/acquire the
// re-grant's latency (the target is under 10 µs).
func BenchmarkW1c(b *testing.B) { benchUncontended(b, "W1c", rwlock.Write, rwlock.WithCaching()) }

// BenchmarkW4c and BenchmarkW5c are W4 and W5 with caching, to compare
// with W4 and W5: caching must not make them slower.
func BenchmarkW4c(b *testing.B) { benchContention(b, "W4c", onlyReads, rwlock.WithCaching()) }

// BenchmarkW5c is W5 with caching (see BenchmarkW4c).
func BenchmarkW5c(b *testing.B) { benchContention(b, "W5c", mixed, rwlock.WithCaching()) }

// w10Warmup is how many rounds W10 runs before it measures.
const w10Warmup = 20

// BenchmarkW10 is W10: a writer of another session arrives behind an idle
// kept read node, again and again, both through a proxy that delays each
// way (see delayed). It reports the writer's grant latency from its Lock
// call at p50 and p99, in µs and in round trips of a plain read (the
// target is p99 at most 2 round trips and one commit from its create's
// arrival, half a round trip after the call), and the plain read's own p99
// in its median (get-p99-rtts). Each op is one round: the reader takes and
// releases its read lock (kept), the writer locks and releases.
func BenchmarkW10(b *testing.B) {
	addr, stop := delayed(b)
	defer stop()
	ss := (&servers{addrs: []string{addr}}).dial(b, 2)
	defer ss.close()
	path := lockPath("W10")
	reader, writer := ss.lock(b, 0, path, rwlock.WithCaching()), ss.lock(b, 1, path)
	ctx := context.Background()

	once := func() (wait, rtt time.Duration) {
		g, err := reader.RLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Release(ctx); err != nil { // kept, idle
			b.Fatal(err)
		}
		start := time.Now()
		if _, _, err := ss.conns[1].Get(path); err != nil {
			b.Fatal(err)
		}
		call := time.Now()
		w, err := writer.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		wait = time.Since(call)
		if err := w.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return wait, call.Sub(start)
	}
	for range w10Warmup {
		once()
	}
	var waits, rtts []time.Duration
	for b.Loop() {
		w, rtt := once()
		waits, rtts = append(waits, w), append(rtts, rtt)
	}
	rtt := pct(rtts, 50)
	b.ReportMetric(rtt, "rtt-us")
	b.ReportMetric(pct(waits, 50), "p50-us/grant")
	b.ReportMetric(pct(waits, 99), "p99-us/grant")
	b.ReportMetric(pct(waits, 50)/rtt, "p50-rtts")
	b.ReportMetric(pct(waits, 99)/rtt, "p99-rtts")
	b.ReportMetric(pct(rtts, 99)/rtt, "get-p99-rtts") // the unit's own spread
}

// delayed returns the address W10 and BenchmarkObserveLatency dial: a
// proxy of this process in front of the first server, delaying each way
// by -bench.delay. With -bench.delay 0 it is the server's address itself,
// for a proxy of its own process named by ZKRWLOCK_BENCH_SERVERS, as
// scripts/compare-peers.sh runs one: then the proxy does not share this
// process's scheduler and collector.
func delayed(b *testing.B) (addr string, stop func()) {
	s := sharedServers(b)
	if *flagDelay == 0 {
		return s.addrs[0], func() {}
	}
	p, err := delayproxy.Listen("127.0.0.1:0", s.addrs[0], *flagDelay)
	if err != nil {
		b.Fatal(err)
	}
	return p.Addr(), func() { p.Close() }
}
