"""The package's binary is built on PyTorch's stable ABI as of torch 2.11 (setup.py: TORCH_MIN,
TORCH_STABLE_ONLY): it loads in that torch and every later one. Under an older torch its import says
so instead of failing on an undefined symbol; the wheel's requirement says the same (make wheel)."""
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import selscan_torch


def _import_with_build_info(tmp_path, text):
    pkg = tmp_path / "selscan_torch"
    shutil.copytree(os.path.dirname(selscan_torch.__file__), pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if text is None:
        (pkg / "_build.py").unlink(missing_ok=True)
    else:
        (pkg / "_build.py").write_text(text)
    return subprocess.run([sys.executable, "-c", "import selscan_torch, torch; print(torch.ops.selscan.fwd)"],
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True, text=True, cwd=tmp_path)


def test_import_refuses_an_older_torch(tmp_path):
    r = _import_with_build_info(tmp_path, "TORCH = '99.0.0'\nTORCH_MIN = (99, 0)\n")
    assert r.returncode != 0
    assert ("ImportError: selscan_torch needs torch >= 99.0 (built with torch 99.0.0), and this is torch "
            + torch.__version__) in r.stderr


def test_import_takes_a_later_torch(tmp_path):
    # built with an older torch than this one (2.11, the stable ABI's floor): loads
    r = _import_with_build_info(tmp_path, "TORCH = '2.11.0'\nTORCH_MIN = (2, 11)\n")
    assert r.returncode == 0, r.stderr
    assert "selscan.fwd" in r.stdout


def test_build_info_written_by_the_build():
    from selscan_torch import _build

    assert _build.TORCH_MIN == (2, 11)
    mm = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    assert mm >= _build.TORCH_MIN


def _undefined_symbols(path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) on this machine")
    out = subprocess.run([nm, "-D", "--undefined-only", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF symbols")
def test_extension_uses_the_stable_abi_only():
    """_C's undefined symbols from torch are the stable C shim's (aoti_torch_*, torch_*): no C++ symbol
    of torch, c10 or ATen, whose layout changes between torch versions (the one-wheel promise)."""
    path = next(os.path.join(os.path.dirname(selscan_torch.__file__), f)
                for f in os.listdir(os.path.dirname(selscan_torch.__file__)) if f.startswith("_C.") and f.endswith(".so"))
    syms = _undefined_symbols(path)
    cxx_torch = [s for s in syms if re.match(r"_Z\w*?(3c10|2at|5torch|8pybind11)", s)]
    assert not cxx_torch, cxx_torch[:10]
    assert any(s.startswith("aoti_torch_") for s in syms)  # (the check reads the right table)
