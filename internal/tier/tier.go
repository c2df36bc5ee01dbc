// Package tier lets a test say which tier of the test suite runs it.
//
// make test, the everyday tier, runs go test -race -short: every test that
// is quick, under the race detector. make soak runs the whole suite
// without -short, so at full size too. Each tier then runs again, in a
// build without the race detector, the tests its race pass skipped with
// NoRace. The Makefile lists no test by name.
//
// A test calls Long or NoRace, or both, before anything else.
package tier

import "testing"

// Long marks a soak test: it skips with -short, in the everyday tier.
// A test is long when it waits out session timeouts, elections or
// partitions, kills or restarts servers, starts an ensemble or peers'
// harnesses of its own, or runs for a set time.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("tier.Long: a soak test (make soak runs it; -short skips it)")
	}
}

// NoRace skips t under the race detector, for a test that a data race
// outside this repository fails there; why names it (an issue, say).
// Each tier runs such tests again in a build without the race detector.
func NoRace(t testing.TB, why string) {
	t.Helper()
	if RaceEnabled {
		t.Skipf("tier.NoRace: not under the race detector (%s); run again without it", why)
	}
}
