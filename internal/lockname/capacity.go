package lockname

import (
	"strconv"
	"strings"
)

// A bounded shared lock (a semaphore) names its nodes
// _c_<guid>-sem-<w>of<n>-<seq>. Here <w> is the node's weight and <n> the
// capacity the lock was made with, both in decimal without leading zeros,
// 1 ≤ w ≤ n ≤ MaxCapacity. The name carries both so that a waiter learns
// every weight ahead of it from one listing. Reading each node's data would
// cost a round trip per node.
//
// The capacity in every name lets a lock refuse a path whose fleet
// disagrees. A node of another capacity, or a read-/write- node of a lock
// without one, is refused loudly, as a blind peer's is. Two locks that
// count permits differently would each let in more than the other allows.
//
// Curator's InterProcessSemaphoreV2 keeps its leases in a child directory,
// leases/, as _c_<uuid>-lease-<seq>, behind a mutex in locks/. It counts
// no node of ours, and we cannot count its leases against our capacity. A
// lock directory with a child named leases or locks, or a lease among its
// children, is a Curator semaphore's: see CuratorSemaphore.

// MaxCapacity is the largest capacity, and so the largest weight, a name
// can carry. Nine digits keep names short and sums far from overflow.
const MaxCapacity = 999_999_999

// capacityMarker is the text before a bounded node's weight.
const capacityMarker = "sem-"

// CapacityPrefix is the path zkrwlock asks ZooKeeper to extend with a
// sequence number, for a node of weight w under capacity n in dir.
func CapacityPrefix(dir, guid string, w, n int64) string {
	return dir + "/" + protectedPrefix + guid + "-" + capacityMarker +
		strconv.FormatInt(w, 10) + "of" + strconv.FormatInt(n, 10) + "-"
}

// parseCapacity reads the part of a name before <seq> as a bounded node's:
// _c_<guid>-sem-<w>of<n>-. It does not allocate.
func parseCapacity(rest string) (w, n int64, ok bool) {
	body, ok := strings.CutSuffix(rest, "-")
	if !ok {
		return 0, 0, false
	}
	i := strings.LastIndex(body, "-"+capacityMarker)
	if i < 0 || shapeOf(body[:i+1]) != guarded {
		return 0, 0, false
	}
	ws, ns, ok := strings.Cut(body[i+1+len(capacityMarker):], "of")
	if !ok {
		return 0, 0, false
	}
	w, wok := parseCount(ws)
	n, nok := parseCount(ns)
	if !wok || !nok || w > n {
		return 0, 0, false
	}
	return w, n, true
}

// parseCount accepts 1…MaxCapacity in decimal, without a sign or leading
// zeros, as strconv.FormatInt spells it.
func parseCount(s string) (int64, bool) {
	if s == "" || len(s) > 9 || s[0] == '0' {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// CuratorSemaphore reports whether a child of a lock directory shows that
// Curator's InterProcessSemaphoreV2 uses the path. Its children are the
// directories locks and leases (LOCK_SCHEMA in Curator's source). Its
// leases, if our path is its leases/, parse as the lease- marker's nodes.
func CuratorSemaphore(child string) bool { return child == "locks" || child == "leases" }

// leaseMarker is the index in Markers of Curator's lease nodes.
const leaseMarker = 11

// LeaseMarker returns the index in Markers of the marker of Curator's
// semaphore leases. A directory that CuratorSemaphore recognises counts as
// holding such a node.
func LeaseMarker() uint8 { return leaseMarker }
