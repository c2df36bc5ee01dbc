// Package lockname is the grammar of a lock directory's children. It
// knows the names of lock nodes of every family that may share a
// directory, and their sequence numbers. The families are zkrwlock in each
// of its dialects, Curator's read/write lock and mutex, go-zookeeper's
// zk.Lock, and kazoo's locks. It also knows the data zkrwlock writes into
// its own nodes; see data.go. The lock and the CLI both read names through
// it, so that they cannot disagree.
package lockname

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
)

// Lock node names end in a mode marker and <seq>, the number ZooKeeper
// appends. That number is the parent's signed 32-bit creation counter,
// formatted as Java's %010d. zkrwlock's names are _c_<guid>-<marker><seq>,
// with the marker chosen by the lock's dialect. The guid lets a client
// find a node whose create response it never saw. Every family's names
// are recognised, whatever the dialect:
//
//	family                     reader                    writer
//	zkrwlock native            [_c_<guid>-]read-         [_c_<guid>-]write-
//	Curator read/write lock    _c_<uuid>-__READ__        _c_<uuid>-__WRIT__
//	Curator mutex, zk.Lock                               _c_<uuid>-lock-, _c_<guid>-lock-
//	kazoo                      <hex>__rlock__            <hex>__lock__
//	zkrwlock in a dialect      _c_<guid>-__READ__, rlock-, __rlock__, read__lock__
//	                           _c_<guid>-__WRIT__, wlock-, __lock__
//
// A <guid> or a <hex> is 32 lowercase hex digits. A <uuid> is spelled as
// Java's UUID.toString spells one. The marker sits right before <seq>.
// It must, because Curator orders its nodes by the text after the last
// marker, and kazoo matches marker(-?\d{10})$.
//
// Only a name made by zkrwlock is ours. It has our _c_<guid>- prefix and
// one of our markers. The marks in its data are trusted; see data.go. A
// peer's node is released when it is deleted, and nothing else tells.
//
// The counter's end. ZooKeeper 3.8 does not wrap a directory's counter.
// PrepRequestProcessor computes cversion+1, which overflows in its
// in-flight record. But DataTree.createNode only ever stores a larger
// cversion. So the stored counter sticks at 2147483647. Past it, nodes get
// 2147483647 again and again, as duplicates. Creates in flight together
// briefly get negative numbers. No order can be trusted there, so the
// queue is ordered by the plain integer within 0…2147483646; see Usable
// and Precedes. The lock refuses to order a queue outside that range.
// Serial-number arithmetic would order a wrapped counter, but it also
// lets a grant held across 2^31 later creates be overtaken.

// A Family is whose names a node carries. Its values are the lock's
// dialects, in the same order. An rwlock.Dialect converts to it.
type Family uint8

const (
	Native        Family = iota // zkrwlock's own names
	Curator                     // Curator's InterProcessReadWriteLock
	Mutex                       // Curator's InterProcessMutex and go-zookeeper's zk.Lock
	Kazoo                       // kazoo's ReadLock and WriteLock, where no kazoo Lock uses the path
	KazooLock                   // kazoo's Lock
	KazooPatterns               // Native's names, where kazoo's locks are made with extra_lock_patterns
	Families                    // the number of families
)

// Bit is f's bit in a set of families (Marker.SeenBy).
func (f Family) Bit() uint8 { return 1 << f }

// Names returns the family whose names f makes, which is f itself, but
// Native for KazooPatterns. The two differ only in what the path's kazoo
// locks are declared to count. No name shows that, so no node parses as
// KazooPatterns.
func (f Family) Names() Family {
	if f == KazooPatterns {
		return Native
	}
	return f
}

// PersistentDir reports whether a lock directory shared with f must be
// persistent rather than a container. Kazoo makes sure of its lock
// directory only once per lock object. So once the server reaps an empty
// container, a long-lived kazoo lock fails every later acquire with
// NoNodeError.
func (f Family) PersistentDir() bool { return f == Kazoo || f == KazooLock || f == KazooPatterns }

const (
	protectedPrefix = "_c_"
	guidLen         = 32
	uuidLen         = 36
)

