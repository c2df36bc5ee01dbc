#!/usr/bin/env bash
# Builds a throwaway module outside the repository that uses otelrwlock and
# lockprof as a user's module would: plain require lines at the version of
# the next release, GOWORK=off, and replace lines only for this repository's
# modules, which are not published yet (they point at this checkout). It
# fails when a go.mod of the repository requires a placeholder version or
# replaces another module of the repository, when the modules do not build
# without the go.work, or when using them raises a user's go directive
# above the library's floor.
#
# Offline but for the Go module proxy (GOPROXY as set; the checkout's own
# modules are never fetched). Usage: scripts/check-consumer.sh [VERSION]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-v0.1.0}
floor=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$root/go.mod")

# Every go.mod of the repository: real versions, no replace of a sibling.
status=0
while IFS= read -r mod; do
	rel=${mod#"$root"/}
	if grep -q 'zkrwlock/rwlock.* v0\.0\.0-00010101000000-000000000000' "$mod"; then
		echo "check-consumer: $rel requires a placeholder version of a zkrwlock module" >&2
		status=1
	fi
	if grep -Eq '^[[:space:]]*(replace[[:space:]]+)?github\.com/zkrwlock/rwlock[^[:space:]]*([[:space:]]+v[^[:space:]]+)?[[:space:]]+=>' "$mod"; then
		echo "check-consumer: $rel replaces a module of this repository (go.work does that for development)" >&2
		status=1
	fi
	if ! grep -q "github.com/zkrwlock/rwlock $version" "$mod" && [ "$rel" != go.mod ]; then
		echo "check-consumer: $rel does not require github.com/zkrwlock/rwlock $version" >&2
		status=1
	fi
done < <(find "$root" -name go.mod -not -path '*/.git/*' -not -path '*/testdata/*' | sort)
[ "$status" -eq 0 ] || exit 1

dir=$(mktemp -d "${TMPDIR:-/tmp}/zkrwlock-consumer-XXXXXX")
trap 'rm -rf "$dir"' EXIT

cat >"$dir/go.mod" <<EOF
module example.com/consumer

go $floor

require (
	github.com/zkrwlock/rwlock $version
	github.com/zkrwlock/rwlock/lockprof $version
	github.com/zkrwlock/rwlock/otelrwlock $version
)

// Not published yet: this checkout.
replace (
	github.com/zkrwlock/rwlock $version => $root
	github.com/zkrwlock/rwlock/lockprof $version => $root/lockprof
	github.com/zkrwlock/rwlock/otelrwlock $version => $root/otelrwlock
)
EOF

cat >"$dir/main.go" <<'EOF'
// Command consumer takes a lock with OpenTelemetry metrics, as a user's
// service would; it is only built, never run.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/lockprof"
	"github.com/zkrwlock/rwlock/otelrwlock"
)

func main() {
	ctx := context.Background()
	obs, err := otelrwlock.NewObserver()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := rwlock.Dial(ctx, []string{"127.0.0.1:2181"}, 20*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	lock, err := rwlock.New(conn, "/locks/consumer", rwlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	rwlock.SetContentionProfileRate(1)
	err = lock.WithRead(ctx, func(ctx context.Context) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	if err := lockprof.Write(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
EOF

cd "$dir"
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
go mod tidy
go build -o /dev/null .
go vet .
if ! grep -qx "go $floor" go.mod; then
	echo "check-consumer: using the modules raised the consumer's go directive above $floor:" >&2
	grep '^go ' go.mod >&2
	exit 1
fi
echo "check-consumer: a module outside the repository builds otelrwlock and lockprof $version with GOWORK=off (go $floor)"
