package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// mkdirs creates the lock directory and its missing parents as containers.
// The server deletes a container once it is empty again. On a server that
// has no containers, before 3.5.3, it creates persistent nodes. In a kazoo
// dialect the lock directory itself is persistent (see
// Dialect.persistentDir). Its parents stay containers, which the server
// does not reap while they have a child. mkdirs remembers the directories
// it created. A container that never had a child is never reaped. So those
// we cannot create our node in must go again (see removeCreatedDirs).
func (m *member) mkdirs(ctx context.Context) error {
	l := m.l
	for i := 1; i <= len(l.path); i++ {
		if i < len(l.path) && l.path[i] != '/' {
			continue
		}
		dir := l.path[:i]
		var r zkclient.Reply[string]
		if l.noContainers.Load() || dir == l.path && l.dialect.persistentDir() {
			r = m.a.c.Create(ctx, dir, nil, zk.FlagPersistent, l.acl, nil, nil)
		} else {
			r = m.a.c.CreateContainer(ctx, dir, l.acl)
		}
		switch {
		case zkclient.Unimplemented(r.Err) && !l.noContainers.Swap(true):
			i-- // again, as a persistent node
		case r.Err == nil:
			m.created = append(m.created, dir)
		case errors.Is(r.Err, zk.ErrNoAuth):
			m.removeCreatedDirs()
			// The refusal is the parent's ACL's, which WithACL does not set.
			return fmt.Errorf("create %s: %w: the ACL of %s does not let this client create in it "+
				"(add an identity it allows with zk.Conn.AddAuth, or have its owner allow CREATE)", dir, r.Err, parentOf(dir))
		case !errors.Is(r.Err, zk.ErrNodeExists):
			return fmt.Errorf("create %s: %w", dir, r.Err)
		}
	}
	return nil
}

// recheckDeletable runs once the create found no lock directory, and mkdirs
// made it or found it made by someone else. The check before queueing found
// no directory, so its yes says nothing of this one. So the connection
// forgets that yes, and the next lock on it checks again. In a directory
// this acquisition made, with the lock's own ACL, it checks again at once.
// The client may be unable to delete there, and would leave a node it
// cannot remove. It skips that check where the ACL lets anyone delete.
func (m *member) recheckDeletable(ctx context.Context) error {
	m.a.c.Forget(m.l.path)
	if !slices.Contains(m.created, m.l.path) || worldCanDelete(m.l.acl) {
		return nil
	}
	m.l.deletable.Store(false)
	if err := m.l.checkDeletable(ctx, m.a.c); err != nil {
		m.removeCreatedDirs()
		return err
	}
	return nil
}

// removeCreatedDirs deletes, deepest first, the directories this
// acquisition created, when it cannot use them.
func (m *member) removeCreatedDirs() {
	for _, dir := range slices.Backward(m.created) {
		m.a.c.Delete(context.Background(), dir, nil)
	}
	m.created = nil
}

// parentOf returns the parent of a path below the root.
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "/"
}

// cannotCreate explains a lock directory that refused this client's node.
func cannotCreate(dir string, err error) error {
	return fmt.Errorf("create a node in %s: %w (its ACL does not let this client create in it: authenticate as a client "+
		"it lets, with (*zk.Conn).AddAuth; WithACL sets the ACL only of directories the lock makes)", dir, err)
}

// checkDeletable makes sure that this client may delete nodes in the lock
// directory before it queues there. It checks once per lock directory and
// connection. Deleting needs the DELETE permission on the directory. A node
// that cannot be deleted would block everyone until its session ends.
//
// ZooKeeper checks the permission before it looks for the node. So deleting
// a name that cannot exist tells, in one request, without a trace. The
// connection's client remembers a yes for every lock on it (see
// zkclient.Client.Check). The lock remembers it too, for when nothing holds
// the client. A refusal is never remembered, so that AddAuth can still let
// the client in. A missing directory is created with the lock's own ACL.
// Where that ACL does not let everyone delete, the check is made again once
// the directory exists (see recheckDeletable).
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
		// The advice for a Go program is in one parenthesis that names
		// zk.Conn.AddAuth. The command line replaces it with its own.
		return fmt.Errorf("%w: this client may not delete nodes in %s, so it could never release a grant there "+
			"(no entry of the directory's ACL allows DELETE to an identity this client has: add one, "+
			"such as digest user:password, with zk.Conn.AddAuth before locking)", zk.ErrNoAuth, l.path)
	}
	return nil // any other failure, the acquisition meets again
}

// worldCanDelete reports whether acl lets anyone delete children.
func worldCanDelete(acl []zk.ACL) bool {
	return slices.ContainsFunc(acl, func(a zk.ACL) bool {
		return a.Scheme == "world" && a.ID == "anyone" && a.Perms&zk.PermDelete != 0
	})
}
