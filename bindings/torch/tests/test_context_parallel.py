"""selscan_torch.context_parallel against the single-process call on the whole sequence.

The cases are written to a file; WORLD processes (tests/_cp_worker.py, a gloo group on the CPU,
init_method file://) each run every case on their shard, twice, and save their outputs and
gradients; the test concatenates the shards (sums the replicated parameters' gradients over the
ranks) and compares them with selscan_torch.selective_scan_fn (or a plain PyTorch Mamba block built
on it) run in this process on the full sequence. One spawn per world size for all cases.

GPU variant (NCCL, one GPU a rank): runs where at least WORLD GPUs are visible and selscan_torch
has its CUDA kernels, skips otherwise.
"""
import functools
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import selscan_torch as st
from _common import lowp_tol, rel_err, scan_inputs

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_cp_worker.py")
# max |cp - single| / max |single|: float32 1e-5 (outputs and gradients alike); a float16 / bfloat16
# result by lowp_tol with k = 2: the sharded run and the single call each round their own float32
# result to the dtype (a float32 result -- last_state, a float32 input's gradient -- gets 1e-5)
TOL = {t: lowp_tol(t, 1e-5, 2) for t in (torch.float32, torch.float16, torch.bfloat16)}
GTOL = TOL
HAS_DIST = torch.distributed.is_available()
N_GPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
HAS_CUDA = N_GPU > 0 and st.has_cuda_kernels()


# ---- >>cases ----------------------------------------------------------------------------------------


def scan_case(name, world, lengths=None, batch=2, dim=6, N=5, bc="var3", G=2, dtype=torch.float32, D=True, z=True,
              bias=True, softplus=True, last=True, grad_last_all=True, h0=False, cu=None, group=None, seed=0,
              grad=None):
    R = len(group) if group is not None else world
    lengths = lengths or [9] * R
    L = sum(lengths)
    g = torch.Generator().manual_seed(seed)
    x = scan_inputs(g, batch, dim, L, N, bc, G, dtype, D, z, bias, batch if h0 else None, a_offset=0.2)
    gy = torch.randn(batch, dim, L, generator=g)
    gl = None
    if last:  # upstream gradient on every rank's last_state (the state after its shard), or the last rank's only
        gl = [torch.randn(batch, dim, N, generator=g) * (1.0 if (grad_last_all or q == R - 1) else 0.0)
              for q in range(R)]
    return dict(kind="scan", name=name, inputs=x, softplus=softplus, last=last, cu=cu, lengths=lengths,
                gy=gy, gl=gl, group=group, dtype=dtype, grad=grad)  # grad: the inputs requiring grad (None: all)


def block_case(name, world, lengths=None, batch=2, hidden=8, inner=12, N=4, W=4, rank=3, use_bias=False,
               conv_bias=True, group=None, mask=False, seed=0):
    R = len(group) if group is not None else world
    lengths = lengths or [7] * R
    L = sum(lengths)
    torch.manual_seed(seed)
    cfg = dict(hidden_size=hidden, intermediate_size=inner, state_size=N, conv_kernel=W, time_step_rank=rank,
               use_conv_bias=conv_bias, use_bias=use_bias)
    m = st.context_parallel.MambaMixerCP(**cfg)
    with torch.no_grad():  # randomise everything away from its initialisation (A_log, D, biases too)
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    g = torch.Generator().manual_seed(seed + 1)
    return dict(kind="block", name=name, config=cfg, state={k: v.detach().clone() for k, v in m.state_dict().items()},
                hidden=torch.randn(batch, L, hidden, generator=g), gy=torch.randn(batch, L, hidden, generator=g),
                mask=(torch.rand(batch, L, generator=g) > 0.3).long() if mask else None,
                lengths=lengths, group=group, dtype=torch.float32)


def fit(lengths, world, fill=9):
    """world shard lengths: the given ones, cut or filled with `fill`."""
    return (list(lengths) + [fill] * world)[:world]


