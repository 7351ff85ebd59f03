"""selscan_tf: Mamba's selective scan (S6) as a TensorFlow op, backed by selscan.

    from selscan_tf import selective_scan, selective_state_update, SelectiveScan

    y = selective_scan(u, delta, A, B, C, D=D, z=z, delta_bias=bias, delta_softplus=True)
    out, state = selective_state_update(state, x, dt, A, B1, C1, D=D, dt_bias=bias, dt_softplus=True)

Shapes, layout "BLD" (channels-last, the default; what Dense/Conv1D layers produce):
    u, delta, z, y   (batch, L, dim)
    B, C             (batch, L, n_groups, N), or (batch, L, N) for one group
Layout "BDL" (state-spaces/mamba's layout):
    u, delta, z, y   (batch, dim, L)
    B, C             (batch, n_groups, N, L), or (batch, N, L) for one group
Both layouts:
    A                (dim, N)        float32 (Mamba: A = -exp(A_log))
    D, delta_bias    (dim,)          float32, optional
    h0, h_last       (batch, dim, N) float32, optional initial / returned final state
    cu_seqlens       (n_seqs + 1,)   int64 offsets of packed sequences (batch 1); h0, h_last
                                     then have n_seqs rows (see selective_scan)

u, delta, z, B, C share one dtype T in {float32, float16, bfloat16}; y has dtype T. The op reads
both layouts in place through strides (no transposes). Gradients flow to every input and from
h_last. The compiled library (_selscan_tf_ops.so) is loaded once, when this module is imported:
from $SELSCAN_TF_OPS, else next to this file (pip install), else the checkout's build/tf_op/
(make tf-op; with bindings/tf/python on PYTHONPATH).

The MambaVision mixer built on the op (MambaVisionMixer, MambaVisionBlock, digits_classifier,
load_mixer_state_dict, load_block_state_dict) and a pure-TensorFlow scan (selective_scan_tf) are in mamba_vision.py.
"""

import glob
import math
import numbers
import os

import numpy as np
import tensorflow as tf

__all__ = [
    "selective_scan",
    "selective_state_update",
    "SelectiveScan",
    "load_ops",
    "selective_scan_tf",
    "MambaVisionMixer",
    "MambaVisionBlock",
    "load_mixer_state_dict",
    "load_block_state_dict",
    "digits_classifier",
    "mixer_state_dict_shapes",
]
__version__ = "0.2.0"

_LIB_NAME = "_selscan_tf_ops.so"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _check_build():
    """The op's binary fits the TensorFlow major.minor it was compiled against (its C++ ABI): under
    another one, say so instead of failing on an undefined symbol. No _build.py (make tf-op's
    library on a source tree): nothing to compare."""
    try:
        from ._build import TENSORFLOW, TENSORFLOW_MAJOR_MINOR
    except ImportError:
        return
    running = tuple(int(v) for v in tf.__version__.split(".")[:2])
    if running != tuple(TENSORFLOW_MAJOR_MINOR):
        raise ImportError(
            "selscan_tf was built against TensorFlow %s, and this is TensorFlow %s: install a selscan_tf built "
            "for this TensorFlow (pip install --no-build-isolation ./bindings/tf rebuilds it against the installed "
            "one)" % (TENSORFLOW, tf.__version__)
        )


def _load_library():
    """Loads _selscan_tf_ops.so once, at import: $SELSCAN_TF_OPS, else next to this file (where
    pip puts it), else build/tf_op/ of the selscan checkout (make tf-op's output; for a source tree on PYTHONPATH)."""
    candidates = []
    if os.environ.get("SELSCAN_TF_OPS"):
        candidates.append(os.environ["SELSCAN_TF_OPS"])
    candidates += [
        os.path.join(_HERE, _LIB_NAME),
        *sorted(glob.glob(os.path.join(_HERE, "_selscan_tf_ops*.so"))),
        os.path.join(_HERE, os.pardir, os.pardir, os.pardir, os.pardir, "build", "tf_op", _LIB_NAME),
    ]
    for path in candidates:
        if os.path.isfile(path):
            return tf.load_op_library(os.path.normpath(path)), os.path.normpath(path)
    raise ImportError(
        "selscan_tf: %s not found (looked at %s); install the package with "
        "`pip install --no-build-isolation ./bindings/tf` or build it with `make tf-op`"
        % (_LIB_NAME, ", ".join(os.path.normpath(p) for p in candidates))
    )


