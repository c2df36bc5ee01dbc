package zkserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// process is one server JVM and the goroutine that reaps it.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and been reaped
	err    error         // cmd.Wait's result; read only after exited is closed
}

// startProcess starts cmd and one goroutine that waits for it, then closes
// logFile and p.exited.
//
// cmd's Pdeathsig fires when the OS thread that forked the child exits, not
// only when our process does (golang/go#27505), and Go ends a thread when a
// goroutine exits while locked to it: any goroutine that later ran on the
// forking thread and did that would take the server down. So the forking
// goroutine locks its thread and keeps it, blocked in cmd.Wait, until the
// child is gone. The cost is one parked thread per server.
func startProcess(cmd *exec.Cmd, logFile *os.File) (*process, error) {
	p := &process{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(p.exited)
		defer logFile.Close()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // safe: the child has exited by then
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-p.exited
		return nil, err
	}
	return p, nil
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *process) signal(sig os.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("zkserver: kill pid %d: %w", p.cmd.Process.Pid, err)
	}
	<-p.exited
	return nil
}

// stop sends SIGTERM, then SIGKILL if the process is still there after
// grace, and waits for it to exit.
func (p *process) stop(grace time.Duration) error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("zkserver: stop pid %d: %w", p.cmd.Process.Pid, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		return p.kill()
	}
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. All n listeners are open at once so no port is handed out twice; they
// close on return, just before the servers bind them.
//
// The ports lie below the kernel's ephemeral range when it leaves room: a
// follower binds its quorum port only on becoming leader, and a killed
// member's ports stay unbound until it restarts, so a port from the
// ephemeral range can meanwhile become the source port of any outgoing
// connection on the machine and the bind then fails.
func freePorts(n int) ([]int, error) {
	lo, hi := portRange()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		random := hi > lo && attempts < 100*n // else let the kernel pick
		addr := "127.0.0.1:0"
		if random {
			addr = fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if random {
				continue // taken: try another
			}
			return nil, fmt.Errorf("zkserver: free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lowestPort keeps clear of the well-known and registered ports that
// services on a developer's machine commonly bind.
const lowestPort = 10000

// portRange returns [lo, hi) below the ephemeral range, or lo == hi when
// that range is unknown or leaves too little room.
func portRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var ephemeralLo, ephemeralHi int
	if _, err := fmt.Sscan(string(b), &ephemeralLo, &ephemeralHi); err != nil || ephemeralLo-lowestPort < 1000 {
		return 0, 0
	}
	return lowestPort, ephemeralLo
}

// prefixWriter writes whole lines to w, each prefixed, under mu, so several
// servers can share one writer without interleaving within a line. It never
// fails: an error from w would stop the copy from the server's stdout pipe,
// and a server whose pipe is full blocks on its next log line.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte // an unfinished line
}

func (pw *prefixWriter) Write(p []byte) (int, error) {
	pw.buf = append(pw.buf, p...)
	i := bytes.LastIndexByte(pw.buf, '\n')
	if i < 0 {
		return len(p), nil
	}
	var out []byte
	for line := range bytes.Lines(pw.buf[:i+1]) {
		out = append(append(out, pw.prefix...), line...)
	}
	pw.buf = append(pw.buf[:0], pw.buf[i+1:]...)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	_, _ = pw.w.Write(out) // an error drops the lines: see the type's doc
	return len(p), nil
}
