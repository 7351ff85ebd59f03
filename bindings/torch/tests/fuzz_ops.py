#!/usr/bin/env python3
"""fuzz_ops.py: a seeded fuzz harness for selscan_torch's framework ops (issue 27).

Every public function (selective_scan_fn, selective_state_update, SelectiveScan's forward and
step; Mamba-2's mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined and the multi-head
step as Mamba-2 calls it) and the raw ops (torch.ops.selscan.fwd / bwd / step / ssd_fwd / ssd_bwd)
get good and bad inputs: dtypes, ranks, shapes, zero sizes, broadcast (expanded) views, strides,
transposes, slices of larger buffers, in-place state aliasing the inputs, meta tensors and mixed
devices, malformed offsets and row indices, NaN / Inf, autograd (gradients, double backward, the
inference-only step).

  bad input:  an exception (ValueError / TypeError / NotImplementedError / RuntimeError) whose
              message names the caller's argument (where it is knowable, the refusal is about
              it); every input bit-identical afterwards (the whole storage of each tensor: the
              in-place state and what lies around a view) and its metadata (shape, strides,
              storage offset, dtype) unchanged
  good input: the outputs of the float64 reference (selscan_torch.reference) within the dtype's
              tolerance, shapes and dtypes as documented, the in-place state updated as the
              reference says and nothing else written, inputs untouched

Mamba-2 (SSD) categories: ssd-good (mamba_chunk_scan_combined over every option: groups, D per head
or per channel, z, dt_bias, softplus, dt_limit, initial_states (mamba_ssm's one-row form with
cu_seqlens too), final / varlen states, seq_idx of any index dtype and values, cu_seqlens in every
form with empty sequences, chunk_size, layouts, zero sizes, NaN / Inf; outputs, states, and with
random upstream gradients every input's gradient, against selscan_torch.reference.ssd_ref in
float64), ssd-bad (wrong ranks, shapes, dtypes, devices, seq_idx / cu_seqlens, groups, dt_limit,
chunk_size: refused naming the argument, inputs bit-identical; the structural ones on meta too),
ssd-raw (ssd_fwd / ssd_bwd: good calls against the reference, bad ones refused by name, and
hostile ones (any tensor, None, extreme values in any slot) answered or refused, never a crash),
split (mamba_split_conv1d_scan_combined against test_ssd's float64 composition, per run of
seq_idx, with gradients; and bad arguments). step-good / step-bad include Mamba-2's multi-head form
(A, D, dt_bias per head and dt per (row, head), expand()ed; A as A_log).

Crash guard: cases run in worker subprocesses (one per --workers, each on its range of case ids,
printing a line per case); a worker that dies (a segfault, an abort) or hangs has its current
case reported as failed, and a new worker goes on from the next case.

    python fuzz_ops.py [--cases N] [--seed S] [--device cpu|cuda] [--workers W]
    python fuzz_ops.py --seed S --case ID [--device D]      # one case, in process, verbose
    python fuzz_ops.py --only ssd-good,ssd-bad ...          # draw only these categories (replay with it)

Prints "<category>: N cases, N passed, N failed" per category and a total line; exit status 1
when a case failed. Case i is generated from (seed, i) alone: any failure is replayed by --case.
With --device cuda (a GPU and the CUDA kernels): inputs on the GPU, plus device mismatches
(cuda vs cpu), a non-default current device (more than one GPU) and a non-default stream, for the
Mamba-1 ops and the SSD scan / split layer alike.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import traceback

CATEGORIES = ["scan-good", "scan-bad", "step-good", "step-bad", "module", "raw-fwd", "raw-bwd", "raw-step",
              "meta", "autograd", "ssd-good", "ssd-bad", "ssd-raw", "split"]
CUDA_CATEGORIES = ["cuda"]
# how often each category comes up (a case id picks one by its hash, so a run's mix is fixed)
WEIGHTS = {"scan-good": 4, "scan-bad": 4, "step-good": 3, "step-bad": 4, "module": 1, "raw-fwd": 2, "raw-bwd": 2,
           "raw-step": 2, "meta": 3, "autograd": 2, "ssd-good": 4, "ssd-bad": 4, "ssd-raw": 3, "split": 2, "cuda": 3}

EXC = (ValueError, TypeError, NotImplementedError, RuntimeError)


class CaseFail(Exception):
    pass


# =====================================================================================================
# worker side: generation and checks (imports torch)
# =====================================================================================================


def _worker_imports():
    global torch, st, ops, selective_scan_ref, selective_state_update_ref, ssd_ref, mamba_split_conv1d_scan_ref
    global F32, F16, BF16, F64, TOL32, GTOL32, STOL, SSTOL, SCALE_FLOOR, lowp_tol
    import torch  # noqa: F811
    import selscan_torch as st  # noqa: F811
    from selscan_torch.reference import selective_scan_ref, selective_state_update_ref  # noqa: F811
    from selscan_torch.reference import mamba_split_conv1d_scan_ref, ssd_ref  # noqa: F811
    from _common import lowp_tol  # noqa: F811  (this folder is sys.path[0]: the script's own)

    torch.set_num_threads(1)
    ops = torch.ops.selscan
    F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
    # scaled error (scaled_err) of outputs (TOL32) and gradients (GTOL32) in float32; a float16 /
    # bfloat16 result adds its roundings to those dtypes (tol_of: _common.lowp_tol)
    TOL32, GTOL32 = 1e-4, 1e-3
    STOL = 1e-5  # a float32 state / last_state (any problem's: computed in float32 from its inputs)
    SSTOL = STOL  # the SSD's float32 final / varlen states (the same: float32 arithmetic on the inputs it sees)
    SCALE_FLOOR = 1e-2


# ---- small helpers ----------------------------------------------------------------------------------


def named(msg, arg):
    return re.search(r"(?<![\w])" + re.escape(arg) + r"(?![\w])", msg) is not None


def storage_snapshot(t):
    """The bytes of t's whole storage (what lies around a view too); None for meta tensors."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return None
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def tensors_in(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def metadata(t):
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device)


class Snap:
    """Storage snapshots and metadata (shape, strides, storage offset, dtype) of every tensor among
    args, compared later bit for bit. around: an in-place output (the step's state) that an input
    may share a storage with (an input in its gaps): those bytes of the storage that the output
    covers are not compared."""

    def __init__(self, args, around=None):
        self.items = [(t, storage_snapshot(t), metadata(t)) for t in tensors_in(args)]
        self.around = around

    def changed(self, skip=()):
        for t, s, m in self.items:
            if any(t is k for k in skip):
                continue
            if metadata(t) != m:
                return True
            if s is None:
                continue
            now = storage_snapshot(t)
            if now.shape != s.shape:
                return True
            o = self.around
            if o is not None and o.device.type != "meta" and t.untyped_storage().data_ptr() == \
                    o.untyped_storage().data_ptr():
                keep = ~byte_mask(o)
                if not torch.equal(now[keep], s[keep]):
                    return True
            elif not torch.equal(now, s):
                return True
        return False


def byte_mask(t):
    """The bytes of t's storage that t's elements cover."""
    es = t.element_size()
    nb = t.untyped_storage().nbytes()
    m = torch.zeros(nb, dtype=torch.bool, device=t.device)
    pos = torch.zeros(nb // es, dtype=torch.bool, device=t.device)
    pos.as_strided(t.shape, t.stride(), t.storage_offset()).fill_(True)
    m[: pos.numel() * es].view(-1, es)[:] = pos.unsqueeze(1)
    return m


def subject(msg):
    """The argument a refusal is about: selscan's "(argument 'state': ...)", else the first word
    after "selscan: " ("complex A is not supported" -> A)."""
    m = re.search(r"\(argument '(\w+)'", msg)
    if m:
        return m.group(1)
    m = re.match(r"selscan: (?:complex |variable )?(\w+)", msg)
    return m.group(1) if m else None


def expect_refusal(call, args, names, about=None):
    """call() must raise one of EXC naming one of names (about: and about one of these, its
    subject); args bit-identical afterwards, their metadata too."""
    about = about if about is not None else getattr(names, "about", None)
    snap = Snap(args)
    try:
        call()
    except EXC as e:
        msg = str(e).split("\nException raised from")[0]
        if not any(named(msg, n) for n in names):
            raise CaseFail(f"refused, but the message does not name {names}: {type(e).__name__}: {msg[:400]}")
        if about is not None and subject(msg) not in about:
            raise CaseFail(f"refused, but about {subject(msg)!r}, not {about}: {type(e).__name__}: {msg[:400]}")
    except Exception as e:  # noqa: BLE001
        raise CaseFail(f"unexpected exception type {type(e).__name__} (want one naming {names}): {str(e)[:300]}")
    else:
        raise CaseFail(f"no exception (want one naming {names})")
    if snap.changed():
        raise CaseFail("an input changed although the call was refused")


def scaled_err(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.shape != b.shape:
        raise CaseFail(f"shape {tuple(a.shape)} vs reference {tuple(b.shape)}")
    if b.numel() == 0:
        return 0.0
    # non-finite where the reference is: NaN where it is NaN (NaN in, NaN out); where it is +-Inf,
    # the same Inf or NaN (selscan keeps "whatever NaN the arithmetic gives": its fast exp and its
    # checks turn an Inf input into NaN on some paths)
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb):
        raise CaseFail(f"non-finite positions differ from the reference ({int((~fa).sum())} vs {int((~fb).sum())})")
    nb = torch.isnan(b)
    if not torch.isnan(a[nb]).all():
        raise CaseFail("a NaN of the reference is not NaN")
    ib = torch.isinf(b)
    ai = a[ib]
    if not (torch.isnan(ai) | (ai == b[ib])).all():
        raise CaseFail("an Inf of the reference has another sign")
    fin = fb
    if not fin.any():
        return 0.0
    # scaled by the reference's largest entry, at least SCALE_FLOOR: inputs are O(1), so a result
    # far below that (a one-element last_state, a dD) comes from cancellation, where the rounding
    # of its O(1) terms, not of the result, sets the error
    d = (a[fin] - b[fin]).abs().max()
    return (d / b[fin].abs().max().clamp(min=SCALE_FLOOR)).item()


def tol_of(f32_tol, *dtypes):
    """The scaled-error bound of a result that passed through `dtypes` after the op's float32
    arithmetic (the op's dtype for it, then the caller's, e.g. a gradient cast back to its leaf's):
    lowp_tol with k = the number of distinct float16 / bfloat16 ones (each rounds once; a cast to the
    dtype already held is exact), u of the coarsest; f32_tol alone when there is none."""
    lows = {t for t in dtypes if t in (F16, BF16)}
    if not lows:
        return f32_tol
    return lowp_tol(BF16 if BF16 in lows else F16, f32_tol, len(lows))


def close(what, a, b, tol):
    if a.dtype in (F16, BF16):  # where the reference overflows the output dtype (f16: to Inf), that Inf
        br = b.to(a.dtype).to(b.dtype)
        b = torch.where(torch.isinf(br) & torch.isfinite(b), br, b)
    e = scaled_err(a, b)
    if not e <= tol:
        raise CaseFail(f"{what}: scaled error {e:.3g} > {tol:g}")


# ---- random tensors with random layouts ---------------------------------------------------------------


class Gen:
    def __init__(self, rng, device):
        self.rng = rng
        self.g = torch.Generator().manual_seed(rng.getrandbits(62))
        self.device = device

    def randn(self, *shape, scale=1.0, dtype=None):
        t = torch.randn(*shape, generator=self.g, dtype=F64) * scale
        return t.to(dtype or F32)

    def rand(self, *shape, lo=0.0, hi=1.0, dtype=None):
        t = torch.rand(*shape, generator=self.g, dtype=F64) * (hi - lo) + lo
        return t.to(dtype or F32)

    def layout(self, t, allow_expand=True):
        """t's values on the device with a random memory layout: contiguous, permuted storage, a
        slice of a larger buffer, or (inputs only) broadcast along a dim where t is constant."""
        r = self.rng
        kinds = ["contig", "contig", "perm", "slice"]
        k = r.choice(kinds)
        dev = self.device
        if k == "contig" or t.dim() == 0:
            return t.to(dev).contiguous()
        if k == "perm":
            p = list(range(t.dim()))
            r.shuffle(p)
            inv = [p.index(i) for i in range(t.dim())]
            return t.permute(p).contiguous().to(dev).permute(inv)
        pads = [r.randint(0, 2) for _ in range(t.dim())]
        offs = [r.randint(0, p) for p in pads]
        fill = float("nan") if t.is_floating_point() else 0  # (integer ids / offsets: no NaN)
        big = torch.full([s + p for s, p in zip(t.shape, pads)], fill, dtype=t.dtype).to(dev)
        view = big[tuple(slice(o, o + s) for o, s in zip(offs, t.shape))]
        view.copy_(t.to(dev))
        return view

    def broadcastable(self, shape, make, p=0.15):
        """make(shape) values, sometimes constant along random dims and handed over expand()ed
        (strides 0: an input may be a broadcast view)."""
        if self.rng.random() < p and len(shape) > 0:
            small = [1 if (self.rng.random() < 0.5) else s for s in shape]
            return self.layout(make(small)).expand(*shape)
        return self.layout(make(list(shape)))


# ---- the scan ---------------------------------------------------------------------------------------


def scan_cfg(rng, zero_ok=True, distinct=False):
    c = dict(dtype=rng.choice([F32, F32, F32, BF16, F16]), bc=rng.choice(["fixed", "var3", "grouped", "grouped"]))
    c["G"] = rng.choice([1, 2, 3]) if c["bc"] == "grouped" else 1
    if distinct:  # sizes that cannot be confused with each other (bad inputs)
        c["G"] = rng.choice([1, 2]) if c["bc"] == "grouped" else 1
        c.update(batch=rng.randint(1, 3), dim=rng.choice([4, 6]), L=rng.choice([5, 7, 9, 11]), N=rng.choice([2, 3]))
    elif rng.random() < 0.05:  # larger: several 64-step chunks, wider channel tiles, N past 64 (rarely)
        c.update(batch=rng.randint(1, 2), dim=c["G"] * rng.randint(4, 12), L=rng.randint(60, 150),
                 N=rng.choice([rng.randint(6, 20), rng.randint(6, 20), 70]))
    else:
        c.update(batch=rng.randint(1, 3), dim=c["G"] * rng.randint(1, 3), L=rng.randint(1, 20), N=rng.randint(1, 5))
        if zero_ok and rng.random() < 0.15:
            c[rng.choice(["batch", "dim", "L"])] = 0
    for k in ("D", "z", "bias", "h0", "softplus", "last"):
        c[k] = rng.random() < 0.5
    c["cu"] = None
    if rng.random() < 0.25:
        c["batch"] = 1
        n = rng.randint(1, 4)
        cuts = sorted(rng.randint(0, c["L"]) for _ in range(n - 1))
        c["cu"] = [0] + cuts + [c["L"]]
    return c


def scan_inputs(c, gen, nonfinite=False):
    b, d, L, N, G, dt = c["batch"], c["dim"], c["L"], c["N"], c["G"], c["dtype"]
    rows = len(c["cu"]) - 1 if c["cu"] else b
    x = {}
    x["u"] = gen.broadcastable((b, d, L), lambda s: gen.randn(*s, dtype=dt))
    if c["softplus"]:
        x["delta"] = gen.broadcastable((b, d, L), lambda s: gen.randn(*s, scale=0.5, dtype=dt))
    else:
        x["delta"] = gen.broadcastable((b, d, L), lambda s: gen.rand(*s, lo=0.01, hi=0.6, dtype=dt))
    x["A"] = gen.broadcastable((d, N), lambda s: gen.rand(*s, lo=-1.3, hi=-0.3))
    if c["bc"] == "fixed":
        x["B"] = gen.broadcastable((d, N), lambda s: gen.randn(*s))
        x["C"] = gen.broadcastable((d, N), lambda s: gen.randn(*s))
    elif c["bc"] == "var3":
        x["B"] = gen.broadcastable((b, N, L), lambda s: gen.randn(*s, dtype=dt))
        x["C"] = gen.broadcastable((b, N, L), lambda s: gen.randn(*s, dtype=dt))
    else:
        x["B"] = gen.broadcastable((b, G, N, L), lambda s: gen.randn(*s, dtype=dt))
        x["C"] = gen.broadcastable((b, G, N, L), lambda s: gen.randn(*s, dtype=dt))
    x["D"] = gen.layout(gen.randn(d)) if c["D"] else None
    x["z"] = gen.broadcastable((b, d, L), lambda s: gen.randn(*s, dtype=dt)) if c["z"] else None
    # without softplus delta + delta_bias stays positive (a negative step grows the state without bound)
    bias = (lambda: gen.randn(d, scale=0.3)) if c["softplus"] else (lambda: gen.rand(d, hi=0.3))
    x["delta_bias"] = gen.layout(bias()) if c["bias"] else None
    x["h0"] = gen.layout(gen.randn(rows, d, N)) if c["h0"] else None
    r = gen.rng
    # documented casts: another floating dtype is cast (A, D, delta_bias, h0, fixed B / C to float32;
    # delta, z, variable B / C to u's dtype)
    if r.random() < 0.2:
        k = r.choice(["A", "D", "delta_bias", "h0"] + (["B", "C"] if c["bc"] == "fixed" else []))
        if x[k] is not None:
            x[k] = x[k].to(r.choice([F64, F16, BF16]))
    if r.random() < 0.15:
        k = r.choice(["delta", "z"] + (["B", "C"] if c["bc"] != "fixed" else []))
        if x[k] is not None:
            x[k] = x[k].to(r.choice([t for t in (F32, F16, BF16, F64) if t != dt]))
    if nonfinite and x["u"].numel():
        k = r.choice(["u", "delta", "B", "C", "z", "u"])
        t = x[k]
        if t is not None and t.numel() and t.stride().count(0) == 0:
            idx = tuple(r.randrange(s) for s in t.shape)
            with torch.no_grad():
                t[idx] = float("nan") if (k != "u" or r.random() < 0.5) else r.choice([float("inf"), -float("inf")])
    return x


def cast_like_wrapper(x, dtype):
    """The inputs as the wrapper hands them to the op (its documented casts)."""
    y = dict(x)
    for k in ("A", "D", "delta_bias", "h0"):
        if y.get(k) is not None:
            y[k] = y[k].to(F32)
    for k in ("delta", "z"):
        if y.get(k) is not None:
            y[k] = y[k].to(dtype)
    for k in ("B", "C"):
        y[k] = y[k].to(F32 if y[k].dim() == 2 else dtype)
    return y


def ref_scan(x, c):
    y = cast_like_wrapper(x, x["u"].dtype)
    return selective_scan_ref(y["u"].cpu(), y["delta"].cpu(), y["A"].cpu(), y["B"].cpu(), y["C"].cpu(),
                              None if y["D"] is None else y["D"].cpu(), None if y["z"] is None else y["z"].cpu(),
                              None if y["delta_bias"] is None else y["delta_bias"].cpu(), c["softplus"], True,
                              c["cu"], None if y["h0"] is None else y["h0"].cpu())


def call_scan(x, c, cu="cfg"):
    cu = c["cu"] if cu == "cfg" else cu
    return st.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"],
                                c["softplus"], c["last"], cu, h0=x["h0"])


