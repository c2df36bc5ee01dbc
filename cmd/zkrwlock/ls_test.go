package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// lsEntry is ls --json's object, decoded.
type lsEntry struct {
	Path         string
	Mode         string
	Holders      int
	Waiters      int
	OldestHolder map[string]any `json:"oldest_holder"`
	OldestWaiter map[string]any `json:"oldest_waiter"`
	Old          bool
	Stuck        bool
	Families     []string
	Mixed        bool
}

func (e lsEntry) waited() float64 {
	if e.OldestWaiter == nil {
		return 0
	}
	return e.OldestWaiter["age_seconds"].(float64)
}

func TestLs(t *testing.T) {
	server(t)
	prefix := zktest.LockPath(t, "/cli")
	stuck, held, deep := prefix+"/stuck", prefix+"/held", prefix+"/a/b/deep"
	// stuck: a writer holds it, a reader and a writer wait.
	hold(t, stuck, rwlock.Write, "holder-S")
	queueWaiter(t, stuck, rwlock.Read, "waiter-1")
	queueWaiter(t, stuck, rwlock.Write, "waiter-2")
	// held: two readers, nobody waits.
	hold(t, held, rwlock.Read, "reader-1")
	hold(t, held, rwlock.Read, "reader-2")
	// deep: under directories that are no locks.
	hold(t, deep, rwlock.Write, "holder-D")
	// A directory whose children only look a bit like lock nodes is none.
	// (Cleanups run last first: children go before their parent.)
	conn := client(t)
	for _, p := range []string{prefix + "/other", prefix + "/other/read-me", prefix + "/other/write-12"} {
		_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Delete(p, -1) })
	}

	t.Run("json", func(t *testing.T) {
		r := runIn(t, nil, "ls", "--json", "--older-than", "0s", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr)
		var raw []map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw), r.stdout)
		for _, e := range raw {
			require.ElementsMatch(t, []string{"path", "mode", "holders", "waiters", "oldest_holder", "oldest_waiter", "old", "stuck", "families", "mixed"},
				keys(e), "stable field names")
		}
		var locks []lsEntry
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks))
		require.Len(t, locks, 3, r.stdout)
		byPath := map[string]lsEntry{}
		for _, l := range locks {
			byPath[l.Path] = l
		}
		require.ElementsMatch(t, []string{stuck, held, deep}, keys(byPath))

		s := byPath[stuck]
		require.Equal(t, "write", s.Mode)
		require.Equal(t, 1, s.Holders)
		require.Equal(t, 2, s.Waiters)
		require.Equal(t, "holder-S", s.OldestHolder["owner"])
		require.Equal(t, "waiter-1", s.OldestWaiter["owner"])
		require.Equal(t, []string{"zkrwlock"}, s.Families)
		require.ElementsMatch(t, keys(s.OldestHolder), []string{"node", "name", "mode", "held", "owner", "session_id", "seq",
			"created", "age_seconds", "family", "peer"}, "the fields of queue --json")
		require.True(t, s.Old)
		require.True(t, s.Stuck, "held (longer than 0s) with waiters")

		h := byPath[held]
		require.Equal(t, "read", h.Mode)
		require.Equal(t, 2, h.Holders)
		require.Equal(t, 0, h.Waiters)
		require.Equal(t, "reader-1", h.OldestHolder["owner"])
		require.Nil(t, h.OldestWaiter)
		require.True(t, h.Old)
		require.False(t, h.Stuck, "nobody waits")

		d := byPath[deep]
		require.Equal(t, "write", d.Mode)
		require.Equal(t, "holder-D", d.OldestHolder["owner"])

		require.Equal(t, stuck, locks[0].Path, "stuck first")
		for i := 1; i < len(locks); i++ {
			a, b := locks[i-1], locks[i]
			require.True(t, a.Stuck || !b.Stuck, "%s before %s", a.Path, b.Path)
			if a.Stuck == b.Stuck {
				require.GreaterOrEqual(t, a.waited(), b.waited(), "%s before %s", a.Path, b.Path)
			}
			if a.Stuck == b.Stuck && a.waited() == b.waited() {
				require.GreaterOrEqual(t, a.OldestHolder["age_seconds"], b.OldestHolder["age_seconds"], "%s before %s", a.Path, b.Path)
			}
		}
	})

	t.Run("not old yet", func(t *testing.T) {
		r := runIn(t, nil, "ls", "--json", "--older-than", "1h", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		var locks []lsEntry
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks))
		require.Len(t, locks, 3, r.stdout)
		for _, l := range locks {
			require.False(t, l.Old, l.Path)
			require.False(t, l.Stuck, l.Path)
		}
		require.Equal(t, stuck, locks[0].Path, "the one with waiters first")
	})

	t.Run("text", func(t *testing.T) {
		r := runIn(t, nil, "ls", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, lines, 4, r.stdout)
		require.Equal(t, []string{"LOCK", "MODE", "HOLDERS", "HELD", "LIMIT", "OWNER", "WAITERS", "WAITING", "FAMILY"},
			strings.Fields(lines[0]))
		row := strings.Fields(lines[1])
		require.Len(t, row, 9, lines[1])
		require.Equal(t, "zkrwlock", row[8])
		require.Equal(t, []string{stuck, "write", "1"}, row[:3])
		require.Regexp(t, `^\d+\.\ds$`, row[3])
		require.Equal(t, []string{"-", "holder-S", "2"}, row[4:7])
		require.Regexp(t, `^\d+\.\ds$`, row[7])
		for _, line := range lines[2:] {
			require.Equal(t, "-", strings.Fields(line)[7], "nobody waits: %s", line)
		}
	})

	t.Run("text flagged", func(t *testing.T) {
		r := runIn(t, nil, "ls", prefix, "--older-than", "0s") // flags may follow PREFIX
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, lines, 4, r.stdout)
		require.Equal(t, "FLAG", strings.Fields(lines[0])[9])
		flags := map[string]string{}
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			flags[f[0]] = f[9]
		}
		require.Equal(t, map[string]string{stuck: "stuck", held: "old", deep: "old"}, flags)
	})

	t.Run("prefix is a lock", func(t *testing.T) {
		r := runIn(t, nil, "ls", "--json", stuck)
		require.Equal(t, 0, r.code, r.stderr)
		var locks []lsEntry
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks))
		require.Len(t, locks, 1)
		require.Equal(t, stuck, locks[0].Path)
	})

	t.Run("root", func(t *testing.T) {
		r := runIn(t, nil, "ls", "--json", "/")
		require.Equal(t, 0, r.code, r.stderr)
		var locks []lsEntry
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks))
		var paths []string
		for _, l := range locks {
			paths = append(paths, l.Path)
			require.False(t, strings.HasPrefix(l.Path, "/zookeeper"), l.Path)
		}
		require.Subset(t, paths, []string{stuck, held, deep})
	})

	t.Run("no locks", func(t *testing.T) {
		r := runIn(t, nil, "ls", prefix+"/other")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "no locks under "+prefix+"/other\n", r.stdout)
		r = runIn(t, nil, "ls", "--json", prefix+"-nothing-here")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "[]\n", r.stdout)
	})
}

