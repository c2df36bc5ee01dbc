package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
)

const execUsage = `Usage: zkrwlock exec (--write | --read) [flags] PATH [--] COMMAND [ARGS...]
       zkrwlock exec (--write PATH | --read PATH)... [flags] [--] COMMAND [ARGS...]
       zkrwlock exec --limit N [--weight W] [flags] PATH [--] COMMAND [ARGS...]
` + electUsage + `

Takes the lock whose directory is PATH (exclusive with --write, shared with
--read), runs COMMAND while holding it, releases it when COMMAND exits, and
exits with COMMAND's status. Waiters queue in order (FIFO); a waiting writer
holds back the readers that come after it. Without --timeout or --no-wait
it waits as long as it takes; --timeout 0 does not wait, as --no-wait.

The second form takes several locks at once, each flag followed by its
PATH: --write A --write B --read C. Their nodes are made in one ZooKeeper
transaction, so two execs naming the same locks in any order cannot
deadlock. COMMAND runs once all are held; losing any one of them, or its
revocation or --max-hold, stops it as for one lock, and the message names
that lock. A PATH may be named once. The forms do not mix: a --write or
--read not followed by its PATH makes it the first form, with one lock.
With several locks there are no progress lines, --no-wait and --timeout 0
are refused (give a --timeout), and ZKRWLOCK_NODE has their nodes, one a
line, in the order given.

The third form takes PATH as a bounded shared lock of N permits: at most N
commands at once, or fewer where --weight W (default 1) makes some take
more. Waiters are admitted in queue order: a waiting heavy command holds
back the lighter ones behind it. Every client of PATH must give the same
N; a node made with another, or by --write or --read, fails it with a
message that says so.
--limit takes the place of --write and --read and takes one PATH: it does
not join the several-locks form. 'zkrwlock queue' shows the permits in use
and the waiters' weights.

While it waits longer than a second, it says why on stderr, when that
changes and every 10s otherwise (--quiet: never):

  waiting: 2 ahead, holder write-0000000007 owned by host:pid (3s)
  waiting: nothing holds read-0000000009 back any more: it is being granted (3s)
  waiting: not queued yet; nobody holds the lock (3s)

"Ahead" counts the nodes before ours in the queue. "Being granted": what
was ahead has gone and the lock is ours in a moment; if that lasts,
ZooKeeper is slow to answer. "Not queued yet": our node is not created yet,
or is being created again after our session expired.

If the lock is lost while COMMAND runs, COMMAND's process group gets
SIGTERM, and SIGKILL before another client can be granted the lock, and
zkrwlock exits 111 with a message saying the lock was lost. The lock is
lost when its node is deleted, when the session expires, or when ZooKeeper
has been silent too long. With T the session timeout the server granted
(--session-timeout asks for one; exec says when the server granted
another), a silent connection is ridden out for about 20s with the default
30s (for any T, see "Server loss is ridden out" in docs/guarantees.md in
the repository). After a silence, SIGKILL follows SIGTERM within T/16 less
0.1s (1.775s with the default), the least time the server may take to let
another client in; after a deleted node or an expired session, at once.
--grace shortens that time; a longer one does not fit and is refused.

` + electUsageText + `

With another lock library on PATH (Curator, kazoo, go-zookeeper's zk.Lock),
--dialect names our node so that it counts it in its queue; every zkrwlock
client of PATH must give the same one. A warning says so when that
library's nodes on PATH do not see ours. See docs/peers.md in the
repository, "Sharing a lock with Curator, kazoo and zk.Lock".

%FLAGS%
The command's environment also has:
  ZKRWLOCK_TOKEN  the fencing token of the grant: a positive integer; every
                  later grant of the lock that conflicts with this one (a
                  write after anything, a read after a write) has a larger
                  one. Pass it to the store you protect and have the store
                  reject writes with a smaller one
  ZKRWLOCK_NODE   the full path of the lock node

COMMAND runs in a process group of its own (on a terminal, the foreground
one), so that a lost lock stops everything it started. SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to zkrwlock are passed on to that group while it
runs; while connecting or waiting they make zkrwlock leave the queue and
exit 128+n. A signal ignored when zkrwlock starts stays ignored, by zkrwlock
and by COMMAND: under nohup, SIGHUP; in a background job of a script,
SIGINT. If zkrwlock itself is killed (kill -9), COMMAND's first process gets
SIGTERM (on Linux). The lock is held until COMMAND exits: processes it
leaves in the background do not hold it.

` + exitCodes

