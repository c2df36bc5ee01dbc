package main

import (
	"errors"
	"fmt"
	"io"
)

// Exit codes. The command's own status passes through exec; the others are
// chosen not to be confused with it where possible: sysexits(3) for usage,
// unavailability, time-outs and permissions, 111 (daemontools' setlock: lock trouble)
// for a lost lock, 126/127 as env(1) and timeout(1) use them, and 128+n,
// as shells report a death by signal n, for an interrupted wait.
const (
	exitNoLeader    = 1   // leader: nobody leads, as grep exits 1 for no match
	exitUsage       = 64  // EX_USAGE: bad flags or arguments, invalid lock path
	exitUnavailable = 69  // EX_UNAVAILABLE: no ZooKeeper session, or ZooKeeper failed
	exitTimeout     = 75  // EX_TEMPFAIL: --timeout (or --no-wait) while waiting
	exitNoPerm      = 77  // EX_NOPERM: an ACL does not allow this client; --auth refused
	exitLost        = 111 // the grant was lost while the command ran; it was terminated
	exitHoldLimit   = 112 // the grant reached --max-hold; the command was terminated
	exitRevoked     = 113 // the grant was revoked ('zkrwlock revoke'); the command was terminated
	exitCannotRun   = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
	exitSignalBase  = 128 // 128+n: interrupted by signal n, or the command died of it
)

const exitCodes = `Exit status:
  N        exec: the command's own exit status (128+n if it died of signal n)
  0        success (queue, ls, revoke, leader, dev, version, --help)
  1        leader: nobody leads
  64       usage: bad flag or argument, invalid lock path
  69       ZooKeeper unavailable: no session within --connect-timeout (sooner when
           every address refuses the connection), or a request failed
  75       exec: gave up waiting (--timeout, --no-wait); no node left behind
  77       not allowed: an ACL on the path does not allow this client (NoAuth:
           authenticate with --auth), or ZooKeeper refused --auth
  111      exec: the lock was lost while the command ran; the command was terminated
  112      exec: the command held the lock for --max-hold; it was terminated
  113      exec: the lock was revoked ('zkrwlock revoke'); the command was terminated
  126/127  exec: the command cannot be run / was not found (before queueing)
  130/143  interrupted (SIGINT/SIGTERM) while connecting or waiting; no node left behind
`

// A failure is an error with the exit code it calls for.
type failure struct {
	code int
	err  error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func fail(code int, format string, args ...any) error {
	return &failure{code, fmt.Errorf(format, args...)}
}

// report prints err on w as one line, prefixed with prog, and returns its
// exit code (exitUnavailable unless err is a failure that says otherwise).
func report(w io.Writer, prog string, err error) int {
	code := exitUnavailable
	var f *failure
	if errors.As(err, &f) {
		code = f.code
	}
	if code == exitUsage {
		return usageError(w, prog, err)
	}
	printLine(w, prog, err.Error())
	return code
}

func usageError(w io.Writer, prog string, err error) int {
	help := "zkrwlock --help"
	if prog != "zkrwlock" {
		help = prog + " --help"
	}
	printLine(w, prog, fmt.Sprintf("%v (see %s)", err, help))
	return exitUsage
}

// printLine writes "prog: msg" on one line: line breaks in msg (an error
// from a server, say) become spaces.
func printLine(w io.Writer, prog, msg string) {
	fmt.Fprintf(w, "%s: %s\n", prog, oneLine(msg))
}

func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
