package rwlock

import "github.com/zkrwlock/rwlock/internal/lockname"

// writeBlocker is the write predicate: a writer holds the lock when no node
// at all precedes it, and otherwise waits for its IMMEDIATE predecessor, so
// that each node is watched by at most one waiter (no herd effect).
func writeBlocker(before []lockNode) (lockNode, bool) {
	if len(before) == 0 {
		return lockNode{}, false
	}
	return before[len(before)-1], true
}

// The held mark. A writer that waited may be followed by a waiter whose
// listing still shows the nodes it waited for. So it marks its node held
// in the transaction that deletes it: the waiter behind, whose data watch
// fires on the mark, learns that every node before it is gone without a
// listing. A queue of writers then drains in constant time per handoff.
// A reader waiting on the node takes the mark as its deletion (see
// watch.go). A writer granted at once deletes plainly: the uncontended
// release pays for no transaction.
func releaseMark(m *member) lockname.Mark {
	if m.mode == Write && m.waited {
		return lockname.MarkHeld
	}
	return lockname.Unmarked
}
