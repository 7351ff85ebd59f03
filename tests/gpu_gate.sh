#!/usr/bin/env bash
# tests/gpu_gate.sh quick|full [PART]: the GPU gate (make test-gpu / make test-gpu-full), from a clean
# checkout on a machine with one GPU, nvcc and a Python whose torch is a CUDA build (TORCH_PY, default
# python3) with pytest and pytest-xdist; nothing is downloaded (GPU machines reach no registry).
#
# quick (make test-gpu, <= 8 min on an H200 with 16 cores, builds included), the parts side by side:
#   builds:   the C CUDA suites, the TF op's CUDA TU + gpu_check (sm_90 only), selscan_torch (pip, CUDA
#             kernels) into TORCH_PY's environment
#   c-cuda:   test_cuda, test_cuda_cl, test_cuda_conv, test_cuda_ssd, test_cuda_norm on their quick matrix (SELSCAN_TEST_QUICK=1)
#   memcheck: compute-sanitizer memcheck over the same quick matrix (four runs)
#   torch:    the torch package's CUDA tests (pytest -k cuda, without those marked gpu_full), which hold the
#             operand x rule refusals on CUDA and the transformers MambaForCausalLM smoke (training step
#             and generate on CUDA against transformers' own path)
#   fuzz:     fuzz_ops.py on CUDA (GATE_FUZZ_CASES cases: every bad-input class of the CPU run, device
#             mismatches, side streams; a second device where there is one)
#   tf:       TF's gpu_check (the TF op's CUDA TU against the CPU path; needs no TensorFlow)
# full (make test-gpu-full PART=1|2|3, each part < 10 min): 1 the C suites' whole matrix, both layouts,
#   and the sanitizer's four tools; 2 every torch CUDA test, gpu_full ones too (without the fuzz); 3 the
#   CUDA fuzz at its full count.
# GATE_SKIP_TORCH_BUILD=1: the torch package as an earlier part of the same sitting installed it.
# Optional test dependencies come from TORCH_PY's environment or PYTHONPATH (e.g. a `pip install --target`
# folder carried to the machine): transformers for the model tests, kernels (Makefile TORCH_TEST_PINS) for
# the kernels route's CUDA tests; the torch part's log lists every skip with its reason.
# Every part ends with an "N passed, N failed" line; tests/run.sh sums them into the grand total,
# the last line, and the exit status is 1 when anything failed. Logs: $BUILD/gpu-gate/.
set -u
mode=${1:-quick}
part=${2:-}
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${TORCH_PY:-python3}
MAKE=${MAKE:-make}
JOBS=$(nproc 2>/dev/null || echo 4)
LOG=$BUILD/gpu-gate
mkdir -p "$LOG"
t0=$(date +%s)
stamp() { echo "gpu-gate: $* ($(( $(date +%s) - t0 )) s)"; }

# pytest's and fuzz_ops' summaries as "N passed, N failed" (skips are not failures; errors are)
pytest_total() {  # pytest's last summary ("747 passed, 5 skipped, 47 warnings in 48.16s", -q or not)
    local line p f e
    line=$(grep -E '([0-9]+ (passed|failed|errors?)).* in [0-9.]+s' "$1" | tail -1)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    e=$(echo "$line" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+')
    if [ -z "${p}${f}${e}" ]; then echo "0 passed, 1 failed"; return; fi  # no summary: it never ran
    echo "${p:-0} passed, $(( ${f:-0} + ${e:-0} )) failed"
}
fuzz_total() {
    sed -nE 's/^total: [0-9]+ cases, ([0-9]+) passed, ([0-9]+) failed$/\1 passed, \2 failed/p' "$1" | tail -1
}
# a part run in the background: its output in $LOG/NAME.log, its exit status in $LOG/NAME.rc
bg() { local name=$1; shift; ( "$@" >"$LOG/$name.log" 2>&1; echo $? >"$LOG/$name.rc" ) & }
# the command tests/run.sh runs for a finished part: its log (ending in the part's total) and exit status
report() { echo "cat $LOG/$1.log; exit \$(cat $LOG/$1.rc)"; }

nvidia-smi -L 2>/dev/null | head -4
"$PY" -c 'import torch; assert torch.cuda.is_available(), "no GPU"; print("torch", torch.__version__, torch.cuda.get_device_name(0), torch.cuda.device_count(), "GPU(s)")' || {
    echo "gpu-gate: $PY has no CUDA torch or sees no GPU"; echo "0 passed, 1 failed"; exit 1; }

# ---- builds, side by side ------------------------------------------------------------------------
build_c() { $MAKE --no-print-directory -j"$JOBS" "$BUILD/test_cuda" "$BUILD/test_cuda_cl" "$BUILD/test_cuda_conv" "$BUILD/test_cuda_ssd" "$BUILD/test_cuda_norm" \
            "$BUILD/tf_op/gpu_check" TF_NVFLAGS="-O3 -std=c++17 -arch=sm_90"; }
build_torch() { MAX_JOBS=$JOBS TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} SELSCAN_TORCH_NO_ORT=1 \
                "$PY" -m pip install -q --no-build-isolation --no-deps --force-reinstall ./bindings/torch; }
stamp "building"
bg build-c build_c
if [ -n "${GATE_SKIP_TORCH_BUILD:-}" ]; then  # a second part in the same sitting: the package is installed
    echo "skipped (GATE_SKIP_TORCH_BUILD)" >"$LOG/build-torch.log"; echo 0 >"$LOG/build-torch.rc"
