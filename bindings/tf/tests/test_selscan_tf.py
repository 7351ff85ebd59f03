"""Tests of the selscan TensorFlow op (make test-tf). Plain Python: prints one line per test and
`N passed, N failed` last; exits non-zero on any failure.

The oracle is an independent fp64 NumPy implementation of the scan (below), written from the
math in selscan.h, not from the library's code. Gradients are checked against central finite
differences of that fp64 reference. Tolerances (relative error ||out - ref|| / ||ref||) are in
TOL, one place; float16 / bfloat16 ones from lowp_tol, the one rule for them.
"""

import itertools
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tensorflow as tf  # noqa: E402

import selscan_tf  # noqa: E402
from selscan_tf import SelectiveScan, selective_scan  # noqa: E402
from runner import raises as expect_error, run_tests  # noqa: E402

# ---- low-precision tolerances (issue 41 item 5): the one rule of the TF tests, as the torch tests'
# _common.lowp_tol and the C suites' tc_tol_lowp (tests/tol_lowp.h) state it.
# u(T) = 2^-p, the unit roundoff of round-to-nearest in T (p significand bits, the implicit one
# counted): rounding x to T moves it by at most u(T) |x|, so rounding a whole result to T moves
# rel_err (a ratio of 2-norms) by at most u(T).
U = {tf.float32: 2.0 ** -24, tf.float16: 2.0 ** -11, tf.bfloat16: 2.0 ** -8}


def lowp_tol(dtype, f32_tol, k, own=None):
    """The bound on rel_err(out, ref) of a result computed with `dtype` tensors, ref the float64
    reference on the same dtype-rounded inputs: f32_tol + k * max(own, u(dtype)) (float32: f32_tol).
    f32_tol: the comparison's float32 tolerance (the op computes in float32: that error stays);
    own: the measured error of a reference that rounds as the layers do (a composite layer: it
    measures their condition; never taken below u), else None: u, the bound of one rounding;
    k: how many such errors lie between out and ref, with its reason where it is used."""
    dtype = tf.as_dtype(dtype)
    if dtype not in (tf.float16, tf.bfloat16):
        return f32_tol
    return f32_tol + k * max(U[dtype] if own is None else own, U[dtype])


# y vs the fp64 reference: float32 as measured; float16 / bfloat16 k = 1, the op rounds its float32
# y once (h_last and the other float32 results: TOL[tf.float32] in any problem)
TOL32 = 2e-5
TOL = {t: lowp_tol(t, TOL32, 1) for t in (tf.float32, tf.float16, tf.bfloat16)}
GRAD_TOL = 1e-4  # float32 op gradient vs fp64 finite differences
GRAD_SAME = 1e-5  # a gradient vs the float32 op's on the same values (same arithmetic, another dtype)
OPTION_NAMES = ("D", "z", "delta_bias", "softplus", "h0", "return_last_state")


# ------------------------------------------------------------------------------------------------
# fp64 reference, logical layout: u (batch, dim, L), B (batch, G, N, L)