def check_scan_result(out, x, c):
    y, last = out if c["last"] else (out, None)
    u = x["u"]
    if y.dtype != u.dtype or tuple(y.shape) != tuple(u.shape) or y.device != u.device:
        raise CaseFail(f"out: {y.dtype} {tuple(y.shape)} {y.device}, want u's dtype, shape and device")
    yr, lr = ref_scan(x, c)
    close("out", y, yr, tol_of(TOL32, y.dtype))
    if c["last"]:
        rows = len(c["cu"]) - 1 if c["cu"] else c["batch"]
        if last.dtype != F32 or tuple(last.shape) != (rows, c["dim"], c["N"]):
            raise CaseFail(f"last_state: {last.dtype} {tuple(last.shape)}")
        close("last_state", last, lr, STOL)  # float32 (checked above)


def case_scan_good(gen, c=None):
    r = gen.rng
    c = c or scan_cfg(r)
    x = scan_inputs(c, gen, nonfinite=r.random() < 0.1)
    if c["cu"] is not None and r.random() < 0.5:  # offsets as a tensor (CPU; int32 or int64)
        c = dict(c)
        cu = torch.tensor(c["cu"], dtype=r.choice([torch.int64, torch.int32]))
        snap = Snap(list(x.values()) + [cu])
        out = call_scan(x, c, cu=cu)
    else:
        snap = Snap(list(x.values()))
        out = call_scan(x, c)
    if snap.changed():
        raise CaseFail("an input changed")
    check_scan_result(out, x, c)


# the mutations of a good scan call into a bad one: each returns the names the error may use, or
# None when it does not apply to this configuration


def _other_dtype_bad(r):
    return r.choice([torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8])


def _bad_shape(t, r, rank=True):
    """t (a tensor of rank >= 1) with one dim one longer or shorter, or (rank) a rank added /
    dropped. B / C take several ranks (one group or several, a 2-D step B): sizes only there."""
    k = r.random() if rank else 1.0
    if k < 0.2:
        return t.unsqueeze(r.randint(0, t.dim()))
    if k < 0.35 and t.dim() > 0:
        return t.select(r.randrange(t.dim()), 0) if 0 not in t.shape else t.sum(0)
    if k < 0.45:
        return t.new_zeros(())  # 0-dim
    d = r.randrange(t.dim())
    shape = list(t.shape)
    shape[d] = shape[d] + 1 if (shape[d] == 0 or r.random() < 0.5) else shape[d] - 1
    return torch.zeros(shape, dtype=t.dtype, device=t.device)


SCAN_NAMES = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"]


SCAN_KINDS = ["shape", "shape", "dtype", "nontensor", "device", "groups", "transpose", "cu", "cu", "h0rows", "N0",
              "complex"]
# what a meta tensor shows (no values, no memory): shapes, dtypes, devices
SCAN_META_KINDS = ["shape", "shape", "dtype", "nontensor", "groups", "transpose", "h0rows", "N0", "complex"]


def common_bad(kind, x, present, r, gen, no_complex=()):
    """The bad inputs every op's mutations share: one of the present arguments made complex (not those in
    no_complex), a non-tensor, or a tensor on another device; x changed in place. The argument's name, or
    None for another kind."""
    if kind == "complex":
        k = r.choice([k for k in present if k not in no_complex])
        x[k] = torch.complex(x[k].float(), x[k].float())
        return k
    if kind == "nontensor":
        k = r.choice(present)
        x[k] = r.choice([1.0, [1.0, 2.0], "x", 3])
        return k
    if kind == "device":
        k = r.choice(present)
        other = "meta" if (gen.device == "cpu" or r.random() < 0.5) else "cpu"
        x[k] = x[k].to(other)
        return k
    return None


def mutate_scan(x, c, gen, raw=False, kinds=SCAN_KINDS):
    """One bad input for selective_scan_fn (raw: the op itself, which casts nothing); returns
    (x, c, expected names), or None when the mutation drawn does not apply."""
    r = gen.rng
    present = [k for k in SCAN_NAMES if x[k] is not None]
    kind = r.choice(kinds)
    x = dict(x)
    c = dict(c)
    if kind == "shape":
        k = r.choice(present)
        x[k] = _bad_shape(x[k], r, rank=k not in ("B", "C"))
        if k == "u":  # u changed alone: delta no longer matches it either
            return x, c, ["u", "delta"]
        if k == "A":  # A's N is the problem's N: B, C or h0 may be the ones named
            return x, c, ["A", "B", "C", "h0"]
        if k in ("B", "C"):
            return x, c, ["B", "C"]
        return x, c, [k]
    if kind == "dtype":
        k = r.choice(present)
        dt = _other_dtype_bad(r)
        if raw:
            dt = r.choice([dt, F64, F16 if x[k].dtype != F16 else BF16])
        if k == "u":
            dt = r.choice([dt, F64])
        x[k] = x[k].to(dt) if dt != torch.bool else (x[k] > 0)
        return x, c, [k]
    k = common_bad(kind, x, present, r, gen)
    if k is not None:
        return x, c, [k]
    if kind == "groups":
        if c["batch"] == 0 or c["L"] == 0 or c["dim"] < 2:
            return None
        b, d, L, N = c["batch"], c["dim"], c["L"], c["N"]
        G = next((g for g in (3, 4, 5, 7) if d % g), None)
        dt = x["u"].dtype
        if r.random() < 0.5 and G:
            x["B"] = gen.layout(gen.randn(b, G, N, L, dtype=dt))
            x["C"] = gen.layout(gen.randn(b, G, N, L, dtype=dt))
            return x, c, ["B", "C"]
        x["B"] = gen.layout(gen.randn(b, 2, N, L, dtype=dt))
        x["C"] = gen.layout(gen.randn(b, 1, N, L, dtype=dt))
        return x, c, ["B", "C"]
    if kind == "transpose":
        if c["dim"] == c["L"] or c["dim"] == 0 or c["L"] == 0:
            return None
        x["u"] = x["u"].transpose(1, 2)
        return x, c, ["u"]
    if kind == "cu":
        L = c["L"]
        bad = r.choice(["neg", "dec", "first", "last", "float", "floatlist", "bool", "2d", "one", "meta", "str",
                        "huge", "batch"])
        c["batch_for_cu"] = True
        if bad == "batch":
            if c["batch"] < 2:
                return None
            c["cu"] = [0, c["L"]]
            x["h0"] = None
            return x, c, ["cu_seqlens"]
        if c["batch"] != 1:
            return None
        x["h0"] = None
        cu = {"neg": [0, -7, L] if L else [3, -7, 2], "dec": [0, L + 2, L], "first": [1, L] if L != 1 else [2, L],
              "last": [0, L + 1], "float": torch.tensor([0.0, L / 2, float(L)]), "floatlist": [0, 1.5, L],
              "bool": torch.tensor([0, 1]).bool(), "2d": torch.tensor([[0, L]]), "one": [0],
              "meta": torch.tensor([0, L], device="meta"), "str": "0,1", "huge": [0, 2**70]}[bad]
        if raw and not isinstance(cu, torch.Tensor):
            if bad in ("floatlist", "str", "huge"):
                return None
            cu = torch.tensor(cu, dtype=torch.int64)
        c["cu"] = cu
        return x, c, ["cu_seqlens"]
    if kind == "h0rows":
        if x["h0"] is None:
            rows = len(c["cu"]) - 1 if isinstance(c["cu"], list) else c["batch"]
            x["h0"] = gen.layout(gen.randn(rows + 1, c["dim"], c["N"]))
        else:
            x["h0"] = _bad_shape(x["h0"], r)
        return x, c, ["h0"]
    if kind == "N0":
        if c["batch"] == 0 or c["dim"] == 0 or c["L"] == 0:
            return None
        x["A"] = x["A"][:, :0]
        # B, C, h0 no longer match N either
        return x, c, ["A", "B", "C", "h0"]
    return None


def first_mutation(attempt, tries=50):
    """attempt() until it returns a mutation (None: the kind it drew does not apply to the case), at
    most `tries` times; None when none did."""
    for _ in range(tries):
        m = attempt()
        if m is not None:
            return m
    return None


def case_scan_bad(gen):
    r = gen.rng

    def attempt():
        c = scan_cfg(r, zero_ok=r.random() < 0.2, distinct=True)
        return mutate_scan(scan_inputs(c, gen), c, gen)

    x, c, names = first_mutation(attempt)
    args = list(x.values()) + ([c["cu"]] if isinstance(c["cu"], torch.Tensor) else [])
    expect_refusal(lambda: call_scan(x, c), args, names)


# ---- the decode step ------------------------------------------------------------------------------


def step_cfg(rng, zero_ok=True, distinct=False):
    c = dict(dtype=rng.choice([F32, F32, BF16, F16]), heads=rng.random() < 0.3)
    if c["heads"]:
        c["G"] = rng.choice([1, 2])
        c.update(nh=c["G"] * rng.randint(1, 2), hd=rng.randint(1, 3))
        c["dim"] = c["nh"] * c["hd"]
        # as Mamba-2 calls it (mamba_ssm, transformers): A, D, dt_bias one value a head and dt one a (row, head),
        # each expand()ed over headdim (and dstate); A sometimes as A_log (A_is_log=True)
        c["m2"] = rng.random() < 0.5
        c["alog"] = c["m2"] and rng.random() < 0.4
    else:
        c["G"] = rng.choice([1, 1, 2, 3])
        c["dim"] = c["G"] * rng.randint(1, 3)
    c.update(batch=rng.randint(1, 4), N=rng.randint(1, 5))
    if not c["heads"] and rng.random() < 0.05:  # wider: more than one 256-channel block, larger N
        c.update(dim=c["G"] * rng.randint(90, 200), N=rng.randint(6, 24))
    if distinct:
        c["N"] = rng.choice([5, 7])
        c["batch"] = rng.choice([2, 3])
    if zero_ok and rng.random() < 0.1:
        c["batch"] = 0
    for k in ("D", "z", "bias", "softplus"):
        c[k] = rng.random() < 0.5
    c["Bform"] = "2d" if (c["G"] == 1 and rng.random() < 0.5) else "3d"
    c["idx"] = rng.random() < 0.4
    c["n_cache"] = c["batch"] + (rng.randint(0, 3) if c["idx"] else 0)
    return c


