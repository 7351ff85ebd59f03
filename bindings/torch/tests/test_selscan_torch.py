"""Tests of selscan_torch against a float64 PyTorch reference written from the math
(selscan_torch.reference; autograd through it gives the reference gradients).

CPU always; CUDA where a GPU and the extension's CUDA kernels are present (skipped otherwise).
"""
import itertools
import os
import random
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import selscan_torch as st
from _common import DEVICES, GTOL, GTOL32, TOL, TOL32, cuda_only, lowp_tol, make_inputs, rel_err
from selscan_torch.reference import selective_scan_ref, selective_state_update_ref


def run_op(x, softplus, last, grads=True, seed=1, cu=None):
    """The op's outputs and, when grads, the gradients of sum(y * gy) + sum(last * gl)."""
    inp = {k: (v.detach().clone().requires_grad_(grads) if v is not None else None) for k, v in x.items()}
    out = st.selective_scan_fn(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"], inp["z"],
                               inp["delta_bias"], softplus, last, cu, h0=inp["h0"])
    y, hl = out if last else (out, None)
    if not grads:
        return y, hl, None
    g = torch.Generator().manual_seed(seed)
    gy = torch.randn(y.shape, generator=g).to(y.device)
    loss = (y.float() * gy).sum()
    if last:
        gl = torch.randn(hl.shape, generator=g).to(hl.device)
        loss = loss + (hl * gl).sum()
    loss.backward()
    return y, hl, {k: v.grad for k, v in inp.items() if v is not None}


def run_ref(x, softplus, last, grads=True, seed=1, cu=None):
    inp = {k: (v.detach().cpu().double().requires_grad_(grads) if v is not None else None) for k, v in x.items()}
    out = selective_scan_ref(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"], inp["z"],
                             inp["delta_bias"], softplus, last, cu, inp["h0"])
    y, hl = out if last else (out, None)
    if not grads:
        return y, hl, None
    g = torch.Generator().manual_seed(seed)
    # the cotangent the op gets: y.float()'s backward rounds gy to y's dtype (u's)
    gy = torch.randn(y.shape, generator=g).to(x["u"].dtype).double()
    loss = (y * gy).sum()
    if last:
        gl = torch.randn(hl.shape, generator=g).double()
        loss = loss + (hl * gl).sum()
    loss.backward()
    return y, hl, {k: v.grad for k, v in inp.items() if v is not None}


def check(x, softplus, last, dtype=torch.float32, grads=True, cu=None):
    """The op against the float64 reference on the same (dtype-rounded) inputs and cotangent; each
    result by its own dtype's tolerance: the float32 ones (last_state, the gradients of float32
    inputs) carry no rounding to dtype, so they are held to the float32 tolerance."""
    y, hl, gr = run_op(x, softplus, last, grads, cu=cu)
    yr, hlr, grr = run_ref(x, softplus, last, grads, cu=cu)
    assert y.dtype == x["u"].dtype == dtype
    assert rel_err(y, yr) < TOL[dtype], ("y", rel_err(y, yr))
    if last:
        assert hl.dtype == torch.float32
        assert rel_err(hl, hlr) < TOL[torch.float32], ("last_state", rel_err(hl, hlr))
    if grads:
        for k in grr:
            assert gr[k].shape == x[k].shape and gr[k].dtype == x[k].dtype, k
            e = rel_err(gr[k], grr[k])
            assert e < GTOL[gr[k].dtype], (k, e)


OPTS = list(itertools.product([False, True], repeat=5))  # D, z, bias, softplus, h0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bc", ["fixed", "var3", "grouped"])
@pytest.mark.parametrize("opts", OPTS, ids=lambda o: "".join("Dzbsh"[i] if v else "-" for i, v in enumerate(o)))
def test_every_option_fwd_bwd(device, bc, opts):
    D, z, bias, softplus, h0 = opts
    x = make_inputs(bc=bc, D=D, z=z, bias=bias, h0=h0, device=device)
    check(x, softplus, last=h0)  # last-state gradient with h0 on, plain y otherwise


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bc", ["fixed", "var3", "grouped"])
def test_half_dtypes(device, dtype, bc):
    x = make_inputs(bc=bc, dtype=dtype, h0=True, device=device, L=70)
    check(x, True, True, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("L", [1, 2, 63, 64, 65, 129, 1000, pytest.param(4096, marks=pytest.mark.gpu_full)])
def test_lengths(device, L):
    x = make_inputs(batch=1, dim=4, L=L, N=4, bc="var3", h0=True, device=device)
    check(x, True, True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1, 5, 1), (3, 36, 17, 3), (2, 6, 9, 16), (1, 4, 70, 64), (1, 4, 70, 65),
                                   (1, 3, 20, 100)])
