package main

import (
	"os/signal"
	"syscall"
	"unsafe"
)

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
