package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// NewLocker returns a [sync.Locker] on l's write lock, for code written
// against the standard interface, as etcd's concurrency.NewLocker is.
//
// Lock blocks until it holds the lock exclusively. It rides out connection
// loss, server restarts and session expiry: each failed attempt is logged
// at warning level on l's logger (see [WithLogger]) and tried again, after
// a pause of up to half a second and once the client has a session. An ACL
// refusal (zk.ErrNoAuth) is tried again too, since an AddAuth or a changed
// ACL cures it. Lock panics only for errors no retry can cure: an error
// wrapping ErrInvalidArgument (l not made by New, or peers on the path
// that do not see its nodes, see [WithDialect]), a *zk.Conn closed by its
// owner, or [ErrSequenceExhausted]. Those are mistakes of the program or
// of the operator, not outages.
//
// Unlock releases the grant, waiting for the deletion at most the cleanup
// timeout (see [WithCleanupTimeout]). It never panics over the server. If
// the deletion is not confirmed in time, it goes on in the background, as
// [Grant.Release] says. If the server refuses it (an ACL changed since the
// lock was taken), Unlock logs the error at warning level, and the node
// stays until its session ends. Unlock of a Locker that is not locked
// panics, as sync.Mutex's does.
//
// What a Locker cannot report: the loss of its grant. ZooKeeper may end a
// grant while Lock's caller still runs, when the session expires or the
// node is deleted (see [Grant.Done]). A caller of Lock cannot learn of it,
// nor get the fencing token. Code that must stop writing on a loss, or
// fence its writes, uses [RWLock.WithWrite] or [RWLock.Lock].
//
// The Locker also excludes its own callers in this process, as a mutex
// held from Lock to Unlock would. So even after a loss its callers
// never overlap one another, and Unlock always releases the grant of the
// Lock it ends. Lockers made by separate calls exclude one another only
// through ZooKeeper.
func NewLocker(l *RWLock) sync.Locker {
	return &locker{l: l, held: make(chan struct{}, 1)}
}

// Why the Locker excludes its own callers too. A grant may be lost while
// its caller still runs, and nothing tells that caller. Another goroutine's
// Lock would then be granted by ZooKeeper at once. Two callers of one
// Locker would be inside together, in one process, where a mutex promises
// otherwise. And Unlock would not know whose grant to release. So one
// token, held from Lock to Unlock, admits one caller at a time. A loss
// then lets in only other processes, which ZooKeeper already allows.
type locker struct {
	l *RWLock

	// held is the token: a Lock sends into it, its Unlock takes it back.
	// A channel, not a sync.Mutex, so that a test in a synctest bubble
	// sees a blocked caller as durably blocked.
	held chan struct{}
	g    atomic.Pointer[Grant] // the grant of the Lock that holds the token
}

func (k *locker) Lock() {
	// mutant: locker-exclusion
	k.held <- struct{}{}
	if k.l == nil {
		<-k.held
		panic(&opError{"lock", "", fmt.Errorf("%w: NewLocker of a nil *RWLock", ErrInvalidArgument)})
	}
	ctx := context.Background()
	var retry zkclient.Backoff
	for {
		g, err := k.l.Lock(ctx)
		if err == nil {
			k.g.Store(g)
			return
		}
		if incurable(err) {
			<-k.held
			panic(err)
		}
		k.l.log.Warn("rwlock: Locker: cannot take the lock; trying again", "lock", k.l.path, "err", err)
		if err := retry.Wait(ctx, k.l.conn); err != nil { // only a closed connection ends this wait
			<-k.held
			panic(&opError{"lock", k.l.path, err})
		}
	}
}

// incurable reports the errors of Lock that no later attempt can cure.
func incurable(err error) bool {
	return errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrSequenceExhausted) ||
		errors.Is(err, zk.ErrClosing) || zkclient.Closed(err)
}

func (k *locker) Unlock() {
	g := k.g.Swap(nil)
	if g == nil {
		panic("rwlock: Unlock of an unlocked Locker")
	}
	// mutant: locker-exclusion-unlock
	defer func() { <-k.held }()
	ctx, cancel := context.WithTimeout(context.Background(), k.l.cleanupTimeout)
	defer cancel()
	if err := ignoreBackground(g.Release(ctx)); err != nil {
		k.l.log.Warn("rwlock: Locker: cannot release the lock; its node goes when its session ends",
			"lock", k.l.path, "node", g.Node(), "err", err)
	}
}
