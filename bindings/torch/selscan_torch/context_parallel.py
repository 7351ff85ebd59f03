"""Context parallel Mamba-1: one sequence sharded along L over the ranks of a torch.distributed group.

Every rank holds a contiguous shard of the sequence (rank order = sequence order) of u / delta /
B / C / z and the full parameters (A, D, delta_bias). The result is the single-device scan of the
whole sequence, exactly (to float32 rounding), forward and backward.

>>idea  A is constant over time, so a shard acts on the state it receives as an affine map
        h_end = P * h_start + h_local, with P = exp(A * sum_t dt_t) elementwise per (batch, dim, N)
        (dt after delta_bias and softplus) and h_local the shard's last state from a zero start.
        One all_gather of (sum_t dt_t, h_local) gives every rank the (P, h_local) of the ranks
        before it; composing them in rank order gives its exact starting state h0. The scan then
        runs with that h0. The backward is the same in reverse: the gradient reaching the end of
        rank r's shard is the sum over later ranks q of (P_{r+1} ... P_{q-1}) * c_q, with c_q the
        gradient reaching the start of shard q from its own outputs; one all_gather of c.
        Because each rank ends up running the ordinary scan backward with the exact starting state
        and the exact gradient at its end, every gradient (u, delta, B, C, z, and this shard's
        contributions to A, D, delta_bias) is the single-device one: the dependence of the
        composition on A and dt (through P) needs no separate derivative, it is the same sum the
        single-device backward computes, split at the shard borders.

>>cost  per rank and direction, one collective: the forward gathers batch*dim*(N+1) float32 (P is
        rebuilt from sum dt and A on the receiving rank), the backward batch*dim*N; before it
        the ranks' agreement (>>the ranks' agreement below), 34 int64. Compute: the
        middle ranks run the scan twice forward (a zero-start pass for h_local, without D and z,
        then the exact pass) and twice backward (one for c with dh_last from their own outputs
        only, then the exact one); rank 0's first pass is already exact (forward) and the last
        rank's single backward already has the exact dh_last. The critical path is two passes
        each way whatever the world size (with 2 ranks they run one after the other), so a step
        takes 2x a shard's scan: world / 2 faster than one device, and 1 / world of its memory
        (4 H100s, L = 1M, dim 1536, bf16: 53 ms against 104 ms, 0.25x the memory; bench/RESULTS.md).
>>why   rerun, not correct: the exact correction of a zero-start pass, C_t . exp(A cumsum dt) h0
        gated by z, costs as much as the pass (N exponentials and a read of delta, C, z a token),
        and the backward needs the exact states anyway; a correction cut off where the decay
        falls below float32 would be cheaper but is exact only for decaying A, so it is not done.
        The shard's sum of dt runs as one fused kernel on a GPU (torch.compile; eager torch ops,
        ~9x slower, as the fallback), on a side stream beside the zero-start pass.

>>grads A, D and delta_bias are replicated: each rank's .grad is its shard's contribution (as for
        every weight applied per token). Sum them over the group -- all_reduce_grads() below; DDP
        over the group averages, so scale the loss by the group's size there -- to get the
        single-device gradient.

Public: selective_scan_fn, causal_conv1d_cp, MambaMixerCP (the Mamba-1 block), all_reduce_grads, shard.
"""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from . import _checks
from ._checks import cast as _cast, host_offsets as _host_offsets

__all__ = ["selective_scan_fn", "causal_conv1d_cp", "MambaMixerCP", "all_reduce_grads", "shard"]

_ops = torch.ops.selscan
_F32 = torch.float32
_NGRADS = 9  # selscan::bwd's gradients: u, delta, A, B, C, D, z, delta_bias, h0
_DH0 = 8


# ---- >>group helpers ------------------------------------------------------------------------


def _group_rank_world(group):
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("selscan context_parallel: torch.distributed is not initialised "
                           "(call torch.distributed.init_process_group first)")
    rank = dist.get_rank(group)
    if rank < 0:  # torch answers -1 outside the group: the shapes built from it failed with no word on why
        raise ValueError("selscan context_parallel: this process is not a member of `group` (only its ranks may call)")
    return rank, dist.get_world_size(group)


def _all_gather(t, group, world):
    """(world, *t.shape): every rank's t, in group rank order."""
    t = t.contiguous()
    out = torch.empty((world,) + tuple(t.shape), dtype=t.dtype, device=t.device)
    if hasattr(dist, "all_gather_into_tensor"):
        dist.all_gather_into_tensor(out.view(-1), t.view(-1), group=group)
    else:  # older torch
        dist.all_gather(list(out.unbind(0)), t, group=group)
    return out


def shard(t, dim=-1, group=None, rank=None, world=None):
    """This rank's contiguous shard of a full tensor along `dim` (rank order = sequence order).
    Lengths differ by at most one when `world` does not divide the length (the first ranks get
    the longer shards)."""
    if rank is None or world is None:  # fill in only what is missing: a given rank or world is kept
        r, w = _group_rank_world(group)
        rank = r if rank is None else rank
        world = w if world is None else world
    if not 0 <= rank < world:
        raise ValueError(f"selscan context_parallel: shard: rank must lie in [0, world = {world}), got {rank}")
    n = t.shape[dim]
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return t.narrow(dim, start, base + (1 if rank < extra else 0))


