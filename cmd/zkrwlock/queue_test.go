package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestQueue(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")

	connA, connB := client(t), client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ga, err := lockOf(t, connA, path, rwlock.WithOwner("reader-A")).RLock(ctx)
	require.NoError(t, err)
	defer ga.Release(context.Background())
	lockB := lockOf(t, connB, path, rwlock.WithOwner("writer-B"))
	waiting := make(chan error, 1)
	go func() {
		g, err := lockB.Lock(ctx)
		if err == nil {
			g.Release(context.Background())
		}
		waiting <- err
	}()
	defer func() {
		cancel()
		<-waiting
	}()
	zktest.WaitFor(t, 30*time.Second, func() bool { return len(children(t, connA, path)) == 2 }, "%s", "writer-B to queue")

	t.Run("text", func(t *testing.T) {
		r := runIn(t, nil, "queue", path)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, lines, 3, r.stdout)
		require.Equal(t, []string{"MODE", "STATE", "FAMILY", "OWNER", "SESSION", "AGE", "LIMIT", "NODE"}, strings.Fields(lines[0]))
		rowA, rowB := strings.Fields(lines[1]), strings.Fields(lines[2])
		require.Len(t, rowA, 8, lines[1])
		require.Equal(t, []string{"read", "held", "zkrwlock", "reader-A", fmt.Sprintf("0x%x", connA.SessionID())}, rowA[:5])
		require.Regexp(t, `^\d+\.\ds$`, rowA[5])
		require.Equal(t, "-", rowA[6], "no hold limit")
		require.Regexp(t, `^read-\d{10}$`, rowA[7])
		require.Len(t, rowB, 8, lines[2])
		require.Equal(t, []string{"write", "waiting", "zkrwlock", "writer-B", fmt.Sprintf("0x%x", connB.SessionID())}, rowB[:5])
		require.Regexp(t, `^write-\d{10}$`, rowB[7])
	})

	t.Run("json", func(t *testing.T) {
		r := runIn(t, nil, "queue", path, "--json") // flags may follow PATH
		require.Equal(t, 0, r.code, r.stderr)
		var entries []map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &entries), r.stdout)
		require.Len(t, entries, 2)
		fields := []string{"node", "name", "mode", "held", "owner", "session_id", "seq", "created", "age_seconds", "family", "peer"}
		for _, e := range entries {
			var keys []string
			for k := range e {
				keys = append(keys, k)
			}
			require.ElementsMatch(t, fields, keys, "stable field names")
			require.True(t, strings.HasPrefix(e["node"].(string), path+"/"), e["node"])
			require.True(t, strings.HasSuffix(e["node"].(string), e["name"].(string)))
			created, err := time.Parse(time.RFC3339Nano, e["created"].(string))
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), created, time.Minute)
			require.GreaterOrEqual(t, e["age_seconds"].(float64), 0.0)
		}
		a, b := entries[0], entries[1]
		require.Equal(t, "read", a["mode"])
		require.Equal(t, true, a["held"])
		require.Equal(t, "reader-A", a["owner"])
		require.Equal(t, fmt.Sprintf("0x%x", connA.SessionID()), a["session_id"])
		require.Equal(t, "write", b["mode"])
		require.Equal(t, false, b["held"])
		require.Equal(t, "writer-B", b["owner"])
		require.Equal(t, fmt.Sprintf("0x%x", connB.SessionID()), b["session_id"])
		require.Less(t, a["seq"].(float64), b["seq"].(float64))
		require.Equal(t, "zkrwlock", a["family"])
		require.Equal(t, false, a["peer"])
	})

	t.Run("empty", func(t *testing.T) {
		r := runIn(t, nil, "queue", "--json", path+"-nobody")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "[]\n", r.stdout)
		r = runIn(t, nil, "queue", path+"-nobody")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "no holders, no waiters")
	})
}

// revokedLimited makes a lock at path whose holder runs under a one-hour
// hold limit, with a waiter behind it, and revokes the holder, who does not
// listen and so keeps its grant. It returns the time just before the
// revocation.
func revokedLimited(t *testing.T, path string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	g, err := lockOf(t, client(t), path, rwlock.WithOwner("limited"), rwlock.WithMaxHold(time.Hour)).Lock(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { g.Release(context.Background()) })
	queueWaiter(t, path, rwlock.Read, "patient")
	before := time.Now()
	require.NoError(t, lockOf(t, client(t), path, rwlock.WithOwner("ops-1")).Revoke(ctx, "the migration is stuck"))
	return before
}

func TestQueueShowsLimitAndRevocation(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	before := revokedLimited(t, path)

	t.Run("text", func(t *testing.T) {
		r := runIn(t, nil, "queue", path)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, lines, 4, r.stdout)
		holder, waiter := strings.Fields(lines[1]), strings.Fields(lines[2])
		require.Equal(t, []string{"write", "revoked", "zkrwlock", "limited"}, holder[:4])
		require.Equal(t, "1h00m", holder[6], "LIMIT")
		require.Equal(t, "-", waiter[6], "the waiter's lock has no limit")
		require.Regexp(t, `^revoked \d+\.\ds ago by ops-1: the migration is stuck$`, lines[3])
	})

	t.Run("json", func(t *testing.T) {
		r := runIn(t, nil, "queue", "--json", path)
		require.Equal(t, 0, r.code, r.stderr)
		var entries []map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &entries), r.stdout)
		require.Len(t, entries, 2)
		holder, waiter := entries[0], entries[1]
		require.Equal(t, 3600.0, holder["max_hold_seconds"])
		require.Equal(t, true, holder["revoked"])
		require.Equal(t, "the migration is stuck", holder["revoke_reason"])
		require.Equal(t, "ops-1", holder["revoke_by"])
		revokeAge := holder["revoke_age_seconds"].(float64)
		require.GreaterOrEqual(t, revokeAge, 0.0)
		require.LessOrEqual(t, revokeAge, time.Since(before).Seconds()+5, "allowing for the server's clock")
		require.NotContains(t, waiter, "max_hold_seconds", "no limit, no field")
		require.NotContains(t, waiter, "revoked", "a waiter is not revoked")
	})
}

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0s"},
		{850 * time.Millisecond, "0.8s"},
		{3200 * time.Millisecond, "3.2s"},
		{75 * time.Second, "1m15s"},
		{2*time.Hour + 3*time.Minute, "2h03m"},
		{50 * time.Hour, "2d02h"},
	} {
		require.Equal(t, tc.want, formatAge(tc.d), tc.d)
	}
}
