package rwlock

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// fakeServer is an in-memory ZooKeeper with just the part of the data
// model the lock uses: nodes with data and stats, sequential and ephemeral
// children, containers (never reaped), one-shot data and child watches, and
// sessions that expire or close. Its hooks let a test fail, delay or lose
// any call to drive exact interleavings. Its connections are up, down or
// silent (what the server sends waits) at a test's word, except those of
// the simulation, which follow a model of go-zookeeper's connection
// (zkNet, below).
type fakeServer struct {
	mu       sync.Mutex
	nodes    map[string]*fakeNode
	zxid     int64
	sessions int64
	conns    []*fakeConn
	czxids   map[string]int64 // every node ever created, when (see the simulation's fairness check)
	dzxids   map[string]int64 // every node deleted, when
	deaths   map[string]fakeDeath
	ctimes   map[string]time.Time // every node created by create, when by the clock (see the simulation's check of re-grants)
	tokens   []grantToken         // the grants checkToken saw
}

// fakeDeath is a node's deletion: when, whether a release's held mark rode
// on it, and the sessions that had a watch on it, which the deletion
// notifies.
type fakeDeath struct {
	at       time.Time
	zxid     int64
	marked   bool
	changed  bool // its data changed before, or as it went
	watchers []fakeWatcher
}

// fakeWatcher is a session with a watch on a node, and the server's zxid
// when it set its latest.
type fakeWatcher struct {
	session int64
	since   int64
	data    bool // a data watch, not a child watch
}

// grantToken is a grant's token, for checkToken.
type grantToken struct {
	node string
	mode Mode
	tok  int64
}

type fakeNode struct {
	data     []byte
	stat     zk.Stat
	counter  int32 // sequence number of the next child: one per child ever created, stuck at the top as in ZooKeeper 3.8
	children map[string]bool
}

func newFakeServer() *fakeServer {
	return &fakeServer{nodes: map[string]*fakeNode{"/": {children: map[string]bool{}}}, czxids: map[string]int64{}, dzxids: map[string]int64{}, ctimes: map[string]time.Time{}}
}

// fakeConn is one client session of a fakeServer; it implements
// zkclient.Conn, and zkclient.Sessions and zkclient.Pauser.
type fakeConn struct {
	s        *fakeServer
	session  atomic.Int64
	state    atomic.Int32
	calls    atomic.Int64         // requests sent to the server
	notified atomic.Int64         // data watch events the server sent it (see TestPermitWakeups)
	lists    atomic.Int64         // of which Children and ChildrenW of a directory
	applied  []string             // "op path" of every request, in the server's order; guarded by s.mu
	connects atomic.Uint64        // sessions had: one per connection, as Dial counts them
	granted  atomic.Int64         // the session timeout a Dial connection learnt; 0: not told (see setGranted)
	info     *zkclient.Handshakes // for a modelled connection that tells its timeout, as Dial's does (zkNet.grant)
	// replayOrder, if set, orders the events a reconnection sends again:
	// go-zookeeper's SetWatches lists the watches from a map.
	replayOrder func([]heldEvent)
	// lateReplay, if set, keeps the events a reconnection sends again
	// until replay, as go-zookeeper does: it sends SetWatches on a
	// goroutine of its own, so answers to requests made after the
	// reconnection may come first; and an event fires every channel that
	// go-zookeeper has for the node and kind by then, a channel set by a
	// read after the reconnection included (late: the events kept).
	lateReplay bool
	late       []lateEvent // guarded by s.mu
	// queueWhileDown, if set, makes a call made while the connection is
	// down wait for the reconnection, as go-zookeeper's queue (sendChan)
	// does, instead of failing with zk.ErrNoServer: it then goes out
	// before the watches are set again (see lateReplay).
	queueWhileDown bool
	back           chan struct{}                // closed when the connection is back, or closed; guarded by s.mu
	watches        map[watchKey][]chan zk.Event // guarded by s.mu
	watchedAt      map[watchKey]int64           // the server's zxid at the latest watch set on each; guarded by s.mu

	// Events for this session are held back while it is disconnected, as
	// the server can only send them once the client is back (go-zookeeper
	// re-registers its watches then). dead: the server expired the session,
	// which the client learns when it reconnects.
	held []heldEvent // guarded by s.mu
	dead bool        // guarded by s.mu

	// While silenced (see silence), what the server sends the session
	// waits in the order it was sent: answers and events. Guarded by s.mu.
	silenced bool
	unsent   []func()

	// The simulation's model of go-zookeeper's connection (zkNet below);
	// nil for the unit tests' connections, which are up or down at once.
	cl *zkClient

	// A unit test stops the process with freeze: Pause waits until thaw.
	frozen chan struct{} // guarded by hooks

	connect *connectConn // c as zk.Connect's (asConnect); guarded by hooks

	// Hooks, set with setBefore and setAfter: the lock's own goroutines
	// (its lease's keepalive) may be calling meanwhile.
	hooks   sync.Mutex
	hBefore func(op, path string) error
	hAfter  func(op, path string, err error) error
}

