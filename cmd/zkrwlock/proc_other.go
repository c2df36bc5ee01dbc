//go:build !linux

package main

import "syscall"

// The portable fallbacks of proc_linux.go.

// sysProcAttr puts the command in a process group of its own, in the
// terminal's foreground when fg (ttyFd is the terminal). There is no
// parent-death signal outside Linux: if zkrwlock is killed with SIGKILL,
// the command runs on.
func sysProcAttr(fg bool, ttyFd int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: ttyFd}
}

// groupAlive reports whether kill(2) finds group pgid. Zombies count as
// alive: after a lost lock, zkrwlock may then wait until --grace for a
// group whose processes have all exited but not been reaped.
func groupAlive(pgid int) bool { return killAlive(pgid) }