# Issue 38, cause 1: ranks that disagree. One rank (or two) passes arguments that differ from the
# others'. Before the fix, batch, dim or N aborted a rank inside gloo (mis-sized collectives), a
# different A / D / delta_bias / cu_seqlens gave a silently wrong answer, and a refusal on one rank
# left the others waiting. Expected now: a ValueError on every rank naming the argument, the same
# message everywhere (the refusing rank raises its own), inputs untouched, and the group still
# usable afterwards. They run last in each world's spawn (cases_for): no process start of their own.

_SCAN = dict(batch=2, dim=6, N=5, L=9)
_CONV = dict(batch=2, dim=6, W=4, L=9)
_BLOCK = dict(batch=2, inner=12, L=7)
CP38 = {  # name: (function, base arguments, {rank ("last": world - 1): changes}, text every message holds)
    "scan_batch": ("scan", _SCAN, {"last": dict(batch=3)}, "the ranks disagree on batch (u.shape[0]): rank 0 has 2, "
                   "rank {last} has 3"),
    "scan_dim": ("scan", _SCAN, {1: dict(dim=7)}, "the ranks disagree on dim (u.shape[1]): rank 0 has 6, "
                 "rank 1 has 7"),
    "scan_N": ("scan", _SCAN, {"last": dict(N=6)}, "the ranks disagree on N (A.shape[1]): rank 0 has 5, "
               "rank {last} has 6"),
    "scan_A": ("scan", _SCAN, {1: dict(dA=0.5)}, "A differs across ranks (rank 0 vs rank 1)"),
    "scan_D": ("scan", _SCAN, {"last": dict(dD=1e-3)}, "D differs across ranks (rank 0 vs rank {last})"),
    "scan_delta_bias": ("scan", _SCAN, {1: dict(dbias=-0.25), "last": dict(dbias=0.25)},
                        "delta_bias differs across ranks (rank 0 vs rank 1)"),
    "scan_cu_seqlens": ("scan", dict(_SCAN, batch=1, cu=[0, 4, "L"]), {1: dict(cu=[0, 5, "L"])},
                        "cu_seqlens differs across ranks (rank 0 vs rank 1)"),
    "scan_cu_seqlens_given_by_one_rank": ("scan", dict(_SCAN, batch=1), {"last": dict(cu=[0, "L"])},
                                          "the ranks disagree on cu_seqlens: rank 0 has None, rank {last} has one"),
    "scan_dtype": ("scan", _SCAN, {1: dict(dtype=torch.bfloat16)}, "the ranks disagree on u's dtype: "
                   "rank 0 has torch.float32, rank 1 has torch.bfloat16"),
    "scan_refused_on_one_rank": ("scan", _SCAN, {1: dict(bad_delta=True)}, "argument 'delta': wrong shape"),
    # one rank under no_grad while the others' A requires grad: the backward's collectives would hang
    "scan_grad_disabled_on_one_rank": ("scan", _SCAN, {1: dict(no_grad=True)},
                                       "rank 0's inputs require grad but rank 1 runs with grad disabled"),
    "conv_batch": ("conv", _CONV, {1: dict(batch=3)}, "the ranks disagree on batch (x.shape[0]): rank 0 has 2, "
                   "rank 1 has 3"),
    "conv_weight": ("conv", _CONV, {"last": dict(dweight=0.1)}, "weight differs across ranks (rank 0 vs rank {last})"),
    "conv_short_shard_refused_on_one_rank": ("conv", _CONV, {1: dict(L=2)}, "at least d_conv - 1 = 3 tokens"),
    "block_dim": ("block", _BLOCK, {"last": dict(inner=16)}, "the ranks disagree on intermediate_size: rank 0 has "
                  "12, rank {last} has 16"),
    "block_batch": ("block", _BLOCK, {1: dict(batch=1)}, "the ranks disagree on batch (hidden_states.shape[0]): "
                    "rank 0 has 2, rank 1 has 1"),
    "block_A_log": ("block", _BLOCK, {1: dict(dA_log=1e-4)}, "A_log differs across ranks (rank 0 vs rank 1)"),
}


