"""What the selscan_torch test files share (imported as `_common`: pytest puts this folder on
sys.path): the devices tested, the tolerances against the float64 reference (lowp_tol: the one
rule for float16 / bfloat16 results), the scaled error, and the scan's random inputs."""
import contextlib
import importlib

import pytest
import torch

import selscan_torch as st

HAS_CUDA = torch.cuda.is_available() and st.has_cuda_kernels()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and the CUDA kernels")

# ---- low-precision tolerances (issue 41 item 5): one scheme, every float16 / bfloat16 check uses it ---
# u(T) = 2^-p, the unit roundoff of round-to-nearest in T (p significand bits, the implicit one
# counted): rounding x to T moves it by at most u(T) |x|, so rounding a whole result to T moves
# rel_err (max |out - ref| / max |ref|) by at most u(T).
U = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def lowp_tol(dtype, f32_tol, k, own=None):
    """The bound on rel_err(out, ref) for a result computed with `dtype` tensors, ref the float64
    reference on the same dtype-rounded inputs (cotangents included):

        f32_tol + k * max(own, u(dtype))        (float32 / float64: f32_tol alone)

    f32_tol  the same comparison's float32 tolerance: the ops compute in float32, that error stays;
    own      the error the reference itself makes in dtype's rounding: None for a result the op
             rounds once from float32 (its bound u(dtype) then: rel_err(ref.to(dtype), ref) <= u),
             else the measured rel_err of the reference run with the same intermediate roundings
             (a composite layer, whose condition it measures; never taken below u);
    k        how many such errors may lie between out and ref, with its reason where it is used."""
    if dtype not in (torch.float16, torch.bfloat16):
        return f32_tol
    return f32_tol + k * max(U[dtype] if own is None else own, U[dtype])


# max |out - ref| / max |ref| for outputs (TOL) and gradients (GTOL), by the dtype of the compared
# tensor: float32 as measured; float16 / bfloat16 by lowp_tol with k = 1: the op computes in float32
# and rounds the result once (checks that compare two rounded results, or carry more roundings, call
# lowp_tol with their own k)
TOL32, GTOL32 = 2e-5, 1e-4
TOL = {t: lowp_tol(t, TOL32, 1) for t in (torch.float32, torch.float16, torch.bfloat16)}
GTOL = {t: lowp_tol(t, GTOL32, 1) for t in (torch.float32, torch.float16, torch.bfloat16)}


