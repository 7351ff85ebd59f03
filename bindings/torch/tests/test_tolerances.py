"""_common.lowp_tol, the one rule for float16 / bfloat16 tolerances, checked against itself: u is
the dtype's unit roundoff, one rounding stays within it, and the bounds are not vacuous -- a real
op result passes, the same result with an injected error of 4x the bound fails (where the ad-hoc
tolerances the rule replaced let it through)."""
import pytest
import torch

import selscan_torch as st
from _common import GTOL, TOL, TOL32, U, lowp_tol, make_inputs, rel_err
from selscan_torch.reference import selective_scan_ref

HALVES = [torch.float16, torch.bfloat16]
# the tolerances lowp_tol replaced (tests/_common.py before issue 41 item 5): y and gradients
OLD_TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}
OLD_GTOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}


@pytest.mark.parametrize("dtype", [torch.float32] + HALVES)
def test_u_is_the_unit_roundoff(dtype):
    """u = eps / 2, and rounding a float64 tensor to dtype once moves rel_err by at most u (the
    unit that k counts); the float32 tolerance is returned unchanged for float32."""
    assert U[dtype] == torch.finfo(dtype).eps / 2
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 3
    e = rel_err(x.to(dtype), x)
    assert e <= U[dtype] and e > U[dtype] / 4  # attained to within a small factor: not vacuous
    assert lowp_tol(torch.float32, 1e-5, 7) == 1e-5 and lowp_tol(torch.float64, 1e-5, 7) == 1e-5
    if dtype != torch.float32:
        assert lowp_tol(dtype, 1e-5, 2) == 1e-5 + 2 * U[dtype]
        assert lowp_tol(dtype, 1e-5, 2, own=10 * U[dtype]) == 1e-5 + 20 * U[dtype]
        assert lowp_tol(dtype, 1e-5, 2, own=U[dtype] / 100) == 1e-5 + 2 * U[dtype]  # own never below u


def _inject(t, ref, size, seed):
    """t (rounded back to its dtype) with an error of `size` times max |ref| added: one element
    moved by that much (what the max-norm sees), every other by up to it at random signs."""
    g = torch.Generator().manual_seed(seed)
    d = (torch.rand(t.shape, generator=g, dtype=torch.float64) * 2 - 1) * size * ref.abs().max()
    d.view(-1)[t.numel() // 2] = size * ref.abs().max()
    return (t.double() + d).to(t.dtype)


@pytest.mark.parametrize("dtype", HALVES)
def test_bounds_reject_an_injected_error(dtype):
    """The scan in dtype: y and each gradient pass their bound (TOL / GTOL by dtype, k = 1); the same
    results with an error of 4x that bound added fail it, where the old tolerances accepted them."""
    x = make_inputs(dtype=dtype, h0=True, L=70)
    leaves = {k: (v.clone().requires_grad_(True) if v is not None else None) for k, v in x.items()}
    y = st.selective_scan_fn(leaves["u"], leaves["delta"], leaves["A"], leaves["B"], leaves["C"], leaves["D"],
                             leaves["z"], leaves["delta_bias"], True, False, h0=leaves["h0"])
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    y.backward(gy)
    r = {k: (v.detach().double().requires_grad_(True) if v is not None else None) for k, v in x.items()}
    yr = selective_scan_ref(r["u"], r["delta"], r["A"], r["B"], r["C"], r["D"], r["z"], r["delta_bias"], True,
                            h0=r["h0"])
    yr.backward(gy.double())
    results = [("y", y, yr, TOL[dtype], OLD_TOL[dtype])]
    results += [(k, leaves[k].grad, r[k].grad, GTOL[leaves[k].dtype], OLD_GTOL[dtype]) for k in x if x[k] is not None]
    old_accepts = 0
    for i, (name, got, ref, tol, old) in enumerate(results):
        assert rel_err(got, ref) < tol, (name, rel_err(got, ref), tol)
        bad = _inject(got, ref, 4 * tol, seed=i)
        e = rel_err(bad, ref)
        assert not e < tol, (name, "an error of 4x the bound passes", e, tol)
        old_accepts += e < old
    assert old_accepts == len(results), old_accepts  # the ad-hoc tolerances let every one of these through


def test_f32_tolerance_is_kept():
    """lowp_tol adds to the float32 tolerance and never replaces it: TOL / GTOL of float32 are the
    measured float32 values."""
    assert TOL[torch.float32] == TOL32 == 2e-5 and GTOL[torch.float32] == 1e-4
