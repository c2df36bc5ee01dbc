package rwlock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// A node of a live session must never be left behind: it would block every
// later waiter for as long as the session lives. When a deletion cannot be
// finished by the call that wanted it (its context ended, the connection
// dropped, a create's response was lost), finish hands it to a goroutine
// that retries across reconnections. The goroutine stops as soon as the node
// is gone, or the session that owns it is gone (ZooKeeper then deletes the
// node itself, and the client learns it when it reconnects), or the
// connection is closed.

// finish deletes path, or, when path is empty, every node carrying guid (a
// create whose outcome we never learned), in the background.
func (l *RWLock) finish(path, guid string, session int64) {
	l.background.Add(1)
	go l.finishing(path, guid, session)
}

// finishing is finish's goroutine, for callers that Add to l.background
// themselves.
func (l *RWLock) finishing(path, guid string, session int64) {
	defer l.background.Done()
	l.finishNow(path, guid, session)
}

// finishCreate receives the outcome of a create its caller stopped waiting
// for, and makes sure the node does not outlive the call. The node, if any,
// belongs to the session the client has now: an older one took its nodes
// with it.
func (l *RWLock) finishCreate(path string, err error, guid string) {
	switch {
	case err == nil:
		l.finish(path, "", l.conn.SessionID())
	case connectionLoss(err):
		l.finish("", guid, l.conn.SessionID())
	}
}

func (l *RWLock) finishNow(path, guid string, session int64) {
	var retry backoff
	for {
		// Not a clock: a session lives on across any number of short
		// disconnections, and only the client's reconnection tells whether
		// the server expired it (go-zookeeper then has a new session id).
		if l.conn.SessionID() != session {
			return
		}
		err := l.deleteMine(path, guid)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode), sessionGone(err):
			l.debug("finished deleting in the background", path+guid)
			return
		case !connectionLoss(err):
			l.log.Warn("rwlock: cannot delete lock node; it goes when its session ends",
				"lock", l.path, "node", path, "guid", guid, "err", err)
			return
		}
		if retry.wait(context.Background(), l.conn) != nil {
			return // closed: closing a connection ends its session
		}
	}
}

// deleteMine deletes path, or every child of the lock directory that
// carries guid.
func (l *RWLock) deleteMine(path, guid string) error {
	if path != "" {
		return l.conn.Delete(path, -1)
	}
	children, _, err := l.conn.Children(l.path)
	if err != nil {
		return err
	}
	for _, name := range children {
		if g, ok := guidOf(name); ok && g == guid {
			if err := l.conn.Delete(l.path+"/"+name, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
	}
	return nil
}
