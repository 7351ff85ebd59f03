"""libstdcxx_link.py - the link rule every selscan package's setup.py shares (torch, its ONNX Runtime
library, TensorFlow): an extension runs on the process's shared libstdc++, never on a private copy.

A compiler that links libstdc++ statically (seen on the GPU machines: CXX=/opt/gcc/bin/g++, whose
shared objects have no NEEDED libstdc++.so.6) puts a private libstdc++ into the extension beside the
shared one the framework has loaded: the two copies' iostream and locale state clash, and the first
number an error message formatted (a shape) crashed the process with SIGSEGV (issue 38). Where the
compiler's link does that, the shared libstdc++.so.6 the dynamic loader gives this machine's
processes is linked by path: every libstdc++ symbol then resolves to it, none is copied in.
"""
import os
import subprocess
import sys
import tempfile

_PROBE = "#include <sstream>\nstd::string f(long n) { std::ostringstream s; s << n; return s.str(); }\n"


def _links_shared(cxx):
    """Whether cxx's shared objects NEED the shared libstdc++ (None: cxx could not build the probe)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, so = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "probe.so")
        with open(src, "w") as f:
            f.write(_PROBE)
        try:
            subprocess.run([cxx, "-shared", "-fPIC", src, "-o", so], check=True, capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return None
        with open(so, "rb") as f:
            return b"libstdc++.so" in f.read()  # the name is in the dynamic string table only when NEEDED


def shared_libstdcxx_args(cxx, who):
    """Extra link arguments for cxx's link of an extension (who: the package, for the message)."""
    if not sys.platform.startswith("linux") or _links_shared(cxx) is not False:
        return []
    import ctypes

    ctypes.CDLL("libstdc++.so.6")  # the one every process here loads (the framework's included)
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libstdc++.so"):
                print(f"{who} setup: {cxx} links libstdc++ statically; linking the shared {path}", flush=True)
                return [path]
    raise RuntimeError(f"{who} setup: {cxx} links libstdc++ statically and no shared libstdc++.so.6 loads here: "
                       "a private copy in the extension would crash the process (set CXX to a compiler with a "
                       "shared libstdc++)")
