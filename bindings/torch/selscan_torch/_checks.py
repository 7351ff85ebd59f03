"""selscan_torch's argument checks in Python (issue 27: framework ops under bad input; issue 39: one
owner for every rule).

Two users:

* the fake (meta) kernels of the ops (selscan_torch/__init__.py, conv.py): check_op hands the
  arguments' shapes, strides, dtypes and devices to the check the C++ kernels run (bindings/common's,
  through _C.check_args), so that an all-meta call is refused where a CPU call would be, and a meta
  tensor among real ones (where the dispatcher picks the fake kernel) is refused in the op's words,
  never answered with uninitialised memory. No rule of the ops is written here. Values (offsets,
  indices) are not known there: the real kernels check them.
* the mamba-compatible wrappers (selective_scan_fn, selective_state_update, causal_conv1d_*): what
  is cast, what is refused (bindings/torch/README.md, "What is cast, refused, copied"), the host
  offsets, the state row indices, and the multi-head step's shapes before heads are folded into
  channels: the wrappers' own rules, on what they take beyond the ops.

* the ops' Autograd-key kernels (__init__.py: the scan and the step; conv.py: the conv): the
  refusals the stable ABI leaves to Python (below, "What the stable ABI leaves to Python").

Messages name the caller's argument; ValueError for shapes, values and devices, TypeError for
dtypes, like the C++ side (whose refusals reach Python as RuntimeError, raised here as their type).
"""
import operator
import re

import torch

from . import _C  # the common layer's checks (check_args), ElementsMeet, error texts

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# integer dtypes taken for offsets and row indices (torch's uint16 / 32 / 64 lack the ops needed)
_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def index_dtype(t, name, note=""):
    """t's dtype one of _INDEX_DTYPES (note: what the argument holds, e.g. "int64 offsets")"""
    _type(t.dtype in _INDEX_DTYPES, name, " must be an integer tensor (int8 / 16 / 32 / 64 or uint8", note,
          "; torch's uint16 / 32 / 64 lack the ops needed), got ", t.dtype)
_EXCEPTIONS = {"ValueError": ValueError, "TypeError": TypeError, "NotImplementedError": NotImplementedError,
               "RuntimeError": RuntimeError}


def _shape(t):
    return str(list(t.shape))


def _value(cond, *msg):
    if not cond:
        raise ValueError("selscan: " + "".join(str(m) for m in msg))


def _type(cond, *msg):
    if not cond:
        raise TypeError("selscan: " + "".join(str(m) for m in msg))


# ---- the ops' rules: the C++ check, asked (fake kernels) -----------------------------------------


def _size(s, concrete):
    """A size or stride as an int: a symbolic one is -1 (not known: the check takes it as it may
    be), or with concrete its value (a guard: the trace is specialized on it)."""
    if isinstance(s, int):
        return s
    if concrete:
        return int(s)
    v = s.node.maybe_as_int()
    return -1 if v is None else v


def describe(t, concrete=False):
    """t as _C's checks take a tensor: (sizes, strides, str(dtype), str(device)); None for None."""
    if t is None:
        return None
    return (tuple(_size(s, concrete) for s in t.shape), tuple(_size(s, concrete) for s in t.stride()), str(t.dtype),
            str(t.device))


def check_op(op, *args, dt_limit=None, norm=None):
    """op's argument check ("fwd", "bwd", "step", "conv_fwd", "conv_bwd", "conv_step", "ssd_fwd",
    "ssd_bwd", "norm_fwd", "norm_bwd"; args in its schema's order, the tensors only; dt_limit: the
    SSD's clamp bounds where it clamps; norm: the norm's (group_size, eps, norm_before_gate)): the
    one its C++ kernels run (bindings/common, _C.check_args), on the arguments' shapes, strides,
    dtypes and devices. Raises the op's error; returns (batch, dim, L, N, G, rows, n_seqs, n_cache,
    width, state_len), -1 where a size is not known."""
    extra = dt_limit if norm is None else (int(norm[0]), float(norm[1]), bool(norm[2]))
    refusal, sizes = _C.check_args(op, tuple(describe(t) for t in args), extra)
    if refusal is not None:
        raise _EXCEPTIONS[refusal[0]](refusal[1])
    return sizes


