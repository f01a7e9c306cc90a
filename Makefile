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

.PHONY: all build lint test test-targets test-unit test-integration test-integration-ch26 test-bench-smoke images chaos bench bench-smoke

all: lint build test

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/txsink ./cmd/txsink

lint:
	@out=$$(gofmt -l .); \
	if [[ -n $$out ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# What `make test` runs, in order (.ci/run times each one: `make -s test-targets`).
TEST_TARGETS := test-unit test-integration test-integration-ch26 test-bench-smoke

test: $(TEST_TARGETS)

test-targets:
	@echo $(TEST_TARGETS)

test-unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/integration')
	$(GO) vet -tags dbtest ./connectors/postgres/ ./offsets/

test-integration:
	$(GO) test -race -tags dbtest -count=1 -timeout 10m ./connectors/postgres/ ./offsets/
	$(GO) test -count=1 -timeout 45m -p 1 ./integration/...

# ClickHouse lane 26 (docs/testing.md): every ClickHouse test, and the
# format end to end (Avro, Protobuf, JSON Schema into both sinks) and the
# change events (TestCDCClickHouse), again on a
# current server without ZooKeeper (TXSINK_TEST_CLICKHOUSE26_IMAGE; CI:
# ClickHouse 26.9 from the chdb-core wheel). test-integration ran them on
# the default lane (TXSINK_TEST_CLICKHOUSE_IMAGE with ZooKeeper). Each
# package starts its services once.
CH26_TESTS := ^(TestClickHouse|TestVerifyClickHouse|TestVerifyReplicaClickHouse|TestSmokeClickHouse|TestChaosClickHouse|TestFormatsEndToEnd|TestCDCClickHouse)
test-integration-ch26:
	TXSINK_TEST_CLICKHOUSE_LANE=26 $(GO) test -count=1 -timeout 30m -p 1 -run '$(CH26_TESTS)' ./integration/ ./integration/chaos/

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