def cp38_cases(world):
    def resolve(spec):  # "L" in cu_seqlens: the whole sequence's length (shards of 9)
        cu = spec.get("cu")
        return spec if cu is None else dict(spec, cu=[9 * world if v == "L" else v for v in cu])

    return [dict(kind="disagree", name="38_1_" + n, fn=fn, base=resolve(base),
                 ranks={(world - 1 if r == "last" else r): resolve(ch) for r, ch in ranks.items()},
                 text=text.format(last=world - 1), refused=n.endswith("refused_on_one_rank"), group=None)
            for n, (fn, base, ranks, text) in CP38.items()]


@functools.lru_cache(maxsize=None)
def cases_for(world):
    c = [
        scan_case("all_options_f32", world),
        scan_case("bare_no_D_z_bias_softplus", world, D=False, z=False, bias=False, softplus=False, last=False),
        scan_case("fixed_BC", world, bc="fixed"),
        scan_case("grouped_BC", world, bc="var4", G=3),
        scan_case("no_last_state", world, last=False),
        scan_case("last_grad_on_last_rank_only", world, grad_last_all=False),
        scan_case("h0_on_rank0", world, h0=True),
        # h0 the only input requiring grad, given on rank 0 alone: the later ranks still run the backward
        scan_case("h0_grad_alone", world, h0=True, grad=("h0",)),
        scan_case("softplus_only", world, D=False, z=False, bias=True, last=False, N=3, batch=1),
        scan_case("unequal_shards", world, lengths=fit([5, 1, 13, 8], world)),
        scan_case("empty_shard", world, lengths=[0, 9] if world == 2 else fit([6, 0, 7], world)),
        scan_case("long_decay", world, lengths=[40] * world, dim=4, N=16, batch=1),
        scan_case("bf16", world, dtype=torch.bfloat16),
        scan_case("f16_grouped", world, dtype=torch.float16, bc="var4", G=3),
        scan_case("bf16_fixed_BC_h0", world, dtype=torch.bfloat16, bc="fixed", h0=True),
    ]
    L = 9 * world
    # packed sequences (batch 1) across the shard borders (shards of 9): one sequence over everything;
    # a start on a border; starts inside shards; an empty sequence; a shard with two starts
    packs = {
        "packed_one": [0, L],
        "packed_border": [0, 9, L],
        "packed_inside": [0, 4, 13, L] if world >= 2 else [0, 4, L],
        "packed_many": [0, 2, 2, 7, 11, 12, L],
    }
    for name, cu in packs.items():
        c.append(scan_case(name, world, batch=1, last=False, cu=cu))
    c.append(scan_case("packed_unequal", world, batch=1, last=False, lengths=fit([3, 20, 6, 9], world),
                       cu=[0, 5, sum(fit([3, 20, 6, 9], world))]))
    c.append(scan_case("packed_empty_shard", world, batch=1, last=False, lengths=[0, 9] if world == 2 else fit([9, 0, 9], world),
                       cu=[0, 4, 9] if world == 2 else [0, 4, sum(fit([9, 0, 9], world))]))
    c.append(scan_case("packed_bf16_fixed", world, batch=1, last=False, bc="fixed", dtype=torch.bfloat16,
                       cu=[0, 10, L]))
    # the ranks' agreement turned off (CHECK_RANKS = False): the packed layout gathers the lengths itself
    c.append(dict(scan_case("packed_unchecked", world, batch=1, last=False, cu=[0, 4, 13, L]), check_ranks=False))
    c.append(scan_case("single_rank_group", world, group=[world - 1]))
    if world >= 3:
        c.append(scan_case("subgroup_1_2", world, group=[1, 2]))
        c.append(block_case("block_subgroup_1_2", world, group=[1, 2]))
    c += [
        block_case("block", world),
        block_case("block_W2_bias_unequal", world, W=2, use_bias=True, lengths=fit([3, 9, 5], world)),
        block_case("block_W4_short_shards", world, W=4, lengths=[3] * world, conv_bias=False),
        block_case("block_attention_mask", world, mask=True),
    ]
    c.append(dict(kind="errors", name="errors", world=world, group=None))
    c.append(dict(kind="cp2", name="38_cp2", world=world, group=None))  # checked by test_38_cp_* below
    return c + cp38_cases(world)  # last: ranks that disagree (issue 38)


