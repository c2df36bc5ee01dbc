// Package rwlock implements distributed read/write locks on Apache
// ZooKeeper.
//
// A lock is a directory: each acquisition creates an ephemeral sequential
// child, _c_<guid>-read-<seq> or _c_<guid>-write-<seq>, and the sequence
// numbers are the queue. A reader holds the lock when no writer precedes
// it, and otherwise watches the nearest preceding writer; a writer holds it
// when nothing precedes it, and otherwise watches its immediate
// predecessor. So the lock is FIFO, a
// waiting writer blocks later readers, every waiter watches one node (no
// herd effect), and a dead client's nodes vanish with its session.
//
// An acquisition that finds nobody in its way takes one round trip: the
// listing goes out right behind the create. When a watched node goes, the
// listing taken after our own create usually proves the way clear without
// another request. Where it cannot (a writer with more nodes ahead than its
// predecessor), the predecessor tells:
// a writer that waited marks its node held in the transaction that deletes
// it, which proves that nothing before it is left, so a queue of writers
// drains in constant time per handoff instead of listing the queue each time.
//
//	l, err := rwlock.New(conn, "/locks/schema")
//	g, err := l.RLock(ctx)
//	defer g.Release(ctx)
//
// A [Grant] can end without Release: when its node is deleted, when its
// session expires, or when the lock's own lease clock can no longer show the
// session alive for long enough: a write the server answered proves the
// session alive for a session timeout from the moment it was sent, and a
// grant is lost when only a quarter of that is left (see [Grant.Done]).
// [Grant.Done] closes, and [Grant.Err] fails, before another client could be
// granted the lock; [RWLock.WithWrite] and [RWLock.WithRead] cancel their
// function's context then. The [Grant.Token] (the node's czxid) lets the
// store a lock protects turn away a holder that missed it; for data kept
// in ZooKeeper itself, [Grant.Multi] commits writes only while the grant's
// node exists. [WithMaxHold] ends every grant by itself after a limit,
// telling its holder first.
//
// [LockAll] takes several locks in one ZooKeeper transaction: callers that
// take all their locks so cannot deadlock, whatever the order of the paths.
// [ReleaseAll] releases them in one transaction.
//
// Reentrancy travels in the context, since Go has no goroutine identity:
// the contexts handed out by WithRead, WithWrite and ReadGroup, or made by
// [ContextWithGrant], carry their grant, and Lock or RLock with such a
// context returns a nested grant without a new node. A write grant can be
// downgraded to a read grant in place ([Grant.Downgrade]).
//
// A lock path can be shared with other lock libraries (Curator, kazoo,
// go-zookeeper's zk.Lock): [WithDialect] names our nodes as the peer family
// on the path counts them, and every lock, whatever its dialect, queues
// behind every family's nodes (see [Dialect]).
//
// Failures leave nothing behind: a cancelled or failed acquisition deletes
// its node, and a deletion interrupted by a connection failure, or a create
// whose response was lost, is finished once the client reconnects.
//
// An [Observer] hears of every acquisition and grant as it ends. The
// package github.com/zkrwlock/rwlock/stats adds them up (acquisitions by
// mode and outcome, wait and hold histograms, grants lost by cause,
// requests), and the package rwlocktest reports those from a benchmark
// through testing.B.ReportMetric; the module
// github.com/zkrwlock/rwlock/otelrwlock exports them to OpenTelemetry. Like
// Go's mutex profile, a sampled contention profile records where the
// program waited ([SetContentionProfileRate]); the module
// github.com/zkrwlock/rwlock/lockprof writes it for go tool pprof.
package rwlock
