#!/usr/bin/env bash
# make fuzz: fuzz one target for a fixed time: scripts/fuzz-one.sh MODULE PACKAGE TARGET FUZZTIME
#
# A failing input always fails the step (go test writes it under
# testdata/fuzz/TARGET; commit it as a regression seed once fixed). One
# failure does not: Go's fuzz coordinator up to go1.26 can report a bare
# "context deadline exceeded" when -fuzztime ends while a worker is
# mid-call (go.dev/issue/75804, fixed in go1.27), with no failing input. In
# that case the target's corpus is replayed without fuzzing; the step passes
# only if the replay does.
set -uo pipefail
m=$1 p=$2 f=$3 t=$4
cd "$(dirname "$0")/../$m"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
GOWORK=off ${GO:-go} test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$p" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] && exit 0
if grep -q 'Failing input written' "$out" || ! grep -q '^    context deadline exceeded$' "$out"; then
  exit "$rc"
fi
echo "fuzz: $f ended with the coordinator's deadline race (go.dev/issue/75804) and no failing input; replaying its corpus"
GOWORK=off ${GO:-go} test -count=1 -run "^$f\$" "$p"