def ref_scan(u, delta, A, B, C, D=None, z=None, bias=None, softplus=False, h0=None):
    batch, dim, L = u.shape
    G, N = B.shape[1], B.shape[2]
    Bx = np.repeat(B, dim // G, axis=1)  # (batch, dim, N, L)
    Cx = np.repeat(C, dim // G, axis=1)
    dt = delta + (bias[None, :, None] if bias is not None else 0.0)
    if softplus:
        dt = np.where(dt > 20.0, dt, np.log1p(np.exp(np.minimum(dt, 20.0))))
    h = np.array(h0, dtype=np.float64) if h0 is not None else np.zeros((batch, dim, N))
    y = np.empty((batch, dim, L))
    for t in range(L):
        h = np.exp(dt[:, :, t, None] * A[None]) * h + (dt[:, :, t] * u[:, :, t])[:, :, None] * Bx[:, :, :, t]
        y[:, :, t] = np.sum(Cx[:, :, :, t] * h, axis=-1)
    if D is not None:
        y = y + D[None, :, None] * u
    if z is not None:
        y = y * (z / (1.0 + np.exp(-z)))
    return y, h


def seq_to_layout(x, layout):  # logical (batch, dim, L) -> memory layout
    return np.ascontiguousarray(x.transpose(0, 2, 1)) if layout == "BLD" else x


def seq_from_layout(x, layout):
    return x.transpose(0, 2, 1) if layout == "BLD" else x


def bc_to_layout(x, layout):  # logical (batch, G, N, L) -> BLD (batch, L, G, N)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if layout == "BLD" else x


def bc_from_layout(x, layout):
    return x.transpose(0, 2, 3, 1) if layout == "BLD" else x


# ------------------------------------------------------------------------------------------------
# problems


class Problem:
    """Random inputs in the logical layout (fp64), with helpers to call the op and the reference."""

    def __init__(self, rng, batch=2, dim=4, L=7, N=3, G=1, D=False, z=False, delta_bias=False, softplus=False,
                 h0=False, return_last_state=False):
        self.batch, self.dim, self.L, self.N, self.G = batch, dim, L, N, G
        self.softplus, self.ret = softplus, return_last_state
        f = lambda *s: rng.standard_normal(s)  # noqa: E731
        self.x = {
            "u": f(batch, dim, L),
            # delta around softplus' knee with softplus, a positive step without
            "delta": rng.uniform(-3.0, 1.0, (batch, dim, L)) if softplus else rng.uniform(0.05, 0.6, (batch, dim, L)),
            "A": -np.exp(0.5 * f(dim, N)),
            "B": f(batch, G, N, L),
            "C": f(batch, G, N, L),
        }
        if D:
            self.x["D"] = f(dim)
        if z:
            self.x["z"] = f(batch, dim, L)
        if delta_bias:
            self.x["delta_bias"] = rng.uniform(-0.5, 0.5, dim)
        if h0:
            self.x["h0"] = f(batch, dim, N)

    def round_to(self, dtype):
        """Rounds the T-typed operands to dtype (the reference then sees exactly the op's inputs)."""
        for k in ("u", "delta", "B", "C", "z"):
            if k in self.x:
                self.x[k] = tf.cast(tf.cast(self.x[k], dtype), tf.float64).numpy()
        for k in ("A", "D", "delta_bias", "h0"):
            if k in self.x:
                self.x[k] = self.x[k].astype(np.float32).astype(np.float64)

    def ref(self, x=None):
        x = self.x if x is None else x
        return ref_scan(x["u"], x["delta"], x["A"], x["B"], x["C"], x.get("D"), x.get("z"), x.get("delta_bias"),
                        self.softplus, x.get("h0"))

    def tensors(self, layout, dtype=tf.float32, x=None):
        x = self.x if x is None else x
        out = {}
        for k, v in x.items():
            if k in ("u", "delta", "z"):
                out[k] = tf.constant(seq_to_layout(v, layout), dtype=dtype)
            elif k in ("B", "C"):
                out[k] = tf.constant(bc_to_layout(v, layout), dtype=dtype)
            else:
                out[k] = tf.constant(v, dtype=tf.float32)
        return out

    def call(self, t, layout, return_last_state=None):
        ret = self.ret if return_last_state is None else return_last_state
        return selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], D=t.get("D"), z=t.get("z"),
                              delta_bias=t.get("delta_bias"), delta_softplus=self.softplus, h0=t.get("h0"),
                              return_last_state=ret, layout=layout)


def rel_err(out, ref):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, "shape %s vs reference %s" % (out.shape, ref.shape)
    assert np.all(np.isfinite(out)), "non-finite values in the output"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def check_forward(prob, layout, dtype=tf.float32, tol=None):
    tol = TOL[dtype] if tol is None else tol
    t = prob.tensors(layout, dtype)
    out = prob.call(t, layout)
    y, h = out if prob.ret else (out, None)
    assert y.dtype == dtype, "y dtype %s" % y.dtype
    y_ref, h_ref = prob.ref()
    e = rel_err(seq_from_layout(tf.cast(y, tf.float64).numpy(), layout), y_ref)
    assert e <= tol, "y: rel err %.3g > %.3g" % (e, tol)
    if prob.ret:
        assert h.dtype == tf.float32
        e = rel_err(h.numpy(), h_ref)
        assert e <= TOL32, "h_last: rel err %.3g > %.3g" % (e, TOL32)  # float32: no rounding to dtype


# ------------------------------------------------------------------------------------------------
# gradients


def loss_weights(prob, rng):
    return rng.standard_normal((prob.batch, prob.dim, prob.L)), rng.standard_normal((prob.batch, prob.dim, prob.N))


def ref_loss(prob, x, wy, wh):
    y, h = prob.ref(x)
    return np.sum(y * wy) + (np.sum(h * wh) if prob.ret else 0.0)


