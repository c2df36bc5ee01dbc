package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
)

// checkPath validates a lock path before any connection is made, so that a
// typo is a usage error even when the servers are down.
func checkPath(path string) error {
	if err := rwlock.ValidatePath(path); err != nil {
		return &failure{exitUsage, err}
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
		fmt.Fprintf(&b, "; %s=%s", a.Key, a.Value)
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

// errConnectTimeout is the cause of a dial that ran out of time.
var errConnectTimeout = errors.New("connect timeout")

// dial connects to ZooKeeper and waits for a session, for at most
// --connect-timeout: go-zookeeper itself would retry forever. ctx ends the
// wait early (an interrupt). Errors are failures with their exit code.
func (c *connFlags) dial(ctx context.Context) (*zk.Conn, error) {
	servers, err := c.servers()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeoutCause(ctx, c.connectTimeout, errConnectTimeout)
	defer cancel()
	conn, err := rwlock.Dial(dctx, servers, c.sessionTimeout)
	if err == nil {
		return conn, nil
	}
	where := strings.Join(servers, ",")
	switch cause := context.Cause(dctx); {
	case errors.Is(cause, errConnectTimeout):
		why := "no server answered"
		if _, last, ok := strings.Cut(err.Error(), "(last attempt: "); ok {
			why = "last attempt: " + strings.TrimSuffix(last, ")") // go-zookeeper's dial error
		}
		return nil, fail(exitUnavailable, "cannot reach ZooKeeper at %s within %v (%s); is it running? "+
			"Try 'zkrwlock dev', or set --zk or ZOOKEEPER_SERVERS", where, c.connectTimeout, why)
	case cause != nil:
		return nil, cause // an interrupt
	}
	return nil, fail(exitUnavailable, "connect to ZooKeeper at %s: %v", where, err)
}

// closeConn closes conn, which ends its session: the server deletes the
// session's ephemeral nodes at once. go-zookeeper waits at most 1s for the
// server's answer.
func closeConn(conn *zk.Conn) { conn.Close() }

// describeZKError adds what an operator can do about the ZooKeeper errors
// that call for it.
func describeZKError(err error) string {
	if errors.Is(err, zk.ErrNoAuth) {
		return err.Error() + " (the ACL of the lock directory or a parent does not allow this client)"
	}
	return err.Error()
}
