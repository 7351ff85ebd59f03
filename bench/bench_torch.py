"""selscan through PyTorch: the op's forward and backward timed as a PyTorch user calls them, to
set next to the raw launcher figures of `make bench-cuda` (bench/bench_cuda.cu) and `make bench`.

    python bench/bench_torch.py                 # CUDA: lm-train, lm-2.8b, lm-prefill, lm-long (f32, bf16)
    python bench/bench_torch.py --device cpu    # CPU: lm-prefill and lm-train cut to L = 256, 1 and 2 threads
    python bench/bench_torch.py --cases lm-prefill --dtypes f32
    python bench/bench_torch.py --overhead      # host overhead per call: a tiny CPU problem, 2000 calls
    python bench/bench_torch.py --prefill --mamba   # short-prefill forward, queued and CUDA graphs, vs mamba_ssm

The problem is bench_cuda.cu's: u, delta, z (batch, dim, L), B / C (batch, N, L) variable (one
group), A, D, delta_bias f32, delta_softplus; the forward saves the checkpoint and the backward
reads it and computes every gradient. Several input sets rotated as bench_cuda does, so that L2
does not hold them. Two timings (CUDA events, median), each to set next to bench_cuda's in the
same mode:
  sync     each call alone between two events, synchronised before and after: its host work
           (Python, dispatcher, autograd, allocation, selscan's validation) fully exposed;
           `bench_cuda` times the raw launcher this way
  queued   20 calls back to back between two events, ms a call: a training loop's rate, where a
           call's host work overlaps the kernels already queued; `SELSCAN_BENCH_QUEUED=20
           bench_cuda` times the raw launcher this way
Rows:
  op fwd / op bwd      torch.ops.selscan.fwd / .bwd called directly (dispatcher + allocation + launch)
  eager fwd / bwd      selective_scan_fn(...) with inputs requiring grad, then torch.autograd.grad
                       of its output (Python wrapper, autograd, the checkpoint saved, every gradient)
  compiled fwd / bwd   the same function under torch.compile(fullgraph=True)
and, CUDA only, under CUDA graphs (20 calls captured in one graph, its replay timed, ms a call):
  op fwd               the op's forward saving the checkpoint (raw: bench_cuda's forward)
  eager fwd+bwd        selective_scan_fn + torch.autograd.grad (raw: bench_cuda's fwd + bwd)
--mamba adds mamba_ssm's own selective_scan_fn (its CUDA kernel, its autograd.Function), timed
as "eager" in the same run on the same inputs (mamba fwd / mamba bwd).
"""
import argparse
import statistics
import sys
import time

import torch

import selscan_torch as st

CASES = {  # name: (batch, dim, L, N), as bench/bench_cuda.cu
    "lm-train": (8, 3072, 2048, 16),
    "lm-2.8b": (4, 5120, 2048, 16),
    "lm-prefill": (1, 1536, 1024, 16),
    "lm-long": (1, 2048, 32768, 16),
}
CPU_CASES = {"lm-prefill": (1, 1536, 1024, 16), "lm-train-L256": (8, 3072, 256, 16)}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make_sets(shape, dtype, device, nsets, seed=0):
    batch, dim, L, N = shape
    g = torch.Generator(device="cpu").manual_seed(seed)

    def u(lo, hi, *s, dt=dtype):
        return (torch.rand(*s, generator=g) * (hi - lo) + lo).to(device=device, dtype=dt)

    common = dict(A=u(-4, -0.5, dim, N, dt=torch.float32), D=u(-1, 1, dim, dt=torch.float32),
                  delta_bias=u(-0.5, 0.5, dim, dt=torch.float32))
    sets = []
    for _ in range(nsets):
        s = dict(common)
        s.update(u=u(-1, 1, batch, dim, L), delta=u(-3, 1, batch, dim, L), z=u(-2, 2, batch, dim, L),
                 B=u(-1, 1, batch, N, L), C=u(-1, 1, batch, N, L))
        sets.append(s)
    dy = u(-1, 1, batch, dim, L)
    return sets, dy


def fn(u, delta, A, B, C, D, z, delta_bias):
    return st.selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)


def timer(device):
    """t(f): one call between two CUDA events, synchronised before and after (ms; its host work
    fully exposed). On the CPU: wall clock."""
    if device == "cuda":
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def t(f):
            torch.cuda.synchronize()
            e0.record()
            r = f()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1), r
    else:

        def t(f):
            t0 = time.perf_counter()
            r = f()
            return (time.perf_counter() - t0) * 1e3, r

    return t


