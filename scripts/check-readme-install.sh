#!/usr/bin/env bash
# Runs the README's "unreleased checkout" snippet as printed, in a new empty
# directory, with one change: its RWLOCK variable names this checkout, since
# the clone URL is not reachable here. It fails if the snippet does not make
# a module that builds. Offline but for the Go module proxy (GOPROXY as
# set), which serves the modules that the lock's add-ons depend on.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
snippet=$(awk '
	/^\*\*Using an unreleased checkout\.\*\*/ { found = 1 }
	found && /^```sh$/ { inside = 1; next }
	inside && /^```$/ { exit }
	inside { print }
' "$root/README.md")
if [ -z "$snippet" ]; then
	echo "check-readme-install: no sh block after \"Using an unreleased checkout\" in README.md" >&2
	exit 1
fi
if [ "$(grep -c '^RWLOCK=' <<<"$snippet")" -ne 1 ]; then
	echo "check-readme-install: the snippet must set RWLOCK once, at the start of a line" >&2
	exit 1
fi
snippet=$(sed "s|^RWLOCK=[^ ]*|RWLOCK='$root'|" <<<"$snippet")

dir=$(mktemp -d "${TMPDIR:-/tmp}/zkrwlock-readme-XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/zkrwlock-readme-log-XXXXXX")
trap 'rm -rf "$dir" "$log"' EXIT
# A user's directory is in no workspace of ours: GOWORK=off.
if ! (cd "$dir" && GOWORK=off bash -euo pipefail -c "$snippet") >"$log" 2>&1; then
	cat "$log" >&2
	echo "check-readme-install: the README's snippet failed (above), run with RWLOCK=$root" >&2
	exit 1
fi
echo "check-readme-install: ok"
