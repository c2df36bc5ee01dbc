package lockname

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const guid = "0123456789abcdef0123456789abcdef"

// uuid is how Curator's protected names spell their id (Java's UUID.toString).
const uuid = "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"

func TestParseNode(t *testing.T) {
	type want struct {
		seq    int32
		write  bool
		family Family
		ours   bool
	}
	tests := []struct {
		name string
		want *want // nil: not a lock node
	}{
		// zkrwlock's own names, in every dialect.
		{"_c_" + guid + "-read-0000000007", &want{7, false, Native, true}},
		{"_c_" + guid + "-write-2147483647", &want{math.MaxInt32, true, Native, true}},
		{"_c_" + guid + "-__READ__0000000007", &want{7, false, Curator, true}},
		{"_c_" + guid + "-__WRIT__0000000008", &want{8, true, Curator, true}},
		{"_c_" + guid + "-rlock-0000000009", &want{9, false, Mutex, true}},
		{"_c_" + guid + "-wlock-0000000010", &want{10, true, Mutex, true}},
		{"_c_" + guid + "-__rlock__0000000011", &want{11, false, Kazoo, true}},
		{"_c_" + guid + "-__lock__0000000012", &want{12, true, Kazoo, true}},
		{"_c_" + guid + "-read__lock__0000000013", &want{13, false, KazooLock, true}},

		// Unprotected native names (ours, before the guid): recognised, not ours.
		{"read-0000000000", &want{0, false, Native, false}},
		{"write-0000000042", &want{42, true, Native, false}},
		{"write--2147483648", &want{math.MinInt32, true, Native, false}},
		{"read--000000001", &want{-1, false, Native, false}},
		{"read--999999999", &want{-999999999, false, Native, false}},
		{"read--1000000000", &want{-1000000000, false, Native, false}},

		// Peers' names.
		{"_c_" + uuid + "-__READ__0000000001", &want{1, false, Curator, false}},
		{"_c_" + uuid + "-__WRIT__0000000002", &want{2, true, Curator, false}},
		{"_c_" + uuid + "-lock-0000000003", &want{3, true, Mutex, false}}, // Curator InterProcessMutex
		{"_c_" + guid + "-lock-0000000004", &want{4, true, Mutex, false}}, // go-zookeeper zk.Lock
		{guid + "__rlock__0000000005", &want{5, false, Kazoo, false}},     // kazoo ReadLock
		{guid + "__lock__0000000006", &want{6, true, Kazoo, false}},       // kazoo WriteLock, Lock
		{guid + "__lock__-2147483648", &want{math.MinInt32, true, Kazoo, false}},
		{"_c_" + uuid + "-__WRIT__-000000002", &want{-2, true, Curator, false}},

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
			got, ok := Parse(tc.name)
			require.Equal(t, tc.want != nil, ok)
			if ok {
				assert.Equal(t, *tc.want, want{got.Seq, got.Write, got.Family, got.Ours})
				assert.Equal(t, tc.name, got.Name)
			}
		})
	}
}

// What we create is what we recognise as ours, in every family's names.
func TestPrefixParsesAsOurs(t *testing.T) {
	for f := range Families {
		for _, write := range []bool{false, true} {
			p := Prefix("/locks/x", guid, write, f)
			n, ok := Parse(strings.TrimPrefix(p, "/locks/x/") + "0000000042")
			require.True(t, ok, p)
			assert.True(t, n.Ours, p)
			assert.True(t, n.Protected, p)
			assert.Equal(t, write, n.Write, p)
			assert.Equal(t, int32(42), n.Seq, p)
			wantFamily := f.Names() // KazooPatterns makes native names
			if f == KazooLock && write {
				wantFamily = Kazoo // the same name as kazoo's writers
			}
			assert.Equal(t, wantFamily, n.Family, p)
			assert.Equal(t, strings.TrimPrefix(p, "/locks/x/_c_"+guid+"-")+"0000000042", n.Bare(), p)
		}
	}
}

