"""One rank of test_context_parallel.py's process group (not a test module itself).

    python _cp_worker.py RANK WORLD INIT_FILE BACKEND DEVICE CASES_FILE OUT_FILE

Loads the cases (full-sequence inputs and upstream gradients, written by the test), runs each
through selscan_torch.context_parallel on this rank's shard, twice, and saves this rank's outputs
and gradients (and whether the two runs agreed bitwise) for the test to compare with the
single-process call.
"""
import contextlib
import os
import sys
import traceback

import torch
import torch.distributed as dist

import selscan_torch as st
import selscan_torch.context_parallel as cp

PER_TOKEN = ("u", "delta", "z")  # sharded along L (the last dim); a variable B / C too


def bounds(lengths, r):
    a = sum(lengths[:r])
    return a, a + lengths[r]


def local(name, t, a, b):
    if t is None:
        return None
    if name in PER_TOKEN or (name in ("B", "C") and t.dim() >= 3):
        return t[..., a:b]
    return t


def run_scan(case, g, gr, dev):
    lengths = case["lengths"]
    a, b = bounds(lengths, gr)
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0")
    res = []
    for _ in range(2):
        inp = {}
        for k in names:
            t = case["inputs"].get(k)
            if t is None:
                inp[k] = None
                continue
            t = local(k, t, a, b).detach().clone().to(dev)
            inp[k] = t.requires_grad_(case.get("grad") is None or k in case["grad"])
        out = cp.selective_scan_fn(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"], inp["z"],
                                   inp["delta_bias"], case["softplus"], case["last"], group=g,
                                   cu_seqlens=case["cu"], h0=inp["h0"] if gr == 0 else None)
        y, last = out if case["last"] else (out, None)
        loss = (y.float() * case["gy"][..., a:b].to(dev)).sum()
        if last is not None and case["gl"] is not None:
            loss = loss + (last * case["gl"][gr].to(dev)).sum()
        loss.backward()
        grads = {k: v.grad.cpu() for k, v in inp.items() if v is not None and v.grad is not None}
        res.append(dict(y=y.detach().cpu(), last=None if last is None else last.detach().cpu(), grads=grads))
    return res


def run_block(case, g, gr, dev):
    lengths = case["lengths"]
    a, b = bounds(lengths, gr)
    res = []
    for _ in range(2):
        m = cp.MambaMixerCP(**case["config"], group=g).to(dev)
        m.load_state_dict({k: v.to(dev) for k, v in case["state"].items()})
        h = case["hidden"][:, a:b].detach().clone().to(dev).requires_grad_(True)
        mask = case.get("mask")
        y = m(h, attention_mask=None if mask is None else mask[:, a:b].to(dev))
        (y.float() * case["gy"][:, a:b].to(dev)).sum().backward()
        grads = {"hidden": h.grad.cpu()}
        grads.update({k: p.grad.cpu() for k, p in m.named_parameters()})
        res.append(dict(y=y.detach().cpu(), last=None, grads=grads))
    return res


def run_errors(case, g, gr, dev):
    msgs = {}
    x = torch.randn(1, 4, 3, device=dev)
    A = -torch.rand(4, 2, device=dev)
    Bv = torch.randn(1, 2, 3, device=dev)
    try:
        cp.selective_scan_fn(x, x, A, Bv, Bv, return_last_state=True, group=g, cu_seqlens=[0, 3 * case["world"]])
    except NotImplementedError as e:
        msgs["packed_last"] = str(e)
    try:
        cp.selective_scan_fn(torch.randn(2, 4, 3, device=dev), torch.randn(2, 4, 3, device=dev), A,
                             torch.randn(2, 2, 3, device=dev), torch.randn(2, 2, 3, device=dev), group=g,
                             cu_seqlens=[0, 3 * case["world"]])
    except ValueError as e:
        msgs["packed_batch"] = str(e)
    try:
        cp.causal_conv1d_cp(torch.randn(1, 4, 2, device=dev), torch.randn(4, 4, device=dev), group=g)
    except ValueError as e:
        msgs["short_shard"] = str(e)
    return [dict(msgs=msgs)]