def step_inputs(c, gen, nonfinite=False):
    r = gen.rng
    b, d, N, G, dt = c["batch"], c["dim"], c["N"], c["G"], c["dtype"]
    if c["heads"]:
        xs, As, Ds = (b, c["nh"], c["hd"]), (c["nh"], c["hd"], N), (c["nh"], c["hd"])
        ss = (c["n_cache"], c["nh"], c["hd"], N)
    else:
        xs, As, Ds, ss = (b, d), (d, N), (d,), (c["n_cache"], d, N)
    x = {}
    # the state in float32, or in x's dtype (a float16 / bfloat16 model's cache: stepped in place)
    sdt = dt if dt != F32 and r.random() < 0.3 else F32
    state = gen.randn(*ss, dtype=sdt)
    if c["heads"] and r.random() < 0.5:  # (nheads, hdim) mergeable: slice N / rows of a larger buffer
        big = torch.full((ss[0] * 2, ss[1], ss[2], N + r.randint(0, 3)), float("nan"), dtype=sdt).to(gen.device)
        view = big[::2, :, :, :N] if r.random() < 0.5 else big[: ss[0], :, :, :N]
        view.copy_(state.to(gen.device))
        x["state"] = view
    elif c["heads"]:
        x["state"] = state.to(gen.device)
    else:
        x["state"] = gen.layout(state)
    x["x"] = gen.broadcastable(xs, lambda s: gen.randn(*s, dtype=dt))
    if c["softplus"]:
        x["dt"] = gen.broadcastable(xs, lambda s: gen.randn(*s, scale=0.5, dtype=dt))
    else:
        x["dt"] = gen.broadcastable(xs, lambda s: gen.rand(*s, lo=0.01, hi=0.6, dtype=dt))
    if r.random() < 0.1 and sdt == dt:  # x and dt in the gaps of the state's memory (interleaved, none shared)
        ss = tuple(x["state"].shape)
        buf = torch.full(ss[:-1] + (N + 2,), float("nan"), dtype=sdt, device=gen.device)
        buf[..., :N].copy_(x["state"])
        buf[:b, ..., N].copy_(x["x"])
        buf[:b, ..., N + 1].copy_(x["dt"])
        x["state"], x["x"], x["dt"] = buf[..., :N], buf[:b, ..., N], buf[:b, ..., N + 1]
    x["A"] = gen.broadcastable(As, lambda s: gen.rand(*s, lo=-1.3, hi=-0.3))
    m2 = c["heads"] and c.get("m2")
    if m2:
        nh, hd = c["nh"], c["hd"]
        a = gen.randn(nh, scale=0.3) if c.get("alog") else gen.rand(nh, lo=-1.3, hi=-0.3)  # A_log or A
        x["A"] = a.to(gen.device)[:, None, None].expand(nh, hd, N)
        if c["softplus"]:
            per = gen.randn(b, nh, scale=0.5, dtype=dt)
        else:
            per = gen.rand(b, nh, lo=0.01, hi=0.6, dtype=dt)
        x["dt"] = per.to(gen.device)[:, :, None].expand(b, nh, hd)
    bs = (b, N) if c["Bform"] == "2d" else (b, G, N)
    x["B"] = gen.broadcastable(bs, lambda s: gen.randn(*s, dtype=dt))
    x["C"] = gen.broadcastable(bs, lambda s: gen.randn(*s, dtype=dt))
    x["D"] = gen.broadcastable(Ds, lambda s: gen.randn(*s)) if c["D"] else None
    if m2 and c["D"]:  # (transformers: the model's dtype)
        x["D"] = gen.randn(c["nh"], dtype=r.choice([F32, dt])).to(gen.device)[:, None].expand(Ds)
    x["z"] = gen.broadcastable(xs, lambda s: gen.randn(*s, dtype=dt)) if c["z"] else None
    if c["softplus"]:
        x["dt_bias"] = gen.broadcastable(Ds, lambda s: gen.randn(*s, scale=0.3)) if c["bias"] else None
    else:
        x["dt_bias"] = gen.broadcastable(Ds, lambda s: gen.rand(*s, hi=0.3)) if c["bias"] else None
    if m2 and c["bias"]:
        bias = gen.randn(c["nh"], scale=0.3) if c["softplus"] else gen.rand(c["nh"], hi=0.3)
        x["dt_bias"] = bias.to(r.choice([F32, dt])).to(gen.device)[:, None].expand(Ds)
    x["state_batch_indices"] = None
    if c["idx"]:
        rows = list(range(c["n_cache"]))
        r.shuffle(rows)
        idx = rows[: c["batch"]]
        for i in range(len(idx)):
            if r.random() < 0.25:
                idx[i] = r.choice([-1, -5, -(2**31), -(2**63)])
        dt_i = r.choice([torch.int64, torch.int64, torch.int32, torch.int16])
        if dt_i == torch.int32:
            idx = [max(v, -(2**31)) for v in idx]
        if dt_i == torch.int16:
            idx = [max(v, -(2**15)) for v in idx]
        x["state_batch_indices"] = torch.tensor(idx, dtype=dt_i).to(gen.device)
    if r.random() < 0.15:  # documented casts
        k = r.choice(["A", "D", "dt_bias"])
        if x[k] is not None:
            x[k] = x[k].to(r.choice([F64, F16]))
    if r.random() < 0.15:
        k = r.choice(["dt", "z", "B", "C"])
        if x[k] is not None:
            x[k] = x[k].to(r.choice([t for t in (F32, F16, BF16, F64) if t != dt]))
    if nonfinite and x["x"].numel() and x["x"].stride().count(0) == 0:
        with torch.no_grad():
            x["x"][tuple(r.randrange(s) for s in x["x"].shape)] = float("nan")
    return x


STEP_NAMES = ["state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias"]


def call_step(x, c):
    kw = dict(A_is_log=True) if alog(c) else {}
    return st.selective_state_update(x["state"], x["x"], x["dt"], x["A"], x["B"], x["C"], x["D"], x["z"],
                                     x["dt_bias"], c["softplus"], state_batch_indices=x["state_batch_indices"], **kw)


def alog(c):
    """A given as Mamba's A_log (the multi-head step's Mamba-2 form only: raw-step and the module turn heads off)."""
    return c["heads"] and c.get("alog", False)


def ref_step(x, c):
    dt = x["x"].dtype
    cv = lambda t, d: None if t is None else t.to(d).cpu()  # noqa: E731
    B, C = cv(x["B"], dt), cv(x["C"], dt)
    idx = x["state_batch_indices"]
    if idx is not None:
        idx = idx.cpu().long()
        idx = torch.where(idx >= c["n_cache"], torch.full_like(idx, -1), idx)  # CUDA: out of range = padding
    A = cv(x["A"], F32)
    if alog(c):  # A = -exp(A_log), A_log used in float32
        A = -torch.exp(A.double())
    return selective_state_update_ref(x["state"].cpu(), x["x"].cpu(), cv(x["dt"], dt), A, B, C,
                                      cv(x["D"], F32), cv(x["z"], dt), cv(x["dt_bias"], F32), c["softplus"], idx)


def state_mask(state):
    """Elements (positions of state's dtype) of state's storage that state covers."""
    n = state.untyped_storage().nbytes() // state.element_size()
    m = torch.zeros(n, dtype=torch.bool, device=state.device)
    m.as_strided(state.shape, state.stride(), state.storage_offset()).fill_(True)
    return m


def check_step_call(x, c, call):
    ref_out, ref_state = ref_step(x, c)
    state = x["state"]
    ints = torch.int32 if state.element_size() == 4 else torch.int16  # the storage as state's elements
    before = storage_snapshot(state).view(ints)
    snap = Snap([v for k, v in x.items() if k != "state"], around=state)
    out = call()
    if snap.changed():
        raise CaseFail("an input other than state changed")
    xx = x["x"]
    if out.dtype != xx.dtype or tuple(out.shape) != tuple(xx.shape) or out.device != xx.device:
        raise CaseFail(f"out: {out.dtype} {tuple(out.shape)}, want x's dtype and shape")
    close("out", out, ref_out, tol_of(TOL32, out.dtype))
    if state.dtype != F32 and state.dtype != xx.dtype:
        raise CaseFail(f"state's dtype changed to {state.dtype}")
    close("state", state, ref_state, tol_of(STOL, state.dtype))
    after = storage_snapshot(state).view(ints)
    m = state_mask(state)
    if not torch.equal(after[~m], before[~m]):
        raise CaseFail("bytes outside the state view were written")


def case_step_good(gen):
    r = gen.rng
    c = step_cfg(r)
    x = step_inputs(c, gen, nonfinite=r.random() < 0.1)
    grad_off = r.random() < 0.5
    if grad_off:
        with torch.no_grad():
            check_step_call(x, c, lambda: call_step(x, c))
    else:
        check_step_call(x, c, lambda: call_step(x, c))


STEP_KINDS = ["expand", "expand", "alias", "alias-copy", "alias-copy", "statedtype", "staterank", "rank", "rank", "idx",
              "idx", "complex", "dtype", "shape", "shape", "grad", "device", "nontensor", "perm4"]
STEP_META_KINDS = ["expand", "statedtype", "staterank", "rank", "idx", "complex", "dtype", "shape", "shape",
                   "nontensor", "perm4"]
IDX_KINDS = ["hi", "hi", "2^31", "2^32+1", "float", "bool", "complex", "len", "2d", "dup", "list", "int64raw"]
IDX_META_KINDS = ["float", "bool", "complex", "len", "2d", "list", "int64raw"]


class Names(list):
    """The names a refusal may use; about: those its subject must be one of (None: any)."""

    def __init__(self, names, about=None):
        super().__init__(names)
        self.about = about


def rank_changed(t, r):
    """t with a rank added or dropped: 0-d, a dim added anywhere, one dropped, two merged."""
    opts = [t.new_zeros(()), t.unsqueeze(r.randint(0, t.dim()))]
    if t.dim() >= 1 and 0 not in t.shape:
        opts.append(t.select(r.randrange(t.dim()), 0))
    if t.dim() >= 2:
        i = r.randrange(t.dim() - 1)
        opts.append(t.flatten(i, i + 1))
    return r.choice(opts)


def state_view_like(st_, want, c, r):
    """A view of the state's memory with want's shape (an input aliasing the state), or None."""
    b, N = c["batch"], c["N"]
    j = r.randrange(N)
    if want.dim() == st_.dim() - 1 and tuple(want.shape[1:]) == tuple(st_.shape[1:-1]) and want.shape[0] <= st_.shape[0]:
        return st_[: want.shape[0], ..., j]  # x / dt / z: (batch, dim) or (batch, nheads, hdim)
    if tuple(want.shape) == tuple(st_.shape[1:]):
        return st_[0]  # A
    if tuple(want.shape) == tuple(st_.shape[1:-1]):
        return st_[0, ..., j]  # D / dt_bias
    if want.dim() in (2, 3) and want.shape[-1] == N and want.shape[0] <= st_.shape[0]:  # B / C
        rows = slice(0, want.shape[0])
        if want.dim() == 2:
            return st_[(rows,) + (0,) * (st_.dim() - 2) + (slice(None),)]
        if want.shape[1] <= st_.shape[1]:
            return st_[(rows, slice(0, want.shape[1])) + (0,) * (st_.dim() - 3) + (slice(None),)]
    return None


def mutate_step(x, c, gen, raw=False, kinds=STEP_KINDS, idx_kinds=IDX_KINDS):
    """One bad input for selective_state_update (raw: the op); returns (x, expected names), or
    None when the mutation drawn does not apply."""
    r = gen.rng
    x = dict(x)
    present = [k for k in STEP_NAMES if x[k] is not None]
    kind = r.choice(kinds)
    b, N = c["batch"], c["N"]
    if kind == "expand":
        ss = tuple(x["state"].shape)
        if all(s <= 1 for s in ss) or 0 in ss:
            return None
        base = torch.zeros(int(torch.tensor(ss).prod()) * 2 + 64, device=x["state"].device)
        small = [s if r.random() < 0.5 else 1 for s in ss]
        if small == list(ss):
            small = [1] * len(ss)
        n = int(torch.tensor(small).prod())
        x["state"] = base[8: 8 + n].view(small).expand(*ss)
        if not any(sz > 1 and stv == 0 for sz, stv in zip(x["state"].shape, x["state"].stride())):
            return None
        return x, ["state"]
    if kind == "alias":
        if c["heads"] or b == 0 or x["x"].dtype != F32:
            return None
        st_ = x["state"]
        if tuple(st_.shape[:2]) != tuple(x["x"].shape):
            return None
        k = r.choice(["x", "dt", "z", "B", "D", "dt_bias"])
        if k in ("x", "dt", "z"):
            if k != "x" and x[k] is None:
                return None
            x[k] = st_[:, :, r.randrange(N)][: b]
            if x[k].dtype != x["x"].dtype:
                return None
        elif k == "B":
            if c["Bform"] != "2d" or x["B"].dtype != F32:
                return None
            x["B"] = st_[:b, 0, :]
        else:
            if x[k] is None:
                return None
            x[k] = st_[0, :, 0]
        return x, ["state", k]
    if kind == "statedtype":  # neither float32 nor x's dtype
        x["state"] = x["state"].to(r.choice([t for t in (F64, F16, BF16, torch.int32, torch.complex64) if t != x["x"].dtype]))
        return x, ["state"]
    if kind == "alias-copy":  # an input aliasing the state that reaches the op as a copy (issue 38)
        st_ = x["state"]
        if b == 0 or st_.numel() == 0:
            return None
        how = r.choice(["bcast", "idx"] if raw else ["bcast", "bcast", "cast", "fold", "idx"])
        if how == "bcast":  # a full broadcast of one of the state's elements: the op makes it dense
            k = r.choice([k for k in present if k != "state"])
            if st_.dtype != x[k].dtype and (raw or k == "x"):  # (the wrapper casts the others)
                return None
            x[k] = st_[tuple(r.randrange(s) for s in st_.shape)].expand(x[k].shape)
            return x, Names(["state", k], about=["state", k])
        if how == "cast":  # a view of the state in another dtype than the wrapper wants: cast
            k = r.choice([k for k in present if k not in ("state", "x", "D", "dt_bias")])
            want = F32 if k == "A" else x["x"].dtype
            if st_.dtype == want:
                return None
            v = state_view_like(st_, x[k], c, r)
            if v is None:
                return None
            x[k] = v
            return x, Names(["state", k], about=["state", k])
        if how == "fold":  # multi-head: a view of the state whose (nheads, hdim) dims do not merge
            k = r.choice([k for k in present if k in ("x", "dt", "z", "D", "dt_bias")])
            nh, hd = c.get("nh", 0), c.get("hd", 0)
            if not c["heads"] or N < hd or (k == "x" and st_.dtype != x["x"].dtype):
                return None
            x[k] = st_[:b, :, 0, :hd] if k in ("x", "dt", "z") else st_[0, :, 0, :hd]
            return x, Names(["state", k], about=["state", k])
        # int32 row indices in the state's own memory, every other int32 (strided: the op copies them)
        if not c["idx"] or st_.dtype != F32 or not st_.is_contiguous() or 2 * b > st_.numel():
            return None
        ints = st_.view(-1).view(torch.int32)
        ints[0: 2 * b: 2] = torch.arange(b, dtype=torch.int32, device=st_.device)
        x["state_batch_indices"] = ints[0: 2 * b: 2]  # (one entry: no copy; selscan's own check)
        return x, Names(["state", "state_batch_indices"], about=["state", "state_batch_indices"])
    if kind == "staterank":
        x["state"] = r.choice([x["state"].sum(-1), x["state"].unsqueeze(0), x["state"].new_zeros(())])
        # a 3-D state among Mamba-2's shapes (x, A), a 4-D one among single-head ones: the state is named
        return x, Names(["state"], about=["state"])
    if kind == "rank":  # any argument with a rank added or dropped: that argument is named
        k = r.choice(present)
        t = rank_changed(x[k], r)
        if k in ("B", "C") and t.dim() in (2, 3):
            return None  # (batch, N) and (batch, ngroups, N) are both B / C forms
        x[k] = t
        bc = ["B", "C"] if k in ("B", "C") else [k]
        return x, Names(bc, about=bc)
    if kind == "idx":
        nc = c["n_cache"]
        cuda = x["x"].device.type == "cuda"
        bad = r.choice(idx_kinds)
        if cuda and bad in ("hi", "2^31", "2^32+1", "dup"):
            return None  # on CUDA an out-of-range row is padding and rows are not checked for repeats
        if b == 0 and bad == "dup":
            return None
        vals = list(range(b))
        dev = x["x"].device
        t = {"hi": lambda: torch.tensor([nc] + vals[1:]) if b else None,
             "2^31": lambda: torch.tensor([2**31] + vals[1:]) if b else None,
             "2^32+1": lambda: torch.tensor([2**32 + 1] + vals[1:]) if b else None,
             "float": lambda: torch.tensor(vals, dtype=F32) + 0.7,
             "bool": lambda: torch.ones(b, dtype=torch.bool),
             "complex": lambda: torch.tensor(vals, dtype=torch.complex64),
             "len": lambda: torch.tensor(vals + [0]),
             "2d": lambda: torch.tensor([vals]),
             "dup": lambda: torch.tensor([0] * b) if b > 1 else None,
             "list": lambda: vals,
             "int64raw": lambda: torch.tensor(vals, dtype=torch.int64) if raw else None}[bad]()
        if t is None:
            return None
        if raw and isinstance(t, torch.Tensor) and bad in ("hi", "2^31", "2^32+1", "dup"):
            if bad in ("2^31", "2^32+1"):
                return None  # the raw op takes int32 only
            t = t.to(torch.int32)
        x["state_batch_indices"] = t.to(dev) if isinstance(t, torch.Tensor) else t
        if bad in ("hi", "dup") and not x["state"].dim() in (3, 4):
            return None
        return x, ["state_batch_indices", "state_index"]
    if kind == "complex":
        k = r.choice([k for k in present if k != "state"])
        x[k] = torch.complex(x[k].float(), x[k].float())
        return x, [k]
    if kind == "dtype":
        k = r.choice([k for k in present if k != "state"])
        dt = _other_dtype_bad(r)
        if raw:
            dt = r.choice([dt, F64])
        x[k] = x[k].to(dt) if dt != torch.bool else (x[k] > 0)
        return x, [k]
    if kind == "shape":
        k = r.choice([k for k in present if k != "state"])
        x[k] = _bad_shape(x[k], r, rank=k not in ("B", "C"))
        if k == "A":
            return x, ["A", "state"]  # A's dim / N against state's: either may be named
        if k == "x":
            return x, ["x", "dt", "z", "state"]
        if k in ("B", "C"):
            return x, ["B", "C"]
        return x, [k]
    if kind == "grad":
        k = r.choice(present)
        if not x[k].is_floating_point():
            return None
        x[k] = x[k].detach().clone().requires_grad_(True)
        c["grad"] = True
        return x, [k]
    if kind == "device":
        k = r.choice(present)
        other = "meta" if (gen.device == "cpu" or r.random() < 0.5) else "cpu"
        x[k] = x[k].to(other)
        return x, [k]
    if kind == "nontensor":
        k = r.choice(present)
        x[k] = r.choice([1.0, [1.0], "state", None if k in ("x", "dt", "state", "A", "B", "C") else 2])
        if x[k] is None:
            return None
        return x, [k]
    if kind == "perm4":
        if not c["heads"] or c["nh"] < 2 or c["hd"] < 2 or N < 2 or x["state"].numel() == 0:
            return None
        s4 = x["state"]
        x["state"] = s4.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # hdim outside nheads
        return x, ["state"]
    return None


