package bench

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The workload constants of bench/peers/README.md.
const (
	sessionTimeout = 10 * time.Second // every client session
	acquireTimeout = 2 * time.Second  // W3-W5, through a context deadline
	waiterTimeout  = 90 * time.Second // W6/W6r waiters, as the peers' harnesses
	watchTimeout   = 30 * time.Second // W6/W6r: wait for the waiters' watches
	contenders     = 8                // W3-W5 clients
	w9Clients      = 64               // W9 sessions
	w9Locks        = 1000             // W9 lock paths
	w5Hold         = time.Millisecond // W5 hold time
	w5ReadShare    = 0.9              // W5: a read when splitmix64 < 0.9
	batchFns       = 32               // RB32/RL32
)

// Sizes, standard unless changed by a flag or -short (smoke runs).
var (
	flagOps      = flag.Int("bench.ops", 0, "W1/W2 measured cycles (default 2000; 200 with -short)")
	flagWarmup   = flag.Int("bench.warmup", -1, "W1/W2 warm-up cycles (default 100; 20 with -short)")
	flagDuration = flag.Duration("bench.duration", 0, "W3-W5 and W11 run time (default 5s; 1s with -short)")
	flagWaiters  = flag.Int("bench.waiters", 0, "W6/W6r queued waiters (default 200; 20 with -short)")
	flagDrain    = flag.String("bench.drain", "", "BenchmarkDrain queue lengths: writers,writers,...;readers "+
		"(default 100,300,1000;1000; 10,30,100;100 with -short)")
	flagBatches = flag.Int("bench.batches", 0, "RB32/RL32 measured batches (default 200; 20 with -short), after a tenth as many warm-up batches")
	flagDelay   = flag.Duration("bench.delay", time.Millisecond, "W10's and BenchmarkObserveLatency's proxy delay each way, "+
		"as in the +1 ms runs of scripts/compare-peers.sh; a longer one shows the round trips apart from the proxy's spread; "+
		"0: no proxy of their own, for one in front of ZKRWLOCK_BENCH_SERVERS")
	flagW9 = flag.String("bench.w9", "", "W9 clients,locks (default 64,1000; 8,50 with -short); "+
		"each of its four phases runs for -bench.duration")
)

// sizes are the parameters of one process's runs.
type sizes struct {
	ops, warmup  int           // W1, W2
	duration     time.Duration // W3, W4, W5
	waiters      int           // W6, W6r
	drainWriters []int         // BenchmarkDrain
	drainReaders []int
	batches      int // RB32, RL32
	w9Clients    int // W9, whose phases last duration each
	w9Locks      int
}

// standard are the peers' definitions (and this package's own for the
// drain series and the batches).
var standard = sizes{
	ops: 2000, warmup: 100, duration: 5 * time.Second, waiters: 200,
	drainWriters: []int{100, 300, 1000}, drainReaders: []int{1000}, batches: 200,
	w9Clients: w9Clients, w9Locks: w9Locks,
}

// smoke are the -short sizes: enough to see that everything works.
var smoke = sizes{
	ops: 200, warmup: 20, duration: time.Second, waiters: 20,
	drainWriters: []int{10, 30, 100}, drainReaders: []int{100}, batches: 20,
	w9Clients: 8, w9Locks: 50,
}

func params(b *testing.B) sizes {
	b.Helper()
	s := standard
	if testing.Short() {
		s = smoke
	}
	if *flagOps > 0 {
		s.ops = *flagOps
	}
	if *flagWarmup >= 0 {
		s.warmup = *flagWarmup
	}
	if *flagDuration > 0 {
		s.duration = *flagDuration
	}
	if *flagWaiters > 0 {
		s.waiters = *flagWaiters
	}
	if *flagBatches > 0 {
		s.batches = *flagBatches
	}
	if *flagDrain != "" {
		w, r, err := parseDrain(*flagDrain)
		if err != nil {
			b.Fatal(err)
		}
		s.drainWriters, s.drainReaders = w, r
	}
	if *flagW9 != "" {
		c, l, err := parseW9(*flagW9)
		if err != nil {
			b.Fatal(err)
		}
		s.w9Clients, s.w9Locks = c, l
	}
	return s
}

// parseW9 parses -bench.w9: "64,1000".
func parseW9(v string) (clients, locks int, err error) {
	c, l, ok := strings.Cut(v, ",")
	clients, errC := strconv.Atoi(strings.TrimSpace(c))
	locks, errL := strconv.Atoi(strings.TrimSpace(l))
	if !ok || errC != nil || errL != nil || clients < 1 || locks < 1 {
		return 0, 0, fmt.Errorf("-bench.w9=%q: want clients,locks, such as 64,1000", v)
	}
	return clients, locks, nil
}

// workload returns the JSON workload name: with a "-smoke" suffix when the
// run is not the standard one (std false), so that the comparison, which
// ignores workloads it does not know, never mixes it with real runs.
func workload(name string, std bool) string {
	if std {
		return name
	}
	return name + "-smoke"
}

// parseDrain parses -bench.drain: "100,300,1000;1000".
func parseDrain(v string) (writers, readers []int, err error) {
	w, r, _ := strings.Cut(v, ";")
	list := func(s string) ([]int, error) {
		var ns []int
		for f := range strings.SplitSeq(s, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("-bench.drain=%q: %q is not a queue length", v, f)
			}
			ns = append(ns, n)
		}
		return ns, nil
	}
	if writers, err = list(w); err != nil {
		return nil, nil, err
	}
	readers, err = list(r)
	return writers, readers, err
}
