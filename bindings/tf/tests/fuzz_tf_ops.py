"""Seeded fuzz harness of the TensorFlow ops (issue 27; make test-tf runs it bounded, fixed seed).

    python fuzz_tf_ops.py                     # the CI budget (about 2 minutes on 2 cores)
    python fuzz_tf_ops.py --cases 20000 --seed 7 --jobs 4
    python fuzz_tf_ops.py --only bad:123      # one case again (category:index), verbose

Every case is drawn from its own generator, numpy.random.default_rng([seed, category, index]), so
a case is reproducible alone. Cases run in worker subprocesses, a chunk at a time: a crash (a
signal, an abort) is reported as a failed case naming the case, and the next worker carries on
after it.

Categories:
  forward     good inputs through selective_scan (eager, tf.function with static or unknown
              shapes; both layouts; float32 / float16 / bfloat16; every option; groups; rank-3 B/C;
              zero sizes; A, D, delta_bias, h0 given as float64 / float16 / lists, cast to float32;
              NaN / Inf in one element): y and h_last against a float64 NumPy reference within the
              dtype's tolerance, NaN where the reference has NaN / Inf and only there.
  gradient    good inputs, a random loss on y and h_last: every input's gradient against the
              reference's float64 vector-Jacobian product (written out below, checked against
              finite differences when the harness starts).
  raw         the raw ops SelscanForward / SelscanBackward: good calls against the reference (the
              backward with its forward's checkpoint, none, or one of another size), and bad
              calls (an absent operand given, a present one empty, a checkpoint not a vector,
              dy / dh_last of the wrong shape).
  bad         one defect in an otherwise good selective_scan call (a dtype, a rank, one axis, the
              group count, N = 0, None / sparse / ragged / objects, a non-bool option, a bad
              layout), eager or in a graph: an InvalidArgumentError / ValueError / TypeError whose
              message names the argument.
  second      second-order and forward-mode derivatives: the clear NotImplementedError, never
              zeros or None.
  layers      SelectiveScan and MambaVisionMixer: random constructor arguments (bad ones refused
              naming the argument), good layers against the reference (SelectiveScan) or the
              pure-TensorFlow scan with the same weights (the mixer).
In every category the inputs must be bit-identical after the call.

Prints "<category>: N cases, N passed, N failed" per category and a total line last; exit status
1 on any failure.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

CATEGORIES = ("forward", "gradient", "raw", "bad", "second", "layers")
# Cases per category for the default (CI) budget; --cases N scales them to about N in all.
DEFAULT_CASES = {"forward": 600, "gradient": 360, "raw": 320, "bad": 1000, "second": 60, "layers": 80}
DEVICES = set()  # where the workers' ops ran (reported by each worker)


# ================================================================================================
# float64 reference (NumPy), logical layout: u, delta, z (batch, dim, L); B, C (batch, G, N, L);
# A (dim, N); D, delta_bias (dim,); h0 (batch, dim, N)


def _softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def ref_forward(x, softplus):
    """y (batch, dim, L), h_last (batch, dim, N), and what the VJP needs."""
    u, delta, A, B, C = x["u"], x["delta"], x["A"], x["B"], x["C"]
    batch, dim, L = u.shape
    G, N = B.shape[1], B.shape[2]
    rep = dim // G if G else 0
    Bx = np.repeat(B, rep, axis=1) if dim else np.zeros((batch, 0, N, L))
    Cx = np.repeat(C, rep, axis=1) if dim else np.zeros((batch, 0, N, L))
    pre = delta + (x["delta_bias"][None, :, None] if "delta_bias" in x else 0.0)
    dt = _softplus(pre) if softplus else pre
    h = np.array(x["h0"], dtype=np.float64) if "h0" in x else np.zeros((batch, dim, N))
    hs = np.empty((L + 1, batch, dim, N))
    hs[0] = h
    yraw = np.empty((batch, dim, L))
    with np.errstate(all="ignore"):
        for t in range(L):
            a = np.exp(dt[:, :, t, None] * A[None])
            h = a * h + (dt[:, :, t] * u[:, :, t])[:, :, None] * Bx[:, :, :, t]
            hs[t + 1] = h
            yraw[:, :, t] = np.sum(Cx[:, :, :, t] * h, axis=-1)
        if "D" in x:
            yraw = yraw + x["D"][None, :, None] * u
        y = yraw * (x["z"] * _sigmoid(x["z"])) if "z" in x else yraw
    return y, h, dict(Bx=Bx, Cx=Cx, pre=pre, dt=dt, hs=hs, yraw=yraw)


def ref_vjp(x, softplus, gy_out, gh_last):
    """The gradients of <y, gy_out> + <h_last, gh_last> with respect to every input in x."""
    _, _, s = ref_forward(x, softplus)
    u, A = x["u"], x["A"]
    batch, dim, L = u.shape
    G, N = x["B"].shape[1], x["B"].shape[2]
    Bx, Cx, pre, dt, hs, yraw = s["Bx"], s["Cx"], s["pre"], s["dt"], s["hs"], s["yraw"]
    g = {}
    if "z" in x:
        z = x["z"]
        sg = _sigmoid(z)
        gy = gy_out * z * sg
        g["z"] = gy_out * yraw * (sg * (1.0 + z * (1.0 - sg)))
    else:
        gy = gy_out
    gu = gy * x["D"][None, :, None] if "D" in x else np.zeros_like(u)
    if "D" in x:
        g["D"] = np.sum(gy * u, axis=(0, 2))
    gdt = np.zeros_like(u)
    gA = np.zeros_like(A)
    gBx = np.zeros((batch, dim, N, L))
    gCx = np.zeros((batch, dim, N, L))
    gh = np.array(gh_last, dtype=np.float64)
    for t in range(L - 1, -1, -1):
        gCx[:, :, :, t] = gy[:, :, t, None] * hs[t + 1]
        gh = gh + gy[:, :, t, None] * Cx[:, :, :, t]
        a = np.exp(dt[:, :, t, None] * A[None])
        ga = gh * hs[t]
        gdt[:, :, t] = np.sum(ga * a * A[None], axis=-1) + np.sum(gh * Bx[:, :, :, t], axis=-1) * u[:, :, t]
        gA += np.sum(ga * a * dt[:, :, t, None], axis=0)
        gu[:, :, t] += np.sum(gh * Bx[:, :, :, t], axis=-1) * dt[:, :, t]
        gBx[:, :, :, t] = gh * (dt[:, :, t] * u[:, :, t])[:, :, None]
        gh = gh * a
    gpre = gdt * _sigmoid(pre) if softplus else gdt
    g.update(u=gu, delta=gpre, A=gA)
    rep = dim // G if G else 0
    g["B"] = gBx.reshape(batch, G, rep, N, L).sum(axis=2) if dim else np.zeros_like(x["B"])
    g["C"] = gCx.reshape(batch, G, rep, N, L).sum(axis=2) if dim else np.zeros_like(x["C"])
    if "delta_bias" in x:
        g["delta_bias"] = np.sum(gpre, axis=(0, 2))
    if "h0" in x:
        g["h0"] = gh
    return g


def self_check_reference():
    """The VJP above against central finite differences of ref_forward on small problems."""
    rng = np.random.default_rng(12345)
    for softplus in (False, True):
        x = {"u": rng.standard_normal((2, 4, 5)), "A": -np.exp(0.5 * rng.standard_normal((4, 3))),
             "B": rng.standard_normal((2, 2, 3, 5)), "C": rng.standard_normal((2, 2, 3, 5)),
             "D": rng.standard_normal(4), "z": rng.standard_normal((2, 4, 5)),
             "delta_bias": rng.uniform(-0.5, 0.5, 4), "h0": rng.standard_normal((2, 4, 3))}
        x["delta"] = rng.uniform(-2, 1, (2, 4, 5)) if softplus else rng.uniform(0.05, 0.6, (2, 4, 5))
        wy, wh = rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 4, 3))
        g = ref_vjp(x, softplus, wy, wh)

        def loss(xx):
            y, h, _ = ref_forward(xx, softplus)
            return np.sum(y * wy) + np.sum(h * wh)

        for k in x:
            fd = np.zeros_like(x[k])
            flat = x[k].reshape(-1)
            for i in range(flat.size):
                v = flat[i]
                flat[i] = v + 1e-6
                lp = loss(x)
                flat[i] = v - 1e-6
                lm = loss(x)
                flat[i] = v
                fd.reshape(-1)[i] = (lp - lm) / 2e-6
            e = np.linalg.norm(g[k] - fd) / max(np.linalg.norm(fd), 1e-30)
            if e > 1e-6:
                raise AssertionError("fuzz reference VJP d%s: rel err %.3g vs finite differences" % (k, e))


# ================================================================================================
# problems


class Case(Exception):
    """A failed check inside a case (the message says what)."""


_NOTES = []


def note(text):
    """What the current case is (printed with its failure)."""
    _NOTES.append(text)
    return text


TOL = None  # dtype -> forward tolerance; set in the worker
GTOL = None


def seq_to(x, layout):  # logical (batch, dim, L) -> memory layout
    return np.ascontiguousarray(x.transpose(0, 2, 1)) if layout == "BLD" else x


def seq_from(x, layout):
    return x.transpose(0, 2, 1) if layout == "BLD" else x


def bc_to(x, layout, rank3):  # logical (batch, G, N, L)
    m = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if layout == "BLD" else x
    if rank3:
        m = m[:, :, 0, :] if layout == "BLD" else m[:, 0]
    return m


def bc_from(m, layout, rank3):
    if rank3:
        m = m[:, :, None, :] if layout == "BLD" else m[:, None]
    return m.transpose(0, 2, 3, 1) if layout == "BLD" else m


def rounded(v, dtype):
    return tf.cast(tf.cast(v, dtype), tf.float64).numpy()


class Problem:
    """Random sizes, options and values; x holds the logical float64 values the op really sees
    (rounded to T for u, delta, z, B, C; to float32 for the rest)."""

    def __init__(self, rng, empty_p=0.08, dtypes=None, long_p=0.12):
        r = rng.random
        self.layout = "BLD" if r() < 0.6 else "BDL"
        dtypes = dtypes or (tf.float32,) * 6 + (tf.float16,) * 2 + (tf.bfloat16,) * 2
        self.dtype = dtypes[rng.integers(len(dtypes))]
        empty = r() < empty_p
        self.batch = int(rng.integers(1, 4))
        self.L = int(rng.integers(71, 210)) if r() < long_p else int(rng.integers(1, 70)) if r() < 0.5 else int(rng.integers(1, 9))
        self.dim = int(rng.integers(1, 13))
        self.N = int(rng.integers(65, 72)) if r() < 0.04 else int(rng.integers(1, 17))
        if empty:
            which = rng.integers(3)
            if which == 0:
                self.batch = 0
            elif which == 1:
                self.L = 0
            else:
                self.dim = 0
            if r() < 0.3:
                self.N = 0
        divs = [g for g in range(1, self.dim + 1) if self.dim % g == 0] if self.dim else [1, 2, 3]
        self.G = int(divs[rng.integers(len(divs))])
        self.rank3 = self.G == 1 and r() < 0.5
        self.opts = {k: bool(r() < 0.5) for k in ("D", "z", "delta_bias", "h0")}
        self.softplus = bool(r() < 0.5)
        self.ret = bool(r() < 0.5)
        self.save_checkpoint = bool(r() < 0.7)
        b, d, L, N, G = self.batch, self.dim, self.L, self.N, self.G
        f = rng.standard_normal
        x = {"u": f((b, d, L)),
             "delta": rng.uniform(-3.0, 1.0, (b, d, L)) if self.softplus else rng.uniform(0.05, 0.6, (b, d, L)),
             "A": -np.exp(0.5 * f((d, N))), "B": f((b, G, N, L)), "C": f((b, G, N, L))}
        if self.opts["D"]:
            x["D"] = f(d)
        if self.opts["z"]:
            x["z"] = f((b, d, L))
        if self.opts["delta_bias"]:  # without softplus, delta + delta_bias stays positive (a stable scan)
            x["delta_bias"] = rng.uniform(-0.5, 0.5, d) if self.softplus else rng.uniform(-0.04, 0.5, d)
        if self.opts["h0"]:
            x["h0"] = f((b, d, N))
        # how each float32 operand is handed over (the cast rule): a float32 tensor, float64 NumPy,
        # a float16 tensor (then the op sees the float16 value), a Python list
        self.form = {}
        for k in ("A", "D", "delta_bias", "h0"):
            if k in x:
                c = rng.integers(10)
                # (a list of an empty array loses its shape: no list then)
                self.form[k] = "f64np" if c < 2 else "f16" if c < 3 else \
                    "list" if c < 4 and k != "h0" and x[k].size else "f32"
        for k in ("u", "delta", "z", "B", "C"):
            if k in x:
                x[k] = rounded(x[k], self.dtype)
        for k in ("A", "D", "delta_bias", "h0"):
            if k in x:
                x[k] = rounded(x[k], tf.float16) if self.form[k] == "f16" else x[k].astype(np.float32).astype(np.float64)
        self.x = x
        note(self.describe())

    @property
    def empty(self):
        return self.batch == 0 or self.L == 0 or self.dim == 0

    def describe(self):
        return ("%s %s b=%d L=%d dim=%d N=%d G=%d%s opts=%s sp=%d ret=%d ck=%d forms=%s"
                % (self.dtype.name, self.layout, self.batch, self.L, self.dim, self.N, self.G,
                   " rank3" if self.rank3 else "", "".join(k[0] for k, v in self.opts.items() if v) or "-",
                   self.softplus, self.ret, self.save_checkpoint, self.form))

    def arg(self, k):
        """The argument as the user hands it to selective_scan."""
        v = self.x[k]
        if k in ("u", "delta", "z"):
            return tf.constant(seq_to(v, self.layout), self.dtype)
        if k in ("B", "C"):
            return tf.constant(bc_to(v, self.layout, self.rank3), self.dtype)
        form = self.form.get(k, "f32")
        if form == "f64np":
            return np.array(v, dtype=np.float64)
        if form == "f16":
            return tf.constant(v, tf.float16)
        if form == "list":
            return v.tolist()
        return tf.constant(v, tf.float32)

    def args(self):
        return {k: self.arg(k) for k in self.x}

    def kwargs(self):
        return dict(delta_softplus=self.softplus, return_last_state=self.ret, layout=self.layout,
                    save_checkpoint=self.save_checkpoint)


def call_scan(a, kw, mode="eager"):
    """selective_scan on the argument dict a; mode eager, static (tf.function with the inputs'
    shapes) or dynamic (every dimension unknown; B / C of unknown rank)."""
    keys = [k for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0") if k in a]

    def f(*vals):
        d = dict(zip(keys, vals))
        return selective_scan(d["u"], d["delta"], d["A"], d["B"], d["C"], D=d.get("D"), z=d.get("z"),
                              delta_bias=d.get("delta_bias"), h0=d.get("h0"), **kw)

    if mode == "eager":
        return f(*[a[k] for k in keys])
    tens = [a[k] if isinstance(a[k], tf.Tensor) else tf.convert_to_tensor(a[k]) for k in keys]
    if mode == "static":
        spec = [tf.TensorSpec(t.shape, t.dtype) for t in tens]
    else:
        spec = [tf.TensorSpec(None if k in ("B", "C") else [None] * t.shape.rank, t.dtype)
                for k, t in zip(keys, tens)]
    return tf.function(f, input_signature=spec, autograph=False)(*tens)


def snapshot(a):
    out = {}
    for k, v in a.items():
        if isinstance(v, (tf.Tensor, np.ndarray)):
            t = v.numpy() if isinstance(v, tf.Tensor) else v
            out[k] = (str(t.dtype), t.shape, t.tobytes())
    return out


def check_unchanged(a, snap):
    for k, (dt, shape, data) in snap.items():
        v = a[k]
        t = v.numpy() if isinstance(v, tf.Tensor) else v
        if (str(t.dtype), t.shape, t.tobytes()) != (dt, shape, data):
            raise Case("input %s changed by the call" % k)


def rel_err(out, ref):
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def compare(name, out, ref, tol):
    """out (the op's, float64) against ref: same shape; where ref is finite out is finite and
    close (norm-wise); where ref is NaN / Inf, out is NaN / Inf."""
    if out.shape != ref.shape:
        raise Case("%s: shape %s, reference %s" % (name, out.shape, ref.shape))
    fin = np.isfinite(ref)
    if np.any(np.isfinite(out[~fin])):
        raise Case("%s: finite where the reference is NaN / Inf (%d places)" % (name, int(np.sum(np.isfinite(out[~fin])))))
    if not np.all(np.isfinite(out[fin])):
        raise Case("%s: NaN / Inf where the reference is finite (%d places)" % (name, int(np.sum(~np.isfinite(out[fin])))))
    e = rel_err(out[fin], ref[fin])
    if e > tol:
        raise Case("%s: rel err %.3g > %.3g" % (name, e, tol))
    return e


# ================================================================================================
# categories: each case(rng) returns a short description or raises Case / any exception


def case_forward(rng):
    p = Problem(rng)
    nonfinite = None
    if rng.random() < 0.12 and not p.empty:  # NaN / Inf in one element of one input
        k = list(p.x)[rng.integers(len(p.x))]
        v = p.x[k].reshape(-1)
        if v.size:
            val = [np.nan, np.inf, -np.inf][rng.integers(3)] if k not in ("A",) else np.nan
            v[rng.integers(v.size)] = val
            nonfinite = "%s=%s" % (k, val)
    mode = note("eager" if rng.random() < 0.75 else "static" if rng.random() < 0.5 else "dynamic")
    if nonfinite:
        note("nonfinite " + nonfinite)
    a = p.args()
    snap = snapshot(a)
    out = call_scan(a, p.kwargs(), mode)
    check_unchanged(a, snap)
    y, h = out if p.ret else (out, None)
    if y.dtype != p.dtype:
        raise Case("y has dtype %s, want %s" % (y.dtype.name, p.dtype.name))
    y_ref, h_ref, _ = ref_forward(p.x, p.softplus)
    compare("y", seq_from(tf.cast(y, tf.float64).numpy(), p.layout), y_ref, TOL[p.dtype])
    if p.ret:
        if h.dtype != tf.float32:
            raise Case("h_last dtype %s" % h.dtype.name)
        compare("h_last", h.numpy().astype(np.float64), h_ref, TOL[tf.float32])  # float32: no rounding
    return "%s %s%s" % (mode, p.describe(), " nonfinite " + nonfinite if nonfinite else "")


def case_gradient(rng):
    p = Problem(rng, dtypes=(tf.float32,) * 5 + (tf.float16, tf.bfloat16), long_p=0.08)
    for k in p.form:  # float32 tensors the tape can watch (the cast rule has its cases in forward)
        p.form[k] = "f32"
        p.x[k] = p.x[k].astype(np.float32).astype(np.float64)
    a = p.args()
    snap = snapshot(a)
    wy = rng.standard_normal((p.batch, p.dim, p.L))
    wy = rounded(wy, p.dtype)  # dy reaches the op in T
    wh = rng.standard_normal((p.batch, p.dim, p.N)).astype(np.float32).astype(np.float64) if p.ret else None
    use_y = not p.ret or rng.random() < 0.8
    if not use_y:
        wy = np.zeros_like(wy)
    mode = note("eager" if rng.random() < 0.85 else "dynamic")
    keys = sorted(a)

    def run(*vals):
        d = dict(zip(keys, vals))
        with tf.GradientTape() as tape:
            for v in vals:
                tape.watch(v)
            out = selective_scan(d["u"], d["delta"], d["A"], d["B"], d["C"], D=d.get("D"), z=d.get("z"),
                                 delta_bias=d.get("delta_bias"), h0=d.get("h0"), **p.kwargs())
            y, h = out if p.ret else (out, None)
            loss = tf.constant(0.0, tf.float64)
            if use_y:
                loss += tf.reduce_sum(tf.cast(y, tf.float64) * seq_to(wy, p.layout))
            if p.ret:
                loss += tf.reduce_sum(tf.cast(h, tf.float64) * wh)
        return tape.gradient(loss, list(vals))

    vals = [a[k] for k in keys]
    if mode == "eager":
        grads = run(*vals)
    else:
        spec = [tf.TensorSpec([None] * v.shape.rank, v.dtype) for v in vals]
        grads = tf.function(run, input_signature=spec, autograph=False)(*vals)
    check_unchanged(a, snap)
    ref = ref_vjp(p.x, p.softplus, wy, wh if p.ret else np.zeros((p.batch, p.dim, p.N)))
    for k, gv in zip(keys, grads):
        if gv is None:
            raise Case("no gradient for %s" % k)
        if gv.dtype != a[k].dtype:
            raise Case("d%s has dtype %s, want %s" % (k, gv.dtype.name, a[k].dtype.name))
        tol = GTOL[gv.dtype]  # by the gradient's own dtype (float32 ones: no rounding)
        gv = tf.cast(gv, tf.float64).numpy()
        if k in ("u", "delta", "z"):
            gv = seq_from(gv, p.layout)
        elif k in ("B", "C"):
            gv = bc_from(gv, p.layout, p.rank3)
        compare("d" + k, gv, ref[k], tol)
    return "%s %s%s" % (mode, p.describe(), "" if use_y else " (loss on h_last only)")


def raw_inputs(p):
    """The raw op's nine forward inputs and attrs for problem p (B / C always rank 4)."""
    T = p.dtype
    x = p.x
    seq = lambda k: tf.constant(seq_to(x[k], p.layout), T)  # noqa: E731
    bc = lambda k: tf.constant(bc_to(x[k], p.layout, False), T)  # noqa: E731
    f32 = lambda k: tf.constant(x[k], tf.float32) if k in x else tf.zeros([0])  # noqa: E731
    ins = [seq("u"), seq("delta"), tf.constant(x["A"], tf.float32), bc("B"), bc("C"), f32("D"),
           seq("z") if "z" in x else tf.zeros([0], T), f32("delta_bias"), f32("h0"),
           tf.zeros([0], tf.int64)]  # cu_seqlens: absent
    attrs = dict(delta_softplus=p.softplus, has_d="D" in x, has_z="z" in x, has_delta_bias="delta_bias" in x,
                 has_h0="h0" in x, layout=p.layout)
    return ins, attrs


NAMES9 = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0")


def case_raw(rng):
    p = Problem(rng, long_p=0.08)
    p.form = {k: "f32" for k in p.form}
    p.x = {k: (v.astype(np.float32).astype(np.float64) if k in ("A", "D", "delta_bias", "h0") else v)
           for k, v in p.x.items()}
    ins, attrs = raw_inputs(p)
    a = dict(zip(NAMES9, ins))
    snap = snapshot(a)
    T = p.dtype
    dy_np = rounded(rng.standard_normal((p.batch, p.dim, p.L)), T)
    dy = tf.constant(seq_to(dy_np, p.layout), T)
    has_dh = p.ret and rng.random() < 0.8
    dh_np = rng.standard_normal((p.batch, p.dim, p.N)).astype(np.float32).astype(np.float64)
    dh = tf.constant(dh_np, tf.float32) if has_dh else tf.zeros([0])
    kind = rng.integers(10)
    if kind < 5:  # good forward + backward
        y, h, ck = OPS.selscan_forward(*ins, return_last_state=p.ret, save_checkpoint=p.save_checkpoint, **attrs)
        check_unchanged(a, snap)
        y_ref, h_ref, _ = ref_forward(p.x, p.softplus)
        compare("y", seq_from(tf.cast(y, tf.float64).numpy(), p.layout), y_ref, TOL[T])
        if p.ret:
            compare("h_last", h.numpy().astype(np.float64), h_ref, TOL[tf.float32])  # float32: no rounding
        elif h.shape != (0,):
            raise Case("h_last without return_last_state has shape %s" % (h.shape,))
        if ck.shape.rank != 1:
            raise Case("checkpoint rank %d" % ck.shape.rank)
        which = rng.integers(3)  # its own checkpoint, none, or one of another size (not read)
        ck_in = ck if which == 0 else tf.zeros([0]) if which == 1 else tf.zeros([int(ck.shape[0]) + 3])
        grads = OPS.selscan_backward(*ins, dy, dh, ck_in, has_dh_last=has_dh, **attrs)
        check_unchanged(a, snap)
        ref = ref_vjp(p.x, p.softplus, dy_np, dh_np if has_dh else np.zeros_like(dh_np))
        for k, gv in zip(NAMES9, grads):
            if k not in p.x:
                if gv.shape != (0,):
                    raise Case("d%s of an absent operand has shape %s" % (k, gv.shape))
                continue
            tol = GTOL[gv.dtype]  # by the gradient's own dtype (float32 ones: no rounding)
            gv = tf.cast(gv, tf.float64).numpy()
            gv = seq_from(gv, p.layout) if k in ("u", "delta", "z") else bc_from(gv, p.layout, False) if k in ("B", "C") else gv
            compare("d" + k, gv, ref[k], tol)
        return "good ck=%s %s" % (("own", "none", "other size")[which], p.describe())
    # bad raw calls
    ins = list(ins)
    back = rng.random() < 0.5
    k = ["D", "z", "delta_bias", "h0", "dh_last", "checkpoint", "dy", "present_empty"][rng.integers(8)]
    if k in ("dh_last", "checkpoint", "dy"):
        back = True
    extra = dict(has_dh_last=has_dh)
    ck_in = tf.zeros([0])
    needle = k
    if k in ("D", "z", "delta_bias", "h0"):  # absent (has_* false) but given non-empty
        i = NAMES9.index(k)
        attr = {"D": "has_d", "z": "has_z", "delta_bias": "has_delta_bias", "h0": "has_h0"}[k]
        attrs[attr] = False
        shape = {"D": [max(p.dim, 1)], "z": [2, 3, 1], "delta_bias": [max(p.dim, 1)], "h0": [1, max(p.dim, 1), 2]}[k]
        ins[i] = tf.ones(shape, T if k == "z" else tf.float32)
        needle = "%s is given" % k
    elif k == "dh_last":
        if rng.random() < 0.5:  # given but not flagged
            dh, extra["has_dh_last"] = tf.ones([1, 2, 3]), False
            needle = "dh_last is given"
        else:  # flagged, wrong shape
            dh, extra["has_dh_last"] = tf.ones([p.batch + 1, p.dim, p.N]), True
            needle = "argument 'dh_last': wrong shape"
    elif k == "checkpoint":
        ck_in = tf.zeros([2, 3]) if rng.random() < 0.5 else tf.zeros([])
        needle = "argument 'checkpoint': wrong shape"
    elif k == "dy":
        dy = tf.zeros([p.batch + 1] + list(dy.shape[1:]), T)
        needle = "argument 'dy': wrong shape"
    else:  # present but empty
        # (with dim 0 an empty D / delta_bias is the right shape: then z or h0)
        k2 = (["D", "delta_bias"] if p.dim else [])[:2] + ["h0", "z"]
        k2 = k2[rng.integers(len(k2))]
        attr = {"D": "has_d", "z": "has_z", "delta_bias": "has_delta_bias", "h0": "has_h0"}[k2]
        attrs[attr] = True
        ins[NAMES9.index(k2)] = tf.zeros([0], T if k2 == "z" else tf.float32)
        needle = "argument '%s': wrong shape" % k2
    a = dict(zip(NAMES9, ins))
    snap = snapshot(a)
    try:
        if back:
            OPS.selscan_backward(*ins, dy, dh, ck_in, **extra, **attrs)
        else:
            OPS.selscan_forward(*ins, return_last_state=p.ret, **attrs)
    except tf.errors.InvalidArgumentError as e:
        if needle not in str(e):
            raise Case("raw %s: message lacks %r: %s" % (k, needle, str(e)[:300]))
        check_unchanged(a, snap)
        return "bad %s (%s) %s" % (k, "backward" if back else "forward", p.describe())
    raise Case("raw %s (%s): no error (wanted %r)" % (k, "backward" if back else "forward", needle))


def _bad_dtype(rng, p, a):
    """A wrong dtype for one argument: (argument, expected needle)."""
    k = ["u", "delta", "B", "C", "z", "A", "D", "delta_bias", "h0"][rng.integers(9)]
    if k not in a:
        k = "delta"
    v = a[k]
    t = v if isinstance(v, tf.Tensor) else tf.convert_to_tensor(v)
    if k == "u":
        bad = [tf.float64, tf.int32, tf.complex64, tf.int64, tf.bool][rng.integers(5)]
        a[k] = tf.cast(tf.cast(t, tf.float32), bad) if bad != tf.bool else tf.cast(tf.cast(t, tf.float32) > 0, tf.bool)
        return "u %s" % bad.name, "u must be float32, float16 or bfloat16"
    if k in ("delta", "B", "C", "z"):
        others = [d for d in (tf.float32, tf.float16, tf.bfloat16, tf.float64) if d != p.dtype]
        bad = others[rng.integers(len(others))]
        if rng.random() < 0.3 and bad == tf.float64:
            a[k] = tf.cast(t, tf.float64).numpy()  # a NumPy float64 array: refused the same way
        else:
            a[k] = tf.cast(t, bad)
        return "%s %s%s" % (k, bad.name, " (NumPy)" if isinstance(a[k], np.ndarray) else ""), "%s has dtype" % k
    bad = [tf.int32, tf.complex64, tf.bool, tf.complex128][rng.integers(4)]
    t32 = tf.cast(t, tf.float32)
    a[k] = tf.cast(t32 > 0, tf.bool) if bad == tf.bool else tf.cast(t32, bad)
    return "%s %s" % (k, bad.name), "%s must be" % k


def _bad_shape(rng, p, a):
    """One axis or the rank of one argument changed: (argument, acceptable names)."""
    keys = [k for k in a if isinstance(a[k], (tf.Tensor, np.ndarray, list))]
    k = keys[rng.integers(len(keys))]
    v = a[k]
    t = v if isinstance(v, tf.Tensor) else tf.constant(np.asarray(v, np.float64 if isinstance(v, np.ndarray) else np.float32))
    shape = list(t.shape)
    # the arguments a mismatch may be blamed on: the one changed, or the one it is compared with
    peers = {"u": ("u", "delta", "z", "A", "B", "C", "D", "delta_bias", "h0"), "delta": ("delta",), "z": ("z",),
             "A": ("A", "B"), "B": ("B", "C"), "C": ("C",), "D": ("D",), "delta_bias": ("delta_bias",),
             "h0": ("h0",)}[k]
    if rng.random() < 0.3 or not shape:  # the rank changed
        if k in ("B", "C"):  # rank 3 and 4 are both legal for B / C: 2 or 5
            if rng.random() < 0.5:
                new = tf.reshape(t, [int(np.prod(shape[:-1])), shape[-1]])
            else:
                new = t[..., None] if len(shape) == 4 else t[..., None, None]
        elif len(shape) > 1 and rng.random() < 0.5:
            new = tf.reshape(t, shape[:-2] + [shape[-2] * shape[-1]])  # the last two axes merged
        else:
            new = t[..., None]
        if k == "u":
            peers = ("u", "delta")
    else:
        ax = int(rng.integers(len(shape)))
        delta = int(rng.choice([-1, 1, 2])) if shape[ax] > 0 else int(rng.integers(1, 3))
        shape[ax] = max(shape[ax] + delta, 0)
        if shape[ax] == t.shape[ax]:
            shape[ax] += 1
        new = tf.zeros(shape, t.dtype) if not isinstance(v, np.ndarray) else np.zeros(shape, v.dtype)
        if k == "u":
            peers = ("u", "delta")
    a[k] = new if not isinstance(v, np.ndarray) or isinstance(new, np.ndarray) else new.numpy()
    return "%s %s -> %s" % (k, tuple(t.shape), tuple(new.shape)), tuple(x for n in peers for x in ("%s must" % n, "argument '%s'" % n))


def case_bad(rng):
    kind = rng.integers(100)
    p = Problem(rng, long_p=0.0, empty_p=0.0 if 68 <= kind < 73 else 0.08)
    a = p.args()
    kw = p.kwargs()
    types = (tf.errors.InvalidArgumentError, ValueError, TypeError)
    if kind < 25:
        what, needle = _bad_dtype(rng, p, a)
        needles = (needle,)
        types = (TypeError,)
    elif kind < 60:
        what, needles = _bad_shape(rng, p, a)
    elif kind < 68:  # the group count: 0 or not dividing dim, B and C alike
        bad_g = [g for g in range(0, p.dim + 3) if g == 0 or (p.dim % g != 0)]
        g = int(bad_g[rng.integers(len(bad_g))])
        shp = (p.batch, p.L, g, p.N) if p.layout == "BLD" else (p.batch, g, p.N, p.L)
        a["B"], a["C"] = tf.zeros(shp, p.dtype), tf.zeros(shp, p.dtype)
        what, needles = "groups=%d" % g, ("argument 'B': does not divide dim",)
    elif kind < 73:  # N = 0 on a non-empty problem
        shp = (p.batch, p.L, 1, 0) if p.layout == "BLD" else (p.batch, 1, 0, p.L)
        a["A"] = tf.zeros([p.dim, 0])
        a["B"], a["C"] = tf.zeros(shp, p.dtype), tf.zeros(shp, p.dtype)
        a.pop("h0", None)
        what, needles = "N=0", ("argument 'A': not positive",)
    elif kind < 85:  # not a dense tensor
        keys = ["u", "delta", "A", "B", "C"] + [k for k in ("D", "z", "delta_bias", "h0") if k in a]
        k = keys[rng.integers(len(keys))]
        c = rng.integers(4)
        if c == 0 and k in ("u", "delta", "A", "B", "C"):
            a[k], needles = None, ("%s is required" % k,)
        elif c == 1:
            t = a[k] if isinstance(a[k], tf.Tensor) else tf.convert_to_tensor(a[k])
            a[k], needles = tf.sparse.from_dense(tf.reshape(t, [-1, 1])), ("%s must be a dense tensor" % k,)
        elif c == 2:
            a[k], needles = object(), ("%s cannot be converted" % k,)
        else:
            a[k] = "text"
            needles = ("u must be float32",) if k == "u" else ("%s has dtype string" % k,) \
                if k in ("delta", "B", "C", "z") else ("%s must be" % k,)
        types = (TypeError,)
        what = "%s not a tensor" % k
    elif kind < 95:  # a non-bool option
        o = ["delta_softplus", "return_last_state", "save_checkpoint"][rng.integers(3)]
        kw[o] = ["False", [0], 1, None, 0.0, tf.constant(True)][rng.integers(6)]
        what, needles, types = "option %s=%r" % (o, kw[o]), ("%s must be a bool" % o,), (TypeError,)
    else:
        kw["layout"] = ["bld", "NLC", b"BLD", None, 3][rng.integers(5)]
        what, needles, types = "layout=%r" % (kw["layout"],), ("layout must be",), (ValueError,)
    mode = "eager" if rng.random() < 0.7 else "static" if rng.random() < 0.5 else "dynamic"
    if mode != "eager" and not all(isinstance(v, (tf.Tensor, np.ndarray, list)) for v in a.values()):
        mode = "eager"  # a graph signature needs tensors
    note("%s, %s" % (what, mode))
    snap = snapshot(a)
    try:
        call_scan(a, kw, mode)
    except types as e:
        msg = str(e)
        if not any(n in msg for n in needles):
            raise Case("%s (%s): %s without any of %s: %s" % (what, mode, type(e).__name__, needles, msg[:300]))
        check_unchanged(a, snap)
        return "%s (%s) -> %s; %s" % (what, mode, type(e).__name__, p.describe())
    raise Case("%s (%s): no error, wanted one of %s" % (what, mode, needles))


def case_second(rng):
    p = Problem(rng, empty_p=0.0, long_p=0.0, dtypes=(tf.float32,))
    p.form = {k: "f32" for k in p.form}
    a = p.args()
    keys = list(a)
    target = keys[rng.integers(len(keys))]
    how = ["nested", "jacobian", "forward_acc", "nested_in_function"][rng.integers(4)]
    kw = p.kwargs()

    def first(ta):
        d = dict(a)
        d[target] = ta
        out = selective_scan(d["u"], d["delta"], d["A"], d["B"], d["C"], D=d.get("D"), z=d.get("z"),
                             delta_bias=d.get("delta_bias"), h0=d.get("h0"), **kw)
        y = out[0] if p.ret else out
        return tf.reduce_sum(tf.cast(y, tf.float32) ** 2)

    def nested():
        x = a[target]
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = first(x)
            g = inner.gradient(loss, x)
            l2 = tf.reduce_sum(g * g)
        return outer.gradient(l2, x)

    def jac():
        x = a[target]
        with tf.GradientTape(persistent=True) as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = first(x)
            g = inner.gradient(loss, x)
        return outer.jacobian(g, x, experimental_use_pfor=False)

    def fwd():
        x = a[target]
        with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as acc:
            loss = first(x)
        return acc.jvp(loss)

    fn = {"nested": nested, "jacobian": jac, "forward_acc": fwd,
          "nested_in_function": lambda: tf.function(nested, autograph=False)()}[how]
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001  (tf.function may wrap the type; the message decides)
        if "second-order derivatives of selective_scan are not implemented" not in str(e):
            raise Case("%s w.r.t. %s: %s without the second-order message: %s" % (how, target, type(e).__name__,
                                                                                  str(e)[:300]))
        return "%s w.r.t. %s -> %s; %s" % (how, target, type(e).__name__, p.describe())
    raise Case("%s w.r.t. %s: returned %s instead of the clear error" % (how, target, type(r).__name__))


def case_layers(rng):
    if rng.random() < 0.6:  # SelectiveScan
        dim, n = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        kw = dict(dim=dim, d_state=n, layout="BLD" if rng.random() < 0.5 else "BDL", dt_min=1e-3, dt_max=0.1,
                  delta_softplus=bool(rng.random() < 0.7))
        bad = rng.random() < 0.5
        if bad:
            table = {"dim": [2.5, 0, -3, True, "4", None], "d_state": [0, 1.5, -1, False],
                     "dt_min": [0.0, -1.0, 0.5, float("nan"), "x"], "dt_max": [1e-4, float("inf"), None],
                     "delta_softplus": ["True", 1, None], "layout": ["bld", None, 7]}
            k = list(table)[rng.integers(len(table))]
            kw[k] = table[k][rng.integers(len(table[k]))]
            needles = ("dt_min and dt_max", k) if k in ("dt_min", "dt_max") else (k,)
            try:
                SelectiveScan(**kw)
            except (ValueError, TypeError) as e:
                if not any(n in str(e) for n in needles):
                    raise Case("SelectiveScan(%s=%r): message lacks %r: %s" % (k, kw[k], needles, e))
                return "SelectiveScan bad %s=%r" % (k, kw[k])
            raise Case("SelectiveScan(%s=%r): accepted" % (k, kw[k]))
        layer = SelectiveScan(**kw)
        note("SelectiveScan %s" % kw)
        batch, L = int(rng.integers(1, 3)), int(rng.integers(1, 30))
        f = rng.standard_normal
        xl = {"u": f((batch, dim, L)),
              # without softplus, delta offsets the layer's delta_bias (softplus^-1 of dt_min..dt_max,
              # about -6.9 .. -2.3) so that the step stays positive (a stable scan)
              "delta": rng.uniform(-2, 1, (batch, dim, L)) if kw["delta_softplus"] else rng.uniform(7.0, 7.6, (batch, dim, L)),
              "B": f((batch, 1, n, L)), "C": f((batch, 1, n, L))}
        xl = {k: v.astype(np.float32).astype(np.float64) for k, v in xl.items()}
        lay = kw["layout"]
        args = [tf.constant(seq_to(xl["u"], lay), tf.float32), tf.constant(seq_to(xl["delta"], lay), tf.float32),
                tf.constant(bc_to(xl["B"], lay, True), tf.float32), tf.constant(bc_to(xl["C"], lay, True), tf.float32)]
        y = layer(*args)
        ref_x = dict(xl, A=-np.exp(layer.A_log.numpy().astype(np.float64)), D=layer.D.numpy().astype(np.float64),
                     delta_bias=layer.delta_bias.numpy().astype(np.float64))
        ref_x["A"] = ref_x["A"].astype(np.float32).astype(np.float64)
        y_ref, _, _ = ref_forward(ref_x, kw["delta_softplus"])
        compare("SelectiveScan y", seq_from(y.numpy().astype(np.float64), lay), y_ref, 1e-4)
        return "SelectiveScan good %s" % kw
    # MambaVisionMixer
    d_model = int(rng.integers(1, 9)) * 2
    kw = dict(d_model=d_model, d_state=int(rng.integers(1, 9)), d_conv=int(rng.integers(1, 5)), expand=1)
    if rng.random() < 0.5:
        k = ["d_model", "d_state", "d_conv", "expand", "dt_rank", "dt_min"][rng.integers(6)]
        kw[k] = {"d_model": 2.5, "d_state": 0, "d_conv": -1, "expand": 0, "dt_rank": 1.5, "dt_min": 0.0}[k]
        needle = "dt_min and dt_max" if k == "dt_min" else k
        try:
            MambaVisionMixer(**kw)
        except (ValueError, TypeError) as e:
            if needle not in str(e):
                raise Case("MambaVisionMixer(%s=%r): message lacks %r: %s" % (k, kw[k], needle, e))
            return "MambaVisionMixer bad %s=%r" % (k, kw[k])
        raise Case("MambaVisionMixer(%s=%r): accepted" % (k, kw[k]))
    m_op = MambaVisionMixer(**kw)
    m_tf = MambaVisionMixer(scan_impl="tf", **kw)
    x = tf.constant(rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 20)), d_model)), tf.float32)
    m_op.build(x.shape)
    m_tf.build(x.shape)
    m_tf.set_weights(m_op.get_weights())
    snap = snapshot({"x": x})
    y_op, y_tf = m_op(x), m_tf(x)
    check_unchanged({"x": x}, snap)
    compare("MambaVisionMixer op vs tf scan", y_op.numpy().astype(np.float64), y_tf.numpy().astype(np.float64), 1e-4)
    return "MambaVisionMixer good %s" % kw


