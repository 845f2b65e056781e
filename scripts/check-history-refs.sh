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

hint="history references: cite what the product does (a doc section, a spec section, a test), not a tracker number or a working session"
if out=$(git grep -n -I -i -E "${args[@]}" -- . ':!scripts/check-history-refs.sh'); then
  echo "$out"
  echo "$hint"
  exit 1
fi

# The same reference wrapped over two lines: a line ending in "issue(s)" or
# "session(s)" whose next line starts, past its comment marker, with a number.
wrapped=$(git grep -n -I -i -E -A1 '(^|[^[:alnum:]_])(issues?|sessions?)[[:space:]]*$' -- . ':!scripts/check-history-refs.sh' |
  awk '/^--$/ { prev = ""; next }
       prev != "" {
         line = $0; sub(/^[^:]*-[0-9]+-/, "", line)
         sub(/^[[:space:]]*(\/\/|#|\*|--|;)?[[:space:]]*/, "", line)
         if (line ~ /^#?[0-9]/) { print prev; print $0 }
         prev = ""
       }
       /^[^:]*:[0-9]+:/ { prev = $0 }')
if [ -n "$wrapped" ]; then
  echo "$wrapped"
  echo "$hint"
  exit 1
fi
