package delayproxy

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// newWaiter returns a timerfd waiter, or a timer waiter if the kernel
// refuses a timerfd.
func newWaiter() waiter {
	if w, err := newTimerfdWaiter(); err == nil {
		return w
	}
	return newTimerWaiter()
}

// timerfdWaiter waits for a timerfd to expire, reading it through the
// runtime's network poller: the goroutine parks without holding a thread,
// and epoll wakes it when the kernel's high-resolution timer fires, tens
// of microseconds after the due time. (A nanosleep would be as precise but
// would hold its thread and processor in a system call, which on a 2-core
// machine stalls every other connection for up to the 10 ms the runtime
// takes to notice.)
type timerfdWaiter struct {
	f    *os.File
	rc   syscall.RawConn
	once sync.Once
}

const clockMonotonic = 1 // CLOCK_MONOTONIC, as time.Now's monotonic reading

type itimerspec struct {
	interval, value syscall.Timespec
}

func newTimerfdWaiter() (*timerfdWaiter, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic,
		syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("delayproxy: timerfd_create: %w", errno)
	}
	f := os.NewFile(fd, "timerfd") // non-blocking, so the poller reads it
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("delayproxy: timerfd: %w", err)
	}
	return &timerfdWaiter{f: f, rc: rc}, nil
}

func (w *timerfdWaiter) wait(due time.Time) error {
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	spec := itimerspec{value: syscall.NsecToTimespec(d.Nanoseconds())} // one shot, relative
	var errno syscall.Errno
	err := w.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0,
			uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	})
	if err != nil {
		return err // closed
	}
	if errno != 0 {
		return fmt.Errorf("delayproxy: timerfd_settime: %w", errno)
	}
	var expirations [8]byte
	_, err = w.f.Read(expirations[:])
	return err
}

func (w *timerfdWaiter) close() { w.once.Do(func() { w.f.Close() }) }
