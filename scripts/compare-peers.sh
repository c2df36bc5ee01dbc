#!/usr/bin/env bash
# Measures zkrwlock beside Apache Curator 5.4, kazoo 2.8 and go-zookeeper's
# zk.Lock with the workloads of bench/peers/README.md, all against ONE fresh
# standalone ZooKeeper server on tmpfs, on loopback and through proxies that
# add network latency, and prints the table of medians and ratios.
#
#   scripts/compare-peers.sh [ROUNDS] [OUTDIR]     (defaults: 3, a new directory in /tmp)
#
# Every round runs, for each network setting in turn (loopback, then a delay
# proxy adding 0.5, 1 and 2 ms each way), every workload, and each workload
# for every implementation, one after the other, each in a process of its
# own: Curator, kazoo and go-zk (bench/peers/peer.sh), then zkrwlock
# (`make -s bench BENCH=^BenchmarkWn$` with ZKRWLOCK_BENCH_SERVERS). Every
# implementation goes through the same proxy process. Before the first round
# the server is warmed up with an unmeasured go-zk W3 (its JIT, as every
# later run finds it), and, when W8 is measured, an unmeasured W8 of each
# implementation (zkrwlock's transactions of four creates or four deletes,
# which the go-zk W3 does not send).
# W9 (many locks) runs apart, on a 3-node ensemble of its own (zkserve
# -servers 3, on tmpfs like the standalone server), only in the settings of
# W9_DELAYS, through one delay proxy per member; Curator's InterProcessMutex
# and zkrwlock (`make -s bench BENCH=^BenchmarkW9$` with
# ZKRWLOCK_BENCH_ENSEMBLE), each beside raw create+delete pairs of its own run;
# the script adds to each W9 line the ensemble's CPU over the run,
# ensemble_cpu_s (warm-up included).
# A run during which other processes on the machine used more than
# MAX_FOREIGN_CPU CPU-seconds is repeated after 20 s, at most twice.
#
# OUTDIR gets loopback/ and delay-<D>ms/, each with peersN.jsonl and
# oursN.jsonl (the JSON lines of round N) and their logs (peersN.log,
# oursN.log); loopback/extraN.jsonl, zkrwlock's own workloads (drain series,
# ReadBatch); runs.log, a line per run with the foreign CPU it saw;
# zookeeper.log, proxy-<D>ms.log (how late each proxy was), for W9
# ensemble.log and ensemble-proxy-<D>ms-<member>.log; and table.md, the
# table printed at the end (go run ./bench/peers/compare OUTDIR prints it
# again). A round takes about 20 minutes on 2 cores, and W9 about 3 minutes
# more per implementation and setting (most of it its warm-up).
#
# Environment:
#   DELAYS="0 0.5 1 2"                    ms added each way; 0 is loopback
#   WORKLOADS="W1 W2 W3 W4 W5 W6 W6r W7 W8 W9 W11"   (W7, W8, W9, W11: Curator and zkrwlock only)
#     W1c, W4c, W5c: W1, W4 and W5 with caching, zkrwlock only; add them to the list
#   W9_DELAYS="0 1"                       the settings of DELAYS in which W9 runs
#   IMPLS="curator kazoo gozk zkrwlock"   (go-zk runs only W1, W3, W6: it has no read lock; kazoo no W7)
#   EXTRAS=1                              0 skips zkrwlock's own workloads
#   MAX_FOREIGN_CPU=0.5                   CPU-seconds of other processes' load a run may overlap
#   WARM=1                                0 skips the server warm-up
#   FAILOVER=0                            1 adds elections' failover beside Curator's LeaderLatch:
#                                         FAILOVER_ROUNDS (default 10) interleaved rounds on loopback,
#                                         each one sample of each side after a clean resign and after
#                                         kill -9 of the leader's process (session timeout 4 s), into
#                                         failover.jsonl (not in table.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
out=${2:-$(mktemp -d /tmp/compare-peers.XXXXXX)}
delays=${DELAYS:-0 0.5 1 2}
workloads=${WORKLOADS:-W1 W2 W3 W4 W5 W6 W6r W7 W8 W9 W11}
w9_delays=${W9_DELAYS:-0 1}
impls=${IMPLS:-curator kazoo gozk zkrwlock}
max_foreign=${MAX_FOREIGN_CPU:-0.5}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"

log() { echo "$(date +%T) $*" | tee -a "$out/runs.log" >&2; }

"$root/scripts/install-zookeeper.sh"
"$root/scripts/install-peers.sh"

# Build everything first: no compiler runs beside a measurement.
bin=$(mktemp -d /tmp/compare-peers-bin.XXXXXX)
pids=() # the server and the proxies, stopped in the reverse order
stop_helpers() {
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	pids=()
}
trap 'stop_helpers; rm -rf "$bin"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
go build -o "$bin/" ./bench/peers/zkserve ./bench/peers/delayproxy ./bench/peers/compare
"$root/bench/peers/peer.sh" build
go test -c -o /dev/null ./bench/ # make bench's test binary, into the build cache

