"""A Mamba block and a MambaVision mixer exported to ONNX and run in ONNX Runtime on the CPU: with
selscan's custom ops (selscan_torch.onnx, libselscan_ort) against the same model exported the way
it exports without them (the scan written in torch ops: a Python loop over L, which the export
unrolls into L copies of the step, or torch's scan operator, which becomes an ONNX Scan), and
against PyTorch eager (selscan_torch's kernels). Prints markdown tables.

    PYTHONPATH=bindings/torch python bench/bench_onnx.py            # 1 and 2 threads
    PYTHONPATH=bindings/torch python bench/bench_onnx.py --quick    # smaller cases, fewer runs

Needs torch, selscan_torch (built), onnxruntime, onnx and onnxscript. Times are the median of
repeated runs after warm-up (ms a call, inputs prepared beforehand; ONNX Runtime's run() with
numpy inputs, PyTorch under torch.no_grad(); --min: the fastest run). "export s" is torch.onnx.export's time,
"nodes" the graph's node count (an unrolled scan grows with L; its length is fixed at export).
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import selscan_torch as st
import selscan_torch.onnx as sonnx

try:
    import onnx
    import onnxruntime as ort
except ImportError as e:
    sys.exit(f"bench_onnx: needs onnxruntime, onnx and onnxscript ({e})")

from torch._higher_order_ops.scan import scan as torch_scan

warnings.filterwarnings("ignore")


# ---- the scan three ways -------------------------------------------------------------------------


def _softplus(x):
    return torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))


def _prep(u, delta, A, B, C, D, z, delta_bias):
    """Discretisation as the reference scans do it (mamba_ssm's selective_scan_ref, transformers'
    slow path): dA = exp(delta A), dBu = delta B u, all steps at once, (batch, dim, L, N)."""
    delta = _softplus(delta + delta_bias[:, None])
    dA = torch.exp(delta.unsqueeze(-1) * A[:, None, :])
    dBu = (delta * u).unsqueeze(-1) * B.transpose(1, 2).unsqueeze(1)
    return dA, dBu


def _finish(y, u, D, z):
    y = y + u * D[:, None]
    return y * F.silu(z) if z is not None else y


def scan_selscan(u, delta, A, B, C, D, z, delta_bias):
    return st.selective_scan_fn(u, delta, A, B, C, D, z=z, delta_bias=delta_bias, delta_softplus=True)


def scan_loop(u, delta, A, B, C, D, z, delta_bias):
    """A Python loop over L: torch.export unrolls it (L fixed in the exported graph)."""
    dA, dBu = _prep(u, delta, A, B, C, D, z, delta_bias)
    h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=u.dtype)
    ys = []
    for t in range(u.shape[2]):
        h = dA[:, :, t] * h + dBu[:, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1))
    return _finish(torch.stack(ys, dim=2), u, D, z)


def scan_hop(u, delta, A, B, C, D, z, delta_bias):
    """torch's scan operator: exported as one ONNX Scan node (any L)."""
    dA, dBu = _prep(u, delta, A, B, C, D, z, delta_bias)

    def step(h, xs):
        a, bu, c = xs
        h = a * h + bu
        return h, (h * c.unsqueeze(1)).sum(-1)

    h0 = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=u.dtype)
    _, ys = torch_scan(step, h0, (dA.permute(2, 0, 1, 3), dBu.permute(2, 0, 1, 3), C.permute(2, 0, 1)))
    return _finish(ys.permute(1, 2, 0), u, D, z)


SCANS = {"selscan": scan_selscan, "loop": scan_loop, "scan": scan_hop}


def step_selscan(state, x, dt, A, B, C, D, z, dt_bias):
    y = st.selective_state_update(state, x, dt, A, B, C, D, z=z, dt_bias=dt_bias, dt_softplus=True)
    return y, state


def step_torch(state, x, dt, A, B, C, D, z, dt_bias):
    """The decode step in torch ops (transformers' slow path's arithmetic)."""
    dt = _softplus(dt + dt_bias)
    state = torch.exp(dt[..., None] * A) * state + (dt * x)[..., None] * B[:, None, :]
    y = (state * C[:, None, :]).sum(-1) + x * D
    return y * F.silu(z), state


STEPS = {"selscan": step_selscan, "torch ops": step_torch}


# ---- the models ------------------------------------------------------------------------------------


