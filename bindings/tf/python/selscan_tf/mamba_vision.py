"""MambaVision's token mixer (NVlabs/MambaVision, MambaVisionMixer) as a Keras layer on the selscan op.

Structure (channels-last throughout: every tensor is (batch, L, channels); the scan reads the BLD
layout in place, there is no transpose anywhere in the layer):

    xz      = in_proj(x)                              (batch, L, d_inner), no bias by default
    x, z    = xz[..., :d_inner/2], xz[..., d_inner/2:]
    x       = silu(depthwise_conv1d_same(x, conv1d_x))  kernel d_conv, no bias (MambaVision's
    z       = silu(depthwise_conv1d_same(z, conv1d_z))  conv_bias // 2 is 0)
    dt, B, C = split(x_proj(x), [dt_rank, d_state, d_state])
    delta   = dt_proj(dt)                             dt_proj has a bias, b
    y       = selective_scan(x, delta, A=-exp(A_log), B, C, D, delta_bias=b, softplus)   no z gating
    out     = out_proj(concat([y, z], -1))

MambaVision applies the dt_proj bias twice: once inside dt_proj (an nn.Linear with bias) and once
more as the scan's delta_bias, so the step is softplus(W dt + 2 b). This layer computes the same
function: dt_proj's matmul without the bias and delta_bias = 2 b (float32) given to the op (one
elementwise pass less, and b is added in float32 also under a mixed-precision policy).

Initialisation, as MambaVisionMixer's constructor does it: in_proj / x_proj / out_proj (and the
optional projection biases) like torch.nn.Linear, U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the depthwise
convolutions like torch.nn.Conv1d, U(-1/sqrt(d_conv), 1/sqrt(d_conv)); dt_proj.weight
U(-s, s) with s = dt_scale / sqrt(dt_rank) ("random") or the constant s ("constant");
dt_proj.bias = softplus^-1(dt) with dt log-uniform in [dt_min, dt_max], clamped below at
dt_init_floor; A_log[d, n] = log(n + 1); D = 1. (The full MambaVision model then re-initialises
every nn.Linear, dt_proj included, with a truncated normal of std 0.02 and zero biases; this layer
does not, it is the mixer alone. Pretrained weights: load_mixer_state_dict.)

dt_rank "auto" is ceil(d_model / 16) (of d_model, as in MambaVision). d_inner = expand * d_model
must be even.
"""

import math

import numpy as np
import tensorflow as tf

from . import SelectiveScan, selective_scan  # noqa: F401  (SelectiveScan re-exported)
from . import _as_bool, _dt_range, _positive_int, _refuse_xla, _to_tensor

keras = tf.keras

__all__ = [
    "selective_scan_tf",
    "MambaVisionMixer",
    "MambaVisionBlock",
    "digits_classifier",
    "load_mixer_state_dict",
    "load_block_state_dict",
    "mixer_state_dict_shapes",
]


def _serializable(cls):
    return keras.utils.register_keras_serializable(package="selscan_tf")(cls)


# ------------------------------------------------------------------------------------------------
# The scan in plain TensorFlow (tf.scan over L): what the op replaces.


