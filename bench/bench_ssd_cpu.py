"""Mamba-2 on the CPU (issue 40): selscan's SSD scan against transformers' PyTorch fallback, in one
process, the scan alone and a Mamba2ForCausalLM training step end to end.

    PYTHONPATH=bindings/torch python3 bench/bench_ssd_cpu.py [--threads N] [--lens 512,1024] [--reps 3]

scan: mamba_chunk_scan_combined (selscan) against transformers' `mamba2_chunk_scan` PyTorch body
(modeling_mamba2, unwrapped: the path a CPU model takes without mamba_ssm), forward + backward of
every input at a Mamba2-130m layer's shape (nheads 24, headdim 64, dstate 128, one group, chunk 256),
batch 1. model: a Mamba2ForCausalLM training step (forward + backward, float32) of a 2-layer model
with the 130m layer shape, with and without selscan_torch.integrations.use_in_transformers().
Prints the median of --reps timed runs after one warm-up, and the ratio (transformers / selscan).
"""
import argparse
import inspect
import statistics
import time

import torch


def timed(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def scan_case(L, reps):
    import transformers.models.mamba2.modeling_mamba2 as m2

    import selscan_torch as st

    torch_body = inspect.unwrap(m2.mamba2_chunk_scan)
    g = torch.Generator().manual_seed(0)
    b, H, P, N = 1, 24, 64, 128
    x = torch.randn(b, L, H, P, generator=g)
    dt = torch.randn(b, L, H, generator=g) * 0.5
    A = -(torch.rand(H, generator=g) + 0.5)
    B, C = torch.randn(b, L, 1, N, generator=g), torch.randn(b, L, 1, N, generator=g)
    D, bias = torch.randn(H, generator=g), torch.randn(H, generator=g) * 0.3
    leaves = [t.requires_grad_() for t in (x, dt, A, B, C, D, bias)]

    def run(f):
        def go():
            out = f(x, dt, A, B, C, 256, D=D, dt_bias=bias, dt_softplus=True)
            out = out[0] if isinstance(out, tuple) else out
            torch.autograd.grad(out.float().square().sum(), leaves)
        return go

    t_sel = timed(run(st.mamba_chunk_scan_combined), reps)
    t_tf = timed(run(torch_body), reps)
    return t_sel, t_tf


def model_case(L, reps):
    import transformers

    import selscan_torch.integrations as si

    torch.manual_seed(0)
    cfg = transformers.Mamba2Config(vocab_size=1024, hidden_size=768, num_hidden_layers=2, num_heads=24, head_dim=64,
                                    expand=2, state_size=128, n_groups=1, chunk_size=256)
    model = transformers.Mamba2ForCausalLM(cfg).float().train()
    ids = torch.randint(0, 1024, (1, L), generator=torch.Generator().manual_seed(1))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    t_tf = timed(step, reps)
    with si.use_in_transformers():
        t_sel = timed(step, reps)
    return t_sel, t_tf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--lens", default="512,1024")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default="scan,model")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| case | L | selscan | transformers' PyTorch | x |")
    print("|---|---|---|---|---|")
    for case in a.cases.split(","):
        for L in (int(v) for v in a.lens.split(",")):
            t_sel, t_tf = (scan_case if case == "scan" else model_case)(L, a.reps)
            print(f"| {case} fwd+bwd | {L} | {t_sel * 1e3:.1f} ms | {t_tf * 1e3:.1f} ms | {t_tf / t_sel:.1f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
