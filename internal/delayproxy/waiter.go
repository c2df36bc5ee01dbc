package delayproxy

import (
	"errors"
	"sync"
	"time"
)

// A waiter sleeps until a due time. close wakes a wait in progress, which
// then fails, as do later ones; it may be called more than once.
type waiter interface {
	wait(due time.Time) error
	close()
}

var errWaiterClosed = errors.New("delayproxy: waiter closed")

// timerWaiter waits on a runtime timer. It works everywhere, but the
// runtime wakes it on the network poller's millisecond ticks.
type timerWaiter struct {
	done chan struct{}
	once sync.Once
}

func newTimerWaiter() *timerWaiter { return &timerWaiter{done: make(chan struct{})} }

func (w *timerWaiter) wait(due time.Time) error {
	d := time.Until(due)
	if d <= 0 {
		return w.err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.done:
		return errWaiterClosed
	}
}

func (w *timerWaiter) err() error {
	select {
	case <-w.done:
		return errWaiterClosed
	default:
		return nil
	}
}

func (w *timerWaiter) close() { w.once.Do(func() { close(w.done) }) }