def all_reduce_grads(params, group=None):
    """Sums the .grad of `params` (a module or an iterable of parameters) over the group: after
    the backward of a context-parallel model, every rank then holds the single-device gradient
    of the whole sequence. One all_reduce over a flat buffer (the same order on every rank; float64
    gradients in a float64 one), after the ranks' agreement on which parameters have a .grad, their
    shapes and dtypes (a ValueError on every rank otherwise)."""
    if isinstance(params, nn.Module):
        params = params.parameters()
    params = list(params)
    rank, world = _group_rank_world(group)
    grads = [p.grad for p in params if p.grad is not None]
    err = None
    try:
        for g in grads:
            if not g.is_floating_point():
                raise TypeError(f"selscan context_parallel: all_reduce_grads sums floating-point gradients, got one "
                                f"of dtype {g.dtype}")
    except Exception as e:
        err = e
    if world > 1 and CHECK_RANKS:
        # the flat buffers' sizes follow which parameters have a .grad and their shapes: ranks that
        # differ would abort inside the backend (or sum mismatched entries), so agree first
        meta = []
        if err is None:
            desc = repr([(i, tuple(p.grad.shape), str(p.grad.dtype)) for i, p in enumerate(params) if p.grad is not None])
            meta = [("the number of parameters", len(params), None), ("the number of them with a .grad", len(grads), None),
                    ("which parameters have a .grad, their shapes and dtypes", _hash(desc.encode()), _DIFFERS)]
        _agree("all_reduce_grads", err, meta, [], group, world, _device(group, *grads))
    elif err is not None:
        raise err
    # float64 gradients are summed in float64 (a float32 sum would round them), the others in float32
    for wide in (False, True):
        part = [g for g in grads if (g.dtype == torch.float64) == wide]
        if not part:
            continue
        flat = torch.cat([g.reshape(-1).to(torch.float64 if wide else _F32) for g in part])
        dist.all_reduce(flat, group=group)
        off = 0
        for g in part:
            n = g.numel()
            g.copy_(flat[off:off + n].view_as(g))
            off += n


# ---- >>the ranks' agreement --------------------------------------------------------------------------
# The collectives below are sized by batch, dim and N, and the composition trusts every rank's A,
# D, delta_bias and cu_seqlens to be the same: ranks that disagree would abort inside the
# backend (mis-sized buffers) or return a wrong answer. So before its first collective each
# function gathers one fixed-size int64 digest from every rank: whether the rank's own argument
# checks passed, its shapes, dtypes and flags, and two integer sums of the replicated parameters'
# bits. Every rank reads the same gathered rows, so every rank raises the same ValueError.

CHECK_RANKS = True  # the digest above, one all_gather a call (on CUDA one device->host read)

_KINDS = ("selective_scan_fn", "causal_conv1d_cp", "MambaMixerCP", "all_reduce_grads")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_DIGEST = 32  # int64 a rank sends before the 2 sums: fixed, so ranks in different functions match sizes
_MSG = 1024  # bytes of a rank's refusal sent to the others
_DIFFERS = "differs"  # a meta entry shown as "differs across ranks" (a hash, not a readable value)


def _hash(b):
    """A signed int64 hash of bytes b (host side)."""
    return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little", signed=True)


def _dtype_code(t):
    return _DTYPES.index(t.dtype) if t.dtype in _DTYPES else len(_DTYPES)


def _dtype_name(c):
    return str(_DTYPES[c]) if c < len(_DTYPES) else "another dtype"


def _given(c):
    return "one" if c else "None"