# the argument refusals among _EXCEPTIONS' types (RuntimeError left out: a kernel's failure, and torch's own errors,
# name no argument): what a caller catches to rename
REFUSALS = (ValueError, TypeError, NotImplementedError)


def raise_renamed(e, names):
    """Re-raises e, a refusal of an op a function calls (its rules not restated there; caught as REFUSALS), with the
    op's argument names as the function's (names: the op's -> the function's; whole words, e.g. the conv's 'weight'
    as conv1d_weight); a subclass of those types as it is."""
    if type(e) not in REFUSALS:
        raise e
    msg = re.sub(r"(?<![\w])(" + "|".join(map(re.escape, names)) + r")(?![\w])", lambda m: names[m.group(1)], str(e))
    raise type(e)(msg) from e


def check_fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens):
    """selscan::fwd's argument check (check_op)."""
    return check_op("fwd", u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens)


def _first_bytes(t, state):
    """The byte addresses of t's and state's first elements, or None where they cannot share
    memory (storages apart: the common case, answered without looking at strides). Tensors without
    memory (meta, fake): views of one storage only, by their offsets in it."""
    try:
        if not (t.is_meta or state.is_meta):
            ts, ss = t.untyped_storage(), state.untyped_storage()
            p, q = ts.data_ptr(), ss.data_ptr()
            if p + ts.nbytes() <= q or q + ss.nbytes() <= p:
                return None
            return t.data_ptr(), state.data_ptr()
    except RuntimeError:  # a fake tensor's data pointer
        pass
    if not torch._C._is_alias_of(t, state):
        return None
    return t.storage_offset() * t.element_size(), state.storage_offset() * state.element_size()


def state_alias_refused(t, name, state, where="step", state_name="state"):
    """t is read through a copy the wrapper makes (a cast, heads folded by reshape, narrowed row
    indices): the op's alias check (selscan's) sees the copy, and updating state in place would
    change t behind the caller's back (issue 38). Refused where t shares a byte with state, in the
    op's words (C++ Step refuses its own copies so: a full broadcast, strided indices)."""
    # eager only: skipped while torch.compile traces (these calls would break the graph); another
    # device (another address space): refused by the op, naming t
    if torch.compiler.is_compiling() or t.get_device() != state.get_device() or t.is_meta != state.is_meta:
        return
    first = _first_bytes(t, state)
    if first is not None and t.numel() and state.numel() and _C.elements_meet(
            first[0], t.element_size(), tuple(t.shape), t.stride(), first[1], state.element_size(), tuple(state.shape),
            state.stride()):  # bindings/common's ElementsMeet, the rule C++ CheckReadCopy applies
        raise ValueError(_C.error_message("SELSCAN_ERR_ALIAS", where, state_name,
                                          f"overlaps {name}; updating {state_name} in place would change {name}: "
                                          f"pass {name} with its own memory, e.g. {name}.clone()"))


# ---- What the stable ABI leaves to Python (csrc/selscan_torch.h) ------------------------------------
# The extension is built on PyTorch's stable ABI: no autograd node, grad-mode query, inference tensor,
# version counter or typed Python error there. Each op's Autograd-key kernel (next to its fake kernel)
# does what needs them; these are the refusals they share.

_TYPED = (("ValueError: ", ValueError), ("TypeError: ", TypeError), ("NotImplementedError: ", NotImplementedError))


def raise_typed(e):
    """Re-raises a C++ kernel's RuntimeError as the type its message starts with ("ValueError:
    selscan: ...", csrc/selscan_torch.h Fail), the rest of the message its text; any other as it is.
    (Under torch.inference_mode(), which skips the Autograd key, a direct torch.ops.selscan.* call's
    refusal stays the RuntimeError.)"""
    msg = str(e)
    for prefix, cls in _TYPED:
        if msg.startswith(prefix):
            raise cls(msg[len(prefix):]) from None
    if msg.startswith("CUDA out of memory"):  # torch's allocator text, through the C shim (csrc ShimFailed)
        raise torch.OutOfMemoryError(msg) from None
    raise e