def case_step_bad(gen):
    r = gen.rng

    def attempt():
        c = step_cfg(r, zero_ok=r.random() < 0.1, distinct=True)
        m = mutate_step(step_inputs(c, gen), c, gen)
        return None if m is None else (c, m)

    c, (x, names) = first_mutation(attempt)
    expect_refusal(lambda: call_step(x, c), list(x.values()), names)


# ---- the module ---------------------------------------------------------------------------------------


def case_module(gen):
    r = gen.rng
    dim, N = r.randint(1, 6), r.randint(1, 4)
    m = st.SelectiveScan(dim, N).to(gen.device)
    with torch.no_grad():
        m.A_log.add_(gen.randn(dim, N, scale=0.1).to(gen.device))
        m.D.copy_(gen.randn(dim).to(gen.device))
    if r.random() < 0.6:  # forward
        c = scan_cfg(r, zero_ok=True)
        c.update(dim=dim, N=N, softplus=True, D=True, bias=True, bc=r.choice(["var3", "grouped"]))
        c["G"] = 1 if c["bc"] == "var3" else next(g for g in (2, 1) if dim % g == 0)
        x = scan_inputs(c, gen)
        x["A"], x["D"], x["delta_bias"] = m.A().detach(), m.D.detach(), m.dt_bias.detach()
        if r.random() < 0.3:
            bad = r.choice(["u", "delta", "B", "C", "z"])
            t = x[bad] if x[bad] is not None else x["u"]
            x[bad] = _bad_shape(t, r, rank=bad not in ("B", "C"))
            names = [bad, "u", "delta"] if bad == "u" else ([bad] if bad not in ("B", "C") else ["B", "C"])
            expect_refusal(lambda: m(x["u"], x["delta"], x["B"], x["C"], z=x["z"], h0=x["h0"],
                                     return_last_state=c["last"], cu_seqlens=c["cu"]), list(x.values()), names)
            return
        out = m(x["u"], x["delta"], x["B"], x["C"], z=x["z"], h0=x["h0"], return_last_state=c["last"],
                cu_seqlens=c["cu"])
        check_scan_result(out, x, c)
        return
    c = step_cfg(r)
    c.update(heads=False, dim=dim, N=N, G=1, softplus=True, D=True, bias=True, Bform="2d")
    x = step_inputs(c, gen)
    x["A"], x["D"], x["dt_bias"] = m.A().detach(), m.D.detach(), m.dt_bias.detach()

    def call():
        return m.step(x["state"], x["x"], x["dt"], x["B"], x["C"], z=x["z"],
                      state_batch_indices=x["state_batch_indices"])

    if r.random() < 0.3:
        x2 = dict(x, x=x["x"].detach().clone().requires_grad_(True))
        expect_refusal(lambda: m.step(x2["state"], x2["x"], x2["dt"], x2["B"], x2["C"], z=x2["z"],
                                      state_batch_indices=x2["state_batch_indices"]), list(x2.values()), ["x"])
        return
    check_step_call(x, c, call)
    if call().requires_grad:
        raise CaseFail("the module's step returned an output claiming requires_grad")


# ---- the raw ops ----------------------------------------------------------------------------------------


def raw_scan_args(x, c, cu=None):
    return (x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"], x["h0"], cu)


def exact_dtypes(x):
    """The raw op casts nothing: inputs in the dtypes it takes."""
    return cast_like_wrapper(x, x["u"].dtype)


def case_raw_fwd(gen):
    r = gen.rng
    c = scan_cfg(r)
    x = exact_dtypes(scan_inputs(c, gen))
    cu = None if c["cu"] is None else torch.tensor(c["cu"], dtype=torch.int64)
    if r.random() < 0.5:
        snap = Snap(list(x.values()) + [cu])
        y, last, ck = ops.fwd(*raw_scan_args(x, c, cu), c["softplus"], c["last"], r.random() < 0.5)
        if snap.changed():
            raise CaseFail("an input changed")
        check_scan_result((y, last) if c["last"] else y, x, c)
        if not c["last"] and tuple(last.shape) != (0,):
            raise CaseFail("last_state placeholder not (0,)")
        return
    def attempt():  # this case first, then others
        nonlocal c, x
        m = mutate_scan(x, dict(c, cu=c["cu"]), gen, raw=True)
        if m is None:
            c = scan_cfg(r, distinct=True)
            x = exact_dtypes(scan_inputs(c, gen))
        return m

    x2, c2, names = first_mutation(attempt)
    cu2 = c2["cu"]
    if isinstance(cu2, list):
        cu2 = torch.tensor(cu2, dtype=torch.int64)
    expect_refusal(lambda: ops.fwd(*raw_scan_args(x2, c2, cu2), c2["softplus"], c2["last"], False),
                   list(x2.values()) + [cu2], names)


GRAD_NAMES = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"]


def ref_grads(x, c, dy, dlast):
    """float64 reference gradients of sum(out * dy) + sum(last * dlast)."""
    leaves = {k: (None if v is None else v.detach().cpu().double().requires_grad_(True)) for k, v in x.items()}
    y, last = selective_scan_ref(leaves["u"], leaves["delta"], leaves["A"], leaves["B"], leaves["C"], leaves["D"],
                                 leaves["z"], leaves["delta_bias"], c["softplus"], True, c["cu"], leaves["h0"])
    loss = (y * dy.cpu().double()).sum()
    if dlast is not None:
        loss = loss + (last * dlast.cpu().double()).sum()
    ins = [leaves[k] for k in GRAD_NAMES if leaves[k] is not None]
    gs = torch.autograd.grad(loss, ins, allow_unused=True) if ins and loss.requires_grad else [None] * len(ins)
    out, it = {}, iter(gs)
    for k in GRAD_NAMES:
        if leaves[k] is not None:
            g = next(it)
            out[k] = torch.zeros_like(leaves[k]) if g is None else g
    return out


def case_raw_bwd(gen):
    r = gen.rng
    c = scan_cfg(r)
    c["last"] = True
    x = exact_dtypes(scan_inputs(c, gen))
    cu = None if c["cu"] is None else torch.tensor(c["cu"], dtype=torch.int64)
    y, last, ck = ops.fwd(*raw_scan_args(x, c, cu), c["softplus"], True, r.random() < 0.7)
    dy = gen.layout(gen.randn(*y.shape, dtype=y.dtype))
    dlast = gen.layout(gen.randn(*last.shape)) if r.random() < 0.5 else None
    mask = [int(r.random() < 0.7) for _ in range(9)]
    args = raw_scan_args(x, c, cu) + (dy, dlast, ck, c["softplus"], mask)
    if r.random() < 0.5:
        snap = Snap(list(args))
        g = ops.bwd(*args)
        if snap.changed():
            raise CaseFail("an input changed")
        ref = ref_grads(x, c, dy, dlast)
        for i, k in enumerate(GRAD_NAMES):
            want = mask[i] and x[k] is not None
            if not want:
                if g[i].numel() != 0:
                    raise CaseFail(f"d{k}: a placeholder expected (not asked for)")
                continue
            if g[i].dtype != x[k].dtype or tuple(g[i].shape) != tuple(x[k].shape):
                raise CaseFail(f"d{k}: {g[i].dtype} {tuple(g[i].shape)}, want {k}'s dtype and shape")
            close(f"d{k}", g[i], ref[k], tol_of(GTOL32, g[i].dtype))  # exact_dtypes: x[k]'s dtype is the op's
        return
    # bad: the bwd's own arguments, or one of the scan's
    kind = r.choice(["dy", "dy", "dh_last", "checkpoint", "grad_mask", "scan"])
    a = list(args)
    if kind == "dy":
        a[10] = r.choice([_bad_shape(dy, r), dy.to(F64 if dy.dtype != F64 else F32),
                          dy.to("meta" if gen.device == "cpu" else "cpu"), 1.0])
        names = ["dy"]
    elif kind == "dh_last":
        a[11] = r.choice([_bad_shape(last, r), last.to(F64), last.to("meta" if gen.device == "cpu" else "cpu")])
        names = ["dh_last"]
    elif kind == "checkpoint":  # not float32, or on another device than u (a meta one: the fake kernel)
        other = "meta" if (gen.device == "cpu" or r.random() < 0.5) else "cpu"
        a[12] = r.choice([torch.zeros(5, dtype=torch.int32, device=ck.device), ck.to(other)])
        names = ["checkpoint"]
    elif kind == "grad_mask":
        a[14] = mask[: r.randint(0, 8)]
        names = ["grad_mask"]
    else:
        m = mutate_scan(x, c, gen, raw=True)
        if m is None:
            a[14] = mask + [1]
            names = ["grad_mask"]
        else:
            x2, c2, names = m
            if "cu_seqlens" in names:  # the state rows change: dh_last no longer fits
                names = names + ["dh_last"]
            cu2 = c2["cu"]
            if isinstance(cu2, list):
                cu2 = torch.tensor(cu2, dtype=torch.int64)
            a[:10] = raw_scan_args(x2, c2, cu2)
    expect_refusal(lambda: ops.bwd(*a), a, names)


def case_raw_step(gen):
    r = gen.rng
    c = step_cfg(r)
    c["heads"] = False
    c2 = step_cfg(r)
    c.update(dim=c2["G"] * r.randint(1, 3), G=c2["G"], Bform="3d" if c2["G"] > 1 else r.choice(["2d", "3d"]))
    x = step_inputs(c, gen)
    dt = x["x"].dtype
    for k in ("dt", "z", "B", "C"):
        if x[k] is not None:
            x[k] = x[k].to(dt)
    for k in ("A", "D", "dt_bias"):
        if x[k] is not None:
            x[k] = x[k].to(F32)
    if x["state_batch_indices"] is not None:
        x["state_batch_indices"] = x["state_batch_indices"].clamp(min=-1).to(torch.int32)

    def call(y):
        return ops.step(y["state"], y["x"], y["dt"], y["A"], y["B"], y["C"], y["D"], y["z"], y["dt_bias"],
                        y["state_batch_indices"], c["softplus"])

    if r.random() < 0.5:
        with torch.no_grad():
            check_step_call(x, c, lambda: call(x))
        return
    x2, names = first_mutation(lambda: mutate_step(x, c, gen, raw=True))
    if c.get("grad"):
        expect_refusal(lambda: call(x2), list(x2.values()), names)
    else:
        with torch.no_grad():
            expect_refusal(lambda: call(x2), list(x2.values()), names)


# ---- meta ------------------------------------------------------------------------------------------------


def to_meta(v):
    """v on meta with its sizes, strides and dtype (.to("meta") would make an expanded view dense)."""
    if not isinstance(v, torch.Tensor):
        return v
    return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta").requires_grad_(v.requires_grad)


def case_meta(gen):
    r = gen.rng
    kind = r.choice(["scan-good", "scan-bad", "step-good", "step-bad", "mixed-scan", "mixed-step"])
    if kind in ("scan-good", "scan-bad", "mixed-scan"):
        c = scan_cfg(r, distinct=kind != "scan-good")
        x = scan_inputs(c, gen)
        if kind == "mixed-scan":
            k = r.choice([k for k in SCAN_NAMES if x[k] is not None])
            x[k] = x[k].to("meta")
            expect_refusal(lambda: call_scan(x, c), list(x.values()), [k])
            return
        if kind == "scan-good":
            real = call_scan(x, c)
            fake = call_scan({k: to_meta(v) for k, v in x.items()}, c)
            real, fake = (real, fake) if c["last"] else ((real,), (fake,))
            for a, b in zip(real, fake):
                if b.device.type != "meta" or a.shape != b.shape or a.dtype != b.dtype:
                    raise CaseFail(f"meta output {b.dtype} {tuple(b.shape)} {b.device}, real {a.dtype} "
                                   f"{tuple(a.shape)}")
            return
        # structural mutations only (values are not known on meta)
        x2, c2, names = first_mutation(lambda: mutate_scan(x, c, gen, kinds=SCAN_META_KINDS))
        expect_refusal(lambda: call_scan(x2, c2), list(x2.values()), names)
        expect_refusal(lambda: call_scan({k: to_meta(v) for k, v in x2.items()}, c2), [], names)
        return
    c = step_cfg(r, distinct=kind != "step-good")
    x = step_inputs(c, gen)
    if kind == "mixed-step":
        k = r.choice([k for k in STEP_NAMES if x[k] is not None])
        x[k] = x[k].to("meta")
        with torch.no_grad():
            expect_refusal(lambda: call_step(x, c), list(x.values()), [k])
        return
    if kind == "step-good":
        with torch.no_grad():
            real = call_step({k: (v.clone() if k == "state" else v) for k, v in x.items()}, c)
            fake = call_step({k: to_meta(v) for k, v in x.items()}, c)
        if fake.device.type != "meta" or fake.shape != real.shape or fake.dtype != real.dtype:
            raise CaseFail(f"meta step output {fake.dtype} {tuple(fake.shape)}, real {real.dtype} {tuple(real.shape)}")
        return
    x2, names = first_mutation(lambda: mutate_step(x, c, gen, kinds=STEP_META_KINDS, idx_kinds=IDX_META_KINDS))
    with torch.no_grad():
        expect_refusal(lambda: call_step(x2, c), list(x2.values()), names)
        expect_refusal(lambda: call_step({k: to_meta(v) for k, v in x2.items()}, c), [], names)


# ---- autograd --------------------------------------------------------------------------------------------


def case_autograd(gen):
    r = gen.rng
    c = scan_cfg(r)
    x = scan_inputs(c, gen)
    kind = r.choice(["grads", "grads", "grads", "double"])
    leaves = {}
    for k, v in x.items():
        if v is None:
            leaves[k] = None
            continue
        v = v.detach().clone()
        if v.stride().count(0):
            v = v.contiguous()
        leaves[k] = v.requires_grad_(r.random() < 0.7 or k == "u")
    out = call_scan(leaves, c)
    y, last = out if c["last"] else (out, None)
    if kind == "double":
        if y.numel() == 0 or c["N"] == 0:
            return
        g, = torch.autograd.grad((y.float() ** 2).sum(), leaves["u"], create_graph=True)
        expect_refusal(lambda: torch.autograd.grad(g.sum(), leaves["u"]), [], ["double backward"])
        return
    dy = gen.randn(*y.shape).to(y.device)
    loss = (y.float() * dy).sum()
    dlast = None
    if last is not None:
        dlast = gen.randn(*last.shape).to(last.device)
        loss = loss + (last * dlast).sum()
    loss.backward()
    # reference: the wrapper's casts are part of the graph (a float64 D gets a float64 gradient);
    # the gradient reaching out is dy in out's dtype
    ref = ref_grads(x, c, dy.to(y.dtype), dlast)
    op_dtypes = {k: v.dtype for k, v in cast_like_wrapper(x, x["u"].dtype).items() if v is not None}
    for k in GRAD_NAMES:
        v = leaves[k]
        if v is None or not v.requires_grad:
            continue
        if v.grad is None:
            if y.numel() and c["N"]:
                raise CaseFail(f"{k}.grad is None")
            continue
        if v.grad.dtype != v.dtype or v.grad.shape != v.shape:
            raise CaseFail(f"{k}.grad: {v.grad.dtype} {tuple(v.grad.shape)}")
        close(f"{k}.grad", v.grad, ref[k], tol_of(GTOL32, op_dtypes[k], v.dtype))  # the op's dtype, then the cast back


# ---- Mamba-2's SSD scan: mamba_chunk_scan_combined, the raw ssd_fwd / ssd_bwd ---------------------------

# the differentiable inputs in the ops' order (ssd_bwd's gradients)
SSD_NAMES = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]
SSD_T = ("dt", "B", "C", "z")  # the drop-in casts these to x's dtype
SSD_F32 = ("A", "D", "dt_bias", "initial_states")  # and these to float32
# each operand's axes: a size changed in one operand disagrees with every other operand showing that axis
SSD_AXES = {"x": ("b", "L", "H", "P"), "dt": ("b", "L", "H"), "A": ("H",), "B": ("b", "L", "G", "N"),
            "C": ("b", "L", "G", "N"), "z": ("b", "L", "H", "P"), "dt_bias": ("H",),
            "initial_states": ("rows", "H", "P", "N"), "seq_idx": ("b", "L")}


