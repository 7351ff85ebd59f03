"""Mamba-2's SSD scan (issue 40): selscan::ssd_fwd / ssd_bwd and mamba_chunk_scan_combined against
the float64 recurrence (selscan_torch.reference.ssd_ref: step by step, not mamba_ssm's chunks), every
option, on the CPU and CUDA; the argument checks naming the caller's argument; empty calls; the fake
kernels; determinism (thread counts on the CPU, two calls on CUDA)."""
import contextlib
import math
import zlib

import numpy as np
import pytest
import torch
from _common import DEVICES, GTOL, TOL, cuda_only, rel_err

import selscan_torch as st
from selscan_torch import norm as snorm
from selscan_torch.reference import mamba_split_conv1d_scan_ref, ssd_ref

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def _inputs(seed, batch=2, L=23, H=4, P=6, G=2, N=8, dtype=F32, D="head", z=True, bias=True, init=True,
            seq=False, cu=None, layout="plain"):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt)

    x = r(batch, L, H, P)
    if layout == "head-major":  # x and z laid out (batch, H, L, P), B / C (batch, G, L, N): strided views
        x = r(batch, H, L, P).transpose(1, 2)
    a = dict(x=x, dt=r(batch, L, H, scale=0.5), A=-(torch.rand(H, generator=g) + 0.3),
             B=r(batch, L, G, N), C=r(batch, L, G, N))
    if layout == "head-major":
        a["B"], a["C"] = r(batch, G, L, N).transpose(1, 2), r(batch, G, L, N).transpose(1, 2)
    a["D"] = None if D is None else r(H, dt=F32) if D == "head" else r(H, P, dt=F32)
    a["z"] = (r(batch, H, L, P).transpose(1, 2) if layout == "head-major" else r(batch, L, H, P)) if z else None
    a["dt_bias"] = r(H, scale=0.3, dt=F32) if bias else None
    rows = batch if cu is None else len(cu) - 1
    a["initial_states"] = r(rows, H, P, N, dt=F32) if init else None
    a["seq_idx"] = None
    if seq:  # runs of ids: 0 0 0 1 1 2 ... (a restart at each change)
        ids = torch.cumsum((torch.rand(batch, L, generator=g) < 0.15).int(), dim=1).int()
        a["seq_idx"] = ids
    a["cu_seqlens"] = None if cu is None else torch.tensor(cu, dtype=torch.int64)
    return a


GRAD_NAMES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")

