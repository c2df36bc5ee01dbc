package bench

import (
	"syscall"
	"time"
)

// sleepPrecisely sleeps for d in the kernel, as Java's Thread.sleep does
// in the Curator harness, and returns the time it took. The runtime's timers
// (time.Sleep) wake a goroutine on the netpoller's millisecond ticks: under
// W5's load they held a 1 ms "hold" for 1.44-1.59 ms on average, against
// Thread.sleep(1)'s 1.12-1.16 ms, which made the lock look slower than it is.
func sleepPrecisely(d time.Duration) time.Duration {
	start := time.Now()
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		// Interrupted by a signal (the runtime's preemption): sleep the rest.
	}
	return time.Since(start)
}