func (s *fakeServer) conn() *fakeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &fakeConn{s: s, watches: map[watchKey][]chan zk.Event{}}
	c.connects.Store(1)
	s.sessions++
	c.session.Store(s.sessions)
	c.state.Store(int32(zk.StateHasSession))
	s.conns = append(s.conns, c)
	return c
}

var (
	_ zkclient.Conn     = (*fakeConn)(nil)
	_ zkclient.Sessions = (*fakeConn)(nil)
	_ zkclient.Pauser   = (*fakeConn)(nil)
	_ zkclient.Pauser   = (*connectConn)(nil)
)

// connectConn is a fake connection as a lock sees one made by zk.Connect
// rather than Dial: it tells nothing of its sessions (it is no
// zkclient.Sessions), so the lock neither learns its session timeout nor
// counts its connections.
type connectConn struct {
	zkclient.Conn
	c *fakeConn
}

// Pause is zkclient.Pauser's: the process may be stopped all the same.
func (u *connectConn) Pause() { u.c.Pause() }

// asConnect returns c as a connection made by zk.Connect (connectConn):
// the same one each time, as the lock keys its clients by connection.
func (c *fakeConn) asConnect() zkclient.Conn {
	c.hooks.Lock()
	defer c.hooks.Unlock()
	if c.connect == nil {
		c.connect = &connectConn{Conn: c, c: c}
	}
	return c.connect
}

// The watches the fake server keeps, by node and kind.
type watchKind int8

const (
	dataWatch watchKind = iota
	childWatch
)

type watchKey struct {
	path string
	kind watchKind
}

// setBefore runs fn before each call, outside the server's lock; an error
// fails the call without effect. It may block.
func (c *fakeConn) setBefore(fn func(op, path string) error) {
	c.hooks.Lock()
	defer c.hooks.Unlock()
	c.hBefore = fn
}

// setAfter runs fn after a call took effect (for a create, path is the
// node created); its result replaces the call's error
// (zk.ErrConnectionClosed: the response was lost).
func (c *fakeConn) setAfter(fn func(op, path string, err error) error) {
	c.hooks.Lock()
	defer c.hooks.Unlock()
	c.hAfter = fn
}

func (c *fakeConn) hook() (before func(string, string) error, after func(string, string, error) error) {
	c.hooks.Lock()
	defer c.hooks.Unlock()
	return c.hBefore, c.hAfter
}

// A lateEvent fires every channel of its node and kind (see lateReplay).
type lateEvent struct {
	k  watchKey
	ev zk.Event
}

type heldEvent struct {
	ch chan zk.Event
	ev zk.Event
}

// do runs one call: hooks, connection state, then op under the lock; or,
// for a modelled connection, whatever go-zookeeper would do with it.
func (c *fakeConn) do(op, p string, f func() error) error {
	if c.cl != nil {
		return c.cl.call(op, p, f)
	}
	return c.apply(op, p, f)
}