type execOptions struct {
	std     stdio
	conn    connFlags
	write   modeFlag
	read    modeFlag
	timeout time.Duration
	noWait  bool
	giveUp  string // the flag that said not to wait: --no-wait or --timeout 0
	grace   time.Duration
	owner   string
	quiet   bool
	dialect dialectFlag
	// graceGiven is true when --grace was given: then it must fit.
	graceGiven bool
	maxHold    time.Duration
	permits    permitFlags // --limit, --weight (see limit.go)

	path string
	argv []string
	mode rwlock.Mode
	// locks are the locks to take (see locks.go); path and mode are the
	// first's, the only one in the first form.
	locks []lockArg
	elect electFlags // --elect, --value and --lock-delay (elect.go)
}

func runExec(std stdio, args []string) int {
	const prog = "zkrwlock exec"
	o := execOptions{std: std}
	fs := o.flagSet()
	// A first pass on a copy finds the form, so that the first form is
	// parsed as it always was.
	probe := execOptions{}
	var pos, rest []string
	var err error
	if locks, _, _ := parseLocks(probe.flagSet(), &probe.write, &probe.read, args); len(locks) > 0 {
		o.locks, rest, err = parseLocks(fs, &o.write, &o.read, args)
	} else {
		pos, rest, err = parse(std.out, fs, execUsage, args, execPositionals(args))
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	if err == nil {
		err = o.validate(pos, rest, given(fs))
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	code, err := o.run(prog)
	if err != nil {
		return report(std.err, prog, err)
	}
	return code
}

// flagSet returns exec's flags, set into o.
func (o *execOptions) flagSet() *flag.FlagSet {
	fs := newFlagSet("exec")
	fs.Var(&o.write, "write", "take the lock exclusively; --write PATH names a lock of a set")
	fs.Var(&o.read, "read", "take the lock shared; --read PATH names a lock of a set")
	durationVar(fs, &o.timeout, "timeout", 0, "give up waiting for the lock after this long (exit 75); 0 gives up at once, "+
		"as --no-wait (and flock -w 0) do; without it, wait as long as it takes")
	fs.BoolVar(&o.noWait, "no-wait", false, "give up at once if the lock is taken (exit 75)")
	durationVar(fs, &o.grace, "grace", maxGrace, "after a lost lock, time between SIGTERM and SIGKILL to the command: "+
		"at most a sixteenth of the session timeout less 0.1s, and a longer one is refused "+
		"(default: that much, 1.775s with the default --session-timeout)")
	fs.StringVar(&o.owner, "owner", "", "who holds the lock, as 'zkrwlock queue' shows it (default host:pid)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines while waiting")
	durationVar(fs, &o.maxHold, "max-hold", 0, "hold the lock at most this long: a head start before it, the command is "+
		"stopped as for a lost lock (SIGTERM, SIGKILL after --grace) and zkrwlock exits 112; the lock is freed at it")
	o.elect.register(fs)
	o.dialect.register(fs)
	o.permits.register(fs)
	o.conn.register(fs)
	return fs
}

// validate checks the arguments and settles the mode and whether to wait.
// given holds the flags set on the command line.
func (o *execOptions) validate(pos, rest []string, given map[string]bool) error {
	if err := o.elect.settle(o, given); err != nil {
		return err
	}
	if err := o.permits.validate(o, given); err != nil {
		return err
	}
	switch {
	case o.locks == nil && o.write.set == o.read.set:
		return fail(exitUsage, "give exactly one of --write, --read and --limit")
	case o.locks == nil && len(pos) == 0:
		return fail(exitUsage, "missing lock PATH")
	case len(rest) == 0:
		return fail(exitUsage, "missing COMMAND to run under the lock")
	case o.timeout < 0:
		return fail(exitUsage, "--timeout must not be negative")
	case o.noWait && o.timeout > 0:
		return fail(exitUsage, "give --no-wait or --timeout, not both")
	case o.grace < 0:
		return fail(exitUsage, "--grace must not be negative")
	case o.maxHold < 0:
		return fail(exitUsage, "--max-hold must not be negative")
	}
	if err := o.conn.validate(); err != nil {
		return err
	}
	o.graceGiven = given["grace"]
	if err := o.checkGrace(o.conn.sessionTimeout, "--session-timeout"); err != nil {
		return err
	}
	switch {
	case o.noWait:
		o.giveUp = "--no-wait"
	case given["timeout"] && o.timeout == 0:
		// A bound of no time at all, not none: "--timeout 0s" read as
		// "wait forever" would let cron jobs pile up.
		o.noWait, o.giveUp = true, "--timeout 0"
	}
	if o.locks == nil { // the first form
		mode := rwlock.Read
		if o.write.set {
			mode = rwlock.Write
		}
		o.locks = []lockArg{{pos[0], mode}}
	}
	o.path, o.mode, o.argv = o.locks[0].path, o.locks[0].mode, rest
	if len(o.locks) > 1 && o.noWait {
		return fail(exitUsage, "%s takes one lock; give several locks a --timeout", o.giveUp)
	}
	if err := checkLocks(o.locks); err != nil {
		return err
	}
	return checkCommand(o.argv[0])
}

// run takes the lock, runs the command and releases the lock. It returns
// the command's exit code, or a failure.
func (o *execOptions) run(prog string) (int, error) {
	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	if cmd.Err != nil { // checkCommand passed, but the file may have gone since
		return 0, startFailure(o.argv[0], cmd.Err)
	}
	sigs := make(chan os.Signal, 8)
	notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	log := o.conn.lockLogger(o.std.err, prog)
	ctx, stop := interruptible(context.Background(), sigs)
	conn, err := o.conn.dial(ctx)
	if err != nil {
		if sig := stop(); sig != nil {
			return 0, interruptedErr(sig, "while connecting to ZooKeeper")
		}
		return 0, err
	}
	defer closeConn(conn)
	if err := o.checkGranted(prog); err != nil {
		stop()
		return 0, err
	}
	opts := append([]rwlock.Option{rwlock.WithLogger(log), rwlock.WithDialect(o.dialect.d)}, o.permits.option()...)
	if o.maxHold > 0 {
		opts = append(opts, rwlock.WithMaxHold(o.maxHold))
	}
	if o.owner != "" {
		opts = append(opts, rwlock.WithOwner(o.owner))
	}
	opts = o.elect.options(opts)
	var locks []*rwlock.RWLock
	for _, a := range o.locks {
		l, err := rwlock.New(conn, a.path, opts...)
		if err != nil {
			stop()
			return 0, &failure{exitUsage, err}
		}
		locks = append(locks, l)
	}

	var grants []*rwlock.Grant
	if o.elect.path != "" {
		var g *rwlock.Grant
		if g, err = o.campaign(ctx, conn, opts); err == nil {
			grants = []*rwlock.Grant{g}
		}
	} else if len(locks) == 1 {
		var g *rwlock.Grant
		if g, err = o.acquire(ctx, prog, locks[0], conn); err == nil {
			grants = []*rwlock.Grant{g}
		}
	} else {
		grants, err = o.acquireAll(ctx, locks)
	}
	if sig := stop(); sig != nil && err == nil {
		// The signal came as the lock was granted: honour it.
		o.release(prog, grants...)
		if len(grants) > 1 {
			return 0, interruptedErr(sig, "as the locks (%s) were granted; released them", describeLocks(o.locks))
		}
		return 0, interruptedErr(sig, "as the %s lock on %s was granted; released it", o.mode, o.path)
	}
	if err != nil {
		return 0, err
	}
	return o.runLocked(prog, cmd, grants, sigs)
}

// acquireAll waits for every lock of a set at once (rwlock.LockAll), with
// --timeout; without progress lines, which are about one lock's queue.
func (o *execOptions) acquireAll(ctx context.Context, locks []*rwlock.RWLock) ([]*rwlock.Grant, error) {
	wctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errWaitTimeout)
		defer cancel()
	}
	reqs := make([]rwlock.Request, len(locks))
	for i, l := range locks {
		reqs[i] = rwlock.Request{Lock: l, Mode: o.locks[i].mode}
	}
	grants, err := rwlock.LockAll(wctx, reqs...)
	if err == nil {
		return grants, nil
	}
	var sig *interrupted
	switch cause := context.Cause(wctx); {
	case errors.As(cause, &sig):
		return nil, interruptedErr(sig.sig, "while waiting for the locks (%s); left the queues", describeLocks(o.locks))
	case errors.Is(cause, errWaitTimeout):
		return nil, fail(exitTimeout, "timed out after %v waiting for the locks (%s); left the queues",
			o.timeout, describeLocks(o.locks))
	}
	return nil, o.conn.zkFail(err, "waiting for the locks (%s)", describeLocks(o.locks))
}