def op_grads(prob, layout, wy, wh, dtype=tf.float32, use_y=True):
    t = prob.tensors(layout, dtype)
    names = sorted(t)
    with tf.GradientTape() as tape:
        for k in names:
            tape.watch(t[k])
        out = prob.call(t, layout)
        y, h = out if prob.ret else (out, None)
        loss = tf.constant(0.0, tf.float64)
        if use_y:
            loss += tf.reduce_sum(tf.cast(y, tf.float64) * seq_to_layout(wy, layout))
        if prob.ret:
            loss += tf.reduce_sum(tf.cast(h, tf.float64) * wh)
    g = tape.gradient(loss, [t[k] for k in names])
    res = {}
    for k, v in zip(names, g):
        assert v is not None, "no gradient for %s" % k
        v = tf.cast(v, tf.float64).numpy()
        res[k] = seq_from_layout(v, layout) if k in ("u", "delta", "z") else bc_from_layout(v, layout) if k in ("B", "C") else v
    return res


def fd_grad_full(prob, wy, wh, k, eps=1e-6):
    x = {kk: vv.copy() for kk, vv in prob.x.items()}
    g = np.zeros_like(x[k])
    flat, gf = x[k].reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        v = flat[i]
        flat[i] = v + eps
        lp = ref_loss(prob, x, wy, wh)
        flat[i] = v - eps
        lm = ref_loss(prob, x, wy, wh)
        flat[i] = v
        gf[i] = (lp - lm) / (2 * eps)
    return g


def check_grads_full(prob, layout, rng, use_y=True):
    wy, wh = loss_weights(prob, rng)
    if not use_y:
        wy = np.zeros_like(wy)
    prob.round_to(tf.float32)
    g = op_grads(prob, layout, wy, wh, use_y=use_y)
    for k in sorted(prob.x):
        fd = fd_grad_full(prob, wy, wh, k)
        e = rel_err(g[k], fd)
        assert e <= GRAD_TOL, "d%s: rel err %.3g vs finite differences > %.3g" % (k, e, GRAD_TOL)


def check_grads_directional(prob, layout, rng, n_dirs=2, eps=1e-6):
    """For long problems: <grad, v> against the central difference along random directions v."""
    wy, wh = loss_weights(prob, rng)
    prob.round_to(tf.float32)
    g = op_grads(prob, layout, wy, wh)
    for k in sorted(prob.x):
        for _ in range(n_dirs):
            v = rng.standard_normal(prob.x[k].shape)
            xp = dict(prob.x)
            xm = dict(prob.x)
            xp[k] = prob.x[k] + eps * v
            xm[k] = prob.x[k] - eps * v
            fd = (ref_loss(prob, xp, wy, wh) - ref_loss(prob, xm, wy, wh)) / (2 * eps)
            an = float(np.sum(g[k] * v))
            e = abs(an - fd) / max(abs(fd), np.linalg.norm(g[k]) * np.linalg.norm(v) * 1e-3, 1e-30)
            assert e <= 1e-3, "d%s along a random direction: %.6g vs finite differences %.6g" % (k, an, fd)


# ------------------------------------------------------------------------------------------------
# tests


def test_forward_all_options():
    """Every combination of D, z, delta_bias, softplus, h0, return_last_state, for 1 and 2 groups and
    both layouts (float32)."""
    rng = np.random.default_rng(1)
    n = 0
    for flags in itertools.product((False, True), repeat=len(OPTION_NAMES)):
        opts = dict(zip(OPTION_NAMES, flags))
        for G in (1, 2):
            prob = Problem(rng, batch=2, dim=4, L=9, N=3, G=G, **opts)
            prob.round_to(tf.float32)
            for layout in ("BLD", "BDL"):
                try:
                    check_forward(prob, layout)
                except AssertionError as e:
                    raise AssertionError("%s G=%d %s: %s" % (layout, G, opts, e))
                n += 1
    return "%d configurations" % n


def test_forward_shapes():
    """Odd sizes: L = 1, long L (> one 64-step chunk), N = 1, N = 16, dim not a multiple of 16, many groups."""
    rng = np.random.default_rng(2)
    cases = [dict(batch=1, dim=1, L=1, N=1), dict(batch=3, dim=6, L=1, N=5, G=3), dict(batch=2, dim=5, L=131, N=16),
             dict(batch=1, dim=24, L=70, N=4, G=8), dict(batch=4, dim=37, L=13, N=7),
             dict(batch=2, dim=130, L=65, N=2, G=2)]
    for c in cases:
        prob = Problem(rng, D=True, z=True, delta_bias=True, softplus=True, h0=True, return_last_state=True, **c)
        prob.round_to(tf.float32)
        for layout in ("BLD", "BDL"):
            try:
                check_forward(prob, layout)
            except AssertionError as e:
                raise AssertionError("%s %s: %s" % (layout, c, e))


