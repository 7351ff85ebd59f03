"""Tests of selscan_tf's decode step (selective_state_update, the SelscanStep op) and packed
sequences (selective_scan(..., cu_seqlens=...)), make test-tf. Plain Python: one line per test and
`N passed, N failed` last.

The oracle is test_selscan_tf.py's fp64 NumPy scan (ref_scan): the step against one step of it
(L = 1 from the state), a decode loop against the whole scan, packed sequences against separate
calls (values against the fp64 reference, gradients against the op's own separate calls).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tensorflow as tf  # noqa: E402

from selscan_tf import selective_scan, selective_state_update  # noqa: E402
from runner import raises, run_tests  # noqa: E402
from test_selscan_tf import TOL, Problem, ref_scan, rel_err, seq_from_layout  # noqa: E402

STEP_KEYS = ("x", "dt", "z", "B", "C")  # the T-typed operands of the step


def step_problem(rng, batch=3, dim=6, N=5, G=1, n_cache=None, D=True, z=True, dt_bias=True, softplus=True):
    """Random step inputs (fp64): state (n_cache, dim, N), x / dt / z (batch, dim), B / C (batch, G, N)."""
    f = lambda *s: rng.standard_normal(s)  # noqa: E731
    x = {"state": f(n_cache or batch, dim, N), "x": f(batch, dim),
         "dt": rng.uniform(-3.0, 1.0, (batch, dim)) if softplus else rng.uniform(0.05, 0.6, (batch, dim)),
         "A": -np.exp(0.5 * f(dim, N)), "B": f(batch, G, N), "C": f(batch, G, N)}
    if D:
        x["D"] = f(dim)
    if z:
        x["z"] = f(batch, dim)
    if dt_bias:
        x["dt_bias"] = rng.uniform(-0.5, 0.5, dim)
    return x


def round_step(x, dtype):
    """The inputs rounded to what the op sees (T operands to dtype, the rest to float32)."""
    return {k: (tf.cast(tf.cast(v, dtype), tf.float64) if k in STEP_KEYS else tf.cast(tf.cast(v, tf.float32),
                tf.float64)).numpy() for k, v in x.items()}


def ref_step(x, softplus, rows=None):
    """One step of ref_scan (L = 1) from state[rows] (rows: the batch rows' state rows, all present)."""
    rows = np.arange(x["x"].shape[0]) if rows is None else rows
    y, h = ref_scan(x["x"][:, :, None], x["dt"][:, :, None], x["A"], x["B"][..., None], x["C"][..., None],
                    x.get("D"), x["z"][:, :, None] if "z" in x else None, x.get("dt_bias"), softplus,
                    x["state"][rows])
    return y[:, :, 0], h


def call_step(x, dtype, softplus, one_group_2d=False, **kw):
    t = {k: tf.constant(v, dtype if k in STEP_KEYS else tf.float32) for k, v in x.items()}
    B, C = t["B"], t["C"]
    if one_group_2d:  # (batch, N): one group without its axis
        B, C = B[:, 0], C[:, 0]
    return selective_state_update(t["state"], t["x"], t["dt"], t["A"], B, C, D=t.get("D"), z=t.get("z"),
                                  dt_bias=t.get("dt_bias"), dt_softplus=softplus, **kw)


def test_step_vs_reference():
    """The step equals one step of the fp64 scan from the state: out and the new state, every
    optional operand on and off, one group ((batch, N) and (batch, 1, N)) and several, three dtypes."""
    rng = np.random.default_rng(1)
    n = 0
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
        for G, two_d in ((1, True), (1, False), (3, False)):
            for opts in (dict(), dict(D=False, z=False, dt_bias=False, softplus=False)):
                x = round_step(step_problem(rng, G=G, **opts), dtype)
                sp = opts.get("softplus", True)
                out, new_state = call_step(x, dtype, sp, one_group_2d=two_d)
                assert out.dtype == dtype and out.shape == x["x"].shape
                assert new_state.dtype == tf.float32 and new_state.shape == x["state"].shape
                y_ref, h_ref = ref_step(x, sp)
                e = rel_err(tf.cast(out, tf.float64).numpy(), y_ref)
                assert e <= TOL[dtype], "out %s G=%d: rel err %.3g" % (dtype.name, G, e)
                e = rel_err(new_state.numpy(), h_ref)  # float32: no rounding to dtype
                assert e <= TOL[tf.float32], "new_state %s G=%d: rel err %.3g" % (dtype.name, G, e)
                n += 1
    return "%d cases" % n


def test_step_state_batch_indices():
    """state_batch_indices: each batch row updates its own cache row, a negative entry is padding
    (out 0, no row touched), rows not named pass through unchanged; any integer dtype."""
    rng = np.random.default_rng(2)
    x = round_step(step_problem(rng, batch=3, n_cache=6, G=2), tf.float32)
    idx = np.array([4, -1, 1])
    for idx_dtype in (np.int32, np.int64):
        out, new_state = call_step(x, tf.float32, True, state_batch_indices=idx.astype(idx_dtype))
        live = idx >= 0
        sub = dict(x, **{k: x[k][live] for k in ("x", "dt", "z", "B", "C")})
        y_ref, h_ref = ref_step(sub, True, rows=idx[live])
        out, new_state = out.numpy(), new_state.numpy()
        assert rel_err(out[live], y_ref) <= TOL[tf.float32]
        assert np.all(out[~live] == 0), "padding row's out is not 0"
        assert rel_err(new_state[idx[live]], h_ref) <= TOL[tf.float32]
        untouched = np.setdiff1d(np.arange(6), idx[live])
        assert np.array_equal(new_state[untouched], x["state"][untouched].astype(np.float32)), "untouched rows changed"


def test_step_state_batch_indices_past_int32():
    """An index past int32's range in a wider integer dtype is refused as past n_cache, not wrapped (2**32 + 1 was
    taken as row 1, 2**32 - 1 and uint32 2**31 + 1 as padding); a large negative one is padding as -1 is."""
    rng = np.random.default_rng(5)
    x = round_step(step_problem(rng, batch=2, n_cache=3), tf.float32)
    for idx in (np.array([2**32 + 1, 0], np.int64), np.array([2**32 - 1, 0], np.int64), np.array([2**31 + 1, 0], np.uint32),
                np.array([2**63 + 5, 0], np.uint64)):
        raises(lambda: call_step(x, tf.float32, True, state_batch_indices=idx), "state_batch_indices", "n_cache")
    out, new_state = call_step(x, tf.float32, True, state_batch_indices=np.array([-2**40, 0], np.int64))
    want_out, want_state = call_step(x, tf.float32, True, state_batch_indices=np.array([-1, 0], np.int32))
    assert np.array_equal(out.numpy(), want_out.numpy()) and np.array_equal(new_state.numpy(), want_state.numpy())


def test_step_immutable_state():
    """The state passed in is left as it was (TensorFlow tensors are immutable: new_state is
    returned), also when the caller drops its own reference (the op may then reuse the buffer)."""
    rng = np.random.default_rng(3)
    x = round_step(step_problem(rng), tf.float32)
    state = tf.constant(x["state"], tf.float32)
    before = state.numpy().copy()
    _, s1 = call_step(dict(x, state=state), tf.float32, True)
    assert np.array_equal(state.numpy(), before), "the input state changed"
    assert not np.array_equal(s1.numpy(), before)
    # in a tf.function the state is an intermediate (no other user): the result is still right
    f = tf.function(lambda s: selective_state_update(s * 1.0, tf.constant(x["x"], tf.float32),
                                                     tf.constant(x["dt"], tf.float32), tf.constant(x["A"], tf.float32),
                                                     tf.constant(x["B"], tf.float32), tf.constant(x["C"], tf.float32),
                                                     D=tf.constant(x["D"], tf.float32), z=tf.constant(x["z"], tf.float32),
                                                     dt_bias=tf.constant(x["dt_bias"], tf.float32), dt_softplus=True))
    out2, s2 = f(state)
    assert np.array_equal(s2.numpy(), s1.numpy())
    assert np.array_equal(state.numpy(), before)


def test_step_empty():
    """An empty step (bindings/common >>bind-empty): batch 0, dim 0, or a cache of no rows with
    every row padding (issue 39: that one was refused as "state: missing"): out 0, the state passed
    through, the inputs untouched, in eager and in a tf.function; n_cache 0 without indices refused."""
    rng = np.random.default_rng(4)
    for batch, dim, n_cache in ((0, 6, 2), (3, 0, 2), (3, 6, 0)):
        x = step_problem(rng, batch=batch, dim=dim, n_cache=n_cache or 1)
        x["state"] = x["state"][:n_cache]
        before = {k: v.copy() for k, v in x.items()}
        idx = np.full([batch], -1, np.int32)
        for mode in ("eager", "graph"):
            run = lambda: call_step(x, tf.float32, True, state_batch_indices=idx)  # noqa: E731
            out, new_state = run() if mode == "eager" else tf.function(run, autograph=False)()
            where = "batch %d dim %d n_cache %d %s" % (batch, dim, n_cache, mode)
            assert out.shape == (batch, dim) and not np.any(out.numpy()), where
            assert np.array_equal(new_state.numpy(), x["state"].astype(np.float32)), where
        assert all(np.array_equal(x[k], before[k]) for k in x), "an input changed"
    x = step_problem(rng, batch=3, n_cache=1)
    x["state"] = x["state"][:0]
    raises(lambda: call_step(x, tf.float32, True), "not batch without state_batch_indices")


def test_decode_loop_equals_scan():
    """L decode steps from h0 give the scan's y and h_last: against the fp64 reference and against
    selective_scan (the op's own forward)."""
    rng = np.random.default_rng(5)
    for G in (1, 2):
        prob = Problem(rng, batch=2, dim=4, L=13, N=5, G=G, D=True, z=True, delta_bias=True, softplus=True,
                       h0=True, return_last_state=True)
        prob.round_to(tf.float32)
        px = prob.x
        state = tf.constant(px["h0"], tf.float32)
        outs = []
        for t in range(prob.L):
            out, state = selective_state_update(
                state, px["u"][:, :, t].astype(np.float32), px["delta"][:, :, t].astype(np.float32), px["A"],
                px["B"][..., t].astype(np.float32), px["C"][..., t].astype(np.float32), D=px["D"],
                z=px["z"][:, :, t].astype(np.float32), dt_bias=px["delta_bias"], dt_softplus=True)
            outs.append(out.numpy())
        y_dec = np.stack(outs, axis=-1)
        y_ref, h_ref = prob.ref()
        assert rel_err(y_dec, y_ref) <= TOL[tf.float32], "decode y vs fp64 scan"
        assert rel_err(state.numpy(), h_ref) <= TOL[tf.float32], "decode state vs fp64 h_last"
        y_op, h_op = prob.call(prob.tensors("BDL"), "BDL")
        assert rel_err(y_dec, y_op.numpy()) <= 1e-5 and rel_err(state.numpy(), h_op.numpy()) <= 1e-5


# ------------------------------------------------------------------------------------------------
# packed sequences

PACKED_INPUTS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0")


def packed_problem(rng, lens, dim=4, N=3, G=2):
    """One batch row holding len(lens) sequences back to back (fp64, logical layout), h0 (n_seqs, dim, N)."""
    prob = Problem(rng, batch=1, dim=dim, L=int(sum(lens)), N=N, G=G, D=True, z=True, delta_bias=True,
                   softplus=True, return_last_state=True)
    prob.x["h0"] = rng.standard_normal((len(lens), dim, N))
    prob.round_to(tf.float32)
    return prob, np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def piece(t, layout, k, a, b):
    """Sequence [a, b) of a packed tensor t (u-like or B-like) along L in its layout."""
    if k in ("u", "delta", "z"):
        return t[:, a:b] if layout == "BLD" else t[:, :, a:b]
    return t[:, a:b] if layout == "BLD" else t[..., a:b]


def packed_call(t, layout, cu=None, h0=None):
    return selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], D=t["D"], z=t["z"], delta_bias=t["delta_bias"],
                          delta_softplus=True, h0=h0, return_last_state=True, layout=layout, cu_seqlens=cu)