# (name, options): each option of >>ssd-api at least once, in float32 and the two low-precision types
CASES = [
    ("plain f32", dict()),
    ("no options", dict(D=None, z=False, bias=False, init=False)),
    ("D per channel", dict(D="headdim")),
    ("softplus + default limit", dict(softplus=True, limit=(0.0, math.inf))),
    ("no softplus, clamp both sides", dict(softplus=False, limit=(0.05, 0.6))),
    ("groups 1", dict(G=1)),
    ("groups = heads", dict(G=4)),
    ("seq_idx", dict(seq=True, batch=3, L=31)),
    ("cu_seqlens, an empty one", dict(batch=1, L=29, cu=[0, 7, 7, 20, 29])),
    ("head-major views", dict(layout="head-major")),
    ("N 1, P 1", dict(N=1, P=1)),
    ("L 1", dict(L=1)),
    ("bf16", dict(dtype=BF16, softplus=True)),
    ("f16", dict(dtype=F16, softplus=True, D="headdim")),
    ("bf16 packed", dict(dtype=BF16, batch=1, L=25, cu=[0, 11, 25], softplus=True)),
    # the shapes of the CUDA backward in chunks (selscan_cuda.cuh >>ssd-chunk-bwd: 32 < dstate <= 128, no
    # packing): three chunks of 64 steps, the last partial; two channel tiles, the second partial
    ("chunk shapes f32", dict(N=128, P=70, L=150, H=2, G=1)),
    ("chunk shapes bf16", dict(N=64, P=64, L=130, dtype=BF16, D="headdim")),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,opt", CASES, ids=[c[0] for c in CASES])
def test_ssd_matches_float64_recurrence(name, opt, device):
    opt = dict(opt)
    softplus = opt.pop("softplus", True)
    limit = opt.pop("limit", None)
    dtype = opt.get("dtype", F32)
    a = _inputs(zlib.crc32(name.encode()) % 1000, **opt)
    on = {k: (v.to(device) if torch.is_tensor(v) and k != "cu_seqlens" else v) for k, v in a.items()}
    leaves = {k: on[k] for k in GRAD_NAMES if on[k] is not None}
    for k, t in leaves.items():
        t.requires_grad_()
        a[k].requires_grad_()  # (the reference's leaves: the same tensors on the CPU)
    out, fin = torch.ops.selscan.ssd_fwd(on["x"], on["dt"], on["A"], on["B"], on["C"], on["D"], on["z"],
                                         on["dt_bias"], on["initial_states"], on["seq_idx"], on["cu_seqlens"],
                                         softplus, *(limit or (-math.inf, math.inf)), True)
    assert out.device.type == device
    out, fin = out.cpu(), fin.cpu()
    ref_out, ref_fin = ssd_ref(a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"],
                               a["initial_states"], a["seq_idx"], a["cu_seqlens"], softplus, limit)
    assert out.dtype == dtype and fin.dtype == F32 and out.shape == a["x"].shape
    # out: computed in float32 and rounded once to dtype (TOL); the final states stay float32
    assert rel_err(out, ref_out) < TOL[dtype], name
    assert rel_err(fin, ref_fin) < TOL[F32] if dtype == F32 else rel_err(fin, ref_fin) < TOL[dtype]
    g = torch.Generator().manual_seed(7)
    dout = torch.randn(out.shape, generator=g).to(dtype)  # cotangents in the dtype the op takes them
    dfin = torch.randn(fin.shape, generator=g)
    got = torch.autograd.grad((out.float() * dout.float()).sum() + (fin * dfin).sum(), list(leaves.values()))
    want = torch.autograd.grad((ref_out * dout.double()).sum() + (ref_fin * dfin.double()).sum(),
                               [a[k] for k in leaves])
    for k, gt, w in zip(leaves, got, want):
        gt = gt.cpu()
        # gradients in dtype are rounded once from float32 (GTOL[dtype]); float32 ones: GTOL[F32] in a
        # float32 problem, and the low-precision problem's bound where their inputs came rounded
        assert gt.dtype == leaves[k].dtype, k
        assert rel_err(gt, w) < GTOL[dtype], (name, k, rel_err(gt, w))


def test_drop_in_returns_and_packing_as_mamba_ssm():
    a = _inputs(3, batch=1, L=20, cu=[0, 8, 20], init=False)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    kw = dict(D=a["D"], z=a["z"], dt_bias=a["dt_bias"], dt_softplus=True)
    out = st.mamba_chunk_scan_combined(*args, 256, **kw)
    assert torch.is_tensor(out) and out.shape == a["x"].shape
    out2, fin = st.mamba_chunk_scan_combined(*args, 256, **kw, return_final_states=True)
    assert torch.equal(out, out2) and fin.shape == (1, 4, 6, 8) and fin.dtype == F32
    # packed: cu_seqlens restarts each sequence (seq_idx optional); varlen states: each sequence's final state
    cu = a["cu_seqlens"]
    o3, last, varlen = st.mamba_chunk_scan_combined(*args, 256, **kw, cu_seqlens=cu, return_final_states=True,
                                                    return_varlen_states=True)
    ro, rf = ssd_ref(*args, kw["D"], kw["z"], kw["dt_bias"], None, None, cu, True, (0.0, math.inf))
    assert varlen.shape == (2, 4, 6, 8) and rel_err(varlen, rf) < TOL[F32] and rel_err(o3, ro) < TOL[F32]
    assert torch.equal(last, varlen[-1:])
    seq_idx = torch.tensor([[0] * 8 + [1] * 12], dtype=torch.int32)
    o4 = st.mamba_chunk_scan_combined(*args, 256, **kw, seq_idx=seq_idx)
    assert rel_err(o4, ro) < TOL[F32]  # seq_idx alone: the same restarts
    # mamba_ssm's (1, ...) initial_states with cu_seqlens: the first sequence's
    h0 = torch.randn(1, 4, 6, 8)
    o5 = st.mamba_chunk_scan_combined(*args, 256, **kw, cu_seqlens=cu, initial_states=h0)
    ro5, _ = ssd_ref(*args, kw["D"], kw["z"], kw["dt_bias"], torch.cat([h0, torch.zeros_like(h0)]), None, cu, True,
                     (0.0, math.inf))
    assert rel_err(o5, ro5) < TOL[F32]
    with pytest.raises(ValueError, match="cu_seqlens"):
        st.mamba_chunk_scan_combined(*args, 256, return_varlen_states=True)


def _call(a, **over):
    a = dict(a, **over)
    return torch.ops.selscan.ssd_fwd(a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"],
                                     a["initial_states"], a["seq_idx"], a["cu_seqlens"], True,
                                     over.get("lo", 0.0), over.get("hi", math.inf), True)


@pytest.mark.parametrize("over,exc,words", [
    (dict(x=torch.randn(2, 23, 24)), ValueError, "argument 'x'"),
    (dict(dt=torch.randn(2, 23, 5)), ValueError, "argument 'dt'"),
    (dict(A=torch.randn(4, 8)), ValueError, "argument 'A'"),
    (dict(C=torch.randn(2, 23, 2, 9)), ValueError, "argument 'C'"),
    (dict(B=torch.randn(2, 23, 3, 8), C=torch.randn(2, 23, 3, 8)), ValueError, "argument 'B'"),
    (dict(D=torch.randn(5)), ValueError, "argument 'D'"),
    (dict(D=torch.randn(4, 7)), ValueError, "argument 'D'"),
    (dict(z=torch.randn(2, 23, 4, 6, dtype=F16)), TypeError, "argument 'z'"),
    (dict(A=torch.randn(4, dtype=torch.float64)), TypeError, "argument 'A'"),
    (dict(x=torch.randn(2, 23, 4, 6, dtype=torch.float64)), TypeError, "argument 'x'"),
    (dict(seq_idx=torch.zeros(2, 23, dtype=torch.int64)), TypeError, "argument 'seq_idx'"),
    (dict(seq_idx=torch.zeros(2, 22, dtype=torch.int32)), ValueError, "argument 'seq_idx'"),
    (dict(initial_states=torch.randn(3, 4, 6, 8)), ValueError, "argument 'initial_states'"),
    (dict(cu_seqlens=torch.tensor([0, 23]), initial_states=None), ValueError, "argument 'x': not 1 with cu_seqlens"),
    (dict(lo=float("nan")), ValueError, "dt_limit"),
    (dict(lo=1.0, hi=0.5), ValueError, "dt_limit"),
], ids=lambda v: str(v)[:40] if not isinstance(v, dict) else ",".join(v))
def test_refusals_name_the_argument(over, exc, words):
    a = _inputs(5)
    before = {k: v.clone() for k, v in a.items() if torch.is_tensor(v)}
    with pytest.raises(exc, match=words):
        _call(a, **over)
    for k, v in before.items():  # inputs untouched
        assert torch.equal(a[k], v), k


def test_packed_refusals():
    a = _inputs(6, batch=1, L=10, cu=[0, 4, 10])
    with pytest.raises(ValueError, match="seq_idx"):  # not both (the op; the drop-in drops seq_idx)
        _call(a, seq_idx=torch.zeros(1, 10, dtype=torch.int32))
    with pytest.raises(ValueError, match="cu_seqlens"):
        _call(a, cu_seqlens=torch.tensor([0, 4, 9]))  # last offset != L
    with pytest.raises(ValueError, match="cu_seqlens"):
        _call(a, cu_seqlens=torch.tensor([0, 6, 4, 10]), initial_states=torch.randn(3, 4, 6, 8))


def test_empty_calls_pass_the_states_through():
    a = _inputs(8, L=0)
    for k in ("x", "dt", "B", "C", "z", "initial_states"):
        a[k].requires_grad_()
    out, fin = _call(a)
    assert out.shape == (2, 0, 4, 6) and torch.equal(fin, a["initial_states"])
    dfin = torch.randn_like(fin)
    (g,) = torch.autograd.grad((fin * dfin).sum(), [a["initial_states"]])
    assert torch.equal(g, dfin)


def test_nan_in_nan_out():
    a = _inputs(9)
    a["x"][0, 5, 1, 2] = float("nan")
    out, fin = _call(a)
    assert out[0, 5:, 1, 2].isnan().all() and not out[1].isnan().any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_d", [False, True])
def test_infinities_as_the_float64_reference(device, with_d):
    # one step, dstate 5 (the CPU backward's state rows have pad lanes), B = C = 1: an infinite x gives +inf (without
    # D no term: 0 x was NaN), an infinite dy gives dx, dz +inf (the pad lanes' inf * 0 was NaN), as ssd_ref in float64
    one = dict(device=device)
    x = torch.full((1, 1, 1, 1), float("inf"), **one)
    dt, A = torch.full((1, 1, 1), 0.5, **one), torch.tensor([-1.0], **one)
    B = C = torch.ones(1, 1, 1, 5, **one)
    kw = dict(D=torch.tensor([0.5], **one) if with_d else None, dt_limit=(0.0, float("inf")))
    z = torch.ones(1, 1, 1, 1, **one)
    y = st.mamba_chunk_scan_combined(x, dt, A, B, C, z=z, **kw)
    y64, _ = ssd_ref(x, dt, A, B, C, z=z, **kw)
    assert y.item() == y64.item() == float("inf")
    xg, zg = torch.ones_like(x).requires_grad_(), z.clone().requires_grad_()
    y = st.mamba_chunk_scan_combined(xg, dt, A, B, C, z=zg, **kw)
    y.backward(torch.full_like(y, float("inf")))
    x64, z64 = xg.detach().double().requires_grad_(), z.double().requires_grad_()
    y64, _ = ssd_ref(x64, dt, A, B, C, z=z64, **kw)
    y64.backward(torch.full_like(y64, float("inf")))
    assert xg.grad.item() == x64.grad.item() == float("inf")
    assert zg.grad.item() == z64.grad.item() == float("inf")


def test_gradients_bitwise_the_same_for_every_thread_count():
    a = _inputs(10, batch=3, L=40, H=6, G=3, seq=True)
    leaves = [a[k].requires_grad_() for k in GRAD_NAMES if a[k] is not None]
    res = []
    before = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            out, fin = _call(a)
            res.append(torch.autograd.grad(out.square().sum() + fin.sum(), leaves))
    finally:
        torch.set_num_threads(before)
    for other in res[1:]:
        for g0, g1 in zip(res[0], other):
            assert torch.equal(g0, g1)


def test_opcheck_schema_fake_and_autograd():
    a = _inputs(11, L=9)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"], a["initial_states"], None, None,
            True, 0.0, math.inf, True)
    torch.library.opcheck(torch.ops.selscan.ssd_fwd.default, args)
    bargs = (*args[:11], torch.randn(2, 9, 4, 6), torch.randn(2, 4, 6, 8), True, 0.0, math.inf, [1] * 9)
    torch.library.opcheck(torch.ops.selscan.ssd_bwd.default, bargs, test_utils=("test_schema", "test_faketensor"))


