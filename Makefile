# zkrwlock: `make demo` and `make test` work on a fresh Debian machine with Go.
GO ?= go
export ZKRWLOCK_REQUIRE_ZK ?= 1

.PHONY: demo test check zookeeper

zookeeper:
	@./scripts/install-zookeeper.sh

## demo: start a throwaway ZooKeeper, show readers and a migration job sharing a lock
demo: zookeeper
	$(GO) run ./cmd/demo

## test: every test, against real ZooKeeper servers the tests start (a missing server fails)
test: zookeeper check
	$(GO) test -race -count=1 -timeout 15m ./...

## check: formatting, vet, and the public API contract
check:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
