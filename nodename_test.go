package rwlock

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const guid = "0123456789abcdef0123456789abcdef"

// uuid is how Curator's protected names spell their id (Java's UUID.toString).
const uuid = "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"

func TestParseNode(t *testing.T) {
	type want struct {
		seq    int32
		mode   Mode
		family Dialect
		ours   bool
	}
	tests := []struct {
		name string
		want *want // nil: not a lock node
	}{
		// zkrwlock's own names, in every dialect.
		{"_c_" + guid + "-read-0000000007", &want{7, Read, DialectNative, true}},
		{"_c_" + guid + "-write-2147483647", &want{math.MaxInt32, Write, DialectNative, true}},
		{"_c_" + guid + "-__READ__0000000007", &want{7, Read, DialectCurator, true}},
		{"_c_" + guid + "-__WRIT__0000000008", &want{8, Write, DialectCurator, true}},
		{"_c_" + guid + "-rlock-0000000009", &want{9, Read, DialectMutex, true}},
		{"_c_" + guid + "-wlock-0000000010", &want{10, Write, DialectMutex, true}},
		{"_c_" + guid + "-__rlock__0000000011", &want{11, Read, DialectKazoo, true}},
		{"_c_" + guid + "-__lock__0000000012", &want{12, Write, DialectKazoo, true}},
		{"_c_" + guid + "-read__lock__0000000013", &want{13, Read, DialectKazooLock, true}},

		// Unprotected native names (ours, before the guid): recognised, not ours.
		{"read-0000000000", &want{0, Read, DialectNative, false}},
		{"write-0000000042", &want{42, Write, DialectNative, false}},
		{"write--2147483648", &want{math.MinInt32, Write, DialectNative, false}},
		{"read--000000001", &want{-1, Read, DialectNative, false}},
		{"read--999999999", &want{-999999999, Read, DialectNative, false}},
		{"read--1000000000", &want{-1000000000, Read, DialectNative, false}},

		// Peers' names.
		{"_c_" + uuid + "-__READ__0000000001", &want{1, Read, DialectCurator, false}},
		{"_c_" + uuid + "-__WRIT__0000000002", &want{2, Write, DialectCurator, false}},
		{"_c_" + uuid + "-lock-0000000003", &want{3, Write, DialectMutex, false}}, // Curator InterProcessMutex
		{"_c_" + guid + "-lock-0000000004", &want{4, Write, DialectMutex, false}}, // go-zookeeper zk.Lock
		{guid + "__rlock__0000000005", &want{5, Read, DialectKazoo, false}},       // kazoo ReadLock
		{guid + "__lock__0000000006", &want{6, Write, DialectKazoo, false}},       // kazoo WriteLock, Lock
		{guid + "__lock__-2147483648", &want{math.MinInt32, Write, DialectKazoo, false}},
		{"_c_" + uuid + "-__WRIT__-000000002", &want{-2, Write, DialectCurator, false}},

		// Foreign and malformed names are ignored.
		{"foo", nil},
		{"read-abc", nil},
		{"read-", nil},
		{"write", nil},
		{"", nil},
		{"read-000000001", nil},   // 9 digits
		{"read-00000000001", nil}, // 11 digits
		{"read-2147483648", nil},  // overflows int32
		{"read--2147483649", nil}, // overflows int32
		{"read--000000000", nil},  // Java prints 0 without a sign
		{"read--0000000001", nil}, // not how %010d spells -1
		{"read-+000000001", nil},  // sign Java never prints
		{"lock-0000000001", nil},  // zk.Lock's names are protected
		{"x__lock__0000000001", nil},
		{"_c_abc-read-0000000001", nil}, // short guid
		{"_c_" + strings.ToUpper(guid) + "-read-0000000001", nil},
		{"_c_" + guid + "read-0000000001", nil}, // no dash after the guid
		{"_c_" + guid + "-read-0000000001x", nil},
		{"prefix-read-0000000001", nil},
		{"read-000000000\x00", nil},
		{"_c_" + uuid + "-read-0000000001", nil},                  // Curator's protection, our token
		{"_c_" + uuid + "-rlock-0000000001", nil},                 // only we make rlock-, with our guid
		{"_c_" + strings.ToUpper(uuid) + "-lock-0000000001", nil}, // Java prints lowercase
		{"_c_" + strings.ReplaceAll(uuid, "-", "") + "x-lock-0000000001", nil},
		{guid + "read__lock__0000000001", nil}, // only we make read__lock__
		{guid + "__READ__0000000001", nil},
		{guid[:31] + "__lock__0000000001", nil},
		{"__lock__0000000001", nil},
		{"_c_" + guid + "-__lock__0000000001 ", nil},
		{"_c_" + guid + "-__lock__000000001", nil},
		{"_c_" + guid + "-__LOCK__0000000001", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseNode(tc.name)
			require.Equal(t, tc.want != nil, ok)
			if ok {
				assert.Equal(t, *tc.want, want{got.seq, got.mode, got.family, got.ours})
				assert.Equal(t, tc.name, got.name)
			}
		})
	}
}

// What we create is what we recognise as ours, in every dialect.
func TestNodePrefixParsesAsOurs(t *testing.T) {
	for d := range Dialect(numDialects) {
		for _, m := range []Mode{Read, Write} {
			p := nodePrefix("/locks/x", guid, m, d)
			n, ok := parseNode(strings.TrimPrefix(p, "/locks/x/") + "0000000042")
			require.True(t, ok, p)
			assert.True(t, n.ours, p)
			assert.Equal(t, m, n.mode, p)
			assert.Equal(t, int32(42), n.seq, p)
			wantFamily := d
			if d == DialectKazooLock && m == Write {
				wantFamily = DialectKazoo // the same name as kazoo's writers
			}
			assert.Equal(t, wantFamily, n.family, p)
		}
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

// Every family's nodes are ordered by their numbers alone, whatever their
// names; the snapshot notes which peers' tokens it saw.
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
	for i, tok := range tokens {
		if snap.peers&(1<<i) != 0 {
			peers = append(peers, tok.text)
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
// parsed name is exactly how its family and ZooKeeper would spell that
// node: a known prefix, its token, the number as %010d.
func FuzzParseNode(f *testing.F) {
	for _, s := range []string{
		"read-0000000001", "write--2147483648", "_c_" + guid + "-write-0000000003",
		"foo", "read-abc", "_c_", "_c_" + guid, "_c_" + guid + "-", "read--000000000", "x__lock__0000000001",
		"_c_" + uuid + "-__WRIT__0000000001", guid + "__rlock__0000000002", "_c_" + guid + "-read__lock__0000000003",
		"_c_" + uuid + "-lock-0000000004",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, ok := parseNode(name)
		if !ok {
			return
		}
		tok := tokens[n.token]
		prefix, found := strings.CutSuffix(name, tok.text+formatSeq(n.seq))
		switch shape := shapeOf(prefix); {
		case !found:
			t.Fatalf("parseNode(%q) = %+v, which ZooKeeper would name %q", name, n, prefix+tok.text+formatSeq(n.seq))
		case shape&tok.shapes == 0:
			t.Fatalf("parseNode(%q) = %+v: no family puts %q before %q", name, n, prefix, tok.text)
		case n.ours != (shape == guarded && tok.ours), n.mode != tok.mode, n.family != tok.family:
			t.Fatalf("parseNode(%q) = %+v does not match its token %+v", name, n, tok)
		}
	})
}
