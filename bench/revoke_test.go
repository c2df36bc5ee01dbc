package bench

import (
	"testing"
	"time"

	"github.com/zkrwlock/rwlock/internal/delayproxy"
)

// revokeDelay is the proxy's delay each way in BenchmarkRevokeLatency: on
// loopback, its round trips dominate what is measured.
const revokeDelay = time.Millisecond

// revokeWarmup is how many revocations BenchmarkRevokeLatency makes before
// it measures.
const revokeWarmup = 300

// BenchmarkRevokeLatency measures how long a revocation takes to reach a
// holder that listens (Grant.Revoked), asked by another client's Revoke,
// with both clients behind a proxy that delays each way by revokeDelay.
//
// The unit is a round trip: the median of a plain Get on the revoker's
// connection, one per op, next to the revocation (rtt-us); that Get's own
// p99 (rtt-p99-rtts) shows the machine's tail. In round trips, from
// Revoke's call: until the holder is told (p50-rtts, p99-rtts), and until
// Revoke returns (revoke-p50-rtts). The least until the holder is told is
// 3: Revoke's read of the directory's data (it keeps the other records),
// its first write, whose notification travels to the holder as its answer
// travels to the revoker, and the holder's read after the notification,
// which shows the reason. Revoke itself takes 4 (the read, the write, a
// listing, the write of the names). Each op also takes and
// releases the lock, outside these figures.
func BenchmarkRevokeLatency(b *testing.B) {
	s := sharedServers(b)
	p, err := delayproxy.Listen("127.0.0.1:0", s.addrs[0], revokeDelay)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ss := (&servers{addrs: []string{p.Addr()}}).dial(b, 2)
	defer ss.close()
	path := lockPath("revoke")
	holder, revoker := ss.lock(b, 0, path), ss.lock(b, 1, path)
	ctx := b.Context()

	once := func() (told, returned, rtt time.Duration) {
		g, err := holder.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		revoked := g.Revoked()
		at := make(chan time.Time, 1)
		go func() {
			select {
			case <-revoked:
				at <- time.Now()
			case <-time.After(10 * time.Second):
				close(at)
			}
		}()
		start := time.Now()
		if _, _, err := ss.conns[1].Get(path); err != nil {
			b.Fatal(err)
		}
		call := time.Now()
		if err := revoker.Revoke(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		returned = time.Since(call)
		t, ok := <-at
		if !ok {
			b.Fatal("the revocation did not reach the holder within 10s")
		}
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return t.Sub(call), returned, call.Sub(start)
	}
	// The first listener of the session sets the directory's watch; the
	// rest warm up the server's paths, as every workload's warm-up does.
	for range revokeWarmup {
		once()
	}

	var told, returned, rtts []time.Duration
	for b.Loop() {
		t, r, rtt := once()
		told, returned, rtts = append(told, t), append(returned, r), append(rtts, rtt)
	}
	rtt := pct(rtts, 50)
	b.ReportMetric(rtt, "rtt-us")
	b.ReportMetric(pct(told, 50)/rtt, "p50-rtts")
	b.ReportMetric(pct(told, 99)/rtt, "p99-rtts")
	b.ReportMetric(pct(returned, 50)/rtt, "revoke-p50-rtts")
	b.ReportMetric(pct(rtts, 99)/rtt, "rtt-p99-rtts")
}
