package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

func TestDescribeQueue(t *testing.T) {
	e := func(name string, mode rwlock.Mode, session int64, held bool) rwlock.Entry {
		return rwlock.Entry{Node: "/l/_c_0123456789abcdef0123456789abcdef-" + name, Mode: mode,
			SessionID: session, Owner: fmt.Sprintf("host:%d", session), Held: held}
	}
	for _, tc := range []struct {
		name string
		q    []rwlock.Entry
		want string
	}{
		// Our node is not in the listing before it is created (or after
		// our session expired, until it is created again).
		{"not queued yet", []rwlock.Entry{e("write-0000000001", rwlock.Write, 1, true)},
			"not queued yet; 1 in the queue, holder write-0000000001 owned by host:1"},
		{"not queued yet, nobody there", nil, "not queued yet; nobody holds the lock"},
		{"behind a writer", []rwlock.Entry{e("write-0000000001", rwlock.Write, 1, true), e("read-0000000002", rwlock.Read, 2, false),
			e("write-0000000003", rwlock.Write, 9, false)}, "2 ahead, holder write-0000000001 owned by host:1"},
		{"behind readers", []rwlock.Entry{e("read-0000000001", rwlock.Read, 1, true), e("read-0000000002", rwlock.Read, 2, true),
			e("write-0000000003", rwlock.Write, 9, false)}, "2 ahead, holders read-0000000001 owned by host:1 and 1 more"},
		// The listing says nothing holds our node back (the holder ahead
		// has gone, or we read behind readers), but the acquisition has
		// not yet seen it: it is about to be granted, not 0 ahead.
		{"first, not yet granted", []rwlock.Entry{e("write-0000000003", rwlock.Write, 9, true), e("read-0000000004", rwlock.Read, 4, false)},
			"nothing holds write-0000000003 back any more: it is being granted"},
		{"reader behind readers, not yet granted", []rwlock.Entry{e("read-0000000001", rwlock.Read, 1, true),
			e("read-0000000003", rwlock.Read, 9, true)}, "nothing holds read-0000000003 back any more: it is being granted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, describeQueue(slices.Clone(tc.q), 9))
		})
	}
}

func TestProgressState(t *testing.T) {
	// What the progress line says from real listings, for the states that
	// used to read "0 ahead".
	server(t)
	path := zktest.LockPath(t, "/cli")
	conn := client(t)
	state := func(self int64) string {
		p := &progress{l: lockOf(t, conn, path), session: func() int64 { return self }, interval: 10 * time.Second}
		return p.state(t.Context())
	}
	require.Equal(t, "not queued yet; nobody holds the lock", state(conn.SessionID()))

	g := hold(t, path, rwlock.Write, "holder-Q")
	waiter := queueWaiter(t, path, rwlock.Write, "waiter-Q")
	require.Equal(t, "not queued yet; 2 in the queue, holder write-0000000000 owned by holder-Q", state(conn.SessionID()))
	require.Equal(t, "1 ahead, holder write-0000000000 owned by holder-Q", state(waiter.SessionID()))
	// The holder's own node, as its acquisition sees it between the
	// listing that shows it first and the grant.
	require.Equal(t, "nothing holds write-0000000000 back any more: it is being granted", state(sessionOf(t, g)))
}