# ---- >>the single-process reference -------------------------------------------------------------


def scan_reference(case, dev):
    want = case["grad"]
    x = {k: (None if v is None else v.detach().clone().to(dev).requires_grad_(want is None or k in want))
         for k, v in case["inputs"].items()}
    args = (x["A"], x["D"], x["delta_bias"])
    L = x["u"].shape[-1]

    def call(end, last):
        def cut(t, k):
            if t is None:
                return None
            if k in ("u", "delta", "z") or (k in ("B", "C") and t.dim() >= 3):
                return t[..., :end]
            return t
        return st.selective_scan_fn(cut(x["u"], "u"), cut(x["delta"], "delta"), args[0], cut(x["B"], "B"),
                                    cut(x["C"], "C"), args[1], cut(x["z"], "z"), args[2], case["softplus"], last,
                                    case["cu"], h0=x["h0"])

    y = call(L, False)
    loss = (y.float() * case["gy"].to(dev)).sum()
    lasts = []
    if case["last"]:
        end = 0
        for q, n in enumerate(case["lengths"]):
            end += n
            hl = call(end, True)[1]
            lasts.append(hl.detach().cpu())
            loss = loss + (hl * case["gl"][q].to(dev)).sum()
    loss.backward()
    grads = {k: v.grad.cpu() for k, v in x.items() if v is not None and v.grad is not None}
    return y.detach().cpu(), lasts, grads


def block_reference(case, dev):
    """The Mamba-1 mixer on the whole sequence in plain PyTorch (padded causal conv) plus
    selscan_torch.selective_scan_fn: transformers' MambaMixer slow path, with selscan's scan."""
    p = {k: v.detach().clone().to(dev).requires_grad_(True) for k, v in case["state"].items()}
    cfg = case["config"]
    h = case["hidden"].detach().clone().to(dev).requires_grad_(True)
    mask = case.get("mask")
    mask = None if mask is None else mask.to(dev)
    L = h.shape[1]
    hm = h if mask is None else h * mask[:, :, None]  # transformers' apply_mask_to_padding_states
    xz = F.linear(hm, p["in_proj.weight"], p.get("in_proj.bias")).transpose(1, 2)
    x, z = xz.chunk(2, dim=1)
    W = cfg["conv_kernel"]
    x = F.silu(F.conv1d(x, p["conv1d.weight"], p.get("conv1d.bias"), padding=W - 1, groups=x.shape[1])[..., :L])
    if mask is not None:
        x = x * mask[:, None, :]
    dt, B, C = F.linear(x.transpose(1, 2), p["x_proj.weight"]).split(
        [cfg["time_step_rank"], cfg["state_size"], cfg["state_size"]], dim=-1)
    delta = p["dt_proj.weight"] @ dt.transpose(1, 2)
    y = st.selective_scan_fn(x, delta, -torch.exp(p["A_log"]), B.transpose(1, 2), C.transpose(1, 2), p["D"], z,
                             p["dt_proj.bias"], True)
    out = F.linear(y.transpose(1, 2), p["out_proj.weight"], p.get("out_proj.bias"))
    (out * case["gy"].to(dev)).sum().backward()
    grads = {"hidden": h.grad.cpu()}
    grads.update({k: v.grad.cpu() for k, v in p.items()})
    return out.detach().cpu(), [], grads


# ---- >>running the ranks ---------------------------------------------------------------------------


