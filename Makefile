# Every build, run, test and bench entry point of the service.
# `make run` and `make test` are the two commands of the README.

SHELL        := /bin/bash
GO           ?= go
MODULES      := shared shared/testenv migrations apiserver podagent charts
BIN          := $(CURDIR)/bin
DATA_DIR     ?= $(CURDIR)/.data
# Tools (the pinned MinIO server and Helm) are built once into a cache outside the clone,
# so a fresh clone (CI) reuses them.
TOOLS_DIR    ?= $(HOME)/.cache/svc-tools
MINIO_VERSION ?= v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_BIN    := $(TOOLS_DIR)/minio/$(MINIO_VERSION)/minio
HELM_VERSION ?= v3.22.0
HELM_BIN     := $(TOOLS_DIR)/helm/$(HELM_VERSION)/helm
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK_BIN := $(TOOLS_DIR)/staticcheck/$(STATICCHECK_VERSION)/staticcheck
TEST_FLAGS   ?= -race -count=1 -timeout 20m
BENCH_FLAGS  ?= -run '^$$' -bench . -benchmem -count=1 -timeout 30m

# The Kubernetes control plane of the kubernetes driver's and the chart's
# tests, and the real node's kubelet (scripts/kube-tools.sh builds each into
# $(TOOLS_DIR)/<tool>/<version>/).
K8S_VERSION  ?= v1.37.2
ETCD_VERSION ?= v3.6.16
KWOK_VERSION ?= v0.8.0
KUBE_TOOLS   := $(TOOLS_DIR)/kube-apiserver/$(K8S_VERSION)/kube-apiserver $(TOOLS_DIR)/etcd/$(ETCD_VERSION)/etcd \
                $(TOOLS_DIR)/kwokctl/$(KWOK_VERSION)/kwokctl $(TOOLS_DIR)/kwok/$(KWOK_VERSION)/kwok \
                $(TOOLS_DIR)/kube-controller-manager/$(K8S_VERSION)/kube-controller-manager \
                $(TOOLS_DIR)/kube-scheduler/$(K8S_VERSION)/kube-scheduler $(TOOLS_DIR)/kubectl/$(K8S_VERSION)/kubectl \
                $(TOOLS_DIR)/kubelet/$(K8S_VERSION)/kubelet
# `make build` and the images build alike: static, reproducible paths.
GO_BUILD     := CGO_ENABLED=0 $(GO) build -trimpath
IMAGE_TAG    ?= $(shell awk -F'"' '/^appVersion:/{print $$2}' charts/svc/Chart.yaml)
IMAGE_REPO   ?= ghcr.io/svc-dev

export SVC_MINIO_BIN := $(MINIO_BIN)
export SVC_HELM_BIN := $(HELM_BIN)

.PHONY: build run test test-modules fuzz test-kube kube-tools bench bench-gateway lint tools clean images

build:
	@mkdir -p $(BIN)
	cd apiserver && $(GO_BUILD) -o $(BIN)/apiserver ./cmd/apiserver
	cd podagent && $(GO_BUILD) -o $(BIN)/podagent ./cmd/podagent
	cd podagent && $(GO_BUILD) -o $(BIN)/metalhost ./cmd/metalhost
	cd podagent && $(GO_BUILD) -o $(BIN)/podagent-guest ./cmd/podagent
	cd podagent && $(GO_BUILD) -o $(BIN)/svc-image ./cmd/svc-image

run: build
	SVC_DATA_DIR=$(DATA_DIR) SVC_PODAGENT_BIN=$(BIN)/podagent $(BIN)/apiserver dev

# make test: starts a throw-away PostgreSQL and a real MinIO once (unless
# SVC_TEST_DATABASE_URL / SVC_TEST_S3_ENDPOINT are given), then runs every
# module's tests against them with GOWORK=off, so a missing require fails.
test: build tools
	cd shared/testenv && $(GO) run ./cmd/svc-testenv -- $(MAKE) -C $(CURDIR) test-modules
	$(MAKE) fuzz

