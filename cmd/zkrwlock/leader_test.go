package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestLeader(t *testing.T) {
	server(t)
	path := zktest.LockPath(t, "/cli")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	r := runIn(t, nil, "leader", path)
	require.Equal(t, exitNoLeader, r.code, r.stderr)
	require.Equal(t, "no leader\n", r.stdout)

	watch := start(t, nil, "leader", "--watch", "--json", path)
	zktest.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(watch.stdout.String(), `"term":0`) },
		"%s", "the watch to print that nobody leads")

	e, err := rwlock.NewElection(client(t), path, rwlock.WithSessionTimeout(4*time.Second))
	require.NoError(t, err)
	g, err := e.Campaign(ctx, []byte("10.0.0.7:8080\x1b[2J"))
	require.NoError(t, err)
	defer g.Release(context.Background())

	r = runIn(t, nil, "leader", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("10.0.0.7:8080\\x1b[2J term=%d\n", g.Token()), r.stdout, "escaped for a terminal")
	r = runIn(t, nil, "leader", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var s leaderState
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	require.Equal(t, leaderState{"10.0.0.7:8080\x1b[2J", []byte("10.0.0.7:8080\x1b[2J"), g.Token()}, s)

	require.NoError(t, e.Proclaim(ctx, []byte("10.0.0.8:8080")))
	zktest.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(watch.stdout.String(), `"value":"10.0.0.8:8080"`) },
		"%s", "the watch to print the Proclaim")
	watch.signal(t, syscall.SIGTERM)
	out := watch.wait(t, 30*time.Second)
	require.Equal(t, 128+int(syscall.SIGTERM), out.code)
	var terms []int64
	for line := range strings.Lines(out.stdout) {
		var s leaderState
		require.NoError(t, json.Unmarshal([]byte(line), &s), line)
		terms = append(terms, s.Term)
	}
	require.Equal(t, []int64{0, g.Token(), g.Token()}, terms, out.stdout)
}