# wait_line FILE PID : wait until the process has written its line to FILE.
wait_line() {
	local i
	for i in $(seq 1 1500); do
		[ -s "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.1
	done
	echo "compare-peers: no address in $1; see its log" >&2
	return 1
}

"$bin/zkserve" -log "$out/zookeeper.log" >"$out/zookeeper.addr" 2>>"$out/runs.log" &
pids+=($!)
wait_line "$out/zookeeper.addr" "${pids[-1]}"
cs=$(cat "$out/zookeeper.addr")
log "server $cs (log: $out/zookeeper.log)"

# W9's ensemble, and one proxy per member for each of W9's delays.
declare -A ens_addr
if [[ " $workloads " == *" W9 "* ]]; then
	"$bin/zkserve" -servers 3 -log "$out/ensemble.log" >"$out/ensemble.addr" 2>>"$out/runs.log" &
	pids+=($!)
	ens_pid=$!
	wait_line "$out/ensemble.addr" "${pids[-1]}"
	ens=$(cat "$out/ensemble.addr")
	log "W9 ensemble $ens (log: $out/ensemble.log)"
	for d in $w9_delays; do
		if [ "$d" = 0 ]; then
			ens_addr[$d]=$ens
			continue
		fi
		members=()
		i=0
		for m in ${ens//,/ }; do
			i=$((i + 1))
			f=$out/ensemble-proxy-${d}ms-$i
			"$bin/delayproxy" -delay "${d}ms" "$m" >"$f.addr" 2>"$f.log" &
			pids+=($!)
			wait_line "$f.addr" "${pids[-1]}"
			members+=("$(cat "$f.addr")")
		done
		ens_addr[$d]=$(
			IFS=,
			echo "${members[*]}"
		)
		log "W9 proxies ${ens_addr[$d]}: $ens + ${d} ms each way"
	done
fi

declare -A addr col
for d in $delays; do
	if [ "$d" = 0 ]; then
		addr[$d]=$cs col[$d]=loopback
		continue
	fi
	col[$d]=delay-${d}ms
	"$bin/delayproxy" -delay "${d}ms" "$cs" >"$out/proxy-${d}ms.addr" 2>"$out/proxy-${d}ms.log" &
	pids+=($!)
	wait_line "$out/proxy-${d}ms.addr" "${pids[-1]}"
	addr[$d]=$(cat "$out/proxy-${d}ms.addr")
	log "proxy ${addr[$d]}: $cs + ${d} ms each way"
done

# Foreign CPU: the machine's busy time (user, nice, system) less that of
# this script and every process under it, live (the server, the proxies,
# the run) or reaped, in clock ticks.
hz=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu /{ print $2 + $3 + $4 }' /proc/stat; }
own_ticks() { tree_ticks $$; }
# tree_ticks PID : the ticks of PID and every process under it.
tree_ticks() {
	# A process may exit between the glob and its read: cat then fails, and
	# the others still count.
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
		{
			s = $0; sub(/^.*\) /, "", s); split(s, f, " ")  # f[1] is the state, after pid and (comm)
			ppid[$1] = f[2]; t[$1] = f[12] + f[13] + f[14] + f[15]  # utime stime cutime cstime
		}
		END {
			for (p in t) {
				q = p
				for (n = 0; q != root && (q in ppid) && n < 64; n++) q = ppid[q]
				if (q == root) sum += t[p]
			}
			print sum + 0
		}'
}

# run IMPL WORKLOAD ADDR : the run's JSON lines on stdout, its log on stderr.
run() {
	case $1 in
	zkrwlock)
		local bench="^Benchmark$2\$"
		[ "$2" = extras ] && bench='^Benchmark(Drain|ReadBatch32)$'
		if [ "$2" = W9 ]; then
			ZKRWLOCK_BENCH_ENSEMBLE=$3 make -s bench BENCH="$bench"
		else
			ZKRWLOCK_BENCH_SERVERS=$3 make -s bench BENCH="$bench"
		fi
		;;
	*) "$root/bench/peers/peer.sh" "$1" "$3" "$2" ;;
	esac
}

