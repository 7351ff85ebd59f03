"""selscan_torch.onnx: export models that call selscan's ops to ONNX and run them in ONNX Runtime
on selscan's kernels.

    import selscan_torch.onnx                    # the export translations, registered on import
    torch.onnx.export(model, args, "model.onnx", dynamo=True)
    # or, through torch's public API alone (any torch with the dynamo exporter):
    torch.onnx.export(model, args, "model.onnx", dynamo=True,
                      custom_translation_table=selscan_torch.onnx.custom_translation_table())

    import onnxruntime as ort
    so = ort.SessionOptions()
    so.register_custom_ops_library(selscan_torch.onnx.ort_library())
    session = ort.InferenceSession("model.onnx", so)

A model calling selective_scan_fn, selective_state_update or SelectiveScan exports with nodes of the
"selscan" domain (opset 1) instead of an unrolled loop:

    SelectiveScan(u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?) -> (y, last_state)
        attributes delta_softplus, return_last_state (0 / 1)
    SelectiveStateUpdate(state, x, dt, A, B, C, D?, z?, dt_bias?, state_index?) -> (y, state_out)
        attribute dt_softplus; state_out is the stepped copy of state (ONNX has no in-place update)

ort_library() is the custom-op library built with this package (libselscan_ort: selscan.h behind
ONNX Runtime's C API, no torch inside); it runs the ops on ONNX Runtime's intra-op threads. The
export needs onnx and onnxscript, the run onnxruntime (>= 1.17); none of them is imported by
`import selscan_torch`.

Importing this module also adds the translations to the registry a plain torch.onnx.export(...,
dynamo=True) builds (_add_to_torch_default_registry, the one place that touches torch's private
modules; torch >= 2.7). Where that is not possible (an older torch, or a release that moved the
registry) the import warns and the explicit forms work as ever: torch.onnx.export(...,
custom_translation_table=custom_translation_table()), or export(model, args, f) here.

It also registers the decode steps' export path with the modules that own the steps
(selscan_torch._register_onnx_step, selscan_torch.conv._register_onnx_conv_step).
"""

import glob
import os
import warnings
import weakref
from typing import Optional

import torch

import selscan_torch as _selscan

__all__ = [
    "DOMAIN",
    "OPSET_VERSION",
    "ort_library",
    "session_options",
    "custom_translation_table",
    "export",
    "register_schemas",
]

DOMAIN = "selscan"
OPSET_VERSION = 1

_HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the ONNX Runtime custom-op library ------------------------------------------------------------


def ort_library():
    """Path of libselscan_ort, the ONNX Runtime custom-op library of the selscan ops, for
    SessionOptions.register_custom_ops_library. Built by this package's setup.py (next to this file);
    SELSCAN_ORT_LIBRARY=/path/to/libselscan_ort.so overrides (e.g. `make ort-ops`' build/ort/)."""
    env = os.environ.get("SELSCAN_ORT_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"selscan: SELSCAN_ORT_LIBRARY={env!r} is not a file")
        return env
    found = sorted(glob.glob(os.path.join(_HERE, "_selscan_ort*.so")) + glob.glob(os.path.join(_HERE, "_selscan_ort*.pyd")))
    if not found:
        raise FileNotFoundError(
            "selscan: the ONNX Runtime custom-op library (selscan_torch/_selscan_ort*.so) was not built: reinstall "
            "with `pip install --no-build-isolation ./bindings/torch` (without SELSCAN_TORCH_NO_ORT=1), or build it "
            "with `make ort-ops` and set SELSCAN_ORT_LIBRARY=build/ort/libselscan_ort.so"
        )
    return found[0]


_registered = weakref.WeakSet()  # the SessionOptions session_options registered the library on (the objects
# themselves: ONNX Runtime's copies, e.g. InferenceSession.get_session_options(), hold no registration)


def session_options(options=None):
    """onnxruntime.SessionOptions (the given ones, or new ones) with the selscan ops registered, once: options
    this function registered already are returned as they are (ONNX Runtime refuses a session whose options
    register the library twice: "Domain already set in registry"; a register_custom_ops_library call of
    your own is not seen here)."""
    import onnxruntime as ort

    so = options if options is not None else ort.SessionOptions()
    if so in _registered:
        return so
    so.register_custom_ops_library(ort_library())
    _registered.add(so)
    return so


# ---- the ONNX schemas of the selscan domain ---------------------------------------------------------

_T = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]


