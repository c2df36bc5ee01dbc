package rwlock

import (
	"context"
	"errors"
	"path"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// revocations are the listening grants of one lock directory on one
// connection, and their watch on the directory. There is one per connection
// and path, whatever the number of RWLock values (see revocationsOn).
//
// go-zookeeper fires every channel it has for a node when an event comes.
// Suppose a second channel on the directory was set before a reconnection
// and sent again after it. It would fire a channel set by a read after the
// reconnection, for a change that read already showed. So one goroutine
// reads. It sends a read only once the channel of its last read has fired,
// or none was set. So there are never two channels at once. The goroutine
// holds a reference to the Client. So does the channel until it fires (see
// zkclient's relay). So the Client, and these revocations with it, stay the
// connection's while a channel is set.
//
// The watch outlives its listeners. Once set, it costs nothing until the
// directory's data changes. Only a revocation changes it, or the
// directory's deletion, or the session's end. So a listener finds the watch
// set unless a revocation came while nobody listened. A grant made while it
// is set and unfired is known to come before whatever fires it (see How
// fast, in revoke.go).
type revocations struct {
	mu        sync.Mutex
	listeners map[*hold]listener
	reading   bool            // the goroutine runs
	idle      chan struct{}   // closed when the last listener leaves; the goroutine then stops if it waits
	watch     *zkclient.Watch // the directory's data watch, private to the last read; nil before
	readNo    uint64          // the number of that read
	connects  uint64          // the connection's session count when that read was sent and answered
	steady    bool            // connects is known, and the same before and after that read
	named     []int32         // the nodes named by the request that read found
	sent      uint64          // the reads sent so far

	record      []byte          // the directory's data as the last read that succeeded found it
	recordWatch *zkclient.Watch // the watch that read set
	recordNo    uint64          // that read's number
	info        Revocation      // the revocation record, as first read
	pending     *zkclient.Watch // recordWatch, fired for a change that no read has judged yet
	pendingNo   uint64          // recordNo, when pending was set
}

// A listener is a listening grant. It holds its node's sequence number, and
// how many reads had been sent when it began to listen. Any later read was
// sent after its grant.
type listener struct {
	seq    int32
	sent   uint64
	judged chan struct{} // closed once a read after it began has judged it; nil then
}

// revocationsOn returns the revocations of the lock's directory on c. It
// returns nil if nobody has listened yet.
func (l *RWLock) revocationsOn(c *zkclient.Client) *revocations {
	rv, _ := c.Shared(l.path, nil).(*revocations)
	return rv
}

// listenRevocations returns the revocations of the lock's directory on c,
// made on first use.
func (l *RWLock) listenRevocations(c *zkclient.Client) *revocations {
	return c.Shared(l.path, func() any { return new(revocations) }).(*revocations)
}

// before returns the directory's watch if a grant made now is known to come
// before whatever fires it, with the data the read that set it found. That
// holds if the watch is set and not fired, with no new connection since the
// read that set it. Else before returns nil. The check is made after the
// packet that decided the grant was read, which can only make it say nil
// more often.
func (rv *revocations) before(c *zkclient.Client) (*zkclient.Watch, []byte) {
	if rv == nil {
		return nil, nil
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	w := rv.unchangedLocked(c)
	if w == nil {
		return nil, nil
	}
	return w, rv.record
}

// unchangedLocked returns the directory's watch if it is set and has not
// fired, with no new connection since the read that set it. Then the
// directory's data is as that read found it. Else it returns nil.
func (rv *revocations) unchangedLocked(c *zkclient.Client) *zkclient.Watch {
	w := rv.watch
	if w == nil || !rv.steady {
		return nil
	}
	// mutant: revoke-base-reconnected
	if n, known := c.ConnectCount(); !known || n != rv.connects {
		return nil
	}
	if w.FiredNow() {
		return nil
	}
	return w
}

// revoking reports whether w, a directory watch, fired for a change of the
// directory's data. Such a change is a revocation.
func revoking(w *zkclient.Watch) bool {
	return w != nil && w.FiredNow() && w.Event().Type == zk.EventNodeDataChanged
}

// listen adds h to the listeners until it ends, and makes sure the
// directory is watched. It returns a channel that closes once a read sent
// after h began to listen has judged it, or nil if none is needed: what
// the connection knew already decided. Grant.Revoked waits on it, so that
// a revocation made before the holder first looks is seen at that look.
func (rv *revocations) listen(h *hold) (judged <-chan struct{}) {
	n, ok := lockname.Parse(path.Base(h.path))
	if !ok {
		return nil
	}
	rv.mu.Lock()
	// Under mu, a fire that these checks miss is judged by keep, which
	// finds h among the listeners.
	named := slices.Contains(rv.named, n.Seq)
	p, seen := h.precedes()
	revokedSince := false
	if revoking(p) {
		if rv.recordWatch == p {
			// No read since the fire: the next one judges it, with h.
			if rv.pending == nil {
				rv.pending, rv.pendingNo = p, rv.recordNo
			}
		} else {
			// A read since judged the fire. The record it found differs
			// from the one h was granted under only if a revocation was
			// written while h held, since ids never come back.
			// mutant: revoke-listen-precedes
			revokedSince = !lockname.SameRevocation(seen, rv.record)
		}
	}
	if revokedSince || named && rv.unchangedLocked(h.c) != nil {
		// A revocation was written while h held, before it listened. Or the
		// last read named h, and nothing changed since.
		info := rv.info
		rv.mu.Unlock()
		revokeAll([]*hold{h}, info)
		return nil
	}
	if rv.listeners == nil {
		rv.listeners = make(map[*hold]listener)
	}
	ls := listener{seq: n.Seq, sent: rv.sent}
	// A read comes next when the watch is not set, or fired; or h's own, if
	// named. Else the watch, set and unfired since before h looked, says
	// nothing has changed since: the last read decided.
	// mutant: revoke-first-look
	if rv.watch == nil || rv.watch.FiredNow() || named {
		ls.judged = make(chan struct{})
	}
	rv.listeners[h] = ls
	// mutant: revoke-retired-client
	start := !rv.reading && h.c.RefIfLive()
	rv.reading = rv.reading || start
	w, no := rv.watch, rv.readNo
	rv.mu.Unlock()
	h.whenEnded(func(error) { rv.leave(h) })
	if start {
		// Not the lock's background work. It ends when the listeners leave,
		// whichever lock they are of. A Client retired meanwhile, when h
		// ended with the last use, starts nothing.
		go rv.read(h.l, h.c, w, no)
	}
	// mutant: revoke-confirm
	if named {
		// Named by the last read, but the data may have changed since,
		// unseen. That happens after a reconnection, or on a connection
		// that does not count its sessions. So read it again, without a
		// watch.
		go rv.confirm(h, n.Seq)
	}
	return ls.judged
}

// judgedLocked closes h's judged channel, if it has one.
func (rv *revocations) judgedLocked(h *hold) {
	if ls, ok := rv.listeners[h]; ok && ls.judged != nil {
		close(ls.judged)
		ls.judged = nil
		rv.listeners[h] = ls
	}
}

// confirm reads the directory's data without a watch, and revokes h if the
// request names its node. A read that fails is tried again after a pause
// while h listens. It is not tried again when the directory or the session
// is gone, and h with it.
func (rv *revocations) confirm(h *hold, seq int32) {
	defer func() {
		rv.mu.Lock()
		rv.judgedLocked(h)
		rv.mu.Unlock()
	}()
	var retry zkclient.Backoff
	for {
		r := h.c.Get(h.ctx, h.l.path)
		switch {
		case r.Err == nil:
			rev, _ := lockname.ParseRevocation(r.V.Data)
			if slices.Contains(rev.Names(r.V.Stat.Czxid), seq) {
				rv.revokeIf(func(x *hold, _ listener) bool { return x == h }, revocationOf(r.V))
			}
			return
		case !h.held() || errors.Is(r.Err, zk.ErrNoNode) || zkclient.SessionGone(r.Err):
			return
		}
		if !rv.listening(h) || retry.Wait(h.ctx, h.c.Conn()) != nil {
			return
		}
	}
}

// listening reports whether h is among the listeners.
func (rv *revocations) listening(h *hold) bool {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	_, ok := rv.listeners[h]
	return ok
}

// leave removes h from the listeners.
func (rv *revocations) leave(h *hold) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if _, ok := rv.listeners[h]; !ok {
		return
	}
	delete(rv.listeners, h)
	rv.idleLocked()
}

// idleLocked tells the goroutine, if nobody listens.
func (rv *revocations) idleLocked() {
	if len(rv.listeners) == 0 && rv.idle != nil {
		close(rv.idle)
		rv.idle = nil
	}
}

// carryOn returns, while anyone listens, the channel that closes when the
// last listener leaves. Else it marks the goroutine stopped, and stop is
// true. A listener that comes later starts another.
func (rv *revocations) carryOn() (idle chan struct{}, stop bool) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if len(rv.listeners) == 0 {
		rv.reading = false
		return nil, true
	}
	if rv.idle == nil {
		rv.idle = make(chan struct{})
	}
	return rv.idle, false
}

