"""bench/bench_autograd_bridge.py: what the torch package would pay on PyTorch's stable ABI (issue 42).

The stable ABI (torch/csrc/stable, torch 2.11 and 2.15 alike) has no autograd: an extension built on it
registers CPU / CUDA kernels only, and the autograd of selscan::fwd, selscan::conv_fwd and the grad-mode
refusal of selscan::step would move to Python. This script measures that move without building a second
package: --autograd python replaces the package's C++ Autograd-key kernels, in this process only, with
Python ones that do what the C++ ones do (the checkpoint saved when a gradient can be asked for, the
gradients autograd asks for, the decode updates' refusal of inputs requiring grad and state's version
bump), and --autograd cpp leaves the
package as built. Not mirrored: the CUDA unit-L copies of L-strided operands (the cases here are unit-L).

    python3 bench/bench_autograd_bridge.py --autograd cpp|python [--calls N]
        the host time of one call (bench/host_cost.py's cases, plus causal_conv1d_fn's), and one Mamba
        layer's scan at training size (fwd + bwd, bf16 operands): wall time a call, median of 7 rounds
    python3 bench/bench_autograd_bridge.py --autograd python -- bench/bench_models.py <its arguments>
        registers the Python kernels, then runs the given script in this process (models end to end)

Run each mode in several processes, alternating (bench/host_cost.py says why); bench/RESULTS.md "Issue 42:
the stable ABI's autograd, measured" has the H200 figures."""
import argparse
import os
import runpy
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_cost  # noqa: E402  (its cases and timer)
import selscan_torch as ss  # noqa: E402

_below = torch._C._AutoDispatchBelowAutograd
_ops = torch.ops.selscan


def _wants(*ts):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


class _Scan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last):
        with _below():
            y, h_last, ck = _ops.fwd.default(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last, True)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, h0, cu, ck)
        ctx.softplus = softplus
        ctx.mark_non_differentiable(ck)
        ctx.set_materialize_grads(False)
        return y, h_last, ck

    @staticmethod
    def backward(ctx, dy, dlast, _dck):
        s = ctx.saved_tensors
        mask = [int(n) for n in ctx.needs_input_grad[:9]]
        if not any(mask):
            return (None,) * 12
        if dlast is not None and dlast.dim() != 3:
            dlast = None  # the (0,) placeholder of an unreturned last_state
        if dy is None:
            dy = torch.zeros_like(s[0])
        with _below():
            g = _ops.bwd.default(*s[:10], dy, dlast, s[10], ctx.softplus, mask)
        return (*[g[i] if mask[i] else None for i in range(9)], None, None, None)


def _fwd_autograd(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last, save_ck):
    if _wants(u, delta, A, B, C, D, z, delta_bias, h0):
        return tuple(_Scan.apply(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last))
    with _below():
        return _ops.fwd.default(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last, save_ck)


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, init_state, cu, silu, final, dim_major):
        with _below():
            y, fs = _ops.conv_fwd.default(x, weight, bias, init_state, cu, silu, final, dim_major)
        ctx.save_for_backward(x, weight, bias, init_state, cu)
        ctx.silu = silu
        ctx.set_materialize_grads(False)
        return y, fs

    @staticmethod
    def backward(ctx, dy, dfinal):
        s = ctx.saved_tensors
        mask = [int(n) for n in ctx.needs_input_grad[:4]]
        if not any(mask):
            return (None,) * 8
        if dfinal is not None and dfinal.dim() != 3:
            dfinal = None
        if dy is None:
            dy = torch.zeros_like(s[0])
        with _below():
            g = _ops.conv_bwd.default(*s, dy, dfinal, ctx.silu, mask)
        return (*[g[i] if mask[i] else None for i in range(4)], None, None, None, None)


def _conv_autograd(x, weight, bias, init_state, cu, silu, final, dim_major):
    if _wants(x, weight, bias, init_state):
        return tuple(_Conv.apply(x, weight, bias, init_state, cu, silu, final, dim_major))
    with _below():
        return _ops.conv_fwd.default(x, weight, bias, init_state, cu, silu, final, dim_major)


def _inference_only(state, named, call):
    """The C++ InferenceOnlyUpdate's steps: grad refusal, inference-tensor state, the update below
    autograd, state's version bumped."""
    if torch.is_grad_enabled():
        for name, t in named:
            if t is not None and t.requires_grad:
                raise RuntimeError(f"selscan: the decode update is inference-only, but {name} requires grad")
    if state.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError("selscan: state is an inference tensor; update it under torch.inference_mode()")
    with _below():
        y = call()
    torch.autograd.graph.increment_version(state)
    return y


