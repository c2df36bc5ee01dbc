package rwlock

import (
	"context"
	"errors"
	"path"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// An observer follows the head of the queue, never the queue itself.
//
// It lists the queue once, and keeps the listing. It watches the head's
// node alone, with a data watch. A change behind the head touches no node
// it watches, so it costs the observer nothing: no herd.
//
// The listing holds every node that can ever precede a node it shows, as a
// waiter's snapshot does (see watch.go). Sequence numbers only grow. So
// when the head goes, the next listed node that still exists is the new
// head, and one read with a watch tells it. Only once every listed node is
// gone does the observer list again. A data change of the head is a
// Proclaim, or a release's mark as the node goes. One read tells which.
// If the listing shows nobody behind the head, a listing goes out beside
// that read. So a release's mark costs no round trip more than a vanished
// leader does, and the next change may find its successor listed.
//
// So a change of leader costs an observer at most three requests and two
// round trips after the notification: a read that finds the head gone, a
// listing, and a read of the new head. A leader that vanished costs no
// first read, and a listed successor no listing. Listed candidates that
// gave up cost no walk: a second listed node known gone makes it list. So
// they add at most a read and a round trip. A Proclaim costs a read, and a
// listing if nobody is listed behind the head. An empty queue costs a
// listing with a child watch, which fires at the first node.
//
// What it reports never goes backwards. Each read is later in ZooKeeper's
// order than the last, since one session's reads are, even across
// servers. A node that went never comes back, and a later head has a
// larger czxid. A guard checks it all the same: a term below the highest
// shown, or an older version of the same term's data, is not reported.

// Observe returns a channel of the election's states. It sends the state
// now, and then each change: a new leader, a Proclaim, or nobody leading
// (Term 0). It sends only the latest. A receiver that is slow, or a change
// that comes before the last was read, skips states, as ZooKeeper's
// watches do. What it sends never goes backwards: terms never decrease,
// and nobody leads in between only when the leader went.
//
// The channel is closed when ctx ends, or when the *zk.Conn is closed.
// Observe rides out connection loss and session expiry. It writes nothing:
// while the lock directory is missing, nobody leads, and it waits for the
// directory to be made. For a zero Election it returns a closed channel.
func (e *Election) Observe(ctx context.Context) <-chan Leadership {
	l := e.lock()
	out := make(chan Leadership)
	if l.conn == nil {
		close(out)
		return out
	}
	c := zkclient.For(l.conn)
	go func() {
		defer c.Unref()
		defer close(out)
		o := &observer{l: l, c: c}
		o.run(ctx, out)
	}()
	return out
}

// observer is one Observe call's state.
type observer struct {
	l      *RWLock
	c      *zkclient.Client
	listed []lockNode // the listing's nodes still thought to exist, head first
	relist bool       // list again beside the next read of the head
	// headGone: the head's deletion was notified, and it is off listed
	headGone bool
	retry    zkclient.Backoff

	shown   bool // a state has been reported
	term    int64
	version int32
	maxTerm int64
}

// run follows the head until ctx ends or the connection is closed.
func (o *observer) run(ctx context.Context, out chan<- Leadership) {
	var pending Leadership
	var send chan<- Leadership // out while pending is unsent, else nil
	for {
		now, w, err := o.look(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, zk.ErrClosing) {
				return
			}
			if o.retry.Wait(ctx, o.c.Conn()) != nil {
				return // ctx ended, or the connection was closed
			}
			continue
		}
		o.retry = zkclient.Backoff{}
		if o.newer(now) {
			pending, send = now.Leadership, out
			o.show(now)
		}
		for w != nil {
			select {
			case send <- pending:
				send = nil
			case <-w.Fired():
				if ev := w.Event(); ev.Type == zk.EventNotWatching {
					if errors.Is(ev.Err, zk.ErrClosing) {
						return
					}
					o.listed = nil // a new session: list again
				} else if ev.Type == zk.EventNodeDeleted && len(o.listed) > 0 {
					o.listed = o.listed[1:] // the head went: no need to read it
					o.headGone = true
				} else if ev.Type == zk.EventNodeDataChanged {
					o.relist = len(o.listed) < 2 // it may be going, with nobody listed behind it
				}
				w = nil
			case <-ctx.Done():
				return
			}
		}
	}
}

