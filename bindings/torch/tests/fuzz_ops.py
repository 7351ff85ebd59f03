#!/usr/bin/env python3
"""fuzz_ops.py: a seeded fuzz harness for selscan_torch's framework ops (issue 27).

Every public function (selective_scan_fn, selective_state_update, SelectiveScan's forward and
step) and the raw ops (torch.ops.selscan.fwd / bwd / step) get good and bad inputs: dtypes,
ranks, shapes, zero sizes, broadcast (expanded) views, strides, transposes, slices of larger
buffers, in-place state aliasing the inputs, meta tensors and mixed devices, malformed offsets and
row indices, NaN / Inf, autograd (gradients, double backward, the inference-only step).

  bad input:  an exception (ValueError / TypeError / NotImplementedError / RuntimeError) whose
              message names the caller's argument (where it is knowable, the refusal is about
              it); every input bit-identical afterwards (the whole storage of each tensor: the
              in-place state and what lies around a view) and its metadata (shape, strides,
              storage offset, dtype) unchanged
  good input: the outputs of the float64 reference (selscan_torch.reference) within the dtype's
              tolerance, shapes and dtypes as documented, the in-place state updated as the
              reference says and nothing else written, inputs untouched

Crash guard: cases run in worker subprocesses (one per --workers, each on its range of case ids,
printing a line per case); a worker that dies (a segfault, an abort) or hangs has its current
case reported as failed, and a new worker goes on from the next case.

    python fuzz_ops.py [--cases N] [--seed S] [--device cpu|cuda] [--workers W]
    python fuzz_ops.py --seed S --case ID [--device D]      # one case, in process, verbose

Prints "<category>: N cases, N passed, N failed" per category and a total line; exit status 1
when a case failed. Case i is generated from (seed, i) alone: any failure is replayed by --case.
With --device cuda (a GPU and the CUDA kernels): inputs on the GPU, plus device mismatches
(cuda vs cpu), a non-default current device (more than one GPU) and a non-default stream.
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
              "meta", "autograd"]
CUDA_CATEGORIES = ["cuda"]
# how often each category comes up (a case id picks one by its hash, so a run's mix is fixed)
WEIGHTS = {"scan-good": 4, "scan-bad": 4, "step-good": 3, "step-bad": 4, "module": 1, "raw-fwd": 2, "raw-bwd": 2,
           "raw-step": 2, "meta": 3, "autograd": 2, "cuda": 3}

EXC = (ValueError, TypeError, NotImplementedError, RuntimeError)


class CaseFail(Exception):
    pass


# =====================================================================================================
# worker side: generation and checks (imports torch)
# =====================================================================================================


def _worker_imports():
    global torch, st, ops, selective_scan_ref, selective_state_update_ref
    global F32, F16, BF16, F64, TOL32, GTOL32, STOL, SCALE_FLOOR, lowp_tol
    import torch  # noqa: F811
    import selscan_torch as st  # noqa: F811
    from selscan_torch.reference import selective_scan_ref, selective_state_update_ref  # noqa: F811
    from _common import lowp_tol  # noqa: F811  (this folder is sys.path[0]: the script's own)

    torch.set_num_threads(1)
    ops = torch.ops.selscan
    F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
    # scaled error (scaled_err) of outputs (TOL32) and gradients (GTOL32) in float32; a float16 /
    # bfloat16 result adds its roundings to those dtypes (tol_of: _common.lowp_tol)
    TOL32, GTOL32 = 1e-4, 1e-3
    STOL = 1e-5  # a float32 state / last_state (any problem's: computed in float32 from its inputs)
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
        big = torch.full([s + p for s, p in zip(t.shape, pads)], float("nan"), dtype=t.dtype).to(dev)
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
    if kind == "complex":
        k = r.choice(present)
        x[k] = torch.complex(x[k].float(), x[k].float())
        return x, c, [k]
    if kind == "nontensor":
        k = r.choice(present)
        x[k] = r.choice([1.0, [1.0, 2.0], "x", 3])
        return x, c, [k]
    if kind == "device":
        k = r.choice(present)
        other = "meta" if (gen.device == "cpu" or r.random() < 0.5) else "cpu"
        x[k] = x[k].to(other)
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
    bs = (b, N) if c["Bform"] == "2d" else (b, G, N)
    x["B"] = gen.broadcastable(bs, lambda s: gen.randn(*s, dtype=dt))
    x["C"] = gen.broadcastable(bs, lambda s: gen.randn(*s, dtype=dt))
    x["D"] = gen.broadcastable(Ds, lambda s: gen.randn(*s)) if c["D"] else None
    x["z"] = gen.broadcastable(xs, lambda s: gen.randn(*s, dtype=dt)) if c["z"] else None
    if c["softplus"]:
        x["dt_bias"] = gen.broadcastable(Ds, lambda s: gen.randn(*s, scale=0.3)) if c["bias"] else None
    else:
        x["dt_bias"] = gen.broadcastable(Ds, lambda s: gen.rand(*s, hi=0.3)) if c["bias"] else None
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
    return st.selective_state_update(x["state"], x["x"], x["dt"], x["A"], x["B"], x["C"], x["D"], x["z"],
                                     x["dt_bias"], c["softplus"], state_batch_indices=x["state_batch_indices"])


def ref_step(x, c):
    dt = x["x"].dtype
    cv = lambda t, d: None if t is None else t.to(d).cpu()  # noqa: E731
    B, C = cv(x["B"], dt), cv(x["C"], dt)
    idx = x["state_batch_indices"]
    if idx is not None:
        idx = idx.cpu().long()
        idx = torch.where(idx >= c["n_cache"], torch.full_like(idx, -1), idx)  # CUDA: out of range = padding
    return selective_state_update_ref(x["state"].cpu(), x["x"].cpu(), cv(x["dt"], dt), cv(x["A"], F32), B, C,
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


# ---- CUDA: devices and streams ---------------------------------------------------------------------------


def case_cuda(gen):
    r = gen.rng
    kind = r.choice(["mismatch-scan", "mismatch-step", "stream", "stream-step", "other-device"])
    if kind == "other-device" and torch.cuda.device_count() < 2:
        kind = "stream"
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
         "raw-step": case_raw_step, "meta": case_meta, "autograd": case_autograd, "cuda": case_cuda}


def category_of(seed, i, device):
    cats = CATEGORIES + (CUDA_CATEGORIES if device.startswith("cuda") else [])
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
                   ",".join(map(str, todo))]
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
    cats = CATEGORIES + (CUDA_CATEGORIES if args.device.startswith("cuda") else [])
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
              f"--case {x['id']}")
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
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
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
