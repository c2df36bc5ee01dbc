package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// mkdirs creates the lock directory and its missing parents as containers,
// which the server deletes once they are empty again, or as persistent
// nodes on a server that has no containers (before 3.5.3). In a kazoo
// dialect the lock directory itself is persistent (see
// Dialect.persistentDir); its parents stay containers, which the server
// does not reap while they have a child. It remembers the directories it
// created: a container that never had a child is never reaped, so those we
// cannot create our node in must go again (removeCreatedDirs).
func (a *acquisition) mkdirs(ctx context.Context) error {
	l := a.l
	for i := 1; i <= len(l.path); i++ {
		if i < len(l.path) && l.path[i] != '/' {
			continue
		}
		dir := l.path[:i]
		var r zkclient.Reply[string]
		if l.noContainers.Load() || dir == l.path && l.dialect.persistentDir() {
			r = a.c.Create(ctx, dir, nil, zk.FlagPersistent, l.acl, nil, nil)
		} else {
			r = a.c.CreateContainer(ctx, dir, l.acl)
		}
		switch {
		case zkclient.Unimplemented(r.Err) && !l.noContainers.Swap(true):
			i-- // again, as a persistent node
		case r.Err == nil:
			a.created = append(a.created, dir)
		case errors.Is(r.Err, zk.ErrNoAuth):
			a.removeCreatedDirs()
			// The refusal is the parent's ACL's, which WithACL does not set.
			return fmt.Errorf("create %s: %w (the ACL of %s does not let this client create in it: "+
				"authenticate as a client it lets, with (*zk.Conn).AddAuth, or have its owner grant CREATE)", dir, r.Err, parentOf(dir))
		case !errors.Is(r.Err, zk.ErrNodeExists):
			return fmt.Errorf("create %s: %w", dir, r.Err)
		}
	}
	return nil
}

// recheckDeletable is called once the create found no lock directory and
// mkdirs made it, or found it made by someone else: the check before
// queueing found no directory, so its yes says nothing of this one, and the
// connection forgets it (the next lock on it checks again). In a directory
// this acquisition made, with the lock's own ACL, it checks again at once,
// unless that ACL lets anyone delete: otherwise the client may be unable
// to, and would leave a node it cannot remove.
func (a *acquisition) recheckDeletable(ctx context.Context) error {
	a.c.Forget(a.l.path)
	if !slices.Contains(a.created, a.l.path) || worldCanDelete(a.l.acl) {
		return nil
	}
	a.l.deletable.Store(false)
	if err := a.l.checkDeletable(ctx, a.c); err != nil {
		a.removeCreatedDirs()
		return err
	}
	return nil
}

// removeCreatedDirs deletes, deepest first, the directories this
// acquisition created, when it cannot use them.
func (a *acquisition) removeCreatedDirs() {
	for _, dir := range slices.Backward(a.created) {
		a.c.Delete(context.Background(), dir, nil)
	}
	a.created = nil
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
