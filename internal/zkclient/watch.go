package zkclient

import (
	"context"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Watches are shared per connection. At most one registration per node,
// kind and connection is outstanding at a time.
//
// go-zookeeper cannot remove a watch. Each GetW or ChildrenW call adds a
// channel that lives until the node changes or the session ends. And
// every live watch is sent to the server again at each reconnection. A
// waiter that gives up when its context ends cannot take its watch back.
// So if every waiter set its own, a hundred timed-out Lock calls behind a
// long-held grant would leave a hundred channels.
//
// Instead, a caller that finds a registration outstanding for the node it
// wants to watch reads the node without a watch, and shares the
// registration. Any change after the registration was set fires it.
// ZooKeeper delivers that event before the answer to any later read. So
// the caller can never miss a change that its read did not already show.
// It may be woken for a change its read did show, but every waiter looks
// again when woken.

type watchKind int8

const (
	dataWatch watchKind = iota
	childWatch
)

type watchKey struct {
	path string
	kind watchKind
}

// A Watch is one registration, shared by its callers in the session
// that set it. When a session expires, go-zookeeper ends each of its
// watches with an EventNotWatching. A caller of the new session must not
// take that for the end of its own.
type Watch struct {
	// go-zookeeper sends the watch's one event into raw and closes it. A
	// goroutine relays the event to fired and to the subscribers. FiredNow
	// also takes the event from raw if it is there, without waiting for
	// the relay.

	mu      sync.Mutex
	pending bool                         // the request that sets it is under way
	ready   chan struct{}                // closed when it is settled, set or not
	session int64                        // the session that set it
	raw     <-chan zk.Event              // go-zookeeper's channel
	fired   chan struct{}                // closed when the event is published
	event   zk.Event                     // the event; set before fired is closed
	at      time.Time                    // when the event was published, soon after go-zookeeper read it
	subs    map[*func(zk.Event)]struct{} // callbacks to run when it fires
	done    bool                         // the event is published
}

// Fired returns a channel that is closed when the watch has fired. Then
// Event tells what happened.
func (w *Watch) Fired() <-chan struct{} { return w.fired }

// Event returns what fired the watch. Call it after Fired is closed.
func (w *Watch) Event() zk.Event { return w.event }

// FiredAt returns when the watch's event was published: by its relay, or
// by FiredNow if that came first. Call it after Fired is closed.
func (w *Watch) FiredAt() time.Time { return w.at }

// FiredNow reports whether the watch has fired, as of the last packet
// go-zookeeper has read. It publishes the event if the watch has fired.
// Say a caller has just seen a later event or answer of the session.
// FiredNow then tells it whether this watch fired before, without a
// request and without waiting. That holds because go-zookeeper puts each
// event in its channel before it reads the next packet.
func (w *Watch) FiredNow() bool {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return true
	}
	select {
	case ev, ok := <-w.raw:
		if !ok {
			// Closed and empty. The relay took the event and is about to
			// publish it.
			w.mu.Unlock()
			<-w.fired
			return true
		}
		subs := w.publishLocked(ev)
		w.mu.Unlock()
		runSubs(subs, ev)
		return true
	default:
		w.mu.Unlock()
		return false
	}
}

// unfired reports whether the watch is set and has not fired. Its event
// is neither published nor waiting in go-zookeeper's channel. Sharing a
// watch that has fired would only wake the caller for nothing.
func (w *Watch) unfired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.raw) == 0 && !w.done
}

// publishLocked records ev, closes fired, and returns the callbacks to run.
func (w *Watch) publishLocked(ev zk.Event) map[*func(zk.Event)]struct{} {
	w.event, w.at, w.done = ev, time.Now(), true
	close(w.fired)
	subs := w.subs
	w.subs = nil
	return subs
}

func runSubs(subs map[*func(zk.Event)]struct{}, ev zk.Event) {
	for fn := range subs {
		(*fn)(ev)
	}
}

// Subscribe runs fn once when the watch fires, on the goroutine that
// publishes the event. If the watch has fired, it runs fn at once. Calling
// cancel stops fn from running, if it has not run yet.
func (w *Watch) Subscribe(fn func(zk.Event)) (cancel func()) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		fn(w.event)
		return func() {}
	}
	if w.subs == nil {
		w.subs = make(map[*func(zk.Event)]struct{})
	}
	key := &fn
	w.subs[key] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.subs, key)
		w.mu.Unlock()
	}
}

// GetW reads path and watches its data. The watch fires when the node's
// data changes or the node is deleted. A data watch is never set on a
// missing node, unlike the exists watch of ExistsW. So a node that went
// before we looked leaves no watch behind. The watch is nil when the read
// failed.
func (c *Client) GetW(ctx context.Context, path string) (Reply[Node], *Watch) {
	type result struct {
		Node
		ch <-chan zk.Event
	}
	r, w := watchShared(ctx, c, watchKey{path, dataWatch},
		func() (result, <-chan zk.Event, error) {
			data, stat, ch, err := c.zk.GetW(path)
			return result{Node{data, stat}, ch}, ch, err
		},
		func() Reply[result] {
			n := c.Get(ctx, path)
			return Reply[result]{result{Node: n.V}, n.Session, n.Err}
		})
	return Reply[Node]{r.V.Node, r.Session, r.Err}, w
}

