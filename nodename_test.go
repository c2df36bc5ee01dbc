package rwlock

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const guid = "0123456789abcdef0123456789abcdef"

func TestParseNode(t *testing.T) {
	tests := []struct {
		name string
		want lockNode
		ok   bool
	}{
		{name: "read-0000000000", want: lockNode{seq: 0, mode: Read}, ok: true},
		{name: "write-0000000042", want: lockNode{seq: 42, mode: Write}, ok: true},
		{name: "_c_" + guid + "-read-0000000007", want: lockNode{seq: 7, mode: Read}, ok: true},
		{name: "_c_" + guid + "-write-2147483647", want: lockNode{seq: math.MaxInt32, mode: Write}, ok: true},
		{name: "write--2147483648", want: lockNode{seq: math.MinInt32, mode: Write}, ok: true},
		{name: "read--000000001", want: lockNode{seq: -1, mode: Read}, ok: true},
		{name: "read--999999999", want: lockNode{seq: -999999999, mode: Read}, ok: true},
		{name: "read--1000000000", want: lockNode{seq: -1000000000, mode: Read}, ok: true},

		// Foreign and malformed names are ignored.
		{name: "foo"},
		{name: "read-abc"},
		{name: "read-"},
		{name: "write"},
		{name: ""},
		{name: "read-000000001"},         // 9 digits
		{name: "read-00000000001"},       // 11 digits
		{name: "read-2147483648"},        // overflows int32
		{name: "read--2147483649"},       // overflows int32
		{name: "read--000000000"},        // Java prints 0 without a sign
		{name: "read--0000000001"},       // not how %010d spells -1
		{name: "read-+000000001"},        // sign Java never prints
		{name: "lock-0000000001"},        // go-zookeeper's zk.Lock
		{name: "x__lock__0000000001"},    // kazoo
		{name: "_c_abc-read-0000000001"}, // short guid
		{name: "_c_" + strings.ToUpper(guid) + "-read-0000000001"},
		{name: "_c_" + guid + "read-0000000001"}, // no dash after the guid
		{name: "_c_" + guid + "-lock-0000000001"},
		{name: "_c_" + guid + "-read-0000000001x"},
		{name: "prefix-read-0000000001"},
		{name: "read-000000000\x00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseNode(tc.name)
			require.Equal(t, tc.ok, ok)
			if ok {
				tc.want.name = tc.name
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

func TestFormatSeqRoundTrip(t *testing.T) {
	for _, seq := range []int32{0, 1, 42, 999999999, 1000000000, math.MaxInt32, -1, -42, -999999999, -1000000000, math.MinInt32} {
		s := formatSeq(seq)
		got, ok := parseSeq(s)
		require.True(t, ok, s)
		assert.Equal(t, seq, got, s)
	}
	assert.Equal(t, "0000000042", formatSeq(42))
	assert.Equal(t, "-000000042", formatSeq(-42))
	assert.Equal(t, "-2147483648", formatSeq(math.MinInt32))
}

func TestPrecedes(t *testing.T) {
	tests := []struct {
		a, b int32
		want bool
	}{
		{1, 2, true},
		{2, 1, false},
		{5, 5, false},
		{0, math.MaxInt32 - 1, true},
		{math.MaxInt32 - 1, 0, false}, // plain integers: a grant held across 2^31 creates is not overtaken
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, precedes(tc.a, tc.b), "precedes(%d, %d)", tc.a, tc.b)
	}
}

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
		name     string
		children []string
		self     string
		shared   func(string) bool
		want     string // "" = not blocked
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
			b, blocked := snap.blocker(tc.shared)
			assert.Equal(t, tc.want != "", blocked)
			assert.Equal(t, tc.want, b.name)
		})
	}
}

func TestValidatePath(t *testing.T) {
	for _, p := range []string{"/a", "/locks/schema", "/a/b/c-d_e.f", "/ü"} {
		assert.NoError(t, ValidatePath(p), p)
	}
	for _, p := range []string{"", "a", "/", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/zookeeper", "/zookeeper/quota",
		"/a\x00b", "/a\x01", "/a\u0085", "/a\ufffe", "/\xff"} {
		err := ValidatePath(p)
		assert.ErrorIs(t, err, ErrInvalidPath, "%q", p)
	}
}

func TestNodeData(t *testing.T) {
	d := encodeNodeData("host:42", false, false)
	assert.Equal(t, "owner=host:42\n", string(d))
	assert.False(t, downgraded(d))
	assert.Equal(t, "host:42", ownerOf(d))

	d = encodeNodeData("host:42", true, true)
	assert.True(t, downgraded(d))
	assert.Equal(t, "host:42", ownerOf(d))

	assert.Equal(t, "someone else", ownerOf([]byte(" someone else\n")))
	assert.False(t, downgraded([]byte("owner=x mode=read\n")))
}

// FuzzParseNode: any child name parses or is ignored, never panics, and a
// parsed name is exactly how ZooKeeper would spell that node.
func FuzzParseNode(f *testing.F) {
	for _, s := range []string{
		"read-0000000001", "write--2147483648", "_c_" + guid + "-write-0000000003",
		"foo", "read-abc", "_c_", "_c_" + guid, "_c_" + guid + "-", "read--000000000", "x__lock__0000000001",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, ok := parseNode(name)
		if !ok {
			return
		}
		prefix := ""
		if g, ok := guidOf(name); ok {
			prefix = protectedPrefix + g + "-"
		}
		mode := readPrefix
		if n.mode == Write {
			mode = writePrefix
		}
		if got := prefix + mode + formatSeq(n.seq); got != name {
			t.Fatalf("parseNode(%q) = %+v, which ZooKeeper would name %q", name, n, got)
		}
	})
}
