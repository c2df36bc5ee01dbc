package lifeline

import "syscall"

func tie(sig syscall.Signal) bool {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(sig), 0)
	return errno == 0
}
