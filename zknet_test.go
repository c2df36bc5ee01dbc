package rwlock

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// The simulation's model of what lies between the lock and the server: the
// network, go-zookeeper's connection loop for each session, and the
// server's session tracker. It is built from go-zookeeper v1.0.4's conn.go
// (line numbers below are that file's), because a model that assumed when
// the client notices a dead connection would prove nothing about rules
// that depend on it.
//
//   - Timeouts (setTimeouts, 342): for a session timeout T, the read
//     deadline recvTimeout is 2T/3 and pings go out every pingInterval,
//     T/3. T is what the server granted at the connection's handshake
//     (authenticate, 714-715): the server clamps what the client asks for
//     to its maxSessionTimeout, and the client asks each handshake for
//     what it was granted last (the connect request's TimeOut, 665), the
//     first for what Connect was given (218). The server expires the
//     session by the T of its latest handshake (touchSession): standalone,
//     nothing else touches it. A client that tells the lock its timeout
//     (Dial's) reads each answer before it reports the session (zkclient's Handshakes).
//   - On a connection, sendLoop (762) sends each request as it is queued,
//     and a ping at every tick of a ticker started with the connection
//     (763), whatever else it sent. recvLoop (793) sets the read deadline
//     again before every frame (801): a response, a ping reply, or a watch
//     notification (842) all push it on. A connection from which nothing
//     arrived for 2T/3 is given up; so is one the server closed or reset.
//     Then every request sent on it fails with ErrConnectionClosed (loop,
//     488-500; flushRequests, 524), and go-zookeeper connects again.
//   - connect (366) takes the next host (DNSHostProvider.Next): after it
//     has tried every host since the last success (retryStart), requests
//     waiting in sendChan fail with ErrNoServer (flushUnsentRequests, 512)
//     and it sleeps 1 s (375-383). A dial gives up after connectTimeout,
//     1 s (199, 387), or fails at once when refused. Between connections,
//     requests wait in sendChan (queueRequest, 893) and are sent on the
//     next connection, in whatever session it has.
//   - authenticate (658) waits for the handshake's answer up to
//     10·recvTimeout (683). A server that has expired the session answers
//     with session 0: SessionID becomes 0, every watch ends with
//     EventNotWatching(ErrSessionExpired) (705-710; invalidateWatches via
//     loop, 434-437), and the next handshake, after connect again (a
//     retryStart sleep with one host), opens a new session.
//   - The State a library can read: StateHasSession while connected,
//     StateConnecting while it sleeps or dials (373), StateConnected
//     during the handshake (390), StateExpired and StateDisconnected for
//     an instant on the way.
//   - The server hears the session through every packet (pings, requests,
//     handshakes) and expires it T after it last did, rounded up to its
//     next tick (ExpiryQueue.roundToNextInterval); it then deletes its
//     ephemeral nodes and closes its connection.
//   - Watch events travel in the connection like any frame. Events the
//     client never read (the connection died first, or fired while it had
//     none) the server fires again when the same session reconnects:
//     sendSetWatches (484, 578) sends the watches after what waited in
//     sendChan.
//   - The network: each direction of a client's link is up or cut. TCP
//     keeps what a cut loses and delivers it at the heal if the connection
//     still lives: all at once, or, at the scheduler's word, one frame per
//     step, so that what an answer wakes runs before the next frame is
//     read (recvLoop hands an answer over and reads on). Packets otherwise
//     take no time: requests wait on the wire only as long as the
//     scheduler lets them.
//   - A stopped process (SIGSTOP) runs nothing: go-zookeeper's loops
//     neither ping nor read (what arrives waits in its socket), and the
//     lock's lease timer and requests wait at Pause (zkclient; its other timers,
//     a context's deadline or a backoff's sleep, may fire meanwhile, and
//     reach pause or wait for a frame that cannot come). At resumption
//     its ping ticker fires once for the ticks it missed, and recvLoop's
//     read deadline, if it passed, races with the frames that waited.
//
// Not modelled: an ensemble (the server is standalone, so a follower that
// loses the leader after answering, which the lease clock's relay allowance is
// for, never happens), a machine's suspended monotonic clock, packets'
// own latency, and a sendChan that fills up.
//
// Requests of one connection reach the server in order, and the server
// may read other sessions' requests between two of them. When it reads
// each is the scheduler's choice (heads, apply). Requests made at one
// instant come from goroutines that race to send them, so their order is
// drawn (raceSends). The exception is a keepalive sync on a healthy
// connection while the scheduler lets time pass (fast), which is answered
// at once: it changes no data, so its timing is no race worth a scheduling
// step, and the lease only gains from a late one (the scheduler can still
// hold one back: holdSync). Syncs made in the wake of the scheduler's own
// steps go through it like any request: the goroutines it woke race, and
// whether a sync found the connection idle would depend on that race.
type zkNet struct {
	mu        sync.Mutex // guards the model, and the fake's state for its sessions
	s         *fakeServer
	maxT      time.Duration // the server's maxSessionTimeout now; 0: none
	tick      time.Duration // the server's tickTime
	tickPhase time.Duration // where its ticks fall on our clock
	clients   []*zkClient
	expired   map[int64]time.Time     // sessions the server expired, and when
	left      map[int64]time.Time     // sessions a client left (SessionID changed), and when
	least     map[int64]time.Duration // the smallest timeout the server granted each session
	fast      bool                    // keepalives on healthy connections are answered at once (see above)
	verbose   bool
	logf      func(format string, args ...any)
	onWire    func() // a request waits on the wire for the scheduler
	shuffle   func(n int, swap func(i, j int))
	// read is when each session's client last read a data change and a
	// deletion of each node (see the simulation's checkLockDelay).
	read map[int64]map[string]nodeEventsRead
}