def test_packed_vs_separate():
    """cu_seqlens: y and h_last equal the fp64 reference run on each sequence alone (an empty
    sequence's h_last is its h0), and equal the op run on each sequence alone; both layouts."""
    rng = np.random.default_rng(6)
    for layout in ("BLD", "BDL"):
        for lens in ((3, 0, 5, 4), (7,), (0, 0), (1, 2)):
            prob, cu = packed_problem(rng, lens)
            t = prob.tensors(layout)
            y, h = packed_call(t, layout, cu, t["h0"])
            assert h.shape == (len(lens), prob.dim, prob.N)
            y_l = seq_from_layout(y.numpy().astype(np.float64), layout)
            for s in range(len(lens)):
                a, b = cu[s], cu[s + 1]
                x = dict(prob.x, h0=prob.x["h0"][s:s + 1], u=prob.x["u"][..., a:b], delta=prob.x["delta"][..., a:b],
                         z=prob.x["z"][..., a:b], B=prob.x["B"][..., a:b], C=prob.x["C"][..., a:b])
                y_ref, h_ref = ref_scan(x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"],
                                        True, x["h0"])
                if b > a:
                    assert rel_err(y_l[..., a:b], y_ref) <= TOL[tf.float32], "%s y of sequence %d" % (lens, s)
                    ts = {k: piece(t[k], layout, k, a, b) if k in ("u", "delta", "z", "B", "C") else t[k] for k in t}
                    y_s, h_s = packed_call(ts, layout, h0=t["h0"][s:s + 1])
                    assert rel_err(seq_from_layout(y_s.numpy(), layout), y_l[..., a:b]) <= 1e-6
                    assert rel_err(h_s.numpy(), h.numpy()[s:s + 1]) <= 1e-6
                assert rel_err(h.numpy()[s:s + 1], h_ref) <= TOL[tf.float32], "%s h_last of sequence %d" % (lens, s)
                if b == a:
                    assert np.array_equal(h.numpy()[s], t["h0"].numpy()[s]), "empty sequence: h_last is not h0"


