"""Context parallel scan (selscan_torch.context_parallel): time and memory per rank against one GPU.

    torchrun --nproc_per_node=2 bench/bench_context_parallel.py               # GPUs (NCCL)
    torchrun --nproc_per_node=4 bench/bench_context_parallel.py --json cp4.json
    torchrun --nproc_per_node=2 bench/bench_context_parallel.py --device cpu --L 8192,16384 --dim 64 --weak 4096

The problem: batch 1, u / delta / z (1, dim, L) and variable B / C (1, N, L) in bf16 (--dtype),
A, D, delta_bias f32, delta_softplus; forward then backward with every gradient (inputs requiring
grad), the way a training step calls it. Rows (medians of --iters after --warmup, CUDA events,
all ranks started together by a barrier; the time of a row is the slowest rank's):
  strong   the whole sequence L (--L, default 128k, 512k, 1M) over the ranks, L / world a rank:
           cp fwd / bwd / total on the ranks; one = the single-GPU call on the whole L (rank 0
           alone, the others waiting); shard = the single-GPU call on one shard (L / world): the
           kernel's time for the shard alone, no exchange and no second pass;
           ideal = one / world; x ideal = cp total / ideal; mem = peak allocated on a rank during
           the step, inputs and gradients included (cp: the largest over the ranks), mem x = cp / one
  weak     --weak tokens a rank (default 128k, 256k), L = world * weak: cp against the shard alone
  exchange the two all_gathers alone (their payloads: batch*dim*(N+1) floats forward, batch*dim*N
           backward), timed the same way; share = exchange / cp total
Rank 0 prints a markdown table and writes --json.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

try:
    import selscan_torch  # noqa: F401
except ImportError:  # an in-place build in the repository (bindings/torch)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "torch"))
import selscan_torch as st  # noqa: E402
import selscan_torch.context_parallel as cp  # noqa: E402

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def parse_lengths(s):
    out = []
    for part in s.split(","):
        part = part.strip().lower()
        mult = 1
        if part.endswith("k"):
            mult, part = 1024, part[:-1]
        elif part.endswith("m"):
            mult, part = 1024 * 1024, part[:-1]
        out.append(int(part) * mult)
    return out


class Clock:
    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def now(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        if self.cuda:
            torch.cuda.synchronize()
            return a.elapsed_time(b)
        return (b - a) * 1e3


def inputs(batch, dim, L, N, dtype, dev, seed, param_seed=None):
    """This rank's shard of u / delta / B / C / z from seed, the replicated A / D / delta_bias from
    param_seed (default seed): the same on every rank (context_parallel checks that they are)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    gp = torch.Generator(device=dev).manual_seed(seed if param_seed is None else param_seed)

    def r(*shape, scale=1.0, dt=dtype, gen=g):
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * scale).to(dt)

    x = dict(u=r(batch, dim, L), delta=r(batch, dim, L, scale=0.5), B=r(batch, N, L), C=r(batch, N, L),
             z=r(batch, dim, L))
    p = dict(A=-(torch.rand(dim, N, generator=gp, device=dev) + 0.1), D=r(dim, dt=torch.float32, gen=gp),
             bias=r(dim, scale=0.3, dt=torch.float32, gen=gp) - 3.0)
    for t in list(x.values()) + list(p.values()):
        t.requires_grad_(True)
    return x, p


def time_steps(fn, x, p, dev, clock, warmup, iters, sync_all=True):
    """fwd / bwd / total ms (medians) and the peak memory of a step (bytes, CUDA)."""
    gy = torch.randn_like(x["u"])
    fwd, bwd, tot = [], [], []
    peak = 0
    for i in range(warmup + iters):
        for t in list(x.values()) + list(p.values()):
            t.grad = None
        if sync_all:
            dist.barrier()
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        a = clock.now()
        y = fn(x["u"], x["delta"], p["A"], x["B"], x["C"], p["D"], x["z"], p["bias"], True)
        b = clock.now()
        y.backward(gy)
        c = clock.now()
        if dev.type == "cuda":
            torch.cuda.synchronize()
            peak = max(peak, torch.cuda.max_memory_allocated())
        del y
        if i >= warmup:
            fwd.append(clock.ms(a, b))
            bwd.append(clock.ms(b, c))
            tot.append(clock.ms(a, c))
    return dict(fwd=statistics.median(fwd), bwd=statistics.median(bwd), total=statistics.median(tot), mem=peak)


