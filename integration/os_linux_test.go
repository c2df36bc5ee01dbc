package integration

import (
	"syscall"
	"unsafe"
)

// childAttr makes a child process get SIGKILL when the thread that started
// it ends, so that a test that dies leaves no child behind (Pdeathsig is
// Linux's, and per thread: the starter keeps its thread until then).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// monotonic reads CLOCK_MONOTONIC, the clock Java's System.nanoTime and
// Python's time.monotonic_ns read on Linux: Go's own monotonic readings
// count from the start of the process, so they cannot be compared.
func monotonic() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return ts.Nano()
}
