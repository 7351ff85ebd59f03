"""The decode steps' parameters and state in x's dtype (selscan's SELSCAN_STEP_D_T /
SELSCAN_STEP_DELTA_BIAS_T / SELSCAN_STEP_STATE_T / SELSCAN_CONV_PARAMS_T).

selective_state_update's D / dt_bias and causal_conv1d_update's weight / bias may be float32 or x's
dtype; a float16 / bfloat16 model passes them in its own dtype (mamba_ssm's Mamba.step does), and
the ops then read them as they are: no conversion kernel a layer a token. The SSM state may be
float32 or x's dtype too (mamba_ssm's and transformers' caches are in the model's dtype): stepped
in float32, stored rounded, no copy. Checked here: the results are bitwise those of float32
parameters of the same values (the op converts on load, the math is unchanged) and, for a state in
x's dtype, y bitwise that of a float32 state of the same values and the state that state's result
rounded; against the float64 reference too; a mix of the two dtypes works (the op widens); another
dtype is refused by the op (cast to float32 by the wrappers); the fake kernels agree (opcheck); and
no cast or copy runs: no such aten op in the call (TorchDispatchMode for the wrapper, torch.profiler
for the C++ op as well) and, on a GPU, one kernel a call (and a CUDA graph replays it).

CPU always; CUDA where a GPU and the extension's CUDA kernels are present (skipped otherwise).
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import selscan_torch as st
from _common import DEVICES, TOL, cuda_only, rel_err
from selscan_torch.reference import selective_state_update_ref
from selscan_torch.reference_block import causal_conv1d_update_ref

HALVES = [torch.float16, torch.bfloat16]


def step_inputs(dtype, device, batch=4, dim=24, N=16, G=1, n_cache=6, seed=0):
    """The step's inputs: x, dt, B, C, z in dtype; D and dt_bias in dtype too (the model's), state
    and A float32."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    Bshape = (batch, N) if G == 1 else (batch, G, N)
    return dict(state=r(n_cache, dim, N, dt=torch.float32), x=r(batch, dim), dt=r(batch, dim, scale=0.5),
                A=(-(torch.rand(dim, N, generator=g) + 0.3)).to(device), B=r(*Bshape), C=r(*Bshape),
                D=r(dim), z=r(batch, dim), dt_bias=r(dim, scale=0.3))


def run_step(s, D, dt_bias, idx):
    state = s["state"].clone()
    out = st.selective_state_update(state, s["x"], s["dt"], s["A"], s["B"], s["C"], D, s["z"], dt_bias, True,
                                    state_batch_indices=idx)
    return out, state


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("G,N,index", [(1, 16, True), (2, 16, False), (1, 5, True), (3, 64, False)])
def test_step_params_in_x_dtype_bitwise(device, dtype, G, N, index):
    s = step_inputs(dtype, device, G=G, N=N, dim=24)
    idx = torch.tensor([5, -1, 0, 2], dtype=torch.int32, device=device) if index else None
    if not index:
        s["state"] = s["state"][:4].clone()
    out_t, state_t = run_step(s, s["D"], s["dt_bias"], idx)
    out_f, state_f = run_step(s, s["D"].float(), s["dt_bias"].float(), idx)
    assert out_t.dtype == dtype
    assert torch.equal(out_t, out_f) and torch.equal(state_t, state_f)
    ref_out, ref_state = selective_state_update_ref(s["state"].cpu(), s["x"].cpu(), s["dt"].cpu(), s["A"].cpu(),
                                                    s["B"].cpu(), s["C"].cpu(), s["D"].cpu(), s["z"].cpu(),
                                                    s["dt_bias"].cpu(), True, None if idx is None else idx.cpu())
    assert rel_err(out_t, ref_out) < TOL[dtype]
    assert rel_err(state_t, ref_state) < 2e-6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("G,N,index,params_t", [(1, 16, True, True), (2, 16, False, True), (1, 5, True, False),
                                                (3, 64, False, True), (1, 8, True, True)])
