# The commands the README and CI use. `make test` is the whole suite.

GO ?= go

.PHONY: build test vet unit race hostile faults lifecycle fuzz bench stubs adapters adapters-ci adapters-check proto rancher-conformance ec2-conformance

# Statically linked (CGO_ENABLED=0): loomd needs no cgo, and a static
# binary is what `loomd bundle` copies into a Rancher driver (the jail has
# no libc; a dynamic base is refused).
build:
	CGO_ENABLED=0 $(GO) build -o bin/loomd ./cmd/loomd

# vet, every test (end-to-end ones drive the built binary, a real sshd and
# real NATS), the race detector on the runtime and the bindings, then the
# hostile-plugin suite.
test: vet unit race hostile

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

unit:
	$(GO) test -count=1 -timeout 15m ./...

race:
	$(GO) test -count=1 -race -timeout 15m ./runtime/... ./bindings/...

bench:
	$(GO) test -run XXX -bench . -benchmem ./runtime/ ./bindings/...

# The hostile-plugin suite (test/hostile): attack plugins and hostile
# requests against loomd serve as a real process. Known gaps are skipped;
# LOOM_HOSTILE_GAPS=1 runs them too. The report of observed outcomes and
# latencies goes to bin/hostile-report.md.
hostile:
	@mkdir -p bin
	LOOM_HOSTILE=1 LOOM_HOSTILE_REPORT=$(CURDIR)/bin/hostile-report.md $(GO) test -count=1 -parallel 4 -timeout 10m ./test/hostile/

# Native Go fuzzing (issue 20 item 6) of every parser of untrusted input, each
# target for FUZZTIME (CI: 6s; 13 targets and their instrumented builds stay
# under 3 minutes). A failure leaves its input in <package>/testdata/fuzz/<Target>/:
# fix the bug and commit the file, which plain `go test` (and so `make unit`)
# then runs as a regression test, as it runs every seed corpus there.
FUZZTIME ?= 6s
FUZZ := ./runtime:FuzzTaskScan ./runtime:FuzzParseTask ./runtime:FuzzParseCall \
	./bindings/luaval:FuzzDecode ./bindings/redact:FuzzRedact ./runtime/internal/lpattern:FuzzPattern \
	./internal/extract:FuzzTarScript ./internal/extract:FuzzTar ./internal/extract:FuzzZip \
	./internal/cluster/spec:FuzzParse ./internal/cluster/macro:FuzzExpand \
	./internal/worker:FuzzFrames ./internal/coopr:FuzzSiteConfig
