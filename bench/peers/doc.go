// Package peers holds the harnesses that run zkrwlock's benchmark
// workloads with the ZooKeeper locks it is compared with, so that anyone
// can reproduce the comparison in BENCHMARKS.md from this repository:
//
//	curator/CuratorBench.java  Apache Curator 5.4 InterProcessReadWriteLock (Java 17)
//	kazoo/kazoo_bench.py       kazoo 2.8 ReadLock and WriteLock (Debian's /usr/bin/python3)
//	gozk/                      go-zookeeper's zk.Lock, a mutex (W1, W3, W6 only)
//	peer.sh                    builds and runs one of them: peer.sh IMPL CONNECT_STRING WORKLOAD...
//
// and the tools around them, used by scripts/compare-peers.sh:
//
//	zkserve/     one standalone ZooKeeper server on tmpfs, configured for the workloads
//	delayproxy/  a TCP proxy that adds a fixed latency each way (internal/delayproxy)
//	compare/     the table of medians and ratios, from the runs' JSON lines
//
// The workloads (W1-W6r) are defined in README.md; zkrwlock's side of them
// is the bench package. The package itself has no code: its tests run every
// harness briefly against a real server.
package peers