def run_world(tmpdir, world, backend, device, cases):
    cases_file = os.path.join(tmpdir, "cases.pt")
    torch.save(cases, cases_file)
    init = os.path.join(tmpdir, "init")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs, outs, logs = [], [], []
    for r in range(world):
        out = os.path.join(tmpdir, f"out{r}.pt")
        log = open(os.path.join(tmpdir, f"log{r}.txt"), "w")
        procs.append(subprocess.Popen([sys.executable, WORKER, str(r), str(world), init, backend, device, cases_file,
                                       out], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=HERE))
        outs.append(out)
        logs.append(log)
    failed = []
    try:
        for r, p in enumerate(procs):
            try:
                rc = p.wait(timeout=300)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            if rc != 0:
                failed.append(r)
    finally:
        for p in procs:  # the ones this test started, if still running
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    if failed:
        text = "".join(open(os.path.join(tmpdir, f"log{r}.txt")).read()[-4000:] for r in failed)
        raise RuntimeError(f"ranks {failed} of {world} failed:\n{text}")
    return [torch.load(o) for o in outs]


_RESULTS = {}


def results(tmp_path_factory, world, backend, device):
    key = (world, backend, device)
    if key not in _RESULTS:
        cases = cases_for(world)
        try:
            got = run_world(str(tmp_path_factory.mktemp(f"cp{world}{backend}")), world, backend, device, cases)
            _RESULTS[key] = (cases, got, None)
        except RuntimeError as e:
            _RESULTS[key] = (cases, None, str(e))
    cases, got, err = _RESULTS[key]
    if err is not None:
        pytest.fail(err)
    return cases, got


def check_case(case, per_rank, dev):
    R = len(case["group"]) if case["group"] is not None else len(per_rank)
    ranks = case["group"] if case["group"] is not None else list(range(R))
    res = [per_rank[r] for r in ranks]
    for r, x in zip(ranks, res):
        assert x is not None and x["error"] is None, f"rank {r}: {x and x['error']}"
        assert x["same"], f"rank {r}: the two runs differ (not bitwise deterministic)"
    if case["kind"] == "disagree":
        return check_disagree(case, res)
    if case["kind"] == "cp2":  # checked by test_38_cp_* below
        return
    if case["kind"] == "errors":
        for x in res:
            m = x["msgs"]
            assert "cu_seqlens" in m.get("packed_last", ""), m
            assert "batch 1" in m.get("packed_batch", ""), m
            assert "d_conv - 1" in m.get("short_shard", ""), m
        return
    dtype = case["dtype"]
    if case["kind"] == "scan":
        y_ref, lasts_ref, g_ref = scan_reference(case, dev)
        tok_dim = -1
    else:
        y_ref, lasts_ref, g_ref = block_reference(case, dev)
        tok_dim = 1
    y = torch.cat([x["y"] for x in res], dim=tok_dim)
    assert y.dtype == y_ref.dtype
    assert rel_err(y, y_ref) <= TOL[dtype], ("y", rel_err(y, y_ref))
    for q, hl in enumerate(lasts_ref):
        assert res[q]["last"] is not None and res[q]["last"].dtype == torch.float32
        assert rel_err(res[q]["last"], hl) <= TOL[torch.float32], ("last", q, rel_err(res[q]["last"], hl))
    if case["kind"] == "scan" and not case["last"]:
        assert all(x["last"] is None for x in res)
    names = set(g_ref)
    if case["kind"] == "scan" and case["inputs"]["h0"] is not None:
        assert "h0" in res[0]["grads"] and all("h0" not in x["grads"] for x in res[1:])
    for k in sorted(names):
        ref = g_ref[k]
        if case["kind"] == "scan":
            sharded = k in ("u", "delta", "z") or (k in ("B", "C") and ref.dim() >= 3)
        else:
            sharded = k == "hidden"
        if k == "h0":
            got = res[0]["grads"]["h0"]
        elif sharded:
            got = torch.cat([x["grads"][k] for x in res], dim=tok_dim)
        else:  # replicated parameter: each rank holds its shard's contribution
            got = sum(x["grads"][k].double() for x in res)
        assert got.shape == ref.shape, (k, got.shape, ref.shape)
        tol = GTOL[res[0]["grads"][k].dtype]  # by the gradient's own dtype
        e = rel_err(got, ref)
        assert e <= tol, (k, e)


