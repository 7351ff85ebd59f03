"""Issue 38: every operand x rule of every op, refused on CUDA exactly as on the CPU.

For each op (the scan with and without autograd, the decode step, with A and with A_log, the conv and
its update), each of its tensor operands and each bad-input class (a rank too many or too few, a 0-d
tensor, rank 5, a wrong size, a wrong dtype, on CUDA a CPU tensor among CUDA ones): the call raises
(never crashes the process: before issue 38's fix the CUDA build's first error message that formatted
a number killed it), the error is the CPU run's error (same type, same text up to the device's name),
it names the operand, and no input is changed (values and metadata). Each case runs on fresh inputs.
"""
import re

import pytest
import torch

import selscan_torch as st
from _common import HAS_CUDA, cuda_only

b, dim, L, N, W = 2, 8, 12, 4, 4


def scan_args(dev, grad):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g).to(dev)  # noqa: E731
    a = dict(u=r(b, dim, L), delta=r(b, dim, L).abs(), A=-r(dim, N).abs(), B=r(b, N, L), C=r(b, N, L), D=r(dim),
             z=r(b, dim, L), delta_bias=r(dim), h0=r(b, dim, N))
    if grad:
        a["u"].requires_grad_(True)
    return a


def run_scan(a):
    return st.selective_scan_fn(a["u"], a["delta"], a["A"], a["B"], a["C"], a["D"], a["z"], a["delta_bias"], True,
                                True, h0=a["h0"])


def step_args(dev, grad):
    g = torch.Generator().manual_seed(1)
    r = lambda *s, dt=torch.bfloat16: torch.randn(*s, generator=g).to(dev, dt)  # noqa: E731
    return dict(state=r(b, dim, N, dt=torch.float32), x=r(b, dim), dt=r(b, dim).abs(), A=-r(dim, N, dt=torch.float32),
                B=r(b, N), C=r(b, N), D=r(dim, dt=torch.float32), z=r(b, dim), dt_bias=r(dim, dt=torch.float32),
                state_batch_indices=torch.arange(b, dtype=torch.int32).to(dev))


def run_step(a, A_is_log=False):
    return st.selective_state_update(a["state"], a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"],
                                     a["dt_bias"], True, a["state_batch_indices"], A_is_log=A_is_log)


def conv_args(dev, grad):
    g = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=g).to(dev)  # noqa: E731
    a = dict(x=r(b, dim, L), weight=r(dim, W), bias=r(dim), initial_states=r(b, dim, W - 1))
    if grad:
        a["x"].requires_grad_(True)
    return a


def run_conv(a):
    return st.causal_conv1d_fn(a["x"], a["weight"], a["bias"], initial_states=a["initial_states"],
                               return_final_states=True, activation="silu")


def update_args(dev, grad):
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g).to(dev)  # noqa: E731
    return dict(x=r(b, dim), conv_state=r(b, dim, W - 1), weight=r(dim, W), bias=r(dim),
                conv_state_indices=torch.arange(b, dtype=torch.int32).to(dev))


def run_update(a):
    return st.causal_conv1d_update(a["x"], a["conv_state"], a["weight"], a["bias"], "silu",
                                   conv_state_indices=a["conv_state_indices"])


OPS = {
    "scan": (scan_args, run_scan, False),
    "scan_grad": (scan_args, run_scan, True),
    "step": (step_args, run_step, False),
    "step_alog": (step_args, lambda a: run_step(a, A_is_log=True), False),
    "conv": (conv_args, run_conv, False),
    "conv_grad": (conv_args, run_conv, True),
    "conv_update": (update_args, run_update, False),
}
OPERANDS = {k: list(f[0]("cpu", False)) for k, f in OPS.items()}
RULES = ["rank_up", "rank_down", "zero_d", "rank5", "size", "dtype", "device"]
CASES = [(op, name, rule) for op in OPS for name in OPERANDS[op] for rule in RULES]


def spoil(t, rule, dev):
    """t made bad by rule (None: the rule does not apply to this operand here)."""
    t = t.detach()
    if rule == "rank_up":
        return t.unsqueeze(0)
    if rule == "rank_down":
        return t[0] if t.dim() > 0 else None
    if rule == "zero_d":
        return t.reshape(-1)[0].clone()
    if rule == "rank5":
        return t.reshape(1, 1, 1, 1, -1) if t.dim() != 5 else None
    if rule == "size":  # one more along a dim the others fix (dim 1, or dim 0 of a vector; never L)
        return torch.cat([t, t.narrow(min(1, t.dim() - 1), 0, 1)], min(1, t.dim() - 1)) if t.dim() > 0 else None
    if rule == "dtype":  # an integer tensor stands in for any floating one, a float one for an index
        return t.to(torch.int64) if t.is_floating_point() else t.to(torch.float32)
    if rule == "device":  # a CPU tensor among CUDA ones
        return t.cpu() if dev == "cuda" else None
    raise AssertionError(rule)


