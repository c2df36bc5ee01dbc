package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos run's checker (TestChaos, chaos_test.go). The client processes
// report what they did as events with wall-clock times (one machine, one
// clock); the nemesis reports its faults. The checker reads them after the
// run.

// chaosEvent is one line a chaos client prints, after "event ".
type chaosEvent struct {
	Client int    // the client's number; a replacement gets a new one
	Kind   string // waiting, granted, step, nested, downgraded, lost, released
	Mode   string // granted: read or write
	Node   string // granted: the node's name
	At     int64  // wall clock, ns: for a step or a nested grant, taken before asking
	Done   int64  // step, nested: when the answer came (a pause may fall in between)
	Cause  string // lost: the error
}

// chaosFault is one fault the nemesis made, over [From, To].
type chaosFault struct {
	Kind     string // leader-kill, follower-kill, limits, partition-short, partition-long, stop-short, stop-long, holder-kill
	Client   int    // the client it hit, or -1 for a server fault
	From, To int64
}

// chaosGrant is one grant as the events tell it.
type chaosGrant struct {
	client     int
	node       string
	write      bool
	at         int64 // returned to its caller
	downgraded int64 // when it became a read grant; 0 if never
	steps      []chaosEvent
	lost       *chaosEvent
	end        int64 // released, lost or the client's last event
}

func (g *chaosGrant) writeAt(t int64) bool { return g.write && (g.downgraded == 0 || t < g.downgraded) }

// chaosReport is what the checker found.
type chaosReport struct {
	grants, reads, writes, steps, nested int
	violations                           []string // a step under a grant after a conflicting grant was returned
	ambiguous                            int      // a conflicting grant came while a step's Err was being asked: a pause fell there
	lost                                 map[string]int
	falseLosses                          []string // lost with no fault on its client or on any server around it
	longestStall                         time.Duration
	orphans                              []string
}

// grantsOf rebuilds the grants from each client's events, in order.
func grantsOf(events []chaosEvent) []*chaosGrant {
	var grants []*chaosGrant
	cur := map[int]*chaosGrant{}
	for _, e := range events {
		g := cur[e.Client]
		switch e.Kind {
		case "granted":
			g = &chaosGrant{client: e.Client, node: e.Node, write: e.Mode == "write", at: e.At, end: e.At}
			cur[e.Client] = g
			grants = append(grants, g)
			continue
		case "waiting":
			delete(cur, e.Client)
			continue
		}
		if g == nil {
			continue
		}
		g.end = max(g.end, e.At, e.Done)
		switch e.Kind {
		case "step", "nested":
			g.steps = append(g.steps, e)
		case "downgraded":
			g.downgraded = e.At
		case "lost":
			g.lost = &e
			delete(cur, e.Client)
		case "released":
			delete(cur, e.Client)
		}
	}
	return grants
}

// check reads a run's events and faults. Events must be in each client's
// order; the clients' streams may be interleaved.
func check(events []chaosEvent, faults []chaosFault, settle time.Duration) chaosReport {
	r := chaosReport{lost: map[string]int{}}
	grants := grantsOf(events)
	for _, g := range grants {
		r.grants++
		if g.write {
			r.writes++
		} else {
			r.reads++
		}
		for _, s := range g.steps {
			if s.Kind == "nested" {
				r.nested++
			} else {
				r.steps++
			}
		}
	}
	// A step of a at t0 (asked before Err) under a grant that another
	// client's conflicting grant b was returned before: a was not told in
	// time. If b came while the step waited for its answer, a pause fell
	// there and when Err looked cannot be told.
	for _, a := range grants {
		for _, b := range grants {
			if a.client == b.client || b.at <= a.at || (!b.write && !a.writeAt(b.at)) {
				continue
			}
			for _, s := range a.steps {
				switch {
				case b.at < s.At:
					r.violations = append(r.violations, fmt.Sprintf(
						"c%d took a %s %v after c%d was granted %s (c%d's grant %s at %v, c%d's at %v)",
						a.client, s.Kind, time.Duration(s.At-b.at), b.client, modeName(b.write),
						a.client, a.node, time.Unix(0, a.at).Format("15:04:05.000"), b.client, time.Unix(0, b.at).Format("15:04:05.000")))
				case b.at < s.Done:
					r.ambiguous++
				}
			}
		}
	}
	for _, g := range grants {
		if g.lost == nil {
			continue
		}
		cause := lossKind(g.lost.Cause)
		r.lost[cause]++
		if !faultNear(faults, g.client, g.at, g.lost.At, settle) {
			r.falseLosses = append(r.falseLosses, fmt.Sprintf("c%d lost %s at %s: %s",
				g.client, g.node, time.Unix(0, g.lost.At).Format("15:04:05.000"), g.lost.Cause))
		}
	}
	r.longestStall = longestStall(events, faults, settle)
	return r
}

