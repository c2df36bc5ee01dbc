package rwlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
	"github.com/zkrwlock/rwlock/internal/lockname"
	"github.com/zkrwlock/rwlock/internal/zkclient"
)

// writeBlocker is the write predicate. A writer holds the lock when no node
// at all precedes it. Otherwise it waits for its IMMEDIATE predecessor, so
// that each node is watched by at most one writer. There is no herd effect.
func writeBlocker(before []lockNode) (lockNode, bool) {
	if len(before) == 0 {
		return lockNode{}, false
	}
	return before[len(before)-1], true
}

// releaseMark returns the mark that the member's release writes into its
// node as it deletes it.
//
// The held mark. A writer that waited may be followed by a waiter whose
// listing still shows the nodes it waited for. So it marks its node held in
// the transaction that deletes it. The waiter behind, whose data watch
// fires on the mark, learns without a listing that every node before it is
// gone. A queue of writers then drains in constant time per handoff. A
// reader waiting on the node takes the mark as its deletion (see watch.go).
// A writer granted at once deletes plainly, so the uncontended release pays
// for no transaction. With WithLockDelay every release marks, readers' too,
// so that a plain deletion tells of a loss (see lockdelay.go).
func releaseMark(m *member) lockname.Mark {
	if m.mode == Write && m.waited && m.weight == 0 || m.l.lockDelay > 0 { // a permit's mark is written at its grant (see capacity.go)
		return lockname.MarkHeld
	}
	return lockname.Unmarked
}

// markDowngraded writes the downgrade mark into the node's data. It waits
// for the answer up to the cleanup timeout (see Downgrade). On success the
// hold's mode is Read. The caller holds ops.
func (h *hold) markDowngraded(ctx context.Context) error {
	l := h.l
	sctx, cancel := context.WithTimeout(context.WithoutCancel(zkclient.WithCounter(ctx, &h.requests)), l.cleanupTimeout)
	defer cancel()
	r := h.c.Set(sctx, h.path, append(lockname.Data(l.owner, l.maxHold, lockname.MarkDowngraded), h.lines...))
	switch {
	case errors.Is(r.Err, zk.ErrNoNode):
		h.lost(h.whyDeleted())
		return h.ended()
	case zkclient.SessionGone(r.Err):
		h.lost(r.Err)
		return h.ended()
	case zkclient.ConnectionLoss(r.Err) || sctx.Err() != nil:
		h.lost(fmt.Errorf("%w: outcome of the downgrade unknown: %w", errMayLive, r.Err))
		return h.ended()
	case r.Err != nil:
		return r.Err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held() {
		return context.Cause(h.ctx) // lost while we marked it
	}
	h.mode = Read
	return nil
}
