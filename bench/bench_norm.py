"""The gated RMS norm through PyTorch on one device: selscan's op (selscan_torch.norm.gated_rms_norm, the
library's selscan_norm_* entries) against the composition of torch ops it replaces (norm._composition: SSD-torch-v3's
form, torch's rms_norm in float32), in one process, interleaved rep by rep.

    PYTHONPATH=bindings/torch python3 bench/bench_norm.py [--device cpu] [--dtype f32,bf16] [--shape 2,512,1536]
        [--groups 1] [--before 1] [--reps 5] [--warmup 2] [--rounds 1] [--threads N] [--blocked]

Per dtype: forward alone (no grad) and forward + backward (torch.autograd.grad of y, z, weight from a random
dout), the mean of --reps timed runs after --warmup, each backend's rep right after the other's (--blocked: each
backend's warm-up and reps in a row, then the next's: the interleaved runs see each other's allocations, the
composition's many temporaries freed and the op's outputs then on fresh pages); --rounds repeats the whole
measurement (a noisy machine: the spread of the means). bench/NOTES.md SSD-torch-v4 / v5.
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--shape", default="2,512,1536", help="batch,L,dim")
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--before", type=int, default=1, help="norm_before_gate")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--blocked", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    import selscan_torch
    from selscan_torch import norm

    dev = torch.device(a.device)
    b, L, dim = (int(v) for v in a.shape.split(","))
    gs, eps, before = dim // a.groups, 1e-6, bool(a.before)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    where = torch.cuda.get_device_name() if dev.type == "cuda" else (
        f"CPU, {torch.get_num_threads()} threads, selscan {selscan_torch.cpu_backend()}")
    print(f"torch {torch.__version__}, {where}; ({b}, {L}, {dim}), group {gs}, norm_before_gate {before}, "
          f"mean of {a.reps} after {a.warmup}, {'blocked' if a.blocked else 'interleaved'}")
    print("| dtype | mode | backend | round means (ms) |")
    print("|---|---|---|---|")
    for dname in a.dtype.split(","):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dname]
        g = torch.Generator().manual_seed(0)
        y = torch.randn(b, L, dim, generator=g).to(dtype).to(dev).requires_grad_()
        z = torch.randn(b, L, dim, generator=g).to(dtype).to(dev).requires_grad_()
        w = (1 + 0.1 * torch.randn(dim, generator=g)).to(dev).requires_grad_()
        dout = torch.randn(b, L, dim, generator=g).to(dtype).to(dev)
        backends = {
            "selscan op (gated_rms_norm)": lambda: norm.gated_rms_norm(y, z, w, eps, gs, before),
            "torch composition (norm._composition)": lambda: norm._composition(y, z, w, gs, eps, before),
        }
        for mode in ("fwd", "fwd+bwd"):
            def go(f):
                if mode == "fwd":
                    with torch.no_grad():
                        f()
                else:
                    torch.autograd.grad(f(), (y, z, w), dout)
                sync()
            res = {k: [] for k in backends}
            def timed(k, f, ts):
                t0 = time.perf_counter()
                go(f)
                ts[k].append(time.perf_counter() - t0)
            for _ in range(a.rounds):
                ts = {k: [] for k in backends}
                if a.blocked:
                    for k, f in backends.items():
                        for _ in range(a.warmup):
                            go(f)
                        for _ in range(a.reps):
                            timed(k, f, ts)
                else:
                    for f in backends.values():
                        for _ in range(a.warmup):
                            go(f)
                    for _ in range(a.reps):
                        for k, f in backends.items():
                            timed(k, f, ts)
                for k in backends:
                    res[k].append(statistics.mean(ts[k]) * 1e3)
            for k, v in res.items():
                print(f"| {dname} | {mode} | {k} | {', '.join(f'{x:.2f}' for x in v)} |", flush=True)


if __name__ == "__main__":
    main()
