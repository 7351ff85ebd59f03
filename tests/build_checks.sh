#!/usr/bin/env bash
# tests/build_checks.sh: selscan.h builds warnings-clean everywhere it claims to.
#   C99 / C11 with gcc and clang, C++11 / C++17 with g++ and clang++ (-Wall -Wextra -pedantic
#   -Werror; -O0, -O2, -O3 -march=native), SELSCAN_NO_SIMD, SELSCAN_STATIC, a renamed copy of the
#   header compiled with -x c (SELSCAN_HEADER_FILE); two translation units
#   plus a SELSCAN_STATIC copy linked into one program that runs (and the same with a C++ caller);
#   README.md's C snippet (between <!-- snippet:c:begin --> and <!-- snippet:c:end -->), extracted
#   unchanged, built as C99 and as C++17 by every compiler and run (malloc'ed buffers); a C++17
#   program assigning const float * inputs without casts (tests/buildcheck/const_inputs.cpp), run;
#   bindings/common/selscan_binding.h (the layer the framework bindings share) alone in C++17 with
#   its unit checks (tests/buildcheck/binding_layer.cpp), run: its CUDA shim's declarations (>>bind-cuda)
#   without CUDA there, their definitions in the SELSCAN_VALIDATION_ONLY nvcc TU below; its argument
#   checks in a TU without selscan's implementation (tests/buildcheck/binding_no_impl.cpp), compiled;
#   a CUDA translation unit with SELSCAN_IMPLEMENTATION through nvcc when it exists (NVCC=none: skipped).
#   An absent compiler is skipped (not counted). Compiles run in parallel (BUILD_JOBS, default nproc).
# Environment: CC, CXX, NVCC, BUILD (output folder, default build). Last line: "N passed, N failed".
cd "$(dirname "$0")/.." || exit 2
CC=${CC:-cc}
CXX=${CXX:-c++}
NVCC=${NVCC:-nvcc}
OUT=${BUILD:-build}/buildcheck
JOBS=${BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
WARN="-Wall -Wextra -pedantic -Werror"
SRC=tests/buildcheck
rm -rf "$OUT"
mkdir -p "$OUT"
# README.md's C snippet, exactly as written there (the lines between the markers, minus the fence)
sed -n '/<!-- snippet:c:begin -->/,/<!-- snippet:c:end -->/p' README.md | sed '1d;$d' | sed '1{/^```/d};${/^```/d}' >"$OUT/readme_snippet.c"
n=0
names=()

# start NAME COMMAND...: runs a check in the background (at most JOBS at once)
start() {
    local name=$1
    shift
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n 2>/dev/null || sleep 0.1; done
    n=$((n + 1))
    names[$n]=$name
    ( echo "\$ $*" >"$OUT/$n.log"; if "$@" >>"$OUT/$n.log" 2>&1; then echo 0 >"$OUT/$n.rc"; else echo 1 >"$OUT/$n.rc"; fi ) &
}
have() { command -v "$1" >/dev/null 2>&1; }
# a compiler's file prefix in $OUT: its whole name, not its basename (CC=/opt/gcc/bin/gcc and gcc are
# two compilers; with one prefix their parallel checks overwrote each other's objects and programs)
tag() { printf '%s' "$1" | tr -c 'A-Za-z0-9+_-' '_'; }
skip() { echo "SKIP build: $1"; }

# distinct compilers (cc is usually gcc: checked once)
ccs=()
seen=""
for c in "$CC" gcc clang; do
    if ! have "$c"; then skip "$c (not found)"; continue; fi
    r=$(readlink -f "$(command -v "$c")")
    case " $seen " in *" $r "*) continue ;; esac
    seen="$seen $r"
    ccs+=("$c")
done
cxxs=()
seen=""
for c in "$CXX" g++ clang++; do
    if ! have "$c"; then skip "$c (not found)"; continue; fi
    r=$(readlink -f "$(command -v "$c")")
    case " $seen " in *" $r "*) continue ;; esac
    seen="$seen $r"
    cxxs+=("$c")
done

# phase 1: compiles (each full implementation compile takes seconds: one per standard/level)
for c in "${ccs[@]}"; do
    t=$(tag "$c")
    start "$c -std=c99 -O2 implementation TU" $c -std=c99 $WARN -O2 -c $SRC/impl.c -o "$OUT/$t.impl.o"
    start "$c -std=c11 -O0 user TU + main" sh -c "$c -std=c11 $WARN -O0 -c $SRC/user.c -o $OUT/$t.user.o && $c -std=c11 $WARN -O0 -DWITH_CPP -c $SRC/main.c -o $OUT/$t.main.o"
    start "$c -std=c99 -O0 SELSCAN_STATIC TU" $c -std=c99 $WARN -O0 -c $SRC/static_tu.c -o "$OUT/$t.static.o"
done
for c in "${ccs[@]}"; do
    t=$(tag "$c")
    start "$c -std=c99 README snippet, run" sh -c \
        "test -s $OUT/readme_snippet.c && $c -std=c99 $WARN -O1 -I. $OUT/readme_snippet.c -o $OUT/$t.snippet -lm && $OUT/$t.snippet"
done
for c in "${cxxs[@]}"; do
    t=$(tag "$c")
    start "$c -std=c++17 README snippet, run" sh -c \
        "test -s $OUT/readme_snippet.c && $c -std=c++17 $WARN -O1 -I. -x c++ $OUT/readme_snippet.c -o $OUT/$t.snippet && $OUT/$t.snippet"
    start "$c -std=c++17 const float * inputs without casts, run" sh -c \
        "$c -std=c++17 $WARN -O1 $SRC/const_inputs.cpp -o $OUT/$t.const_inputs && $OUT/$t.const_inputs"
    start "$c -std=c++17 bindings/common's argument checks without selscan's implementation" \
        $c -std=c++17 $WARN -I. -c $SRC/binding_no_impl.cpp -o "$OUT/$t.binding_no_impl.o"
    start "$c -std=c++17 bindings/common/selscan_binding.h alone (no framework), run" sh -c \
        "$c -std=c++17 $WARN -O1 -I. $SRC/binding_layer.cpp -o $OUT/$t.binding_layer -lm -lpthread && $OUT/$t.binding_layer"
