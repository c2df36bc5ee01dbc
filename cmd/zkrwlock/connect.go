package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// checkPath validates a lock path before any connection is made, so that a
// typo is a usage error even when the servers are down.
func checkPath(path string) error {
	if err := lockname.CheckPath(path); err != nil {
		return &failure{exitUsage, fmt.Errorf("invalid path: %w", err)}
	}
	return nil
}

// logger returns the logger for the lock: debug lines on w (stderr) with
// --debug, else nothing. It is also the default logger, where rwlock.Dial
// passes go-zookeeper's own lines.
func (c *connFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo + 100 // nothing
	if c.debug {
		level = slog.LevelDebug
	}
	l := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(l)
	return l
}

// lockLogger is the logger of a lock that zkrwlock queues on or shows:
// with --debug, logger's; else one that prints only the lock's warnings
// (peers on the path that do not see our nodes, a node that cannot be
// deleted or watched) as "PROG: warning: ..." lines on w.
func (c *connFlags) lockLogger(w io.Writer, prog string) *slog.Logger {
	l := c.logger(w)
	if c.debug {
		return l
	}
	return slog.New(&warnings{w: w, prog: prog, mu: &sync.Mutex{}})
}

// warnings is a slog.Handler that prints warnings and errors as the CLI's
// own lines.
type warnings struct {
	w     io.Writer
	prog  string
	attrs []slog.Attr
	mu    *sync.Mutex // shared by the handlers WithAttrs makes
}

func (h *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("warning: ")
	b.WriteString(strings.TrimPrefix(r.Message, "rwlock: "))
	add := func(a slog.Attr) bool {
		fmt.Fprintf(&b, "; %s=%s", a.Key, printable(a.Value.String()))
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.mu.Lock()
	defer h.mu.Unlock()
	printLine(h.w, h.prog, b.String())
	return nil
}

func (h *warnings) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), attrs...)
	return &c
}

func (h *warnings) WithGroup(string) slog.Handler { return h }

// dialInterruptible dials for a command that the first SIGINT, SIGTERM or
// SIGHUP ends: ctx ends then. stop stops listening and returns that signal,
// if one came. done closes the connection and stops listening; the caller
// defers it. An interrupted dial says so.
func (c *connFlags) dialInterruptible() (ctx context.Context, conn *zk.Conn, stop func() os.Signal, done func(), err error) {
	sigs := make(chan os.Signal, 1)
	notify(sigs, interrupts...)
	ctx, stop = interruptible(context.Background(), sigs)
	conn, err = c.dial(ctx)
	if err != nil {
		sig := stop()
		signal.Stop(sigs)
		if sig != nil {
			err = interruptedErr(sig, "while connecting to ZooKeeper")
		}
		return nil, nil, nil, nil, err
	}
	return ctx, conn, stop, func() {
		closeConn(conn)
		stop()
		signal.Stop(sigs)
	}, nil
}

// errConnectTimeout is the cause of a dial that ran out of time.
var errConnectTimeout = errors.New("connect timeout")

// errRefused is the cause of a dial that every address refused twice.
var errRefused = errors.New("connection refused")

// dial connects to ZooKeeper, waits for a session and authenticates it
// with --auth, all within --connect-timeout: go-zookeeper itself would
// retry forever. ctx ends the wait early (an interrupt). Errors are
// failures with their exit code. It sets c.granted to the session timeout
// the server granted.
func (c *connFlags) dial(ctx context.Context) (*zk.Conn, error) {
	servers, err := c.servers()
	if err != nil {
		return nil, err
	}
	creds, err := c.credentials()
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeoutCause(ctx, c.connectTimeout, errConnectTimeout)
	defer cancel()
	dctx, refuse := context.WithCancelCause(tctx)
	defer refuse(nil)
	d := &dialer{ctx: dctx, refuse: refuse, refused: map[string]int{}}
	conn, err := d.dial(servers, c.sessionTimeout)
	if err == nil {
		_, _, c.granted, _ = d.rec.Session()
		err = authenticate(dctx, conn, creds)
		if err != nil {
			closeConn(conn)
		}
	}
	if err == nil {
		return conn, nil
	}
	var f *failure
	if errors.As(err, &f) {
		return nil, err
	}
	where := strings.Join(servers, ",")
	switch cause := context.Cause(dctx); {
	case errors.Is(cause, errRefused):
		return nil, fail(exitUnavailable, "cannot reach ZooKeeper at %s: connection refused, twice a second apart, "+
			"at every address (before --connect-timeout); is it running? "+
			"Try 'zkrwlock dev', or set --zk or ZOOKEEPER_SERVERS", where)
	case errors.Is(cause, errConnectTimeout):
		return nil, fail(exitUnavailable, "cannot reach ZooKeeper at %s: timed out after %v (--connect-timeout; %s); is it running? "+
			"Try 'zkrwlock dev', or set --zk or ZOOKEEPER_SERVERS", where, c.connectTimeout, d.why(err))
	case cause != nil:
		return nil, cause // an interrupt
	}
	return nil, fail(exitUnavailable, "connect to ZooKeeper at %s: %v", where, err)
}