func (c *fakeConn) apply(op, p string, f func() error) error {
	if before, _ := c.hook(); before != nil {
		if err := before(op, p); err != nil {
			return err
		}
	}
	if err := c.sendable(); err != nil {
		return err
	}
	c.calls.Add(1)
	c.s.mu.Lock()
	switch {
	case zk.State(c.state.Load()) == zk.StateDisconnected:
		c.s.mu.Unlock()
		return zk.ErrConnectionClosed // closed while the call waited for the server
	case c.dead:
		c.s.mu.Unlock()
		return zk.ErrSessionExpired // as the server answers a session it expired
	}
	c.applied = append(c.applied, op+" "+p)
	err := f()
	var answered chan struct{}
	if c.silenced {
		answered = make(chan struct{})
		c.unsent = append(c.unsent, func() { close(answered) })
	}
	c.s.mu.Unlock()
	if answered != nil {
		<-answered
	}
	return err
}

// sendable waits, for a connection with queueWhileDown, until a call can
// go to the server; it returns why it cannot.
func (c *fakeConn) sendable() error {
	for {
		switch zk.State(c.state.Load()) {
		case zk.StateHasSession:
			return nil
		case zk.StateDisconnected:
			return zk.ErrConnectionClosed // closed for good
		}
		c.s.mu.Lock()
		back := c.back
		c.s.mu.Unlock()
		if !c.queueWhileDown || back == nil {
			return zk.ErrNoServer
		}
		<-back
	}
}

// wakeQueuedLocked lets the calls that waited for the connection go (see
// queueWhileDown); call with s.mu held.
func (c *fakeConn) wakeQueuedLocked() {
	if c.back != nil {
		close(c.back)
		c.back = nil
	}
}

// silence holds back what the server sends c, until speak: c's requests
// still reach the server and run, but their answers and c's watch events
// wait, and then arrive in the order the server sent them (a silent cut
// that heals before go-zookeeper gives the connection up, or a proxy that
// holds the server's bytes).
func (c *fakeConn) silence() {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.silenced = true
}

func (c *fakeConn) speak() {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.silenced = false
	for _, send := range c.unsent {
		send()
	}
	c.unsent = nil
}

// done runs the after hook.
func (c *fakeConn) done(op, p string, err error) error {
	if _, after := c.hook(); after != nil {
		return after(op, p, err)
	}
	return err
}

func (c *fakeConn) State() zk.State  { return zk.State(c.state.Load()) }
func (c *fakeConn) SessionID() int64 { return c.session.Load() }

func (c *fakeConn) Create(p string, data []byte, flags int32, acl []zk.ACL) (created string, err error) {
	err = c.do("create", p, func() error {
		created, err = c.s.create(c, p, data, flags)
		return err
	})
	if err == nil {
		return created, c.done("create", created, err)
	}
	return created, c.done("create", p, err)
}

func (c *fakeConn) CreateContainer(p string, data []byte, flags int32, acl []zk.ACL) (created string, err error) {
	err = c.do("create", p, func() error {
		created, err = c.s.create(c, p, data, zk.FlagPersistent)
		return err
	})
	return created, c.done("create", p, err)
}

func (c *fakeConn) Children(p string) (children []string, st *zk.Stat, err error) {
	children, st, _, err = c.children(p, false)
	return
}

func (c *fakeConn) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	return c.children(p, true)
}

func (c *fakeConn) children(p string, watch bool) (children []string, st *zk.Stat, ch <-chan zk.Event, err error) {
	err = c.do("children", p, func() error {
		if _, lockNode := lockname.Parse(path.Base(p)); !lockNode {
			c.lists.Add(1) // a child watch on a lock node tells its deletion: no listing
		}
		n := c.s.nodes[p]
		if n == nil {
			return zk.ErrNoNode
		}
		for name := range n.children {
			children = append(children, name)
		}
		// Deterministic whatever the random guids, and unlike sequence order.
		slices.SortFunc(children, func(a, b string) int { return strings.Compare(unguided(b), unguided(a)) })
		s := n.stat
		// What the server shows (DataNode.copyStat): creates and
		// deletions together, in int32 arithmetic.
		s.Cversion = n.counter*2 - int32(len(n.children))
		st = &s
		if watch {
			ch = c.watch(p, childWatch)
		}
		return nil
	})
	err = c.done("children", p, err)
	return
}

