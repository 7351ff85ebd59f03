"""selective_state_update(..., A_is_log=True): A is Mamba's A_log and the step takes
A = -exp(A_log) inside the kernel (selscan's SELSCAN_STEP_A_LOG), so a decode step runs no exp /
neg kernels on the parameter.

Checked: the result against the same call with A = -torch.exp(A_log) passed directly (CUDA: bitwise,
selscan's expf is the exp torch runs there; CPU: the fast path's vector exp, within an ulp or two of
A, so y and the state within a rounding), and against the float64 reference; Mamba-2 shapes (A_log
folded with the heads); the fake kernel (opcheck); a wrong A_log is refused as A is; the
integrations' wrapper forwards the keyword; the ONNX export branch hands the export op A itself.

CPU always; CUDA where a GPU and the extension's CUDA kernels are present (skipped otherwise).
"""
import pytest
import torch

import selscan_torch as st
from _common import DEVICES, TOL, cuda_only, lowp_tol, rel_err
from selscan_torch.reference import selective_state_update_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# CPU: y and the state of A_is_log against A = -exp(A_log) given (A within ~2 ulp: the fast
# path's vector exp against torch's): f32 a few ulp; in f16 / bf16 k = 2: each call rounds its own
# float32 result to the dtype
NEAR = {t: lowp_tol(t, 5e-7, 2) for t in DTYPES}


