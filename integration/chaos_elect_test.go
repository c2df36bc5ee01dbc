package integration

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
)

// Elections in the chaos run. Some clients run a campaigner: a goroutine
// that campaigns in the election on the path of a with "-e" appended (the
// lock e of the events), leads a while taking steps, now and then
// proclaims a new value, and resigns. Half of them campaign with a
// lock-delay. A term is a write grant of e, so the checker's late steps
// cover it; doubleLeaders names them apart: a leader that took a step
// after another's Campaign had returned. There must be none.

// chaosElectionLock names the election in events.
const chaosElectionLock = "e"

// chaosCampaigner is the worker number of a client's campaigner.
const chaosCampaigner = 100

// electionPath is the election's path, beside lock a's.
func electionPath(a string) string { return a + "-e" }

// newCampaigner makes the client's election, or nil for a client without
// a campaigner.
func (c *chaosClient) newCampaigner(conn *zk.Conn, a string) *rwlock.Election {
	rng := c.rng(254)
	if rng.IntN(2) == 0 {
		return nil
	}
	var opts []rwlock.Option
	if rng.IntN(2) == 0 {
		opts = append(opts, rwlock.WithLockDelay(c.timeout/4))
	}
	e, err := rwlock.NewElection(conn, electionPath(a), opts...)
	if err != nil {
		c.fail(err)
	}
	return e
}

// campaignRound campaigns once, leads until the hold's end or a loss
// taking steps, and resigns.
func (w *chaosWorker) campaignRound(ctx context.Context, e *rwlock.Election) {
	w.event(chaosEvent{Kind: "waiting"})
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	g, err := e.Campaign(actx, fmt.Appendf(nil, "c%d", w.c.id))
	cancel()
	if err != nil {
		w.failed(ctx, err)
		return
	}
	until := time.Now().Add(w.holdFor(0))
	w.event(chaosEvent{Kind: "granted", Lock: chaosElectionLock, Mode: g.Mode().String(), Node: nodeName(g.Node()),
		Until: until.UnixNano()})
	// Steps until the hold's end, and one after it: a term that ended
	// during a stop is seen at that last look.
	for ctx.Err() == nil {
		at := time.Now().UnixNano()
		if w.rng.IntN(20) == 0 {
			e.Proclaim(ctx, fmt.Appendf(nil, "c%d@%d", w.c.id, at)) // a failure is the term's end, which Err tells
		}
		if err := g.Err(); err != nil {
			w.event(chaosEvent{Kind: "lost", Lock: chaosElectionLock, Cause: err.Error()})
			break
		}
		w.event(chaosEvent{Kind: "step", Lock: chaosElectionLock, At: at, Done: time.Now().UnixNano()})
		if !time.Now().Before(until) {
			w.event(chaosEvent{Kind: "released", Lock: chaosElectionLock})
			break
		}
		w.pause(ctx, time.Duration(2+w.rng.IntN(15))*time.Millisecond, []*chaosHeld{{g: g}})
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.Resign(rctx) // an error is the background deletion's business
	rcancel()
}

// doubleLeaders returns, of the late steps, those of the election: a
// leader that took a step after another's Campaign had returned.
func doubleLeaders(grants []*chaosGrant) []string {
	var terms []*chaosGrant
	for _, g := range grants {
		if g.lock == chaosElectionLock {
			terms = append(terms, g)
		}
	}
	slices.SortStableFunc(terms, func(x, y *chaosGrant) int { return cmp.Compare(x.at, y.at) })
	v, _ := lateSteps(terms)
	return v
}

// The checker flags a leader's step after another's Campaign returned, and
// counts it as a double leader; a handoff after a resign is none, and a
// writer of lock a is no leader.
func TestChaosCheckerFlagsTwoLeaders(t *testing.T) {
	const e, w = chaosElectionLock, chaosCampaigner
	base := []chaosEvent{
		{Client: 1, Worker: w, Kind: "waiting", At: ms(0)},
		{Client: 1, Worker: w, Kind: "granted", Lock: e, Mode: "write", Node: "e1", At: ms(10)},
		{Client: 2, Worker: w, Kind: "waiting", At: ms(15)},
		{Client: 3, Kind: "granted", Lock: "a", Mode: "write", Node: "w3", At: ms(20)},
		{Client: 1, Worker: w, Kind: "step", Lock: e, At: ms(30), Done: ms(31)},
		{Client: 1, Worker: w, Kind: "released", Lock: e, At: ms(40)},
		{Client: 2, Worker: w, Kind: "granted", Lock: e, Mode: "write", Node: "e2", At: ms(45)},
		{Client: 2, Worker: w, Kind: "step", Lock: e, At: ms(50), Done: ms(51)},
	}
	r := check(base, nil, 0)
	assert.Empty(t, r.Violations)
	assert.Empty(t, r.DoubleLeaders)
	assert.Equal(t, 2, r.Terms)

	two := append(slices.Clone(base), chaosEvent{Client: 1, Worker: w, Kind: "step", Lock: e, At: ms(60), Done: ms(61)})
	// c1's events after its release belong to no grant: a new term of c1
	// would start with "granted". So make c1's step belong to its term.
	two = slices.DeleteFunc(two, func(ev chaosEvent) bool { return ev.Client == 1 && ev.Kind == "released" })
	r = check(two, nil, 0)
	require.Len(t, r.DoubleLeaders, 1, "c1 led on after c2's Campaign returned")
	assert.Contains(t, r.DoubleLeaders[0], "c1.100 took a step")
	assert.Equal(t, r.Violations, r.DoubleLeaders)
}
