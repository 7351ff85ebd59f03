#!/usr/bin/env bash
# bench/build_peers.sh SDIST_DIR [TARGET]: builds the peers that bench/report, bench/bench_torch.py --mamba
# and bench/bench_models.py time selscan against, from their PyPI sdists, for the machine's own GPU
# architecture only, into TARGET (default build/peers; put it on PYTHONPATH).
#   SDIST_DIR holds mamba_ssm-*.tar.gz and causal_conv1d-*.tar.gz (as measured: mamba_ssm 2.3.2.post1,
#   causal_conv1d 1.7.0; https://pypi.org/simple/mamba-ssm/ and .../causal-conv1d/ list their sdists).
# Their setup.py files name ten architectures; this script rewrites that list, in a copy, to the one
# GPU present (about 3-4 min on 16 cores instead of 20+), or to PEER_ARCH (e.g. 90) on a machine without
# one (about 25 min on 2 cores; the GPU machine then runs them with the same torch and Python). Needs nvcc,
# a CUDA torch, setuptools.
# PEER_MAMBA2_ONLY=1: what the Mamba-2 models' mamba_ssm path runs, without mamba_ssm's Mamba-1 CUDA
# extension (its heaviest build): causal_conv1d built as above, mamba_ssm's Python files only (its SSD
# scan, decode step and gated RMSNorm are Triton kernels), and an import stub for selective_scan_cuda
# (mamba_ssm/__init__.py imports it; any use of it raises), so bench_models.py --models mamba2-* can time
# it; the Mamba-1 benches need the full build.
set -euo pipefail
src=$(cd "${1:?usage: bench/build_peers.sh SDIST_DIR [TARGET]}" && pwd)
mkdir -p "${2:-build/peers}"
target=$(cd "${2:-build/peers}" && pwd)
py=${PYTHON:-python3}
arch=${PEER_ARCH:-$($py -c "import torch; m, n = torch.cuda.get_device_capability(); print(f'{m}{n}')")}
work=$(mktemp -d)
# the C++ compiler of torch's own build (a g++ that links libstdc++ statically would give each extension a
# private copy beside torch's: bindings/common/libstdcxx_link.py says why that crashes)
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
export TORCH_CUDA_ARCH_LIST="${arch%?}.${arch: -1}"
export MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-$(nproc)}
build() { # $1: sdist glob
    local sd
    sd=$(ls "$src"/$1 | tail -1)
    tar xzf "$sd" -C "$work"
    local dir="$work/$(basename "$sd" .tar.gz)"
    # the setup.py's gencode list becomes the present GPU's one entry
    $py - "$dir/setup.py" "$arch" <<'EOF'
import re, sys
path, arch = sys.argv[1], sys.argv[2]
lines = open(path).read().split("\n")
gencode = re.compile(r'^(\s*)cc_flag\.append\("-gencode"\)\s*$')
target = re.compile(r'^(\s*)cc_flag\.append\("arch=compute_\w+,code=sm_\w+"\)\s*$')
kept = 0
for i in range(len(lines) - 1):
    g, t = gencode.match(lines[i]), target.match(lines[i + 1])
    if g and t:  # keep the first pair, as the present GPU; the others become pass (their if blocks stay valid)
        if kept:
            lines[i], lines[i + 1] = g.group(1) + "pass", t.group(1) + "pass"
        else:
            lines[i + 1] = f'{t.group(1)}cc_flag.append("arch=compute_{arch},code=sm_{arch}")'
        kept += 1
if not kept:
    sys.exit(f"build_peers: no gencode list found in {path}")
open(path, "w").write("\n".join(lines))
EOF
    local t=$SECONDS log="$target/.build_$(basename "$sd" .tar.gz).log"
    echo "build_peers: $(basename "$sd") for sm_$arch (log: $log)"
    (cd "$dir" && $py -m pip install -v --no-build-isolation --no-deps --no-index --target "$target" .) > "$log" 2>&1 ||
        { tail -40 "$log"; return 1; }
    echo "build_peers: $(basename "$sd") built in $((SECONDS - t)) s"
}
t0=$SECONDS
if [ "${PEER_MAMBA2_ONLY:-0}" = 1 ]; then
    build 'causal_conv1d-*.tar.gz'
    MAMBA_SKIP_CUDA_BUILD=TRUE $py -m pip install -q --no-build-isolation --no-deps --no-index --target "$target" \
        "$(ls "$src"/mamba_ssm-*.tar.gz | tail -1)"
    cat > "$target/selective_scan_cuda.py" <<'EOF'
"""Import stub (bench/build_peers.sh PEER_MAMBA2_ONLY=1): mamba_ssm installed without its Mamba-1 CUDA extension."""
def __getattr__(name):
    raise RuntimeError(f"selective_scan_cuda.{name}: mamba_ssm was installed without its CUDA extension "
                       "(bench/build_peers.sh PEER_MAMBA2_ONLY=1); the Mamba-1 benches need the full build")
EOF
    echo "build_peers: mamba_ssm's Python files with a selective_scan_cuda stub (PEER_MAMBA2_ONLY=1)"
else
    build 'causal_conv1d-*.tar.gz' &
    conv=$!
    build 'mamba_ssm-*.tar.gz'
    wait $conv
fi
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" $py -c "import torch, selective_scan_cuda, causal_conv1d_cuda, mamba_ssm, causal_conv1d; \
print('build_peers: usable: mamba_ssm', mamba_ssm.__version__, '+ causal_conv1d', causal_conv1d.__version__)"
echo "build_peers: done in $((SECONDS - t0)) s into $target"
rm -rf "$work"
