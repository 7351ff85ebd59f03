#!/usr/bin/env bash
# bench/device_session.sh: a GPU sitting's gate and issue 40's figures from the committed tree, a few steps a
# device call (each call has 600 s: the steps share DEADLINE_S, default 570, and a step is cut at what is left).
# GPU machines reach no registry and keep nothing between sessions, so what they need is fetched here first and
# carried. Calls that fit: `verify gate forms` or `verify gate layer`, then `verify peers`, `verify ssd train
# train525 profile` (on the machine the peers call left warm: a machine is let go after 30 s idle).
#
#   bash bench/device_session.sh prep     here, on a clean checkout: kernels 0.16.2 (the version transformers
#                                         5.17, the GPU machine's, accepts) + kernels-data + tomlkit wheels for
#                                         Python 3.12 into .whl/, the peers' sdists (mamba_ssm 2.3.2.post1,
#                                         causal_conv1d 1.7.0) into .peer/sdist/, and the tracked files' list, the
#                                         tree's hash and HEAD into .whl/ (both folders git-ignored: carry them);
#                                         with BASE=REV also REV's selscan.h and selscan_cuda.cuh into .whl/base/
#                                         (the forms-base step's)
#   bash bench/device_session.sh STEP...  on the device (run's carry: [".whl", ".peer"]), in order, logs in $OUT:
#     verify   the copied tree's hash against prep's (the device copy's .git can lag the copied tree); a
#              mismatch stops the call
#     gate     make test-gpu with kernels on PYTHONPATH (its summary line goes to bench/GPU_GATE.md; the benches
#              below run without kernels, as the earlier sessions' figures did)
#     forms    bench_ssd_forms bf16 and f32: the SSD forward / backward, walks against chunks, one process (and
#              where the header has them, the chunked backward at each ssd_ckb_tc level)
#     kernels  test_cuda_conv and test_cuda_norm (full matrix) and bench_cuda's conv table: new kernels checked in a
#              short call (not the gate)
#     conv     bench_cuda's conv table (bf16): the rows / channels-last paths beside the tiled kernels, one process
#     tck      ncu's gpu__time_duration of ssd_ckb_loc_kernel and ssd_ckb_kernel at each ssd_ckb_tc level (the
#              130m shape's 18 backward calls a level in bench_ssd_forms bf16), medians by bench/ncu_levels.py
#     forms-base the same bench built on prep's BASE headers (.whl/base), run next: a kernel change against
#              the code before it on the same machine, in the same call
#     peers    the peers for this GPU into build/peers (PEER_MAMBA2_ONLY=1: causal_conv1d built, mamba_ssm's
#              Python; about 5 min on 16 cores, so the only step of its call beside verify); the steps below
#              need it (on the same warm machine) and stop the call without it
#     peers-bg the same build in the background on half the cores, while the next steps run (`verify peers-bg
#              gate layer`: the gate, the layer's figures and then mamba_ssm's rows in one call); the steps that
#              need the peers wait for it
#     ssd      bench_ssd.py's scan at the four layer shapes, bf16, against mamba_ssm's Triton SSD (peers built)
#     train    bench_models.py's Mamba2ForCausalLM training step, 130m and 1.3b shapes (peers built)
#     train525 the same under transformers 5.25 (CI's; the image has 5.17), whose mixers make the fused call
#              in training where 5.17's Mamba2 runs its unfused forward
#     layer    bench_ssd.py's layer case (mamba_split_conv1d_scan_combined in each recompute mode; its kernels at 130m) and the Mamba-2
#              training step with selscan-ssd-v2 (the layer before SSD-torch-v3) beside selscan-ssd; mamba_ssm's rows where the peers are built
#     ldm      SSD-CUDA-v38's switch: bench_ssd_forms at SELSCAN__SSD_LDMATRIX 0 / 1 / 2 (built in parallel with
#              test_cuda_ssd at 2), at 8 x 2048 and 64 x 256, forms_steps.py's table and bits, then the full test
#     ncu      Nsight Compute (--set full) on the chunked SSD backward's three kernels at the 130m shape, bf16:
#              the CSV in $OUT/ncu.csv, its summary (bench/ncu_summary.py) printed
#     profile  bench_ssd.py --cases profile and bench_models.py --cases profile: per-kernel times and the
#              training goal as a budget for selscan's scan, conv and gated norm (peers built)
# Each step's summary lines are printed; a failed step is reported and the next runs. Exit status: 1 when
# any step failed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/device-out}
mkdir -p "$OUT"
PY=${TORCH_PY:-python3}

