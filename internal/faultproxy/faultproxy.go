// Package faultproxy is a TCP proxy for fault tests: put it between one
// client and its server, then partition them (Blackhole), drop their
// connections (Cut) or make the server unreachable (Refuse), all on
// 127.0.0.1, or hold the server's answers back (Hold). A framed proxy ([NewFramed]) understands ZooKeeper's framing
// and can start a partition right after a chosen kind of frame
// ([Proxy.BlackholeAfter]).
package faultproxy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const dialTimeout = 5 * time.Second

// Proxy forwards every connection it accepts to one target address. Its
// methods are safe for concurrent use.
type Proxy struct {
	target    string
	ln        net.Listener
	ctx       context.Context // cancelled by Close, to stop dialing the target
	cancel    context.CancelFunc
	framed    bool // forwards whole ZooKeeper frames; see NewFramed
	blackhole atomic.Bool
	refuse    atomic.Bool
	wg        sync.WaitGroup // the accept loop and every connection's goroutines

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every open connection; guarded by mu
	closed bool                  // guarded by mu
	taps   []*tap                // waiting for a server frame; guarded by mu
	resume chan struct{}         // while holding: closed when Hold ends; guarded by mu
}

// New starts a proxy on a free 127.0.0.1 port that forwards to target.
func New(target string) (*Proxy, error) { return newProxy(target, false) }

func newProxy(target string, framed bool) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, framed: framed, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Start starts a proxy to target for the test and closes it in t.Cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	return started(t, New, target)
}

// StartFramed starts a framed proxy (see [NewFramed]) to target for the
// test and closes it in t.Cleanup.
func StartFramed(t testing.TB, target string) *Proxy {
	t.Helper()
	return started(t, NewFramed, target)
}

func started(t testing.TB, newFn func(string) (*Proxy, error), target string) *Proxy {
	t.Helper()
	p, err := newFn(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("faultproxy: %v", err)
		}
	})
	return p
}

// Addr returns the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pass forwards traffic normally, the default. Connections that were
// blackholed resume, minus the bytes dropped meanwhile.
func (p *Proxy) Pass() { p.blackhole.Store(false) }

// Blackhole partitions client and server: existing and new connections stay
// open, but every byte in either direction is read and dropped, and so is a
// close by either side. A client notices only through its own timeouts, as
// in a real network partition.
func (p *Proxy) Blackhole() { p.blackhole.Store(true) }

// Hold keeps what the server sends in the proxy while on: the client's
// requests still reach the server, and are carried out, but no answer and
// no notification reaches the client until Hold(false), when they all
// arrive, in order. (The client times out if it is held past its read
// timeout.)
func (p *Proxy) Hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.resume == nil:
		p.resume = make(chan struct{})
	case !on && p.resume != nil:
		close(p.resume)
		p.resume = nil
	}
}

// waitHeld waits while the proxy holds the server's bytes, or until Close.
func (p *Proxy) waitHeld() {
	p.mu.Lock()
	resume := p.resume
	p.mu.Unlock()
	if resume != nil {
		select {
		case <-resume:
		case <-p.ctx.Done():
		}
	}
}

// Refuse makes the server unreachable while on: new connections are accepted
// and closed at once. Existing ones are untouched; Cut them if need be.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Cut closes every current connection, on both sides. New connections are
// still accepted, in the current mode.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops accepting, closes every connection and waits until all of the
// proxy's goroutines have returned. Later calls return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()

	err := p.ln.Close()
	p.cancel()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed by Close; on loopback nothing else is expected
		}
		if p.refuse.Load() || !p.track(client) {
			client.Close()
			continue
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve forwards one client connection until either side closes it or it
// is cut.
func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	var d net.Dialer
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		client.Close() // to the client, an unreachable server
		return
	}
	if !p.track(server) {
		server.Close()
		client.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if p.framed {
			p.forwardFrames(server, client, false)
		} else {
			p.forward(server, client, false)
		}
	}()
	if p.framed {
		p.forwardFrames(client, server, true)
	} else {
		p.forward(client, server, true)
	}
	<-done
}

// forward moves bytes from src to dst, or drops them while blackholed: the
// mode is read per chunk, so a switch applies from the next read on. When
// src closes, so does dst, unless blackholed: a partition hides the close
// too, and dst learns of it only by writing once traffic passes again.
// fromServer marks the server→client direction, which Hold stops.
func (p *Proxy) forward(dst, src net.Conn, fromServer bool) {
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && fromServer {
			p.waitHeld()
		}
		if n > 0 && !p.blackhole.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.blackhole.Load() {
				dst.Close()
			}
			return
		}
	}
}

// track registers an open connection so that Cut and Close can reach it.
// It returns false after Close, and then the caller must close c.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}
