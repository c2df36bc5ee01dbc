package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"

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
