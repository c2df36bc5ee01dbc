package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/zkrwlock/rwlock"
)

// exec --limit N [--weight W] PATH: a bounded shared lock (rwlock's
// WithCapacity). It takes the place of --write and --read, with one PATH:
// it does not join the several-locks form, whose locks are read/write locks.

// permitFlags are exec's --limit and --weight.
type permitFlags struct {
	limit  int64 // the capacity; 0 without --limit
	weight int64
}

func (p *permitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&p.limit, "limit", 0, "take the lock as a bounded shared lock of `N` permits, at most N commands at once "+
		"(weights add up), in queue order; every client of PATH must give the same N; "+
		"it takes the place of --write and --read, with one PATH")
	fs.Int64Var(&p.weight, "weight", 1, "with --limit, the `W` permits this command takes, 1 to N; N is the whole lock")
}

// validate checks --limit and --weight against the rest of exec's flags,
// and sets the mode the grant will have. given holds the flags set.
func (p *permitFlags) validate(o *execOptions, given map[string]bool) error {
	switch {
	case !given["limit"] && given["weight"]:
		return fail(exitUsage, "--weight goes with --limit")
	case !given["limit"]:
		return nil
	case o.write.set || o.read.set || o.locks != nil:
		return fail(exitUsage, "--limit takes the place of --write and --read, with one PATH")
	case p.limit < 1 || p.limit > 999_999_999:
		return fail(exitUsage, "--limit must be 1 to 999999999, not %d", p.limit)
	case p.weight < 1 || p.weight > p.limit:
		return fail(exitUsage, "--weight must be 1 to --limit (%d), not %d", p.limit, p.weight)
	}
	// The first form's mode is read unless --write: a permit's is write
	// when it takes them all.
	o.read.set = p.weight < p.limit
	o.write.set = !o.read.set
	return nil
}

// option returns the lock option --limit asks for, if any.
func (p *permitFlags) option() []rwlock.Option {
	if p.limit == 0 {
		return nil
	}
	return []rwlock.Option{rwlock.WithCapacity(p.limit)}
}

// acquire takes the permits, with TryAcquire under --no-wait. It reports
// false without --limit.
func (p *permitFlags) acquire(ctx context.Context, l *rwlock.RWLock, noWait bool) (g *rwlock.Grant, ok bool, err error) {
	switch {
	case p.limit == 0:
		return nil, false, nil
	case noWait:
		g, err = l.TryAcquire(ctx, p.weight)
		return g, true, err
	}
	g, err = l.Acquire(ctx, p.weight)
	return g, true, err
}

// permitsLine says, under a queue's table, how many permits are in use of
// how many, and the weights of the waiters in queue order; "" for a queue
// without a bounded node.
func permitsLine(q []rwlock.Entry) string {
	var capacity, used int64
	var waiting []string
	for _, e := range q {
		if e.Capacity == 0 {
			continue
		}
		capacity = e.Capacity
		if e.Held {
			used += e.Weight
		} else {
			waiting = append(waiting, fmt.Sprint(e.Weight))
		}
	}
	if capacity == 0 {
		return ""
	}
	line := fmt.Sprintf("permits: %d of %d in use", used, capacity)
	if len(waiting) > 0 {
		line += fmt.Sprintf("; %d waiting for %s", len(waiting), strings.Join(waiting, ", "))
	}
	return line
}

// permitMode is a queue entry's MODE column: its weight of the capacity,
// as 2/4, for a bounded node; its mode otherwise.
func permitMode(e rwlock.Entry) string {
	if e.Capacity == 0 {
		return e.Mode.String()
	}
	return fmt.Sprintf("%d/%d", e.Weight, e.Capacity)
}

// permitsJSON is a bounded lock's permits in 'zkrwlock ls --json'.
type permitsJSON struct {
	Capacity int64   `json:"capacity"`
	InUse    int64   `json:"in_use"`
	Waiting  []int64 `json:"waiting"` // the waiters' weights, in queue order
}

// permitsOf returns a queue's permits; nil for a queue without a bounded
// node.
func permitsOf(q []rwlock.Entry) *permitsJSON {
	var p *permitsJSON
	for _, e := range q {
		if e.Capacity == 0 {
			continue
		}
		if p == nil {
			p = &permitsJSON{Capacity: e.Capacity, Waiting: []int64{}}
		}
		if e.Held {
			p.InUse += e.Weight
		} else {
			p.Waiting = append(p.Waiting, e.Weight)
		}
	}
	return p
}