def ssd_axes(k, t):
    if k == "D":
        return ("H",) if t.dim() == 1 else ("H", "P")
    return SSD_AXES[k]


def ssd_cfg(rng, zero_ok=True, distinct=False):
    c = dict(dtype=rng.choice([F32, F32, F32, BF16, F16]))
    if distinct:  # sizes that cannot be confused with each other (bad inputs)
        c["G"] = rng.choice([1, 2])
        c.update(H=rng.choice([4, 8]), P=rng.choice([3, 5]), N=rng.choice([6, 7]), L=rng.choice([11, 13]),
                 b=rng.choice([1, 2]))
    elif rng.random() < 0.05:  # larger: several 64-step chunks (CUDA), wider heads, dstate past 32 / 64
        c["G"] = rng.choice([1, 2])
        c.update(H=c["G"] * rng.randint(1, 3), P=rng.randint(4, 20), N=rng.choice([rng.randint(6, 20), 40, 70]),
                 L=rng.randint(60, 150), b=rng.randint(1, 2))
    else:
        c["G"] = rng.choice([1, 1, 2, 3])
        c.update(H=c["G"] * rng.randint(1, 3), P=rng.randint(1, 4), N=rng.randint(1, 5), L=rng.randint(1, 20),
                 b=rng.randint(1, 3))
        if zero_ok and rng.random() < 0.12:  # (dstate 0: refused where there are steps, selscan's rule: SSD_KINDS)
            c[rng.choice(["b", "L", "H", "P"])] = 0
    c["D"] = rng.choice([None, "head", "headdim"])
    for k in ("z", "bias", "init", "softplus", "final"):
        c[k] = rng.random() < 0.5
    # dt_limit: mamba_ssm's default (0, inf) (a clamp at 0), no clamp (None), or a clamp on both sides
    lim = rng.choice(["default", "default", "none", "both", "lo", "hi"])
    c["limit"] = {"default": (0.0, float("inf")), "none": None, "both": (rng.uniform(0, 0.1), rng.uniform(0.3, 1.0)),
                  "lo": (rng.uniform(0.05, 0.3), float("inf")), "hi": (0.0, rng.uniform(0.2, 0.6))}[lim]
    c["limit_kw"] = lim != "default" or rng.random() < 0.5  # the default given explicitly, or left out
    c["chunk"] = rng.choice([None, 256, 64, 1, 8, 128])
    c["cu"], c["seq"], c["varlen"], c["init1"] = None, None, False, False
    p = rng.random()
    if p < 0.25:
        c["seq"] = rng.choice(["runs", "runs", "any", "wide"])
    elif p < 0.5:
        c["b"] = 1
        L = c["L"]
        n = rng.randint(1, 4)
        cuts = sorted(rng.randint(0, L) for _ in range(n - 1))
        if cuts and rng.random() < 0.3:  # an empty sequence (two equal offsets)
            cuts.append(rng.choice(cuts))
            cuts.sort()
        c["cu"] = [0] + cuts + [L]
        c["cu_form"] = rng.choice(["list", "tuple", "int64", "int32", "device", "strided"])
        c["varlen"] = rng.random() < 0.5
        if rng.random() < 0.3:
            c["seq"] = "match"  # mamba_ssm passes both: a seq_idx with cu_seqlens' boundaries
        if c["init"] and len(c["cu"]) > 2 and rng.random() < 0.3:
            c["init1"] = True  # mamba_ssm's (1, nheads, headdim, dstate): the first sequence's
    c["rows"] = len(c["cu"]) - 1 if c["cu"] is not None else c["b"]
    return c


def ssd_seq_idx(c, gen):
    """(batch, L) ids in an index dtype: runs (mamba_ssm's: 0 0 1 1 1 2 ...), any values (only neighbours'
    equality counts: 3 3 0 0 3 ...), runs 2**32 apart (int64), or cu_seqlens' boundaries."""
    r = gen.rng
    b, L, kind = c["b"], c["L"], c["seq"]
    if kind == "match":
        cu = c["cu"]
        ids = [next(s for s in range(len(cu) - 1) if cu[s] <= t < cu[s + 1]) for t in range(L)]
        base = r.choice([0, 3, 100])
        t = torch.tensor([[base + 7 * v for v in ids]], dtype=r.choice([torch.int32, torch.int64]))
    elif kind == "runs":
        t = torch.cumsum((gen.rand(b, L) < 0.2).to(torch.int64), 1)
        t = t.to(r.choice([torch.int32, torch.int32, torch.int64, torch.int16, torch.uint8, torch.int8]))
    elif kind == "any":
        t = (gen.rand(b, L) * 3).floor().to(r.choice([torch.int32, torch.int64, torch.uint8]))
    else:
        t = torch.cumsum((gen.rand(b, L) < 0.2).to(torch.int64), 1) * (2**32) - 2**40
    return gen.layout(t)


def ssd_inputs(c, gen, nonfinite=False):
    b, L, H, P, G, N, dt = c["b"], c["L"], c["H"], c["P"], c["G"], c["N"], c["dtype"]
    r = gen.rng
    x = {}
    x["x"] = gen.broadcastable((b, L, H, P), lambda s: gen.randn(*s, dtype=dt))
    if c["softplus"]:
        x["dt"] = gen.broadcastable((b, L, H), lambda s: gen.randn(*s, scale=0.5, dtype=dt))
    else:  # without softplus dt + dt_bias stays positive (a negative step grows the state without bound)
        x["dt"] = gen.broadcastable((b, L, H), lambda s: gen.rand(*s, lo=0.01, hi=0.6, dtype=dt))
    x["A"] = gen.broadcastable((H,), lambda s: gen.rand(*s, lo=-1.3, hi=-0.3))
    x["B"] = gen.broadcastable((b, L, G, N), lambda s: gen.randn(*s, dtype=dt))
    x["C"] = gen.broadcastable((b, L, G, N), lambda s: gen.randn(*s, dtype=dt))
    x["D"] = None if c["D"] is None else gen.broadcastable((H,) if c["D"] == "head" else (H, P),
                                                           lambda s: gen.randn(*s))
    x["z"] = gen.broadcastable((b, L, H, P), lambda s: gen.randn(*s, dtype=dt)) if c["z"] else None
    bias = (lambda s: gen.randn(*s, scale=0.3)) if c["softplus"] else (lambda s: gen.rand(*s, hi=0.3))
    x["dt_bias"] = gen.broadcastable((H,), bias) if c["bias"] else None
    rows = 1 if c["init1"] else c["rows"]
    x["initial_states"] = gen.broadcastable((rows, H, P, N), lambda s: gen.randn(*s)) if c["init"] else None
    x["seq_idx"] = ssd_seq_idx(c, gen) if c["seq"] else None
    # documented casts: another floating dtype is cast (A, D, dt_bias, initial_states to float32; dt, B, C, z
    # to x's dtype)
    if r.random() < 0.2:
        k = r.choice(SSD_F32)
        if x[k] is not None:
            x[k] = x[k].to(r.choice([F64, F16, BF16]))
    if r.random() < 0.15:
        k = r.choice(SSD_T)
        if x[k] is not None:
            x[k] = x[k].to(r.choice([t for t in (F32, F16, BF16, F64) if t != dt]))
    if nonfinite and x["x"].numel():  # NaN / Inf in: where the float64 reference has them out
        k = r.choice(["x", "dt", "B", "C", "z", "x"])
        t = x[k]
        if t is not None and t.numel() and t.stride().count(0) == 0:
            idx = tuple(r.randrange(s) for s in t.shape)
            with torch.no_grad():
                t[idx] = r.choice([float("nan"), float("nan"), float("inf"), -float("inf")])
    return x


def ssd_cu(c, device):
    """cu_seqlens in the form the case draws: a list, a tuple, an int64 / int32 tensor, one on the inputs'
    device (the drop-in copies it to the host), or a strided view (every other element of a buffer)."""
    cu, form = c["cu"], c.get("cu_form", "list")
    if cu is None or not isinstance(cu, list):
        return cu
    return {"list": lambda: list(cu), "tuple": lambda: tuple(cu), "int64": lambda: torch.tensor(cu),
            "int32": lambda: torch.tensor(cu, dtype=torch.int32),
            "device": lambda: torch.tensor(cu).to(device),
            "strided": lambda: torch.tensor([v for o in cu for v in (o, -99)])[::2]}[form]()  # every other one


def call_ssd(x, c, cu="cfg"):
    cu = c["cu_t"] if cu == "cfg" else cu
    kw = dict(D=x["D"], z=x["z"], dt_bias=x["dt_bias"], initial_states=x["initial_states"], seq_idx=x["seq_idx"],
              cu_seqlens=cu, dt_softplus=c["softplus"], return_final_states=c["final"],
              return_varlen_states=c["varlen"])
    if c["limit_kw"]:
        kw["dt_limit"] = c["limit"]
    return st.mamba_chunk_scan_combined(x["x"], x["dt"], x["A"], x["B"], x["C"], c["chunk"], **kw)


def ssd_cast(x):
    """The inputs as the drop-in hands them to the op (its documented casts)."""
    y = dict(x)
    for k in SSD_T:
        if y[k] is not None:
            y[k] = y[k].to(x["x"].dtype)
    for k in SSD_F32:
        if y[k] is not None:
            y[k] = y[k].to(F32)
    return y


def ref_ssd(y, c):
    """The float64 results (out, final_states, varlen_states) of the drop-in's call on y (its inputs cast as
    the drop-in casts them, float64 leaves for gradients): ssd_ref, with mamba_ssm's (1, ...) initial_states
    given to the first sequence, and final_states the state after the row's last step (cu_seqlens: the last
    non-empty sequence's)."""
    g = {k: (None if v is None else v.cpu()) for k, v in y.items()}
    cu = c["cu"]
    init = g["initial_states"]
    if cu is not None and init is not None and init.shape[0] == 1 and len(cu) > 2:
        init = torch.cat([init, init.new_zeros((len(cu) - 2, *init.shape[1:]))])
    seq = g["seq_idx"] if cu is None else None  # (with cu_seqlens: a seq_idx of the same boundaries)
    if seq is not None and g["x"].shape[0]:
        # each row's runs of equal ids as packed sequences (ssd_ref's cu_seqlens path: a restart from 0 or
        # the initial state; its seq_idx path restarts by multiplying the state by 0, which keeps an Inf as
        # NaN past the restart where the op starts afresh)
        outs, fins = [], []
        for b in range(g["x"].shape[0]):
            ids = seq[b].tolist()
            offs = [0] + [t for t in range(1, len(ids)) if ids[t] != ids[t - 1]] + [len(ids)]
            row = lambda t: None if t is None else t[b:b + 1]  # noqa: E731
            ib = None if init is None else torch.cat([init[b:b + 1], init.new_zeros((len(offs) - 2, *init.shape[1:]))])
            o, f = ssd_ref(row(g["x"]), row(g["dt"]), g["A"], row(g["B"]), row(g["C"]), g["D"], row(g["z"]),
                           g["dt_bias"], ib, None, offs, c["softplus"], c["limit"])
            outs.append(o)
            fins.append(f[-1:])
        return torch.cat(outs), torch.cat(fins), None
    out, fin = ssd_ref(g["x"], g["dt"], g["A"], g["B"], g["C"], g["D"], g["z"], g["dt_bias"], init, seq, cu,
                       c["softplus"], c["limit"])
    if cu is None:
        return out, fin, None
    nonempty = [s for s in range(len(cu) - 1) if cu[s + 1] > cu[s]]
    last = nonempty[-1] if nonempty else len(cu) - 2
    return out, fin[last:last + 1], fin


def ssd_unpack(res, c):
    """(out, final, varlen) of the drop-in's return (None where not returned)."""
    if not (c["final"] or c["varlen"]):
        return res, None, None
    if c["final"] and c["varlen"]:
        return res
    return (res[0], res[1], None) if c["final"] else (res[0], None, res[1])


def check_ssd_result(res, x, c):
    out, final, varlen = ssd_unpack(res, c)
    xx = x["x"]
    if out.dtype != xx.dtype or tuple(out.shape) != tuple(xx.shape) or out.device != xx.device:
        raise CaseFail(f"out: {out.dtype} {tuple(out.shape)} {out.device}, want x's dtype, shape and device")
    y = ssd_cast(x)
    ro, rf, rv = ref_ssd({k: (None if v is None else v.double() if v.is_floating_point() else v)
                          for k, v in y.items()}, c)
    close("out", out, ro, tol_of(TOL32, out.dtype))  # float32 arithmetic, rounded once to x's dtype
    H, P, N = c["H"], c["P"], c["N"]
    rows = 1 if c["cu"] is not None else c["rows"]
    for what, got, want, n in (("final_states", final, rf, rows), ("varlen_states", varlen, rv, c["rows"])):
        if got is None:
            continue
        if got.dtype != F32 or tuple(got.shape) != (n, H, P, N) or got.device != xx.device:
            raise CaseFail(f"{what}: {got.dtype} {tuple(got.shape)} {got.device}, want float32 {(n, H, P, N)}")
        close(what, got, want, SSTOL)  # float32, from the op's float32 arithmetic alone
    if c["final"] and c["varlen"] and final.numel() and \
            final.untyped_storage().data_ptr() == varlen.untyped_storage().data_ptr():
        raise CaseFail("final_states shares varlen_states' memory")


def ssd_prepare(c, gen):
    """cu_seqlens in the case's form (c["cu_t"])."""
    c["cu_t"] = ssd_cu(c, gen.device)
    return c


def case_ssd_good(gen, c=None):
    r = gen.rng
    c = ssd_prepare(dict(c or ssd_cfg(r)), gen)
    grads = r.random() < 0.4
    x = ssd_inputs(c, gen, nonfinite=not grads and r.random() < 0.1)
    if grads:
        return check_ssd_grads(x, c, gen)
    snap = Snap(list(x.values()) + [c["cu_t"]])
    res = call_ssd(x, c)
    if snap.changed():
        raise CaseFail("an input changed")
    check_ssd_result(res, x, c)
    if r.random() < 0.15:  # the same call on meta tensors: the fake kernels' shapes and dtypes
        fake = call_ssd({k: to_meta(v) for k, v in x.items()}, c)
        real = res if isinstance(res, tuple) else (res,)
        fake = fake if isinstance(fake, tuple) else (fake,)
        for a, b in zip(real, fake):
            if b.device.type != "meta" or a.shape != b.shape or a.dtype != b.dtype:
                raise CaseFail(f"meta output {b.dtype} {tuple(b.shape)} {b.device}, real {a.dtype} {tuple(a.shape)}")


