package integration

import (
	"cmp"
	"fmt"
	"maps"
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
	Worker int    `json:",omitempty"` // the goroutine of the client: 0 takes locks and sets, others are coalesced readers
	Kind   string // waiting, granted, step, nested, downgraded, lost, released
	Lock   string `json:",omitempty"` // which lock: "a" (every kind of round) or "b" (the second lock of sets)
	Mode   string `json:",omitempty"` // granted: read or write
	Node   string `json:",omitempty"` // granted: the node's name
	Set    int    `json:",omitempty"` // granted: how many locks its LockAll took; 0 for Lock or RLock
	Limit  int64  `json:",omitempty"` // granted: the lock's hold limit (WithMaxHold), ns; 0 for none
	Shared bool   `json:",omitempty"` // granted: by a lock that coalesces its readers
	Until  int64  `json:",omitempty"` // granted: when its holder means to let go (the nemesis aims at long holds)
	At     int64  // wall clock, ns: for a step or a nested grant, taken before asking
	Done   int64  `json:",omitempty"` // step, nested: when the answer came (a pause may fall in between)
	Cause  string `json:",omitempty"` // lost: the error
	Weight int64  `json:",omitempty"` // granted: the permits taken of the bounded lock c (chaosCapacity)
}

// chaosFault is one fault the nemesis made, over [From, To].
type chaosFault struct {
	Kind     string // leader-kill, follower-kill, limits, partition-short, partition-long, stop-short, stop-long, holder-kill
	Client   int    // the client it hit, or -1 for a server fault
	From, To int64
}

// chaosHolder is one goroutine of one client: the events of each come in
// its order, and a grant belongs to one.
type chaosHolder struct{ client, worker int }

func (h chaosHolder) String() string {
	if h.worker == 0 {
		return fmt.Sprintf("c%d", h.client)
	}
	return fmt.Sprintf("c%d.%d", h.client, h.worker)
}

// chaosGrant is one grant of one lock as the events tell it.
type chaosGrant struct {
	holder     chaosHolder
	lock       string
	node       string
	write      bool
	set        int   // how many locks its LockAll took; 0 alone
	limit      int64 // its hold limit, ns; 0 for none
	weight     int64 // its permits of the bounded lock c; 0 for a and b
	shared     bool  // a coalesced reader's
	at         int64 // returned to its caller
	downgraded int64 // when it became a read grant; 0 if never
	steps      []chaosEvent
	lost       *chaosEvent
}

func (g *chaosGrant) writeAt(t int64) bool { return g.write && (g.downgraded == 0 || t < g.downgraded) }

// chaosReport is what the checker found.
type chaosReport struct {
	Grants, Reads, Writes int
	Sets                  int // grants taken by LockAll with another lock
	Limited               int // grants under a hold limit
	Coalesced             int // grants of coalesced readers
	Joined                int // of them, grants on a node another reader of the process held too
	Permits               int // grants of the bounded lock c
	Steps, Nested         int
	Violations            []string       // a step under a grant after a conflicting grant was returned, or past its hold limit
	Terms                 int            // grants of the election e (chaos_elect_test.go)
	DoubleLeaders         []string       // of Violations, those of e: a leader's step after another's Campaign returned
	Ambiguous             int            // a conflicting grant came while a step's Err was being asked: a pause fell there
	Lost                  map[string]int // losses by cause
	FalseLosses           []string       // lost with no fault on its client or on any server around it
	OtherLosses           []string       // the causes lossKind does not name
	LongestStall          time.Duration
}

// grantsOf rebuilds the grants from each holder's events, in order.
func grantsOf(events []chaosEvent) []*chaosGrant {
	var grants []*chaosGrant
	cur := map[chaosHolder]map[string]*chaosGrant{}
	for _, e := range events {
		h := chaosHolder{e.Client, e.Worker}
		switch e.Kind {
		case "waiting":
			delete(cur, h)
			continue
		case "granted":
			g := &chaosGrant{holder: h, lock: e.Lock, node: e.Node, write: e.Mode == "write",
				set: e.Set, limit: e.Limit, shared: e.Shared, at: e.At, weight: e.Weight}
			if cur[h] == nil {
				cur[h] = map[string]*chaosGrant{}
			}
			cur[h][e.Lock] = g
			grants = append(grants, g)
			continue
		}
		g := cur[h][e.Lock]
		if g == nil {
			continue
		}
		switch e.Kind {
		case "step", "nested":
			g.steps = append(g.steps, e)
		case "downgraded":
			g.downgraded = e.At
		case "lost":
			g.lost = &e
			delete(cur[h], e.Lock)
		case "released":
			delete(cur[h], e.Lock)
		}
	}
	return grants
}