def test_odd_shapes(device, shape):
    batch, dim, L, N = shape
    G = 3 if dim % 3 == 0 else 1
    x = make_inputs(batch=batch, dim=dim, L=L, N=N, bc="grouped", G=G, h0=True, device=device)
    check(x, True, True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("h0", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_sequences(device, h0, dtype):
    cu = torch.tensor([0, 5, 5, 40, 70, 71], dtype=torch.int64)
    x = make_inputs(batch=1, L=71, bc="var3", h0=h0, n_seqs=5, device=device, dtype=dtype)
    check(x, True, True, dtype=dtype, cu=cu)
    # a list works too, and a run without last state
    check(x, False, False, dtype=dtype, cu=[0, 5, 5, 40, 70, 71])


@pytest.mark.parametrize("device", DEVICES)
def test_infinities_as_the_float64_reference(device):
    """Packed sequences at dstate 5 (pad states in the CUDA kernels' tiling), every operand positive and |A| small: an
    infinite u in the first sequence makes its y +inf from there and leaves the later sequences finite (the CUDA
    L-chunk carries reset at a sequence start; 0 times an infinite state was NaN); an infinite dy in the second makes
    du, dB, dC, dD +inf where selective_scan_ref's float64 autograd does (a pad state's 0 times it was NaN)."""
    g = torch.Generator().manual_seed(41)
    dim, L, N, inf = 8, 180, 5, float("inf")
    cu = torch.tensor([0, 50, 120, 180])

    def pos(*shape):
        return (0.5 + 0.5 * torch.rand(*shape, generator=g)).to(device)

    def classes(t):  # 0 finite, 1 +inf, 2 -inf, 3 NaN
        t = t.double()
        return torch.where(t.isnan(), 3, torch.where(t.isposinf(), 1, torch.where(t.isneginf(), 2, 0)))

    u, delta, B, C, D = pos(1, dim, L), pos(1, dim, L), pos(1, 1, N, L), pos(1, 1, N, L), pos(dim)
    A = -(1e-4 + 4e-4 * torch.rand(dim, N, generator=g)).to(device)
    ui = u.clone()
    ui[0, 0, 20] = inf
    y = st.selective_scan_fn(ui, delta, A, B, C, D, cu_seqlens=cu)
    y64 = selective_scan_ref(ui, delta, A, B, C, D, cu_seqlens=cu)
    assert y64[0, 0, 20:50].isposinf().all() and y64[0, :, 50:].isfinite().all()
    assert torch.equal(classes(y), classes(y64))
    leaves = [t.clone().requires_grad_() for t in (u, B, C, D)]
    dy = pos(1, dim, L)
    dy[0, 0, 100] = inf
    st.selective_scan_fn(leaves[0], delta, A, leaves[1], leaves[2], leaves[3], cu_seqlens=cu).backward(dy)
    ref = [t.detach().clone().requires_grad_() for t in (u, B, C, D)]
    selective_scan_ref(ref[0], delta, A, ref[1], ref[2], ref[3], cu_seqlens=cu).backward(dy.double())
    assert ref[0].grad[0, 0, 50:101].isposinf().all() and ref[0].grad[0, 0, 101:].isfinite().all()
    for name, got, want in zip(("du", "dB", "dC", "dD"), leaves, ref):
        assert torch.equal(classes(got.grad), classes(want.grad)), name


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_no_copies(device):
    """channels-last (batch, L, dim) tensors, B/C sliced out of one projection, every other step, broadcast D.
    (No copies on the CPU; on CUDA without the channels-last kernels the op copies the L-strided
    operands to run the fast kernels: then bitwise the contiguous call's results.)"""
    batch, dim, L, N, r = 2, 12, 50, 4, 3
    g = torch.Generator().manual_seed(3)
    u = torch.randn(batch, 2 * L, dim, generator=g).to(device)[:, ::2].transpose(1, 2)  # (b, dim, L) strided
    delta = (torch.randn(batch, L, dim, generator=g) * 0.5).to(device).transpose(1, 2)
    z = torch.randn(batch, L, dim, generator=g).to(device).transpose(1, 2)
    dbl = torch.randn(batch, L, r + 2 * N, generator=g).to(device)
    B = dbl[..., r:r + N].transpose(1, 2)  # (b, N, L), strides (L*(r+2N), 1, r+2N)
    C = dbl[..., r + N:].transpose(1, 2)
    A = -(torch.rand(N, dim, generator=g) + 0.3).to(device).t()  # transposed (dim, N)
    D = torch.tensor(0.7, device=device).expand(dim)  # a full broadcast: stride 0
    bias = torch.randn(dim, generator=g).to(device) * 0.2
    x = dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=bias, h0=None)
    assert not u.is_contiguous() and not B.is_contiguous()
    check(x, True, True)
    # the same as the contiguous copies, bitwise on the CPU (selscan reads the strides itself)
    xc = {k: (v.contiguous() if v is not None else None) for k, v in x.items()}
    y1, _, g1 = run_op(x, True, False)
    y2, _, g2 = run_op(xc, True, False)
    assert rel_err(y1, y2) < 1e-6
    for k in g1:
        assert rel_err(g1[k], g2[k]) < 1e-5, k
    if device == "cuda" and not st._C.cuda_channels_last():  # the general kernels would round differently
        assert torch.equal(y1, y2)
        for k in g1:
            assert torch.equal(g1[k], g2[k]), k


@pytest.mark.parametrize("device", DEVICES)
def test_loss_on_last_state_only(device):
    x = make_inputs(h0=True, device=device)
    inp = {k: v.clone().requires_grad_(True) for k, v in x.items() if v is not None}
    _, hl = st.selective_scan_fn(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"], inp["z"],
                                 inp["delta_bias"], True, True, h0=inp["h0"])
    hl.square().sum().backward()
    ref = {k: v.detach().double().requires_grad_(True) for k, v in x.items() if v is not None}
    _, hlr = selective_scan_ref(ref["u"], ref["delta"], ref["A"], ref["B"], ref["C"], ref["D"], ref["z"],
                                ref["delta_bias"], True, True, None, ref["h0"])
    hlr.square().sum().backward()
    for k in ref:
        if ref[k].grad is None:  # D and z do not reach the state
            assert inp[k].grad is None or inp[k].grad.abs().max() == 0, k
        else:
            assert rel_err(inp[k].grad, ref[k].grad) < 1e-4, k


def test_finite_differences_f32():
    """The op's own gradients against central differences of the op (float32, directional)."""
    x = make_inputs(batch=1, dim=4, L=24, N=3, bc="grouped", G=2, h0=True)
    _, _, gr = run_op(x, True, True)
    g = torch.Generator().manual_seed(9)
    for k in gr:
        v = torch.randn(x[k].shape, generator=g)
        eps = 1e-2

        def f(sign):
            xx = dict(x)
            xx[k] = (x[k].double() + sign * eps * v.double()).float()
            y, hl, _ = run_op(xx, True, True, grads=False)
            gg = torch.Generator().manual_seed(1)
            gy = torch.randn(y.shape, generator=gg)
            gl = torch.randn(hl.shape, generator=gg)
            return (y.double() * gy).sum() + (hl.double() * gl).sum()

        fd = (f(1) - f(-1)) / (2 * eps)
        an = (gr[k].double() * v.double()).sum()
        assert abs(fd - an) <= 2e-3 * max(1.0, abs(an)), (k, fd.item(), an.item())


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_bitwise_repeatable(device):
    x = make_inputs(batch=2, dim=64, L=300, N=16, bc="grouped", G=2, h0=True, device=device)
    _, _, g1 = run_op(x, True, True)
    _, _, g2 = run_op(x, True, True)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k


def test_cpu_thread_count_bitwise():
    """1 thread vs 2 threads (different part splits) give the same bits."""
    x = make_inputs(batch=3, dim=130, L=200, N=16, bc="grouped", G=2, h0=True)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        y1, h1, g1 = run_op(x, True, True)
        torch.set_num_threads(2)
        y2, h2, g2 = run_op(x, True, True)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(y1, y2) and torch.equal(h1, h2)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N", [4, 16, 80])
def test_checkpoint_bitwise_and_fake_size(device, N):
    """The backward reading the forward's checkpoint gives the same bits as recomputing; the fake
    kernel predicts the checkpoint's size."""
    x = make_inputs(batch=2, dim=8, L=150, N=N, bc="grouped", h0=True, device=device)
    B4, C4 = x["B"], x["C"]
    args = (x["u"], x["delta"], x["A"], B4, C4, x["D"], x["z"], x["delta_bias"], x["h0"], None, True, True)
    y, hl, ck = torch.ops.selscan.fwd(*args, True)
    y0, hl0, ck0 = torch.ops.selscan.fwd(*args, False)
    assert ck0.numel() == 0
    if device == "cuda" and N <= 16:
        # without a checkpoint few channels run the short-prefill kernel (another summation order)
        assert rel_err(y, y0) < 1e-5 and rel_err(hl, hl0) < 1e-5
    else:
        assert torch.equal(y, y0) and torch.equal(hl, hl0)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fargs = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        _, _, fck = torch.ops.selscan.fwd(*fargs, True)
    assert fck.shape == ck.shape
    if device == "cpu" and N > 64:
        assert ck.numel() == 0
    else:
        assert ck.numel() > 0
    dy = torch.randn_like(y)
    dl = torch.randn_like(hl)
    m = [1] * 9
    ga = torch.ops.selscan.bwd(*args[:10], dy, dl, ck, True, m)
    gb = torch.ops.selscan.bwd(*args[:10], dy, dl, ck0, True, m)
    for a, b in zip(ga, gb):
        if device == "cuda" and N > 16:
            # the general CUDA kernels (N > 16) recompute the checkpoint in another order than the
            # forward wrote it: the same gradients up to rounding, not bitwise
            assert rel_err(a, b) < 1e-5
        else:
            assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    """torch.library.opcheck: schema, fake kernels, autograd registration, AOT dispatch."""
    for bc, last, h0 in [("grouped", True, True), ("var3", True, False), ("fixed", False, False)]:
        x = make_inputs(bc=bc, h0=h0, device=device, L=20)
        args = (x["u"].requires_grad_(), x["delta"], x["A"].requires_grad_(), x["B"], x["C"], x["D"], x["z"],
                x["delta_bias"], x["h0"], None, True, last, True)
        torch.library.opcheck(torch.ops.selscan.fwd, args)
        y, hl, ck = torch.ops.selscan.fwd(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        bargs = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args[:10]) + (
            torch.randn_like(y), torch.randn_like(hl) if last else None, ck, True, [1, 1, 1, 1, 1, 1, 1, 0, 1])
        torch.library.opcheck(torch.ops.selscan.bwd, bargs)
    s = make_step_inputs(device=device)
    torch.library.opcheck(torch.ops.selscan.step, (s["state"], s["x"], s["dt"], s["A"], s["B"].unsqueeze(1),
                                                   s["C"].unsqueeze(1), s["D"], s["z"], s["dt_bias"], None, True))


class MambaBlock(torch.nn.Module):
    """A small Mamba block (the README's example)."""

    def __init__(self, d_model=16, d_state=8, expand=2, dt_rank=4, d_conv=4):
        super().__init__()
        d_inner = expand * d_model
        self.r, self.n = dt_rank, d_state
        self.in_proj = torch.nn.Linear(d_model, 2 * d_inner)
        self.conv = torch.nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = torch.nn.Linear(d_inner, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = torch.nn.Linear(dt_rank, d_inner, bias=False)
        self.ssm = st.SelectiveScan(d_inner, d_state)
        self.out_proj = torch.nn.Linear(d_inner, d_model)

    def forward(self, h):  # (batch, L, d_model)
        L = h.shape[1]
        x, z = self.in_proj(h).chunk(2, dim=-1)
        x = F.silu(self.conv(x.transpose(1, 2))[..., :L])  # (batch, d_inner, L)
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.r, self.n, self.n], dim=-1)
        delta = self.dt_proj(dt).transpose(1, 2)
        y = self.ssm(x, delta, B.transpose(1, 2), C.transpose(1, 2), z=z.transpose(1, 2))
        return self.out_proj(y.transpose(1, 2))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_mamba_block(device):
    torch.manual_seed(0)
    torch._dynamo.reset()
    block = MambaBlock().to(device)
    h = torch.randn(2, 40, 16, device=device)
    y_e = block(h)
    y_e.square().mean().backward()
    grads_e = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    # inductor on the GPU; on the CPU aot_eager (the same AOTAutograd graphs, no C++ codegen: CI time)
    backend = "inductor" if device == "cuda" else "aot_eager"
    cb = torch.compile(block, fullgraph=True, backend=backend)
    y_c = cb(h)
    y_c.square().mean().backward()
    assert rel_err(y_c, y_e) < 1e-5
    for p, ge in zip(block.parameters(), grads_e):
        assert rel_err(p.grad, ge) < 1e-4
    # dynamic shapes: another length compiles / runs without a graph break either
    h2 = torch.randn(2, 70, 16, device=device)
    assert rel_err(cb(h2), block(h2)) < 1e-5