func (c *fakeConn) Get(p string) (data []byte, st *zk.Stat, err error) {
	data, st, _, err = c.get(p, false)
	return
}

func (c *fakeConn) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	return c.get(p, true)
}

func (c *fakeConn) get(p string, watch bool) (data []byte, st *zk.Stat, ch <-chan zk.Event, err error) {
	err = c.do("get", p, func() error {
		n := c.s.nodes[p]
		if n == nil {
			return zk.ErrNoNode // and, like a real data watch, none is set
		}
		data = slices.Clone(n.data)
		s := n.stat
		st = &s
		if watch {
			ch = c.watch(p, dataWatch)
		}
		return nil
	})
	err = c.done("get", p, err)
	return
}

func (c *fakeConn) Set(p string, data []byte, version int32) (st *zk.Stat, err error) {
	err = c.do("set", p, func() error {
		n := c.s.nodes[p]
		if n == nil {
			return zk.ErrNoNode
		}
		if version >= 0 && version != n.stat.Version {
			return zk.ErrBadVersion
		}
		c.s.zxid++
		n.data = slices.Clone(data)
		n.stat.Mzxid, n.stat.Mtime = c.s.zxid, time.Now().UnixMilli()
		n.stat.Version++
		s := n.stat
		st = &s
		c.s.fire(p, dataWatch, zk.EventNodeDataChanged)
		return nil
	})
	err = c.done("set", p, err)
	return
}

// Sync is the lease's keepalive; the fake has no followers to catch up.
func (c *fakeConn) Sync(p string) (string, error) {
	return p, c.done("sync", p, c.do("sync", p, func() error { return nil }))
}

func (c *fakeConn) Delete(p string, version int32) error {
	return c.done("delete", p, c.do("delete", p, func() error { return c.s.delete(p) }))
}

// Multi applies setData and delete operations atomically; like the server,
// a failed transaction reports the failing operation's error alone.
func (c *fakeConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	var res []zk.MultiResponse
	err := c.do("multi", "", func() error {
		fail := func(i int, err error) error { // the failing op carries the transaction's error
			res = make([]zk.MultiResponse, len(ops))
			res[i].Error = err
			return err
		}
		for i, op := range ops { // check first: all or nothing
			switch op := op.(type) {
			case *zk.CreateRequest:
				if c.s.nodes[path.Dir(op.Path)] == nil {
					return fail(i, zk.ErrNoNode)
				}
				if op.Flags&zk.FlagSequence == 0 && c.s.nodes[op.Path] != nil {
					return fail(i, zk.ErrNodeExists)
				}
			case *zk.SetDataRequest:
				if c.s.nodes[op.Path] == nil {
					return zk.ErrNoNode
				}
			case *zk.DeleteRequest:
				if n := c.s.nodes[op.Path]; n == nil {
					return zk.ErrNoNode
				}
			default:
				return fmt.Errorf("fake multi: unsupported %T", op)
			}
		}
		txn := c.s.zxid + 1 // a transaction: its creates share one czxid
		for _, op := range ops {
			switch op := op.(type) {
			case *zk.CreateRequest:
				p, err := c.s.create(c, op.Path, op.Data, op.Flags)
				if err != nil {
					return err
				}
				c.s.zxid = txn
				n := c.s.nodes[p]
				n.stat.Czxid, n.stat.Mzxid, c.s.czxids[p] = txn, txn, txn
				c.s.nodes[path.Dir(p)].stat.Pzxid = txn
				res = append(res, zk.MultiResponse{String: p})
				continue
			case *zk.SetDataRequest:
				n := c.s.nodes[op.Path]
				c.s.zxid++
				n.data = slices.Clone(op.Data)
				n.stat.Version++
				c.s.fire(op.Path, dataWatch, zk.EventNodeDataChanged)
			case *zk.DeleteRequest:
				if err := c.s.delete(op.Path); err != nil {
					return err
				}
			}
			res = append(res, zk.MultiResponse{})
		}
		return nil
	})
	return res, c.done("multi", "", err)
}