// look reads the head of the queue with a data watch, or lists the queue
// with a child watch if it is empty.
func (o *observer) look(ctx context.Context) (headRead, *zkclient.Watch, error) {
	found := o.headGone // a listed node is known gone
	o.headGone = false
	for {
		if len(o.listed) == 0 {
			empty, w, err := o.list(ctx)
			if err != nil || empty {
				return headRead{}, w, err
			}
		}
		head := o.listed[0]
		var fresh chan zkclient.Reply[[]string]
		if o.relist {
			o.relist = false
			fresh = make(chan zkclient.Reply[[]string], 1)
			go func() { fresh <- o.c.Children(ctx, o.l.path) }()
		}
		r, w := o.c.GetW(ctx, o.l.path+"/"+head.name)
		if fresh != nil {
			// The listing may come before or after the head goes. Either
			// way the nodes it shows behind the head are those still to
			// come.
			if f := <-fresh; f.Err == nil {
				o.listed = append(o.listed[:1], behind(queueOf(f.V), head)...)
			}
		}
		switch {
		case errors.Is(r.Err, zk.ErrNoNode) && !found:
			o.listed = o.listed[1:] // gone: the next listed node is the head, if it exists
			found = true
			continue
		case errors.Is(r.Err, zk.ErrNoNode):
			// A second listed node gone: candidates that gave up. Walking
			// the rest could cost a read each, so one listing tells.
			o.listed = nil
			continue
		case r.Err != nil:
			return headRead{}, nil, r.Err
		}
		return readHead(head, r.V), w, nil
	}
}

// list lists the queue. For an empty queue it lists again with a child
// watch on the directory, which fires when a node comes. A queue that is
// not empty leaves no watch behind, since the observer waits on its head.
// A missing directory is an empty queue, watched as waitDir says.
func (o *observer) list(ctx context.Context) (empty bool, w *zkclient.Watch, err error) {
	r := o.c.Children(ctx, o.l.path)
	if errors.Is(r.Err, zk.ErrNoNode) {
		o.listed = nil
		switch w, err := o.waitDir(ctx); {
		case err != nil:
			return false, nil, err
		case w != nil:
			return true, w, nil
		}
		r = o.c.Children(ctx, o.l.path) // made meanwhile; a level still missing is an error, and run retries
	}
	if r.Err != nil {
		return false, nil, r.Err
	}
	if o.listed = queueOf(r.V); len(o.listed) > 0 {
		return false, nil, nil
	}
	r, w = o.c.ChildrenW(ctx, o.l.path)
	if r.Err != nil {
		return false, nil, r.Err
	}
	if o.listed = queueOf(r.V); len(o.listed) > 0 {
		// The watch fires at the next change of the queue, and is then
		// gone. The observer waits on the head's watch instead.
		return false, nil, nil
	}
	return true, w, nil
}

// waitDir watches for the lock directory, which is missing. An observer
// only reads, so it makes nothing. It sets a child watch on the nearest
// ancestor that exists, which fires when the next level of the path is
// made. The first Campaign makes the directory, and the watch fires on the
// way. So does the server's removal of an empty container directory,
// which the watch on the directory tells. It returns nil with no error if
// a level it found missing exists after all.
func (o *observer) waitDir(ctx context.Context) (*zkclient.Watch, error) {
	for p := o.l.path; p != "/"; p = path.Dir(p) {
		r, w := o.c.ChildrenW(ctx, path.Dir(p))
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
			continue
		case r.Err != nil:
			return nil, r.Err
		case slices.Contains(r.V, path.Base(p)):
			return nil, nil // made meanwhile: look again
		}
		return w, nil
	}
	return nil, nil
}

// behind returns the nodes of q, in queue order, that come after n.
func behind(q []lockNode, n lockNode) []lockNode {
	i := 0
	for i < len(q) && !lockname.Precedes(n.seq, q[i].seq) {
		i++
	}
	return q[i:]
}

// queueOf returns the lock nodes of children, in queue order.
func queueOf(children []string) []lockNode {
	var q []lockNode
	for _, name := range children {
		if n, ok := parseNode(name); ok && lockname.Usable(n.seq) {
			q = append(q, n)
		}
	}
	slices.SortFunc(q, queueOrder)
	return q
}

// newer reports whether now may be reported after what was shown.
func (o *observer) newer(now headRead) bool {
	switch {
	case !o.shown:
		return true
	case now.Term == 0:
		return o.term != 0 // the leader went
	// mutant: observe-backwards
	case now.Term > o.maxTerm:
		return true
	}
	return now.Term == o.term && now.version > o.version
}

// show records now as reported.
func (o *observer) show(now headRead) {
	o.shown, o.term, o.version = true, now.Term, now.version
	o.maxTerm = max(o.maxTerm, now.Term)
}
