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
	Seq       int32     // sequence number, which is the queue order
	SessionID int64     // the ZooKeeper session that owns the node
	Owner     string    // who, as set by WithOwner; host:pid by default
	Held      bool      // holds the lock now; false while waiting
	Created   time.Time // when the node was created, by the server's clock
	// Family is whose names the node carries: DialectKazoo for kazoo's Lock
	// and WriteLock alike, and for native names the lock's own dialect if
	// it makes them too, such as DialectKazooPatterns.
	Family Dialect
	Peer   bool // not named by zkrwlock, as a node of Curator, kazoo or zk.Lock is; Owner is then its data as text
	// Readers counts this process's readers that hold or wait on the node,
	// if it is their shared read node, and is 0 for every other node; see
	// WithReadCoalescing.
	Readers int
	// MaxHold is the hold limit of the lock that made the node, from its
	// data; 0 for none, and for a peer's node. The node goes at MaxHold
	// after its grant, by the holder's clock, so not before
	// Created+MaxHold.
	MaxHold time.Duration
	// Set lists, for a node LockAll made, the lock directories of the other
	// locks of its set that its data names, up to 8; nil for no set.
	Set []string
	// SetSize is how many locks that set has, this one included; 0 for no
	// set. It exceeds len(Set)+1 when the data names only some.
	SetSize int
	// Cached marks a node of a lock made with WithCaching, from its data. It
	// may be kept after its release, held by nobody, until someone queues
	// behind it. Whether it is busy or idle only its own process knows.
	Cached bool
	// Blind marks a peer's node whose library does not count some other
	// node of the queue, so mutual exclusion between them does not hold. A
	// peer's Held follows its library's own rules, over the nodes it
	// counts.
	Blind bool
	// Weight is the permits the node takes of a lock made WithCapacity, as
	// its name declares, and Capacity that lock's; both are 0 for other
	// nodes. A node holds once the weights up to its own fit the capacity.
	Weight, Capacity int64
}

// Queue returns the holders and then the waiters of the lock, in queue
// order, read from ZooKeeper now with one list and one read per node. Nodes
// that vanish meanwhile are left out. Peers' nodes are entries too, with
// their family. Children that are not lock nodes of any family are ignored.
// A lock directory that does not exist is an empty queue.
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
				Weight: n.weight, Capacity: n.capacity,
			}
			if n.ours {
				entries[i].MaxHold = lockname.MaxHold(r.V.Data)
				entries[i].Set, entries[i].SetSize = lockname.Set(r.V.Data)
				entries[i].Cached = lockname.Cached(r.V.Data)
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

// holding judges which of nodes, in queue order, hold the lock. The first
// node holds, and so does each reader with no writer before it. The mode of
// nodes[i] is modes[i], which is Read for a writer of ours that was
// downgraded. A peer's node holds as its library judges it; see peerView.
func holding(nodes []lockNode, modes []Mode) []bool {
	held := make([]bool, len(nodes))
	writerBefore := false
	var weights int64 // of a bounded lock's nodes so far (see capacity.go)
	for i, n := range nodes {
		held[i] = i == 0 || modes[i] == Read && !writerBefore
		if n.capacity > 0 {
			weights += n.weight
			held[i] = weights <= n.capacity // in order: the sums only grow
		}
		if !n.ours {
			held[i], _ = peerView(nodes, i)
		}
		writerBefore = writerBefore || modes[i] == Write
	}
	return held
}

// listQueue lists the lock directory's lock nodes of every family, in queue
// order, and notes the peers among them. A missing directory has none. It
// returns as dir the directory's czxid, or 0 if it is missing. A directory
// made anew numbers its nodes from 0 again.
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

// peerView judges the peer's node listed[i] as its library does. It holds
// when none of the nodes before it that the library counts is in its way. A
// writer's name blocks everyone after it, and any name blocks a writer. The
// library reads no mark, so a downgraded writer of ours is a writer. The
// result blind is true if the library does not count some other node of the
// queue.
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
