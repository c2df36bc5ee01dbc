package zkserver

import "syscall"

// serverProcAttr puts a server in a process group of its own, so that a
// terminal's Ctrl-C reaches only the test and the test stops the servers
// in order, and has it killed if the test process dies (see startProcess).
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
