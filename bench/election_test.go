package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkrwlock/rwlock"
)

// Elections beside Curator's LeaderLatch (bench/peers/curator/LatchFailover.java):
// how long a failover takes, after the leader's clean Resign and after a
// kill -9 of its process, with the same session timeout; and how soon an
// observer sees a new leader.

// failoverSession is the session timeout of the failover benchmarks, the
// Curator harness's too (scripts/compare-peers.sh passes it).
const failoverSession = 4 * time.Second

// Environment of TestHelperBenchLeader, a leader in a process of its own.
const (
	benchLeaderEnv     = "ZKRWLOCK_BENCH_LEADER" // the servers, comma-separated
	benchLeaderPathEnv = "ZKRWLOCK_BENCH_LEADER_PATH"
)

// TestHelperBenchLeader is not a test: BenchmarkFailoverKill runs the test
// binary again as a process that campaigns, prints "leading" once it leads,
// and waits to be killed. Without its environment it returns at once.
func TestHelperBenchLeader(t *testing.T) {
	servers := os.Getenv(benchLeaderEnv)
	if servers == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	conn, err := rwlock.Dial(ctx, strings.Split(servers, ","), failoverSession)
	if err == nil {
		var e *rwlock.Election
		if e, err = rwlock.NewElection(conn, os.Getenv(benchLeaderPathEnv)); err == nil {
			_, err = e.Campaign(ctx, []byte("leader"))
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(2)
	}
	fmt.Println("leading")
	select {} // until killed
}

// BenchmarkFailoverResign measures the time from a leader's Resign to its
// successor's Campaign return, the successor queued behind it (p50-ms,
// p99-ms). A clean handoff: one notification.
func BenchmarkFailoverResign(b *testing.B) {
	s := sharedServers(b)
	ss := s.dial(b, 2)
	defer ss.close()
	path := lockPath("failover-resign")
	ctx := b.Context()
	var took []time.Duration
	es := [2]*rwlock.Election{}
	for i := range es {
		var err error
		if es[i], err = rwlock.NewElection(ss.conns[i], path); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := es[0].Campaign(ctx, []byte("0")); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		leader, next := es[i%2], es[(i+1)%2]
		i++
		led := campaignQueued(b, ctx, next, ss, path)
		start := time.Now()
		if err := leader.Resign(ctx); err != nil {
			b.Fatal(err)
		}
		at := <-led
		took = append(took, at.Sub(start))
	}
	es[i%2].Resign(ctx)
	reportFailover(b, "failover-resign", took)
}

// BenchmarkFailoverKill measures the time from a kill -9 of the leader's
// process to its successor's Campaign return (p50-ms, p99-ms): the session
// timeout, and the server's tick. Each op takes seconds: run it with
// -benchtime=5x or so.
func BenchmarkFailoverKill(b *testing.B) {
	s := sharedServers(b)
	ss := s.dial(b, 1)
	defer ss.close()
	ctx := b.Context()
	var took []time.Duration
	for b.Loop() {
		path := lockPath("failover-kill")
		leader := startBenchLeader(b, s.addrs, path)
		e, err := rwlock.NewElection(ss.conns[0], path)
		if err != nil {
			b.Fatal(err)
		}
		led := campaignQueued(b, ctx, e, ss, path)
		start := time.Now()
		if err := leader.Process.Kill(); err != nil {
			b.Fatal(err)
		}
		leader.Wait()
		at := <-led
		took = append(took, at.Sub(start))
		e.Resign(ctx)
	}
	reportFailover(b, "failover-kill", took)
}

// campaignQueued starts e's Campaign, and returns once its node is queued
// behind the leader's. The channel gets the time the Campaign returned.
func campaignQueued(b *testing.B, ctx context.Context, e *rwlock.Election, ss *sessions, path string) <-chan time.Time {
	b.Helper()
	led := make(chan time.Time, 1)
	go func() {
		if _, err := e.Campaign(ctx, []byte("next")); err != nil {
			b.Error(err)
		}
		led <- time.Now()
	}()
	for {
		children, _, err := ss.conns[0].Children(path)
		if err == nil && len(children) >= 2 {
			return led
		}
		time.Sleep(pollEvery) // a harness's wait for the queue, outside what is measured
	}
}

// startBenchLeader runs TestHelperBenchLeader and waits until it leads.
func startBenchLeader(b *testing.B, servers []string, path string) *exec.Cmd {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBenchLeader$")
	cmd.Env = append(os.Environ(), benchLeaderEnv+"="+strings.Join(servers, ","), benchLeaderPathEnv+"="+path)
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "leading\n" {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("the leader process printed %q, not leading", line)
	}
	return cmd
}

func reportFailover(b *testing.B, workload string, took []time.Duration) {
	b.ReportMetric(pct(took, 50)/1e3, "p50-ms")
	b.ReportMetric(pct(took, 99)/1e3, "p99-ms")
	b.ReportMetric(0, "ns/op")
	r := newRecord(workload)
	r.put("session_ms", failoverSession.Milliseconds())
	r.put("samples", len(took))
	r.put("p50_ms", pct(took, 50)/1e3)
	r.put("max_ms", pct(took, 100)/1e3)
	emit(b, r)
}

// BenchmarkObserveLatency measures how soon an observer sees a new leader
// after the leader's Campaign returned, all three clients behind a proxy
// that delays each way (see delayed). Each op hands the leadership over
// with a Resign to a candidate queued behind. The unit is a round trip,
// the median of a plain Get beside each op (rtt-us). The figures are the
// observer's lag after the Campaign's return, 0 when it saw the leader
// first (p50-rtts, p99-rtts; the target is at most 2 at p99), and the
// plain Get's own p99 in its median (get-p99-rtts): the proxy's and the
// machine's spread, which the lag's p99 inherits.
func BenchmarkObserveLatency(b *testing.B) {
	addr, stop := delayed(b)
	defer stop()
	ss := (&servers{addrs: []string{addr}}).dial(b, 3)
	defer ss.close()
	path := lockPath("observe")
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	es := [3]*rwlock.Election{}
	var err error
	for i := range es {
		if es[i], err = rwlock.NewElection(ss.conns[i], path); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[int64]time.Time{}
	states := es[2].Observe(ctx)
	var observing sync.WaitGroup
	observing.Go(func() {
		for st := range states {
			mu.Lock()
			if _, ok := seen[st.Term]; !ok {
				seen[st.Term] = time.Now()
			}
			mu.Unlock()
		}
	})
	defer observing.Wait()
	defer cancel()

	if _, err := es[0].Campaign(ctx, []byte("0")); err != nil {
		b.Fatal(err)
	}
	var lags, rtts []time.Duration
	i := 0
	for b.Loop() {
		leader, next := es[i%2], es[(i+1)%2]
		i++
		var g *rwlock.Grant
		var returned time.Time
		done := make(chan struct{})
		go func() {
			defer close(done)
			var err error
			if g, err = next.Campaign(ctx, []byte("next")); err != nil {
				b.Error(err)
			}
			returned = time.Now()
		}()
		for {
			children, _, err := ss.conns[0].Children(path)
			if err == nil && len(children) >= 2 {
				break
			}
			time.Sleep(pollEvery)
		}
		start := time.Now()
		if _, _, err := ss.conns[0].Get(path); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
		if err := leader.Resign(ctx); err != nil {
			b.Fatal(err)
		}
		<-done
		if g == nil {
			return
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			mu.Lock()
			at, ok := seen[g.Token()]
			mu.Unlock()
			if ok {
				lags = append(lags, max(0, at.Sub(returned)))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the observer did not see term %d within 10s", g.Token())
			}
			time.Sleep(pollEvery)
		}
	}
	es[i%2].Resign(ctx)
	rtt := pct(rtts, 50)
	b.ReportMetric(rtt, "rtt-us")
	b.ReportMetric(pct(lags, 50)/rtt, "p50-rtts")
	b.ReportMetric(pct(lags, 99)/rtt, "p99-rtts")
	b.ReportMetric(pct(rtts, 99)/rtt, "get-p99-rtts") // the unit's own spread
}