// watch registers a one-shot watch; call with s.mu held.
func (c *fakeConn) watch(p string, kind watchKind) <-chan zk.Event {
	ch := make(chan zk.Event, 1)
	k := watchKey{p, kind}
	c.watches[k] = append(c.watches[k], ch)
	if c.watchedAt == nil {
		c.watchedAt = map[watchKey]int64{}
	}
	c.watchedAt[k] = c.s.zxid
	return ch
}

// fire delivers one event to every watch of kind on p, or holds it back
// for a disconnected session; call with s.mu held.
func (s *fakeServer) fire(p string, kind watchKind, typ zk.EventType) {
	for _, c := range s.conns {
		k := watchKey{p, kind}
		if c.dead {
			continue // the server forgot the session's watches
		}
		for _, ch := range c.watches[k] {
			if kind == dataWatch {
				c.notified.Add(1)
			}
			ev := zk.Event{Type: typ, State: zk.StateHasSession, Path: p}
			if c.cl != nil {
				c.cl.event(ch, ev)
				continue
			}
			if zk.State(c.state.Load()) != zk.StateHasSession {
				c.held = append(c.held, heldEvent{ch, ev})
				continue
			}
			if c.silenced {
				c.unsent = append(c.unsent, func() { ch <- ev; close(ch) })
				continue
			}
			ch <- ev
			close(ch)
		}
		if c.lateReplay && zk.State(c.state.Load()) != zk.StateHasSession && len(c.watches[k]) > 0 {
			// Kept registered: replay fires them, and those set meanwhile.
			c.held = slices.DeleteFunc(c.held, func(h heldEvent) bool { return slices.Contains(c.watches[k], h.ch) })
			c.late = append(c.late, lateEvent{k, zk.Event{Type: typ, State: zk.StateHasSession, Path: p}})
			continue
		}
		delete(c.watches, k)
	}
}

func (s *fakeServer) create(c *fakeConn, p string, data []byte, flags int32) (string, error) {
	parent := s.nodes[path.Dir(p)]
	if parent == nil {
		return "", zk.ErrNoNode
	}
	if flags&zk.FlagSequence != 0 {
		p += formatSeq(parent.counter)
	}
	if s.nodes[p] != nil {
		return "", zk.ErrNodeExists
	}
	s.zxid++
	if parent.counter < math.MaxInt32 {
		// The counter is the server's cversion, a count of creates: a
		// create sets it to the node's number + 1 and pzxid to its zxid;
		// ZooKeeper 3.8 stores only a larger count, so at the top neither
		// changes.
		parent.counter++
		parent.stat.Pzxid = s.zxid
	}
	n := &fakeNode{data: slices.Clone(data), children: map[string]bool{}}
	n.stat.Czxid, n.stat.Mzxid = s.zxid, s.zxid
	s.czxids[p], s.ctimes[p] = s.zxid, time.Now()
	if flags&zk.FlagEphemeral != 0 {
		n.stat.EphemeralOwner = c.session.Load()
	}
	s.nodes[p] = n
	parent.children[path.Base(p)] = true
	parent.stat.NumChildren++
	s.fire(path.Dir(p), childWatch, zk.EventNodeChildrenChanged)
	return p, nil
}

