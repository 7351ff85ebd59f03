"""Builds selscan_tf: the selscan TensorFlow op (_selscan_tf_ops.so) plus its Python package.

    pip install --no-build-isolation ./bindings/tf        # from a clone of selscan

The op is compiled against the TensorFlow installed in the interpreter that runs pip
(tf.sysconfig's compile and link flags, hence its C++ ABI): a wheel built here only fits that
TensorFlow version. --no-build-isolation lets the build see it; without it, pip's isolated build
environment hides it and this script asks the same interpreter outside the isolation instead.

GPU kernels: built when nvcc is found ($CUDA_HOME/bin/nvcc, else nvcc on PATH) and the
TensorFlow is a CUDA build (tf.test.is_built_with_cuda()), for sm_75 (T4), sm_80 (A100),
sm_86 / sm_89 (RTX 30xx / 40xx, L4), sm_90 (H100 / H200), plus compute_90 PTX for newer GPUs.
Environment overrides:
    SELSCAN_TF_CUDA=0|1      never / always build the GPU kernels (1: even against a CPU TensorFlow,
                             whose headers suffice; the op then simply never runs on a GPU)
    SELSCAN_TF_CUDA_ARCHS    e.g. "80;90" instead of the list above (PTX of the highest one added)
    CXX, NVCC, CUDA_HOME     the compilers / toolkit
"""

import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))  # selscan.h, selscan_cuda.cuh
COMMON = os.path.normpath(os.path.join(HERE, os.pardir, "common"))  # selscan_binding*.h, the shared layer and CUDA shim
DEFAULT_ARCHS = ("75", "80", "86", "89", "90")

_TF_QUERY = (
    "import json, tensorflow as tf; print(json.dumps({'cflags': tf.sysconfig.get_compile_flags(), "
    "'lflags': tf.sysconfig.get_link_flags(), 'cuda': bool(tf.test.is_built_with_cuda()), "
    "'version': tf.__version__}))"
)


def _say(msg):
    print("selscan_tf setup: " + msg, flush=True)


def tf_info():
    """TensorFlow's build flags, from this interpreter; under pip's build isolation (TensorFlow
    hidden), from the same interpreter run outside it."""
    import json

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    attempts = [env]
    clean = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    attempts.append(clean)
    err = ""
    for e in attempts:
        r = subprocess.run([sys.executable, "-c", _TF_QUERY], env=e, capture_output=True, text=True)
        if r.returncode == 0:
            return json.loads(r.stdout.strip().splitlines()[-1])
        err = r.stderr.strip().splitlines()[-1:] or [""]
        err = err[0]
    raise SystemExit(
        "selscan_tf setup: TensorFlow is not importable by %s (%s). Install TensorFlow first "
        "(pip install tensorflow), then pip install --no-build-isolation this folder." % (sys.executable, err)
    )


def find_nvcc():
    cands = []
    if os.environ.get("NVCC"):
        cands.append(os.environ["NVCC"])
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    cands += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    for c in cands:
        p = shutil.which(c) if c else None
        if p:
            return os.path.realpath(p)
    return None


def run(cmd):
    t0 = time.time()
    _say(" ".join(shlex.quote(c) for c in cmd))
    subprocess.run(cmd, check=True)
    return time.time() - t0