def test_compiles_fullgraph():
    a = _inputs(12, L=11)
    f = torch.compile(lambda *t: st.mamba_chunk_scan_combined(*t, 64, dt_softplus=True), fullgraph=True,
                      backend="aot_eager")
    got = f(a["x"], a["dt"], a["A"], a["B"], a["C"])
    want = st.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], 64, dt_softplus=True)
    assert torch.equal(got, want)


@cuda_only
def test_cuda_backward_is_deterministic_and_refuses_dstate_over_512():
    """Two backward calls on CUDA give the same bits (every sum in a fixed order: >>ssd-cuda); a dstate
    the CUDA kernels do not take is refused, naming it."""
    a = {k: (v.cuda() if torch.is_tensor(v) and k != "cu_seqlens" else v)
         for k, v in _inputs(13, batch=2, L=150, H=4, P=40, N=64, seq=True).items()}
    leaves = [a[k] for k in GRAD_NAMES if a[k] is not None]
    for t in leaves:
        t.requires_grad_()
    out, fin = _call(a)
    dout, dfin = torch.randn_like(out), torch.randn_like(fin)
    g1 = torch.autograd.grad((out * dout).sum() + (fin * dfin).sum(), leaves, retain_graph=True)
    g2 = torch.autograd.grad((out * dout).sum() + (fin * dfin).sum(), leaves)
    assert all(torch.equal(x, y) for x, y in zip(g1, g2))
    big = {k: (v.cuda() if torch.is_tensor(v) and k != "cu_seqlens" else v)
           for k, v in _inputs(13, L=3, N=513, init=False).items()}
    with pytest.raises(Exception, match="argument .B.: over 512"):
        _call(big)


# ---- the hostile user's findings (ninth session), each a regression test -----------------------------


def test_final_states_skip_empty_trailing_sequences():
    a = _inputs(14, batch=1, L=12, cu=[0, 5, 12, 12, 12], init=False)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    out, last, varlen = st.mamba_chunk_scan_combined(*args, None, cu_seqlens=a["cu_seqlens"], dt_softplus=True,
                                                     return_final_states=True, return_varlen_states=True)
    assert torch.equal(last, varlen[1:2]) and last.abs().max() > 0  # the state after token L - 1


def test_drop_in_argument_forms_refused_by_name():
    a = _inputs(15)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    with pytest.raises(TypeError, match="A must be a torch.Tensor"):  # (the package's words for a non-tensor)
        st.mamba_chunk_scan_combined(a["x"], a["dt"], -1.0, a["B"], a["C"])
    with pytest.raises(TypeError, match="initial_states must be a torch.Tensor or None"):
        st.mamba_chunk_scan_combined(*args, initial_states=[[0.0]])
    for bad in ((0.0,), 0.5, (0.0, 1.0, 2.0), (0, 10 ** 400)):
        with pytest.raises(ValueError, match="argument 'dt_limit'"):
            st.mamba_chunk_scan_combined(*args, dt_limit=bad)
    for name, t in (("A", a["A"].to(torch.complex64)), ("D", a["D"].to(torch.uint8)),
                    ("initial_states", a["initial_states"].bool())):
        with pytest.raises(TypeError, match=f"{name} must be a real floating-point tensor"):  # refused, not cast
            st.mamba_chunk_scan_combined(*(t if n == name else a[n] for n in ("x", "dt", "A", "B", "C")),
                                         **{k: (t if k == name else a[k]) for k in ("D", "initial_states")})


def test_packed_forms_checked():
    a = _inputs(16, batch=1, L=10, cu=[0, 4, 10])
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    other = torch.tensor([[0] * 7 + [1] * 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="argument 'seq_idx'"):  # boundaries unlike cu_seqlens'
        st.mamba_chunk_scan_combined(*args, cu_seqlens=a["cu_seqlens"], seq_idx=other)
    same = torch.tensor([[3] * 4 + [9] * 6], dtype=torch.int32)
    got = st.mamba_chunk_scan_combined(*args, cu_seqlens=a["cu_seqlens"], seq_idx=same)
    assert torch.equal(got, st.mamba_chunk_scan_combined(*args, cu_seqlens=a["cu_seqlens"]))
    with pytest.raises(ValueError, match=r"argument 'initial_states'.*got \[1, 4, 6, 7\]"):  # the shape passed
        st.mamba_chunk_scan_combined(*args, cu_seqlens=a["cu_seqlens"], initial_states=torch.randn(1, 4, 6, 7))


def test_backward_names_dout():
    a = _inputs(17, L=9)
    with pytest.raises(ValueError, match="argument 'dout'"):
        torch.ops.selscan.ssd_bwd(a["x"], a["dt"], a["A"], a["B"], a["C"], None, None, None, None, None, None,
                                  torch.randn(2, 9, 4, 5), None, True, 0.0, math.inf, [1] * 9)


# ---- mamba_split_conv1d_scan_combined: against a float64 composition of the same math ---------------


SPLIT_CASES = [
    ("rmsnorm, gate after the norm", dict(rms=True, nbg=True)),
    ("rmsnorm, gate before the norm, groups 2", dict(rms=True, nbg=False, G=2)),
    ("gate in the scan, D per channel", dict(rms=False, Dhd=True)),
    ("MLP halves, out_proj with bias, initial states", dict(rms=True, mlp=6, out=True, init=True)),
    ("clamped dt", dict(rms=True, limit=(0.05, 0.5))),
]


@pytest.mark.parametrize("name,o", SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_split_conv1d_scan_matches_float64(name, o):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) % 1000)
    batch, L, H, P, N, W = 2, 19, 4, 6, 8, 4
    G, mlp = o.get("G", 1), o.get("mlp", 0)
    dim = H * P
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).requires_grad_()  # noqa: E731
    zxbcdt = r(batch, L, 2 * mlp + 2 * dim + 2 * G * N + H)
    w, b = r(dim + 2 * G * N, W, sc=0.5), r(dim + 2 * G * N, sc=0.1)
    dt_bias, A = r(H, sc=0.3), (-(torch.rand(H, generator=g) + 0.3)).requires_grad_()
    D = r(H, P) if o.get("Dhd") else r(H)
    rmsw = r(dim) if o["rms"] else None
    Wout, bout = (r(10, dim + mlp), r(10)) if o.get("out") else (None, None)
    init = r(batch, H, P, N) if o.get("init") else None
    limit = o.get("limit", (0.0, math.inf))
    ins = [t for t in (zxbcdt, w, b, dt_bias, A, D, rmsw, Wout, bout, init) if t is not None]
    got, fin = st.mamba_split_conv1d_scan_combined(
        zxbcdt, w, b, dt_bias, A, D, 256, initial_states=init, dt_limit=limit, return_final_states=True,
        rmsnorm_weight=rmsw, rmsnorm_eps=1e-5, outproj_weight=Wout, outproj_bias=bout, headdim=P, ngroups=G,
        norm_before_gate=o.get("nbg", True))
    want, wfin = mamba_split_conv1d_scan_ref(zxbcdt, w, b, dt_bias, A, D, init, limit, rmsw, 1e-5, Wout, bout, P, G,
                                              o.get("nbg", True))
    assert rel_err(got, want) < TOL[F32] and rel_err(fin, wfin) < TOL[F32]
    dy = torch.randn(got.shape, generator=g)
    gs = torch.autograd.grad((got * dy).sum() + fin.sum(), ins)
    ws = torch.autograd.grad((want * dy.double()).sum() + wfin.sum(), ins)
    for gt, w_ in zip(gs, ws):
        assert rel_err(gt, w_) < GTOL[F32]