def test_forward_rank3_bc():
    """B and C without the group axis: (batch, L, N) for BLD, (batch, N, L) for BDL."""
    rng = np.random.default_rng(3)
    prob = Problem(rng, batch=2, dim=4, L=6, N=3, G=1, D=True, softplus=True)
    prob.round_to(tf.float32)
    y_ref, _ = prob.ref()
    for layout in ("BLD", "BDL"):
        t = prob.tensors(layout)
        for k in ("B", "C"):
            t[k] = tf.squeeze(t[k], axis=2 if layout == "BLD" else 1)
        y = prob.call(t, layout)
        e = rel_err(seq_from_layout(y.numpy(), layout), y_ref)
        assert e <= TOL[tf.float32], "%s: rel err %.3g" % (layout, e)


def test_forward_dtypes():
    """float16 and bfloat16 (all options, 2 groups, both layouts) against fp64 on the rounded inputs."""
    rng = np.random.default_rng(4)
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
        for layout in ("BLD", "BDL"):
            for opts in (dict(), dict(D=True, z=True, delta_bias=True, softplus=True, h0=True, return_last_state=True)):
                prob = Problem(rng, batch=2, dim=8, L=33, N=4, G=2, **opts)
                prob.round_to(dtype)
                try:
                    check_forward(prob, layout, dtype)
                except AssertionError as e:
                    raise AssertionError("%s %s %s: %s" % (dtype.name, layout, opts, e))


def test_lowp_tol_is_not_vacuous():
    """lowp_tol's bound rejects an injected error: float16 / bfloat16 y passes TOL (k = 1), the same
    y with an error of 4x TOL added (each element moved by 4 TOL rms(y_ref) at a random sign, rounded
    back to the dtype) fails it; u is the dtype's unit roundoff (eps / 2)."""
    rng = np.random.default_rng(12)
    for dtype in (tf.float16, tf.bfloat16):
        nxt = lambda v: float(tf.cast(tf.cast(v, dtype), tf.float64))  # noqa: E731  (v rounded to dtype)
        assert nxt(1 + 2 * U[dtype]) == 1 + 2 * U[dtype] and nxt(1 + 0.9 * U[dtype]) == 1  # eps = 2u
        prob = Problem(rng, batch=2, dim=8, L=33, N=4, G=2, D=True, z=True, delta_bias=True, softplus=True)
        prob.round_to(dtype)
        y = seq_from_layout(tf.cast(prob.call(prob.tensors("BDL", dtype), "BDL"), tf.float64).numpy(), "BDL")
        y_ref, _ = prob.ref()
        tol = TOL[dtype]
        assert rel_err(y, y_ref) <= tol, (dtype.name, rel_err(y, y_ref), tol)
        rms = np.sqrt(np.mean(y_ref ** 2))
        bad = y + np.where(rng.random(y.shape) < 0.5, -4.0, 4.0) * tol * rms
        bad = tf.cast(tf.cast(bad, dtype), tf.float64).numpy()
        assert rel_err(bad, y_ref) > tol, (dtype.name, "an error of 4x the bound passes", rel_err(bad, y_ref), tol)
    return "an error of 4x the bound fails it"


def test_grads_all_inputs():
    """Gradients of every differentiable input (u, delta, A, B, C, D, z, delta_bias, h0, and through
    h_last) against fp64 central finite differences, both layouts, 1 and 2 groups."""
    rng = np.random.default_rng(5)
    all_on = dict(D=True, z=True, delta_bias=True, softplus=True, h0=True, return_last_state=True)
    configs = [
        ("BLD", dict(G=2, **all_on)),
        ("BDL", dict(G=2, **all_on)),
        ("BLD", dict(G=1)),
        ("BDL", dict(G=1, softplus=True, h0=True, return_last_state=True)),
        ("BLD", dict(G=1, z=True, delta_bias=True)),
        ("BDL", dict(G=2, D=True, h0=True)),
    ]
    for layout, opts in configs:
        prob = Problem(rng, batch=2, dim=4, L=6, N=3, **opts)
        try:
            check_grads_full(prob, layout, rng)
        except AssertionError as e:
            raise AssertionError("%s %s: %s" % (layout, opts, e))


