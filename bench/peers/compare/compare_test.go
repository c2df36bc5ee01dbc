package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// write puts files (path relative to dir -> JSON lines) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func TestParseColumn(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		ok    bool
		delay float64
		label string
	}{
		{"loopback", true, 0, "loopback"},
		{"delay-0.5ms", true, 0.5, "+0.5 ms"},
		{"delay-2ms", true, 2, "+2 ms"},
		{"delay-0ms", false, 0, ""},
		{"delay-xms", false, 0, ""},
		{"bin", false, 0, ""},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			c, ok := parseColumn(tc.dir)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, tc.delay, c.delayMS)
				require.Equal(t, tc.label, c.label())
			}
		})
	}
}

func TestMediansRatiosAndColumns(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"loopback/peers1.jsonl": `{"impl": "curator", "workload": "W1", "warmup_cycles": 100, "ops_per_s": 1000, "zk_req_per_acq": 3.0}
{"impl": "curator", "workload": "W1", "warmup_cycles": 10000, "ops_per_s": 99999}
{"impl": "kazoo", "workload": "W6", "drain_s": 0.4, "violations": 0}
not json: a harness's stray line
`,
		"loopback/peers2.jsonl": `{"impl": "curator", "workload": "W1", "warmup_cycles": 100, "ops_per_s": 3000, "zk_req_per_acq": 3.0}
{"impl": "kazoo", "workload": "W6", "error": "watchdog: the run took over 300 s"}
`,
		"loopback/ours1.jsonl": `{"impl": "zkrwlock", "workload": "W1", "warmup_cycles": 100, "ops_per_s": 1500, "zk_req_per_acq": 3.0}
{"impl": "zkrwlock", "workload": "W6", "drain_s": 0.1, "violations": 1}
{"impl": "zkrwlock", "workload": "W6-1000", "drain_s": 9}
`,
		"loopback/ours2.jsonl": `{"impl": "zkrwlock", "workload": "W1", "warmup_cycles": 100, "ops_per_s": 2500, "zk_req_per_acq": 3.0}
{"impl": "zkrwlock", "workload": "W6", "drain_s": 0.3, "violations": 0}
`,
		"delay-1ms/ours1.jsonl":  `{"impl": "zkrwlock", "workload": "W1", "warmup_cycles": 100, "ops_per_s": 200}`,
		"delay-1ms/peers1.jsonl": `{"impl": "curator", "workload": "W1", "warmup_cycles": 100, "ops_per_s": 100}`,
		"notes/ignored.jsonl":    `{"impl": "zkrwlock", "workload": "W1", "ops_per_s": 1}`,
	})
	res, err := load([]string{dir})
	require.NoError(t, err)
	require.Equal(t, []column{{"loopback", 0}, {"delay-1ms", 1}}, res.cols)
	require.Equal(t, 2, res.rounds())

	w1 := rows[0]
	med := func(col, impl string) float64 {
		c := res.cell(w1, col, impl)
		require.True(t, c.ok, "%s %s", col, impl)
		return c.v
	}
	require.Equal(t, 2000.0, med("loopback", "zkrwlock"))
	require.Equal(t, 2000.0, med("loopback", "curator"), "the 10000-cycle warm-up run is not the workload")
	x, ok := ratio(w1, res.cell(w1, "loopback", "zkrwlock"), res.cell(w1, "loopback", "curator"))
	require.True(t, ok)
	require.Equal(t, 1.0, x)
	x, _ = ratio(w1, res.cell(w1, "delay-1ms", "zkrwlock"), res.cell(w1, "delay-1ms", "curator"))
	require.Equal(t, 2.0, x, "a rate: zkrwlock's over the peer's")

	drain := row{"W6", "drain_s", "W6", seconds}
	x, _ = ratio(drain, res.cell(drain, "loopback", "zkrwlock"), res.cell(drain, "loopback", "kazoo"))
	require.Equal(t, 2.0, x, "a time: the peer's over zkrwlock's (0.4 / median 0.2)")
	require.Equal(t, 1.0, res.violations("loopback", "zkrwlock").v, "violations add up over the runs")
	require.Equal(t, []string{"loopback kazoo W6: watchdog: the run took over 300 s"}, res.errors)

	var out strings.Builder
	write := func() string {
		out.Reset()
		writeTables(&out, res, "all")
		return out.String()
	}
	text := write()
	require.Contains(t, text, "| W1 uncontended write, cycles/s | zkrwlock | 2000 | 200 (1 of 2 runs) |")
	require.Contains(t, text, "|  | Curator 5.4 | 2000 (1.00x) | 100 (1 of 2 runs) (2.00x) |")
	require.Contains(t, text, "|  | kazoo 2.8 | 0.4 (1 of 2 runs) (2.00x) | – |")
	require.Contains(t, text, "### +1 ms each way")
	require.Contains(t, text, "- loopback kazoo W6: watchdog")
	require.NotContains(t, text, "| W3 8 writers", "no row for a workload nobody ran")
	require.NotContains(t, text, "|  | go-zk Lock |", "no row for an implementation without runs")
	require.NotContains(t, text, "| W1 acquire p50 µs | zkrwlock |", "no row for a metric without values")
}