@pytest.mark.parametrize("op", [False, True], ids=["composition", "norm op"])
@pytest.mark.parametrize("wdtype", [BF16, F16, torch.float64])
@pytest.mark.parametrize("nbg", [True, False])
def test_split_conv1d_scan_rmsnorm_weight_dtypes(wdtype, nbg, op, monkeypatch):
    """A model's norm weight in another dtype than the layer's float32 (a bf16 / f16 model's parameters, a float64
    one): the norm reads it in float32 (exact for bf16 / f16 values; float64's rounded once, below float32's
    tolerance here), its gradient comes back in its own dtype (rounded once from float32: GTOL of that dtype).
    Both norms the layer may take: the torch composition and selscan's op (norm.LAYER_DEVICES)."""
    monkeypatch.setattr(snorm, "LAYER_DEVICES", {"cpu"} if op else set())
    g = torch.Generator().manual_seed(71)
    batch, L, H, P, N, W = 2, 13, 4, 6, 8, 4
    dim = H * P
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).requires_grad_()  # noqa: E731
    zxbcdt = r(batch, L, 2 * dim + 2 * N + H)
    w, b = r(dim + 2 * N, W, sc=0.5), r(dim + 2 * N, sc=0.1)
    dt_bias, A, D = r(H, sc=0.3), (-(torch.rand(H, generator=g) + 0.3)).requires_grad_(), r(H)
    rmsw = (torch.randn(dim, generator=g) + 1).to(wdtype).requires_grad_()
    ins = [zxbcdt, w, b, dt_bias, A, D, rmsw]
    got = st.mamba_split_conv1d_scan_combined(zxbcdt, w, b, dt_bias, A, D, 256, rmsnorm_weight=rmsw, rmsnorm_eps=1e-5,
                                              headdim=P, norm_before_gate=nbg)
    want, _ = mamba_split_conv1d_scan_ref(zxbcdt, w, b, dt_bias, A, D, None, (0.0, math.inf), rmsw, 1e-5, None, None,
                                          P, 1, nbg)
    assert got.dtype == F32 and rel_err(got, want) < TOL[F32]
    dy = torch.randn(got.shape, generator=g)
    with _OpCount() as ops:
        gs = torch.autograd.grad((got * dy).sum(), ins)
    assert ("norm_bwd" in ops.n) == op, ops.n
    ws = torch.autograd.grad((want * dy.double()).sum(), ins)
    assert gs[-1].dtype == wdtype
    for gt, w_ in zip(gs, ws):
        assert rel_err(gt, w_) < GTOL[gt.dtype if gt.dtype in GTOL else F32]


class _OpCount(torch.utils._python_dispatch.TorchDispatchMode):
    """How often each selscan op ran (below autograd; an op a checkpoint answers from its saved outputs
    does not reach this mode)."""

    def __init__(self):
        super().__init__()
        self.n = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "selscan":
            self.n[func.__name__.split(".")[0]] = self.n.get(func.__name__.split(".")[0], 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_split_conv1d_scan_recomputes_in_the_backward(device):
    """recompute=True (the default): autograd keeps the layer's inputs and the scan's out and runs the rest of
    the layer again in the backward (the conv twice, the scan's forward once); the gradients are bitwise those
    of recompute=False (deterministic kernels), and what autograd keeps is smaller (no conv output, x / B / C /
    dt or the norm's float32 intermediates)."""
    g = torch.Generator().manual_seed(23)
    batch, L, H, P, N, W = 2, 40, 4, 8, 16, 4
    dim = H * P
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).to(device).requires_grad_()  # noqa: E731
    ins = [r(batch, L, 2 * dim + 2 * N + H), r(dim + 2 * N, W, sc=0.5), r(dim + 2 * N, sc=0.1), r(H, sc=0.3),
           (-(torch.rand(H, generator=g) + 0.3)).to(device).requires_grad_(), r(H)]
    kw = dict(rmsnorm_weight=r(dim), headdim=P, outproj_weight=r(24, dim), norm_before_gate=False)
    dy = torch.randn(batch, L, 24, generator=g).to(device)
    res = {}
    for rc in (False, True):
        kept = []

        def pack(t):
            kept.append(t.numel() * t.element_size())
            return t

        with _OpCount() as ops:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = st.mamba_split_conv1d_scan_combined(*ins, 256, **kw, recompute=rc)
            grads = torch.autograd.grad((out * dy).sum(), ins + [kw["rmsnorm_weight"], kw["outproj_weight"]])
        res[rc] = (out.detach(), grads, sum(kept), ops.n)
    assert torch.equal(res[True][0], res[False][0])
    assert all(torch.equal(a, b) for a, b in zip(res[True][1], res[False][1]))
    # (the gated norm is selscan's op too, SSD-torch-v4, on the devices in norm.LAYER_DEVICES)
    op_norm = device in snorm.LAYER_DEVICES
    nf = {"norm_fwd": 1, "norm_bwd": 1} if op_norm else {}
    assert res[False][3] == {"conv_fwd": 1, "ssd_fwd": 1, "ssd_bwd": 1, "conv_bwd": 1, **nf}, res[False][3]
    nf = {"norm_fwd": 2, "norm_bwd": 1} if op_norm else {}
    assert res[True][3] == {"conv_fwd": 2, "ssd_fwd": 1, "ssd_bwd": 1, "conv_bwd": 1, **nf}, res[True][3]
    inputs = sum(t.numel() * t.element_size() for t in ins + [kw["rmsnorm_weight"], kw["outproj_weight"]])
    scan_out = batch * L * dim * 4  # float32 here; the final states: the (0,) placeholder
    assert res[True][2] <= inputs + scan_out < res[False][2], (res[True][2], inputs, scan_out, res[False][2])


@pytest.mark.parametrize("reentrant", [False, True])
def test_split_conv1d_scan_recompute_inside_gradient_checkpointing(reentrant):
    """The layer's recompute (its autograd Function) inside a model's gradient checkpointing (transformers'
    either kind): the gradients bitwise those of recompute=False."""
    g = torch.Generator().manual_seed(29)
    batch, L, H, P, N, W = 2, 24, 4, 8, 16, 4
    dim = H * P
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).requires_grad_()  # noqa: E731
    ins = [r(batch, L, 2 * dim + 2 * N + H), r(dim + 2 * N, W, sc=0.5), r(dim + 2 * N, sc=0.1), r(H, sc=0.3),
           (-(torch.rand(H, generator=g) + 0.3)).requires_grad_(), r(H), r(dim), r(24, dim)]
    dy = torch.randn(batch, L, 24, generator=g)

    def layer(*a, rc=True):
        return st.mamba_split_conv1d_scan_combined(*a[:6], 256, rmsnorm_weight=a[6], outproj_weight=a[7], headdim=P,
                                                   norm_before_gate=False, recompute=rc)

    want = torch.autograd.grad((layer(*ins, rc=False) * dy).sum(), ins)
    out = torch.utils.checkpoint.checkpoint(layer, *ins, use_reentrant=reentrant)
    (out * dy).sum().backward()  # (the reentrant kind takes .backward() only)
    assert all(torch.equal(t.grad, w) for t, w in zip(ins, want))


