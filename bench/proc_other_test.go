//go:build !linux

package bench

import "syscall"

// childAttr: without Pdeathsig, the benchmark's cleanup alone ends the
// children.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