def test_grads_h_last_only():
    """Loss on h_last alone (y unused: its incoming gradient is zero or absent)."""
    rng = np.random.default_rng(6)
    for layout in ("BLD", "BDL"):
        prob = Problem(rng, batch=2, dim=4, L=5, N=3, G=2, D=True, softplus=True, h0=True, return_last_state=True)
        check_grads_full(prob, layout, rng, use_y=False)


def test_grads_long():
    """A longer problem (L = 150: several backward chunks, batch 3, dim 6, 3 groups): directional
    derivatives of every input against finite differences."""
    rng = np.random.default_rng(7)
    for layout in ("BLD", "BDL"):
        prob = Problem(rng, batch=3, dim=6, L=150, N=5, G=3, D=True, z=True, delta_bias=True, softplus=True,
                       h0=True, return_last_state=True)
        check_grads_directional(prob, layout, rng)


def test_grads_dtypes():
    """float16 / bfloat16 gradients against the float32 op's on the same (rounded) inputs."""
    rng = np.random.default_rng(8)
    for dtype in (tf.float16, tf.bfloat16):
        prob = Problem(rng, batch=2, dim=8, L=40, N=4, G=2, D=True, z=True, delta_bias=True, softplus=True, h0=True,
                       return_last_state=True)
        prob.round_to(dtype)
        wy, wh = loss_weights(prob, rng)
        wy = tf.cast(tf.cast(wy, dtype), tf.float64).numpy()
        g32 = op_grads(prob, "BLD", wy, wh, tf.float32)
        gt = op_grads(prob, "BLD", wy, wh, dtype)
        for k in g32:
            # the same float32 arithmetic on the same values (wy is T-representable): a T-typed
            # gradient (u, delta, B, C, z) is the float32 one rounded once (k = 1); A, D, delta_bias,
            # h0 are float32: none
            tol = lowp_tol(dtype if k in ("u", "delta", "B", "C", "z") else tf.float32, GRAD_SAME, 1)
            e = rel_err(gt[k], g32[k])
            assert e <= tol, "%s d%s: rel err %.3g vs float32 > %.3g" % (dtype.name, k, e, tol)


def test_tf_function():
    """Inside tf.function (unknown dims in the signature) forward and gradient equal eager bitwise."""
    rng = np.random.default_rng(9)
    prob = Problem(rng, batch=2, dim=6, L=20, N=4, G=3, D=True, z=True, delta_bias=True, softplus=True, h0=True,
                   return_last_state=True)
    for layout in ("BLD", "BDL"):
        t = prob.tensors(layout)
        keys = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0")
        spec = [tf.TensorSpec([None] * t[k].shape.rank, tf.float32) for k in keys]

        def step(*args):
            d = dict(zip(keys, args))
            with tf.GradientTape() as tape:
                for a in args:
                    tape.watch(a)
                y, h = prob.call(d, layout)
                loss = tf.reduce_sum(y * y) + tf.reduce_sum(h)
            return [y, h] + tape.gradient(loss, list(args))

        fn = tf.function(step, input_signature=spec)
        graph_out = fn(*[t[k] for k in keys])
        eager_out = step(*[t[k] for k in keys])
        for a, b in zip(graph_out, eager_out):
            assert a.shape == b.shape and np.array_equal(a.numpy(), b.numpy()), "tf.function differs from eager"
        # the static shapes inferred with known dims
        cf = tf.function(step).get_concrete_function(*[t[k] for k in keys])
        shapes = [tuple(o.shape) for o in cf.outputs[:2]]
        assert shapes[0] == tuple(t["u"].shape) and shapes[1] == (2, 6, 4), "inferred shapes %s" % shapes


