package rwlock

import (
	"errors"
	"fmt"
	"slices"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

// The lock's view of its queue, on internal/lockname's grammar of names.
// The queue is the children of the lock directory that are lock nodes, of
// any family. They are ordered by their sequence numbers alone, never by
// the whole name, since read-… and write-… sort differently as strings. The
// snapshot holds those before ours.

// lockNode is a child of the lock directory that parsed as a lock node.
type lockNode struct {
	name   string // as listed, relative to the lock directory
	seq    int32
	mode   Mode
	family Dialect // whose names it carries
	ours   bool    // made by zkrwlock, so its data's marks can be trusted
	marker uint8   // index in lockname.Markers
	// weight and capacity are a bounded node's (see capacity.go); 0 for others.
	weight, capacity int64
}

// parseNode parses a child name. It returns false for a name that is not a
// lock node of any family, which must be ignored.
func parseNode(name string) (n lockNode, ok bool) {
	p, ok := lockname.Parse(name)
	if !ok {
		return lockNode{}, false
	}
	mode := Read
	if p.Write {
		mode = Write
	}
	return lockNode{name: p.Name, seq: p.Seq, mode: mode, family: Dialect(p.Family), ours: p.Ours, marker: p.Marker,
		weight: p.Weight, capacity: p.Capacity}, true
}

// nodePrefix is the path we ask ZooKeeper to extend with a sequence number.
func nodePrefix(dir, guid string, mode Mode, d Dialect) string {
	return lockname.Prefix(dir, guid, mode == Write, lockname.Family(d))
}

// snapshot is what one listing of the lock directory told us. It holds the
// lock nodes that preceded ours, nearest last. It only ever shrinks (see
// watch.go).
type snapshot struct {
	before []lockNode
	self   lockNode
	peers  uint16 // bits, by index in lockname.Markers, of the peers' nodes listed before ours or after
	after  bool   // a lock node after ours was listed (see coalesce.go)
	// laterWriter reports that a writer's node after ours was listed (see
	// dated).
	laterWriter bool
	// odd holds two lock nodes listed whose capacities differ, if any (see
	// capacity.go). One of them disagrees with ours.
	odd [2]lockNode
}

// errNotListed means our node is not among the children, so it is gone.
var errNotListed = errors.New("our node is not listed")

// takeSnapshot parses children and keeps those that precede self. It fails
// with errNotListed when self is not among them. It fails with an error
// wrapping ErrSequenceExhausted when the numbers cannot be ordered. That is
// when self's own number is out of range, or when self or a node before it
// shares its number with another node.
func takeSnapshot(children []string, self string, buf []lockNode) (snapshot, error) {
	s := snapshot{before: slices.Grow(buf[:0], len(children))}
	found := false
	var first lockNode
	for _, name := range children {
		n, isLock := parseNode(name)
		if !isLock {
			if lockname.CuratorSemaphore(name) {
				s.peers |= 1 << lockname.LeaseMarker()
			}
			continue
		}
		switch {
		case first.name == "":
			first = n
		case n.capacity != first.capacity && s.odd[0].name == "":
			s.odd = [2]lockNode{first, n}
		}
		if !n.ours {
			s.peers |= 1 << n.marker
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
	if !lockname.Usable(s.self.seq) {
		return snapshot{before: s.before[:0]}, exhausted(s.self)
	}
	kept := s.before[:0]
	for _, n := range s.before {
		switch {
		// mutant: self-duplicate
		case n.seq == s.self.seq:
			return snapshot{before: s.before[:0]}, exhausted(n)
		case lockname.Precedes(n.seq, s.self.seq):
			kept = append(kept, n)
		default:
			s.after = true
			s.laterWriter = s.laterWriter || n.mode == Write
		}
	}
	s.before = kept
	slices.SortFunc(s.before, queueOrder)
	for i := 1; i < len(s.before); i++ {
		// mutant: duplicate
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
	case lockname.Precedes(a.seq, b.seq):
		return -1
	case lockname.Precedes(b.seq, a.seq):
		return 1
	}
	return 0
}

// blocker returns the node we must wait for, by the predicate of our mode.
// downgraded reports writers known to be downgraded. It returns false when
// nothing blocks us.
func (s *snapshot) blocker(downgraded func(name string) bool) (n lockNode, ok bool) {
	if s.self.capacity > 0 {
		return permitBlocker(s.before, s.self)
	}
	if s.self.mode == Write {
		return writeBlocker(s.before)
	}
	return readBlocker(s.before, downgraded)
}

// pruneBefore forgets the nodes before n, which held the lock. So they are
// gone.
func (s *snapshot) pruneBefore(n lockNode) {
	s.before = slices.DeleteFunc(s.before, func(m lockNode) bool { return lockname.Precedes(m.seq, n.seq) })
}

// remove forgets a node that is known to be gone.
func (s *snapshot) remove(name string) {
	s.before = slices.DeleteFunc(s.before, func(n lockNode) bool { return n.name == name })
}
