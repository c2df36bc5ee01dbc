package bench

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// W5's ceiling: the acquisitions/s of an ideal FIFO read/write lock on
// W5's workload, where only the network's delay and the holds take time.
// It is the bound that 1 ms holds and 10% writes set for any recipe on
// one server, so a measured W5 rate can be read against it.
//
// The ideal lock. The server costs nothing, and each message takes the
// one-way delay. An acquisition is one round trip when nothing is ahead of
// it. A waiter is granted one delay after the server deletes the last node
// that blocks it, by one notification. A reader is blocked by a writer
// ahead, a writer by any node ahead. A release sends the delete and waits
// for its answer, and the next acquisition starts then.

// BenchmarkW5Ceiling reports W5's ceiling at the one-way delays that
// scripts/compare-peers.sh measures: on loopback (0) and through its
// +1 ms proxy (1 ms each way).
func BenchmarkW5Ceiling(b *testing.B) {
	for range b.N {
		b.ReportMetric(idealW5(0, contenders, 1-w5ReadShare, w5Hold), "acq/s-loopback")
		b.ReportMetric(idealW5(time.Millisecond, contenders, 1-w5ReadShare, w5Hold), "acq/s-1ms")
	}
}

// TestIdealW5 checks the model on the two cases that have a closed form.
func TestIdealW5(t *testing.T) {
	const hold, delay = time.Millisecond, time.Millisecond
	// Only readers: nothing waits. A client's cycle is a round trip to
	// acquire, the hold, and a round trip to release.
	readers := float64(contenders) / (hold + 4*delay).Seconds()
	// Only writers: one holds at a time. After a holder's delete reaches
	// the server, the next is told one delay later, holds, and its own
	// delete reaches the server one delay after that.
	writers := 1 / (hold + 2*delay).Seconds()
	for _, c := range []struct {
		name      string
		write     float64
		got, want float64
		tolerance float64
	}{
		{"readers", 0, idealW5(delay, contenders, 0, hold), readers, 0.001},
		{"writers", 1, idealW5(delay, contenders, 1, hold), writers, 0.001},
	} {
		if math.Abs(c.got-c.want) > c.tolerance*c.want {
			t.Errorf("%s: %.1f acquisitions/s, want %.1f", c.name, c.got, c.want)
		}
	}
	// Writes can only lower the rate, on either side.
	mixed := idealW5(delay, contenders, 1-w5ReadShare, hold)
	if !(writers < mixed && mixed < readers) {
		t.Errorf("mixed: %.1f acquisitions/s, want between %.1f and %.1f", mixed, writers, readers)
	}
}

// idealW5 runs the ideal lock for clients that each loop: a write with
// probability write, else a read; hold; release. It returns the
// acquisitions per second over 200 simulated seconds, from a fixed seed.
func idealW5(delay time.Duration, clients int, write float64, hold time.Duration) float64 {
	const length = 200 * time.Second
	rnd := rand.New(rand.NewPCG(1, 2))
	type node struct {
		write    bool
		answered bool // the create's answer has reached the client
		granted  bool
	}
	var (
		queue  []*node // the server's queue, oldest first
		events idealEvents
		seq    int
		grants int
	)
	at := func(t time.Duration, client int, do func(time.Duration, int)) {
		seq++
		heap.Push(&events, idealEvent{t, seq, client, do})
	}
	nodes := make([]*node, clients)
	blocked := func(n *node) bool {
		for _, m := range queue {
			if m == n {
				return false
			}
			if n.write || m.write {
				return true
			}
		}
		panic("node not queued")
	}
	var send, arrive, answer, grant, deleted func(time.Duration, int)
	send = func(t time.Duration, c int) {
		nodes[c] = &node{write: rnd.Float64() < write}
		at(t+delay, c, arrive)
	}
	arrive = func(t time.Duration, c int) {
		queue = append(queue, nodes[c])
		at(t+delay, c, answer)
	}
	answer = func(t time.Duration, c int) {
		n := nodes[c]
		n.answered = true
		if !n.granted && !blocked(n) {
			n.granted = true
			grant(t, c)
		}
	}
	grant = func(t time.Duration, c int) {
		grants++
		at(t+hold+delay, c, deleted)
	}
	deleted = func(t time.Duration, c int) {
		queue = slices.DeleteFunc(queue, func(m *node) bool { return m == nodes[c] })
		at(t+delay, c, send) // the delete's answer; the next cycle starts
		// The notification: a waiter that has its answer is told one delay
		// later. One without it learns from its answer.
		for i, n := range nodes {
			if n != nil && n.answered && !n.granted && slices.Contains(queue, n) && !blocked(n) {
				n.granted = true
				at(t+delay, i, grant)
			}
		}
	}
	for c := range clients {
		at(0, c, send)
	}
	for events.Len() > 0 {
		e := heap.Pop(&events).(idealEvent)
		if e.t > length {
			break
		}
		e.do(e.t, e.client)
	}
	return float64(grants) / length.Seconds()
}

type idealEvent struct {
	t      time.Duration
	seq    int // ties in the order they were made
	client int
	do     func(time.Duration, int)
}

type idealEvents []idealEvent

func (h idealEvents) Len() int { return len(h) }
func (h idealEvents) Less(i, j int) bool {
	return h[i].t < h[j].t || h[i].t == h[j].t && h[i].seq < h[j].seq
}
func (h idealEvents) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *idealEvents) Push(x any)   { *h = append(*h, x.(idealEvent)) }
func (h *idealEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
