package rwlock

import "time"

// Hooks for the fault simulation (sim_test.go), and nothing else: nil
// outside tests, where each costs one comparison.
var (
	// testPause is called, and may block, as the lease clock's timer fires
	// and before a request is timed and sent. The simulation holds a
	// client's goroutines there while it models its process as stopped
	// (SIGSTOP), when neither could run.
	testPause func(zkConn)

	// testStateRule returns, for a connection the simulation marks, the
	// rule the lock had before its lease clock: a grant of known timeout
	// is judged by go-zookeeper's State() alone, every poll, and no
	// keepalive is sent. The simulation must catch it failing.
	testStateRule func(zkConn) (judge func(g *Grant, now time.Time) error, poll time.Duration)
)
