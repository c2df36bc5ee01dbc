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
	w5Hold         = time.Millisecond // W5 hold time
	w5ReadShare    = 0.9              // W5: a read when splitmix64 < 0.9
	batchFns       = 32               // RB32/RL32
)

// Sizes, standard unless changed by a flag or -short (smoke runs).
var (
	flagOps      = flag.Int("bench.ops", 0, "W1/W2 measured cycles (default 2000; 200 with -short)")
	flagWarmup   = flag.Int("bench.warmup", -1, "W1/W2 warm-up cycles (default 100; 20 with -short)")
	flagDuration = flag.Duration("bench.duration", 0, "W3-W5 run time (default 5s; 1s with -short)")
	flagWaiters  = flag.Int("bench.waiters", 0, "W6/W6r queued waiters (default 200; 20 with -short)")
	flagDrain    = flag.String("bench.drain", "", "BenchmarkDrain queue lengths: writers,writers,...;readers "+
		"(default 100,300,1000;1000; 10,30,100;100 with -short)")
	flagBatches = flag.Int("bench.batches", 0, "RB32/RL32 measured batches (default 200; 20 with -short), after a tenth as many warm-up batches")
)

// sizes are the parameters of one process's runs.
type sizes struct {
	ops, warmup  int           // W1, W2
	duration     time.Duration // W3, W4, W5
	waiters      int           // W6, W6r
	drainWriters []int         // BenchmarkDrain
	drainReaders []int
	batches      int // RB32, RL32
}

// standard are the peers' definitions (and this package's own for the
// drain series and the batches).
var standard = sizes{
	ops: 2000, warmup: 100, duration: 5 * time.Second, waiters: 200,
	drainWriters: []int{100, 300, 1000}, drainReaders: []int{1000}, batches: 200,
}

// smoke are the -short sizes: enough to see that everything works.
var smoke = sizes{
	ops: 200, warmup: 20, duration: time.Second, waiters: 20,
	drainWriters: []int{10, 30, 100}, drainReaders: []int{100}, batches: 20,
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
	return s
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
