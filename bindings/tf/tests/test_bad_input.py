"""Hostile-input tests of the TensorFlow package (issue 27, TensorFlow half; make test-tf).

One test per finding of the review: each failed on the code before the fix (wrong result, silent
acceptance, or a message that does not name the user's argument) and passes after it. The rule
they check is written once in README.md, "What is cast, refused, copied". The seeded fuzz harness
(fuzz_tf_ops.py) covers the same ground at random; these are the named, minimal cases.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tensorflow as tf  # noqa: E402

import selscan_tf  # noqa: E402
from selscan_tf import MambaVisionMixer, SelectiveScan, selective_scan, selective_state_update  # noqa: E402
from runner import raises, run_tests  # noqa: E402

ERRORS = (tf.errors.InvalidArgumentError, ValueError, TypeError)
OPS = selscan_tf.load_ops()
EMPTY = tf.zeros([0])
NOCU = tf.zeros([0], tf.int64)  # the raw ops' cu_seqlens input, absent


def problem(batch=2, L=5, dim=4, N=3, G=1, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "u": tf.constant(rng.standard_normal((batch, L, dim)), tf.float32),
        "delta": tf.constant(rng.uniform(0.05, 0.6, (batch, L, dim)), tf.float32),
        "A": tf.constant(-np.exp(0.5 * rng.standard_normal((dim, N))), tf.float32),
        "B": tf.constant(rng.standard_normal((batch, L, G, N)), tf.float32),
        "C": tf.constant(rng.standard_normal((batch, L, G, N)), tf.float32),
    }


def graph(fn, *specs):
    """Traces fn with the given input signature (the shape functions run here)."""
    return tf.function(fn, input_signature=list(specs), autograph=False).get_concrete_function()


# ------------------------------------------------------------------------------------------------
# the op's shape rules


def test_zero_size_rules():
    """The group count must be >= 1 and divide dim, and N >= 1, also when batch, L or dim is 0
    (before: accepted eagerly whenever the problem was empty, while a graph refused the same
    shapes), with messages naming B and C / A, eager and in graphs alike."""
    t = problem()
    u, dl, A = t["u"], t["delta"], t["A"]
    for batch, L in ((0, 5), (2, 0)):
        ue, de = u[:batch, :L], dl[:batch, :L]
        for G in (0, 3):  # 3 does not divide dim 4
            Bg = tf.zeros([batch, L, G, 3])
            raises(lambda: selective_scan(ue, de, A, Bg, Bg), "argument 'B': does not divide dim")
            if G:  # static shapes: the shape function, same words
                raises(lambda: graph(lambda x: selective_scan(x, x, A, Bg, Bg), tf.TensorSpec(ue.shape)),
                       "argument 'B': does not divide dim")
    # dim 0 with 0 groups
    B0 = tf.zeros([2, 5, 0, 3])
    raises(lambda: selective_scan(u[..., :0], dl[..., :0], A[:0], B0, B0), "argument 'B': does not divide dim")
    # N = 0 on a non-empty problem: A named, not selscan's internal 'dstate'
    msg = raises(lambda: selective_scan(u, dl, tf.zeros([4, 0]), tf.zeros([2, 5, 0]), tf.zeros([2, 5, 0])),
                 "argument 'A': not positive")
    assert "dstate" not in msg, msg
    raises(lambda: graph(lambda a: selective_scan(u, dl, a, tf.zeros([2, 5, 0]), tf.zeros([2, 5, 0])),
                         tf.TensorSpec([4, 0])), "argument 'A': not positive")
    # what stays legal: an empty problem with N = 0, dim 0 with a group count that divides it
    y, h = selective_scan(u[:0], dl[:0], tf.zeros([4, 0]), tf.zeros([0, 5, 0]), tf.zeros([0, 5, 0]),
                          return_last_state=True)
    assert y.shape == (0, 5, 4) and h.shape == (0, 4, 0)
    y = selective_scan(u[..., :0], dl[..., :0], A[:0], tf.zeros([2, 5, 2, 3]), tf.zeros([2, 5, 2, 3]))
    assert y.shape == (2, 5, 0)


def test_graph_messages_name_the_argument():
    """Static shape mismatches found at trace time name the argument (before: TensorFlow's
    'Dimension 0 in both shapes must be equal' naming none)."""
    t = problem()
    u, dl, A, B, C = t["u"], t["delta"], t["A"], t["B"], t["C"]
    raises(lambda: graph(lambda x: selective_scan(x, x, A, B, C), tf.TensorSpec([None, None, 7])),
           "argument 'A': wrong shape: want (dim, N)", types=(ValueError,))
    raises(lambda: graph(lambda b: selective_scan(u, dl, A, b, C), tf.TensorSpec([None, 6, None, None])),
           "argument 'B': wrong shape", types=(ValueError,))
    raises(lambda: graph(lambda c: selective_scan(u, dl, A, B, c), tf.TensorSpec([None, 6, None, None])),
           "argument 'C': wrong shape", types=(ValueError,))
    raises(lambda: graph(lambda d: selective_scan(u, dl, A, B, C, D=d), tf.TensorSpec([5])),
           "argument 'D': wrong shape: want (dim,)", types=(ValueError,))
    raises(lambda: graph(lambda h: selective_scan(u, dl, A, B, C, h0=h), tf.TensorSpec([None, 4, 2])),
           "argument 'h0': wrong shape: want (batch, dim, N)", types=(ValueError,))


def test_raw_absent_operand_given():
    """Raw ops: an optional operand given while its has_* attr is false is refused (before: ignored
    without a word, e.g. a D that was never applied, a dh_last whose gradient was lost)."""
    t = problem()
    u, dl, A, B, C = t["u"], t["delta"], t["A"], t["B"], t["C"]
    ones_d, state = tf.ones([4]), tf.ones([2, 4, 3])
    fwd = lambda D=EMPTY, z=EMPTY, bias=EMPTY, h0=EMPTY: OPS.selscan_forward(u, dl, A, B, C, D, z, bias, h0, NOCU)  # noqa: E731
    raises(lambda: fwd(D=ones_d), "D is given", "has_d is false")
    raises(lambda: fwd(z=tf.ones_like(u)), "z is given", "has_z is false")
    raises(lambda: fwd(bias=ones_d), "delta_bias is given", "has_delta_bias is false")
    raises(lambda: fwd(h0=state), "h0 is given", "has_h0 is false")
    raises(lambda: OPS.selscan_backward(u, dl, A, B, C, EMPTY, EMPTY, EMPTY, EMPTY, NOCU, tf.ones_like(u), state, EMPTY),
           "dh_last is given", "has_dh_last is false")
    # the same at trace time when the shape says non-empty
    raises(lambda: graph(lambda d: OPS.selscan_forward(u, dl, A, B, C, d, EMPTY, EMPTY, EMPTY, NOCU), tf.TensorSpec([4])),
           "D is given", types=(ValueError,))
    # an empty tensor of any shape stays the way to say "absent"
    y = OPS.selscan_forward(u, dl, A, B, C, tf.zeros([0, 3]), EMPTY, EMPTY, EMPTY, NOCU)[0]
    assert y.shape == u.shape


def test_raw_checkpoint_rank():
    """The backward's checkpoint must be a vector (before: any rank, read flat)."""
    t = problem()
    u, dl, A, B, C = t["u"], t["delta"], t["A"], t["B"], t["C"]
    ck = OPS.selscan_forward(u, dl, A, B, C, EMPTY, EMPTY, EMPTY, EMPTY, NOCU, save_checkpoint=True)[2]
    ck2 = tf.reshape(ck, [2, -1])
    raises(lambda: OPS.selscan_backward(u, dl, A, B, C, EMPTY, EMPTY, EMPTY, EMPTY, NOCU, tf.ones_like(u), EMPTY, ck2),
           "argument 'checkpoint': wrong shape: want (n,)")
    raises(lambda: graph(lambda c: OPS.selscan_backward(u, dl, A, B, C, EMPTY, EMPTY, EMPTY, EMPTY, NOCU, u, EMPTY, c),
                         tf.TensorSpec([2, None])), "argument 'checkpoint': wrong shape", types=(ValueError,))