func TestFlatDirectoryIsLoopback(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"ours1.jsonl":  `{"impl": "zkrwlock", "workload": "W3", "acq_per_s": 300}`,
		"peers1.jsonl": `{"impl": "gozk", "workload": "W3", "acq_per_s": 100}`,
	})
	res, err := load([]string{dir})
	require.NoError(t, err)
	require.Equal(t, []column{{"loopback", 0}}, res.cols)
	var out strings.Builder
	writeTables(&out, res, "columns")
	require.Contains(t, out.String(), "| W3 8 writers, acq/s | 300 | – | – | 100 | – | – | 3.00x |")

	res, err = load([]string{filepath.Join(dir, "ours1.jsonl")})
	require.NoError(t, err, "files one by one")
	require.True(t, res.anyRuns("zkrwlock"))
	require.False(t, res.anyRuns("gozk"))

	_, err = load([]string{t.TempDir()})
	require.Error(t, err, "no files")
}

func TestExtras(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"loopback/extra1.jsonl": `{"impl": "zkrwlock", "workload": "W6-1000", "drain_s": 0.5, "zk_req_per_acq": 5}
{"impl": "zkrwlock", "workload": "W6-100", "drain_s": 0.05, "zk_req_per_acq": 5}
{"impl": "zkrwlock", "workload": "RB32", "zk_req_per_batch": 3, "batch_p50_us": 600}
{"impl": "kazoo", "workload": "W6-4", "drain_s": 1}
`,
		"loopback/ours1.jsonl": `{"impl": "zkrwlock", "workload": "W1", "ops_per_s": 1000}`,
	})
	res, err := load([]string{dir})
	require.NoError(t, err)
	require.Equal(t, []int{100, 1000}, res.drainSeries("loopback", "W6"))
	var out strings.Builder
	writeTables(&out, res, "latency")
	text := out.String()
	require.Contains(t, text, "| W6-100: 100 queued writers, drain s | 0.05 | 1 |")
	require.Contains(t, text, "| ReadBatch of 32 functions: requests/batch | 3.00 | 1 |")
	require.Contains(t, text, "Drain time of 1000 queued writers over that of 100: 10.0x.")
	require.NotContains(t, text, "W6-4", "a peer's smoke run")
}

// W7 sets zkrwlock's coalesced burst beside Curator's thread-per-lock one;
// zkrwlock's own burst without coalescing goes with its extras, and smoke
// runs with neither.
func TestBurst(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"loopback/ours1.jsonl": `{"impl": "zkrwlock", "workload": "W7", "bursts_per_s": 400, "burst_p50_us": 2500, "zk_req_per_burst": 3}
{"impl": "zkrwlock", "workload": "W7-each", "bursts_per_s": 40, "zk_req_per_burst": 192}
{"impl": "zkrwlock", "workload": "W7-smoke", "bursts_per_s": 1}
`,
		"loopback/peers1.jsonl": `{"impl": "curator", "workload": "W7", "bursts_per_s": 20, "burst_p50_us": 50000, "zk_req_per_burst": 192}
{"impl": "curator", "workload": "W7-smoke", "bursts_per_s": 1}
`,
	})
	res, err := load([]string{dir})
	require.NoError(t, err)
	var out strings.Builder
	writeTables(&out, res, "all")
	text := out.String()
	require.Contains(t, text, "| W7 64 readers of one process at once, bursts/s | 400 | 20 | – | – | 20.00x | – | – |")
	require.Contains(t, text, "| W7 burst p50 µs | 2500 | 50000 | – | – | 20.00x | – | – |")
	require.Contains(t, text, "| W7 requests/burst | 3.00 | 192.00 | – | – | – | – | – |")
	require.Contains(t, text, "| W7 without WithReadCoalescing: bursts/s | 40 | 1 |")
	require.Contains(t, text, "| W7 without WithReadCoalescing: requests/burst | 192.00 | 1 |")
}

