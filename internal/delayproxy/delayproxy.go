// Package delayproxy is a TCP proxy on 127.0.0.1 that adds network latency:
// every chunk of bytes it reads, in either direction, is written on D after
// it arrived. A request and its reply each wait D, so a round trip costs 2D
// more than a direct one, and an implementation that puts k round trips on
// its critical path loses about 2kD.
//
// Chunks are delayed, not serialized: each is due D after its own arrival,
// so requests a client pipelines stay pipelined (the second is written
// right after the first, not D after it), and the byte order of each
// direction is kept. The end of a stream travels the same way: when one
// side closes, the other sees the close D later, after every byte sent
// before it.
//
// On Linux the proxy waits with a timerfd in the runtime's network poller,
// which wakes within tens of microseconds of the due time. Go's own timers
// (and Python's asyncio) wake on the poller's millisecond ticks: they would
// turn a 0.5 ms delay into 1.1 ms and a 2 ms delay into 2.2 ms.
//
// Both ends are on the loopback interface only: it listens on 127.0.0.1 and
// forwards to a loopback address.
package delayproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	dialTimeout = 5 * time.Second
	chunkSize   = 64 << 10 // the most one read takes
	queueLen    = 1024     // chunks in flight per direction before the reader waits
)

// Proxy forwards every connection it accepts to one upstream address,
// delaying each chunk in each direction. Its methods are safe for
// concurrent use.
type Proxy struct {
	upstream string
	delay    time.Duration
	ln       net.Listener
	ctx      context.Context // cancelled by Close, to stop dialing upstream
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the accept loop and every connection's goroutines
	late     lateness

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every open connection; guarded by mu
	closed bool                  // guarded by mu
}

// Listen starts a proxy on addr, which must be on 127.0.0.1 ("127.0.0.1:0"
// picks a free port), forwarding to upstream, a loopback address such as
// "127.0.0.1:2181", with delay added in each direction. A zero delay
// forwards at once, through the same code.
func Listen(addr, upstream string, delay time.Duration) (*Proxy, error) {
	if err := loopback(addr, "listen"); err != nil {
		return nil, err
	}
	if err := loopback(upstream, "upstream"); err != nil {
		return nil, err
	}
	if delay < 0 {
		return nil, fmt.Errorf("delayproxy: negative delay %v", delay)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("delayproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream, delay: delay, ln: ln, ctx: ctx, cancel: cancel,
		conns: make(map[net.Conn]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// loopback checks that addr is host:port with a loopback IP literal.
func loopback(addr, what string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("delayproxy: %s address %q: want 127.0.0.1:port: %w", what, addr, err)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("delayproxy: %s address %q is not on the loopback interface", what, addr)
	}
	return nil
}

// Addr returns the address clients dial instead of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Delay returns the delay added in each direction.
func (p *Proxy) Delay() time.Duration { return p.delay }

// Stats returns how late the chunks forwarded so far were written.
func (p *Proxy) Stats() Stats { return p.late.stats() }

// Close stops accepting, closes every connection on both sides, dropping
// what was in flight, and waits until all of the proxy's goroutines have
// returned. Later calls return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()

	err := p.ln.Close()
	p.cancel()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) acceptLoop() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed by Close; on loopback nothing else is expected
		}
		if !p.track(client) {
			client.Close()
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve forwards one client connection until both directions have ended.
func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	var d net.Dialer
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	server, err := d.DialContext(ctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		abort(client) // to the client, an unreachable server
		return
	}
	if !p.track(server) {
		server.Close()
		client.Close()
		return
	}
	defer p.untrack(server)

	var wg sync.WaitGroup
	wg.Go(func() { p.pump(server, client) })
	wg.Go(func() { p.pump(client, server) })
	wg.Wait()
	client.Close()
	server.Close()
}

// chunk is what one read returned, due for writing at due. The last chunk
// of a direction has end set: err is what ended the read side (io.EOF for a
// clean close).
type chunk struct {
	due  time.Time
	data []byte
	end  bool
	err  error
}

// pump copies src to dst, each chunk delay after it was read, in order. A
// reader goroutine stamps and queues the chunks; this goroutine writes
// them when due. When src ends, dst's write side is shut down (a clean
// close) or dst is reset (a failed read) once the chunks before it are
// written. When a write fails, src is closed too, so the reader stops.
func (p *Proxy) pump(dst, src net.Conn) {
	q := make(chan chunk, queueLen)
	stop := make(chan struct{}) // closed when the writer gives up
	var wg sync.WaitGroup
	wg.Go(func() { read(src, q, stop, p.delay) })
	defer wg.Wait()
	defer close(stop)

	w := newWaiter()
	defer w.close()
	defer context.AfterFunc(p.ctx, w.close)() // Close need not wait for due times
	for c := range q {
		if err := w.wait(c.due); err != nil {
			abort(dst)
			src.Close()
			return
		}
		if c.end {
			if errors.Is(c.err, io.EOF) {
				closeWrite(dst)
			} else {
				abort(dst)
			}
			return
		}
		p.late.record(time.Since(c.due), len(c.data))
		if _, err := dst.Write(c.data); err != nil {
			abort(dst)
			src.Close()
			return
		}
	}
}

// read queues src's chunks, each stamped with its due time, and finally an
// end chunk; it closes q when it returns. It gives up when stop closes.
func read(src net.Conn, q chan<- chunk, stop <-chan struct{}, delay time.Duration) {
	defer close(q)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		due := time.Now().Add(delay)
		var c chunk
		switch {
		case n > 0:
			c = chunk{due: due, data: append([]byte(nil), buf[:n]...)}
		case err != nil:
			c = chunk{due: due, end: true, err: err}
		default:
			continue
		}
		select {
		case q <- c:
		case <-stop:
			return
		}
		if c.end {
			return
		}
		if err != nil { // data and an error in one read: the end comes next
			select {
			case q <- chunk{due: due, end: true, err: err}:
			case <-stop:
			}
			return
		}
	}
}

// closeWrite passes on a clean close: the peer reads EOF and may still
// send. Other conns are closed.
func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		if tc.CloseWrite() == nil {
			return
		}
	}
	c.Close()
}

// abort passes on a failure: the peer sees a reset, not a clean EOF.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// track registers an open connection so that Close can reach it. It
// returns false after Close, and then the caller must close c.
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