_forward_ad = torch.autograd.forward_ad


def call_below(op, *args, guard=torch._C._AutoDispatchBelowAutograd):
    """op(*args) below the Autograd key (guard: or below ADInplaceOrView, the in-place updates'), its
    C++ refusal raised as its type (raise_typed): how every Autograd-key kernel reaches the C++ kernel.
    Refuses forward-mode AD's dual tensors: below the Autograd key their tangents would be dropped (a
    silently wrong derivative under no_grad); the kernels have no jvp."""
    if _forward_ad._current_level >= 0 and any(  # (a dual level open: one module read on every call)
            isinstance(a, torch.Tensor) and _forward_ad.unpack_dual(a).tangent is not None for a in args):
        raise NotImplementedError(f"selscan: forward-mode AD (torch.autograd.forward_ad's dual tensors) is not "
                                  f"supported by {op}: its kernels have no jvp (reverse mode only)")
    with guard():
        try:
            return op(*args)
        except RuntimeError as e:
            raise_typed(e)


def backward_cotangents(dy, dstate, like, state_rank):
    """The cotangents a forward's Function.backward hands its backward op: dstate None where it is the
    (0,) placeholder of a state the forward did not return (its rank is not state_rank), dy zeros like
    the input `like` where autograd passed none (a loss on the state alone)."""
    if dstate is not None and dstate.dim() != state_rank:
        dstate = None
    return (torch.zeros_like(like) if dy is None else dy), dstate


def _wants_grad(t):
    """t.requires_grad, or, under a torch.func transform, whether the tensor it wraps requires grad (a wrapper
    says False where the tensor beneath does: the kernels would skip autograd and drop the gradient silently)."""
    if t.requires_grad:
        return True
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    while wrapped(t):
        t = torch._C._functorch.get_unwrapped(t)
        if t.requires_grad:
            return True
    return False


def requires_grad(ts):
    """Whether grad mode is on and one of ts (tensors or None) wants a gradient: the autograd kernels' test for
    taking their Function. Under a torch.func transform (vmap, functionalize) the tensors beneath the wrappers
    count too, so such a call reaches the Function and its refusal (no_func_transforms), never a silently
    dropped gradient (a reviewer's find)."""
    if not torch.is_grad_enabled():
        return False
    if any(t is not None and t.requires_grad for t in ts):
        return True
    # (the transform stack read only where no tensor says so itself: the training path's calls skip it)
    return not torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active() and any(
        t is not None and _wants_grad(t) for t in ts)


def direct(op, kernel):
    """How the package's own functions call an op: in eager mode its Autograd-key kernel itself
    (the same code the dispatcher would run, without its pass into a Python kernel and back: 4-14 us
    a call on the 2-core VM's CPU, bench/RESULTS.md "Issue 42, eighth session"), while torch.compile /
    torch.export trace, the op (so the graph holds it)."""
    def call(*args):
        if torch.compiler.is_compiling():
            return op(*args)
        if torch.is_inference_mode_enabled():  # the dispatcher skips the Autograd key here: so does this
            return call_below(op, *args)
        return kernel(*args)

    return call


def no_func_transforms(what):
    """Refuses torch.func's transforms where selscan's autograd.Function would run under them (grad, vjp, jacrev;
    vmap or functionalize of an input that requires grad; at some wrappers any transform): functorch needs a
    Function's setup_context, which selscan's have not, and torch's own refusal spoke of functorch's internals.
    Not while torch.compile traces (it reads no transform stack there)."""
    if not torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active():
        raise NotImplementedError(f"selscan: torch.func transforms (grad, vjp, jacrev, vmap, functionalize) are not "
                                  f"supported by {what} where it runs through its autograd.Function (it has no "
                                  f"setup_context); outside a transform torch.autograd differentiates it "
                                  f"(loss.backward(), torch.autograd.grad)")