// Whose nodes each peer counts. kazoo's locks count native names only
// with extra_lock_patterns, which their nodes do not show: so only the
// KazooPatterns family, which declares it, is seen by them, and Native is
// not. Each family's own peers see it.
func TestMarkersSeenBy(t *testing.T) {
	want := map[string][]Family{
		"read-":     {Native, KazooPatterns},
		"write-":    {Native, KazooPatterns},
		"__READ__":  {Curator},
		"__WRIT__":  {Curator},
		"lock-":     {Mutex},
		"__rlock__": {Kazoo, KazooLock, KazooPatterns},
		"__lock__":  {Kazoo, KazooLock, KazooPatterns},
		"sem-":      nil, // counted by a lock of the same capacity only (capacity.go)
		"lease-":    nil, // Curator's semaphore counts none of ours
	}
	for _, m := range Markers {
		var seen []Family
		for f := range Families {
			if m.SeenBy&f.Bit() != 0 {
				seen = append(seen, f)
			}
		}
		assert.Equal(t, want[m.Text], seen, m.Text)
		if m.Text != "lease-" {
			assert.Equal(t, m.Peer != "", len(seen) > 0, "%s: a peer makes it, so someone is seen by it", m.Text)
		}
	}
	// Every family's writers are counted by the peers that make the same
	// marker, if any do.
	for f := range Families {
		if m := Markers[markerOf(f, true)]; m.Peer != "" {
			assert.NotZero(t, m.SeenBy&f.Bit(), "%v's writers, %s, are not seen by their peers", f, m.Text)
		}
	}
}

func TestFamilyNames(t *testing.T) {
	for f := range Families {
		want := f
		if f == KazooPatterns {
			want = Native
		}
		assert.Equal(t, want, f.Names(), f)
		assert.Equal(t, Markers[markerOf(f.Names(), true)].Text, Markers[markerOf(f, true)].Text, f)
		assert.Equal(t, Markers[markerOf(f.Names(), false)].Text, Markers[markerOf(f, false)].Text, f)
	}
	assert.True(t, KazooPatterns.PersistentDir(), "kazoo shares the path")
	assert.False(t, Native.PersistentDir())
}

func TestFormatSeqRoundTrip(t *testing.T) {
	for _, seq := range []int32{0, 1, 42, 999999999, 1000000000, math.MaxInt32, -1, -42, -999999999, -1000000000, math.MinInt32} {
		s := FormatSeq(seq)
		got, ok := ParseSeq(s)
		require.True(t, ok, s)
		assert.Equal(t, seq, got, s)
	}
	assert.Equal(t, "0000000042", FormatSeq(42))
	assert.Equal(t, "-000000042", FormatSeq(-42))
	assert.Equal(t, "-2147483648", FormatSeq(math.MinInt32))
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
		assert.Equal(t, tc.want, Precedes(tc.a, tc.b), "Precedes(%d, %d)", tc.a, tc.b)
	}
}

func TestCheckPath(t *testing.T) {
	for _, p := range []string{"/a", "/locks/schema", "/a/b/c-d_e.f", "/ü"} {
		assert.NoError(t, CheckPath(p), p)
	}
	for _, p := range []string{"", "a", "/", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/zookeeper", "/zookeeper/quota",
		"/a\x00b", "/a\x01", "/a\u0085", "/a\ufffe", "/\xff", "/" + strings.Repeat("x", 64<<10)} {
		err := CheckPath(p)
		assert.Error(t, err, "%q", p)
		assert.Less(t, len(err.Error()), 200, "a huge path is shortened in the error")
	}
}

func TestData(t *testing.T) {
	d := Data("host:42", 0, 0)
	assert.Equal(t, "owner=host:42\n", string(d))
	assert.False(t, Downgraded(d))
	assert.False(t, Held(d))
	assert.Equal(t, "host:42", Owner(d))

	d = Data("host:42", 0, MarkHeld|MarkDowngraded)
	assert.True(t, Downgraded(d))
	assert.True(t, Held(d))
	assert.Equal(t, "host:42", Owner(d))
	assert.True(t, Held(Data("x", 0, MarkDowngraded)), "a downgrade proves the node held the lock")

	assert.Equal(t, "someone else", Owner([]byte(" someone else\n")))
	assert.False(t, Downgraded([]byte("owner=x mode=read\n")))
}

