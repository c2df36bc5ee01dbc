package rwlock

import (
	"fmt"
	"slices"
	"strings"
)

// Lock node names are [_c_<guid>-]read-<seq> and [_c_<guid>-]write-<seq>,
// where ZooKeeper appends <seq>, the parent's signed 32-bit creation counter,
// formatted as Java's %010d. The guid lets a client find a node whose create
// response it never saw.
const (
	protectedPrefix = "_c_"
	guidLen         = 32
	readPrefix      = "read-"
	writePrefix     = "write-"
)

// lockNode is a child of the lock directory that parsed as a lock node.
type lockNode struct {
	name string // as listed, relative to the lock directory
	seq  int32
	mode Mode
}

// nodePrefix is the path we ask ZooKeeper to extend with a sequence number.
func nodePrefix(dir, guid string, mode Mode) string {
	if mode == Write {
		return dir + "/" + protectedPrefix + guid + "-" + writePrefix
	}
	return dir + "/" + protectedPrefix + guid + "-" + readPrefix
}

// parseNode parses a child name. Names that are not lock nodes (foreign
// children, malformed sequences) return ok == false and must be ignored.
func parseNode(name string) (n lockNode, ok bool) {
	rest := name
	if strings.HasPrefix(rest, protectedPrefix) {
		if _, ok := guidOf(rest); !ok {
			return lockNode{}, false
		}
		rest = rest[len(protectedPrefix)+guidLen+1:]
	}
	switch {
	case strings.HasPrefix(rest, readPrefix):
		n.mode, rest = Read, rest[len(readPrefix):]
	case strings.HasPrefix(rest, writePrefix):
		n.mode, rest = Write, rest[len(writePrefix):]
	default:
		return lockNode{}, false
	}
	n.seq, ok = parseSeq(rest)
	if !ok {
		return lockNode{}, false
	}
	n.name = name
	return n, true
}

// guidOf returns the guid of a protected name: _c_ + 32 lowercase hex + "-".
func guidOf(name string) (string, bool) {
	const end = len(protectedPrefix) + guidLen
	if len(name) <= end || name[end] != '-' || !strings.HasPrefix(name, protectedPrefix) {
		return "", false
	}
	guid := name[len(protectedPrefix):end]
	for i := 0; i < len(guid); i++ {
		if c := guid[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return guid, true
}

// parseSeq accepts exactly what Java's String.format("%010d", n) produces
// for an int32 n: ten digits, or a minus sign and nine digits (ten for
// |n| >= 1e9). Anything else, even a number in another spelling, is not ours.
func parseSeq(s string) (int32, bool) {
	neg := strings.HasPrefix(s, "-")
	digits := s
	if neg {
		digits = s[1:]
	}
	switch {
	case !neg && len(s) != 10,
		neg && len(s) != 10 && len(s) != 11,
		neg && len(s) == 11 && digits[0] == '0':
		return 0, false
	}
	var v int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	if v < -1<<31 || v > 1<<31-1 || neg && v == 0 {
		return 0, false
	}
	return int32(v), true
}

// formatSeq is the inverse of parseSeq, for tests and the in-memory fake.
// Go's %010d pads negative numbers after the sign, as Java's does.
func formatSeq(seq int32) string { return fmt.Sprintf("%010d", seq) }

// precedes reports whether sequence a was issued before b. Sequence numbers
// wrap from 2147483647 to -2147483648, so they are compared with serial
// number arithmetic, exact while the live queue spans fewer than 2^31 numbers.
func precedes(a, b int32) bool { return b-a > 0 }

// snapshot is what one listing of the lock directory told us: the lock
// nodes that preceded ours, nearest last. Nodes with lower sequence numbers
// than ours can never appear later, so a snapshot only ever shrinks.
type snapshot struct {
	before []lockNode
	self   lockNode
}

// takeSnapshot parses children and keeps those that precede self. ok is
// false when self is not among them: our node is gone.
func takeSnapshot(children []string, self string, buf []lockNode) (s snapshot, ok bool) {
	s.before = slices.Grow(buf[:0], len(children))
	for _, name := range children {
		n, isLock := parseNode(name)
		if !isLock {
			continue
		}
		if name == self {
			s.self, ok = n, true
			continue
		}
		s.before = append(s.before, n)
	}
	if !ok {
		return snapshot{before: s.before[:0]}, false
	}
	kept := s.before[:0]
	for _, n := range s.before {
		if precedes(n.seq, s.self.seq) {
			kept = append(kept, n)
		}
	}
	s.before = kept
	slices.SortFunc(s.before, queueOrder)
	return s, true
}

// queueOrder compares lock nodes by sequence number, for slices.SortFunc.
func queueOrder(a, b lockNode) int {
	switch {
	case precedes(a.seq, b.seq):
		return -1
	case precedes(b.seq, a.seq):
		return 1
	}
	return 0
}

// blocker returns the node we must wait for, by the predicate of our mode;
// shared reports writers known to be downgraded. ok is false when nothing
// blocks us.
func (s *snapshot) blocker(shared func(name string) bool) (n lockNode, ok bool) {
	if s.self.mode == Write {
		return writeBlocker(s.before)
	}
	return readBlocker(s.before, shared)
}

// pruneBefore forgets the nodes before n: n held the lock, so they are gone.
func (s *snapshot) pruneBefore(n lockNode) {
	s.before = slices.DeleteFunc(s.before, func(m lockNode) bool { return precedes(m.seq, n.seq) })
}

// remove forgets a node that is known to be gone.
func (s *snapshot) remove(name string) {
	s.before = slices.DeleteFunc(s.before, func(n lockNode) bool { return n.name == name })
}
