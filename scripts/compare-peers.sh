#!/usr/bin/env bash
# Measures zkrwlock beside Apache Curator, kazoo and go-zookeeper's zk.Lock,
# interleaved, against ONE fresh standalone ZooKeeper on tmpfs, and prints
# ../shared/peers/compare.py's table of medians.
#
#   scripts/compare-peers.sh [ROUNDS] [OUTDIR]     (defaults: 3, a new temp dir)
#
# Needs Debian's libcurator-recipes-java and python3-kazoo for the peers
# (apt-get install libcurator-recipes-java python3-kazoo). About 2 min a round.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
peers_src=${PEERS:-$root/../shared/peers}
rounds=${1:-3}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
"$root/scripts/install-zookeeper.sh"

# The peers' harnesses build into their own directory: work on a copy.
peers=$(mktemp -d)
cp -r "$peers_src/." "$peers/"
dir=/dev/shm/zkrwlock-compare-$$
port=${PORT:-22191}
cs=$("$peers/zk.sh" start-standalone "$port" "$dir")
trap '"$peers/zk.sh" stop "$dir"; rm -rf "$dir" "$peers"' EXIT

for i in $(seq 1 "$rounds"); do
	echo "round $i: peers" >&2
	"$peers/run-all.sh" "$cs" >"$out/peers$i.jsonl" 2>"$out/peers$i.log"
	echo "round $i: zkrwlock" >&2
	(cd "$root" && ZKRWLOCK_BENCH_SERVERS=$cs make -s bench >"$out/ours$i.jsonl" 2>"$out/ours$i.log")
done
"$peers/compare.py" "$out"/peers*.jsonl "$out"/ours*.jsonl
echo "raw results: $out" >&2