// acquire waits for the lock, with progress lines, --timeout or --no-wait.
func (o *execOptions) acquire(ctx context.Context, prog string, l *rwlock.RWLock, conn *zk.Conn) (*rwlock.Grant, error) {
	wctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errWaitTimeout)
		defer cancel()
	}
	p := &progress{
		l: l, session: conn.SessionID, w: o.std.err, prog: prog,
		delay: time.Second, interval: time.Second, repeat: 10 * time.Second,
	}
	if !o.quiet && !o.noWait {
		p.start(wctx)
	}
	begin := time.Now()
	g, permits, err := o.permits.acquire(wctx, l, o.noWait)
	switch {
	case permits:
	case o.mode == rwlock.Write && o.noWait:
		g, err = l.TryLock(wctx)
	case o.mode == rwlock.Write:
		g, err = l.Lock(wctx)
	case o.noWait:
		g, err = l.TryRLock(wctx)
	default:
		g, err = l.RLock(wctx)
	}
	printed := !o.quiet && !o.noWait && p.stop()
	if err == nil {
		if printed {
			printLine(o.std.err, prog, fmt.Sprintf("acquired the %s lock on %s after %v", o.mode, o.path,
				time.Since(begin).Round(100*time.Millisecond)))
		}
		return g, nil
	}

	var sig *interrupted
	switch cause := context.Cause(wctx); {
	case errors.As(cause, &sig):
		return nil, interruptedErr(sig.sig, "while waiting for the %s lock on %s; left the queue", o.mode, o.path)
	case errors.Is(cause, errWaitTimeout):
		return nil, fail(exitTimeout, "timed out after %v waiting for the %s lock on %s (%s); left the queue",
			o.timeout, o.mode, o.path, holdersNow(l))
	case errors.Is(err, rwlock.ErrWouldBlock):
		return nil, fail(exitTimeout, "the %s lock on %s is not free (%s) and %s was given",
			o.mode, o.path, holdersNow(l), o.giveUp)
	}
	return nil, o.conn.zkFail(err, "waiting for the %s lock on %s", o.mode, o.path)
}