def _as_int(t):
    """t's bit patterns as int32 (2-byte dtypes widened, 8-byte ones as two int32 a value)."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.int16).to(torch.int32) if t.element_size() == 2 else t.view(torch.int32)


_WEIGHTS = {}  # (n, device) -> _bits' position weights, made once (the parameters' sizes repeat)


def _bits(b):
    """Two int64 sums of the int32 bit patterns b: plain, and weighted by pseudo-random weights 1
    to 256 of the position (no overflow below 2**24 entries). Equal tensors give equal sums; a
    changed value changes the first, values swapped or changed against each other the second.
    Integer additions only (no float rounding): the same on every rank whatever its threads."""
    key = (b.numel(), b.device)
    w = _WEIGHTS.get(key)
    if w is None:
        if len(_WEIGHTS) > 16:
            _WEIGHTS.clear()
        w = torch.arange(b.numel(), dtype=torch.int64, device=b.device).mul_(40503).bitwise_right_shift_(5)
        w = _WEIGHTS[key] = w.bitwise_and_(255).add_(1)
    return torch.stack([b.sum(dtype=torch.int64), (b * w).sum()])


def _device(group, *ts):
    """Where this rank's digest lives: its first argument's device (that of a refused call too)."""
    for t in ts:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            return t.device
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _agree(kind, err, meta, values, group, world, device):
    """Raises on every rank when the ranks disagree; returns every rank's meta values (world lists).

    err: the exception this rank's own argument checks raised, or None. meta: (label, int, shown)
    compared across ranks in order (label None: gathered, not compared, e.g. the shard's length;
    shown: how a value reads in the message, _DIFFERS for hashes). values: (name, tensor or None),
    the replicated parameters, compared bitwise (presence is compared in meta)."""
    head = [_KINDS.index(kind), int(err is not None)] + [m[1] for m in meta]
    head += [0] * (_DIGEST - 2 - len(head))
    vals = [(n, v) for n, v in values if v is not None]
    if err is None and vals:
        dig = _bits(torch.cat([_as_int(v).to(device) for _, v in vals]))
    else:
        dig = torch.zeros(2, dtype=torch.int64, device=device)
    mine = torch.cat([torch.tensor(head, dtype=torch.int64).to(device), dig])
    got = _all_gather(mine, group, world).tolist()  # the one small collective (and read) of a call
    pre = "selscan context_parallel: "
    bad = [r for r in range(world) if got[r][1]]
    if bad:  # a rank refused its own arguments: its message goes to the others (fixed size)
        msg = b"" if err is None else str(err).encode()[:_MSG]
        buf = torch.zeros(_MSG, dtype=torch.uint8)
        if msg:
            buf[:len(msg)] = torch.frombuffer(bytearray(msg), dtype=torch.uint8)
        msgs = _all_gather(buf.to(device), group, world).cpu()
        if err is not None:
            raise err
        r = bad[0]
        text = bytes(msgs[r].tolist()).rstrip(b"\0").decode(errors="replace")
        raise ValueError(f"{pre}rank {r} refused its arguments to {_KINDS[got[r][0]]}, so every rank stops: {text}")
    for r in range(1, world):
        if got[r][0] != got[0][0]:
            raise ValueError(f"{pre}every rank of the group must call the same function: rank 0 called "
                             f"{_KINDS[got[0][0]]}, rank {r} {_KINDS[got[r][0]]}")
    for i, (label, _, shown) in enumerate(meta):
        if label is None:
            continue
        for r in range(1, world):
            a, b = got[0][2 + i], got[r][2 + i]
            if a == b:
                continue
            if shown == _DIFFERS:
                raise ValueError(f"{pre}{kind}: {label} differs across ranks (rank 0 vs rank {r}); every rank "
                                 f"must pass the same {label}")
            show = shown or str
            raise ValueError(f"{pre}{kind}: the ranks disagree on {label}: rank 0 has {show(a)}, rank {r} has "
                             f"{show(b)} (it must be the same on every rank)")
    if any(g[-2:] != got[0][-2:] for g in got):  # name the parameter: one more collective, this path only
        each = _all_gather(torch.cat([_bits(_as_int(v).to(device)) for _, v in vals]), group, world).tolist()
        for j, (name, _) in enumerate(vals):
            for r in range(1, world):
                if each[r][2 * j:2 * j + 2] != each[0][2 * j:2 * j + 2]:
                    raise ValueError(f"{pre}{kind}: {name} differs across ranks (rank 0 vs rank {r}); every rank "
                                     f"must pass the same {name} (a replicated parameter: keep the replicas equal, "
                                     f"e.g. all_reduce_grads before each optimizer step)")
        raise ValueError(f"{pre}{kind}: the replicated parameters ({', '.join(n for n, _ in vals)}) differ "
                         f"across ranks")
    return [g[2:2 + len(meta)] for g in got]

# ---- >>shard sum of dt (for P) ------------------------------------------------------------------


COMPILE_DT_SUM = True  # CUDA: the dt sum as one fused kernel (torch.compile), else eager torch ops
_DT_SUM_FUSED = {}


def _dt_sum_fused(delta, delta_bias, delta_softplus):
    """The same sum as _dt_sum, one fused pass over delta (torch.compile; None when that fails).
    Eager torch ops take 18 bytes of memory traffic an element (the float32 copy, the bias add,
    softplus, the sum): 7.5 ms for a (1, 1536, 256k) shard on an H100, more than the scan's
    forward itself (5 ms); fused, 0.8 ms."""
    key = (delta_bias is not None, bool(delta_softplus))
    fn = _DT_SUM_FUSED.get(key)
    if fn is None:
        def dt_sum(dl, bias):
            x = dl.float()
            if bias is not None:
                x = x + bias[:, None]
            if delta_softplus:
                x = F.softplus(x)
            return x.sum(-1, dtype=torch.float32)

        fn = _DT_SUM_FUSED[key] = torch.compile(dt_sum, dynamic=True, fullgraph=True)
    bias = None if delta_bias is None else delta_bias.detach().to(_F32)
    try:
        return fn(delta.detach(), bias).to(torch.float64)
    except Exception as e:  # no Triton / inductor here: eager from now on, said once
        global COMPILE_DT_SUM
        COMPILE_DT_SUM = False
        import warnings

        warnings.warn(f"selscan context_parallel: the fused dt sum failed to compile, using eager torch ops "
                      f"(slower): {type(e).__name__}: {e}")
        return None


def _dt_sum(delta, delta_bias, delta_softplus):
    """sum_t dt_t over the shard, (batch, dim) float64, dt = softplus(delta + delta_bias) as the
    scan computes it (float32, softplus passing x > 20 through). On a GPU one fused kernel
    (_dt_sum_fused); else eager ops chunked along L so the float32 temporary stays near 2**24
    elements (64 MiB) whatever the shard's length."""
    if COMPILE_DT_SUM and delta.is_cuda and delta.shape[-1] > 0:
        S = _dt_sum_fused(delta, delta_bias, delta_softplus)
        if S is not None:
            return S
    batch, dim, L = delta.shape
    S = torch.zeros(batch, dim, dtype=torch.float64, device=delta.device)
    step = max(1, (1 << 24) // max(1, batch * dim))
    bias = None if delta_bias is None else delta_bias.detach().to(_F32)[:, None]
    for s in range(0, L, step):
        x = delta[..., s:s + step].detach().to(_F32)
        if bias is not None:
            x = x + bias
        if delta_softplus:
            x = F.softplus(x)  # threshold 20: selscan's softplus
        S += x.sum(-1, dtype=torch.float64)
    return S


_SIDE = {}


def _side_stream(device):
    """The stream the shard's sum of dt runs on beside the zero-start pass (CUDA; None: inline)."""
    if device.type != "cuda":
        return None
    if device not in _SIDE:
        _SIDE[device] = torch.cuda.Stream(device)
    return _SIDE[device]


def _transfer(S_all, A, r):
    """P_r = exp(A * S_r): (batch, dim, N) float64 from the gathered (world, batch, dim) sums (a
    shard's decay product, which float32 would round to inf or 0 where each step's factor is finite)."""
    return torch.exp(S_all[r].to(torch.float64)[..., None] * A.detach().to(torch.float64))


def _compose(H, P, h):
    """H + P h in float64, h a float64 state: an exactly zero state stays zero whatever P (the
    sequential scan multiplies a zero state by finite factors; inf * 0 would be NaN)."""
    if P is None:  # the state does not pass through this shard (packed sequences)
        return H.to(torch.float64)
    return H.to(torch.float64) + torch.where(h == 0, torch.zeros_like(h), P * h)


# ---- >>packed sequences: the shard's local segments ----------------------------------------------


class _Packed:
    """A shard's view of global cu_seqlens: local offsets, and for every rank whether its shard
    continues the sequence of the previous shard (`cont`) and whether the state passes through
    the whole shard unreset (`thru`: then P applies, else P = 0)."""

    def __init__(self, cu, lengths, rank):
        starts = [0]
        for n in lengths:
            starts.append(starts[-1] + n)
        offs = _checks.offset_list(cu, starts[-1], f"the total length of the shards (the sum of {list(lengths)}):",
                                   "selscan context_parallel")
        seq_starts = set(offs[:-1])
        self.cont, self.thru = [], []
        for q in range(len(lengths)):
            a, b = starts[q], starts[q + 1]
            cont = a not in seq_starts and a > 0
            inside = any(a < c < b for c in seq_starts)
            self.cont.append(cont)
            self.thru.append(b == a or (cont and not inside))  # an empty shard passes the state on
        a, b = starts[rank], starts[rank + 1]
        local = [0] + sorted({c - a for c in offs if a < c < b}) + [b - a]
        self.local = torch.tensor(local, dtype=torch.int64)
        self.n_local = len(local) - 1


# ---- >>the scan across ranks ------------------------------------------------------------------------


# The scan's passes, the collectives and the dt sum's stream are module-level functions (_fwd, _bwd,
# _all_gather, _side_stream) looked up at call time: bench/bench_context_parallel.py wraps them from
# outside (--trace: the phases of a step; --no-overlap: the dt sum inline). This module carries no
# instrumentation and no bench switch.


def _fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, want_last, save):
    return _ops.fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, want_last, save)


