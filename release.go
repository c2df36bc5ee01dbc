package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A node of a live session must never be left behind. It would block every
// later waiter for as long as the session lives. The call that wanted a
// deletion may be unable to finish it. Its context ended, the connection
// dropped, or a create's answer was lost. Then finish hands the deletion to
// a goroutine that retries across reconnections. The goroutine stops as
// soon as the node is gone, or the session that owns it is gone, or the
// connection is closed. When the session is gone, ZooKeeper deletes the
// node itself, and the client learns it when it reconnects.

// errFinishing marks a deletion that goes on in the background.
var errFinishing = errors.New("the deletion goes on in the background")

// deleteNode deletes one of our nodes. It returns nil once the node is
// gone. When ctx ends or the connection fails first, a background goroutine
// finishes the job, and the error wraps errFinishing. Any other error is
// the server's refusal, and the node stays.
//
// With a mark such as lockname.MarkHeld, the node's data is marked in the
// same transaction (see writer.go).
func (l *RWLock) deleteNode(ctx context.Context, c *zkclient.Client, path string, session int64, mark lockname.Mark) error {
	// An answer that comes after ctx ended, and is not the node's end,
	// leaves the node to finish. It tells of a connection lost, or of a
	// held mark refused by an ACL without WRITE, where a plain delete may
	// pass.
	late := func(r zkclient.Reply[struct{}]) {
		// mutant: release-late
		if r.Err != nil && !nodeGone(r.Err) {
			l.finish(c, path, "", session)
		}
	}
	var r zkclient.Reply[struct{}]
	if mark != lockname.Unmarked {
		r = c.SetAndDelete(ctx, path, lockname.Data(l.owner, l.maxHold, mark), late)
		if r.Err != nil && !nodeGone(r.Err) && !zkclient.ConnectionLoss(r.Err) && ctx.Err() == nil {
			r = c.Delete(ctx, path, late) // an ACL that forbids writing data, so just delete it
		}
	} else {
		r = c.Delete(ctx, path, late)
	}
	switch {
	case r.Err == nil:
		l.debug("deleted", path)
		return nil
	case nodeGone(r.Err):
		return nil
	case abandoned(r.Err): // the request goes on; late takes its outcome
		return fmt.Errorf("delete %s: %w; %w", path, r.Err, errFinishing)
	case zkclient.ConnectionLoss(r.Err):
		l.finish(c, path, "", session)
		return fmt.Errorf("delete %s: %w; %w", path, r.Err, errFinishing)
	}
	return fmt.Errorf("delete %s: %w", path, r.Err)
}