def test_bad_shapes():
    """Bad shapes give Python exceptions with selscan's or a clear shape message, eager and in graphs."""
    rng = np.random.default_rng(10)
    prob = Problem(rng, batch=2, dim=6, L=5, N=3, G=1)
    t = prob.tensors("BLD")
    B4 = tf.zeros([2, 5, 4, 3])  # 4 groups do not divide dim 6
    # eager: the kernel's check, naming B and C (not selscan's internal n_groups alone)
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], B4, B4), "argument 'B': does not divide dim",
                 types=(tf.errors.InvalidArgumentError,))
    # graph: the shape function refuses it with the same message
    expect_error(lambda: tf.function(lambda: selective_scan(t["u"], t["delta"], t["A"], B4, B4), autograph=False).get_concrete_function(),
                 "argument 'B': does not divide dim", types=(ValueError, tf.errors.InvalidArgumentError))
    # N = 0: A named (not selscan's internal dstate)
    A0, B0 = tf.zeros([6, 0]), tf.zeros([2, 5, 1, 0])
    expect_error(lambda: selective_scan(t["u"], t["delta"], A0, B0, B0), "argument 'A': not positive")
    # mismatched operands: the op's checks, before selscan sees anything
    expect_error(lambda: selective_scan(t["u"], t["delta"][:, :4], t["A"], t["B"], t["C"]), "delta")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"][:5], t["B"], t["C"]), "A")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"][:, :4], t["C"][:, :4]), "B")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"][:1]), "C")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], D=tf.zeros([5])), "D")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], delta_bias=tf.zeros([7])),
                 "delta_bias")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], z=t["u"][:1]), "z")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], h0=tf.zeros([2, 6, 4])), "h0")
    expect_error(lambda: selective_scan(t["u"][0], t["delta"][0], t["A"], t["B"], t["C"]), "argument 'u': wrong shape")
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], tf.cast(t["B"], tf.float16), t["C"]),
                 "dtype", types=(TypeError,))
    expect_error(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], layout="LBD"), "layout",
                 types=(ValueError,))
    # the same in a graph (shape functions), with static shapes
    expect_error(lambda: tf.function(lambda: selective_scan(t["u"], t["delta"][:, :4], t["A"], t["B"], t["C"]), autograph=False)
                 .get_concrete_function(), "argument 'delta': wrong shape", types=(ValueError,))
    # and a graph whose shapes are only known at run time: the kernel's check
    f = tf.function(lambda a, b: selective_scan(a, b, t["A"], t["B"], t["C"]),
                    input_signature=[tf.TensorSpec([None, None, None]), tf.TensorSpec([None, None, None])])
    expect_error(lambda: f(t["u"], t["delta"][:, :4]), "delta", types=(tf.errors.InvalidArgumentError,))


def test_checkpoint_attr():
    """save_checkpoint: the CPU forward keeps the state entering every 64 steps (batch * dim *
    (ceil(L / 64) + 1) * N floats) and the backward reads it instead of recomputing it; results and
    gradients are the same bits with and without it, and a checkpoint of another size (a GPU
    forward's) is not read."""
    rng = np.random.default_rng(14)
    ops = selscan_tf.load_ops()
    for L in (70, 200):
        prob = Problem(rng, batch=2, dim=6, L=L, N=4, G=2, D=True, z=True, softplus=True, h0=True,
                       return_last_state=True)
        t = prob.tensors("BLD")
        args = (t["u"], t["delta"], t["A"], t["B"], t["C"], t["D"], t["z"], tf.zeros([0]), t["h0"],
                tf.zeros([0], tf.int64))  # cu_seqlens: absent
        kw = dict(delta_softplus=True, has_d=True, has_z=True, has_h0=True)
        raw = ops.selscan_forward(*args, return_last_state=True, save_checkpoint=True, **kw)
        want = 2 * 6 * ((L + 63) // 64 + 1) * 4
        assert len(raw) == 3 and raw[2].shape == (want,), "CPU checkpoint output: %s" % (raw[2].shape,)
        assert ops.selscan_forward(*args, **kw)[2].shape == (0,)
        # N > 64: the CPU backward would not read one (selscan_checkpoint_used), so none is written
        big = Problem(rng, batch=1, dim=2, L=L, N=65, G=1).tensors("BLD")
        e = tf.zeros([0])
        raw65 = ops.selscan_forward(big["u"], big["delta"], big["A"], big["B"], big["C"], e, e, e, e, tf.zeros([0], tf.int64),
                                    save_checkpoint=True)
        assert raw65[2].shape == (0,), "CPU checkpoint output for N=65: %s" % (raw65[2].shape,)
        outs = []
        for ck in (False, True):
            with tf.GradientTape() as tape:
                tape.watch(list(t.values()))
                y, h = selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], D=t["D"], z=t["z"],
                                      delta_softplus=True, h0=t["h0"], return_last_state=True, save_checkpoint=ck)
                loss = tf.reduce_sum(y * y) + tf.reduce_sum(h)
            outs.append([y, h] + tape.gradient(loss, [t[k] for k in sorted(t)]))
        for a, b in zip(*outs):
            assert np.array_equal(a.numpy(), b.numpy())
        # the backward op given its own checkpoint, none, or one of another size: the same bits
        dy = tf.constant(rng.standard_normal(raw[0].shape), raw[0].dtype)
        dh = tf.constant(rng.standard_normal(raw[1].shape), tf.float32)
        grads = [ops.selscan_backward(*args, dy, dh, ck, has_dh_last=True, **kw)
                 for ck in (raw[2], tf.zeros([0]), tf.zeros([want - 2 * 6 * 4]))]
        for other in grads[1:]:
            for a, b in zip(grads[0], other):
                assert np.array_equal(a.numpy(), b.numpy())