def _bwd(u, delta, A, B, C, D, z, delta_bias, h0, cu, dy, dh_last, ck, softplus, grad_mask):
    return _ops.bwd(u, delta, A, B, C, D, z, delta_bias, h0, cu, dy, dh_last, ck, softplus, grad_mask)


def _cp_forward(u, delta, A, B, C, D, z, delta_bias, h0_user, packed_cu, softplus, return_last_state, group, rank,
                world, save, lengths=None):
    """The forward on this rank: (y, last or None, checkpoint, the h0 its scan ran from, the
    gathered sums of dt (world, batch, dim) or None, the packed layout or None). lengths: every
    rank's shard length where the ranks' agreement already gathered them."""
    batch, dim, L = u.shape
    N = A.shape[1]
    packed = None
    cu = None
    if packed_cu is not None:
        if lengths is None:
            lengths = _all_gather(torch.tensor([L], dtype=torch.int64, device=u.device), group,
                                  world).view(-1).tolist()
        packed = _Packed(packed_cu, lengths, rank)
        cu = packed.local

    def last_row(last):  # the shard-end state (batch, dim, N)
        return last[-1:] if packed is not None else last

    if world == 1:
        y, last, ck = _fwd(u, delta, A, B, C, D, z, delta_bias, h0_user, cu, softplus, return_last_state, save)
        return y, (last if return_last_state else None), ck, h0_user, None, packed

    first, final = rank == 0, rank == world - 1
    zeros_bdn = lambda: torch.zeros(batch, dim, N, dtype=_F32, device=u.device)  # noqa: E731
    # 1. this shard's (sum dt, h_local): rank 0's pass is already its exact one (its h0 is the
    #    user's); the last rank's are read by nobody
    y = last = ck = None
    S = torch.zeros(batch, dim, dtype=torch.float64, device=u.device)
    if first:
        y, last, ck = _fwd(u, delta, A, B, C, D, z, delta_bias, h0_user, cu, softplus, True, save)
        h_local = last_row(last)
    elif not final:
        # on a GPU the sum of dt runs on a side stream, beside the zero-start pass (both only read)
        side = _side_stream(u.device)
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(u.device))
            with torch.cuda.stream(side):
                S = _dt_sum(delta, delta_bias, softplus)
        _, last1, _ = _fwd(u, delta, A, B, C, None, None, delta_bias, None, cu, softplus, True, False)
        h_local = last_row(last1)
        del last1
        if side is not None:
            torch.cuda.current_stream(u.device).wait_stream(side)
            S.record_stream(torch.cuda.current_stream(u.device))
        else:
            S = _dt_sum(delta, delta_bias, softplus)
    else:
        h_local = zeros_bdn()
    payload = torch.cat([S.to(_F32).reshape(-1), h_local.reshape(-1)])
    # 2. one all_gather, then every rank composes the maps of the ranks before it, in order
    got = _all_gather(payload, group, world)
    S_all = got[:, :batch * dim].reshape(world, batch, dim)
    H_all = got[:, batch * dim:].reshape(world, batch, dim, N)
    if first:
        return y, (last if return_last_state else None), ck, h0_user, S_all, packed
    h = H_all[0].to(torch.float64)
    for q in range(1, rank):
        h = _compose(H_all[q], _transfer(S_all, A, q) if (packed is None or packed.thru[q]) else None, h)
    h = h.to(_F32)
    if packed is not None:
        h0 = torch.zeros(packed.n_local, dim, N, dtype=_F32, device=u.device)
        if packed.cont[rank]:
            h0[0] = h[0]
    else:
        h0 = h
    # 3. the exact pass
    y, last, ck = _fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, return_last_state, save)
    return y, (last if return_last_state else None), ck, h0, S_all, packed


