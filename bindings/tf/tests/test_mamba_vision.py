"""Tests of selscan_tf's MambaVision mixer (make test-tf). Plain Python: one line per test, then
`N passed, N failed`; exits non-zero on a failure. Imports the installed package (pip install).

The oracle: a float64 TensorFlow re-implementation of PyTorch MambaVisionMixer.forward, written
in PyTorch's conventions (channels-first (batch, channels, L) activations, nn.Linear weights
(out, in), depthwise Conv1d weights (C, 1, k), 'same' padding, a Python loop over the L steps)
from the facts of NVlabs/MambaVision's source: it takes a PyTorch-named state dict, so it also
checks load_mixer_state_dict's name / shape mapping. Gradients come from float64 autodiff of
that reference. Errors are relative: ||out - ref|| / ||ref||.
"""

import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import selscan_tf  # noqa: E402
from selscan_tf import MambaVisionBlock, MambaVisionMixer, load_mixer_state_dict, mixer_state_dict_shapes  # noqa: E402
from runner import raises, run_tests  # noqa: E402
from test_selscan_tf import lowp_tol  # noqa: E402

keras = tf.keras

# float32: rounding of float32 activations through five matmuls, two convolutions and the scan.
# The mixed policies round every activation to 8 (bfloat16) or 11 (float16) significant bits: the
# bound is test_selscan_tf.lowp_tol with own = the error of the float64 reference itself computed in
# that dtype (every intermediate rounded), measured on the same parameters, input and loss weights.
TOL32, GRAD_TOL32 = 2e-5, 5e-5
COMPUTE = {"mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}
# k = 3: the layer rounds its matmul / conv results to the dtype as the dtype reference does (which
# also rounds the scan's), in another order: another draw of an error of own's size, measured at most
# 1.6 own here (the two configurations x 13 results, both policies, CPU) and 2.4 with other loss weights
K_OWN = 3


# ------------------------------------------------------------------------------------------------
# float64 reference of PyTorch's MambaVisionMixer.forward (PyTorch names, shapes and layouts)


def torch_mixer_ref(sd, x, d_state, dt_rank):
    """sd: {PyTorch name: float64 tensor}; x (batch, L, d_model) float64 -> (batch, L, d_model).
    Computes in x's dtype (sd of the same dtype): float16 / bfloat16 give the reference's own
    rounding, every intermediate rounded to that dtype."""
    W = sd["in_proj.weight"]  # (d_inner, d_model)
    xz = tf.einsum("bld,ed->bel", x, W)  # in_proj, then "b l d -> b d l"
    if "in_proj.bias" in sd:
        xz = xz + sd["in_proj.bias"][None, :, None]
    h = W.shape[0] // 2
    xs, zs = xz[:, :h], xz[:, h:]  # chunk(2, dim=1)

    def conv_same(v, w):  # F.conv1d(v, w (C, 1, k), padding='same', groups=C): cross-correlation
        k = w.shape[2]
        left = (k - 1) // 2
        vp = tf.pad(v, [[0, 0], [0, 0], [left, k - 1 - left]])
        L = v.shape[2]
        return tf.add_n([w[None, :, 0, j, None] * vp[:, :, j:j + L] for j in range(k)])

    silu = lambda v: v * tf.sigmoid(v)  # noqa: E731
    xs = silu(conv_same(xs, sd["conv1d_x.weight"]))
    zs = silu(conv_same(zs, sd["conv1d_z.weight"]))
    x_dbl = tf.einsum("bcl,rc->blr", xs, sd["x_proj.weight"])  # x_proj on "(b l) d"
    dt = x_dbl[..., :dt_rank]
    Bm = tf.transpose(x_dbl[..., dt_rank:dt_rank + d_state], [0, 2, 1])  # (b, n, l)
    Cm = tf.transpose(x_dbl[..., dt_rank + d_state:], [0, 2, 1])
    delta = tf.einsum("blr,cr->bcl", dt, sd["dt_proj.weight"]) + sd["dt_proj.bias"][None, :, None]  # dt_proj (bias)
    # selective_scan_fn(x, dt, A, B, C, D, z=None, delta_bias=dt_proj.bias, delta_softplus=True)
    A = -tf.exp(sd["A_log"])
    d = delta + sd["dt_proj.bias"][None, :, None]
    d = tf.math.log1p(tf.exp(-tf.abs(d))) + tf.maximum(d, 0.0)  # softplus
    state = tf.zeros([x.shape[0], h, d_state], x.dtype)
    ys = []
    for t in range(x.shape[1]):
        state = tf.exp(d[:, :, t, None] * A) * state + (d[:, :, t] * xs[:, :, t])[:, :, None] * Bm[:, None, :, t]
        ys.append(tf.reduce_sum(state * Cm[:, None, :, t], axis=-1))
    y = tf.stack(ys, axis=2) + sd["D"][None, :, None] * xs
    y = tf.concat([y, zs], axis=1)  # cat([y, z], dim=1), then "b d l -> b l d"
    out = tf.einsum("bcl,mc->blm", y, sd["out_proj.weight"])
    if "out_proj.bias" in sd:
        out = out + sd["out_proj.bias"]
    return out


def synthetic_state_dict(rng, layer):
    """Random PyTorch-named parameters of the layer's sizes, in realistic ranges (float32 values)."""
    shapes = mixer_state_dict_shapes(layer)
    sd = {}
    for name, shape in shapes.items():
        if name == "A_log":
            v = np.log(np.arange(1, shape[1] + 1))[None, :] + 0.3 * rng.standard_normal(shape)
        elif name == "D":
            v = 1.0 + 0.5 * rng.standard_normal(shape)
        elif name == "dt_proj.bias":
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), shape))
            v = dt + np.log(-np.expm1(-dt)) + 0.2 * rng.standard_normal(shape)
        else:
            fan_in = shape[1] if len(shape) == 2 else shape[-1]
            v = rng.uniform(-1.5, 1.5, shape) / np.sqrt(fan_in)
        sd[name] = v.astype(np.float32)
    return sd


