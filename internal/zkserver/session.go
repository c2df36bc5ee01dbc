package zkserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// The ZooKeeper wire protocol, as far as session expiry needs it. Every
// packet is an int32 length and a big-endian body. The connect request and
// response are go-zookeeper's (structs.go connectRequest/connectResponse):
// without the trailing readOnly flag, which the server then omits too.
const (
	opCloseSession        = -11
	errCodeSessionExpired = -112 // ZooKeeper's SESSIONEXPIRED
	errCodeSessionMoved   = -118 // SESSIONMOVED: the session reconnected elsewhere
	maxPacket             = 1 << 20

	// ExpireSession's retries. A healthy server answers in milliseconds, but
	// a follower that revalidates one session for two connections at once
	// (ours and the client's own reconnect) answers only one of them.
	expireAttempts = 5
	expireTimeout  = 3 * time.Second // per attempt
	expirePause    = 100 * time.Millisecond
)

type connectResponse struct {
	timeout   time.Duration
	sessionID int64
	passwd    []byte
}

// SessionRecorder is a go-zookeeper [zk.Dialer] that remembers the session
// the server granted on the most recent connection it dialed, so a test can
// expire that session with [ExpireSession]. Pass it as zk.WithDialer(r.Dial).
// The zero value is ready to use; it is safe for concurrent use.
type SessionRecorder struct {
	mu   sync.Mutex
	last connectResponse
}

// Dial dials like net.DialTimeout and watches the connection's first packet
// from the server, the connect response. The bytes pass through untouched.
func (r *SessionRecorder) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: conn, rec: r}, nil
}

// Session returns the session id, password and negotiated timeout from the
// most recent connect response; ok is false before the first one and after
// the server answered that the session had expired.
func (r *SessionRecorder) Session() (id int64, passwd []byte, timeout time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.last
	return s.sessionID, append([]byte(nil), s.passwd...), s.timeout, s.sessionID != 0
}

// recordingConn copies the bytes of the first packet it reads aside until it
// has the whole connect response. go-zookeeper reads it with io.ReadFull,
// length first, so the packet may arrive in any number of Reads.
type recordingConn struct {
	net.Conn
	rec     *SessionRecorder
	pending []byte
	done    bool
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.pending = append(c.pending, p[:n]...)
		if body, ok := nextPacket(c.pending); ok {
			if resp, err := parseConnectResponse(body); err == nil {
				c.rec.mu.Lock()
				c.rec.last = resp
				c.rec.mu.Unlock()
			}
			c.done, c.pending = true, nil
		} else if len(c.pending) > maxPacket {
			c.done, c.pending = true, nil // not ZooKeeper; stop looking
		}
	}
	return n, err
}

// nextPacket returns the body of the length-prefixed packet at the start of
// b, once b holds all of it.
func nextPacket(b []byte) (body []byte, ok bool) {
	if len(b) < 4 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(b))
	if len(b)-4 < n {
		return nil, false
	}
	return b[4 : 4+n], true
}

func parseConnectResponse(b []byte) (connectResponse, error) {
	// protocolVersion int32, timeOut int32, sessionId int64, passwd int32 len + bytes
	if len(b) < 20 {
		return connectResponse{}, fmt.Errorf("zkserver: short connect response (%d bytes)", len(b))
	}
	r := connectResponse{
		timeout:   time.Duration(int32(binary.BigEndian.Uint32(b[4:]))) * time.Millisecond,
		sessionID: int64(binary.BigEndian.Uint64(b[8:])),
	}
	if n := int32(binary.BigEndian.Uint32(b[16:])); n > 0 {
		if int(n) > len(b)-20 {
			return connectResponse{}, errors.New("zkserver: truncated connect response")
		}
		r.passwd = append([]byte(nil), b[20:20+n]...)
	}
	return r, nil
}

// ExpireSession makes the server expire a session the way ZooKeeper's own
// tests do: it connects to addr with the session's id and password (which
// also makes the server drop the session's other connection) and closes the
// session. Its ephemeral nodes are deleted; its client later hears
// zk.ErrSessionExpired. A client of an ensemble reconnects to another member
// at once and may race with us, so ExpireSession tries up to 5 times, 3s
// each, until the server confirms the close or reports the session expired.
// It fails with an error wrapping zk.ErrSessionExpired if the session had
// expired before the first attempt.
func ExpireSession(ctx context.Context, addr string, id int64, passwd []byte) error {
	for attempt := 1; ; attempt++ {
		err := closeSession(ctx, addr, id, passwd)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrSessionExpired) && attempt > 1:
			return nil // an earlier attempt closed it but lost the reply
		case errors.Is(err, zk.ErrSessionExpired), attempt == expireAttempts:
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(expirePause):
		}
	}
}

// closeSession sends a connect request for the session, then closeSession.
func closeSession(ctx context.Context, addr string, id int64, passwd []byte) error {
	ctx, cancel := context.WithTimeout(ctx, expireTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("zkserver: expire session %#x: %w", id, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	// ConnectRequest: protocolVersion, lastZxidSeen (0 is never ahead of
	// the server), timeOut (ms), sessionId, passwd.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(expireTimeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	body, err := roundTrip(conn, req)
	if err != nil {
		return fmt.Errorf("zkserver: expire session %#x: connect: %w", id, err)
	}
	resp, err := parseConnectResponse(body)
	if err != nil {
		return err
	}
	if resp.sessionID == 0 {
		return fmt.Errorf("zkserver: expire session %#x: %w", id, zk.ErrSessionExpired)
	}

	// RequestHeader{xid, type} with no body; the reply is
	// ReplyHeader{xid int32, zxid int64, err int32}.
	xid, op := int32(1), int32(opCloseSession)
	req = binary.BigEndian.AppendUint32(nil, uint32(xid))
	req = binary.BigEndian.AppendUint32(req, uint32(op))
	body, err = roundTrip(conn, req)
	if err != nil {
		return fmt.Errorf("zkserver: expire session %#x: close: %w", id, err)
	}
	if len(body) < 16 {
		return fmt.Errorf("zkserver: expire session %#x: short reply (%d bytes)", id, len(body))
	}
	switch code := int32(binary.BigEndian.Uint32(body[12:])); code {
	case 0:
		return nil
	case errCodeSessionExpired:
		return fmt.Errorf("zkserver: expire session %#x: %w", id, zk.ErrSessionExpired)
	case errCodeSessionMoved:
		return fmt.Errorf("zkserver: expire session %#x: %w", id, zk.ErrSessionMoved)
	default:
		return fmt.Errorf("zkserver: expire session %#x: server error %d", id, code)
	}
}

// roundTrip sends body as one packet and returns the body of the next
// packet from the server.
func roundTrip(conn net.Conn, body []byte) ([]byte, error) {
	pkt := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := conn.Write(append(pkt, body...)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxPacket {
		return nil, fmt.Errorf("packet of %d bytes", n)
	}
	reply := make([]byte, n)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return nil, err
	}
	return reply, nil
}
