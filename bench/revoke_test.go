package bench

import (
	"testing"
	"time"

	"github.com/zkrwlock/rwlock/internal/delayproxy"
)

// revokeDelay is the proxy's delay each way in BenchmarkRevokeLatency: on
// loopback, its round trips dominate what is measured.
const revokeDelay = 2 * time.Millisecond

// BenchmarkRevokeLatency measures how long a revocation takes to reach a
// holder that listens (Grant.Revoked), asked by another client's Revoke,
// with both clients behind a proxy that delays each way by revokeDelay.
// In round trips of the proxy (2·revokeDelay), from Revoke's call
// (p50-rtts, p99-rtts) and from its return (p50-after-rtts,
// p99-after-rtts). The least from the call is 4½: Revoke's queue read
// (a list, then every node's data), its write, the notification's way to
// the holder, and the holder's read of the request, the last alone after
// the return. Each op also takes and releases the lock, outside these
// figures.
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

	once := func() (fromCall, fromReturn time.Duration) {
		g, err := holder.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		revoked := g.Revoked()
		call := time.Now()
		if err := revoker.Revoke(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		select {
		case <-revoked:
		case <-time.After(10 * time.Second):
			b.Fatal("the revocation did not reach the holder within 10s")
		}
		told := time.Now()
		if err := g.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return told.Sub(call), told.Sub(returned)
	}
	once() // the first listener of the session sets the directory's watch

	var fromCall, fromReturn []time.Duration
	for b.Loop() {
		c, r := once()
		fromCall, fromReturn = append(fromCall, c), append(fromReturn, r)
	}
	rtt := us(2 * revokeDelay)
	b.ReportMetric(pct(fromCall, 50)/rtt, "p50-rtts")
	b.ReportMetric(pct(fromCall, 99)/rtt, "p99-rtts")
	b.ReportMetric(pct(fromReturn, 50)/rtt, "p50-after-rtts")
	b.ReportMetric(pct(fromReturn, 99)/rtt, "p99-after-rtts")
}
