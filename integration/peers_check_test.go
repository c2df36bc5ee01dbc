package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/zkrwlock/rwlock"
)

// checkGrants judges the merged log of one run: every contender's grants,
// with times from one clock. Two grants conflict when either is a write.
//
//   - Mutual exclusion: conflicting grants never overlap. A logged
//     interval, from the acquire's return to the release's call, lies
//     within the true hold, so an overlap of logged intervals is a real
//     one. (A grant still held, rel 0, lasts to the end.)
//   - FIFO: of two conflicting grants, the one whose node has the lower
//     number is granted first.
//   - Every grant's node is a distinct number: no contender was handed
//     a grant for another's node.
//
// It returns one line per violation.
func checkGrants(grants []grant) []string {
	var bad []string
	const end = int64(1) << 62
	until := func(g grant) int64 {
		if g.rel == 0 {
			return end
		}
		return g.rel
	}
	seqs := map[int32]string{}
	for _, g := range grants {
		if other, ok := seqs[g.seq]; ok && other != g.who+" "+g.node {
			bad = append(bad, fmt.Sprintf("node number %d granted twice: %s and %s %s", g.seq, other, g.who, g.node))
		}
		seqs[g.seq] = g.who + " " + g.node
		if g.rel != 0 && g.rel < g.acq {
			bad = append(bad, fmt.Sprintf("%s %s released before it was acquired", g.who, g.node))
		}
	}
	sorted := slices.Clone(grants)
	slices.SortFunc(sorted, func(a, b grant) int { return int(a.seq - b.seq) })
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if a.mode == rwlock.Read && b.mode == rwlock.Read {
				continue
			}
			switch {
			case a.acq < until(b) && b.acq < until(a):
				bad = append(bad, fmt.Sprintf("overlap: %s %s (%v) held [%d, %d] and %s %s (%v) held [%d, %d]",
					a.who, a.node, a.mode, a.acq, a.rel, b.who, b.node, b.mode, b.acq, b.rel))
			case b.acq < a.acq:
				bad = append(bad, fmt.Sprintf("out of order: %s %s (%v) was granted before %s %s (%v), which queued first",
					b.who, b.node, b.mode, a.who, a.node, a.mode))
			}
		}
	}
	return bad
}

// summary describes a run's grants for the test log: how many per mode and
// per family of contender (the part of its name before the first dash).
func summary(grants []grant) string {
	counts := map[string]int{}
	var keys []string
	for _, g := range grants {
		k := strings.SplitN(g.who, "-", 2)[0] + " " + g.mode.String()
		if counts[k] == 0 {
			keys = append(keys, k)
		}
		counts[k]++
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return fmt.Sprintf("%d grants (%s)", len(grants), strings.Join(parts, ", "))
}

// The checker itself, on made-up logs: it must catch what it is there for.
func TestCheckGrants(t *testing.T) {
	w := func(who string, seq int32, acq, rel int64) grant {
		return grant{who: who, mode: rwlock.Write, node: fmt.Sprintf("x-%010d", seq), seq: seq, acq: acq, rel: rel}
	}
	r := func(who string, seq int32, acq, rel int64) grant {
		g := w(who, seq, acq, rel)
		g.mode = rwlock.Read
		return g
	}
	tests := []struct {
		name   string
		grants []grant
		bad    string // "" for none; else a word of the one violation
	}{
		{"writers in turn", []grant{w("a", 1, 0, 10), w("b", 2, 11, 20)}, ""},
		{"readers together", []grant{r("a", 1, 0, 10), r("b", 2, 5, 20)}, ""},
		{"reader after writer", []grant{w("a", 1, 0, 10), r("b", 2, 11, 20), r("c", 3, 12, 13)}, ""},
		{"writers overlap", []grant{w("a", 1, 0, 10), w("b", 2, 9, 20)}, "overlap"},
		{"writers touch", []grant{w("a", 1, 0, 10), w("b", 2, 10, 20)}, ""}, // touching logs prove nothing either way
		{"reader inside writer", []grant{w("a", 1, 0, 10), r("b", 2, 5, 6)}, "overlap"},
		{"writer never released", []grant{w("a", 1, 0, 0), r("b", 2, 100, 101)}, "overlap"},
		{"writer overtakes", []grant{r("a", 1, 20, 30), w("b", 2, 0, 10)}, "out of order"},
		{"reader overtakes a writer", []grant{w("a", 1, 20, 30), r("b", 2, 0, 10)}, "out of order"},
		{"readers in any order", []grant{r("a", 1, 20, 30), r("b", 2, 0, 10)}, ""},
		{"one node, two holders", []grant{r("a", 1, 0, 10), grant{who: "b", mode: rwlock.Read, node: "y-0000000001", seq: 1, acq: 20, rel: 30}}, "twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := checkGrants(tc.grants)
			if tc.bad == "" {
				assert.Empty(t, bad)
				return
			}
			if assert.Len(t, bad, 1) {
				assert.Contains(t, bad[0], tc.bad)
			}
		})
	}
}