def queued(fs, samples=9, warm=2):
    """CUDA: the calls fs[0], fs[1], ... issued back to back between two events, as a training loop
    issues them (one call's host work overlaps the kernels queued before it): ms a call, median of
    `samples` (after `warm`)."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = []
    for i in range(samples + warm):
        torch.cuda.synchronize()
        e0.record()
        for f in fs:
            f()
        e1.record()
        e1.synchronize()
        if i >= warm:
            per.append(e0.elapsed_time(e1) / len(fs))
    return statistics.median(per)


def graphed(calls, n):
    """CUDA graphs: calls() (n calls) warmed up on a side stream, captured in one graph, the
    replay timed by queued(): ms a call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            calls()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        keep = calls()  # noqa: F841  (the graph's outputs stay allocated while it is replayed)
    ms = queued([g.replay]) / n
    del g, keep
    return ms


INPUTS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def bench_case(name, shape, dtype, device, reps_f, reps_b, compiled=True, nq=20):
    """Medians (ms a call) of: the op called directly (op), selective_scan_fn with inputs requiring
    grad and torch.autograd.grad of its output (eager), the same under torch.compile (compiled);
    "sync" each call timed alone and synchronised; "queued" (CUDA) nq calls back to back."""
    batch, dim, L, N = shape
    es = torch.tensor([], dtype=dtype).element_size()
    set_bytes = (4 * batch * dim * L + 2 * batch * N * L) * es
    nsets = max(1, min(8, int(200e6 // set_bytes) + 1)) if device == "cuda" else 1
    sets, dy = make_sets(shape, dtype, device, nsets)
    t = timer(device)
    res = {}

    def op_args(s):
        return (s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"], None, None, True)

    # the op, directly (each set's checkpoint kept for the backward)
    fw, ck_of = [], {}
    for i in range(reps_f + 3):
        s = sets[i % nsets]
        ms, out = t(lambda: torch.ops.selscan.fwd(*op_args(s), False, True))
        ck_of[i % nsets] = out[2]
        if i >= 3:
            fw.append(ms)
    res["sync", "op fwd"] = statistics.median(fw)

    def op_bwd(i):
        s = sets[i % nsets]
        return torch.ops.selscan.bwd(*op_args(s)[:10], dy, None, ck_of[i % nsets], True, [1] * 9)

    bw = []
    for i in range(reps_b + 3):
        ms, _ = t(lambda: op_bwd(i))
        if i >= 3:
            bw.append(ms)
    res["sync", "op bwd"] = statistics.median(bw)
    if device == "cuda":
        res["queued", "op fwd"] = queued([lambda s=sets[i % nsets]: torch.ops.selscan.fwd(*op_args(s), False, True)
                                          for i in range(nq)])
        res["queued", "op bwd"] = queued([lambda i=i: op_bwd(i) for i in range(nq)])

    leaves = [{k: v.detach().clone().requires_grad_(True) for k, v in s.items()} for s in sets]

    def call(f, s):
        return f(*(s[k] for k in INPUTS))

    def grads(y, s):
        return torch.autograd.grad(y, [s[k] for k in INPUTS], dy)

    def run_mode(f, label):
        fw, bw = [], []
        for i in range(max(reps_f, reps_b) + 3):
            s = leaves[i % nsets]
            ms, y = t(lambda: call(f, s))
            msb, _ = t(lambda: grads(y, s))
            del y
            if i >= 3:
                if i - 3 < reps_f:
                    fw.append(ms)
                if i - 3 < reps_b:
                    bw.append(msb)
        res["sync", label + " fwd"] = statistics.median(fw)
        res["sync", label + " bwd"] = statistics.median(bw)
        if device != "cuda":
            return
        res["queued", label + " fwd"] = queued([lambda i=i: call(f, leaves[i % nsets]) for i in range(nq)])
        # nq forwards (untimed), then their nq backwards queued
        per = []
        for rep in range(5 + 1):
            ys = [call(f, leaves[i % nsets]) for i in range(nq)]
            ms = queued([lambda i=i: grads(ys[i], leaves[i % nsets]) for i in range(nq)], samples=1, warm=0)
            del ys
            if rep:
                per.append(ms)
        res["queued", label + " bwd"] = statistics.median(per)

    run_mode(fn, "eager")
    if MAMBA is not None:  # mamba_ssm's selective_scan_fn, the same calls in the same run
        run_mode(lambda u, delta, A, B, C, D, z, bias: MAMBA.selective_scan_fn(u, delta, A, B, C, D, z, bias,
                                                                            delta_softplus=True), "mamba")
    if device == "cuda":  # under CUDA graphs: the op's forward (checkpoint saved), eager fwd + grad
        res["graphs", "op fwd"] = graphed(lambda: [torch.ops.selscan.fwd(*op_args(sets[i % nsets]), False, True)
                                                   for i in range(nq)], nq)
        res["graphs", "eager fwd+bwd"] = graphed(
            lambda: [grads(call(fn, leaves[i % nsets]), leaves[i % nsets]) for i in range(nq)], nq)
    if compiled:
        run_mode(COMPILED, "compiled")
    return res


MAMBA = None  # --mamba: mamba_ssm.ops.selective_scan_interface (its CUDA kernel), timed beside ours

# one compiled function for every case (dynamic shapes: one graph per dtype, not one per shape)
COMPILED = torch.compile(fn, fullgraph=True, dynamic=True)


def profile(name, dev):
    shape = (CASES if dev == "cuda" else CPU_CASES)[name]
    sets, dy = make_sets(shape, torch.float32, dev, 1)
    s = {k: v.detach().clone().requires_grad_(True) for k, v in sets[0].items()}
    for label, f in (("eager", fn), ("compiled", COMPILED)):
        for _ in range(3):  # warm up (and compile)
            f(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"]).backward(dy)
        if dev == "cuda":
            torch.cuda.synchronize()
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(5):
                f(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"]).backward(dy)
                for v in s.values():
                    v.grad = None
            if dev == "cuda":
                torch.cuda.synchronize()
        print(f"== {label} {name} f32, 5 x (forward + backward)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=50))
    return 0


def overhead(calls=2000, batch=200, device="cpu", compiled=True):
    """Host cost per call of each layer (wrapper, dispatcher, autograd) on a tiny problem (batch 1,
    dim 16, L 8, N 4), where the kernel itself costs ~1 us: the median over batches of `batch`
    calls of time.perf_counter, in us a call. Device-independent host work (on CUDA the same
    layers run before the launch)."""
    torch.set_num_threads(1)
    sets, dy = make_sets((1, 16, 8, 4), torch.float32, device, 1)
    s = sets[0]
    args = (s["u"], s["delta"], s["A"], s["B"].unsqueeze(1), s["C"].unsqueeze(1), s["D"], s["z"], s["delta_bias"],
            None, None, True)
    ck = torch.ops.selscan.fwd(*args, False, True)[2]
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in s.items()}
    L = leaves

    def eager_fwd_nograd():
        with torch.no_grad():
            fn(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"])

    def eager_fwd():
        return fn(L["u"], L["delta"], L["A"], L["B"], L["C"], L["D"], L["z"], L["delta_bias"])

    def eager_fwd_bwd():
        fn(L["u"], L["delta"], L["A"], L["B"], L["C"], L["D"], L["z"], L["delta_bias"]).backward(dy)

    def compiled_fwd_bwd():
        COMPILED(L["u"], L["delta"], L["A"], L["B"], L["C"], L["D"], L["z"], L["delta_bias"]).backward(dy)

    rows = [
        ("op fwd (torch.ops.selscan.fwd)", lambda: torch.ops.selscan.fwd(*args, False, True)),
        ("op bwd (torch.ops.selscan.bwd)", lambda: torch.ops.selscan.bwd(*args[:10], dy, None, ck, True, [1] * 9)),
        ("selective_scan_fn, no grad", eager_fwd_nograd),
        ("selective_scan_fn fwd, grad", eager_fwd),
        ("selective_scan_fn fwd + backward", eager_fwd_bwd),
    ] + ([("compiled fwd + backward", compiled_fwd_bwd)] if compiled else [])
    print(f"host overhead per call, CPU tensors (1, 16, 8, 4) f32, 1 thread, torch {torch.__version__}: "
          f"median over {calls // batch} batches of {batch} calls (us)", flush=True)
    for label, f in rows:
        for _ in range(50):  # warm up (and compile)
            f()
        per = []
        for _ in range(calls // batch):
            t0 = time.perf_counter()
            for _ in range(batch):
                f()
            per.append((time.perf_counter() - t0) / batch * 1e6)
        for v in L.values():
            v.grad = None
        print(f"  {label:<36} {statistics.median(per):8.1f}   (min {min(per):.1f})", flush=True)
    return 0


PREFILL = [(1536, 1024), (2048, 128), (2048, 512), (2048, 2048), (5120, 128), (5120, 512), (5120, 2048)]


def prefill(dtypes, nq=20):
    """Short prefill (inference, CUDA): batch 1, N 16, z, D, delta_bias, softplus, last state
    returned, no checkpoint; the op's forward (and with --mamba mamba_ssm's selective_scan_cuda.fwd,
    its C++ op) called the same way: queued (nq calls between two events) and under CUDA graphs
    (nq calls captured in one graph), us a call, median."""
    cols = ["selscan queued", "selscan graphs"] + (["mamba queued", "mamba graphs"] if MAMBA is not None else [])
    print(f"short prefill forward through PyTorch, batch 1, N 16 (us a call, {nq} calls a sample)")
    print(f"{'dim,L':<12} {'dtype':<5} | " + " ".join(f"{c:>15}" for c in cols))
    if MAMBA is not None:
        import selective_scan_cuda as mamba_cuda
    for dim, L in PREFILL:
        for dn in dtypes:
            dtype = DTYPES[dn]
            nsets = max(2, min(nq, int(200e6 // (6 * dim * L * 2)) + 1))
            sets, _ = make_sets((1, dim, L, 16), dtype, "cuda", nsets)
            for s in sets:  # mamba's C++ op takes B / C as (batch, G, N, L) only
                s["B4"], s["C4"] = s["B"].unsqueeze(1), s["C"].unsqueeze(1)
            ours = [lambda s=sets[i % nsets]: torch.ops.selscan.fwd(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"],
                                                                      s["z"], s["delta_bias"], None, None, True, True,
                                                                      False) for i in range(nq)]
            r = [queued(ours) * 1e3, graphed(lambda: [f() for f in ours], nq) * 1e3]
            if MAMBA is not None:
                theirs = [lambda s=sets[i % nsets]: mamba_cuda.fwd(s["u"], s["delta"], s["A"], s["B4"], s["C4"], s["D"],
                                                                    s["z"], s["delta_bias"], True) for i in range(nq)]
                r += [queued(theirs) * 1e3, graphed(lambda: [f() for f in theirs], nq) * 1e3]
            print(f"{f'{dim},{L}':<12} {dn:<5} | " + " ".join(f"{v:15.2f}" for v in r), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", default=None, help="a case name: print torch.profiler tables of one eager and one "
                    "compiled forward + backward of it (f32) instead of timing")
    ap.add_argument("--overhead", action="store_true", help="host overhead per call of each layer on a tiny CPU "
                    "problem (2000 calls each) instead of timing the cases")
    ap.add_argument("--prefill", action="store_true", help="CUDA: the short-prefill forward table (batch 1, "
                    "L 128-2048) queued and under CUDA graphs, with --mamba also mamba_ssm's kernel")
    ap.add_argument("--mamba", action="store_true", help="also time mamba_ssm's selective_scan_fn (eager, the same "
                    "calls; mamba_ssm and its selective_scan_cuda must be importable)")
    a = ap.parse_args()
    if a.mamba:
        global MAMBA
        import mamba_ssm.ops.selective_scan_interface as MAMBA
    if a.prefill:
        return prefill(a.dtypes.split(","))
    if a.overhead:
        return overhead(compiled=not a.no_compile)
    if a.profile:
        return profile(a.profile, a.device)
    dev = a.device
    cases = CASES if dev == "cuda" else CPU_CASES
    names = a.cases.split(",") if a.cases else list(cases)
    if dev == "cuda":
        print(f"selscan_torch bench on {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA events, "
              "median; sync: each call alone, synchronised (host work exposed); queued: 20 calls back to back "
              "(a training loop's rate)", flush=True)
    else:
        print(f"selscan_torch bench on CPU ({st.cpu_backend()}) | torch {torch.__version__} | wall clock, median",
              flush=True)
    cols = ["op fwd", "eager fwd", "compiled fwd", "op bwd", "eager bwd", "compiled bwd", "eager fwd+bwd"]
    if a.mamba:
        cols += ["mamba fwd", "mamba bwd"]
    threads = [0] if dev == "cuda" else [1, 2]
    modes = ["sync", "queued", "graphs"] if dev == "cuda" else ["sync"]
    print(f"{'case':<14} {'dtype':<5} {'thr':>3} {'mode':<6} | " + " ".join(f"{c:>12}" for c in cols) + "   (ms a call)",
          flush=True)
    for name in names:
        for dn in a.dtypes.split(","):
            for nt in threads:
                if nt:
                    torch.set_num_threads(nt)
                reps_f, reps_b = (30, 20) if dev == "cuda" else (5, 3)
                r = bench_case(name, cases[name], DTYPES[dn], dev, reps_f, reps_b, compiled=not a.no_compile)
                for m in modes:
                    print(f"{name:<14} {dn:<5} {nt or '':>3} {m:<6} | " +
                          " ".join(f"{r.get((m, c), float('nan')):12.4f}" for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