def _small_layer_inputs(seed, gate_in_scan=False, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    batch, L, H, P, N, W = 1, 12, 2, 4, 4, 4
    dim = H * P
    ins = [torch.randn(batch, L, 2 * dim + 2 * N + H, generator=g),
           torch.randn(dim + 2 * N, W, generator=g) * 0.5, torch.randn(dim + 2 * N, generator=g) * 0.1, torch.zeros(H),
           -torch.rand(H, generator=g) - 0.3, torch.randn(H, generator=g)]
    ins = [t.to(device) for t in ins]
    ins[0].requires_grad_()
    kw = dict(headdim=P, rmsnorm_weight=None if gate_in_scan else torch.randn(dim, generator=g).to(device))
    return ins, kw


def test_split_conv1d_scan_recompute_refuses_a_seq_idx_changed_before_the_backward():
    """seq_idx changed in place between the forward and the backward: the recompute would run another packing;
    the recompute's saved-tensor version check refuses it (recompute=False keeps the forward's own)."""
    ins, kw = _small_layer_inputs(31)
    seq = torch.tensor([[0] * 5 + [1] * 7], dtype=torch.int64)
    out = st.mamba_split_conv1d_scan_combined(*ins, seq_idx=seq, **kw)
    seq[0, 5:8] = 0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(out.sum(), ins[0])


@pytest.mark.parametrize("gate_in_scan", [False, True])
def test_split_conv1d_scan_recompute_outputs_may_change_in_place(gate_in_scan):
    """The outputs a recomputed call returns (final states; out where it is the scan's own, the gate in the scan
    and no out_proj) changed in place before the backward (`out += residual`): gradients bitwise those of
    recompute=False, as there (the recompute's kept outs are not handed out)."""
    res = {}
    for rc in (False, True):
        ins, kw = _small_layer_inputs(37, gate_in_scan)
        out, fin = st.mamba_split_conv1d_scan_combined(*ins, return_final_states=True, recompute=rc, **kw)
        g = torch.Generator().manual_seed(41)
        loss = (out * torch.randn(out.shape, generator=g)).sum() + (fin * torch.randn(fin.shape, generator=g)).sum()
        out.add_(1.0)
        fin.mul_(2.0)
        res[rc] = torch.autograd.grad(loss, ins[0])[0]
    assert torch.equal(res[True], res[False])


def test_split_conv1d_scan_recompute_backward_twice_and_under_disabled_hooks():
    """The recompute's saved tensors are autograd's own: a second backward (retain_graph=True) recomputes
    again and gives the same gradients, bitwise those of recompute=False; the call runs where saved tensors
    hooks are disabled (torch.utils.checkpoint's recompute needs them)."""
    ins, kw = _small_layer_inputs(43)
    want = torch.autograd.grad(st.mamba_split_conv1d_scan_combined(*ins, recompute=False, **kw).sum(), ins[0])[0]
    out = st.mamba_split_conv1d_scan_combined(*ins, **kw)
    first = torch.autograd.grad(out.sum(), ins[0], retain_graph=True)[0]
    second = torch.autograd.grad(out.sum(), ins[0])[0]
    assert torch.equal(first, want) and torch.equal(second, want)
    with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        out = st.mamba_split_conv1d_scan_combined(*ins, **kw)
        assert torch.equal(torch.autograd.grad(out.sum(), ins[0])[0], want)


@pytest.mark.parametrize("device", DEVICES)
def test_split_conv1d_scan_recompute_under_autocast(device):
    """The backward's recompute runs under the forward's autocast state (the engine runs backwards with
    autocast off): under bf16 autocast (out_proj's product in bf16) the gradients are bitwise those of
    recompute=False."""
    res = {}
    for rc in (False, True):
        ins, kw = _small_layer_inputs(47, device=device)
        ow = torch.randn(6, kw["rmsnorm_weight"].shape[0], generator=torch.Generator().manual_seed(53))
        ow = ow.to(device).requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16):
            out = st.mamba_split_conv1d_scan_combined(*ins, outproj_weight=ow, recompute=rc, **kw)
        assert out.dtype == torch.bfloat16
        res[rc] = torch.autograd.grad(out.float().square().sum(), [ins[0], ow])
    assert all(torch.equal(a, b) for a, b in zip(res[True], res[False]))


@pytest.mark.parametrize("device", DEVICES)
def test_split_conv1d_scan_recompute_with_create_graph(device):
    """create_graph=True through the recompute: the first-order gradients bitwise those of recompute=False, and
    differentiable again as those are (the norm weight's gradient differentiated in zxbcdt; a recompute on
    detached inputs gave None there, silently); through the scan's backward a second derivative is refused,
    with either."""
    res = {}
    for rc in (False, True):
        ins, kw = _small_layer_inputs(59, device=device)
        w = kw["rmsnorm_weight"].requires_grad_()
        out = st.mamba_split_conv1d_scan_combined(*ins, recompute=rc, **kw)
        gx, gw = torch.autograd.grad(out.square().sum(), [ins[0], w], create_graph=True)
        second = torch.autograd.grad(gw.square().sum(), ins[0], retain_graph=True)[0]
        with pytest.raises(RuntimeError, match="double backward"):
            gx.sum().backward()
        res[rc] = (gx.detach(), gw.detach(), second)
    assert torch.equal(res[True][0], res[False][0]) and torch.equal(res[True][1], res[False][1])
    # (the second derivative's sums over the recompute's graph in another order: float32's rounding)
    torch.testing.assert_close(res[True][2], res[False][2], rtol=1e-6, atol=1e-6 * res[False][2].abs().max().item())
    assert res[True][2].abs().sum() > 0


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("hooks", [False, True])
def test_split_conv1d_scan_recompute_one_tensor_as_several_arguments(create_graph, hooks):
    """One tensor as dt_bias, A and D (each a (nheads,) float): its gradient the sum of the three, as recompute=
    False's (the Function returns one gradient a place; the engine's order of the sum differs: float32's
    rounding), never counted twice, also where saved-tensor hooks (save_on_cpu) hand each place back as its
    own tensor object (an identity check missed the alias there: 3x the gradient with create_graph)."""
    res = {}
    for rc in (False, True):
        ins, kw = _small_layer_inputs(83)
        t = (-torch.rand(ins[4].shape, generator=torch.Generator().manual_seed(89)) - 0.3).requires_grad_()
        ins[3:6] = [t, t, t]
        with torch.autograd.graph.save_on_cpu() if hooks else contextlib.nullcontext():
            out = st.mamba_split_conv1d_scan_combined(*ins, recompute=rc, **kw)
        res[rc] = torch.autograd.grad(out.square().sum(), t, create_graph=create_graph)[0].detach()
    torch.testing.assert_close(res[True], res[False], rtol=1e-5, atol=1e-6)  # (three sums reordered in float32)


@pytest.mark.parametrize("wanting", ["rmsnorm_weight", "D"])
def test_split_conv1d_scan_recompute_final_states_differentiable_as_without(wanting):
    """The final states come from the scan: with only the norm's weight wanting a gradient they are not
    differentiable, with only D (a scan input, its gradient there zero) they are, as with recompute=False; a
    loss on out and final states gives the gradient bitwise (the recompute's backward asked torch for the
    final states' gradient and raised)."""
    res = {}
    for rc in (False, True):
        ins, kw = _small_layer_inputs(61)
        ins[0].requires_grad_(False)
        t = kw["rmsnorm_weight"] if wanting == "rmsnorm_weight" else ins[5]
        t.requires_grad_()
        out, fin = st.mamba_split_conv1d_scan_combined(*ins, return_final_states=True, recompute=rc, **kw)
        res[rc] = (fin.requires_grad, torch.autograd.grad(out.sum() + fin.sum(), t)[0])
    assert res[True][0] is res[False][0] is (wanting == "D")
    assert torch.equal(res[True][1], res[False][1])