const (
	zkConnectTimeout = time.Second // Connect's connectTimeout (199)
	zkRetrySleep     = time.Second // connect's sleep after trying every host (378)
)

func newZKNet(s *fakeServer, maxT, tick, tickPhase time.Duration) *zkNet {
	return &zkNet{s: s, maxT: maxT, tick: tick, tickPhase: tickPhase,
		expired: map[int64]time.Time{}, left: map[int64]time.Time{}, least: map[int64]time.Duration{},
		logf: func(string, ...any) {}, onWire: func() {}}
}

func (cl *zkClient) recvTimeout() time.Duration  { return cl.granted * 2 / 3 }
func (cl *zkClient) pingInterval() time.Duration { return cl.recvTimeout() / 2 }

// expiry is when the server expires cl's session, last heard at heard.
func (n *zkNet) expiry(cl *zkClient) time.Time {
	at := cl.lastHeard.Add(cl.granted).Add(-n.tickPhase)
	return at.Truncate(n.tick).Add(n.tick + n.tickPhase)
}

// grant is the server's answer to a handshake of cl's: the timeout asked
// for, clamped, which the client asks for next time. A client that tells
// the lock reads the answer at once.
func (n *zkNet) grant(cl *zkClient, now time.Time) {
	t := cl.asked
	if n.maxT > 0 && t > n.maxT {
		t = n.maxT
	}
	cl.asked, cl.granted = t, t
	session := cl.c.session.Load()
	if least, ok := n.least[session]; !ok || t < least {
		n.least[session] = t
	}
	if info := cl.c.info; info != nil {
		var head [zkclient.AnswerHead]byte
		binary.BigEndian.PutUint32(head[8:12], uint32(t/time.Millisecond))
		binary.BigEndian.PutUint64(head[12:20], uint64(session))
		info.Answered(head[:], now)
	}
}

type zkPhase int8

const (
	phaseSession zkPhase = iota // authenticated: sendLoop and recvLoop run
	phaseSleep                  // connect: the sleep after trying every host
	phaseDial                   // connect: a dial that will time out
	phaseAuth                   // authenticate: connected, no answer yet
	phaseClosed                 // after Close
)

// zkDial is how a dial fails while the link is cut.
type zkDial int8

const (
	dialTimeout   zkDial = iota // SYN lost: connectTimeout
	dialRefused                 // RST: at once
	dialBlackhole               // a proxy accepts, and nothing gets through: the handshake waits
)

// zkClient is one *zk.Conn, its link, and its session at the server.
type zkClient struct {
	n     *zkNet
	id    int
	c     *fakeConn
	hosts int // servers in the connect string
	cur   int // DNSHostProvider.curr
	last  int // DNSHostProvider.last: the host of the last handshake

	phase    zkPhase
	until    time.Time // when the sleep, dial or handshake of phase ends
	tcp      *zkTCP    // the connection; nil between connections
	sendChan []*zkReq  // requests waiting for a connection

	c2s, s2c  bool // the link gets packets through in that direction
	dialFails zkDial
	healAt    time.Time // when a cut link heals
	// At the heal, the frames that waited are read one per step of the
	// scheduler (readNext), not all at once: the goroutines an answer
	// wakes run before go-zookeeper reads the next frame.
	trickle bool

	frozen   bool // the process is stopped
	frozenAt time.Time
	thawAt   time.Time
	gate     chan struct{} // closed when it resumes

	asked     time.Duration // what the next handshake asks for: the last granted
	granted   time.Duration // what the server granted at this connection's handshake
	lastHeard time.Time     // the server's last packet from the session
	downSince time.Time     // State has not been StateHasSession since
	notified  time.Time     // the last watch event read
	holdSync  bool          // the next keepalive goes to the scheduler
	faultAt   time.Time     // the last cut, heal, stop, resumption, or change of connection
	dirLists  []*zkReq      // its listings of the lock directory, in the order they were made
}