class _ContextParallelScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, softplus, return_last_state, group, rank,
                world, lengths, token):
        y, last, ck, h0_used, S_all, packed = _cp_forward(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens,
                                                          softplus, return_last_state, group, rank, world, save=True,
                                                          lengths=lengths)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias)
        ctx.h0_used, ctx.ck, ctx.S_all, ctx.packed = h0_used, ck, S_all, packed
        ctx.softplus, ctx.group, ctx.rank, ctx.world = softplus, group, rank, world
        ctx.user_h0 = h0 is not None
        ctx.set_materialize_grads(False)
        if last is None:
            return y, None
        return y, last

    @staticmethod
    def backward(ctx, dy, dlast):
        u, delta, A, B, C, D, z, delta_bias = ctx.saved_tensors
        rank, world, packed, group = ctx.rank, ctx.world, ctx.packed, ctx.group
        h0, ck, S_all = ctx.h0_used, ctx.ck, ctx.S_all
        batch, dim, L = u.shape
        N = A.shape[1]
        cu = None if packed is None else packed.local
        if dy is None:
            dy = torch.zeros_like(u)
        # the gradient at the shard's end from this rank's own last_state
        e = None if dlast is None else dlast.to(_F32)
        needs = list(ctx.needs_input_grad[:8]) + [ctx.user_h0 and ctx.needs_input_grad[8]]
        mask = [int(bool(m)) for m in needs]
        present = [True] * 5 + [D is not None, z is not None, delta_bias is not None, h0 is not None]
        mask = [m if p else 0 for m, p in zip(mask, present)]

        def bwd(dh_last, grad_mask):
            return _bwd(u, delta, A, B, C, D, z, delta_bias, h0, cu, dy, dh_last, ck, ctx.softplus, grad_mask)

        def as_rows(lam):  # the gradient at the shard's end, in dh_last's layout
            if packed is None:
                return lam
            rows = torch.zeros(packed.n_local, dim, N, dtype=_F32, device=u.device)
            rows[-1] = lam[0]
            return rows

        grads = None
        if world == 1:
            grads = bwd(e, mask)
        else:
            first, final = rank == 0, rank == world - 1
            # 1. c = the gradient reaching this shard's start from its own outputs (dy and its
            #    last_state): middle ranks run a dh0-only backward; the last rank's one backward
            #    is already exact
            c = torch.zeros(batch if packed is None else 1, dim, N, dtype=_F32, device=u.device)
            if final:
                m = list(mask)
                m[_DH0] = 1
                grads = bwd(e, m)
                c = grads[_DH0]
            elif not first:
                m = [0] * _NGRADS
                m[_DH0] = 1
                c = bwd(e, m)[_DH0]
            if packed is not None:
                c = c[:1] if packed.cont[rank] else torch.zeros_like(c[:1])
            # 2. one all_gather; mu = sum over later ranks q of (P_{r+1} ... P_{q-1}) c_q
            got = _all_gather(c, group, world)
            if not final:
                mu = got[world - 1].to(torch.float64)
                for q in range(world - 2, rank, -1):
                    mu = _compose(got[q], _transfer(S_all, A, q) if (packed is None or packed.thru[q]) else None,
                                  mu)
                mu = mu.to(_F32)
                lam = mu if e is None else mu + e
                # nothing to compute here (a rank holding only the token, its y a link in h0's chain): skip
                grads = bwd(as_rows(lam), mask) if any(mask) else [None] * _NGRADS
        out = [None] * 17
        for i in range(_NGRADS):
            if mask[i]:
                out[i] = grads[i]
        if not ctx.user_h0:
            out[8] = None
        return tuple(out)


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, group=None, *, cu_seqlens=None, h0=None):
    """The selective scan of one sequence sharded along L over the ranks of `group` (default: the
    world). Arguments as selscan_torch.selective_scan_fn's, with u / delta / z and a variable B / C
    holding this rank's contiguous shard (rank r holds the r-th piece; shards may differ in
    length); A, D, delta_bias, a constant B / C the full (replicated) parameters.

    Returns this rank's slice of out, or (out, last_state) with last_state (batch, dim, N) the
    exact state after this rank's last token: on the last rank, the last state of the whole
    sequence. A gradient flowing into any rank's last_state is propagated.

    h0 (batch, dim, N): the state before the sequence's first token, read on rank 0 only. When any
    rank's inputs require grad (h0 on rank 0 alone, say), every rank records the backward (its y and
    last state require grad) and must run it; grad disabled on one rank then is refused. That
    agreement needs the cross-rank check (CHECK_RANKS, the default): unchecked, every rank's inputs
    must require grad alike.
    cu_seqlens: the packed sequences' offsets along the WHOLE sequence (the same on every rank,
    batch 1; sequences may cross shard borders); return_last_state and h0 are not supported with
    it (NotImplementedError).

    Every rank of the group must call it (it runs one all_gather), and every rank must run the
    backward through its out (one all_gather there too). The ranks must agree on batch, dim, N,
    dtypes and options, and pass bitwise the same A, D, delta_bias, constant B / C and cu_seqlens:
    one small all_gather checks that first (CHECK_RANKS), a ValueError on every rank otherwise (also
    when one rank refuses its own arguments). Gradients of A, D, delta_bias are this
    shard's contributions: sum them over the group (all_reduce_grads). No double backward.
    """
    rank, world = _group_rank_world(group)
    return _scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, group, rank, world,
                 cu_seqlens, h0, CHECK_RANKS)


