"""The framework-op fuzz harness (fuzz_ops.py) as part of the torch test run: a fixed seed and case
count on the CPU (30000 cases, about 50 s on 2 busy cores: the Mamba-1 categories keep the 20000 or so
cases they had before the Mamba-2 (SSD) ones came, which take the rest), its crash guard, and the CUDA
run where a GPU and the CUDA kernels are present (9000 cases: likewise 6000 or so for Mamba-1's).
SELSCAN_FUZZ_CASES / SELSCAN_FUZZ_CUDA_CASES change the case counts."""
import os
import re
import subprocess
import sys

import pytest
import torch

import selscan_torch as st

FUZZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_ops.py")
HAS_CUDA = torch.cuda.is_available() and st.has_cuda_kernels()


def run_fuzz(*args, env=None, timeout=1200):
    r = subprocess.run([sys.executable, FUZZ, *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    print(r.stdout[-6000:], r.stderr[-3000:])
    return r


def test_fuzz_ops_cpu():
    n = int(os.environ.get("SELSCAN_FUZZ_CASES", "30000"))
    r = run_fuzz("--cases", str(n), "--seed", "27", "--device", "cpu", "--workers", "2")
    assert re.search(rf"^total: {n} cases, {n} passed, 0 failed$", r.stdout, re.M), r.stdout[-3000:]
    assert r.returncode == 0


def test_fuzz_ops_crash_guard():
    """A worker killed by a signal: its case is a reported failure, the run goes on."""
    r = run_fuzz("--cases", "12", "--seed", "27", "--workers", "2", env={"FUZZ_OPS_SELFTEST_CRASH": "4"})
    assert r.returncode == 1
    assert re.search(r"^total: 12 cases, 11 passed, 1 failed$", r.stdout, re.M), r.stdout
    assert re.search(r"FAIL case 4 \[.*\]: CRASH worker died", r.stdout), r.stdout


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and the CUDA kernels")
def test_fuzz_ops_cuda():
    n = int(os.environ.get("SELSCAN_FUZZ_CUDA_CASES", "9000"))
    r = run_fuzz("--cases", str(n), "--seed", "27", "--device", "cuda", "--workers", "2")
    assert re.search(rf"^total: {n} cases, {n} passed, 0 failed$", r.stdout, re.M), r.stdout[-3000:]
    assert r.returncode == 0