var errWaitTimeout = errors.New("--timeout")

// holdersNow describes the holders of the lock, for a message about a
// wait that failed.
func holdersNow(l *rwlock.RWLock) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	q, err := l.Queue(ctx)
	if err != nil {
		return "holders unknown"
	}
	var holders []rwlock.Entry
	for _, e := range q {
		if e.Held {
			holders = append(holders, e)
		}
	}
	switch len(holders) {
	case 0:
		return "no holder now"
	case 1:
		return "holder " + describeHolders(holders)
	}
	return "holders " + describeHolders(holders)
}

// runLocked runs the command under grants, one per lock of o.locks, and
// releases them when it exits. Any grant's loss or revocation stops the
// command as a single lock's does. It returns the exit code for zkrwlock,
// or a failure.
func (o *execOptions) runLocked(prog string, cmd *exec.Cmd, grants []*rwlock.Grant, sigs <-chan os.Signal) (int, error) {
	token := grants[0].Token() // a set's grants share one
	nodes := make([]string, len(grants))
	lost := make([]<-chan struct{}, len(grants))
	revoked := make([]<-chan struct{}, len(grants))
	for i, g := range grants {
		nodes[i], lost[i], revoked[i] = g.Node(), g.Done(), g.Revoked()
	}
	if i := lostMember(grants); i >= 0 || token == 0 {
		i = max(i, 0)
		o.release(prog, grants...)
		return 0, fail(exitLost, "lost the %s lock on %s before the command started: %v",
			o.locks[i].mode, o.locks[i].path, grants[i].Err())
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.std.in, o.std.out, o.std.err
	cmd.Env = append(os.Environ(),
		"ZKRWLOCK_TOKEN="+strconv.FormatInt(token, 10),
		"ZKRWLOCK_NODE="+strings.Join(nodes, "\n"),
	)
	c, err := startChild(cmd)
	if err != nil {
		o.release(prog, grants...)
		return 0, startFailure(o.argv[0], err)
	}
	done := make(chan struct{})
	var watchers sync.WaitGroup
	defer watchers.Wait()
	defer close(done)
	var within time.Duration
	lostAt, revokedAt := 0, 0 // the member lost, the member revoked
	res := c.supervise(sigs, stopper{
		lost:    anyClosed(done, &watchers, lost),
		revoked: anyClosed(done, &watchers, revoked),
		lostWithin: func() time.Duration {
			lostAt = max(lostMember(grants), 0)
			within = stopWithin(grants[lostAt], o.grace)
			return within
		},
		revokedWithin: func() time.Duration {
			revokedAt = max(closedMember(revoked), 0)
			within = min(o.grace, stopWindow(o.conn.sessionTimeout), stopWithin(grants[revokedAt], o.grace))
			return within
		},
		onLost: func(within time.Duration) {
			a := o.locks[lostAt]
			printLine(o.std.err, prog, fmt.Sprintf("lost the %s lock on %s while the command ran (%v); "+
				"sent SIGTERM to the command, SIGKILL follows in %v", a.mode, a.path, grants[lostAt].Err(), within.Round(time.Millisecond)))
		},
		onRevoked: func(within time.Duration) {
			a := o.locks[revokedAt]
			printLine(o.std.err, prog, fmt.Sprintf("the %s lock on %s was revoked; "+
				"sent SIGTERM to the command, SIGKILL follows in %v", a.mode, a.path, within.Round(time.Millisecond)))
		},
		onKill: func() {
			printLine(o.std.err, prog, fmt.Sprintf("the command did not exit within %v of SIGTERM; sent SIGKILL",
				within.Round(time.Millisecond)))
		},
	})
	if i := lostMember(grants); !res.lost && i >= 0 {
		res.lost, lostAt = true, i
		printLine(o.std.err, prog, fmt.Sprintf("lost the %s lock on %s as the command exited (%v)",
			o.locks[i].mode, o.locks[i].path, grants[i].Err()))
	}
	cause := grants[lostAt].Err()
	o.release(prog, grants...)
	lostLock, revokedLock := o.locks[lostAt], o.locks[revokedAt]
	switch {
	case res.lost && errors.Is(cause, rwlock.ErrHoldLimit):
		return 0, fail(exitHoldLimit, "the command was stopped because it held the %s lock on %s for --max-hold %v",
			lostLock.mode, lostLock.path, o.maxHold)
	case res.lost:
		return 0, fail(exitLost, "the command was stopped because the %s lock on %s was lost", lostLock.mode, lostLock.path)
	case res.revoked:
		return 0, fail(exitRevoked, "the command was stopped because the %s lock on %s was revoked",
			revokedLock.mode, revokedLock.path)
	}
	return res.code, nil
}

// lostMember returns the index of the first grant that was lost, or -1.
func lostMember(grants []*rwlock.Grant) int {
	for i, g := range grants {
		if err := g.Err(); err != nil && !errors.Is(err, rwlock.ErrReleased) {
			return i
		}
	}
	return -1
}

// closedMember returns the index of the first closed channel, or -1.
func closedMember(chans []<-chan struct{}) int {
	for i, ch := range chans {
		select {
		case <-ch:
			return i
		default:
		}
	}
	return -1
}

// anyClosed returns a channel closed when any of chans is, until done
// closes: the one channel itself when there is one.
func anyClosed(done <-chan struct{}, wg *sync.WaitGroup, chans []<-chan struct{}) <-chan struct{} {
	if len(chans) == 1 {
		return chans[0]
	}
	out := make(chan struct{})
	var once sync.Once
	for _, ch := range chans {
		wg.Go(func() {
			select {
			case <-ch:
				once.Do(func() { close(out) })
			case <-done:
			}
		})
	}
	return out
}

// maxGrace stands for "as long as the lock allows" (see stopWithin).
const maxGrace = 1<<63 - 1

// killMargin is how long before the grant's deadline the command gets
// SIGKILL: the signal takes effect at once, and the margin covers the
// moments zkrwlock itself needs to send it.
const killMargin = 100 * time.Millisecond

// stopWithin is how long a command whose lock was just lost may run on
// after SIGTERM: grace, but never past the moment the server may let
// another client have the lock (Grant.Deadline), less killMargin. Without
// a deadline (the session timeout unknown), at once.
func stopWithin(g *rwlock.Grant, grace time.Duration) time.Duration {
	deadline, ok := g.Deadline()
	if !ok {
		return 0
	}
	return max(min(grace, time.Until(deadline)-killMargin), 0)
}

// checkGrace refuses a --grace longer than the lock can give the command
// with session timeout t (what says where t comes from): after a lost
// lock, the command must be dead before another client can be granted it,
// so the lock cannot give it more time than the server gives the lock. A
// command that needs longer to stop needs a longer session timeout.
func (o *execOptions) checkGrace(t time.Duration, what string) error {
	window := stopWindow(t)
	if !o.graceGiven || o.grace <= window {
		return nil
	}
	return fail(exitUsage, "--grace %v does not fit %s %v: after a lost lock, SIGKILL must follow SIGTERM within %v "+
		"(a sixteenth of the session timeout, less 0.1s), before another client can be granted the lock; "+
		"give --grace %v or less, or --session-timeout %v or more (within the server's maxSessionTimeout)",
		o.grace, what, t, window, window, neededTimeout(o.grace))
}

// neededTimeout is the shortest session timeout whose stopWindow is grace.
func neededTimeout(grace time.Duration) time.Duration {
	return ((grace + killMargin) * 16).Round(100 * time.Millisecond)
}

// checkGranted looks at the session timeout the server granted: a server
// grants what is asked only within its minSessionTimeout and
// maxSessionTimeout. exec says so when it differs, for it changes how long
// a dead holder blocks the others, the silence ridden out and the time
// between SIGTERM and SIGKILL; and a --grace that no longer fits is
// refused, before the lock is queued for.
func (o *execOptions) checkGranted(prog string) error {
	t := o.conn.granted
	if t <= 0 || t == o.conn.sessionTimeout {
		return nil
	}
	if err := o.checkGrace(t, "the session timeout the server granted,"); err != nil {
		return err
	}
	printLine(o.std.err, prog, fmt.Sprintf("warning: the server granted a session timeout of %v, not the %v asked for "+
		"(--session-timeout; its minSessionTimeout and maxSessionTimeout bound it): a dead holder blocks the others for %v, "+
		"a silent connection is ridden out for about %v, and SIGKILL follows SIGTERM within %v",
		t, o.conn.sessionTimeout, t, rideOut(t), stopWindow(t)))
	return nil
}

// rideOut is about how long a connection may stay silent before the lock
// is lost, for a session timeout t. A grant is lost when a quarter of t is
// left, and the lease is renewed every sixteenth of t, so it is about
// (3/4 - 1/16)·t, as "Server loss is ridden out" in docs/guarantees.md says.
func rideOut(t time.Duration) time.Duration { return (t * 11 / 16).Round(100 * time.Millisecond) }

// stopWindow is how long, at most, a command may run on after SIGTERM with
// session timeout t: the time Grant.Deadline leaves after a loss noticed in
// time, a sixteenth of t (see rwlock.Grant.Done), less killMargin.
func stopWindow(t time.Duration) time.Duration { return max(t/16-killMargin, 0) }

// release releases grants, and says so when it cannot: then the node goes when
// the session ends, which closing the connection does next.
func (o *execOptions) release(prog string, grants ...*rwlock.Grant) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rwlock.ReleaseAll(ctx, grants...); err != nil {
		printLine(o.std.err, prog, fmt.Sprintf("release: %v (the node goes with the session, which ends now)", err))
	}
}
