package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
)

// exec --elect: a hot standby. The process campaigns in the election on
// PATH, and runs COMMAND once it leads. A leadership is a write grant (see
// election.go), so exec's rules for a lost lock stop the command: SIGTERM,
// and SIGKILL before any successor's Campaign can return. Resigning is
// releasing, and happens when the command exits.

// electUsage is the line exec's usage gives the form.
const electUsage = `       zkrwlock exec --elect PATH [--value V] [flags] [--] COMMAND [ARGS...]`

// electUsageText is the paragraph exec's usage gives the form.
const electUsageText = `With --elect PATH it campaigns in the election on PATH instead, as a hot
standby: COMMAND starts only once this process leads, runs while it leads,
and is stopped as for a lost lock before any successor can lead. --value is
what 'zkrwlock leader PATH' shows while it leads (default: the owner). When
COMMAND exits, zkrwlock resigns, and the next standby leads at once.`

// electFlags are exec's flags for an election, and for its lock-delay.
type electFlags struct {
	path      string
	value     string
	valueSet  bool
	lockDelay time.Duration
}

func (f *electFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "elect", "", "campaign in the election on PATH, and run COMMAND only while leading (a hot standby)")
	fs.Func("value", "with --elect: the leader's value, as 'zkrwlock leader' shows it (default: the owner)", func(s string) error {
		f.value, f.valueSet = s, true
		return nil
	})
	durationVar(fs, &f.lockDelay, "lock-delay", 0, "after a holder or leader ahead vanished without releasing "+
		"(killed, stopped past its session), start COMMAND only this long after that was seen; clean releases hand over at once")
}

// electing reports whether args ask for an election: then exec takes no
// PATH argument, since --elect names it.
func electing(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--elect" || a == "-elect" || strings.HasPrefix(a, "--elect=") || strings.HasPrefix(a, "-elect="):
			return true
		}
	}
	return false
}

// execPositionals is how many arguments before COMMAND exec takes.
func execPositionals(args []string) int {
	if electing(args) {
		return 0
	}
	return 1
}

// settle checks an election's flags against the rest of exec's, and makes
// the election's path exec's one write lock.
func (f *electFlags) settle(o *execOptions, given map[string]bool) error {
	switch {
	case f.lockDelay < 0:
		return fail(exitUsage, "--lock-delay must not be negative")
	case given["lock-delay"] && f.lockDelay == 0:
		return fail(exitUsage, "--lock-delay 0 is no delay; leave the flag out")
	case !given["elect"] && f.valueSet:
		return fail(exitUsage, "--value goes with --elect")
	case !given["elect"]:
		return nil
	case f.path == "":
		return fail(exitUsage, "--elect needs a PATH")
	case o.write.set || o.read.set || o.locks != nil:
		return fail(exitUsage, "--elect takes no --write or --read: a leader holds the election's write lock")
	case o.noWait || given["timeout"] && o.timeout == 0:
		return fail(exitUsage, "--elect waits to lead: give a --timeout, or none")
	case len(f.value) > 64<<10:
		return fail(exitUsage, "--value is %d bytes; at most 65536", len(f.value))
	}
	o.locks = []lockArg{{f.path, rwlock.Write}}
	return nil
}

// options adds the lock-delay to the options of exec's locks.
func (f *electFlags) options(opts []rwlock.Option) []rwlock.Option {
	if f.lockDelay > 0 {
		opts = append(opts, rwlock.WithLockDelay(f.lockDelay))
	}
	return opts
}

// campaign waits until this process leads, with --timeout, and returns the
// leadership.
func (o *execOptions) campaign(ctx context.Context, conn *zk.Conn, opts []rwlock.Option) (*rwlock.Grant, error) {
	e, err := rwlock.NewElection(conn, o.elect.path, opts...)
	if err != nil {
		return nil, &failure{exitUsage, err}
	}
	value := o.elect.value
	if !o.elect.valueSet {
		value = o.owner
		if value == "" {
			host, _ := os.Hostname()
			value = fmt.Sprintf("%s:%d", host, os.Getpid())
		}
	}
	wctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errWaitTimeout)
		defer cancel()
	}
	g, err := e.Campaign(wctx, []byte(value))
	if err == nil {
		return g, nil
	}
	var sig *interrupted
	switch cause := context.Cause(wctx); {
	case errors.As(cause, &sig):
		return nil, interruptedErr(sig.sig, "while campaigning on %s; left the queue", o.elect.path)
	case errors.Is(cause, errWaitTimeout):
		return nil, fail(exitTimeout, "timed out after %v campaigning on %s; left the queue", o.timeout, o.elect.path)
	}
	return nil, o.conn.zkFail(err, "campaigning on %s", o.elect.path)
}