def case_names(world):
    return [c["name"] for c in cases_for(world)]


needs_dist = pytest.mark.skipif(not HAS_DIST, reason="torch.distributed is not available")


@needs_dist
@pytest.mark.parametrize("world,name", [(w, n) for w in (2, 3) for n in case_names(w) if not n.startswith("38_")])
def test_cpu_gloo(tmp_path_factory, world, name):
    names = case_names(world)
    cases, got = results(tmp_path_factory, world, "gloo", "cpu")
    i = names.index(name)
    check_case(cases[i], [g[i] if g is not None else None for g in got], "cpu")


@needs_dist
@pytest.mark.skipif(not HAS_CUDA or N_GPU < 2 or not torch.distributed.is_nccl_available(),
                    reason="needs >= 2 GPUs, NCCL and selscan_torch's CUDA kernels")
@pytest.mark.parametrize("world", [2, 4])
def test_gpu_nccl(tmp_path_factory, world):
    if N_GPU < world:
        pytest.skip(f"needs {world} GPUs, {N_GPU} visible")
    cases, got = results(tmp_path_factory, world, "nccl", "cuda")
    failures = []
    for i, c in enumerate(cases):
        try:
            check_case(c, [g[i] if g is not None else None for g in got], "cuda")
        except AssertionError as e:
            failures.append(f"{c['name']}: {e}")
    assert not failures, "\n".join(failures)


# ---- >>issue 38, cause 1: ranks that disagree (the cases: CP38 above) -------------------------


def check_disagree(case, got):
    """Every rank raised the ValueError (the same one, except the refusing rank's own), inputs
    untouched, and the small valid scan each rank ran afterwards is right (the group still works)."""
    x1 = torch.ones(1, 2, 3 * len(got))
    after = st.selective_scan_fn(x1, x1, -torch.ones(2, 1), torch.ones(1, 1, x1.shape[-1]),
                                 torch.ones(1, 1, x1.shape[-1]))
    msgs = []
    for r, x in enumerate(got):
        assert x is not None and x["error"] is None, f"rank {r}: {x and x['error']}"
        assert x["err"] is not None, f"rank {r} raised nothing"
        kind, msg = x["err"]
        assert kind == "ValueError" and case["text"] in msg, (r, x["err"])
        assert x["untouched"] in (None, True), f"rank {r}: an input was changed"
        assert rel_err(x["after"], after[..., 3 * r:3 * r + 3]) <= 1e-6, (r, x["after"])
        if case["refused"] and r in case["ranks"]:  # the refusing rank: its own error, as on one device
            continue
        if case["refused"]:
            assert f"rank {min(case['ranks'])} refused its arguments" in msg, (r, msg)
        msgs.append(msg)
    assert len(set(msgs)) == 1, msgs  # the same message on every rank


@needs_dist
@pytest.mark.parametrize("world,name", [(w, n) for w in (2, 3) for n in CP38])
def test_38_1_ranks_disagree(tmp_path_factory, world, name):
    cases, got = results(tmp_path_factory, world, "gloo", "cpu")
    i = case_names(world).index("38_1_" + name)
    check_case(cases[i], [g[i] for g in got], "cpu")


# ---- >>transformers' MambaMixer: the block's definition and from_mixer ------------------------------