// check reads a run's events and faults. Events must be in each holder's
// order; the holders' streams may be interleaved.
func check(events []chaosEvent, faults []chaosFault, settle time.Duration) chaosReport {
	r := chaosReport{Lost: map[string]int{}}
	grants := grantsOf(events)
	sharers := map[string]int{} // coalesced grants per client and node
	for _, g := range grants {
		r.Grants++
		if g.write {
			r.Writes++
		} else {
			r.Reads++
		}
		if g.set > 1 {
			r.Sets++
		}
		if g.limit > 0 {
			r.Limited++
		}
		if g.lock == chaosElectionLock {
			r.Terms++
		}
		if g.weight > 0 {
			r.Permits++
		}
		if g.shared {
			r.Coalesced++
			sharers[fmt.Sprint(g.holder.client, g.lock, g.node)]++
		}
		for _, s := range g.steps {
			if s.Kind == "nested" {
				r.Nested++
			} else {
				r.Steps++
			}
		}
	}
	for _, g := range grants {
		if g.shared && sharers[fmt.Sprint(g.holder.client, g.lock, g.node)] > 1 {
			r.Joined++
		}
	}
	r.Violations, r.Ambiguous = lateSteps(grants)
	r.DoubleLeaders = doubleLeaders(grants)
	r.Violations = append(r.Violations, pastCapacity(grants)...)
	for _, g := range grants {
		if g.lost == nil {
			continue
		}
		cause := lossKind(g.lost.Cause)
		r.Lost[cause]++
		if cause == "other" {
			r.OtherLosses = append(r.OtherLosses, fmt.Sprintf("%v lost %s at %s: %s",
				g.holder, g.node, clock(g.lost.At), g.lost.Cause))
		}
		// A hold limit ends a grant by design, with or without a fault.
		if cause != lossHoldLimit && !faultNear(faults, g.holder.client, g.at, g.lost.At, settle) {
			r.FalseLosses = append(r.FalseLosses, fmt.Sprintf("%v lost %s at %s: %s",
				g.holder, g.node, clock(g.lost.At), g.lost.Cause))
		}
	}
	r.LongestStall = longestStall(events, faults, settle)
	return r
}

// lateSteps finds the steps a holder took when it should have known its
// grant had ended, lock by lock.
//
// A step of a at time s (taken before asking Err, and reported only if Err
// said held) under a grant that another holder's conflicting grant b was
// returned before: a was not told in time. If b came while the step
// waited for its answer, a pause fell there and when Err looked cannot be
// told: that is ambiguous, not a violation.
//
// A grant under a hold limit ends, for its holder, at the limit's notice,
// a head start before the limit: Done closes and Err fails from then on,
// and the node goes only at the limit, so no conflicting grant can come
// before it. The notice is at most the limit after the lock granted the
// node, which is before the call returned (a coalesced reader's limit
// counts from the node's grant, earlier still): a step taken after a's
// return plus its limit is late, whoever else held.
func lateSteps(grants []*chaosGrant) (violations []string, ambiguous int) {
	byLock := map[string][]*chaosGrant{}
	for _, g := range grants {
		byLock[g.lock] = append(byLock[g.lock], g)
	}
	for _, lock := range slices.Sorted(maps.Keys(byLock)) {
		gs := byLock[lock]
		slices.SortStableFunc(gs, func(x, y *chaosGrant) int { return cmp.Compare(x.at, y.at) })
		for i, a := range gs {
			if len(a.steps) == 0 {
				continue
			}
			last := slices.MaxFunc(a.steps, func(x, y chaosEvent) int { return cmp.Compare(x.Done, y.Done) }).Done
			for _, s := range a.steps {
				if a.limit > 0 && s.At > a.at+a.limit {
					violations = append(violations, fmt.Sprintf(
						"%v took a %s %v after its hold limit (%s grant %s of lock %s at %s, limit %v)",
						a.holder, s.Kind, time.Duration(s.At-a.at-a.limit), modeName(a.write), a.node, lock,
						clock(a.at), time.Duration(a.limit)))
				}
			}
			// Only grants returned after a's and before its last step matter.
			for _, b := range gs[i+1:] {
				if b.at >= last {
					break
				}
				if b.holder == a.holder || b.at <= a.at || (!b.write && !a.writeAt(b.at)) {
					continue
				}
				for _, s := range a.steps {
					switch {
					case b.at < s.At:
						violations = append(violations, fmt.Sprintf(
							"%v took a %s %v after %v was granted %s (lock %s: %v's grant %s at %s, %v's %s at %s)",
							a.holder, s.Kind, time.Duration(s.At-b.at), b.holder, modeName(b.write), lock,
							a.holder, a.node, clock(a.at), b.holder, b.node, clock(b.at)))
					case b.at < s.Done:
						ambiguous++
					}
				}
			}
		}
	}
	return violations, ambiguous
}

