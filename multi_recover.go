package rwlock

import (
	"context"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// How a set (multi.go) recovers: a transaction whose answer was lost, a
// member that needs a new node, a set that fails or is cancelled. Every
// node the set made is deleted, and none of its old transaction can turn
// up later as a node the set would queue behind.

// settle, after a multi whose answer was lost, waits for the session and
// syncs the server it is on with the leader before the members look for
// their nodes by guid (adopt): the transaction either committed before the
// sync, and every listing after it shows all of its nodes, or it never will
// (a request of the old connection that reaches the leader after the
// session has moved is refused), and none shows any. Without the sync, a
// server behind the leader could show none of a transaction it applies a
// moment later, and the set would queue again in front of its own nodes.
func (s *set) settle(ctx context.Context) ([]step, error) {
	next := s.unsure(stepList) // if we give up meanwhile, abort deletes by guid
	var retry zkclient.Backoff
	for {
		if err := retry.Wait(ctx, s.c.Conn()); err != nil {
			return nil, err
		}
		r := s.c.Sync(s.members[0].counting(ctx))
		switch {
		case r.Err == nil && r.Session != 0:
			return next, nil
		case r.Err == nil || zkclient.ConnectionLoss(r.Err):
			continue
		default:
			return s.after(r.Err)
		}
	}
}

// unsure marks every member's create of unknown outcome: a node with the
// set's guid may exist in every directory, or in none.
func (s *set) unsure(next step) []step {
	for _, a := range s.members {
		a.unsure = true
	}
	return slices.Repeat([]step{next}, len(s.members))
}

// after maps a failed request to every member's next step.
func (s *set) after(err error) ([]step, error) {
	next, err := s.members[0].after(err)
	return slices.Repeat([]step{next}, len(s.members)), err
}

// finishCreate receives the outcome of a multi its caller stopped waiting
// for, and makes sure no node outlives the call (see RWLock.finishCreate).
func (s *set) finishCreate(r zkclient.Reply[[]zk.MultiResponse]) {
	for i, a := range s.members {
		one := zkclient.Reply[string]{Session: r.Session, Err: r.Err}
		if r.Err == nil {
			one.V = r.V[i].String
		}
		a.l.finishCreate(a.c, one, s.guid)
	}
}

// requeue readies the set for a new transaction. A member needs a new
// node when the session was replaced (its nodes went with it), or when its
// node is not found after a lost answer (then none of the set's are: see
// settle) or was deleted by hand. What is left of the others is deleted:
// by path where it is known, by guid for a member still unsure. The guid
// is kept where no member is unsure, so that no node of the old
// transaction can turn up later as a stranger the set would queue behind;
// where one is, the set takes a new guid, so that deleting by the old one
// cannot touch its new nodes.
func (s *set) requeue(sessionReplaced bool) {
	fresh := sessionReplaced
	for _, a := range s.members {
		switch session := a.c.Conn().SessionID(); {
		case a.node != "" && a.session == session:
			a.l.finish(a.c, a.path, "", a.session)
		case a.unsure:
			a.l.finish(a.c, "", s.guid, session)
			fresh = true
		}
	}
	if fresh {
		s.guid = lockname.NewGUID()
	}
	for _, a := range s.members {
		a.requeue(s.guid)
	}
}

// abort deletes every node the set made, in one transaction when it can,
// and returns cause joined with a failed deletion's error.
func (s *set) abort(ctx context.Context, cause error) error {
	if zkclient.SessionGone(cause) {
		return cause // the nodes went with the session
	}
	var ops []any
	for _, a := range s.members {
		if a.node == "" || a.unsure {
			ops = nil
			break
		}
		ops = append(ops, &zk.DeleteRequest{Path: a.path, Version: -1})
	}
	if len(ops) == len(s.members) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.members[0].l.cleanupTimeout)
		r := s.c.Multi(s.members[0].counting(dctx), ops, nil, nil)
		cancel()
		if r.Err == nil && r.Session == s.members[0].session {
			for _, a := range s.members {
				a.node = ""
			}
			return cause
		}
	}
	// Some node is not known, or the transaction failed: each member
	// deletes its own, as a single acquisition does.
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, a := range s.members {
		wg.Go(func() { errs[i] = a.abort(ctx, cause) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != cause {
			return err // cause, joined with the deletion's error
		}
	}
	return cause
}
