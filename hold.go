package rwlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// A hold is one lock node this process holds, from its grant until the node
// is deleted or lost. Every grant is a handle on a hold. The handles are
// the grant Lock returns, each reader of a coalesced node, a nested grant,
// and the read grant a Downgrade makes. The hold keeps what the server, the
// lease clock and the capabilities know of the node. A handle keeps only
// its own end.
type hold struct {
	l        *RWLock
	c        *zkclient.Client
	path     string          // full path of the node
	session  int64           // the session that owns it
	token    int64           // its fencing token, known before any handle exists
	lines    []byte          // data lines besides the lock's, as a set's; a downgrade keeps them
	listing  *zkclient.Watch // the child watch of the listing that granted it, while the capabilities begin
	listedAt time.Time       // when the last listing that showed the node before its grant was sent
	behind   bool            // that listing showed a node behind this one that waits for it (see Contended)

	releaseMark lockname.Mark // what the release writes into the node as it goes (see writer.go)

	// ctx ends when the node is no longer held, with the cause.
	ctx    context.Context
	cancel context.CancelCauseFunc

	ops sync.Mutex // serialises the holder's changes, Release and Downgrade

	mu        sync.Mutex
	mode      Mode      // Write until a Downgrade
	handles   int       // open grants that are not nested in another
	releasing bool      // our own delete is under way, so its event is no loss
	ignored   bool      // a deletion event came while releasing
	unwatch   func()    // stops the node watch's callback
	deadline  time.Time // once lost, by when the holder must have stopped
	until     time.Time // the node goes by then whatever the lease says; zero for never
	looks     []func()  // checks a capability makes at every judge
	onEnd     hooks
	slots     []slot // capabilities' state for this hold

	since    time.Time        // when it was granted or downgraded, for its GrantEvent
	requests zkclient.Counter // the requests it sent, for its GrantEvent
}

// hooks run once, as a hold or a grant ends, with the cause. A key is a
// grant that ends with it, or the address of a function. They are few: a
// slice, not a map.
type hooks []hook

type hook struct {
	key any
	fn  func(cause error)
}

func (hs *hooks) add(key any, fn func(cause error)) { *hs = append(*hs, hook{key, fn}) }

func (hs *hooks) remove(key any) {
	*hs = slices.DeleteFunc(*hs, func(h hook) bool { return h.key == key })
}

// A slot is one capability's state for one hold.
type slot struct{ key, value any }

// A capability follows every hold of the locks it is given to (see
// RWLock.caps). It begins with the hold, and ends by the hold's end hooks.
// It hears of the changes a holder makes without ending the hold.
type capability interface {
	begin(h *hold)
	changed(h *hold, c change)
}

// A keeper is a capability that may keep a node at its last grant's
// release, instead of deleting it (see WithCaching).
type keeper interface {
	keep(h *hold) bool
}

// kept reports whether a keeper kept the node at its last grant's release.
// The hold has then ended, and its grant with it. The caller holds ops.
func (h *hold) kept() bool {
	for _, cp := range h.l.caps {
		if k, ok := cp.(keeper); ok && k.keep(h) {
			return true
		}
	}
	return false
}

// A change is one a holder makes to a hold that goes on.
type change int

const (
	downgraded     change = iota // the node is shared now
	releaseRefused               // the server refused the deletion, so the node is still held
)

// newHold makes the hold of a node that was granted, with one handle
// counted for the grant the caller makes of it (see hold.grant). It
// takes over the caller's use of the client, puts the node under the lease
// clock, watches it, and starts the capabilities.
func newHold(l *RWLock, c *zkclient.Client, m *member) *hold {
	h := &hold{
		l: l, c: c, path: m.path, session: m.session, token: m.tok, lines: m.lines, listing: m.dir,
		listedAt: m.listedAt, behind: m.snap.laterWriter || m.mode == Write && m.snap.after,
		releaseMark: releaseMark(m), mode: m.mode, handles: 1, since: time.Now(),
	}
	h.ctx, h.cancel = context.WithCancelCause(zkclient.WithCounter(context.Background(), &h.requests))
	c.AddHolder(h)
	h.watchFrom(m.own.watch, m.dir)
	for _, cp := range l.caps {
		cp.begin(h)
	}
	h.listing = nil // the capabilities have taken what they need of it
	return h
}

// Session, Limit and Lost make a hold a zkclient.Holder. The lease clock
// judges holds, one per node, whatever the number of grants on it.
func (h *hold) Session() int64       { return h.session }
func (h *hold) Limit() time.Duration { return h.l.sessionTimeout }
func (h *hold) Lost(cause error)     { h.lost(cause) }

// held reports whether the node is still held, without a look at the clock.
func (h *hold) held() bool { return h.ctx.Err() == nil }

// judge ends the hold if the lease clock, the session or a capability says
// it is lost. Err, Done, a nested Lock and Downgrade call it first, as
// every look of a holder does. So a process back from a pause sees its
// loss.
func (h *hold) judge() {
	// mutant: judge-on-timer-only
	if !h.held() {
		return
	}
	h.c.Judge(h)
	h.mu.Lock()
	looks := h.looks
	h.mu.Unlock()
	for _, look := range looks {
		if h.held() {
			look()
		}
	}
}

