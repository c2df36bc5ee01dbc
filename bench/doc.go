// Package bench measures zkrwlock against a real ZooKeeper server, with the
// workloads that bench/peers runs for Apache Curator, kazoo and
// go-zookeeper's zk.Lock, so the numbers can be put side by side.
//
// The package has no code of its own: the benchmarks are in its _test.go
// files. Run them all once each, as the peers do, with
//
//	make bench
//
// which runs
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./bench/ -bench.json=FILE
//
// and prints FILE: one JSON line per workload run, with the keys the peers'
// harnesses print (impl "zkrwlock"). scripts/compare-peers.sh runs these
// and the peers' harnesses against one server, interleaved, on loopback and
// through delay proxies, and prints the comparison; for lines of your own,
//
//	go run ./bench/peers/compare peers.jsonl bench/results/<time>.jsonl
//
// Compare ratios measured in one session on one server: by default every
// `go test` process starts its own throwaway server (internal/zkserver, data
// on tmpfs, tickTime 2s, maxClientCnxns=0, the peers' JVM heap); with
// ZKRWLOCK_BENCH_SERVERS=host:port[,host:port...] the benchmarks use that
// server instead, such as the one scripts/compare-peers.sh started for the
// peers (bench/peers/zkserve), or a delay proxy in front of it. W9 alone
// runs on a 3-node ensemble: a throwaway one of its own, or the one named
// by ZKRWLOCK_BENCH_ENSEMBLE=host:port,host:port,host:port.
//
// Workloads (definitions: bench/peers/README.md). Every client is its
// own session (rwlock.Dial, 10 s session timeout) and every run uses a fresh
// lock path /rwbench/zkrwlock/<workload>-<ms>-<rand>.
//
//	BenchmarkW1              W1   1 client, 100 warm-up + 2000 write acquire/release cycles
//	BenchmarkW2              W2   the same with read grants
//	BenchmarkW3              W3   8 clients loop write acquire/release for 5 s
//	BenchmarkW4              W4   8 clients loop read acquire/release for 5 s
//	BenchmarkW5              W5   8 clients, 90% read / 10% write (splitmix64), hold 1 ms, 5 s
//	BenchmarkW6              W6   200 writers queued behind one holder: drain time, handoffs
//	BenchmarkW6r             W6r  200 readers queued behind one writer: time until all hold
//	BenchmarkDrain/...       W6-100, W6-300, W6-1000, W6r-1000: the drain at other queue lengths
//	BenchmarkW7/...          W7   64 goroutines RLock/Release at once, 200 bursts: coalesced (W7) and a node each (W7-each)
//	BenchmarkReadBatch32/... RB32: ReadBatch of 32 functions; RL32: 32 concurrent RLock/Release
//	BenchmarkScale...        the scale series (memory per session, readers granted together,
//	                         drains to 10,000): skipped unless -bench.scale; see BENCHMARKS.md
//	BenchmarkW1c             W1c  W1 with WithCaching: re-grants of a kept node
//	BenchmarkW4c, W5c        W4c, W5c  W4 and W5 with WithCaching
//	BenchmarkW10             W10  a writer behind an idle kept reader, through a +1 ms proxy: its wait in round trips
//	BenchmarkW9              W9   64 sessions over 1,000 locks on a 3-node ensemble: lock cycles beside raw create+delete pairs
//	BenchmarkW9Floor         W9-floor: on W9's ensemble, the servers' CPU per operation of each shape of request
//	BenchmarkW11             W11  32 clients share 4 permits (WithCapacity), each held 1 ms, 5 s
//
// The JSON keys are the peers' for the same workload: W1/W2 clients,
// warmup_cycles, ops, elapsed_s, ops_per_s, acq_p50_us, acq_p99_us,
// rel_p50_us, rel_p99_us; W3-W5 clients, hold_ms, elapsed_s, acquisitions,
// acq_per_s, per_client_min, per_client_max, writes (W5), timeouts,
// violations; W6 waiters, enqueue_s, failed, drain_s, handoff_mean_us,
// handoff_p50_us, handoff_p99_us, violations; W6r the same with
// wake_mean_us, wake_p50_us, wake_max_us instead of the handoffs; and for
// all zk_packets and zk_req_per_acq (the servers' zk_packets_received over
// the measured phase, less the mntr calls themselves and W6's polling, per
// acquisition). Extra keys: allocs_per_acq, bytes_per_acq and
// client_cpu_us_per_acq (this process: the library plus go-zookeeper, not
// the server), latencies for W3-W5, hold_mean_us for W5 (the holds as
// slept: see sleepPrecisely), one_round_trip_share for W1/W2 (the share
// of measured acquisitions that the lock's own counter, Stats'
// OneRoundTrip, saw granted from the listing sent behind the create: one
// round trip), relists_per_acq for W3-W6r (the lock's own count of
// listings between a release and a grant, Stats' Relists, per
// acquisition), round_s for W6, and an "error" key
// (which the comparison leaves out) when a run failed.
//
// Each benchmark also reports its metrics the Go way (b.ReportMetric:
// cycles/s or acquisitions/s, p50/p99 acquire and release latency in µs,
// req/acquire, relists/acquire (W3-W6r), allocs/acquire, cpu-us/acquire,
// ...), so runs can be compared with benchstat. One benchmark iteration is
// one whole workload run: -benchtime 1x runs each once, and ns/op is its
// measured phase. A run with a mutual exclusion violation or a failed
// acquisition fails the benchmark (acquire timeouts in W3-W5 are counted,
// as the peers count them).
//
// W9 has keys of its own (the peers' W9 the same): clients, locks,
// servers, phase_s, phases, phase_rates, warmup_s, warmup_cycles_per_s,
// acquisitions, cycles_per_s, raw_pairs, raw_pairs_per_s, lock_over_raw,
// the latencies of acquire, release, create and delete, zk_req_per_acq,
// zk_req_per_pair, and machine_busy and raw_machine_busy (the share of
// the machine's CPU busy in the lock and raw phases, from /proc/stat);
// zkrwlock's also per phase, phase_req_per_op, phase_client_cpu_us_per_op,
// phase_gcs, phase_end_watches (the servers' zk_watch_count) and, on an
// ensemble the harness started, phase_server_cpu_us_per_op (from /proc);
// and per lock phase the lock's own counts,
// lock_phase_one_round_trip_share and lock_phase_lib_req_per_acq.
//
// RB32/RL32 have keys of their own: fns, grants_per_batch, batches,
// batches_per_s, batch_p50_us, batch_p99_us, zk_req_per_batch,
// allocs_per_batch, client_cpu_us_per_batch.
//
// Before the first benchmark, 8 clients loop Lock/Release for 5 s,
// unmeasured, so that the server's JIT is warm, as scripts/compare-peers.sh
// does with a discarded go-zk W3 (-bench.serverwarmup sets the time; 0 skips
// it; on ZKRWLOCK_BENCH_SERVERS it is 0 by default).
//
// Smaller runs, to check that the benchmarks work: -short, or -bench.ops,
// -bench.warmup, -bench.duration, -bench.waiters, -bench.drain and
// -bench.batches, -bench.w9. Their JSON workload names differ from the peers' (W1-smoke,
// W6-20, ...), so the comparison leaves them out.
package bench
