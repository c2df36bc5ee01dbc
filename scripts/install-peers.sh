#!/usr/bin/env bash
# Installs the peers zkrwlock is compared with and must share a queue with:
# Apache Curator 5.4 (Debian's libcurator-recipes-java, whose jars land in
# /usr/share/java beside ZooKeeper's) and kazoo 2.8 (Debian's python3-kazoo,
# for /usr/bin/python3), and a JDK's javac, with which the integration
# tests compile their Curator contender. Idempotent and quiet: prints
# nothing when they are already there, and apt's output only on failure.
set -euo pipefail

have_curator() { [ -f /usr/share/java/curator-recipes.jar ]; }
have_kazoo() { /usr/bin/python3 -c 'import kazoo' >/dev/null 2>&1; }
have_javac() { command -v javac >/dev/null; }

if have_curator && have_kazoo && have_javac; then
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "install-peers: installing Debian's libcurator-recipes-java, python3-kazoo and default-jdk-headless" >&2
export DEBIAN_FRONTEND=noninteractive
if ! {
	{ apt-cache show libcurator-recipes-java python3-kazoo default-jdk-headless >/dev/null 2>&1 || $sudo apt-get update -q; } &&
		$sudo apt-get install -y -q --no-install-recommends libcurator-recipes-java python3-kazoo default-jdk-headless
} >"$log" 2>&1; then
	cat "$log" >&2
	echo "install-peers: failed" >&2
	exit 1
fi
have_curator && have_kazoo && have_javac
