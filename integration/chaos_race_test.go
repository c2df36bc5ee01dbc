package integration

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The data races the chaos clients report when built with the race
// detector (make chaos RACE=1). go-zookeeper v1.0.4 races with itself at a
// reconnection (go-zookeeper/zk#35: Conn.lastZxid, written by recvLoop
// while sendSetWatches reads it), so its clients keep running after a
// report (GORACE=halt_on_error=0), and the run tells go-zookeeper's own
// reports from ours. A report is go-zookeeper's own when each of its
// accesses happened in go-zookeeper's code, called by go-zookeeper or the
// standard library only; any other report is ours, and fails the run.

// raceReport is one report a client wrote to its stderr.
type raceReport struct {
	Client int
	Text   string
	Ours   bool // not go-zookeeper's own: it fails the run
}

// raceSeparator is the line the race detector writes before and after each
// report.
const raceSeparator = "=================="

// raceReports returns the reports in a client's stderr.
func raceReports(client int, stderr string) []raceReport {
	var reports []raceReport
	for _, block := range strings.Split(stderr, raceSeparator+"\n") {
		if !strings.HasPrefix(block, "WARNING: DATA RACE") {
			continue
		}
		reports = append(reports, raceReport{Client: client, Text: block, Ours: !zkOwnRace(block)})
	}
	return reports
}

// zkOwnRace reports whether every access of a race report happened in
// go-zookeeper, with only go-zookeeper and the standard library on its
// stack. Where the goroutines were created does not count: every
// go-zookeeper goroutine was started by a call of ours.
func zkOwnRace(report string) bool {
	accesses := 0
	report = strings.TrimPrefix(report, "WARNING: DATA RACE\n") // the first access follows at once
	for _, section := range strings.Split(report, "\n\n") {
		lines := strings.Split(strings.TrimSpace(section), "\n")
		header := lines[0]
		if !strings.Contains(header, " at 0x") || !strings.Contains(header, " by ") {
			continue // a creation stack, a location
		}
		accesses++
		inZK := false
		for _, line := range lines[1:] {
			if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
				continue // a file and line under a frame
			}
			fn := strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(fn, "github.com/go-zookeeper/zk."):
				inZK = true
			case !standardLibrary(fn):
				return false
			}
		}
		if !inZK {
			return false
		}
	}
	return accesses > 0
}

// standardLibrary reports whether a stack frame's function belongs to the
// standard library: its import path's first element has no dot.
func standardLibrary(fn string) bool {
	first := fn
	if i := strings.Index(fn, "/"); i >= 0 {
		first = fn[:i]
	} else if i := strings.Index(fn, "."); i >= 0 {
		first = fn[:i]
	}
	return !strings.Contains(first, ".")
}

// zk35Report is go-zookeeper/zk#35 as the race detector reported it here,
// with the frames that started the reading goroutine made a chaos
// client's: its call of Dial does not make the race ours.
const zk35Report = `WARNING: DATA RACE
Write at 0x00c0002ea000 by goroutine 35:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
  github.com/go-zookeeper/zk.(*Conn).loop.func2()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:474 +0x1c4

Previous read at 0x00c0002ea000 by goroutine 16:
  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x49d
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:484 +0x54b
  github.com/go-zookeeper/zk.Connect.func1()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:224 +0x4a

Goroutine 35 (running) created at:
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:466 +0x53e
  github.com/go-zookeeper/zk.Connect.func1()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:224 +0x4a

Goroutine 16 (running) created at:
  github.com/go-zookeeper/zk.Connect()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:223 +0x8e6
  github.com/zkrwlock/rwlock.Dial()
      /work/main/dial.go:52 +0x2d2
  github.com/zkrwlock/rwlock/integration.TestHelperChaosClient()
      /work/main/integration/chaos_client_test.go:83 +0x6c4
  testing.tRunner()
      /usr/local/go/src/testing/testing.go:2036 +0x21c
  testing.(*T).Run.gowrap1()
      /usr/local/go/src/testing/testing.go:2101 +0x38
`

// Only a race inside go-zookeeper is go-zookeeper's: one where either
// access has a frame of ours, or of no known code, fails the run.
func TestChaosRaceReportsToldApart(t *testing.T) {
	replace := func(old, new string) string {
		require.Contains(t, zk35Report, old)
		return strings.Replace(zk35Report, old, new, 1)
	}
	const (
		write = "  github.com/go-zookeeper/zk.(*Conn).recvLoop()\n"       // the first access
		read  = "  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()\n" // the second
		under = "  github.com/go-zookeeper/zk.(*Conn).loop.func2()\n"     // below the first
	)
	cases := []struct {
		name   string
		report string
		ours   bool
	}{
		{"go-zookeeper/zk#35", zk35Report, false},
		{"the first access in our code", replace(write, "  github.com/zkrwlock/rwlock/internal/zkclient.(*Client).Timeout()\n"), true},
		{"the second access in our code", replace(read, "  github.com/zkrwlock/rwlock.(*Grant).Err()\n"), true},
		{"go-zookeeper called by our code", replace(under, "  sync/atomic.LoadInt64()\n  github.com/zkrwlock/rwlock.(*Grant).Err()\n"), true},
		{"an access with no go-zookeeper frame", strings.Replace(replace(write, "  runtime.slicecopy()\n"), under, "  time.Sleep()\n", 1), true},
	}
	stderr := "ready\n"
	for _, c := range cases {
		stderr += raceSeparator + "\n" + c.report + raceSeparator + "\nother output\n"
	}
	reports := raceReports(3, stderr+"Found 5 data race(s)\n")
	require.Len(t, reports, len(cases))
	for i, c := range cases {
		assert.Equal(t, c.ours, reports[i].Ours, c.name)
		assert.Equal(t, 3, reports[i].Client)
	}
	assert.Empty(t, raceReports(1, "ready\nFound 0 data race(s)\n"))
}
