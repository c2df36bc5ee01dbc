package rwlock

// readBlocker is the read predicate. A reader holds the lock when no writer
// precedes it. Otherwise it waits for the NEAREST preceding writer, not the
// first as Curator's readers do. Waiting for the first would wake it once
// per writer ahead. A downgraded writer is a reader now. before is in queue
// order.
func readBlocker(before []lockNode, downgraded func(name string) bool) (lockNode, bool) {
	for i := len(before) - 1; i >= 0; i-- {
		// mutant: readers-ignore-writers
		if n := before[i]; n.mode == Write && !downgraded(n.name) {
			return n, true
		}
	}
	return lockNode{}, false
}
