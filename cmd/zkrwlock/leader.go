package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/zkrwlock/rwlock"
)

const leaderUsage = `Usage: zkrwlock leader [flags] PATH

Prints the value and term of the leader of the election whose directory is
PATH (rwlock.Election): the value its Campaign or latest Proclaim gave, and
its term, which strictly increases from one leader to the next.

  10.0.0.7:8080 term=4294967302

Characters a terminal would not print as they are show escaped, as in
'zkrwlock queue'; --json has the value whole. When nobody leads, it prints
"no leader" and exits 1. With --watch it prints the leader now, then a
line at each change, until interrupted; it prints the latest state only,
and never goes backwards. Watching costs the server a few requests per
change of leader, and none for candidates that queue or give up.

%FLAGS%
--json prints one JSON object a line: value (the value as text; invalid
UTF-8 becomes U+FFFD), value_base64 (the value's bytes) and term (0 when
nobody leads).

` + exitCodes

// leaderState is the JSON form of a leadership. Its field names are stable.
type leaderState struct {
	Value       string `json:"value"`
	ValueBase64 []byte `json:"value_base64"`
	Term        int64  `json:"term"`
}

func runLeader(std stdio, args []string) int {
	const prog = "zkrwlock leader"
	var conn connFlags
	var asJSON, watch bool
	fs := newFlagSet("leader")
	fs.BoolVar(&watch, "watch", false, "follow the leader until interrupted, a line per change")
	fs.BoolVar(&asJSON, "json", false, "print JSON objects, one a line")
	conn.register(fs)
	path, err := parsePath(std, fs, leaderUsage, args, &conn)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err == nil {
		err = showLeader(std, &conn, path, watch, asJSON)
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	return 0
}

func showLeader(std stdio, cf *connFlags, path string, watch, asJSON bool) error {
	ctx, conn, stop, done, err := cf.dialInterruptible()
	if err != nil {
		return err
	}
	defer done()
	e, err := rwlock.NewElection(conn, path, rwlock.WithLogger(cf.logger(std.err)))
	if err != nil {
		return &failure{exitUsage, err}
	}
	if watch {
		for s := range e.Observe(ctx) {
			if err := printLeader(std.out, s, asJSON); err != nil {
				return err
			}
		}
		if sig := stop(); sig != nil {
			return interruptedErr(sig, "while watching %s", path)
		}
		return fail(exitUnavailable, "the connection to ZooKeeper was closed")
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	value, term, err := e.Leader(rctx)
	switch {
	case errors.Is(err, rwlock.ErrNoLeader):
		if err := printLeader(std.out, rwlock.Leadership{}, asJSON); err != nil {
			return err
		}
		return &failure{exitNoLeader, errors.New("nobody leads " + path)}
	case err != nil:
		if sig := stop(); sig != nil {
			return interruptedErr(sig, "while reading %s", path)
		}
		return cf.zkFail(err, "reading the leader of %s", path)
	}
	return printLeader(std.out, rwlock.Leadership{Value: value, Term: term}, asJSON)
}

// printLeader prints one state of the election, as a line of text or of
// JSON.
func printLeader(w io.Writer, s rwlock.Leadership, asJSON bool) error {
	var err error
	switch {
	case asJSON:
		b, jerr := json.Marshal(leaderState{Value: string(s.Value), ValueBase64: s.Value, Term: s.Term})
		if jerr != nil {
			return jerr
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
	case s.Term == 0:
		_, err = fmt.Fprintln(w, "no leader")
	default:
		_, err = fmt.Fprintf(w, "%s term=%d\n", printable(string(s.Value)), s.Term)
	}
	return err
}
