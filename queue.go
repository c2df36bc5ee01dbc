package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"
)

// Entry is one node in a lock's queue.
type Entry struct {
	Node      string    // full path of the lock node
	Mode      Mode      // Read for a writer that has been downgraded
	Seq       int32     // sequence number: the queue order
	SessionID int64     // the ZooKeeper session that owns the node
	Owner     string    // who, as set by WithOwner (default host:pid)
	Held      bool      // holds the lock now; false while waiting
	Created   time.Time // when the node was created, by the server's clock
}

// Queue returns the holders and then the waiters of the lock, in queue
// order, read from ZooKeeper now (one list and one read per node; nodes
// that vanish meanwhile are left out). Children that are not lock nodes are
// ignored. A lock directory that does not exist is an empty queue.
func (l *RWLock) Queue(ctx context.Context) ([]Entry, error) {
	children, err := call(ctx, func() ([]string, error) {
		children, _, err := l.conn.Children(l.path)
		return children, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rwlock: queue %s: %w", l.path, err)
	}
	var nodes []lockNode
	for _, name := range children {
		if n, ok := parseNode(name); ok {
			nodes = append(nodes, n)
		}
	}
	slices.SortFunc(nodes, queueOrder)

	entries := make([]Entry, len(nodes))
	found := make([]bool, len(nodes))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(32)
	for i, n := range nodes {
		eg.Go(func() error {
			path := l.path + "/" + n.name
			r, err := call(ectx, func() (watched, error) {
				data, stat, err := l.conn.Get(path)
				return watched{data: data, stat: stat}, err
			}, nil)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("rwlock: queue %s: %w", path, err)
			}
			mode := n.mode
			if mode == Write && downgraded(r.data) {
				mode = Read
			}
			entries[i] = Entry{
				Node: path, Mode: mode, Seq: n.seq, SessionID: r.stat.EphemeralOwner,
				Owner: ownerOf(r.data), Created: time.UnixMilli(r.stat.Ctime),
			}
			found[i] = true
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}

	queue := entries[:0]
	var before, writerBefore bool
	for i, e := range entries {
		if !found[i] {
			continue
		}
		e.Held = !before || e.Mode == Read && !writerBefore
		before = true
		writerBefore = writerBefore || e.Mode == Write
		queue = append(queue, e)
	}
	return queue, nil
}
