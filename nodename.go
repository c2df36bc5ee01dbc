package rwlock

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Lock node names are [_c_<guid>-]read-<seq> and [_c_<guid>-]write-<seq>,
// where ZooKeeper appends <seq>, the parent's signed 32-bit creation counter,
// formatted as Java's %010d. The guid lets a client find a node whose create
// response it never saw.
//
// The counter's end. ZooKeeper 3.8 does not wrap a directory's counter:
// PrepRequestProcessor computes cversion+1, which overflows in its
// in-flight record, but DataTree.createNode only ever stores a larger
// cversion, so the stored counter sticks at 2147483647. Past it, nodes
// get 2147483647 again and again (duplicates), and creates in flight
// together briefly get negative numbers. No order can be trusted there, so
// the queue is ordered by the plain integer within 0…2147483646, and an
// acquisition whose own number is outside it, or that sees two lock nodes
// share a number, deletes its node and fails with ErrSequenceExhausted:
// the remedy is a fresh lock directory. (Serial-number arithmetic, which
// would order a wrapped counter, also lets a grant held across 2^31 later
// creates be overtaken.)
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

// precedes reports whether sequence a was issued before b, for numbers
// within 0…2147483646 (see above).
func precedes(a, b int32) bool { return a < b }

// usableSeq reports whether a node's own number can be ordered: within
// 0…2147483646.
func usableSeq(seq int32) bool { return seq >= 0 && seq < math.MaxInt32 }

// snapshot is what one listing of the lock directory told us: the lock
// nodes that preceded ours, nearest last. Nodes with lower sequence numbers
// than ours can never appear later, so a snapshot only ever shrinks.
type snapshot struct {
	before []lockNode
	self   lockNode
}

// errNotListed means our node is not among the children: it is gone.
var errNotListed = errors.New("our node is not listed")

// takeSnapshot parses children and keeps those that precede self. It fails
// with errNotListed when self is not among them, and with an error
// wrapping ErrSequenceExhausted when the numbers cannot be ordered: self's
// own is out of range, or a node before it (or it) shares its number with
// another.
func takeSnapshot(children []string, self string, buf []lockNode) (snapshot, error) {
	s := snapshot{before: slices.Grow(buf[:0], len(children))}
	found := false
	for _, name := range children {
		n, isLock := parseNode(name)
		if !isLock {
			continue
		}
		if name == self {
			s.self, found = n, true
			continue
		}
		s.before = append(s.before, n)
	}
	if !found {
		return snapshot{before: s.before[:0]}, errNotListed
	}
	if !usableSeq(s.self.seq) {
		return snapshot{before: s.before[:0]}, exhausted(s.self)
	}
	kept := s.before[:0]
	for _, n := range s.before {
		switch {
		case n.seq == s.self.seq:
			return snapshot{before: s.before[:0]}, exhausted(n)
		case precedes(n.seq, s.self.seq):
			kept = append(kept, n)
		}
	}
	s.before = kept
	slices.SortFunc(s.before, queueOrder)
	for i := 1; i < len(s.before); i++ {
		if s.before[i].seq == s.before[i-1].seq {
			return snapshot{before: s.before[:0]}, exhausted(s.before[i])
		}
	}
	return s, nil
}

func exhausted(n lockNode) error {
	return fmt.Errorf("%w: node %s has number %d; move the lock to a fresh lock directory",
		ErrSequenceExhausted, n.name, n.seq)
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
