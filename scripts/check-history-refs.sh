#!/usr/bin/env bash
# make lint: the repository speaks of the product, not of how it was built.
# Fails on a tracked text file that cites a tracker number ("issue 24",
# "issues 14, 26", "#24" after the word), a numbered or "this/last/next"
# working session, or the removed docs/notes folder. What a change did for
# users belongs in CHANGELOG.md, in the product's words; why belongs in the
# comment or doc itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each pattern is an extended regular expression matched case-insensitively.
patterns=(
  '(^|[^[:alnum:]_])issues?[[:space:]]*#?[0-9]+'
  '(^|[^[:alnum:]_])sessions?[[:space:]]+[0-9]+'
  '(^|[^[:alnum:]_])(this|last|previous|next|that|current)[[:space:]]+session([^[:alnum:]_]|$)'
  'docs/notes/'
)

args=()
for p in "${patterns[@]}"; do args+=(-e "$p"); done

if out=$(git grep -n -I -i -E "${args[@]}" -- . ':!scripts/check-history-refs.sh'); then
  echo "$out"
  echo "history references: cite what the product does (a doc section, a spec section, a test), not a tracker number or a working session"
  exit 1
fi