else
    bg build-torch build_torch
fi
wait
for b in build-c build-torch; do
    if [ "$(cat "$LOG/$b.rc")" != 0 ]; then tail -40 "$LOG/$b.log"; echo "gpu-gate: $b failed"; echo "0 passed, 1 failed"; exit 1; fi
done
stamp "built"

# ---- the parts -----------------------------------------------------------------------------------
c_suites() {  # $1: quick or full
    local env=""; [ "$1" = quick ] && env="SELSCAN_TEST_QUICK=1"
    bash tests/run.sh "$env ./$BUILD/test_cuda" "$env ./$BUILD/test_cuda_cl" "$env ./$BUILD/test_cuda_conv" \
        "$env ./$BUILD/test_cuda_ssd" "$env ./$BUILD/test_cuda_norm" | tail -7
}
memcheck() {  # the five runs side by side, each bounded (GATE_MEMCHECK_S)
    local b p=0 f=0 rc
    for b in test_cuda test_cuda_cl test_cuda_conv test_cuda_ssd test_cuda_norm; do
        ( SELSCAN_TEST_QUICK=1 timeout "${GATE_MEMCHECK_S:-330}" compute-sanitizer --tool memcheck --leak-check full \
            --error-exitcode 99 "./$BUILD/$b" >"$LOG/memcheck-$b.txt" 2>&1; echo $? >"$LOG/memcheck-$b.rc" ) &
    done
    wait
    for b in test_cuda test_cuda_cl test_cuda_conv test_cuda_ssd test_cuda_norm; do
        rc=$(cat "$LOG/memcheck-$b.rc")
        echo "memcheck $b: $(grep -E 'ERROR SUMMARY' "$LOG/memcheck-$b.txt" | tail -1 | sed 's/^=* *//'); suite:" \
            "$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$LOG/memcheck-$b.txt" | tail -1) (exit $rc)"
        if [ "$rc" -eq 0 ]; then p=$((p + 1)); else f=$((f + 1)); fi
    done
    echo "$p passed, $f failed"
}
torch_tests() {  # $1: pytest's -m expression (empty: every test)
    local m=() opt=()
    [ -n "$1" ] && m=(-m "$1")
    # xdist's workers share the GPU; 2 CPU threads each (16 a worker starved the CPU references)
    "$PY" -c 'import xdist' 2>/dev/null && opt+=(-n "${GATE_PYTEST_WORKERS:-8}")
    "$PY" -c 'import pytest_timeout' 2>/dev/null && opt+=(--timeout 300)
    # -rfEs: failures, errors and every skip's reason in the summary (what the GPU did not run is part
    # of the result; -r replaces pytest's default fE, so both are named again)
    (cd bindings/torch/tests && OMP_NUM_THREADS=2 "$PY" -m pytest -q -rfEs -p no:cacheprovider "${opt[@]}" \
        -k "cuda and not test_fuzz_ops" "${m[@]}" --durations=15 . >"../../../$LOG/pytest.txt" 2>&1)
    grep -E '^(FAILED|ERROR|SKIPPED) |passed|failed' "$LOG/pytest.txt" | tail -25
    pytest_total "$LOG/pytest.txt"
}
fuzz() {  # $1: cases
    (cd bindings/torch/tests && OMP_NUM_THREADS=1 "$PY" fuzz_ops.py --cases "$1" --seed 27 --device cuda \
        --workers "${GATE_FUZZ_WORKERS:-6}" >"../../../$LOG/fuzz.txt" 2>&1)
    grep -E 'FAIL|cases,' "$LOG/fuzz.txt" | tail -25
    fuzz_total "$LOG/fuzz.txt"
}

parts=()
case "$mode:$part" in
    quick:*)
        bg c-cuda c_suites quick; bg memcheck memcheck; bg torch torch_tests "not gpu_full"
        bg fuzz fuzz "${GATE_FUZZ_CASES:-4000}"; bg tf "./$BUILD/tf_op/gpu_check"
        parts=(c-cuda memcheck torch fuzz tf) ;;
    full:1)
        bg c-cuda c_suites full; bg tf "./$BUILD/tf_op/gpu_check"; wait
        bg sanitize $MAKE --no-print-directory -j4 test-cuda-sanitize
        parts=(c-cuda tf sanitize) ;;
    full:2) bg torch torch_tests ""; parts=(torch) ;;
    full:3) bg fuzz fuzz "${GATE_FUZZ_CASES:-12000}"; parts=(fuzz) ;;
    *) echo "usage: tests/gpu_gate.sh quick | full 1|2|3"; exit 2 ;;
esac
wait
stamp "ran ${parts[*]}"
# make test-cuda-sanitize prints a line per run; its parts' totals: a run a test
if [ -f "$LOG/sanitize.log" ]; then
    n=$(grep -cE '^(memcheck|racecheck|initcheck|synccheck) ' "$LOG/sanitize.log")
    bad=$(grep -E '^(memcheck|racecheck|initcheck|synccheck) ' "$LOG/sanitize.log" | grep -vc 'exit 0)')
    echo "$((n - bad)) passed, $bad failed" >>"$LOG/sanitize.log"
fi
cmds=()
for p in "${parts[@]}"; do cmds+=("$(report "$p")"); done
bash tests/run.sh "${cmds[@]}"
rc=$?
stamp "done: $mode $part"
exit "$rc"