def _infer_outputs(out_of, ranks=None):
    """A schema's type and shape inference (onnx.shape_inference): out_of(in_type, attr) -> the outputs'
    {index: (the input whose element type it has, or _FLOAT, [dim, ...] or None)}, where a dim is an int,
    (input, axis) to copy (a symbolic dim too), or (input, axis, lo, hi) for its value less one where
    lo <= value <= hi (else unknown: the op refuses it). An input of unknown shape, or of a rank ranks
    {input: (ranks,)} does not list (the op refuses it), leaves the output's shape unknown; attr(name) is an
    attribute's 0 / 1, 1 where absent, None for anything else (the op refuses it); only outputs the node has
    are set."""
    def infer(ctx):
        from onnx import TensorProto, helper

        def in_type(i):
            return ctx.get_input_type(i) if i < ctx.get_num_inputs() and ctx.has_input(i) else None

        def attr(name):
            a = ctx.get_attribute(name)
            return 1 if a is None else a.i if a.type == a.INT and a.i in (0, 1) else None

        def dim(d):  # an int, a dim_param or None (unknown); a ValueError where the input's shape rules it out
            if isinstance(d, int):
                return d
            sh = _shape(in_type(d[0]))
            if sh is None or len(sh.dim) not in (ranks or {}).get(d[0], (len(sh.dim),)) or d[1] >= len(sh.dim):
                raise ValueError
            v = sh.dim[d[1]]
            if len(d) == 4:  # the value less one (a known one in the op's range only)
                return v.dim_value - 1 if v.HasField("dim_value") and d[2] <= v.dim_value <= d[3] else None
            return v.dim_value if v.HasField("dim_value") else v.dim_param or None

        for o, (elem, dims) in out_of(in_type, attr).items():
            src = None if elem is _FLOAT else in_type(elem)
            elem_type = TensorProto.FLOAT if elem is _FLOAT else src.tensor_type.elem_type if src is not None else 0
            if o >= ctx.get_num_outputs() or not ctx.has_output(o) or not elem_type:
                continue  # (an input of unknown type, or not a tensor: the output left as it is)
            try:
                shape = None if dims is None else [dim(d) for d in dims]
            except ValueError:
                shape = None
            ctx.set_output_type(o, helper.make_tensor_type_proto(elem_type, shape))

    return infer


_FLOAT = "float"  # an output that is float32 whatever the inputs


def _shape(t):
    return t.tensor_type.shape if t is not None and t.tensor_type.HasField("shape") else None


def _rows(in_type, cu, batch_input):
    """A state's rows: n_seqs = cu_seqlens' length less one where the node has cu_seqlens, else the batch."""
    return (cu, 0, 2, 1 << 62) if in_type(cu) is not None else (batch_input, 0)


def _scan_outputs(in_type, attr):
    ret = attr("return_last_state")
    state = None if ret is None else [0] if ret == 0 else [_rows(in_type, 9, 0), (0, 1), (2, 1)]
    return {0: (0, [(0, 0), (0, 1), (0, 2)]), 1: (_FLOAT, state)}


def _conv_outputs(in_type, attr):
    ret = attr("return_final_state")
    state = None if ret is None else [0] if ret == 0 else [_rows(in_type, 4, 0), (0, 1), (1, 1, 2, 4)]
    return {0: (0, [(0, 0), (0, 1), (0, 2)]), 1: (0, state)}


def _copy_outputs(*pairs):
    """Outputs that are inputs' type and shape: pairs of (output, input)."""
    def out_of(in_type, attr):
        shapes = {i: _shape(in_type(i)) for _, i in pairs}
        return {o: (i, None if shapes[i] is None else [(i, a) for a in range(len(shapes[i].dim))]) for o, i in pairs}

    return out_of


