"""Context parallel scan (selscan_torch.context_parallel): time and memory per rank against one GPU.

    torchrun --nproc_per_node=2 bench/bench_context_parallel.py               # GPUs (NCCL)
    torchrun --nproc_per_node=4 bench/bench_context_parallel.py --json cp4.json
    torchrun --nproc_per_node=2 bench/bench_context_parallel.py --device cpu --L 8192,16384 --dim 64 --weak 4096
    torchrun --nproc_per_node=4 bench/bench_context_parallel.py --L 1m --weak '' --trace    # phases a rank

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

--trace: where a context parallel step's time goes, rank by rank (medians of the timed steps). The
library carries no instrumentation: PhaseTrace wraps selscan_torch.context_parallel's module-level
calls from here (_fwd: a forward pass of the scan, _bwd: a backward pass, _all_gather: a
collective; the forward's first all_gather is the ranks' agreement, CHECK_RANKS) and records a
clock mark (CUDA event / perf_counter) as each starts and ends. --no-overlap likewise replaces its
_side_stream: the shard's sum of dt then runs inline on the compute stream.
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


class PhaseTrace:
    """--trace: clock marks at the start and end of every call of context_parallel's _fwd, _bwd and
    _all_gather during a step (wrapped here, from the bench side; unwrapped calls while not
    recording cost one attribute test). begin / mark / end bracket a step; summary() gives the
    intervals between consecutive marks, medians over the kept steps."""

    CALLS = (("_fwd", "scan fwd"), ("_bwd", "scan bwd"), ("_all_gather", "all_gather"))

    def __init__(self, clock):
        self.clock = clock
        self.marks = None  # None: not recording
        self.steps = []
        for name, label in self.CALLS:
            setattr(cp, name, self._wrap(getattr(cp, name), label))

    def _wrap(self, fn, label):
        def timed(*args, **kwargs):
            if self.marks is None:
                return fn(*args, **kwargs)
            self.marks.append((label, "start", self.clock.now()))
            out = fn(*args, **kwargs)
            self.marks.append((label, "end", self.clock.now()))
            return out

        return timed

    def begin(self, t):
        self.marks = [("step", "start", t)]

    def mark(self, label, t):
        if self.marks is not None:
            self.marks.append((label, "returned", t))

    def end(self, keep):
        marks, self.marks = self.marks, None
        if keep and marks:
            # a call's own time is named after it; the time between two calls (composing the
            # states, autograd, a wait on a side stream) is "+", "+|" up to where fwd / bwd returned
            self.steps.append([(l1 if (l0 == l1 and e0 == "start") else ("+|" if e1 == "returned" else "+"),
                                self.clock.ms(t0, t1)) for (l0, e0, t0), (l1, e1, t1) in zip(marks, marks[1:])])

    def summary(self):
        """[(label, median ms)] over the steps kept since the last summary."""
        steps, self.steps = self.steps, []
        if not steps or any(len(s) != len(steps[0]) for s in steps):
            return []
        return [(steps[0][k][0], statistics.median(s[k][1] for s in steps)) for k in range(len(steps[0]))]


def time_steps(fn, x, p, dev, clock, warmup, iters, sync_all=True, trace=None):
    """fwd / bwd / total ms (medians) and the peak memory of a step (bytes, CUDA). trace: a
    PhaseTrace recording each step's phases."""
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
        if trace is not None:
            trace.begin(a)
        y = fn(x["u"], x["delta"], p["A"], x["B"], x["C"], p["D"], x["z"], p["bias"], True)
        b = clock.now()
        if trace is not None:
            trace.mark("fwd returned", b)
        y.backward(gy)
        c = clock.now()
        if trace is not None:
            trace.mark("bwd returned", c)
            trace.end(keep=i >= warmup)
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
                    help="sum dt on the compute stream, not on a side stream beside the zero-start pass")
    ap.add_argument("--trace", action="store_true",
                    help="print the phases of a context parallel step on every rank (PhaseTrace)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    cuda = args.device == "cuda"
    if args.no_overlap:  # no side stream: context_parallel sums dt inline (its _side_stream, replaced from here)
        cp._side_stream = lambda device: None
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    clock = Clock(dev)
    trace = PhaseTrace(clock) if args.trace else None
    dtype = DT[args.dtype]
    b, d, N = args.batch, args.dim, args.N
    say = print if rank == 0 else (lambda *a, **k: None)
    name = torch.cuda.get_device_name(dev) if cuda else "CPU"
    say(f"# context parallel scan: {world} x {name}, torch {torch.__version__}, batch {b}, dim {d}, N {N}, "
        f"{args.dtype}, fwd + bwd (every gradient), medians of {args.iters}, dt sum "
        f"{'inline' if args.no_overlap else 'on a side stream'}")
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

    traced = []  # --trace: this rank's phase lines, printed after the tables

    def trace_phases(kind, L_shard):
        def show(name, ms):
            return f"+{ms:.2f}" if name == "+" else f"+{ms:.2f} //" if name == "+|" else f"{name} {ms:.2f}"

        text = " ".join(show(name, ms) for name, ms in trace.summary())
        traced.append(f"| {kind} | {L_shard * world} | {L_shard} | {rank} | {text} |")

    def run_cp(L_shard, seed, kind):
        x, p = inputs(b, d, L_shard, N, dtype, dev, seed + rank, param_seed=seed)
        r = time_steps(cp_fn, x, p, dev, clock, args.warmup, args.iters, trace=trace)
        if trace is not None:
            trace_phases(kind, L_shard)
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
        r, s = run_cp(Ls, 10, "strong")
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
            r, s = run_cp(Ls, 20, "weak")
            rows.append(dict(kind="weak", L=Ls * world, world=world, shard=Ls, cp=r, shard_alone=s, exchange_ms=exch))
            gib = 2.0 ** 30
            say(f"| {Ls} | {Ls * world} | {r['fwd']:.2f} | {r['bwd']:.2f} | {r['total']:.2f} | {s['total']:.2f} | "
                f"{r['total'] / s['total']:.2f} | {r['mem'] / gib:.2f} | {s['mem'] / gib:.2f} |")
    if trace is not None:
        say("\n## phases of a cp step (--trace; ms, medians; a call's own time by its name, + between calls, "
            "// where the forward / backward returned)\n")
        say("| rows | L | a rank | rank | phases |")
        say("|---|---|---|---|---|")
        for q in range(world):
            if q == rank:
                print("\n".join(traced), flush=True)
            dist.barrier()
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