if [ "${1:-}" = prep ]; then
    set -e
    [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "prep: commit first (the hash is the tree's)"; exit 1; }
    mkdir -p .whl .peer/sdist
    rm -rf .whl/*.whl .whl/tf525
    plat="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    python3 -m pip download -q --no-deps $plat -d .whl kernels==0.16.2 kernels-data==0.16.2 tomlkit==0.15.3
    # transformers 5.25 (CI's) with what it needs beyond the GPU machine's image (huggingface_hub 2.x, kernels
    # 0.19), for train525; numpy left out (the image's 2.5 does)
    python3 -m pip download -q $plat -d .whl/tf525 transformers==5.25.0 huggingface_hub==2.4.0 kernels==0.19.1
    rm -f .whl/tf525/numpy-*.whl
    for p in mamba-ssm:mamba_ssm-2.3.2.post1.tar.gz causal-conv1d:causal_conv1d-1.7.0.tar.gz; do
        f=${p#*:}
        [ -s ".peer/sdist/$f" ] && continue
        url=$(curl -fsS -H "Accept: application/vnd.pypi.simple.v1+json" "https://pypi.org/simple/${p%%:*}/" |
              python3 -c "import json, sys; print(next(x['url'] for x in json.load(sys.stdin)['files'] if x['filename'] == sys.argv[1]))" "$f")
        curl -fsSL -o ".peer/sdist/$f" "$url"
    done
    rm -rf .whl/base
    if [ -n "${BASE:-}" ]; then
        mkdir -p .whl/base
        for f in selscan.h selscan_cuda.cuh; do git show "$BASE:$f" > ".whl/base/$f"; done
        git rev-parse "$BASE" > .whl/base/rev.txt
    fi
    git ls-files > .whl/files.txt
    git rev-parse HEAD > .whl/commit.txt
    tr '\n' '\0' < .whl/files.txt | xargs -0 sha1sum | sha1sum | cut -c1-40 > .whl/tree.sha
    echo "prep: $(ls .whl/*.whl | wc -l) wheels, $(ls .peer/sdist | wc -l) sdists; tree $(cat .whl/tree.sha) at $(cut -c1-7 .whl/commit.txt)"
    exit 0
fi

T0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-570}
failed=0
GATE_PATH=${PYTHONPATH:-}  # the gate's PYTHONPATH: kernels' wheels added where prep fetched them
if ls .whl/*.whl >/dev/null 2>&1; then
    if timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl > "$OUT/wheels.log" 2>&1; then
        GATE_PATH=/tmp/site${GATE_PATH:+:$GATE_PATH}
    else
        echo "device_session: kernels' wheels did not install (the gate runs without kernels): $(tail -2 "$OUT/wheels.log")"
        failed=1
    fi
fi
peers="$(pwd)/build/peers"
BENCH_PATH="$peers${PYTHONPATH:+:$PYTHONPATH}"
step() {  # step NAME TIMEOUT_S COMMAND...: the command's log in $OUT/NAME.log, its last lines printed; the
    local name=$1 limit=$2 t0 rc left  # limit cut to what DEADLINE_S leaves
    shift 2
    left=$(( DEADLINE_S - ($(date +%s) - T0) ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 10 ]; then echo "== $name: not run (the call's $DEADLINE_S s are spent)"; failed=1; return; fi
    t0=$(date +%s)
    timeout "$limit" bash -c "$*" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "== $name: rc $rc, $(( $(date +%s) - t0 )) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
    [ "$rc" = 0 ] || failed=1
}
need_torch_pkg() {  # the benches import the installed selscan_torch (the gate installs it; a later call reuses it);
    # called before need_peers, so that its build (about 230 s on 16 cores) runs beside a peers-bg build (about 380
    # s on half of them) instead of after it: the thirty-third session's `verify peers-bg ssd train` spent its 570 s
    # on the two builds one after the other. Half the cores while a peers-bg build runs.
    local jobs pid
    jobs=$(nproc)
    pid=$(cat build/peers-bg.pid 2>/dev/null) && kill -0 "$pid" 2>/dev/null && jobs=$(( jobs / 2 ))
    "$PY" -c "import selscan_torch" 2>/dev/null ||
        step torch-pkg 400 "MAX_JOBS=$jobs $PY -m pip install -q --no-build-isolation --no-deps ./bindings/torch"
}
wait_peers_bg() {  # a peers-bg build of this call still running: wait for it while the call's deadline allows
    local pid
    pid=$(cat build/peers-bg.pid 2>/dev/null) || return 0
    while kill -0 "$pid" 2>/dev/null && [ $(( DEADLINE_S - ($(date +%s) - T0) )) -gt 60 ]; do sleep 5; done
    kill -0 "$pid" 2>/dev/null && echo "device_session: the background peers build still runs (the call's time is short)"
    tail -n 3 "$OUT/peers.log" 2>/dev/null
    rm -f build/peers-bg.pid
}
need_peers() {  # the benches' peers, built by an earlier call's peers step on this warm machine (or this call's peers-bg)
    wait_peers_bg
    [ -d "$peers/mamba_ssm" ] || { echo "device_session: no $peers/mamba_ssm: run the peers step first (same warm machine): stopped"; exit 1; }
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1
for s in "$@"; do
    case $s in
    verify)
        got=$(tr '\n' '\0' < .whl/files.txt | xargs -0 sha1sum | sha1sum | cut -c1-40)
        echo "== verify: tree $got, prep's $(cat .whl/tree.sha) at $(cut -c1-7 .whl/commit.txt)"
        [ "$got" = "$(cat .whl/tree.sha)" ] || { echo "verify: the copied tree is not prep's: stopped"; exit 1; } ;;
    gate)
        TAIL=12 step gate 590 "PYTHONPATH='$GATE_PATH' TORCH_PY='$PY' make test-gpu" ;;
    forms)
        step forms 400 "make -s build/bench_ssd_forms && ./build/bench_ssd_forms bf16 && ./build/bench_ssd_forms f32" ;;
    kernels)  # the conv's and the norm's CUDA suites (full matrix) and bench_cuda's conv table, built in parallel: a short call's check of new kernels (not the gate)
        step kernels 300 "make -s -j3 build/test_cuda_conv build/test_cuda_norm build/bench_cuda && ./build/test_cuda_conv | tail -3 && ./build/test_cuda_norm | tail -3 && ./build/bench_cuda conv bf16" ;;
    conv)  # bench_cuda's conv table: each layout's path beside the tiled kernels forced, one process
        step conv 300 "make -s build/bench_cuda && ./build/bench_cuda conv bf16" ;;
    tck)  # ncu's kernel times of the chunked backward's local-state and gradient kernels at each ssd_ckb_tc level
        step tck 300 "make -s build/bench_ssd_forms && \$(command -v ncu || echo /usr/local/cuda/bin/ncu) --clock-control none --kernel-name regex:'ssd_ckb_(loc_)?kernel' --launch-count 108 --metrics gpu__time_duration.sum --csv --page raw ./build/bench_ssd_forms bf16 > $OUT/tck.csv && '$PY' bench/ncu_levels.py $OUT/tck.csv" ;;
    forms-base)  # selscan_cuda.cuh's quoted include of selscan.h takes the base's, beside it
        [ -s .whl/base/rev.txt ] || { echo "== forms-base: no .whl/base (prep with BASE=REV)"; failed=1; continue; }
        step forms-base 400 "mkdir -p build/base && \${CC:-cc} -O2 -x c -DSELSCAN_IMPLEMENTATION -c .whl/base/selscan.h -o build/base/selscan_cpu.o && \${NVCC:-nvcc} -O3 -arch=sm_90 -std=c++17 -DSELSCAN_VALIDATION_ONLY -I.whl/base -I. bench/bench_ssd_forms.cu build/base/selscan_cpu.o -o build/base/bench_ssd_forms && echo \"base \$(cut -c1-7 .whl/base/rev.txt)\" && ./build/base/bench_ssd_forms bf16 && ./build/base/bench_ssd_forms f32" ;;
    ldm)  # SSD-CUDA-v38: bench_ssd_forms at SELSCAN__SSD_LDMATRIX 0, 1, 2 and test_cuda_ssd at 2, built in parallel; the
        # benches one after another at 8 x 2048 and 64 x 256, side by side (bench/forms_steps.py: times, bits), the full test
        step ldm 570 "mkdir -p build/ldm && \${CC:-cc} -O2 -x c -DSELSCAN_IMPLEMENTATION -c selscan.h -o build/ldm/sc.o && for n in 0 1 2; do \${NVCC:-nvcc} -O3 -arch=sm_90 -std=c++17 -DSELSCAN_VALIDATION_ONLY -DSELSCAN__SSD_LDMATRIX=\$n -I. bench/bench_ssd_forms.cu build/ldm/sc.o -o build/ldm/bench\$n & done; \${NVCC:-nvcc} -O3 -arch=sm_90 -std=c++17 -DSELSCAN_VALIDATION_ONLY -DSELSCAN__SSD_LDMATRIX=2 -I. tests/test_cuda_ssd.cu build/ldm/sc.o -o build/ldm/test2 & wait; for s in '' '64 256'; do for n in 0 1 2; do ./build/ldm/bench\$n bf16 \$s > $OUT/ldm\$n\${s:+_64}.txt || exit 1; done; '$PY' bench/forms_steps.py l0=$OUT/ldm0\${s:+_64}.txt l1=$OUT/ldm1\${s:+_64}.txt l2=$OUT/ldm2\${s:+_64}.txt; done; ./build/ldm/test2 | tail -n 3" ;;
    ncu)  # Nsight Compute on the chunked SSD backward's three kernels (the first backward of bench_ssd_forms bf16:
        # the 130m shape; loc, pass, then the gradient kernel), summarized by bench/ncu_summary.py
        step ncu 400 "make -s build/bench_ssd_forms && \$(command -v ncu || echo /usr/local/cuda/bin/ncu) --clock-control none --kernel-name regex:'ssd_ckb_(loc_|pass_)?kernel' --launch-count 3 --set full --csv --page details ./build/bench_ssd_forms bf16 > $OUT/ncu.csv && '$PY' bench/ncu_summary.py $OUT/ncu.csv" ;;
    peers)
        step peers 590 "PEER_MAMBA2_ONLY=1 PYTHON='$PY' bash bench/build_peers.sh .peer/sdist '$peers'" ;;
    peers-bg)  # the peers' build on half the cores beside the next steps (the gate's builds take the rest)
        mkdir -p build
        PEER_MAMBA2_ONLY=1 PYTHON="$PY" MAX_JOBS=$(( $(nproc) / 2 )) \
            nohup bash bench/build_peers.sh .peer/sdist "$peers" > "$OUT/peers.log" 2>&1 < /dev/null &
        echo $! > build/peers-bg.pid
        echo "== peers-bg: started (log peers.log)" ;;
    ssd)
        need_torch_pkg; need_peers
        step ssd 400 "PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_ssd.py --device cuda --dtype bf16 --batch 8 --lens 2048 --cases scan --shapes 130m,1.3b,2.7b,nemotron-h --reps 5 --no-fallback" ;;
    train)
        need_torch_pkg; need_peers
        step train 590 "PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_models.py --models mamba2-130m,mamba2-1.3b --backends selscan-ssd,mamba_ssm --cases train --out $OUT/train.json" ;;
    train525)
        need_torch_pkg; need_peers
        step tf525 120 "'$PY' -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tf525 .whl/tf525/*.whl"
        step train525 590 "PYTHONPATH='/tmp/tf525:$BENCH_PATH' '$PY' bench/bench_models.py --models mamba2-130m,mamba2-1.3b --backends selscan-ssd,mamba_ssm --cases train --out $OUT/train525.json" ;;
    layer)  # the peers where built (mamba_ssm's rows; a peers-bg build waited for), else selscan's alone
        need_torch_pkg; wait_peers_bg
        step layer 300 "PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_ssd.py --device cuda --dtype bf16 --batch 8 --lens 2048 --cases layer --shapes 130m,1.3b --reps 5 && PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_ssd.py --device cuda --dtype bf16 --batch 8 --lens 2048 --cases layer-profile --shapes 130m --reps 3"
        bks=selscan-ssd,selscan-ssd-v2; [ -d "$peers/mamba_ssm" ] && bks=$bks,mamba_ssm
        step train-v2 300 "PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_models.py --models mamba2-130m,mamba2-1.3b --backends $bks --cases train --out $OUT/train-v2.json" ;;
    profile)
        need_torch_pkg; need_peers
        step profile 590 "PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_ssd.py --device cuda --dtype bf16 --batch 8 --lens 2048 --cases profile --shapes 130m,1.3b --no-fallback && PYTHONPATH='$BENCH_PATH' '$PY' bench/bench_models.py --models mamba2-130m --backends selscan-ssd,mamba_ssm --cases profile --out $OUT/profile.json" ;;
    *) echo "device_session: unknown step $s"; failed=1 ;;
    esac
done
exit $failed
