#!/bin/bash
# Device run for the decode step (issue 20): build, quick test, mamba's Triton step (git-ignored
# .peer/, when present) and bench_cuda --graphs step in the same command, then the full CUDA test.
# Run from the repository root of the device copy: bash bench/dev_step.sh [DIR]; DIR (optional): a variant
# copy of the tree, relative to the root, to build and run instead of the root's (the sessions of issue 20 kept
# theirs in git-ignored .dev/<name>); the peer's driver only where .peer/run_peer.py is (git-ignored); logs to $OUT.
set -o pipefail
R=$(pwd)
cd "${1:-.}" || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/smi.txt 2>&1
( time make -j16 build/bench_cuda build/test_cuda build/test_cuda_cl ) > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
tail -3 $OUT/build.log
SELSCAN_TEST_QUICK=1 timeout 60 ./build/test_cuda > $OUT/test_quick.log 2>&1; echo "test_cuda quick rc $?"; tail -6 $OUT/test_quick.log
if [ -f $R/.peer/run_peer.py ]; then (cd $R && PYTHONUNBUFFERED=1 timeout 120 python3 .peer/run_peer.py 2>&1 | tee $OUT/peer.log); fi
SELSCAN_BENCH_STEP_SWEEP=${SWEEP:-1} timeout 150 ./build/bench_cuda --graphs step $BENCHARGS 2>&1 | tee $OUT/bench_graphs.log
timeout ${TTEST:-100} ./build/test_cuda > $OUT/test.log 2>&1; echo "test_cuda rc $?"; grep -v ' ok$' $OUT/test.log | tail -8
timeout ${TTEST:-100} ./build/test_cuda_cl > $OUT/test_cl.log 2>&1; echo "test_cuda_cl rc $?"; grep -v ' ok$' $OUT/test_cl.log | tail -4