def _scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, group, rank, world, cu_seqlens,
          h0, check):
    err = None
    try:  # this rank's own checks: a refusal here stops every rank (check) instead of one
        for t, name in ((u, "u"), (delta, "delta"), (A, "A"), (B, "B"), (C, "C")):
            _checks.tensor_arg(t, name)
        for t, name in ((D, "D"), (z, "z"), (delta_bias, "delta_bias"), (h0, "h0")):
            _checks.tensor_arg(t, name, optional=True)
        if cu_seqlens is not None and return_last_state:
            raise NotImplementedError("selscan context_parallel: return_last_state with cu_seqlens is not supported "
                                      "(the final states of packed sequences lie on the ranks holding their ends)")
        if cu_seqlens is not None and h0 is not None:
            raise NotImplementedError("selscan context_parallel: h0 with cu_seqlens is not supported")
        dtype = u.dtype
        if A.dtype != _F32:
            A = _cast(A, "A", _F32)
        delta = _cast(delta, "delta", dtype)
        if z is not None:
            z = _cast(z, "z", dtype)
        B = _cast(B, "B", _F32 if B.dim() == 2 else dtype)  # (dim, N) constant: float32, as selective_scan_fn
        C = _cast(C, "C", _F32 if C.dim() == 2 else dtype)
        if D is not None:
            D = _cast(D, "D", _F32)
        if delta_bias is not None:
            delta_bias = _cast(delta_bias, "delta_bias", _F32)
        if rank != 0:
            h0 = None
        if h0 is not None:
            h0 = _cast(h0, "h0", _F32)
        if cu_seqlens is not None:
            cu_seqlens = _host_offsets(cu_seqlens)
            if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:  # (here: a rank refusing alone would hang)
                raise ValueError(f"selscan context_parallel: cu_seqlens must be a 1-D tensor of n_seqs + 1 >= 2 "
                                 f"offsets (the first 0, the last the total length), got shape "
                                 f"{list(cu_seqlens.shape)}")
            if u.dim() == 3 and u.shape[0] != 1:
                raise ValueError(f"selscan context_parallel: packed sequences (cu_seqlens) need batch 1, u is "
                                 f"{tuple(u.shape)}")
        if world > 1:  # the op's rules on this shard, before any collective: rank 0 runs the op before the
            # all_gather, the last rank after it, so a refusal left to the op stops rank 0 alone and the
            # last rank waits or aborts in the collective (also when MambaMixerCP already agreed: check False)
            _checks.check_fwd(u, delta, A, B, C, D, z, delta_bias, h0, None)
    except Exception as e:
        err = e
    softplus, last = bool(delta_softplus), bool(return_last_state)
    tensors = (u, delta, A, B, C, D, z, delta_bias, h0)
    graph = err is None and torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    lengths = None
    if check and world > 1:
        meta, values = [], []
        if err is None:
            batch, dim, L = u.shape
            cu = 0 if cu_seqlens is None else _hash(cu_seqlens.numpy().tobytes())  # on the host: not _bits
            layout = lambda t: 0 if t.dim() == 2 else (t.shape[1] if t.dim() == 4 else 1)  # noqa: E731
            meta = [("batch (u.shape[0])", batch, None), ("dim (u.shape[1])", dim, None), (None, L, None),
                    ("N (A.shape[1])", A.shape[1], None), ("u's dtype", _dtype_code(u), _dtype_name),
                    ("B's layout (0: (dim, N), else its groups)", layout(B), None),
                    ("C's layout (0: (dim, N), else its groups)", layout(C), None),
                    ("D", int(D is not None), _given), ("z", int(z is not None), _given),
                    ("delta_bias", int(delta_bias is not None), _given), ("delta_softplus", int(softplus), bool),
                    ("cu_seqlens", int(cu_seqlens is not None), _given),
                    ("cu_seqlens' length", 0 if cu_seqlens is None else cu_seqlens.numel(), None),
                    ("cu_seqlens", cu, _DIFFERS),
                    (None, 2 if graph else int(torch.is_grad_enabled()), None)]  # the backward: below
            values = [("A", A), ("D", D), ("delta_bias", delta_bias), ("B", B if B.dim() == 2 else None),
                      ("C", C if C.dim() == 2 else None)]
        metas = _agree("selective_scan_fn", err, meta, values, group, world, _device(group, u, A))
        lengths = [m[2] for m in metas]
        # a rank whose own inputs need no gradient still runs the backward when another rank's do (h0 on rank 0
        # alone: its gradient flows back through every later shard): a token input gives its y a grad_fn
        graph_group = any(m[-1] == 2 for m in metas)
        off = [r for r, m in enumerate(metas) if m[-1] == 0]
        if graph_group and off:
            need = next(r for r, m in enumerate(metas) if m[-1] == 2)
            raise ValueError(f"selscan context_parallel: selective_scan_fn: rank {need}'s inputs require grad but "
                             f"rank {off[0]} runs with grad disabled (selective_scan_fn's backward has collectives "
                             f"on every rank: every rank must run with grad enabled, or none)")
    elif err is not None:
        raise err
    else:
        graph_group = graph
    if graph_group:
        token = None if graph else torch.empty(0, device=u.device, requires_grad=True)
        _checks.no_func_transforms("selscan's context-parallel scan")
        y, hl = _ContextParallelScan.apply(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, softplus, last, group,
                                           rank, world, lengths, token)
    else:
        y, hl, _, _, _, _ = _cp_forward(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, softplus, last, group,
                                        rank, world, save=False, lengths=lengths)
    return (y, hl) if last else y


# ---- >>the causal conv's halo ----------------------------------------------------------------------


def _peer(group, group_rank):
    """The global rank of `group_rank` in `group` (point-to-point ops take global ranks)."""
    if group is None:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def _exchange(send, send_to, recv_like, recv_from, group):
    """Sends `send` to group rank `send_to` and receives a tensor like `recv_like` from
    `recv_from` (either may be None), in one batch_isend_irecv; returns the received tensor."""
    ops, got = [], None
    if send is not None and send_to is not None:
        ops.append(dist.P2POp(dist.isend, send.contiguous(), _peer(group, send_to), group))
    if recv_from is not None:
        got = torch.empty_like(recv_like, memory_format=torch.contiguous_format)
        ops.append(dist.P2POp(dist.irecv, got, _peer(group, recv_from), group))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return got


class _Halo(torch.autograd.Function):
    """tail (batch, dim, W-1): this rank's last W-1 conv inputs. Returns the previous rank's tail
    (zeros on rank 0). The backward sends the halo's gradient back to the previous rank and adds
    the next rank's to this tail's."""

    @staticmethod
    def forward(ctx, tail, group, rank, world):
        ctx.group, ctx.rank, ctx.world = group, rank, world
        got = _exchange(tail, rank + 1 if rank + 1 < world else None, tail, rank - 1 if rank > 0 else None, group)
        return torch.zeros_like(tail) if got is None else got

    @staticmethod
    def backward(ctx, g):
        rank, world = ctx.rank, ctx.world
        got = _exchange(g if rank > 0 else None, rank - 1 if rank > 0 else None, g,
                        rank + 1 if rank + 1 < world else None, ctx.group)
        return (torch.zeros_like(g) if got is None else got), None, None, None


def causal_conv1d_cp(x, weight, bias=None, activation=None, group=None):
    """The causal depthwise conv of a sequence sharded along L: x (batch, dim, L_shard), weight
    (dim, W) or (dim, 1, W); the previous rank's last W-1 inputs (the halo, zeros on rank 0) are
    exchanged point to point, and their gradient sent back in the backward. Every shard must hold
    at least W-1 tokens. activation None or "silu" / "swish". y in x's dtype; weight and bias read
    in float32 and the sums in float32, as causal_conv1d_fn. The ranks must agree on batch, dim, W,
    dtypes, activation, whether x requires grad, and bitwise on weight / bias (checked first, as
    selective_scan_fn)."""
    rank, world = _group_rank_world(group)
    return _conv(x, weight, bias, activation, group, rank, world, CHECK_RANKS)


