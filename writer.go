package rwlock

// writeBlocker is the write predicate: a writer holds the lock when no node
// at all precedes it, and otherwise waits for its IMMEDIATE predecessor, so
// that each node is watched by at most one waiter (no herd effect).
func writeBlocker(before []lockNode) (lockNode, bool) {
	if len(before) == 0 {
		return lockNode{}, false
	}
	return before[len(before)-1], true
}
