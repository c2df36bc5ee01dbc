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

// An observer follows the head of the queue, and knows who comes next.
//
// It watches the head's node with a data watch, and keeps a listing of
// the queue. The listing holds every node that can ever
// precede a node it shows, as a waiter's snapshot does (see watch.go).
// Sequence numbers only grow. So when the head goes, the next listed node
// that still exists is the new head. Only once the listed nodes are gone
// does the observer list again.
//
// Each listing sets a child watch on the directory. The observer heeds it
// only while nobody is listed behind the head. Then the first candidate
// to queue fires it, and one listing shows that candidate. Once somebody
// is listed behind the head, the queue's changes cost nothing: no herd.
//
// A change of leader comes in one of two notifications. The head's
// deletion names itself: a read of the listed successor tells the new
// leader. A data change is a Proclaim, or a release's mark as the node
// goes (see writer.go), and only a read tells which. So the observer reads
// the head and the listed successor together. Either way the new leader
// is known one round trip after the notification that tells the
// successor it leads.
//
// So a change of leader costs an observer one round trip and at most
// three requests after its notification: the reads of the head and of
// the successor, and a listing if nobody is listed behind the new head.
// A candidate that queues behind a lone leader costs one listing more. A
// listed candidate that gave up costs no walk: a second listed node known
// gone makes the observer list again, a read and a round trip more. A
// Proclaim costs a read, and a read of the listed successor in vain. An
// empty queue costs a listing, whose child watch fires at the first node.
//
// What it reports never goes backwards. Each look's reads are later in
// ZooKeeper's order than the last look's, since one session's reads are,
// even across servers. A node that went never comes back, and a later
// head has a larger czxid. A successor read beside the head is reported only once
// the head is known gone. Its read may have been answered first. So it is
// reported only if its data watch, set by that read, has not fired by the
// head's answer: it was still there, and unchanged, when the head was gone.
// Otherwise it is read again. A guard checks it all the same: a term below
// the highest shown, or an older version of the same term's data, is not
// reported.

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
	// queued is the child watch the last listing set, or nil
	queued *zkclient.Watch
	// headGone: the head's deletion was notified, and it is off listed
	headGone bool
	// changed: the head's data changed; it may be going with its mark
	changed bool
	retry   zkclient.Backoff

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
		if err == nil {
			o.retry = zkclient.Backoff{}
			if o.newer(now) {
				pending, send = now.Leadership, out
				o.show(now)
			}
			send, err = o.wait(ctx, w, pending, send)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, zk.ErrClosing) {
				return
			}
			if o.retry.Wait(ctx, o.c.Conn()) != nil {
				return // ctx ended, or the connection was closed
			}
		}
	}
}

// wait sends pending while send is out, until the head's watch w fires.
// Meanwhile it keeps somebody listed behind the head, once the state is
// sent: the listing then costs the report no time.
func (o *observer) wait(ctx context.Context, w *zkclient.Watch, pending Leadership, send chan<- Leadership) (chan<- Leadership, error) {
	for w != nil {
		if send == nil && o.alone() {
			if err := o.listBehind(ctx); err != nil {
				return send, err
			}
			continue
		}
		var queued <-chan struct{}
		if send == nil && len(o.listed) == 1 {
			queued = o.queued.Fired() // alone is false: it is set
		}
		select {
		case send <- pending:
			send = nil
		case <-queued:
			// A candidate came, or the head went: the loop lists.
		case <-w.Fired():
			switch ev := w.Event(); {
			case ev.Type == zk.EventNotWatching:
				if errors.Is(ev.Err, zk.ErrClosing) {
					return send, ev.Err
				}
				o.listed, o.queued = nil, nil // a new session: list again
			case ev.Type == zk.EventNodeDeleted && len(o.listed) > 0:
				o.listed = o.listed[1:] // the head went: no need to read it
				o.headGone = true
			case ev.Type == zk.EventNodeDataChanged:
				o.changed = true
			}
			return send, nil
		case <-ctx.Done():
			return send, ctx.Err()
		}
	}
	return send, nil
}