def test_module_trains():
    torch.manual_seed(0)
    block = MambaBlock()
    opt = torch.optim.Adam(block.parameters(), lr=1e-2)
    h = torch.randn(2, 30, 16)
    target = torch.randn(2, 30, 16)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = F.mse_loss(block(h), target)
        loss.backward()
        for name in ("A_log", "D", "dt_bias"):
            assert getattr(block.ssm, name).grad.abs().sum() > 0, name
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# ---- decode step ---------------------------------------------------------------------------------


def make_step_inputs(batch=3, dim=8, N=5, G=1, n_cache=None, device="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    Bshape = (batch, N) if G == 1 else (batch, G, N)
    return dict(state=r(n_cache or batch, dim, N, dt=torch.float32), x=r(batch, dim), dt=r(batch, dim, scale=0.5),
                A=(-(torch.rand(dim, N, generator=g) + 0.3)).to(device), B=r(*Bshape), C=r(*Bshape),
                D=r(dim, dt=torch.float32), z=r(batch, dim), dt_bias=r(dim, scale=0.3, dt=torch.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("G", [1, 2])
def test_step_against_reference(device, dtype, G):
    s = make_step_inputs(device=device, dtype=dtype, G=G, n_cache=6, batch=4)
    idx = torch.tensor([5, -1, 0, 2], device=device)  # int64 as mamba users pass it; -1 padding
    ref_out, ref_state = selective_state_update_ref(s["state"].cpu(), s["x"].cpu(), s["dt"].cpu(), s["A"].cpu(),
                                                    s["B"].cpu(), s["C"].cpu(), s["D"].cpu(), s["z"].cpu(),
                                                    s["dt_bias"].cpu(), True, idx.cpu())
    state = s["state"].clone()
    out = st.selective_state_update(state, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"],
                                    True, state_batch_indices=idx)
    assert out.dtype == dtype and out.shape == s["x"].shape
    assert rel_err(out, ref_out) < TOL[dtype]
    assert rel_err(state, ref_state) < 2e-6
    assert torch.equal(state[[1, 3, 4]], s["state"][[1, 3, 4]])  # untouched rows
    assert (out[1] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_step_matches_forward_token_by_token(device):
    x = make_inputs(batch=2, dim=8, L=20, N=4, bc="grouped", G=2, h0=True, device=device)
    y, hl = st.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"], True,
                                 True, h0=x["h0"])
    state = x["h0"].clone()
    for t in range(20):
        out = st.selective_state_update(state, x["u"][:, :, t], x["delta"][:, :, t], x["A"], x["B"][..., t],
                                        x["C"][..., t], x["D"], x["z"][:, :, t], x["delta_bias"], True)
        assert rel_err(out, y[:, :, t]) < 1e-5, t
    assert rel_err(state, hl) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_step_multihead_shapes(device):
    """Mamba-2 shapes: state (batch, nheads, hdim, N), A (nheads, hdim, N) (here an expanded per-head A)."""
    batch, nh, hd, N, G = 2, 4, 3, 8, 2
    g = torch.Generator().manual_seed(5)
    state = torch.randn(batch, nh, hd, N, generator=g).to(device)
    x = torch.randn(batch, nh, hd, generator=g).to(device)
    dt = torch.randn(batch, nh, hd, generator=g).to(device)
    A = (-(torch.rand(nh, generator=g) + 0.5)).to(device)[:, None, None].expand(nh, hd, N)
    B = torch.randn(batch, G, N, generator=g).to(device)
    C = torch.randn(batch, G, N, generator=g).to(device)
    D = torch.randn(nh, generator=g).to(device)[:, None].expand(nh, hd)
    ref_out, ref_state = selective_state_update_ref(state.view(batch, nh * hd, N).cpu(), x.reshape(batch, -1).cpu(),
                                                    dt.reshape(batch, -1).cpu(), A.reshape(-1, N).cpu(), B.cpu(),
                                                    C.cpu(), D.reshape(-1).cpu(), None, None, True)
    s2 = state.clone()
    out = st.selective_state_update(s2, x, dt, A, B, C, D, dt_softplus=True)
    assert out.shape == x.shape
    assert rel_err(out.reshape(batch, -1), ref_out) < 1e-5
    assert rel_err(s2.view(batch, -1, N), ref_state) < 1e-5


# ---- errors, edge cases ----------------------------------------------------------------------------


def test_errors_name_the_argument():
    x = make_inputs(bc="var3")
    u, delta, A, B, C = x["u"], x["delta"], x["A"], x["B"], x["C"]
    with pytest.raises(ValueError, match="delta"):
        st.selective_scan_fn(u, delta[:, :, :-1], A, B, C)
    with pytest.raises(ValueError, match="argument 'A': wrong shape"):
        st.selective_scan_fn(u, delta, A[:-1], B, C)
    with pytest.raises(ValueError, match="argument 'B': wrong shape"):
        st.selective_scan_fn(u, delta, A, B[:, :, :-1], C)
    with pytest.raises(ValueError, match="argument 'C': wrong shape"):
        st.selective_scan_fn(u, delta, A, torch.randn(2, 2, 5, 37), C)
    with pytest.raises(ValueError, match="argument 'B': does not divide dim"):
        st.selective_scan_fn(u, delta, A, torch.randn(2, 3, 5, 37), torch.randn(2, 3, 5, 37))
    with pytest.raises(ValueError, match="argument 'D': wrong shape"):
        st.selective_scan_fn(u, delta, A, B, C, D=torch.randn(3))
    with pytest.raises(ValueError, match="argument 'h0': wrong shape"):
        st.selective_scan_fn(u, delta, A, B, C, h0=torch.randn(2, 8, 4))
    with pytest.raises(TypeError, match="complex"):
        st.selective_scan_fn(u, delta, torch.complex(A, A), B, C)
    with pytest.raises(TypeError, match="argument 'u': wrong dtype: want float32, float16 or bfloat16"):
        st.selective_scan_fn(u.double(), delta, A, B, C)
    with pytest.raises(ValueError, match="cu_seqlens"):  # packed sequences need batch 1
        st.selective_scan_fn(u, delta, A, B, C, cu_seqlens=[0, 10, 37])
    u1, d1, B1, C1 = u[:1], delta[:1], B[:1], C[:1]
    with pytest.raises(ValueError, match="SELSCAN_ERR_SHAPE"):  # offsets not ending at L: selscan's message
        st.selective_scan_fn(u1, d1, A, B1, C1, cu_seqlens=[0, 10, 30])
    s = make_step_inputs()
    with pytest.raises(TypeError, match="argument 'state': wrong dtype: want float32"):
        st.selective_state_update(s["state"].double(), s["x"], s["dt"], s["A"], s["B"], s["C"])
    with pytest.raises(ValueError, match="state_batch_indices"):
        st.selective_state_update(s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"],
                                  state_batch_indices=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="SELSCAN_ERR"):  # index past the cache: refused on the CPU
        st.selective_state_update(s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"],
                                  state_batch_indices=torch.tensor([0, 1, 7]))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_and_length(device):
    for batch, L in [(0, 10), (2, 0)]:
        x = make_inputs(batch=batch, L=L, h0=True, device=device)
        y, _, gr = run_op(x, True, True)
        assert y.shape == (batch, 8, L)
        assert gr["A"].abs().sum() == 0
        if batch:
            _, hl, _ = run_op(x, True, True, grads=False)
            assert torch.equal(hl, x["h0"])


@pytest.mark.parametrize("device", DEVICES)
def test_nan_in_nan_out(device):
    x = make_inputs(batch=2, device=device)
    x["u"][1, 3, 5] = float("nan")
    y, _, _ = run_op(x, True, False, grads=False)
    assert torch.isnan(y[1, 3, 5:]).all() and not torch.isnan(y[0]).any()


# ---- CUDA only ----------------------------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_cpu(dtype):
    x = make_inputs(batch=2, dim=64, L=300, N=16, bc="grouped", h0=True, dtype=dtype)
    yc, hc, gc = run_op(x, True, True)
    xg = {k: (v.cuda() if v is not None else None) for k, v in x.items()}
    yg, hg, gg = run_op(xg, True, True)
    # k = 2: both sides round their float32 result to dtype; last_state and float32 gradients: no rounding
    assert rel_err(yg, yc) < lowp_tol(dtype, TOL32, 2) and rel_err(hg, hc) < TOL32
    for k in gc:
        assert rel_err(gg[k], gc[k]) < lowp_tol(gc[k].dtype, GTOL32, 2), k


@cuda_only
def test_cuda_no_host_sync_and_side_stream():
    """forward + backward on a side stream with torch's sync debug mode set to error: no host sync."""
    x = make_inputs(batch=2, dim=64, L=200, N=16, bc="grouped", h0=True, device="cuda")
    gy = torch.randn(2, 64, 200, device="cuda")

    def fwd_bwd():
        leaves = {k: v.clone().requires_grad_(True) for k, v in x.items() if v is not None}
        y, hl = st.selective_scan_fn(leaves["u"], leaves["delta"], leaves["A"], leaves["B"], leaves["C"],
                                     leaves["D"], leaves["z"], leaves["delta_bias"], True, True, h0=leaves["h0"])
        ((y * gy).sum() + hl.sum()).backward()
        return y.detach(), {k: v.grad for k, v in leaves.items()}

    ref_y, ref_g = fwd_bwd()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(s):
            y, g = fwd_bwd()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert torch.equal(y, ref_y)
    for k in g:
        assert torch.equal(g[k], ref_g[k]), k


@cuda_only
def test_cuda_graph_forward_backward():
    x = make_inputs(batch=2, dim=64, L=256, N=16, bc="grouped", h0=True, device="cuda")
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items() if v is not None}
    gy = torch.randn(2, 64, 256, device="cuda")

    def step():
        y, hl = st.selective_scan_fn(leaves["u"], leaves["delta"], leaves["A"], leaves["B"], leaves["C"],
                                     leaves["D"], leaves["z"], leaves["delta_bias"], True, True, h0=leaves["h0"])
        ((y * gy).sum() + hl.sum()).backward()
        return y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm up
            for v in leaves.values():
                v.grad = None
            step()
    torch.cuda.current_stream().wait_stream(s)
    for v in leaves.values():
        v.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = step()
    # new inputs copied into the captured buffers, then replay
    for k, v in leaves.items():
        with torch.no_grad():
            v.copy_(v * 0.9 if k != "A" else v)
    graph.replay()
    torch.cuda.synchronize()
    eager = {k: v.detach().clone().requires_grad_(True) for k, v in leaves.items()}
    y, hl = st.selective_scan_fn(eager["u"], eager["delta"], eager["A"], eager["B"], eager["C"], eager["D"],
                                 eager["z"], eager["delta_bias"], True, True, h0=eager["h0"])
    ((y * gy).sum() + hl.sum()).backward()
    assert torch.equal(y_static, y.detach())
    for k in leaves:
        assert torch.equal(leaves[k].grad, eager[k].grad), k


@cuda_only
def test_cuda_graph_decode_loop():
    batch, dim, N, T = 4, 64, 16, 12
    s = make_step_inputs(batch=batch, dim=dim, N=N, G=2, device="cuda")
    xs = torch.randn(T, batch, dim, device="cuda")
    state = s["state"].clone()
    x_buf = torch.empty(batch, dim, device="cuda")
    outs = torch.empty(T, batch, dim, device="cuda")

    def loop():
        for t in range(T):
            x_buf.copy_(xs[t])
            outs[t] = st.selective_state_update(state, x_buf, s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                                s["dt_bias"], True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        loop()  # warm up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loop()
    state.copy_(s["state"])
    graph.replay()
    torch.cuda.synchronize()
    ref_state = s["state"].clone()
    for t in range(T):
        o = st.selective_state_update(ref_state, xs[t], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                      s["dt_bias"], True)
        assert torch.equal(outs[t], o), t
    assert torch.equal(state, ref_state)


@cuda_only
def test_cuda_device_mismatch():
    x = make_inputs(bc="var3", device="cuda")
    with pytest.raises(ValueError, match="argument 'delta': on another device: want cuda:0 .u's., got cpu"):
        st.selective_scan_fn(x["u"], x["delta"].cpu(), x["A"], x["B"], x["C"])


def _lstrided_inputs(device, batch=4, dim=96, L=196, N=8, dtype=torch.bfloat16, seed=11):
    """MambaVision's pattern: delta a (b l, d) -> (b, d, l) view, z a (b, l, d) transpose, B / C slices
    of one (b, l, r + 2 N) projection (L stride r + 2 N), y's gradient a slice of a (b, l, 2 d) tensor
    (through cat + transpose: L stride 2 dim); u contiguous. Each L-strided operand's L stride is not 1."""
    g = torch.Generator().manual_seed(seed)
    r = 3
    x = dict(
        u=torch.randn(batch, dim, L, generator=g).to(device, dtype),
        delta=(torch.randn(batch * L, dim, generator=g) * 0.5).to(device, dtype),  # viewed in the call
        z=torch.randn(batch, L, dim, generator=g).to(device, dtype),  # transposed in the call
        dbl=torch.randn(batch, L, r + 2 * N, generator=g).to(device, dtype),  # B / C sliced in the call
        A=-(torch.rand(dim, N, generator=g) + 0.3).to(device),
        D=torch.rand(dim, generator=g).to(device),
        bias=(torch.randn(dim, generator=g) * 0.2).to(device),
    )
    gy = torch.randn(batch, L, 2 * dim, generator=g).to(device, dtype)[:, :, :dim].transpose(1, 2)
    return x, gy, (batch, dim, L, N, r)


def _lstrided_run(x, gy, sizes, strided, entry):
    """y and the gradients of u, delta, z, the projection (B and C) through `entry`: "fn"
    (selective_scan_fn), "op" (torch.ops.selscan.fwd, autograd) or "op_nograd" (the op without
    autograd: no gradients); the operands L-strided (strided) or their contiguous copies."""
    batch, dim, L, N, r = sizes
    grads = entry != "op_nograd"
    ins = {k: x[k].detach().clone().requires_grad_(grads) for k in ("u", "delta", "z", "dbl")}
    dl = ins["delta"].view(batch, L, dim).transpose(1, 2)
    z = ins["z"].transpose(1, 2)
    B = ins["dbl"][..., r:r + N].transpose(1, 2)
    C = ins["dbl"][..., r + N:].transpose(1, 2)
    ops = [ins["u"], dl, B, C, z]
    if strided:
        assert all(t.stride(-1) != 1 for t in ops[1:]) and gy.stride(-1) != 1
    else:
        ops = [t.contiguous() for t in ops]
    u, dl, B, C, z = ops
    if entry == "fn":
        y = st.selective_scan_fn(u, dl, x["A"], B, C, x["D"], z, x["bias"], True)
    else:
        y = torch.ops.selscan.fwd(u, dl, x["A"], B, C, x["D"], z, x["bias"], None, None, True, False, False)[0]
    if not grads:
        return y, []
    y.backward(gy if strided else gy.contiguous())
    return y, [ins[k].grad for k in ("u", "delta", "z", "dbl")]


@cuda_only
@pytest.mark.parametrize("entry", ["fn", "op", "op_nograd"])
def test_cuda_strided_operands_run_fast_kernels(entry):
    """Without the channels-last kernels the op (csrc/scan.cpp >>unit-l: selective_scan_fn and a
    direct torch.ops.selscan.fwd call alike, with or without autograd) copies L-strided u / delta / z /
    B / C of a fast-kernel problem to unit L strides, and autograd saves the copies (and copies an
    L-strided dy): the forward and backward then run the fast kernels, bitwise the results of
    contiguous operands (the general kernels, which the L-strided operands would otherwise run,
    round differently). With them, the fast kernels read the strides: equal to rounding."""
    x, gy, sizes = _lstrided_inputs("cuda")
    y1, g1 = _lstrided_run(x, gy, sizes, True, entry)
    y2, g2 = _lstrided_run(x, gy, sizes, False, entry)
    if not st._C.cuda_channels_last():
        assert torch.equal(y1, y2)
        for a, b in zip(g1, g2):
            assert torch.equal(a, b)
    else:
        # k = 2: two kernels, each rounding its float32 result to bfloat16
        assert rel_err(y1, y2) < lowp_tol(torch.bfloat16, TOL32, 2)
        for a, b in zip(g1, g2):
            assert rel_err(a, b) < lowp_tol(a.dtype, GTOL32, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["fn", "op"])
def test_saved_operands_lstride(device, entry):
    """What autograd saves for the backward: the user's own u / delta / z / B / C on the CPU (read
    through their strides, never copied) and on CUDA builds with the channels-last kernels; on CUDA
    without them, unit-L-stride copies of the L-strided ones (so the backward runs the fast kernels)."""
    x, gy, sizes = _lstrided_inputs(device, batch=2, dim=8, L=20, N=4, dtype=torch.float32)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _lstrided_run(x, gy, sizes, True, entry)
    batch, dim, L, N, r = sizes
    scan = [t for t in saved if t.dim() == 3 and t.shape[-1] == L]  # u, delta, z, B, C
    assert len(scan) == 5, [tuple(t.shape) for t in saved]
    copies = device == "cuda" and not st._C.cuda_channels_last()
    n_lstrided = sum(t.stride(-1) != 1 for t in scan)
    assert n_lstrided == (0 if copies else 4)  # u is contiguous; delta, z, B, C are not


@cuda_only
@pytest.mark.parametrize("grads", [False, True])
def test_cuda_lstride_opcheck(grads):
    """opcheck with L-strided operands, u too (a (b, L, dim) transpose): the fake kernel's y has the
    strides of the op's (contiguous where the op copies u: _fwd_y_like mirrors >>unit-l)."""
    x = make_inputs(batch=2, dim=8, L=20, N=4, bc="var3", device="cuda")
    lt = {k: x[k].transpose(1, 2).contiguous().transpose(1, 2) for k in ("u", "delta", "z", "B", "C")}
    assert all(t.stride(-1) != 1 for t in lt.values())
    args = (lt["u"].requires_grad_(grads), lt["delta"], x["A"], lt["B"], lt["C"], x["D"], lt["z"], x["delta_bias"],
            None, None, True, False, True)
    torch.library.opcheck(torch.ops.selscan.fwd, args)
    y = torch.ops.selscan.fwd(*args)[0]
    assert y.stride(-1) == (y.shape[1] if st._C.cuda_channels_last() else 1)  # like u, or its copy


@cuda_only
@pytest.mark.parametrize("grads", [False, True])
def test_cuda_lstride_copies_after_checks(grads):
    """The op copies L-strided operands only after the argument checks: a bad one is refused naming
    it, as it would be without the copies (here a z of the wrong shape whose copy could not even be
    allocated: 2^41 elements, L stride 0)."""
    x = make_inputs(batch=2, dim=8, L=37, N=4, bc="var3", device="cuda")
    ins = {k: (v.detach().clone().requires_grad_(grads) if v is not None else None) for k, v in x.items()}
    bad_z = torch.zeros((), device="cuda").expand(2, 2**20, 2**20)
    with pytest.raises(ValueError, match="argument 'z': wrong shape"):
        torch.ops.selscan.fwd(ins["u"], ins["delta"], ins["A"], ins["B"], ins["C"], ins["D"], bad_z,
                              ins["delta_bias"], None, None, True, False, False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["contiguous", "batch_broadcast", "channels_last", "slice", "L_strided_slice",
                                    "dim_broadcast", "permuted_slice", "step_2"])
def test_outputs_have_empty_likes_layout(device, layout):
    """y and the gradients are laid out as torch.empty_like lays out u and each input (its strides where
    the input is non-overlapping and dense, its stride order otherwise; y contiguous where the CUDA op
    copies u to unit L strides): the layout the CUDA plan reads (an
    L-strided y sends a forward to the general kernels), unchanged by the stable-ABI port (whose first
    version ordered a broadcast u's y by stride: L outermost)."""
    g = torch.Generator().manual_seed(3)
    b, d, L, N = 3, 4, 12, 4

    def make(*shape):
        return torch.randn(*shape, generator=g).to(device)

    if layout == "contiguous":
        u = make(b, d, L)
    elif layout == "batch_broadcast":
        u = make(1, d, L).expand(b, d, L)
    elif layout == "channels_last":
        u = make(b, L, d).transpose(1, 2)
    elif layout == "slice":
        u = make(b, d + 2, L)[:, 1:-1]
    elif layout == "L_strided_slice":
        u = make(b, L, d + 2).transpose(1, 2)[:, 1:-1]
    elif layout == "dim_broadcast":
        u = make(b, 1, L).expand(b, d, L)
    elif layout == "permuted_slice":
        u = make(L, b, d + 1).permute(1, 2, 0)[:, 1:]
    else:
        u = make(b, d, 2 * L)[:, :, ::2]
    delta, A = make(b, d, L).abs(), -make(d, N).abs()
    B, C, D = make(b, N, L), make(b, N, L), make(d)
    y, last, ck = torch.ops.selscan.fwd(u, delta, A, B, C, D, None, None, None, None, True, True, True)
    # (on CUDA the op copies an L-strided u to unit L strides where selscan's plan asks: y is then
    # contiguous, like the copy: csrc/selscan_torch.h >>unit-l)
    copies = device == "cuda" and st._C.fwd_unit_l(
        tuple(st._checks.describe(t) for t in (u, delta, A, B, C, D, None, None, None, None)))
    want = torch.empty(u.shape).stride() if copies else torch.empty_like(u).stride()
    assert y.stride() == want, (layout, y.stride())
    dy = make(b, d, L)
    grads = torch.ops.selscan.bwd(u, delta, A, B, C, D, None, None, None, None, dy, None, ck, True, [1] * 9)
    for name, t, gr in zip("u delta A B C D".split(), (u, delta, A, B, C, D), grads):
        assert gr.stride() == torch.empty_like(t).stride(), (layout, name, gr.stride())


def test_y_layout_is_empty_likes_on_random_views():
    """test_outputs_have_empty_likes_layout on 300 random views of u (permutations, slices, steps,
    broadcasts, size-1 dims), CPU."""
    rng = random.Random(11)
    g = torch.Generator().manual_seed(11)
    for _ in range(300):
        b, d, L, N = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 6), 2
        base = [b, d, L]
        pad = [rng.choice([0, 0, 1]) for _ in range(3)]
        step = [rng.choice([1, 1, 2]) for _ in range(3)]
        perm = list(range(3))
        rng.shuffle(perm)
        full = [(base[i] + pad[i]) * step[i] for i in range(3)]
        t = torch.randn(*[full[p] for p in perm], generator=g).permute(*[perm.index(i) for i in range(3)])
        u = t[:base[0] * step[0]:step[0], :base[1] * step[1]:step[1], :base[2] * step[2]:step[2]]
        for i in range(3):
            if rng.random() < 0.2:
                u = u.narrow(i, 0, 1).expand(*u.shape)
        delta, A = torch.rand(b, d, L, generator=g), -torch.rand(d, N, generator=g)
        B, C = torch.randn(b, N, L, generator=g), torch.randn(b, N, L, generator=g)
        y = torch.ops.selscan.fwd(u, delta, A, B, C, None, None, None, None, None, False, False, False)[0]
        assert y.stride() == torch.empty_like(u).stride(), (tuple(u.shape), u.stride(), y.stride())


def test_allocation_failure_says_torchs_reason():
    """An output torch cannot allocate (y of 4 TiB from broadcast inputs): the error carries torch's
    allocator text (through the stable C shim's last-error getter, torch 2.13 and later), not the shim
    call's file and line."""
    big = (1 << 20, 1 << 10, 1 << 10)
    u = torch.randn(1, 1, 1).expand(*big)  # a full broadcast: made dense (contiguous) first
    u2 = torch.randn(1, 1 << 10, 1).expand(*big)  # not a full broadcast: y is the first allocation
    delta, A = torch.rand(1, 1, 1).expand(*big), -torch.rand(1 << 10, 2)
    B = torch.randn(1, 2, 1).expand(big[0], 2, big[2])
    new_torch = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
    for x in (u, u2):
        with pytest.raises(RuntimeError) as e:
            st.selective_scan_fn(x, delta, A, B, B)
        assert ("allocate" in str(e.value)) if new_torch else ("selscan" in str(e.value)), str(e.value)[:300]