done
if [ ${#ccs[@]} -gt 0 ]; then
    c=${ccs[0]}
    start "$c -std=c99 -O3 -march=native" $c -std=c99 $WARN -O3 -march=native -c $SRC/impl.c -o "$OUT/native.o"
    c=${ccs[${#ccs[@]}-1]}
    start "$c -std=c11 -O0 SELSCAN_NO_SIMD" $c -std=c11 $WARN -O0 -DSELSCAN_NO_SIMD -c $SRC/impl.c -o "$OUT/nosimd.o"
    # the implementation includes itself per instruction set: a renamed copy through SELSCAN_HEADER_FILE
    start "$c -x c on a renamed copy of selscan.h elsewhere (SELSCAN_HEADER_FILE)" sh -c \
        "mkdir -p $OUT/renamed && cp selscan.h $OUT/renamed/my_selscan.h && $c -std=c99 $WARN -O1 -x c -DSELSCAN_IMPLEMENTATION '-DSELSCAN_HEADER_FILE=\"my_selscan.h\"' -c $OUT/renamed/my_selscan.h -o $OUT/renamed.o && nm $OUT/renamed.o | grep -q 'selscan__[a-z0-9_]*_port\$'"
fi
for c in "${cxxs[@]}"; do
    t=$(tag "$c")
    start "$c -std=c++11 -O0 implementation TU" $c -std=c++11 $WARN -O0 -x c++ -c $SRC/impl.c -o "$OUT/$t.impl11.o"
    start "$c -std=c++11 user TUs (C and C++ callers)" sh -c "$c -std=c++11 $WARN -O0 -x c++ -c $SRC/user.c -o $OUT/$t.user.o && $c -std=c++11 $WARN -O0 -c $SRC/user_cpp.cpp -o $OUT/$t.cpp.o"
    start "$c -std=c++17 -O2 SELSCAN_STATIC + SELSCAN_NO_SIMD implementation TU" $c -std=c++17 $WARN -O2 -DSELSCAN_NO_SIMD -x c++ -c $SRC/static_tu.c -o "$OUT/$t.static.o"
done
if [ "$NVCC" != none ] && have "$NVCC"; then
    start "$NVCC -arch=sm_90 -std=c++17 compiles a .cu TU with SELSCAN_IMPLEMENTATION" \
        $NVCC -arch=sm_90 -std=c++17 -O2 -c $SRC/cuda_tu.cu -o "$OUT/cuda_tu.o"
    start "$NVCC the same TU warnings-clean (-Werror all-warnings, host -Wall -Wextra -Werror)" \
        $NVCC -arch=sm_90 -std=c++17 -O0 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -c $SRC/cuda_tu.cu -o "$OUT/cuda_tu_w.o"
    start "$NVCC SELSCAN_VALIDATION_ONLY TU + the bindings' CUDA shim warnings-clean, linked with a C implementation TU (no duplicate symbols)" \
        sh -c "$NVCC -arch=sm_90 -std=c++17 -O0 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -Xptxas -O1 -I. -c $SRC/cuda_vo.cu -o $OUT/cuda_vo.o && ${ccs[0]:-cc} -std=c99 -O0 -c $SRC/impl.c -o $OUT/impl_vo.o && ld -r $OUT/cuda_vo.o $OUT/impl_vo.o -o $OUT/cuda_vo_link.o"
    start "$NVCC a user's .cu with its own cdiv, mk, ld, st, flat, fill_problem, scan_params, ... around the implementation (warnings-clean)" \
        $NVCC -arch=sm_90 -std=c++17 -O0 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -Xptxas -O1 -c $SRC/cuda_user_names.cu -o "$OUT/cuda_user_names.o"
else
    skip "nvcc (not found)"
fi
wait

# phase 2: link what phase 1 built into programs and run them (no duplicate symbols)
for c in "${ccs[@]}"; do
    t=$(tag "$c")
    start "$c link: implementation + user + SELSCAN_STATIC copy, run" sh -c \
        "$c -std=c99 $WARN -O2 -c $SRC/main.c -o $OUT/$t.mainc.o && $c $OUT/$t.impl.o $OUT/$t.user.o $OUT/$t.static.o $OUT/$t.mainc.o -o $OUT/$t.linked -lm -lpthread && $OUT/$t.linked"
done
if [ ${#ccs[@]} -gt 0 ]; then
    for c in "${cxxs[@]}"; do
        t=$(tag "$c")
        ct=$(tag "${ccs[0]}")
        start "$c link: C implementation + C++ users + SELSCAN_STATIC C++ copy, run" sh -c \
            "$c $OUT/$ct.impl.o $OUT/$t.user.o $OUT/$t.cpp.o $OUT/$t.static.o $OUT/$ct.main.o -o $OUT/$t.linked -lm -lpthread && $OUT/$t.linked"
    done
fi
wait

pass=0
fail=0
for i in $(seq 1 $n); do
    if [ "$(cat "$OUT/$i.rc" 2>/dev/null)" = 0 ]; then
        echo "PASS build: ${names[$i]}"
        pass=$((pass + 1))
    else
        echo "FAIL build: ${names[$i]}"
        sed 's/^/    /' "$OUT/$i.log" | head -40
        fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
