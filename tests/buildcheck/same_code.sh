#!/usr/bin/env bash
# tests/buildcheck/same_code.sh [REV]: whether the working tree's library compiles to the same machine
# code as REV's (default HEAD): for a change meant not to change code (a rename, comments, layout).
# Compares the disassembly of selscan.h's implementation (gcc -O2 on x86-64; aarch64 where
# aarch64-linux-gnu-gcc is) and the bytes of selscan_cuda.cuh's sm_90 cubin, with and without the
# channels-last kernels (where nvcc is). Prints one line per build; exits 1 on a difference.
set -euo pipefail
rev=${1:-HEAD}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old" "$work/new"
git -C "$root" archive "$rev" selscan.h selscan_cuda.cuh tests/selscan_impl.c | tar x -C "$work/old"
cp "$root/selscan.h" "$root/selscan_cuda.cuh" "$work/new/"
mkdir -p "$work/new/tests" && cp "$root/tests/selscan_impl.c" "$work/new/tests/"
printf '#define SELSCAN_IMPLEMENTATION\n#define SELSCAN_CUDA_IMPLEMENTATION\n#include "selscan_cuda.cuh"\n' >"$work/tu.cu"
status=0
same() { # $1: what, $2 $3: the two files
    if cmp -s "$2" "$3"; then echo "same_code: $1: identical"; else echo "same_code: $1: DIFFERS"; status=1; fi
}
dis() { # $1: compiler, $2: objdump, $3: tree -> its disassembly (addresses and file name dropped)
    "$1" -std=c99 -O2 -c -I"$3" "$3/tests/selscan_impl.c" -o "$3/impl.o"
    "$2" -d --no-show-raw-insn "$3/impl.o" | tail -n +3 | sed 's/^ *[0-9a-f]*://' >"$3/impl.$1.dis"
}
for t in old new; do dis gcc objdump "$work/$t"; done
same "x86-64 gcc -O2" "$work/old/impl.gcc.dis" "$work/new/impl.gcc.dis"
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v aarch64-linux-gnu-objdump >/dev/null; then
    for t in old new; do dis aarch64-linux-gnu-gcc aarch64-linux-gnu-objdump "$work/$t"; done
    same "aarch64 gcc -O2" "$work/old/impl.aarch64-linux-gnu-gcc.dis" "$work/new/impl.aarch64-linux-gnu-gcc.dis"
fi
if command -v "${NVCC:-nvcc}" >/dev/null; then
    for cl in 0 1; do
        for t in old new; do
            "${NVCC:-nvcc}" -O3 -arch=sm_90 -std=c++17 -DSELSCAN_CUDA_CHANNELS_LAST=$cl -I"$work/$t" -cubin "$work/tu.cu" \
                -o "$work/$t/cl$cl.cubin"
        done
        same "nvcc sm_90 cubin, SELSCAN_CUDA_CHANNELS_LAST=$cl" "$work/old/cl$cl.cubin" "$work/new/cl$cl.cubin"
    done
fi
exit $status
