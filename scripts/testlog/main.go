// Command testlog reads the events of go test -json, for the Makefile's
// two tiers (make test, make soak) and make slowest.
//
//	go test -json ./... | go run ./scripts/testlog -o LOG
//	    prints what go test prints without -json (a line per package,
//	    and the output of each failed test), keeps the events in LOG,
//	    counts the skipped tests, and fails when a test or build failed
//	go run ./scripts/testlog -slowest N LOG...
//	    each package's time, and the N slowest tests, of each LOG
//	go run ./scripts/testlog -skipped WORD LOG
//	    the tests skipped with WORD in their skip message, as go test
//	    arguments: one line per run, a package and its -run pattern
//	go run ./scripts/testlog -ran LOG OTHER...
//	    fails unless every test LOG skipped passed in one of OTHER
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64 // seconds
	Output  string
}

// test names one test of one package.
type test struct{ pkg, name string }

func main() {
	log := flag.String("o", "", "keep the events read from stdin in this `file`")
	slowest := flag.Int("slowest", 0, "print the `n` slowest tests of the logs")
	skipped := flag.String("skipped", "", "print the go test runs of the tests skipped with this `word`")
	ran := flag.Bool("ran", false, "fail unless every test the first log skipped passed in another")
	flag.Parse()
	var err error
	switch {
	case *slowest > 0:
		err = printSlowest(*slowest, flag.Args())
	case *skipped != "":
		err = printSkipped(*skipped, flag.Args())
	case *ran:
		err = checkRan(flag.Args())
	default:
		err = filter(os.Stdin, os.Stdout, *log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(1)
	}
}

// filter copies the events from r to the log, and prints to w what go
// test prints without -json: package lines, build errors, and the output
// of each failed test (and of a test still running when its package
// failed, a timeout's panic). It ends with the count of skipped tests.
func filter(r io.Reader, w io.Writer, log string) error {
	var keep io.Writer = io.Discard
	if log != "" {
		f, err := os.Create(log)
		if err != nil {
			return err
		}
		defer f.Close()
		keep = f
	}
	held := map[test][]string{} // each running test's output, shown if it fails
	failed, skipped, skips := 0, 0, map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(keep, "%s\n", line)
		var e event
		if json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line) // go test's own errors, not events
			continue
		}
		k := test{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "build-fail":
			failed++
		case e.Test != "":
			switch e.Action {
			case "output":
				held[k] = append(held[k], e.Output)
			case "fail":
				failed++
				fmt.Fprint(w, strings.Join(held[k], ""))
			case "skip":
				skipped++
				skips[skipReason(held[k])]++
			}
			if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
				delete(held, k)
			}
		case e.Action == "output":
			if e.Output != "PASS\n" {
				fmt.Fprint(w, e.Output)
			}
		case e.Action == "fail":
			failed++
			for t, out := range held {
				if t.pkg == e.Package {
					fmt.Fprint(w, strings.Join(out, ""))
					delete(held, t)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if skipped > 0 {
		var parts []string
		for _, why := range slices.Sorted(maps.Keys(skips)) {
			parts = append(parts, fmt.Sprintf("%d %s", skips[why], why))
		}
		fmt.Fprintf(w, "skipped %d tests: %s\n", skipped, strings.Join(parts, ", "))
	}
	if failed > 0 {
		return fmt.Errorf("%d failures", failed)
	}
	return nil
}

// skipReason names why a test skipped: the tier helper that skipped it,
// or else "other".
func skipReason(output []string) string {
	for _, l := range output {
		if m := helperRE.FindString(l); m != "" {
			return m
		}
	}
	return "other"
}

var helperRE = regexp.MustCompile(`tier\.\w+`)

// printSlowest prints, for each log, its packages' times, slowest first,
// and its n slowest tests (a subtest's time is part of its parent's).
func printSlowest(n int, logs []string) error {
	type row struct {
		test
		elapsed float64
		action  string
	}
	slowestFirst := func(a, b row) int { return cmp.Compare(b.elapsed, a.elapsed) }
	for _, log := range logs {
		var pkgs, tests []row
		err := eachEvent([]string{log}, func(e event) {
			r := row{test{e.Package, e.Test}, e.Elapsed, e.Action}
			switch {
			case e.Action != "pass" && e.Action != "fail":
			case e.Test == "":
				pkgs = append(pkgs, r)
			case !strings.Contains(e.Test, "/"):
				tests = append(tests, r)
			}
		})
		if err != nil {
			return err
		}
		slices.SortStableFunc(pkgs, slowestFirst)
		slices.SortStableFunc(tests, slowestFirst)
		fmt.Printf("%s: packages\n", log)
		for _, r := range pkgs {
			fmt.Printf("%7.1fs  %-4s  %s\n", r.elapsed, r.action, r.pkg)
		}
		fmt.Printf("%s: the %d slowest tests\n", log, min(n, len(tests)))
		for _, r := range tests[:min(n, len(tests))] {
			fmt.Printf("%7.1fs  %-4s  %s %s\n", r.elapsed, r.action, r.pkg, r.name)
		}
	}
	return nil
}

// printSkipped prints one go test run per line, a package and a -run
// pattern, that runs again the tests of log skipped with word in their
// skip message: the top-level ones of a package in one run, and the
// subtests of each parent in a run of their own (a -run pattern applies
// its second part to the subtests of every test it selects).
func printSkipped(word string, logs []string) error {
	if len(logs) != 1 {
		return errors.New("-skipped reads one log")
	}
	outputs := map[test][]string{}
	var skipped []test
	err := eachEvent(logs, func(e event) {
		k := test{e.Package, e.Test}
		switch {
		case e.Test == "":
		case e.Action == "output":
			outputs[k] = append(outputs[k], e.Output)
		case e.Action == "skip":
			if strings.Contains(strings.Join(outputs[k], ""), word) {
				skipped = append(skipped, k)
			}
		}
	})
	if err != nil {
		return err
	}
	type run struct{ pkg, parent string }
	names := map[run][]string{}
	var order []run
	for _, t := range skipped {
		parent, sub, _ := strings.Cut(t.name, "/")
		r := run{t.pkg, ""}
		name := parent
		if sub != "" {
			r.parent, name = parent, sub
		}
		if _, ok := names[r]; !ok {
			order = append(order, r)
		}
		names[r] = append(names[r], regexp.QuoteMeta(name))
	}
	for _, r := range order {
		pattern := "^(" + strings.Join(names[r], "|") + ")$"
		if r.parent != "" {
			pattern = "^" + regexp.QuoteMeta(r.parent) + "$/" + pattern
		}
		fmt.Printf("%s %s\n", r.pkg, pattern)
	}
	return nil
}

// checkRan fails unless every test the first log skipped passed in one of
// the others, and says how many it checked.
func checkRan(logs []string) error {
	if len(logs) < 2 {
		return errors.New("-ran reads a log and the logs where its skipped tests ran")
	}
	var skipped []test
	if err := eachEvent(logs[:1], func(e event) {
		if e.Test != "" && e.Action == "skip" {
			skipped = append(skipped, test{e.Package, e.Test})
		}
	}); err != nil {
		return err
	}
	passed := map[test]bool{}
	if err := eachEvent(logs[1:], func(e event) {
		if e.Test != "" && e.Action == "pass" {
			passed[test{e.Package, e.Test}] = true
		}
	}); err != nil {
		return err
	}
	var missing []string
	for _, t := range skipped {
		if !passed[t] {
			missing = append(missing, t.pkg+" "+t.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of the %d tests %s skipped passed nowhere else:\n%s",
			len(missing), len(skipped), logs[0], strings.Join(missing, "\n"))
	}
	fmt.Printf("testlog: the %d tests %s skipped all passed in %s\n", len(skipped), logs[0], strings.Join(logs[1:], ", "))
	return nil
}

// eachEvent calls fn with every event of the logs, in order.
func eachEvent(logs []string, fn func(event)) error {
	for _, name := range logs {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				fn(e)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
