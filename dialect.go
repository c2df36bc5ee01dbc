package rwlock

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

// A Dialect is the set of names an RWLock gives its nodes, so that the
// other lock library a path is shared with, the peer, counts them in its
// queue. The peers cannot be changed, and each recipe knows only its own
// names, ignoring or misordering any other. So the lock speaks their
// language.
//
// Whatever its dialect, a lock recognises the names of every family below
// as readers or writers, and queues behind them, so no peer's node is ever
// ignored. But a path shared with a peer must hold only names that peer
// recognises: Curator misorders other names, and go-zookeeper's zk.Lock
// fails on them. So every zkrwlock client of the path should use the peer
// family's dialect. DialectKazoo and DialectKazooPatterns declare what the
// path's kazoo clients do, which their nodes do not show and the lock
// cannot check. A wrong declaration lets a kazoo client be granted beside a
// holder of ours, and nobody is told. The file docs/peers.md in the
// repository tells the rest, such as how a peer's node is released.
type Dialect int

const (
	// DialectNative names nodes _c_<guid>-read-<seq> and
	// _c_<guid>-write-<seq>. The locks of kazoo count these names only when
	// made with extra_lock_patterns, which DialectKazooPatterns declares.
	// On a DialectNative path, a kazoo node is a blind peer's.
	DialectNative Dialect = iota
	// DialectCurator names nodes _c_<guid>-__READ__<seq> and
	// _c_<guid>-__WRIT__<seq>, for Curator's InterProcessReadWriteLock.
	DialectCurator
	// DialectMutex names nodes _c_<guid>-rlock-<seq> and
	// _c_<guid>-wlock-<seq>, for Curator's InterProcessMutex and
	// go-zookeeper's zk.Lock, whose own nodes end in lock-<seq>. They see
	// every node of ours as exclusive, but zkrwlock's readers still share.
	DialectMutex
	// DialectKazoo names nodes _c_<guid>-__rlock__<seq> and
	// _c_<guid>-__lock__<seq>, for kazoo's ReadLock and WriteLock. The Lock
	// of kazoo does not count __rlock__ readers, and its nodes look like
	// WriteLock's. So DialectKazoo declares that no kazoo Lock uses the
	// path. Where one may, use DialectKazooLock.
	DialectKazoo
	// DialectKazooLock names nodes _c_<guid>-read__lock__<seq> and
	// _c_<guid>-__lock__<seq>, for kazoo's Lock, which counts only names
	// ending in __lock__<seq> and so sees our readers as exclusive. All
	// three kazoo lock classes count these names, so it declares nothing.
	DialectKazooLock
	// DialectKazooPatterns names nodes as DialectNative does, for a path
	// whose kazoo locks are all made with extra_lock_patterns. ReadLock
	// needs the patterns ("write-",), and WriteLock and Lock need
	// ("write-", "read-"). Then they count our names. Their nodes look the
	// same without the patterns, so the user declares them. Under
	// DialectNative, kazoo's nodes are refused.
	DialectKazooPatterns

	numDialects = iota
)

// The dialects are lockname's families, in the same order.
var _ = [1]struct{}{}[numDialects-int(lockname.Families)]

