// Package rwlock implements distributed read/write locks on Apache
// ZooKeeper.
//
// A lock is a directory, and each acquisition creates an ephemeral
// sequential child in it, _c_<guid>-read-<seq> or _c_<guid>-write-<seq>.
// The sequence numbers are the queue. A reader holds the lock when no
// writer precedes it, and a writer when nothing precedes it. Otherwise a
// reader watches the nearest writer before it, and a writer its immediate
// predecessor. So the lock is FIFO, and a waiting writer blocks later
// readers. Every waiter watches one node, so there is no herd effect. A
// dead client's nodes vanish with its session. An acquisition that finds
// nobody in its way takes one round trip, and a queue of writers drains in
// constant time per handoff. The file docs/guarantees.md says how.
//
//	l, err := rwlock.New(conn, "/locks/schema")
//	g, err := l.RLock(ctx)
//	defer g.Release(ctx)
//
// A [Grant] can end without Release, when its node is deleted, when its
// session expires, or when the lock's own lease clock can no longer show
// the session alive for long enough. [Grant.Done] closes, and [Grant.Err]
// fails, before another client could be granted the lock. The fencing
// token, [Grant.Token], lets the store a lock protects turn away a holder
// that missed its loss. For data kept in ZooKeeper itself, [Grant.Multi]
// commits writes only while the grant's node exists. The option
// [WithMaxHold] ends every grant after a limit, and tells its holder first.
//
// The function [LockAll] takes several locks in one ZooKeeper transaction,
// without deadlock. Reentrancy travels in the context, since Go has no
// goroutine identity; see [ContextWithGrant]. A write grant can be
// downgraded in place, with [Grant.Downgrade]. A lock path can be shared
// with Curator, kazoo and go-zookeeper's zk.Lock, with [WithDialect].
//
// Failures leave nothing behind. A cancelled or failed acquisition deletes
// its node. A deletion cut short by a connection failure, or a create whose
// response was lost, is finished once the client reconnects.
//
// An [Observer] hears of every acquisition and grant as it ends. A sampled
// contention profile records where the program waited, like Go's mutex
// profile; see [SetContentionProfileRate].
package rwlock