# ------------------------------------------------------------------------------------------------
# autodiff


def test_second_order_is_a_clear_error():
    """A nested GradientTape, a Hessian and a ForwardAccumulator through the op raise one clear
    NotImplementedError naming the way out (before: TensorFlow's 'gradient registry has no entry
    for: SelscanBackward'); never zeros or None."""
    t = problem()
    u, dl, A, B, C = t["u"], t["delta"], t["A"], t["B"], t["C"]

    def nested(target):
        with tf.GradientTape() as outer:
            outer.watch(target)
            with tf.GradientTape() as inner:
                inner.watch(target)
                y = selective_scan(u, dl, A, B, C)
                loss = tf.reduce_sum(y * y)
            g = inner.gradient(loss, target)
            g2 = tf.reduce_sum(g * g)
        return outer.gradient(g2, target)

    for target in (u, A, dl):
        raises(lambda: nested(target), "second-order derivatives of selective_scan are not implemented",
               "selective_scan_tf", types=(NotImplementedError,))

    def jvp():
        with tf.autodiff.ForwardAccumulator(u, tf.ones_like(u)) as acc:
            y = selective_scan(u, dl, A, B, C)
        return acc.jvp(y)

    raises(jvp, "second-order derivatives", types=(NotImplementedError,))
    # inside tf.function the same message surfaces (TensorFlow may wrap the exception type)
    raises(lambda: tf.function(lambda: nested(u))(), "second-order derivatives of selective_scan",
           types=(NotImplementedError, Exception))
    # first order unaffected
    with tf.GradientTape() as tape:
        tape.watch(u)
        loss = tf.reduce_sum(selective_scan(u, dl, A, B, C))
    assert tape.gradient(loss, u) is not None