// lookAlso adds a check that judge makes after the lease's.
func (h *hold) lookAlso(look func()) {
	h.mu.Lock()
	h.looks = append(h.looks, look)
	h.mu.Unlock()
}

// slot returns the capability's state for this hold, made by make on first
// use. With a nil make, it returns nil if there is none.
func (h *hold) slot(key any, make func() any) any {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.slots {
		if s.key == key {
			return s.value
		}
	}
	if make == nil {
		return nil
	}
	v := make()
	h.slots = append(h.slots, slot{key, v})
	return v
}

// currentMode returns Write, or Read once downgraded.
func (h *hold) currentMode() Mode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mode
}

// grant makes a handle of mode on h for a caller. The first handle is
// counted by newHold. Every later one, a coalesced reader that joins, is
// counted by join.
func (h *hold) grant(mode Mode) *Grant {
	g := newHandle(h, mode, nil)
	h.whenEndedAs(g, g.end)
	return g
}

// join counts one more handle, unless the node is no longer held or its
// last handle is releasing it. Then it returns false.
func (h *hold) join() (g *Grant, ok bool) {
	h.mu.Lock()
	if !h.held() || h.releasing {
		h.mu.Unlock()
		return nil, false
	}
	h.handles++
	h.mu.Unlock()
	return h.grant(Read), true
}

// handleCount returns how many grants hold the node, nested ones aside.
func (h *hold) handleCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handles
}

// claimLast marks the hold releasing if one grant is left on the node,
// nested ones aside, and reports whether it did. From then on nobody joins
// the node; refused takes the mark back.
func (h *hold) claimLast() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.handles != 1 || h.releasing {
		return false
	}
	// mutant: claim-late
	h.releasing = true
	return true
}

// leave gives back one handle's count. It reports false for the last one,
// which must delete the node (see Grant.Release). The hold is then marked
// releasing, so that nobody joins.
func (h *hold) leave() (others bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.handles > 1 {
		h.handles--
		return true
	}
	h.releasing = true
	return false
}

// release deletes the node for its last handle, which called leave. It
// returns nil once the node is gone. It returns an error wrapping
// errFinishing when the deletion goes on in the background. Any other error
// is the server's refusal, and the node is still held. The caller holds
// ops.
func (h *hold) release(ctx context.Context) error {
	err := h.l.deleteNode(zkclient.WithCounter(ctx, &h.requests), h.c, h.path, h.session, h.releaseMark)
	if err != nil && !errors.Is(err, errFinishing) {
		h.refused()
		return err
	}
	h.end(ErrReleased)
	return err
}

// drop releases a hold that no grant was made of, in a set that failed as
// it was granted.
func (h *hold) drop(ctx context.Context) {
	h.ops.Lock()
	defer h.ops.Unlock()
	if h.held() && !h.leave() {
		h.release(ctx)
	}
}

// refused takes back a release the server refused. The node is still held,
// by its last handle.
func (h *hold) refused() {
	if h.setReleasing(false) {
		h.watchNode() // someone else's delete may have come meanwhile, so look again
	}
	for _, cp := range h.l.caps {
		cp.changed(h, releaseRefused)
	}
}

// end ends the hold with cause, unless it has ended already, and then every
// handle on it. Its hooks run on the caller's goroutine, so that the
// contexts derived from its grants are cancelled before end returns. It
// leaves the lease clock and gives back its use of the client.
func (h *hold) end(cause error) bool {
	h.mu.Lock()
	if !h.held() {
		h.mu.Unlock()
		return false
	}
	h.cancel(cause)
	hooks, unwatch := h.onEnd, h.unwatch
	h.onEnd, h.unwatch = nil, nil
	h.mu.Unlock()
	// Its grants first. An observer hears of the end only once their Done
	// is closed, so that it never delays the news of a loss.
	for _, h := range hooks {
		if _, grant := h.key.(*Grant); grant {
			h.fn(cause)
		}
	}
	for _, h := range hooks {
		if _, grant := h.key.(*Grant); !grant {
			h.fn(cause)
		}
	}
	if unwatch != nil {
		unwatch()
	}
	h.c.RemoveHolder(h)
	h.c.Unref()
	return true
}

// whenEnded runs fn with the cause as h ends, on the goroutine that ends
// it. If h has ended, fn runs at once. stop forgets fn if it has not run.
func (h *hold) whenEnded(fn func(cause error)) (stop func()) {
	key := &fn
	h.whenEndedAs(key, fn)
	return func() { h.forget(key) }
}

// whenEndedAs is whenEnded under a key of the caller's. A grant that ends
// with h forgets itself with forget when it ends alone.
func (h *hold) whenEndedAs(key any, fn func(cause error)) {
	h.mu.Lock()
	if !h.held() {
		h.mu.Unlock()
		fn(context.Cause(h.ctx))
		return
	}
	h.onEnd.add(key, fn)
	h.mu.Unlock()
}

func (h *hold) forget(key any) {
	h.mu.Lock()
	h.onEnd.remove(key)
	h.mu.Unlock()
}

// ended returns why the hold ended, or nil while it is held.
func (h *hold) ended() error {
	if h.held() {
		return nil
	}
	return context.Cause(h.ctx)
}
