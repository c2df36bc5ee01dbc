package rwlock

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Lock node names end in a mode token and the number ZooKeeper appends,
// <seq>: the parent's signed 32-bit creation counter, formatted as Java's
// %010d. Ours are _c_<guid>-<token><seq>, the token chosen by the lock's
// Dialect; the guid lets a client find a node whose create response it
// never saw. Every family's names are recognised, whatever the dialect:
//
//	family                     reader                    writer
//	zkrwlock native            [_c_<guid>-]read-         [_c_<guid>-]write-
//	Curator read/write lock    _c_<uuid>-__READ__        _c_<uuid>-__WRIT__
//	Curator mutex, zk.Lock                               _c_<uuid>-lock-, _c_<guid>-lock-
//	kazoo                      <hex>__rlock__            <hex>__lock__
//	zkrwlock in a dialect      _c_<guid>-__READ__, rlock-, __rlock__, read__lock__
//	                           _c_<guid>-__WRIT__, wlock-, __lock__
//
// (<guid> and <hex>: 32 lowercase hex digits; <uuid>: Java's UUID.toString.)
// The token sits right before <seq>: Curator orders its nodes by the text
// after the last token, and kazoo matches token(-?\d{10})$. Only a name
// made by zkrwlock (our _c_<guid>- prefix and one of our tokens) is ours:
// its data's marks are trusted (see nodedata.go); a peer's node is released
// when it is deleted, and nothing else tells.
//
// The counter's end. ZooKeeper 3.8 does not wrap a directory's counter:
// PrepRequestProcessor computes cversion+1, which overflows in its
// in-flight record, but DataTree.createNode only ever stores a larger
// cversion, so the stored counter sticks at 2147483647. Past it, nodes
// get 2147483647 again and again (duplicates), and creates in flight
// together briefly get negative numbers. No order can be trusted there, so
// the queue is ordered by the plain integer within 0…2147483646, and an
// acquisition whose own number is outside it, or that sees two lock nodes
// (of any family) share a number, deletes its node and fails with
// ErrSequenceExhausted: the remedy is a fresh lock directory.
// (Serial-number arithmetic, which would order a wrapped counter, also lets
// a grant held across 2^31 later creates be overtaken.)
const (
	protectedPrefix = "_c_"
	guidLen         = 32
	uuidLen         = 36
)

// What may come before a token: a bitmask of prefix shapes.
const (
	bare    uint8 = 1 << iota // nothing: zkrwlock's names before they were protected
	hex32                     // <hex>: kazoo's uuid4().hex
	guarded                   // _c_<guid>-: ours, and go-zookeeper's protected names (zk.Lock)
	uuid36                    // _c_<uuid>-: Curator's protected names
)

// A token is a mode marker that a family puts right before <seq>.
type token struct {
	text   string
	mode   Mode
	family Dialect // whose names these are
	ours   bool    // zkrwlock makes nodes with it
	shapes uint8   // the prefixes it comes with
	peer   string  // who else makes nodes with it, for warnings
	seenBy uint8   // the dialects whose names that peer counts in its queue (Dialect.bit)
}

// tokens, where one ends with another, list the longer one first:
// read__lock__ before __lock__, rlock- and wlock- before lock-.
var tokens = [...]token{
	{"read-", Read, DialectNative, true, guarded | bare, "unprotected read-/write- names", DialectNative.bit()},
	{"write-", Write, DialectNative, true, guarded | bare, "unprotected read-/write- names", DialectNative.bit()},
	{"__READ__", Read, DialectCurator, true, guarded | uuid36, "Curator InterProcessReadWriteLock", DialectCurator.bit()},
	{"__WRIT__", Write, DialectCurator, true, guarded | uuid36, "Curator InterProcessReadWriteLock", DialectCurator.bit()},
	{"rlock-", Read, DialectMutex, true, guarded, "", 0},
	{"wlock-", Write, DialectMutex, true, guarded, "", 0},
	{"lock-", Write, DialectMutex, false, guarded | uuid36, "Curator InterProcessMutex or go-zookeeper zk.Lock", DialectMutex.bit()},
	{"read__lock__", Read, DialectKazooLock, true, guarded, "", 0},
	// kazoo's ReadLock, WriteLock and Lock see names ending in __lock__;
	// WriteLock also sees __rlock__; with extra_lock_patterns, read- and
	// write- too (DialectNative; the README says how).
	{"__rlock__", Read, DialectKazoo, true, guarded | hex32, "kazoo ReadLock",
		DialectKazoo.bit() | DialectKazooLock.bit() | DialectNative.bit()},
	{"__lock__", Write, DialectKazoo, true, guarded | hex32, "kazoo WriteLock or Lock",
		DialectKazoo.bit() | DialectKazooLock.bit() | DialectNative.bit()},
}

