package rwlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
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
	// Family is whose names the node carries: DialectKazoo for kazoo's
	// Lock and WriteLock alike; for native names, the lock's dialect if it
	// makes them too (DialectKazooPatterns).
	Family Dialect
	Peer   bool // not made by zkrwlock's guarded names (Curator, kazoo, zk.Lock): Owner is its data as text
	// Readers is, for this process's own shared read node (see
	// WithReadCoalescing), how many of its readers hold or wait on it
	// (the node is one entry); 0 for every other node.
	Readers int
	// MaxHold is the hold limit (WithMaxHold) of the lock that made the
	// node, from its data; 0 for none, and for a peer's node. A holder's
	// node goes at MaxHold after its grant, by the holder's clock, so not
	// before Created+MaxHold.
	MaxHold time.Duration
	// Set is, for a node LockAll made, the lock directories of the other
	// locks of its set, as many as its data names (it names up to 8);
	// nil for a node in no set.
	Set []string
	// SetSize is how many locks that set has, this one included; 0 for a
	// node in no set. It exceeds len(Set)+1 when the data names only some.
	SetSize int
	// Blind is true for a peer's node whose library does not count some
	// other node of the queue in its own: between them mutual exclusion
	// does not hold (a mixed fleet: see WithDialect). A peer's Held is
	// judged by its library's own rules, over the nodes it counts.
	Blind bool
}

// Queue returns the holders and then the waiters of the lock, in queue
// order, read from ZooKeeper now (one list and one read per node; nodes
// that vanish meanwhile are left out). Peers' nodes are entries too, with
// their family; children that are not lock nodes of any family are
// ignored. A lock directory that does not exist is an empty queue.
func (l *RWLock) Queue(ctx context.Context) ([]Entry, error) {
	if l.conn == nil {
		return nil, &opError{"queue", l.path, fmt.Errorf("%w: the RWLock was not made by New", ErrInvalidArgument)}
	}
	c := zkclient.For(l.conn)
	defer c.Unref()
	nodes, _, err := l.listQueue(ctx, c)
	if err != nil {
		return nil, &opError{"queue", l.path, err}
	}

	entries := make([]Entry, len(nodes))
	found := make([]bool, len(nodes))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(32)
	for i, n := range nodes {
		eg.Go(func() error {
			path := l.path + "/" + n.name
			r := c.Get(ectx, path)
			if errors.Is(r.Err, zk.ErrNoNode) {
				return nil
			}
			if r.Err != nil {
				return fmt.Errorf("read %s: %w", path, r.Err)
			}
			mode := n.mode
			if mode == Write && n.ours && lockname.Downgraded(r.V.Data) {
				mode = Read
			}
			entries[i] = Entry{
				Node: path, Mode: mode, Seq: n.seq, SessionID: r.V.Stat.EphemeralOwner,
				Owner: lockname.Owner(r.V.Data), Created: time.UnixMilli(r.V.Stat.Ctime),
				Family: n.family, Peer: !n.ours, Readers: l.coalesce.readers(path),
			}
			if n.ours {
				entries[i].MaxHold = lockname.MaxHold(r.V.Data)
				entries[i].Set, entries[i].SetSize = lockname.Set(r.V.Data)
			}
			found[i] = true
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}

	queue := entries[:0]
	var listed []lockNode // the nodes of queue, as named
	var modes []Mode
	for i, e := range entries {
		if found[i] {
			queue = append(queue, e)
			listed = append(listed, nodes[i])
			modes = append(modes, e.Mode)
		}
	}
	for i, h := range holding(listed, modes) {
		queue[i].Held = h
		if !listed[i].ours {
			_, queue[i].Blind = peerView(listed, i)
		}
	}
	return queue, nil
}

// holding judges which of nodes, in queue order, hold the lock: the first,
// and each reader with no writer before it, modes[i] being nodes[i]'s mode
// (Read for a writer of ours that was downgraded); a peer's node as its
// library judges it (peerView).
func holding(nodes []lockNode, modes []Mode) []bool {
	held := make([]bool, len(nodes))
	writerBefore := false
	for i, n := range nodes {
		held[i] = i == 0 || modes[i] == Read && !writerBefore
		if !n.ours {
			held[i], _ = peerView(nodes, i)
		}
		writerBefore = writerBefore || modes[i] == Write
	}
	return held
}

// listQueue lists the lock directory's lock nodes of every family, in
// queue order (none if the directory is missing), and notes the peers
// among them. dir is the directory's czxid (0 if it is missing): a
// directory made anew numbers its nodes from 0 again.
func (l *RWLock) listQueue(ctx context.Context, c *zkclient.Client) (nodes []lockNode, dir int64, err error) {
	children := c.List(ctx, l.path)
	if errors.Is(children.Err, zk.ErrNoNode) {
		return nil, 0, nil
	}
	if children.Err != nil {
		return nil, 0, children.Err
	}
	var peers uint16
	for _, name := range children.V.Names {
		if n, ok := parseNode(name); ok {
			n.family = l.readAs(n.family) // peerView judges kazoo's view of it as our dialect declares
			nodes = append(nodes, n)
			if !n.ours {
				peers |= 1 << n.marker
			}
		}
	}
	l.notePeers(peers)
	slices.SortFunc(nodes, queueOrder)
	return nodes, children.V.Stat.Czxid, nil
}

// peerView judges the peer's node listed[i] as its library does: it holds
// when none of the nodes before it that the library counts is in its way
// (a writer's name blocks everyone after it, any name a writer; the
// library reads no mark, so a downgraded writer of ours is a writer). blind
// is true if the library does not count some other node of the queue.
func peerView(listed []lockNode, i int) (held, blind bool) {
	p := listed[i]
	held = true
	for j, q := range listed {
		if j == i {
			continue
		}
		if lockname.Markers[p.marker].SeenBy&lockname.Family(q.family).Bit() == 0 {
			blind = true
			continue
		}
		if j < i && (p.mode == Write || q.mode == Write) {
			held = false
		}
	}
	return held, blind
}