// The shapes of what may come before a marker, as bits of a mask.
const (
	bare    uint8 = 1 << iota // nothing: zkrwlock's names before they were protected
	hex32                     // <hex>: kazoo's uuid4().hex
	guarded                   // _c_<guid>-: ours, and go-zookeeper's protected names (zk.Lock)
	uuid36                    // _c_<uuid>-: Curator's protected names
)

// A Marker is the mode part that a family puts right before <seq>.
type Marker struct {
	Text   string
	Write  bool   // a writer's; else a reader's
	Family Family // whose names these are
	Ours   bool   // zkrwlock makes nodes with it
	shapes uint8  // the prefixes it comes with
	Peer   string // who else makes nodes with it, for warnings
	SeenBy uint8  // the families (Bit) whose nodes that peer counts in its queue, as declared (see __lock__)
}

// Markers lists every family's markers. Where one ends with another,
// the longer comes first: read__lock__ before __lock__, rlock- and wlock-
// before lock-. A Node's Marker is an index in Markers.
var Markers = [...]Marker{
	{"read-", false, Native, true, guarded | bare, "unprotected read-/write- names", Native.Bit() | KazooPatterns.Bit()},
	{"write-", true, Native, true, guarded | bare, "unprotected read-/write- names", Native.Bit() | KazooPatterns.Bit()},
	{"__READ__", false, Curator, true, guarded | uuid36, "Curator InterProcessReadWriteLock", Curator.Bit()},
	{"__WRIT__", true, Curator, true, guarded | uuid36, "Curator InterProcessReadWriteLock", Curator.Bit()},
	{"rlock-", false, Mutex, true, guarded, "", 0},
	{"wlock-", true, Mutex, true, guarded, "", 0},
	{"lock-", true, Mutex, false, guarded | uuid36, "Curator InterProcessMutex or go-zookeeper zk.Lock", Mutex.Bit()},
	{"read__lock__", false, KazooLock, true, guarded, "", 0},
	// kazoo's ReadLock, WriteLock and Lock see names ending in __lock__.
	// WriteLock also sees __rlock__. Made with extra_lock_patterns, they
	// see read- and write- too. Made without, as kazoo's default is, they
	// do not. Their nodes look the same either way. Taking them all to see
	// ours would let a default kazoo lock in beside our holder, unseen.
	// So only a path that declares the patterns, as KazooPatterns does,
	// counts on it. On any other path, a kazoo node is a blind peer's,
	// refused and announced to holders. A wrong guess then costs a
	// refusal, never two holders.
	{"__rlock__", false, Kazoo, true, guarded | hex32, "kazoo ReadLock", Kazoo.Bit() | KazooLock.Bit() | KazooPatterns.Bit()},
	// kazoo's Lock makes __lock__ nodes too, as WriteLock does. It does
	// not count __rlock__, the names of Kazoo's readers. So Kazoo is seen
	// by these nodes only where no kazoo Lock uses the path. Kazoo declares
	// that, as KazooPatterns declares the patterns. Only KazooLock's names
	// are counted by every kazoo lock class, whatever is declared.
	// mutant: kazoo-sees-native
	{"__lock__", true, Kazoo, true, guarded | hex32, "kazoo WriteLock or Lock", Kazoo.Bit() | KazooLock.Bit() | KazooPatterns.Bit()},
	// A bounded shared lock's node (see capacity.go). Its text stands for
	// sem-<w>of<n>-, which Parse reads apart from the others. Only a lock
	// of the same capacity counts it, and capacity.go refuses the rest.
	{capacityMarker, true, Native, true, guarded, "", 0},
	// Curator's InterProcessSemaphoreV2 leases. Curator counts none of our
	// nodes, and we cannot count its leases. So every dialect refuses them.
	{"lease-", true, Curator, false, uuid36, "Curator InterProcessSemaphoreV2", 0},
}

// The index of the capacity marker in Markers.
const capacityIndex = 10

var _ = [1]struct{}{}[len(Markers)-leaseMarker-1]
var _ = [1]struct{}{}[leaseMarker-capacityIndex-1]

// markerOf returns the index in Markers of the marker f gives a reader
// or a writer.
func markerOf(f Family, write bool) int {
	var read, wr int
	switch f {
	case Curator:
		read, wr = 2, 3
	case Mutex:
		read, wr = 4, 5
	case Kazoo:
		read, wr = 8, 9
	case KazooLock:
		read, wr = 7, 9
	default: // Native and KazooPatterns
		read, wr = 0, 1
	}
	if write {
		return wr
	}
	return read
}