def register_schemas():
    """Registers the selscan ops' schemas with onnx (idempotent): onnxscript builds nodes from them,
    onnx.checker knows the ops' inputs and attributes, and onnx.shape_inference their outputs' types and
    shapes (onnx >= 1.16: a schema's inference function from Python)."""
    import onnx.defs as defs

    Param = defs.OpSchema.FormalParameter
    opt = defs.OpSchema.FormalParameterOption.Optional
    Attr = defs.OpSchema.Attribute
    INT = defs.OpSchema.AttrType.INT

    def param(name, ty, doc, optional=False):
        return Param(name, ty, doc, param_option=opt) if optional else Param(name, ty, doc)

    schemas = [
        defs.OpSchema(
            "SelectiveScan", DOMAIN, OPSET_VERSION,
            "Mamba's selective scan (S6), selscan.h's forward: y = scan(u, delta, A, B, C, D, z).",
            inputs=[
                param("u", "T", "(batch, dim, L)"),
                param("delta", "T", "(batch, dim, L)"),
                param("A", "tensor(float)", "(dim, N)"),
                param("B", "TB", "(batch, N, L) or (batch, G, N, L) in T, or (dim, N) float (constant over time)"),
                param("C", "TB", "like B"),
                param("D", "tensor(float)", "(dim,)", True),
                param("z", "T", "(batch, dim, L): y *= silu(z)", True),
                param("delta_bias", "tensor(float)", "(dim,)", True),
                param("h0", "tensor(float)", "(rows, dim, N) initial state", True),
                param("cu_seqlens", "tensor(int64)", "(n_seqs + 1,) packed sequence offsets (batch 1)", True),
            ],
            outputs=[
                param("y", "T", "(batch, dim, L)"),
                param("last_state", "tensor(float)", "(rows, dim, N); (0,) with return_last_state=0", True),
            ],
            type_constraints=[("T", _T, "u's type"), ("TB", _T, "B / C: T over time, float when constant")],
            attributes=[
                Attr("delta_softplus", INT, "1: delta = softplus(delta + delta_bias)", required=False),
                Attr("return_last_state", INT, "1: last_state is the final state (default: when the node has it)",
                     required=False),
            ],
        ),
        defs.OpSchema(
            "SelectiveStateUpdate", DOMAIN, OPSET_VERSION,
            "One decode step of Mamba's selective scan on a cached state (selscan_step): state_out is state "
            "with the rows of the batch stepped, y the step's output.",
            inputs=[
                param("state", "tensor(float)", "(n_cache, dim, N)"),
                param("x", "T", "(batch, dim)"),
                param("dt", "T", "(batch, dim)"),
                param("A", "tensor(float)", "(dim, N)"),
                param("B", "T", "(batch, G, N)"),
                param("C", "T", "(batch, G, N)"),
                param("D", "tensor(float)", "(dim,)", True),
                param("z", "T", "(batch, dim)", True),
                param("dt_bias", "tensor(float)", "(dim,)", True),
                param("state_index", "tensor(int32)", "(batch,) state row of each batch row; < 0: padding", True),
            ],
            outputs=[param("y", "T", "(batch, dim)"), param("state_out", "tensor(float)", "(n_cache, dim, N)")],
            type_constraints=[("T", _T, "x's type")],
            attributes=[Attr("dt_softplus", INT, "1: dt = softplus(dt + dt_bias)", required=False)],
        ),
        defs.OpSchema(
            "CausalConv1d", DOMAIN, OPSET_VERSION,
            "Mamba's causal depthwise conv1d (selscan_conv): y = act(bias + sum_k weight[:, k] x[t - (W-1) + k]).",
            inputs=[
                param("x", "T", "(batch, dim, L)"),
                param("weight", "tensor(float)", "(dim, width), width 2..4"),
                param("bias", "tensor(float)", "(dim,)", True),
                param("init_state", "T", "(rows, dim, width - 1): the inputs before t = 0", True),
                param("cu_seqlens", "tensor(int64)", "(n_seqs + 1,) packed sequence offsets (batch 1)", True),
            ],
            outputs=[
                param("y", "T", "(batch, dim, L)"),
                param("final_state", "T", "(rows, dim, width - 1); (0,) with return_final_state=0", True),
            ],
            type_constraints=[("T", _T, "x's type")],
            attributes=[
                Attr("silu", INT, "1: act = silu", required=False),
                Attr("return_final_state", INT, "1: final_state is the last width - 1 inputs (default: when the "
                     "node has it)", required=False),
            ],
        ),
        defs.OpSchema(
            "CausalConv1dUpdate", DOMAIN, OPSET_VERSION,
            "The causal conv1d's decode update (selscan_conv_step): state_out is state with the rows of the "
            "batch shifted by the new tokens, y their outputs.",
            inputs=[
                param("state", "T", "(n_cache, dim, state_len), state_len >= width - 1"),
                param("x", "T", "(batch, dim) or (batch, dim, seqlen)"),
                param("weight", "tensor(float)", "(dim, width)"),
                param("bias", "tensor(float)", "(dim,)", True),
                param("state_index", "tensor(int32)", "(batch,) state row of each batch row; < 0: padding", True),
            ],
            outputs=[param("y", "T", "x's shape"), param("state_out", "T", "(n_cache, dim, state_len)")],
            type_constraints=[("T", _T, "x's type")],
            attributes=[Attr("silu", INT, "1: act = silu", required=False)],
        ),
    ]
    infer = {"SelectiveScan": _infer_outputs(_scan_outputs, {0: (3,), 2: (2,), 9: (1,)}),  # u, A, cu_seqlens
             "SelectiveStateUpdate": _infer_outputs(_copy_outputs((0, 1), (1, 0)), {0: (3,), 1: (2,)}),  # state, x
             "CausalConv1d": _infer_outputs(_conv_outputs, {0: (3,), 1: (2,), 4: (1,)}),  # x, weight, cu_seqlens
             "CausalConv1dUpdate": _infer_outputs(_copy_outputs((0, 1), (1, 0)), {0: (3,), 1: (2, 3)})}
    for s in schemas:
        if not defs.has(s.name, s.since_version, s.domain):
            if hasattr(s, "set_type_and_shape_inference_function"):
                s.set_type_and_shape_inference_function(infer[s.name])
            defs.register_schema(s)


