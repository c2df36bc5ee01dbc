package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A node of a live session must never be left behind: it would block every
// later waiter for as long as the session lives. When a deletion cannot be
// finished by the call that wanted it (its context ended, the connection
// dropped, a create's answer was lost), finish hands it to a goroutine that
// retries across reconnections. The goroutine stops as soon as the node is
// gone, or the session that owns it is gone (ZooKeeper then deletes the node
// itself, and the client learns it when it reconnects), or the connection
// is closed.

// errFinishing marks a deletion that goes on in the background.
var errFinishing = errors.New("the deletion goes on in the background")

// deleteNode deletes one of our nodes: nil once it is gone. When ctx ends
// or the connection fails first, a background goroutine finishes the job
// and the error wraps errFinishing; any other error is the server's refusal,
// and the node stays.
//
// With markHeld, the node's data is marked held in the same transaction
// (see internal/lockname/data.go): the waiter behind it, whose data watch
// fires on the mark, learns that every node before it is gone, and need
// not list the whole queue to find out. A queue of writers then drains in constant time
// per handoff instead of time proportional to its length.
func (l *RWLock) deleteNode(ctx context.Context, c *zkclient.Client, path string, session int64, markHeld bool) error {
	// An answer that comes after ctx ended, and is not the node's end,
	// leaves the node to finish: a connection lost, or a held mark refused
	// (an ACL without WRITE), where a plain delete may pass.
	late := func(r zkclient.Reply[struct{}]) {
		// mutant: release-late
		if r.Err != nil && !nodeGone(r.Err) {
			l.finish(c, path, "", session)
		}
	}
	var r zkclient.Reply[struct{}]
	if markHeld {
		r = c.SetAndDelete(ctx, path, lockname.Data(l.owner, l.maxHold, true, false), late)
		if r.Err != nil && !nodeGone(r.Err) && !zkclient.ConnectionLoss(r.Err) && ctx.Err() == nil {
			r = c.Delete(ctx, path, late) // an ACL that forbids writing data: just delete it
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

// abandoned reports whether err is a request's context's, returned because
// the context ended before the answer came: the request goes on, and its
// late callback gets the answer. An answer that came is judged by what it
// says, even if the context has ended since. (Checked before
// ConnectionLoss, which context.DeadlineExceeded also satisfies, being a
// net.Error.)
func abandoned(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// deleteNodes deletes the nodes of gs, grants on c that own held nodes, in
// one transaction, and marks those held that Release would mark (a node's
// mark is true whatever else the transaction deletes: its grant was made
// when every node before it had gone). It returns as deleteNode does: nil
// once all are gone (or the session that owned them is); an error
// wrapping errFinishing when ctx ends or the connection fails first, and a
// background goroutine finishes each deletion; any other error is the
// server's refusal of the whole transaction (a node already gone, an ACL),
// and every node stays.
func deleteNodes(ctx context.Context, c *zkclient.Client, gs []*Grant) error {
	ops := make([]any, 0, 2*len(gs))
	for _, g := range gs {
		if g.markRelease {
			ops = append(ops, &zk.SetDataRequest{Path: g.node, Data: lockname.Data(g.l.owner, g.l.maxHold, true, false), Version: -1})
		}
		ops = append(ops, &zk.DeleteRequest{Path: g.node, Version: -1})
	}
	finish := func() {
		for _, g := range gs {
			g.l.finish(c, g.node, "", g.session)
		}
	}
	// A refused transaction deleted nothing, so a late answer of any error
	// leaves every node to finish (a node already gone finishes at once).
	late := func(r zkclient.Reply[[]zk.MultiResponse]) {
		// mutant: set-release-late
		if r.Err != nil {
			finish()
		}
	}
	r := c.Multi(ctx, ops, nil, late)
	switch {
	case r.Err == nil:
		for _, g := range gs {
			g.l.debug("deleted with others", g.node)
		}
		return nil
	case zkclient.SessionGone(r.Err): // it took every node with it
		return nil
	case abandoned(r.Err): // the request goes on; late takes its outcome
		return fmt.Errorf("delete %d nodes: %w; %w", len(gs), r.Err, errFinishing)
	case zkclient.ConnectionLoss(r.Err):
		// mutant: set-release-lost
		finish()
		return fmt.Errorf("delete %d nodes: %w; %w", len(gs), r.Err, errFinishing)
	}
	return fmt.Errorf("delete %d nodes: %w", len(gs), r.Err)
}

// nodeGone reports errors after which a node of ours is surely gone.
func nodeGone(err error) bool { return errors.Is(err, zk.ErrNoNode) || zkclient.SessionGone(err) }

// finish deletes path, or, when path is empty, every node carrying guid (a
// create whose outcome we never learned), in the background, while session
// lasts.
func (l *RWLock) finish(c *zkclient.Client, path, guid string, session int64) {
	start, _ := l.reserveFinish(c)
	start(path, guid, session)
}

// reserveFinish counts a background deletion before it is known to be
// needed: start runs it, or cancel (a no-op after start) gives the
// reservation back.
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
// belongs to the session that served the create, or, if that is unknown,
// to the one the client has now: an older one took its nodes with it.
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
		// Not a clock: a session lives on across any number of short
		// disconnections, and only the client's reconnection tells whether
		// the server expired it (go-zookeeper then has a new session id).
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
			return // closed: closing a connection ends its session
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

// checkDeletable makes sure, once per lock directory and connection, that
// this client may delete nodes in the lock directory before it queues
// there: deleting needs the DELETE permission on the directory, and a node
// that cannot be deleted would block everyone until its session ends.
// ZooKeeper checks the permission before it looks for the node, so
// deleting a name that cannot exist tells, in one request, without a
// trace. The connection's client remembers a yes for every lock on it (see
// zkclient.Client.Check), and the lock too, for when nothing holds the
// client; a refusal is never remembered, so that AddAuth can still let
// the client in. A missing directory is created with the lock's own ACL;
// where that ACL does not let everyone delete, the check is made again
// once it exists (see recheckDeletable).
func (l *RWLock) checkDeletable(ctx context.Context, c *zkclient.Client) error {
	if l.deletable.Load() {
		return nil
	}
	yes, err := c.Check(ctx, l.path, func() (bool, error) {
		err := c.Delete(ctx, l.path+"/zkrwlock-acl-check-"+lockname.NewGUID(), nil).Err
		return errors.Is(err, zk.ErrNoNode), err
	})
	switch {
	case yes:
		l.deletable.Store(true)
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("%w: this client may not delete nodes in %s (the directory's ACL lacks DELETE for it), "+
			"so it could never release a grant there; if the ACL names a user (digest) or another scheme, authenticate as it "+
			"with (*zk.Conn).AddAuth before locking", zk.ErrNoAuth, l.path)
	}
	return nil // any other failure, the acquisition meets again
}

// worldCanDelete reports whether acl lets anyone delete children.
func worldCanDelete(acl []zk.ACL) bool {
	return slices.ContainsFunc(acl, func(a zk.ACL) bool {
		return a.Scheme == "world" && a.ID == "anyone" && a.Perms&zk.PermDelete != 0
	})
}

// dropTwins deletes, and leaves out of children, the nodes other than ours
// that carry our guid: a create whose answer was lost and that was carried
// out only after the listing adopt looked at (a server slow to pass it on),
// so that we created again. Left alone, such a twin would stand in our own
// way, and outlive the acquisition.
func (a *acquisition) dropTwins(children []string) []string {
	twins := 0
	for _, name := range children {
		if g, ok := lockname.GUID(name); ok && g == a.guid && name != a.node {
			a.l.finish(a.c, a.l.path+"/"+name, "", a.session)
			twins++
		}
	}
	if twins == 0 {
		return children
	}
	return slices.DeleteFunc(slices.Clone(children), func(name string) bool {
		g, ok := lockname.GUID(name)
		return ok && g == a.guid && name != a.node
	})
}

// adopt settles a create whose outcome we did not learn: the node that
// carries our guid is ours if the session we have now owns it (its
// ephemeral owner says so, read with the data watch we need anyway). If
// a lost create was retried and both happened, the first is kept and the
// others are deleted. With no such node, we create again.
func (a *acquisition) adopt(ctx context.Context, r zkclient.Reply[[]string]) (step, error) {
	a.unsure = false
	var mine []lockNode
	for _, name := range r.V {
		if g, ok := lockname.GUID(name); ok && g == a.guid {
			if n, ok := parseNode(name); ok {
				mine = append(mine, n)
			}
		}
	}
	slices.SortFunc(mine, queueOrder)
	for i, n := range mine {
		path := a.l.path + "/" + n.name
		if i > 0 {
			a.l.finish(a.c, path, "", r.Session)
			continue
		}
		w, err := a.watchOwn(ctx, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			a.unsure = true
			return a.after(err)
		case w.stat.EphemeralOwner != w.session || w.session == 0:
			// A node of a session that is gone, and takes it along.
		default:
			a.node, a.path, a.session, a.own, a.tok = n.name, path, w.session, w.watch, w.stat.Czxid
			a.l.debug("found the node of a create whose answer was lost", path)
			return stepList, nil
		}
	}
	return stepCreate, nil
}