CASE_FNS = {"forward": case_forward, "gradient": case_gradient, "raw": case_raw, "bad": case_bad,
            "second": case_second, "layers": case_layers}


# ================================================================================================
# worker (one subprocess: a chunk of cases) and driver


def worker(seed, plan, verbose):
    """Runs the cases of plan ([[category, start, count], ...]), one JSON line per case (and one
    before it, so that the driver knows which case a crash hit)."""
    global np, tf, selective_scan, SelectiveScan, MambaVisionMixer, OPS, TOL, GTOL
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np  # noqa: F811
    import tensorflow as tf  # noqa: F811

    tf.get_logger().setLevel("ERROR")
    import selscan_tf
    from selscan_tf import MambaVisionMixer, SelectiveScan, selective_scan  # noqa: F811

    OPS = selscan_tf.load_ops()
    gpus = tf.config.list_physical_devices("GPU")
    print(json.dumps({"device": "GPU (%s)" % ", ".join(g.name for g in gpus) if gpus else "CPU"}), flush=True)
    from test_selscan_tf import lowp_tol  # the TF tests' one rule for float16 / bfloat16 tolerances
    # rel err vs the fp64 reference on the rounded inputs (and cotangent), by the compared tensor's
    # dtype: float32 as measured; float16 / bfloat16 k = 1, the op rounds its float32 result once
    TOL = {t: lowp_tol(t, 5e-5, 1) for t in (tf.float32, tf.float16, tf.bfloat16)}
    GTOL = {t: lowp_tol(t, 2e-4, 1) for t in (tf.float32, tf.float16, tf.bfloat16)}
    self_check_reference()
    for cat, start, count in plan:
        ci = CATEGORIES.index(cat)
        for i in range(start, start + count):
            print(json.dumps({"start": [cat, i]}), flush=True)
            if os.environ.get("SELSCAN_FUZZ_CRASH") == "%s:%d" % (cat, i):
                os.abort()  # the crash guard's own test: this case must come back as a failure
            del _NOTES[:]
            rng = np.random.default_rng([seed, ci, i])
            t0 = time.time()
            try:
                info = CASE_FNS[cat](rng)
                res = {"cat": cat, "i": i, "ok": True, "info": info}
            except Exception as e:  # noqa: BLE001
                res = {"cat": cat, "i": i, "ok": False, "info": "%s: %s [case: %s]"
                       % (type(e).__name__, str(e)[:600], "; ".join(_NOTES))}
                if verbose or not isinstance(e, Case):
                    res["trace"] = traceback.format_exc(limit=8)[-2000:]
            res["s"] = round(time.time() - t0, 3)
            print(json.dumps(res), flush=True)