class MambaBlock(torch.nn.Module):
    """Mamba-1's mixer (mamba-130m's sizes by default: d_model 768, d_inner 1536, N 16, dt_rank 48)."""

    def __init__(self, scan="selscan", step="selscan", d_model=768, d_state=16, expand=2, d_conv=4):
        super().__init__()
        d_inner = expand * d_model
        self.r, self.n, self.k, self.d_inner = math.ceil(d_model / 16), d_state, d_conv, d_inner
        self.scan, self.step_fn = SCANS[scan], STEPS[step]
        self.in_proj = torch.nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv = torch.nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = torch.nn.Linear(d_inner, self.r + 2 * d_state, bias=False)
        self.dt_proj = torch.nn.Linear(self.r, d_inner)
        self.A_log = torch.nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(d_inner, 1))
        self.D = torch.nn.Parameter(torch.ones(d_inner))
        self.out_proj = torch.nn.Linear(d_inner, d_model, bias=False)

    def forward(self, h):  # (batch, L, d_model)
        L = h.shape[1]
        x, z = self.in_proj(h).chunk(2, dim=-1)
        x = F.silu(self.conv(x.transpose(1, 2))[..., :L])
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.r, self.n, self.n], dim=-1)
        delta = (dt @ self.dt_proj.weight.t()).transpose(1, 2)
        y = self.scan(x, delta, -torch.exp(self.A_log), B.transpose(1, 2), C.transpose(1, 2), self.D,
                      z.transpose(1, 2), self.dt_proj.bias)
        return self.out_proj(y.transpose(1, 2))


class MambaStep(torch.nn.Module):
    """One decode token of the block on explicit states, returning the new states."""

    def __init__(self, block):
        super().__init__()
        self.b = block

    def forward(self, h, conv_state, ssm_state):
        b = self.b
        x, z = b.in_proj(h).chunk(2, dim=-1)
        conv_state = torch.cat([conv_state[:, :, 1:], x[:, :, None]], dim=-1)
        x = F.silu((conv_state * b.conv.weight[:, 0, :]).sum(-1) + b.conv.bias)
        dt, B, C = b.x_proj(x).split([b.r, b.n, b.n], dim=-1)
        y, ssm_state = b.step_fn(ssm_state, x, dt @ b.dt_proj.weight.t(), -torch.exp(b.A_log), B, C, b.D, z,
                                 b.dt_proj.bias)
        return b.out_proj(y), conv_state, ssm_state


class MambaVisionMixer(torch.nn.Module):
    """MambaVision's token mixer (the scan on half the channels, no z gating)."""

    def __init__(self, scan="selscan", d_model=512, d_state=8, d_conv=3):
        super().__init__()
        half = d_model // 2
        self.r, self.n, self.scan = math.ceil(d_model / 16), d_state, SCANS[scan]
        self.in_proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.x_proj = torch.nn.Linear(half, self.r + 2 * d_state, bias=False)
        self.dt_proj = torch.nn.Linear(self.r, half)
        self.A_log = torch.nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(half, 1))
        self.D = torch.nn.Parameter(torch.ones(half))
        self.out_proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.conv_x = torch.nn.Conv1d(half, half, d_conv, groups=half, bias=False, padding="same")
        self.conv_z = torch.nn.Conv1d(half, half, d_conv, groups=half, bias=False, padding="same")

    def forward(self, h):  # (batch, L, d_model)
        x, z = self.in_proj(h).transpose(1, 2).chunk(2, dim=1)
        x, z = F.silu(self.conv_x(x)), F.silu(self.conv_z(z))
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.r, self.n, self.n], dim=-1)
        delta = (dt @ self.dt_proj.weight.t()).transpose(1, 2)
        y = self.scan(x, delta, -torch.exp(self.A_log), B.transpose(1, 2), C.transpose(1, 2), self.D, None,
                      self.dt_proj.bias)
        return self.out_proj(torch.cat([y, z], dim=1).transpose(1, 2))


class ScanOnly(torch.nn.Module):
    """The scan alone (u, delta, B, C, z in; A = -exp(A_log), D, delta_bias parameters, softplus): the
    op's own time, without the block's matmuls around it."""

    def __init__(self, scan="selscan", dim=1536, d_state=16):
        super().__init__()
        self.scan, self.n = SCANS[scan], d_state
        self.A_log = torch.nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(dim, 1))
        self.D = torch.nn.Parameter(torch.ones(dim))
        self.dt_bias = torch.nn.Parameter(torch.rand(dim) - 4)

    def forward(self, x):  # x (batch, L, 2 * dim + 2 * N + dim): u, delta, B, C, z packed along channels
        dim, N = self.D.shape[0], self.n
        u, delta, B, C, z = x.transpose(1, 2).split([dim, dim, N, N, dim], dim=1)
        return self.scan(u, delta, -torch.exp(self.A_log), B, C, self.D, z, self.dt_bias)


