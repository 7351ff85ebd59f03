"""Context parallel Mamba-1 with selscan: one sequence sharded along L over the ranks of a
torch.distributed group, forward and backward equal to the single-device call.

    pip install --no-build-isolation ./bindings/torch          # once (or build it in place)
    torchrun --nproc_per_node=2 examples/context_parallel.py     # CPU (gloo) or GPUs (NCCL, one a rank)
    torchrun --nproc_per_node=4 examples/context_parallel.py --L 65536 --dim 256

Each rank builds the same full inputs from one seed (for the check only: a real model feeds each
rank its own shard), keeps its shard, and runs
  1. the scan: selscan_torch.context_parallel.selective_scan_fn, gradients included;
  2. a Mamba-1 layer (MambaMixerCP: in_proj, the causal conv with its halo from the previous rank,
     the scan, out_proj) for a few optimizer steps, the weights' gradients summed over the ranks
     (all_reduce_grads) as DDP would;
then rank 0 gathers the shards and checks them against the single-device call on the whole sequence.
"""
import argparse
import os
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


def rel_err(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-30)).item()


def gather_cat(t, dim, group=None):
    """The shards of every rank, concatenated along dim (shards may differ in length)."""
    world = dist.get_world_size(group)
    n = torch.tensor([t.shape[dim]], device=t.device)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n, group=group)
    m = max(int(s) for s in sizes)
    pad = list(t.shape)
    pad[dim] = m - t.shape[dim]
    tp = torch.cat([t, t.new_zeros(pad)], dim=dim).contiguous()
    parts = [torch.empty_like(tp) for _ in range(world)]
    dist.all_gather(parts, tp, group=group)
    return torch.cat([p.narrow(dim, 0, int(s)) for p, s in zip(parts, sizes)], dim=dim)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--L", type=int, default=4096, help="the whole sequence's length")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps of the layer")
    args = ap.parse_args()

    use_cuda = torch.cuda.is_available() and st.has_cuda_kernels()
    local = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"{world} ranks, {'NCCL on GPUs' if use_cuda else 'gloo on CPUs'}; L {args.L} ({args.L // world} a rank), "
        f"dim {args.dim}, N {args.N}, batch {args.batch}")

    # ---- 1. the scan -------------------------------------------------------------------------------
    g = torch.Generator().manual_seed(0)
    b, d, L, N = args.batch, args.dim, args.L, args.N
    full = dict(u=torch.randn(b, d, L, generator=g), delta=torch.randn(b, d, L, generator=g) * 0.5,
                B=torch.randn(b, N, L, generator=g), C=torch.randn(b, N, L, generator=g),
                z=torch.randn(b, d, L, generator=g))
    A = -torch.rand(d, N, generator=g) - 0.1
    D, bias = torch.randn(d, generator=g), torch.randn(d, generator=g) * 0.3 - 2.0
    mine = {k: cp.shard(v, -1).to(dev).requires_grad_(True) for k, v in full.items()}
    params = {k: v.to(dev).requires_grad_(True) for k, v in dict(A=A, D=D, bias=bias).items()}
    t0 = time.perf_counter()
    y, last = cp.selective_scan_fn(mine["u"], mine["delta"], params["A"], mine["B"], mine["C"], params["D"],
                                   mine["z"], params["bias"], delta_softplus=True, return_last_state=True)
    y.sum().backward()  # every rank runs the backward (one all_gather inside)
    cp.all_reduce_grads(params.values())  # A, D, delta_bias: sum the shards' contributions
    if use_cuda:
        torch.cuda.synchronize()
    t_cp = time.perf_counter() - t0
    y_all = gather_cat(y.detach(), -1)
    du_all = gather_cat(mine["u"].grad, -1)
    if rank == 0:
        ref = {k: v.to(dev).requires_grad_(True) for k, v in full.items()}
        rp = {k: v.to(dev).requires_grad_(True) for k, v in dict(A=A, D=D, bias=bias).items()}
        t0 = time.perf_counter()
        y1, last1 = st.selective_scan_fn(ref["u"], ref["delta"], rp["A"], ref["B"], ref["C"], rp["D"], ref["z"],
                                         rp["bias"], delta_softplus=True, return_last_state=True)
        y1.sum().backward()
        if use_cuda:
            torch.cuda.synchronize()
        t_one = time.perf_counter() - t0
        say(f"scan: out {rel_err(y_all, y1):.1e}, du {rel_err(du_all, ref['u'].grad):.1e}, "
            f"dA {rel_err(params['A'].grad, rp['A'].grad):.1e}, dD {rel_err(params['D'].grad, rp['D'].grad):.1e} "
            f"(max |diff| / max |single|); {t_cp * 1e3:.1f} ms on {world} ranks, {t_one * 1e3:.1f} ms alone "
            f"(first calls, not a benchmark: bench/bench_context_parallel.py)")
    last_state = last.detach().clone()
    dist.broadcast(last_state, world - 1)  # the whole sequence's last state lives on the last rank
    if rank == 0:
        say(f"scan: last state (from rank {world - 1}) {rel_err(last_state, last1):.1e}")

    # ---- 2. a Mamba-1 layer, trained for a few steps ----------------------------------------------
    torch.manual_seed(0)
    hidden, inner = 32, 64
    layer = cp.MambaMixerCP(hidden, inner, state_size=16, conv_kernel=4).to(dev)
    single = cp.MambaMixerCP(hidden, inner, state_size=16, conv_kernel=4).to(dev)
    single.load_state_dict(layer.state_dict())
    start = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    opt = torch.optim.SGD(layer.parameters(), lr=0.05)
    x_full = torch.randn(b, L, hidden, generator=g).to(dev)
    target_full = torch.randn(b, L, hidden, generator=g).to(dev)
    x, target = cp.shard(x_full, 1), cp.shard(target_full, 1)
    # rank 0 also runs the same steps on the whole sequence alone (a group of one rank), to compare
    solo = dist.new_group([0])  # every rank takes part in creating it
    if rank == 0:
        single.group = solo
        opt1 = torch.optim.SGD(single.parameters(), lr=0.05)
    for step in range(args.steps):
        opt.zero_grad()
        out = layer(x)
        loss = ((out - target) ** 2).sum() / target_full.numel()  # this shard's part of the mean
        loss.backward()
        cp.all_reduce_grads(layer)  # the whole sequence's gradient on every rank
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            opt1.zero_grad()
            loss1 = ((single(x_full) - target_full) ** 2).mean()
            loss1.backward()
            opt1.step()
            worst, name = max((rel_err(p.grad, q.grad), k) for (k, p), q in zip(layer.named_parameters(), single.parameters()))
            say(f"layer step {step}: loss {total.item():.6f} ({loss1.item():.6f} alone), "
                f"gradients vs one device {worst:.1e} (worst: {name})")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
