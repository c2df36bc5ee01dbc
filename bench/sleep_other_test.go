//go:build !linux

package bench

import "time"

// sleepPrecisely: without nanosleep(2) here, the runtime's timer, which
// overstates a 1 ms hold (see sleep_linux_test.go).
func sleepPrecisely(d time.Duration) time.Duration {
	start := time.Now()
	time.Sleep(d)
	return time.Since(start)
}