// stop marks the goroutine stopped after read number n failed for good. The
// directory was gone, or the session or the connection ended. It reports
// whether a listener came after that read was sent. Such a listener is a
// grant of a new session: the goroutine reads again for it.
func (rv *revocations) stop(n uint64) (again bool) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	for _, ls := range rv.listeners {
		// mutant: revoke-stop-again
		if ls.sent >= n {
			return true
		}
	}
	rv.reading = false
	return false
}

// read is the goroutine that watches the directory while anyone listens. It
// waits for w, the directory's data watch set by read number n, to fire. If
// w is nil, it reads at once. It revokes the listeners known to have been
// granted before w fired. Then it reads the directory's data with a new
// watch, revokes the listeners the data names, and waits again. A read once
// sent is always answered and kept, so that the watch it sets is known,
// listeners or not. read holds a reference to c, which it drops as it
// returns.
func (rv *revocations) read(l *RWLock, c *zkclient.Client, w *zkclient.Watch, n uint64) {
	defer c.Unref()
	// No context ends a read. A read given up would still set its watch
	// later, and another read would set a second. The client's close ends
	// it instead.
	ctx := context.Background()
	var retry zkclient.Backoff
	warned := false
	for {
		if w != nil {
			idle, stop := rv.carryOn()
			if stop {
				return // nobody listens; the watch stays
			}
			select {
			case <-w.Fired():
			case <-idle:
				continue
			}
			if revoking(w) {
				// mutant: revoke-no-notice
				rv.fired(w, n)
			}
		}
		if c.Conn().State() != zk.StateHasSession && !rv.backOff(c, &retry) {
			return // a read sent now would race go-zookeeper setting its watches again
		}
		rv.mu.Lock()
		rv.sent++
		n = rv.sent
		rv.mu.Unlock()
		connects, known := c.ConnectCount()
		r, next := c.GetWPrivate(ctx, l.path)
		after, _ := c.ConnectCount()
		steady := known && after == connects
		if r.Err == nil {
			retry, warned = zkclient.Backoff{}, false
			rv.keep(next, n, connects, steady, r.V)
			w = next
			continue
		}
		rv.keep(nil, n, 0, false, zkclient.Node{})
		// Fired and noted as pending, so the next read is sent at once. The
		// pending fire is noted once (see fired), so a stale watch kept
		// here could not be taken for a new revocation either.
		w = nil
		switch {
		// mutant: revoke-final-errors
		case errors.Is(r.Err, zk.ErrNoNode) || zkclient.SessionGone(r.Err):
			// The directory is gone, with every node in it, or the session
			// ended. So did the grants of the listeners of the moment.
			l.debug("no longer listening for revocations: "+r.Err.Error(), l.path)
			if rv.stop(n) {
				continue // read again, for the listeners that came since
			}
			return
		case !zkclient.ConnectionLoss(r.Err) && !warned:
			warned = true
			l.log.Warn("rwlock: cannot read the lock directory's data; revocations wait until it can be read",
				"lock", l.path, "err", r.Err)
		}
		// No watch was set. Read again after a pause, once the connection
		// is back. A refusal may pass, such as throttling or an ACL being
		// changed.
		if !rv.backOff(c, &retry) {
			return
		}
	}
}

// backOff waits a pause, then until the connection has a session, while
// anyone listens. It returns false when the goroutine must stop, because
// nobody listens or the connection was closed for good.
func (rv *revocations) backOff(c *zkclient.Client, retry *zkclient.Backoff) bool {
	for {
		idle, stop := rv.carryOn()
		if stop {
			return false
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-idle:
			case <-ctx.Done():
			}
			cancel()
		}()
		// mutant: revoke-wait-idle
		err := retry.Wait(ctx, c.Conn())
		cancel()
		switch {
		case err == nil:
			return true
		case !isClosed(idle): // the connection was closed for good
			rv.mu.Lock()
			rv.reading = false
			rv.mu.Unlock()
			return false
		}
		// The last listener left. Stop, unless one came back since.
	}
}