def check_ssd_grads(x, c, gen):
    """Gradients of every differentiable input (backward with random upstream gradients) against the
    float64 reference's on the inputs the op sees (the drop-in's casts); each leaf's gradient in its dtype."""
    r = gen.rng
    leaves = {}
    for k, v in x.items():
        if v is None or k == "seq_idx":
            leaves[k] = v
            continue
        v = v.detach().clone()
        if v.stride().count(0):
            v = v.contiguous()
        leaves[k] = v.requires_grad_(r.random() < 0.7 or k == "x")
    out, final, varlen = ssd_unpack(call_ssd(leaves, c), c)
    dout = gen.randn(*out.shape, dtype=out.dtype).to(out.device)
    loss = (out.float() * dout.float()).sum()
    dfin = dvar = None
    if final is not None:
        dfin = gen.randn(*final.shape).to(final.device)
        loss = loss + (final * dfin).sum()
    if varlen is not None:
        dvar = gen.randn(*varlen.shape).to(varlen.device)
        loss = loss + (varlen * dvar).sum()
    loss.backward()
    # the reference: float64 leaves holding the values the op sees (the drop-in's casts)
    y = ssd_cast(x)
    ref_leaves = {k: (None if v is None else v.detach().cpu().double().requires_grad_(True) if k != "seq_idx" else v)
                  for k, v in y.items()}
    ro, rf, rv = ref_ssd(ref_leaves, c)
    rloss = (ro * dout.cpu().double()).sum()
    if dfin is not None:
        rloss = rloss + (rf * dfin.cpu().double()).sum()
    if dvar is not None:
        rloss = rloss + (rv * dvar.cpu().double()).sum()
    want = [k for k in SSD_NAMES if leaves[k] is not None and leaves[k].requires_grad]
    gs = torch.autograd.grad(rloss, [ref_leaves[k] for k in want], allow_unused=True) if rloss.requires_grad \
        else [None] * len(want)
    for k, g in zip(want, gs):
        v = leaves[k]
        g = torch.zeros_like(ref_leaves[k]) if g is None else g
        if v.grad is None:
            if g.abs().max().item() if g.numel() else 0:
                raise CaseFail(f"{k}.grad is None")
            continue
        if v.grad.dtype != v.dtype or v.grad.shape != v.shape:
            raise CaseFail(f"{k}.grad: {v.grad.dtype} {tuple(v.grad.shape)}, want {v.dtype} {tuple(v.shape)}")
        # the op's float32 gradient rounded to the dtype the op took k in, then cast back to k's own
        close(f"{k}.grad", v.grad, g, tol_of(GTOL32, y[k].dtype, v.dtype))


# the mutations of a good SSD call into a bad one: (x, c, expected names), or None when the one drawn does
# not apply to the case

SSD_KINDS = ["shape", "shape", "shape", "rank", "dtype", "complex", "nontensor", "device", "groups", "seq", "seq",
             "cu", "cu", "limit", "chunk", "varlen", "N0"]
SSD_RAW_KINDS = ["shape", "shape", "shape", "rank", "dtype", "complex", "nontensor", "device", "groups", "seq", "seq",
                 "cu", "cu", "limit", "N0"]


# what a meta tensor shows (no values): shapes, dtypes, the Python-side arguments
SSD_META_KINDS = ("shape", "rank", "dtype", "complex", "nontensor", "groups", "limit", "chunk", "varlen", "N0")


def mutate_ssd(x, c, gen, raw=False, kinds=SSD_KINDS):
    r = gen.rng
    x, c = dict(x), dict(c)
    present = [k for k in SSD_NAMES + ["seq_idx"] if x[k] is not None]
    kind = c["_kind"] = r.choice(kinds)
    if kind == "shape":
        k = r.choice(present)
        t = x[k]
        if t.dim() == 0:
            return None
        i = r.randrange(t.dim())
        ax = ssd_axes(k, t)[i]
        shape = list(t.shape)
        shape[i] = shape[i] + 1 if (shape[i] == 0 or r.random() < 0.5) else shape[i] - 1
        others = [o for o in present if o != k and ax in ssd_axes(o, x[o])]
        if ax == "rows":
            if c["cu"] is not None and (shape[i] == c["rows"] or (shape[i] == 1 and len(c["cu"]) > 2 and not raw)):
                return None  # another of the forms taken (mamba_ssm's one initial state)
            others = ["cu_seqlens"] if c["cu"] is not None else ["x", "dt", "B", "C"]
        elif ax == "G":
            others = ["B", "C"]
        elif not others:
            return None  # a size no other operand shows: another valid problem
        if ax == "b" and c["cu"] is not None:
            others.append("cu_seqlens")
        x[k] = torch.zeros(shape, dtype=t.dtype, device=t.device)
        return x, c, [k] + others
    if kind == "rank":
        k = r.choice(present)
        t = rank_changed(x[k], r)
        if k == "D" and t.dim() in (1, 2) and tuple(t.shape) in ((c["H"],), (c["H"], c["P"])):
            return None  # D's other form
        x[k] = t
        return x, c, [k]
    if kind == "dtype":
        k = r.choice(present)
        if k == "seq_idx":
            dt = r.choice([F32, torch.bool, torch.complex64] + ([torch.int64, torch.int16] if raw else
                                                                  [torch.uint16, torch.uint32, torch.uint64]))
            if dt in (torch.uint16, torch.uint32, torch.uint64):
                x[k] = x[k].to(torch.int32).to(dt)
            else:
                x[k] = x[k].to(dt) if dt != torch.bool else (x[k] > 0)
            return x, c, [k]
        dt = _other_dtype_bad(r)
        if raw:  # the op casts nothing: another floating dtype is refused too
            want = F32 if k in SSD_F32 else x["x"].dtype
            dt = r.choice([dt] + [t for t in (F64, F16, BF16, F32) if t != want])
        if k == "x":
            dt = r.choice([dt, F64])
        x[k] = x[k].to(dt) if dt != torch.bool else (x[k] > 0)
        if raw and k == "x" and dt in (F16, BF16, F32):
            return x, c, ["x", "dt", "B", "C", "z"]  # (x's dtype is T: the others are refused against it)
        return x, c, [k]
    k = common_bad(kind, x, present, r, gen, no_complex=("seq_idx",))
    if k is not None:
        return x, c, [k]
    if kind == "groups":  # a group count that does not divide nheads (or is more than nheads)
        b, L, H, N, dt = c["b"], c["L"], c["H"], c["N"], x["x"].dtype
        if H == 0:
            return None
        G = r.choice([g for g in (3, 5, 7, H + 1, 2 * H) if H % g])
        x["B"] = gen.layout(gen.randn(b, L, G, N, dtype=dt))
        x["C"] = gen.layout(gen.randn(b, L, G, N, dtype=dt))
        return x, c, ["B", "C"]
    if kind == "seq":
        b, L = c["b"], c["L"]
        dev = x["x"].device
        bad = r.choice(["len", "batch", "rank1", "rank3", "float", "bool", "meta", "list", "cu", "uint"])
        i32 = torch.int32
        t = {"len": lambda: torch.zeros(b, L + r.choice([1, -1]), dtype=i32),
             "batch": lambda: torch.zeros(b + 1, L, dtype=i32),
             "rank1": lambda: torch.zeros(L, dtype=i32),
             "rank3": lambda: torch.zeros(b, L, 1, dtype=i32),
             "float": lambda: torch.zeros(b, L),
             "bool": lambda: torch.zeros(b, L, dtype=torch.bool),
             "meta": lambda: torch.zeros(b, L, dtype=i32, device="meta"),
             "list": lambda: [[0] * L] * b,
             "cu": lambda: None,
             "uint": lambda: torch.zeros(b, L, dtype=r.choice([torch.uint16, torch.uint32, torch.uint64]))}[bad]()
        if bad == "cu":  # beside cu_seqlens: boundaries of its own (the drop-in), or at all (the op)
            if c["cu"] is None or (L < 2 and not raw):
                return None
            cu = c["cu"]
            starts = {cu[s] for s in range(len(cu) - 1) if 0 < cu[s] < cu[s + 1]}
            if not raw:
                starts ^= {r.randrange(1, L)}  # one boundary added or taken away
            ids = [sum(1 for s in starts if s <= j) for j in range(L)]
            x["seq_idx"] = torch.tensor([ids], dtype=i32).to(dev)
            return x, c, ["seq_idx"] + (["cu_seqlens"] if raw else [])
        if bad == "list" and raw:
            return None
        if isinstance(t, torch.Tensor) and bad != "meta":
            t = t.to(dev)
        x["seq_idx"] = t
        return x, c, ["seq_idx"]
    if kind == "cu":
        L = c["L"]
        bad = r.choice(["dec", "neg", "first", "last", "over", "float", "floatlist", "bool", "2d", "one", "meta", "str",
                        "huge", "batch", "uint", "int64big"])
        if bad == "batch":  # packed sequences need batch 1
            if c["b"] < 2:
                return None
            c["cu"] = c["cu_t"] = [0, L]
            x["initial_states"] = None
            x["seq_idx"] = None
            return x, c, ["cu_seqlens", "x"]
        if c["b"] != 1:
            return None
        x["initial_states"] = None
        x["seq_idx"] = None
        cu = {"neg": lambda: [0, -7, L], "dec": lambda: [0, L + 2, L], "first": lambda: [1, L] if L != 1 else [2, L],
              "last": lambda: [0, L - 1] if L else [0, 1], "over": lambda: [0, L + 1],
              "float": lambda: torch.tensor([0.0, L / 2, float(L)]), "floatlist": lambda: [0, 1.5, L],
              "bool": lambda: torch.tensor([0, 1]).bool(), "2d": lambda: torch.tensor([[0, L]]), "one": lambda: [0],
              "meta": lambda: torch.tensor([0, L], device="meta"), "str": lambda: "0,1", "huge": lambda: [0, 2**70],
              "uint": lambda: torch.tensor([0, L]).to(torch.uint32), "int64big": lambda: [0, 2**40, L]}[bad]()
        if bad == "one" and L == 0:
            return None
        if raw:
            if not isinstance(cu, torch.Tensor):
                if bad in ("floatlist", "str", "huge"):
                    return None
                cu = torch.tensor(cu, dtype=torch.int64)
            elif bad == "uint":
                return None
        c["cu"] = c["cu_t"] = cu
        return x, c, ["cu_seqlens"]
    if kind == "limit":
        if raw:
            lo, hi = r.choice([(float("nan"), 1.0), (0.0, float("nan")), (1.0, 0.5), (float("nan"), float("nan"))])
            c["limit"] = (lo, hi)
            return x, c, ["dt_limit", "dt_min", "dt_max"]
        c["limit"] = r.choice([(0.0,), 0.5, (0.0, 1.0, 2.0), (0, 10**400), (float("nan"), 1.0), (0.0, float("nan")),
                               (1.0, 0.5), "ab", (None, 1.0)])
        c["limit_kw"] = True
        return x, c, ["dt_limit"]
    if kind == "chunk":
        c["chunk"] = r.choice([0, -1, -64, 1.5, "64", True, float("nan"), [64], torch.tensor(64.0)])
        return x, c, ["chunk_size"]
    if kind == "N0":  # dstate 0 where there are steps: selscan refuses it (as the scan's N), naming B / C
        if 0 in (c["b"], c["L"], c["H"], c["P"]):
            return None
        x["B"], x["C"], x["initial_states"] = x["B"][..., :0], x["C"][..., :0], None
        return x, c, ["B", "C"]
    if kind == "varlen":  # varlen states without cu_seqlens
        if c["cu"] is not None:
            return None
        c["varlen"] = True
        return x, c, ["cu_seqlens", "return_varlen_states"]
    return None


def ssd_bad_case(gen, raw=False):
    r = gen.rng

    def attempt():
        c = ssd_cfg(r, zero_ok=r.random() < 0.2, distinct=True)
        if raw:
            c = ssd_raw_cfg(c)
        c = ssd_prepare(c, gen)
        x = ssd_inputs(c, gen)
        if raw:
            x = ssd_exact(x, c)
        return mutate_ssd(x, c, gen, raw=raw, kinds=SSD_RAW_KINDS if raw else SSD_KINDS)

    return first_mutation(attempt)


def case_ssd_bad(gen):
    x, c, names = ssd_bad_case(gen)
    args = list(x.values()) + ([c["cu_t"]] if isinstance(c["cu_t"], torch.Tensor) else [])
    expect_refusal(lambda: call_ssd(x, c), args, names)
    if c["_kind"] in SSD_META_KINDS and gen.rng.random() < 0.3:  # the same on meta tensors: the fake kernels
        expect_refusal(lambda: call_ssd({k: to_meta(v) for k, v in x.items()}, c), [], names)


# ---- the raw ops: exact dtypes, the op's own forms; hostile arguments never crash the process ------------


def ssd_raw_cfg(c):
    """The op's forms: no mamba_ssm (1, ...) initial_states, not seq_idx and cu_seqlens both, no varlen."""
    c = dict(c, init1=False, varlen=False, cu_form=c.get("cu_form") if c.get("cu_form") == "strided" else "int64")
    if c["cu"] is not None:
        c["seq"] = None
    return c


def ssd_exact(x, c):
    """The inputs in the dtypes the op takes (the drop-in's casts), seq_idx int32 (renumbered by its runs, as
    the drop-in does: only neighbours' equality counts)."""
    y = ssd_cast(x)
    s = y["seq_idx"]
    if s is not None and s.dtype != torch.int32:
        ids = torch.zeros(s.shape, dtype=torch.int32, device=s.device)
        if s.shape[-1] > 1:
            ids[..., 1:] = (s[..., 1:] != s[..., :-1]).cumsum(-1, dtype=torch.int32)
        y["seq_idx"] = ids
    return y


def raw_ssd_args(x, c):
    cu = c["cu_t"]
    if isinstance(cu, (list, tuple)):
        cu = torch.tensor(cu, dtype=torch.int64)
    lo, hi = (-float("inf"), float("inf")) if c["limit"] is None else c["limit"]
    return (x["x"], x["dt"], x["A"], x["B"], x["C"], x["D"], x["z"], x["dt_bias"], x["initial_states"], x["seq_idx"],
            cu), (c["softplus"], lo, hi)


def case_ssd_raw(gen):
    r = gen.rng
    kind = r.choice(["fwd", "fwd", "bwd", "bwd", "bad-fwd", "bad-bwd", "chaos", "chaos"])
    if kind == "bad-fwd":
        x, c, names = ssd_bad_case(gen, raw=True)
        ts, (sp, lo, hi) = raw_ssd_args(x, c)
        expect_refusal(lambda: ops.ssd_fwd(*ts, sp, lo, hi, r.random() < 0.5), list(ts), names)
        return
    c = ssd_prepare(ssd_raw_cfg(ssd_cfg(r)), gen)
    if kind == "chaos":
        return ssd_chaos(gen, c)
    x = ssd_exact(ssd_inputs(c, gen, nonfinite=kind == "fwd" and r.random() < 0.1), c)
    ts, (sp, lo, hi) = raw_ssd_args(x, c)
    if kind == "fwd":
        snap = Snap(list(ts))
        out, fin = ops.ssd_fwd(*ts, sp, lo, hi, c["final"])
        if snap.changed():
            raise CaseFail("an input changed")
        if not c["final"] and tuple(fin.shape) != (0,):
            raise CaseFail(f"final_states placeholder {tuple(fin.shape)}, not (0,)")
        c = dict(c, varlen=c["final"] and c["cu"] is not None, final=c["final"] and c["cu"] is None)
        check_ssd_result((out, fin) if (c["final"] or c["varlen"]) else out, x, c)
        return
    out, fin = ops.ssd_fwd(*ts, sp, lo, hi, True)
    dout = gen.layout(gen.randn(*out.shape, dtype=out.dtype))
    dfin = gen.layout(gen.randn(*fin.shape)) if r.random() < 0.6 else None
    mask = [int(r.random() < 0.7) for _ in range(9)]
    if kind == "bad-bwd":
        bad = r.choice(["dout", "dout", "dfinal", "mask", "mask"])
        a = list(ts) + [dout, dfin]
        if bad == "dout":
            a[11] = r.choice([_bad_shape(dout, r), dout.to(F64), dout.to(torch.int32),
                              dout.to("meta" if gen.device == "cpu" else "cpu"), 1.0,
                              dout.to(F16 if dout.dtype != F16 else BF16)])
            names = ["dout", "dy"]
        elif bad == "dfinal":
            a[12] = r.choice([_bad_shape(fin, r), fin.to(F64), fin.to(F16),
                              fin.to("meta" if gen.device == "cpu" else "cpu")])
            names = ["dfinal_states", "dfinal_state"]
        else:
            mask = r.choice([mask[: r.randint(0, 8)], mask + [1], [1] * 10])
            names = ["grad_mask"]
        expect_refusal(lambda: ops.ssd_bwd(*a, sp, lo, hi, mask), a, names)
        return
    snap = Snap(list(ts) + [dout, dfin])
    g = ops.ssd_bwd(*ts, dout, dfin, sp, lo, hi, mask)
    if snap.changed():
        raise CaseFail("an input changed")
    ref_leaves = {k: (None if v is None else v.detach().cpu().double().requires_grad_(True) if k != "seq_idx" else v)
                  for k, v in x.items()}
    c = dict(c, final=True, varlen=False)
    ro, rf, rv = ref_ssd(ref_leaves, c)
    rfin = rf if c["cu"] is None else rv
    rloss = (ro * dout.cpu().double()).sum() + ((rfin * dfin.cpu().double()).sum() if dfin is not None else 0)
    have = [k for k in SSD_NAMES if x[k] is not None]
    gs = torch.autograd.grad(rloss, [ref_leaves[k] for k in have], allow_unused=True) if rloss.requires_grad \
        else [None] * len(have)
    ref = dict(zip(have, gs))
    for i, k in enumerate(SSD_NAMES):
        if not (mask[i] and x[k] is not None):
            if g[i].numel() != 0:
                raise CaseFail(f"d{k}: a placeholder expected (not asked for)")
            continue
        if g[i].dtype != x[k].dtype or tuple(g[i].shape) != tuple(x[k].shape) or g[i].device != x[k].device:
            raise CaseFail(f"d{k}: {g[i].dtype} {tuple(g[i].shape)}, want {k}'s dtype and shape")
        w = ref[k] if ref[k] is not None else torch.zeros_like(ref_leaves[k])
        close(f"d{k}", g[i], w, tol_of(GTOL32, g[i].dtype))  # (exact dtypes: rounded once to k's dtype)


