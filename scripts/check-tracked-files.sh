#!/usr/bin/env bash
# make lint: no build output in git. Fails on a tracked executable binary (ELF,
# Mach-O, PE) or a tracked file over 1 MB that is not on the allow-list below.
set -euo pipefail
cd "$(dirname "$0")/.."

# Paths (globs) of tracked files allowed over 1 MB, one per line, with the reason.
allow=(
)

limit=$((1024 * 1024))
bad=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*)
      echo "tracked executable: $f (build output belongs in bin/, which is ignored)"; bad=1 ;;
  esac
  size=$(stat -c %s "$f")
  if [ "$size" -gt "$limit" ]; then
    ok=0
    for a in "${allow[@]}"; do
      # shellcheck disable=SC2053
      [[ "$f" == $a ]] && ok=1
    done
    [ "$ok" = 1 ] || { echo "tracked file over 1 MB: $f ($size bytes); add it to the allow-list in $0 with a reason, or untrack it"; bad=1; }
  fi
done < <(git ls-files -z)
exit "$bad"