if not os.environ.get("SELSCAN_TF_OPS"):  # (a library named by hand is the caller's choice)
    _check_build()
_ops, LIBRARY_PATH = _load_library()


def load_ops():
    """The op module of _selscan_tf_ops.so (loaded once, when selscan_tf is imported)."""
    return _ops


_FLOAT_TYPES = (tf.float32, tf.float16, tf.bfloat16)

# ---- argument rules (>>rules; README "What is cast, refused, copied") ----------------------------
# u, delta, z, B, C: one dtype T in _FLOAT_TYPES, never cast (a float64 u is refused, not rounded).
# A, D, delta_bias, h0: any real floating dtype, cast to float32. Complex, integer, bool, string
# inputs are refused with a TypeError naming the argument; bad shapes raise InvalidArgumentError
# (eager) or ValueError (graph construction) naming it. Options are Python bools, not truthy values.


def _python_bools(x):
    """Whether x is a Python bool or a (nested) non-empty list / tuple of bools only: what NumPy and
    TensorFlow make a bool array of."""
    if isinstance(x, (bool, np.bool_)):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(_python_bools(e) for e in x)


def _to_tensor(x, name, who, dtype_hint=None):
    """tf.convert_to_tensor, with a TypeError naming the argument when x is not a dense tensor.
    dtype_hint applies to Python numbers and lists of them only: a NumPy array or a tensor keeps its
    dtype, and so do Python bools (True, [True, False]): a bool tensor, refused or taken by each
    argument's rule exactly as a NumPy bool array is (the hint would make them 1.0 and 0.0)."""
    if isinstance(x, (tf.SparseTensor, tf.RaggedTensor)):
        raise TypeError("%s: %s must be a dense tensor, got a %s" % (who, name, type(x).__name__))
    if x is None:
        raise TypeError("%s: %s is required, got None" % (who, name))
    if hasattr(x, "dtype") or _python_bools(x):  # a NumPy array keeps its dtype (the hint would round float64
        dtype_hint = None                          # to float16 quietly); bools are not numbers
    try:
        return tf.convert_to_tensor(x, dtype_hint=dtype_hint, name=name)
    except (TypeError, ValueError) as e:
        raise TypeError("%s: %s cannot be converted to a tensor (%s: %s)" % (who, name, type(e).__name__, e)) from None


def _as_f32(x, name, who="selective_scan"):
    x = _to_tensor(x, name, who, dtype_hint=tf.float32)
    if not x.dtype.is_floating:
        raise TypeError("%s: %s must be a real floating-point tensor (cast to float32), got %s"
                        % (who, name, x.dtype.name))
    return x if x.dtype == tf.float32 else tf.cast(x, tf.float32)


def _as_t(x, dtype, name, who="selective_scan", ref="u", group="u, delta, z, B and C"):
    x = _to_tensor(x, name, who, dtype_hint=dtype)
    if x.dtype != dtype:
        raise TypeError(
            "%s: %s has dtype %s but %s has dtype %s (%s share one dtype)"
            % (who, name, x.dtype.name, ref, dtype.name, group)
        )
    return x


