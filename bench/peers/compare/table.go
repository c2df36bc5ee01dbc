package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

type impl struct{ name, label, short string }

var (
	ours  = impl{"zkrwlock", "zkrwlock", "zkrwlock"}
	peers = []impl{
		{"curator", "Curator 5.4", "Curator"},
		{"kazoo", "kazoo 2.8", "kazoo"},
		{"gozk", "go-zk Lock", "go-zk"},
	}
)

// kind says how a metric reads: which way is better, whether a ratio
// means anything, and how it is summarized over runs and printed.
type kind int

const (
	rate     kind = iota // per second, higher is better: median, ratio zkrwlock/peer
	latency              // µs, lower is better: median, ratio peer/zkrwlock
	seconds              // s, lower is better: median, ratio peer/zkrwlock
	requests             // ZooKeeper requests per acquisition: median, no ratio
	total                // events over all runs (timeouts): sum, no ratio
	fraction             // a dimensionless share or quotient (W9's lock/raw): median, no ratio
)

type row struct {
	workload, field, label string
	kind                   kind
}

var rows = []row{
	{"W1", "ops_per_s", "W1 uncontended write, cycles/s", rate},
	{"W1", "acq_p50_us", "W1 acquire p50 µs", latency},
	{"W1", "zk_req_per_acq", "W1 requests/cycle", requests},
	{"W2", "ops_per_s", "W2 uncontended read, cycles/s", rate},
	{"W2", "acq_p50_us", "W2 acquire p50 µs", latency},
	{"W2", "zk_req_per_acq", "W2 requests/cycle", requests},
	{"W3", "acq_per_s", "W3 8 writers, acq/s", rate},
	{"W3", "zk_req_per_acq", "W3 requests/acq", requests},
	{"W4", "acq_per_s", "W4 8 readers, acq/s", rate},
	{"W4", "zk_req_per_acq", "W4 requests/acq", requests},
	{"W5", "acq_per_s", "W5 mixed 90/10, acq/s", rate},
	{"W5", "zk_req_per_acq", "W5 requests/acq", requests},
	{"W5", "timeouts", "W5 acquire timeouts, all runs", total},
	{"W6", "drain_s", "W6 200-writer drain, s", seconds},
	{"W6", "handoff_p50_us", "W6 handoff p50 µs", latency},
	{"W6", "zk_req_per_acq", "W6 requests/acq", requests},
	{"W6r", "drain_s", "W6r 200 readers granted, s", seconds},
	{"W6r", "zk_req_per_acq", "W6r requests/acq", requests},
	{"W7", "bursts_per_s", "W7 64 readers of one process at once, bursts/s", rate},
	{"W7", "burst_p50_us", "W7 burst p50 µs", latency},
	{"W7", "zk_req_per_burst", "W7 requests/burst", requests},
	{"W8", "ops_per_s", "W8 4 locks at once (2 write, 2 read), cycles/s", rate},
	{"W8", "acq_p50_us", "W8 set acquire p50 µs", latency},
	{"W8", "rel_p50_us", "W8 set release p50 µs", latency},
	{"W8", "zk_req_per_acq", "W8 requests/set", requests},
	{"W8", "contended_sets_per_s", "W8 4 clients, random orders, sets/s", rate},
	{"W8", "deadlocks", "W8 deadlocks (sets not granted in time), all runs", total},
	{"W9", "cycles_per_s", "W9 64 sessions over 1,000 locks (3-node ensemble), cycles/s", rate},
	{"W9", "raw_pairs_per_s", "W9 raw create+delete pairs/s, same run", rate},
	{"W9", "lock_over_raw", "W9 lock cycles/s over raw pairs/s", fraction},
	{"W9", "acq_p50_us", "W9 acquire p50 µs", latency},
	{"W9", "zk_req_per_acq", "W9 requests/cycle", requests},
	{"W9", "timeouts", "W9 acquire timeouts, all runs", total},
	{"W9", "machine_busy", "W9 machine busy in the lock phases (1 = all cores)", fraction},
	{"W11", "acq_per_s", "W11 32 clients, 4 permits held 1 ms, acq/s", rate},
	{"W11", "of_ceiling", "W11 acq/s over the holds' ceiling (4,000/s)", fraction},
	{"W11", "acq_p50_us", "W11 acquire p50 µs", latency},
	{"W11", "zk_req_per_acq", "W11 requests/acq", requests},
	{"W11", "timeouts", "W11 acquire timeouts, all runs", total},
}

