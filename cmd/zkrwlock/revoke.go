package main

import (
	"context"
	"errors"
	"time"

	"github.com/zkrwlock/rwlock"
)

const revokeUsage = `Usage: zkrwlock revoke [flags] PATH

Asks whoever holds the lock whose directory is PATH now to let go: a
zkrwlock exec holding it stops its command (SIGTERM, then SIGKILL after
--grace) and exits 113; a program sees its grant's Revoked channel close,
and WithRead's and WithWrite's function its context cancelled. Nothing is
deleted and nobody else is granted the lock until the holders release it:
a holder that does not listen keeps it. Waiters are not asked; revoking a
lock nobody holds reaches nobody. 'zkrwlock queue' and 'ls' show the request.

%FLAGS%
` + exitCodes

func runRevoke(std stdio, args []string) int {
	const prog = "zkrwlock revoke"
	var conn connFlags
	var reason string
	fs := newFlagSet("revoke")
	fs.StringVar(&reason, "reason", "", "why, as the holders and 'zkrwlock queue' show it")
	conn.register(fs)
	path, err := parsePath(std, fs, revokeUsage, args, &conn)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err == nil {
		err = revoke(std, &conn, path, reason)
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	return 0
}

func revoke(std stdio, cf *connFlags, path, reason string) error {
	ctx, conn, stop, done, err := cf.dialInterruptible()
	if err != nil {
		return err
	}
	defer done()
	l, err := rwlock.New(conn, path, rwlock.WithLogger(cf.logger(std.err)))
	if err != nil {
		return &failure{exitUsage, err}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.Revoke(rctx, reason); err != nil {
		if sig := stop(); sig != nil {
			return interruptedErr(sig, "while revoking %s", path)
		}
		return cf.zkFail(err, "revoking %s", path)
	}
	return nil
}
