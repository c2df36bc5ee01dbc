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
const revokeWarmup = 50

// BenchmarkRevokeLatency measures how long a revocation takes to reach a
// holder that listens (Grant.Revoked), asked by another client's Revoke,
// with both clients behind a proxy that delays each way by revokeDelay.
//
// The unit is a round trip: the median of a plain Get on the revoker's
// connection, one per op, next to the revocation (rtt-us). In round trips,
// from Revoke's call (p50-rtts, p99-rtts) and from its return
// (p50-after-rtts, p99-after-rtts). The least from the call is 3: Revoke's
// listing and its write (the lock is held alone, so no node's data is
// read), then the holder's read of the request, its notification having
// travelled with the write's reply; from the return, that read alone, 1.
// Each op also takes and releases the lock, outside these figures.
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

	once := func() (fromCall, fromReturn, rtt time.Duration) {
		g, err := holder.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		revoked := g.Revoked()
		start := time.Now()
		if _, _, err := ss.conns[1].Get(path); err != nil {
			b.Fatal(err)
		}
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
		return told.Sub(call), told.Sub(returned), call.Sub(start)
	}
	// The first listener of the session sets the directory's watch; the
	// rest warm up the server's paths, as every workload's warm-up does.
	for range revokeWarmup {
		once()
	}

	var fromCall, fromReturn, rtts []time.Duration
	for b.Loop() {
		c, r, rtt := once()
		fromCall, fromReturn, rtts = append(fromCall, c), append(fromReturn, r), append(rtts, rtt)
	}
	rtt := pct(rtts, 50)
	b.ReportMetric(rtt, "rtt-us")
	b.ReportMetric(pct(fromCall, 50)/rtt, "p50-rtts")
	b.ReportMetric(pct(fromCall, 99)/rtt, "p99-rtts")
	b.ReportMetric(pct(fromReturn, 50)/rtt, "p50-after-rtts")
	b.ReportMetric(pct(fromReturn, 99)/rtt, "p99-after-rtts")
}