// checked are the workloads whose runs count mutual exclusion violations.
var checked = []string{"W3", "W5", "W6", "W6r", "W8", "W9", "W11"}

// main metric of each workload, for the spread table.
var mainMetric = map[string]string{
	"W1": "ops_per_s", "W2": "ops_per_s", "W3": "acq_per_s", "W4": "acq_per_s",
	"W5": "acq_per_s", "W6": "drain_s", "W6r": "drain_s", "W7": "bursts_per_s",
	"W8": "ops_per_s", "W9": "cycles_per_s", "W11": "acq_per_s",
}

// cell is one implementation's value of a row in a column.
type cell struct {
	v    float64
	ok   bool
	runs int
}

func (res *results) cell(r row, col, implName string) cell {
	k := key{col, implName, r.workload}
	c := cell{runs: res.runs[k]}
	if r.kind == total {
		c.v, c.ok = res.sum(col, implName, r.workload, r.field)
	} else {
		c.v, c.ok = res.median(col, implName, r.workload, r.field)
	}
	return c
}

// violations sums the violations of every checked workload's runs.
func (res *results) violations(col, implName string) cell {
	var c cell
	for _, w := range checked {
		if v, ok := res.sum(col, implName, w, "violations"); ok {
			c.v += v
			c.ok = true
		}
	}
	return c
}

// ratio is how many times better zkrwlock is than the peer on this row.
func ratio(r row, ours, peer cell) (float64, bool) {
	if !ours.ok || !peer.ok || ours.v == 0 || peer.v == 0 {
		return 0, false
	}
	switch r.kind {
	case rate:
		return ours.v / peer.v, true
	case latency, seconds:
		return peer.v / ours.v, true
	}
	return 0, false
}

func format(r row, c cell, rounds int) string {
	if !c.ok {
		return "–"
	}
	var s string
	switch r.kind {
	case requests, fraction:
		s = strconv.FormatFloat(c.v, 'f', 2, 64)
	case seconds:
		s = strconv.FormatFloat(c.v, 'g', 3, 64)
	default:
		if c.v > 0 && c.v < 10 { // Curator's contended W8: a fraction of a set per second
			s = strconv.FormatFloat(c.v, 'g', 2, 64)
		} else {
			s = strconv.FormatFloat(c.v, 'f', 0, 64)
		}
	}
	if c.runs < rounds && r.kind != total {
		s += fmt.Sprintf(" (%d of %d runs)", c.runs, rounds)
	}
	return s
}

func formatRatio(x float64, ok bool) string {
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', 2, 64) + "x"
}

// has reports whether the implementation ran the workload in any column.
func (res *results) has(implName, workload string) bool {
	for _, c := range res.cols {
		if res.runs[key{c.name, implName, workload}] > 0 {
			return true
		}
	}
	return false
}

// hasValue reports whether the implementation has a value for the row in
// any column.
func (res *results) hasValue(r row, implName string) bool {
	for _, c := range res.cols {
		if res.cell(r, c.name, implName).ok {
			return true
		}
	}
	return false
}

// inColumn reports whether any implementation has a value for the row in
// the column.
func (res *results) inColumn(r row, col string) bool {
	for _, im := range append([]impl{ours}, peers...) {
		if res.cell(r, col, im.name).ok {
			return true
		}
	}
	return false
}

func (res *results) anyRuns(implName string) bool {
	for _, w := range workloads {
		if res.has(implName, w) {
			return true
		}
	}
	return false
}