// GetWPrivate is GetW with a watch of its own, never shared with another
// caller. When an event comes, go-zookeeper fires every channel it has
// for the node. That includes a watch sent again after a reconnection. So
// the watch tells only of changes that this read's answer does not show,
// if the caller sets no other data or exists watch on the node on this
// connection. The watch is nil when the read failed.
func (c *Client) GetWPrivate(ctx context.Context, path string) (Reply[Node], *Watch) {
	w := &Watch{fired: make(chan struct{})}
	r := request(ctx, c, false, func() (Node, error) {
		before := c.zk.SessionID()
		data, stat, ch, err := c.zk.GetW(path)
		c.settle(watchKey{}, w, ch, before, err, false)
		return Node{data, stat}, err
	}, func(Reply[Node]) {})
	if r.Err != nil {
		return r, nil
	}
	return r, w
}

// ChildrenW lists path's children and watches them. The watch fires when
// a child is created or deleted, or when path itself is deleted. A lock
// node has no children, so a child watch on one fires only when it goes.
func (c *Client) ChildrenW(ctx context.Context, path string) (Reply[[]string], *Watch) {
	op := func() ([]string, <-chan zk.Event, error) {
		children, _, ch, err := c.zk.ChildrenW(path)
		return children, ch, err
	}
	return watchShared(ctx, c, watchKey{path, childWatch}, op, func() Reply[[]string] { return c.Children(ctx, path) })
}

// ListW is ChildrenW with a watch of the caller's own, never shared, and
// with the directory's stat. An acquisition's watch on its lock directory
// fires at the latest when its own node goes, so it cannot pile up.
// Sharing it would hand the next acquisition on the connection a watch
// that the last one's release has just fired, a wake for nothing.
func (c *Client) ListW(ctx context.Context, path string) (Reply[Listing], *Watch) {
	w := &Watch{fired: make(chan struct{})}
	r := request(ctx, c, false, func() (Listing, error) {
		before := c.zk.SessionID()
		children, stat, ch, err := c.zk.ChildrenW(path)
		c.settle(watchKey{}, w, ch, before, err, false)
		return Listing{children, stat}, err
	}, func(Reply[Listing]) {})
	if r.Err != nil {
		return r, nil
	}
	return r, w
}

// watchShared reads and watches key's node. At most one registration per
// node, kind and connection is ever under way or outstanding. A caller
// that finds one being set waits for it. A caller that finds one set and
// not yet fired reads the node with plain, and shares the registration.
// The top of this file says why that is safe.
func watchShared[T any](ctx context.Context, c *Client, key watchKey,
	set func() (T, <-chan zk.Event, error), plain func() Reply[T]) (Reply[T], *Watch) {
	for {
		c.mu.Lock()
		w := c.watches[key]
		switch {
		case w != nil && w.pending:
			c.mu.Unlock()
			select {
			case <-w.ready:
				continue
			case <-ctx.Done():
				return Reply[T]{Err: ctx.Err()}, nil
			}
		case w != nil && w.unfired():
			c.mu.Unlock()
			r := plain()
			if r.Err != nil || r.Session == w.session {
				return r, w
			}
			// The registration is of an earlier session, and about to end
			// with it. Set ours.
			c.mu.Lock()
			if c.watches[key] == w {
				delete(c.watches, key)
			}
			c.mu.Unlock()
			continue
		}
		w = &Watch{pending: true, ready: make(chan struct{}), fired: make(chan struct{})}
		c.watches[key] = w
		c.mu.Unlock()
		// The request itself settles it, so that a caller that stops
		// waiting leaves the registration tracked, not lost.
		r := request(ctx, c, false, func() (T, error) {
			before := c.zk.SessionID()
			v, ch, err := set()
			c.settle(key, w, ch, before, err, true)
			return v, err
		}, func(Reply[T]) {})
		if r.Err != nil {
			return r, nil
		}
		return r, w
	}
}

// settle ends the pending state of w. If err is nil, the watch is set,
// and settle tracks go-zookeeper's channel until it fires. Otherwise
// settle forgets w. A set watch belongs to the session that was there
// before the request, if that session still is.
func (c *Client) settle(key watchKey, w *Watch, ch <-chan zk.Event, before int64, err error, shared bool) {
	session := c.zk.SessionID()
	if session != before {
		session = 0
	}
	c.mu.Lock()
	if err == nil {
		w.mu.Lock()
		w.raw, w.session = ch, session
		w.mu.Unlock()
		c.Ref()
		go c.relay(key, w, shared)
	} else if shared && c.watches[key] == w {
		delete(c.watches, key)
	}
	w.pending = false
	c.mu.Unlock()
	if w.ready != nil {
		close(w.ready)
	}
}

// relay waits for the watch's event and publishes it, unless FiredNow
// took it first.
func (c *Client) relay(key watchKey, w *Watch, shared bool) {
	defer c.Unref()
	ev, ok := <-w.raw
	if shared {
		c.mu.Lock()
		if c.watches[key] == w {
			delete(c.watches, key)
		}
		c.mu.Unlock()
	}
	w.mu.Lock()
	if !ok || w.done {
		w.mu.Unlock()
		return // FiredNow published it
	}
	subs := w.publishLocked(ev)
	w.mu.Unlock()
	runSubs(subs, ev)
}