# ------------------------------------------------------------------------------------------------
# the Python wrapper


def test_unknown_rank_bc():
    """B and C of rank 3 (one group) work inside tf.function whose signature leaves their rank
    unknown (before: 'B must have rank 4' at run time), equal to the eager result."""
    t = problem()
    u, dl, A = t["u"], t["delta"], t["A"]
    B3, C3 = t["B"][:, :, 0], t["C"][:, :, 0]
    f = tf.function(lambda b, c: selective_scan(u, dl, A, b, c),
                    input_signature=[tf.TensorSpec(None, tf.float32)] * 2)
    want = selective_scan(u, dl, A, B3, C3)
    for b, c in ((B3, C3), (t["B"], t["C"])):
        assert np.array_equal(f(b, c).numpy(), want.numpy())
    # and a gradient through it
    with tf.GradientTape() as tape:
        tape.watch(B3)
        loss = tf.reduce_sum(f(B3, C3))
    g = tape.gradient(loss, B3)
    assert g is not None and g.shape == B3.shape


def test_bc_rank_message():
    """B / C of rank 2 or 5: the message names both forms, rank 4 and rank 3 (before: 'must have rank 4';
    now the op's rule, which takes both)."""
    t = problem()
    for bad in (t["B"][0, :, 0], t["B"][:, :, :, None]):
        got = "got %s" % list(bad.shape)
        raises(lambda: selective_scan(t["u"], t["delta"], t["A"], bad, t["C"]), "argument 'B': wrong shape",
               "want (batch, L, G, N)", "or (batch, L, N), " + got)
        raises(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], bad), "argument 'C': wrong shape",
               "want (batch, L, G, N)", "or (batch, L, N), " + got)