_ACTIVATIONS = (None, "silu", "swish")


def _conv(x, weight, bias, activation, group, rank, world, check):
    err = None
    try:  # this rank's own checks (before the halo exchange: a refusal stops every rank)
        _checks.tensor_arg(x, "x")
        _checks.tensor_arg(weight, "weight")
        _checks.tensor_arg(bias, "bias", optional=True)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"selscan context_parallel: activation must be None, 'silu' or 'swish', got "
                             f"{activation!r}")
        if x.dim() != 3:
            raise ValueError(f"selscan context_parallel: x must have shape (batch, dim, L_shard), got "
                             f"{list(x.shape)}")
        if weight.dim() == 3 and weight.shape[1] == 1:
            weight = weight.squeeze(1)
        if weight.dim() != 2 or weight.shape[0] != x.shape[1] or weight.shape[1] < 1:
            raise ValueError(f"selscan context_parallel: weight must have shape (dim, W) or (dim, 1, W) with dim = "
                             f"{x.shape[1]} (x's dim) and W >= 1, got {list(weight.shape)}")
        if bias is not None and tuple(bias.shape) != (x.shape[1],):
            raise ValueError(f"selscan context_parallel: bias must have shape (dim,) = ({x.shape[1]},), got "
                             f"{list(bias.shape)}")
        _checks.same_device("causal_conv1d_cp", "x", x, (("weight", weight), ("bias", bias)))
        # as causal_conv1d_fn: weight / bias in float32, the sums in float32, y in x's dtype (an integer /
        # bool weight is refused here, not by F.conv1d after the halo exchange)
        if not x.is_floating_point():
            raise TypeError(f"selscan context_parallel: x must be a real floating-point tensor, got {x.dtype}")
        weight = _cast(weight, "weight", _F32)
        if bias is not None:
            bias = _cast(bias, "bias", _F32)
        W, L = weight.shape[1], x.shape[-1]
        if W > 1 and world > 1 and L < W - 1:
            raise ValueError(f"selscan context_parallel: every shard must hold at least d_conv - 1 = {W - 1} tokens "
                             f"for the conv's halo, this rank's x holds {L}")
    except Exception as e:
        err = e
    if check and world > 1:
        meta, values = [], []
        if err is None:
            graph = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
            meta = [("batch (x.shape[0])", x.shape[0], None), ("dim (x.shape[1])", x.shape[1], None),
                    (None, x.shape[2], None), ("W (weight.shape[-1])", weight.shape[1], None),
                    ("x's dtype", _dtype_code(x), _dtype_name), ("weight's dtype", _dtype_code(weight), _dtype_name),
                    ("bias", int(bias is not None), _given),
                    ("bias's dtype", -1 if bias is None else _dtype_code(bias), _dtype_name),
                    ("activation", _ACTIVATIONS.index(activation), lambda c: repr(_ACTIVATIONS[c])),
                    ("the backward (an input requires grad: its backward has a collective too)", int(graph), bool),
                    # the halo's backward (x's gradient) exchanges with the neighbours: every rank or none
                    ("x's gradient (x requires grad: its halo's backward exchanges with the neighbours)",
                     int(graph and x.requires_grad), bool)]
            values = [("weight", weight), ("bias", bias)]
        _agree("causal_conv1d_cp", err, meta, values, group, world, _device(group, x, weight))
    elif err is not None:
        raise err
    dim, W = weight.shape
    L = x.shape[-1]
    if L == 0:  # an empty shard (W 1, or one rank): F.conv1d refuses an input shorter than the kernel
        out = x.float() * weight[:, -1:] if bias is None else x.float() * weight[:, -1:] + bias[:, None]
        return (F.silu(out) if activation in ("silu", "swish") else out).to(x.dtype)
    if W > 1 and world > 1:
        _checks.no_func_transforms("selscan's context-parallel conv")
        halo = _Halo.apply(x[..., L - (W - 1):], group, rank, world)
        xx = torch.cat([halo, x], dim=-1)
    else:
        xx = F.pad(x, (W - 1, 0))
    out = F.conv1d(xx.float(), weight.unsqueeze(1), bias, groups=dim)
    if activation in ("silu", "swish"):
        out = F.silu(out)
    return out.to(x.dtype)


# ---- >>the Mamba-1 block ----------------------------------------------------------------------------


