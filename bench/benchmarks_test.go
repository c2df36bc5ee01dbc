package bench

import (
	"fmt"
	"testing"

	"github.com/zkrwlock/rwlock"
)

// The workloads, in the order `go test -bench .` runs them. Definitions:
// bench/peers/README.md; each benchmark iteration is one whole run.

// BenchmarkW1 is W1, uncontended write: one client, 100 warm-up cycles,
// then 2000 × (Lock, Release); cycles/s, acquire and release p50/p99.
func BenchmarkW1(b *testing.B) { benchUncontended(b, "W1", rwlock.Write) }

// BenchmarkW2 is W2, uncontended read: as W1 with RLock.
func BenchmarkW2(b *testing.B) { benchUncontended(b, "W2", rwlock.Read) }

// BenchmarkW3 is W3, writer contention: 8 clients loop Lock/Release (hold
// 0) for 5 s; acquisitions/s and the per-client spread.
func BenchmarkW3(b *testing.B) { benchContention(b, "W3", onlyWrites) }

// BenchmarkW4 is W4, reader parallelism: 8 clients loop RLock/Release for 5 s.
func BenchmarkW4(b *testing.B) { benchContention(b, "W4", onlyReads) }

// BenchmarkW5 is W5, mixed: 8 clients, each op a read with probability 0.9
// else a write (splitmix64 seeded with the client's index+1, as the peers),
// hold 1 ms, for 5 s; acquisitions/s, writes, violations.
func BenchmarkW5(b *testing.B) { benchContention(b, "W5", mixed) }

// BenchmarkW6 is W6, queue drain: one client holds the write lock, 200
// other sessions each start one Lock; once all 200 nodes exist and the
// server's zk_watch_count has grown by 200, the holder releases. Drain time
// is from that release until the last waiter has held and released; a
// handoff is from one holder's release to the next one's acquire.
func BenchmarkW6(b *testing.B) {
	p := params(b)
	name := "W6"
	if p.waiters != standard.waiters {
		name = fmt.Sprintf("W6-%d", p.waiters)
	}
	benchDrain(b, name, p.waiters, false)
}

// BenchmarkW6r is W6r: as W6 with 200 readers, each holding until all 200
// hold; drain time is from the release until all hold.
func BenchmarkW6r(b *testing.B) {
	p := params(b)
	name := "W6r"
	if p.waiters != standard.waiters {
		name = fmt.Sprintf("W6r-%d", p.waiters)
	}
	benchDrain(b, name, p.waiters, true)
}

// BenchmarkW8 is W8, several locks at once: one client takes 4 locks (2
// write, 2 read) with LockAll and releases them together, 100 warm-up then
// 2000 measured sets (W8-1); then 4 clients each take the same 4 locks in
// orders of their own for 5 s (W8-4): sets/s, requests per set,
// deadlocks (none).
func BenchmarkW8(b *testing.B) { benchMulti(b) }

// BenchmarkW9 is W9, many locks on a 3-node ensemble: 64 sessions, each
// cycle a write Lock/Release of one of 1,000 locks drawn at random, beside
// the same sessions making raw create+delete pairs of the lock's nodes;
// four phases of 5 s, raw, lock, lock, raw, after every session took every
// lock once. Lock cycles/s, raw pairs/s and their ratio. It starts an
// ensemble of its own, or uses ZKRWLOCK_BENCH_ENSEMBLE.
func BenchmarkW9(b *testing.B) { benchManyLocks(b) }

// BenchmarkDrain is the scale series: W6 with 100, 300 and 1000 queued
// writers, and W6r with 1000 readers behind one writer (JSON workloads
// W6-<n> and W6r-<n>). Every waiter is a session of its own.
func BenchmarkDrain(b *testing.B) {
	p := params(b)
	for _, n := range p.drainWriters {
		b.Run(fmt.Sprintf("writers=%d", n), func(b *testing.B) {
			benchDrain(b, fmt.Sprintf("W6-%d", n), n, false)
		})
	}
	for _, n := range p.drainReaders {
		b.Run(fmt.Sprintf("readers=%d", n), func(b *testing.B) {
			benchDrain(b, fmt.Sprintf("W6r-%d", n), n, true)
		})
	}
}

// BenchmarkW7 is W7, the coalesced burst: 64 goroutines of one process,
// each RLock then Release on one uncontended lock with WithReadCoalescing,
// 200 bursts; requests per burst and bursts/s. W7-each is the same
// without the option (a node per goroutine, as the peers).
func BenchmarkW7(b *testing.B) {
	b.Run("coalesced", func(b *testing.B) { benchBurst(b, "W7", true) })
	b.Run("each", func(b *testing.B) { benchBurst(b, "W7-each", false) })
}

// BenchmarkReadBatch32 runs 32 functions under the read lock, uncontended,
// from one session: RB32 with ReadBatch (one shared grant: create, list,
// delete, so 3 requests a batch) and RL32 with a read grant each, RLock and
// Release around each function, all 32 concurrently (96 requests). The
// functions do nothing, so a batch's wall time is the lock's overhead.
func BenchmarkReadBatch32(b *testing.B) {
	b.Run("ReadBatch", func(b *testing.B) { benchBatch(b, "RB32", oneGrant) })
	b.Run("RLockEach", func(b *testing.B) { benchBatch(b, "RL32", grantEach) })
}

// BenchmarkW9Floor is W9-floor: on W9's ensemble, sessions and warm-up,
// the servers' CPU per operation and the rate of each shape of request:
// raw pairs, Curator's create-list-delete, a zkrwlock cycle's requests
// without the lock, and zkrwlock's Lock/Release. It needs an ensemble of
// its own, whose CPU it reads from /proc.
func BenchmarkW9Floor(b *testing.B) { benchFloor(b) }