def test_empty():
    """Empty batch, dim or L: empty outputs; h_last is h0; gradients zero, dh0 = dh_last."""
    rng = np.random.default_rng(11)
    for batch, dim, L in ((0, 4, 5), (2, 4, 0), (2, 0, 5)):
        t = {
            "u": tf.zeros([batch, L, dim]), "delta": tf.zeros([batch, L, dim]), "A": -tf.ones([dim, 3]),
            "B": tf.zeros([batch, L, 1, 3]), "C": tf.zeros([batch, L, 1, 3]),
            "h0": tf.constant(rng.standard_normal((batch, dim, 3)), tf.float32),
        }
        before = {k: v.numpy().copy() for k, v in t.items()}
        with tf.GradientTape() as tape:
            tape.watch(t["h0"])
            y, h = selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], h0=t["h0"], return_last_state=True)
            loss = tf.reduce_sum(h * 3.0)
        assert y.shape == (batch, L, dim) and h.shape == (batch, dim, 3)
        assert np.array_equal(h.numpy(), t["h0"].numpy())
        assert all(np.array_equal(t[k].numpy(), before[k]) for k in t), "an input changed"
        dh0 = tape.gradient(loss, t["h0"])
        assert np.allclose(dh0.numpy(), 3.0)


def test_deterministic():
    """Repeated runs are bitwise equal (forward and every gradient), and equal to a run in a
    separate process with a single intra-op thread (one part instead of several)."""
    rng = np.random.default_rng(12)
    prob = Problem(rng, batch=3, dim=130, L=100, N=8, G=2, D=True, z=True, delta_bias=True, softplus=True, h0=True,
                   return_last_state=True)
    prob.round_to(tf.float32)
    wy, wh = loss_weights(prob, rng)
    runs = [op_grads(prob, "BLD", wy, wh) for _ in range(3)]
    t = prob.tensors("BLD")
    ys = [prob.call(t, "BLD")[0].numpy() for _ in range(3)]
    for r in runs[1:]:
        for k in r:
            assert np.array_equal(r[k], runs[0][k]), "d%s differs between runs" % k
    for y in ys[1:]:
        assert np.array_equal(y, ys[0]), "y differs between runs"
    # one thread in another process
    with tempfile.TemporaryDirectory() as d:
        np.savez(os.path.join(d, "in.npz"), **prob.x)
        np.savez(os.path.join(d, "w.npz"), wy=wy, wh=wh)
        env = dict(os.environ, SELSCAN_TF_TEST_CHILD=d)
        subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, check=True, timeout=300)
        other = np.load(os.path.join(d, "out.npz"))
        for k in runs[0]:
            assert np.array_equal(other[k], runs[0][k]), "d%s differs with one thread" % k
        assert np.array_equal(other["y"], ys[0]), "y differs with one thread"


def _child_one_thread(d):
    """The single-thread side of test_deterministic (run as a subprocess)."""
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    x = dict(np.load(os.path.join(d, "in.npz")))
    w = np.load(os.path.join(d, "w.npz"))
    prob = Problem(np.random.default_rng(0), batch=3, dim=130, L=100, N=8, G=2, D=True, z=True, delta_bias=True,
                   softplus=True, h0=True, return_last_state=True)
    prob.x = x
    g = op_grads(prob, "BLD", w["wy"], w["wh"])
    g["y"] = prob.call(prob.tensors("BLD"), "BLD")[0].numpy()
    np.savez(os.path.join(d, "out.npz"), **g)