// pastCapacity finds the moments the holders of the bounded lock c held
// more than chaosCapacity permits, as lateSteps finds conflicts: it is the
// same check, with weights.
//
// A grant surely held from its return to its last step's start (a step is
// reported only if Err, asked after that, said held). At each grant's
// return, the weights of the grants surely held then are summed. The
// moments between a step's start and its answer are left out, as
// lateSteps's ambiguous ones are.
func pastCapacity(grants []*chaosGrant) (violations []string) {
	var gs []*chaosGrant
	for _, g := range grants {
		if g.weight > 0 {
			gs = append(gs, g)
		}
	}
	end := func(g *chaosGrant) int64 {
		last := g.at
		for _, s := range g.steps {
			last = max(last, s.At)
		}
		return last
	}
	for _, b := range gs {
		sum := int64(0)
		var who []string
		for _, a := range gs {
			if a.at <= b.at && b.at <= end(a) {
				sum += a.weight
				who = append(who, fmt.Sprintf("%v %s (%d, at %s)", a.holder, a.node, a.weight, clock(a.at)))
			}
		}
		if sum > chaosCapacity {
			violations = append(violations, fmt.Sprintf("%d permits of %d held when %v was granted %s at %s: %s",
				sum, chaosCapacity, b.holder, b.node, clock(b.at), strings.Join(who, ", ")))
		}
	}
	return violations
}