def snapshot(a):
    return {k: (v.detach().clone(), v.shape, v.stride(), v.storage_offset(), v.dtype, v.device) for k, v in a.items()}


def outcome(op, name, rule, dev):
    """(exception type, its text with the device's name neutral) of the bad call, and whether the inputs stayed."""
    make, run, grad = OPS[op]
    a = make(dev, grad)
    bad = spoil(a[name], rule, dev)
    if bad is None:
        return None
    a[name] = bad
    before = snapshot(a)
    try:
        run(a)
        err = None
    except Exception as e:  # noqa: BLE001  (the type is part of what is compared)
        err = (type(e).__name__, re.sub(r"cuda(:\d+)?|cpu", "<dev>", str(e)))
    after = snapshot(a)
    same = all(before[k][1:] == after[k][1:] and torch.equal(before[k][0], after[k][0].detach()) for k in a)
    return err, same


@pytest.mark.parametrize("op,name,rule", CASES, ids=[f"{o}-{n}-{r}" for o, n, r in CASES])
@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if HAS_CUDA else []))
def test_refused_like_cpu(device, op, name, rule):
    if rule == "device" and device != "cuda":
        pytest.skip("a device mismatch needs CUDA")
    got = outcome(op, name, rule, device)
    if got is None:
        pytest.skip(f"{rule} does not apply to {name}")
    err, same = got
    assert same, f"{op}: an input changed on a refused call ({name} {rule})"
    assert err is not None, f"{op} accepted {name} with {rule}"
    kind, text = err
    assert kind in ("ValueError", "TypeError", "RuntimeError", "NotImplementedError"), err
    # the operand is named where it alone is wrong; a wrong size or rank may read as another valid
    # form (A's N one more than B's names B: A defines N; a 3-D x of the update is (batch, dim, L))
    assert rule in ("size", "rank_up", "rank_down") or re.search(rf"\b{re.escape(name)}\b", text), f"{op}: {name} not named: {text}"
    if device == "cuda" and rule != "device":
        assert err == outcome(op, name, rule, "cpu")[0], "CUDA's error differs from the CPU's"


