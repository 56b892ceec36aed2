# meshd — build, test, demo. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GO ?= go
BIN := build
FUZZTIME ?= 10s

.PHONY: all build test unit fuzz-short fuzz demo clean root-tests

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/meshd ./cmd/meshd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/meshctl ./cmd/meshctl

# The whole suite: vet, unit and in-process cluster tests under -race, the
# CLI black-box test, a short run of every fuzz target, and, when run as
# root (as CI is), the root-only suites: network-namespace e2e and the
# package test under a booted systemd.
test: unit fuzz-short root-tests

ROOT_TESTS ?= $(if $(filter 0,$(shell id -u)),$(ROOT_SUITES),)
ROOT_SUITES :=
root-tests: $(ROOT_TESTS)
	@$(if $(ROOT_TESTS),true,echo "root-tests: not root; skipping the namespace e2e and package tests")

unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 10m ./...

fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzParseToken$$' -fuzztime $(FUZZTIME) ./enroll
	$(GO) test -run '^$$' -fuzz '^FuzzFSMCommand$$' -fuzztime $(FUZZTIME) ./agent/state
	$(GO) test -run '^$$' -fuzz '^FuzzSnapshotRestore$$' -fuzztime $(FUZZTIME) ./agent/state

# Longer fuzzing, by hand: make fuzz FUZZTIME=5m
fuzz: fuzz-short

demo: build
	./scripts/demo.sh

clean:
	rm -rf $(BIN) dist

# Packaging (.deb/.rpm, lint, the systemd-nspawn package test) lives in its own file.
-include packaging.mk
