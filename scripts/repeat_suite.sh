#!/usr/bin/env bash
# The suite, N times in a row, as CI runs it: a clean copy of the checkout with nothing beside it, one install by the
# README's test command, then `pytest` N times, each in a random order whose seed is printed (repeat one with
# `pytest -p randomly --randomly-seed=SEED`). Stops at the first red run and says which seed it was.
#   scripts/repeat_suite.sh [N=20]
set -euo pipefail
runs="${1:-20}"
src="$(cd "$(dirname "$0")/.." && pwd)"
cmd=$(awk '/<!-- test-command -->/{f=1; next} f && /^```sh/{g=1; next} g && /^```/{exit} g{print}' "$src/README.md")
install="${cmd% && pytest*}"  # the README's command without its last step: the install
lone=$(mktemp -d "${TMPDIR:-/tmp}/didactyl-repeat.XXXXXX")
trap 'rm -rf "$lone"' EXIT
mkdir "$lone/didactyl-tui"
(cd "$src" && git ls-files -z --cached --others --exclude-standard \
  | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$lone/didactyl-tui"
cp -a "$src/.git" "$lone/didactyl-tui/.git"
cd "$lone/didactyl-tui"
echo "+ (in $PWD) $install"
bash -c "set -euo pipefail; $install" > install.log 2>&1 || { tail -20 install.log; exit 2; }
for n in $(seq 1 "$runs"); do
  seed=$(python3 -c 'import random; print(random.randrange(2**32))')
  start=$(date +%s)
  if .venv/bin/pytest -q -p randomly --randomly-seed="$seed" > "run-$n.log" 2>&1; then
    echo "run $n/$runs: seed $seed green in $(( $(date +%s) - start )) s ($(tail -1 "run-$n.log"))"
  else
    echo "run $n/$runs: seed $seed RED in $(( $(date +%s) - start )) s"
    grep -E "^(FAILED|ERROR) " "run-$n.log" || tail -30 "run-$n.log"
    kept="${TMPDIR:-/tmp}/didactyl-red-$seed.log"  # the copy goes with the exit; its log stays to be read
    cp "run-$n.log" "$kept" && echo "its log: $kept"
    exit 1
  fi
done
echo "$runs runs green"
