"""Mamba-2's SSD scan (issue 40): selscan against transformers' PyTorch fallback and (CUDA, where
installed) mamba_ssm's Triton kernels, in one process; the scan alone and a Mamba2ForCausalLM training
step end to end; where the scan's time goes, kernel by kernel.

    PYTHONPATH=bindings/torch python3 bench/bench_ssd.py [--device cpu|cuda] [--dtype f32|bf16]
        [--batch 1] [--threads N] [--lens 512,1024] [--reps 3] [--cases scan,model,layer,profile,layer-profile]
        [--shapes 130m,1.3b,2.7b,nemotron-h] [--no-fallback]

scan: selscan's SSD op (CPU or CUDA kernels, with autograd; on CUDA also mamba_chunk_scan_combined, the
drop-in's argument handling around the same op) against transformers'
`mamba2_chunk_scan` PyTorch body (modeling_mamba2, unwrapped: the path a model takes without mamba_ssm;
--no-fallback leaves it out) and mamba_ssm's mamba_chunk_scan_combined (CUDA, where importable), the
forward alone and forward + backward of every input, at the --shapes layer shapes (SHAPES: Mamba2-130m,
1.3b, 2.7b, a Nemotron-H-like layer; chunk 256 for mamba_ssm). model: a Mamba2ForCausalLM training step (forward +
backward, float32) of a 2-layer model with the 130m layer shape, with and without
selscan_torch.integrations.use_in_transformers() (the same device). layer (not run by default):
mamba_split_conv1d_scan_combined (conv + scan + gated norm + out_proj) forward and forward + backward at the
--shapes layer shapes, selscan's with each recompute mode and mamba_ssm's (CUDA, where importable), with the
peak memory a call takes above its inputs on CUDA (layer-profile: its kernels, as profile's). Prints the median
of --reps timed runs after one warm-up, and each backend's time over selscan's. profile (not run by default): the scan
case's forward + backward of each backend under torch.profiler, its kernels' device times on CUDA (the
GPU's work, apart from the host's launches that bound the wall time of small calls), its ops' own CPU
times on the CPU.
"""
import argparse
import contextlib
import importlib.util
import inspect
import statistics
import time

import torch


def timed(fn, reps, device):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()  # warm-up
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _triton_ssd():
    """mamba_ssm's mamba_chunk_scan_combined (Triton), or None. A Triton-only copy of mamba_ssm (its
    sources without the compiled Mamba-1 extension, whose import its package __init__ makes) is
    imported without running that __init__: the SSD's modules need none of it."""
    import sys
    import types

    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        return mamba_chunk_scan_combined
    except ImportError:
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None or not spec.submodule_search_locations:
            return None
        for k in [k for k in sys.modules if k == "mamba_ssm" or k.startswith("mamba_ssm.")]:
            del sys.modules[k]
        pkg = types.ModuleType("mamba_ssm")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["mamba_ssm"] = pkg
        try:
            from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
            return mamba_chunk_scan_combined
        except ImportError as e:
            print(f"(mamba_ssm's Triton SSD not importable: {e})")
            return None


# layer shapes: (nheads, headdim, dstate, ngroups): Mamba2-130m / 1.3b / 2.7b (d_inner 1536 / 4096 / 5120,
# headdim 64, dstate 128, one group) and a Nemotron-H-like layer (128 heads of 64, dstate 128, 8 groups)
SHAPES = {"130m": (24, 64, 128, 1), "1.3b": (64, 64, 128, 1), "2.7b": (80, 64, 128, 1), "nemotron-h": (128, 64, 128, 8)}


