//go:build race

package tier

// RaceEnabled reports whether the test binary was built with -race.
const RaceEnabled = true