@pytest.mark.parametrize("gate_in_scan", [False, True])
def test_split_conv1d_scan_recompute_on_meta_tensors(gate_in_scan):
    """Meta tensors (shapes alone; no autocast on that device) through the recompute, forward and backward."""
    ins, kw = _small_layer_inputs(67, gate_in_scan)
    kw["outproj_weight"] = torch.randn(5, ins[4].shape[0] * kw["headdim"])  # (out, nheads * headdim)
    meta = lambda t: t.detach().to("meta").requires_grad_(t.is_floating_point())  # noqa: E731
    ins = [meta(t) for t in ins]
    kw = {k: meta(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    out = st.mamba_split_conv1d_scan_combined(*ins, **kw)
    out.sum().backward()
    assert out.is_meta and out.shape[-1] == 5 and ins[0].grad.shape == ins[0].shape


def test_split_conv1d_scan_recompute_keeps_no_autocast_cache():
    """The backward's recompute casts new leaves each backward: with autocast's cache on, a backward inside an
    autocast region kept a copy of each cast weight until the region's end (1 MiB a step in a hostile user's
    loop); the recompute runs with the cache off (the forward's autocast state otherwise)."""
    import selscan_torch.ssd as ssd

    ins, kw = _small_layer_inputs(71)
    seen = []
    own = ssd._gated_rms_norm

    def norm(*a):
        seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.is_autocast_cache_enabled()))
        return own(*a)

    ssd._gated_rms_norm = norm
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = st.mamba_split_conv1d_scan_combined(*ins, **kw)
            out.float().sum().backward()
    finally:
        ssd._gated_rms_norm = own
    assert seen == [(False, True, True), (True, True, False)], seen


@pytest.mark.parametrize("dynamic", [False, True])
def test_split_conv1d_scan_recompute_compiles_fullgraph(dynamic):
    """Under torch.compile the layer is traced whole (no graph break at the recompute's Function; with symbolic
    sizes too: no repr of one outside a refusal): fullgraph compiles, gradients bitwise those of eager
    recompute=False (aot_eager: the same ops)."""
    ins, kw = _small_layer_inputs(73)

    def loss(*a):
        out, fin = st.mamba_split_conv1d_scan_combined(*a, return_final_states=True, **kw)
        return out.square().sum() + fin.sum()

    want = torch.autograd.grad(loss(*ins), ins[0])[0]
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(loss, backend="aot_eager", fullgraph=True, dynamic=dynamic)(*ins),
                              ins[0])[0]
    assert torch.equal(got, want)


@pytest.mark.parametrize("eps,exc", [(None, TypeError), ("1e-2", TypeError), (True, TypeError), (-1.0, ValueError),
                                     (float("nan"), ValueError), (float("inf"), ValueError)])
def test_split_conv1d_scan_refuses_a_bad_rmsnorm_eps(eps, exc):
    """rmsnorm_eps must be a finite number >= 0 (None reached torch's rms_norm, which took machine epsilon)."""
    ins, kw = _small_layer_inputs(79)
    for rc in (False, True):
        with pytest.raises(exc, match="argument 'rmsnorm_eps'"):
            st.mamba_split_conv1d_scan_combined(*ins, rmsnorm_eps=eps, recompute=rc, **kw)


def test_split_conv1d_scan_packed_by_seq_idx():
    g = torch.Generator().manual_seed(21)
    H, P, N, W = 4, 6, 8, 4
    dim = H * P
    zxbcdt = torch.randn(1, 17, 2 * dim + 2 * N + H, generator=g)
    w, b, dt_bias = torch.randn(dim + 2 * N, W, generator=g) * 0.5, torch.randn(dim + 2 * N, generator=g), torch.zeros(H)
    A, D, rmsw = -(torch.rand(H, generator=g) + 0.3), torch.randn(H, generator=g), torch.randn(dim, generator=g)
    kw = dict(rmsnorm_weight=rmsw, headdim=P)
    seq_idx = torch.tensor([[0] * 6 + [1] * 11], dtype=torch.int32)
    packed = st.mamba_split_conv1d_scan_combined(zxbcdt, w, b, dt_bias, A, D, 256, seq_idx=seq_idx, **kw)
    alone = torch.cat([st.mamba_split_conv1d_scan_combined(zxbcdt[:, s], w, b, dt_bias, A, D, 256, **kw)
                       for s in (slice(0, 6), slice(6, 17))], dim=1)
    assert rel_err(packed, alone) < TOL[F32]


# ---- the drop-in on CUDA with gradients (the SSD kernels) against the float64 recurrence ----------------


def _route_case(name, opt, device, fn):
    opt = dict(opt)
    softplus = opt.pop("softplus", True)
    limit = opt.pop("limit", None)
    dtype = opt.get("dtype", F32)
    a = _inputs(zlib.crc32(name.encode()) % 1000, **opt)
    a = {k: (v.to(device) if torch.is_tensor(v) and k != "cu_seqlens" else v) for k, v in a.items()}
    leaves = {k: a[k] for k in GRAD_NAMES if a[k] is not None}
    for t in leaves.values():
        t.requires_grad_()
    out, fin = fn(a, softplus, limit)
    ref_out, ref_fin = ssd_ref(*(a[k] for k in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states",
                                                  "seq_idx", "cu_seqlens")), softplus, limit)
    assert out.dtype == dtype and rel_err(out, ref_out) < TOL[dtype], name
    assert rel_err(fin, ref_fin) < TOL[dtype], name
    g = torch.Generator().manual_seed(7)
    dout = torch.randn(out.shape, generator=g).to(dtype).to(device)
    dfin = torch.randn(fin.shape, generator=g).to(device)
    got = torch.autograd.grad((out.float() * dout.float()).sum() + (fin * dfin).sum(), list(leaves.values()))
    want = torch.autograd.grad((ref_out * dout.double()).sum() + (ref_fin * dfin.double()).sum(),
                               list(leaves.values()))
    for k, gt, w in zip(leaves, got, want):
        assert gt.dtype == leaves[k].dtype and rel_err(gt, w) < GTOL[dtype], (name, k, rel_err(gt, w))


@cuda_only
@pytest.mark.parametrize("name,opt", CASES, ids=[c[0] for c in CASES])
def test_drop_in_on_cuda_matches_float64_recurrence(name, opt):
    def call(a, sp, lim):
        kw = {k: a[k] for k in ("D", "z", "dt_bias", "initial_states", "seq_idx", "cu_seqlens")}
        if kw["cu_seqlens"] is not None:
            out, _, fin = st.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], 256, **kw,
                                                       dt_softplus=sp, dt_limit=lim, return_final_states=True,
                                                       return_varlen_states=True)
            return out, fin
        return st.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], 256, **kw, dt_softplus=sp,
                                            dt_limit=lim, return_final_states=True)
    _route_case(name, opt, "cuda", call)