func (s *fakeServer) delete(p string) error {
	n := s.nodes[p]
	if n == nil {
		return zk.ErrNoNode
	}
	if len(n.children) > 0 {
		return zk.ErrNotEmpty
	}
	s.zxid++
	s.dzxids[p] = s.zxid
	if s.deaths == nil {
		s.deaths = map[string]fakeDeath{}
	}
	death := fakeDeath{at: time.Now(), zxid: s.zxid, marked: lockname.Held(n.data) && !lockname.Downgraded(n.data), changed: n.stat.Version > 0}
	for _, c := range s.conns {
		for _, k := range []watchKey{{p, dataWatch}, {p, childWatch}} {
			if !c.dead && len(c.watches[k]) > 0 {
				death.watchers = append(death.watchers, fakeWatcher{c.session.Load(), c.watchedAt[k], k.kind == dataWatch})
			}
		}
	}
	s.deaths[p] = death
	delete(s.nodes, p)
	parent := s.nodes[path.Dir(p)]
	delete(parent.children, path.Base(p))
	parent.stat.Pzxid = s.zxid // a deletion leaves cversion alone (DataTree.deleteNode)
	parent.stat.NumChildren--
	s.fire(p, dataWatch, zk.EventNodeDeleted)
	s.fire(p, childWatch, zk.EventNodeDeleted)
	s.fire(path.Dir(p), childWatch, zk.EventNodeChildrenChanged)
	return nil
}

// endSession ends a session as the server and go-zookeeper do: its
// ephemeral nodes are deleted (news only to other sessions), and every
// watch it had, and every event held back for it, becomes an
// EventNotWatching with reason.
func (c *fakeConn) endSession(reason error) {
	c.serverExpire()
	c.invalidate(reason)
}

// invalidate is the client's half: go-zookeeper's invalidateWatches.
func (c *fakeConn) invalidate(reason error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]watchKey, 0, len(c.watches))
	for k := range c.watches {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b watchKey) int { return strings.Compare(a.path, b.path) })
	notWatching := func(ch chan zk.Event, p string) {
		ch <- zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Path: p, Err: reason}
		close(ch)
	}
	for _, k := range keys {
		for _, ch := range c.watches[k] {
			notWatching(ch, k.path)
		}
	}
	for _, h := range c.held {
		notWatching(h.ch, h.ev.Path)
	}
	c.watches, c.held = map[watchKey][]chan zk.Event{}, nil
}

// serverExpire is the server's half of an expiry: the session's ephemeral
// nodes go and its watches are forgotten, while the client, cut off, does
// not know yet (reconnect tells it).
func (c *fakeConn) serverExpire() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.dead {
		return
	}
	c.dead = true
	var mine []string
	for p, n := range s.nodes {
		if n.stat.EphemeralOwner == c.session.Load() {
			mine = append(mine, p)
		}
	}
	slices.Sort(mine)
	for _, p := range mine {
		s.delete(p)
	}
}

// expire is a forced expiry seen by a connected client (ZooKeeper's own
// tests' way, zkserver.ExpireSession): ephemerals gone, watches told, and
// go-zookeeper's silent new session.
func (c *fakeConn) expire() {
	c.endSession(zk.ErrSessionExpired)
	c.newSession()
}

// ConnectCount is what a lock on a Dial connection learns from the
// server's handshake answers (zkclient.Handshakes): how many sessions it has had.
func (c *fakeConn) ConnectCount() uint64 { return c.connects.Load() }

// setGranted makes c a connection that tells the lock its session timeout,
// as one made by Dial does: t from now on, for every session of c. A
// connection never told tells no timeout, but still counts its
// connections; asConnect's tells nothing, as one made by zk.Connect.
func (c *fakeConn) setGranted(t time.Duration) { c.granted.Store(int64(t)) }

// TimeoutOf is zkclient.Sessions'.
func (c *fakeConn) TimeoutOf(session int64) time.Duration {
	if c.info != nil {
		return c.info.TimeoutOf(session)
	}
	if session != c.session.Load() {
		return 0
	}
	return time.Duration(c.granted.Load())
}

// Pause is zkclient.Pauser's: a modelled connection's process may be
// stopped.
func (c *fakeConn) Pause() {
	if c.cl != nil {
		c.cl.pause()
		return
	}
	c.hooks.Lock()
	frozen := c.frozen
	c.hooks.Unlock()
	if frozen != nil {
		<-frozen
	}
}

// freeze stops a unit test's connection's process until thaw.
func (c *fakeConn) freeze() {
	c.hooks.Lock()
	c.frozen = make(chan struct{})
	c.hooks.Unlock()
}

func (c *fakeConn) thaw() {
	c.hooks.Lock()
	close(c.frozen)
	c.frozen = nil
	c.hooks.Unlock()
}