def test_packed_gradients_vs_separate():
    """Gradients through cu_seqlens (every input, from y and h_last) equal the sums over separate
    calls, one per sequence; also inside a tf.function with cu_seqlens of unknown length."""
    rng = np.random.default_rng(7)
    for layout in ("BLD", "BDL"):
        lens = (4, 0, 6, 3)
        prob, cu = packed_problem(rng, lens)
        t = prob.tensors(layout)
        y0, h0_ = packed_call(t, layout, cu, t["h0"])
        wy = tf.constant(rng.standard_normal(y0.shape), tf.float32)
        wh = tf.constant(rng.standard_normal(h0_.shape), tf.float32)

        def packed_grads(cu_t):
            with tf.GradientTape() as tape:
                tape.watch(list(t.values()))
                y, h = packed_call(t, layout, cu_t, t["h0"])
                loss = tf.reduce_sum(y * wy) + tf.reduce_sum(h * wh)
            return tape.gradient(loss, [t[k] for k in PACKED_INPUTS])

        g_packed = packed_grads(tf.constant(cu))
        g_fn = tf.function(packed_grads, input_signature=[tf.TensorSpec([None], tf.int64)])(tf.constant(cu))
        for k, a, b in zip(PACKED_INPUTS, g_packed, g_fn):
            assert np.array_equal(a.numpy(), b.numpy()), "tf.function gradient of %s differs" % k
        # separate calls: u-like / B-like gradients concatenated along L, h0's stacked, the rest summed
        parts = {k: [] for k in PACKED_INPUTS}
        for s in range(len(lens)):
            a, b = int(cu[s]), int(cu[s + 1])
            ts = {k: piece(t[k], layout, k, a, b) if k in ("u", "delta", "z", "B", "C") else t[k] for k in t}
            ts["h0"] = t["h0"][s:s + 1]
            with tf.GradientTape() as tape:
                tape.watch(list(ts.values()))
                y, h = packed_call(ts, layout, h0=ts["h0"])
                loss = tf.reduce_sum(y * piece(wy, layout, "u", a, b)) + tf.reduce_sum(h * wh[s:s + 1])
            for k, g in zip(PACKED_INPUTS, tape.gradient(loss, [ts[k] for k in PACKED_INPUTS])):
                parts[k].append(g)
        for k, g in zip(PACKED_INPUTS, g_packed):
            if k in ("u", "delta", "z"):
                want = tf.concat(parts[k], axis=1 if layout == "BLD" else 2)
            elif k in ("B", "C"):
                want = tf.concat(parts[k], axis=1 if layout == "BLD" else 3)
            elif k == "h0":
                want = tf.concat(parts[k], axis=0)
            else:
                want = tf.add_n(parts[k])
            e = rel_err(g.numpy(), want.numpy())
            assert e <= 1e-5, "%s d%s: rel err %.3g vs separate calls" % (layout, k, e)
        # the empty sequence's state passes through: dh0 = dh_last there
        assert np.array_equal(g_packed[PACKED_INPUTS.index("h0")].numpy()[1], wh.numpy()[1])


