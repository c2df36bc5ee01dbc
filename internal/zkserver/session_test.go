package zkserver

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
)

func TestExpireSession(t *testing.T) {
	ctx := t.Context()
	c := Start(t, Config{TickTime: 500 * time.Millisecond})
	conn, rec := Connect(t, c.Addrs(), 4*time.Second)
	acl := zk.WorldACL(zk.PermAll)
	_, err := conn.Create("/ephemeral", nil, zk.FlagEphemeral, acl)
	require.NoError(t, err)
	_, err = conn.Create("/watched", nil, 0, acl)
	require.NoError(t, err)
	_, _, watch, err := conn.GetW("/watched")
	require.NoError(t, err)

	id, passwd, timeout, ok := rec.Session()
	require.True(t, ok)
	require.Equal(t, conn.SessionID(), id)
	require.Len(t, passwd, 16)
	require.Equal(t, 4*time.Second, timeout)

	start := time.Now()
	require.NoError(t, ExpireSession(ctx, c.Addr(0), id, passwd))

	select {
	case ev := <-watch:
		require.Equal(t, zk.EventNotWatching, ev.Type)
		require.ErrorIs(t, ev.Err, zk.ErrSessionExpired)
	case <-time.After(30 * time.Second):
		t.Fatal("the watch heard nothing of the expiry")
	}
	require.Eventually(t, func() bool {
		return conn.State() == zk.StateHasSession && conn.SessionID() != id
	}, 30*time.Second, 10*time.Millisecond, "go-zookeeper makes a new session after expiry")
	t.Logf("new session %v after ExpireSession", time.Since(start).Round(time.Millisecond))

	newID, _, _, ok := rec.Session()
	require.True(t, ok)
	require.Equal(t, conn.SessionID(), newID)
	exists, _, err := conn.Exists("/ephemeral")
	require.NoError(t, err)
	require.False(t, exists, "the expired session's ephemeral node must be gone")

	err = ExpireSession(ctx, c.Addr(0), id, passwd)
	require.ErrorIs(t, err, zk.ErrSessionExpired, "expiring an expired session")
}

// TestRecordingConnChunks feeds a connect response one byte per Read, as a
// slow network may, and checks that it is recorded and passed on unchanged.
func TestRecordingConnChunks(t *testing.T) {
	body := binary.BigEndian.AppendUint32(nil, 0) // protocolVersion
	body = binary.BigEndian.AppendUint32(body, 6000)
	body = binary.BigEndian.AppendUint64(body, 0x1234)
	body = binary.BigEndian.AppendUint32(body, 3)
	body = append(body, "pwd"...)
	stream := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	stream = append(stream, body...)
	stream = append(stream, "next packet"...)

	var rec SessionRecorder
	conn := &recordingConn{Conn: &oneByteConn{r: bytes.NewReader(stream)}, rec: &rec}
	got, err := io.ReadAll(conn)
	require.NoError(t, err)
	require.Equal(t, stream, got)

	id, passwd, timeout, ok := rec.Session()
	require.True(t, ok)
	require.Equal(t, int64(0x1234), id)
	require.Equal(t, []byte("pwd"), passwd)
	require.Equal(t, 6*time.Second, timeout)
}

// oneByteConn is a net.Conn whose Reads return one byte at a time.
type oneByteConn struct {
	net.Conn
	r io.Reader
}

func (c *oneByteConn) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return c.r.Read(p)
}