func TestLsShowsLimitAndRevocation(t *testing.T) {
	server(t)
	prefix := zktest.LockPath(t, "/cli")
	revoked, plain := prefix+"/revoked", prefix+"/plain"
	revokedLimited(t, revoked)
	hold(t, plain, rwlock.Read, "reader")

	t.Run("text", func(t *testing.T) {
		r := runIn(t, nil, "ls", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, lines, 4, r.stdout)
		limits := map[string]string{}
		for _, line := range lines[1:3] {
			f := strings.Fields(line)
			limits[f[0]] = f[4]
		}
		require.Equal(t, map[string]string{revoked: "1h00m", plain: "-"}, limits)
		require.Regexp(t, `^`+revoked+`: revoked \d+\.\ds ago by ops-1: the migration is stuck$`, lines[3])
	})

	t.Run("json", func(t *testing.T) {
		r := runIn(t, nil, "ls", "--json", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		var locks []struct {
			Path         string
			OldestHolder map[string]any `json:"oldest_holder"`
			Revocation   *struct {
				Reason, By string
				Requested  time.Time
				AgeSeconds float64 `json:"age_seconds"`
				Holders    []int32
			}
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks), r.stdout)
		require.Len(t, locks, 2, r.stdout)
		for _, l := range locks {
			if l.Path == plain {
				require.Nil(t, l.Revocation)
				require.NotContains(t, l.OldestHolder, "max_hold_seconds")
				continue
			}
			require.Equal(t, revoked, l.Path)
			require.Equal(t, 3600.0, l.OldestHolder["max_hold_seconds"])
			require.NotNil(t, l.Revocation, r.stdout)
			require.Equal(t, "the migration is stuck", l.Revocation.Reason)
			require.Equal(t, "ops-1", l.Revocation.By)
			require.WithinDuration(t, time.Now(), l.Revocation.Requested, time.Minute)
			require.GreaterOrEqual(t, l.Revocation.AgeSeconds, 0.0)
			require.Equal(t, []int32{int32(l.OldestHolder["seq"].(float64))}, l.Revocation.Holders)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestSortLocks(t *testing.T) {
	waiter := &rwlock.Entry{}
	want := []lockInfo{
		{path: "/stuck/long-wait", stuck: true, old: true, oldestWaiter: waiter, waited: time.Hour, held: 2 * time.Hour},
		{path: "/stuck/short-wait-old", stuck: true, old: true, oldestWaiter: waiter, waited: time.Minute, held: 3 * time.Hour},
		{path: "/stuck/short-wait-young", stuck: true, old: true, oldestWaiter: waiter, waited: time.Minute, held: 2 * time.Hour},
		{path: "/waits/longer-than-a-stuck-one", oldestWaiter: waiter, waited: 2 * time.Hour, held: 2 * time.Hour},
		{path: "/waits/short", oldestWaiter: waiter, waited: time.Second, held: time.Minute},
		{path: "/held/old-a", old: true, held: 5 * time.Hour},
		{path: "/held/old-b", old: true, held: 5 * time.Hour},
		{path: "/held/young", held: time.Second},
	}
	got := slices.Clone(want)
	rand.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
	sortLocks(got)
	var gotPaths, wantPaths []string
	for i := range want {
		gotPaths, wantPaths = append(gotPaths, got[i].path), append(wantPaths, want[i].path)
	}
	require.Equal(t, wantPaths, gotPaths)
}

func TestLockNodeName(t *testing.T) {
	const guid, uuid = "0123456789abcdef0123456789abcdef", "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"
	for name, want := range map[string]bool{
		"write-0000000007":                       true,
		"read-0000000012":                        true,
		"read--000000012":                        true, // the counter wrapped
		"_c_" + guid + "-read-0000000003":        true,
		"_c_" + guid + "-__WRIT__0000000003":     true,
		"_c_" + guid + "-rlock-0000000003":       true,
		"_c_" + guid + "-read__lock__0000000003": true,
		"_c_" + guid + "-lock-0000000003":        true, // zk.Lock
		"_c_" + uuid + "-__READ__0000000003":     true, // Curator
		"_c_" + uuid + "-lock-0000000003":        true,
		guid + "__rlock__0000000003":             true, // kazoo
		guid + "__lock__-000000003":              true,
		"read-me":                                false,
		"write-12":                               false,
		"lock":                                   false,
		"lock-0000000003":                        false,
		"_c_xyz-read-0000000003":                 false,
		"_c_" + uuid + "-rlock-0000000003":       false,
		guid + "__READ__0000000003":              false,
		"x" + guid + "__lock__0000000003":        false,
		"_c_" + guid + "-__lock__00000000003":    false,
	} {
		require.Equal(t, want, isLockNode(name), name)
	}
}

func TestNodeNameAndFamily(t *testing.T) {
	const guid, uuid = "0123456789abcdef0123456789abcdef", "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"
	for _, tc := range []struct {
		node   string
		family rwlock.Dialect
		peer   bool
		name   string
		label  string
	}{
		{"/l/_c_" + guid + "-write-0000000007", rwlock.DialectNative, false, "write-0000000007", "zkrwlock"},
		{"/l/_c_" + guid + "-read__lock__0000000007", rwlock.DialectKazooLock, false, "read__lock__0000000007", "zkrwlock/kazoo-lock"},
		{"/l/_c_" + guid + "-rlock-0000000007", rwlock.DialectMutex, false, "rlock-0000000007", "zkrwlock/mutex"},
		{"/l/_c_" + uuid + "-__WRIT__0000000007", rwlock.DialectCurator, true, "__WRIT__0000000007", "curator"},
		{"/l/_c_" + uuid + "-lock-0000000007", rwlock.DialectMutex, true, "lock-0000000007", "curator-mutex"},
		{"/l/_c_" + guid + "-lock-0000000007", rwlock.DialectMutex, true, "lock-0000000007", "zk.Lock"},
		{"/l/" + guid + "__lock__0000000007", rwlock.DialectKazoo, true, "__lock__0000000007", "kazoo"},
		{"/l/read-0000000007", rwlock.DialectNative, true, "read-0000000007", "native"},
		// A queue read in the kazoo-patterns dialect takes native names for its own.
		{"/l/_c_" + guid + "-write-0000000007", rwlock.DialectKazooPatterns, false, "write-0000000007", "zkrwlock/kazoo-patterns"},
		{"/l/read-0000000007", rwlock.DialectKazooPatterns, true, "read-0000000007", "native"},
	} {
		e := rwlock.Entry{Node: tc.node, Family: tc.family, Peer: tc.peer}
		require.Equal(t, tc.name, nodeName(tc.node), tc.node)
		require.Equal(t, tc.label, family(e), tc.node)
	}
}

func TestDialectFlag(t *testing.T) {
	for _, d := range dialects {
		var f dialectFlag
		require.NoError(t, f.Set(d.String()))
		require.Equal(t, d, f.d)
	}
	var f dialectFlag
	require.ErrorContains(t, f.Set("zookeeper"), "one of native, curator, mutex, kazoo, kazoo-lock, kazoo-patterns")
}

// queue and ls name the set (LockAll) a node was made in.
func TestQueueAndLsShowSet(t *testing.T) {
	server(t)
	prefix := zktest.LockPath(t, "/cli")
	a, b := prefix+"/a", prefix+"/b"
	conn := client(t)
	grants, err := rwlock.LockAll(t.Context(), rwlock.Request{Lock: lockOf(t, conn, a), Mode: rwlock.Write},
		rwlock.Request{Lock: lockOf(t, conn, b), Mode: rwlock.Read})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, g := range grants {
			g.Release(context.Background())
		}
	})

	r := runIn(t, nil, "queue", a)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^write-\d{10}: in a set of 2 with `+b+`$`, lines[2])

	r = runIn(t, nil, "queue", "--json", b)
	require.Equal(t, 0, r.code, r.stderr)
	var entries []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &entries), r.stdout)
	require.Len(t, entries, 1)
	require.Equal(t, []any{a}, entries[0]["set"])
	require.Equal(t, 2.0, entries[0]["set_size"])

	r = runIn(t, nil, "ls", prefix)
	require.Equal(t, 0, r.code, r.stderr)
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 5, r.stdout)
	require.ElementsMatch(t, []string{a + ": held in a set of 2 with " + b, b + ": held in a set of 2 with " + a}, lines[3:])

	r = runIn(t, nil, "ls", "--json", prefix)
	require.Equal(t, 0, r.code, r.stderr)
	var locks []lsEntry
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks), r.stdout)
	require.Len(t, locks, 2)
	for _, l := range locks {
		other := map[string]string{a: b, b: a}[l.Path]
		require.Equal(t, []any{other}, l.OldestHolder["set"], l.Path)
		require.Equal(t, 2.0, l.OldestHolder["set_size"], l.Path)
	}
}