def run_worker(args, plan):
    """Runs plan in a subprocess; after a crash, marks the case failed and runs the rest of the plan
    in a new one. Returns (results, crash texts)."""
    results, crashes = [], []
    while plan:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(args.seed),
               "--plan", json.dumps(plan)] + (["--verbose"] if args.verbose else [])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        current, done = None, set()
        for line in proc.stdout.splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "device" in d:
                DEVICES.add(d["device"])
            elif "start" in d:
                current = tuple(d["start"])
            elif "i" in d:
                results.append(d)
                done.add((d["cat"], d["i"]))
                current = None
        todo = [(c, i) for c, s, n in plan for i in range(s, s + n) if (c, i) not in done]
        if proc.returncode == 0 and not todo:
            break
        where = "%s:%s" % current if current else "start-up"
        crashes.append("worker exited with status %d during case %s; stderr tail: %s"
                       % (proc.returncode, where, proc.stderr[-800:]))
        if current is None:  # died outside a case: report the rest as not run, once
            results += [{"cat": c, "i": i, "ok": False, "s": 0.0, "info": "not run: " + crashes[-1]} for c, i in todo]
            break
        results.append({"cat": current[0], "i": current[1], "ok": False, "s": 0.0, "info": "CRASH: " + crashes[-1]})
        rest = [(c, i) for c, i in todo if (c, i) != current]
        plan = [[c, i, 1] for c, i in rest]
    return results, crashes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=0, help="about this many cases in all (default: the CI budget, %d)"
                    % sum(DEFAULT_CASES.values()))
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes at a time")
    ap.add_argument("--only", default="", help="CATEGORY or CATEGORY:INDEX")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.seed, json.loads(args.plan), args.verbose)
        return 0

    counts = dict(DEFAULT_CASES)
    if args.cases:
        scale = args.cases / sum(DEFAULT_CASES.values())
        counts = {c: max(1, int(round(n * scale))) for c, n in DEFAULT_CASES.items()}
    ranges = {}  # category -> (start, count)
    if args.only:
        cat, _, idx = args.only.partition(":")
        if cat not in CATEGORIES:
            ap.error("--only: category must be one of %s" % (CATEGORIES,))
        if idx:
            ranges = {cat: (int(idx), 1)}
            args.verbose = True
        else:
            ranges = {cat: (0, counts[cat])}
    else:
        ranges = {c: (0, n) for c, n in counts.items()}
    # one long-lived worker per job (TensorFlow's import costs seconds), each with a share of
    # every category
    jobs = max(1, args.jobs)
    plans = [[] for _ in range(jobs)]
    for cat, (start, n) in ranges.items():
        for j in range(jobs):
            lo, hi = start + n * j // jobs, start + n * (j + 1) // jobs
            if hi > lo:
                plans[j].append([cat, lo, hi - lo])
    plans = [p for p in plans if p]
    print("fuzz_tf_ops: seed %d, %d cases (%s), %d workers"
          % (args.seed, sum(n for _, n in ranges.values()), ", ".join("%s %d" % (c, n) for c, (_, n) in ranges.items()),
             len(plans)), flush=True)
    t0 = time.time()
    from concurrent.futures import ThreadPoolExecutor

    results = {c: {} for c in CATEGORIES}
    crashes = []
    with ThreadPoolExecutor(max_workers=len(plans)) as ex:
        for res, cr in ex.map(lambda p: run_worker(args, p), plans):
            crashes += cr
            for r in res:
                results[r["cat"]][r["i"]] = r
    total_p = total_f = 0
    for cat in CATEGORIES:
        res = results[cat]
        if not res:
            continue
        fails = [r for _, r in sorted(res.items()) if not r["ok"]]
        for r in fails:
            print("FAIL %s:%d  %s" % (cat, r["i"], r["info"]))
            if r.get("trace"):
                print("    " + r["trace"].replace("\n", "\n    "))
            print("    again: python %s --seed %d --only %s:%d" % (os.path.basename(__file__), args.seed, cat, r["i"]))
        if args.verbose:
            for _, r in sorted(res.items()):
                if r["ok"]:
                    print("ok   %s:%d  %.2fs  %s" % (cat, r["i"], r["s"], r["info"]))
        n, f = len(res), len(fails)
        total_p += n - f
        total_f += f
        slow = max(res.values(), key=lambda r: r["s"])
        print("%-9s %d cases, %d passed, %d failed  (%.1f s of cases; slowest %s:%d %.2f s)"
              % (cat + ":", n, n - f, f, sum(r["s"] for r in res.values()), cat, slow["i"], slow["s"]))
    for c in crashes:
        print("CRASH " + c)
    print("fuzz wall time %.1f s; ops on %s" % (time.time() - t0, ", ".join(sorted(DEVICES)) or "?"))
    print("total: %d cases, %d passed, %d failed" % (total_p + total_f, total_p, total_f))
    return 1 if total_f else 0


if __name__ == "__main__":
    sys.exit(main())