func modeName(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

// lossKind names a loss by its cause, for the figures.
func lossKind(cause string) string {
	for _, k := range []string{"no answer from ZooKeeper", "session has been expired", "lock node deleted", "disconnected", "connection closed"} {
		if strings.Contains(cause, k) {
			return k
		}
	}
	return "other"
}

// anyClient asks faultNear for a fault of any kind.
const anyClient = -2

// faultNear reports whether a fault on client, or on any server, overlaps
// [from, to] widened by settle.
func faultNear(faults []chaosFault, client int, from, to int64, settle time.Duration) bool {
	for _, f := range faults {
		if (client == anyClient || f.Client == client || f.Client < 0) && f.From <= to && f.To+int64(settle) >= from {
			return true
		}
	}
	return false
}

// longestStall is the longest time between two grants (of anyone) while a
// client waited, outside every fault and the settle time after it.
func longestStall(events []chaosEvent, faults []chaosFault, settle time.Duration) time.Duration {
	var grants, waits []int64
	for _, e := range events {
		switch e.Kind {
		case "granted":
			grants = append(grants, e.At)
		case "waiting":
			waits = append(waits, e.At)
		}
	}
	slices.Sort(grants)
	slices.Sort(waits)
	var longest time.Duration
	for i := 1; i < len(grants); i++ {
		from, to := grants[i-1], grants[i]
		waited := false
		for _, w := range waits {
			if w >= from && w < to {
				waited = true
				break
			}
		}
		if !waited || faultNear(faults, anyClient, from, to, settle) {
			continue
		}
		longest = max(longest, time.Duration(to-from))
	}
	return longest
}

// The checker flags a step taken after a conflicting grant, and only that.
func TestChaosCheckerFlagsALateHolder(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	base := []chaosEvent{
		{Client: 1, Kind: "waiting", At: ms(0)},
		{Client: 1, Kind: "granted", Mode: "write", Node: "w1", At: ms(10)},
		{Client: 2, Kind: "waiting", At: ms(20)},
		{Client: 1, Kind: "step", At: ms(30), Done: ms(31)},
		{Client: 1, Kind: "released", At: ms(40)},
		{Client: 2, Kind: "granted", Mode: "read", Node: "r2", At: ms(45)},
		{Client: 2, Kind: "step", At: ms(50), Done: ms(51)},
		{Client: 3, Kind: "granted", Mode: "read", Node: "r3", At: ms(55)},
		{Client: 2, Kind: "step", At: ms(60), Done: ms(61)},
	}
	r := check(base, nil, 0)
	assert.Empty(t, r.violations, "readers together, a writer before them: no conflict")
	assert.Equal(t, 3, r.grants)

	late := append(slices.Clone(base),
		chaosEvent{Client: 4, Kind: "granted", Mode: "write", Node: "w4", At: ms(70)},
		chaosEvent{Client: 3, Kind: "nested", At: ms(80), Done: ms(81)})
	r = check(late, nil, 0)
	require.Len(t, r.violations, 1, "c3 went on after c4's write grant")
	assert.Contains(t, r.violations[0], "c3 took a nested")

	paused := append(slices.Clone(base),
		chaosEvent{Client: 4, Kind: "granted", Mode: "write", Node: "w4", At: ms(70)},
		chaosEvent{Client: 2, Kind: "step", At: ms(65), Done: ms(90)})
	r = check(paused, nil, 0)
	assert.Empty(t, r.violations)
	assert.Equal(t, 1, r.ambiguous, "the grant came while the step's Err was asked")

	downgraded := []chaosEvent{
		{Client: 1, Kind: "granted", Mode: "write", Node: "w1", At: ms(10)},
		{Client: 1, Kind: "downgraded", At: ms(20)},
		{Client: 2, Kind: "granted", Mode: "read", Node: "r2", At: ms(30)},
		{Client: 1, Kind: "step", At: ms(40), Done: ms(41)},
	}
	assert.Empty(t, check(downgraded, nil, 0).violations, "a reader may join a downgraded grant")
}

// A loss with no fault near it is a false loss; one inside a fault is not.
func TestChaosCheckerCountsFalseLosses(t *testing.T) {
	s := int64(time.Second)
	events := []chaosEvent{
		{Client: 1, Kind: "granted", Mode: "write", Node: "w1", At: 10 * s},
		{Client: 1, Kind: "lost", At: 12 * s, Cause: "rwlock: grant lost: x: no answer from ZooKeeper for 3s"},
		{Client: 2, Kind: "granted", Mode: "write", Node: "w2", At: 30 * s},
		{Client: 2, Kind: "lost", At: 31 * s, Cause: "zk: session has been expired by the server"},
	}
	faults := []chaosFault{{Kind: "partition-long", Client: 1, From: 11 * s, To: 20 * s}}
	r := check(events, faults, time.Second)
	assert.Equal(t, map[string]int{"no answer from ZooKeeper": 1, "session has been expired": 1}, r.lost)
	require.Len(t, r.falseLosses, 1)
	assert.Contains(t, r.falseLosses[0], "c2 lost w2")
}