# ------------------------------------------------------------------------------------------------
# bad input: errors naming the argument


def test_packed_bad_input():
    """cu_seqlens refused with its name: batch != 1, bad rank / length, a float tensor, bad values
    (first not 0, last not L, decreasing), also for an empty problem and at trace time; h0 with
    batch rows instead of n_seqs."""
    rng = np.random.default_rng(8)
    prob, cu = packed_problem(rng, (3, 4))
    t = prob.tensors("BLD")
    call = lambda cu_, h0=None, **kw: packed_call(dict(t, **kw), "BLD", cu_, h0)  # noqa: E731
    u2 = tf.concat([t["u"], t["u"]], 0)
    raises(lambda: selective_scan(u2, u2, t["A"], tf.concat([t["B"]] * 2, 0), tf.concat([t["C"]] * 2, 0),
                                  cu_seqlens=cu), "argument 'u': not 1 with cu_seqlens")
    raises(lambda: call(cu[None]), "argument 'cu_seqlens': wrong shape: want (n_seqs + 1,)")
    raises(lambda: call(cu[:1]), "argument 'cu_seqlens': no sequence")  # n_seqs 0
    raises(lambda: call(cu.astype(np.float32)), "cu_seqlens", types=(TypeError,))
    raises(lambda: call(np.array([1, 3, 7])), "'cu_seqlens'", "first offset")
    raises(lambda: call(np.array([0, 3, 6])), "'cu_seqlens'", "last offset")
    raises(lambda: call(np.array([0, 5, 3, 7])), "'cu_seqlens'", "decreasing")
    raises(lambda: call(cu, h0=tf.zeros([1, prob.dim, prob.N])), "argument 'h0': wrong shape: want (n_seqs, dim, N)")
    # an empty problem (L = 0): selscan is not called, the binding layer's rule refuses
    e = {k: (v[:, :0] if k in ("u", "delta", "z", "B", "C") else v) for k, v in t.items()}
    raises(lambda: packed_call(e, "BLD", np.array([0, 1])), "'cu_seqlens'", "last offset")
    y, h = packed_call(e, "BLD", np.array([0, 0, 0]), tf.ones([2, prob.dim, prob.N]))
    assert y.shape == (1, 0, prob.dim) and np.array_equal(h.numpy(), np.ones([2, prob.dim, prob.N]))
    # at trace time (graph construction): the known shapes are checked
    f = tf.function(lambda c: selective_scan(u2, u2, t["A"], tf.concat([t["B"]] * 2, 0), tf.concat([t["C"]] * 2, 0),
                                             cu_seqlens=c))
    raises(lambda: f.get_concrete_function(tf.TensorSpec([3], tf.int64)), "argument 'u': not 1 with cu_seqlens", types=(ValueError,))
    # the backward checks the offsets too (a raw call)
    ops = __import__("selscan_tf").load_ops()
    E = tf.zeros([0])
    raises(lambda: ops.selscan_backward(t["u"], t["delta"], t["A"], t["B"], t["C"], E, E, E, E, np.array([0, 2, 5]),
                                        tf.ones_like(t["u"]), E, E, has_cu_seqlens=True), "'cu_seqlens'", "last offset")
    raises(lambda: ops.selscan_forward(t["u"], t["delta"], t["A"], t["B"], t["C"], E, E, E, E, cu),
           "cu_seqlens is given", "has_cu_seqlens is false")