# PyTorch name -> (layer attribute, how the PyTorch array maps onto the variable)
VAR_MAP = {
    "in_proj.weight": ("in_proj_kernel", lambda a: a.T),
    "in_proj.bias": ("in_proj_bias", lambda a: a),
    "conv1d_x.weight": ("conv1d_x_kernel", lambda a: a[:, 0, :].T),
    "conv1d_z.weight": ("conv1d_z_kernel", lambda a: a[:, 0, :].T),
    "x_proj.weight": ("x_proj_kernel", lambda a: a.T),
    "dt_proj.weight": ("dt_proj_kernel", lambda a: a.T),
    "dt_proj.bias": ("dt_proj_bias", lambda a: a),
    "A_log": ("A_log", lambda a: a),
    "D": ("D", lambda a: a),
    "out_proj.weight": ("out_proj_kernel", lambda a: a.T),
    "out_proj.bias": ("out_proj_bias", lambda a: a),
}


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def with_policy(policy, fn):
    old = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        return fn()
    finally:
        keras.mixed_precision.set_global_policy(old)


CONFIGS = [
    # MambaVision's blocks: d_state 8, d_conv 3, expand 1 (dt_rank = ceil(80 / 16) = 5 for dim 80)
    dict(d_model=40, d_state=8, d_conv=3, expand=1, L=13, batch=2),
    # the mixer's own defaults (d_conv 4: 'same' pads 1 before and 2 after), projection biases
    dict(d_model=24, d_state=16, d_conv=4, expand=2, bias=True, L=70, batch=2),
]


