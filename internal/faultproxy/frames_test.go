package faultproxy

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// A framed proxy between a fake client and a fake server, which write
// frames by hand: the connect response is never taken for a notification,
// however it starts; the cut comes right after the notification, in both
// directions; frames pass whole or not at all.
func TestFramedBlackholeAfterRaw(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	p := StartFramed(t, target.Addr().String())
	cut := p.BlackholeAfter(Notification)
	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	server, err := target.Accept()
	require.NoError(t, err)
	defer server.Close()

	// A connect response whose first field reads as xid -1.
	connectResp := frame(-1, 0x11)
	writeAll(t, server, connectResp)
	require.Equal(t, connectResp, readN(t, conn, len(connectResp)))
	reply := frame(5, 0x22)
	writeAll(t, server, reply)
	require.Equal(t, reply, readN(t, conn, len(reply)))
	require.Empty(t, cut, "neither the connect response nor a reply is a notification")

	// A frame arrives in two pieces: nothing passes until all of it has.
	ping := frame(int32(PingReply), 0x33)
	writeAll(t, server, ping[:6])
	requireSilent(t, conn, 200*time.Millisecond)
	writeAll(t, server, ping[6:])
	require.Equal(t, ping, readN(t, conn, len(ping)))

	note := frame(int32(Notification), 0x44)
	writeAll(t, server, note)
	require.Equal(t, note, readN(t, conn, len(note)), "the notification itself passes")
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("the cut did not fire")
	}
	writeAll(t, conn, frame(6, 0x55))
	requireSilent(t, server, 300*time.Millisecond) // nothing from the client after it
	writeAll(t, server, frame(6, 0x66))
	requireSilent(t, conn, 300*time.Millisecond) // nor from the server

	p.Pass()
	later := frame(7, 0x77)
	writeAll(t, server, later)
	require.Equal(t, later, readN(t, conn, len(later)), "after Pass, the next whole frame")
	writeAll(t, conn, later)
	require.Equal(t, later, readN(t, server, len(later)))
}

// A framed proxy drops a connection whose stream is not made of frames of a
// sane size.
func TestFramedRejectsGarbage(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer target.Close()
	p := StartFramed(t, target.Addr().String())
	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	server, err := target.Accept()
	require.NoError(t, err)
	defer server.Close()

	_, err = io.WriteString(conn, "ruok") // a four-letter word: a length of 1.9 GB
	require.NoError(t, err)
	require.NoError(t, server.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = server.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}

// A real client through a framed proxy keeps its session; Next sees its
// pings answered; a cut armed on a ping reply leaves the client in silence
// from that reply on, so go-zookeeper drops the connection 2/3 of the
// session timeout after it, not earlier (the reply passed) and not later
// (nothing passed after it).
func TestFramedBlackholeAfterPingReply(t *testing.T) {
	tier.Long(t)
	const sessionTimeout = 3 * time.Second
	zkc := zkserver.Start(t, fastTicks)
	p := StartFramed(t, zkc.Addr(0))
	conn, _ := zkserver.Connect(t, []string{p.Addr()}, sessionTimeout)
	sid := conn.SessionID()
	_, _, err := conn.Get("/")
	require.NoError(t, err)

	var first time.Time
	select {
	case first = <-p.Next(PingReply):
	case <-time.After(sessionTimeout):
		t.Fatal("no ping reply within the session timeout")
	}
	var cutAt time.Time
	select {
	case cutAt = <-p.BlackholeAfter(PingReply):
	case <-time.After(sessionTimeout):
		t.Fatal("the cut did not fire")
	}
	// go-zookeeper pings every third of the timeout.
	require.InDelta(t, sessionTimeout/3, cutAt.Sub(first), float64(300*time.Millisecond))
	require.Eventually(t, func() bool { return conn.State() != zk.StateHasSession },
		sessionTimeout, 5*time.Millisecond)
	silent := time.Since(cutAt)
	t.Logf("ping reply → cut → client dropped the connection %v later", silent.Round(time.Millisecond))
	require.InDelta(t, 2*sessionTimeout/3, silent, float64(300*time.Millisecond))

	p.Pass()
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession },
		10*time.Second, 10*time.Millisecond)
	require.Equal(t, sid, conn.SessionID())
}

// A cut armed on a notification lets the client get the watch event, and
// nothing it sends after that reaches the server.
func TestFramedBlackholeAfterNotification(t *testing.T) {
	zkc := zkserver.Start(t, fastTicks)
	p := StartFramed(t, zkc.Addr(0))
	conn, _ := zkserver.Connect(t, []string{p.Addr()}, 6*time.Second)
	direct, _ := zkserver.Connect(t, []string{zkc.Addr(0)}, 6*time.Second)
	_, err := direct.Create("/watched", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, _, watch, err := conn.GetW("/watched")
	require.NoError(t, err)

	cut := p.BlackholeAfter(Notification)
	_, err = direct.Set("/watched", []byte("x"), -1)
	require.NoError(t, err)
	select {
	case ev := <-watch:
		require.Equal(t, zk.EventNodeDataChanged, ev.Type)
	case <-time.After(5 * time.Second):
		t.Fatal("the notification did not reach the client")
	}
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("the cut did not fire")
	}

	created := make(chan error, 1)
	go func() {
		_, err := conn.Create("/after-cut", nil, 0, zk.WorldACL(zk.PermAll))
		created <- err
	}()
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ok, _, err := direct.Exists("/after-cut")
		require.NoError(t, err)
		require.False(t, ok, "a request sent after the cut reached the server")
	}
	p.Cut() // heal: the client's create fails with its connection
	p.Pass()
	select {
	case err := <-created:
		require.ErrorIs(t, err, zk.ErrConnectionClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("the create did not return after the cut")
	}
}

// frame builds a frame whose body starts with xid, then a marker byte.
func frame(xid int32, marker byte) []byte {
	b := make([]byte, 4+16+1)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	binary.BigEndian.PutUint32(b[4:], uint32(xid))
	b[len(b)-1] = marker
	return b
}

func writeAll(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	_, err := c.Write(b)
	require.NoError(t, err)
}

// readN reads exactly n bytes from c, within 5s.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	return b
}
