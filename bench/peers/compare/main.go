// Command compare prints the comparison of zkrwlock with its peers as
// markdown tables, from the JSON lines of scripts/compare-peers.sh:
// medians over the rounds for every implementation, workload and network
// setting (loopback, and each delay proxy), how many times better zkrwlock
// is than each peer, the ZooKeeper requests per acquisition, acquire
// timeouts, W8's deadlocks and mutual exclusion violations; and W9's runs
// one by one, lock cycles/s and raw pairs/s beside their ratio.
//
//	go run ./bench/peers/compare [-layout latency|columns|all] DIR
//	go run ./bench/peers/compare FILE.jsonl...
//
// DIR is a comparison's output directory: one subdirectory per network
// setting, loopback/ and delay-<ms>ms/, each with the JSON lines of every
// run (*.jsonl). A directory of *.jsonl files, or files named one by one,
// are read as one loopback column.
//
// The latency layout is one table with a column per network setting; the
// columns layout is one table per setting with the implementations side by
// side, and the spread of each workload's main metric over the rounds.
// zkrwlock's own workloads (the drain series at other queue lengths,
// ReadBatch) get a table of their own. Runs that failed are left out and
// listed at the end; a median over fewer runs than the others says so.
// Smoke runs (W1-smoke, a W6 of a few waiters from a peer) are skipped.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	layout := flag.String("layout", "all", "`tables` to print: latency, columns or all")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: compare [-layout latency|columns|all] DIR | FILE.jsonl...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || (*layout != "latency" && *layout != "columns" && *layout != "all") {
		flag.Usage()
		os.Exit(2)
	}
	res, err := load(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
	if !res.anyRuns(ours.name) {
		fmt.Fprintln(os.Stderr, "compare: no zkrwlock runs in the input")
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	writeTables(w, res, *layout)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func writeTables(w io.Writer, res *results, layout string) {
	fmt.Fprintf(w, "Medians of %d interleaved round(s) on one ZooKeeper server (W9: on a 3-node ensemble). After a peer's value,\n", res.rounds())
	fmt.Fprintln(w, "how many times better zkrwlock is: its rate over the peer's, or the peer's time over its time.")
	if len(res.cols) > 1 {
		fmt.Fprintln(w, "+D ms: every client through a proxy that delays each direction by D ms.")
	}
	if layout == "latency" || layout == "all" {
		fmt.Fprintln(w)
		if len(res.cols) > 1 {
			fmt.Fprintln(w, "### By added latency")
			fmt.Fprintln(w)
		}
		res.writeByLatency(w)
	}
	if layout == "columns" || layout == "all" {
		for _, c := range res.cols {
			fmt.Fprintln(w)
			fmt.Fprintf(w, "### %s\n\n", title(c))
			res.writeColumn(w, c)
			if res.rounds() > 1 {
				fmt.Fprintf(w, "\nSpread of each workload's main metric over the rounds ((max−min)/mean), %s:\n\n", c.label())
				res.writeSpread(w, c)
			}
		}
	}
	for _, c := range res.cols {
		var b strings.Builder
		if res.writeW9Runs(&b, c) {
			fmt.Fprintf(w, "\n### W9 run by run, %s\n\n%s", c.label(), b.String())
		}
	}
	for _, c := range res.cols {
		var b strings.Builder
		if res.writeExtras(&b, c) {
			fmt.Fprintf(w, "\n### zkrwlock's own workloads, %s\n\n%s", c.label(), b.String())
		}
	}
	if len(res.errors) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Failed runs, left out:")
		fmt.Fprintln(w)
		for _, e := range res.errors {
			fmt.Fprintf(w, "- %s\n", e)
		}
	}
}

func title(c column) string {
	if c.delayMS == 0 {
		return "Loopback"
	}
	return c.label() + " each way"
}