@cuda_only
def test_refusal_leaves_the_process_usable():
    """After refusals on CUDA the same process still runs the ops (no sticky CUDA error)."""
    for op in ("scan", "step", "conv_update"):
        make, run, grad = OPS[op]
        a = make("cuda", grad)
        a[next(iter(a))] = a[next(iter(a))].unsqueeze(0)
        with pytest.raises((ValueError, TypeError)):
            run(a)
        run(make("cuda", grad))
    torch.cuda.synchronize()


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_forward_mode_ad_is_refused(grad):
    """Forward-mode AD's dual tensors: the kernels have no jvp. Under no_grad the ops' kernels are reached below
    the Autograd key, where the tangent was dropped (a silently wrong derivative, a hostile user's find): now
    refused naming forward-mode AD, as with gradients on."""
    g = torch.Generator().manual_seed(5)
    x, dt = torch.randn(1, 6, 2, 4, generator=g), torch.rand(1, 6, 2, generator=g)
    A, B, C = -torch.rand(2, generator=g) - 0.5, torch.randn(1, 6, 1, 3, generator=g), torch.randn(1, 6, 1, 3, generator=g)
    fwad = torch.autograd.forward_ad
    with torch.set_grad_enabled(grad), fwad.dual_level():
        dual = fwad.make_dual(x, torch.randn_like(x))
        with pytest.raises(NotImplementedError, match="forward-mode AD|jvp"):
            st.mamba_chunk_scan_combined(dual, dt, A, B, C, 4)
        with pytest.raises(NotImplementedError, match="forward-mode AD|jvp"):
            st.causal_conv1d_fn(fwad.make_dual(x[:, :, 0].transpose(1, 2).contiguous(), torch.ones(1, 4, 6)),
                                torch.randn(4, 4, generator=g))
    st.mamba_chunk_scan_combined(x, dt, A, B, C, 4)  # and the process goes on


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev"])
def test_func_transforms_are_refused_in_selscans_words(transform):
    """torch.func's transforms around a selscan function that needs its autograd.Function (an input requiring
    grad under the transform): refused naming selscan and the way that works (torch.autograd); before, torch's
    own error about functorch and setup_context (a hostile user's find). A plain autograd gradient still works."""
    g = torch.Generator().manual_seed(6)
    x, dt = torch.randn(1, 6, 2, 4, generator=g), torch.rand(1, 6, 2, generator=g)
    A, B, C = -torch.rand(2, generator=g) - 0.5, torch.randn(1, 6, 1, 3, generator=g), torch.randn(1, 6, 1, 3, generator=g)
    w = torch.randn(4, 4, generator=g)
    for f, inp in [(lambda v: st.mamba_chunk_scan_combined(v, dt, A, B, C, 4).sum(), x),
                   (lambda v: st.causal_conv1d_fn(v, w).sum(), x[:, :, 0].transpose(1, 2).contiguous()),
                   (lambda v: st.selective_scan_fn(v, dt[:, :, :1].expand(1, 6, 4).transpose(1, 2).contiguous(), -torch.ones(4, 3),
                                                   B[:, :, 0].transpose(1, 2).contiguous(), C[:, :, 0].transpose(1, 2).contiguous()).sum(),
                    x[:, :, 0].transpose(1, 2).contiguous())]:
        call = {"grad": lambda: torch.func.grad(f)(inp), "vjp": lambda: torch.func.vjp(f, inp),
                "jacrev": lambda: torch.func.jacrev(f)(inp)}[transform]
        with pytest.raises(NotImplementedError, match="selscan: torch.func transforms .* torch.autograd"):
            call()
        v = inp.clone().requires_grad_()
        f(v).backward()
        assert v.grad is not None and torch.isfinite(v.grad).all()


def test_vmap_of_an_input_requiring_grad_is_refused_not_a_dropped_gradient():
    """torch.func.vmap (and functionalize) over an input that requires grad: the wrapper inside says
    requires_grad False, so the kernels skipped autograd and the gradient through selscan was silently dropped
    (a reviewer's find: vmap's output had no grad_fn). Now the tensor beneath counts and the call is refused; the
    same vmap without gradients still runs."""
    g = torch.Generator().manual_seed(7)
    x, dt = torch.randn(2, 1, 6, 2, 4, generator=g), torch.rand(1, 6, 2, generator=g)
    A, B, C = -torch.rand(2, generator=g) - 0.5, torch.randn(1, 6, 1, 3, generator=g), torch.randn(1, 6, 1, 3, generator=g)
    w = torch.randn(4, 4, generator=g)
    scan = lambda v: st.mamba_chunk_scan_combined(v, dt, A, B, C, 4)  # noqa: E731
    conv = lambda v: st.causal_conv1d_fn(v[..., 0, :].transpose(1, 2).contiguous(), w)  # noqa: E731
    for f in (scan, conv):
        for transform in (torch.func.vmap, lambda h: (lambda v: torch.func.functionalize(h)(v[0])[None])):
            with pytest.raises(NotImplementedError, match="selscan: torch.func transforms"):
                transform(f)(x.clone().requires_grad_())
        got = torch.func.vmap(f)(x)  # no gradient wanted: runs, as each slice alone
        assert torch.equal(got, torch.stack([f(v) for v in x]))


def test_func_grad_through_the_fused_mamba2_layer_is_refused():
    """mamba_split_conv1d_scan_combined under torch.func.grad, either recompute mode: refused in selscan's words."""
    g = torch.Generator().manual_seed(8)
    H, P, N, W = 2, 4, 3, 4
    dim = H * P
    zx = torch.randn(1, 6, 2 * dim + 2 * N + H, generator=g)
    cw, cb = torch.randn(dim + 2 * N, W, generator=g), torch.randn(dim + 2 * N, generator=g)
    dtb, A, D = torch.randn(H, generator=g), -torch.rand(H, generator=g) - 0.5, torch.randn(H, generator=g)
    for recompute in (True, False):
        f = lambda v: st.mamba_split_conv1d_scan_combined(v, cw, cb, dtb, A, D, 4, headdim=P, ngroups=1,  # noqa: E731
                                                          recompute=recompute).sum()
        with pytest.raises(NotImplementedError, match="selscan: torch.func transforms"):
            torch.func.grad(f)(zx)
