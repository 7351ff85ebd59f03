"""The package's binary fits the torch it was built against (major.minor: it uses torch's C++ ABI).
Built against another one, its import says so instead of failing on an undefined symbol; the wheel's
requirement pins the same range (make wheel)."""
import os
import shutil
import subprocess
import sys

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


def test_import_refuses_another_torch_minor(tmp_path):
    r = _import_with_build_info(tmp_path, "TORCH = '1.0.0'\nTORCH_MAJOR_MINOR = (1, 0)\n")
    assert r.returncode != 0
    assert "ImportError: selscan_torch was built against torch 1.0.0, and this is torch " + torch.__version__ in r.stderr


def test_import_takes_its_own_torch(tmp_path):
    mm = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    r = _import_with_build_info(tmp_path, f"TORCH = {torch.__version__!r}\nTORCH_MAJOR_MINOR = {mm!r}\n")
    assert r.returncode == 0, r.stderr
    assert "selscan.fwd" in r.stdout


def test_build_info_written_by_the_build():
    from selscan_torch import _build

    mm = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    assert _build.TORCH_MAJOR_MINOR == mm
