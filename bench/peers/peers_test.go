package peers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/delayproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// server is the one ZooKeeper server of the package's tests, as the
// comparison has one: the harnesses' workloads each use lock paths of
// their own.
var server = zkserver.Shared{Config: zkserver.Config{MaxSessionTimeout: 60 * time.Second}}

// build is where peer.sh builds the harnesses, once for all tests.
var build string

func TestMain(m *testing.M) { goleak.VerifyTestMain(setUp{m}) }

// setUp makes the build directory, and stops the server and removes the
// directory after the tests.
type setUp struct{ m *testing.M }

func (s setUp) Run() int {
	var err error
	if build, err = os.MkdirTemp("", "zkrwlock-peers-"); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		return 1
	}
	code := s.m.Run()
	if err := errors.Join(server.Close(), os.RemoveAll(build)); err != nil {
		fmt.Fprintln(os.Stderr, "peers: cleaning up:", err)
		code = 1
	}
	return code
}

// smoke shrinks the workloads to a fraction of a second each.
var smoke = []string{"RWBENCH_OPS=20", "RWBENCH_WARMUP=5", "RWBENCH_SECONDS=0.3", "RWBENCH_WAITERS=4", "RWBENCH_BURSTS=3", "RWBENCH_W9=4,10"}

var allWorkloads = []string{"W1", "W2", "W3", "W4", "W5", "W6", "W6r"}

// Every harness runs every workload it supports, small, against a real
// server: each prints one line per workload with the keys the comparison
// reads, no error, no violation, and the requests per acquisition each
// recipe is known to take.
func TestHarnesses(t *testing.T) {
	tier.Long(t)
	cs := server.Get(t).ConnectString()
	for _, tc := range []struct {
		impl      string
		workloads []string
		// requests per acquisition, uncontended and after one wait
		uncontended, waited float64
	}{
		{"curator", append(slices.Clip(allWorkloads), "W7", "W8", "W9"), 3, 5}, // W7's, W8's and W9's only peer
		{"kazoo", allWorkloads, 4, 6},                                          // one more listing: see README.md
		{"gozk", []string{"W1", "W3", "W6"}, 3, 5},
	} {
		t.Run(tc.impl, func(t *testing.T) { // one at a time: the server counts every packet
			zktest.RequirePeer(t, tc.impl)
			records := runPeer(t, tc.impl, append([]string{cs}, tc.workloads...), smoke...)
			require.Len(t, records, len(tc.workloads))
			for i, r := range records {
				w := tc.workloads[i]
				require.Equal(t, tc.impl, r["impl"])
				require.NotContains(t, r, "error", "%s: %v", w, r["error"])
				for _, k := range keys[w] {
					require.Contains(t, r, k, "%s has no %s", w, k)
				}
				require.Equal(t, smokeName(w), r["workload"])
				if v, ok := r["violations"]; ok {
					require.Zero(t, v, "%s: mutual exclusion violations", w)
				}
				if v, ok := r["failed"]; ok {
					require.Zero(t, v, "%s: failed waiters", w)
				}
				// Pings add packets (go-zookeeper's every 3.3 s, the others'
				// when idle), never remove any: W6 has only 4 acquisitions.
				req := r["zk_req_per_acq"].(float64)
				switch w {
				case "W1", "W2", "W4", "W7":
					assert.True(t, req >= tc.uncontended && req <= tc.uncontended+0.2,
						"%s: %v requests per acquisition, want %v", w, req, tc.uncontended)
				case "W3": // nearly all wait once
					assert.InDelta(t, tc.waited, req, 0.3, "%s requests per acquisition", w)
				case "W9": // a raw pair is a create and a delete; a cycle that did not wait, one listing more
					assert.InDelta(t, 2, r["zk_req_per_pair"].(float64), 0.2, "W9 requests per raw pair")
					assert.True(t, req >= tc.uncontended && req <= tc.waited+0.2,
						"%s: %v requests per acquisition, want %v to %v", w, req, tc.uncontended, tc.waited)
				case "W6": // all wait once
					assert.True(t, req >= tc.waited && req <= tc.waited+0.6,
						"%s: %v requests per acquisition, want %v", w, req, tc.waited)
				}
			}
		})
	}
}

// The keys of each workload's line that the table printer and the
// peers' own tools read.
var keys = map[string][]string{
	"W1":  {"clients", "warmup_cycles", "ops", "elapsed_s", "ops_per_s", "acq_p50_us", "acq_p99_us", "rel_p50_us", "rel_p99_us", "zk_packets", "zk_req_per_acq"},
	"W3":  {"clients", "hold_ms", "elapsed_s", "acquisitions", "acq_per_s", "per_client_min", "per_client_max", "timeouts", "violations", "zk_req_per_acq"},
	"W5":  {"clients", "hold_ms", "acquisitions", "acq_per_s", "writes", "hold_mean_us", "timeouts", "violations", "zk_req_per_acq"},
	"W6":  {"waiters", "enqueue_s", "failed", "drain_s", "handoff_mean_us", "handoff_p50_us", "handoff_p99_us", "violations", "zk_req_per_acq"},
	"W6r": {"waiters", "enqueue_s", "failed", "drain_s", "wake_mean_us", "wake_p50_us", "wake_max_us", "violations", "zk_req_per_acq"},
	"W7":  {"clients", "threads", "bursts", "elapsed_s", "bursts_per_s", "burst_p50_us", "burst_p99_us", "timeouts", "zk_req_per_acq", "zk_req_per_burst"},
	"W9":  {"clients", "locks", "servers", "phase_s", "phase_rates", "warmup_s", "acquisitions", "cycles_per_s", "raw_pairs", "raw_pairs_per_s", "lock_over_raw", "timeouts", "violations", "acq_p50_us", "create_p50_us", "zk_req_per_acq", "zk_req_per_pair", "machine_busy"},
	"W8":  {"locks", "ops", "ops_per_s", "acq_p50_us", "acq_p99_us", "rel_p50_us", "rel_p99_us", "zk_req_per_acq", "contended_clients", "contended_sets", "contended_sets_per_s", "deadlocks", "violations"},
}

