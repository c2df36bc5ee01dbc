package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A short tick lets clients negotiate sessions of a few seconds.
var fastTicks = zkserver.Config{TickTime: 500 * time.Millisecond}

func TestPassAndBlackholeRaw(t *testing.T) {
	zkc := zkserver.Start(t, fastTicks)
	p := Start(t, zkc.Addr(0))
	require.Equal(t, "imok", fourLetter(t, p.Addr(), "ruok"))

	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	p.Blackhole()
	_, err = io.WriteString(conn, "ruok")
	require.NoError(t, err)
	requireSilent(t, conn, 300*time.Millisecond)

	p.Pass() // the same connection carries traffic again
	_, err = io.WriteString(conn, "ruok")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	reply, err := io.ReadAll(conn)
	require.NoError(t, err)
	require.Equal(t, "imok", string(reply))
}

func TestBlackholePartitionsClient(t *testing.T) {
	tier.Long(t)
	// 6s: after the partition the client gives up at 2/3 of it, then waits
	// 1s before redialing its only server, and must be back before the
	// server expires the session.
	const sessionTimeout = 6 * time.Second
	zkc := zkserver.Start(t, fastTicks)
	p := Start(t, zkc.Addr(0))
	conn, _ := zkserver.Connect(t, []string{p.Addr()}, sessionTimeout)
	sid := conn.SessionID()

	start := time.Now()
	p.Blackhole()
	require.Eventually(t, func() bool { return conn.State() != zk.StateHasSession },
		sessionTimeout, 10*time.Millisecond, "a partitioned client must notice within its session timeout")
	t.Logf("client lost its session after %v", time.Since(start).Round(time.Millisecond))

	p.Pass()
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession },
		sessionTimeout, 10*time.Millisecond)
	require.Equal(t, sid, conn.SessionID(), "reconnected before expiry, so the same session")
	t.Logf("client reconnected after %v", time.Since(start).Round(time.Millisecond))
	_, _, err := conn.Get("/")
	require.NoError(t, err)
}

func TestCutMakesClientReconnect(t *testing.T) {
	zkc := zkserver.Start(t, fastTicks)
	p := Start(t, zkc.Addr(0))
	conn, _ := zkserver.Connect(t, []string{p.Addr()}, 6*time.Second)
	sid := conn.SessionID()

	p.Cut()
	// go-zookeeper waits 1s before redialing its only server: the
	// disconnected state lasts long enough to be seen.
	require.Eventually(t, func() bool { return conn.State() != zk.StateHasSession },
		5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession },
		10*time.Second, 10*time.Millisecond)
	require.Equal(t, sid, conn.SessionID())
	_, _, err := conn.Get("/")
	require.NoError(t, err)
}

func TestRefuse(t *testing.T) {
	zkc := zkserver.Start(t, fastTicks)
	p := Start(t, zkc.Addr(0))
	conn, _ := zkserver.Connect(t, []string{p.Addr()}, 10*time.Second)
	sid := conn.SessionID()

	p.Refuse(true)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err, "refused connections are accepted, then closed")
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = raw.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	raw.Close()
	_, _, err = conn.Get("/")
	require.NoError(t, err, "Refuse leaves open connections alone")

	p.Cut()
	require.Eventually(t, func() bool { return conn.State() != zk.StateHasSession },
		5*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool { return conn.State() == zk.StateHasSession },
		2500*time.Millisecond, 10*time.Millisecond, "the client retries every second and must fail")

	p.Refuse(false)
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession },
		10*time.Second, 10*time.Millisecond)
	require.Equal(t, sid, conn.SessionID())
}

func TestBlackholeHidesClose(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	p := Start(t, target.Addr().String())
	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	server, err := target.Accept()
	require.NoError(t, err)

	p.Blackhole()
	require.NoError(t, server.Close())
	requireSilent(t, conn, 300*time.Millisecond)

	p.Pass()
	_, err = io.WriteString(conn, "x")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "once healed, the client finds the server's side gone")
}

func TestClose(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	p, err := New(target.Addr().String())
	require.NoError(t, err)

	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	server, err := target.Accept() // the proxy's side of the connection
	require.NoError(t, err)
	defer server.Close()

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "closing twice")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "Close closes the client's connection")
	_, err = server.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "and the server's")
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "a closed proxy accepts nothing")
}

// fourLetter sends a ZooKeeper four-letter word to addr and returns the reply.
func fourLetter(t *testing.T, addr, cmd string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, cmd)
	require.NoError(t, err)
	reply, err := io.ReadAll(conn)
	require.NoError(t, err)
	return string(reply)
}

// requireSilent checks that nothing arrives on conn for d.
func requireSilent(t *testing.T, conn net.Conn, d time.Duration) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(d)))
	n, err := conn.Read(make([]byte, 1))
	require.Zero(t, n)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "want a timeout, got %v", err)
	require.NoError(t, conn.SetReadDeadline(time.Time{}))
}

// Hold lets the client's bytes through and keeps the server's until it
// ends; then they arrive, none lost.
func TestHold(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	p := Start(t, target.Addr().String())

	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	server, err := target.Accept()
	require.NoError(t, err)
	defer server.Close()

	p.Hold(true)
	_, err = io.WriteString(conn, "ask")
	require.NoError(t, err)
	require.NoError(t, server.SetReadDeadline(time.Now().Add(5*time.Second)))
	got := make([]byte, 3)
	_, err = io.ReadFull(server, got)
	require.NoError(t, err, "the request reaches the server")
	require.Equal(t, "ask", string(got))
	_, err = io.WriteString(server, "answer")
	require.NoError(t, err)
	requireSilent(t, conn, 300*time.Millisecond)

	p.Hold(false)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	got = make([]byte, len("answer"))
	_, err = io.ReadFull(conn, got)
	require.NoError(t, err, "the answer comes once the hold ends")
	require.Equal(t, "answer", string(got))
}