def test_step_state_in_x_dtype(device, dtype, G, N, index, params_t):
    """A state in x's dtype: y bitwise that of a float32 state of the same values, the new state
    that state's result rounded to x's dtype (to nearest even, as .to() rounds)."""
    s = step_inputs(dtype, device, G=G, N=N, dim=24)
    idx = torch.tensor([5, -1, 0, 2], dtype=torch.int32, device=device) if index else None
    s["state"] = (s["state"] if index else s["state"][:4]).to(dtype)
    D, b = (s["D"], s["dt_bias"]) if params_t else (s["D"].float(), s["dt_bias"].float())
    state_t = s["state"].clone()
    out_t = st.selective_state_update(state_t, s["x"], s["dt"], s["A"], s["B"], s["C"], D, s["z"], b, True,
                                      state_batch_indices=idx)
    state_f = s["state"].float()
    out_f = st.selective_state_update(state_f, s["x"], s["dt"], s["A"], s["B"], s["C"], D.float(), s["z"], b.float(),
                                      True, state_batch_indices=idx)
    assert state_t.dtype == dtype and out_t.dtype == dtype
    assert torch.equal(out_t, out_f)
    assert torch.equal(state_t, state_f.to(dtype))
    ref_out, ref_state = selective_state_update_ref(s["state"].cpu(), s["x"].cpu(), s["dt"].cpu(), s["A"].cpu(),
                                                    s["B"].cpu(), s["C"].cpu(), s["D"].cpu(), s["z"].cpu(),
                                                    s["dt_bias"].cpu(), True, None if idx is None else idx.cpu())
    assert rel_err(out_t, ref_out) < TOL[dtype]
    assert rel_err(state_t, ref_state) < TOL[dtype]
    if index:
        assert torch.equal(state_t[[1, 3, 4]], s["state"][[1, 3, 4]])  # untouched rows