def test_step_bad_input():
    """selective_state_update refuses bad shapes, dtypes and indices with the argument's name."""
    rng = np.random.default_rng(9)
    x = step_problem(rng, batch=2, dim=4, N=3)
    t = {k: tf.constant(v, tf.float32) for k, v in x.items()}

    def call(**kw):
        a = dict(t, **kw)
        return selective_state_update(a["state"], a["x"], a["dt"], a["A"], a["B"], a["C"], D=a.get("D"),
                                      z=a.get("z"), dt_bias=a.get("dt_bias"), dt_softplus=True,
                                      state_batch_indices=a.get("idx"))

    raises(lambda: call(x=tf.zeros([2, 4, 1])), "argument 'x': wrong shape: want (batch, dim)")
    raises(lambda: call(state=tf.zeros([2, 4])), "argument 'state': wrong shape")
    raises(lambda: call(state=tf.zeros([2, 5, 3])), "argument 'state': wrong shape", "= [2, 4, 3]")  # x's dim
    raises(lambda: call(state=tf.zeros([2, 4, 3], tf.float64)), "state must be float32", types=(TypeError,))
    raises(lambda: call(dt=tf.zeros([2, 4], tf.float16)), "dt has dtype float16", types=(TypeError,))
    raises(lambda: call(x=tf.zeros([2, 4], tf.int32)), "x must be float32", types=(TypeError,))
    raises(lambda: call(dt=tf.zeros([2, 3])), "argument 'dt': wrong shape")
    raises(lambda: call(z=tf.zeros([1, 4])), "argument 'z': wrong shape")
    raises(lambda: call(A=tf.zeros([4, 2])), "argument 'A': wrong shape: want (dim, N)")
    raises(lambda: call(B=tf.zeros([2, 1, 2])), "argument 'B': wrong shape")
    raises(lambda: call(C=tf.zeros([2, 2, 3]), B=tf.zeros([2, 1, 3])), "argument 'C': wrong shape: want (batch, G, N) = [2, 1, 3]")
    raises(lambda: call(B=tf.zeros([2, 3, 3]), C=tf.zeros([2, 3, 3])), "argument 'B': does not divide dim")
    raises(lambda: call(D=tf.zeros([5])), "argument 'D': wrong shape: want (dim,)")
    raises(lambda: call(dt_bias=tf.zeros([3])), "argument 'dt_bias': wrong shape: want (dim,)")
    raises(lambda: call(idx=np.array([0, 2])), "'state_batch_indices'", "not below n_cache")
    raises(lambda: call(idx=np.array([1, 1])), "'state_batch_indices'", "row used twice")
    raises(lambda: call(idx=np.array([0])), "argument 'state_batch_indices': wrong shape: want (batch,)")
    raises(lambda: call(idx=np.array([0.0, 1.0])), "state_batch_indices must be an integer", types=(TypeError,))
    raises(lambda: call(state=tf.zeros([3, 4, 3])), "argument 'state': not batch without state_batch_indices")
    raises(lambda: selective_state_update(t["state"], t["x"], t["dt"], t["A"], t["B"], t["C"], dt_softplus="yes"),
           "dt_softplus must be a bool", types=(TypeError,))
    # the empty problem checks the indices too (selscan is not called)
    raises(lambda: call(state=tf.zeros([1, 0, 3]), x=tf.zeros([2, 0]), dt=tf.zeros([2, 0]), A=tf.zeros([0, 3]),
                        D=None, z=None, dt_bias=None, idx=np.array([0, 1])), "'state_batch_indices'", "not below n_cache")
    # no gradient (inference): a clear None, never a wrong value
    with tf.GradientTape() as tape:
        tape.watch(t["x"])
        out, _ = call()
    assert tape.gradient(out, t["x"]) is None


TESTS = [
    test_step_vs_reference,
    test_step_state_batch_indices,
    test_step_state_batch_indices_past_int32,
    test_step_immutable_state,
    test_step_empty,
    test_decode_loop_equals_scan,
    test_packed_vs_separate,
    test_packed_gradients_vs_separate,
    test_packed_bad_input,
    test_step_bad_input,
]


def main():
    return run_tests(TESTS, width=34)


if __name__ == "__main__":
    sys.exit(main())