// zkTCP is one connection, as each side sees it.
type zkTCP struct {
	start    time.Time
	nextPing time.Time
	lastRecv time.Time // the last frame read: the read deadline is this + 2T/3
	inflight []*zkReq  // sent, not answered (go-zookeeper's c.requests), in order
	c2sPing  bool      // a ping waits for the link to heal
	s2c      []zkFrame // frames the client has not read yet
	closedByClient,
	closedByServer bool
}

type zkStage int8

const (
	stageQueued  zkStage = iota // in sendChan
	stageHeld                   // sent into a cut link: TCP retransmits at the heal
	stageWire                   // on the way to the server
	stageApplied                // the server has answered
	stageDone                   // the caller has its outcome
)

type zkReq struct {
	cl         *zkClient
	at         time.Time // when it was made
	op, path   string
	key        string       // op and path without their random parts, once needed
	f          func() error // the fake's operation, under s.mu
	result     chan error
	stage      zkStage
	tcp        *zkTCP
	setWatches bool // go-zookeeper's own, after a reconnection
	placed     bool // its place among the requests made at its instant is drawn (raceSends)
}

// zkFrame is one packet from the server: a response (req), a watch event
// (ch), the end of the connection (eof), or else a ping reply.
type zkFrame struct {
	req *zkReq
	err error
	ch  chan zk.Event
	ev  zk.Event
	eof bool
}

// session opens a modelled session asking for timeout ask, connected to
// the first of hosts; tells: it tells the lock its timeout, as a
// connection made by Dial does.
func (n *zkNet) session(hosts int, ask time.Duration, tells bool) *fakeConn {
	c := n.s.conn()
	if tells {
		c.info = &zkclient.Handshakes{}
	}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	cl := &zkClient{n: n, id: len(n.clients), c: c, hosts: hosts, c2s: true, s2c: true, lastHeard: now, asked: ask}
	n.grant(cl, now)
	cl.tcp = cl.newTCP(now)
	n.clients = append(n.clients, cl)
	n.s.mu.Lock()
	c.cl = cl
	n.s.mu.Unlock()
	return c
}

func (cl *zkClient) newTCP(now time.Time) *zkTCP {
	return &zkTCP{start: now, nextPing: now.Add(cl.pingInterval()), lastRecv: now}
}

func (cl *zkClient) setState(s zk.State) {
	if s != zk.StateHasSession && cl.downSince.IsZero() {
		cl.downSince = time.Now()
	}
	if s == zk.StateHasSession {
		cl.c.connects.Add(1) // Dial's tap counts this (zkclient's Handshakes)
	}
	cl.c.state.Store(int32(s))
}

func (cl *zkClient) cut() bool { return !cl.c2s || !cl.s2c }

// call is one request of the library: go-zookeeper's request (931).
func (cl *zkClient) call(op, p string, f func() error) error {
	n := cl.n
	n.mu.Lock()
	n.advance(time.Now())
	if cl.phase == phaseClosed {
		n.mu.Unlock()
		return zk.ErrConnectionClosed // queueRequest after Close
	}
	r := &zkReq{cl: cl, at: time.Now(), op: op, path: p, f: f, result: make(chan error, 1)}
	if op == "children" && p == dir {
		cl.dirLists = append(cl.dirLists, r)
	}
	if cl.phase == phaseSession {
		n.send(cl, r)
	} else {
		cl.sendChan = enqueue(cl.sendChan, r)
	}
	n.mu.Unlock()
	return <-r.result
}