def test_block_matches_transformers(tmp_path):
    """block_reference (what the CP block is compared with) against transformers' MambaMixer on the
    whole sequence, and MambaMixerCP.from_mixer on a one-rank group sharing the mixer's parameters."""
    tf = pytest.importorskip("transformers")
    from transformers.models.mamba.modeling_mamba import MambaMixer

    config = tf.MambaConfig(hidden_size=8, intermediate_size=12, state_size=4, conv_kernel=4, time_step_rank=3,
                            use_conv_bias=True, use_bias=True, num_hidden_layers=1)
    torch.manual_seed(3)
    mixer = MambaMixer(config, layer_idx=0)
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    mixer.train(False)  # the sequence path without mamba_inner_fn's kernels
    case = dict(config=dict(hidden_size=8, intermediate_size=12, state_size=4, conv_kernel=4, time_step_rank=3,
                            use_conv_bias=True, use_bias=True),
                state={k: v.detach().clone() for k, v in mixer.state_dict().items()},
                hidden=torch.randn(2, 11, 8), gy=torch.randn(2, 11, 8))
    y_ref, _, g_ref = block_reference(case, "cpu")
    h = case["hidden"].clone().requires_grad_(True)
    y = mixer(h)
    (y * case["gy"]).sum().backward()
    assert rel_err(y, y_ref) <= 1e-5
    assert rel_err(h.grad, g_ref["hidden"]) <= 1e-5
    for k, p in mixer.named_parameters():
        assert rel_err(p.grad, g_ref[k]) <= 1e-5, k
    masked = dict(case, mask=(torch.rand(2, 11) > 0.3).long())
    y_mref, _, _ = block_reference(masked, "cpu")
    assert rel_err(mixer(case["hidden"], attention_mask=masked["mask"]), y_mref) <= 1e-5
    # from_mixer: the same parameters, the same output on a one-rank group
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "init"), rank=0, world_size=1)
    try:
        cpm = st.context_parallel.MambaMixerCP.from_mixer(mixer)
        assert {id(p) for p in cpm.parameters()} == {id(p) for p in mixer.parameters()}
        assert cpm.state_dict().keys() == mixer.state_dict().keys()
        assert rel_err(cpm(case["hidden"]), y_ref) <= 1e-5
        fresh = st.context_parallel.MambaMixerCP.from_config(config)
        fresh.load_state_dict(mixer.state_dict())
        assert rel_err(fresh(case["hidden"]), y_ref) <= 1e-5
    finally:
        dist.destroy_process_group()


# ---- >>issue 38, after the hardening: a hostile run's failures (the worker's run_cp2) --------------


def cp2(tmp_path_factory, world):
    cases, got = results(tmp_path_factory, world, "gloo", "cpu")
    i = case_names(world).index("38_cp2")
    for r, g in enumerate(got):
        assert g[i] is not None and g[i]["error"] is None, f"rank {r}: {g[i] and g[i]['error']}"
    return [g[i]["msgs"] for g in got]


def assert_after(m, name, world, r):
    x1 = torch.ones(1, 2, 3 * world)
    after = st.selective_scan_fn(x1, x1, -torch.ones(2, 1), torch.ones(1, 1, 3 * world), torch.ones(1, 1, 3 * world))
    assert rel_err(m[name + ":after"], after[..., 3 * r:3 * r + 3]) <= 1e-6, (name, r)


@needs_dist
@pytest.mark.parametrize("world", [2, 3])
def test_38_cp_all_reduce_grads_ranks_disagree(tmp_path_factory, world):
    """all_reduce_grads had no agreement: a .grad on one rank only (or a rank in another function)
    aborted a rank inside gloo; float64 gradients were summed in float32."""
    msgs = cp2(tmp_path_factory, world)
    for r, m in enumerate(msgs):
        kind, text = m["grads_presence"]
        assert kind == "ValueError" and "the number of them with a .grad" in text, (r, m["grads_presence"])
        kind, text = m["grads_vs_scan"]
        assert kind == "ValueError" and "must call the same function" in text and "all_reduce_grads" in text, r
        assert m["grads_f64"] is None
        assert abs(m["f64_sum"] - sum(1.0 + 1e-12 * (q + 1) for q in range(world))) < 1e-14, m["f64_sum"]
        for name in ("grads_presence", "grads_vs_scan", "grads_f64"):
            assert_after(m, name, world, r)