def compare_with_reference(cfg, policy, scan_impl="op", seed=0):
    """Output and the gradient of every trainable variable (and of x) against the reference."""
    cfg = dict(cfg)
    L, batch = cfg.pop("L"), cfg.pop("batch")
    rng = np.random.default_rng(seed)

    def run():
        layer = MambaVisionMixer(scan_impl=scan_impl, **cfg)
        sd = synthetic_state_dict(rng, layer)
        loaded = load_mixer_state_dict(layer, sd)
        assert sorted(loaded) == sorted(sd)
        x = rng.standard_normal((batch, L, cfg["d_model"])).astype(np.float32)
        w = rng.standard_normal((batch, L, cfg["d_model"]))  # loss = sum(w * out)
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            out = layer(xt)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.constant(w, tf.float32))
        grads = tape.gradient(loss, [xt] + layer.trainable_variables)
        assert out.dtype == layer.compute_dtype, (out.dtype, layer.compute_dtype)
        assert all(v.dtype == "float32" for v in layer.weights)
        names = [v.path.split("/")[-1] for v in layer.trainable_variables]
        return layer, sd, x, w, out, grads, names

    layer, sd, x, w, out, grads, names = with_policy(policy, run)
    def reference(dtype):
        """torch_mixer_ref's out and gradients in dtype, on the same (float32) parameters and input."""
        sdv = {k: tf.Variable(tf.cast(v.astype(np.float64), dtype)) for k, v in sd.items()}
        xr = tf.cast(tf.constant(x.astype(np.float64)), dtype)
        with tf.GradientTape() as tape:
            tape.watch(xr)
            ref = torch_mixer_ref(sdv, xr, layer.d_state, layer.dt_rank)
            loss = tf.reduce_sum(tf.cast(ref, tf.float64) * w)
        keys = sorted(sdv)
        rg = tape.gradient(loss, [xr] + [sdv[k] for k in keys])
        ref_grads = {"x": tf.cast(rg[0], tf.float64).numpy()}
        for k, g in zip(keys, rg[1:]):
            attr, f = VAR_MAP[k]
            ref_grads[attr] = f(tf.cast(g, tf.float64).numpy())
        return tf.cast(ref, tf.float64).numpy(), ref_grads

    ref, ref_grads = reference(tf.float64)
    if policy == "float32":
        tol = {k: TOL32 if k == "out" else GRAD_TOL32 for k in ["out"] + ["d" + n for n in ref_grads]}
    else:
        own, own_grads = reference(COMPUTE[policy])
        tol = {"out": lowp_tol(COMPUTE[policy], TOL32, K_OWN, own=rel(own, ref))}
        tol.update({"d" + n: lowp_tol(COMPUTE[policy], GRAD_TOL32, K_OWN, own=rel(own_grads[n], ref_grads[n]))
                    for n in ref_grads})
    errs = {"out": rel(tf.cast(out, tf.float32).numpy(), ref)}
    assert errs["out"] <= tol["out"], "output: rel err %.2e > %.2e (%s %s)" % (errs["out"], tol["out"], policy, cfg)
    got = {"x": grads[0].numpy()}
    for n, g in zip(names, grads[1:]):
        assert g is not None, "no gradient for %s" % n
        got[n] = tf.convert_to_tensor(g).numpy()
    assert sorted(got) == sorted(ref_grads), (sorted(got), sorted(ref_grads))
    for n in got:
        errs["d" + n] = rel(got[n], ref_grads[n])
        assert errs["d" + n] <= tol["d" + n], "d%s: rel err %.2e > %.2e (%s %s)" % (
            n, errs["d" + n], tol["d" + n], policy, cfg)
    return errs


def _summary(all_errs):
    worst_out = max(e["out"] for e in all_errs)
    worst_grad = max(v for e in all_errs for k, v in e.items() if k != "out")
    return "max rel err: output %.1e, gradients %.1e" % (worst_out, worst_grad)


def test_mixer_vs_reference_f32():
    """Loaded from a synthetic PyTorch state dict: output and all 10-12 gradients vs float64."""
    return _summary([compare_with_reference(c, "float32", seed=i) for i, c in enumerate(CONFIGS)])


def test_mixer_vs_reference_mixed_bfloat16():
    return _summary([compare_with_reference(c, "mixed_bfloat16", seed=10 + i) for i, c in enumerate(CONFIGS)])


