# zkrwlock: `make demo` and `make test` work on a fresh Debian machine with Go.
GO ?= go
export ZKRWLOCK_REQUIRE_ZK ?= 1
# A test pass pipes go test -json into scripts/testlog: its failure must fail the recipe.
SHELL := bash
.SHELLFLAGS := -o pipefail -c

# Modules of their own beside the lock's, so that their dependencies
# (github.com/google/pprof, OpenTelemetry) stay out of its go.mod; go test
# ./... and go vet ./... from the root leave them out. Each requires a
# released version of the lock; go.work builds them all from this checkout,
# and scripts/check-consumer.sh builds them as a user's module would.
MODULES := lockprof otelrwlock
# Every package of the three modules, named from here through go.work.
PACKAGES := ./... $(foreach m,$(MODULES),./$(m)/...)

# The oldest Go the library supports: go.mod's go directive. make soak vets
# with it and runs the root package's unit tests with it too (downloaded
# through the module proxy the first time).
GO_FLOOR ?= go1.25.0

# Where make test and make soak keep the go test -json events of their
# passes, for make slowest and make check-tiers.
LOGS ?= $(CURDIR)/.test-logs
TESTLOG := $(GO) run ./scripts/testlog

SIM_SCHEDULES ?= 2000000
SIM_FIRST ?= $(shell date +%s)

.PHONY: install demo test soak check release-check check-tiers slowest sim chaos fuzz zookeeper peers bench

## install: go install ./cmd/zkrwlock, recording the checkout's revision for
## zkrwlock version even where go does not (-buildvcs=false, a git worktree)
install:
	$(GO) install -ldflags "-X main.revision=$$(git rev-parse HEAD) -X main.modified=$$(git diff --quiet HEAD && echo false || echo true)" ./cmd/zkrwlock

zookeeper:
	@./scripts/install-zookeeper.sh

## peers: Curator 5.4 and kazoo 2.8 from Debian, which integration/peers_test.go
## shares locks with and bench/peers compares with
peers:
	@./scripts/install-peers.sh

## demo: start a throwaway ZooKeeper, show readers and a migration job sharing a lock
demo: zookeeper
	$(GO) run ./cmd/demo

# tier runs one tier's tests ($(1) names it, $(2) adds go test flags):
# every package with the race detector, then, in a build without it, the
# tests that pass skipped with tier.NoRace (internal/tier). No test is
# named here: each says its tier itself.
define tier
	@mkdir -p $(LOGS)
	$(GO) test -race -count=1 -json $(2) $(PACKAGES) | $(TESTLOG) -o $(LOGS)/$(1)-race.json
	@$(TESTLOG) -skipped tier.NoRace $(LOGS)/$(1)-race.json | { rc=0; while read -r pkg run; do \
		echo "$(GO) test -count=1 $(2) -run '$$run' $$pkg" >&2; \
		$(GO) test -count=1 -json $(2) -run "$$run" "$$pkg" || rc=1; done; exit $$rc; } | \
		$(TESTLOG) -o $(LOGS)/$(1)-norace.json
endef

## test: the everyday tier: make check, then go test -race -short:
## the unit, fake and simulation tests (a short simulation), and the tests against
## real ZooKeeper servers the tests start and real Curator and kazoo peers (a missing
## server or peer fails) that take no long waits; then, without the race detector,
## the ones it skipped (tier.NoRace: go-zookeeper's own data race on a reconnection).
## make soak runs every test it skips (tier.Long).
test: zookeeper peers check
	$(call tier,test,-short -timeout 10m)

## soak: the rest (CI runs both): release-check, then the whole suite without -short,
## so at full size (the fault tests that wait out session timeouts, elections and
## partitions, the peers' benchmark harnesses, the simulations at their default sizes,
## every mutant the simulation must catch, TestChaos at its default length), with the
## race detector and then without it for the tests it skipped; then 100,000 simulated
## fault schedules, and the root package's unit tests with the oldest Go. The
## simulations and their mutants run with the current Go only: Go 1.25.0's synctest
## can leave a schedule waiting forever on a WaitGroup it does not count as durably
## blocked, or abort one ("WaitGroup.Add called from multiple synctest bubbles") for
## a WaitGroup that never left its bubble.
soak: zookeeper peers release-check
	$(call tier,soak,-timeout 30m)
	$(TESTLOG) -ran $(LOGS)/soak-race.json $(LOGS)/soak-norace.json
	$(GO) test -count=1 -timeout 20m -run 'TestSimulation$$' -sim.schedules=100000 -v .
	GOTOOLCHAIN=$(GO_FLOOR) $(GO) test -count=1 -skip 'TestSimulation' -timeout 10m .

## check-tiers: after make test and make soak, fails unless every test make test
## skipped passed in make soak (CI runs it)
check-tiers:
	$(TESTLOG) -ran $(LOGS)/test-race.json $(LOGS)/test-norace.json $(LOGS)/soak-race.json $(LOGS)/soak-norace.json

## slowest: each package's time and the 20 slowest tests in the last run of a tier
## (TIER=test, the default, or TIER=soak)
TIER ?= test
slowest:
	@$(TESTLOG) -slowest 20 $(LOGS)/$(TIER)-race.json $(LOGS)/$(TIER)-norace.json

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

## bench: the workloads of bench/peers/README.md (W1-W9), the drain scale series and
## ReadBatch, each run once against a throwaway ZooKeeper (or ZKRWLOCK_BENCH_SERVERS).
## W9 and W9Floor start a 3-node ensemble of their own and take about 3 minutes each:
## BENCH='^BenchmarkW[1-8]' leaves them out.
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

## check: formatting, and vet with the current Go, which also compiles
## api_test.go: the exported API, name by name and signature by signature;
## then the README's install snippet, run as printed in an empty directory
check:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PACKAGES)
	./scripts/check-readme-install.sh

## release-check: the slower checks, in make soak: vet with the oldest Go and for
## macOS; then a module outside the repository that uses otelrwlock and lockprof,
## built as a user would build it (GOWORK=off; scripts/check-consumer.sh)
release-check:
	GOTOOLCHAIN=$(GO_FLOOR) $(GO) vet $(PACKAGES)
	GOOS=darwin $(GO) vet ./...
	./scripts/check-consumer.sh
