package bench

import "syscall"

// childAttr makes a child process get SIGKILL when the thread that started
// it ends, so that a benchmark that dies leaves no leader behind
// (Pdeathsig is Linux's).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