# A finding always leaves its input in testdata/fuzz/FN. Go's fuzzing engine
# also fails a run with a bare "context deadline exceeded" when -fuzztime
# runs out while a slow input still runs (seen in CI under load, no input
# written): that is the engine's timing, not a finding, and is reported but
# not failed.
fuzz:
	@for t in $(FUZZ); do pkg=$${t%%:*}; fn=$${t##*:}; echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		before=$$(ls $$pkg/testdata/fuzz/$$fn 2>/dev/null | wc -l); \
		out=$$($(GO) test -run XXX -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); rc=$$?; echo "$$out" | tail -20; \
		[ $$rc -eq 0 ] && continue; \
		after=$$(ls $$pkg/testdata/fuzz/$$fn 2>/dev/null | wc -l); \
		if [ "$$after" = "$$before" ] && echo "$$out" | grep -q "context deadline exceeded" && ! echo "$$out" | grep -q "Failing input written"; then \
			echo "fuzz: $$fn: the engine ran out of -fuzztime during an input (no input written): not a finding"; continue; fi; \
		echo "fuzz: $$fn failed; its input is in $$pkg/testdata/fuzz/$$fn/"; exit 1; done

# Fault tests (test/faults_test.go): real disk exhaustion (a tmpfs under
# --data filled for 3 s and for 60 s; LOOM_FAULTS_LONG=1 makes it 5 min),
# kill -9 while full, and --store-max, against loomd serve as a real
# process (needs root: mount); and (internal/queue/failover_test.go) two
# daemons on a 3-node nats-server cluster whose stream leader is killed
# with kill -9 during 1,000 tasks, then the cluster's quorum lost for 30 s
# (LOOM_FAULTS_SHORT=1 skips that case). Each counts lost, stuck, wrong and
# twice-run tasks, which must all be 0. Also three daemons that start with
# one of the three servers down (TestFaultOpenWithAServerDown, about a
# minute) must open and serve. Then the cluster lifecycle test
# (make lifecycle, below).
faults:
	LOOM_FAULTS=1 LOOM_FAILOVER_TASKS=1000 $(GO) test -count=1 -timeout 15m -run 'TestFault' -v ./test/ ./internal/queue/
	$(MAKE) --no-print-directory lifecycle

# The randomized cluster lifecycle test (test/cluster_lifecycle_test.go):
# sequences of random spec edits and service actions on real sshd hosts,
# with kill -9 of the CLI, failing actions and a host down then back,
# invariants checked after each step; every 4th sequence runs through two
# daemons on a 3-node NATS cluster, with kill -9 of the job's daemon as
# one more fault. The seed is printed; LOOM_LIFECYCLE_SEED=<seed> replays
# a run, LOOM_LIFECYCLE_SEQ_SEED=<seed> one sequence. CI runs 10 sequences
# (about 4 minutes, no new one after LOOM_LIFECYCLE_BUDGET=4m);
# LOOM_LIFECYCLE_SEQUENCES=300 LOOM_LIFECYCLE_BUDGET=3h
# LIFECYCLE_TIMEOUT=4h is the long run (the go test timeout must outlast
# the budget: a test killed by it leaves its hosts' processes behind).
LIFECYCLE_TIMEOUT ?= 30m
lifecycle:
	LOOM_LIFECYCLE=1 LOOM_LIFECYCLE_SEQUENCES=$${LOOM_LIFECYCLE_SEQUENCES:-10} $(GO) test -count=1 -timeout $(LIFECYCLE_TIMEOUT) -run 'TestClusterLifecycleRandom' -v ./test/

# The Go adapters (adapters/*/go.mod: kloud, machinecontroller,
# bucketprovisioner), each its own module compiled against its host's
# types; a module's go.<tag>.mod files are alternate requirements built
# with -tags <tag> (bucketprovisioner's older library generations). An
# adapter's go.mod lists the root module's requirements too, so a change to
# the root go.mod makes it stale: this target tidies it then (commit the
# result); adapters-ci (run by .ci/run) fails instead. A clean run
# downloads and compiles a large part of Kubernetes: adapters-ci is
# bounded by ADAPTERS_TIMEOUT (figures in docs/benchmarks.md).
# GONOSUMDB: this machine's sum database has no k8c.io entries.
ADAPTERS := $(wildcard adapters/*/go.mod)
ADAPTERS_TIMEOUT ?= 12m
define adapter_loop
	@export GONOSUMDB=k8c.io/machine-controller; for m in $(dir $(ADAPTERS)); do ( cd $$m && for f in go.mod $$(ls go.*.mod 2>/dev/null); do \
		tag=$${f#go.}; tag=$${tag%.mod}; [ "$$f" = go.mod ] && tag=; \
		echo "== $$m$$f$${tag:+ (-tags $$tag)}"; \
		if ! $(GO) mod tidy -modfile=$$f -diff >/dev/null 2>&1; then $(1) fi; \
		$(GO) vet -modfile=$$f -tags "$$tag" ./... && $(GO) test -modfile=$$f -tags "$$tag" -count=1 ./... || exit 1; \
		done ) || exit 1; done
endef
adapters:
	$(call adapter_loop,$(GO) mod tidy -modfile=$$f || exit 1; \
		echo "$$m$$f was stale (the root go.mod changed): tidied; commit it and its go.sum";)
adapters-ci:
	timeout $(ADAPTERS_TIMEOUT) $(MAKE) --no-print-directory adapters-check
adapters-check:
	$(call adapter_loop,echo "$$m$$f is stale (the root go.mod changed?): run make adapters and commit the result"; exit 1;)

# Regenerate the LuaLS stubs and the generated binding reference from the
# bindings' specs, and docs/kinds from the plugin kinds (a test fails when
# they are stale).
stubs:
	$(GO) run ./cmd/loomd stubs --out stdlib/types
	$(GO) run ./cmd/loomd stubs --markdown > docs/bindings/reference.md
	for k in provider automator clusterdriver bucketprovisioner cloudprovider kloudprovider; do \
		$(GO) run ./cmd/loomd kinds $$k > docs/kinds/$$k.md || exit 1; done

# Regenerate the Go code of the Rancher cluster driver protocol
# (internal/rancher/driverpb) from drivers.proto. Needs protoc (apt
# protobuf-compiler); installs the pinned Go plugins into bin/. The
# generated code is committed: builds and CI need none of this.
PROTOC_GEN_GO = v1.36.12
PROTOC_GEN_GO_GRPC = v1.6.2
proto:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC)
	PATH="$(CURDIR)/bin:$$PATH" protoc -I internal/rancher/driverpb \
		--go_out=internal/rancher/driverpb --go_opt=paths=source_relative \
		--go-grpc_out=internal/rancher/driverpb --go-grpc_opt=paths=source_relative \
		drivers.proto

# The Rancher cluster driver host against kontainer-engine's own Go client
# (test/rancherconformance, a module of its own that pins grpc v1.26 and
# golang/protobuf v1.3.2): a bundle of a static loomd launched and driven
# as Rancher does, and chrooted into a bare jail (LOOM_CONFORMANCE_JAIL=1:
# the jail run fails instead of skipping when it cannot chroot). Not part
# of `make test`: a clean run downloads the client's dependency graph and
# compiles it and a static loomd (docs/benchmarks.md).
rancher-conformance:
	CGO_ENABLED=0 $(GO) build -o bin/loomd-static ./cmd/loomd
	cd test/rancherconformance && $(GO) vet ./... && LOOM_CONFORMANCE_JAIL=1 LOOMD=$(CURDIR)/bin/loomd-static $(GO) test -count=1 ./...

# The aws provider and internal/cloudfake/ec2fake against the official AWS SDK for
# Go v2 (test/ec2conformance, a module of its own so the SDK stays out of
# go.mod): every answer of the fake parses with the SDK, every request of
# the plugin equals the SDK's serialization of the same call, every
# signature verifies with the SDK's v4.Signer. Runs `loomd run` (built
# here) against the fake on loopback. CI runs it; a cold build compiles
# the SDK's ec2 package (figures in docs/benchmarks.md). Its go.mod
# replaces github.com/loomrt/loom with ../..: a root go.mod change that
# leaves it stale is tidied here (commit the result).
ec2-conformance:
	@mkdir -p bin
	$(GO) build -o bin/loomd-ec2conformance ./cmd/loomd
	cd test/ec2conformance && { $(GO) mod tidy -diff >/dev/null 2>&1 || { $(GO) mod tidy && \
		echo "test/ec2conformance: go.mod was stale (the root go.mod changed): tidied; commit it"; }; } && \
		$(GO) vet ./... && LOOMD=$(CURDIR)/bin/loomd-ec2conformance $(GO) test -count=1 ./...