func TestDataMaxHold(t *testing.T) {
	d := Data("host:42", 90*time.Second, MarkDowngraded)
	assert.Equal(t, "owner=host:42\nmax-hold=1m30s\nmode=read\n", string(d))
	assert.Equal(t, 90*time.Second, MaxHold(d))
	assert.Equal(t, "host:42", Owner(d))
	assert.True(t, Downgraded(d))
	assert.Zero(t, MaxHold(Data("host:42", 0, MarkHeld)), "no limit, no line")
	for _, bad := range []string{"", "max-hold=", "max-hold=soon\n", "max-hold=-5s\n", "owner=x max-hold=5s\n", "10.0.0.7"} {
		assert.Zero(t, MaxHold([]byte(bad)), "%q", bad)
	}
}

func TestValue(t *testing.T) {
	for _, v := range [][]byte{nil, []byte("10.0.0.7:8080"), []byte("state=held\nmode=read\n"), {0, 0xff, '\n'}} {
		d := append(Data("host:42", 0, 0), ValueLine(v)...)
		got, ok := Value(d)
		assert.True(t, ok)
		assert.Equal(t, string(v), string(got))
		assert.False(t, Held(d), "a value is never a mark: %q", d)
		assert.False(t, Downgraded(d))
		assert.True(t, Elected(d), "a campaign's node, whatever its value")
		assert.Equal(t, "host:42", Owner(d))
		assert.Equal(t, 1, strings.Count(string(d), "\n")-1, "one line: %q", d)
	}
	assert.Equal(t, "value=MTAuMC4wLjc6ODA4MA==\n", string(ValueLine([]byte("10.0.0.7:8080"))))
	for _, bad := range []string{"", "owner=x\n", "value=not base64!\n"} {
		_, ok := Value([]byte(bad))
		assert.False(t, ok, "%q", bad)
	}
	assert.False(t, Elected(Data("value=x", 0, MarkHeld)), "a plain writer's node, whatever its owner")
}

func TestSet(t *testing.T) {
	base := Data("host:42", 0, 0)
	d := InSet(base, []string{"/a", "/b", "/c"}, 1)
	assert.Equal(t, "owner=host:42\nset-size=3\nset=/a\nset=/c\n", string(d))
	assert.Equal(t, "owner=host:42\n", string(base), "the lock's own data stays")
	others, size := Set(d)
	assert.Equal(t, []string{"/a", "/c"}, others)
	assert.Equal(t, 3, size)
	assert.Equal(t, "host:42", Owner(d))
	assert.False(t, Held(d))

	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprintf("/locks/%d", i)
	}
	d = InSet(nil, many, 0)
	others, size = Set(d)
	assert.Equal(t, many[1:1+maxSetShown], others, "capped")
	assert.Equal(t, 100, size)
	assert.Less(t, len(d), 200, "a big set keeps the data small")

	for _, bad := range []string{"", "owner=x\n", "set=/a\n", "set-size=x\nset=/a\n", "set-size=1\nset=/a\n", "set-size=-2\n"} {
		others, size := Set([]byte(bad))
		assert.Zero(t, size, "%q", bad)
		assert.Nil(t, others, "%q", bad)
	}
}

// FuzzData: any node data, a peer's or a forged one, reads without a
// panic, and what Data writes reads back.
func FuzzData(f *testing.F) {
	f.Add("host:42", int64(30*time.Second), true, false)
	f.Add("a\nmax-hold=1s", int64(0), false, true)
	f.Add("", int64(-1), false, false)
	f.Fuzz(func(t *testing.T, owner string, ns int64, held, downgraded bool) {
		_, _ = MaxHold([]byte(owner)), Owner([]byte(owner))
		if others, size := Set([]byte(owner)); size > 0 && len(others) >= size || len(others) > maxSetShown {
			t.Fatalf("Set(%q) = %q, %d", owner, others, size)
		}
		if strings.ContainsAny(owner, "\r\n") {
			return // WithOwner makes an owner one line
		}
		d := time.Duration(ns)
		var marks Mark
		if held {
			marks |= MarkHeld
		}
		if downgraded {
			marks |= MarkDowngraded
		}
		data := Data(owner, d, marks)
		if want := max(d, 0); MaxHold(data) != want {
			t.Fatalf("MaxHold(%q) = %v, want %v", data, MaxHold(data), want)
		}
		if Owner(data) != owner || Held(data) != (held || downgraded) || Downgraded(data) != downgraded {
			t.Fatalf("Data(%q, %v, %v, %v) = %q reads back wrong", owner, d, held, downgraded, data)
		}
		paths := []string{"/" + strings.ReplaceAll(owner, "/", "_"), "/x"}
		others, size := Set(InSet(data, paths, 1))
		if size != 2 || len(others) != 1 || others[0] != paths[0] || MaxHold(InSet(data, paths, 0)) != max(d, 0) {
			t.Fatalf("InSet(%q, %q) reads back %q, %d", data, paths, others, size)
		}
	})
}