// enqueue appends r to q, a queue in the order requests were made.
// Requests made at the same instant come from goroutines that race: they
// are put in an order of their own, so that a seed replays, and raceSends
// then draws their order. A request whose order is drawn was queued before
// r was made, and stays before it.
func enqueue(q []*zkReq, r *zkReq) []*zkReq {
	key := func(r *zkReq) string {
		if r.key == "" {
			r.key = r.op + " " + guidless(r.path)
		}
		return r.key
	}
	i := len(q)
	for i > 0 && !q[i-1].placed && q[i-1].stage < stageApplied && q[i-1].at.Equal(r.at) && key(q[i-1]) > key(r) {
		i--
	}
	return slices.Insert(q, i, r)
}

// guidless returns p without the random parts of the lock's paths: runs of
// 32 hex digits (the guids of nodes and of the ACL check).
func guidless(p string) string {
	var b []byte
	run := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'f' {
			run++
			continue
		}
		if run > 0 && run != 32 {
			b = append(b, p[i-run:i]...)
		}
		run = 0
		b = append(b, c)
	}
	if run > 0 && run != 32 {
		b = append(b, p[len(p)-run:]...)
	}
	return string(b)
}

// send is sendLoop's sendData: the request goes out on the connection.
func (n *zkNet) send(cl *zkClient, r *zkReq) {
	tcp := cl.tcp
	r.tcp = tcp
	tcp.inflight = enqueue(tcp.inflight, r)
	switch {
	case !cl.c2s || tcp.closedByServer:
		r.stage = stageHeld
	case r.op == "sync" && n.fast && !cl.holdSync && len(tcp.inflight) == 1 && cl.s2c && !cl.frozen:
		r.stage = stageWire
		n.apply(r, true)
	default:
		if r.op == "sync" {
			cl.holdSync = false
		}
		r.stage = stageWire
		n.onWire()
	}
}

// heads are the requests the server may read next: the first unanswered
// request of each live connection, if it is on the wire.
func (n *zkNet) heads() []*zkReq {
	var heads []*zkReq
	for _, cl := range n.clients {
		if cl.tcp == nil || cl.tcp.closedByServer {
			continue
		}
		for _, r := range cl.tcp.inflight {
			if r.stage == stageApplied {
				continue
			}
			if r.stage == stageWire {
				heads = append(heads, r)
			}
			break
		}
	}
	return heads
}

// apply: the server reads the request, runs it and answers (unless the
// answer is to be lost with the connection).
func (n *zkNet) apply(r *zkReq, answer bool) {
	cl, tcp := r.cl, r.tcp
	n.touch(cl, time.Now())
	r.stage = stageApplied
	var err error
	if r.setWatches {
		n.s.mu.Lock()
		held := cl.c.held
		cl.c.held = nil
		// The server answers from the node's state now, not with the
		// events missed (DataTree.setWatches): a gone node's watch fires
		// with a deletion, whatever changed it before it went.
		for i, h := range held {
			changed := h.ev.Type == zk.EventNodeDataChanged || h.ev.Type == zk.EventNodeChildrenChanged
			if _, ok := n.s.nodes[h.ev.Path]; !ok && changed {
				held[i].ev.Type = zk.EventNodeDeleted
			}
		}
		n.s.mu.Unlock()
		// go-zookeeper lists the watches to set again from a map (conn.go
		// 602), and the server fires the missed events in that order, not
		// in the order of the changes.
		if n.shuffle != nil {
			n.shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
		}
		for _, h := range held {
			n.toClient(cl, tcp, zkFrame{ch: h.ch, ev: h.ev})
		}
	} else {
		n.s.mu.Lock()
		err = r.f()
		n.s.mu.Unlock()
	}
	if n.verbose && (r.op != "sync" || !answer) {
		lost := ""
		if !answer {
			lost = " (the answer is lost)"
		}
		n.logf("c%d %s %s: %v%s", cl.id, r.op, r.path, err, lost)
	}
	if answer {
		n.toClient(cl, tcp, zkFrame{req: r, err: err})
	}
}

// touch: the server hears from the session at t.
func (n *zkNet) touch(cl *zkClient, t time.Time) {
	if !cl.c.dead && t.After(cl.lastHeard) {
		cl.lastHeard = t
	}
}

// event is the server sending a watch event to a session (called by
// fakeServer.fire, with n.mu and s.mu held). With no connection to send it
// on, it waits for the session's next one.
func (cl *zkClient) event(ch chan zk.Event, ev zk.Event) {
	if tcp := cl.tcp; tcp != nil && !tcp.closedByServer {
		cl.n.toClient(cl, tcp, zkFrame{ch: ch, ev: ev})
		return
	}
	cl.c.held = append(cl.c.held, heldEvent{ch, ev})
}