// dialer makes the connection of dial. Its zk.Dialer remembers the session
// timeout the server grants (zkserver.SessionRecorder) and, until the dial
// is over, closes the connections it made when ctx ends: go-zookeeper
// waits for the answer to its handshake for ten times two thirds of the
// session timeout (200s with the default 30s), and so would zkrwlock, on
// an address that takes connections and never answers.
type dialer struct {
	ctx    context.Context
	refuse context.CancelCauseFunc // ends ctx once every address has refused twice
	rec    zkserver.SessionRecorder

	mu       sync.Mutex
	conns    []*watchedConn // guarded by mu
	over     bool           // the dial is over: ctx no longer closes conns; guarded by mu
	unheard  bool           // a connection was made that the server never answered on; guarded by mu
	answered bool           // some server answered on a connection; guarded by mu
	failed   string         // the last connection that could not be made, and why; guarded by mu
	refused  map[string]int // each address's refusals since it last took a connection; guarded by mu
}

// A refused connection (ECONNREFUSED) means nothing listens at the address.
// go-zookeeper tries each address in turn, and then waits a second before
// the next round. A dial gives up once every address it has tried refused
// in two rounds in a row, about a second in, rather than waiting out
// --connect-timeout: a server being restarted gets that second. An address
// that takes the connection and then stays silent still waits out
// --connect-timeout.
const refusalsToGiveUp = 2

// noteRefusedLocked counts a refusal of address, and ends the dial once every
// address tried has refused refusalsToGiveUp times in a row. d.mu is held.
func (d *dialer) noteRefusedLocked(address string) {
	d.refused[address]++
	for _, n := range d.refused {
		if n < refusalsToGiveUp {
			return
		}
	}
	d.refuse(errRefused)
}

// dial calls rwlock.Dial with d's zk.Dialer and returns when it does, or
// when d.ctx ends: then it leaves rwlock.Dial to close the connection on
// its own, which takes go-zookeeper up to 2s more.
func (d *dialer) dial(servers []string, sessionTimeout time.Duration) (*zk.Conn, error) {
	type result struct {
		conn *zk.Conn
		err  error
	}
	results := make(chan result)
	abandoned := make(chan struct{})
	go func() {
		conn, err := rwlock.Dial(d.ctx, servers, sessionTimeout, zk.WithDialer(d.dialZK))
		select {
		case results <- result{conn, err}:
		case <-abandoned:
			if conn != nil {
				conn.Close()
			}
		}
	}()
	stop := context.AfterFunc(d.ctx, d.closeAll)
	defer stop()
	select {
	case r := <-results:
		d.end()
		return r.conn, r.err
	case <-d.ctx.Done():
	}
	select { // a dial that has just succeeded, or fails at once now
	case r := <-results:
		d.end()
		return r.conn, r.err
	case <-time.After(50 * time.Millisecond):
		close(abandoned)
		d.end()
		return nil, context.Cause(d.ctx)
	}
}

// dialZK is the zk.Dialer.
func (d *dialer) dialZK(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := d.rec.Dial(network, address, timeout)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		// Kept here too: a dial that runs out of time returns before
		// rwlock.Dial, whose error says the same, has closed its connection.
		d.failed = fmt.Sprintf("failed to connect to %s: %v", address, err)
		if errors.Is(err, syscall.ECONNREFUSED) {
			d.noteRefusedLocked(address)
		} else {
			d.refused[address] = 0
		}
		return nil, err
	}
	d.refused[address] = 0
	if d.over {
		return conn, nil
	}
	w := &watchedConn{Conn: conn, d: d}
	d.conns = append(d.conns, w)
	if d.ctx.Err() != nil {
		w.Close()
	}
	return w, nil
}

