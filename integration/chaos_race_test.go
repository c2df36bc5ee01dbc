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
	for _, section := range strings.Split(report, "\n\n") {
		lines := strings.Split(strings.TrimSpace(section), "\n")
		header := lines[0]
		if !strings.Contains(header, " at 0x") || !strings.Contains(header, " by ") {
			continue // the warning's line, a creation stack, a location
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

// zk35Report is go-zookeeper/zk#35 as the race detector reports it: the
// goroutine that read was started by our call of Dial, which does not
// make the race ours.
const zk35Report = `WARNING: DATA RACE
Read at 0x00c0001c8130 by goroutine 27:
  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x2c4
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:484 +0x6e
  github.com/go-zookeeper/zk.Connect.func1()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:295 +0x44

Previous write at 0x00c0001c8130 by goroutine 29:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x6b8
  github.com/go-zookeeper/zk.(*Conn).loop.func2()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:474 +0x64

Goroutine 27 (running) created at:
  github.com/go-zookeeper/zk.Connect()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:294 +0x8a6
  github.com/zkrwlock/rwlock.Dial()
      /work/main/dial.go:52 +0x2b4
  github.com/zkrwlock/rwlock/integration.TestHelperChaosClient()
      /work/main/integration/chaos_client_test.go:83 +0x6c4
  testing.tRunner()
      /usr/local/go/src/testing/testing.go:1934 +0x21c

Goroutine 29 (finished) created at:
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:465 +0x626
  github.com/go-zookeeper/zk.Connect.func1()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:295 +0x44
`

// Only a race inside go-zookeeper is go-zookeeper's: one where either
// access has a frame of ours, or of no known code, fails the run.
func TestChaosRaceReportsToldApart(t *testing.T) {
	ours := strings.Replace(zk35Report, "  github.com/go-zookeeper/zk.(*Conn).recvLoop()\n",
		"  github.com/zkrwlock/rwlock/internal/zkclient.(*Client).Timeout()\n", 1)
	called := strings.Replace(zk35Report, "  github.com/go-zookeeper/zk.(*Conn).loop.func2()\n",
		"  sync/atomic.LoadInt64()\n  github.com/zkrwlock/rwlock.(*Grant).Err()\n", 1)
	stdOnly := strings.Replace(zk35Report, "  github.com/go-zookeeper/zk.(*Conn).recvLoop()\n", "  runtime.slicecopy()\n", 1)
	stdOnly = strings.Replace(stdOnly, "  github.com/go-zookeeper/zk.(*Conn).loop.func2()\n", "  time.Sleep()\n", 1)
	stderr := "ready\n" + raceSeparator + "\n" + zk35Report + raceSeparator + "\n" +
		"some other output\n" + raceSeparator + "\n" + ours + raceSeparator + "\n" +
		raceSeparator + "\n" + called + raceSeparator + "\n" +
		raceSeparator + "\n" + stdOnly + raceSeparator + "\nFound 4 data race(s)\n"
	reports := raceReports(3, stderr)
	require.Len(t, reports, 4)
	assert.False(t, reports[0].Ours, "go-zookeeper/zk#35")
	assert.True(t, reports[1].Ours, "an access in our code")
	assert.True(t, reports[2].Ours, "go-zookeeper called by our code")
	assert.True(t, reports[3].Ours, "an access with no go-zookeeper frame")
	assert.Equal(t, 3, reports[0].Client)
	assert.Empty(t, raceReports(1, "ready\nFound 0 data race(s)\n"))
}