# ---- the decode step as a functional op (what an ONNX export traces) -------------------------------
# selscan::step updates its state in place. ONNX has no in-place update, and torch.onnx cannot
# translate the functional wrapper torch.export puts around an in-place custom op
# (auto_functionalized_v2). So while torch.onnx.export runs, selective_state_update calls
# _export_step (registered with selscan_torch._register_onnx_step below): step_functional (new state
# out of place), then a copy of the new state into `state`. torch.export turns the copy into a graph
# output (or a write into the buffer / view state came from), and step_functional into
# SelectiveStateUpdate.


def _out_of_place(inplace_op, state, *args):
    """inplace_op(a copy of state, *args) -> (its output, the updated copy): a decode step's
    functional form."""
    new_state = state.clone()
    return inplace_op(new_state, *args), new_state


def _through_functional(functional_op, state, *args):
    """functional_op(state, *args), the new state copied into state (what torch.export turns into a
    graph output or a write into state's buffer); returns the op's output."""
    y, new_state = functional_op(state, *args)
    state.copy_(new_state)
    return y


@torch.library.custom_op("selscan::step_functional", mutates_args=())
def step_functional(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                    C: torch.Tensor, D: Optional[torch.Tensor], z: Optional[torch.Tensor],
                    dt_bias: Optional[torch.Tensor], state_index: Optional[torch.Tensor],
                    dt_softplus: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """selscan::step out of place: (y, the stepped copy of state)."""
    return _out_of_place(torch.ops.selscan.step.default, state, x, dt, A, B, C, D, z, dt_bias, state_index,
                         dt_softplus)


@step_functional.register_fake
def _step_functional_fake(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus):
    return torch.empty_like(x), torch.empty_like(state)


def _export_step(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus):
    # SelectiveStateUpdate takes B / C as (batch, G, N); the op also takes (batch, N) (one group)
    B = B.unsqueeze(1) if B.dim() == 2 else B
    C = C.unsqueeze(1) if C.dim() == 2 else C
    return _through_functional(torch.ops.selscan.step_functional.default, state, x, dt, A, B, C, D, z, dt_bias,
                               state_index, dt_softplus)


_selscan._register_onnx_step(_export_step)

# The causal conv1d's decode update, the same way (where selscan_torch has the conv ops): conv.py's
# causal_conv1d_update routes selscan::conv_step through the function registered with
# selscan_torch.conv._register_onnx_conv_step during an ONNX export.
HAS_CONV = hasattr(torch.ops.selscan, "conv_step")
if HAS_CONV:

    @torch.library.custom_op("selscan::conv_step_functional", mutates_args=())
    def conv_step_functional(state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                             bias: Optional[torch.Tensor], state_index: Optional[torch.Tensor],
                             silu: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """selscan::conv_step out of place: (y, the updated copy of state)."""
        return _out_of_place(torch.ops.selscan.conv_step.default, state, x, weight, bias, state_index, silu)

    @conv_step_functional.register_fake
    def _conv_step_functional_fake(state, x, weight, bias, state_index, silu):
        return torch.empty_like(x), torch.empty_like(state)

    def _export_conv_step(state, x, weight, bias, state_index, silu):
        return _through_functional(torch.ops.selscan.conv_step_functional.default, state, x, weight, bias,
                                   state_index, silu)

    from . import conv as _conv

    _conv._register_onnx_conv_step(_export_conv_step)


# ---- translations: torch.ops.selscan.* -> selscan nodes -------------------------------------------


def _opset():
    import onnxscript

    register_schemas()
    return onnxscript.values.Opset(DOMAIN, OPSET_VERSION)


def _empty_f32():
    """A float tensor of shape (0,): the placeholders selscan::fwd returns for what was not asked."""
    import numpy as np
    import onnx.numpy_helper
    from onnxscript.onnx_opset import opset18 as op

    return op.Constant(value=onnx.numpy_helper.from_array(np.zeros((0,), np.float32)))


def _fwd(u, delta, A, B, C, D=None, z=None, delta_bias=None, h0=None, cu_seqlens=None, delta_softplus=False,
         return_last_state=False, save_checkpoint=False):
    """selscan::fwd -> SelectiveScan; the checkpoint (a training buffer) is an empty tensor."""
    y, last = _opset().SelectiveScan(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens,
                                     delta_softplus=int(bool(delta_softplus)),
                                     return_last_state=int(bool(return_last_state)))
    return y, last, _empty_f32()


def _step_functional(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, state_index=None, dt_softplus=False):
    """selscan::step_functional -> SelectiveStateUpdate (y, state_out)."""
    y, state_out = _opset().SelectiveStateUpdate(state, x, dt, A, B, C, D, z, dt_bias, state_index,
                                                 dt_softplus=int(bool(dt_softplus)))
    return y, state_out


def _conv_fwd(x, weight, bias=None, init_state=None, cu_seqlens=None, silu=False, return_final_state=False,
              out_dim_major=False):
    """selscan::conv_fwd -> CausalConv1d (out_dim_major, a memory layout, has no meaning in ONNX)."""
    y, fin = _opset().CausalConv1d(x, weight, bias, init_state, cu_seqlens, silu=int(bool(silu)),
                                   return_final_state=int(bool(return_final_state)))
    return y, fin


def _conv_step_functional(state, x, weight, bias=None, state_index=None, silu=False):
    """selscan::conv_step_functional -> CausalConv1dUpdate (y, state_out)."""
    y, state_out = _opset().CausalConv1dUpdate(state, x, weight, bias, state_index, silu=int(bool(silu)))
    return y, state_out


def custom_translation_table():
    """The translations of the selscan ops, {torch op overload: onnxscript function}, for torch's
    public API: torch.onnx.export(model, args, f, dynamo=True,
    custom_translation_table=selscan_torch.onnx.custom_translation_table()). Works whether or not
    the import could add them to torch's default registry (merge it with a table of your own with
    {**custom_translation_table(), **mine}). A new dict each call."""
    table = {
        torch.ops.selscan.fwd.default: _fwd,
        torch.ops.selscan.step_functional.default: _step_functional,
    }
    if HAS_CONV:
        table[torch.ops.selscan.conv_fwd.default] = _conv_fwd
        table[torch.ops.selscan.conv_step_functional.default] = _conv_step_functional
    return table


def export(model, args=(), f=None, **kwargs):
    """torch.onnx.export(model, args, f, dynamo=True, ...) with the selscan translations (merged
    into a custom_translation_table given in kwargs). Returns the ONNXProgram."""
    table = dict(custom_translation_table())
    table.update(kwargs.pop("custom_translation_table", None) or {})
    kwargs.setdefault("dynamo", True)
    return torch.onnx.export(model, args, f, custom_translation_table=table, **kwargs)


# ---- plain torch.onnx.export: the translations in torch's default registry ------------------------
# torch.onnx.export(..., dynamo=True) builds its registry, on every export, from a list torch keeps in
# a private module (torch.onnx._internal.exporter._torchlib._torchlib_registry._registry: the ATen
# translations, moved there from onnxscript in torch 2.7; tested with 2.15). Adding selscan's
# translations to it is what lets a plain export know the selscan ops; it is done here and nowhere
# else, and a torch without it falls back to custom_translation_table() with a warning.

_TORCH_DEFAULT_REGISTRY_SINCE = (2, 7)
_EXPLICIT = ("pass custom_translation_table=selscan_torch.onnx.custom_translation_table() to torch.onnx.export "
             "(or use selscan_torch.onnx.export)")


def _torch_version():
    """(major, minor) of the running torch."""
    try:
        return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:  # a version string without two leading integers
        return (0, 0)


def _add_to_torch_default_registry():
    """Adds the translations to the registry a plain torch.onnx.export(..., dynamo=True) builds, so
    that it emits selscan nodes without custom_translation_table. True when done (or already
    done); False, with a warning naming the explicit form, where this torch has no such registry
    (torch < 2.7) or keeps it elsewhere. Never raises."""
    version = _torch_version()
    if version < _TORCH_DEFAULT_REGISTRY_SINCE:
        warnings.warn(f"selscan_torch.onnx: torch {torch.__version__} has no default ONNX translation registry "
                      f"selscan can add to (torch >= 2.7 has); a plain torch.onnx.export(..., dynamo=True) will not "
                      f"know the selscan ops: {_EXPLICIT}", stacklevel=2)
        return False
    try:
        from torch.onnx._internal.exporter import _registration
        from torch.onnx._internal.exporter._torchlib import _torchlib_registry as reg

        reg.get_torchlib_ops()  # torch's own registrations first (it registers lazily)
        registry = reg._registry
        done = {id(m.onnx_function) for m in registry}
        for target, fn in custom_translation_table().items():
            if id(fn) not in done:
                registry.append(_registration.OnnxDecompMeta(onnx_function=fn, fx_target=target, signature=None,
                                                             is_custom=True, is_complex=False))
        return True
    except Exception as e:  # a torch that moved or reshaped its private registry
        warnings.warn(f"selscan_torch.onnx: could not add the selscan ops to torch {torch.__version__}'s default "
                      f"ONNX registry ({type(e).__name__}: {e}); a plain torch.onnx.export(..., dynamo=True) will "
                      f"not know them: {_EXPLICIT}", stacklevel=2)
        return False


try:
    import onnxscript  # noqa: F401
except ImportError:  # the export needs onnxscript; ort_library() does not
    _registered_by_default = False
else:
    _registered_by_default = _add_to_torch_default_registry()