// toClient sends a frame on tcp: read now, or kept (a cut link, a stopped
// process, frames before it still unread).
func (n *zkNet) toClient(cl *zkClient, tcp *zkTCP, fr zkFrame) {
	if tcp.closedByClient {
		return
	}
	if !cl.s2c || cl.frozen || len(tcp.s2c) > 0 {
		tcp.s2c = append(tcp.s2c, fr)
		return
	}
	n.recv(cl, tcp, fr)
}

// recv is recvLoop reading one frame.
func (n *zkNet) recv(cl *zkClient, tcp *zkTCP, fr zkFrame) {
	now := time.Now()
	if now.After(tcp.lastRecv) {
		tcp.lastRecv = now
	}
	switch {
	case fr.eof:
		n.teardown(cl, "the server closed the connection")
	case fr.ch != nil:
		cl.notified = now
		n.noteRead(cl.c.session.Load(), fr.ev, now)
		fr.ch <- fr.ev
		close(fr.ch)
		if fr.ev.Type != zk.EventNotWatching {
			n.logf("c%d reads %v %s", cl.id, fr.ev.Type, fr.ev.Path)
		}
	case fr.req != nil:
		tcp.inflight = slices.DeleteFunc(tcp.inflight, func(r *zkReq) bool { return r == fr.req })
		fr.req.stage = stageDone
		fr.req.result <- fr.err
	}
}

// nodeEventsRead is when a client last read a node's data change and its
// deletion.
type nodeEventsRead struct{ changed, deleted time.Time }

// noteRead notes a data change or a deletion read by session's client.
func (n *zkNet) noteRead(session int64, ev zk.Event, at time.Time) {
	if ev.Type != zk.EventNodeDataChanged && ev.Type != zk.EventNodeDeleted {
		return
	}
	if n.read == nil {
		n.read = map[int64]map[string]nodeEventsRead{}
	}
	if n.read[session] == nil {
		n.read[session] = map[string]nodeEventsRead{}
	}
	r := n.read[session][ev.Path]
	if ev.Type == zk.EventNodeDataChanged {
		r.changed = at
	} else {
		r.deleted = at
	}
	n.read[session][ev.Path] = r
}

// readTogether reports whether session's client read a data change of node
// and its deletion within markGap, as it reads a release's two events. A
// waiter cannot tell those from a Proclaim and a deletion that reached it
// in one burst (see lockdelay.go).
func (n *zkNet) readTogether(session int64, node string) bool {
	r, ok := n.read[session][node]
	return ok && !r.changed.IsZero() && !r.deleted.IsZero() && r.deleted.Sub(r.changed).Abs() < markGap
}

// flush reads the frames that waited.
func (n *zkNet) flush(cl *zkClient, tcp *zkTCP) {
	for len(tcp.s2c) > 0 && cl.tcp == tcp {
		fr := tcp.s2c[0]
		tcp.s2c = tcp.s2c[1:]
		n.recv(cl, tcp, fr)
	}
	cl.trickle = false
}

// trickling reports whether cl has a frame to read one at a time (see
// zkClient.trickle).
func (cl *zkClient) trickling() bool {
	tcp := cl.tcp
	return cl.trickle && tcp != nil && len(tcp.s2c) > 0 && cl.s2c && !cl.frozen
}

// readNext reads the next of the frames that waited (see zkClient.trickle).
func (n *zkNet) readNext(cl *zkClient) {
	tcp := cl.tcp
	fr := tcp.s2c[0]
	tcp.s2c = tcp.s2c[1:]
	n.recv(cl, tcp, fr)
	if cl.tcp != tcp || len(tcp.s2c) == 0 {
		cl.trickle = false
	}
}

// ping is one tick of sendLoop's ticker, at t.
func (n *zkNet) ping(cl *zkClient, tcp *zkTCP, t time.Time) {
	switch {
	case tcp.closedByServer:
	case !cl.c2s:
		tcp.c2sPing = true
	default:
		n.touch(cl, t)
		if cl.s2c && !cl.frozen && len(tcp.s2c) == 0 {
			tcp.lastRecv = later(tcp.lastRecv, t)
		} else {
			tcp.s2c = append(tcp.s2c, zkFrame{})
		}
	}
}

// advance sends the pings due by now. Pings change nothing but the times
// each side last heard from the other, so they are played out lazily,
// before anything that depends on those times.
func (n *zkNet) advance(now time.Time) {
	for _, cl := range n.clients {
		tcp := cl.tcp
		if tcp == nil || cl.frozen {
			continue
		}
		for !tcp.nextPing.After(now) {
			t := tcp.nextPing
			tcp.nextPing = t.Add(cl.pingInterval())
			n.ping(cl, tcp, t)
		}
	}
}