# make fuzz (part of make test): every fuzz target runs FUZZ_TIME, each
# listed once as module:package:Target; a Fuzz function missing from the
# list fails the step, so a new target cannot be forgotten. scripts/fuzz-one.sh
# fails on a failing input, and tells Go's fuzztime deadline race (no input
# written) from one by replaying the corpus.
FUZZ_TIME    ?= 10s
FUZZ_TARGETS := shared:./archive:FuzzExtract shared:./objstore/fs:FuzzPathStaysInRoot shared:./objstore/fs:FuzzHeader \
                podagent:./internal/webhook:FuzzParseIncoming apiserver:./internal/checkpointreads:FuzzValidRev \
                apiserver:./internal/gitserver:FuzzCredential apiserver:./internal/gateway:FuzzParseChatRequest apiserver:./internal/gateway:FuzzChunkFields \
                apiserver:./internal/pairing:FuzzParseToken apiserver:./internal/apikey:FuzzParse \
                apiserver:./internal/agentproxy:FuzzAgentPath
fuzz:
	@have=$$(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' $(MODULES) | sed 's/^func //' | sort); \
	listed=$$(for t in $(FUZZ_TARGETS); do echo $${t##*:}; done | sort); \
	if [ "$$have" != "$$listed" ]; then echo "fuzz: FUZZ_TARGETS does not list every fuzz target:"; \
		diff <(echo "$$listed") <(echo "$$have"); exit 1; fi
	@set -e; for t in $(FUZZ_TARGETS); do m=$${t%%:*}; r=$${t#*:}; p=$${r%%:*}; f=$${r#*:}; \
		echo "== fuzz $$m $$p $$f ($(FUZZ_TIME))"; \
		GO=$(GO) ./scripts/fuzz-one.sh $$m $$p $$f $(FUZZ_TIME); done

# Every module runs even when an earlier one fails, so one run shows every failure.
test-modules:
	@failed=; for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && GOWORK=off SVC_BIN_DIR=$(BIN) $(GO) test $(TEST_FLAGS) ./...) || failed="$$failed $$m"; \
	done; if [ -n "$$failed" ]; then echo "FAILED modules:$$failed"; exit 1; fi

bench: build tools
	cd shared/testenv && $(GO) run ./cmd/svc-testenv -- $(MAKE) -C $(CURDIR) bench-modules

bench-modules:
	@set -e; for m in $(MODULES); do \
		echo "== go test -bench $$m"; \
		(cd $$m && GOWORK=off SVC_BIN_DIR=$(BIN) $(GO) test $(BENCH_FLAGS) ./...); \
	done

# The gateway's benchmark report (docs/performance.md, "The gateway report"): added
# latency at one client, a concurrency sweep, streams (time to first token, dropped and
# batched frames) and memory, each beside a bare Go reverse proxy in the same run.
# BASELINE=<commit> also builds that commit's apiserver (scripts/bench-baseline.sh) and
# measures it in the same run. Needs PostgreSQL only (started by the test harness unless
# SVC_TEST_DATABASE_URL is set). BenchmarkGatewayAddedLatency{,Tracing} run under make bench.
bench-gateway: build
	@base="$${SVC_BENCH_BASELINE_BIN:-}"; \
	if [ -n "$(BASELINE)" ]; then base=$$(./scripts/bench-baseline.sh $(BASELINE)) || exit 1; fi; \
	cd apiserver && GOWORK=off SVC_BIN_DIR=$(BIN) SVC_BENCH_BASELINE_BIN="$$base" $(GO) test -run '^$$' \
		-bench '^BenchmarkGatewayReport$$' -benchtime 1x -count=1 -timeout 30m ./e2e/

# make lint: no tracked build output (scripts/check-tracked-files.sh), no tracker numbers or
# working sessions cited in the tree (scripts/check-history-refs.sh), gofmt, go vet and the
# pinned staticcheck, per module with GOWORK=off. Both compile what they check with make
# build's settings (LINT_ENV), so on a cold cache the build after them reuses that work.
LINT_ENV     := GOWORK=off CGO_ENABLED=0 GOFLAGS=-trimpath
lint: $(STATICCHECK_BIN)
	@./scripts/check-tracked-files.sh
	@./scripts/check-history-refs.sh
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	@set -e; for m in $(MODULES); do echo "== vet + staticcheck $$m"; \
		(cd $$m && $(LINT_ENV) $(GO) vet ./... && $(LINT_ENV) $(STATICCHECK_BIN) ./...); done

tools: $(MINIO_BIN) $(HELM_BIN) $(STATICCHECK_BIN) kube-tools

# The kubernetes driver's cluster tests are part of `make test` (apiserver/e2e);
# test-kube runs only them (~30 s warm, control plane included).
kube-tools: $(KUBE_TOOLS)

test-kube: build tools
	cd shared/testenv && $(GO) run ./cmd/svc-testenv -- bash -c 'cd $(CURDIR)/apiserver && GOWORK=off SVC_BIN_DIR=$(BIN) $(GO) test $(TEST_FLAGS) -run Kubernetes ./e2e/'

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kubelet, kwok and kwokctl from the Go module proxy (~7 min + the kubelet,
# and ~2.9 GB once).
$(KUBE_TOOLS):
	TOOLS_DIR=$(TOOLS_DIR) K8S_VERSION=$(K8S_VERSION) ETCD_VERSION=$(ETCD_VERSION) KWOK_VERSION=$(KWOK_VERSION) \
		./scripts/kube-tools.sh

# The apiserver and podagent images: OCI archives in $(IMAGES_DIR),
# built by svc-image (podagent/internal/ociimage) from stripped static
# binaries and the host's git, git-lfs and sh with their shared objects —
# no docker, no registry, no base image; the same inputs give the same
# digests. Loaded into podman when it is installed (containerd: `ctr images
# import`). The one way the images are built: there is no Dockerfile.
IMAGES_DIR   ?= $(CURDIR)/dist/images
RELEASE_BIN  := $(BIN)/release
GO_RELEASE   := $(GO_BUILD) -ldflags "-s -w"

images:
	@mkdir -p $(RELEASE_BIN) $(IMAGES_DIR)
	cd apiserver && $(GO_RELEASE) -o $(RELEASE_BIN)/apiserver ./cmd/apiserver
	cd podagent && $(GO_RELEASE) -o $(RELEASE_BIN)/podagent ./cmd/podagent
	cd podagent && $(GO_BUILD) -o $(BIN)/svc-image ./cmd/svc-image
	$(BIN)/svc-image -out $(IMAGES_DIR) -repo $(IMAGE_REPO) -tag $(IMAGE_TAG) \
		apiserver=$(RELEASE_BIN)/apiserver podagent=$(RELEASE_BIN)/podagent
	@if command -v podman >/dev/null 2>&1; then for i in apiserver podagent; do \
		podman load -q -i $(IMAGES_DIR)/svc-$$i.oci.tar || exit 1; done; fi

$(MINIO_BIN):
	@mkdir -p $(dir $@)
	@echo "building the pinned MinIO server $(MINIO_VERSION) (once; cached in $(TOOLS_DIR))"
	cd /tmp && GOBIN=$(dir $@) GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION)

$(STATICCHECK_BIN):
	@mkdir -p $(dir $@)
	@echo "building the pinned staticcheck $(STATICCHECK_VERSION) (once; cached in $(TOOLS_DIR))"
	cd /tmp && GOBIN=$(dir $@) GOFLAGS=-mod=mod $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(HELM_BIN):
	@mkdir -p $(dir $@)
	@echo "building the pinned helm $(HELM_VERSION) (once; cached in $(TOOLS_DIR))"
	cd /tmp && GOBIN=$(dir $@) GOFLAGS=-mod=mod $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

clean:
	rm -rf $(BIN) $(DATA_DIR)