# measure SETTING IMPL WORKLOAD ADDR JSONL LOG : one run, repeated while
# other processes' load overlapped it; its lines go to JSONL.
measure() {
	local setting=$1 impl=$2 w=$3 a=$4 jsonl=$5 runlog=$6
	local attempt lines rc b0 o0 e0 ens foreign
	for attempt in 1 2 3; do
		if [ "$impl" = zkrwlock ]; then
			# make bench names its result files by the second: one run a second.
			while [ "$(date +%Y%m%d-%H%M%S)" = "$last_ours" ]; do sleep 0.2; done
			last_ours=$(date +%Y%m%d-%H%M%S)
		fi
		echo "=== $(date +%T) $impl $w $setting, attempt $attempt" >>"$runlog"
		b0=$(busy_ticks) o0=$(own_ticks)
		if [ "$w" = W9 ]; then e0=$(tree_ticks "$ens_pid"); fi
		rc=0
		lines=$(run "$impl" "$w" "$a" 2>>"$runlog") || rc=$?
		foreign=$(awk -v b="$(($(busy_ticks) - b0))" -v o="$(($(own_ticks) - o0))" -v hz="$hz" \
			'BEGIN { f = (b - o) / hz; printf "%.2f", f < 0 ? 0 : f }')
		ens=""
		if [ "$w" = W9 ]; then
			# The ensemble's CPU over the whole run, warm-up included: a key
			# of W9's lines, and in the log.
			ens=$(awk -v e="$(($(tree_ticks "$ens_pid") - e0))" -v hz="$hz" 'BEGIN { printf "%.2f", e / hz }')
			lines=$(sed "s/}\$/, \"ensemble_cpu_s\": $ens}/" <<<"$lines")
			ens=", ensemble CPU ${ens}s"
		fi
		log "$setting $impl $w: exit $rc, foreign CPU ${foreign}s$ens"
		if awk -v f="$foreign" -v m="$max_foreign" 'BEGIN { exit !(f > m) }' && [ "$attempt" -lt 3 ]; then
			log "  busy machine: again in 20 s"
			sleep 20 &
			wait $! # a signal interrupts wait, not sleep
			continue
		fi
		lines=$(grep '^{' <<<"$lines" || true)
		if [ -z "$lines" ]; then
			lines="{\"impl\": \"$impl\", \"workload\": \"$w\", \"error\": \"exit status $rc, no result; see $runlog\"}"
		fi
		echo "$lines" >>"$jsonl"
		return 0
	done
}

last_ours=""

supported() { # supported IMPL WORKLOAD
	case $1:$2 in
	gozk:W1 | gozk:W3 | gozk:W6) return 0 ;;
	*:W1c | *:W4c | *:W5c) [ "$1" = zkrwlock ] ;; # zkrwlock's caching, beside W1, W4 and W5
	gozk:*) return 1 ;;
	kazoo:W7 | kazoo:W8 | kazoo:W9 | kazoo:W11) return 1 ;; # the harness has none: Curator is their reference
	esac
}

if [ "${WARM:-1}" = 1 ]; then
	log "server warm-up: gozk W3, discarded"
	"$root/bench/peers/peer.sh" gozk "$cs" W3 >/dev/null 2>>"$out/runs.log" || true
	# W8's requests include zkrwlock's transactions of four creates or four
	# deletes, which the go-zk W3 does not send: warm them too, for every
	# implementation alike.
	if [[ " $workloads " == *" W8 "* ]]; then
		for impl in $impls; do
			supported "$impl" W8 || continue
			log "server warm-up: $impl W8, discarded"
			run "$impl" W8 "$cs" >/dev/null 2>>"$out/runs.log" || true
		done
	fi
fi

for r in $(seq 1 "$rounds"); do
	for d in $delays; do
		dir=$out/${col[$d]}
		mkdir -p "$dir"
		log "round $r of $rounds: ${col[$d]}"
		for w in $workloads; do
			a=${addr[$d]}
			if [ "$w" = W9 ]; then
				[ -n "${ens_addr[$d]:-}" ] || continue # not one of W9_DELAYS
				a=${ens_addr[$d]}
			fi
			for impl in $impls; do
				supported "$impl" "$w" || continue
				if [ "$impl" = zkrwlock ]; then
					measure "${col[$d]}" "$impl" "$w" "$a" "$dir/ours$r.jsonl" "$dir/ours$r.log"
				else
					measure "${col[$d]}" "$impl" "$w" "$a" "$dir/peers$r.jsonl" "$dir/peers$r.log"
				fi
			done
		done
		if [ "$d" = 0 ] && [ "${EXTRAS:-1}" = 1 ] && [[ " $impls " == *" zkrwlock "* ]]; then
			measure loopback zkrwlock extras "$cs" "$dir/extra$r.jsonl" "$dir/extra$r.log"
		fi
	done
done

if [ "${FAILOVER:-0}" = 1 ]; then
	for r in $(seq 1 "${FAILOVER_ROUNDS:-10}"); do
		log "failover round $r: curator, then zkrwlock"
		"$root/bench/peers/peer.sh" curator-latch "$cs" "/rwbench/curator/latch-$r-$$" 1 4000 \
			>>"$out/failover.jsonl" 2>>"$out/failover.log" || log "  curator-latch failed: see failover.log"
		# make bench names its result files by the second: one run a second.
		while [ "$(date +%Y%m%d-%H%M%S)" = "$last_ours" ]; do sleep 0.2; done
		last_ours=$(date +%Y%m%d-%H%M%S)
		{ ZKRWLOCK_BENCH_SERVERS=$cs make -s bench BENCH='^BenchmarkFailover(Resign|Kill)$' 2>>"$out/failover.log" || true; } |
			{ grep '^{' || true; } >>"$out/failover.jsonl"
	done
fi

stop_helpers # the proxies report how late they were as they exit
for d in $delays; do
	[ "$d" = 0 ] || log "$(tail -n 1 "$out/proxy-${d}ms.log")"
done
for f in "$out"/ensemble-proxy-*.log; do
	[ -e "$f" ] && log "$(tail -n 1 "$f")"
done
"$bin/compare" "$out" | tee "$out/table.md"
echo "raw results: $out" >&2