def _step_autograd(state, x, dt, A, B, C, D, z, dt_bias, state_index, softplus, A_is_log=False):
    return _inference_only(state, (("state", state), ("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D),
                                   ("z", z), ("dt_bias", dt_bias)),
                           lambda: _ops.step.default(state, x, dt, A, B, C, D, z, dt_bias, state_index, softplus,
                                                     A_is_log))


def _conv_step_autograd(state, x, weight, bias, state_index, silu):
    return _inference_only(state, (("conv_state", state), ("x", x), ("weight", weight), ("bias", bias)),
                           lambda: _ops.conv_step.default(state, x, weight, bias, state_index, silu))


_LIB = None


def use_python_autograd():
    """Replaces the package's C++ Autograd kernels with the Python ones above (this process only)."""
    global _LIB
    import warnings
    _LIB = torch.library.Library("selscan", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": the point here
        _LIB.impl("fwd", _fwd_autograd, "Autograd")
        _LIB.impl("conv_fwd", _conv_autograd, "Autograd")
        _LIB.impl("step", _step_autograd, "Autograd")
        _LIB.impl("conv_step", _conv_step_autograd, "Autograd")  # (the double-backward refusals of bwd /
        # conv_bwd are not replaced: these kernels call them below autograd)


def cases(dev):
    g = torch.Generator().manual_seed(1)
    out = host_cost.cases(dev)
    # causal_conv1d_fn: b1, dim 64, L 16, W 4 (host-bound); with grad and forward + backward
    x = torch.randn(1, 64, 16, generator=g).to(dev).requires_grad_()
    w = torch.randn(64, 4, generator=g).to(dev).requires_grad_()
    bi = torch.randn(64, generator=g).to(dev).requires_grad_()

    def conv_nograd():
        with torch.no_grad():
            ss.causal_conv1d_fn(x, w, bi, activation="silu")

    out += [("conv forward, no grad", "cfwd", conv_nograd),
            ("conv forward + backward", "cfwdbwd", lambda: ss.causal_conv1d_fn(x, w, bi, activation="silu").sum().backward())]
    if dev == "cuda":  # one Mamba-130m layer's scan at its training size: b8, dim 1536, L 2048, N 16, bf16
        b, d, L, N = 8, 1536, 2048, 16

        def t(*s):
            return (torch.randn(*s, generator=g) * 0.5).to(dev, torch.bfloat16).requires_grad_()

        u, dl, z, B, C = t(b, d, L), t(b, d, L), t(b, d, L), t(b, N, L), t(b, N, L)
        A = (-torch.rand(d, N, generator=g) - 0.5).to(dev).requires_grad_()
        D, db = torch.randn(d, generator=g).to(dev).requires_grad_(), torch.randn(d, generator=g).to(dev).requires_grad_()
        out.append(("scan fwd + bwd, b8 x 1536 x 2048", "big",
                    lambda: ss.selective_scan_fn(u, dl, A, B, C, D, z, db, delta_softplus=True).sum().backward()))
    return out


def check(dev):
    """The kernels in use against the float64 reference: y and every gradient (a bridge that dropped one
    would time less work); the bound: float32 rounding over a 16-step scan, far above its 1e-6-scale error."""
    from selscan_torch.reference import selective_scan_ref
    g = torch.Generator().manual_seed(2)
    shapes = [(2, 8, 16), (2, 8, 16), (8, 4), (2, 4, 16), (2, 4, 16), (8,), (2, 8, 16), (8,)]
    xs = [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]
    xs[2] = -xs[2].abs() - 0.2
    err = 0.0
    ref = [x.clone().requires_grad_() for x in xs]
    selective_scan_ref(*ref, delta_softplus=True).square().sum().backward()
    got = [x.float().to(dev).requires_grad_() for x in xs]
    y = ss.selective_scan_fn(*got, delta_softplus=True)
    y.square().sum().backward()
    for r, t in zip(ref, got):
        err = max(err, ((t.grad.double().cpu() - r.grad).abs().max() / (1 + r.grad.abs().max())).item())
    assert err < 1e-4, f"gradients off the float64 reference by {err:.2e}"
    return err


def main():
    argv = sys.argv[1:]
    rest = None
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser()
    ap.add_argument("--autograd", choices=["cpp", "python"], required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=1000)
    a = ap.parse_args(argv)
    if a.autograd == "python":
        use_python_autograd()
    if rest:
        sys.argv = rest
        print(f"autograd kernels: {a.autograd}; running {' '.join(rest)}", flush=True)
        runpy.run_path(rest[0], run_name="__main__")
        return
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    print(f"autograd kernels: {a.autograd}; selscan_torch from {ss.__file__}; torch {torch.__version__}; "
          f"device {a.device}")
    print(f"check: every gradient within {check(a.device):.1e} (relative) of the float64 reference")
    for name, key, fn in cases(a.device):
        med, r = host_cost.timed(fn, sync, a.calls if key != "big" else 20, warm=300 if key != "big" else 3)
        print(f"{name:34s} {med:9.2f} us a call  (rounds {' '.join(f'{v:.1f}' for v in r)})", flush=True)


if __name__ == "__main__":
    main()