def test_mixer_vs_reference_mixed_float16():
    return _summary([compare_with_reference(c, "mixed_float16", seed=20 + i) for i, c in enumerate(CONFIGS)])


def test_pure_tf_mixer_vs_reference():
    """The tf.scan baseline (scan_impl='tf') computes the same function."""
    return _summary([compare_with_reference(c, "float32", scan_impl="tf", seed=30 + i) for i, c in enumerate(CONFIGS)])


def test_init():
    """MambaVisionMixer's initialisation: A_log = log(1..N) per channel, D = 1, the dt bias is
    softplus^-1 of a dt in [dt_min, dt_max], dt_proj in +-dt_rank^-0.5, projections in +-fan_in^-0.5."""
    m = MambaVisionMixer(64, d_state=8, d_conv=3, expand=2)
    m.build((None, None, 64))
    assert m.dt_rank == 4 and m.d_inner == 128
    assert np.allclose(m.A_log.numpy(), np.log(np.arange(1, 9))[None, :].repeat(64, 0), rtol=0, atol=1e-6)
    assert np.array_equal(m.D.numpy(), np.ones(64, np.float32))
    dt = np.log1p(np.exp(m.dt_proj_bias.numpy().astype(np.float64)))
    assert dt.min() >= 1e-3 * (1 - 1e-4) and dt.max() <= 0.1 * (1 + 1e-4), (dt.min(), dt.max())
    assert np.abs(m.dt_proj_kernel.numpy()).max() <= 0.5 and np.abs(m.dt_proj_kernel.numpy()).max() > 0.3
    for v, fan in ((m.in_proj_kernel, 64), (m.x_proj_kernel, 64), (m.out_proj_kernel, 128), (m.conv1d_x_kernel, 3)):
        a = np.abs(v.numpy()).max()
        assert 0.8 * fan ** -0.5 < a <= fan ** -0.5, (v.path, a, fan ** -0.5)
    assert m.x_proj_kernel.shape == (64, 4 + 16) and m.conv1d_z_kernel.shape == (3, 64)
    assert len(m.trainable_variables) == 9 and m.in_proj_bias is None


def test_loader_errors():
    m = MambaVisionMixer(32, d_state=4, d_conv=3, expand=1)
    sd = synthetic_state_dict(np.random.default_rng(1), m)
    before = m.in_proj_kernel.numpy().copy() if m.built else None

    def expect(d, *needles):
        try:
            load_mixer_state_dict(m, d, prefix="levels.2.blocks.0.mixer.")
        except ValueError as e:
            assert all(n in str(e) for n in needles), str(e)
            return
        raise AssertionError("no error for %s" % (needles,))

    p = {"levels.2.blocks.0.mixer." + k: v for k, v in sd.items()}
    p["levels.2.blocks.0.norm1.weight"] = np.ones(32)  # outside the prefix: ignored
    bad = dict(p)
    del bad["levels.2.blocks.0.mixer.A_log"]
    expect(bad, "missing", "levels.2.blocks.0.mixer.A_log")
    bad = dict(p, **{"levels.2.blocks.0.mixer.x_proj.weight": np.zeros((9, 16))})
    expect(bad, "levels.2.blocks.0.mixer.x_proj.weight", "(9, 16)", "(10, 16)")
    bad = dict(p, **{"levels.2.blocks.0.mixer.conv1d_x.bias": np.zeros(16)})
    expect(bad, "unexpected", "conv1d_x.bias")
    if before is not None:
        assert np.array_equal(before, m.in_proj_kernel.numpy()), "a failed load changed the weights"
    names = load_mixer_state_dict(m, p, prefix="levels.2.blocks.0.mixer.")
    assert len(names) == 9
    assert np.array_equal(m.conv1d_x_kernel.numpy(), sd["conv1d_x.weight"][:, 0, :].T)
    assert np.array_equal(m.out_proj_kernel.numpy(), sd["out_proj.weight"].T)


