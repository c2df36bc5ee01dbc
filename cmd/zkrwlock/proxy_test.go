package main

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// sessionProxy forwards connections to a ZooKeeper server and remembers
// the session the server grants, so that a test can expire the session of
// a zkrwlock process, which tells nobody its session password.
type sessionProxy struct {
	ln  net.Listener
	rec zkserver.SessionRecorder
	wg  sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startSessionProxy(t *testing.T, target string) *sessionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &sessionProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := p.rec.Dial("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			p.wg.Go(func() { pipe(up, c) })
			p.wg.Go(func() { pipe(c, up) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *sessionProxy) addr() string { return p.ln.Addr().String() }

// expire makes the server at addr expire the last session it granted
// through the proxy.
func (p *sessionProxy) expire(t *testing.T, addr string) {
	t.Helper()
	id, passwd, _, ok := p.rec.Session()
	require.True(t, ok, "no session went through the proxy")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, zkserver.ExpireSession(ctx, addr, id, passwd))
}