# ---- timing ------------------------------------------------------------------------------------------


STAT = "median"  # or "min" (--min: for a machine shared with other work)


def timeit(fn, min_runs=7, min_s=1.5, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    t_end = time.perf_counter() + min_s
    while len(ts) < min_runs or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) >= 300:
            break
    return (min(ts) if STAT == "min" else statistics.median(ts)) * 1e3


def export(model, args, dynamic_shapes=None):
    t0 = time.perf_counter()
    with torch.no_grad():
        prog = torch.onnx.export(model, args, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False)
    secs = time.perf_counter() - t0
    return prog.model_proto, secs


def session(proto, threads):
    so = sonnx.session_options()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
        path = f.name
    onnx.save(proto, path, save_as_external_data=True, location=os.path.basename(path) + ".data")
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s


def run_ort(sess, args):
    feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    return lambda: sess.run(None, feed)


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), b.detach().double().numpy()
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def bench_prefill(name, make, shapes, threads_list, variants, quick):
    """shapes: list of (batch, L, d_model); variants: scan implementations to export."""
    rows = []
    for batch, L, d_model in shapes:
        torch.manual_seed(0)
        ref_model = make("selscan").eval()
        h = torch.randn(batch, L, d_model)
        with torch.no_grad():
            y_ref = ref_model(h)
        exported = {}
        for v in variants:
            if v == "loop" and L > (128 if quick else 1024):
                continue  # the unrolled graph: export minutes, session minutes
            m = make(v).eval()
            m.load_state_dict(ref_model.state_dict())
            dyn = None if v == "loop" else ({0: torch.export.Dim("batch", min=1, max=1024),
                                              1: torch.export.Dim("L", min=2, max=1 << 16)},)
            proto, secs = export(m, (h,), dyn)
            exported[v] = (proto, secs, len(proto.graph.node))
        for threads in threads_list:
            torch.set_num_threads(threads)
            with torch.no_grad():
                t_eager = timeit(lambda: ref_model(h))
            row = {"model": name, "shape": (batch, L, d_model), "threads": threads, "eager": t_eager}
            for v, (proto, secs, nodes) in exported.items():
                sess = session(proto, threads)
                out = sess.run(None, {sess.get_inputs()[0].name: h.numpy()})[0]
                err = rel_err(out, y_ref)
                if err > 1e-3:
                    raise AssertionError(f"{name} {v}: ONNX Runtime output off by {err:.2e}")
                row[v] = (timeit(run_ort(sess, (h,))), secs, nodes)
            rows.append(row)
            print(f"  {name} {(batch, L, d_model)} {threads}t: " +
                  ", ".join(f"{k} {v if isinstance(v, float) else v[0]:.2f}" for k, v in row.items()
                            if k in ("eager",) + tuple(variants)), file=sys.stderr)
    return rows