def _scan_disagree(s, g, dev):
    """A scan whose arguments follow the spec s (this rank's); replicated parameters drawn from one
    seed on every rank, shifted where s says so."""
    batch, dim, N, L = s["batch"], s["dim"], s["N"], s["L"]
    gen = torch.Generator().manual_seed(0)
    A = -(torch.rand(dim, N, generator=gen) + 0.2)
    D, bias = torch.randn(dim, generator=gen), torch.randn(dim, generator=gen)
    A[0, 0] += s.get("dA", 0.0)
    D[-1] += s.get("dD", 0.0)
    bias[1] += s.get("dbias", 0.0)
    u, delta, z = (torch.randn(batch, dim, L) for _ in range(3))
    B, C = torch.randn(batch, N, L), torch.randn(batch, N, L)
    if s.get("bad_delta"):  # this rank's own mistake: delta one token short
        delta = delta[..., :-1]
    inp = dict(u=u.to(s.get("dtype", torch.float32)), delta=delta, A=A.requires_grad_(True), B=B, C=C, D=D, z=z,
               delta_bias=bias)
    inp = {k: v.to(dev) for k, v in inp.items()}
    before = {k: v.detach().clone() for k, v in inp.items()}
    try:
        with torch.no_grad() if s.get("no_grad") else contextlib.nullcontext():
            cp.selective_scan_fn(inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], inp["D"], inp["z"],
                                 inp["delta_bias"], True, group=g, cu_seqlens=s.get("cu"))
    finally:
        s["untouched"] = all(torch.equal(before[k], v.detach()) for k, v in inp.items())


def _conv_disagree(s, g, dev):
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(s["dim"], s["W"], generator=gen), torch.randn(s["dim"], generator=gen)
    weight[0, -1] += s.get("dweight", 0.0)
    x = torch.randn(s["batch"], s["dim"], s["L"])
    cp.causal_conv1d_cp(x.to(dev), weight.to(dev), bias.to(dev), "silu", group=g)


def _block_disagree(s, g, dev):
    torch.manual_seed(0)
    m = cp.MambaMixerCP(8, s["inner"], state_size=4, conv_kernel=4, time_step_rank=3, group=g).to(dev)
    with torch.no_grad():
        m.A_log[0, 0] += s.get("dA_log", 0.0)
    m(torch.randn(s["batch"], s["L"], 8, device=dev))


def run_disagree(case, g, gr, dev):
    """One call whose arguments differ across ranks (case["ranks"]: rank -> what it changes); the
    error this rank raised, then a small valid scan: the group still works afterwards."""
    spec = dict(case["base"], **case["ranks"].get(gr, {}))
    err = None
    try:
        {"scan": _scan_disagree, "conv": _conv_disagree, "block": _block_disagree}[case["fn"]](spec, g, dev)
    except Exception as e:
        err = (type(e).__name__, str(e))
    x = torch.ones(1, 2, 3, device=dev)
    y = cp.selective_scan_fn(x, x, -torch.ones(2, 1, device=dev), torch.ones(1, 1, 3, device=dev),
                             torch.ones(1, 1, 3, device=dev), group=g)
    return [dict(err=err, untouched=spec.get("untouched"), after=y.detach().cpu())]


