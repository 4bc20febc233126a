# ConfigSync — the two commands a new user needs are `make run` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# Every module of the workspace (go.work `use` lines) that holds Go code.
MODULES := $(shell for m in $$(sed -n 's/^\t\.\/\(.*\)$$/\1/p' go.work); do \
	[ -n "$$(find $$m -name '*.go' -print -quit)" ] && echo $$m; done)
BINARIES := config-api resolver credential delivery ack-ingest
TEST_TIMEOUT ?= 10m

.PHONY: run test generate generate-check lint vet fmt-check bench bench-full bench-signing build vaultdev clean

## run: the whole system from one command (five services and one agent in one process, NATS in a child process; PostgreSQL, keyring)
## It runs the built binary, not `go run`: the go command sets exit status 1 whenever it is interrupted
## (cmd/go/internal/work/exec.go, its idle build workers), even after devstack shut down cleanly, so
## Ctrl-C ended `make run` with "Error 1". devstack itself exits 0 after a clean shutdown on SIGINT.
run:
	@mkdir -p bin
	$(GO) build -o bin/devstack ./tools/devstack
	./bin/devstack $(DEVSTACK_FLAGS)

## test: go test -race in every module of the workspace; fails if any fails
test:
	@failed=""; for m in $(MODULES); do \
	  echo "==> go test $$m"; \
	  (cd $$m && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi; echo "all modules passed"

## generate: regenerate sqlc code (committed; `git diff` stays empty); sqlc is pinned in tools/devtools/go.mod
generate:
	cd tools/devtools && GOWORK=off $(GO) tool sqlc generate -f ../../sqlc.yaml

## generate-check: fail when generated code is not what `make generate` produces
generate-check: generate
	git diff --exit-code -- '*/sqlcdb/*'

## lint: gofmt, go vet in every module, govulncheck (pinned in tools/devtools; needs vuln.go.dev or VULNDB=file:///path)
VULNDB ?= https://vuln.go.dev
lint: fmt-check vet
	@cd tools/devtools && GOWORK=off $(GO) build -o $(CURDIR)/bin/govulncheck golang.org/x/vuln/cmd/govulncheck
	@for m in $(MODULES); do echo "==> govulncheck $$m"; (cd $$m && $(CURDIR)/bin/govulncheck -db $(VULNDB) ./...) || exit 1; done

fmt-check:
	@out=$$(git ls-files '*.go' | grep -v '/sqlcdb/' | xargs gofmt -l); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(MODULES); do echo "==> go vet $$m"; (cd $$m && $(GO) vet ./...) || exit 1; done

## bench: Go microbenchmarks and a quick fleet run (1,000 agents)
bench:
	@for m in libs/agentconfig services/resolver services/credential services/ack-ingest; do \
	  (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -count=1 ./...); done
	$(GO) run ./tools/loadgen -agents 1000

## bench-full: the fleet-scale targets (issue 19): 15,000 agents on real TLS connections, a 50,000-agent
## herd, 100,000 agents multiplexed, the merge benchmark; each run's report goes to stderr and $(BENCH_DIR),
## then ONE table of every target, measured value, verdict and load average (a run that fails leaves its rows
## "not run" or "incomplete"). Exits 2 when a target is missed.
BENCH_DIR ?= .bench
bench-full:
	@mkdir -p bin $(BENCH_DIR)
	$(GO) build -o bin/loadgen ./tools/loadgen
	$(GO) build -o bin/devstack ./tools/devstack
	-./bin/loadgen -devstack-bin bin/devstack -agents 15000 -real-conns -scenarios herd,push -json > $(BENCH_DIR)/real-15k.json
	-./bin/loadgen -devstack-bin bin/devstack -agents 50000 -scenarios herd,push -json > $(BENCH_DIR)/50k.json
	-./bin/loadgen -devstack-bin bin/devstack -agents 100000 -jitter 10s -heartbeat-rate 40000 -timeout 10m -json > $(BENCH_DIR)/100k.json
	{ echo "load: $$(cat /proc/loadavg)"; cd libs/agentconfig && $(GO) test -run '^$$' -bench 'MergeCanonicalHash$$' -count 10 .; \
	  echo "load: $$(cat /proc/loadavg)"; } > $(BENCH_DIR)/merge.txt
	$(GO) run ./tools/loadgen/cmd/benchtable -dir $(BENCH_DIR)

## bench-signing: what signing configs costs: the 10,000-agent herd and environment-wide pushes with signing on,
## then off, back to back (a fresh private devstack each), and one comparison table (push time, signatures per
## push, herd latency, CPU). SIGNING_AGENTS=500 for a quick look.
SIGNING_AGENTS ?= 10000
bench-signing:
	@mkdir -p bin $(BENCH_DIR)
	$(GO) build -o bin/loadgen ./tools/loadgen
	$(GO) build -o bin/devstack ./tools/devstack
	@echo "load: $$(cat /proc/loadavg)"
	./bin/loadgen -devstack-bin bin/devstack -agents $(SIGNING_AGENTS) -scenarios herd,push -compare-signing | tee $(BENCH_DIR)/signing-$(SIGNING_AGENTS).txt
	@echo "load: $$(cat /proc/loadavg)"

## build: static binaries in bin/
build:
	@mkdir -p bin
	@for b in $(BINARIES); do CGO_ENABLED=0 $(GO) build -trimpath -o bin/$$b ./services/$$b/cmd/$$b; done
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/agent ./agent/cmd/agent
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/cfgctl ./tools/cfgctl
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/loadgen ./tools/loadgen

## vaultdev: the in-process dev Vault (own module, outside go.work)
vaultdev:
	@mkdir -p bin
	cd tools/vaultdev && GOWORK=off $(GO) build -o ../../bin/vaultdev .

clean:
	rm -rf bin
