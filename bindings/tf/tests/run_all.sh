#!/bin/sh
# run_all.sh PYTHON [DIR]: make test-tf's suites. Runs every bindings/tf/tests/test_*.py, then the
# fuzz harness fuzz_tf_ops.py (its CI budget; extra arguments from $TF_FUZZ_ARGS, e.g.
# "--cases 20000 --seed 7"), each with PYTHON from DIR (default: the current directory, so that the
# installed package is the one imported), and ends on one count per file and a grand total:
#   TOTAL: N passed, M failed
# (a file that ends without its "N passed, M failed" line, or exits non-zero with no failure
# counted, adds one failure). Exit status 1 on any failure.
set -u
py=$1
dir=${2:-.}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
total_p=0 total_f=0
: > "$tmp/summary"
for t in "$here"/test_*.py "$here"/fuzz_tf_ops.py; do
  name=$(basename "$t")
  echo "== bindings/tf/tests/$name"
  args=""
  [ "$name" = fuzz_tf_ops.py ] && args=${TF_FUZZ_ARGS:-}
  # shellcheck disable=SC2086  (TF_FUZZ_ARGS: words on purpose)
  { (cd "$dir" && "$py" "$t" $args); echo $? > "$tmp/rc"; } 2>&1 | tee "$tmp/log"
  rc=$(cat "$tmp/rc")
  counts=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/log" | tail -1)
  if [ -n "$counts" ]; then
    p=$(echo "$counts" | cut -d' ' -f1)
    f=$(echo "$counts" | cut -d' ' -f3)
    note=""
  else
    p=0 f=0 note=" (no count line)"
  fi
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; note="$note (exit status $rc)"; fi
  total_p=$((total_p + p)) total_f=$((total_f + f))
  printf '  %-22s %6d passed, %d failed%s\n' "$name" "$p" "$f" "$note" >> "$tmp/summary"
done
echo "== test-tf summary (fuzz_tf_ops.py counts cases)"
cat "$tmp/summary"
echo "TOTAL: $total_p passed, $total_f failed"
[ "$total_f" = 0 ]