def test_graph_modes_and_xla():
    """tf.function(jit_compile=False) equals eager bitwise; tf.function(jit_compile=True) raises a
    clear ValueError (the op has no XLA kernel); model.compile(jit_compile=True) falls back to no
    XLA (Keras, from supports_jit False); scan_impl='tf' does compile under XLA and agrees."""
    rng = np.random.default_rng(3)
    m = MambaVisionMixer(16, d_state=4, d_conv=3, expand=1)
    x = tf.constant(rng.standard_normal((3, 9, 16)), tf.float32)
    eager = m(x).numpy()
    g = tf.function(lambda v: m(v), jit_compile=False)
    assert np.array_equal(g(x).numpy(), eager)
    assert m.supports_jit is False
    try:
        tf.function(lambda v: m(v), jit_compile=True)(x)
        raise AssertionError("jit_compile=True did not raise")
    except ValueError as e:
        assert "no XLA kernel" in str(e) and "jit_compile=False" in str(e), str(e)
    # Keras: a model holding a layer whose supports_jit is False falls back to jit_compile=False
    # (with a warning) instead of failing inside XLA
    inp = keras.Input((9, 16))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(
        MambaVisionBlock(16, name="blk")(inp))))
    import warnings

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        model.compile(optimizer="adam", loss="mse", jit_compile=True)
    assert model.jit_compile is False, "model.compile(jit_compile=True) kept XLA on"
    assert model.predict(x, verbose=0).shape == (3, 2)
    mt = MambaVisionMixer(16, d_state=4, d_conv=3, expand=1, scan_impl="tf")
    mt.build(x.shape)
    for a, b in zip(mt.weights, m.weights):
        a.assign(b)
    xla = tf.function(lambda v: mt(v), jit_compile=True)(x).numpy()
    assert rel(xla, eager) < 1e-5, rel(xla, eager)


def test_serialization():
    """model.save / keras.models.load_model (.keras) of the classifier (blocks, mixers, op) and of
    a model with the op-level SelectiveScan layer: same predictions, same weights, trains on."""
    rng = np.random.default_rng(4)
    model = selscan_tf.digits_classifier(seq_len=8, patch_dim=3, dim=16, depth=2)
    x = rng.standard_normal((5, 8, 3)).astype(np.float32)
    y = rng.integers(0, 10, 5)
    pred = model.predict(x, verbose=0)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        assert np.array_equal(loaded.predict(x, verbose=0), pred)
        for a, b in zip(model.weights, loaded.weights):
            assert a.path == b.path and np.array_equal(a.numpy(), b.numpy()), a.path
        blk = loaded.get_layer("block0")
        assert isinstance(blk, MambaVisionBlock) and isinstance(blk.mixer, MambaVisionMixer)
        assert blk.mixer.scan_impl == "op" and blk.mixer.get_config()["d_state"] == 8
        before = loaded.get_layer("block1").mixer.A_log.numpy().copy()
        loaded.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        hist = loaded.fit(x, y, epochs=1, verbose=0)  # trains after loading
        assert np.isfinite(hist.history["loss"][0])
        assert not np.array_equal(before, loaded.get_layer("block1").mixer.A_log.numpy())
        # the op-level layer
        ins = [keras.Input((7, 6)), keras.Input((7, 6)), keras.Input((7, 2)), keras.Input((7, 2))]
        m2 = keras.Model(ins, selscan_tf.SelectiveScan(6, d_state=2)(*ins))
        xs = [rng.standard_normal((2, 7, s)).astype(np.float32) for s in (6, 6, 2, 2)]
        p2 = m2.predict(xs, verbose=0)
        m2.save(os.path.join(d, "s.keras"))
        assert np.array_equal(keras.models.load_model(os.path.join(d, "s.keras")).predict(xs, verbose=0), p2)