def not_differentiable(op, function):
    """The Autograd kernel of a backward op (selscan::bwd, conv_bwd; function: the user's function):
    with grad mode on and an input requiring grad (a backward with create_graph=True) its outputs hang
    off a node whose backward raises: a double backward is an error, never silent zeros."""

    class NotDifferentiable(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            return tuple(call_below(op, *args))

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(f"selscan: double backward (differentiating the gradients of {function}, e.g. after "
                               f"create_graph=True) is not supported: selscan's backward of {function} is not "
                               f"differentiable")

    def kernel(*args):
        if requires_grad([a for a in args if isinstance(a, torch.Tensor)]):
            return list(NotDifferentiable.apply(*args))
        return call_below(op, *args)

    return kernel


def inference_only(what, state, named, op, args):
    """The Autograd kernel of an in-place decode update (selscan::step, conv_step; what: the user's
    function): with grad mode on an input requiring grad is refused before anything is written (an
    output claiming requires_grad would get no gradient), an inference-tensor state outside inference
    mode too; the update bumps state's version counter (autograd's check on tensors it saved)."""
    if torch.is_grad_enabled():
        for name, t in named:
            if t is not None and t.requires_grad:
                raise RuntimeError(f"selscan: {what} is inference-only (no autograd), but {name} requires grad; call "
                                   f"it under torch.no_grad() / torch.inference_mode() or pass {name}.detach()")
    if state.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError("selscan: state is an inference tensor (made under torch.inference_mode()); an in-place "
                         "update of it must run under torch.inference_mode() too")
    y = call_below(op, *args, guard=torch._C._AutoDispatchBelowADInplaceOrView)
    torch.autograd.graph.increment_version(state)
    return y


# ---- the wrappers' rules: what is cast, what is refused ------------------------------------------


def tensor_arg(t, name, optional=False):
    """t must be a tensor (or None where optional)."""
    if t is None and optional:
        return
    _type(isinstance(t, torch.Tensor), name, " must be a torch.Tensor", " or None" if optional else "",
          ", got ", type(t).__name__)


def float_arg(t, name):
    """t must be a real floating-point tensor (used in its own dtype, not cast): the one wording of that refusal."""
    tensor_arg(t, name)
    _type(t.is_floating_point(), name, " must be a real floating-point tensor, got ", t.dtype, " (argument '", name, "')")


def same_device(function, ref_name, ref, named):
    """Every tensor among named ((name, t or None) pairs) on ref's device (ref_name: the argument it is): a
    function's own rule for the tensors it hands to torch's functions or reads back before its ops see them
    (the ops check their own operands). Non-tensors are left to their own checks."""
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.device != ref.device:
            raise ValueError(f"selscan: {name} is on {t.device}, but {ref_name} is on {ref.device}: every tensor of "
                             f"{function} on one device (argument '{name}')")


def cast(t, name, dtype, state=None):
    """t in dtype: a floating-point tensor of another dtype is cast (t.to(dtype), rounding to
    nearest; autograd flows through the cast); complex, integer and bool tensors are refused.
    state: the decode step's in-place state, which t (read through the copy) may not overlap."""
    if t.dtype == dtype:
        return t
    tensor_arg(t, name)
    _type(t.is_floating_point(), name, " must be a real floating-point tensor (it is cast to ", dtype,
          "), got ", t.dtype)
    if state is not None:
        state_alias_refused(t, name, state)
    return t.to(dtype)


def is_int(v):
    """An integer (Python's or numpy's, anything with __index__), not a bool (nor a bool or meta tensor): what an
    integer argument takes."""
    if isinstance(v, bool) or (isinstance(v, torch.Tensor) and (v.dtype == torch.bool or v.is_meta)):
        return False
    try:
        operator.index(v)
    except TypeError:
        return False
    return True


def host_offsets(cu_seqlens):
    """cu_seqlens as the op takes it: an int64 CPU tensor (values checked by the op). A list / tuple
    of integers (is_int: Python's, numpy's) or an integer tensor (a CUDA one is copied back: a sync);
    floats, bools, complex and meta tensors are refused."""
    if isinstance(cu_seqlens, torch.Tensor):
        _value(cu_seqlens.device.type != "meta", "cu_seqlens is a meta tensor, but its values are read on the "
               "host: pass a CPU tensor or a list of ints")
        index_dtype(cu_seqlens, "cu_seqlens", ": int64 offsets")
        # selscan validates the offsets on the host: a CUDA tensor is copied back (a sync)
        return cu_seqlens.to(device="cpu", dtype=torch.int64)
    _type(isinstance(cu_seqlens, (list, tuple)), "cu_seqlens must be a tensor or a list of ints, got ",
          type(cu_seqlens).__name__)
    offs = []
    for v in cu_seqlens:  # (a tensor entry refused as before: a list holds Python's or numpy's ints)
        _type(not isinstance(v, torch.Tensor) and is_int(v), "cu_seqlens must hold ints, got ", type(v).__name__, " ",
              repr(v))
        v = operator.index(v)
        _value(-(2**63) <= v < 2**63, "cu_seqlens entry ", v, " does not fit int64")
        offs.append(v)
    return torch.tensor(offs, dtype=torch.int64)


def offset_list(cu, total, total_what, prefix="selscan"):
    """cu_seqlens (host_offsets' int64 CPU tensor) as a list of ints, checked where Python code reads the
    offsets itself (the ops check theirs in the library): 1-D, n_seqs + 1 >= 2 entries rising from 0 to
    total (total_what: what total is, for the message)."""
    _value(cu.dim() == 1 and cu.numel() >= 2, "cu_seqlens must be (n_seqs + 1,) offsets, got shape ", tuple(cu.shape),
           " (argument 'cu_seqlens')")
    offs = [int(v) for v in cu.tolist()]
    if offs[0] != 0 or offs[-1] != total or any(a > b for a, b in zip(offs, offs[1:])):
        raise ValueError(f"{prefix}: cu_seqlens must rise from 0 to {total_what} {total}, got {offs} "
                         "(argument 'cu_seqlens')")
    return offs


def int_arg(t, name, shape, what):
    """t an integer tensor of shape shape (what: its description), e.g. the conv update's cache_seqlens."""
    tensor_arg(t, name)
    index_dtype(t, name)
    _value(tuple(t.shape) == tuple(shape), name, " must have shape ", what, " = ", list(shape), ", got ", _shape(t))


def state_rows(idx, n_cache, name="state_batch_indices", where="step", state="state", state_tensor=None):
    """State row indices as the ops take them: int32 on their device. The rule of the decode
    step's state_batch_indices and the conv update's conv_state_indices (name: the caller's
    argument, where: the op, state: the cache it indexes). Integer dtypes only; checked before
    narrowing, int64 entries are clamped to [-1, n_cache]: negative ones are padding (made -1), one at or past
    n_cache stays out of range, which the op refuses on the CPU (its rule: every entry below n_cache, no
    row twice) and selscan's CUDA kernels treat as padding (no sync)."""
    tensor_arg(idx, name)
    index_dtype(idx, name)
    if idx.dtype == torch.int32:
        return idx
    if state_tensor is not None:  # narrowed below: a copy
        state_alias_refused(idx, name, state_tensor, where, state)
    _value(n_cache <= _INT32_MAX, state, " has ", n_cache, " rows, more than ", name, "' int32 rows reach")
    if idx.dtype == torch.int64:  # an entry at or past n_cache stays one (the op's rule refuses it on the host)
        idx = idx.clamp(min=-1, max=n_cache)
    return idx.to(torch.int32)


def step_state_rank(state, x, A):
    """The step's form is the state's rank (3: single head, 4: multi-head), except where x and A
    both have the other form's ranks: then the state is the odd one out and is named (issue 38: a
    3-D state among Mamba-2 shapes blamed x)."""
    nd = state.dim()
    if nd not in (3, 4):  # (the message's parts only on a refusal: the decode step's host time, every layer, every token)
        _value(False, "state must have shape (batch, dim, N) or (batch, nheads, hdim, N), got ", _shape(state))
    if not (isinstance(x, torch.Tensor) and isinstance(A, torch.Tensor)):
        return  # named where it is checked
    if nd == 3 and x.dim() == 3 and A.dim() == 3:
        _value(False, "state must have shape (batch, nheads, hdim, N) for the multi-head x ", _shape(x),
               " (batch, nheads, hdim) and A ", _shape(A), " (nheads, hdim, N), got ", _shape(state))
    if nd == 4 and x.dim() == 2 and A.dim() == 2:
        _value(False, "state must have shape (batch, dim, N) for the single-head x ", _shape(x), " (batch, dim) and A ",
               _shape(A), " (dim, N), got ", _shape(state))


def fold_heads(state, x, dt, A, B, C, D, z, dt_bias):
    """The multi-head step's shapes (Mamba-2: state (batch, nheads, hdim, N), x / dt / z (batch,
    nheads, hdim), A (nheads, hdim, N), D / dt_bias (nheads, hdim), B / C (batch, ngroups, N) with
    ngroups dividing nheads) checked in the caller's names, then the heads folded into channels:
    state as a view (it is updated in place: never a copy; refused where (nheads, hdim) cannot be
    merged), the others by reshape (a copy where their dims do not merge: one overlapping state is
    refused then, as the op refuses the tensors it sees)."""
    step_state_rank(state, x, A)
    n_cache, nheads, hdim, N = state.shape

    # (each message's parts built on a refusal alone: this runs every layer, every generated token)
    def want(t, name, shape, what):
        tensor_arg(t, name)
        if tuple(t.shape) != tuple(shape):
            _value(False, name, " must have shape ", what, " = ", list(shape), " for state ", _shape(state),
                   " (n_cache, nheads, hdim, N) and x ", _shape(x), ", got ", _shape(t))

    tensor_arg(x, "x")
    if not (x.dim() == 3 and x.shape[1:] == (nheads, hdim)):
        _value(False, "x must have shape (batch, nheads, hdim) with nheads = ", nheads, ", hdim = ", hdim,
               " for a (batch, nheads, hdim, N) state, got ", _shape(x))
    batch = x.shape[0]
    want(dt, "dt", x.shape, "x's shape")
    if z is not None:
        want(z, "z", x.shape, "x's shape")
    want(A, "A", (nheads, hdim, N), "(nheads, hdim, N)")
    if D is not None:
        want(D, "D", (nheads, hdim), "(nheads, hdim)")
    if dt_bias is not None:
        want(dt_bias, "dt_bias", (nheads, hdim), "(nheads, hdim)")
    for t, name in ((B, "B"), (C, "C")):
        tensor_arg(t, name)
        if not (t.dim() in (2, 3) and t.shape[0] == batch and t.shape[-1] == N):
            _value(False, name, " must have shape (batch, N) or (batch, ngroups, N) with batch = ", batch, ", N = ", N,
                   ", got ", _shape(t))
        G = t.shape[1] if t.dim() == 3 else 1
        if not (G >= 1 and nheads % G == 0):
            _value(False, name, " has ", G, " groups, which must divide nheads = ", nheads)
    state4 = state  # (one whose elements overlap: refused by the op, on the folded view)
    try:
        state = state.view(n_cache, nheads * hdim, N)
    except RuntimeError:
        _value(False, "state (batch, nheads, hdim, N) with strides ", list(state.stride()), " cannot be viewed as "
               "(batch, nheads * hdim, N): its nheads and hdim dims do not merge, and the step updates it in place "
               "(never a copy); pass a state whose hdim dim is laid out inside its nheads dim (e.g. .contiguous())")
    dim = nheads * hdim
    eager = not torch.compiler.is_compiling()

    def fold(t, name, *shape):
        f = t.reshape(*shape)
        if eager and not torch._C._is_alias_of(f, t):  # a copy: the op's alias check would see it, not t
            state_alias_refused(t, name, state4)
        return f

    x = fold(x, "x", batch, dim)
    dt = fold(dt, "dt", batch, dim)
    z = None if z is None else fold(z, "z", batch, dim)
    A = fold(A, "A", dim, N)
    D = None if D is None else fold(D, "D", dim)
    dt_bias = None if dt_bias is None else fold(dt_bias, "dt_bias", dim)
    return state, x, dt, A, D, z, dt_bias