// lockNode is a child of the lock directory that parsed as a lock node.
type lockNode struct {
	name   string // as listed, relative to the lock directory
	seq    int32
	mode   Mode
	family Dialect // whose names it carries
	ours   bool    // made by zkrwlock: its data's marks can be trusted
	token  uint8   // index in tokens
}

// nodePrefix is the path we ask ZooKeeper to extend with a sequence number.
func nodePrefix(dir, guid string, mode Mode, d Dialect) string {
	read, write := d.names()
	if mode == Write {
		return dir + "/" + protectedPrefix + guid + "-" + write
	}
	return dir + "/" + protectedPrefix + guid + "-" + read
}

// parseNode parses a child name. Names that are not lock nodes of any
// family (foreign children, malformed sequences) return ok == false and
// must be ignored.
func parseNode(name string) (n lockNode, ok bool) {
	// <seq> is 10 characters, or 11 for a number below -999999999; the
	// character before it is a token's last, never a digit or a second
	// '-', so at most one of the two readings can have a token before it.
	for _, width := range [...]int{10, 11} {
		if len(name) < width {
			break
		}
		rest := name[:len(name)-width]
		seq, ok := parseSeq(name[len(name)-width:])
		if !ok {
			continue
		}
		for i := range tokens {
			t := &tokens[i]
			prefix, ok := strings.CutSuffix(rest, t.text)
			if !ok {
				continue
			}
			shape := shapeOf(prefix)
			if shape&t.shapes == 0 {
				return lockNode{}, false
			}
			return lockNode{
				name: name, seq: seq, mode: t.mode, family: t.family,
				ours: t.ours && shape == guarded, token: uint8(i),
			}, true
		}
	}
	return lockNode{}, false
}

// shapeOf tells what kind of prefix comes before a token; 0 for none that
// any family makes.
func shapeOf(prefix string) uint8 {
	switch {
	case prefix == "":
		return bare
	case len(prefix) == guidLen && isHex(prefix):
		return hex32
	case !strings.HasPrefix(prefix, protectedPrefix) || !strings.HasSuffix(prefix, "-"):
		return 0
	}
	id := prefix[len(protectedPrefix) : len(prefix)-1]
	switch {
	case len(id) == guidLen && isHex(id):
		return guarded
	case len(id) == uuidLen && isUUID(id):
		return uuid36
	}
	return 0
}

// guidOf returns the guid of a protected name: _c_ + 32 lowercase hex + "-".
func guidOf(name string) (string, bool) {
	const end = len(protectedPrefix) + guidLen
	if len(name) <= end || name[end] != '-' || !strings.HasPrefix(name, protectedPrefix) {
		return "", false
	}
	guid := name[len(protectedPrefix):end]
	if !isHex(guid) {
		return "", false
	}
	return guid, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isUUID reports whether s is spelled as Java's UUID.toString spells one:
// 8-4-4-4-12 lowercase hex digits.
func isUUID(s string) bool {
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i : i+1]) {
				return false
			}
		}
	}
	return len(s) == uuidLen
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
	peers  uint16 // the tokens (bits by index in tokens) of peers' nodes listed, before ours or after
	after  bool   // a lock node after ours was listed (see coalesce.go)
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
		if !n.ours {
			s.peers |= 1 << n.token
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
		default:
			s.after = true
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
