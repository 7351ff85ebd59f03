"""bench/host_cost.py: the host time of one selscan_torch call at sizes where the kernel is negligible
(a host-bound loop: wall time a call, median of 7 rounds), for before / after comparisons of the
binding's per-call overhead. Run it with each package first on PYTHONPATH, alternating, in several
processes a package, and compare the minima: on the GPU machines one package's processes differ by up to
1.7x (bench/RESULTS.md "The CUDA-only share, measured again").

    PYTHONPATH=<package dir> python3 bench/host_cost.py [--device cuda|cpu] [--threads 1]

Cases: the scan forward without grad, with grad (the autograd node), forward + sum().backward(), the
decode step through selective_state_update and through torch.ops.selscan.step directly. Sizes: the
scan b1, dim 64, L 16, N 16; the step b1, dim 1536, N 16 (float32). bench/RESULTS.md "Issue 39 after the
fourth session" has the H200 figures (measured with the same cases as two scratch scripts)."""
import argparse
import statistics
import time

import torch

import selscan_torch as ss


def timed(fn, sync, calls, rounds=7, warm=300):
    for _ in range(warm):
        fn()
    sync()
    r = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        r.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(r), r


def cases(dev):
    """The calls timed, as (name, key, fn) on device dev (bench/host_prof.py samples them by key)."""
    g = torch.Generator().manual_seed(0)

    def t(*s, rg=False):
        return torch.randn(*s, generator=g).to(dev).requires_grad_(rg)

    b, d, L, N = 1, 64, 16, 16
    u, dl, z = t(b, d, L, rg=True), t(b, d, L, rg=True), t(b, d, L, rg=True)
    A = (-torch.rand(d, N, generator=g)).to(dev).requires_grad_()
    B, C, D, bias = t(b, N, L, rg=True), t(b, N, L, rg=True), t(d, rg=True), t(d, rg=True)
    ds = 1536
    st, x, dt = t(1, ds, N), t(1, ds), t(1, ds)
    As = -torch.rand(ds, N, generator=g).to(dev)
    Bs, Cs, Ds, zs, bs = t(1, N), t(1, N), t(ds), t(1, ds), t(ds)

    def fwd():
        return ss.selective_scan_fn(u, dl, A, B, C, D, z, bias, delta_softplus=True)

    def fwd_nograd():
        with torch.no_grad():
            fwd()

    def step():
        with torch.no_grad():
            ss.selective_state_update(st, x, dt, As, Bs, Cs, Ds, zs, bs, dt_softplus=True)

    def step_op():
        with torch.no_grad():
            torch.ops.selscan.step.default(st, x, dt, As, Bs, Cs, Ds, zs, bs, None, True, False)

    return [("scan forward, no grad", "fwd", fwd_nograd), ("scan forward, with grad", "fwdgrad", fwd),
            ("scan forward + backward", "fwdbwd", lambda: fwd().sum().backward()),
            ("step (selective_state_update)", "ssu", step), ("step (torch.ops.selscan.step)", "step", step_op)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = a.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    print(f"selscan_torch from {ss.__file__}; torch {torch.__version__}; device {dev}")
    for name, _, fn in cases(dev):
        med, r = timed(fn, sync, a.calls)
        print(f"{name:32s} {med:8.2f} us a call  (rounds {' '.join(f'{v:.1f}' for v in r)})")


if __name__ == "__main__":
    main()
