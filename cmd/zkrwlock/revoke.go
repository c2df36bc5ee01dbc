package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/lockname"
)

const revokeUsage = `Usage: zkrwlock revoke [flags] PATH

Asks whoever holds the lock whose directory is PATH now to let go: a
zkrwlock exec holding it stops its command (SIGTERM, then SIGKILL after
--grace) and exits 113, saying who asked, when and why, and writes the
same into the file named by the command's ZKRWLOCK_REVOCATION_FILE before
it signals; a program sees its grant's Revoked channel close, Revocation
tell it who, when and why, and WithRead's and WithWrite's function its
context cancelled. Nothing is deleted and nobody else is granted the lock
until the holders release it: a holder that does not listen keeps it.
Waiters are not asked. 'zkrwlock queue' and 'ls' show the request.

It prints whom it asked: the holders, or that nobody holds the lock. A
PATH that does not exist (a misspelt path, say) exits 66. With --wait it
then waits until those holders have let go, so that a script's next step
finds the lock free of them (others may have queued meanwhile); with
--timeout it gives up after that long and exits 75.

%FLAGS%
` + exitCodes

type revokeOptions struct {
	reason, by string
	wait       bool
	timeout    time.Duration
}

func runRevoke(std stdio, args []string) int {
	const prog = "zkrwlock revoke"
	var conn connFlags
	var o revokeOptions
	fs := newFlagSet("revoke")
	fs.StringVar(&o.reason, "reason", "", "why, as the holders and 'zkrwlock queue' show it")
	fs.StringVar(&o.by, "by", "", "who asks, as the holders show it (default user@host)")
	fs.BoolVar(&o.wait, "wait", false, "wait until the holders asked have let go")
	durationVar(fs, &o.timeout, "timeout", 0, "with --wait: give up after this long and exit 75 (0: wait as long as it takes)")
	conn.register(fs)
	path, err := parsePath(std, fs, revokeUsage, args, &conn)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err == nil && o.timeout < 0 {
		err = fail(exitUsage, "--timeout must not be negative, not %v", o.timeout)
	}
	if err == nil && o.timeout > 0 && !o.wait {
		err = fail(exitUsage, "--timeout is for --wait")
	}
	if err == nil {
		err = revoke(std, &conn, path, o)
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	return 0
}

// defaultBy is who asks by default: the user at the host.
func defaultBy() string {
	host, _ := os.Hostname()
	name := os.Getenv("USER")
	if u, err := user.Current(); name == "" && err == nil {
		name = u.Username
	}
	if name == "" {
		return host
	}
	return name + "@" + host
}

func revoke(std stdio, cf *connFlags, path string, o revokeOptions) error {
	const prog = "zkrwlock revoke"
	ctx, conn, stop, done, err := cf.dialInterruptible()
	if err != nil {
		return err
	}
	defer done()
	if o.by == "" {
		o.by = defaultBy()
	}
	l, err := rwlock.New(conn, path, rwlock.WithLogger(cf.logger(std.err)), rwlock.WithOwner(o.by))
	if err != nil {
		return &failure{exitUsage, err}
	}
	interrupted := func(err error, format string, args ...any) error {
		if sig := stop(); sig != nil {
			return interruptedErr(sig, format, args...)
		}
		return cf.zkFail(err, format, args...)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A lock that does not exist is most often a misspelt path.
	if exists, _, err := conn.Exists(path); err != nil {
		return interrupted(err, "revoking %s", path)
	} else if !exists {
		return fail(exitNoInput, "no lock at %s: nothing to revoke ('zkrwlock ls' lists the locks)", path)
	}
	// The queue before, to name the holders: a holder told at once may have
	// let go before a listing made after.
	before, err := l.Queue(rctx)
	if err != nil {
		return interrupted(err, "listing the holders of %s", path)
	}
	if err := l.Revoke(rctx, o.reason); err != nil {
		return interrupted(err, "revoking %s", path)
	}
	asked, err := askedOf(rctx, conn, l, path, before)
	if err != nil {
		return interrupted(err, "reading the revocation of %s", path)
	}
	if len(asked) == 0 {
		printLine(std.out, prog, fmt.Sprintf("nobody holds %s now: nobody was asked", path))
		return nil
	}
	for _, e := range asked {
		printLine(std.out, prog, fmt.Sprintf("asked %s (%s lock, %s owned by %s) to let go",
			path, e.Mode, nodeName(e.Node), ownerText(e.Owner)))
	}
	if !o.wait {
		return nil
	}
	return waitLetGo(ctx, std, conn, path, asked, o.timeout, stop)
}

// askedOf returns the holders that the revocation in path's data names:
// from before, the queue listed before Revoke, or from a listing now for a
// holder granted since. A name whose node is gone by now is left out.
func askedOf(ctx context.Context, conn *zk.Conn, l *rwlock.RWLock, path string, before []rwlock.Entry) ([]rwlock.Entry, error) {
	data, stat, err := conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rev, _ := lockname.ParseRevocation(data)
	named := rev.Names(stat.Czxid)
	var asked []rwlock.Entry
	var missing bool
	for _, seq := range named {
		i := slices.IndexFunc(before, func(e rwlock.Entry) bool { return e.Seq == seq })
		if i < 0 {
			missing = true
			continue
		}
		asked = append(asked, before[i])
	}
	if missing {
		now, err := l.Queue(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range now {
			if slices.Contains(named, e.Seq) && !slices.ContainsFunc(asked, func(a rwlock.Entry) bool { return a.Seq == e.Seq }) {
				asked = append(asked, e)
			}
		}
	}
	return asked, nil
}

// waitLetGo waits until the nodes of asked are gone, or timeout if not 0.
// It watches each node in turn: one request per node, and one per change.
func waitLetGo(ctx context.Context, std stdio, conn *zk.Conn, path string, asked []rwlock.Entry, timeout time.Duration, stop func() os.Signal) error {
	const prog = "zkrwlock revoke"
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	left := slices.Clone(asked)
	begin := time.Now()
	for len(left) > 0 {
		exists, _, ev, err := conn.ExistsW(left[0].Node)
		switch {
		case err != nil:
			if sig := stop(); sig != nil {
				return interruptedErr(sig, "while waiting for the holders of %s to let go", path)
			}
			return fail(exitUnavailable, "waiting for the holders of %s to let go: %v", path, err)
		case !exists:
			left = left[1:]
			continue
		}
		select {
		case <-ev:
		case <-deadline:
			return fail(exitTimeout, "timed out after %v waiting for the holders of %s to let go (still holding: %s)",
				timeout, path, describeHolders(left))
		case <-ctx.Done():
			sig := stop()
			return interruptedErr(sig, "while waiting for the holders of %s to let go", path)
		}
	}
	printLine(std.out, prog, fmt.Sprintf("the holders asked have let go of %s (%v)", path,
		time.Since(begin).Round(time.Millisecond)))
	return nil
}