// teardown: go-zookeeper gives up the connection (loop, 486-500).
func (n *zkNet) teardown(cl *zkClient, why string) {
	tcp := cl.tcp
	cl.tcp, cl.trickle, cl.faultAt = nil, false, time.Now()
	tcp.closedByClient = true
	for _, fr := range tcp.s2c {
		if fr.ch != nil { // never read: setWatches has it fired again
			cl.c.held = append(cl.c.held, heldEvent{fr.ch, fr.ev})
		}
	}
	tcp.s2c = nil
	for _, r := range tcp.inflight {
		r.stage = stageDone
		r.result <- zk.ErrConnectionClosed
	}
	tcp.inflight = nil
	n.logf("c%d: go-zookeeper gives up its connection: %s", cl.id, why)
	cl.setState(zk.StateDisconnected)
	n.connect(cl)
}

// connect is go-zookeeper's connect (366): the next host, and after every
// host, the flush and the sleep.
func (n *zkNet) connect(cl *zkClient) {
	cl.cur = (cl.cur + 1) % cl.hosts
	retryStart := cl.cur == cl.last
	cl.setState(zk.StateConnecting)
	if retryStart {
		for _, r := range cl.sendChan {
			r.stage = stageDone
			r.result <- zk.ErrNoServer
		}
		cl.sendChan = nil
		cl.phase, cl.until = phaseSleep, time.Now().Add(zkRetrySleep)
		return
	}
	n.dial(cl)
}

func (n *zkNet) dial(cl *zkClient) {
	now := time.Now()
	switch {
	case !cl.cut():
		n.handshake(cl)
	case cl.dialFails == dialRefused && cl.c2s == cl.s2c:
		n.connect(cl)
	case cl.dialFails == dialBlackhole && cl.c2s == cl.s2c:
		cl.setState(zk.StateConnected)
		cl.phase, cl.until = phaseAuth, now.Add(10*cl.recvTimeout())
	default:
		cl.phase, cl.until = phaseDial, now.Add(zkConnectTimeout)
	}
}

// handshake is authenticate (658) over a working link.
func (n *zkNet) handshake(cl *zkClient) {
	now := time.Now()
	c := cl.c
	cl.setState(zk.StateConnected)
	switch id := c.session.Load(); {
	case id != 0 && c.dead:
		n.logf("c%d reconnects: session %d has expired", cl.id, id)
		c.session.Store(0)
		n.left[id] = now
		cl.setState(zk.StateExpired)
		c.invalidate(zk.ErrSessionExpired)
		cl.setState(zk.StateDisconnected)
		n.connect(cl)
		return
	case id == 0:
		n.s.mu.Lock()
		n.s.sessions++
		c.session.Store(n.s.sessions)
		c.dead = false
		n.s.mu.Unlock()
		cl.lastHeard = now
		n.grant(cl, now)
		n.logf("c%d reconnects with a new session %d, granted %v", cl.id, c.session.Load(), cl.granted)
	default:
		n.touch(cl, now)
		n.grant(cl, now)
		n.logf("c%d reconnects, granted %v", cl.id, cl.granted)
	}
	cl.last, cl.faultAt = cl.cur, now
	cl.tcp = cl.newTCP(now)
	cl.phase, cl.until = phaseSession, time.Time{}
	cl.setState(zk.StateHasSession)
	cl.downSince = time.Time{}
	queued := cl.sendChan
	cl.sendChan = nil
	for _, r := range queued {
		n.send(cl, r)
	}
	if len(c.held) > 0 {
		// go-zookeeper sends it itself, after what waited: no race.
		n.send(cl, &zkReq{cl: cl, at: now, op: "setWatches", result: make(chan error, 1), setWatches: true, placed: true})
	}
}

// expire is the server expiring a session it has not heard from.
func (n *zkNet) expire(cl *zkClient) {
	now := time.Now()
	id := cl.c.session.Load()
	n.expired[id] = now
	n.logf("the server expires c%d's session %d (last heard %v ago)", cl.id, id, now.Sub(cl.lastHeard))
	cl.c.serverExpire()
	if tcp := cl.tcp; tcp != nil && !tcp.closedByServer {
		tcp.closedByServer = true
		n.toClient(cl, tcp, zkFrame{eof: true})
	}
}