func init() {
	keys["W2"], keys["W4"] = keys["W1"], keys["W3"]
}

func smokeName(w string) string {
	switch w {
	case "W6", "W6r":
		return w + "-4"
	}
	return w + "-smoke"
}

// Java, Python and Go draw the same W5 sequence for every client: the
// first outputs of seeds 1 to 8, and how many of the first 1000 draws
// of each are writes.
func TestSplitmix64Agrees(t *testing.T) {
	want := map[string]any{}
	var first [][]uint64
	var writes []int
	for seed := uint64(1); seed <= 8; seed++ {
		m := splitmix64{seed}
		var draws []uint64
		for range 5 {
			draws = append(draws, m.next53())
		}
		first = append(first, draws)
		m, w := splitmix64{seed}, 0
		for range 1000 {
			if float64(m.next53())*0x1p-53 >= 0.9 {
				w++
			}
		}
		writes = append(writes, w)
	}
	// Anchors: the first draw of seed 1 as a float, and the writes of
	// seed 1, which bench/ checks for zkrwlock's own generator.
	require.Equal(t, 0.5665615751722809, float64(first[0][0])*0x1p-53)
	require.Equal(t, 87, writes[0])
	want["first"], want["writes"] = first, writes
	wantJSON, err := json.Marshal(want)
	require.NoError(t, err)

	for _, impl := range []string{"curator", "kazoo"} {
		t.Run(impl, func(t *testing.T) {
			zktest.RequirePeer(t, impl)
			r := runPeer(t, impl, []string{"127.0.0.1:1", "splitmix64"}) // no server needed
			require.Len(t, r, 1)
			got, err := json.Marshal(map[string]any{"first": r[0]["first"], "writes": r[0]["writes"]})
			require.NoError(t, err)
			require.JSONEq(t, string(wantJSON), string(got))
		})
	}
}

// splitmix64 for the test: the top 53 bits of each output.
type splitmix64 struct{ x uint64 }

func (m *splitmix64) next53() uint64 {
	m.x += 0x9E3779B97F4A7C15
	z := m.x
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return (z ^ z>>31) >> 11
}

// Through a delay proxy, every request of zk.Lock's uncontended cycle
// (create, list; delete) pays a round trip of twice the delay, and the
// server counts the same requests as without it.
func TestHarnessThroughDelayProxy(t *testing.T) {
	const delay = 2 * time.Millisecond
	cs := server.Get(t).ConnectString()
	p, err := delayproxy.Listen("127.0.0.1:0", cs, delay)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()

	r := runPeer(t, "gozk", []string{p.Addr(), "W1"}, "RWBENCH_OPS=20", "RWBENCH_WARMUP=2")
	require.Len(t, r, 1)
	require.NotContains(t, r[0], "error")
	req := r[0]["zk_req_per_acq"].(float64)
	assert.True(t, req >= 3 && req <= 3.2, "%v requests per cycle, want 3", req)
	roundTrip := float64(2*delay) / 1e3 // µs
	assert.GreaterOrEqual(t, r[0]["acq_p50_us"], 2*roundTrip, "acquire: create and list")
	assert.GreaterOrEqual(t, r[0]["rel_p50_us"], roundTrip, "release: delete")
	t.Logf("through %v each way: acquire p50 %v µs, release p50 %v µs; lateness %+v",
		delay, r[0]["acq_p50_us"], r[0]["rel_p50_us"], p.Stats())
}

// runPeer runs peer.sh with args and returns the JSON lines it printed.
func runPeer(t *testing.T, impl string, args []string, env ...string) []map[string]any {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "./peer.sh", append([]string{impl}, args...)...)
	cmd.Env = append(os.Environ(), "PEERS_BUILD="+build, "PATH="+goBinDir()+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("peer.sh %s %s: %v\n%s", impl, strings.Join(args, " "), err, stderr.String())
	}
	var records []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("peer.sh %s: not a JSON line: %q", impl, line)
		}
		records = append(records, r)
	}
	return records
}

// goBinDir is where the go command that runs the tests lives, for
// peer.sh's build of the gozk harness.
func goBinDir() string {
	if p, err := exec.LookPath("go"); err == nil {
		return filepath.Dir(p)
	}
	return filepath.Join(runtime.GOROOT(), "bin")
}