def rel_err(a, b):
    """max |a - b| over max |b| (scaled error, robust to tiny entries); tensors or numpy arrays."""
    a = a.detach().double().cpu() if torch.is_tensor(a) else torch.as_tensor(a).double()
    b = b.detach().double().cpu() if torch.is_tensor(b) else torch.as_tensor(b).double()
    assert a.shape == b.shape, (a.shape, b.shape)
    if b.numel() == 0:
        return 0.0
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def scan_inputs(g, batch, dim, L, N, bc="var3", G=2, dtype=torch.float32, D=True, z=True, bias=True, h0_rows=None,
                a_offset=0.3, device="cpu"):
    """selective_scan_fn's inputs by argument name, drawn from the generator g (always in this
    order: u, delta, A, D, z, delta_bias, h0, B, C). A = -(U[0, 1) + a_offset); bc: "fixed" ((dim, N)
    float32), "var3" ((batch, N, L)) or else (batch, G, N, L); h0 (h0_rows, dim, N) unless
    h0_rows is None."""

    def r(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    x = dict(
        u=r(batch, dim, L),
        delta=r(batch, dim, L, scale=0.5),
        A=(-(torch.rand(dim, N, generator=g) + a_offset)).to(device),
        D=r(dim, dt=torch.float32) if D else None,
        z=r(batch, dim, L) if z else None,
        delta_bias=r(dim, scale=0.3, dt=torch.float32) if bias else None,
        h0=r(h0_rows, dim, N, dt=torch.float32) if h0_rows is not None else None,
    )
    if bc == "fixed":
        x["B"], x["C"] = r(dim, N, dt=torch.float32), r(dim, N, dt=torch.float32)
    elif bc == "var3":
        x["B"], x["C"] = r(batch, N, L), r(batch, N, L)
    else:
        x["B"], x["C"] = r(batch, G, N, L), r(batch, G, N, L)
    return x


def make_inputs(batch=2, dim=8, L=37, N=5, bc="var3", G=2, dtype=torch.float32, device="cpu", D=True, z=True,
                bias=True, h0=False, seed=0, n_seqs=None):
    """scan_inputs from a fresh generator seeded with seed; h0 (n_seqs or batch rows) where h0."""
    rows = n_seqs if n_seqs is not None else batch
    return scan_inputs(torch.Generator().manual_seed(seed), batch, dim, L, N, bc, G, dtype, D, z, bias,
                       rows if h0 else None, device=device)


@contextlib.contextmanager
def transformers_own_path(module_name, names):
    """transformers' own PyTorch functions in module_name: where mamba_ssm / causal_conv1d import (a CUDA
    machine), transformers' decorated kernel names resolve to those, so a reference run puts the decorated
    PyTorch bodies in their places (read as the package reads them, integrations._tf_own: through kernels'
    Func module where kernels is installed, which inspect.unwrap alone did not see through), and back after."""
    import selscan_torch.integrations as si

    mod = importlib.import_module(module_name)
    saved = {n: mod.__dict__[n] for n in names if n in mod.__dict__}
    saved = {n: f for n, f in saved.items() if si._tf_own(f) is not f}
    try:
        for n, f in saved.items():
            setattr(mod, n, si._tf_own(f))
        # (a name still kernels' Func module: the reference would be the dispatcher, mamba_ssm's where it imports)
        assert not any(isinstance(mod.__dict__.get(n), torch.nn.Module) for n in names), module_name
        yield
    finally:
        for n, f in saved.items():
            setattr(mod, n, f)


class LoraLike(torch.nn.Module):
    """An adapter laid out as peft's LoRA layer (base_layer, lora_A / lora_B, .weight / .bias the base layer's):
    what it adds happens only when the module is called (the hostile user's stand-in, fifteenth session)."""

    def __init__(self, base, r=4):
        super().__init__()
        self.base_layer = base
        self.lora_A = torch.nn.Linear(base.in_features, r, bias=False)
        self.lora_B = torch.nn.Linear(r, base.out_features, bias=False)
        torch.nn.init.normal_(self.lora_B.weight, std=0.5)  # as after some training

    weight = property(lambda self: self.base_layer.weight)
    bias = property(lambda self: self.base_layer.bias)
    in_features = property(lambda self: self.base_layer.in_features)
    out_features = property(lambda self: self.base_layer.out_features)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x))


def adapt_mixers(model, names, how="lora"):
    """Each Mamba mixer's projections `names` wrapped in LoraLike (how="lora") or given a forward hook that
    doubles their output (how="hook": any submodule, a norm too); returns the model. Raises where no mixer
    has such a submodule (a case that would test nothing)."""
    found = 0
    for mod in list(model.modules()):
        if not hasattr(mod, "A_log"):
            continue
        for n in names:
            sub = getattr(mod, n, None)
            if how == "lora" and isinstance(sub, torch.nn.Linear):
                setattr(mod, n, LoraLike(sub).to(sub.weight.device))
            elif how == "hook" and isinstance(sub, torch.nn.Module):
                sub.register_forward_hook(lambda m, i, o: o * 2)
            else:
                continue
            found += 1
    assert found, f"no mixer of the model has {names} to adapt"
    return model


def fullgraph_training_loss(model, ids):
    """A training forward of model (no cache) under use_in_transformers() and torch.compile(fullgraph=True),
    backpropagated: (the loss, the targets of the ops its graph calls). The eager backend: dynamo's tracing is
    what is checked, not inductor's code."""
    import selscan_torch.integrations as si

    traced = []

    def backend(gm, example_inputs):
        traced.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    try:
        with si.use_in_transformers():
            loss = torch.compile(model, fullgraph=True, backend=backend)(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
    finally:
        torch._dynamo.reset()
    return loss, traced