@pytest.mark.parametrize("device", DEVICES)
def test_step_state_other_dtype(device):
    """A state neither float32 nor x's dtype: refused by the op and by selective_state_update;
    the integrations' wrapper steps it through a float32 copy."""
    import selscan_torch.integrations as si

    s = step_inputs(torch.bfloat16, device)
    state = s["state"][:4].half()
    with pytest.raises(TypeError, match="argument 'state': wrong dtype: want float32 or"):
        torch.ops.selscan.step(state, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"], None, True)
    with pytest.raises(TypeError, match="argument 'state': wrong dtype: want float32 or"):
        st.selective_state_update(state, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"], True)
    s1, s2 = state.clone(), state.float()
    o1 = si._standin_selective_state_update(s1, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"],
                                            True)
    o2 = st.selective_state_update(s2, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"], True)
    assert torch.equal(o1, o2) and torch.equal(s1, s2.half())


def multihead_inputs(device, seed, state_dtype):
    """Mamba-2 shaped step inputs (batch 2, 4 heads of 3, N 8, 2 groups) in bf16, A float32, the
    state in state_dtype: state, x, dt, A, B, C, D, dt_bias."""
    batch, nh, hd, N = 2, 4, 3, 8
    g = torch.Generator().manual_seed(seed)
    bf = torch.bfloat16
    state = torch.randn(batch, nh, hd, N, generator=g).to(state_dtype).to(device)
    x, dt = (torch.randn(batch, nh, hd, generator=g).to(bf).to(device) for _ in range(2))
    A = (-(torch.rand(nh, hd, N, generator=g) + 0.5)).to(device)
    B, C = (torch.randn(batch, 2, N, generator=g).to(bf).to(device) for _ in range(2))
    D, bias = (torch.randn(nh, hd, generator=g).to(bf).to(device) for _ in range(2))
    return state, x, dt, A, B, C, D, bias


@pytest.mark.parametrize("device", DEVICES)
def test_step_state_multihead_and_opcheck(device):
    """Mamba-2 shapes with a state in x's dtype (folded as a view, stepped in place); opcheck."""
    bf = torch.bfloat16
    state, x, dt, A, B, C, D, _ = multihead_inputs(device, 9, bf)
    s1, s2 = state.clone(), state.float()
    o1 = st.selective_state_update(s1, x, dt, A, B, C, D, dt_softplus=True)
    o2 = st.selective_state_update(s2, x, dt, A, B, C, D, dt_softplus=True)
    assert torch.equal(o1, o2) and torch.equal(s1, s2.to(bf))
    s = step_inputs(bf, device)
    torch.library.opcheck(torch.ops.selscan.step, (s["state"][:4].to(bf), s["x"], s["dt"], s["A"], s["B"], s["C"],
                                                   s["D"], s["z"], s["dt_bias"], None, True))


@pytest.mark.parametrize("device", DEVICES)
def test_step_params_one_given_and_mixed(device):
    """Only D, only dt_bias, and mixes (D in x's dtype beside a float32 dt_bias, as transformers'
    Mamba passes them, and the other way round): each read in its own dtype."""
    s = step_inputs(torch.bfloat16, device)
    idx = torch.tensor([5, -1, 0, 2], dtype=torch.int32, device=device)
    for D, b in [(s["D"], None), (None, s["dt_bias"]), (s["D"], s["dt_bias"].float()), (s["D"].float(), s["dt_bias"])]:
        got = run_step(s, D, b, idx)
        want = run_step(s, None if D is None else D.float(), None if b is None else b.float(), idx)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("device", DEVICES)
def test_step_params_other_dtype(device):
    """The op takes float32 or x's dtype only (TypeError naming the argument); the wrapper casts
    another floating dtype to float32."""
    s = step_inputs(torch.bfloat16, device)
    state = s["state"][:4].clone()
    args = [state, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"].half(), s["z"], s["dt_bias"], None, True]
    with pytest.raises(TypeError, match="argument 'D': wrong dtype: want float32 or"):
        torch.ops.selscan.step(*args)
    args[6], args[8] = s["D"], s["dt_bias"].double()
    with pytest.raises(TypeError, match="argument 'dt_bias': wrong dtype: want float32 or"):
        torch.ops.selscan.step(*args)
    with pytest.raises(TypeError, match="argument 'dt_bias': wrong dtype: want float32 or"):  # the fake kernel's rule
        with torch._subclasses.FakeTensorMode() as m:
            torch.ops.selscan.step(*[m.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    s4 = dict(s, state=s["state"][:4].clone())
    got = run_step(s4, s["D"].half(), s["dt_bias"].double(), None)
    want = run_step(s4, s["D"].half().float(), s["dt_bias"].double().float(), None)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("device", DEVICES)
def test_step_params_multihead(device):
    """Mamba-2 shapes: D / dt_bias (nheads, hdim) in x's dtype, folded with the heads."""
    state, x, dt, A, B, C, D, bias = multihead_inputs(device, 7, torch.float32)
    s1, s2 = state.clone(), state.clone()
    o1 = st.selective_state_update(s1, x, dt, A, B, C, D, dt_bias=bias, dt_softplus=True)
    o2 = st.selective_state_update(s2, x, dt, A, B, C, D.float(), dt_bias=bias.float(), dt_softplus=True)
    assert torch.equal(o1, o2) and torch.equal(s1, s2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALVES)
def test_step_params_opcheck(device, dtype):
    """The fake kernel accepts x's dtype for D / dt_bias (torch.compile, CUDA graphs)."""
    s = step_inputs(dtype, device)
    torch.library.opcheck(torch.ops.selscan.step, (s["state"][:4].clone(), s["x"], s["dt"], s["A"], s["B"], s["C"],
                                                   s["D"], s["z"], s["dt_bias"], None, True))


def conv_inputs(dtype, device, batch=3, dim=20, W=4, state_len=5, n_cache=None, L=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, dim, *(() if L is None else (L,)), generator=g).to(dtype).to(device)
    w = torch.randn(dim, W, generator=g).to(dtype).to(device)
    b = torch.randn(dim, generator=g).to(dtype).to(device)
    state = torch.randn(n_cache or batch, dim, state_len, generator=g).to(dtype).to(device)
    return x, w, b, state


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("W,state_len,L,act,index", [(4, 3, None, "silu", False), (4, 6, 3, None, True),
                                                     (2, 1, None, "silu", True), (3, 2, 2, "silu", False)])
def test_conv_update_params_in_x_dtype_bitwise(device, dtype, W, state_len, L, act, index):
    n_cache = 5 if index else None
    x, w, b, state = conv_inputs(dtype, device, W=W, state_len=state_len, n_cache=n_cache, L=L)
    idx = torch.tensor([4, -1, 1], dtype=torch.int32, device=device) if index else None
    s_t, s_f = state.clone(), state.clone()
    y_t = st.causal_conv1d_update(x, s_t, w, b, act, conv_state_indices=idx)
    y_f = st.causal_conv1d_update(x, s_f, w.float(), b.float(), act, conv_state_indices=idx)
    assert y_t.dtype == dtype
    assert torch.equal(y_t, y_f) and torch.equal(s_t, s_f)
    ref, ref_state = causal_conv1d_update_ref(x.cpu(), state.cpu(), w.cpu(), b.cpu(), act,
                                              conv_state_indices=None if idx is None else idx.cpu())
    assert rel_err(y_t, ref) < TOL[dtype]
    assert torch.equal(s_t.cpu(), ref_state.to(dtype))
    # nn.Conv1d's (dim, 1, W) weight in x's dtype, no bias; a mix (bias float32)
    s1, s2 = state.clone(), state.clone()
    y1 = st.causal_conv1d_update(x, s1, w.unsqueeze(1), None, act, conv_state_indices=idx)
    y2 = st.causal_conv1d_update(x, s2, w.float(), None, act, conv_state_indices=idx)
    assert torch.equal(y1, y2) and torch.equal(s1, s2)
    s1, s2 = state.clone(), state.clone()
    y1 = st.causal_conv1d_update(x, s1, w, b.float(), act, conv_state_indices=idx)
    y2 = st.causal_conv1d_update(x, s2, w.float(), b.float(), act, conv_state_indices=idx)
    assert torch.equal(y1, y2) and torch.equal(s1, s2)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_update_params_other_dtype_and_opcheck(device):
    x, w, b, state = conv_inputs(torch.bfloat16, device)
    with pytest.raises(TypeError, match="argument 'weight': wrong dtype: want float32 or"):
        torch.ops.selscan.conv_step(state.clone(), x, w.half(), b, None, True)
    with pytest.raises(TypeError, match="argument 'bias': wrong dtype: want float32 or"):
        torch.ops.selscan.conv_step(state.clone(), x, w, b.double(), None, True)
    s1, s2 = state.clone(), state.clone()  # the wrapper casts another floating dtype to float32
    y1 = st.causal_conv1d_update(x, s1, w.half(), b, "silu")
    y2 = st.causal_conv1d_update(x, s2, w.half().float(), b.float(), "silu")
    assert torch.equal(y1, y2) and torch.equal(s1, s2)
    torch.library.opcheck(torch.ops.selscan.conv_step, (state.clone(), x, w, b, None, True))
    torch.library.opcheck(torch.ops.selscan.conv_step, (state.clone(), x.unsqueeze(-1).expand(3, 20, 2).contiguous(),
                                                        w, b, torch.tensor([1, -1, 0], dtype=torch.int32,
                                                                           device=device), False))


# ---- no cast, no copy ------------------------------------------------------------------------------

_CASTS = ("_to_copy", "copy_", "clone", "contiguous", "_copy_from")  # aten op names (either spelling) holding these


class _Record(TorchDispatchMode):
    """The aten / selscan ops a call dispatches (outside the ops' own kernels), with their args."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((str(func), args))
        return func(*args, **(kwargs or {}))


def _casts(names):
    return [n for n in names if any(c in n for c in _CASTS) or n in ("aten::to", "aten.to") or n.startswith("aten.to.")]


def _mamba_step_call(device, dtype, state_t=False, bias_f32=False):
    """One layer's decode as mamba_ssm's Mamba.step makes it (parameters in the model's dtype,
    the conv weight a (dim, 1, W) view, a float32 SSM state or (state_t) one in the model's dtype);
    bias_f32: dt_bias float32 beside D in the model's dtype (transformers' Mamba casts it itself)."""
    s = step_inputs(dtype, device, batch=2, dim=16, N=16, n_cache=2)
    if state_t:
        s["state"] = s["state"].to(dtype)
    if bias_f32:
        s["dt_bias"] = s["dt_bias"].float()
    x, w, b, cstate = conv_inputs(dtype, device, batch=2, dim=16, W=4, state_len=4)
    w3 = w.unsqueeze(1)

    def call():
        xc = st.causal_conv1d_update(x, cstate, w3[:, 0, :], b, "silu")
        return st.selective_state_update(s["state"], xc, s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                         s["dt_bias"], True)

    return call, s


CALLS = [(False, False), (True, False), (True, True)]  # (state_t, bias_f32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("state_t,bias_f32", CALLS)
def test_no_cast_dispatched(device, dtype, state_t, bias_f32):
    """TorchDispatchMode: the wrappers dispatch the two ops and nothing that casts or copies; the
    ops receive the caller's parameter tensors (and state) themselves."""
    call, s = _mamba_step_call(device, dtype, state_t, bias_f32)
    with _Record() as rec:
        call()
    names = [n for n, _ in rec.calls]
    assert _casts(names) == [], names
    assert "selscan.conv_step.default" in names and "selscan.step.default" in names, names
    step_args = next(a for n, a in rec.calls if n == "selscan.step.default")
    assert step_args[0] is s["state"] and step_args[6] is s["D"] and step_args[8] is s["dt_bias"]
    conv_args = next(a for n, a in rec.calls if n == "selscan.conv_step.default")
    assert conv_args[2].dtype == dtype and conv_args[3].dtype == dtype


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("state_t,bias_f32", CALLS)
def test_no_cast_in_the_ops_cpu(dtype, state_t, bias_f32):
    """torch.profiler (every aten op, the C++ kernels' own included): no cast or copy in one layer's
    decode with parameters (and state) in x's dtype, or a float32 dt_bias beside them; with
    parameters of a third dtype the casts show (the probe sees them)."""
    call, s = _mamba_step_call("cpu", dtype, state_t, bias_f32)
    call()  # warm up

    def ops():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            call()
        return [e.name for e in prof.events()]

    names = ops()
    assert any("selscan::step" in n for n in names), names
    assert _casts(names) == [], names
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    s["D"] = s["D"].to(other)  # not x's dtype: the wrapper casts it (to float32)
    assert _casts(ops()) != []


@cuda_only
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("state_t,bias_f32", CALLS)
def test_one_kernel_a_step_cuda(dtype, state_t, bias_f32):
    """On the GPU: one kernel for the conv update and one for the step, parameters (and state) in
    x's dtype (or a float32 dt_bias beside them)."""
    call, _ = _mamba_step_call("cuda", dtype, state_t, bias_f32)
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 2, kernels


@cuda_only
@pytest.mark.parametrize("dtype", HALVES)
def test_cuda_graph_decode_params_state_t(dtype):
    """A decode loop (conv update + step, parameters and state in x's dtype, batch 5 x 256
    channels, N = 16: the fast step kernels) captured in a CUDA graph: its replay equals the eager
    loop bitwise."""
    batch, dim, T = 5, 256, 6
    s = step_inputs(dtype, "cuda", batch=batch, dim=dim, N=16, n_cache=batch)
    s["state"] = s["state"].to(dtype)
    x0, w, b, cstate0 = conv_inputs(dtype, "cuda", batch=batch, dim=dim, W=4, state_len=3)
    xs = torch.randn(T, batch, dim, device="cuda").to(dtype)
    state, cstate = s["state"].clone(), cstate0.clone()
    x_buf = torch.empty(batch, dim, device="cuda", dtype=dtype)
    outs = torch.empty(T, batch, dim, device="cuda", dtype=dtype)

    def loop(state, cstate, out):
        for t in range(T):
            x_buf.copy_(xs[t])
            xc = st.causal_conv1d_update(x_buf, cstate, w, b, "silu")
            out[t] = st.selective_state_update(state, xc, s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                               s["dt_bias"], True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        loop(state, cstate, outs)  # warm up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loop(state, cstate, outs)
    state.copy_(s["state"])
    cstate.copy_(cstate0)
    graph.replay()
    torch.cuda.synchronize()
    ref_state, ref_cstate = s["state"].clone(), cstate0.clone()
    ref_outs = torch.empty_like(outs)
    loop(ref_state, ref_cstate, ref_outs)
    assert torch.equal(outs, ref_outs)
    assert torch.equal(state, ref_state) and torch.equal(cstate, ref_cstate)