def test_block_and_mixed_policy():
    """MambaVisionBlock: structure (pre-norm residuals around the mixer and the MLP, layer scale),
    float32 variables and compute-dtype activations under mixed_bfloat16."""
    rng = np.random.default_rng(5)
    x = tf.constant(rng.standard_normal((2, 10, 16)), tf.float32)
    blk = MambaVisionBlock(16, mlp_ratio=2.0, layer_scale=0.5)
    out = blk(x)
    n1 = blk.norm1(x)
    mid = x + 0.5 * blk.mixer(n1)
    ref = mid + 0.5 * blk.fc2(tf.nn.gelu(blk.fc1(blk.norm2(mid)), approximate=False))
    assert rel(out.numpy(), ref.numpy()) < 1e-6
    assert blk.mixer.d_state == 8 and blk.mixer.d_conv == 3 and blk.mixer.expand == 1

    def mixed():
        b = MambaVisionBlock(16)
        o = b(x)
        assert o.dtype == tf.bfloat16, o.dtype
        assert all(v.dtype == "float32" for v in b.weights)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(b(x), tf.float32) ** 2)
        gs = tape.gradient(loss, b.trainable_variables)
        assert all(g is not None and g.dtype == tf.float32 and np.all(np.isfinite(g.numpy())) for g in gs)

    with_policy("mixed_bfloat16", mixed)


def test_block_loader_vs_reference():
    """load_block_state_dict on a synthetic PyTorch Block state dict (layer scale, prefix
    "levels.2.blocks.0."): the block's output against a float64 reference of Block.forward
    (LayerNorm eps 1e-5, the mixer reference above, fc1 -> exact GELU -> fc2, gamma_1 / gamma_2)."""
    rng = np.random.default_rng(6)
    dim, L, batch, hidden = 24, 11, 2, 48
    blk = MambaVisionBlock(dim, mlp_ratio=2.0, layer_scale=1e-1)
    blk.build((None, None, dim))
    sd = {"mixer." + k: v for k, v in synthetic_state_dict(rng, blk.mixer).items()}
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    sd.update({"norm1.weight": 1 + 0.1 * f32(dim), "norm1.bias": 0.1 * f32(dim), "norm2.weight": 1 + 0.1 * f32(dim),
               "norm2.bias": 0.1 * f32(dim), "mlp.fc1.weight": f32(hidden, dim) / 5, "mlp.fc1.bias": 0.1 * f32(hidden),
               "mlp.fc2.weight": f32(dim, hidden) / 7, "mlp.fc2.bias": 0.1 * f32(dim), "gamma_1": 0.5 + f32(dim) / 10,
               "gamma_2": 0.5 + f32(dim) / 10})
    pre = "levels.2.blocks.0."
    full = {pre + k: v for k, v in sd.items()}
    full["levels.2.blocks.1.norm1.weight"] = np.ones(dim)  # another block: ignored
    names = selscan_tf.load_block_state_dict(blk, full, prefix=pre)
    assert sorted(names) == sorted(sd), sorted(set(names) ^ set(sd))
    bad = dict(full)
    del bad[pre + "mlp.fc2.bias"]
    try:
        selscan_tf.load_block_state_dict(blk, bad, prefix=pre)
        raise AssertionError("missing mlp.fc2.bias not refused")
    except ValueError as e:
        assert pre + "mlp.fc2.bias" in str(e), str(e)
    x = rng.standard_normal((batch, L, dim)).astype(np.float32)
    out = blk(tf.constant(x)).numpy()
    t = {k: tf.constant(v.astype(np.float64)) for k, v in sd.items()}

    def ln(v, w, b):
        mu = tf.reduce_mean(v, -1, keepdims=True)
        var = tf.reduce_mean((v - mu) ** 2, -1, keepdims=True)
        return (v - mu) / tf.sqrt(var + 1e-5) * w + b

    x64 = tf.constant(x.astype(np.float64))
    msd = {k[len("mixer."):]: v for k, v in t.items() if k.startswith("mixer.")}
    h = x64 + t["gamma_1"] * torch_mixer_ref(msd, ln(x64, t["norm1.weight"], t["norm1.bias"]), blk.mixer.d_state,
                                             blk.mixer.dt_rank)
    a = tf.einsum("bld,hd->blh", ln(h, t["norm2.weight"], t["norm2.bias"]), t["mlp.fc1.weight"]) + t["mlp.fc1.bias"]
    a = 0.5 * a * (1.0 + tf.math.erf(a / np.sqrt(2.0)))
    ref = h + t["gamma_2"] * (tf.einsum("blh,dh->bld", a, t["mlp.fc2.weight"]) + t["mlp.fc2.bias"])
    err = rel(out, ref.numpy())
    assert err <= TOL32, "block output rel err %.2e" % err
    return "rel err %.1e" % err