def run_cp2(case, g, gr, dev):
    """Hostile calls found after the issue-38 hardening (test_38_cp_*): each sub-call's error (type,
    message) or None, and a small valid scan after it (the group still works)."""
    world = case["world"]
    got = {}

    def attempt(name, fn):
        try:
            fn()
            got[name] = None
        except Exception as e:
            got[name] = (type(e).__name__, str(e))
        x = torch.ones(1, 2, 3, device=dev)
        y = cp.selective_scan_fn(x, x, -torch.ones(2, 1, device=dev), torch.ones(1, 1, 3, device=dev),
                                 torch.ones(1, 1, 3, device=dev), group=g)
        got[name + ":after"] = y.detach().cpu()

    def grads_presence():  # a .grad on rank 0 only: the flat buffers' sizes differed (gloo aborted)
        p, q = torch.nn.Parameter(torch.ones(3, device=dev)), torch.nn.Parameter(torch.ones(2, device=dev))
        p.grad = torch.ones_like(p)
        if gr == 0:
            q.grad = torch.ones_like(q)
        cp.all_reduce_grads([p, q], group=g)

    def grads_vs_scan():  # rank 0 in all_reduce_grads, the others in a scan
        if gr == 0:
            p = torch.nn.Parameter(torch.ones(34, device=dev))
            p.grad = torch.ones_like(p)
            cp.all_reduce_grads([p], group=g)
        else:
            x = torch.ones(1, 2, 3, device=dev)
            cp.selective_scan_fn(x, x, -torch.ones(2, 1, device=dev), torch.ones(1, 1, 3, device=dev),
                                 torch.ones(1, 1, 3, device=dev), group=g)

    def grads_f64():  # float64 gradients were summed in float32
        p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64, device=dev))
        p.grad = torch.full_like(p, 1.0 + 1e-12 * (gr + 1))
        cp.all_reduce_grads([p], group=g)
        got["f64_sum"] = p.grad.item()

    def block_f64():  # the scan refused float64 on rank 0 only (before the all_gather): the others aborted
        torch.manual_seed(0)
        cp.MambaMixerCP(4, 6, 2, 3, 2, group=g).to(dev).double()(torch.randn(1, 5, 4, dtype=torch.float64, device=dev))

    def conv_int_weight():  # F.conv1d refused it after the halo exchange, a RuntimeError naming nothing
        cp.causal_conv1d_cp(torch.randn(1, 2, 5, device=dev), torch.ones(2, 4, dtype=torch.int8, device=dev), group=g)

    def conv_meta_bias():  # the device rule: _checks.same_device's words, naming the argument (was its own copy)
        cp.causal_conv1d_cp(torch.randn(1, 2, 5, device=dev), torch.ones(2, 4, device=dev),
                            torch.ones(2, device="meta"), group=g)

    def conv_empty_w1():  # width 1: no halo, so an empty shard is valid; F.conv1d refused L 0
        L = 0 if gr == 1 else 3
        x = torch.arange(2.0 * L, device=dev).view(1, 2, L).requires_grad_(True)
        w, b = torch.tensor([[2.0], [3.0]], device=dev), torch.tensor([0.5, -1.0], device=dev)
        y = cp.causal_conv1d_cp(x, w.to(torch.bfloat16), b, group=g)  # a bf16 weight is read in float32
        y.sum().backward()
        got["conv_w1"] = (y.detach().cpu(), (x.detach() * w + b[:, None]).cpu(), tuple(x.grad.shape))

    def positive_A():  # A > 0 and a middle shard whose decay product exp(A sum dt) overflows float32, the
        # state entering it exactly 0: the composition made inf * 0 = NaN where the sequential scan is finite
        L, dim, N = 4, 2, 2
        gen = torch.Generator().manual_seed(0)
        u = torch.zeros(1, dim, world * L)
        u[..., 2 * L - 1] = 1.0
        u[..., 2 * L:] = torch.randn(1, dim, (world - 2) * L, generator=gen)
        delta = torch.full((1, dim, world * L), 0.01)
        delta[..., L:2 * L] = 25.0  # sum dt 100 on rank 1: exp(100) > float32's largest
        A = torch.ones(dim, N)
        B, C = torch.randn(1, N, world * L, generator=gen), torch.randn(1, N, world * L, generator=gen)
        a, b = gr * L, (gr + 1) * L
        y = cp.selective_scan_fn(u[..., a:b].to(dev), delta[..., a:b].to(dev), A.to(dev), B[..., a:b].to(dev),
                                 C[..., a:b].to(dev), group=g)
        got["positive_A_y"] = (y.cpu(), st.selective_scan_fn(u, delta, A, B, C)[..., a:b])

    def conv_x_grad_one_rank():  # x requiring grad on rank 0 only: the halo's backward waited forever
        x = torch.randn(1, 2, 5, device=dev).requires_grad_(gr == 0)
        w = torch.full((2, 4), 0.5, device=dev, requires_grad=True)
        cp.causal_conv1d_cp(x, w, group=g).sum().backward()

    def cu_seqlens_2d():  # a 2-D cu_seqlens on rank 0 only: a TypeError there alone, the others waited
        x = torch.ones(1, 2, 3, device=dev)
        cu = [[0, 3 * world]] if gr == 0 else [0, 3 * world]
        cp.selective_scan_fn(x, x, -torch.ones(2, 1, device=dev), torch.ones(1, 1, 3, device=dev),
                             torch.ones(1, 1, 3, device=dev), group=g,
                             cu_seqlens=torch.tensor(cu) if gr == 0 else cu)

    attempt("positive_A", positive_A)
    attempt("conv_x_grad_one_rank", conv_x_grad_one_rank)
    attempt("cu_seqlens_2d", cu_seqlens_2d)
    attempt("grads_presence", grads_presence)
    attempt("grads_vs_scan", grads_vs_scan)
    attempt("grads_f64", grads_f64)
    attempt("block_f64", block_f64)
    attempt("conv_int_weight", conv_int_weight)
    attempt("conv_meta_bias", conv_meta_bias)
    attempt("conv_empty_w1", conv_empty_w1)
    if world >= 3:  # a process outside the subgroup calls: torch's rank -1 made a "negative dimension" error
        sub = dist.new_group([1, 2])
        try:
            x = torch.ones(1, 2, 3, device=dev)
            cp.selective_scan_fn(x, x, -torch.ones(2, 1, device=dev), torch.ones(1, 1, 3, device=dev),
                                 torch.ones(1, 1, 3, device=dev), group=sub)
            got["nonmember"] = None
        except Exception as e:
            got["nonmember"] = (type(e).__name__, str(e))
    t = torch.arange(10)
    got["shard"] = (cp.shard(t, rank=(gr + 1) % world, group=g).tolist(),
                    cp.shard(t, rank=(gr + 1) % world, world=world).tolist())
    return [dict(msgs=got)]


