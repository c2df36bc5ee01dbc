package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// column is one network setting of a comparison: loopback, or a delay
// proxy adding delayMS each way.
type column struct {
	name    string  // its directory: loopback, delay-0.5ms
	delayMS float64 // 0 for loopback
}

func (c column) label() string {
	if c.delayMS == 0 {
		return "loopback"
	}
	return "+" + strconv.FormatFloat(c.delayMS, 'f', -1, 64) + " ms"
}

var delayDir = regexp.MustCompile(`^delay-([0-9]+(?:\.[0-9]+)?)ms$`)

// parseColumn names the column a directory holds: "loopback", or
// "delay-<ms>ms".
func parseColumn(dir string) (column, bool) {
	if dir == "loopback" {
		return column{name: dir}, true
	}
	m := delayDir.FindStringSubmatch(dir)
	if m == nil {
		return column{}, false
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil || ms <= 0 {
		return column{}, false
	}
	return column{name: dir, delayMS: ms}, true
}

// key identifies the runs of one implementation and workload in one column.
type key struct {
	col            string
	impl, workload string
}

// results are the runs read from the JSON lines of a comparison.
type results struct {
	cols   []column
	values map[key]map[string][]float64 // the numeric fields of every run
	runs   map[key]int                  // runs without an error
	errors []string                     // "column impl workload: error", for failed runs
}

// The workloads the comparison shows. Other lines (smoke runs, Curator's
// runs with a longer warm-up) are not the workloads' definitions and are
// left out; zkrwlock's own extra workloads get a table of their own.
var workloads = []string{"W1", "W2", "W3", "W4", "W5", "W6", "W6r", "W7", "W8", "W9", "W11"}

// extraWorkload matches zkrwlock's own workloads: the drain series
// (W6-<n>, W6r-<n>), the batches (RB32, RL32), W7 without coalescing
// (W7-each), and W1, W4 and W5 with caching (W1c, W4c, W5c).
var extraWorkload = regexp.MustCompile(`^(W6r?-[0-9]+|RB32|RL32|W7-each|W1c|W4c|W5c)$`)

func isExtra(w string) bool { return extraWorkload.MatchString(w) }

// load reads a comparison: a directory with one subdirectory per column
// (loopback, delay-0.5ms, ...), each holding *.jsonl files, as
// scripts/compare-peers.sh writes it; or a directory of *.jsonl files, or
// such files named one by one, which make one loopback column.
func load(args []string) (*results, error) {
	res := &results{values: map[key]map[string][]float64{}, runs: map[key]int{}}
	files := map[string][]string{} // column name -> files
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files["loopback"] = append(files["loopback"], a)
			continue
		}
		direct, err := filepath.Glob(filepath.Join(a, "*.jsonl"))
		if err != nil {
			return nil, err
		}
		files["loopback"] = append(files["loopback"], direct...)
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if _, ok := parseColumn(e.Name()); !ok {
				continue
			}
			fs, err := filepath.Glob(filepath.Join(a, e.Name(), "*.jsonl"))
			if err != nil {
				return nil, err
			}
			files[e.Name()] = append(files[e.Name()], fs...)
		}
	}
	for name, fs := range files {
		if len(fs) == 0 {
			continue
		}
		c, _ := parseColumn(name)
		res.cols = append(res.cols, c)
		for _, f := range fs {
			if err := res.readFile(c, f); err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(res.cols, func(i, j int) bool { return res.cols[i].delayMS < res.cols[j].delayMS })
	if len(res.cols) == 0 {
		return nil, fmt.Errorf("no *.jsonl files in %s", strings.Join(args, " "))
	}
	return res, nil
}

func (res *results) readFile(c column, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := res.read(c, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// read takes the runs of one column from JSON lines; other lines (a
// harness's stray output) are skipped.
func (res *results) read(c column, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		impl, _ := rec["impl"].(string)
		w, _ := rec["workload"].(string)
		if !slices.Contains(workloads, w) && !(impl == ours.name && isExtra(w)) {
			continue
		}
		if wc, ok := rec["warmup_cycles"].(float64); ok && wc != 100 {
			continue
		}
		k := key{c.name, impl, w}
		if e, ok := rec["error"]; ok {
			res.errors = append(res.errors, fmt.Sprintf("%s %s %s: %v", c.label(), impl, w, e))
			continue
		}
		res.runs[k]++
		if res.values[k] == nil {
			res.values[k] = map[string][]float64{}
		}
		for field, v := range rec {
			if f, ok := v.(float64); ok {
				res.values[k][field] = append(res.values[k][field], f)
			}
		}
	}
	return sc.Err()
}

// median of the field over the runs, and whether there was any.
func (res *results) median(col, impl, workload, field string) (float64, bool) {
	vs := res.values[key{col, impl, workload}][field]
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// sum of the field over the runs.
func (res *results) sum(col, impl, workload, field string) (float64, bool) {
	vs := res.values[key{col, impl, workload}][field]
	var s float64
	for _, v := range vs {
		s += v
	}
	return s, len(vs) > 0
}

// spread of the field over the runs: (max-min)/mean.
func (res *results) spread(col, impl, workload, field string) (float64, bool) {
	vs := res.values[key{col, impl, workload}][field]
	if len(vs) < 2 {
		return 0, false
	}
	var total float64
	for _, v := range vs {
		total += v
	}
	mean := total / float64(len(vs))
	if mean == 0 {
		return 0, false
	}
	return (slices.Max(vs) - slices.Min(vs)) / mean, true
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// rounds is the most runs any implementation has of one workload in one
// column: the number of rounds of the comparison.
func (res *results) rounds() int {
	n := 0
	for _, r := range res.runs {
		n = max(n, r)
	}
	return n
}