def _as_index(x, name, dtype, who):
    """An integer tensor (any integer dtype, cast to dtype: int64 offsets, int32 rows); a float,
    bool or string one is refused with a TypeError naming the argument."""
    x = _to_tensor(x, name, who, dtype_hint=dtype)
    if not x.dtype.is_integer:
        raise TypeError("%s: %s must be an integer tensor, got %s" % (who, name, x.dtype.name))
    if x.dtype == dtype:
        return x
    # values past dtype's range saturate before the cast, which would wrap (2**32 + 1 became row 1): the op then
    # refuses them as the values themselves (past n_cache, past L) and a negative one stays negative
    if x.dtype.max > dtype.max:
        x = tf.minimum(x, tf.constant(dtype.max, x.dtype))
    if x.dtype.min < dtype.min:
        x = tf.maximum(x, tf.constant(dtype.min, x.dtype))
    return tf.cast(x, dtype)


def _as_bool(v, name, who="selective_scan"):
    """A Python (or NumPy) bool: a string such as "False" or a list is not quietly taken as true."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError("%s: %s must be a bool, got %r (%s)" % (who, name, v, type(v).__name__))


def _in_xla_context():
    """True while tracing a function that XLA will compile (tf.function(jit_compile=True))."""
    try:
        from tensorflow.python.framework import ops as _tf_ops
        from tensorflow.python.ops import control_flow_util

        g = _tf_ops.get_default_graph()
        if control_flow_util.GraphOrParentsInXlaContext(g):
            return True
        while g is not None:
            if getattr(g, "_xla_compile", False) or getattr(g, "jit_compile", False):
                return True
            g = getattr(g, "outer_graph", None)
    except Exception:  # noqa: BLE001  (private API moved: no detection, TensorFlow's own error then)
        return False
    return False


def _refuse_xla(who, alternative="selective_scan_tf (the same scan in plain TensorFlow)"):
    if _in_xla_context():
        raise ValueError(
            "%s: the selscan op has no XLA kernel, so it cannot run inside tf.function(jit_compile=True) "
            "(or model.compile(jit_compile=True)); use jit_compile=False (Keras' 'auto' already does), or "
            "%s, which XLA can compile" % (who, alternative))


@tf.autograph.experimental.do_not_convert
def selective_scan(
    u,
    delta,
    A,
    B,
    C,
    D=None,
    z=None,
    delta_bias=None,
    delta_softplus=False,
    h0=None,
    return_last_state=False,
    layout="BLD",
    save_checkpoint=True,
    cu_seqlens=None,
    name=None,
):
    """The selective scan of Mamba (S6); see the module docstring for shapes.

    For each batch row b, channel d and step t, with h starting at h0 (or 0):
        dt = delta + delta_bias;  dt = softplus(dt) if delta_softplus
        h  = exp(dt * A[d]) * h + dt * B[t] * u
        y  = sum_n C[t] * h + D * u;  y = y * silu(z) if z is given
    Returns y, or (y, h_last) with return_last_state=True.

    save_checkpoint: the forward also keeps the state entering every 64 steps (float32; on a GPU
    batch * dim * ceil(L / 64) * N values, on the CPU batch * dim * (ceil(L / 64) + 1) * N) for the
    backward, which then skips recomputing it. Pass False for inference.

    cu_seqlens: packed sequences (as selscan_torch's selective_scan_fn): (n_seqs + 1,) integer
    offsets (cast to int64; first 0, last L, non-decreasing) with batch 1; the L axis holds n_seqs
    sequences back to back, the state restarts at each from h0[s] (or 0), h0 and h_last have shape
    (n_seqs, dim, N). Gradients flow as without it (none to cu_seqlens).
    """
    if not isinstance(layout, str) or layout not in ("BLD", "BDL"):
        raise ValueError('selective_scan: layout must be "BLD" or "BDL", got %r' % (layout,))
    delta_softplus = _as_bool(delta_softplus, "delta_softplus")
    return_last_state = _as_bool(return_last_state, "return_last_state")
    save_checkpoint = _as_bool(save_checkpoint, "save_checkpoint")
    _refuse_xla("selective_scan")
    ops = _ops
    with tf.name_scope(name or "selective_scan"):
        u = _to_tensor(u, "u", "selective_scan", dtype_hint=tf.float32)
        T = u.dtype
        if T not in _FLOAT_TYPES:
            raise TypeError("selective_scan: u must be float32, float16 or bfloat16, got %s" % T.name)
        delta = _as_t(delta, T, "delta")
        A = _as_f32(A, "A")
        B = _as_t(B, T, "B")  # with the group axis or without (one group): the op checks the shape passed
        C = _as_t(C, T, "C")
        empty_f32 = tf.zeros([0], tf.float32)
        D_ = _as_f32(D, "D") if D is not None else empty_f32
        z_ = _as_t(z, T, "z") if z is not None else tf.zeros([0], T)
        bias_ = _as_f32(delta_bias, "delta_bias") if delta_bias is not None else empty_f32
        h0_ = _as_f32(h0, "h0") if h0 is not None else empty_f32
        cu_ = _as_index(cu_seqlens, "cu_seqlens", tf.int64, "selective_scan") if cu_seqlens is not None \
            else tf.zeros([0], tf.int64)
        y, h_last, _checkpoint = ops.selscan_forward(
            u,
            delta,
            A,
            B,
            C,
            D_,
            z_,
            bias_,
            h0_,
            cu_,
            delta_softplus=delta_softplus,
            has_d=D is not None,
            has_z=z is not None,
            has_delta_bias=delta_bias is not None,
            has_h0=h0 is not None,
            has_cu_seqlens=cu_seqlens is not None,
            return_last_state=return_last_state,
            save_checkpoint=save_checkpoint,
            layout=layout,
        )
        return (y, h_last) if return_last_state else y


@tf.RegisterGradient("SelscanForward")
def _selscan_forward_grad(op, dy, dh_last, _dcheckpoint):
    attr = op.get_attr
    has = {k: attr(k) for k in ("has_d", "has_z", "has_delta_bias", "has_h0", "has_cu_seqlens")}
    if dy is None:
        dy = tf.zeros_like(op.outputs[0])
    has_dh_last = bool(attr("return_last_state")) and dh_last is not None
    if not has_dh_last:
        dh_last = tf.zeros([0], tf.float32)
    grads = _ops.selscan_backward(
        *op.inputs[:10],  # u .. h0, cu_seqlens
        dy,
        dh_last,
        op.outputs[2],  # the forward's checkpoint (empty unless it saved one)
        delta_softplus=attr("delta_softplus"),
        has_dh_last=has_dh_last,
        layout=attr("layout"),
        **has,
    )
    du, ddelta, dA, dB, dC, dD, dz, dbias, dh0 = grads
    return [
        du,
        ddelta,
        dA,
        dB,
        dC,
        dD if has["has_d"] else None,
        dz if has["has_z"] else None,
        dbias if has["has_delta_bias"] else None,
        dh0 if has["has_h0"] else None,
        None,  # cu_seqlens: integer offsets
    ]


@tf.autograph.experimental.do_not_convert
def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None, name=None):
    """One decode step (mamba_ssm's / selscan_torch's selective_state_update): the scan with L = 1
    from state, for a batch of cached states. Returns (out, new_state).

    TensorFlow tensors are immutable, so unlike selscan_torch's (which updates state in place and
    returns out) this returns the updated state as new_state: use it as the next step's state
    (rows not named by state_batch_indices, and padding rows, are copied through unchanged).

    state (batch, dim, N) float32, or (n_cache, dim, N) with state_batch_indices; x, dt, z
    (batch, dim) of one dtype T in {float32, float16, bfloat16} (never cast); A (dim, N); B, C
    (batch, N) or (batch, n_groups, N) of dtype T; D, dt_bias (dim,) (A, D, dt_bias cast to
    float32). state_batch_indices (batch,) integer (cast to int32): the state row of each batch
    row; a negative entry is padding (out 0 for that row, no state touched); in range and no row
    twice, or an error. out has x's shape and
    dtype. With dt_softplus, dt + dt_bias goes through softplus. Inference only: no gradient.
    """
    who = "selective_state_update"
    dt_softplus = _as_bool(dt_softplus, "dt_softplus", who)
    _refuse_xla(who, "the scan in plain TensorFlow")
    with tf.name_scope(name or "selective_state_update"):
        state = _to_tensor(state, "state", who, dtype_hint=tf.float32)
        if state.dtype != tf.float32:
            raise TypeError("%s: state must be float32, got %s" % (who, state.dtype.name))
        x = _to_tensor(x, "x", who, dtype_hint=tf.float32)
        T = x.dtype
        if T not in _FLOAT_TYPES:
            raise TypeError("%s: x must be float32, float16 or bfloat16, got %s" % (who, T.name))
        like_x = dict(who=who, ref="x", group="x, dt, z, B and C")
        dt = _as_t(dt, T, "dt", **like_x)
        A = _as_f32(A, "A", who)
        B = _as_t(B, T, "B", **like_x)
        C = _as_t(C, T, "C", **like_x)
        empty_f32 = tf.zeros([0], tf.float32)
        D_ = _as_f32(D, "D", who) if D is not None else empty_f32
        z_ = _as_t(z, T, "z", **like_x) if z is not None else tf.zeros([0], T)
        bias_ = _as_f32(dt_bias, "dt_bias", who) if dt_bias is not None else empty_f32
        idx_ = _as_index(state_batch_indices, "state_batch_indices", tf.int32, who) \
            if state_batch_indices is not None else tf.zeros([0], tf.int32)
        out, new_state = _ops.selscan_step(
            state, x, dt, A, B, C, D_, z_, bias_, idx_,
            dt_softplus=dt_softplus,
            has_d=D is not None,
            has_z=z is not None,
            has_dt_bias=dt_bias is not None,
            has_state_batch_indices=state_batch_indices is not None,
        )
        return out, new_state


tf.no_gradient("SelscanStep")


_SECOND_ORDER_MSG = (
    "selscan_tf: second-order derivatives of selective_scan are not implemented: the gradient op "
    "(SelscanBackward) has no gradient of its own, so a nested tf.GradientTape, a Hessian, or a "
    "forward-mode tf.autodiff.ForwardAccumulator (TensorFlow builds JVPs from it) cannot go through "
    "it; use selective_scan_tf (the same scan in plain TensorFlow, differentiable to any order) there"
)


@tf.RegisterGradient("SelscanBackward")
def _selscan_backward_grad(op, *grads):
    """Called only where a derivative really flows into the gradient op's outputs: a clear error
    instead of TensorFlow's 'gradient registry has no entry' (never zeros or None)."""
    raise NotImplementedError(_SECOND_ORDER_MSG)