def test_keras_layer():
    """The Keras layer: supports_jit is False, weights get gradients, an optimizer step and a
    model.fit step change them and lower the loss."""
    import keras

    rng = np.random.default_rng(13)
    batch, L, dim, N = 4, 12, 8, 4
    layer = SelectiveScan(dim, d_state=N)
    assert layer.supports_jit is False
    u = tf.constant(rng.standard_normal((batch, L, dim)), tf.float32)
    delta = tf.constant(rng.standard_normal((batch, L, dim)), tf.float32)
    B = tf.constant(rng.standard_normal((batch, L, N)), tf.float32)
    C = tf.constant(rng.standard_normal((batch, L, N)), tf.float32)
    target = tf.constant(rng.standard_normal((batch, L, dim)), tf.float32)
    y = layer(u, delta, B, C)
    assert y.shape == (batch, L, dim)
    # A = -exp(A_log) enters the op: compare with the functional call
    y2 = selective_scan(u, delta, -tf.exp(layer.A_log), B, C, D=layer.D, delta_bias=layer.delta_bias,
                        delta_softplus=True)
    assert np.array_equal(y.numpy(), y2.numpy())
    opt = keras.optimizers.Adam(learning_rate=1e-2)
    before = [w.numpy().copy() for w in layer.trainable_weights]
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((layer(u, delta, B, C) - target) ** 2)
        grads = tape.gradient(loss, layer.trainable_weights)
        assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
        opt.apply_gradients(zip(grads, layer.trainable_weights))
        losses.append(float(loss))
    assert all(not np.array_equal(b, w.numpy()) for b, w in zip(before, layer.trainable_weights)), "weights unchanged"
    assert losses[-1] < losses[0], "loss did not decrease: %s" % losses

    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.proj = keras.layers.Dense(2 * dim + 2 * N)
            self.scan = SelectiveScan(dim, d_state=N)

        def call(self, x):
            p = self.proj(x)
            d, Bm, Cm = p[..., :dim], p[..., 2 * dim:2 * dim + N], p[..., 2 * dim + N:]
            return self.scan(x, d, Bm, Cm, z=p[..., dim:2 * dim])

    model = Model()
    model.compile(optimizer="adam", loss="mse", jit_compile="auto")
    hist = model.fit(u, target, batch_size=batch, epochs=2, verbose=0)
    assert model.jit_compile is False, "a model with SelectiveScan must not be jit-compiled"
    assert all(np.isfinite(hist.history["loss"])), hist.history

    # functional API (symbolic Keras tensors go through the op's shape function)
    ins = [keras.Input((L, dim)), keras.Input((L, dim)), keras.Input((L, N)), keras.Input((L, N))]
    fmodel = keras.Model(ins, SelectiveScan(dim, d_state=N)(*ins))
    fmodel.compile(optimizer="adam", loss="mse")
    hist = fmodel.fit([u, delta, B, C], target, batch_size=batch, epochs=1, verbose=0)
    assert all(np.isfinite(hist.history["loss"])), hist.history

    # mixed precision: bfloat16 compute, float32 weights that reach the op unrounded
    old_policy = keras.mixed_precision.global_policy()
    try:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        mlayer = SelectiveScan(dim, d_state=N)
        with tf.GradientTape() as tape:
            out = mlayer(u, delta, B, C)
            loss = tf.reduce_mean(tf.cast(out, tf.float32) ** 2)
        assert out.dtype == tf.bfloat16, out.dtype
        assert all(w.dtype == "float32" for w in mlayer.weights)
        grads = tape.gradient(loss, mlayer.trainable_weights)
        assert all(g is not None and g.dtype == tf.float32 and np.all(np.isfinite(g.numpy())) for g in grads)
        ref = selective_scan(tf.cast(u, tf.bfloat16), tf.cast(delta, tf.bfloat16), -tf.exp(mlayer.A_log),
                             tf.cast(B, tf.bfloat16), tf.cast(C, tf.bfloat16), D=mlayer.D,
                             delta_bias=mlayer.delta_bias, delta_softplus=True)
        assert np.array_equal(tf.cast(out, tf.float32).numpy(), tf.cast(ref, tf.float32).numpy()), \
            "mixed-precision layer differs from the op on float32 weights"
    finally:
        keras.mixed_precision.set_global_policy(old_policy)


TESTS = [v for k, v in list(globals().items()) if k.startswith("test_") and callable(v)]


def main():
    if os.environ.get("SELSCAN_TF_TEST_CHILD"):
        _child_one_thread(os.environ["SELSCAN_TF_TEST_CHILD"])
        return 0
    ops = selscan_tf.load_ops()
    print("TensorFlow %s, op library %s" % (tf.__version__, getattr(ops, "__file__", "loaded")))
    return run_tests(TESTS, width=28)


if __name__ == "__main__":
    sys.exit(main())