def selective_scan_tf(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, h0=None,
                      return_last_state=False):
    """The selective scan in plain TensorFlow, layout BLD: u, delta, z (batch, L, dim); B, C
    (batch, L, N) or (batch, L, G, N); A (dim, N); D, delta_bias (dim,); h0 (batch, dim, N).

    Computes in float64 when u is float64, else in float32 (as the op does); y has u's dtype.
    A tf.scan over the L steps on time-major tensors (this one transposes; it is the baseline and
    the reference, not the fast path). Differentiable by TensorFlow's autodiff.
    """
    who = "selective_scan_tf"
    delta_softplus = _as_bool(delta_softplus, "delta_softplus", who)
    return_last_state = _as_bool(return_last_state, "return_last_state", who)
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0")
    args = dict(zip(names, (u, delta, A, B, C, D, z, delta_bias, h0)))
    for k in ("u", "delta", "A", "B", "C"):
        if args[k] is None:
            raise TypeError("%s: %s is required, got None" % (who, k))
    for k, t in args.items():  # real floating tensors only: an int u truncated y, a complex one lost its imaginary part
        if t is not None:
            args[k] = _to_tensor(t, k, who, dtype_hint=tf.float32)
            if not args[k].dtype.is_floating:
                raise TypeError("%s: %s must be a real floating-point tensor, got %s" % (who, k, args[k].dtype.name))
    out_dtype = args["u"].dtype
    ct = tf.float64 if out_dtype == tf.float64 else tf.float32
    u, delta, A, B, C, D, z, delta_bias, h0 = (None if args[k] is None else tf.cast(args[k], ct) for k in names)
    dim = tf.shape(u)[2]
    if B.shape.rank == 3:
        B, C = B[:, :, None, :], C[:, :, None, :]
    G = tf.shape(B)[2]
    # channel d reads group d // (dim / G): repeat each group dim / G times along a channel axis
    Bx = tf.repeat(B, dim // G, axis=2)  # (batch, L, dim, N)
    Cx = tf.repeat(C, dim // G, axis=2)
    dt = delta if delta_bias is None else delta + delta_bias
    if delta_softplus:
        dt = tf.nn.softplus(dt)
    dA = tf.exp(dt[..., None] * A)  # (batch, L, dim, N)
    dBu = (dt * u)[..., None] * Bx
    if h0 is None:
        h0 = tf.zeros_like(dBu[:, 0])
    hs = tf.scan(lambda h, e: e[0] * h + e[1], (tf.transpose(dA, [1, 0, 2, 3]), tf.transpose(dBu, [1, 0, 2, 3])),
                 initializer=h0)  # (L, batch, dim, N)
    y = tf.einsum("lbdn,bldn->bld", hs, Cx)
    if D is not None:
        y = y + D * u
    if z is not None:
        y = y * z * tf.sigmoid(z)
    y = tf.cast(y, out_dtype)
    return (y, hs[-1]) if return_last_state else y


# ------------------------------------------------------------------------------------------------
# Initialisers (PyTorch's defaults, as MambaVisionMixer gets them)


def _uniform(bound):
    return keras.initializers.RandomUniform(-bound, bound)


def _dt_bias_init(dt_min, dt_max, dt_init_floor):
    lo, hi = math.log(dt_min), math.log(dt_max)

    def init(shape, dtype=None):
        dt = tf.exp(tf.random.uniform(shape, dtype=tf.float32) * (hi - lo) + lo)
        dt = tf.maximum(dt, dt_init_floor)
        return dt + tf.math.log(-tf.math.expm1(-dt))  # softplus^-1(dt)

    return init


def _a_log_init(shape, dtype=None):
    return tf.math.log(tf.tile(tf.range(1, shape[1] + 1, dtype=tf.float32)[None, :], [shape[0], 1]))


def _linear(x, w, b=None):
    """x (..., k) @ w (k, n) (+ b): a reshape to 2-D and back, no transpose."""
    k, n = w.shape[0], w.shape[1]
    shape = tf.shape(x)
    y = tf.matmul(tf.reshape(x, [-1, k]), w)
    if b is not None:
        y = y + b
    return tf.reshape(y, tf.concat([shape[:-1], [n]], 0))


def _depthwise_conv_same(x, w):
    """Depthwise 1-D convolution along L of x (batch, L, C) with w (k, C), padding 'same' as
    PyTorch pads it ((k - 1) // 2 before, the rest after), cross-correlation, no bias."""
    k = w.shape[0]
    before = (k - 1) // 2
    xp = tf.pad(x, [[0, 0], [before, k - 1 - before], [0, 0]])
    L = tf.shape(x)[1]
    y = xp[:, 0:L] * w[0]
    for j in range(1, k):
        y = y + xp[:, j:j + L] * w[j]
    return y


_NO_AUTOCAST = {"autocast": False}


@_serializable
class MambaVisionMixer(keras.layers.Layer):
    """MambaVision's mixer (see the module docstring): (batch, L, d_model) -> (batch, L, d_model).

    scan_impl "op" (default): the selscan op, which reads the BLD tensors in place; "tf": the same
    layer with the scan as a tf.scan (selective_scan_tf), the pure-TensorFlow baseline.
    Under a mixed-precision policy the projections and the scan's u / delta / B / C run in the
    compute dtype (float16 / bfloat16) with float32 variables; A_log, D and the dt bias reach the
    op in float32, unrounded. The op has no XLA kernel: supports_jit is False and a call inside
    tf.function(jit_compile=True) raises a ValueError saying so (use jit_compile=False, or
    scan_impl="tf", which XLA can compile).

    Weight names (PyTorch names in brackets, see load_mixer_state_dict): in_proj_kernel
    [in_proj.weight^T], conv1d_x_kernel / conv1d_z_kernel (d_conv, d_inner / 2)
    [conv1d_x.weight (d_inner / 2, 1, d_conv)], x_proj_kernel [x_proj.weight^T], dt_proj_kernel
    [dt_proj.weight^T], dt_proj_bias [dt_proj.bias], A_log, D, out_proj_kernel [out_proj.weight^T]
    and, with bias=True, in_proj_bias, out_proj_bias.
    """

    def __init__(self, d_model, d_state=16, d_conv=4, expand=2, dt_rank="auto", dt_min=0.001, dt_max=0.1,
                 dt_init="random", dt_scale=1.0, dt_init_floor=1e-4, bias=False, scan_impl="op", **kwargs):
        super().__init__(**kwargs)
        if scan_impl not in ("op", "tf"):
            raise ValueError('MambaVisionMixer: scan_impl must be "op" or "tf", got %r' % (scan_impl,))
        if dt_init not in ("random", "constant"):
            raise ValueError('MambaVisionMixer: dt_init must be "random" or "constant", got %r' % (dt_init,))
        who = "MambaVisionMixer"
        self.d_model = _positive_int(d_model, "d_model", who)
        self.d_state = _positive_int(d_state, "d_state", who)
        self.d_conv = _positive_int(d_conv, "d_conv", who)
        self.expand = expand
        if isinstance(expand, (bool, np.bool_)) or not isinstance(expand, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(float(expand)) and expand > 0):
            raise ValueError("MambaVisionMixer: expand must be a positive number, got %r" % (expand,))
        d_inner = expand * self.d_model
        if float(d_inner) != int(d_inner):
            raise ValueError("MambaVisionMixer: d_inner = expand * d_model = %r must be an integer" % (d_inner,))
        self.d_inner = int(d_inner)
        if self.d_inner % 2:
            raise ValueError("MambaVisionMixer: d_inner = expand * d_model = %d must be even" % self.d_inner)
        self.dt_rank = math.ceil(self.d_model / 16) if dt_rank == "auto" else _positive_int(dt_rank, "dt_rank", who)
        self.dt_rank_arg = dt_rank
        self.dt_min, self.dt_max = _dt_range(dt_min, dt_max, who)
        self.dt_init = dt_init
        self.dt_scale, self.dt_init_floor = float(dt_scale), float(dt_init_floor)
        if not (math.isfinite(self.dt_scale) and math.isfinite(self.dt_init_floor) and self.dt_init_floor >= 0):
            raise ValueError("MambaVisionMixer: dt_scale must be finite and dt_init_floor finite and >= 0, got "
                             "dt_scale=%r, dt_init_floor=%r" % (dt_scale, dt_init_floor))
        self.bias = _as_bool(bias, "bias", who)
        self.scan_impl = scan_impl
        self.supports_jit = scan_impl == "tf"

    def build(self, input_shape):
        d_model = input_shape[-1]
        if d_model is not None and int(d_model) != self.d_model:
            raise ValueError("MambaVisionMixer: input has %s channels, d_model is %d" % (d_model, self.d_model))
        dm, di, h, r, n, k = self.d_model, self.d_inner, self.d_inner // 2, self.dt_rank, self.d_state, self.d_conv
        w = self.add_weight
        self.in_proj_kernel = w(name="in_proj_kernel", shape=(dm, di), initializer=_uniform(dm ** -0.5))
        self.in_proj_bias = w(name="in_proj_bias", shape=(di,), initializer=_uniform(dm ** -0.5)) if self.bias else None
        self.conv1d_x_kernel = w(name="conv1d_x_kernel", shape=(k, h), initializer=_uniform(k ** -0.5))
        self.conv1d_z_kernel = w(name="conv1d_z_kernel", shape=(k, h), initializer=_uniform(k ** -0.5))
        self.x_proj_kernel = w(name="x_proj_kernel", shape=(h, r + 2 * n), initializer=_uniform(h ** -0.5))
        s = self.dt_scale * r ** -0.5
        self.dt_proj_kernel = w(name="dt_proj_kernel", shape=(r, h),
                                initializer=_uniform(s) if self.dt_init == "random" else keras.initializers.Constant(s))
        self.dt_proj_bias = w(name="dt_proj_bias", shape=(h,), dtype="float32",
                              initializer=_dt_bias_init(self.dt_min, self.dt_max, self.dt_init_floor), **_NO_AUTOCAST)
        self.A_log = w(name="A_log", shape=(h, n), dtype="float32", initializer=_a_log_init, **_NO_AUTOCAST)
        self.D = w(name="D", shape=(h,), dtype="float32", initializer="ones", **_NO_AUTOCAST)
        self.out_proj_kernel = w(name="out_proj_kernel", shape=(di, dm), initializer=_uniform(di ** -0.5))
        self.out_proj_bias = w(name="out_proj_bias", shape=(dm,), initializer=_uniform(di ** -0.5)) if self.bias else None
        self.built = True

    def call(self, x, training=None):
        h, r, n = self.d_inner // 2, self.dt_rank, self.d_state
        x = tf.convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise TypeError("MambaVisionMixer: x must be a floating-point tensor (batch, L, d_model), got %s"
                            % x.dtype.name)
        if x.shape.rank is not None and (x.shape.rank != 3 or x.shape[-1] not in (None, self.d_model)):
            raise ValueError("MambaVisionMixer: x must have shape (batch, L, d_model) with d_model=%d, got %s"
                             % (self.d_model, x.shape))
        cdt = x.dtype
        xz = _linear(x, self.in_proj_kernel, self.in_proj_bias)
        xs, zs = xz[..., :h], xz[..., h:]
        xs = tf.nn.silu(_depthwise_conv_same(xs, self.conv1d_x_kernel))
        zs = tf.nn.silu(_depthwise_conv_same(zs, self.conv1d_z_kernel))
        x_dbl = _linear(xs, self.x_proj_kernel)
        dt, Bm, Cm = x_dbl[..., :r], x_dbl[..., r:r + n], x_dbl[..., r + n:]
        delta = _linear(dt, self.dt_proj_kernel)  # dt_proj's bias enters as delta_bias, twice (see above)
        A = -tf.exp(self.A_log)
        bias2 = 2.0 * self.dt_proj_bias
        if self.scan_impl == "op":
            if cdt not in (tf.float32, tf.float16, tf.bfloat16):
                raise TypeError("MambaVisionMixer: the selscan op computes in float32 / float16 / bfloat16, not %s "
                                "(use scan_impl='tf' for float64)" % cdt.name)
            _refuse_xla("MambaVisionMixer", "scan_impl='tf' (a pure-TensorFlow scan)")
            y = selective_scan(xs, delta, A, Bm, Cm, D=self.D, delta_bias=bias2, delta_softplus=True,
                               save_checkpoint=training is not False)
        else:
            y = selective_scan_tf(xs, delta, A, Bm, Cm, D=self.D, delta_bias=bias2, delta_softplus=True)
        return _linear(tf.concat([y, zs], axis=-1), self.out_proj_kernel, self.out_proj_bias)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, d_state=self.d_state, d_conv=self.d_conv, expand=self.expand,
                      dt_rank=self.dt_rank_arg, dt_min=self.dt_min, dt_max=self.dt_max, dt_init=self.dt_init,
                      dt_scale=self.dt_scale, dt_init_floor=self.dt_init_floor, bias=self.bias,
                      scan_impl=self.scan_impl)
        return config


# ------------------------------------------------------------------------------------------------
# A MambaVision block and a tiny classifier


@_serializable
class MambaVisionBlock(keras.layers.Layer):
    """MambaVision's Block with a mixer: x + gamma_1 * mixer(norm1(x)), then x + gamma_2 *
    mlp(norm2(x)), LayerNorm (eps 1e-5), MLP fc1 -> GELU (exact) -> fc2 of hidden mlp_ratio * dim.
    The mixer as MambaVision's blocks build it: d_state 8, d_conv 3, expand 1. gamma_1 / gamma_2
    exist when layer_scale is a number (initialised to it), else they are 1."""

    def __init__(self, dim, mlp_ratio=4.0, d_state=8, d_conv=3, expand=1, layer_scale=None, scan_impl="op",
                 **kwargs):
        super().__init__(**kwargs)
        self.dim, self.mlp_ratio, self.d_state, self.d_conv, self.expand = int(dim), float(mlp_ratio), d_state, d_conv, expand
        self.layer_scale, self.scan_impl = layer_scale, scan_impl
        self.supports_jit = scan_impl == "tf"
        self.norm1 = keras.layers.LayerNormalization(epsilon=1e-5, name="norm1")
        self.mixer = MambaVisionMixer(dim, d_state=d_state, d_conv=d_conv, expand=expand, scan_impl=scan_impl,
                                      name="mixer")
        self.norm2 = keras.layers.LayerNormalization(epsilon=1e-5, name="norm2")
        self.fc1 = keras.layers.Dense(int(dim * mlp_ratio), name="fc1")
        self.fc2 = keras.layers.Dense(dim, name="fc2")

    def build(self, input_shape):
        self.norm1.build(input_shape)
        self.mixer.build(input_shape)
        self.norm2.build(input_shape)
        self.fc1.build(input_shape)
        self.fc2.build(tuple(input_shape[:-1]) + (int(self.dim * self.mlp_ratio),))
        if isinstance(self.layer_scale, (int, float)) and not isinstance(self.layer_scale, bool):
            init = keras.initializers.Constant(float(self.layer_scale))
            self.gamma_1 = self.add_weight(name="gamma_1", shape=(self.dim,), initializer=init)
            self.gamma_2 = self.add_weight(name="gamma_2", shape=(self.dim,), initializer=init)
        else:
            self.gamma_1 = self.gamma_2 = None
        self.built = True

    def call(self, x, training=None):
        m = self.mixer(self.norm1(x), training=training)
        x = x + (m * self.gamma_1 if self.gamma_1 is not None else m)
        m = self.fc2(tf.nn.gelu(self.fc1(self.norm2(x)), approximate=False))
        return x + (m * self.gamma_2 if self.gamma_2 is not None else m)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(dim=self.dim, mlp_ratio=self.mlp_ratio, d_state=self.d_state, d_conv=self.d_conv,
                      expand=self.expand, layer_scale=self.layer_scale, scan_impl=self.scan_impl)
        return config


def digits_classifier(seq_len=16, patch_dim=4, dim=32, depth=2, num_classes=10, mlp_ratio=2.0, scan_impl="op",
                      name="mambavision_digits"):
    """A tiny MambaVision-style classifier: (batch, seq_len, patch_dim) patches -> patch embedding
    (Dense) -> depth MambaVisionBlocks -> LayerNorm -> mean over L -> Dense logits (float32 also
    under a mixed-precision policy). A functional keras.Model (saves / loads as .keras)."""
    inp = keras.Input((seq_len, patch_dim), name="patches")
    x = keras.layers.Dense(dim, name="patch_embed")(inp)
    for i in range(depth):
        x = MambaVisionBlock(dim, mlp_ratio=mlp_ratio, scan_impl=scan_impl, name="block%d" % i)(x)
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")(x)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    out = keras.layers.Dense(num_classes, dtype="float32", name="head")(x)
    return keras.Model(inp, out, name=name)


# ------------------------------------------------------------------------------------------------
# PyTorch weights


def mixer_state_dict_shapes(layer):
    """{PyTorch parameter name: its shape} of MambaVisionMixer for this layer's sizes."""
    dm, di, h, r, n, k = layer.d_model, layer.d_inner, layer.d_inner // 2, layer.dt_rank, layer.d_state, layer.d_conv
    shapes = {
        "in_proj.weight": (di, dm),
        "conv1d_x.weight": (h, 1, k),
        "conv1d_z.weight": (h, 1, k),
        "x_proj.weight": (r + 2 * n, h),
        "dt_proj.weight": (h, r),
        "dt_proj.bias": (h,),
        "A_log": (h, n),
        "D": (h,),
        "out_proj.weight": (dm, di),
    }
    if layer.bias:
        shapes["in_proj.bias"] = (di,)
        shapes["out_proj.bias"] = (dm,)
    return shapes


def _to_numpy(v):
    if hasattr(v, "detach"):  # a torch tensor
        v = v.detach().cpu()
        if str(getattr(v, "dtype", "")) == "torch.bfloat16":
            v = v.float()
        v = v.numpy()
    return np.asarray(v)


def _checked_arrays(who, mine, want, prefix, has="", whose="", sizes=""):
    """The float32 arrays of `want` ({name: shape}) from `mine` ({name: value}, the state dict's keys
    inside `prefix` without it): a ValueError from `who` for a name not in `want` (`has`: what the
    message adds), for one missing, or for a shape other than `want`'s (`whose`: "this layer",
    `sizes`: what the message adds)."""
    unknown = sorted(set(mine) - set(want))
    if unknown:
        raise ValueError("%s: unexpected parameters %s%s" % (who, ", ".join(prefix + u for u in unknown), has))
    missing = sorted(set(want) - set(mine))
    if missing:
        raise ValueError("%s: missing parameters %s" % (who, ", ".join(prefix + m for m in missing)))
    arrays = {}
    for name, shape in want.items():
        a = _to_numpy(mine[name])
        if tuple(a.shape) != tuple(shape):
            raise ValueError("%s: %s%s has shape %s, %s needs %s%s" % (who, prefix, name, tuple(a.shape), whose,
                                                                     tuple(shape), sizes))
        arrays[name] = a.astype(np.float32)
    return arrays


def _assign(pairs):
    """var.assign(value) for each (variable, array) pair."""
    for var, value in pairs:
        var.assign(np.ascontiguousarray(value))


def load_mixer_state_dict(layer, state_dict, prefix=""):
    """Copies a PyTorch MambaVisionMixer's parameters into `layer` (a MambaVisionMixer).

    state_dict: {name: array} with PyTorch's names and shapes (NumPy arrays, or torch tensors),
    e.g. model.state_dict() of MambaVision with prefix "levels.2.blocks.0.mixer." for one mixer.
    Every parameter of the mixer must be there with its exact shape (ValueError naming the
    parameter otherwise); keys outside `prefix` are ignored, unknown keys inside it are an error.
    Builds the layer if needed. Returns the list of PyTorch names loaded.
    """
    if not layer.built:
        layer.build((None, None, layer.d_model))
    want = mixer_state_dict_shapes(layer)
    mine = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    arrays = _checked_arrays("load_mixer_state_dict", mine, want, prefix,
                             has=" (a mixer has %s)" % ", ".join(sorted(want)), whose="this layer",
                             sizes=" (d_model=%d, d_state=%d, d_conv=%d, expand=%s, dt_rank=%d)"
                             % (layer.d_model, layer.d_state, layer.d_conv, layer.expand, layer.dt_rank))
    assign = [
        (layer.in_proj_kernel, arrays["in_proj.weight"].T),
        (layer.conv1d_x_kernel, arrays["conv1d_x.weight"][:, 0, :].T),
        (layer.conv1d_z_kernel, arrays["conv1d_z.weight"][:, 0, :].T),
        (layer.x_proj_kernel, arrays["x_proj.weight"].T),
        (layer.dt_proj_kernel, arrays["dt_proj.weight"].T),
        (layer.dt_proj_bias, arrays["dt_proj.bias"]),
        (layer.A_log, arrays["A_log"]),
        (layer.D, arrays["D"]),
        (layer.out_proj_kernel, arrays["out_proj.weight"].T),
    ]
    if layer.bias:
        assign += [(layer.in_proj_bias, arrays["in_proj.bias"]), (layer.out_proj_bias, arrays["out_proj.bias"])]
    _assign(assign)
    return sorted(want)


def load_block_state_dict(block, state_dict, prefix=""):
    """Copies a PyTorch MambaVision Block (with a mixer, not an attention block) into `block` (a
    MambaVisionBlock): norm1.weight / .bias, mixer.* (load_mixer_state_dict), norm2.weight / .bias,
    mlp.fc1.weight / .bias, mlp.fc2.weight / .bias and, when the block has layer scale, gamma_1 /
    gamma_2. e.g. prefix "levels.2.blocks.0.". Same rules as load_mixer_state_dict (exact shapes,
    every parameter present, unknown ones inside the prefix refused). Returns the names loaded."""
    dim = block.dim
    if not block.built:
        block.build((None, None, dim))
    hidden = int(dim * block.mlp_ratio)
    mine = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    want = {"norm1.weight": (dim,), "norm1.bias": (dim,), "norm2.weight": (dim,), "norm2.bias": (dim,),
            "mlp.fc1.weight": (hidden, dim), "mlp.fc1.bias": (hidden,), "mlp.fc2.weight": (dim, hidden),
            "mlp.fc2.bias": (dim,)}
    if block.gamma_1 is not None:
        want.update({"gamma_1": (dim,), "gamma_2": (dim,)})
    own = {k: v for k, v in mine.items() if not k.startswith("mixer.")}
    arrays = _checked_arrays("load_block_state_dict", own, want, prefix, whose="this block")
    # the mixer first: it checks its own parameters before anything is assigned
    mixer_names = load_mixer_state_dict(block.mixer, state_dict, prefix=prefix + "mixer.")
    assign = [(block.norm1.gamma, arrays["norm1.weight"]), (block.norm1.beta, arrays["norm1.bias"]),
              (block.norm2.gamma, arrays["norm2.weight"]), (block.norm2.beta, arrays["norm2.bias"]),
              (block.fc1.kernel, arrays["mlp.fc1.weight"].T), (block.fc1.bias, arrays["mlp.fc1.bias"]),
              (block.fc2.kernel, arrays["mlp.fc2.weight"].T), (block.fc2.bias, arrays["mlp.fc2.bias"])]
    if block.gamma_1 is not None:
        assign += [(block.gamma_1, arrays["gamma_1"]), (block.gamma_2, arrays["gamma_2"])]
    _assign(assign)
    return sorted(want) + ["mixer." + n for n in mixer_names]