def test_rank3_bc_reported_as_passed():
    """A wrong B / C of rank 3 (one group, no group axis) is reported with the shape passed, in both layouts,
    eager, in a graph traced with its shape and one that knows only its rank at run time (before: the rank-4
    shape the wrapper made with expand_dims, [2, 6, 1, 3] for a (2, 6, 3) B)."""
    t = problem()
    for layout in ("BLD", "BDL"):
        seq = (lambda x: x) if layout == "BLD" else (lambda x: tf.transpose(x, [0, 2, 1]))
        u, dl = seq(t["u"]), seq(t["delta"])
        good = tf.zeros([2, 5, 3] if layout == "BLD" else [2, 3, 5])
        form = "(batch, L, N) = [2, 5, 3]" if layout == "BLD" else "(batch, N, L) = [2, 3, 5]"
        for k, shape in (("B", [2, 6, 3]), ("C", [3, 5, 3])):  # L 6, batch 3
            if layout == "BDL":
                shape = [shape[0], shape[2], shape[1]]
            bad = tf.zeros(shape)
            args = dict(B=good, C=good, layout=layout)
            args[k] = bad
            want = ("argument '%s': wrong shape: want %s, got %s" % (k, form, shape),)
            raises(lambda: selective_scan(u, dl, t["A"], **args), *want)
            raises(lambda: graph(lambda x: selective_scan(x, dl, t["A"], **args), tf.TensorSpec(u.shape)), *want)
            f = tf.function(lambda b: selective_scan(u, dl, t["A"], **dict(args, **{k: b})),
                            input_signature=[tf.TensorSpec(None, tf.float32)], autograph=False)
            raises(lambda: f(bad), *want)
    # a right rank-3 B and C: the same y as rank 4, and dB, dC of the shapes passed
    B3, C3 = t["B"][:, :, 0], t["C"][:, :, 0]
    with tf.GradientTape() as tape:
        tape.watch([B3, C3])
        y = selective_scan(t["u"], t["delta"], t["A"], B3, C3)
        loss = tf.reduce_sum(y * y)
    dB, dC = tape.gradient(loss, [B3, C3])
    assert np.array_equal(y.numpy(), selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"]).numpy())
    assert dB.shape == B3.shape and dC.shape == C3.shape


def test_python_bools_like_numpy_bools():
    """A Python bool or list of bools is a bool tensor, refused with the same error naming the argument as a
    NumPy bool array, for every tensor argument of selective_scan, selective_state_update and
    selective_scan_tf (before: converted to 1.0 / 0.0 or 1 / 0 by the argument's dtype hint and taken: D=[True,
    ...] scaled u by 1, a list-of-bools delta_bias, h0, cu_seqlens or state_batch_indices likewise)."""
    t = problem(batch=1)
    t["B"], t["C"] = t["B"][:, :, 0], t["C"][:, :, 0]
    scan = dict(t, D=tf.ones([4]), z=tf.ones([1, 5, 4]), delta_bias=tf.ones([4]), h0=tf.zeros([1, 4, 3]))
    state = dict(state=tf.zeros([1, 4, 3]), x=tf.ones([1, 4]), dt=tf.ones([1, 4]), A=t["A"], B=tf.ones([1, 3]),
                 C=tf.ones([1, 3]), D=tf.ones([4]), z=tf.ones([1, 4]), dt_bias=tf.ones([4]),
                 state_batch_indices=tf.constant([0]))
    cases = [(selective_scan, scan, k) for k in scan] + [(selective_scan, scan, "cu_seqlens")] + \
            [(selective_state_update, state, k) for k in state] + \
            [(selscan_tf.selective_scan_tf, scan, k) for k in scan]
    checked = 0
    for fn, args, k in cases:
        shape = [6] if k == "cu_seqlens" else list(args[k].shape)
        as_numpy = np.zeros(shape, bool)
        as_numpy.flat[::2] = True
        msgs = []
        for v in (as_numpy, as_numpy.tolist()) + ((True,) if k == "D" else ()):
            call = dict(args, **{k: v})
            msgs.append(raises(lambda: fn(**call), k, types=(TypeError,)))
        assert all(m == msgs[0] for m in msgs), (fn.__name__, k, msgs)
        checked += 1
    return "%d arguments" % checked


def test_no_quiet_numpy_narrowing():
    """A NumPy float64 delta / z / B / C next to a float16 (or float32) u is refused like a float64
    tensor (before: quietly rounded to u's dtype, while a float64 u was refused). Python lists and
    numbers still take u's dtype; A, D, delta_bias, h0 are cast to float32 by rule."""
    t = problem()
    u16 = tf.cast(t["u"], tf.float16)
    d16, B16, C16 = (tf.cast(t[k], tf.float16) for k in ("delta", "B", "C"))
    raises(lambda: selective_scan(u16, t["delta"].numpy().astype(np.float64), t["A"], B16, C16),
           "delta has dtype float64 but u has dtype float16", types=(TypeError,))
    raises(lambda: selective_scan(u16, d16, t["A"], t["B"].numpy().astype(np.float64), C16),
           "B has dtype float64", types=(TypeError,))
    raises(lambda: selective_scan(u16, d16, t["A"], B16, C16, z=np.zeros(u16.shape, np.float32)),
           "z has dtype float32 but u has dtype float16", types=(TypeError,))
    raises(lambda: selective_scan(t["u"].numpy().astype(np.float64), t["delta"], t["A"], t["B"], t["C"]),
           "u must be float32, float16 or bfloat16, got float64", types=(TypeError,))
    y = selective_scan(u16, d16.numpy().tolist(), t["A"].numpy().astype(np.float64), B16, C16)
    assert y.dtype == tf.float16


def test_options_are_bools():
    """delta_softplus / return_last_state / save_checkpoint must be bools (before: bool(x), so
    "False" and [0] were true)."""
    t = problem()
    args = (t["u"], t["delta"], t["A"], t["B"], t["C"])
    for name, bad in (("delta_softplus", "False"), ("return_last_state", [0]), ("save_checkpoint", "no"),
                      ("delta_softplus", 1)):
        raises(lambda: selective_scan(*args, **{name: bad}), name + " must be a bool", types=(TypeError,))
    assert selective_scan(*args, delta_softplus=np.bool_(True)).shape == t["u"].shape
    raises(lambda: SelectiveScan(4, delta_softplus="yes"), "delta_softplus must be a bool", types=(TypeError,))


def test_required_argument_messages():
    """None, a SparseTensor or a RaggedTensor for an argument: a TypeError naming it (before:
    TensorFlow's conversion error naming no argument)."""
    t = problem()
    u, dl, A, B, C = t["u"], t["delta"], t["A"], t["B"], t["C"]
    raises(lambda: selective_scan(u, None, A, B, C), "delta is required", types=(TypeError,))
    raises(lambda: selective_scan(None, dl, A, B, C), "u is required", types=(TypeError,))
    raises(lambda: selective_scan(u, dl, None, B, C), "A is required", types=(TypeError,))
    raises(lambda: selective_scan(u, dl, A, tf.sparse.from_dense(B), C), "B must be a dense tensor",
           types=(TypeError,))
    raises(lambda: selective_scan(u, dl, A, B, C, D=tf.ragged.constant([[1.0], [2.0, 3.0]])),
           "D must be a dense tensor", types=(TypeError,))
    raises(lambda: selective_scan(u, dl, A, B, C, D=["a", "b"]), "D must be a real floating-point",
           types=(TypeError,))
    raises(lambda: selective_scan(u, dl, A, B, C, h0=object()), "h0 cannot be converted", types=(TypeError,))


def test_xla_refused_clearly():
    """selective_scan inside tf.function(jit_compile=True): a ValueError at trace time saying the op
    has no XLA kernel and what to use (before: TensorFlow's 'Detected unsupported operations')."""
    t = problem()
    f = tf.function(lambda: selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"]), jit_compile=True,
                    autograph=False)
    raises(f, "no XLA kernel", "selective_scan_tf", types=(ValueError,))


def test_layer_constructor_args():
    """SelectiveScan / MambaVisionMixer sizes are positive integers (before: 2.5 truncated to 2, 0
    accepted until the op refused 'dstate') and 0 < dt_min <= dt_max (before: dt_min=0 raised
    'math domain error', dt_min > dt_max was accepted)."""
    for kw, needle in ((dict(dim=2.5), "dim must be a positive integer"),
                       (dict(dim=0), "dim must be a positive integer"),
                       (dict(dim=4, d_state=0), "d_state must be a positive integer"),
                       (dict(dim=True), "dim must be a positive integer"),
                       (dict(dim=4, dt_min=0.0), "dt_min and dt_max"),
                       (dict(dim=4, dt_min=0.5, dt_max=0.1), "dt_min and dt_max"),
                       (dict(dim=4, layout=b"BLD"), "layout")):
        raises(lambda: SelectiveScan(**kw), needle, types=(ValueError, TypeError))
    assert SelectiveScan(np.int64(4), d_state=16.0).d_state == 16
    for kw, needle in ((dict(d_model=2.5), "d_model must be a positive integer"),
                       (dict(d_model=8, d_state=0), "d_state must be a positive integer"),
                       (dict(d_model=8, d_conv=-1), "d_conv must be a positive integer"),
                       (dict(d_model=8, dt_rank=1.5), "dt_rank must be a positive integer"),
                       (dict(d_model=8, expand=0), "expand must be a positive number"),
                       (dict(d_model=8, expand=1.3), "must be an integer"),
                       (dict(d_model=8, dt_min=-1.0), "dt_min and dt_max")):
        raises(lambda: MambaVisionMixer(**kw), needle, types=(ValueError, TypeError))


def test_mixer_call_input():
    """MambaVisionMixer on an integer, rank-2 or wrong-channel input: a message naming x and
    d_model (before: TensorFlow's MatMul / Pad / Reshape errors)."""
    m = MambaVisionMixer(8, d_state=4)
    x = tf.random.normal([2, 6, 8], seed=1)
    assert m(x).shape == x.shape
    raises(lambda: m(tf.cast(x, tf.int32)), "x must be a floating-point tensor", types=ERRORS)
    raises(lambda: m(x[0]), "x must have shape (batch, L, d_model) with d_model=8", types=ERRORS)
    raises(lambda: m(x[..., :7]), "x must have shape (batch, L, d_model) with d_model=8", types=ERRORS)


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]))
