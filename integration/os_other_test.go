//go:build !linux

package integration

import "syscall"

// childAttr: without Pdeathsig, cleanup alone ends the children.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// monotonic: the peers' clock is Linux's CLOCK_MONOTONIC, which this
// system does not share with them.
func monotonic() int64 {
	panic("integration: the peers' tests compare CLOCK_MONOTONIC readings, Linux only")
}
