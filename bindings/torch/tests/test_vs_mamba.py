"""selscan_torch against mamba_ssm's own selective_scan_fn (its CUDA kernel), argument convention by
argument convention: the same call goes to both, and each answer is checked against the float64
reference (selscan_torch.reference) and against the other.

Runs only where mamba_ssm's kernel is importable (`mamba_ssm.ops.selective_scan_interface` and
its `selective_scan_cuda` extension) and a GPU is present; skipped everywhere else (CI). Point
PYTHONPATH at a mamba_ssm build to run it.
"""
import itertools

import pytest
import torch

import selscan_torch as st
from _common import lowp_tol
from selscan_torch.reference import selective_scan_ref

if not (torch.cuda.is_available() and st.has_cuda_kernels()):
    pytest.skip("needs a GPU and selscan_torch's CUDA kernels", allow_module_level=True)
mamba = pytest.importorskip("mamba_ssm.ops.selective_scan_interface", reason="mamba_ssm's kernel is not installed")

# out / gradient tolerances against the float64 reference on the same bf16-rounded inputs and
# cotangent (max |err| / max |ref|): float32 as measured (fast exponentials, another summation
# order); a bfloat16 result by _common.lowp_tol with k = its roundings to bfloat16 (both kernels
# compute in float32): 1 -- the result's own -- except mamba's dz, 2 (its backward reads the bf16 out
# its forward saved: mamba_ssm 2.3.2.post1 selective_scan_bwd_kernel.cuh). Each kernel is held to the
# reference, and to the other with the sum of both bounds.
TOL32, GTOL32 = 2e-4, 1e-3


def bound(t, f32_tol, k=1):
    return lowp_tol(t.dtype, f32_tol, k)


def rel_err(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    assert a.shape == b.shape, (a.shape, b.shape)
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def inputs(bc, dtype, D, z, bias, softplus, batch=2, dim=24, L=77, N=16, G=3, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dt=dtype, positive=False):
        t = torch.randn(*shape, generator=g) * scale
        return (t.abs() if positive else t).to(dt).cuda()

    # without softplus, delta (+ delta_bias) is the step itself: positive, as a model passes it (a
    # negative step makes the state grow as exp(|A| sum |delta|): mamba's f32 kernel overflows to
    # NaN gradients there where the float64 reference and selscan stay finite, measured on an H200)
    x = dict(u=r(batch, dim, L), delta=r(batch, dim, L, scale=0.5, positive=not softplus),
             A=(-(torch.rand(dim, N, generator=g) + 0.3)).cuda(),
             D=r(dim, dt=torch.float32) if D else None, z=r(batch, dim, L) if z else None,
             delta_bias=r(dim, scale=0.3, dt=torch.float32, positive=not softplus) if bias else None)
    if bc == "fixed":  # (dim, N), float32 (mamba: the weight type)
        x["B"], x["C"] = r(dim, N, dt=torch.float32), r(dim, N, dt=torch.float32)
    elif bc == "variable":  # (batch, N, L)
        x["B"], x["C"] = r(batch, N, L), r(batch, N, L)
    else:  # (batch, G, N, L)
        x["B"], x["C"] = r(batch, G, N, L), r(batch, G, N, L)
    return x


def run(fn, x, softplus, last, gy):
    """fn's out, last_state and the gradients of sum(out * gy) (mamba passes no gradient through
    last_state, so the loss holds out only)."""
    leaves = {k: (v.detach().clone().requires_grad_(True) if v is not None else None) for k, v in x.items()}
    res = fn(leaves["u"], leaves["delta"], leaves["A"], leaves["B"], leaves["C"], leaves["D"], leaves["z"],
             leaves["delta_bias"], softplus, last)
    y, hl = res if last else (res, None)
    (y.float() * gy).sum().backward()
    return y, hl, {k: v.grad for k, v in leaves.items() if v is not None}


def ref_fn(u, delta, A, B, C, D, z, delta_bias, softplus, last):
    return selective_scan_ref(u, delta, A, B, C, D, z, delta_bias, softplus, last, dtype=torch.float64)


CASES = list(itertools.product(["fixed", "variable", "grouped"], [True, False], [True, False], [True, False],
                               [True, False]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("bc,D,z,bias,softplus", CASES)
def test_same_call_same_answer(bc, D, z, bias, softplus, dtype):
    x = inputs(bc, dtype, D, z, bias, softplus)
    gy = torch.randn(x["u"].shape, generator=torch.Generator().manual_seed(1)).cuda()
    ys, hs, gs = run(st.selective_scan_fn, x, softplus, True, gy)
    ym, hm, gm = run(mamba.selective_scan_fn, x, softplus, True, gy)
    yr, hr, gr = run(ref_fn, x, softplus, True, gy.to(dtype).double())  # the kernels get gy in y's dtype
    assert ys.dtype == ym.dtype == dtype and ys.shape == ym.shape
    assert hs.shape == hm.shape and hs.dtype == hm.dtype == torch.float32
    assert rel_err(hs, hr) < TOL32, ("selscan", "last_state", rel_err(hs, hr))  # float32: no rounding
    # mamba's last_state with a constant (dim, N) B is the state divided by B (its kernel scans
    # delta * u and folds B into C for out; mamba_ssm 2.3.2.post1, seen on an H200): selscan returns
    # the state itself, B included
    hm_state = hm * x["B"][None] if bc == "fixed" else hm
    assert rel_err(hm_state, hr) < TOL32, ("mamba", "last_state", rel_err(hm_state, hr))
    t = bound(ys, TOL32)
    assert rel_err(ys, yr) < t, ("selscan", "out", rel_err(ys, yr))
    assert rel_err(ym, yr) < t, ("mamba", "out", rel_err(ym, yr))
    assert rel_err(ys, ym) < 2 * t, ("selscan vs mamba", "out", rel_err(ys, ym))
    assert set(gs) == set(gm)
    for k in gs:
        assert gs[k].shape == gm[k].shape and gs[k].dtype == gm[k].dtype, k
        ts, tm = bound(gs[k], GTOL32), bound(gm[k], GTOL32, 2 if k == "z" else 1)
        assert rel_err(gs[k], gr[k]) < ts, ("selscan", k, rel_err(gs[k], gr[k]))
        assert rel_err(gm[k], gr[k]) < tm, ("mamba", k, rel_err(gm[k], gr[k]))
        assert rel_err(gs[k], gm[k]) < ts + tm, ("selscan vs mamba", k, rel_err(gs[k], gm[k]))