def hostile_tensor(gen, like=None):
    """Something a Tensor slot should not get: a random rank / size / dtype / layout (expanded, strided past
    its storage's middle, 0-dim, empty), meta, or a tensor of the right shape with extreme values."""
    r = gen.rng
    dev = gen.device
    kind = r.choice(["rand", "rand", "dtype", "expand", "strided", "zero", "empty", "meta", "extreme", "like-dtype"])
    if kind == "like-dtype" and like is not None:
        return like.to(r.choice([F64, F16, BF16, torch.int32, torch.int64, torch.bool]))
    if kind == "extreme" and like is not None and like.is_floating_point():
        big = torch.finfo(like.dtype).max
        return torch.full_like(like, r.choice([float("nan"), float("inf"), -float("inf"), big, -big, 0.0]))
    shape = [r.choice([0, 1, 2, 3, 5]) for _ in range(r.randint(0, 5))]
    dt = r.choice([F32, F32, F16, BF16, F64, torch.int32, torch.int64, torch.bool, torch.uint8])
    if kind == "zero":
        return torch.zeros((), dtype=dt, device=dev)
    if kind == "empty":
        return torch.zeros([0] * max(1, len(shape)), dtype=dt, device=dev)
    base = torch.randn(shape).to(dt).to(dev)
    if kind == "meta":
        return base.to("meta")
    if kind == "expand" and shape:
        return torch.randn([1] * len(shape)).to(dt).to(dev).expand(*shape)
    if kind == "strided" and shape:
        n = 1
        for s in shape:
            n *= max(s, 1)
        buf = torch.randn(n * 4 + 8).to(dt).to(dev)
        strides = [r.choice([0, 1, 2, 3, -0]) for _ in shape]
        return buf.as_strided(shape, strides, r.randint(0, 4))
    return base


def ssd_chaos(gen, c):
    """Every slot of ssd_fwd / ssd_bwd, some replaced by hostile values (tensors of any rank, size, dtype, layout
    or device; None; extreme floats; grad masks of any length): refused with one of EXC or answered, never
    a crash; inputs untouched either way."""
    r = gen.rng
    x = ssd_exact(ssd_inputs(c, gen), c)
    ts, (sp, lo, hi) = raw_ssd_args(x, c)
    a = list(ts)
    for i in range(len(a)):
        if r.random() < 0.25:
            a[i] = None if (i >= 5 and r.random() < 0.3) else hostile_tensor(gen, a[i])
    if r.random() < 0.2 and c["cu"] is not None:  # offsets with extreme values
        a[10] = torch.tensor(r.choice([[0, 2**62, c["L"]], [0, -2**62, c["L"]], [-2**63, c["L"]], [0, 2**63 - 1]]))
    if r.random() < 0.2:
        lo, hi = r.choice([(float("nan"), 1.0), (-1e30, 1e30), (1e30, float("inf")), (0.0, 0.0), (-5.0, -1.0)])
    if r.random() < 0.1:  # scalars of the wrong kind (the dispatcher's argument parsing)
        sp, lo, hi = r.choice([(None, lo, hi), ("yes", lo, hi), (sp, "0", hi), (sp, lo, None), (sp, 1, 2**70)])
    bwd = r.random() < 0.5
    if bwd:
        xx = a[0] if isinstance(a[0], torch.Tensor) else ts[0]
        dout = torch.randn(xx.shape).to(xx.dtype if xx.is_floating_point() else F32).to(xx.device) \
            if xx.device.type != "meta" else torch.empty(xx.shape, device="meta")
        if r.random() < 0.3:
            dout = hostile_tensor(gen, dout)
        dfin = None if r.random() < 0.5 else hostile_tensor(gen)
        mask = r.choice([[1] * 9, [0] * 9, [r.choice([0, 1, 2, -1, 2**40]) for _ in range(9)], [1] * r.randint(0, 12),
                         [1.5] * 9, "111111111", None, [True] * 9])
        args = a + [dout, dfin]
        call = lambda: ops.ssd_bwd(*args, sp, lo, hi, mask)  # noqa: E731
    else:
        args = a
        call = lambda: ops.ssd_fwd(*args, sp, lo, hi, r.random() < 0.5)  # noqa: E731
    snap = Snap(args)
    try:
        res = call()
    except EXC:
        pass
    except Exception as e:  # noqa: BLE001
        raise CaseFail(f"unexpected exception type {type(e).__name__}: {str(e)[:300]}")
    else:
        out = res[0]
        if not bwd and isinstance(a[0], torch.Tensor) and tuple(out.shape) != tuple(a[0].shape):
            raise CaseFail(f"answered with out {tuple(out.shape)} for x {tuple(a[0].shape)}")
    if snap.changed():
        raise CaseFail("an input changed")


# ---- mamba_split_conv1d_scan_combined: Mamba-2's layer after in_proj -------------------------------------


def split_cfg(rng, distinct=False):
    """A float32 layer (zxbcdt, weights): the float64 composition it is checked against has no low-precision
    intermediate roundings of its own (the conv's output, y, the norm's), so float32 alone is compared."""
    c = dict(G=rng.choice([1, 1, 2]))
    if distinct:
        c.update(H=c["G"] * 2, P=rng.choice([3, 5]), N=rng.choice([6, 7]), W=4, mlp=rng.choice([0, 0, 9]),
                 b=rng.randint(1, 2), L=rng.choice([10, 11]))
    else:
        c.update(H=c["G"] * rng.randint(1, 3), P=rng.randint(1, 4), N=rng.randint(1, 4), W=rng.randint(2, 4),
                 mlp=rng.choice([0, 0, rng.randint(1, 3)]), b=rng.randint(1, 2), L=rng.randint(1, 16))
    c["Dhd"] = rng.random() < 0.4
    c["w3"] = rng.random() < 0.3  # nn.Conv1d's (channels, 1, width) weight
    for k in ("bias", "dt_bias", "init", "rms", "nbg", "out", "out_bias", "final", "seq"):
        c[k] = rng.random() < 0.5
    c["recompute"] = rng.random() < 0.7
    c["limit"] = rng.choice([(0.0, float("inf")), (0.0, float("inf")), None,
                             (rng.uniform(0, 0.1), rng.uniform(0.3, 1.0))])
    c["act"] = rng.choice(["silu", "swish"])
    c["eps"] = rng.choice([1e-6, 1e-5])
    return c


def split_inputs(c, gen):
    b, L, H, P, G, N, W, mlp = (c[k] for k in ("b", "L", "H", "P", "G", "N", "W", "mlp"))
    dim = H * P
    ch = dim + 2 * G * N
    x = {}
    x["zxbcdt"] = gen.layout(gen.randn(b, L, 2 * mlp + 2 * dim + 2 * G * N + H))
    w = gen.randn(ch, W, scale=0.5)
    x["conv1d_weight"] = gen.layout(w[:, None] if c["w3"] else w)
    x["conv1d_bias"] = gen.layout(gen.randn(ch, scale=0.1)) if c["bias"] else None
    x["dt_bias"] = gen.layout(gen.randn(H, scale=0.3)) if c["dt_bias"] else None
    x["A"] = gen.broadcastable((H,), lambda s: gen.rand(*s, lo=-1.3, hi=-0.3))
    x["D"] = gen.broadcastable((H, P) if c["Dhd"] else (H,), lambda s: gen.randn(*s))
    x["initial_states"] = gen.layout(gen.randn(b, H, P, N)) if c["init"] else None
    x["rmsnorm_weight"] = gen.layout(gen.randn(dim)) if c["rms"] else None
    x["outproj_weight"] = gen.layout(gen.randn(r_out(c), mlp + dim, scale=0.3)) if c["out"] else None
    x["outproj_bias"] = gen.layout(gen.randn(r_out(c))) if c["out"] and c["out_bias"] else None
    x["seq_idx"] = None
    if c["seq"]:
        t = torch.cumsum((gen.rand(b, L) < 0.25).to(torch.int32), 1, dtype=torch.int32)
        x["seq_idx"] = gen.layout(t)
    return x


def r_out(c):
    return 3 + c["P"]


SPLIT_GRAD = ["zxbcdt", "conv1d_weight", "conv1d_bias", "dt_bias", "A", "D", "initial_states", "rmsnorm_weight",
              "outproj_weight", "outproj_bias"]


def call_split(x, c):
    return st.mamba_split_conv1d_scan_combined(
        x["zxbcdt"], x["conv1d_weight"], x["conv1d_bias"], x["dt_bias"], x["A"], x["D"], c.get("chunk", 256),
        initial_states=x["initial_states"], seq_idx=x["seq_idx"], dt_limit=c["limit"],
        return_final_states=c["final"], activation=c["act"], rmsnorm_weight=x["rmsnorm_weight"], rmsnorm_eps=c["eps"],
        outproj_weight=x["outproj_weight"], outproj_bias=x["outproj_bias"], headdim=c.get("headdim", c["P"]),
        ngroups=c.get("ngroups", c["G"]), norm_before_gate=c["nbg"], recompute=c["recompute"])


def ref_split(g, c):
    """float64 (out, final_states): mamba_split_conv1d_scan_ref (test_ssd's oracle) on each row's run of equal
    seq_idx (the conv and the scan restart at each; the first run of a row starts from its initial state)."""
    w = g["conv1d_weight"]
    w = w.squeeze(1) if w.dim() == 3 else w
    args = lambda z, init: mamba_split_conv1d_scan_ref(  # noqa: E731
        z, w, g["conv1d_bias"], g["dt_bias"], g["A"], g["D"], init, c["limit"], g["rmsnorm_weight"], c["eps"],
        g["outproj_weight"], g["outproj_bias"], c["P"], c["G"], c["nbg"])
    init = g["initial_states"]
    if g["seq_idx"] is None:
        return args(g["zxbcdt"], init)
    seq = g["seq_idx"].cpu()
    ys, fins = [], []
    for b in range(c["b"]):
        runs, s = [], 0
        for t in range(1, c["L"] + 1):
            if t == c["L"] or seq[b, t] != seq[b, t - 1]:
                runs.append((s, t))
                s = t
        row, fin = [], None
        for j, (s, e) in enumerate(runs):
            y, fin = args(g["zxbcdt"][b:b + 1, s:e], init[b:b + 1] if (init is not None and j == 0) else None)
            row.append(y)
        ys.append(torch.cat(row, 1))
        fins.append(fin)
    return torch.cat(ys, 0), torch.cat(fins, 0)


def case_split(gen):
    r = gen.rng
    if r.random() < 0.5:
        return case_split_bad(gen)
    c = split_cfg(r)
    x = split_inputs(c, gen)
    grads = r.random() < 0.5
    if grads:
        for k in SPLIT_GRAD:
            if x[k] is not None:
                x[k] = x[k].detach().clone().contiguous().requires_grad_(r.random() < 0.7 or k == "zxbcdt")
    snap = Snap(list(x.values()))
    res = call_split(x, c)
    if snap.changed():
        raise CaseFail("an input changed")
    y, fin = res if c["final"] else (res, None)
    g = {k: (None if v is None else v.detach().cpu().double().requires_grad_(
        bool(grads and v.requires_grad)) if v.is_floating_point() else v.cpu()) for k, v in x.items()}
    want_y, want_fin = ref_split(g, c)
    width = r_out(c) if c["out"] else c["mlp"] + c["H"] * c["P"]
    if y.dtype != F32 or tuple(y.shape) != (c["b"], c["L"], width):
        raise CaseFail(f"out: {y.dtype} {tuple(y.shape)}, want float32 {(c['b'], c['L'], width)}")
    close("out", y, want_y, TOL32)  # float32 throughout: the float32 bound
    if fin is not None:
        if fin.dtype != F32 or tuple(fin.shape) != (c["b"], c["H"], c["P"], c["N"]):
            raise CaseFail(f"final_states: {fin.dtype} {tuple(fin.shape)}")
        close("final_states", fin, want_fin, SSTOL)  # the scan's float32 state
    if not grads:
        return
    dy = gen.randn(*y.shape).to(y.device)
    loss = (y * dy).sum()
    rloss = (want_y * dy.cpu().double()).sum()
    if fin is not None:
        dfin = gen.randn(*fin.shape).to(fin.device)
        loss = loss + (fin * dfin).sum()
        rloss = rloss + (want_fin * dfin.cpu().double()).sum()
    leaves = [k for k in SPLIT_GRAD if x[k] is not None and x[k].requires_grad]
    got = torch.autograd.grad(loss, [x[k] for k in leaves], allow_unused=True)
    ref = torch.autograd.grad(rloss, [g[k] for k in leaves], allow_unused=True)
    for k, a, b in zip(leaves, got, ref):
        b = torch.zeros_like(g[k]) if b is None else b
        if a is None:
            if b.numel() and b.abs().max() > 0:
                raise CaseFail(f"{k}.grad is None")
            continue
        if a.dtype != x[k].dtype or a.shape != x[k].shape:
            raise CaseFail(f"{k}.grad: {a.dtype} {tuple(a.shape)}")
        close(f"{k}.grad", a, b, GTOL32)  # float32 gradients of a float32 layer


SPLIT_KINDS = ["zxbcdt", "zxbcdt", "weight", "bias", "A", "D", "headdim", "ngroups", "rms", "out", "act", "init",
               "seq", "limit", "chunk", "nontensor", "device", "dtbias"]