// writeByLatency writes one table: a row per metric and implementation,
// a column per network setting; each peer's value is followed by how many
// times better zkrwlock is.
func (res *results) writeByLatency(w io.Writer) {
	rounds := res.rounds()
	head := []string{"workload / metric", ""}
	for _, c := range res.cols {
		head = append(head, c.label())
	}
	writeRow(w, head...)
	writeRow(w, strings.Split(strings.Repeat("---|", len(head)-1)+"---", "|")...)
	for _, r := range rows {
		label := r.label
		for _, im := range append([]impl{ours}, peers...) {
			if !res.hasValue(r, im.name) {
				continue
			}
			cells := []string{label, im.label}
			label = ""
			for _, c := range res.cols {
				v := res.cell(r, c.name, im.name)
				s := format(r, v, rounds)
				if im != ours {
					if x, ok := ratio(r, res.cell(r, c.name, ours.name), v); ok {
						s += " (" + formatRatio(x, ok) + ")"
					}
				}
				cells = append(cells, s)
			}
			writeRow(w, cells...)
		}
	}
	label := "violations (" + strings.Join(checked, ", ") + "), all runs"
	for _, im := range append([]impl{ours}, peers...) {
		if !res.anyRuns(im.name) {
			continue
		}
		cells := []string{label, im.label}
		label = ""
		for _, c := range res.cols {
			cells = append(cells, format(row{kind: total}, res.violations(c.name, im.name), rounds))
		}
		writeRow(w, cells...)
	}
}

// writeColumn writes the table of one network setting: medians of every
// implementation side by side, then zkrwlock's ratio to each peer.
func (res *results) writeColumn(w io.Writer, col column) {
	rounds := res.rounds()
	head := []string{"workload / metric", ours.label}
	for _, p := range peers {
		head = append(head, p.label)
	}
	for _, p := range peers {
		head = append(head, "× "+p.short)
	}
	writeRow(w, head...)
	writeRow(w, strings.Split(strings.Repeat("---|", len(head)-1)+"---", "|")...)
	for _, r := range rows {
		if !res.inColumn(r, col.name) {
			continue
		}
		o := res.cell(r, col.name, ours.name)
		cells := []string{r.label, format(r, o, rounds)}
		for _, p := range peers {
			cells = append(cells, format(r, res.cell(r, col.name, p.name), rounds))
		}
		for _, p := range peers {
			cells = append(cells, formatRatio(ratio(r, o, res.cell(r, col.name, p.name))))
		}
		writeRow(w, cells...)
	}
	cells := []string{"violations, all runs"}
	for _, im := range append([]impl{ours}, peers...) {
		cells = append(cells, format(row{kind: total}, res.violations(col.name, im.name), rounds))
	}
	for range peers {
		cells = append(cells, "–")
	}
	writeRow(w, cells...)
}

// writeSpread writes the spread of each workload's main metric over the
// runs of one network setting: (max−min)/mean.
func (res *results) writeSpread(w io.Writer, col column) {
	head := []string{""}
	head = append(head, workloads...)
	writeRow(w, head...)
	writeRow(w, strings.Split(strings.Repeat("---|", len(head)-1)+"---", "|")...)
	for _, im := range append([]impl{ours}, peers...) {
		if !res.anyRuns(im.name) {
			continue
		}
		cells := []string{im.label}
		for _, wl := range workloads {
			if s, ok := res.spread(col.name, im.name, wl, mainMetric[wl]); ok {
				cells = append(cells, fmt.Sprintf("%.0f%%", 100*s))
			} else {
				cells = append(cells, "–")
			}
		}
		writeRow(w, cells...)
	}
}

func writeRow(w io.Writer, cells ...string) {
	fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
}

// extraRows are zkrwlock's own workloads' metrics.
var extraRows = []row{
	{"RB32", "zk_req_per_batch", "ReadBatch of 32 functions: requests/batch", requests},
	{"RB32", "batch_p50_us", "ReadBatch of 32 functions: batch p50 µs", latency},
	{"RL32", "zk_req_per_batch", "32 concurrent RLock/Release: requests/batch", requests},
	{"RL32", "batch_p50_us", "32 concurrent RLock/Release: batch p50 µs", latency},
	{"W7-each", "bursts_per_s", "W7 without WithReadCoalescing: bursts/s", rate},
	{"W7-each", "zk_req_per_burst", "W7 without WithReadCoalescing: requests/burst", requests},
	{"W1c", "ops_per_s", "W1c, W1 with WithCaching: cycles/s", rate},
	{"W1c", "acq_p50_us", "W1c, W1 with WithCaching: acquire p50 µs", latency},
	{"W1c", "zk_req_per_acq", "W1c, W1 with WithCaching: requests/acq", requests},
	{"W4c", "acq_per_s", "W4c, W4 with WithCaching: acquisitions/s", rate},
	{"W5c", "acq_per_s", "W5c, W5 with WithCaching: acquisitions/s", rate},
}