AUTOGRAPH_CHILD = r'''
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
import numpy as np, tensorflow as tf
import selscan_tf

def run(x):
    return selscan_tf.MambaVisionMixer(8, d_state=2, d_conv=3, expand=1)(x)

m = selscan_tf.MambaVisionMixer(8, d_state=2, d_conv=3, expand=1)

@tf.function
def f(x):
    u = x[..., :4]
    y = selscan_tf.selective_scan(u, u, -tf.ones([4, 2]), x[..., 4:6], x[..., 6:8], delta_softplus=True)
    return tf.reduce_sum(y) + tf.reduce_sum(m(x))

x = tf.random.normal([2, 5, 8])
with tf.GradientTape() as t:
    t.watch(x)
    v = f(x)
print("grad", t.gradient(v, x).shape)
'''


def test_no_autograph_warning():
    """The op library is loaded once at import: tracing selective_scan / the mixer inside a
    tf.function prints no AutoGraph warning (before, os.path.isfile was called at trace time)."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "child.py")
        with open(p, "w") as f:
            f.write(AUTOGRAPH_CHILD)
        r = subprocess.run([sys.executable, p], capture_output=True, text=True, timeout=300, cwd=d)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "grad (2, 5, 8)" in r.stdout, r.stdout
    assert "AutoGraph" not in r.stderr and "AutoGraph" not in r.stdout, r.stderr[-2000:]


def test_pure_tf_scan_refuses_what_it_would_get_wrong():
    """selective_scan_tf (public: the baseline and the reference) takes its options as bools and its tensors as
    real floating ones, naming the argument: "False" was truthy (softplus on), an int u truncated y, a complex u
    lost its imaginary part."""
    rng = np.random.default_rng(9)
    u = rng.standard_normal((1, 6, 4)).astype(np.float32)
    A = -np.ones((4, 3), np.float32)
    B = C = rng.standard_normal((1, 6, 3)).astype(np.float32)
    f = selscan_tf.selective_scan_tf
    y = f(u, np.abs(u), A, B, C, delta_softplus=False).numpy()
    assert np.array_equal(y, f(u, np.abs(u), A, B, C).numpy())
    raises(lambda: f(u, np.abs(u), A, B, C, delta_softplus="False"), "delta_softplus", types=(TypeError,))
    raises(lambda: f(u, np.abs(u), A, B, C, return_last_state=1), "return_last_state", types=(TypeError,))
    raises(lambda: f(u.astype(np.int32), np.abs(u), A, B, C), "u", "floating", types=(TypeError,))
    raises(lambda: f(u * 1j, np.abs(u), A, B, C), "u", "floating", types=(TypeError,))
    raises(lambda: f(u, np.abs(u), A, B, None), "C", types=(TypeError,))


def test_package():
    """Imported from the installed package, with the op library inside it."""
    assert selscan_tf.__version__ == "0.2.0"
    assert os.path.dirname(selscan_tf.LIBRARY_PATH) == os.path.dirname(os.path.abspath(selscan_tf.__file__)), \
        (selscan_tf.LIBRARY_PATH, selscan_tf.__file__)
    assert "site-packages" in selscan_tf.__file__ or os.environ.get("SELSCAN_TF_ALLOW_SOURCE"), selscan_tf.__file__
    return selscan_tf.LIBRARY_PATH


TESTS = [v for k, v in list(globals().items()) if k.startswith("test_") and callable(v)]


def main():
    print("TensorFlow %s, Keras %s, selscan_tf from %s" % (tf.__version__, keras.__version__, selscan_tf.__file__))
    return run_tests(TESTS, width=38)


if __name__ == "__main__":
    sys.exit(main())
