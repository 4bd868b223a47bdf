# Basin — see README.md. Every target runs as root on Debian 12.
GO        ?= go
BIN       := bin/basin
DATA_DIR  ?= /var/lib/basin
FUZZTIME  ?= 15s
export GOFLAGS := -buildvcs=false

.PHONY: all setup build run test unit integration fuzz e2e lint generate check-generated bench clean

all: build

setup:
	scripts/setup.sh

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/basin

## run: install what Basin needs, build it, and run it on its embedded defaults.
run: setup build
	$(BIN) serve --data-dir $(DATA_DIR)

## test: install what the tests need and run every test (unit, golden, btrfs
## integration, crash, fuzz, and the end-to-end tests: gcloud, the Go and Node
## clients (test/e2e clients_test.go, running test/clients) and the official
## Python client).
test:
	scripts/setup.sh --test
	$(MAKE) build lint check-generated
	$(GO) test -count=1 -p 1 -timeout 30m ./...   # one package at a time: the root tests share the host's mounts and loop devices
	$(MAKE) fuzz
	$(MAKE) e2e

lint:
	@out=$$(gofmt -l cmd internal test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test/clients/go && $(GO) vet ./...

generate:
	$(GO) generate ./...

check-generated: generate
	@git diff --exit-code -- internal/apiv1/enums_gen.go || { echo "enums_gen.go is stale: run make generate"; exit 1; }

## fuzz: every fuzz target, each for FUZZTIME.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeVolume$$' -fuzztime $(FUZZTIME) ./internal/apiv1
	$(GO) test -run '^$$' -fuzz '^FuzzDecodePool$$' -fuzztime $(FUZZTIME) ./internal/apiv1
	$(GO) test -run '^$$' -fuzz '^FuzzFilter$$' -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzUpdateMask$$' -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzServeHTTP$$' -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzToken$$' -fuzztime $(FUZZTIME) ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/perf
	$(GO) test -run '^$$' -fuzz '^FuzzParseTextSpacing$$' -fuzztime $(FUZZTIME) ./internal/perf
	$(GO) test -run '^$$' -fuzz '^FuzzParseReply$$' -fuzztime $(FUZZTIME) ./internal/oncrpc
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeResults$$' -fuzztime $(FUZZTIME) ./internal/nfs3
	$(GO) test -run '^$$' -fuzz '^FuzzReadReply$$' -fuzztime $(FUZZTIME) ./internal/nfs3
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCompound$$' -fuzztime $(FUZZTIME) ./test/nfsraw
	$(GO) test -run '^$$' -fuzz '^FuzzSpecs$$' -fuzztime $(FUZZTIME) ./internal/schedule
	$(GO) test -run '^$$' -fuzz '^FuzzParseNetwork$$' -fuzztime $(FUZZTIME) ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./internal/secret
	$(GO) test -run '^$$' -fuzz '^FuzzParentDN$$' -fuzztime $(FUZZTIME) ./test/addc
	$(GO) test -run '^$$' -fuzz '^FuzzOUPath$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzClassifyJoinError$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzParseWorkgroup$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzShareDiff$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzCheckDirectory$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzParseProfileDump$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzParseTcons$$' -fuzztime $(FUZZTIME) ./internal/smb
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAgg$$' -fuzztime $(FUZZTIME) ./internal/metrics
	$(GO) test -run '^$$' -fuzz '^FuzzParseStats$$' -fuzztime $(FUZZTIME) ./internal/nfs
	$(GO) test -run '^$$' -fuzz '^FuzzParseAllIO$$' -fuzztime $(FUZZTIME) ./internal/nfs
	$(GO) test -run '^$$' -fuzz '^FuzzParseTCPTable$$' -fuzztime $(FUZZTIME) ./internal/metrics

## e2e: drive a real basin serve with the official Python client.
e2e: build
	BASIN_BIN=$(CURDIR)/$(BIN) .venv/bin/python -m pytest -q test/e2e/python

## bench: benchmarks; results go to bench/results.json and docs/benchmarks.md.
bench: build
	$(GO) run ./test/bench -basin $(CURDIR)/$(BIN) -out bench/results.json -doc docs/benchmarks.md

clean:
	rm -rf bin .venv
