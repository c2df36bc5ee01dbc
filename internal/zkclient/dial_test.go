package zkclient

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handshakeAnswer is a server's answer to a handshake: go-zookeeper's
// connectResponse, with its length.
func handshakeAnswer(timeout time.Duration, session int64) []byte {
	body := binary.BigEndian.AppendUint32(nil, 0) // protocol version
	body = binary.BigEndian.AppendUint32(body, uint32(timeout/time.Millisecond))
	body = binary.BigEndian.AppendUint64(body, uint64(session))
	body = binary.BigEndian.AppendUint32(body, 16) // password
	body = append(body, make([]byte, 16)...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// The tap reads the answer however the reads split it, passes every byte
// through, and keeps the smallest timeout of a session.
func TestTapReadsTheGrantedTimeout(t *testing.T) {
	info := &Handshakes{}
	heard := 0
	stop := info.OnHandshake(func(int64, time.Time) { heard++ })
	defer stop()

	answer := func(timeout time.Duration, session int64) {
		t.Helper()
		server, client := net.Pipe()
		defer server.Close()
		tc := &tapConn{Conn: client, info: info, sent: time.Now()}
		want := append(handshakeAnswer(timeout, session), "then a frame"...)
		go func() { server.Write(want); server.Close() }()
		var got []byte
		buf := make([]byte, 3) // split mid-field
		for {
			n, err := tc.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, want, got, "the bytes pass through untouched")
	}

	assert.Zero(t, info.TimeoutOf(7), "nothing heard: unknown")
	answer(24*time.Second, 7)
	assert.Equal(t, 24*time.Second, info.TimeoutOf(7))
	answer(3*time.Second, 7) // a reconnection granted less
	assert.Equal(t, 3*time.Second, info.TimeoutOf(7))
	answer(24*time.Second, 7) // and then more again: the session keeps the smallest
	assert.Equal(t, 3*time.Second, info.TimeoutOf(7))
	answer(0, 0) // the session had expired
	assert.Equal(t, 3*time.Second, info.TimeoutOf(7))
	answer(10*time.Second, 8) // a new session starts afresh
	assert.Zero(t, info.TimeoutOf(7))
	assert.Equal(t, 10*time.Second, info.TimeoutOf(8))
	assert.Equal(t, uint64(4), info.ConnectCount(), "one per answer with a session")
	assert.Equal(t, 4, heard, "told of each answer with a session")
}

// Dial's tap wraps the dialer the caller passes: go-zookeeper keeps it in
// an unexported field, and a version that moved it must fail here, not
// quietly leave locks without T.
func TestTapWrapsTheCallersDialer(t *testing.T) {
	info := &Handshakes{}
	dialed := make(chan struct{}, 1)
	dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
		server, client := net.Pipe()
		go func() {
			defer server.Close()
			if _, err := readFrame(server); err != nil { // the handshake
				return
			}
			server.Write(handshakeAnswer(2*time.Second, 99))
			io.Copy(io.Discard, server)
		}()
		select {
		case dialed <- struct{}{}:
		default:
		}
		return client, nil
	}
	tapped := false
	conn, events, err := zk.Connect([]string{"127.0.0.1:2181"}, 8*time.Second, zk.WithLogInfo(false),
		zk.WithLogger(discardZK{}), func(c *zk.Conn) {
			zk.WithDialer(dialer)(c)
			tapped = info.tap(c)
		})
	require.NoError(t, err)
	defer func() {
		conn.Close()
		for range events {
		}
	}()
	require.True(t, tapped, "go-zookeeper's dialer field was not found")
	for ev := range events {
		if ev.State == zk.StateHasSession {
			break
		}
	}
	<-dialed
	assert.Equal(t, 2*time.Second, info.TimeoutOf(99), "learnt through the caller's dialer")
	assert.Equal(t, int64(99), conn.SessionID())
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

type discardZK struct{}

func (discardZK) Printf(string, ...any) {}