class MambaMixerCP(nn.Module):
    """The Mamba-1 mixer (transformers' MambaMixer / mamba_ssm's Mamba: in_proj, causal depthwise
    conv + SiLU, x_proj, dt_proj, the selective scan with z gating, out_proj), run on a sequence
    sharded along L over `group`: the conv's halo goes point to point, the scan through
    selective_scan_fn above. Parameter names match transformers' MambaMixer and mamba_ssm's Mamba
    (in_proj, conv1d, x_proj, dt_proj, A_log, D, out_proj), so their state dicts load as they are;
    from_mixer() wraps an existing layer's modules without copying.

    forward(hidden_states (batch, L_shard, hidden_size)) -> (batch, L_shard, hidden_size).
    Parameter gradients are this shard's contributions: sum them over the group (all_reduce_grads).
    The ranks agree once a forward (sizes, batch, dtype; A_log, D, dt_proj.bias, conv1d bitwise)
    before the conv's halo, as selective_scan_fn.
    """

    def __init__(self, hidden_size, intermediate_size, state_size=16, conv_kernel=4, time_step_rank=None,
                 use_conv_bias=True, use_bias=False, group=None, device=None, dtype=None):
        super().__init__()
        fk = dict(device=device, dtype=dtype)
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.ssm_state_size, self.conv_kernel_size = state_size, conv_kernel
        self.time_step_rank = int(time_step_rank or -(-hidden_size // 16))
        self.group = group
        d = intermediate_size
        self.in_proj = nn.Linear(hidden_size, 2 * d, bias=use_bias, **fk)
        self.conv1d = nn.Conv1d(d, d, conv_kernel, groups=d, bias=use_conv_bias, padding=conv_kernel - 1, **fk)
        self.x_proj = nn.Linear(d, self.time_step_rank + 2 * state_size, bias=False, **fk)
        self.dt_proj = nn.Linear(self.time_step_rank, d, bias=True, **fk)
        A = torch.arange(1, state_size + 1, dtype=_F32, device=device).repeat(d, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(d, dtype=_F32, device=device))
        self.out_proj = nn.Linear(d, hidden_size, bias=use_bias, **fk)

    @classmethod
    def from_config(cls, config, group=None, device=None, dtype=None):
        """From a transformers MambaConfig (hidden_act must be silu)."""
        if getattr(config, "hidden_act", "silu") not in ("silu", "swish"):
            raise ValueError(f"selscan context_parallel: MambaMixerCP supports hidden_act silu, got {config.hidden_act}")
        return cls(config.hidden_size, config.intermediate_size, config.state_size, config.conv_kernel,
                   config.time_step_rank, config.use_conv_bias, config.use_bias, group=group, device=device,
                   dtype=dtype)

    @classmethod
    def from_mixer(cls, mixer, group=None):
        """Wraps an existing transformers MambaMixer (or mamba_ssm Mamba): the new module shares its
        submodules and parameters (no copy)."""
        d, N = mixer.A_log.shape
        W = mixer.conv1d.kernel_size[0]
        rank = mixer.dt_proj.in_features
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self.hidden_size, self.intermediate_size = mixer.in_proj.in_features, d
        self.ssm_state_size, self.conv_kernel_size, self.time_step_rank = N, W, rank
        self.group = group
        for name in ("in_proj", "conv1d", "x_proj", "dt_proj", "out_proj"):
            setattr(self, name, getattr(mixer, name))
        self.A_log, self.D = mixer.A_log, mixer.D
        return self

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        rank, world = _group_rank_world(self.group)
        err = None
        try:  # this rank's own checks and in_proj, before the first collective (one agreement a layer)
            if kwargs.get("cache") is not None or kwargs.get("cache_params") is not None:
                raise NotImplementedError("selscan context_parallel: MambaMixerCP runs training / prefill without a "
                                          "cache")
            _checks.tensor_arg(hidden_states, "hidden_states")
            if hidden_states.dtype not in (torch.float32, torch.float16, torch.bfloat16):  # the scan's dtypes
                raise TypeError(f"selscan context_parallel: hidden_states must be float32, float16 or bfloat16, got "
                                f"{hidden_states.dtype}")
            if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
                raise ValueError(f"selscan context_parallel: hidden_states must have shape (batch, L_shard, "
                                 f"hidden_size = {self.hidden_size}), got {list(hidden_states.shape)}")
            batch, L = hidden_states.shape[:2]
            if attention_mask is not None and tuple(attention_mask.shape) != (batch, L):
                raise ValueError(f"selscan context_parallel: attention_mask must have shape (batch, L_shard) = "
                                 f"{[batch, L]} (this rank's piece), got {list(attention_mask.shape)}")
            W = self.conv_kernel_size
            if W > 1 and world > 1 and L < W - 1:
                raise ValueError(f"selscan context_parallel: every shard must hold at least d_conv - 1 = {W - 1} "
                                 f"tokens for the conv's halo, this rank's hidden_states holds {L}")
            dtype = hidden_states.dtype
            if attention_mask is not None:  # this shard's (batch, L_shard) mask, as transformers applies it
                hidden_states = (hidden_states * attention_mask[:, :, None]).to(dtype)
            xz = self.in_proj(hidden_states).transpose(1, 2)  # (batch, 2 d, L)
        except Exception as e:
            err = e
        if CHECK_RANKS and world > 1:
            meta, values = [], []
            if err is None:
                graph = torch.is_grad_enabled() and xz.requires_grad
                meta = [("batch (hidden_states.shape[0])", batch, None), (None, L, None),
                        ("hidden_size", self.hidden_size, None), ("intermediate_size", self.intermediate_size, None),
                        ("state_size", self.ssm_state_size, None), ("conv_kernel", W, None),
                        ("time_step_rank", self.time_step_rank, None),
                        ("in_proj's output dtype", _dtype_code(xz), _dtype_name),
                        ("conv1d.bias", int(self.conv1d.bias is not None), _given),
                        ("dt_proj.bias", int(self.dt_proj.bias is not None), _given),
                        ("the backward (an input requires grad: its backward has collectives too)", int(graph), bool)]
                values = [("A_log", self.A_log), ("D", self.D), ("dt_proj.bias", self.dt_proj.bias),
                          ("conv1d.weight", self.conv1d.weight), ("conv1d.bias", self.conv1d.bias)]
            _agree("MambaMixerCP", err, meta, values, self.group, world, _device(self.group, self.A_log))
        elif err is not None:
            raise err
        # agreed: the conv and the scan below skip their own agreement
        x, z = xz.chunk(2, dim=1)
        x = _conv(x, self.conv1d.weight, self.conv1d.bias, "silu", self.group, rank, world, False)
        if attention_mask is not None:
            x = (x * attention_mask[:, None, :]).to(x.dtype)
        dt, B, C = self.x_proj(x.transpose(1, 2)).split(
            [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1)
        delta = self.dt_proj.weight @ dt.transpose(1, 2)  # (batch, d, L); the bias goes to the scan
        A = -torch.exp(self.A_log.float())
        bias = None if self.dt_proj.bias is None else self.dt_proj.bias.float()
        y = _scan(x, delta, A, B.transpose(1, 2), C.transpose(1, 2), self.D.float(), z, bias, True, False, self.group,
                  rank, world, None, None, False)
        return self.out_proj(y.transpose(1, 2).to(dtype))

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, "
                f"state_size={self.ssm_state_size}, conv_kernel={self.conv_kernel_size}")