// abandoned reports whether err is a request's context's error, returned
// because the context ended before the answer came. The request goes on,
// and its late callback gets the answer. An answer that came is judged by
// what it says, even if the context has ended since. Check abandoned before
// ConnectionLoss, which context.DeadlineExceeded also satisfies, being a
// net.Error.
func abandoned(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// deleteNodes deletes the nodes of holds on c in one transaction. It marks
// held those that Release would mark. A node's mark is true whatever else
// the transaction deletes, since its grant was made when every node before
// it had gone.
//
// It returns as deleteNode does. It returns nil once all are gone, or once
// the session that owned them is. It returns an error wrapping errFinishing
// when ctx ends or the connection fails first, and a background goroutine
// then finishes each deletion. Any other error is the server's refusal of
// the whole transaction, and every node stays. A node already gone, or an
// ACL, makes the server refuse.
func deleteNodes(ctx context.Context, c *zkclient.Client, holds []*hold) error {
	ops := make([]any, 0, 2*len(holds))
	for _, h := range holds {
		if h.releaseMark != lockname.Unmarked {
			ops = append(ops, &zk.SetDataRequest{Path: h.path, Data: lockname.Data(h.l.owner, h.l.maxHold, h.releaseMark), Version: -1})
		}
		ops = append(ops, &zk.DeleteRequest{Path: h.path, Version: -1})
	}
	finish := func() {
		for _, h := range holds {
			h.l.finish(c, h.path, "", h.session)
		}
	}
	// A refused transaction deleted nothing, so a late answer of any error
	// leaves every node to finish. A node already gone finishes at once.
	late := func(r zkclient.Reply[[]zk.MultiResponse]) {
		// mutant: set-release-late
		if r.Err != nil {
			finish()
		}
	}
	r := c.Multi(ctx, ops, nil, late)
	switch {
	case r.Err == nil:
		for _, h := range holds {
			h.l.debug("deleted with others", h.path)
		}
		return nil
	case zkclient.SessionGone(r.Err): // it took every node with it
		return nil
	case abandoned(r.Err): // the request goes on; late takes its outcome
		return fmt.Errorf("delete %d nodes: %w; %w", len(holds), r.Err, errFinishing)
	case zkclient.ConnectionLoss(r.Err):
		// mutant: set-release-lost
		finish()
		return fmt.Errorf("delete %d nodes: %w; %w", len(holds), r.Err, errFinishing)
	}
	return fmt.Errorf("delete %d nodes: %w", len(holds), r.Err)
}

// nodeGone reports errors after which a node of ours is surely gone.
func nodeGone(err error) bool { return errors.Is(err, zk.ErrNoNode) || zkclient.SessionGone(err) }

// finish deletes path in the background, while session lasts. When path is
// empty, it deletes every node carrying guid, from a create whose outcome
// we never learned.
func (l *RWLock) finish(c *zkclient.Client, path, guid string, session int64) {
	start, _ := l.reserveFinish(c)
	start(path, guid, session)
}

// reserveFinish counts a background deletion before it is known to be
// needed. start runs it, or cancel gives the reservation back. cancel is a
// no-op after start.
func (l *RWLock) reserveFinish(c *zkclient.Client) (start func(path, guid string, session int64), cancel func()) {
	l.background.Add(1)
	c.Ref()
	var once sync.Once
	start = func(path, guid string, session int64) {
		once.Do(func() {
			go func() {
				defer l.background.Done()
				defer c.Unref()
				l.finishNow(c, path, guid, session)
			}()
		})
	}
	cancel = func() {
		once.Do(func() {
			c.Unref()
			l.background.Done()
		})
	}
	return start, cancel
}

// finishCreate receives the outcome of a create its caller stopped waiting
// for, and makes sure the node does not outlive the call. The node, if any,
// belongs to the session that served the create. If that is unknown, it
// belongs to the one the client has now, since an older session took its
// nodes with it.
func (l *RWLock) finishCreate(c *zkclient.Client, r zkclient.Reply[string], guid string) {
	session := r.Session
	if session == 0 {
		session = c.Conn().SessionID()
	}
	switch {
	case r.Err == nil:
		l.finish(c, r.V, "", session)
	case zkclient.ConnectionLoss(r.Err):
		l.finish(c, "", guid, session)
	}
}

func (l *RWLock) finishNow(c *zkclient.Client, path, guid string, session int64) {
	var retry zkclient.Backoff
	for {
		// Not a clock. A session lives on across any number of short
		// disconnections. Only the client's reconnection tells whether the
		// server expired it. go-zookeeper then has a new session id.
		if c.Conn().SessionID() != session {
			return
		}
		err := l.deleteMine(c, path, guid)
		switch {
		case err == nil, nodeGone(err):
			l.debug("finished deleting in the background", path+guid)
			return
		case !zkclient.ConnectionLoss(err):
			l.log.Warn("rwlock: cannot delete lock node; it goes when its session ends",
				"lock", l.path, "node", path, "guid", guid, "err", err)
			return
		}
		if retry.Wait(context.Background(), c.Conn()) != nil {
			return // the connection was closed, which ends its session
		}
	}
}

// deleteMine deletes path, or every child of the lock directory that
// carries guid.
func (l *RWLock) deleteMine(c *zkclient.Client, path, guid string) error {
	ctx := context.Background()
	if path != "" {
		return c.Delete(ctx, path, nil).Err
	}
	r := c.Children(ctx, l.path)
	if r.Err != nil {
		return r.Err
	}
	for _, name := range r.V {
		if g, ok := lockname.GUID(name); ok && g == guid {
			if err := c.Delete(ctx, l.path+"/"+name, nil).Err; err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
	}
	return nil
}
