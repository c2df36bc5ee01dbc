//go:build !linux

package zkserver

import "syscall"

// serverProcAttr puts a server in a process group of its own. Outside
// Linux there is no parent-death signal: a test process that is killed
// leaves its servers running until they are stopped by hand.
func serverProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
