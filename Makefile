# zkrwlock: `make demo` and `make test` work on a fresh Debian machine with Go.
GO ?= go
export ZKRWLOCK_REQUIRE_ZK ?= 1

# Modules of their own beside the lock's, so that their dependencies
# (github.com/google/pprof, OpenTelemetry) stay out of its go.mod; go test
# ./... and go vet ./... from the root leave them out. Each requires a
# released version of the lock; go.work builds them all from this checkout,
# and scripts/check-consumer.sh builds them as a user's module would.
MODULES := lockprof otelrwlock

# The oldest Go the library supports: go.mod's go directive. make check vets
# with it and make test runs the root package's unit tests with it too
# (downloaded through the module proxy the first time).
GO_FLOOR ?= go1.25.0

SIM_SCHEDULES ?= 2000000
SIM_FIRST ?= $(shell date +%s)

.PHONY: demo test check sim chaos fuzz zookeeper peers bench

zookeeper:
	@./scripts/install-zookeeper.sh

## peers: Curator 5.4 and kazoo 2.8 from Debian, which integration/peers_test.go
## shares locks with and bench/peers compares with
peers:
	@./scripts/install-peers.sh

## demo: start a throwaway ZooKeeper, show readers and a migration job sharing a lock
demo: zookeeper
	$(GO) run ./cmd/demo

## test: every test, against real ZooKeeper servers the tests start and real Curator
## and kazoo peers (a missing server or peer fails; bench/peers also runs the peers'
## benchmark harnesses briefly), with the race detector; then the ensemble's mixed
## workload through a leader kill without it (go-zookeeper's own data race); then
## 100,000 simulated fault schedules (about a minute on two free cores)
## The fault tests that reconnect with requests in flight (TestHoldLimit's
## partitioned trials among them) run without the race detector, in the pass
## below: go-zookeeper v1.0.4 has a data race of its own there (Conn.lastZxid,
## written by recvLoop while sendSetWatches reads it; go-zookeeper/zk#35), which
## fails them under -race on a busy machine. The root package's simulation keeps
## the race detector on our reconnection code.
ZK35 := ^TestFault|^TestLockAllLostMultiResponse$$|^TestLockAllThroughLeaderKill$$|^TestRevokeThrough|^TestHoldLimit$$/^partitioned$$

test: zookeeper peers check
	$(GO) test -race -count=1 -timeout 15m -skip '$(ZK35)' ./...
	@for m in $(MODULES); do echo "cd $$m && $(GO) test -race -count=1 -timeout 15m ./..."; \
		(cd $$m && $(GO) test -race -count=1 -timeout 15m ./...) || exit 1; done
	@# Built without the race detector only: see integration/faults_ensemble_mixed_test.go.
	$(GO) test -count=1 -timeout 15m -run '$(ZK35)|^TestChaos$$' ./integration/
	$(GO) test -count=1 -timeout 20m -run 'TestSimulation$$' -sim.schedules=100000 -v .
	@# The simulations (and their mutants) run above, with the current Go only: Go
	@# 1.25.0's synctest can leave a schedule waiting forever on a WaitGroup it does
	@# not count as durably blocked, or abort one ("WaitGroup.Add called from
	@# multiple synctest bubbles") for a WaitGroup that never left its bubble.
	GOTOOLCHAIN=$(GO_FLOOR) $(GO) test -count=1 -skip 'TestSimulation' -timeout 10m .

## chaos: the randomized fault run (integration/chaos_test.go) for MINUTES minutes: a
## 3-node ensemble, client processes taking two locks alone and in sets, under hold
## limits and as coalesced readers, a nemesis of server kills and restarts with other
## session limits, partitions, SIGSTOP and holder kills; figures and violations at the end.
## T: the session timeouts the clients ask for (default 4s,10s; e.g. T=4s); CLIENTS: client
## processes at once (default 8); RACE=1: clients built with the race detector; SEED: the
## nemesis's seed (default from the clock); KEEP: where runs.jsonl gets every run's figures
## and a failed run keeps its history (default $TMPDIR/zkrwlock-chaos)
MINUTES ?= 30
T ?=
CLIENTS ?= 8
RACE ?=
SEED ?=
KEEP ?=
chaos: zookeeper
	$(GO) test -count=1 -timeout $$(( $(MINUTES) + 30 ))m -run 'TestChaos$$' -v ./integration/ -chaos.duration=$(MINUTES)m \
		-chaos.clients=$(CLIENTS) $(if $(T),-chaos.timeouts=$(T)) $(if $(filter 1 yes true,$(RACE)),-chaos.race) \
		$(if $(SEED),-chaos.seed=$(SEED)) $(if $(KEEP),-chaos.keep=$(abspath $(KEEP)))

## sim: millions of simulated fault schedules, from a new first seed each run
sim:
	$(GO) test -count=1 -timeout 2h -run 'TestSimulation$$' -sim.schedules=$(SIM_SCHEDULES) -sim.first=$(SIM_FIRST) -v .

## fuzz: fuzz the lock node name parser
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/lockname

## bench: the workloads of bench/peers/README.md (W1-W6r), the drain scale series and
## ReadBatch, each run once against a throwaway ZooKeeper (or ZKRWLOCK_BENCH_SERVERS).
## Progress and Go benchmark lines (with req/acquire and, for W3-W6r, relists/acquire:
## listings between a release and a grant) go to stderr and bench/results/<time>.txt; one
## JSON line per workload to bench/results/<time>.jsonl, printed at the end, in the
## format of the peers' harnesses (bench/peers). BENCH picks benchmarks (a -bench
## regexp); BENCHFLAGS adds flags after the package (e.g. -short, or -bench.waiters=20).
## The comparison with the peers: scripts/compare-peers.sh.
BENCH ?= .
BENCHFLAGS ?=
bench: zookeeper
	@mkdir -p bench/results
	@out=bench/results/$$(date +%Y%m%d-%H%M%S); \
	{ $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 60m ./bench/ \
		-bench.json="$(CURDIR)/$$out.jsonl" $(BENCHFLAGS) 2>&1; echo $$? >"$$out.rc"; } | tee "$$out.txt" >&2; \
	rc=$$(cat "$$out.rc"); rm -f "$$out.rc"; \
	if [ -s "$$out.jsonl" ]; then cat "$$out.jsonl"; fi; \
	echo "bench: $$out.jsonl, $$out.txt" >&2; exit $$rc

## check: formatting, and vet, which also compiles api_test.go: the exported
## API, name by name and signature by signature; then a module outside the
## repository that uses otelrwlock and lockprof, built as a user would build it
## (GOWORK=off; scripts/check-consumer.sh)
check:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	GOTOOLCHAIN=$(GO_FLOOR) $(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	@for m in $(MODULES); do echo "cd $$m && $(GO) vet ./..."; (cd $$m && $(GO) vet ./... && \
		GOTOOLCHAIN=$(GO_FLOOR) $(GO) vet ./...) || exit 1; done
	./scripts/check-consumer.sh