// FuzzParse: any child name parses or is ignored, never panics, and a
// parsed name is exactly how its family and ZooKeeper would spell that
// node: a known prefix, its marker, the number as %010d.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"read-0000000001", "write--2147483648", "_c_" + guid + "-write-0000000003",
		"foo", "read-abc", "_c_", "_c_" + guid, "_c_" + guid + "-", "read--000000000", "x__lock__0000000001",
		"_c_" + uuid + "-__WRIT__0000000001", guid + "__rlock__0000000002", "_c_" + guid + "-read__lock__0000000003",
		"_c_" + uuid + "-lock-0000000004",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, ok := Parse(name)
		if !ok {
			return
		}
		m := Markers[n.Marker]
		prefix, found := strings.CutSuffix(name, m.Text+FormatSeq(n.Seq))
		switch shape := shapeOf(prefix); {
		case !found:
			t.Fatalf("Parse(%q) = %+v, which ZooKeeper would name %q", name, n, prefix+m.Text+FormatSeq(n.Seq))
		case shape&m.shapes == 0:
			t.Fatalf("Parse(%q) = %+v: no family puts %q before %q", name, n, prefix, m.Text)
		case n.Ours != (shape == guarded && m.Ours), n.Write != m.Write, n.Family != m.Family, n.Protected != (shape == guarded):
			t.Fatalf("Parse(%q) = %+v does not match its marker %+v", name, n, m)
		case n.Bare() != m.Text+FormatSeq(n.Seq):
			t.Fatalf("Parse(%q).Bare() = %q", name, n.Bare())
		}
	})
}

// A revocation names nodes, or none (Revoke's first write), in the
// directory it says; any other data is none.
func TestRevocation(t *testing.T) {
	for _, r := range []Revocation{
		{Reason: "the migration is stuck", By: "ops-1", Nodes: []int32{3, 7}, Dir: 42},
		{Reason: "stop", By: "ops-1"},
	} {
		got, ok := ParseRevocation(r.Data())
		require.True(t, ok, "%+v", r)
		assert.Equal(t, r, got)
	}
	got, ok := ParseRevocation(Revocation{Reason: "the  migration\nis stuck", By: "ops  1"}.Data())
	require.True(t, ok)
	assert.Equal(t, "the migration is stuck", got.Reason, "one line")
	assert.Equal(t, "ops 1", got.By)

	// An older client reads the first three lines only: they are as before.
	lines := strings.Split(string(Revocation{Reason: "r", By: "b", Nodes: []int32{3, 7}, Dir: 42}.Data()), "\n")
	assert.Equal(t, []string{"revoke=r", "by=b", "nodes=3,7", "dir=42", ""}, lines)

	old, ok := ParseRevocation([]byte("revoke=x\nby=y\nnodes=5\n")) // written before the directory was named
	require.True(t, ok)
	assert.Equal(t, []int32{5}, old.Names(42))
	named := Revocation{Nodes: []int32{5}, Dir: 42}
	assert.Equal(t, []int32{5}, named.Names(42))
	assert.Nil(t, named.Names(43), "a directory made anew: its numbers start again")

	for _, data := range []string{"", "revoke=x\nby=y\nnodes=3,\n", "revoke=x\nby=y\nnodes=a\n",
		"revoke=x\nby=y\nnodes=3\ndir=z\n", "hello"} {
		_, ok := ParseRevocation([]byte(data))
		assert.False(t, ok, "%q", data)
	}
}