// A Node is a child of a lock directory that parsed as a lock node.
type Node struct {
	Name      string // as listed, relative to the lock directory
	Seq       int32
	Write     bool   // a writer; else a reader
	Family    Family // whose names it carries
	Ours      bool   // made by zkrwlock: its data's marks can be trusted
	Protected bool   // its name starts _c_<guid>-: zkrwlock's, or zk.Lock's
	Marker    uint8  // index in Markers
	// Weight and Capacity are a bounded node's, as its name declares (see
	// capacity.go). Both are 0 for every other node.
	Weight, Capacity int64
}

// Bare returns n's name from its marker on, without the guid that
// protects it, as in write-0000000007 or __WRIT__0000000008.
func (n Node) Bare() string {
	if n.Capacity > 0 {
		return n.Name[strings.LastIndex(n.Name, "-"+capacityMarker)+1:]
	}
	return n.Name[len(n.Name)-len(Markers[n.Marker].Text)-len(FormatSeq(n.Seq)):]
}

// Prefix is the path zkrwlock asks ZooKeeper to extend with a sequence
// number, for a node of family f's names in directory dir.
func Prefix(dir, guid string, write bool, f Family) string {
	return dir + "/" + protectedPrefix + guid + "-" + Markers[markerOf(f, write)].Text
}

// Parse parses a child name. It returns ok == false for a name that is
// not a lock node of any family, such as a foreign child or a malformed
// sequence. The caller must ignore such names. Parse does not allocate,
// since it runs for every child of every listing.
func Parse(name string) (n Node, ok bool) {
	// <seq> is 10 characters, or 11 for a number below -999999999.
	// The character before it is a marker's last, never a digit or a
	// second '-'. So at most one of the two readings can have a marker
	// before it.
	for _, width := range [...]int{10, 11} {
		if len(name) < width {
			break
		}
		rest := name[:len(name)-width]
		seq, ok := ParseSeq(name[len(name)-width:])
		if !ok {
			continue
		}
		for i := range Markers {
			m := &Markers[i]
			prefix, ok := strings.CutSuffix(rest, m.Text)
			if !ok || i == capacityIndex {
				continue
			}
			shape := shapeOf(prefix)
			if shape&m.shapes == 0 {
				return Node{}, false
			}
			return Node{
				Name: name, Seq: seq, Write: m.Write, Family: m.Family,
				Ours: m.Ours && shape == guarded, Protected: shape == guarded, Marker: uint8(i),
			}, true
		}
		if w, c, ok := parseCapacity(rest); ok {
			return Node{
				Name: name, Seq: seq, Write: w == c, Family: Native, Ours: true, Protected: true,
				Marker: capacityIndex, Weight: w, Capacity: c,
			}, true
		}
	}
	return Node{}, false
}

// shapeOf tells what kind of prefix comes before a marker. It returns 0
// for a prefix that no family makes.
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

// NewGUID returns a fresh guid for the names of one acquisition.
func NewGUID() string {
	var b [guidLen / 2]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b[:])
}

// GUID returns the guid of a protected name, _c_ + 32 lowercase hex + "-".
func GUID(name string) (string, bool) {
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

// isUUID reports whether s is spelled as Java's UUID.toString spells
// one, as 8-4-4-4-12 lowercase hex digits.
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

// ParseSeq accepts exactly what Java's String.format("%010d", n) produces
// for an int32 n. That is ten digits, or a minus sign and nine digits, or
// ten when |n| >= 1e9. Anything else, even a number in another spelling,
// is not a lock node's.
func ParseSeq(s string) (int32, bool) {
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

// FormatSeq spells seq as ZooKeeper does, with Java's %010d. Go's %010d
// matches it, the sign counted in the width.
func FormatSeq(seq int32) string { return fmt.Sprintf("%010d", seq) }

// Precedes reports whether sequence a was issued before b. Both must be
// Usable.
func Precedes(a, b int32) bool { return a < b }

// Usable reports whether a node's own number can be ordered, that is,
// whether it is within 0…2147483646.
func Usable(seq int32) bool {
	// mutant: usable-seq
	return seq >= 0 && seq < math.MaxInt32
}
