package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/zkrwlock/rwlock"
)

// progress tells, on stderr, why an acquisition waits. After delay it
// reads the queue every interval and prints a line when the answer
// changes, and every repeat otherwise:
//
//	zkrwlock exec: waiting: 2 ahead, holder write-0000000007 owned by build-7:4242 (3s)
//
// It finds our own node by our session id: the library does not tell the
// name of a node while the acquisition is in progress, and the owner
// string need not be unique, but one zkrwlock process has one session and
// queues one node per lock.
type progress struct {
	l        *rwlock.RWLock
	session  func() int64 // our session id, which can change if the session expires
	w        io.Writer
	prog     string
	delay    time.Duration
	interval time.Duration
	repeat   time.Duration

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	printed bool // read after stop
}

// start starts reporting until stop.
func (p *progress) start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Go(func() { p.run(ctx) })
}

// stop ends the reporting and reports whether a line was printed.
func (p *progress) stop() bool {
	p.cancel()
	p.wg.Wait()
	return p.printed
}

func (p *progress) run(ctx context.Context) {
	begin := time.Now()
	t := time.NewTimer(p.delay)
	defer t.Stop()
	var last string
	var lastAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		state := p.state(ctx)
		if ctx.Err() != nil {
			return
		}
		if now := time.Now(); state != last || now.Sub(lastAt) >= p.repeat {
			printLine(p.w, p.prog, fmt.Sprintf("waiting: %s (%v)", state, now.Sub(begin).Round(time.Second)))
			last, lastAt, p.printed = state, now, true
		}
		t.Reset(p.interval)
	}
}

// state reads the queue and describes our place in it.
func (p *progress) state(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, p.interval)
	defer cancel()
	q, err := p.l.Queue(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "cannot read the queue: ZooKeeper does not answer"
		}
		return "cannot read the queue: " + err.Error()
	}
	return describeQueue(q, p.session())
}

// describeQueue says where our node (the one of session self) is in q:
// how many nodes are ahead of it and who holds the lock; that nothing holds
// it back any more (the listing is newer than what the acquisition has
// seen: it is about to be granted); or that it is not there yet.
func describeQueue(q []rwlock.Entry, self int64) string {
	ahead := -1
	var holders []rwlock.Entry
	for i, e := range q {
		if e.SessionID == self {
			if e.Held {
				return fmt.Sprintf("nothing holds %s back any more: it is being granted", nodeName(e.Node))
			}
			ahead = i
			break
		}
		if e.Held {
			holders = append(holders, e)
		}
	}
	var s string
	switch {
	case ahead >= 0:
		s = fmt.Sprintf("%d ahead", ahead)
	case len(q) == 0:
		return "not queued yet; nobody holds the lock"
	default:
		s = fmt.Sprintf("not queued yet; %d in the queue", len(q))
	}
	switch len(holders) {
	case 0:
	case 1:
		s += ", holder " + describeHolders(holders)
	default:
		s += ", holders " + describeHolders(holders)
	}
	return s
}

// describeHolders names the first holder, and counts the others.
func describeHolders(holders []rwlock.Entry) string {
	if len(holders) == 0 {
		return "none"
	}
	h := holders[0]
	s := fmt.Sprintf("%s owned by %s", nodeName(h.Node), ownerText(h.Owner))
	if len(holders) > 1 {
		s += fmt.Sprintf(" and %d more", len(holders)-1)
	}
	return s
}