// OnHandshake is zkclient.Sessions'. A modelled connection tells of
// its handshakes as Dial's tap does; the unit tests' connections, whose
// timeout changes only between tests, renew no lease by them.
func (c *fakeConn) OnHandshake(fn func(int64, time.Time)) (stop func()) {
	if c.info != nil {
		return c.info.OnHandshake(fn)
	}
	return func() {}
}

func (c *fakeConn) newSession() {
	c.connects.Add(1)
	c.s.mu.Lock()
	c.s.sessions++
	c.session.Store(c.s.sessions)
	c.dead = false
	c.s.mu.Unlock()
	c.state.Store(int32(zk.StateHasSession))
}

// close is zk.Conn.Close: the session ends and the connection is dead.
func (c *fakeConn) close() {
	if c.cl != nil {
		c.cl.close()
		return
	}
	// Closed first, so that no call that begins now sets a watch the
	// session's end would not end (apply checks the state).
	c.state.Store(int32(zk.StateDisconnected))
	c.endSession(zk.ErrClosing)
	c.s.mu.Lock()
	c.wakeQueuedLocked()
	c.s.mu.Unlock()
}

// disconnect and reconnect model a connection that drops and comes back:
// calls fail with zk.ErrNoServer meanwhile, and events wait. If the server
// expired the session meanwhile, reconnecting tells the client so, and it
// starts a new session, as go-zookeeper does.
func (c *fakeConn) disconnect() {
	c.s.mu.Lock()
	if c.back == nil {
		c.back = make(chan struct{}) // before the state: see sendable
	}
	c.s.mu.Unlock()
	c.state.Store(int32(zk.StateConnecting))
}

