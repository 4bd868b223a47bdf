# Basin — see README.md. Every target runs as root on Debian 12.
GO        ?= go
BIN       := bin/basin
DATA_DIR  ?= /var/lib/basin
FUZZTIME  ?= 5s
VERSION   ?=
DIST      ?= dist
export GOFLAGS := -buildvcs=false

.PHONY: all setup build run test unit integration fuzz e2e lint generate check-generated bench deb install clean

all: build

setup:
	scripts/setup.sh

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/basin

## run: build Basin's packages and install them (apt-get brings what they need),
## build bin/basin for the CLI, and run the installed basin serve in the
## foreground on its embedded defaults (/etc/basin/basin.conf sets nothing).
run: install build
	/usr/bin/basin serve --config /etc/basin/basin.conf

## deb: Debian packages of Basin (basin) and its NFS-Ganesha (basin-ganesha) in
## $(DIST); VERSION=… overrides the version from git (scripts/deb.sh).
deb:
	scripts/setup.sh --deb
	GO=$(GO) VERSION=$(VERSION) DIST=$(DIST) scripts/deb.sh

## install: build the packages and install them with apt-get, which brings what
## they depend on; the service is then started by hand (docs/operations.md).
install: deb
	DEBIAN_FRONTEND=noninteractive apt-get install -y --reinstall $(shell cat build/deb/debs)

## test: install what the tests need and run every test (unit, golden, btrfs
## integration, crash, fuzz, and the end-to-end tests: gcloud, the Go and Node
## clients (test/e2e clients_test.go, running test/clients) and the official
## Python client).
## test/e2e runs in two tiers, each with its own timeout: the single-node tests,
## then the tests of several nodes and of CephFS (E2E_CLUSTER), which share a
## private Ceph cluster; scripts/gotest.sh prints each test's time, and the
## output of those that fail.
E2E_CLUSTER := ^(TestCephFS|TestCluster|TestThreeNodes|TestPostgresStore)

test:
	scripts/setup.sh --test
	$(MAKE) build lint check-generated
	BASIN_REQUIRE_POSTGRES=1 BASIN_REQUIRE_MIT_KERBEROS=1 $(GO) test -count=1 -p 1 -timeout 45m $$($(GO) list ./... | grep -v '/test/e2e$$')   # one package at a time: the root tests share the host's mounts and loop devices
	BASIN_REQUIRE_POSTGRES=1 BASIN_REQUIRE_MIT_KERBEROS=1 GO=$(GO) scripts/gotest.sh -count=1 -timeout 40m -skip '$(E2E_CLUSTER)' ./test/e2e
	BASIN_REQUIRE_POSTGRES=1 BASIN_REQUIRE_MIT_KERBEROS=1 GO=$(GO) scripts/gotest.sh -count=1 -timeout 30m -run '$(E2E_CLUSTER)' ./test/e2e
	$(MAKE) fuzz
	$(MAKE) e2e

lint:
	@out=$$(gofmt -l cmd internal test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test/clients/go && $(GO) vet ./...

## generate: internal/apiv1/enums_gen.go (gen_enums.py) and internal/netapppb
## from proto/ (internal/netapppb/gen.sh: Debian's protoc, the Go plugins at
## go.mod's tool versions).
generate:
	$(GO) generate ./...

## check-generated: what generate writes must be what is committed (no file
## changed, none added or removed).
GENERATED := internal/apiv1/enums_gen.go internal/netapppb
check-generated: generate
	@out=$$(git status --porcelain -- $(GENERATED)); if [ -n "$$out" ]; then echo "$$out"; git diff --stat -- $(GENERATED); echo "generated code is stale: run make generate and commit it"; exit 1; fi

## fuzz: every fuzz target, each for FUZZTIME (scripts/fuzz.sh).
FUZZ_TARGETS := \
	FuzzDecodeVolume:./internal/apiv1 \
	FuzzDecodePool:./internal/apiv1 \
	FuzzFilter:./internal/api \
	FuzzUpdateMask:./internal/api \
	FuzzServeHTTP:./internal/api \
	FuzzToken:./internal/api \
	FuzzParse:./internal/perf \
	FuzzParseTextSpacing:./internal/perf \
	FuzzParseReply:./internal/oncrpc \
	FuzzUnwrap:./internal/krb5gss \
	FuzzDecodeResults:./internal/nfs3 \
	FuzzReadReply:./internal/nfs3 \
	FuzzDecodeCompound:./test/nfsraw \
	FuzzSpecs:./internal/schedule \
	FuzzParseNetwork:./internal/config \
	FuzzOpen:./internal/secret \
	FuzzParentDN:./test/addc \
	FuzzOUPath:./internal/smb \
	FuzzClassifyJoinError:./internal/smb \
	FuzzParseWorkgroup:./internal/smb \
	FuzzParseKeytabPrincipals:./internal/smb \
	FuzzShareDiff:./internal/smb \
	FuzzCheckDirectory:./internal/smb \
	FuzzParseProfileDump:./internal/smb \
	FuzzParseTcons:./internal/smb \
	FuzzParseNegotiateResponse:./internal/smb \
	FuzzDecodeAgg:./internal/metrics \
	FuzzDecodeState:./internal/metrics \
	FuzzParseStats:./internal/nfs \
	FuzzParseAllIO:./internal/nfs \
	FuzzParseInFlight:./internal/nfs \
	FuzzParseTCPTable:./internal/metrics

fuzz:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

## e2e: drive a real basin serve with the official Python client.
e2e: build
	BASIN_BIN=$(CURDIR)/$(BIN) .venv/bin/python -m pytest -q test/e2e/python

## bench: benchmarks; results go to bench/results.json and docs/benchmarks.md.
bench: build
	$(GO) run ./test/bench -basin $(CURDIR)/$(BIN) -out bench/results.json -doc docs/benchmarks.md

clean:
	rm -rf bin .venv build dist
