package delayproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// upstream is a test server on 127.0.0.1 that runs handle for every
// connection. t.Cleanup stops it and waits for its goroutines.
func upstream(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echo writes back what it reads until EOF, then closes.
func echo(c net.Conn) { io.Copy(c, c) }

func start(t *testing.T, target string, delay time.Duration) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target, delay)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return c.(*net.TCPConn)
}

func TestDelayEachWay(t *testing.T) {
	const delay = 30 * time.Millisecond
	arrived := make(chan time.Time, 1)
	target := upstream(t, func(c net.Conn) {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		arrived <- time.Now()
		c.Write(b[:])
	})
	p := start(t, target, delay)
	require.Equal(t, delay, p.Delay())
	c := dial(t, p.Addr())

	sent := time.Now()
	_, err := c.Write([]byte{'x'})
	require.NoError(t, err)
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	require.NoError(t, err)
	back := time.Now()
	at := <-arrived

	require.GreaterOrEqual(t, at.Sub(sent), delay, "client to server")
	require.GreaterOrEqual(t, back.Sub(at), delay, "server to client")
	require.Less(t, back.Sub(sent), 2*delay+time.Second, "a round trip costs 2 delays, not much more")
	t.Logf("round trip %v through a proxy of %v each way", back.Sub(sent), delay)
}

// A request pipelined behind another is written right after it, not a
// delay later: 20 messages sent 5 ms apart come back 2 delays after each
// was sent, in order. Serialized, the last would come back after 20 round
// trips (2 s).
func TestPipelinedStaysPipelined(t *testing.T) {
	const (
		delay = 50 * time.Millisecond
		n     = 20
		gap   = 5 * time.Millisecond
	)
	p := start(t, upstream(t, echo), delay)
	c := dial(t, p.Addr())

	sent := make([]time.Time, n)
	var werr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			sent[i] = time.Now()
			if _, werr = c.Write(binary.BigEndian.AppendUint64(nil, uint64(i))); werr != nil {
				return
			}
			time.Sleep(gap)
		}
	})
	back := make([]time.Time, n)
	var got []uint64
	for i := range n {
		var b [8]byte
		_, err := io.ReadFull(c, b[:])
		require.NoError(t, err, "message %d", i)
		back[i] = time.Now()
		got = append(got, binary.BigEndian.Uint64(b[:]))
	}
	wg.Wait()
	require.NoError(t, werr)

	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i)
	}
	require.Equal(t, want, got, "order kept")
	for i := range n {
		require.GreaterOrEqual(t, back[i].Sub(sent[i]), 2*delay, "message %d", i)
	}
	total := back[n-1].Sub(sent[0])
	require.Less(t, total, sent[n-1].Sub(sent[0])+2*delay+500*time.Millisecond,
		"messages were serialized behind each other's delays")
	t.Logf("%d messages over %v came back after %v", n, sent[n-1].Sub(sent[0]).Round(time.Millisecond),
		total.Round(time.Millisecond))
}

// Bytes keep their order whatever the chunking: 4 MiB through a 1 ms proxy.
func TestStreamIntact(t *testing.T) {
	p := start(t, upstream(t, echo), time.Millisecond)
	c := dial(t, p.Addr())
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	var werr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, werr = c.Write(data); werr == nil {
			werr = c.CloseWrite()
		}
	})
	got, err := io.ReadAll(c)
	wg.Wait()
	require.NoError(t, werr)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "got %d bytes back, want the %d sent", len(got), len(data))
}

// A clean close travels like data: after the bytes before it, a delay
// after it happened, and only in its direction (the other still flows).
func TestCloseTravels(t *testing.T) {
	const delay = 30 * time.Millisecond
	type seen struct {
		data []byte
		eof  time.Time
		err  error
	}
	atServer := make(chan seen, 1)
	target := upstream(t, func(c net.Conn) {
		data, err := io.ReadAll(c) // until the client's close arrives
		atServer <- seen{data, time.Now(), err}
		c.Write([]byte("still open"))
		c.Close()
	})
	p := start(t, target, delay)
	c := dial(t, p.Addr())

	_, err := c.Write([]byte("bye"))
	require.NoError(t, err)
	closed := time.Now()
	require.NoError(t, c.CloseWrite())
	s := <-atServer
	require.NoError(t, s.err)
	require.Equal(t, "bye", string(s.data), "bytes before the close arrive first")
	require.GreaterOrEqual(t, s.eof.Sub(closed), delay, "the close is delayed too")

	reply, err := io.ReadAll(c) // the server's reply, then its close
	require.NoError(t, err)
	require.Equal(t, "still open", string(reply), "the other direction flows after a half close")
}

// A reset travels as a reset, or at least as an end.
func TestResetTravels(t *testing.T) {
	target := upstream(t, func(c net.Conn) {
		var b [1]byte
		io.ReadFull(c, b[:])
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	p := start(t, target, time.Millisecond)
	c := dial(t, p.Addr())
	_, err := c.Write([]byte{1})
	require.NoError(t, err)
	_, err = io.ReadAll(c)
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET, "an error other than a reset")
	}
}

func TestUnreachableUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := start(t, ln.Addr().String(), time.Millisecond) // on another port, while ln holds this one
	require.NoError(t, ln.Close())                      // nothing listens there now
	c, err := net.Dial("tcp", p.Addr())
	if err == nil { // else the reset came before the dial's end
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.ReadAll(c)
	}
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET)
	}
}

// Close drops what is in flight without waiting for its due time, closes
// both sides of every connection, and leaves no goroutine behind.
func TestCloseEndsEverything(t *testing.T) {
	defer goleak.VerifyNone(t)
	const delay = 10 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	p, err := Listen("127.0.0.1:0", ln.Addr().String(), delay)
	require.NoError(t, err)

	const n = 5
	var clients, servers []net.Conn
	for range n {
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write([]byte("in flight"))
		require.NoError(t, err)
		clients = append(clients, c)
		s, err := ln.Accept()
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Write([]byte("in flight too"))
		require.NoError(t, err)
		servers = append(servers, s)
	}

	start := time.Now()
	require.NoError(t, p.Close())
	require.Less(t, time.Since(start), delay/2, "Close waited for due times")
	require.NoError(t, p.Close(), "closing twice")
	for i, c := range append(clients, servers...) {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "conn %d still open", i)
		require.Empty(t, b, "conn %d got data that was still due", i)
	}
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "still accepting after Close")
}

func TestZeroDelay(t *testing.T) {
	p := start(t, upstream(t, echo), 0)
	c := dial(t, p.Addr())
	_, err := c.Write([]byte("ping"))
	require.NoError(t, err)
	var b [4]byte
	_, err = io.ReadFull(c, b[:])
	require.NoError(t, err)
	require.Equal(t, "ping", string(b[:]))
}

func TestLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		name, listen, upstream string
		delay                  time.Duration
	}{
		{"listen on every interface", "0.0.0.0:0", "127.0.0.1:2181", 0},
		{"listen on a name", "localhost:0", "127.0.0.1:2181", 0},
		{"upstream elsewhere", "127.0.0.1:0", "10.1.2.3:2181", 0},
		{"upstream by name", "127.0.0.1:0", "zk.example.com:2181", 0},
		{"no port", "127.0.0.1:0", "127.0.0.1", 0},
		{"negative delay", "127.0.0.1:0", "127.0.0.1:2181", -time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Listen(tc.listen, tc.upstream, tc.delay)
			if err == nil {
				p.Close()
			}
			require.Error(t, err)
		})
	}
	p, err := Listen("[::1]:0", "[::1]:2181", 0) // IPv6 loopback is loopback too
	if err == nil {
		p.Close()
	} else {
		assert.ErrorContains(t, err, "listen tcp", "rejected for the address, not for want of IPv6")
	}
}

// The waiter is what makes sub-millisecond delays mean what they say:
// Go's timers would sleep 500 µs for about 1.1 ms.
func TestWaiterPrecision(t *testing.T) {
	const d = 500 * time.Microsecond
	w := newWaiter()
	defer w.close()
	var over []time.Duration
	for range 50 {
		due := time.Now().Add(d)
		require.NoError(t, w.wait(due))
		late := time.Since(due)
		require.GreaterOrEqual(t, late, time.Duration(0), "woke early")
		over = append(over, late)
	}
	slices.Sort(over)
	t.Logf("%T: %v waits late by %v (median), %v (max)", w, d, over[len(over)/2], over[len(over)-1])
	if _, ok := w.(*timerWaiter); !ok {
		require.Less(t, over[len(over)/2], 400*time.Microsecond, "median lateness")
	}
}

func TestWaiterClose(t *testing.T) {
	for name, w := range map[string]waiter{"default": newWaiter(), "timer": newTimerWaiter()} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- w.wait(time.Now().Add(time.Hour)) }()
			time.Sleep(10 * time.Millisecond)
			w.close()
			select {
			case err := <-done:
				require.Error(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("close did not wake the wait")
			}
			w.close() // twice is fine
			require.Error(t, w.wait(time.Now().Add(time.Hour)), "a closed waiter waits no more")
		})
	}
}

func TestStats(t *testing.T) {
	const delay = 2 * time.Millisecond
	p := start(t, upstream(t, echo), delay)
	require.Zero(t, p.Stats())
	c := dial(t, p.Addr())
	for range 10 {
		_, err := c.Write([]byte("ping"))
		require.NoError(t, err)
		var b [4]byte
		_, err = io.ReadFull(c, b[:])
		require.NoError(t, err)
	}
	s := p.Stats()
	require.EqualValues(t, 20, s.Chunks, "10 each way")
	require.EqualValues(t, 80, s.Bytes)
	require.LessOrEqual(t, s.P50, s.P99)
	require.LessOrEqual(t, s.Mean, s.Max)
	require.Positive(t, s.P50, "the upper edge of a bucket")
	t.Logf("%+v", s)
}

func TestPercentile(t *testing.T) {
	counts := make([]int64, 5)
	counts[0], counts[2], counts[4] = 50, 49, 1
	require.Equal(t, 10*time.Microsecond, percentile(counts, 100, 0.50))
	require.Equal(t, 30*time.Microsecond, percentile(counts, 100, 0.51))
	require.Equal(t, 30*time.Microsecond, percentile(counts, 100, 0.99))
	require.Equal(t, 50*time.Microsecond, percentile(counts, 100, 1))
}
