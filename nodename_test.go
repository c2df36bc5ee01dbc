package rwlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/lockname"
)

const guid = "0123456789abcdef0123456789abcdef"

// uuid is how Curator's protected names spell their id (Java's UUID.toString).
const uuid = "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"

func names(nodes []lockNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.name)
	}
	return out
}

func TestTakeSnapshot(t *testing.T) {
	children := []string{
		"foo", // foreign
		"_c_" + guid + "-write-0000000007",
		"read-0000000010",
		"write-0000000002",
		"read-0000000009",
		"write-0000000011", // after us
	}
	snap, err := takeSnapshot(children, "read-0000000010", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"write-0000000002", "_c_" + guid + "-write-0000000007", "read-0000000009"}, names(snap.before))
	assert.Equal(t, Read, snap.self.mode)

	_, err = takeSnapshot(children, "read-0000000001", nil)
	assert.ErrorIs(t, err, errNotListed, "our own node missing is never 'we are first'")
}

// Every family's nodes are ordered by their numbers alone, whatever their
// names; the snapshot notes which peers' markers it saw.
func TestTakeSnapshotOfEveryFamily(t *testing.T) {
	self := "_c_" + guid + "-__READ__0000000009"
	children := []string{
		guid + "__lock__0000000008",              // kazoo
		"_c_" + uuid + "-__WRIT__0000000002",     // Curator
		self,                                     // ours, DialectCurator
		"_c_" + guid + "-lock-0000000005",        // zk.Lock
		"_c_" + guid + "-read-0000000001",        // ours, native
		"_c_" + uuid + "-__READ__0000000011",     // after us
		"_c_" + guid + "-read__lock__0000000007", // ours, DialectKazooLock
		"_c_" + uuid + "-__READ__0000000006",     // Curator reader
	}
	snap, err := takeSnapshot(children, self, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{children[4], children[1], children[3], children[7], children[6], children[0]}, names(snap.before))
	b, blocked := snap.blocker(func(string) bool { return false })
	require.True(t, blocked)
	assert.Equal(t, children[0], b.name, "the nearest writer: kazoo's")
	var peers []string
	for i, m := range lockname.Markers {
		if snap.peers&(1<<i) != 0 {
			peers = append(peers, m.Text)
		}
	}
	assert.ElementsMatch(t, []string{"__lock__", "__WRIT__", "lock-", "__READ__"}, peers)
}

// At the counter's end ZooKeeper 3.8 gives 2147483647 again and again, and
// creates in flight together negative numbers: fail rather than guess.
func TestTakeSnapshotAtTheCounterEnd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		children []string
		self     string
	}{
		{"our number at the top", []string{"write-2147483646", "write-2147483647"}, "write-2147483647"},
		{"our number negative", []string{"write-2147483647", "read--2147483648"}, "read--2147483648"},
		{"a duplicate of ours", []string{"_c_" + guid + "-write-0000000005", "read-0000000005"}, "read-0000000005"},
		{"duplicates before us", []string{"write-0000000003", "read-0000000003", "read-0000000009"}, "read-0000000009"},
		{"a peer's duplicate of ours", []string{guid + "__lock__0000000005", "_c_" + guid + "-__rlock__0000000005"}, "_c_" + guid + "-__rlock__0000000005"},
		{"peers' duplicates before us", []string{"_c_" + uuid + "-lock-0000000003", "_c_" + guid + "-lock-0000000003", "_c_" + guid + "-wlock-0000000004"}, "_c_" + guid + "-wlock-0000000004"},
		{"ours in a dialect at the top", []string{"_c_" + uuid + "-__WRIT__2147483646", "_c_" + guid + "-__READ__2147483647"}, "_c_" + guid + "-__READ__2147483647"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := takeSnapshot(tc.children, tc.self, nil)
			assert.ErrorIs(t, err, ErrSequenceExhausted)
			assert.ErrorContains(t, err, "fresh lock directory")
		})
	}
	snap, err := takeSnapshot([]string{"write-2147483646", "read-2147483647", "read-2147483647"}, "write-2147483646", nil)
	require.NoError(t, err, "duplicates after us are theirs to find")
	assert.Empty(t, snap.before)
}

func TestBlocker(t *testing.T) {
	none := func(string) bool { return false }
	tests := []struct {
		name       string
		children   []string
		self       string
		downgraded func(string) bool
		want       string // "" = not blocked
	}{
		{"writer first", []string{"write-0000000001"}, "write-0000000001", none, ""},
		{"writer waits on immediate predecessor", []string{"write-0000000001", "read-0000000002", "write-0000000003"}, "write-0000000003", none, "read-0000000002"},
		{"reader behind readers", []string{"read-0000000001", "read-0000000002"}, "read-0000000002", none, ""},
		{"reader waits on nearest writer", []string{"write-0000000001", "read-0000000002", "write-0000000003", "read-0000000004", "read-0000000005"}, "read-0000000005", none, "write-0000000003"},
		{"later writer does not block", []string{"read-0000000001", "write-0000000002"}, "read-0000000001", none, ""},
		{"downgraded writer does not block readers", []string{"write-0000000001", "read-0000000002"}, "read-0000000002", func(n string) bool { return n == "write-0000000001" }, ""},
		{"downgraded writer still blocks writers", []string{"write-0000000001", "write-0000000002"}, "write-0000000002", func(string) bool { return true }, "write-0000000001"},
		{"reader skips downgraded to the next writer", []string{"write-0000000001", "write-0000000002", "read-0000000003"}, "read-0000000003", func(n string) bool { return n == "write-0000000002" }, "write-0000000001"},
		{"the largest usable number", []string{"write-0000000000", "read-2147483646"}, "read-2147483646", none, "write-0000000000"},
		{"foreign children never block", []string{"foo", "write-abc", "write-00000000001", "read-0000000009"}, "read-0000000009", none, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := takeSnapshot(tc.children, tc.self, nil)
			require.NoError(t, err)
			b, blocked := snap.blocker(tc.downgraded)
			assert.Equal(t, tc.want != "", blocked)
			assert.Equal(t, tc.want, b.name)
		})
	}
}

// New refuses a path that cannot be a lock directory (lockname.CheckPath
// has the rules).
func TestNewRefusesInvalidPaths(t *testing.T) {
	for _, p := range []string{"", "a", "/", "/a/", "/zookeeper/x"} {
		_, err := newRWLock(newFakeServer().conn(), p)
		assert.ErrorIs(t, err, ErrInvalidPath, "%q", p)
	}
}
