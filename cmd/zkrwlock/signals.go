package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// forwarded are the signals that end exec's wait, and that are passed on to
// the command while it runs.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// interrupts are the signals that end the other commands' waits.
var interrupts = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// notify relays sigs to c, except those ignored when zkrwlock started, which
// stay ignored. nohup ignores SIGHUP, and a shell without job control
// starts a background job with SIGINT (and SIGQUIT) ignored, so that a
// hangup or a Ctrl-C does not reach it: catching them would undo that for
// zkrwlock and, worse, for the command exec runs, which inherits an ignored
// signal only if zkrwlock leaves it ignored (a caught one is reset to the
// default in the child).
//
// Go reports only SIGHUP and SIGINT as ignored at start; it catches SIGTERM
// and SIGQUIT whatever their disposition, so those are always relayed.
func notify(c chan<- os.Signal, sigs ...os.Signal) {
	var caught []os.Signal
	for _, sig := range sigs {
		if !signal.Ignored(sig) {
			caught = append(caught, sig)
		}
	}
	if len(caught) > 0 { // signal.Notify(c) with none would relay every signal
		signal.Notify(c, caught...)
	}
}

// interrupted is the cause of a wait ended by a signal.
type interrupted struct{ sig os.Signal }

func (i *interrupted) Error() string { return "interrupted by " + signalName(i.sig) }

func interruptedErr(sig os.Signal, format string, args ...any) error {
	code := exitSignalBase + int(sig.(syscall.Signal))
	return fail(code, "interrupted by %s %s", signalName(sig), fmt.Sprintf(format, args...))
}

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}

// interruptible returns a context that ends, with an *interrupted cause,
// at the first signal on sigs. stop ends the watch and returns that
// signal, if one came; later signals stay in sigs.
func interruptible(parent context.Context, sigs <-chan os.Signal) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	var got os.Signal
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case s := <-sigs:
			got = s
			cancel(&interrupted{s})
		case <-done:
		}
	})
	var once sync.Once
	return ctx, func() os.Signal {
		once.Do(func() {
			close(done)
			wg.Wait()
			cancel(nil)
		})
		return got
	}
}
