package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// What only Linux offers the supervision of the command: the parent-death
// signal, and /proc to tell a live process from a zombie.

// sysProcAttr puts the command in a process group of its own, in the
// terminal's foreground when fg (ttyFd is the terminal), and has the kernel
// send it SIGTERM if zkrwlock dies first (killed with SIGKILL, say), since
// then nobody would stop it when the lock goes with zkrwlock's session.
func sysProcAttr(fg bool, ttyFd int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: ttyFd, Pdeathsig: syscall.SIGTERM}
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
