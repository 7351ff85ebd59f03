"""Builds selscan_torch: selscan's selective scan as PyTorch custom ops.

    pip install --no-build-isolation ./bindings/torch       (from the repository root)

--no-build-isolation builds against the torch already installed (pip's isolated build would
download another torch just to compile against it). The extension has CUDA kernels when nvcc and
a CUDA build of torch are present, CPU kernels only otherwise. Environment:
    SELSCAN_TORCH_CPU_ONLY=1        build the CPU kernels only, even where nvcc exists
    TORCH_CUDA_ARCH_LIST="9.0"      the CUDA architectures (default: the visible GPU's, else 9.0)
    SELSCAN_TORCH_CHANNELS_LAST=1   also compile selscan's fast CUDA kernels for any L stride
                                    (channels-last (batch, L, dim) tensors; ~1.5x the nvcc time)
    SELSCAN_TORCH_NO_ORT=1          skip the ONNX Runtime custom-op library (selscan_torch/_selscan_ort*.so,
                                    selscan_torch.onnx.ort_library(): selscan.h behind ONNX Runtime's C API, built
                                    with the C++ compiler alone, no ONNX Runtime needed at build time)
    MAX_JOBS                        parallel compile jobs (torch.utils.cpp_extension, ninja)
"""
import glob
import os
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
# selscan.h / selscan_cuda.cuh: the repository root (two levels up: bindings/torch), or a copy next to setup.py.
ROOT = os.path.dirname(os.path.dirname(HERE))
INCLUDE = [os.path.join(HERE, "csrc")]
for cand in (HERE, ROOT):
    if os.path.exists(os.path.join(cand, "selscan.h")):
        INCLUDE.append(cand)
        break
else:
    raise RuntimeError("selscan.h not found next to setup.py or in the repository root (two levels up)")
# bindings/common/selscan_binding.h, the layer the bindings share: a sibling folder, or a copy next to setup.py.
COMMON = next((d for d in (os.path.join(HERE, "common"), os.path.join(os.path.dirname(HERE), "common"))
               if os.path.exists(os.path.join(d, "selscan_binding.h"))), None)
if COMMON is None:
    raise RuntimeError("selscan_binding.h not found in bindings/common or in common/ next to setup.py")
INCLUDE.append(COMMON)
sys.path.insert(0, COMMON)
from libstdcxx_link import shared_libstdcxx_args  # noqa: E402  (bindings/common: the link rule every package shares)

# cpp_extension compiles and links with $CXX (one path), setuptools' ORT library with the same
# --strip-debug: no DWARF in the shipped objects (setuptools compiles with Python's -g; the debug
# sections were most of the CPU part of _C, and a wheel carried them); the symbol table stays.
LINK = shared_libstdcxx_args(os.environ.get("CXX", "c++"), "selscan_torch") + (
    ["-Wl,--strip-debug"] if sys.platform.startswith("linux") else [])  # (GNU ld / lld; not Apple's or MSVC's)
# The ONNX Runtime custom-op library's source: bindings/onnxruntime (a sibling), or a copy next to setup.py.
ORT_DIR = next((d for d in (os.path.join(HERE, "onnxruntime"), os.path.join(os.path.dirname(HERE), "onnxruntime"))
                if os.path.exists(os.path.join(d, "selscan_ort.cc"))), None)


# The oldest torch whose stable ABI (torch/csrc/stable) has everything the ops use: the extension is
# compiled against it (TORCH_TARGET_VERSION, TORCH_STABLE_ONLY: no other torch header compiles), so
# one binary loads in that torch and every later one, whichever torch builds it.
TORCH_MIN = (2, 11)
STABLE_MACROS = [("TORCH_STABLE_ONLY", None),
                 ("TORCH_TARGET_VERSION", "0x%02x%02x000000000000ULL" % TORCH_MIN)]


def torch_pin():
    """The torch versions the build runs in, as the wheel's requirement and as selscan_torch/_build.py
    (the package's import compares it with the running torch): TORCH_MIN and later (the stable ABI),
    from the torch it is built with."""
    import torch

    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < TORCH_MIN:
        raise RuntimeError(f"selscan_torch needs torch >= {TORCH_MIN[0]}.{TORCH_MIN[1]} (its stable ABI) to build; "
                           f"this is torch {torch.__version__}")
    with open(os.path.join(HERE, "selscan_torch", "_build.py"), "w") as f:
        f.write("# written by setup.py: the torch this build of selscan_torch was compiled with, and the oldest it runs in\n")
        f.write(f"TORCH = {torch.__version__!r}\nTORCH_MIN = {TORCH_MIN!r}\n")
    return [f"torch>={TORCH_MIN[0]}.{TORCH_MIN[1]}"]


def abi3_python():
    """(major, minor) of the Python torch's BuildExtension limits the C API to: the wheel's abi3 tag
    and the package's python_requires."""
    from torch.utils import cpp_extension

    v = int(getattr(cpp_extension, "min_supported_cpython", "0x030A0000"), 16)
    return v >> 24, (v >> 16) & 0xFF


