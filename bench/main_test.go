package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain stops the shared server before goleak looks for leftover
// goroutines: a running server keeps the goroutine that reaps its process.
func TestMain(m *testing.M) { goleak.VerifyTestMain(stopServerAfter{m}) }

type stopServerAfter struct{ m *testing.M }

func (s stopServerAfter) Run() int {
	code := s.m.Run()
	if err := closeShared(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: stopping the ZooKeeper server: %v\n", err)
		code = 1
	}
	return code
}

// The peers' generator: these are the first numbers of Python's
// SplitMix64(1) and SplitMix64(8) (bench/peers/kazoo/kazoo_bench.py).
func TestSplitmix64MatchesPeers(t *testing.T) {
	for _, tc := range []struct {
		seed uint64
		want []float64
	}{
		{1, []float64{0.5665615751722809, 0.7457817572627011, 0.9710027535867962, 0.4443592170557721, 0.44426470082635805}},
		{8, []float64{0.6185046250316943, 0.6119480962583931, 0.6890293541563554, 0.536113253574391, 0.06381785808801244}},
	} {
		m := splitmix64{tc.seed}
		for i, want := range tc.want {
			if got := m.next(); got != want {
				t.Errorf("seed %d, draw %d: got %v, want %v", tc.seed, i, got, want)
			}
		}
	}
	m, writes := splitmix64{1}, 0
	for range 1000 {
		if m.next() >= w5ReadShare {
			writes++
		}
	}
	if writes != 87 { // Python: 87 of Mix(1)'s first 1000 draws are >= 0.9
		t.Errorf("writes in 1000 draws of seed 1: got %d, want 87", writes)
	}
}

func TestNearestRankPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(201-i)*time.Microsecond) // unsorted
	}
	for _, tc := range []struct{ p, want float64 }{{50, 100}, {99, 198}, {100, 200}, {0.1, 1}} {
		if got := pct(ds, tc.p); got != tc.want {
			t.Errorf("pct(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := pct(nil, 50); got != 0 {
		t.Errorf("pct(nil) = %v", got)
	}
}

func TestRecordFormat(t *testing.T) {
	r := newRecord("W1")
	r.put("clients", 1)
	r.put("elapsed_s", 1.23456)
	r.put("zk_req_per_acq", nil)
	want := `{"impl": "zkrwlock", "workload": "W1", "clients": 1, "elapsed_s": 1.235, "zk_req_per_acq": null}`
	if got := r.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestParseDrain(t *testing.T) {
	w, r, err := parseDrain("100,300,1000;1000")
	if err != nil || fmt.Sprint(w, r) != "[100 300 1000] [1000]" {
		t.Errorf("got %v %v %v", w, r, err)
	}
	if _, _, err := parseDrain("10,x"); err == nil {
		t.Error("no error for a bad length")
	}
}

func TestParseW9(t *testing.T) {
	c, l, err := parseW9("64, 1000")
	if err != nil || c != 64 || l != 1000 {
		t.Errorf("got %v %v %v", c, l, err)
	}
	for _, bad := range []string{"64", "64,x", "0,10", "8,-1", ""} {
		if _, _, err := parseW9(bad); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}
