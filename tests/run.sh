#!/usr/bin/env bash
# tests/run.sh CMD...: runs each command (a test program or script, through sh -c), shows its
# output, and sums the "N passed, N failed" lines they end with. A command that prints no such
# line (a crash, a sanitizer abort) or exits non-zero with no failure counted adds 1 failure.
# Prints a per-command summary (with the command's last "skipped: ..." note, e.g. a CUDA suite's
# "skipped: no GPU", so a skip reads as one beside its counts), then the total "N passed, N failed"
# as the last line; exits 1 if anything failed.
tp=0
tf=0
summary=""
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cmd in "$@"; do
    t0=$(date +%s%N)
    echo "== $cmd"
    { sh -c "$cmd" 2>&1; echo $? >"$tmp/rc"; } | tee "$tmp/out"
    rc=$(cat "$tmp/rc")
    ms=$((($(date +%s%N) - t0) / 1000000))
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/out" | tail -1)
    if [ -z "$line" ]; then
        p=0
        f=1
        echo "run.sh: '$cmd' printed no 'N passed, N failed' line (exit $rc): 1 failure"
    else
        p=${line%% passed*}
        f=${line#*, }
        f=${f%% failed}
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            echo "run.sh: '$cmd' exited $rc with no failure counted: 1 failure"
        fi
    fi
    tp=$((tp + p))
    tf=$((tf + f))
    skip=$(grep -oE 'skipped: .*' "$tmp/out" | tail -1 | cut -c1-100)
    summary="$summary$(printf '%8d passed %6d failed %5d.%01ds  %s%s' "$p" "$f" $((ms / 1000)) $((ms % 1000 / 100)) "$cmd" \
        "${skip:+  ($skip)}")
"
done
echo "== summary"
printf '%s' "$summary"
echo "$tp passed, $tf failed"
[ "$tf" -eq 0 ]