def want_cuda():
    import torch
    from torch.utils import cpp_extension

    if os.environ.get("SELSCAN_TORCH_CPU_ONLY", "0") not in ("", "0"):
        return False
    if torch.version.cuda is None or cpp_extension.CUDA_HOME is None:
        return False
    nvcc = os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
    if not os.path.exists(nvcc):
        return False
    if not any(os.path.exists(os.path.join(d, "selscan_cuda.cuh")) for d in INCLUDE):
        return False
    return True


def default_arch():
    # torch.utils.cpp_extension reads TORCH_CUDA_ARCH_LIST; without it, it would build for the
    # visible GPU or for every architecture torch knows (slow): pick the visible GPU's, else 9.0.
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return
    arch = "9.0"
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            arch = f"{major}.{minor}"
    except Exception:  # no driver: the default
        pass
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch


def ort_extension():
    """libselscan_ort as selscan_torch/_selscan_ort*.so: a plain shared library (no Python, no torch,
    no ONNX Runtime linked: ONNX Runtime hands it its C API table when it loads it)."""
    if os.environ.get("SELSCAN_TORCH_NO_ORT", "0") not in ("", "0") or ORT_DIR is None:
        return []
    return [
        Extension(
            "selscan_torch._selscan_ort",
            [os.path.relpath(os.path.join(ORT_DIR, "selscan_ort.cc"), HERE)],
            include_dirs=INCLUDE[1:] + [ORT_DIR],
            extra_compile_args=["-O3", "-std=c++17", "-fvisibility=hidden"],
            extra_link_args=LINK,  # ONNX Runtime's process has its libstdc++ too
            language="c++",
            py_limited_api=True,  # (no Python in it at all: the wheel's abi3 tag holds for it)
        )
    ]


def extensions():
    from torch.utils import cpp_extension

    cxx = ["-O3", "-fvisibility=hidden"]
    # _C is built for Python's stable ABI (abi3; torch's BuildExtension defines Py_LIMITED_API as the
    # oldest Python that torch supports): its module uses the limited C API only and no torch Python
    # binding (torch_python), so one build serves every Python of a torch version
    # the registration and _C module (selscan's implementation); the ops by family, each running the checks
    sources = [os.path.join("csrc", f) for f in ("selscan_torch.cpp", "scan.cpp", "step.cpp", "conv.cpp", "ssd.cpp", "norm.cpp")]
    if want_cuda():
        default_arch()
        nvcc = ["-O3", "-Xcompiler", "-fvisibility=hidden"]
        if os.environ.get("SELSCAN_TORCH_CHANNELS_LAST", "0") not in ("", "0"):
            nvcc.append("-DSELSCAN_CUDA_CHANNELS_LAST=1")
        sources.append(os.path.join("csrc", "selscan_torch_cuda.cu"))
        return [
            cpp_extension.CUDAExtension(
                "selscan_torch._C",
                sources,
                include_dirs=INCLUDE,
                define_macros=[("WITH_CUDA", None), ("USE_CUDA", None)] + STABLE_MACROS,  # (USE_CUDA: the shim's CUDA stream)
                extra_compile_args={"cxx": cxx, "nvcc": nvcc},
                extra_link_args=LINK,
                py_limited_api=True,
            )
        ]
    return [
        cpp_extension.CppExtension(
            "selscan_torch._C", sources, include_dirs=INCLUDE, define_macros=STABLE_MACROS,
            extra_compile_args={"cxx": cxx}, extra_link_args=LINK, py_limited_api=True,
        )
    ]


def build_ext_cls():
    from torch.utils import cpp_extension

    return cpp_extension.BuildExtension.with_options(use_ninja=True)


# Builds before abi3 left _C.cpython-*.so (and the ORT library's) in the package folder (in-place builds),
# which Python would import before the new _C.abi3.so: removed.
for _stale in glob.glob(os.path.join(HERE, "selscan_torch", "_C.cpython-*.so")) + glob.glob(
        os.path.join(HERE, "selscan_torch", "_selscan_ort.cpython-*.so")):
    print(f"selscan_torch setup: removing {_stale} (an earlier, per-Python build; this one is abi3)")
    os.remove(_stale)

setup(
    name="selscan-torch",
    version="0.2.0",
    description="selscan's selective scan (Mamba S6) as PyTorch custom ops: CPU and CUDA, "
    "drop-in for mamba_ssm's selective_scan_fn / selective_state_update",
    license="MIT",
    packages=["selscan_torch"],
    ext_modules=extensions() + ort_extension(),
    cmdclass={"build_ext": build_ext_cls()},
    python_requires=">={}.{}".format(*abi3_python()),
    install_requires=torch_pin(),
    options={"bdist_wheel": {"py_limited_api": "cp{}{}".format(*abi3_python())}},  # one wheel for every Python torch takes
    zip_safe=False,
)