// end ends the dial: from now on ctx closes no connection.
func (d *dialer) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.over = true
}

// closeAll closes the connections of a dial that ran out of time, noting
// whether one of them never had an answer.
func (d *dialer) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.over {
		return
	}
	for _, w := range d.conns {
		if !w.heard.Load() {
			d.unheard = true
		}
		w.Close()
	}
}

// why says why a dial ran out of time, for the error.
func (d *dialer) why(err error) string {
	d.mu.Lock()
	unheard, answered, failed := d.unheard, d.answered, d.failed
	d.mu.Unlock()
	switch {
	case unheard && !answered:
		return "a server took the connection but never answered ZooKeeper's handshake: not a ZooKeeper server, or one that hangs"
	case unheard:
		return "a server took the connection but did not answer ZooKeeper's handshake in time"
	}
	if _, tried, ok := strings.Cut(err.Error(), "; tried "); ok { // rwlock.Dial's error
		return "tried " + tried
	}
	if failed != "" {
		return "last attempt: " + failed
	}
	return "no server answered"
}

// watchedConn notes whether the server ever answered on it.
type watchedConn struct {
	net.Conn
	d     *dialer
	heard atomic.Bool
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 && !w.heard.Load() {
		w.heard.Store(true)
		w.d.mu.Lock()
		w.d.answered = true
		w.d.mu.Unlock()
	}
	return n, err
}

// authenticate adds each credential to conn's session, within ctx.
// go-zookeeper sends them again by itself after a reconnection.
func authenticate(ctx context.Context, conn *zk.Conn, creds [][2]string) error {
	for _, cred := range creds {
		done := make(chan error, 1)
		go func() { done <- conn.AddAuth(cred[0], []byte(cred[1])) }()
		select {
		case err := <-done:
			if errors.Is(err, zk.ErrAuthFailed) || errors.Is(err, zk.ErrNoAuth) {
				return fail(exitNoPerm, "ZooKeeper refused the %s credentials of --auth (or $%s): %v%s",
					printable(cred[0]), authEnv, err, schemeForgotten(cred[0]))
			}
			if err != nil {
				return fail(exitUnavailable, "authenticate with the %s credentials of --auth: %v", printable(cred[0]), err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// knownSchemes are the authentication schemes ZooKeeper 3.8 comes with.
var knownSchemes = map[string]bool{"digest": true, "ip": true, "sasl": true, "x509": true, "world": true, "super": true, "kerberos": true}

// schemeForgotten suggests the digest scheme when the scheme refused is
// none ZooKeeper knows: --auth alice:secret, for digest:alice:secret. It
// names the user, never the password.
func schemeForgotten(scheme string) string {
	if knownSchemes[scheme] {
		return ""
	}
	return fmt.Sprintf(`; ZooKeeper has no scheme %q: for a user and password, name the scheme first, --auth digest:%s:PASSWORD`,
		printable(scheme), printable(scheme))
}

// closeConn closes conn, which ends its session: the server deletes the
// session's ephemeral nodes at once. go-zookeeper waits at most 1s for the
// server's answer.
func closeConn(conn *zk.Conn) { conn.Close() }

// zkFail is the failure of a ZooKeeper request, what: exit 77 when the
// ACL of a node on the way did not let this client do it (NoAuth), with
// what to do about it; 69 otherwise.
func (c *connFlags) zkFail(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if !errors.Is(err, zk.ErrNoAuth) {
		return fail(exitUnavailable, "%s: %v", what, err)
	}
	advice := "authenticate with --auth SCHEME:CREDENTIALS (or $" + authEnv + ") as an identity the ACL allows, e.g. --auth digest:alice:secret"
	if creds, _ := c.credentials(); len(creds) > 0 {
		advice = "the identity given with --auth (or $" + authEnv + ") is not one the ACL allows"
	}
	return fail(exitNoPerm, "%s: %s: the ACL of the lock directory or a parent does not allow this client; %s",
		what, withoutLibraryHint(err), advice)
}

// withoutLibraryHint is err's text without the advice the library gives
// a Go program (a parenthesis with "see WithACL", or one naming
// zk.Conn.AddAuth), which means nothing to an operator.
func withoutLibraryHint(err error) string {
	return libraryHint.ReplaceAllString(err.Error(), "")
}

var libraryHint = regexp.MustCompile(`\s*\([^()]*\b(see With[A-Za-z]+\)|zk\.Conn\.AddAuth\b[^()]*\))`)