def case_split_bad(gen):
    r = gen.rng

    dev = gen.device

    def Z(*shape, dtype=F32):  # noqa: N802
        return torch.zeros(*shape, dtype=dtype, device=dev)

    def attempt():
        c = split_cfg(r, distinct=True)
        x = split_inputs(c, gen)
        kind = r.choice(SPLIT_KINDS)
        H, P, G, N, dim = c["H"], c["P"], c["G"], c["N"], c["H"] * c["P"]
        if kind == "zxbcdt":
            z = x["zxbcdt"]
            bad = r.choice(["rank", "odd", "short"])
            if bad == "rank":
                x["zxbcdt"] = rank_changed(z, r)
                if x["zxbcdt"].dim() == 3:
                    return None
            else:
                d = r.choice([1, -1]) if bad == "odd" else -(2 * c["mlp"] + 2)
                x["zxbcdt"] = Z(*z.shape[:-1], z.shape[-1] + d)
            return x, c, ["zxbcdt"]
        if kind == "weight":
            w = x["conv1d_weight"]
            bad = r.choice(["rank", "rows", "dtype"])
            if bad == "rank":
                x["conv1d_weight"] = r.choice([w.reshape(-1), w.reshape(1, *w.shape) if w.dim() == 2 else w[..., None]])
            elif bad == "rows":
                x["conv1d_weight"] = Z(w.shape[0] + r.choice([1, -1]), *w.shape[1:])
                return x, c, ["conv1d_weight", "zxbcdt"]
            else:
                x["conv1d_weight"] = w.to(r.choice([torch.int32, torch.complex64, torch.bool]))
            return x, c, ["conv1d_weight"]
        if kind == "bias":
            bb = Z(dim + 2 * G * N)
            x["conv1d_bias"] = r.choice([bb[1:], Z(dim + 2 * G * N + 1), bb[None], bb.to(torch.int32)])
            return x, c, ["conv1d_bias"]
        if kind == "dtbias":
            x["dt_bias"] = r.choice([Z(H + 1), Z(H, 2), Z(H, dtype=torch.int64)])
            return x, c, ["dt_bias"]
        if kind == "A":
            x["A"] = r.choice([Z(H, 2), Z(()), Z(H, dtype=torch.int32) - 1])
            return x, c, ["A"]
        if kind == "D":
            x["D"] = r.choice([Z(H + 1), Z(H, P + 1), Z(H, P, 1), Z(H).to(torch.int32)])
            if x["D"].dim() == 2:  # (the D per channel's headdim: the split no longer fits, nor what has headdim)
                d2, ch, tot = H * (P + 1), x["conv1d_weight"].shape[0], x["zxbcdt"].shape[-1]
                n2, m2 = (ch - d2) // G // 2, tot - (2 * d2 + (ch - d2) + H)
                if n2 > 0 and ch == d2 + 2 * G * n2 and m2 >= 0 and m2 % 2 == 0 and not any(
                        x[k] is not None for k in ("initial_states", "rmsnorm_weight", "outproj_weight")):
                    return None  # another valid split (the MLP's halves take the difference)
                return x, c, ["D", "zxbcdt", "conv1d_weight", "initial_states", "rmsnorm_weight", "outproj_weight"]
            return x, c, ["D"]
        if kind == "headdim":
            x["D"] = x["D"][:, 0] if x["D"].dim() == 2 else x["D"]
            c["headdim"] = r.choice([0, -3, 1.5, "4", None, True])
            return x, c, ["headdim"]
        if kind == "ngroups":
            c["ngroups"] = r.choice([0, -1, 3, 2 * H + 1, 1.0, True, None])
            return x, c, ["ngroups"]
        if kind == "rms":
            x["rmsnorm_weight"] = r.choice([Z(dim + 1) + 1, Z(1, dim) + 1, Z(dim, dtype=torch.int32) + 1,
                                            Z(1) + 1])
            return x, c, ["rmsnorm_weight"]
        if kind == "out":
            o = r.choice(["w", "wdtype", "b", "b-alone"])
            if o == "w":
                x["outproj_weight"] = Z(5, c["mlp"] + dim + 1)
                x["outproj_bias"] = None
                return x, c, ["outproj_weight"]
            if o == "wdtype":
                x["outproj_weight"] = Z(5, c["mlp"] + dim, dtype=F64)
                x["outproj_bias"] = None
                return x, c, ["outproj_weight"]
            if o == "b":
                x["outproj_weight"] = Z(5, c["mlp"] + dim)
                x["outproj_bias"] = Z(4)
                return x, c, ["outproj_bias"]
            x["outproj_weight"] = None
            x["outproj_bias"] = Z(5)
            return x, c, ["outproj_bias"]
        if kind == "act":
            c["act"] = r.choice(["relu", "gelu", "", 1])
            return x, c, ["activation"]
        if kind == "init":
            x["initial_states"] = Z(c["b"], H, P, N + 1) if r.random() < 0.5 else Z(c["b"] + 1, H, P, N)
            return x, c, ["initial_states"]
        if kind == "seq":
            x["seq_idx"] = r.choice([Z(c["b"], c["L"] + 1, dtype=torch.int32), Z(c["b"], c["L"]),
                                     Z(c["L"], dtype=torch.int32), [[0] * c["L"]] * c["b"]])
            return x, c, ["seq_idx"]
        if kind == "limit":
            c["limit"] = r.choice([(1.0, 0.5), (0.0,), 0.5, (float("nan"), 1.0), "ab"])
            return x, c, ["dt_limit"]
        if kind == "chunk":
            c["chunk"] = r.choice([0, -1, 2.5, "256", True])
            return x, c, ["chunk_size"]
        if kind == "nontensor":
            k = r.choice(["zxbcdt", "conv1d_weight", "A", "D", "conv1d_bias", "dt_bias", "initial_states",
                          "rmsnorm_weight", "outproj_weight"])
            x[k] = r.choice([1.0, [1.0, 2.0], "x"])
            if k == "outproj_weight":
                x["outproj_bias"] = None
            return x, c, [k]
        if kind == "device":
            k = r.choice([k for k in SPLIT_GRAD + ["seq_idx"] if x[k] is not None])
            x[k] = x[k].to("meta" if gen.device == "cpu" else "cpu")
            return x, c, [k]
        return None

    x, c, names = first_mutation(attempt)
    expect_refusal(lambda: call_split(x, c), list(x.values()), names)


# ---- CUDA: devices and streams ---------------------------------------------------------------------------


def case_cuda(gen):
    r = gen.rng
    kind = r.choice(["mismatch-scan", "mismatch-step", "stream", "stream-step", "other-device", "mismatch-ssd",
                     "mismatch-split", "stream-ssd", "other-device-ssd"])
    if kind == "other-device" and torch.cuda.device_count() < 2:
        kind = "stream"
    if kind == "other-device-ssd" and torch.cuda.device_count() < 2:
        kind = "stream-ssd"
    if kind == "mismatch-ssd":  # one operand on the CPU (cu_seqlens excepted: read on the host, any device)
        c = ssd_prepare(ssd_cfg(r, distinct=True), gen)
        x = ssd_inputs(c, gen)
        k = r.choice([k for k in SSD_NAMES + ["seq_idx"] if x[k] is not None])
        x[k] = x[k].to("cpu")
        expect_refusal(lambda: call_ssd(x, c), list(x.values()), [k])
        if c["cu"] is None and r.random() < 0.5:  # the raw op too (the forms it takes: no packing)
            c = ssd_raw_cfg(c)
            y = ssd_exact({kk: (v.to(gen.device) if kk != k and v is not None else v) for kk, v in x.items()}, c)
            ts, (sp, lo, hi) = raw_ssd_args(y, c)
            expect_refusal(lambda: ops.ssd_fwd(*ts, sp, lo, hi, True), list(ts), [k])
        return
    if kind == "mismatch-split":
        c = split_cfg(r, distinct=True)
        x = split_inputs(c, gen)
        k = r.choice([k for k in SPLIT_GRAD + ["seq_idx"] if x[k] is not None])
        x[k] = x[k].to("cpu")
        expect_refusal(lambda: call_split(x, c), list(x.values()), [k])
        return
    if kind == "stream-ssd":  # the SSD scan (with gradients, or not) and the split layer on a side stream
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            if r.random() < 0.7:
                case_ssd_good(gen)
            else:
                case_split(gen)
        torch.cuda.synchronize()
        return
    if kind == "other-device-ssd":  # tensors on cuda:1 while cuda:0 is current; one on cuda:0 (refused)
        other = Gen(r, "cuda:1")
        c = ssd_prepare(ssd_cfg(r), other)
        x = ssd_inputs(c, other)
        if r.random() < 0.5:
            with torch.cuda.device(0):
                check_ssd_result(call_ssd(x, c), x, c)
            return
        k = r.choice([k for k in SSD_NAMES + ["seq_idx"] if x[k] is not None])
        x[k] = x[k].to("cuda:0")
        expect_refusal(lambda: call_ssd(x, c), list(x.values()), [k])
        return
    if kind == "mismatch-scan":
        c = scan_cfg(r, distinct=True)
        x = scan_inputs(c, gen)
        k = r.choice([k for k in SCAN_NAMES if x[k] is not None])
        x[k] = x[k].to("cpu")
        expect_refusal(lambda: call_scan(x, c), list(x.values()), [k])
        return
    if kind == "mismatch-step":
        c = step_cfg(r, distinct=True)
        x = step_inputs(c, gen)
        k = r.choice([k for k in STEP_NAMES if x[k] is not None] + (["state_batch_indices"] if c["idx"] else []))
        x[k] = x[k].to("cpu")
        with torch.no_grad():
            expect_refusal(lambda: call_step(x, c), list(x.values()), [k])
        return
    if kind in ("stream", "stream-step"):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            if kind == "stream":
                case_scan_good(gen)
            else:
                with torch.no_grad():
                    c = step_cfg(r)
                    x = step_inputs(c, gen)
                    check_step_call(x, c, lambda: call_step(x, c))
        torch.cuda.synchronize()
        return
    # tensors on cuda:1 while cuda:0 is current; and one argument on the other GPU (refused)
    other = Gen(r, "cuda:1")
    c = scan_cfg(r)
    x = scan_inputs(c, other)
    if r.random() < 0.5:
        with torch.cuda.device(0):
            check_scan_result(call_scan(x, c), x, c)
        return
    k = r.choice([k for k in SCAN_NAMES if x[k] is not None])
    x[k] = x[k].to("cuda:0")
    expect_refusal(lambda: call_scan(x, c), list(x.values()), [k])


CASES = {"scan-good": case_scan_good, "scan-bad": case_scan_bad, "step-good": case_step_good,
         "step-bad": case_step_bad, "module": case_module, "raw-fwd": case_raw_fwd, "raw-bwd": case_raw_bwd,
         "raw-step": case_raw_step, "meta": case_meta, "autograd": case_autograd, "ssd-good": case_ssd_good,
         "ssd-bad": case_ssd_bad, "ssd-raw": case_ssd_raw, "split": case_split, "cuda": case_cuda}


ONLY = []  # --only: the categories drawn (all where empty)


def categories(device):
    cats = CATEGORIES + (CUDA_CATEGORIES if device.startswith("cuda") else [])
    return [k for k in cats if k in ONLY] if ONLY else cats


def category_of(seed, i, device):
    cats = categories(device)
    rng = random.Random(f"cat:{seed}:{i}")
    return rng.choices(cats, weights=[WEIGHTS[k] for k in cats])[0]


def run_case(seed, i, device):
    """(category, ok, why) of case i; never raises."""
    cat = category_of(seed, i, device)
    rng = random.Random(f"case:{seed}:{i}")
    gen = Gen(rng, device)
    try:
        CASES[cat](gen)
        return cat, True, ""
    except CaseFail as e:
        return cat, False, str(e)
    except Exception as e:  # noqa: BLE001  (a bug of the op or of the harness: reported, not hidden)
        tb = traceback.format_exc(limit=4)
        return cat, False, f"unexpected {type(e).__name__}: {str(e)[:300]}\n{tb[-900:]}"


def worker(seed, ids, device):
    _worker_imports()
    crash = int(os.environ.get("FUZZ_OPS_SELFTEST_CRASH", "-1"))  # the crash guard's own test
    for i in ids:
        print(f"S {i}", flush=True)
        if i == crash:
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        cat, ok, why = run_case(seed, i, device)
        print("R " + json.dumps({"id": i, "cat": cat, "ok": ok, "why": why}), flush=True)


# =====================================================================================================
# parent side: workers, crash guard, summary (no torch import)
# =====================================================================================================


def run_workers(args):
    ids = list(range(args.start, args.start + args.cases))
    n = max(1, min(args.workers, len(ids)))
    shares = [ids[k::n] for k in range(n)]
    results = {}
    lock = threading.Lock()
    here = os.path.abspath(__file__)

    def drive(share):
        todo = list(share)
        while todo:
            cmd = [sys.executable, here, "--worker", "--seed", str(args.seed), "--device", args.device, "--ids",
                   ",".join(map(str, todo))] + (["--only", args.only] if args.only else [])
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            last = {"t": time.time(), "cur": None}
            err_lines = []

            def drain():
                for line in p.stderr:
                    err_lines.append(line)
                    del err_lines[:-20]

            threading.Thread(target=drain, daemon=True).start()
            killed = {"why": None}

            def watchdog():
                while p.poll() is None:
                    if time.time() - last["t"] > args.case_timeout:
                        killed["why"] = f"timeout: no result within {args.case_timeout} s"
                        p.kill()
                        return
                    time.sleep(1)

            threading.Thread(target=watchdog, daemon=True).start()
            for line in p.stdout:
                last["t"] = time.time()
                if line.startswith("S "):
                    last["cur"] = int(line[2:])
                elif line.startswith("R "):
                    res = json.loads(line[2:])
                    with lock:
                        results[res["id"]] = res
                    todo.remove(res["id"])
                    last["cur"] = None
            rc = p.wait()
            if last["cur"] is not None:  # the case in progress crashed or hung
                i = last["cur"]
                why = killed["why"] or f"worker died (exit status {rc}): " + "".join(err_lines[-5:])[-600:]
                with lock:
                    results[i] = {"id": i, "cat": category_of(args.seed, i, args.device), "ok": False,
                                  "why": "CRASH " + why}
                todo.remove(i)
            elif todo:  # died between cases (or at start): no case to blame; stop this share
                with lock:
                    for i in todo:
                        results[i] = {"id": i, "cat": category_of(args.seed, i, args.device), "ok": False,
                                      "why": f"worker exited ({rc}) before the case: " + "".join(err_lines[-5:])[-600:]}
                todo = []

    threads = [threading.Thread(target=drive, args=(s,)) for s in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in ids]


def summarize(results, args, seconds):
    cats = categories(args.device)
    tot = [0, 0, 0]
    lines = []
    for k in cats:
        rs = [x for x in results if x["cat"] == k]
        p = sum(1 for x in rs if x["ok"])
        lines.append(f"{k}: {len(rs)} cases, {p} passed, {len(rs) - p} failed")
        tot[0] += len(rs)
        tot[1] += p
        tot[2] += len(rs) - p
    fails = [x for x in results if not x["ok"]]
    for x in fails[:40]:
        print(f"FAIL case {x['id']} [{x['cat']}]: {x['why']}".rstrip())
        print(f"     replay: python {os.path.basename(__file__)} --seed {args.seed} --device {args.device} "
              f"--case {x['id']}" + (f" --only {args.only}" if args.only else ""))
    if len(fails) > 40:
        print(f"... and {len(fails) - 40} more failures")
    print(f"fuzz_ops: seed {args.seed}, device {args.device}, {args.workers} workers, {seconds:.0f} s")
    for ln in lines:
        print(ln)
    print(f"total: {tot[0]} cases, {tot[1]} passed, {tot[2]} failed")
    return tot[2] == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--start", type=int, default=0, help="first case id")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--case-timeout", type=float, default=120.0, help="seconds a case may take")
    ap.add_argument("--case", type=int, help="run this one case in process and print its result")
    ap.add_argument("--only", default="", help="comma-separated categories: draw only these (a replay needs the same)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ONLY[:] = [k for k in args.only.split(",") if k]
    unknown = [k for k in ONLY if k not in CATEGORIES + CUDA_CATEGORIES]
    if unknown:
        ap.error(f"unknown categories {unknown}")
    if args.worker:
        worker(args.seed, [int(v) for v in args.ids.split(",") if v], args.device)
        return 0
    if args.device.startswith("cuda"):
        import torch as _t  # the parent checks the device once

        import selscan_torch as _s
        if not (_t.cuda.is_available() and _s.has_cuda_kernels()):
            print("fuzz_ops: --device cuda needs a GPU and selscan_torch's CUDA kernels")
            return 2
    if args.case is not None:
        _worker_imports()
        cat, ok, why = run_case(args.seed, args.case, args.device)
        print(f"case {args.case} [{cat}]: {'passed' if ok else 'FAILED: ' + why}")
        return 0 if ok else 1
    t0 = time.time()
    results = run_workers(args)
    return 0 if summarize(results, args, time.time() - t0) else 1


if __name__ == "__main__":
    sys.exit(main())