@needs_dist
@pytest.mark.parametrize("world", [2, 3])
def test_38_cp_block_refusal_on_every_rank(tmp_path_factory, world):
    """MambaMixerCP in float64: the scan's own refusal came on rank 0 (its op runs before the
    all_gather) while the last rank waited in the collective (gloo aborted it)."""
    msgs = cp2(tmp_path_factory, world)
    for r, m in enumerate(msgs):
        assert m["block_f64"] is not None and m["block_f64"][0] == "TypeError", (r, m["block_f64"])
        assert "hidden_states must be float32" in m["block_f64"][1], (r, m["block_f64"])
        assert_after(m, "block_f64", world, r)


@needs_dist
@pytest.mark.parametrize("world", [2, 3])
def test_38_cp_conv_dtypes_and_empty_shard(tmp_path_factory, world):
    """causal_conv1d_cp: an int8 weight reached F.conv1d (a RuntimeError naming nothing); a bf16
    weight with float32 x was refused there (causal_conv1d_fn casts it); width 1 with an empty
    shard (no halo needed) was refused by F.conv1d."""
    msgs = cp2(tmp_path_factory, world)
    for r, m in enumerate(msgs):
        kind, text = m["conv_int_weight"]
        assert kind == "TypeError" and "weight" in text, (r, m["conv_int_weight"])
        kind, text = m["conv_meta_bias"]
        assert kind == "ValueError" and "(argument 'bias')" in text and "causal_conv1d_cp" in text, (r, kind, text)
        assert m["conv_empty_w1"] is None, (r, m["conv_empty_w1"])
        y, ref, gshape = m["conv_w1"]
        assert y.shape == ref.shape and gshape == tuple(ref.shape) and rel_err(y, ref) <= 1e-6, r
        for name in ("conv_int_weight", "conv_meta_bias", "conv_empty_w1"):
            assert_after(m, name, world, r)


@needs_dist
@pytest.mark.parametrize("world", [2, 3])
def test_38_cp_shard_keeps_a_given_rank(tmp_path_factory, world):
    """shard(t, rank=r) without world replaced r by the caller's own rank."""
    for r, m in enumerate(cp2(tmp_path_factory, world)):
        got, want = m["shard"]
        assert got == want, (r, got, want)


@needs_dist
@pytest.mark.parametrize("world", [2, 3])
def test_seventh_session_hostile_cp(tmp_path_factory, world):
    """Found by a hostile user after the h0-gradient change: a positive A whose shard's decay product
    overflows float32 gave NaN where the sequential scan is finite (inf * 0 in the composition); x
    requiring grad on one rank only hung the conv's halo backward; a 2-D cu_seqlens on one rank
    raised there alone (a TypeError) while the others waited."""
    msgs = cp2(tmp_path_factory, world)
    for r, m in enumerate(msgs):
        assert m["positive_A"] is None, (r, m["positive_A"])
        y, want = m["positive_A_y"]
        assert torch.isfinite(y).all() and rel_err(y, want) <= 1e-5, (r, y, want)
        for name, text in (("conv_x_grad_one_rank", "the ranks disagree on x's gradient"),
                           ("cu_seqlens_2d", "cu_seqlens must be a 1-D tensor of n_seqs + 1 >= 2 offsets")):
            assert m[name] is not None and m[name][0] == "ValueError" and text in m[name][1], (r, name, m[name])
            assert_after(m, name, world, r)


@needs_dist
def test_38_cp_nonmember_of_the_group(tmp_path_factory):
    """A process outside `group` calls: a ValueError saying so (was a RuntimeError about a negative
    dimension); the members' call is unaffected."""
    msgs = cp2(tmp_path_factory, 3)
    assert msgs[0]["nonmember"] is not None and msgs[0]["nonmember"][0] == "ValueError", msgs[0]["nonmember"]
    assert "not a member" in msgs[0]["nonmember"][1]
    assert msgs[1]["nonmember"] is None and msgs[2]["nonmember"] is None, (msgs[1]["nonmember"], msgs[2]["nonmember"])
