package main

import (
	"bytes"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"unsafe"
)

// sysProcAttr puts the command in a process group of its own, in the
// terminal's foreground when fg (ttyFd is the terminal), and has the kernel
// send it SIGTERM if zkrwlock dies first (killed with SIGKILL, say), since
// then nobody would stop it when the lock goes with zkrwlock's session.
func sysProcAttr(fg bool, ttyFd int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: ttyFd, Pdeathsig: syscall.SIGTERM}
}

// terminal is zkrwlock's controlling terminal, open on fd.
type terminal struct{ fd int }

// controllingTerminal returns fd's terminal if it is our controlling
// terminal, else nil.
func controllingTerminal(fd int) *terminal {
	if _, err := foregroundGroup(fd); err != nil {
		return nil
	}
	return &terminal{fd}
}

// foreground reports whether zkrwlock's process group is the terminal's
// foreground group.
func (t *terminal) foreground() bool {
	pgrp, err := foregroundGroup(t.fd)
	return err == nil && pgrp == syscall.Getpgrp()
}

// give makes pgid the terminal's foreground group.
func (t *terminal) give(pgid int) error {
	t.ignoreBackgroundOutput() // a background group that sets the foreground gets SIGTTOU
	p := int32(pgid)
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(t.fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p)))
	if errno != 0 {
		return errno
	}
	return nil
}

// take makes zkrwlock's group the terminal's foreground group again.
func (t *terminal) take() { t.give(syscall.Getpgrp()) }

// ignoreBackgroundOutput keeps zkrwlock from being stopped by SIGTTOU when
// it writes to the terminal (with stty tostop) or takes it back while the
// command's group has it. The command has been started by then, and keeps
// the default.
func (t *terminal) ignoreBackgroundOutput() { signal.Ignore(syscall.SIGTTOU) }

func foregroundGroup(fd int) (int, error) {
	var p int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&p)))
	if errno != 0 {
		return 0, errno
	}
	return int(p), nil
}

// groupAlive reports whether any process of group pgid is still running.
// Zombies do not count: an orphan that died is reaped by init, and some
// init processes in containers never do. Zombies would keep kill(-pgid, 0)
// succeeding.
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return killAlive(pgid)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 || f[0][0] == 'Z' || f[0][0] == 'X' {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid {
			return true
		}
	}
	return false
}