func clock(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000") }

func modeName(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

// lossHoldLimit is the loss of a grant that reached its hold limit.
const lossHoldLimit = "hold limit reached"

// lossKind names a loss by its cause, for the figures.
func lossKind(cause string) string {
	for _, k := range []string{lossHoldLimit, "no answer from ZooKeeper", "session has been expired", "lock node deleted", "disconnected", "connection closed"} {
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
		// The first wait at or after from tells whether anyone waited before to.
		j, _ := slices.BinarySearch(waits, from)
		if j == len(waits) || waits[j] >= to || faultNear(faults, anyClient, from, to, settle) {
			continue
		}
		longest = max(longest, time.Duration(to-from))
	}
	return longest
}

func ms(n int64) int64 { return n * int64(time.Millisecond) }

// The checker flags a step taken after a conflicting grant, and only that.
func TestChaosCheckerFlagsALateHolder(t *testing.T) {
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
	assert.Empty(t, r.Violations, "readers together, a writer before them: no conflict")
	assert.Equal(t, 3, r.Grants)

	late := append(slices.Clone(base),
		chaosEvent{Client: 4, Kind: "granted", Mode: "write", Node: "w4", At: ms(70)},
		chaosEvent{Client: 3, Kind: "nested", At: ms(80), Done: ms(81)})
	r = check(late, nil, 0)
	require.Len(t, r.Violations, 1, "c3 went on after c4's write grant")
	assert.Contains(t, r.Violations[0], "c3 took a nested")

	paused := append(slices.Clone(base),
		chaosEvent{Client: 4, Kind: "granted", Mode: "write", Node: "w4", At: ms(70)},
		chaosEvent{Client: 2, Kind: "step", At: ms(65), Done: ms(90)})
	r = check(paused, nil, 0)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 1, r.Ambiguous, "the grant came while the step's Err was asked")

	downgraded := []chaosEvent{
		{Client: 1, Kind: "granted", Mode: "write", Node: "w1", At: ms(10)},
		{Client: 1, Kind: "downgraded", At: ms(20)},
		{Client: 2, Kind: "granted", Mode: "read", Node: "r2", At: ms(30)},
		{Client: 1, Kind: "step", At: ms(40), Done: ms(41)},
	}
	assert.Empty(t, check(downgraded, nil, 0).Violations, "a reader may join a downgraded grant")
}

// A set's grants are checked lock by lock: a late step under one member is
// flagged, and a grant of the other lock conflicts with nothing of this one.
func TestChaosCheckerFlagsALateStepInASet(t *testing.T) {
	set := []chaosEvent{
		{Client: 1, Kind: "waiting", At: ms(0)},
		{Client: 1, Kind: "granted", Lock: "b", Mode: "read", Node: "rb1", Set: 2, At: ms(10)},
		{Client: 1, Kind: "granted", Lock: "a", Mode: "write", Node: "wa1", Set: 2, At: ms(10)},
		{Client: 1, Kind: "step", Lock: "a", At: ms(20), Done: ms(21)},
		{Client: 1, Kind: "step", Lock: "b", At: ms(20), Done: ms(21)},
		{Client: 2, Kind: "granted", Lock: "b", Mode: "read", Node: "rb2", At: ms(25)},
	}
	ok := append(slices.Clone(set),
		chaosEvent{Client: 1, Kind: "step", Lock: "a", At: ms(30), Done: ms(31)},
		chaosEvent{Client: 1, Kind: "step", Lock: "b", At: ms(30), Done: ms(31)})
	r := check(ok, nil, 0)
	assert.Empty(t, r.Violations, "a reader of b beside the set's reader of b, nobody else on a")
	assert.Equal(t, 2, r.Sets)

	late := append(slices.Clone(set),
		chaosEvent{Client: 2, Kind: "granted", Lock: "a", Mode: "read", Node: "ra2", At: ms(40)},
		chaosEvent{Client: 1, Kind: "step", Lock: "a", At: ms(50), Done: ms(51)},
		chaosEvent{Client: 1, Kind: "step", Lock: "b", At: ms(50), Done: ms(51)})
	r = check(late, nil, 0)
	require.Len(t, r.Violations, 1, "c1's write grant of a went on after c2's read grant of a; b is shared")
	assert.Contains(t, r.Violations[0], "lock a")
	assert.Contains(t, r.Violations[0], "c1 took a step")
}

// A grant under a hold limit ends at its notice: a step past the limit is
// late even if nobody else was granted, and one inside it is not.
func TestChaosCheckerFlagsAStepPastItsHoldLimit(t *testing.T) {
	limit := ms(100)
	events := []chaosEvent{
		{Client: 1, Kind: "waiting", At: ms(0)},
		{Client: 1, Kind: "granted", Lock: "a", Mode: "read", Node: "r1", Limit: limit, At: ms(10)},
		{Client: 1, Kind: "step", Lock: "a", At: ms(90), Done: ms(95)},
		{Client: 1, Kind: "nested", Lock: "a", At: ms(105), Done: ms(106)},
		{Client: 1, Kind: "step", Lock: "a", At: ms(120), Done: ms(121)},
		{Client: 1, Kind: "lost", Lock: "a", At: ms(130), Cause: "rwlock: grant lost: r1: rwlock: hold limit reached: held for 100ms"},
	}
	r := check(events, nil, 0)
	require.Len(t, r.Violations, 1, "only the step at 120ms, 10ms past the limit")
	assert.Contains(t, r.Violations[0], "c1 took a step 10ms after its hold limit")
	assert.Equal(t, map[string]int{lossHoldLimit: 1}, r.Lost)
	assert.Empty(t, r.FalseLosses, "a hold limit's loss needs no fault")
	assert.Equal(t, 1, r.Limited)
}

// Coalesced readers are holders of their own: readers of one process's
// shared node are no conflict for each other, but a writer of the same
// process granted beside them is, and so is another process's.
func TestChaosCheckerFlagsACoalescedReader(t *testing.T) {
	readers := []chaosEvent{
		{Client: 1, Worker: 1, Kind: "waiting", At: ms(0)},
		{Client: 1, Worker: 2, Kind: "waiting", At: ms(1)},
		{Client: 1, Worker: 1, Kind: "granted", Lock: "a", Mode: "read", Node: "r1", Shared: true, At: ms(10)},
		{Client: 1, Worker: 2, Kind: "granted", Lock: "a", Mode: "read", Node: "r1", Shared: true, At: ms(12)},
		{Client: 1, Worker: 1, Kind: "step", Lock: "a", At: ms(20), Done: ms(21)},
		{Client: 1, Worker: 2, Kind: "step", Lock: "a", At: ms(22), Done: ms(23)},
	}
	r := check(readers, nil, 0)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 2, r.Coalesced)
	assert.Equal(t, 2, r.Joined, "two readers on one node")

	ownWriter := append(slices.Clone(readers),
		chaosEvent{Client: 1, Worker: 1, Kind: "released", Lock: "a", At: ms(30)},
		chaosEvent{Client: 1, Worker: 0, Kind: "granted", Lock: "a", Mode: "write", Node: "w1", At: ms(40)},
		chaosEvent{Client: 1, Worker: 2, Kind: "step", Lock: "a", At: ms(50), Done: ms(51)})
	r = check(ownWriter, nil, 0)
	require.Len(t, r.Violations, 1, "the second reader went on after its own process's writer was granted")
	assert.Contains(t, r.Violations[0], "c1.2 took a step")
	assert.Contains(t, r.Violations[0], "after c1 was granted write")
}