def test_drop_in_takes_mamba_ssms_argument_forms():
    """What mamba_ssm takes and the package casts (its one rule, _checks): int32 / list cu_seqlens (of Python's or
    numpy's ints: a hostile user's find, numpy's were refused), an int64 seq_idx, dt / B / C / z in another float
    dtype than x's (cast to x's); a float or bool offset refused."""
    a = _inputs(18, batch=1, L=10, cu=[0, 4, 10], dtype=BF16)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    want = st.mamba_chunk_scan_combined(*args, cu_seqlens=a["cu_seqlens"], dt_softplus=True)
    for cu in (a["cu_seqlens"].int(), [0, 4, 10], (0, 4, 10), [np.int64(0), np.int32(4), np.uint8(10)]):
        assert torch.equal(st.mamba_chunk_scan_combined(*args, cu_seqlens=cu, dt_softplus=True), want)
    for bad in ([0, 4.0, 10], [0, True, 10], [0, np.float64(4), 10], [0, torch.tensor(4), 10], [0, torch.tensor(True), 10]):
        with pytest.raises(TypeError, match="cu_seqlens must hold ints"):
            st.mamba_chunk_scan_combined(*args, cu_seqlens=bad, dt_softplus=True)
    ids = torch.tensor([[0] * 4 + [1] * 6])
    assert torch.equal(st.mamba_chunk_scan_combined(*args, seq_idx=ids, dt_softplus=True), want)  # int64 ids
    f32 = (a["x"], a["dt"].float(), a["A"], a["B"].float(), a["C"].float())  # cast to x's dtype: the same values
    assert torch.equal(st.mamba_chunk_scan_combined(*f32, cu_seqlens=[0, 4, 10], dt_softplus=True), want)
    with pytest.raises(ValueError, match="argument 'cu_seqlens'"):  # a bad offset named as itself, beside seq_idx
        st.mamba_chunk_scan_combined(*args, cu_seqlens=[0, 4, 9], seq_idx=ids.int())


def test_split_conv1d_scan_refusals_name_the_argument():
    g = torch.Generator().manual_seed(22)
    H, P, N, W = 4, 6, 8, 4
    dim = H * P
    zxbcdt = torch.randn(1, 9, 2 * dim + 2 * N + H, generator=g)
    w, b = torch.randn(dim + 2 * N, W, generator=g), torch.randn(dim + 2 * N, generator=g)
    A, D = -torch.rand(H, generator=g) - 0.3, torch.randn(H, generator=g)
    call = lambda **kw: st.mamba_split_conv1d_scan_combined(**{**dict(  # noqa: E731
        zxbcdt=zxbcdt, conv1d_weight=w, conv1d_bias=b, dt_bias=None, A=A, D=D, headdim=P), **kw})
    for kw, exc, words in ((dict(ngroups=0), ValueError, "ngroups"), (dict(ngroups=3), ValueError, "ngroups"),
                           (dict(zxbcdt=zxbcdt[0]), ValueError, "zxbcdt"),
                           (dict(activation="relu"), NotImplementedError, "argument 'activation'"),
                           (dict(outproj_bias=torch.zeros(3)), ValueError, "argument 'outproj_bias'"),
                           (dict(headdim=None), ValueError, "argument 'headdim'"),
                           # found by a hostile user's run (tenth session): accepted, or a raw torch error
                           (dict(headdim=-3), ValueError, "argument 'headdim'"),
                           (dict(headdim=0), ValueError, "argument 'headdim'"),
                           (dict(ngroups=True), ValueError, "argument 'ngroups'"),
                           # a hostile user's run (twenty-eighth session): a wrong headdim blamed zxbcdt alone
                           (dict(headdim=10), ValueError, "arguments 'headdim', 'ngroups', 'conv1d_weight'"),
                           (dict(headdim=None, D=torch.randn(H, 10)), ValueError, "arguments 'D', 'ngroups'"),
                           (dict(headdim=P + 2), ValueError, "arguments 'zxbcdt', 'headdim', 'conv1d_weight'"),
                           (dict(zxbcdt=zxbcdt[..., 1:]), ValueError, "arguments 'zxbcdt', 'headdim'"),
                           (dict(A=-torch.rand(H + 1)), ValueError, "argument 'D'"),
                           (dict(rmsnorm_weight=torch.full((1,), 2.0)), ValueError, "argument 'rmsnorm_weight'"),
                           (dict(rmsnorm_weight=torch.ones(dim // 2)), ValueError, "argument 'rmsnorm_weight'"),
                           (dict(rmsnorm_weight=torch.ones(1, 9, dim)), ValueError, "argument 'rmsnorm_weight'"),
                           (dict(rmsnorm_weight=torch.ones(dim, dtype=torch.int32)), TypeError,
                            "argument 'rmsnorm_weight'"),
                           (dict(outproj_weight=torch.randn(5, dim + 1)), ValueError, "argument 'outproj_weight'"),
                           (dict(outproj_weight=torch.randn(5, dim, dtype=torch.float64)), TypeError,
                            "argument 'outproj_weight'"),
                           (dict(outproj_weight=torch.randn(5, dim), outproj_bias=torch.zeros(4)), ValueError,
                            "argument 'outproj_bias'"),
                           # a hostile user's run (thirty-first session): an integer zxbcdt with an outproj_weight
                           # blamed outproj_weight for not having zxbcdt's (integer) dtype
                           (dict(zxbcdt=zxbcdt.to(torch.int64), outproj_weight=torch.randn(5, dim)), TypeError,
                            "argument 'zxbcdt'")):
        with pytest.raises(exc, match=words):
            call(**kw)
    call(outproj_weight=torch.randn(5, dim), outproj_bias=torch.zeros(5))  # the shapes the checks take


def test_seq_idx_of_wider_ints_keeps_its_boundaries():
    """Found by a hostile user's run (tenth session): an int64 seq_idx was narrowed to int32, so ids differing
    by a multiple of 2**32 became equal and two sequences ran as one (a silent wrong answer). Only
    neighbours' equality counts: any integer dtype gives the boundaries of its values."""
    a = _inputs(23, batch=1, L=7, init=False)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"], None)
    want = st.mamba_chunk_scan_combined(*args, seq_idx=torch.tensor([[0, 0, 0, 1, 1, 1, 1]], dtype=torch.int32))
    for ids in ([[0, 0, 0, 2**32, 2**32, 2**32, 2**32]], [[-2**40, -2**40, -2**40, 5, 5, 5, 5]]):
        assert torch.equal(st.mamba_chunk_scan_combined(*args, seq_idx=torch.tensor(ids)), want)
    one = st.mamba_chunk_scan_combined(*args, seq_idx=torch.full((1, 7), 200, dtype=torch.uint8))
    assert torch.equal(one, st.mamba_chunk_scan_combined(*args))


# ---- the thirteenth session's hostile user's findings, each a regression test ---------------------------


def test_final_states_not_a_view_of_varlen_states():
    a = _inputs(21, batch=1, L=10, cu=[0, 4, 10], init=False)
    out, final, varlen = st.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], None,
                                                      cu_seqlens=a["cu_seqlens"], return_final_states=True,
                                                      return_varlen_states=True)
    keep = varlen.clone()
    final.zero_()  # e.g. a decode cache updated in place
    assert torch.equal(varlen, keep) and keep[1].abs().max() > 0
    _, alone = st.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], None,
                                            cu_seqlens=a["cu_seqlens"], return_final_states=True)
    assert torch.equal(alone, keep[1:2]) and alone.untyped_storage().nbytes() == alone.numel() * 4  # one row kept


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_index_dtypes_refused_with_the_reason(dtype):
    a = _inputs(22, batch=1, L=4)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    why = f"must be an integer tensor \\(int8 / 16 / 32 / 64 or uint8.*lack the ops needed\\), got {dtype}"
    with pytest.raises(TypeError, match="seq_idx " + why):
        st.mamba_chunk_scan_combined(*args, seq_idx=torch.zeros(1, 4, dtype=dtype))
    with pytest.raises(TypeError, match="cu_seqlens " + why):
        st.mamba_chunk_scan_combined(*args, cu_seqlens=torch.tensor([0, 4]).to(dtype))