def slowest(d, dev):
    """The largest value of each entry over the ranks (the step ends when the slowest rank does)."""
    keys = sorted(d)
    t = torch.tensor([float(d[k]) for k in keys], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {k: v for k, v in zip(keys, t.tolist())}


def time_exchange(batch, dim, N, dev, clock, warmup, iters):
    world = dist.get_world_size()
    f = torch.randn(batch * dim * (N + 1), device=dev)
    b = torch.randn(batch * dim * N, device=dev)
    of = torch.empty(world * f.numel(), device=dev)
    ob = torch.empty(world * b.numel(), device=dev)
    ts = []
    for i in range(warmup + iters):
        dist.barrier()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        a = clock.now()
        dist.all_gather_into_tensor(of, f)
        dist.all_gather_into_tensor(ob, b)
        c = clock.now()
        if i >= warmup:
            ts.append(clock.ms(a, c))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--L", default="128k,512k,1m", help="whole-sequence lengths for strong scaling")
    ap.add_argument("--weak", default="128k,256k", help="tokens a rank for weak scaling ('' to skip)")
    ap.add_argument("--dim", type=int, default=1536)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="bf16", choices=sorted(DT))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--no-single", action="store_true", help="skip the single-GPU run on the whole L")
    ap.add_argument("--no-overlap", action="store_true",
                    help="sum dt on the compute stream (context_parallel.OVERLAP_DT_SUM = False)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    cuda = args.device == "cuda"
    cp.OVERLAP_DT_SUM = not args.no_overlap
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    clock = Clock(dev)
    dtype = DT[args.dtype]
    b, d, N = args.batch, args.dim, args.N
    say = print if rank == 0 else (lambda *a, **k: None)
    name = torch.cuda.get_device_name(dev) if cuda else "CPU"
    say(f"# context parallel scan: {world} x {name}, torch {torch.__version__}, batch {b}, dim {d}, N {N}, "
        f"{args.dtype}, fwd + bwd (every gradient), medians of {args.iters}, dt sum "
        f"{'on a side stream' if cp.OVERLAP_DT_SUM else 'inline'}")
    cp_fn = lambda *a: cp.selective_scan_fn(*a)  # noqa: E731  (group = the world)
    one_fn = lambda *a: st.selective_scan_fn(*a)  # noqa: E731
    exch = time_exchange(b, d, N, dev, clock, args.warmup, args.iters * 4)
    exch = slowest(dict(t=exch), dev)["t"]
    rows = []

    def run_single(L):
        """The plain scan on L tokens, rank 0 alone (the others wait at the barrier)."""
        res = torch.zeros(4, dtype=torch.float64, device=dev)
        if rank == 0:
            try:
                x, p = inputs(b, d, L, N, dtype, dev, 1)
                r = time_steps(one_fn, x, p, dev, clock, args.warmup, args.iters, sync_all=False)
                res = torch.tensor([r["fwd"], r["bwd"], r["total"], r["mem"]], dtype=torch.float64, device=dev)
                del x, p
            except torch.cuda.OutOfMemoryError:
                res.fill_(float("nan"))
            if cuda:
                torch.cuda.empty_cache()
        dist.broadcast(res, 0)
        return dict(zip(("fwd", "bwd", "total", "mem"), res.tolist()))

    def run_cp(L_shard, seed):
        x, p = inputs(b, d, L_shard, N, dtype, dev, seed + rank, param_seed=seed)
        r = time_steps(cp_fn, x, p, dev, clock, args.warmup, args.iters)
        s = time_steps(one_fn, x, p, dev, clock, args.warmup, args.iters)  # the shard alone, no exchange
        del x, p
        if cuda:
            torch.cuda.empty_cache()
        r = slowest(r, dev)
        s = slowest(s, dev)
        return r, s

    say("\n## strong scaling (L over the ranks)\n")
    say("| L | a rank | cp fwd | cp bwd | cp total | shard alone | one device | ideal (one/world) | x ideal | "
        "x shard | mem cp (GiB) | mem one | mem x | exchange share |")
    say("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for L in parse_lengths(args.L):
        Ls = L // world
        r, s = run_cp(Ls, 10)
        one = run_single(L) if not args.no_single else dict(fwd=float("nan"), bwd=float("nan"),
                                                            total=float("nan"), mem=float("nan"))
        ideal = one["total"] / world
        row = dict(kind="strong", L=L, world=world, shard=Ls, cp=r, shard_alone=s, one=one, exchange_ms=exch)
        rows.append(row)
        gib = 2.0 ** 30
        say(f"| {L} | {Ls} | {r['fwd']:.2f} | {r['bwd']:.2f} | {r['total']:.2f} | {s['total']:.2f} | "
            f"{one['total']:.2f} | {ideal:.2f} | {r['total'] / ideal:.2f} | {r['total'] / s['total']:.2f} | "
            f"{r['mem'] / gib:.2f} | {one['mem'] / gib:.2f} | "
            f"{(r['mem'] / one['mem']) if one['mem'] == one['mem'] and one['mem'] > 0 else float('nan'):.2f} | "
            f"{100 * exch / r['total']:.2f} % |")
    weak = parse_lengths(args.weak) if args.weak else []
    if weak:
        say("\n## weak scaling (tokens a rank fixed)\n")
        say("| a rank | L | cp fwd | cp bwd | cp total | shard alone | x shard | mem cp (GiB) | mem shard |")
        say("|---|---|---|---|---|---|---|---|---|")
        for Ls in weak:
            r, s = run_cp(Ls, 20)
            rows.append(dict(kind="weak", L=Ls * world, world=world, shard=Ls, cp=r, shard_alone=s, exchange_ms=exch))
            gib = 2.0 ** 30
            say(f"| {Ls} | {Ls * world} | {r['fwd']:.2f} | {r['bwd']:.2f} | {r['total']:.2f} | {s['total']:.2f} | "
                f"{r['total'] / s['total']:.2f} | {r['mem'] / gib:.2f} | {s['mem'] / gib:.2f} |")
    say(f"\ndt sum: {'fused (torch.compile)' if cuda and cp.COMPILE_DT_SUM else 'eager torch ops'}")
    say(f"exchange alone (the forward's and the backward's all_gather): {exch:.3f} ms; "
        f"bytes a rank sends: {4 * b * d * (2 * N + 1)} ({b}*{d}*(N+1) + {b}*{d}*N float32)")
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=name, world=world, torch=torch.__version__, dtype=args.dtype, batch=b, dim=d, N=N,
                           rows=rows), f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
