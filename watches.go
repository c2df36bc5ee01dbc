package rwlock

import (
	"context"
	"sync"

	"github.com/go-zookeeper/zk"
)

// Watches are shared per connection: at most one registration per node,
// kind and connection is outstanding at a time.
//
// go-zookeeper cannot remove a watch. Each GetW or ChildrenW call adds a
// channel that lives until the node changes (or the session ends), and
// every live watch is sent to the server again at each reconnection. A
// waiter that gives up (its context ended) cannot take its watch back, so
// if every waiter set its own, a hundred timed-out Lock calls behind a
// long-held grant would leave a hundred channels. Instead, a caller that
// finds a registration outstanding for the node it wants to watch reads
// the node without a watch and shares the registration: any change after
// the registration was set fires it, and ZooKeeper delivers that event
// before the answer to any later read, so the caller can never miss a
// change that its read did not already show. It may be woken for a change
// its read did show; every waiter looks again when woken.

type watchKind int8

const (
	dataWatch watchKind = iota
	childWatch
)

type watchKey struct {
	path string
	kind watchKind
}

// A watchEntry is one outstanding registration, shared by its callers in
// the session that set it. (go-zookeeper ends every watch of an expired
// session with an EventNotWatching; a caller of the new session must not
// take that for the end of its own.)
type watchEntry struct {
	session int64           // the session that set it
	raw     <-chan zk.Event // go-zookeeper's channel
	fired   chan struct{}   // closed when the event has come
	event   zk.Event        // the event; set before fired is closed

	mu   sync.Mutex
	subs map[*func(zk.Event)]struct{} // callbacks to run when it fires
	done bool                         // the callbacks have run
}

// Fired returns a channel that is closed when the watch has fired;
// then Event tells what happened.
func (w *watchEntry) Fired() <-chan struct{} { return w.fired }

// Event returns what fired the watch. Call it after Fired is closed.
func (w *watchEntry) Event() zk.Event { return w.event }

// subscribe runs fn, once, when the watch fires (at once if it has), on
// the goroutine that received the event. cancel stops that, if it has not
// happened yet.
func (w *watchEntry) subscribe(fn func(zk.Event)) (cancel func()) {
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

// getW reads path and watches its data: the watch fires when the node's
// data changes or the node is deleted. A data watch, unlike the exists
// watch of ExistsW, is never set on a missing node, so a node that went
// before we looked leaves no watch behind. The watch is nil when the read
// failed.
func (c *client) getW(ctx context.Context, path string) (reply[node], *watchEntry) {
	key := watchKey{path, dataWatch}
	if w := c.outstanding(key); w != nil {
		if r := c.get(ctx, path); r.err != nil || r.session == w.session {
			return r, w
		}
	}
	type result struct {
		node
		ch <-chan zk.Event
	}
	r := request(c, ctx, false, func() (result, error) {
		data, stat, ch, err := c.zk.GetW(path)
		return result{node{data, stat}, ch}, err
	}, func(r reply[result]) {
		if r.err == nil {
			c.register(key, r.v.ch, r.session, false) // tracked, so that the next caller shares it
		}
	})
	if r.err != nil {
		return reply[node]{err: r.err}, nil
	}
	return reply[node]{r.v.node, r.session, nil}, c.register(key, r.v.ch, r.session, false)
}

// childrenW lists path's children and watches them: the watch fires when
// a child is created or deleted, or when path itself is deleted (a lock
// node has no children, so a child watch on one fires only when it goes).
//
// With private, the watch is the caller's own, never shared: an
// acquisition's watch on its lock directory fires at the latest when its
// own node goes, so it cannot pile up, while sharing it would hand the next
// acquisition on the connection a watch that the last one's release has
// just fired, and a wake for nothing.
func (c *client) childrenW(ctx context.Context, path string, private bool) (reply[[]string], *watchEntry) {
	key := watchKey{path, childWatch}
	if w := c.outstanding(key); w != nil && !private {
		if r := c.children(ctx, path); r.err != nil || r.session == w.session {
			return r, w
		}
	}
	type result struct {
		children []string
		ch       <-chan zk.Event
	}
	r := request(c, ctx, false, func() (result, error) {
		children, _, ch, err := c.zk.ChildrenW(path)
		return result{children, ch}, err
	}, func(r reply[result]) {
		if r.err == nil {
			c.register(key, r.v.ch, r.session, private)
		}
	})
	if r.err != nil {
		return reply[[]string]{err: r.err}, nil
	}
	return reply[[]string]{r.v.children, r.session, nil}, c.register(key, r.v.ch, r.session, private)
}

// outstanding returns the registration for key that has not fired yet, if
// any. (One whose event waits in go-zookeeper's channel, not yet relayed,
// has fired: sharing it would only wake the caller for nothing.)
func (c *client) outstanding(key watchKey) *watchEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.watches[key]; w != nil && len(w.raw) == 0 {
		return w
	}
	return nil
}

// register tracks go-zookeeper's channel ch, set in session, for key until
// it fires, and returns the entry callers share (unless private). If two
// callers of one session raced to set the same watch, the second channel
// is drained with the first entry's: both belong to the one watch the
// server keeps per node and session, and fire together. An entry of
// another session is replaced: it is about to fire with the end of its
// session.
func (c *client) register(key watchKey, ch <-chan zk.Event, session int64, private bool) *watchEntry {
	c.retain()
	c.mu.Lock()
	w, shared := c.watches[key]
	shared = shared && w.session == session && session != 0 && !private
	if !shared {
		w = &watchEntry{session: session, raw: ch, fired: make(chan struct{})}
		if !private {
			c.watches[key] = w
		}
	}
	c.mu.Unlock()
	go func() {
		defer c.release()
		ev := <-ch
		if shared {
			return
		}
		c.mu.Lock()
		if c.watches[key] == w {
			delete(c.watches, key)
		}
		c.mu.Unlock()
		w.event = ev
		close(w.fired)
		w.mu.Lock()
		subs := w.subs
		w.subs, w.done = nil, true
		w.mu.Unlock()
		for fn := range subs {
			(*fn)(ev)
		}
	}()
	return w
}