// W8 sets zkrwlock's LockAll cycle beside Curator's InterProcessMultiLock:
// the cycle, the set's acquire and release, requests per set, the contended sets, and
// deadlocks and violations summed over the runs; a smoke run is left out.
func TestSeveralLocks(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"loopback/ours1.jsonl": `{"impl": "zkrwlock", "workload": "W8", "locks": 4, "ops_per_s": 900, "acq_p50_us": 800, "rel_p50_us": 300, "zk_req_per_acq": 9.0, "contended_sets_per_s": 400, "deadlocks": 0, "violations": 0}
{"impl": "zkrwlock", "workload": "W8-smoke", "ops_per_s": 1, "deadlocks": 7}
`,
		"loopback/ours2.jsonl": `{"impl": "zkrwlock", "workload": "W8", "locks": 4, "ops_per_s": 700, "acq_p50_us": 1000, "rel_p50_us": 500, "zk_req_per_acq": 9.0, "contended_sets_per_s": 300, "deadlocks": 0, "violations": 1}`,
		"loopback/peers1.jsonl": `{"impl": "curator", "workload": "W8", "locks": 4, "ops_per_s": 200, "acq_p50_us": 2700, "rel_p50_us": 1600, "zk_req_per_acq": 12.0, "contended_sets_per_s": 0.5, "deadlocks": 10, "violations": 0}
{"impl": "curator", "workload": "W8-smoke", "ops_per_s": 1, "deadlocks": 7}
`,
		"loopback/peers2.jsonl": `{"impl": "curator", "workload": "W8", "locks": 4, "ops_per_s": 300, "acq_p50_us": 2700, "rel_p50_us": 1600, "zk_req_per_acq": 12.0, "contended_sets_per_s": 0.3, "deadlocks": 9, "violations": 0}`,
	})
	res, err := load([]string{dir})
	require.NoError(t, err)
	require.True(t, res.anyRuns("zkrwlock"), "W8 alone is a comparison")
	var out strings.Builder
	writeTables(&out, res, "all")
	text := out.String()
	require.Contains(t, text, "| W8 4 locks at once (2 write, 2 read), cycles/s | 800 | 250 | – | – | 3.20x | – | – |")
	require.Contains(t, text, "| W8 set acquire p50 µs | 900 | 2700 | – | – | 3.00x | – | – |")
	require.Contains(t, text, "| W8 set release p50 µs | 400 | 1600 | – | – | 4.00x | – | – |")
	require.Contains(t, text, "| W8 requests/set | 9.00 | 12.00 | – | – | – | – | – |")
	require.Contains(t, text, "| W8 4 clients, random orders, sets/s | 350 | 0.4 | – | – | 875.00x | – | – |")
	require.Contains(t, text, "| W8 deadlocks (sets not granted in time), all runs | 0 | 19 | – | – | – | – | – |")
	require.Contains(t, text, "| violations, all runs | 1 | 0 |", "W8 counts its violations")
	require.Contains(t, text, "| zkrwlock | – | – | – | – | – | – | – | – | 25% |", "the spread of W8's cycles/s")
}

// W9 sets zkrwlock's lock cycles on many locks beside Curator's
// InterProcessMutex, each with the raw pairs of its own run; the lock/raw
// quotient has no ratio between implementations, and every run's absolute
// rates are listed beside it, round by round.
func TestManyLocks(t *testing.T) {
	dir := t.TempDir()
	line := func(impl string, cycles, raw, busy float64, violations int) string {
		return fmt.Sprintf(`{"impl": %q, "workload": "W9", "clients": 64, "locks": 1000, "cycles_per_s": %g, "raw_pairs_per_s": %g, "lock_over_raw": %g, "machine_busy": %g, "acq_p50_us": 20000, "zk_req_per_acq": 3.0, "timeouts": 0, "violations": %d}`,
			impl, cycles, raw, cycles/raw, busy, violations) + "\n"
	}
	write(t, dir, map[string]string{
		"loopback/ours1.jsonl":  line("zkrwlock", 1800, 2000, 0.97, 0) + `{"impl": "zkrwlock", "workload": "W9-smoke", "cycles_per_s": 1}` + "\n",
		"loopback/ours2.jsonl":  line("zkrwlock", 1600, 2000, 0.99, 1),
		"loopback/peers1.jsonl": strings.Replace(line("curator", 1200, 2000, 0.98, 0), "}", `, "ensemble_cpu_s": 61.5}`, 1),
		"loopback/peers2.jsonl": strings.Replace(line("curator", 1000, 2000, 0.99, 0), "}", `, "ensemble_cpu_s": 60}`, 1),
	})
	res, err := load([]string{dir})
	require.NoError(t, err)
	var out strings.Builder
	writeTables(&out, res, "all")
	text := out.String()
	require.Contains(t, text, "| W9 64 sessions over 1,000 locks (3-node ensemble), cycles/s | 1700 | 1100 | – | – | 1.55x | – | – |")
	require.Contains(t, text, "| W9 raw create+delete pairs/s, same run | 2000 | 2000 | – | – | 1.00x | – | – |")
	require.Contains(t, text, "| W9 lock cycles/s over raw pairs/s | 0.85 | 0.55 | – | – | – | – | – |")
	require.Contains(t, text, "| violations, all runs | 1 | 0 |", "W9 counts its violations")
	require.Contains(t, text, "### W9 run by run, loopback")
	require.Contains(t, text, "| zkrwlock | 2 | 1600 | 2000 | 0.80 | 0.99 | – |")
	require.Contains(t, text, "| Curator 5.4 | 1 | 1200 | 2000 | 0.60 | 0.98 | 61.5 |")
	require.NotContains(t, text, "| zkrwlock | 3 |", "the smoke run is left out")
}