def test_reference_softplus_gradient_at_the_threshold_and_nan():
    # the float64 oracle: d softplus / d x = sigmoid(x) at exactly 20 (its log1p branch), NaN for NaN
    one = lambda *s: torch.ones(*s, dtype=torch.float64)  # noqa: E731
    for v, want in ((19.999, 1 / (1 + math.exp(-19.999))), (20.0, 1 / (1 + math.exp(-20.0))), (20.001, 1.0)):
        d = torch.full((1, 1, 1), v, dtype=torch.float64, requires_grad=True)
        ssd_ref(one(1, 1, 1, 1), d, -one(1) * 1e-9, one(1, 1, 1, 1), one(1, 1, 1, 1), dt_softplus=True)[0].sum().backward()
        assert abs(d.grad.item() - want) < 1e-6, (v, d.grad.item())
    d = torch.full((1, 1, 1), math.nan, dtype=torch.float64, requires_grad=True)
    ssd_ref(one(1, 1, 1, 1), d, -one(1), one(1, 1, 1, 1), one(1, 1, 1, 1), dt_softplus=True)[0].sum().backward()
    assert math.isnan(d.grad.item())


def test_nan_dt_max_named():
    a = _inputs(23)
    with pytest.raises(ValueError, match="argument 'dt_limit \\(dt_min, dt_max\\)'"):
        st.mamba_chunk_scan_combined(a["x"], a["dt"], a["A"], a["B"], a["C"], dt_limit=(0.0, math.nan))


# ---- found by the framework-op fuzz harness's Mamba-2 categories (fuzz_ops.py: ssd-good, ssd-bad, split) -----


def test_chunk_size_refused_where_mamba_ssm_cannot_run_it():
    """chunk_size was accepted whatever it was (0, -64, 1.5, "64"): mamba_ssm divides the length by it. None
    (selscan's) and a positive int are taken (and not used); anything else is refused, naming it, by both
    functions."""
    a = _inputs(24, batch=1, L=6)
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"])
    want = st.mamba_chunk_scan_combined(*args, None, dt_softplus=True)
    for ok in (1, 64, 256):
        assert torch.equal(st.mamba_chunk_scan_combined(*args, ok, dt_softplus=True), want)
    for bad, exc in ((0, ValueError), (-64, ValueError), (1.5, TypeError), ("64", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="argument 'chunk_size'"):
            st.mamba_chunk_scan_combined(*args, bad, dt_softplus=True)
    H, P, N = 4, 6, 8
    dim = H * P
    z = torch.randn(1, 5, 2 * dim + 2 * N + H)
    w, A, D = torch.randn(dim + 2 * N, 4), -torch.rand(H) - 0.3, torch.randn(H)
    st.mamba_split_conv1d_scan_combined(z, w, None, None, A, D, 128, headdim=P)
    with pytest.raises(ValueError, match="argument 'chunk_size'"):
        st.mamba_split_conv1d_scan_combined(z, w, None, None, A, D, 0, headdim=P)


def test_meta_seq_idx_beside_cu_seqlens():
    """An all-meta call with seq_idx and cu_seqlens both (mamba_ssm passes both) raised NotImplementedError
    ("Cannot copy out of meta tensor"): the boundaries' comparison read seq_idx's values. On meta there are none;
    the shapes come back as the real call's."""
    a = _inputs(25, batch=1, L=10, cu=[0, 4, 10])
    ids = torch.tensor([[0] * 4 + [1] * 6], dtype=torch.int32)
    kw = dict(cu_seqlens=[0, 4, 10], dt_softplus=True, return_final_states=True, return_varlen_states=True)
    real = st.mamba_chunk_scan_combined(*(a[k] for k in ("x", "dt", "A", "B", "C")), seq_idx=ids, **kw)
    meta = st.mamba_chunk_scan_combined(*(a[k].to("meta") for k in ("x", "dt", "A", "B", "C")),
                                        seq_idx=ids.to("meta"), **kw)
    assert [(t.shape, t.dtype, t.device.type) for t in meta] == [(t.shape, t.dtype, "meta") for t in real]


def test_split_conv1d_scan_names_its_own_arguments():
    """mamba_split_conv1d_scan_combined's refusals named the conv's arguments ('weight', 'bias') for its
    conv1d_weight / conv1d_bias, and a tensor on another device got torch's or the conv's words (a meta
    rmsnorm_weight: "Tensor on device meta is not on the expected device cpu!"; a meta seq_idx: "Cannot copy
    out of meta tensor", the conv reading its values): now each names the argument passed."""
    H, P, N, W = 4, 6, 8, 4
    dim = H * P
    g = torch.Generator().manual_seed(26)
    z = torch.randn(1, 7, 2 * dim + 2 * N + H, generator=g)
    w, b = torch.randn(dim + 2 * N, W, generator=g), torch.randn(dim + 2 * N, generator=g)
    A, D = -torch.rand(H, generator=g) - 0.3, torch.randn(H, generator=g)
    call = lambda **kw: st.mamba_split_conv1d_scan_combined(**{**dict(  # noqa: E731
        zxbcdt=z, conv1d_weight=w, conv1d_bias=b, dt_bias=None, A=A, D=D, headdim=P), **kw})
    for kw, exc, name in ((dict(conv1d_bias=b[1:]), ValueError, "conv1d_bias"),
                          (dict(conv1d_bias=b[None]), ValueError, "conv1d_bias"),
                          (dict(conv1d_bias=b.int()), TypeError, "conv1d_bias"),
                          (dict(conv1d_weight=w.int()), TypeError, "conv1d_weight"),
                          (dict(conv1d_weight=w.to("meta")), ValueError, "conv1d_weight"),
                          (dict(rmsnorm_weight=torch.ones(dim, device="meta")), ValueError, "rmsnorm_weight"),
                          (dict(seq_idx=torch.zeros(1, 7, dtype=torch.int32, device="meta")), ValueError, "seq_idx"),
                          (dict(outproj_weight=torch.ones(5, dim, device="meta")), ValueError, "outproj_weight")):
        with pytest.raises(exc, match=rf"\b{name}\b") as e:
            call(**kw)
        assert "'weight'" not in str(e.value) and "'bias'" not in str(e.value), str(e.value)


def test_reference_restart_of_an_infinite_state():
    """ssd_ref restarted a seq_idx sequence by multiplying the state by 0, so an inf in the state before the
    restart became NaN after it (the op starts from 0, as the recurrence says): the oracle now starts from
    0 as its cu_seqlens path does, and the two agree."""
    f = torch.float64
    g = torch.Generator().manual_seed(40)
    x, C = torch.randn(1, 6, 2, 3, generator=g, dtype=f), torch.randn(1, 6, 1, 4, generator=g, dtype=f)
    B = torch.randn(1, 6, 1, 4, generator=g, dtype=f)
    B[0, 1, 0, 2] = math.inf
    dt, A = torch.rand(1, 6, 2, generator=g, dtype=f) + 0.1, -torch.rand(2, generator=g, dtype=f) - 0.2
    y, _ = ssd_ref(x, dt, A, B, C, seq_idx=torch.tensor([[0, 0, 0, 1, 1, 1]]))
    yc, _ = ssd_ref(x, dt, A, B, C, cu_seqlens=torch.tensor([0, 3, 6]))
    assert not torch.isfinite(y[0, :3]).all() and torch.isfinite(y[0, 3:]).all()
    assert torch.equal(y[0, 3:], yc[0, 3:])
    got = st.mamba_chunk_scan_combined(x.float(), dt.float(), A.float(), B.float(), C.float(),
                                       seq_idx=torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.int32))
    assert rel_err(got[0, 3:], y[0, 3:]) < TOL[torch.float32]