// cutLink cuts c2s and/or s2c until healAt; requests on the wire are lost
// in the network with the packets that carried them, and TCP will send
// them again at the heal.
func (n *zkNet) cutLink(cl *zkClient, c2s, s2c bool, fails zkDial, healAt time.Time) {
	n.advance(time.Now())
	cl.c2s, cl.s2c, cl.dialFails, cl.healAt, cl.faultAt = !c2s, !s2c, fails, healAt, time.Now()
	if tcp := cl.tcp; tcp != nil && c2s {
		for _, r := range tcp.inflight {
			if r.stage == stageWire {
				r.stage = stageHeld
			}
		}
	}
}

func (n *zkNet) heal(cl *zkClient) {
	now := time.Now()
	cl.c2s, cl.s2c, cl.healAt, cl.faultAt = true, true, time.Time{}, now
	n.logf("c%d's link heals", cl.id)
	if tcp := cl.tcp; tcp != nil {
		if !tcp.closedByServer {
			if tcp.c2sPing {
				n.ping(cl, tcp, now)
			}
			for _, r := range tcp.inflight {
				if r.stage == stageHeld {
					r.stage = stageWire
					n.onWire()
				}
			}
		}
		tcp.c2sPing = false
		if !cl.frozen && !cl.trickle {
			n.flush(cl, tcp)
		}
	}
	if cl.phase == phaseAuth && !cl.frozen {
		n.handshake(cl)
	}
}

// freeze stops the process until thawAt.
func (n *zkNet) freeze(cl *zkClient, thawAt time.Time) {
	now := time.Now()
	n.advance(now)
	cl.frozen, cl.frozenAt, cl.thawAt, cl.gate, cl.faultAt = true, now, thawAt, make(chan struct{}), now
}

// thaw resumes the process. go-zookeeper's recvLoop finds its read
// deadline passed, or reads the frames that waited first (deadlineFirst
// says which wins the race); its ping ticker fires once for the ticks it
// missed; then the library's goroutines go on.
func (n *zkNet) thaw(cl *zkClient, deadlineFirst bool) {
	now := time.Now()
	cl.frozen, cl.thawAt, cl.faultAt = false, time.Time{}, now
	if tcp := cl.tcp; tcp != nil {
		late := !now.Before(tcp.lastRecv.Add(cl.recvTimeout()))
		if late && deadlineFirst {
			n.teardown(cl, "its read deadline passed while the process was stopped")
		} else if cl.s2c {
			n.flush(cl, tcp)
		}
		if cl.tcp == tcp && !now.Before(tcp.lastRecv.Add(cl.recvTimeout())) {
			n.teardown(cl, "its read deadline passed while the process was stopped")
		}
	}
	if tcp := cl.tcp; tcp != nil && !tcp.nextPing.After(now) {
		n.ping(cl, tcp, now)
		k := now.Sub(tcp.start)/cl.pingInterval() + 1
		tcp.nextPing = tcp.start.Add(k * cl.pingInterval())
	}
	if cl.phase == phaseAuth && !cl.cut() {
		n.handshake(cl)
	}
	close(cl.gate)
	cl.gate = nil
}