def alog_inputs(dtype, device, batch=4, dim=24, N=16, G=1, n_cache=6, seed=0):
    """The step's inputs with A_log = log(U[0.5, 17)) (Mamba's log(1 .. N) and around), float32."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    Bshape = (batch, N) if G == 1 else (batch, G, N)
    A_log = torch.log(torch.rand(dim, N, generator=g) * 16.5 + 0.5).to(device)
    return dict(state=r(n_cache, dim, N, dt=torch.float32), x=r(batch, dim), dt=r(batch, dim, scale=0.5), A_log=A_log,
                B=r(*Bshape), C=r(*Bshape), D=r(dim, dt=torch.float32), z=r(batch, dim),
                dt_bias=r(dim, scale=0.3, dt=torch.float32))


def step(s, state, A, idx, **kw):
    state = state.clone()
    out = st.selective_state_update(state, s["x"], s["dt"], A, s["B"], s["C"], s["D"], s["z"], s["dt_bias"], True,
                                    state_batch_indices=idx, **kw)
    return out, state


def check_same(device, dtype, got, want):
    if device == "cuda":  # selscan's expf is torch's exp on CUDA: bitwise
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    else:
        assert rel_err(got[0], want[0]) <= NEAR[dtype]
        assert rel_err(got[1], want[1]) <= (NEAR[dtype] if got[1].dtype != torch.float32 else 5e-7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("G,N,index,state_t", [(1, 16, True, False), (2, 16, False, True), (1, 5, True, True),
                                               (3, 64, False, False), (1, 8, True, False)])
def test_step_a_log(device, dtype, G, N, index, state_t):
    s = alog_inputs(dtype, device, G=G, N=N)
    idx = torch.tensor([5, -1, 0, 2], dtype=torch.int32, device=device) if index else None
    state = s["state"] if index else s["state"][:4].clone()
    if state_t:
        state = state.to(dtype)
    got = step(s, state, s["A_log"], idx, A_is_log=True)
    want = step(s, state, -torch.exp(s["A_log"]), idx)
    assert got[0].dtype == dtype and got[1].dtype == state.dtype
    check_same(device, dtype, got, want)
    ref_out, ref_state = selective_state_update_ref(state.cpu(), s["x"].cpu(), s["dt"].cpu(),
                                                    -torch.exp(s["A_log"].cpu().double()), s["B"].cpu(),
                                                    s["C"].cpu(), s["D"].cpu(), s["z"].cpu(), s["dt_bias"].cpu(), True,
                                                    None if idx is None else idx.cpu())
    assert rel_err(got[0], ref_out) < TOL[dtype]
    assert rel_err(got[1], ref_state) < (TOL[dtype] if state_t else 2e-6)
    if index:
        assert torch.equal(got[1][[1, 3, 4]], state[[1, 3, 4]])  # rows no batch row uses: untouched


@cuda_only
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,dim", [(1, 2048), (16, 1024), (64, 512), (3, 40), (64, 5120)])
def test_step_a_log_cuda_kernels_bitwise(dtype, batch, dim):
    """N = 16 with the common operands: the latency kernel (up to 32 blocks of 64 channels an SM)
    and, at 64 x 5120 on an H100 / H200, the row-looping one: bitwise the call with A =
    -torch.exp(A_log)."""
    s = alog_inputs(dtype, "cuda", batch=batch, dim=dim, N=16, n_cache=batch, seed=3)
    for state in (s["state"], s["state"].to(dtype)):
        got = step(s, state, s["A_log"], None, A_is_log=True)
        want = step(s, state, -torch.exp(s["A_log"]), None)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("device", DEVICES)
def test_step_a_log_multihead(device):
    """Mamba-2 shapes: A_log (nheads, hdim, N), folded with the heads as A is."""
    batch, nh, hd, N = 2, 4, 3, 8
    g = torch.Generator().manual_seed(5)
    bf = torch.bfloat16
    state = torch.randn(batch, nh, hd, N, generator=g).to(device)
    x, dt = (torch.randn(batch, nh, hd, generator=g).to(bf).to(device) for _ in range(2))
    A_log = torch.log(torch.rand(nh, hd, N, generator=g) * 8 + 1).to(device)
    B, C = (torch.randn(batch, 2, N, generator=g).to(bf).to(device) for _ in range(2))
    D = torch.randn(nh, hd, generator=g).to(device)
    s1, s2 = state.clone(), state.clone()
    o1 = st.selective_state_update(s1, x, dt, A_log, B, C, D, dt_softplus=True, A_is_log=True)
    o2 = st.selective_state_update(s2, x, dt, -torch.exp(A_log), B, C, D, dt_softplus=True)
    check_same(device, bf, (o1, s1), (o2, s2))
    ref_out, ref_state = selective_state_update_ref(state.cpu(), x.cpu(), dt.cpu(), -torch.exp(A_log.cpu().double()),
                                                    B.cpu(), C.cpu(), D.cpu(), None, None, True)
    assert rel_err(o1, ref_out) < TOL[bf] and rel_err(s1, ref_state) < 2e-6


@pytest.mark.parametrize("device", DEVICES)
def test_step_a_log_rules(device):
    """A_log is checked as A is (the same error, naming A); another floating dtype is cast to
    float32 by the wrapper; the op's default is A itself; the fake kernel agrees (opcheck)."""
    s = alog_inputs(torch.bfloat16, device)
    state = s["state"][:4].clone()
    for bad in (s["A_log"][:, :5], s["A_log"][:10]):
        msgs = []
        for kw in ({}, {"A_is_log": True}):
            with pytest.raises(ValueError, match="argument 'A': wrong shape") as e:
                step(s, state, bad, None, **kw)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1]
        with pytest.raises(ValueError, match="argument 'A': wrong shape"):
            torch.ops.selscan.step(state.clone(), s["x"], s["dt"], bad, s["B"], s["C"], s["D"], s["z"], s["dt_bias"],
                                   None, True, True)
    with pytest.raises(TypeError, match="argument 'A': wrong dtype: want float32"):  # the op takes float32 A_log only
        torch.ops.selscan.step(state.clone(), s["x"], s["dt"], s["A_log"].double(), s["B"], s["C"], s["D"], s["z"],
                               s["dt_bias"], None, True, True)
    got = step(s, state, s["A_log"].double(), None, A_is_log=True)  # the wrapper casts
    want = step(s, state, s["A_log"], None, A_is_log=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    y1 = torch.ops.selscan.step(state.clone(), s["x"], s["dt"], -torch.exp(s["A_log"]), s["B"], s["C"], s["D"], s["z"],
                                s["dt_bias"], None, True)
    assert torch.equal(y1, step(s, state, -torch.exp(s["A_log"]), None)[0])
    torch.library.opcheck(torch.ops.selscan.step, (state.clone(), s["x"], s["dt"], s["A_log"], s["B"], s["C"], s["D"],
                                                   s["z"], s["dt_bias"], None, True, True))


@pytest.mark.parametrize("device", DEVICES)
def test_step_a_log_integrations_forwards(device):
    """selscan_torch.integrations' decode-step stand-in (_standin_selective_state_update) passes
    A_is_log on (a state in x's dtype in place, and one of another dtype through its float32 copy)."""
    from selscan_torch.integrations import _standin_selective_state_update as ssu

    s = alog_inputs(torch.bfloat16, device)
    for state in (s["state"][:4].to(torch.bfloat16), s["state"][:4].half()):
        s1, s2 = state.clone(), state.clone()
        o1 = ssu(s1, s["x"], s["dt"], s["A_log"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"], True, A_is_log=True)
        o2 = ssu(s2, s["x"], s["dt"], -torch.exp(s["A_log"]), s["B"], s["C"], s["D"], s["z"], s["dt_bias"], True)
        check_same(device, torch.bfloat16, (o1, s1), (o2, s2))
        s3 = state.clone()
        o3 = ssu(s3, s["x"], s["dt"], s["A_log"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"], True, A_is_log=False)
        assert not torch.equal(o3, o1)  # A_log read as A: another result (the keyword is not dropped)


def test_step_a_log_onnx_branch(monkeypatch):
    """During ONNX export the step's export op takes A itself: A_is_log=True hands it -exp(A_log)."""
    s = alog_inputs(torch.float32, "cpu")
    seen = {}

    def export_step(state, x, dt, A, *rest):
        seen["A"] = A
        y = torch.ops.selscan.step(state, x, dt, A, *rest)
        return y

    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    prev = st._register_onnx_step(export_step)  # the hook selscan_torch.onnx registers its export step with
    try:
        state = s["state"][:4].clone()
        step(s, state, s["A_log"], None, A_is_log=True)
    finally:
        assert st._register_onnx_step(prev) is export_step
    assert torch.equal(seen["A"], -torch.exp(s["A_log"]))