// String returns the dialect's name as the CLI's --dialect takes it:
// native, curator, mutex, kazoo, kazoo-lock or kazoo-patterns.
func (d Dialect) String() string {
	switch d {
	case DialectNative:
		return "native"
	case DialectCurator:
		return "curator"
	case DialectMutex:
		return "mutex"
	case DialectKazoo:
		return "kazoo"
	case DialectKazooLock:
		return "kazoo-lock"
	case DialectKazooPatterns:
		return "kazoo-patterns"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

func (d Dialect) valid() bool { return d >= 0 && d < numDialects }

// persistentDir reports whether the lock directory must be persistent
// rather than a container. See lockname.Family.PersistentDir.
func (d Dialect) persistentDir() bool { return lockname.Family(d).PersistentDir() }

// blind returns the peers that do not count the names of the lock's dialect
// in their queue. It looks at the peers whose markers are set in peers, a
// bit per index in lockname.Markers, as in snapshot.peers. Between such a
// peer and zkrwlock, mutual exclusion does not hold, in either direction.
// It returns nil if there are none.
func (l *RWLock) blind(peers uint16) *mixedError {
	var m *mixedError
	for i, mk := range lockname.Markers {
		if peers&(1<<i) == 0 || mk.SeenBy&lockname.Family(l.dialect).Bit() != 0 {
			continue
		}
		if m == nil {
			m = &mixedError{dialect: l.dialect, seenBy: ^uint8(0)}
		}
		if !slices.Contains(m.peers, mk.Peer) {
			m.peers = append(m.peers, mk.Peer)
		}
		m.seenBy &= mk.SeenBy
	}
	return m
}

// A mixedError says that a lock directory holds nodes of peers that do not
// see the lock's own. The fleet on the path is mixed, and needs one
// dialect. It wraps ErrInvalidArgument and ErrMixedFleet.
type mixedError struct {
	dialect Dialect
	peers   []string // whom, as lockname.Marker.Peer says
	seenBy  uint8    // the families every one of them sees, as lockname.Family.Bit marks them
}

func (e *mixedError) Error() string {
	return "invalid argument: " + ErrMixedFleet.Error() + ": " + e.detail()
}

// detail says who does not see whom, and what to do.
func (e *mixedError) detail() string {
	seen := func(d Dialect) bool { return e.seenBy&lockname.Family(d).Bit() != 0 }
	// First a dialect that every such peer counts, whatever else is on the
	// path. DialectKazoo and DialectKazooPatterns come after it, each with
	// its condition. They declare what the path's kazoo locks count, which
	// no node shows, since a kazoo Lock's nodes look like WriteLock's.
	fix, sure := "keep one family of lock on the path", false
	// mutant: kazoo-advised-unconditionally
	for _, d := range []Dialect{DialectNative, DialectCurator, DialectMutex, DialectKazooLock} {
		if seen(d) {
			fix, sure = "give every zkrwlock client of the path WithDialect("+d.constName()+")", true
			break
		}
	}
	var declared []string
	if seen(DialectKazoo) {
		declared = append(declared, "WithDialect(DialectKazoo) if no kazoo Lock uses the path")
	}
	if seen(DialectKazooPatterns) && !seen(DialectNative) { // kazoo's nodes, not only native names
		declared = append(declared, "WithDialect(DialectKazooPatterns) if every kazoo lock there is made with "+
			`extra_lock_patterns, ("write-", "read-") for WriteLock and Lock and ("write-",) for ReadLock `+
			"(see docs/peers.md)")
	}
	switch {
	case len(declared) == 0:
	case sure:
		fix += "; or " + strings.Join(declared, "; or ")
	default:
		fix = "give every zkrwlock client of the path " + strings.Join(declared, "; or ") + "; else " + fix
	}
	they := "it does"
	if len(e.peers) > 1 {
		they = "they do"
	}
	return fmt.Sprintf("nodes of %s are on the path, and %s not count this lock's %s names, "+
		"so mutual exclusion with them does not hold: %s", strings.Join(e.peers, " and "), they, e.dialect, fix)
}

func (e *mixedError) Unwrap() []error { return []error{ErrInvalidArgument, ErrMixedFleet} }

// constName returns the name of d's constant, for messages.
func (d Dialect) constName() string {
	switch d {
	case DialectCurator:
		return "DialectCurator"
	case DialectMutex:
		return "DialectMutex"
	case DialectKazoo:
		return "DialectKazoo"
	case DialectKazooLock:
		return "DialectKazooLock"
	case DialectKazooPatterns:
		return "DialectKazooPatterns"
	}
	return "DialectNative"
}

// readAs returns whose a node of dialect f's names is taken to be. That is
// the lock's own dialect when it makes those names too. Names do not tell
// DialectNative from DialectKazooPatterns, and Queue must judge whether
// kazoo counts a native name as the lock's dialect declares.
func (l *RWLock) readAs(f Dialect) Dialect {
	if lockname.Family(l.dialect).Names() == lockname.Family(f) {
		return l.dialect
	}
	return f
}

// notePeers warns, once per lock, when a listing showed peer nodes whose
// library does not see the nodes of the lock's dialect. See blind.
func (l *RWLock) notePeers(peers uint16) {
	m := l.blind(peers)
	if m == nil || l.peersWarned.Swap(true) {
		return
	}
	l.log.Warn("rwlock: peers on this lock path do not see its nodes: "+m.detail(), "lock", l.path)
}