func (c *fakeConn) reconnect() {
	c.s.mu.Lock()
	dead := c.dead
	c.s.mu.Unlock()
	if dead {
		c.endSession(zk.ErrSessionExpired)
		c.newSession()
		c.s.mu.Lock()
		c.wakeQueuedLocked()
		c.s.mu.Unlock()
		return
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.connects.Add(1)
	c.state.Store(int32(zk.StateHasSession))
	c.wakeQueuedLocked() // they go before the watches are set again, which replay is
	if c.replayOrder != nil {
		c.replayOrder(c.held)
	}
	if !c.lateReplay {
		c.replayLocked()
	}
}

// replay sends the events that a reconnection with lateReplay kept, to
// every channel of their node and kind.
func (c *fakeConn) replay() {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, h := range c.late {
		for _, ch := range c.watches[h.k] {
			ch <- h.ev
			close(ch)
		}
		delete(c.watches, h.k)
	}
	c.late = nil
	c.replayLocked()
}

func (c *fakeConn) replayLocked() {
	for _, h := range c.held {
		h.ch <- h.ev
		close(h.ch)
	}
	c.held = nil
}

// children lists the lock nodes under dir, for assertions.
// deleteOwnNodeBeforeListing makes c's node in dir go, deleted by other,
// before any of c's listings can show it: the node an acquisition on c
// creates is deleted as its listing goes out (which may reach the server
// before the create's answer does).
func deleteOwnNodeBeforeListing(c *fakeConn, s *fakeServer, other *fakeConn, dir string) {
	var prefix atomic.Value
	c.setBefore(func(op, p string) error {
		switch pre, _ := prefix.Load().(string); {
		case op == "create" && strings.HasPrefix(p, dir+"/"):
			prefix.Store(p)
		case op == "children" && pre != "":
			for _, name := range s.lockNodes(dir) {
				if strings.HasPrefix(dir+"/"+name, pre) {
					other.Delete(dir+"/"+name, -1)
				}
			}
		}
		return nil
	})
}

func (s *fakeServer) lockNodes(dir string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[dir]
	if n == nil {
		return nil
	}
	var names []string
	for name := range n.children {
		if _, ok := parseNode(name); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// czxid returns the zxid that created the node at p.
func (s *fakeServer) czxid(p string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.czxids[p]
}

// checkToken says what is wrong with tok as the fencing token of the
// grant of node, in mode, or "", and records it: tok is no smaller than
// node's czxid, and it orders against the tokens of the conflicting grants
// of the directory (a write and anything) checked before as the nodes'
// czxids do (see acquisition.dated). Nodes that never held have no say.
func (s *fakeServer) checkToken(node string, mode Mode, tok int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	own, ok := s.czxids[node]
	switch {
	case !ok:
		return fmt.Sprintf("no node %s was ever created", node)
	case tok < own || tok > s.zxid:
		return fmt.Sprintf("token %d of %s (czxid %d, now %d)", tok, node, own, s.zxid)
	}
	for _, g := range s.tokens {
		if path.Dir(g.node) != path.Dir(node) || g.node == node || mode == Read && g.mode == Read {
			continue
		}
		if (s.czxids[g.node] < own) != (g.tok < tok) {
			return fmt.Sprintf("token %d of %s (czxid %d) and token %d of %s (czxid %d) are in the wrong order",
				tok, node, own, g.tok, g.node, s.czxids[g.node])
		}
	}
	s.tokens = append(s.tokens, grantToken{node, mode, tok})
	return ""
}

// setCounter sets the next sequence number of dir's children (creating
// dir), to test the wrap past 2147483647.
func (s *fakeServer) setCounter(dir string, next int32) {
	c := s.conn()
	if _, err := c.Create(dir, nil, 0, nil); err != nil {
		panic(fmt.Sprintf("setCounter: %v", err))
	}
	s.mu.Lock()
	s.nodes[dir].counter = next
	s.mu.Unlock()
}

// othersWatching counts the sessions other than its owner's that watch
// the node at p, as the server's wchp would show them.
func (s *fakeServer) othersWatching(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var owner int64
	if n := s.nodes[p]; n != nil {
		owner = n.stat.EphemeralOwner
	}
	count := 0
	for _, c := range s.conns {
		if c.session.Load() == owner {
			continue
		}
		if len(c.watches[watchKey{p, dataWatch}]) > 0 || len(c.watches[watchKey{p, childWatch}]) > 0 {
			count++
		}
	}
	return count
}

// othersWatchedBy returns the lock nodes c watches that are not its own.
func (s *fakeServer) othersWatchedBy(c *fakeConn) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var paths []string
	for k, chans := range c.watches {
		n := s.nodes[k.path]
		if len(chans) == 0 || n == nil || n.stat.EphemeralOwner == c.session.Load() || n.stat.EphemeralOwner == 0 {
			continue
		}
		if !slices.Contains(paths, k.path) {
			paths = append(paths, k.path)
		}
	}
	return paths
}

// unguided is a child's name without the guid of a protected name.
func unguided(name string) string {
	if g, ok := lockname.GUID(name); ok {
		return name[len("_c_")+len(g)+1:]
	}
	return name
}

// formatSeq formats a sequence number as ZooKeeper does.
func formatSeq(seq int32) string { return lockname.FormatSeq(seq) }

// overtaken counts, among c's requests from the first'th on, the listings
// of dir that reached the server before the create they were sent behind
// (see acquisition.listBehind): each costs the acquisition one more
// listing. go-zookeeper keeps the create first nearly always; the fake's
// goroutines, less often.
func (c *fakeConn) overtaken(first int) int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	n := 0
	for i := first; i+1 < len(c.applied); i++ {
		if c.applied[i] == "children "+dir && strings.HasPrefix(c.applied[i+1], "create "+dir+"/") {
			n++
		}
	}
	return n
}

// cost runs fn in a synctest bubble and returns the requests c sent, from
// the moment everything had settled to the moment it settles again, less
// the listings that overtook their create (see overtaken).
func (c *fakeConn) cost(fn func()) int64 {
	synctest.Wait()
	before, first := c.calls.Load(), c.appliedCount()
	fn()
	synctest.Wait()
	return c.calls.Load() - before - int64(c.overtaken(first))
}

// appliedCount returns how many of c's requests the server has seen.
func (c *fakeConn) appliedCount() int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return len(c.applied)
}