// alone reports whether the head is listed with nobody behind it, and no
// child watch is set to tell of the next candidate.
func (o *observer) alone() bool {
	return len(o.listed) == 1 && (o.queued == nil || o.queued.FiredNow())
}

// listBehind lists the queue with a child watch, for the nodes behind the
// head. The listing may come before or after the head goes. Either way
// the nodes it shows behind the head are those still to come.
func (o *observer) listBehind(ctx context.Context) error {
	r, w := o.c.ChildrenW(ctx, o.l.path)
	if r.Err != nil {
		return r.Err
	}
	o.queued = w
	o.listed = append(o.listed[:1], behind(queueOf(r.V), o.listed[0])...)
	return nil
}

// look reads the head of the queue with a data watch, or lists the queue
// with a child watch if it is empty.
func (o *observer) look(ctx context.Context) (headRead, *zkclient.Watch, error) {
	found := o.headGone // a listed node is known gone
	changed := o.changed
	o.headGone, o.changed = false, false
	for {
		if len(o.listed) == 0 {
			empty, w, err := o.list(ctx)
			if err != nil || empty {
				return headRead{}, w, err
			}
		}
		head := o.listed[0]
		var next chan headReply
		if changed && len(o.listed) > 1 {
			// The head may be going: read its successor beside it.
			next = make(chan headReply, 1)
			name := o.listed[1].name
			go func() {
				r, w := o.c.GetW(ctx, o.l.path+"/"+name)
				next <- headReply{r, w}
			}()
		}
		var fresh chan error
		if changed && o.alone() {
			// A candidate may have queued behind the head before its change.
			fresh = make(chan error, 1)
			go func() { fresh <- o.listBehind(ctx) }()
		}
		changed = false
		r, w := o.c.GetW(ctx, o.l.path+"/"+head.name)
		if fresh != nil {
			<-fresh // a failed listing leaves the head alone, as it was
		}
		if next != nil {
			n := <-next
			switch {
			case r.Err == nil && errors.Is(n.Err, zk.ErrNoNode):
				o.listed = slices.Delete(o.listed, 1, 2) // a candidate that gave up
			case errors.Is(r.Err, zk.ErrNoNode) && errors.Is(n.Err, zk.ErrNoNode):
				o.listed = nil // two listed nodes gone: one listing tells
				continue
			// mutant: observe-successor-unproven
			case errors.Is(r.Err, zk.ErrNoNode) && n.Err == nil && !n.w.FiredNow():
				// The successor's read may have been answered before the
				// head's. Its watch, unfired as of the head's answer,
				// shows it there and unchanged when the head was gone:
				// the head then.
				o.listed = o.listed[1:] // the head went with its mark
				return readHead(o.listed[0], n.V), n.w, nil
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

// headReply is a read of a node with its data watch.
type headReply struct {
	zkclient.Reply[zkclient.Node]
	w *zkclient.Watch
}

// list lists the queue with a child watch. For an empty queue the watch
// fires when a node comes, and the observer waits on it. Otherwise it
// tells of the next candidate while nobody is listed behind the head. A
// missing directory is an empty queue, watched as waitDir says.
func (o *observer) list(ctx context.Context) (empty bool, w *zkclient.Watch, err error) {
	o.queued = nil
	r, w := o.c.ChildrenW(ctx, o.l.path)
	if errors.Is(r.Err, zk.ErrNoNode) {
		o.listed = nil
		switch w, err := o.waitDir(ctx); {
		case err != nil:
			return false, nil, err
		case w != nil:
			return true, w, nil
		}
		r, w = o.c.ChildrenW(ctx, o.l.path) // made meanwhile; a level still missing is an error, and run retries
	}
	if r.Err != nil {
		return false, nil, r.Err
	}
	if o.listed = queueOf(r.V); len(o.listed) == 0 {
		return true, w, nil
	}
	o.queued = w
	return false, nil, nil
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
