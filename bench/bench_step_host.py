"""bench/bench_step_host.py - the host time of the multi-head decode step on the CPU (bench/NOTES.md Step-host-v1):
_checks.fold_heads alone and the whole selective_state_update call, mamba_ssm's argument forms (A / D / dt_bias / dt
expanded from per-head values), batch 1, 24 heads x 64, N 128 (a Mamba2-130m layer). Mean of n calls after 100
warm-ups, microseconds.

Usage: PYTHONPATH=bindings/torch python3 bench/bench_step_host.py [n]
"""
import sys
import time

import torch

import selscan_torch as st
from selscan_torch import _checks


def mean_us(f, n):
    for _ in range(100):
        f()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    b, H, P, N, G = 1, 24, 64, 128, 1
    g = torch.Generator().manual_seed(0)
    state = torch.zeros(b, H, P, N)
    x, z = torch.randn(b, H, P, generator=g), torch.randn(b, H, P, generator=g)
    B, C = torch.randn(b, G, N, generator=g), torch.randn(b, G, N, generator=g)
    A = (-torch.rand(H, generator=g))[:, None, None].expand(H, P, N)
    D, dt_bias = torch.randn(H, generator=g)[:, None].expand(H, P), torch.randn(H, generator=g)[:, None].expand(H, P)
    dt = torch.randn(b, H, generator=g)[:, :, None].expand(b, H, P)
    fold = mean_us(lambda: _checks.fold_heads(state, x, dt, A, B, C, D, z, dt_bias), n)
    call = mean_us(lambda: st.selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=True),
                   max(n // 4, 1))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads: fold_heads {fold:.1f} us, "
          f"selective_state_update (CPU, with its kernel) {call:.1f} us")


if __name__ == "__main__":
    main()