class BuildOp(build_ext):
    """Compiles the op with TensorFlow's flags (no Python extension module: a TF op library)."""

    def get_ext_filename(self, ext_name):  # selscan_tf/_selscan_tf_ops.so, no ABI tag
        return os.path.join(*ext_name.split(".")) + ".so"

    def build_extension(self, ext):
        t_start = time.time()
        for f in ("selscan.h", "selscan_cuda.cuh"):
            if f == "selscan.h" and not os.path.isfile(os.path.join(ROOT, f)):
                raise SystemExit("selscan_tf setup: %s not found in %s (build from a selscan checkout)" % (f, ROOT))
        info = tf_info()
        cxx = os.environ.get("CXX", "c++")
        cflags = [("-isystem" + f[2:]) if f.startswith("-I") else f for f in info["cflags"]]
        inc = ["-I" + ROOT, "-I" + HERE, "-I" + COMMON]
        base = ["-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wno-unused-function"] + cflags + inc

        want = os.environ.get("SELSCAN_TF_CUDA", "auto").strip().lower()
        nvcc = find_nvcc() if want != "0" else None
        has_cuh = os.path.isfile(os.path.join(ROOT, "selscan_cuda.cuh"))
        if want == "1":
            if not nvcc or not has_cuh:
                raise SystemExit("selscan_tf setup: SELSCAN_TF_CUDA=1 but no nvcc or no selscan_cuda.cuh")
            gpu = True
        else:
            gpu = bool(nvcc and has_cuh and info["cuda"] and want != "0")
        why = (
            "GPU kernels on" if gpu else
            "CPU kernels only (%s)" % ("SELSCAN_TF_CUDA=0" if want == "0" else "no nvcc" if not nvcc else
                                        "no selscan_cuda.cuh" if not has_cuh else "TensorFlow %s is not a CUDA build"
                                        % info["version"])
        )
        _say("TensorFlow %s, %s" % (info["version"], why))

        tmp = os.path.abspath(self.build_temp)
        os.makedirs(tmp, exist_ok=True)
        objs, jobs = [], []
        o = os.path.join(tmp, "selscan_tf.o")
        jobs.append([cxx] + base + ["-c", os.path.join(HERE, "selscan_tf.cc"), "-o", o])
        objs.append(o)
        link_extra = []
        if gpu:
            cuda_home = os.environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(nvcc))
            o = os.path.join(tmp, "selscan_tf_gpu.o")
            jobs.append([cxx] + base + ["-DGOOGLE_CUDA=1", "-isystem", os.path.join(cuda_home, "include"), "-c",
                                        os.path.join(HERE, "selscan_tf_gpu.cc"), "-o", o])
            objs.append(o)
            archs = [a.strip() for a in os.environ.get("SELSCAN_TF_CUDA_ARCHS", ";".join(DEFAULT_ARCHS)).split(";")
                     if a.strip()]
            gencode = []
            for a in archs:
                gencode += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
            gencode += ["-gencode", "arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1])]
            o = os.path.join(tmp, "selscan_tf_kernels.o")
            jobs.append([nvcc, "-O3", "-std=c++17", "--threads", "0"] + gencode +
                        ["-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden", "-I" + ROOT, "-I" + COMMON, "-c",
                         os.path.join(HERE, "selscan_tf_kernels.cu"), "-o", o])
            objs.append(o)
            lib = os.path.join(cuda_home, "lib64")
            if not os.path.isdir(lib):
                lib = os.path.join(cuda_home, "lib")
            link_extra = ["-L" + lib, "-lcudart_static", "-ldl", "-lrt", "-lpthread"]
        # the compiles in parallel (nvcc's is the long one)
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
            list(pool.map(run, jobs))
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        sys.path.insert(0, COMMON)
        from libstdcxx_link import shared_libstdcxx_args  # bindings/common: the link rule every package shares

        run([cxx, "-shared"] + objs + ["-o", out] + info["lflags"] + link_extra + shared_libstdcxx_args(cxx, "selscan_tf"))
        # the TensorFlow this op was compiled against, next to it: the package's import compares it with the
        # running one (the op uses TensorFlow's C++ ABI, which changes between minor versions). Not a pin
        # in install_requires: tensorflow, tensorflow-cpu and tf-nightly are different distributions.
        major, minor = (int(v) for v in info["version"].split(".")[:2])
        with open(os.path.join(os.path.dirname(out), "_build.py"), "w") as f:
            f.write("# written by setup.py: the TensorFlow this build of selscan_tf was compiled against\n")
            f.write("TENSORFLOW = %r\nTENSORFLOW_MAJOR_MINOR = (%d, %d)\n" % (info["version"], major, minor))
        _say("built %s (%s) in %.1f s" % (out, why, time.time() - t_start))


setup(
    name="selscan_tf",
    version="0.2.0",
    description="Mamba's selective scan (S6) as a TensorFlow op (selscan), with a MambaVision mixer Keras layer",
    packages=["selscan_tf"],
    package_dir={"": "python"},
    ext_modules=[Extension("selscan_tf._selscan_tf_ops", sources=[])],
    cmdclass={"build_ext": BuildOp},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