def scan_backends(L, a, shape="130m"):
    """(backends {name: mamba_chunk_scan_combined-like function}, run(f, backward) -> a callable that runs
    f once on the same inputs at a layer shape (backward: and every input's gradient))."""
    import transformers.models.mamba2.modeling_mamba2 as m2

    import selscan_torch as st

    dev, dtype = a.device, {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    g = torch.Generator().manual_seed(0)
    b, (H, P, N, G) = a.batch, SHAPES[shape]
    r = lambda *s, sc=1.0, dt=dtype: (torch.randn(*s, generator=g) * sc).to(dt).to(dev)  # noqa: E731
    x, dt = r(b, L, H, P), r(b, L, H, sc=0.5)
    A = (-(torch.rand(H, generator=g) + 0.5)).to(dev)
    B, C = r(b, L, G, N), r(b, L, G, N)
    D, bias = r(H, dt=torch.float32), r(H, sc=0.3, dt=torch.float32)
    leaves = [t.requires_grad_() for t in (x, dt, A, B, C, D, bias)]

    def run(f, backward):
        def go():
            with torch.set_grad_enabled(backward):
                out = f(x, dt, A, B, C, 256, D=D, dt_bias=bias, dt_softplus=True)
                out = out[0] if isinstance(out, tuple) else out
                if backward:
                    torch.autograd.grad(out.float().square().sum(), leaves)
        return go

    from selscan_torch.ssd import ssd_fwd_call

    def ssd_op(x, dt, A, B, C, chunk_size, D=None, dt_bias=None, dt_softplus=False):
        """selscan's SSD op (its CPU or CUDA kernels, with autograd) as the drop-in calls it (dt_limit (0, inf))"""
        return ssd_fwd_call(x, dt, A, B, C, D, None, dt_bias, None, None, None, dt_softplus, 0.0, float("inf"),
                            False)[0]

    # selscan: the SSD op; on CUDA also the drop-in around it ("selscan drop-in": its argument handling's cost)
    backends = {"selscan": ssd_op}
    if dev.type == "cuda":
        backends["selscan drop-in"] = st.mamba_chunk_scan_combined
    if not a.no_fallback:
        backends["transformers' PyTorch"] = inspect.unwrap(m2.mamba2_chunk_scan)
    if dev.type == "cuda":
        triton_scan = _triton_ssd()
        if triton_scan is not None:
            backends["mamba_ssm Triton"] = triton_scan
    return backends, run


def scan_case(L, a, shape="130m"):
    """{(backend, "fwd" | "fwd+bwd"): seconds} of mamba_chunk_scan_combined at a layer shape."""
    backends, run = scan_backends(L, a, shape)
    return {(name, mode): timed(run(f, mode == "fwd+bwd"), a.reps, a.device)
            for name, f in backends.items() for mode in ("fwd", "fwd+bwd")}


def profile_case(L, a, shape="130m", top=16, of="scan"):
    """Where each backend's forward + backward goes (of: the scan case's backends or the layer case's), under
    torch.profiler: on CUDA the device time of each kernel, on the CPU each op's own (self) time; per call,
    mean of --reps calls after a warm-up. (On the CPU an op run inside a selective checkpoint is counted twice,
    once as the checkpoint's dispatch mode re-dispatches it: the recompute's counts are test_ssd's.)"""
    from torch.profiler import ProfilerActivity, profile

    backends, run = (scan_backends if of == "scan" else layer_backends)(L, a, shape)
    cuda = a.device.type == "cuda"
    for name, f in backends.items():
        go = run(f, True)
        go()
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as p:
            for _ in range(a.reps):
                go()
            if cuda:
                torch.cuda.synchronize()
        rows = [(e.key, (e.self_device_time_total if cuda else e.self_cpu_time_total) / a.reps, e.count / a.reps)
                for e in p.key_averages()]
        rows = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
        what = "device time a kernel" if cuda else "self CPU time an op"
        print(f"\n{of} {shape}, L {L}, {name}: forward + backward, {what}, us a call (mean of {a.reps})")
        for k, us, n in rows[:top]:
            print(f"  {us:10.1f} x{n:<5g} {k[:100]}")
        print(f"  {sum(r[1] for r in rows):10.1f} in all ({len(rows)} kinds)", flush=True)


@contextlib.contextmanager
def layer_by_checkpoint():
    """mamba_split_conv1d_scan_combined's recompute as it was before its own autograd Function (bench/NOTES.md
    SSD-torch-v3): torch.utils.checkpoint, non-reentrant, over the whole layer, with a selective policy
    keeping the scan's forward (SSD-torch-v2, 05d6615). Held through the forward (the checkpoint's closure runs
    the backward's recompute)."""
    import types
    import torch.utils.checkpoint as cp
    import selscan_torch.ssd as ssd

    keep = {torch.ops.selscan.ssd_fwd.default}

    def policy(ctx, op, *a, **k):
        return cp.CheckpointPolicy.MUST_SAVE if op in keep else cp.CheckpointPolicy.PREFER_RECOMPUTE

    def apply(shape, opts, *args):
        return cp.checkpoint(lambda *a: ssd._split_conv1d_scan_layer(*a, shape, opts)[0], *args, use_reentrant=False,
                             context_fn=lambda: cp.create_selective_checkpoint_contexts(policy))

    own = ssd._Layer
    ssd._Layer = types.SimpleNamespace(apply=apply)
    try:
        yield
    finally:
        ssd._Layer = own


def _gated_rms_norm_passes(y, z, weight, eps, group_size, norm_before_gate):
    """selscan_torch.ssd._gated_rms_norm as it was before SSD-torch-v3 (bench/NOTES.md): the RMS as separate
    ops (the sum of squares, rsqrt and scaling: five forward passes where torch's rms_norm is one kernel)."""
    yf, zf = y.float(), z.float()
    if not norm_before_gate:
        yf = yf * torch.nn.functional.silu(zf)
    g = yf.unflatten(-1, (-1, group_size))
    yn = (g * torch.rsqrt(g.square().mean(-1, keepdim=True) + eps)).flatten(-2) * weight.float()
    if norm_before_gate:
        yn = yn * torch.nn.functional.silu(zf)
    return yn.to(y.dtype)


@contextlib.contextmanager
def norm_op():
    """The layer's gated norm on selscan's op on every device (norm.LAYER_DEVICES: the default now) while
    held: SSD-torch-v4 beside the composition it replaces, in one process."""
    from selscan_torch import norm

    own = set(norm.LAYER_DEVICES)
    norm.LAYER_DEVICES.update(("cpu", "cuda"))
    try:
        yield
    finally:
        norm.LAYER_DEVICES.clear()
        norm.LAYER_DEVICES.update(own)


@contextlib.contextmanager
def norm_passes():
    """The library's gated norm as separate ops (_gated_rms_norm_passes) while held."""
    import selscan_torch.ssd as ssd

    own = ssd._gated_rms_norm
    ssd._gated_rms_norm = _gated_rms_norm_passes
    try:
        yield
    finally:
        ssd._gated_rms_norm = own


def _gated_rms_norm_v3(y, z, weight, eps, group_size, norm_before_gate):
    """selscan_torch.ssd._gated_rms_norm as it was in SSD-torch-v3 (bench/NOTES.md): torch ops in float32, the RMS
    through torch's rms_norm (norm.py's _composition, the double backward's), autocast off."""
    from selscan_torch import norm, ssd

    with ssd._autocast(y.device.type):
        return norm._composition(y, z, None if weight is None else weight.float(), group_size, eps, norm_before_gate)


@contextlib.contextmanager
def norm_v3():
    """The library's gated norm as SSD-torch-v3's torch ops (_gated_rms_norm_v3) while held: the fused op's
    (SSD-torch-v4) baseline in the same process."""
    import selscan_torch.ssd as ssd

    own = ssd._gated_rms_norm
    ssd._gated_rms_norm = _gated_rms_norm_v3
    try:
        yield
    finally:
        ssd._gated_rms_norm = own


@contextlib.contextmanager
def layer_before_v3():
    """The layer as it was before SSD-torch-v3 while held (its recompute by torch's selective checkpoint, the
    norm as separate ops), rebuilt over the library's layer code: bench_models' selscan-ssd-v2 too."""
    with layer_by_checkpoint(), norm_passes():
        yield


def layer_backends(L, a, shape="130m"):
    """(backends, run) as scan_backends' for mamba_split_conv1d_scan_combined (conv + scan + gated norm +
    out_proj, Mamba-2's layer after in_proj) at a layer shape: selscan's with recompute False / True (the
    scan's out kept) / True by torch's selective checkpoint (the recompute before SSD-torch-v3) / True with the
    gated norm as SSD-torch-v3's torch ops (before the fused op, SSD-torch-v4) / True with the gated norm as
    separate ops (the norm before SSD-torch-v3), and mamba_ssm's (CUDA, where importable). The
    norm as transformers' Mamba-2 mixers call it (norm_before_gate False: the gate first), and both (the layer as
    it was before SSD-torch-v3)."""
    import selscan_torch as st

    dev, dtype = a.device, {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    g = torch.Generator().manual_seed(0)
    b, (H, P, N, G) = a.batch, SHAPES[shape]
    dim, d_model = H * P, H * P // 2
    r = lambda *s, sc=1.0, dt=dtype: (torch.randn(*s, generator=g) * sc).to(dt).to(dev)  # noqa: E731
    zxbcdt = r(b, L, 2 * dim + 2 * G * N + H)
    ins = [zxbcdt, r(dim + 2 * G * N, 4, sc=0.5), r(dim + 2 * G * N, sc=0.1), r(H, sc=0.3, dt=torch.float32),
           (-(torch.rand(H, generator=g) + 0.5)).to(dev), r(H, dt=torch.float32)]
    kw = dict(rmsnorm_weight=r(dim), outproj_weight=r(d_model, dim, sc=dim ** -0.5), headdim=P, ngroups=G,
              norm_before_gate=False)
    leaves = [t.requires_grad_() for t in ins + [kw["rmsnorm_weight"], kw["outproj_weight"]]]
    dy = r(b, L, d_model)

    def run(f, backward):
        f, around = f if isinstance(f, tuple) else (f, contextlib.nullcontext)

        def go():  # the whole forward + backward under around(): the backward's recompute runs the same code
            with around(), torch.set_grad_enabled(backward):
                out = f(*ins, 256, **kw)
                if backward:
                    torch.autograd.grad(out, leaves, dy)
        return go

    layer = st.mamba_split_conv1d_scan_combined
    backends = {"selscan, recompute=False": lambda *a_, **k: layer(*a_, **k, recompute=False),
                "selscan, recompute (scan's out kept)": layer,
                "selscan, recompute by torch's selective checkpoint (scan's out kept)": (layer, layer_by_checkpoint),
                "selscan, recompute, the norm as SSD-torch-v3's torch ops": (layer, norm_v3),
                "selscan, recompute, the norm as selscan's op (SSD-torch-v4)": (layer, norm_op),
                "selscan, recompute, the norm as separate ops": (layer, norm_passes),
                "selscan before SSD-torch-v3 (both)": (layer, layer_before_v3)}
    if dev.type == "cuda":
        try:
            from mamba_ssm.ops.triton.ssd_combined import mamba_split_conv1d_scan_combined as peer
            backends["mamba_ssm Triton"] = lambda *a_, **k: peer(*a_, dt_limit=(0.0, float("inf")), **k)
        except Exception as e:  # noqa: BLE001  (not installed, or its causal_conv1d missing)
            print(f"| layer | {shape} | {L} | mamba_ssm | (not importable: {type(e).__name__}) | |")
    return backends, run


def layer_case(L, a, shape="130m"):
    """{(backend, "fwd" | "fwd+bwd"): (seconds, peak bytes above the inputs on CUDA, else nan)} of
    layer_backends' backends."""
    backends, run = layer_backends(L, a, shape)
    dev = a.device
    res = {}
    for name, f in backends.items():
        for mode in ("fwd", "fwd+bwd"):
            go = run(f, mode == "fwd+bwd")
            peak = float("nan")
            if dev.type == "cuda":
                go()
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                go()
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - base
            res[(name, mode)] = (timed(go, a.reps, dev), peak)
    return res


def model_case(L, a):
    if a.device.type == "cuda" and importlib.util.find_spec("mamba_ssm") is not None:
        print(f"| model fwd+bwd | {L} | (skipped: with mamba_ssm installed both runs take its Triton SSD) | | |")
        return {"selscan": float("nan")}
    import transformers

    import selscan_torch.integrations as si

    torch.manual_seed(0)
    cfg = transformers.Mamba2Config(vocab_size=1024, hidden_size=768, num_hidden_layers=2, num_heads=24, head_dim=64,
                                    expand=2, state_size=128, n_groups=1, chunk_size=256)
    model = transformers.Mamba2ForCausalLM(cfg).float().train().to(a.device)
    ids = torch.randint(0, 1024, (a.batch, L), generator=torch.Generator().manual_seed(1)).to(a.device)

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    t_tf = timed(step, a.reps, a.device)
    with si.use_in_transformers():
        t_sel = timed(step, a.reps, a.device)
    return {"selscan": t_sel, "transformers' own": t_tf}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"], help="the scan case's x / dt / B / C")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--lens", default="512,1024")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default="scan,model")
    ap.add_argument("--shapes", default="130m", help="the scan case's layer shapes: " + ",".join(SHAPES))
    ap.add_argument("--no-fallback", action="store_true", help="the scan case without transformers' fallback")
    a = ap.parse_args()
    a.device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    where = torch.cuda.get_device_name() if a.device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}; scan dtype {a.dtype}, batch {a.batch}")
    print("| case | shape | L | backend | time | x (its time / selscan's) |")
    print("|---|---|---|---|---|---|")
    for case in a.cases.split(","):
        for L in (int(v) for v in a.lens.split(",")):
            if case in ("profile", "layer-profile"):
                for shape in a.shapes.split(","):
                    profile_case(L, a, shape, of="scan" if case == "profile" else "layer")
                continue
            if case == "layer":
                for shape in a.shapes.split(","):
                    res = layer_case(L, a, shape)
                    for (name, mode), (t, peak) in res.items():
                        ref = res[("selscan, recompute (scan's out kept)", mode)][0]
                        print(f"| layer {mode} | {shape} | {L} | {name} | {t * 1e3:.2f} ms | {t / ref:.2f}x |"
                              + ("" if peak != peak else f" peak {peak / 2**20:.0f} MiB above the inputs |"),
                              flush=True)
                continue
            if case == "scan":
                for shape in a.shapes.split(","):
                    times = scan_case(L, a, shape)
                    for (name, mode), t in times.items():
                        print(f"| scan {mode} | {shape} | {L} | {name} | {t * 1e3:.2f} ms | "
                              f"{t / times[('selscan', mode)]:.2f}x |", flush=True)
                continue
            times = model_case(L, a)
            for name, t in times.items():
                print(f"| model fwd+bwd | 130m, 2 layers | {L} | {name} | {t * 1e3:.2f} ms | "
                      f"{t / times['selscan']:.2f}x |", flush=True)

if __name__ == "__main__":
    main()