// drainSeries returns the lengths of zkrwlock's extra drain runs of kind
// ("W6" for writers, "W6r" for readers) in the column, shortest first.
func (res *results) drainSeries(col, kind string) []int {
	var ns []int
	for k := range res.runs {
		if k.col != col || k.impl != ours.name {
			continue
		}
		if rest, ok := strings.CutPrefix(k.workload, kind+"-"); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				ns = append(ns, n)
			}
		}
	}
	slices.Sort(ns)
	return ns
}

// writeExtras writes the medians of zkrwlock's own workloads in one
// column, if it ran them: the drain series at other queue lengths, and
// ReadBatch against as many separate read grants. It reports whether it
// wrote anything.
func (res *results) writeExtras(w io.Writer, col column) bool {
	var lines [][]string
	add := func(r row) {
		c := res.cell(r, col.name, ours.name)
		if !c.ok {
			return
		}
		lines = append(lines, []string{r.label, format(r, c, 0), strconv.Itoa(c.runs)})
	}
	for _, kind := range []string{"W6", "W6r"} {
		who := "writers"
		if kind == "W6r" {
			who = "readers"
		}
		for _, n := range res.drainSeries(col.name, kind) {
			wl := fmt.Sprintf("%s-%d", kind, n)
			add(row{wl, "drain_s", fmt.Sprintf("%s: %d queued %s, drain s", wl, n, who), seconds})
			if kind == "W6" {
				add(row{wl, "handoff_p50_us", fmt.Sprintf("%s: handoff p50 µs", wl), latency})
			}
			add(row{wl, "zk_req_per_acq", fmt.Sprintf("%s: requests/acq", wl), requests})
		}
	}
	for _, r := range extraRows {
		add(r)
	}
	if len(lines) == 0 {
		return false
	}
	writeRow(w, "zkrwlock's own workload / metric", "median", "runs")
	writeRow(w, "---", "---", "---")
	for _, l := range lines {
		writeRow(w, l...)
	}
	if ws := res.drainSeries(col.name, "W6"); len(ws) > 1 {
		lo, hi := ws[0], ws[len(ws)-1]
		a, okA := res.median(col.name, ours.name, fmt.Sprintf("W6-%d", lo), "drain_s")
		b, okB := res.median(col.name, ours.name, fmt.Sprintf("W6-%d", hi), "drain_s")
		if okA && okB && a > 0 {
			fmt.Fprintf(w, "\nDrain time of %d queued writers over that of %d: %.1fx.\n", hi, lo, b/a)
		}
	}
	return true
}

// w9Fields are the columns of W9's run-by-run table.
var w9Fields = []string{"cycles_per_s", "raw_pairs_per_s", "lock_over_raw", "machine_busy"}

// writeW9Runs writes every W9 run of the column, in the order of the
// rounds: its lock cycles/s and raw pairs/s beside their ratio, since the
// ratio alone hides how loaded the machine was. It reports whether there
// was any.
func (res *results) writeW9Runs(w io.Writer, col column) bool {
	var lines [][]string
	for _, im := range append([]impl{ours}, peers...) {
		vals := res.values[key{col.name, im.name, "W9"}]
		n := len(vals[w9Fields[0]])
		for _, f := range w9Fields[1:] {
			if len(vals[f]) != n { // a field some run lacks: rounds no longer line up
				n = 0
			}
		}
		for i := range n {
			line := []string{im.label, strconv.Itoa(i + 1),
				strconv.FormatFloat(vals["cycles_per_s"][i], 'f', 0, 64),
				strconv.FormatFloat(vals["raw_pairs_per_s"][i], 'f', 0, 64),
				strconv.FormatFloat(vals["lock_over_raw"][i], 'f', 2, 64),
				strconv.FormatFloat(vals["machine_busy"][i], 'f', 2, 64), "–"}
			if e := vals["ensemble_cpu_s"]; len(e) == n { // scripts/compare-peers.sh adds it
				line[len(line)-1] = strconv.FormatFloat(e[i], 'f', 1, 64)
			}
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return false
	}
	writeRow(w, "W9", "run", "lock cycles/s", "raw pairs/s", "lock/raw", "machine busy", "ensemble CPU s, whole run")
	writeRow(w, "---", "---", "---", "---", "---", "---", "---")
	for _, l := range lines {
		writeRow(w, l...)
	}
	return true
}
