#!/usr/bin/env bash
# Runs one peer's harness: the workloads of bench/peers/README.md with
# Apache Curator 5.4 (curator/), kazoo 2.8 (kazoo/) or go-zookeeper's
# zk.Lock (gozk/), against the ZooKeeper server(s) of CONNECT_STRING.
#
#   bench/peers/peer.sh curator|kazoo|gozk CONNECT_STRING WORKLOAD...
#   bench/peers/peer.sh build          compile the Curator and gozk harnesses
#   bench/peers/peer.sh curator-listing CONNECT_STRING PATH SECONDS
#                                      take Curator's read lock on PATH (curator/ListingLimit.java)
#   bench/peers/peer.sh curator-latch CONNECT_STRING PATH ROUNDS SESSION_MS
#                                      LeaderLatch failover after close() and kill -9 (curator/LatchFailover.java)
#
# One JSON line per workload on stdout; the exit status is 1 if a workload
# failed. The Java and Go harnesses are built on first use, and again when
# their sources change, into $PEERS_BUILD (default bench/peers/build/). The
# peers come from Debian: scripts/install-peers.sh installs them. JAVA_OPTS
# goes to the JVM. RWBENCH_OPS, RWBENCH_WARMUP, RWBENCH_SECONDS, RWBENCH_W9,
# RWBENCH_WAITERS and RWBENCH_BURSTS shrink the workloads (smoke runs; their
# names say so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${PEERS_BUILD:-$here/build}
jars=/usr/share/java
classpath=$jars/curator-recipes.jar:$jars/curator-framework.jar:$jars/curator-client.jar
classpath=$classpath:$jars/zookeeper.jar:$jars/zookeeper-jute.jar:$jars/guava.jar
classpath=$classpath:$jars/slf4j-api.jar:$jars/slf4j-nop.jar

usage() {
	sed -n '6,11p' "$0" | sed 's/^#   //' >&2
	exit 2
}

need() { # need FILE : a peer's package is missing
	[ -e "$1" ] || {
		echo "peer.sh: $1 is missing: run scripts/install-peers.sh" >&2
		exit 1
	}
}

build_curator() {
	need "$jars/curator-recipes.jar"
	local class=$build/curator/CuratorBench.class
	if [ ! -f "$class" ] || [ "$here/curator/CuratorBench.java" -nt "$class" ]; then
		mkdir -p "$build/curator"
		javac -nowarn -d "$build/curator" -cp "$classpath" "$here/curator/CuratorBench.java" >&2
	fi
}

build_gozk() {
	local bin=$build/gozk
	if [ ! -x "$bin" ] || [ -n "$(find "$here/gozk" "$here/../../go.mod" "$here/../../go.sum" -newer "$bin" -print -quit)" ]; then
		mkdir -p "$build"
		(cd "$here/gozk" && go build -o "$bin" .) >&2
	fi
}

[ $# -ge 1 ] || usage
impl=$1
shift
case $impl in
build)
	build_curator
	build_gozk
	;;
curator)
	[ $# -ge 2 ] || usage
	build_curator
	# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
	exec java ${JAVA_OPTS:-} -Xss512k -cp "$build/curator:$classpath" CuratorBench "$@"
	;;
curator-listing)
	[ $# -eq 3 ] || usage
	need "$jars/curator-recipes.jar"
	# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
	exec java ${JAVA_OPTS:-} -cp "$classpath" "$here/curator/ListingLimit.java" "$@"
	;;
curator-latch)
	[ $# -eq 4 ] || usage
	need "$jars/curator-recipes.jar"
	# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
	exec java ${JAVA_OPTS:-} -Dlatch.src="$here/curator/LatchFailover.java" -cp "$classpath" "$here/curator/LatchFailover.java" "$@"
	;;
kazoo)
	[ $# -ge 2 ] || usage
	# Debian's python3-kazoo is for the system Python, not one on PATH.
	/usr/bin/python3 -c 'import kazoo' 2>/dev/null || need /usr/lib/python3/dist-packages/kazoo
	exec /usr/bin/python3 "$here/kazoo/kazoo_bench.py" "$@"
	;;
gozk)
	[ $# -ge 2 ] || usage
	build_gozk
	exec "$build/gozk" "$@"
	;;
*)
	usage
	;;
esac