def main():
    rank, world, init, backend, device, cases_file, out_file = sys.argv[1:8]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(backend, init_method="file://" + init, rank=rank, world_size=world)
    cases = torch.load(cases_file)
    # every group any case names, created in the same order on every rank
    groups = {}
    for c in cases:
        key = tuple(c["group"]) if c.get("group") is not None else None
        if key is not None and key not in groups:
            groups[key] = dist.new_group(list(key))
    out = []
    for c in cases:
        key = tuple(c["group"]) if c.get("group") is not None else None
        g = groups.get(key)
        if key is not None and rank not in key:
            out.append(None)
            continue
        gr = key.index(rank) if key is not None else rank
        try:
            fn = {"scan": run_scan, "block": run_block, "errors": run_errors, "disagree": run_disagree,
                  "cp2": run_cp2}[c["kind"]]
            cp.CHECK_RANKS = c.get("check_ranks", True)
            res = fn(c, g, gr, dev)
            cp.CHECK_RANKS = True
            r0 = res[0]
            same = all(_bitwise(r0, r) for r in res[1:])
            out.append(dict(r0, same=same, error=None))
        except Exception:  # reported by the test (the other ranks may then time out)
            out.append(dict(error=traceback.format_exc()))
            torch.save(out, out_file)
            raise
    torch.save(out, out_file)
    dist.barrier()
    dist.destroy_process_group()


def _bitwise(r1, r2):
    def eq(a, b):
        if a is None or b is None:
            return a is None and b is None
        return a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8) if a.dtype != torch.bool else a,
                                                  b.view(-1).view(torch.uint8) if b.dtype != torch.bool else b)
    if "msgs" in r1 or "err" in r1:
        return True
    if not (eq(r1["y"], r2["y"]) and eq(r1["last"], r2["last"])):
        return False
    return r1["grads"].keys() == r2["grads"].keys() and all(eq(r1["grads"][k], r2["grads"][k]) for k in r1["grads"])


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
