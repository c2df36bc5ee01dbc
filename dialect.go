package rwlock

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

// A Dialect is the set of names an RWLock gives its nodes, chosen so that
// the other lock library a path is shared with (a peer) counts them in its
// queue. The peers cannot be changed, so the lock speaks their language:
// each recipe knows only its own names and ignores, or misorders, any
// other.
//
// Whatever its dialect, a lock recognises the names of every family below
// as readers or writers and queues behind them, so no peer's node is ever
// ignored. A path shared with a peer must hold only names that peer
// recognises: use the dialect of the peer family on every zkrwlock client
// of the path (see the README's "Sharing a lock with Curator, kazoo and
// zk.Lock").
//
// A peer's node is released only when it is deleted: the marks zkrwlock
// writes into its own nodes' data (the held mark, a downgrade) are trusted
// only on zkrwlock's own nodes.
type Dialect int

const (
	// DialectNative names nodes _c_<guid>-read-<seq> and
	// _c_<guid>-write-<seq>. kazoo's ReadLock and WriteLock share it when
	// made with extra_lock_patterns=("write-",) and ("write-", "read-").
	DialectNative Dialect = iota
	// DialectCurator names nodes _c_<guid>-__READ__<seq> and
	// _c_<guid>-__WRIT__<seq>, for Curator's InterProcessReadWriteLock.
	DialectCurator
	// DialectMutex names nodes _c_<guid>-rlock-<seq> and
	// _c_<guid>-wlock-<seq>, for Curator's InterProcessMutex and
	// go-zookeeper's zk.Lock, whose own nodes end in lock-<seq>. They see
	// every node of ours as exclusive; zkrwlock's readers still share.
	DialectMutex
	// DialectKazoo names nodes _c_<guid>-__rlock__<seq> and
	// _c_<guid>-__lock__<seq>, for kazoo's ReadLock and WriteLock.
	DialectKazoo
	// DialectKazooLock names nodes _c_<guid>-read__lock__<seq> and
	// _c_<guid>-__lock__<seq>, for kazoo's Lock, which counts only names
	// ending in __lock__<seq> and so sees our readers as exclusive.
	DialectKazooLock

	numDialects = iota
)

// The dialects are lockname's families, in the same order.
var _ = [1]struct{}{}[numDialects-int(lockname.Families)]

// String returns the dialect's name as the CLI's --dialect takes it:
// native, curator, mutex, kazoo or kazoo-lock.
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
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

func (d Dialect) valid() bool { return d >= 0 && d < numDialects }

// persistentDir reports whether the lock directory must be persistent
// rather than a container (see lockname.Family.PersistentDir).
func (d Dialect) persistentDir() bool { return lockname.Family(d).PersistentDir() }

// notePeers warns, once per lock, when a listing showed peer nodes whose
// library does not see the nodes of the lock's dialect (peers has a bit per
// marker, as snapshot.peers): between that peer and zkrwlock, mutual
// exclusion does not hold, in both directions, as the peer ignores our
// nodes or misorders them.
func (l *RWLock) notePeers(peers uint16) {
	if peers == 0 || l.peersWarned.Load() {
		return
	}
	var blind []string
	for i, m := range lockname.Markers {
		if peers&(1<<i) != 0 && m.SeenBy&lockname.Family(l.dialect).Bit() == 0 && !slices.Contains(blind, m.Peer) {
			blind = append(blind, m.Peer)
		}
	}
	if len(blind) == 0 || l.peersWarned.Swap(true) {
		return
	}
	l.log.Warn("rwlock: peers on this lock path do not see its nodes: mutual exclusion with them does not hold; "+
		"give every zkrwlock client of the path the dialect of its peers, and keep other families off it",
		"lock", l.path, "dialect", l.dialect.String(), "peers", strings.Join(blind, ", "))
}
