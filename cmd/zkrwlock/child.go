package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// The command runs in a process group of its own, for two reasons:
//
//   - When the lock is lost, everything the command started must stop, not
//     only its first process: SIGTERM to `sh -c 'step1; step2'` alone ends
//     the shell and leaves step1 running while another client may already
//     hold the lock. Signalling the command's group reaches them all,
//     without touching the script that called zkrwlock (which shares
//     zkrwlock's group when it has no job control, as under cron).
//   - Signals sent to zkrwlock reach the command exactly once, passed on
//     by zkrwlock, whether they come from a terminal, kill(1) or a
//     supervisor.
//
// On a terminal, zkrwlock hands the terminal to the command's group if it
// has it itself (the command can read from it and gets Ctrl-C directly),
// takes it back when the command exits, and when the command is stopped
// (Ctrl-Z), stops its own job in turn so that the shell's job control
// (fg, bg) works as if there were one process.
//
// The waiting is done with wait4(WUNTRACED) rather than exec.Cmd.Wait,
// which does not report stops.

type child struct {
	cmd    *exec.Cmd
	pgid   int
	tty    *terminal // nil unless stdin is our controlling terminal
	gave   bool      // the command's group has the terminal
	events chan syscall.WaitStatus
}

// startChild starts cmd in its own process group, as described above.
// The terminal, if any, is cmd's stdin, which becomes the command's fd 0.
func startChild(cmd *exec.Cmd) (*child, error) {
	c := &child{cmd: cmd, events: make(chan syscall.WaitStatus)}
	if in, ok := cmd.Stdin.(*os.File); ok {
		c.tty = controllingTerminal(int(in.Fd()))
	}
	fg := c.tty != nil && c.tty.foreground()
	cmd.SysProcAttr = sysProcAttr(fg, 0)
	started := make(chan error, 1)
	go func() {
		// The parent-death signal (see sysProcAttr) fires when the thread
		// that forked the child exits (golang/go#27505): keep this
		// goroutine on its thread until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		pid := cmd.Process.Pid
		for {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil { // cannot happen for our own child; report it as a death
				ws = syscall.WaitStatus(syscall.SIGKILL)
			}
			c.events <- ws
			if !ws.Stopped() {
				cmd.Process.Release()
				return
			}
		}
	}()
	if err := <-started; err != nil {
		if fg {
			c.tty.take() // the child may have taken it before its exec failed
		}
		return nil, err
	}
	c.pgid = cmd.Process.Pid
	if fg {
		c.gave = true
		c.tty.ignoreBackgroundOutput()
	}
	return c, nil
}

type result struct {
	code    int  // exit status, 128+n for a death by signal n
	lost    bool // the lock was lost while the command ran
	revoked bool // the command was asked to stop by a revocation
}

// A stopper says when and how to stop the command: when the lock is lost
// (SIGTERM to its group at once, SIGKILL lostWithin() later, asked at that
// moment), or when it is revoked (the same, revokedWithin() later; a loss
// after that shortens the wait). The on functions say what happens.
type stopper struct {
	lost, revoked             <-chan struct{}
	lostWithin, revokedWithin func() time.Duration
	onLost, onRevoked         func(within time.Duration)
	onKill                    func()
	// reapOnExit: when the command's first process exits, the rest of
	// its group is stopped as for a lost lock before supervise returns.
	// exec --elect resigns then, and a daemonised child must not outlive
	// the term. onLeft tells of those stopped so.
	reapOnExit bool
	onLeft     func(within time.Duration)
}

// supervise waits for the command to exit, passes signals on to it, and
// stops it as s says.
func (c *child) supervise(sigs <-chan os.Signal, s stopper) result {
	var res result
	var kill <-chan time.Time
	var deadline time.Time
	killed := false
	term := func(within time.Duration) {
		c.signal(syscall.SIGTERM)
		if d := time.Now().Add(within); kill == nil || d.Before(deadline) {
			deadline, kill = d, time.After(within)
		}
	}
	lost, revoked := s.lost, s.revoked
	for {
		select {
		case ws := <-c.events:
			if ws.Stopped() {
				c.stopped(ws.StopSignal())
				continue
			}
			if c.gave {
				c.tty.take()
				c.gave = false
			}
			switch {
			case (res.lost || res.revoked) && !killed:
				c.reapGroup(deadline, s.onKill)
			case s.reapOnExit && !killed && groupAlive(c.pgid):
				within := s.lostWithin()
				s.onLeft(within)
				c.signal(syscall.SIGTERM)
				c.reapGroup(time.Now().Add(within), s.onKill)
			}
			res.code = exitStatus(ws)
			return res
		case <-lost:
			lost, res.lost = nil, true
			within := s.lostWithin()
			s.onLost(within)
			term(within)
		case <-revoked:
			revoked, res.revoked = nil, true
			within := s.revokedWithin()
			s.onRevoked(within)
			term(within)
		case <-kill:
			kill, killed = nil, true
			s.onKill()
			c.signal(syscall.SIGKILL)
		case sig := <-sigs:
			c.signal(sig.(syscall.Signal))
		}
	}
}

// signal sends sig to the command's process group, then SIGCONT, so that a
// stopped command gets it too.
func (c *child) signal(sig syscall.Signal) {
	syscall.Kill(-c.pgid, sig)
	if sig != syscall.SIGKILL && sig != syscall.SIGCONT {
		syscall.Kill(-c.pgid, syscall.SIGCONT)
	}
}

// reapGroup waits, after a lost lock, until every process of the command's
// group has gone, and kills those left at deadline: the command's first
// process may exit on SIGTERM before the rest of its work has stopped.
func (c *child) reapGroup(deadline time.Time, onKill func()) {
	for groupAlive(c.pgid) {
		if !time.Now().Before(deadline) {
			onKill()
			syscall.Kill(-c.pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopped handles a stop of the command. Stops by the terminal (Ctrl-Z,
// background reads and writes) stop zkrwlock's own job too, with the
// terminal given back; when the shell continues the job, the command
// continues, in the foreground if the job is. Other stops (SIGSTOP sent on
// purpose) are left alone.
func (c *child) stopped(sig syscall.Signal) {
	if c.tty == nil || sig != syscall.SIGTSTP && sig != syscall.SIGTTIN && sig != syscall.SIGTTOU {
		return
	}
	if c.gave {
		c.tty.take()
		c.gave = false
	}
	stopSelf()
	if c.tty.foreground() {
		c.gave = c.tty.give(c.pgid) == nil
	} else if sig != syscall.SIGTSTP {
		return // still in the background: it would stop again at once
	}
	syscall.Kill(-c.pgid, syscall.SIGCONT)
}

// stopSelf stops zkrwlock's process group, as the terminal would have,
// and returns once it is continued. It sends SIGTSTP whatever stopped the
// command (zkrwlock ignores SIGTTOU). The stop takes effect a moment after
// kill returns (another thread may take the signal), so it waits for
// SIGCONT; but the kernel discards the stop if the group is orphaned, and
// then no SIGCONT comes: the wait ends after a while.
func stopSelf() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	syscall.Kill(0, syscall.SIGTSTP)
	select {
	case <-cont:
	case <-time.After(500 * time.Millisecond):
	}
}

// killAlive reports whether kill(2) finds group pgid, zombies included:
// groupAlive's answer when /proc cannot be read.
func killAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// exitStatus is the shell's $? for a wait status.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ws.ExitStatus()
}