// pause holds a goroutine of a stopped process until it resumes.
func (cl *zkClient) pause() {
	cl.n.mu.Lock()
	gate := cl.gate
	cl.n.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// drop resets the connection (a server restart, a proxy killed): both
// sides see it at once. With answered, the head request is run first and
// its answer is lost.
func (n *zkNet) drop(cl *zkClient, head *zkReq) {
	n.advance(time.Now())
	if head != nil {
		n.apply(head, false)
	}
	cl.tcp.closedByServer = true
	n.teardown(cl, "the connection was reset")
}

// close is zk.Conn.Close: everything waiting fails, the session ends.
func (cl *zkClient) close() {
	n := cl.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if cl.phase == phaseClosed {
		return
	}
	var reqs []*zkReq
	if tcp := cl.tcp; tcp != nil {
		reqs = tcp.inflight
		for _, fr := range tcp.s2c {
			if fr.ch != nil { // unread: it ends with the session, below
				cl.c.held = append(cl.c.held, heldEvent{fr.ch, fr.ev})
			}
		}
		tcp.closedByClient = true
		cl.tcp = nil
	}
	for _, r := range append(reqs, cl.sendChan...) {
		r.stage = stageDone
		r.result <- zk.ErrClosing
	}
	cl.sendChan = nil
	cl.phase = phaseClosed
	n.left[cl.c.session.Load()] = time.Now()
	cl.c.endSession(zk.ErrClosing)
	cl.setState(zk.StateDisconnected)
	if cl.gate != nil {
		close(cl.gate)
		cl.gate = nil
	}
}

type zkEventKind int8

const (
	evThaw zkEventKind = iota
	evHeal
	evPhase    // a sleep, dial or handshake ends
	evDeadline // recvLoop's read deadline
	evExpire   // the server's session expiry
)

type zkEvent struct {
	at   time.Time
	cl   *zkClient
	kind zkEventKind
}

// nextEvent returns the model's next timed event. Pings are not events:
// while they are answered they only push the read deadline and the expiry
// on, and while they are not, the deadline and the expiry are what counts.
func (n *zkNet) nextEvent() (next zkEvent, ok bool) {
	consider := func(at time.Time, cl *zkClient, kind zkEventKind) {
		if !ok || at.Before(next.at) {
			next, ok = zkEvent{at, cl, kind}, true
		}
	}
	for _, cl := range n.clients {
		if cl.phase == phaseClosed {
			continue
		}
		if cl.frozen {
			consider(cl.thawAt, cl, evThaw)
		}
		if !cl.healAt.IsZero() {
			consider(cl.healAt, cl, evHeal)
		}
		if !cl.frozen && cl.phase != phaseSession {
			consider(cl.until, cl, evPhase)
		}
		tcp := cl.tcp
		if tcp != nil && !cl.frozen && (cl.cut() || tcp.closedByServer) {
			consider(tcp.lastRecv.Add(cl.recvTimeout()), cl, evDeadline)
		}
		pinged := tcp != nil && cl.c2s && !cl.frozen && !tcp.closedByServer
		if !cl.c.dead && cl.c.session.Load() != 0 && !pinged {
			consider(n.expiry(cl), cl, evExpire)
		}
	}
	return next, ok
}

// process plays out a due event other than a thaw.
func (n *zkNet) process(ev zkEvent) {
	cl := ev.cl
	switch ev.kind {
	case evHeal:
		n.heal(cl)
	case evPhase:
		switch cl.phase {
		case phaseSleep:
			n.dial(cl)
		case phaseDial:
			n.connect(cl) // failed to connect
		case phaseAuth:
			cl.setState(zk.StateDisconnected) // authentication failed: no answer
			n.connect(cl)
		}
	case evDeadline:
		n.teardown(cl, fmt.Sprintf("nothing read for %v", cl.recvTimeout()))
	case evExpire:
		n.expire(cl)
	}
}

// idle reports whether every client is connected over a working link, and
// no request is outstanding.
func (n *zkNet) idle() bool {
	for _, cl := range n.clients {
		if cl.phase != phaseSession || cl.cut() || cl.frozen || len(cl.sendChan) > 0 || len(cl.tcp.inflight) > 0 {
			return false
		}
	}
	return true
}

// raceSends draws the order of the requests each connection had made at
// one instant, and not yet answered. Each caller waits for its answer
// (call), so no two of them come from one goroutine: they come from
// goroutines that raced to queueRequest, and reach sendChan, and so the
// server, in any order. A library that sends two requests at once must
// not count on the order it wrote them in. Call after synctest.Wait, with
// n.mu held.
func (n *zkNet) raceSends() {
	for _, cl := range n.clients {
		n.drawOrder(cl.sendChan)
		if cl.tcp != nil {
			n.drawOrder(cl.tcp.inflight)
		}
	}
}

// drawOrder shuffles the requests of q made at one instant whose order
// is not drawn yet, in their places.
func (n *zkNet) drawOrder(q []*zkReq) {
	for i := 0; i < len(q); {
		var slots []int
		j := i
		for ; j < len(q) && q[j].at.Equal(q[i].at); j++ {
			if !q[j].placed && q[j].stage < stageApplied {
				slots = append(slots, j)
			}
			q[j].placed = true
		}
		if len(slots) > 1 && n.shuffle != nil {
			n.shuffle(len(slots), func(a, b int) { q[slots[a]], q[slots[b]] = q[slots[b]], q[slots[a]] })
		}
		i = j
	}
}

// touchData changes a node's data, as a client outside the simulation
// would: its data watches fire. Call with n.mu held.
func (s *fakeServer) touchData(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[p]; n != nil {
		s.zxid++
		n.stat.Mzxid = s.zxid
		n.stat.Version++
		s.fire(p, dataWatch, zk.EventNodeDataChanged)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