def _no_autocast_kwargs():
    """Keras 3 autocasts variables to the compute dtype inside call() under a mixed-precision
    policy; the op takes A, D and delta_bias in float32, so keep them float32 (no bf16 rounding)."""
    import inspect

    try:
        params = inspect.signature(tf.keras.layers.Layer.add_weight).parameters
    except (TypeError, ValueError):
        return {}
    return {"autocast": False} if "autocast" in params else {}


_NO_AUTOCAST = _no_autocast_kwargs()


def _positive_int(v, name, who):
    """An integer >= 1 (int or NumPy integer, or an integral float such as 16.0): 2.5 is refused,
    not truncated to 2; a bool is refused."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError("%s: %s must be a positive integer, got %r (%s)" % (who, name, v, type(v).__name__))
    if not (math.isfinite(float(v)) and float(v) == int(v) and int(v) >= 1):
        raise ValueError("%s: %s must be a positive integer, got %r" % (who, name, v))
    return int(v)


def _dt_range(dt_min, dt_max, who):
    """0 < dt_min <= dt_max (the log-uniform range of the initial step)."""
    for v, name in ((dt_min, "dt_min"), (dt_max, "dt_max")):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise TypeError("%s: %s must be a positive number, got %r (%s)" % (who, name, v, type(v).__name__))
    lo, hi = float(dt_min), float(dt_max)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 < lo <= hi):
        raise ValueError("%s: dt_min and dt_max must satisfy 0 < dt_min <= dt_max (finite), got dt_min=%r, "
                         "dt_max=%r" % (who, dt_min, dt_max))
    return lo, hi


class SelectiveScan(tf.keras.layers.Layer):
    """The S6 core of a Mamba block, holding its own A_log (dim, N), D (dim) and delta_bias (dim).

    call(u, delta, B, C, z=None, h0=None, training=None), with the shapes of selective_scan in the
    layout given at construction. A = -exp(A_log) (Mamba's S4D-real initialization
    A_log[d, n] = log(n + 1)), D = 1, delta_bias = softplus^-1 of dt drawn log-uniformly from
    [dt_min, dt_max], softplus applied to delta + delta_bias. The weights stay float32 under a
    mixed-precision policy (u, delta, B, C, z then arrive in the compute dtype, e.g. bfloat16).
    training=False skips the checkpoint (no backward follows). The op has no XLA kernel, so
    supports_jit is False (Keras then does not jit-compile a model containing this layer).
    """

    def __init__(self, dim, d_state=16, layout="BLD", dt_min=1e-3, dt_max=1e-1, delta_softplus=True, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(layout, str) or layout not in ("BLD", "BDL"):
            raise ValueError('SelectiveScan: layout must be "BLD" or "BDL", got %r' % (layout,))
        self.dim = _positive_int(dim, "dim", "SelectiveScan")
        self.d_state = _positive_int(d_state, "d_state", "SelectiveScan")
        self.layout = layout
        self.dt_min, self.dt_max = _dt_range(dt_min, dt_max, "SelectiveScan")
        self.delta_softplus = _as_bool(delta_softplus, "delta_softplus", "SelectiveScan")
        self.supports_jit = False
        dim, n = self.dim, self.d_state
        self.A_log = self.add_weight(
            name="A_log",
            shape=(dim, n),
            dtype="float32",
            initializer=lambda shape, dtype=None: tf.math.log(
                tf.tile(tf.range(1, n + 1, dtype=tf.float32)[None, :], [dim, 1])
            ),
            **_NO_AUTOCAST,
        )
        self.D = self.add_weight(name="D", shape=(dim,), dtype="float32", initializer="ones", **_NO_AUTOCAST)
        lo, hi = self.dt_min, self.dt_max

        def dt_bias_init(shape, dtype=None):
            dt = tf.exp(tf.random.uniform(shape, math.log(lo), math.log(hi)))
            return dt + tf.math.log(-tf.math.expm1(-dt))  # inverse of softplus

        self.delta_bias = self.add_weight(
            name="delta_bias", shape=(dim,), dtype="float32", initializer=dt_bias_init, **_NO_AUTOCAST
        )
        self.built = True

    def call(self, u, delta, B, C, z=None, h0=None, training=None):
        A = -tf.exp(tf.cast(self.A_log, tf.float32))
        return selective_scan(
            u,
            delta,
            A,
            B,
            C,
            D=tf.cast(self.D, tf.float32),
            z=z,
            delta_bias=tf.cast(self.delta_bias, tf.float32),
            delta_softplus=self.delta_softplus,
            h0=h0,
            layout=self.layout,
            save_checkpoint=training is not False,  # no backward in inference
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            dim=self.dim,
            d_state=self.d_state,
            layout=self.layout,
            dt_min=self.dt_min,
            dt_max=self.dt_max,
            delta_softplus=self.delta_softplus,
        )
        return config


SelectiveScan = tf.keras.utils.register_keras_serializable(package="selscan_tf")(SelectiveScan)

from .mamba_vision import (  # noqa: E402
    MambaVisionBlock,
    MambaVisionMixer,
    digits_classifier,
    load_block_state_dict,
    load_mixer_state_dict,
    mixer_state_dict_shapes,
    selective_scan_tf,
)
