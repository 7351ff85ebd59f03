"""Every op's empty calls on the CPU (issue 39): batch 0, dim 0, L 0 and, for the decode steps, a
cache of no rows (n_cache 0, every batch row padding). One rule owns them (bindings/common
>>bind-empty, selscan.h >>n-cache): the op answers without calling selscan (y 0 / empty, the
state passing through, gradients 0 except the state's), never crashes, and writes no input."""
import pytest
import torch

import selscan_torch as st


def _snap(*ts):
    return [t.clone() for t in ts if t is not None]


def _same(ts, snap):
    return all(torch.equal(a, b) for a, b in zip([t for t in ts if t is not None], snap))


SIZES = {"batch0": (0, 4, 5), "dim0": (2, 0, 5), "L0": (2, 4, 0)}


@pytest.mark.parametrize("case", sorted(SIZES))
@pytest.mark.parametrize("N", [3, 0])
def test_scan(case, N):
    batch, dim, L = SIZES[case]
    g = torch.Generator().manual_seed(1)
    u, delta = torch.randn(batch, dim, L, generator=g), torch.randn(batch, dim, L, generator=g)
    A = -torch.rand(dim, N, generator=g) - 0.5
    B, C = torch.randn(batch, 1, N, L, generator=g), torch.randn(batch, 1, N, L, generator=g)
    D, z, bias = torch.randn(dim, generator=g), torch.randn(batch, dim, L, generator=g), torch.randn(dim, generator=g)
    h0 = torch.randn(batch, dim, N, generator=g)
    ins = (u, delta, A, B, C, D, z, bias, h0)
    for t in ins:
        t.requires_grad_(True)
    snap = _snap(*ins)
    y, last = st.selective_scan_fn(u, delta, A, B, C, D, z, bias, True, True, h0=h0)
    assert y.shape == (batch, dim, L) and torch.equal(last, h0)
    (last * 3.0).sum().backward()  # the state passes through: dh0 = dh_last, every other gradient 0
    assert torch.equal(h0.grad, torch.full_like(h0, 3.0))
    assert all(t.grad is None or not t.grad.any() for t in ins[:-1])
    assert _same(ins, snap)


STEP_SIZES = {"batch0": (0, 4, 2), "dim0": (2, 0, 2), "ncache0": (2, 4, 0)}


@pytest.mark.parametrize("case", sorted(STEP_SIZES))
def test_step(case):
    batch, dim, n_cache = STEP_SIZES[case]
    g = torch.Generator().manual_seed(2)
    state = torch.randn(n_cache, dim, 3, generator=g)
    x, dt = torch.randn(batch, dim, generator=g), torch.randn(batch, dim, generator=g)
    A, B, C = -torch.rand(dim, 3, generator=g), torch.randn(batch, 3, generator=g), torch.randn(batch, 3, generator=g)
    idx = torch.full((batch,), -1, dtype=torch.int32)
    snap = _snap(state, x, dt, A, B, C, idx)
    y = st.selective_state_update(state, x, dt, A, B, C, dt_softplus=True, state_batch_indices=idx)
    assert y.shape == (batch, dim) and not y.any()
    assert _same((state, x, dt, A, B, C, idx), snap)
    if case == "ncache0":  # no state_index: n_cache must be batch
        with pytest.raises(ValueError, match="state"):
            st.selective_state_update(state, x, dt, A, B, C)
        assert _same((state,), snap[:1])


@pytest.mark.parametrize("case", sorted(SIZES))
def test_conv(case):
    batch, dim, L = SIZES[case]
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(batch, dim, L, generator=g), torch.randn(dim, 3, generator=g), torch.randn(dim, generator=g)
    init = torch.randn(batch, dim, 2, generator=g)
    ins = (x, w, b, init)
    for t in ins:
        t.requires_grad_(True)
    snap = _snap(*ins)
    y, fin = st.causal_conv1d_fn(x, w, b, initial_states=init, return_final_states=True, activation="silu")
    assert y.shape == (batch, dim, L) and torch.equal(fin, init)
    (fin * 2.0).sum().backward()  # the state passes through: dinit = dfinal, every other gradient 0
    assert torch.equal(init.grad, torch.full_like(init, 2.0))
    assert all(t.grad is None or not t.grad.any() for t in ins[:-1])
    assert _same(ins, snap)


UPDATE_SIZES = {"batch0": (0, 4, 1, 2), "dim0": (2, 0, 1, 2), "L0": (2, 4, 0, 2), "ncache0": (2, 4, 1, 0)}


@pytest.mark.parametrize("circular", [False, True])
@pytest.mark.parametrize("case", sorted(UPDATE_SIZES))
def test_conv_update(case, circular):
    batch, dim, L, n_cache = UPDATE_SIZES[case]
    g = torch.Generator().manual_seed(4)
    state = torch.randn(n_cache, dim, 3, generator=g)
    x, w, b = torch.randn(batch, dim, L, generator=g), torch.randn(dim, 4, generator=g), torch.randn(dim, generator=g)
    idx = torch.full((batch,), -1, dtype=torch.int32)
    snap = _snap(state, x, w, b, idx)
    kw = dict(cache_seqlens=torch.zeros(batch, dtype=torch.int32)) if circular else {}
    y = st.causal_conv1d_update(x, state, w, b, activation="silu", conv_state_indices=idx, **kw)
    assert y.shape == (batch, dim, L) and not y.any()
    assert _same((state, x, w, b, idx), snap)
