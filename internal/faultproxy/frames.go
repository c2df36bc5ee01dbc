package faultproxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// ZooKeeper's client protocol is a stream of frames in each direction: a
// 4-byte big-endian length, then the body. The server's first frame on a
// connection is the connect response; every later one starts with a reply
// header whose xid is the request's, or -1 for a watch notification, or -2
// for a ping reply.

// maxFrame bounds the frames a framed proxy accepts: ZooKeeper's own limit
// (jute.maxbuffer) is 1 MiB of data plus a little; a larger length means a
// stream that is not ZooKeeper's, and the connection is dropped.
const maxFrame = 16 << 20

// FrameKind names the server→client frames a framed proxy can wait for:
// the xid of their reply header.
type FrameKind int32

const (
	// Notification is a watch event (xid -1).
	Notification FrameKind = -1
	// PingReply is the answer to a client's ping (xid -2).
	PingReply FrameKind = -2
)

// String returns "notification" or "ping reply".
func (k FrameKind) String() string {
	switch k {
	case Notification:
		return "notification"
	case PingReply:
		return "ping reply"
	}
	return fmt.Sprintf("FrameKind(%d)", int32(k))
}

// NewFramed starts a proxy like [New] that forwards whole ZooKeeper frames:
// a frame goes out with one write once all of it has arrived, a partition
// (Blackhole, BlackholeAfter) starts and ends between two frames, and the
// proxy can pick out notifications and ping replies ([Proxy.Next],
// [Proxy.BlackholeAfter]). It carries only the client protocol, not the
// four-letter words.
func NewFramed(target string) (*Proxy, error) { return newProxy(target, true) }

// tap waits for the next server→client frame of a kind.
type tap struct {
	kind FrameKind
	cut  bool           // blackhole before forwarding the frame
	at   chan time.Time // buffered; gets the time the frame was forwarded
}

// Next returns a channel that receives the time at which the proxy next
// forwards a server→client frame of kind to a client, on any connection.
// It panics unless the proxy is framed.
func (p *Proxy) Next(kind FrameKind) <-chan time.Time { return p.addTap(kind, false) }

// BlackholeAfter arms a partition that starts right after the next
// server→client frame of kind, on any connection: the proxy blackholes
// every connection in both directions (see [Proxy.Blackhole]) as soon as it
// has that frame in hand, and then forwards the frame, the last one to
// pass. Nothing the client sends once the frame could have reached it gets
// to the server. The channel receives the time the frame was forwarded.
// Pass ends the partition as usual. It panics unless the proxy is framed.
func (p *Proxy) BlackholeAfter(kind FrameKind) <-chan time.Time { return p.addTap(kind, true) }

func (p *Proxy) addTap(kind FrameKind, cut bool) <-chan time.Time {
	if !p.framed {
		panic("faultproxy: frames are seen only by a framed proxy (NewFramed)")
	}
	tp := &tap{kind: kind, cut: cut, at: make(chan time.Time, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.taps = append(p.taps, tp)
	return tp.at
}

// fire removes and returns the taps waiting for a frame of kind, and
// blackholes if one of them cuts: under mu, so that exactly one frame
// fires each tap.
func (p *Proxy) fire(kind FrameKind) []*tap {
	p.mu.Lock()
	defer p.mu.Unlock()
	var fired []*tap
	kept := p.taps[:0]
	for _, tp := range p.taps {
		if tp.kind != kind {
			kept = append(kept, tp)
			continue
		}
		fired = append(fired, tp)
		if tp.cut {
			p.blackhole.Store(true)
		}
	}
	clear(p.taps[len(kept):])
	p.taps = kept
	return fired
}

// forwardFrames is forward for a framed proxy: it moves whole frames from
// src to dst, or drops them while blackholed, and closes as forward does.
// fromServer marks the server→client direction, whose frames fire taps.
func (p *Proxy) forwardFrames(dst, src net.Conn, fromServer bool) {
	defer src.Close()
	in := bufio.NewReader(src)
	var buf []byte
	for first := true; ; first = false {
		var err error
		buf, err = readFrame(in, buf)
		if err != nil {
			if !p.blackhole.Load() {
				dst.Close()
			}
			return
		}
		if fromServer {
			p.waitHeld()
		}
		if p.blackhole.Load() {
			continue
		}
		var fired []*tap
		if fromServer && !first { // the first is the connect response: no reply header
			fired = p.fire(frameKind(buf))
		}
		if _, err := dst.Write(buf); err != nil {
			return
		}
		now := time.Now()
		for _, tp := range fired {
			tp.at <- now
		}
	}
}

// readFrame reads one frame, length included, into buf (grown as needed).
func readFrame(r io.Reader, buf []byte) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return buf, fmt.Errorf("faultproxy: frame of %d bytes: not ZooKeeper's protocol", n)
	}
	if cap(buf) < 4+int(n) {
		buf = make([]byte, 4+int(n))
	}
	buf = buf[:4+int(n)]
	copy(buf, size[:])
	_, err := io.ReadFull(r, buf[4:])
	return buf, err
}

// frameKind returns the xid of a reply frame, as a FrameKind; 0 for a frame
// too short to have one.
func frameKind(frame []byte) FrameKind {
	if len(frame) < 8 {
		return 0
	}
	return FrameKind(int32(binary.BigEndian.Uint32(frame[4:])))
}