// A loss with no fault near it is a false loss; one inside a fault is not.
// A loss of a cause the figures do not name is listed.
func TestChaosCheckerCountsFalseLosses(t *testing.T) {
	s := int64(time.Second)
	events := []chaosEvent{
		{Client: 1, Kind: "granted", Mode: "write", Node: "w1", At: 10 * s},
		{Client: 1, Kind: "lost", At: 12 * s, Cause: "rwlock: grant lost: x: no answer from ZooKeeper for 3s"},
		{Client: 2, Kind: "granted", Mode: "write", Node: "w2", At: 30 * s},
		{Client: 2, Kind: "lost", At: 31 * s, Cause: "zk: session has been expired by the server"},
		{Client: 3, Kind: "granted", Mode: "read", Node: "r3", At: 12 * s},
		{Client: 3, Kind: "lost", At: 13 * s, Cause: "something new"},
	}
	faults := []chaosFault{{Kind: "partition-long", Client: 1, From: 11 * s, To: 20 * s},
		{Kind: "stop-long", Client: 3, From: 12 * s, To: 13 * s}}
	r := check(events, faults, time.Second)
	assert.Equal(t, map[string]int{"no answer from ZooKeeper": 1, "session has been expired": 1, "other": 1}, r.Lost)
	require.Len(t, r.FalseLosses, 1)
	assert.Contains(t, r.FalseLosses[0], "c2 lost w2")
	require.Len(t, r.OtherLosses, 1, "a cause the figures do not name is listed")
	assert.Contains(t, r.OtherLosses[0], "c3 lost r3 at")
}

// The bounded lock's permits are summed over the grants surely held at
// each grant: past the capacity is a violation; a step whose answer came
// after the grant, but that began before it, is not.
func TestChaosCheckerFlagsPermitsPastTheCapacity(t *testing.T) {
	base := []chaosEvent{
		{Client: 1, Kind: "granted", Lock: "c", Mode: "read", Node: "p1", Weight: 2, At: ms(10)},
		{Client: 2, Kind: "granted", Lock: "c", Mode: "read", Node: "p2", Weight: 2, At: ms(20)},
		{Client: 1, Kind: "step", Lock: "c", At: ms(30), Done: ms(31)},
		{Client: 2, Kind: "step", Lock: "c", At: ms(32), Done: ms(33)},
		{Client: 1, Kind: "released", Lock: "c", At: ms(40)},
		{Client: 3, Kind: "granted", Lock: "c", Mode: "read", Node: "p3", Weight: 1, At: ms(45)},
		{Client: 1, Kind: "granted", Lock: "c", Mode: "read", Node: "p4", Weight: 1, At: ms(46)},
		{Client: 2, Kind: "step", Lock: "c", At: ms(50), Done: ms(60)},
		{Client: 3, Kind: "step", Lock: "c", At: ms(52), Done: ms(58)},
		{Client: 1, Kind: "step", Lock: "c", At: ms(52), Done: ms(58)},
	}
	r := check(base, nil, 0)
	assert.Empty(t, r.Violations, "2+1+1 of 4")
	assert.Equal(t, 4, r.Permits)

	over := append(slices.Clone(base),
		chaosEvent{Client: 4, Kind: "granted", Lock: "c", Mode: "read", Node: "p5", Weight: 1, At: ms(48)})
	r = check(over, nil, 0)
	require.Len(t, r.Violations, 1, "c1, c2 and c3 took steps after the fifth permit")
	assert.Contains(t, r.Violations[0], "5 permits of 4")

	ambiguous := append(slices.Clone(base),
		chaosEvent{Client: 4, Kind: "granted", Lock: "c", Mode: "read", Node: "p5", Weight: 1, At: ms(55)})
	assert.Empty(t, check(ambiguous, nil, 0).Violations, "granted while the others' Err was asked")
}
