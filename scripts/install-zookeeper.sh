#!/usr/bin/env bash
# Installs Debian's zookeeper package (the server jars; they run on the JDK
# the package pulls in) when it is missing. Idempotent and quiet: prints
# nothing when ZooKeeper is already there, and apt's output only on failure.
set -euo pipefail

if [ -n "${ZOOKEEPER_CLASSPATH:-}" ] || [ -f /usr/share/java/zookeeper.jar ]; then
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "install-zookeeper: installing Debian's zookeeper package" >&2
export DEBIAN_FRONTEND=noninteractive
if ! {
	{ apt-cache show zookeeper >/dev/null 2>&1 || $sudo apt-get update -q; } &&
		$sudo apt-get install -y -q --no-install-recommends zookeeper
} >"$log" 2>&1; then
	cat "$log" >&2
	echo "install-zookeeper: failed" >&2
	exit 1
fi
test -f /usr/share/java/zookeeper.jar
