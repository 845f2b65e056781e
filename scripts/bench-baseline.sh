#!/usr/bin/env bash
# bench-baseline.sh COMMIT: builds the apiserver of COMMIT (of this repository)
# into ${SVC_BENCH_BASELINE_DIR:-${TMPDIR:-/tmp}/svc-bench-baseline}/<sha>/apiserver,
# once, and prints the binary's path. `make bench-gateway BASELINE=COMMIT` runs it
# beside the current build in the same benchmark run (docs/performance.md).
set -euo pipefail
commit=${1:?usage: bench-baseline.sh COMMIT}
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
sha=$(git -C "$root" rev-parse --verify "$commit^{commit}")
dir=${SVC_BENCH_BASELINE_DIR:-${TMPDIR:-/tmp}/svc-bench-baseline}/$sha
bin=$dir/apiserver
if [ ! -x "$bin" ]; then
	rm -rf "$dir/src"
	mkdir -p "$dir/src"
	git -C "$root" archive "$sha" | tar -x -C "$dir/src"
	(cd "$dir/src/apiserver" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" ./cmd/apiserver) >&2
	mv "$bin.tmp" "$bin"
	rm -rf "$dir/src"
fi
echo "$bin"