def bench_decode(shapes, threads_list):
    rows = []
    for batch, d_model in shapes:
        torch.manual_seed(0)
        block = MambaBlock("selscan", "selscan", d_model=d_model).eval()
        tblock = MambaBlock("selscan", "torch ops", d_model=d_model).eval()
        tblock.load_state_dict(block.state_dict())
        h = torch.randn(batch, d_model)
        conv = torch.randn(batch, block.d_inner, block.k)
        ssm = torch.randn(batch, block.d_inner, block.n)
        args = (h, conv, ssm)
        with torch.no_grad():
            ref = MambaStep(block)(h, conv, ssm.clone())
        protos = {"selscan": export(MambaStep(block), (h, conv, ssm.clone())),
                  "torch ops": export(MambaStep(tblock), (h, conv, ssm.clone()))}
        for threads in threads_list:
            torch.set_num_threads(threads)
            step = MambaStep(block)
            s2 = ssm.clone()
            with torch.no_grad():
                t_eager = timeit(lambda: step(h, conv, s2), min_s=0.5)
            row = {"shape": (batch, d_model), "threads": threads, "eager": t_eager}
            for v, (proto, secs) in protos.items():
                sess = session(proto, threads)
                out = sess.run(None, {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)})
                for o, r in zip(out, ref):
                    err = rel_err(o, r)
                    if err > 1e-4:
                        raise AssertionError(f"decode {v}: ONNX Runtime output off by {err:.2e}")
                row[v] = (timeit(run_ort(sess, args), min_s=0.5), secs, len(proto.graph.node))
            rows.append(row)
            print(f"  decode {(batch, d_model)} {threads}t: eager {t_eager:.3f}, " +
                  ", ".join(f"{k} {row[k][0]:.3f}" for k in protos), file=sys.stderr)
    return rows


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def print_prefill(title, rows):
    print(f"\n### {title}\n")
    print("| input (batch, L, channels) | threads | PyTorch eager (selscan_torch) ms | ORT + selscan ops ms | ORT, scan unrolled ms "
          "| ORT, ONNX Scan ms | unrolled / selscan | Scan / selscan | export s (selscan / unrolled / Scan) "
          "| nodes (selscan / unrolled / Scan) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, lo, sc = r.get("selscan"), r.get("loop"), r.get("scan")
        g = lambda v, i: v[i] if v else None  # noqa: E731
        print(f"| {r['shape']} | {r['threads']} | {fmt(r['eager'])} | {fmt(g(s, 0))} | {fmt(g(lo, 0))} | {fmt(g(sc, 0))} "
              f"| {fmt(g(lo, 0) / s[0] if lo else None, 1)} | {fmt(g(sc, 0) / s[0] if sc else None, 1)} "
              f"| {fmt(g(s, 1), 1)} / {fmt(g(lo, 1), 1)} / {fmt(g(sc, 1), 1)} "
              f"| {g(s, 2)} / {g(lo, 2) if lo else '—'} / {g(sc, 2) if sc else '—'} |")


def print_decode(rows):
    print("\n### Decode: one token of the Mamba block on explicit (conv_state, ssm_state)\n")
    print("| (batch, d_model) | threads | PyTorch eager (selscan_torch) ms | ORT + SelectiveStateUpdate ms "
          "| ORT, step in ONNX ops ms | ONNX ops / selscan |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, t = r["selscan"], r["torch ops"]
        print(f"| {r['shape']} | {r['threads']} | {fmt(r['eager'], 3)} | {fmt(s[0], 3)} | {fmt(t[0], 3)} "
              f"| {fmt(t[0] / s[0], 2)} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small cases, for a smoke run")
    ap.add_argument("--threads", default=None, help="comma list (default: 1 and all cores)")
    ap.add_argument("--min", action="store_true", help="report the fastest run instead of the median")
    ap.add_argument("--only", default=None, help="comma list of: scan, block, vision, decode")
    a = ap.parse_args()
    global STAT
    STAT = "min" if a.min else "median"
    only = set(a.only.split(",")) if a.only else {"scan", "block", "vision", "decode"}
    cores = os.cpu_count() or 1
    threads = [int(t) for t in a.threads.split(",")] if a.threads else sorted({1, cores})
    print(f"bench_onnx: torch {torch.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, "
          f"{cores} cores, selscan CPU path {st.cpu_backend()}", file=sys.stderr)
    if a.quick:
        block_shapes, vision_shapes, decode_shapes = [(1, 64, 128)], [(2, 49, 128)], [(1, 128)]
        scan_shape, scan_lengths = (128, 8), [64]
    else:
        scan_shape, scan_lengths = (1536, 16), [128, 512, 2048]
        block_shapes = [(1, 128, 768), (1, 512, 768), (1, 2048, 768)]
        vision_shapes = [(8, 196, 512), (32, 49, 512)]
        decode_shapes = [(1, 768), (8, 768)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\ntorch {torch.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, {cores} cores, "
          f"{STAT} of repeated runs, load average at the start {load:.1f}")
    if "scan" in only:
        dim, N = scan_shape
        mk_scan = lambda v: ScanOnly(v, dim=dim, d_state=N)  # noqa: E731
        shapes = [(1, L, 3 * dim + 2 * N) for L in scan_lengths]
        rows = bench_prefill("scan", mk_scan, shapes, threads, ["selscan", "loop", "scan"], a.quick)
        print_prefill(f"The scan alone (dim {dim}, N {N}, D, z, delta_bias, softplus; the input column is "
                      "(batch, L, channels of u, delta, B, C, z))", rows)
    if "block" in only:
        mk_block = lambda v: MambaBlock(v, d_model=block_shapes[0][2])  # noqa: E731
        rows = bench_prefill("block", mk_block, block_shapes, threads, ["selscan", "loop", "scan"], a.quick)
        print_prefill("Prefill: the Mamba block (in_proj, conv, x_proj, dt_proj, scan, out_proj)", rows)
    if "vision" in only:
        mk_vision = lambda v: MambaVisionMixer(v, d_model=vision_shapes[0][2])  # noqa: E731
        rows = bench_prefill("vision", mk_vision, vision_shapes, threads, ["selscan", "loop", "scan"], a.quick)
        print_prefill("MambaVision mixer", rows)
    if "decode" in only:
        print_decode(bench_decode(decode_shapes, threads))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
