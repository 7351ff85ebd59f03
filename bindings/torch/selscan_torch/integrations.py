"""One line per client: run transformers' Mamba / FalconMamba, mamba_ssm's Mamba and NVlabs'
MambaVision on selscan.

    import selscan_torch.integrations as si
    si.use_in_transformers()      # MambaForCausalLM / FalconMambaForCausalLM, CPU and CUDA
                                  # (and JambaForCausalLM / ZambaForCausalLM's Mamba mixers, 5.x)
    si.use_in_mamba_ssm()         # mamba_ssm's Mamba / MambaLMHeadModel, no selective_scan_cuda / causal_conv1d
    si.use_in_mambavision()       # `import mambavision` without mamba_ssm installed

Each call is idempotent, returns a handle whose .replaced lists what it replaced (also logged
at INFO on the "selscan_torch" logger), and is undone by calling it with False, by
handle.restore(), or by using the handle as a context manager. Restores may come in any order;
after the last, sys.modules and every patched attribute of the modules that stay are as before the
first use_in_*: modules of mamba_ssm / causal_conv1d / mambavision imported meanwhile (on the
stand-ins) leave sys.modules (and their parents' attributes naming them) but keep the stand-ins,
so objects made from them keep running on selscan; other packages' modules the clients imported
(transformers, triton, ...) stay.

    with si.use_in_transformers():
        model(**batch).loss.backward()

What is replaced:
- transformers: the five kernel entry points its Mamba-1 mixers call, as module attributes of
  transformers.models.{mamba,falcon_mamba}.modeling_*: mamba_inner_fn, the selective scan, the
  decode step, causal_conv1d_fn, causal_conv1d_update (5.x: mamba_selective_scan /
  mamba_selective_state_update, resolved at call time; 4.x: selective_scan_fn /
  selective_state_update / the causal_conv1d cache, plus the mixers' forward, which in 4.x takes
  the kernel path only on CUDA: it is sent there on every device). FalconMamba's fused call is
  computed as transformers' own PyTorch path computes it (the dt RMS norm on x_proj's dt_rank
  slice, before dt_proj), not as mamba_ssm's kernel does (after dt_proj). 5.x: MambaMixer.forward
  (training without a cache: in_proj into the block's layout) and FalconMambaMixer.forward (hands
  attention_mask to the fused call). A padded attention_mask in training is applied where
  transformers' PyTorch path applies it, which its fused branch does not: 5.x before in_proj and
  on the conv's output, 4.x on x (in_proj's first half) and on the conv's output.
- transformers 5.x Jamba / Zamba (section "transformers: Jamba / Zamba" below): the four kernel
  names of transformers.models.{jamba,zamba}.modeling_* (mamba_selective_scan,
  mamba_selective_state_update, causal_conv1d_fn, causal_conv1d_update: prefill, decode, a training
  step with a cache) and JambaMambaMixer.forward / ZambaMambaMixer.forward, which without a cache run
  selscan's fused block (Jamba: with its dt / B / C RMS norms); Zamba: one grouped scan for its Mamba heads.
  transformers 4.x's Jamba / Zamba are left as they are.
- mamba_ssm: sys.modules["mamba_ssm.ops.selective_scan_interface"] (selscan's
  selective_scan_fn / mamba_inner_fn), a causal_conv1d package where none is installed, a
  mamba_ssm.ops.triton.selective_state_update module where it cannot be imported, and the names
  mamba_ssm.modules.mamba_simple bound at its import (so an already imported Mamba switches too);
  Mamba.step, whose A = -exp(A_log) moves into selscan's step kernel (two kernels fewer a layer
  a decode token), and Mamba.allocate_inference_cache (use_in_mamba_ssm's float32_state).
- mambavision: what `import mambavision` needs of mamba_ssm (selective_scan_fn) as stand-in
  modules when mamba_ssm is not installed, and mambavision's own module attribute when it is
  already imported.
"""
import contextvars
import functools
import importlib
import inspect
import importlib.util
import logging
import sys
import types
import weakref

import torch

from . import _C
from . import _checks
from . import block as _block
from . import conv as _conv
from . import ssd as _ssd
from . import selective_scan_fn as _selective_scan_fn
from . import selective_state_update as _selective_state_update

__all__ = ["use_in_transformers", "use_in_mamba_ssm", "use_in_mambavision", "Integration"]

logger = logging.getLogger("selscan_torch")
_ACTS = (None, "silu", "swish")
# the dtypes selscan's kernels take: a model of another (float64) runs transformers' own PyTorch path
_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _other_dtype(ts):
    """Whether a floating tensor among ts has a dtype selscan's kernels do not take."""
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype not in _KERNEL_DTYPES for t in ts)


def _takes_conv(weight):
    """Whether selscan's conv takes a mixer's conv weight: its width (_conv.width_supported) and dtype
    (else transformers' own path runs)."""
    return _conv.width_supported(weight) and weight.dtype in _KERNEL_DTYPES


# ---- adapters: selscan's functions, lenient where the clients' callers are ----------------------
# What the use_in_*() calls put in the clients' places (their module attributes and stand-in
# modules), named _standin_*: the package's own selscan_torch.selective_scan_fn & co. keep theirs
# (imported here as _selective_scan_fn / _selective_state_update; conv and block as modules).


def _standin_selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                               return_last_state=False, *args, **kwargs):
    """mamba_ssm's selective_scan_fn on selscan; extra arguments of client wrappers
    (transformers' use_mambapy, use_associative_scan, ...) are ignored."""
    return _selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus), bool(return_last_state))


def _standin_selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                                    state_batch_indices=None, *, A_is_log=False, **kwargs):
    """mamba_ssm's selective_state_update on selscan. A state in float32 or x's dtype (mamba_ssm's
    allocate_inference_cache and transformers' cache use the model's) is updated in place as it is;
    one of another dtype through a float32 copy. A_is_log: as selscan_torch.selective_state_update's."""
    dt_softplus = bool(dt_softplus)
    if state.dtype == torch.float32 or state.dtype == getattr(x, "dtype", None):
        return _selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                                       A_is_log=A_is_log)
    s32 = state.float()
    out = _selective_state_update(s32, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                                  A_is_log=A_is_log)
    state.copy_(s32)
    return out


def _standin_causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                              final_states_out=None, activation=None, *, cu_seqlens=None, **kwargs):
    return _conv.causal_conv1d_fn(x, weight, bias, seq_idx, initial_states, return_final_states, final_states_out,
                                  activation, cu_seqlens=cu_seqlens)


def _standin_causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                                  conv_state_indices=None, **kwargs):
    """causal_conv1d_update on selscan; a conv_state of another dtype than x (a float32 cache
    under autocast) is updated through a copy in x's dtype."""
    if conv_state.dtype == x.dtype:
        return _conv.causal_conv1d_update(x, conv_state, weight, bias, activation, cache_seqlens, conv_state_indices)
    tmp = conv_state.to(x.dtype)
    out = _conv.causal_conv1d_update(x, tmp, weight, bias, activation, cache_seqlens, conv_state_indices)
    conv_state.copy_(tmp)
    return out


def _standin_causal_conv1d_varlen_states(x, cu_seqlens, state_len):
    """causal_conv1d's causal_conv1d_varlen_states (a Triton kernel there: CUDA only) on any device: the conv
    state (n_seqs, dim, state_len) each sequence packed along x (total, dim) at the offsets cu_seqlens leaves,
    its last state_len positions, zeros in front of a shorter one (an empty one: all zeros). Forward only, as
    causal_conv1d's. mamba_ssm's Mamba2 calls it for a prefill of packed sequences into a cache (cu_seqlens
    with inference_params), and asserted "varlen inference requires causal_conv1d package" without it."""
    _checks.tensor_arg(x, "x")
    _checks._value(x.dim() == 2, "x must be (total, dim), got shape ", tuple(x.shape))
    _checks._type(isinstance(state_len, int) and not isinstance(state_len, bool), "state_len must be an int, got ",
                  type(state_len).__name__)
    _checks._value(state_len > 0, "state_len must be positive, got ", state_len)
    offs = _checks.offset_list(_checks.host_offsets(cu_seqlens), x.shape[0], "x's length")
    states = x.new_zeros(len(offs) - 1, state_len, x.shape[1]).transpose(1, 2)
    for i, (start, end) in enumerate(zip(offs, offs[1:])):
        n = min(end - start, state_len)
        if n > 0:
            states[i, :, state_len - n:] = x[end - n:end].transpose(0, 1)
    return states


def _standin_mamba_inner_fn(*args, **kwargs):
    return _block.mamba_inner_fn(*args, **kwargs)


# ---- patch bookkeeping ------------------------------------------------------------------------

_MISSING = object()
# Every patched place (a sys.modules entry or an attribute) with its original value and the
# values the active integrations put there, oldest first: restores in any order (use_in_mambavision
# and use_in_mamba_ssm both stand in for mamba_ssm's interface) leave the newest remaining value
# there, and the original once none remains.
_SLOTS = {}  # (id(owner), name) -> [owner, name, original, [(handle, value), ...]]
# Module namespaces an integration stands in for or whose imports bind its stand-ins ("mamba_ssm",
# "mambavision", ...): the sys.modules entries under each when the first integration covering it
# began, and the integrations covering it. Modules imported there meanwhile were bound to selscan's
# stand-ins; they leave sys.modules when the last of those integrations is restored, so a later
# import loads the client's own modules.
_NAMESPACES = {}  # namespace -> [{name: module}, {handles}]


def _get(owner, name):
    if owner is sys.modules:
        return sys.modules.get(name, _MISSING)
    if isinstance(owner, (types.ModuleType, type)):
        return owner.__dict__.get(name, _MISSING)
    return getattr(owner, name, _MISSING)


def _put(owner, name, value):
    if owner is sys.modules:
        if value is _MISSING:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = value
    elif value is _MISSING:
        try:
            delattr(owner, name)
        except AttributeError:
            pass
    else:
        setattr(owner, name, value)


def _held_by(owner, module_ids):
    """Whether owner (a patched place) is one of the modules module_ids, or a class one of them defines."""
    if id(owner) in module_ids:
        return True
    mod = sys.modules.get(getattr(owner, "__module__", None) or "") if isinstance(owner, type) else None
    return mod is not None and id(mod) in module_ids and mod.__dict__.get(owner.__name__) is owner


def _in_namespace(name, ns):
    return name == ns or name.startswith(ns + ".")


def _modules_in(ns):
    """{name: module} of sys.modules' entries under namespace ns, read from a copy: another thread may import
    (or a probe's clean-up delete) while this reads, and iterating sys.modules itself then raises
    "dictionary changed size during iteration" (sys.modules.copy() is one step, as the sys docs advise)."""
    return {k: m for k, m in sys.modules.copy().items() if _in_namespace(k, ns)}


def _drop_modules_since(ns, before):
    """Takes out of sys.modules the entries under ns that are not in before (names: what was there earlier),
    and the attributes their import set on parent packages that stay (mamba_ssm.ops.triton's
    `ssd_combined`, ...)."""
    for k, m in _modules_in(ns).items():
        if k in before:
            continue
        sys.modules.pop(k, None)
        parent, _, child = k.rpartition(".")
        if parent in sys.modules and sys.modules[parent].__dict__.get(child) is m:
            delattr(sys.modules[parent], child)


class Integration:
    """What one use_in_*() call replaced; restore() (or leaving the with-block) undoes it. A second
    use_in_*() call for the same client returns the same handle; leaving a with-block undoes the
    replacements only where that block's call made them (a block nested in another, or after an
    earlier call, leaves them to their maker); restore() and use_in_*(False) undo them always."""

    def __init__(self, client):
        self.client = client
        self.replaced = []  # human-readable: "module.attr" / "sys.modules[name]"
        self._slots = []  # _SLOTS keys, undone in reverse order
        self._namespaces = []
        self.active = True
        self._made_by_last_call = True  # whether the latest use_in_*() call returning this handle made it
        self._blocks = []  # one entry a with-block entered: whether its call made the replacements

    def _patch(self, owner, name, value, label):
        key = (id(owner), name)
        slot = _SLOTS.get(key)
        if slot is None:
            slot = _SLOTS[key] = [owner, name, _get(owner, name), []]
        slot[3].append((self, value))
        _put(owner, name, value)
        self._slots.append(key)
        self.replaced.append(label)

    def _setattr(self, obj, name, value, label):
        self._patch(obj, name, value, label)

    def _sysmod(self, name, module):
        self._patch(sys.modules, name, module, f"sys.modules[{name!r}]")

    def _own(self, ns):
        """Cover module namespace ns (call before its stand-ins are installed or imported)."""
        if ns in self._namespaces:
            return
        entry = _NAMESPACES.get(ns)
        if entry is None:
            entry = _NAMESPACES[ns] = [_modules_in(ns), set()]
        entry[1].add(self)
        self._namespaces.append(ns)

    def _leaving(self):
        """ids of the modules that leave sys.modules, by this restore or, where another integration still
        covers their namespace, by the last one's: those imported under a namespace this one covers (bound to
        the stand-ins; restores come in any order)."""
        ids = set()
        for ns in self._namespaces:
            base = _NAMESPACES[ns][0]
            ids.update(id(m) for k, m in _modules_in(ns).items() if k not in base)
        return ids

    def restore(self):
        if not self.active:
            return []
        leaving = self._leaving()
        for key in reversed(self._slots):
            slot = _SLOTS.get(key)
            if slot is None:
                continue
            owner, name, original, layers = slot
            top = bool(layers) and layers[-1][0] is self
            layers[:] = [lv for lv in layers if lv[0] is not self]
            if not layers:
                if not _held_by(owner, leaving):  # (a module leaving sys.modules, or a class of one, keeps the
                    _put(owner, name, original)   # stand-ins: objects made from it keep running on selscan)
                del _SLOTS[key]
            elif top:  # an integration applied before this one is still on: its value
                _put(owner, name, layers[-1][1])
        self._slots.clear()
        for ns in self._namespaces:
            base, owners = _NAMESPACES[ns]
            owners.discard(self)
            if owners:
                continue
            del _NAMESPACES[ns]
            _drop_modules_since(ns, base)
            for k, m in base.items():
                if sys.modules.get(k) is not m:
                    sys.modules[k] = m
        self._namespaces.clear()
        self.active = False
        if _ACTIVE.get(self.client) is self:
            del _ACTIVE[self.client]
        logger.info("selscan_torch: %s integration removed (%d replacements undone)", self.client, len(self.replaced))
        return list(self.replaced)

    def __enter__(self):
        self._blocks.append(self._made_by_last_call)
        self._made_by_last_call = False  # (a later `with handle:` of the same call is not its maker)
        return self

    def __exit__(self, *exc):
        if self._blocks.pop() if self._blocks else True:
            self.restore()
        return False

    def __repr__(self):
        state = "active" if self.active else "restored"
        return f"<selscan_torch {self.client} integration, {state}: {', '.join(self.replaced) or 'nothing'}>"


_ACTIVE = {}


def _toggle(client, enable, install):
    if not enable:
        h = _ACTIVE.get(client)
        return h.restore() if h is not None else []
    if client in _ACTIVE:  # idempotent: the same handle (a with-block on it leaves the restore to its maker)
        _ACTIVE[client]._made_by_last_call = False
        return _ACTIVE[client]
    h = Integration(client)
    try:
        install(h)
    except BaseException:
        h.restore()
        raise
    _ACTIVE[client] = h
    logger.info("selscan_torch: %s now runs on selscan; replaced %s", client, ", ".join(h.replaced))
    return h


def _standin(name, package=False, **attrs):
    m = types.ModuleType(name, f"selscan_torch stand-in for {name}")
    m.__dict__.update(attrs)
    m.__selscan_standin__ = True
    if package:
        m.__path__ = []
    return m


def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# ---- transformers -------------------------------------------------------------------------------

_TF_MODULES = ("transformers.models.mamba.modeling_mamba", "transformers.models.falcon_mamba.modeling_falcon_mamba")
_FALCON_DT_ONES = {}  # (device, n, norm) -> float32 ones: FalconMamba's weightless RMS norms' weights (_falcon_ones)


def _falcon_ones(device, n, norm="dt"):
    """n float32 ones on device, made once: the weight of a FalconMamba weightless RMS norm of n channels, one
    tensor a norm (the block's autograd.Function takes no tensor twice under torch.compile: "duplicate tensor
    input" refused FalconMamba's compiled training step, B's and C's weight one tensor)."""
    key = (device, n, norm)
    if key not in _FALCON_DT_ONES:
        _FALCON_DT_ONES[key] = torch.ones(n, dtype=torch.float32, device=device)
    return _FALCON_DT_ONES[key]
# (attention_mask, mask x too) of the mixer whose forward is running (_tf_mixer_forward_mask,
# _tf_mixer_forward), for its fused call
_TF_MASK = contextvars.ContextVar("selscan_tf_mask", default=(None, False))
_PAD_MEMO = [None]  # (weakref to the last mask, its _version, the answer, the last layer_idx it served,
#                     the autograd graph task it was asked in: -1 outside a backward)


def _padding_mask(mask, layer):
    """attention_mask where applying it changes something (an entry other than 1), else None, so
    that a batch without padding runs the unmasked block unchanged. Checked once per forward: every
    layer of a forward gets the same mask, and on CUDA the check waits for the device (one sync a
    forward, not one a layer). The answer is reused only by a later layer of the same forward (a
    higher layer_idx of the mixer, `layer`, on the same mask tensor and version): a repeated or
    lower index starts a new forward, so a mask whose contents changed without a version bump
    (refilled through numpy or .data, a caller's own buffer) is looked at again. Within one
    backward (gradient checkpointing recomputes the layers in falling order) any layer reuses it."""
    if mask is None:
        return None
    if torch.compiler.is_compiling():  # no data-dependent branch (a graph break) in a traced forward
        return mask
    try:
        version = mask._version
    except RuntimeError:  # an inference tensor: no version counter, no memo
        version = None
    if not isinstance(layer, int):
        version = None  # no layer index: no way to tell one forward from the next
    task = torch._C._current_graph_task_id()
    memo = _PAD_MEMO[0]
    if version is not None and memo is not None and memo[0]() is mask and memo[1] == version and (
            layer > memo[3] or (task != -1 and task == memo[4])):
        _PAD_MEMO[0] = memo[:3] + (layer, task)
        return mask if memo[2] else None
    pad = bool((mask != 1).any())
    _PAD_MEMO[0] = (weakref.ref(mask), version, pad, layer, task) if version is not None else None
    return mask if pad else None


def _mixer_padding(mixer, mask):
    """_padding_mask for a mixer's forward (its layer_idx, where it has one)."""
    return _padding_mask(mask, getattr(mixer, "layer_idx", None))


def _mixer_takes(mixer):
    """Whether selscan's kernels take the mixer (its conv's width and dtype: _takes_conv)."""
    return _takes_conv(mixer.conv1d.weight)


_FUSED_READS = ("in_proj", "x_proj", "dt_proj", "out_proj")  # the projections a fused block reads the weights of


def _no_hooks(module):
    """Whether calling the module runs its forward alone: no forward hooks of its own or global ones, no
    accelerate hook."""
    glob = torch.nn.modules.module
    return getattr(module, "_hf_hook", None) is None and not module._forward_hooks and \
        not module._forward_pre_hooks and not getattr(glob, "_global_forward_hooks", None) and \
        not getattr(glob, "_global_forward_pre_hooks", None)


def _runs_its_own_forward(module):
    """Whether calling module runs its class's forward as that class's module defines it and nothing else: no
    forward set on the instance, none patched into the class from elsewhere (its __module__ not the class's),
    no hooks. A fused block that reads the module's weights instead of calling it computes the same only then."""
    forward = getattr(type(module), "forward", None)
    return ("forward" not in module.__dict__ and getattr(forward, "__module__", None) == type(module).__module__
            and _no_hooks(module))


def _plain_linear(module):
    """Whether reading module.weight / .bias computes what calling the module computes: exactly nn.Linear,
    running its own forward (_runs_its_own_forward). An adapter (peft's LoRA wraps the Linear, its .weight the
    base layer's), a quantized subclass, a forward of its own or a hook acts only where the module is called,
    which a fused block does not do."""
    return type(module) is torch.nn.Linear and _runs_its_own_forward(module)


def _plain_norms(mixer, names, cls):
    """Whether a fused block that computes the mixer's norms (names) itself (cls's computation, from the
    weights and eps) computes what calling them does: each exactly cls (transformers' own norm of the
    mixer's module, e.g. JambaRMSNorm; not a replacement or a subclass, nor another norm class of that
    module), running its own forward (_runs_its_own_forward: a forward hook acts only where the module is
    called, which the block does not do). cls None (the module names no such class): no."""
    return cls is not None and all(type(m) is cls and _runs_its_own_forward(m) for m in (getattr(mixer, n, None) for n in names))


def _fusable(mixer, reads=_FUSED_READS):
    """Whether a Mamba-1 fused block computes what the mixer's unfused forward computes: silu after the conv
    (the block's only activation; transformers' path applies config.hidden_act) and every projection the
    block reads (reads) one whose weights say what calling it does (_plain_linear)."""
    if getattr(mixer, "activation", None) not in ("silu", "swish"):
        return False
    return all(_plain_linear(getattr(mixer, n)) for n in reads if getattr(mixer, n, None) is not None)


_TF_FUSABLE = contextvars.ContextVar("selscan_tf_fusable", default=True)  # _fusable of the running 5.x mixer


def _tf_inner(original):
    own = _tf_own(original)

    def mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                       out_proj_bias, A, B=None, C=None, D=None, delta_bias=None, B_proj_bias=None, C_proj_bias=None,
                       delta_softplus=True, checkpoint_lvl=1, b_rms_weight=None, c_rms_weight=None,
                       dt_rms_weight=None, b_c_dt_rms_eps=1e-6, **kwargs):
        if own is not None and (not _takes_conv(conv1d_weight) or not _TF_FUSABLE.get()):
            # a conv width (or a model dtype) selscan does not take, or a mixer the block would compute
            # otherwise than its forward (_fusable): 5.x's placeholder returns None, and transformers runs its
            # unfused path (its conv there: _tf_conv_fn, transformers' own for a width selscan does not take)
            return own(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                       out_proj_bias, A, B, C, D, delta_bias=delta_bias, B_proj_bias=B_proj_bias,
                       C_proj_bias=C_proj_bias, delta_softplus=delta_softplus, checkpoint_lvl=checkpoint_lvl,
                       b_rms_weight=b_rms_weight, c_rms_weight=c_rms_weight, dt_rms_weight=dt_rms_weight,
                       b_c_dt_rms_eps=b_c_dt_rms_eps, **kwargs)
        pre = False
        if dt_rms_weight is not None:
            # transformers' FalconMamba PyTorch path: weightless RMS norm of x_proj's dt_rank slice
            # before dt_proj (its dt_rms_weight is a buffer of ones of size intermediate_size)
            dt_rms_weight, pre = _falcon_ones(xz.device, delta_proj_weight.shape[1]), True
        mask, mask_x = _TF_MASK.get()
        if mask_x:  # 4.x's PyTorch path masks x (in_proj's output, not hidden_states) before the conv too
            d = xz.shape[1] // 2
            xz = torch.cat(((xz[:, :d] * mask[:, None, :]).to(xz.dtype), xz[:, d:]), dim=1)
        return _block.mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
                                     out_proj_weight, out_proj_bias, A, B, C, D, delta_bias, B_proj_bias,
                                     C_proj_bias, delta_softplus, checkpoint_lvl, b_rms_weight, c_rms_weight,
                                     dt_rms_weight, b_c_dt_rms_eps, dt_rms_pre_proj=pre, mask=mask)

    return mamba_inner_fn


def _tf_own(original):
    """transformers' own PyTorch body of a kernel name it decorates (use_kernel_func_from_hub_with_fallback
    resolves the decorated name to mamba_ssm / causal_conv1d where they import: for a conv width those
    do not take either, only the PyTorch body is right). With kernels installed the name is kernels' Func
    module around transformers' wrapper (nothing to unwrap: the module itself was returned, the dispatcher);
    where the wrapper cannot be read, the name as it is."""
    if original is None:
        return None
    wrapper = _tf_wrapper(original)
    return inspect.unwrap(original if wrapper is None else wrapper)


def _tf_step(original, step, inference_only=True):
    """A kernel of transformers' signature (mamba_selective_state_update, mamba_selective_scan, ...):
    selscan's, or transformers' own PyTorch body for a floating tensor of a dtype selscan's kernels do
    not take (a float64 model) and, inference_only (the decode steps), where autograd is to record the
    call (grad mode on and a tensor argument requiring grad: any cached forward outside
    torch.no_grad(), the model's parameters requiring grad), which selscan's inference-only steps
    refuse or would leave out of the graph. 5.x modules only (4.x's have no module-level original to
    defer to)."""
    own = _tf_own(original)
    if own is None:  # (4.x: no module-level original)
        return step

    def step_(*args, **kwargs):
        ts = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if _other_dtype(ts) or (inference_only and _checks.requires_grad(ts)):
            return own(*args, **kwargs)
        return step(*args, **kwargs)

    return functools.wraps(step)(step_)


def _tf_conv_fn(original, packed=False):
    """packed: the model's seq_idx / cu_seqlens keywords restart the conv (ssd.conv_packing; the Mamba-2
    mixers, whose scans restart there too)."""
    own = _tf_own(original)

    def causal_conv1d_fn_(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                          final_states_out=None, activation=None, **kwargs):
        cu = None
        if packed:
            packing = _ssd.conv_packing(seq_idx, kwargs.get("cu_seqlens"), x.shape[-1])
            seq_idx, cu = packing.get("seq_idx"), packing.get("cu_seqlens")
        if not _takes_conv(weight):  # a width / dtype selscan's conv does not take: transformers' own
            if seq_idx is not None or cu is not None or initial_states is not None or return_final_states or \
                    final_states_out is not None:
                raise NotImplementedError(f"selscan_torch.use_in_transformers: a conv of width {weight.shape[-1]} "
                                          f"({weight.dtype}) "
                                          "with packed sequences / initial_states / final states: neither "
                                          "selscan's conv "
                                          f"(widths {_C.CONV_MIN_WIDTH} .. {_C.CONV_MAX_WIDTH}) nor "
                                          "transformers' own PyTorch conv takes them")
            return own(x, weight, bias, activation=activation, **kwargs)
        if activation not in _ACTS:  # an activation selscan's conv does not fuse: transformers' own, which
            if seq_idx is None and cu is None:  # does not keep packed sequences apart (it ignored a seq_idx:
                return original(x, weight, bias, activation=activation, **kwargs)  # the conv ran across them)
            return _tf_conv_then_act(x, weight, bias, seq_idx, cu, initial_states, return_final_states,
                                     final_states_out, activation)
        return _standin_causal_conv1d_fn(x, weight, bias, seq_idx, initial_states, return_final_states,
                                         final_states_out, activation, cu_seqlens=cu)

    return causal_conv1d_fn_


def _tf_conv_then_act(x, weight, bias, seq_idx, cu, initial_states, return_final_states, final_states_out,
                      activation):
    """Packed sequences through a conv whose activation selscan's conv does not fuse (a Mamba-2 model's
    hidden_act other than silu): selscan's conv restarting at each sequence, then the activation as
    transformers' own conv applies it (ACT2FN, in the weight's dtype, back to x's). Before, transformers' own
    conv ran without the seq_idx (a silent mix of the sequences, where the scan restarted) or refused
    cu_seqlens."""
    if initial_states is not None or return_final_states or final_states_out is not None:
        raise NotImplementedError(f"selscan_torch.use_in_transformers: packed sequences with initial_states / "
                                  f"final states through a conv of activation {activation!r}: selscan's conv "
                                  f"fuses {_ACTS[1:]} only (argument 'activation')")
    from transformers.activations import ACT2FN

    y = _standin_causal_conv1d_fn(x, weight, bias, seq_idx, activation=None, cu_seqlens=cu)
    return ACT2FN[activation](y.to(weight.dtype)).to(x.dtype)


def _tf_conv_update(original):
    own = _tf_own(original)

    def causal_conv1d_update_(x, conv_state, weight, bias=None, activation=None, *args, **kwargs):
        if own is not None and not _takes_conv(weight):  # (4.x: no original; its mixers keep
            return own(x, conv_state, weight, bias, activation, *args, **kwargs)  # their own path for these)
        if activation not in _ACTS:
            return original(x, conv_state, weight, bias, activation, *args, **kwargs)
        return _standin_causal_conv1d_update(x, conv_state, weight, bias, activation, *args, **kwargs)

    return _tf_step(original, causal_conv1d_update_)


def _tf_mixer_forward_mask(original, cache_name):
    """A 5.x mixer's forward (FalconMamba's; MambaMixer's where its stand-in passes) around
    transformers' own: in a training step without a cache with padding in attention_mask, the
    mask goes to selscan's mamba_inner_fn (_tf_inner), which applies it to the conv's output as
    transformers' PyTorch path does (its fused branch masks before in_proj only)."""
    def forward(self, hidden_states, *args, **kwargs):
        cache = args[0] if args else kwargs.get(cache_name)
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        mask = _mixer_padding(self, mask) if self.training and cache is None else None
        fusable = _fusable(self)
        if mask is None and fusable:  # no padding: transformers' forward as it is
            return original(self, hidden_states, *args, **kwargs)
        token = _TF_MASK.set((mask, False))
        fuse = _TF_FUSABLE.set(fusable)  # not: the fused call answers None, transformers' unfused path runs
        try:
            return original(self, hidden_states, *args, **kwargs)
        finally:
            _TF_FUSABLE.reset(fuse)
            _TF_MASK.reset(token)

    forward.__wrapped__ = original
    return forward


def _tf_mixer_forward_cm(original, apply_mask, cache_name):
    """transformers 5.x MambaMixer.forward whose training step (no cache) computes in_proj straight
    into the block's cm layout (block.in_proj_cm) and runs selscan's mamba_inner_fn on it: the same
    computation as transformers' fused branch (mask, in_proj, A = -exp(A_log), mamba_inner_fn with
    its arguments) without the channels-last xz, so neither z's transpose for the scan nor a
    transposed gradient. attention_mask is applied where transformers' PyTorch path applies it:
    before in_proj and on the conv's output (block's mask; transformers' fused branch masks before
    in_proj only). Everything else (a cache, eval, generation, an argument it does not know)
    runs transformers' forward (through _tf_mixer_forward_mask). cache_name: the forward's cache
    argument ("cache" since 5.2x, "cache_params" before)."""
    fallback = _tf_mixer_forward_mask(original, cache_name)

    def forward(self, hidden_states, *args, **kwargs):
        cache = args[0] if args else kwargs.get(cache_name)
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        if len(args) > 2 or set(kwargs) - {cache_name, "attention_mask"} or not (self.training and cache is None) \
                or not _mixer_takes(self) or not _fusable(self):
            return fallback(self, hidden_states, *args, **kwargs)
        hidden_states = apply_mask(hidden_states, mask)
        xz = _block.in_proj_cm(hidden_states, self.in_proj.weight, self.in_proj.bias)
        A = -torch.exp(self.A_log.float())
        return _block.mamba_inner_fn(xz, self.conv1d.weight, self.conv1d.bias if self.use_conv_bias else None,
                                     self.x_proj.weight, self.dt_proj.weight, self.out_proj.weight,
                                     self.out_proj.bias.float() if self.use_bias else None, A, None, None,
                                     self.D.float(), delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
                                     mask=_mixer_padding(self, mask))

    forward.__wrapped__ = original
    return forward


def _tf_cache_name(m):
    """The cache argument's name where a 5.x mixer's forward has the signature (hidden_states,
    cache or cache_params, attention_mask, **kwargs) the stand-ins read; else None."""
    if not isinstance(m, type) or "forward" not in m.__dict__:
        return None
    try:
        params = list(inspect.signature(m.__dict__["forward"]).parameters)
    except (TypeError, ValueError):
        return None
    if len(params) < 4 or params[:2] != ["self", "hidden_states"] or params[2] not in ("cache", "cache_params") or \
            params[3] != "attention_mask":
        return None
    return params[2]


def _tf_cm_hook(g):
    """(MambaMixer, apply_mask_to_padding_states, the cache argument's name) where
    _tf_mixer_forward_cm can stand in for the 5.x mixer's forward: its signature (hidden_states,
    cache or cache_params, attention_mask, **kwargs) and the module's mask helper. None where they
    differ (transformers then keeps its own forward; only the module-level kernels are selscan's)."""
    m = g.get("MambaMixer")
    mask = g.get("apply_mask_to_padding_states")
    cache_name = _tf_cache_name(m)
    if mask is None or cache_name is None:
        return None
    return m, mask, cache_name


_ARG_POS = {}  # (function, argument name) -> its position among *args (-1: none): one signature a mixer


def _tf_arg(fn, name, args, kwargs):
    """Argument `name` of a call fn(self, hidden_states, *args, **kwargs); None where not given."""
    if name in kwargs or not args:
        return kwargs.get(name)
    key = (getattr(fn, "__func__", fn), name)
    i = _ARG_POS.get(key)
    if i is None:  # inspect.signature costs tens of us: once per mixer class, not once a layer a step
        try:  # a bound method's signature has no self: *args start after hidden_states
            params = [p for p in inspect.signature(fn).parameters if p != "self"]
            i = params.index(name) - 1
        except (TypeError, ValueError):
            i = -1
        _ARG_POS[key] = i
    return args[i] if 0 <= i < len(args) else None


def _tf_mixer_forward(self, hidden_states, *args, **kwargs):
    # transformers 4.x: the kernel path, on every device (its forward takes it only on CUDA). Its
    # fused training branch ignores attention_mask; its PyTorch path (slow_forward) masks x before
    # the conv and the conv's output: a padded mask goes to _tf_inner for both
    if (not _mixer_takes(self) or not _fusable(self)) and hasattr(self, "slow_forward"):
        # a conv width selscan does not take, or an activation / adapter the kernel path would not apply
        return self.slow_forward(hidden_states, *args, **kwargs)
    fwd = self.cuda_kernels_forward
    if self.training and _tf_arg(fwd, "cache_params", args, kwargs) is None:
        mask = _mixer_padding(self, _tf_arg(fwd, "attention_mask", args, kwargs))
        if mask is not None:
            token = _TF_MASK.set((mask, True))
            try:
                return fwd(hidden_states, *args, **kwargs)
            finally:
                _TF_MASK.reset(token)
    return fwd(hidden_states, *args, **kwargs)


def _set_tf5_kernels(h, mod, modname, selective_scan, selective_state_update):
    """The four kernel names of a transformers 5.x module (Mamba's, Jamba's, Zamba's): its
    mamba_selective_scan / mamba_selective_state_update the given ones, its causal_conv1d_fn /
    causal_conv1d_update selscan's around the module's own."""
    g = mod.__dict__
    h._setattr(mod, "mamba_selective_scan", _tf_step(g["mamba_selective_scan"], selective_scan, inference_only=False),
               f"{modname}.mamba_selective_scan")
    h._setattr(mod, "mamba_selective_state_update", _tf_step(g["mamba_selective_state_update"],
                                                              selective_state_update),
               f"{modname}.mamba_selective_state_update")
    h._setattr(mod, "causal_conv1d_fn", _tf_conv_fn(g["causal_conv1d_fn"]), f"{modname}.causal_conv1d_fn")
    h._setattr(mod, "causal_conv1d_update", _tf_conv_update(g["causal_conv1d_update"]),
               f"{modname}.causal_conv1d_update")


def _install_transformers(h):
    try:
        import transformers
    except ImportError as e:
        raise ImportError("selscan_torch.use_in_transformers: transformers is not installed") from e
    version = transformers.__version__
    found = 0
    for modname in _TF_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        g = mod.__dict__
        mixers = [v for k, v in g.items() if isinstance(v, type) and k.endswith("Mixer") and k.startswith(
            ("Mamba", "FalconMamba"))]
        if "mamba_selective_scan" in g and "mamba_selective_state_update" in g and "causal_conv1d_fn" in g:
            # 5.x: module-level wrappers, looked up by the mixer's forward at call time
            _set_tf5_kernels(h, mod, modname, _standin_selective_scan_fn, _standin_selective_state_update)
            if "mamba_inner_fn" not in g:  # no fused training branch (FalconMamba since 5.25): selscan's
                # fused block without a cache as for Jamba (_hy_falcon_forward), else its own forward
                mask = g.get("apply_mask_to_padding_states")
                for m in mixers:
                    cache_name, stand_in = _tf_cache_name(m), _HY_FORWARDS.get(m.__name__)
                    if cache_name is not None and mask is not None and stand_in is not None:
                        h._setattr(m, "forward", stand_in(m.__dict__["forward"], mask, cache_name),
                                   f"{modname}.{m.__name__}.forward")
                found += 1
                continue
            h._setattr(mod, "mamba_inner_fn", _tf_inner(g["mamba_inner_fn"]), f"{modname}.mamba_inner_fn")
            hook = _tf_cm_hook(g)
            if hook is not None:
                mixer, mask, cache_name = hook
                h._setattr(mixer, "forward", _tf_mixer_forward_cm(mixer.__dict__["forward"], mask, cache_name),
                           f"{modname}.MambaMixer.forward")
            for m in mixers:  # the others' fused call gets attention_mask through _tf_mixer_forward_mask
                cache_name = _tf_cache_name(m)
                if (hook is None or m is not hook[0]) and cache_name is not None:
                    h._setattr(m, "forward", _tf_mixer_forward_mask(m.__dict__["forward"], cache_name),
                               f"{modname}.{m.__name__}.forward")
            found += 1
        elif "selective_scan_fn" in g and "selective_state_update" in g and "mamba_inner_fn" in g and mixers and all(
                hasattr(m, "cuda_kernels_forward") for m in mixers):
            # 4.x: names bound at import (None without mamba_ssm), causal_conv1d resolved through a
            # module-level cache or bound at import, forward takes the kernel path on CUDA only
            torch_conv_fn = lambda x, w, b=None, activation=None, **kw: _torch_conv_fallback(x, w, b, activation)  # noqa
            h._setattr(mod, "mamba_inner_fn", _tf_inner(None), f"{modname}.mamba_inner_fn")
            h._setattr(mod, "selective_scan_fn", _standin_selective_scan_fn, f"{modname}.selective_scan_fn")
            h._setattr(mod, "selective_state_update", _standin_selective_state_update,
                       f"{modname}.selective_state_update")
            conv_fn, conv_up = _tf_conv_fn(torch_conv_fn), _tf_conv_update(None)
            if "_causal_conv1d_cache" in g:
                h._setattr(mod, "_causal_conv1d_cache", (conv_up, conv_fn), f"{modname}._causal_conv1d_cache")
            if "causal_conv1d_fn" in g:
                h._setattr(mod, "causal_conv1d_fn", conv_fn, f"{modname}.causal_conv1d_fn")
                h._setattr(mod, "causal_conv1d_update", conv_up, f"{modname}.causal_conv1d_update")
            if "is_fast_path_available" in g:
                h._setattr(mod, "is_fast_path_available", True, f"{modname}.is_fast_path_available")
            for m in mixers:
                h._setattr(m, "forward", _tf_mixer_forward, f"{modname}.{m.__name__}.forward")
            found += 1
        else:
            raise RuntimeError(
                f"selscan_torch.use_in_transformers: transformers {version} has none of the hook points selscan "
                f"patches in {modname} (5.x: mamba_selective_scan / mamba_selective_state_update / "
                f"causal_conv1d_fn / causal_conv1d_update, mamba_inner_fn where the mixer fuses; 4.x: mamba_inner_fn / "
                f"selective_scan_fn / selective_state_update and the mixer's cuda_kernels_forward); tested with "
                f"transformers 5.24 and 5.25")
    found += _install_transformers_hybrids(h)  # Jamba / Zamba: their own section below
    found += _install_transformers_mamba2(h)  # the Mamba-2 families: their own section below
    if not found:
        raise RuntimeError(f"selscan_torch.use_in_transformers: transformers {version} has no Mamba model modules")


def _torch_conv_fallback(x, weight, bias, activation):
    # transformers 4.x kernel path with an activation selscan's conv does not fuse: plain PyTorch
    W = weight.shape[-1]
    y = torch.nn.functional.conv1d(x.to(weight.dtype), weight.reshape(weight.shape[0], 1, W), bias,
                                   padding=W - 1, groups=x.shape[1])[..., : x.shape[-1]]
    from transformers.activations import ACT2FN

    return ACT2FN[activation](y).to(x.dtype)


def use_in_transformers(enable=True):
    """Route transformers' MambaForCausalLM / FalconMambaForCausalLM mixers through selscan's
    mamba_inner_fn (training), selective_scan_fn / causal_conv1d_fn (prefill) and
    selective_state_update / causal_conv1d_update (decode), on CPU and CUDA. Returns an
    Integration handle (enable=False: the list of what was restored). transformers 5.x's
    JambaForCausalLM / ZambaForCausalLM too: their Mamba mixers' kernels, and the fused block
    without a cache (_install_transformers_hybrids); the Mamba-2 families (Mamba2, Bamba, FalconH1,
    GraniteMoeHybrid, NemotronH, Zamba2): their SSD scan (CUDA: mamba_ssm's Triton kernels where
    installed, else selscan's CUDA SSD kernels), decode step and conv
    (_install_transformers_mamba2)."""
    return _toggle("transformers", enable, _install_transformers)


# ---- transformers: Jamba / Zamba (the hybrid Mamba-1 families, issue 42) -------------------------
# transformers 5.x's JambaMambaMixer and ZambaMambaMixer call four kernels by their module-level
# names, looked up at call time: mamba_selective_scan, mamba_selective_state_update,
# causal_conv1d_fn, causal_conv1d_update (each decorated with use_kernel_func_from_hub_with_fallback:
# a hub kernel under use_kernels=True, else mamba_ssm / causal_conv1d when they import, else the
# decorated PyTorch body). Their forward has no fused branch and no device gate: it runs these on
# any device, unfused (Jamba imports a mamba_inner_fn it never calls). selscan rebinds the four
# names (prefill, decode, and a training step with a cache: transformers' own forward on selscan's
# kernels), and stands in for the mixers' forward where there is no cache (training with
# use_cache=False or gradient checkpointing; a forward without a cache): for Jamba selscan's fused
# block, which takes its dt / B / C RMS norms (the dt norm on x_proj's dt_rank slice, before
# dt_proj); for Zamba one grouped scan for its n_mamba_heads heads (a head's B / C a group).
# attention_mask is applied where transformers' forward applies it: before in_proj and on the
# conv's output.

from . import selective_scan_fn as _hy_scan_op  # noqa: E402  (the package's ops, this section's names)

_TF_HYBRID_MODULES = (("transformers.models.jamba.modeling_jamba", "JambaMambaMixer"),
                      ("transformers.models.zamba.modeling_zamba", "ZambaMambaMixer"))
_TF_HYBRID_KERNELS = ("mamba_selective_scan", "mamba_selective_state_update", "causal_conv1d_fn",
                      "causal_conv1d_update")
_TF_HYBRID_ACCELERATE_CHILDREN = ("conv1d", "dt_proj", "in_proj", "x_proj", "out_proj")


def _hy_selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False, *args, **kwargs):
    """transformers 5.x's mamba_selective_scan (Jamba's / Zamba's) on selscan: its PyTorch-only
    options (use_mambapy, use_associative_scan) are ignored, as its mamba_ssm resolution does."""
    return _hy_scan_op(u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus), bool(return_last_state))


def _hy_selective_state_update(state, hidden_states, dt, A, B, C, D=None, dt_bias=None, dt_softplus=False, z=None,
                               **kwargs):
    """transformers 5.x's mamba_selective_state_update (its argument order: dt_bias, dt_softplus, z)
    on selscan's step (_standin_selective_state_update: in place, any state dtype). Zamba passes one
    head's strided slice of its (batch, heads, hdim, N) state: updated in place as it is."""
    return _standin_selective_state_update(state, hidden_states, dt, A, B, C, D, z, dt_bias, dt_softplus)


def _hy_fused_args(self, args, kwargs, cache_name, reads=_FUSED_READS):
    """(take the fused block?, attention_mask) for a Jamba / Zamba mixer forward(hidden_states,
    cache, attention_mask, **kwargs): only without a cache, without packed sequences (seq_idx /
    cu_seqlens, which transformers hands to the conv), with silu, no quantized config and no
    accelerate hooks (the block reads the weights directly, where transformers'
    force_accelerate_hooks would fire them). Other keywords (the model's **kwargs passed down, e.g.
    the Trainer's num_items_in_batch) are ignored, as the mixers ignore them."""
    if len(args) > 2 or (cache_name != "cache_params" and "cache_params" in kwargs):
        return False, None  # the deprecated name where the forward's is `cache` (5.24): transformers maps it
                            # (5.17's forward names its cache argument cache_params itself)
    cache = args[0] if args else kwargs.get(cache_name)
    mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
    if cache is not None or kwargs.get("seq_idx") is not None or kwargs.get("cu_seqlens") is not None:
        return False, None
    if not _fusable(self, reads) or hasattr(self.config, "_is_quantized") or not _mixer_takes(self):
        return False, None  # (reads: the projections the stand-in reads the weights of, not calls)
    if getattr(self, "_hf_hook", None) is not None or any(
            getattr(getattr(self, c, None), "_hf_hook", None) is not None for c in _TF_HYBRID_ACCELERATE_CHILDREN):
        return False, None
    return True, mask


_HY_NORMS = ("dt_layernorm", "b_layernorm", "c_layernorm")  # Jamba's / FalconMamba's mixer norms, the block computes them


def _hy_jamba_forward(original, apply_mask, cache_name):
    """transformers 5.x JambaMambaMixer.forward: without a cache, selscan's fused block with
    Jamba's three RMS norms (dt_layernorm on x_proj's dt_rank slice before dt_proj, b_layernorm,
    c_layernorm, one eps: config.rms_norm_eps), computed as transformers' forward computes them and
    differentiated exactly (the norm weights get their gradients). Otherwise transformers' forward
    (on the rebound kernels)."""
    norm_cls = getattr(sys.modules.get(original.__module__), "JambaRMSNorm", None)  # what the block computes

    def forward(self, hidden_states, *args, **kwargs):
        ok, mask = _hy_fused_args(self, args, kwargs, cache_name)
        ok = ok and _plain_norms(self, _HY_NORMS, norm_cls)
        norms = [getattr(self, n, None) for n in _HY_NORMS]
        if ok:  # the three norms with one eps (the block takes one), and dt_proj's bias for the scan
            eps = {getattr(n, "variance_epsilon", None) for n in norms}
            ok = len(eps) == 1 and None not in eps and all(getattr(n, "weight", None) is not None for n in norms) \
                and self.dt_proj.bias is not None
        if not ok:
            return original(self, hidden_states, *args, **kwargs)
        dt_norm, b_norm, c_norm = norms
        hidden_states = apply_mask(hidden_states, mask)
        xz = _block.in_proj_cm(hidden_states, self.in_proj.weight, self.in_proj.bias)
        A = -torch.exp(self.A_log.float())
        return _block.mamba_inner_fn(xz, self.conv1d.weight, self.conv1d.bias if self.use_conv_bias else None,
                                     self.x_proj.weight, self.dt_proj.weight, self.out_proj.weight,
                                     self.out_proj.bias if self.use_bias else None, A, None, None, self.D.float(),
                                     delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
                                     b_rms_weight=b_norm.weight, c_rms_weight=c_norm.weight,
                                     dt_rms_weight=dt_norm.weight, b_c_dt_rms_eps=dt_norm.variance_epsilon,
                                     dt_rms_pre_proj=True,
                                     mask=_mixer_padding(self, mask))

    forward.__wrapped__ = original
    return forward


def _hy_falcon_forward(original, apply_mask, cache_name):
    """transformers 5.25's FalconMambaMixer.forward (no fused branch of its own): without a cache,
    selscan's fused block with FalconMamba's three weightless RMS norms (one eps, rms_eps) where its
    forward puts them: on x_proj's dt_rank slice before dt_proj, on B, on C. The norms' weights are
    ones (its norm modules hold unused ones buffers; dt's is dt_rank long, not the buffer's length).
    Otherwise transformers' forward (on the rebound kernels)."""
    norm_cls = getattr(sys.modules.get(original.__module__), "FalconMambaWeightlessRMSNorm", None)  # the block's

    def forward(self, hidden_states, *args, **kwargs):
        ok, mask = _hy_fused_args(self, args, kwargs, cache_name)
        eps = getattr(self, "rms_eps", None)
        if not ok or eps is None or self.dt_proj.bias is None or not _plain_norms(self, _HY_NORMS, norm_cls) or any(
                getattr(getattr(self, n, None), "variance_epsilon", None) != eps for n in _HY_NORMS):
            return original(self, hidden_states, *args, **kwargs)
        hidden_states = apply_mask(hidden_states, mask)
        xz = _block.in_proj_cm(hidden_states, self.in_proj.weight, self.in_proj.bias)
        A = -torch.exp(self.A_log.float())
        dt_w, b_w = _falcon_ones(xz.device, self.time_step_rank), _falcon_ones(xz.device, self.ssm_state_size, "B")
        c_w = _falcon_ones(xz.device, self.ssm_state_size, "C")
        return _block.mamba_inner_fn(xz, self.conv1d.weight, self.conv1d.bias if self.use_conv_bias else None,
                                     self.x_proj.weight, self.dt_proj.weight, self.out_proj.weight,
                                     self.out_proj.bias if self.use_bias else None, A, None, None, self.D.float(),
                                     delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
                                     b_rms_weight=b_w, c_rms_weight=c_w, dt_rms_weight=dt_w, b_c_dt_rms_eps=eps,
                                     dt_rms_pre_proj=True, mask=_mixer_padding(self, mask))

    forward.__wrapped__ = original
    return forward


def _hy_zamba_forward(original, apply_mask, cache_name):
    """transformers 5.x ZambaMambaMixer.forward: without a cache, transformers' own computation with
    its n_mamba_heads scans made one: a head's B / C (from its own x_proj) are a group of selscan's
    scan (B / C (batch, heads, N, L); A / D / dt bias per channel), so one conv, the heads' x_proj /
    dt_proj as batched matmuls (as transformers does them) and one grouped scan replace its per-head
    loop. (Before: selscan's fused block once a head, 2 x the conv / projections' launches: 0.82x
    mamba_ssm's path at 4 x 256 on the H200, bench/RESULTS.md.) Otherwise transformers' forward (on
    the rebound kernels)."""
    def forward(self, hidden_states, *args, **kwargs):
        ok, mask = _hy_fused_args(self, args, kwargs, cache_name, reads=())  # in_proj / out_proj called
        if not ok or getattr(self, "n_mamba_heads", None) is None:
            return original(self, hidden_states, *args, **kwargs)
        batch, L, _ = hidden_states.shape
        H, hd = self.n_mamba_heads, self.mamba_head_dim
        dtype = hidden_states.dtype
        proj = self.in_proj(apply_mask(hidden_states, mask)).transpose(1, 2)
        x, gate = proj.view(batch, -1, 2, L).unbind(2)  # in_proj interleaves x and z channel by channel
        x = _conv.causal_conv1d_fn(x.contiguous(), self.conv1d.weight.squeeze(1), self.conv1d.bias,
                                   activation=self.activation)
        x = apply_mask(x.transpose(1, 2), mask).transpose(1, 2)  # (batch, heads x hd, L)
        ssm = (self.x_proj_weight[:, None] @ x.view(batch, H, hd, L).transpose(0, 1)).transpose(-1, -2)
        dt, B, C = torch.split(ssm, [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1)
        dt = (self.dt_proj_weight[:, None] @ dt.transpose(-1, -2)).transpose(0, 1).reshape(batch, H * hd, L)
        bias = None if self.dt_proj_bias is None else self.dt_proj_bias.float().reshape(H * hd)
        y = _hy_scan_op(x, dt, -torch.exp(self.A_log.float()).reshape(H * hd, -1), B.permute(1, 0, 3, 2),
                        C.permute(1, 0, 3, 2), self.D.float().reshape(H * hd), gate, bias, True, False)
        return self.out_proj(y.transpose(1, 2).to(dtype))

    forward.__wrapped__ = original
    return forward


# the mixers whose forward without a cache selscan stands in for (FalconMamba's: transformers 5.25 and later)
_HY_FORWARDS = {"JambaMambaMixer": _hy_jamba_forward, "ZambaMambaMixer": _hy_zamba_forward,
                "FalconMambaMixer": _hy_falcon_forward}


def _tf5_modules(modnames, kernels, also=lambda g, modname: True):
    """(name, module) of the transformers 5.x modules among modnames that import and hold every one of
    the kernel names (module-level wrappers their mixers look up at call time) and pass also(globals,
    name); another (transformers 4.x's, an older module) is logged and left as it is."""
    for modname in modnames:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        g = mod.__dict__
        if not (all(callable(g.get(n)) for n in kernels) and also(g, modname)):
            logger.info("selscan_torch: %s has none of the 5.x kernel names (%s): left as it is", modname,
                        ", ".join(kernels))
            continue
        yield modname, mod


def _install_transformers_hybrids(h):
    """Jamba's and Zamba's mixers (transformers 5.x) on selscan: the four kernel names of their
    modules, and the mixers' forward (the fused block without a cache). A module without these hook
    points (transformers 4.x: is_fast_path_available / cuda_kernels_forward) is left as it is and
    logged. Returns the number of modules covered."""
    covered = 0
    mixers = dict(_TF_HYBRID_MODULES)
    for modname, mod in _tf5_modules(mixers, _TF_HYBRID_KERNELS, lambda g, m: g.get(mixers[m]) is not None):
        g = mod.__dict__
        mixer_name = mixers[modname]
        mixer = g[mixer_name]
        _set_tf5_kernels(h, mod, modname, _hy_selective_scan, _hy_selective_state_update)
        cache_name = _tf_cache_name(mixer)
        mask = g.get("apply_mask_to_padding_states")
        if cache_name is not None and mask is not None:
            h._setattr(mixer, "forward", _HY_FORWARDS[mixer_name](mixer.__dict__["forward"], mask, cache_name),
                       f"{modname}.{mixer_name}.forward")
        covered += 1
    return covered


# ---- transformers: the Mamba-2 families (issue 40) ------------------------------------------------
# transformers 5.x's Mamba2, Bamba, FalconH1, GraniteMoeHybrid, NemotronH and Zamba2 mixers call five
# kernels by their module-level names, looked up at call time (each decorated with
# use_kernel_func_from_hub_with_fallback: mamba_ssm / causal_conv1d where they import, else a PyTorch
# body): mamba2_chunk_scan, mamba2_split_conv1d_scan_combined (tried in training without a cache; its
# PyTorch body answers None, and the mixer then runs its unfused path), mamba2_selective_state_update,
# causal_conv1d_fn, causal_conv1d_update. selscan rebinds the five: the SSD scan on selscan's (on
# CUDA mamba_ssm's Triton kernels where mamba_ssm is installed: faster than selscan's CUDA SSD kernels,
# bench/RESULTS.md issue 40), the fused call None on the CPU (the unfused path on
# selscan's conv and scan; CUDA: the module's own), the decode step and the conv on selscan's on both
# devices. The mixers' forward is transformers' own (the padding mask where it applies it).

from .ssd import mamba_chunk_scan_combined as _m2_scan_op  # noqa: E402

_TF_MAMBA2_MODULES = ("transformers.models.mamba2.modeling_mamba2", "transformers.models.bamba.modeling_bamba",
                      "transformers.models.falcon_h1.modeling_falcon_h1",
                      "transformers.models.granitemoehybrid.modeling_granitemoehybrid",
                      "transformers.models.nemotron_h.modeling_nemotron_h",
                      "transformers.models.zamba2.modeling_zamba2")
_TF_MAMBA2_KERNELS = ("mamba2_chunk_scan", "mamba2_split_conv1d_scan_combined", "mamba2_selective_state_update",
                      "causal_conv1d_fn", "causal_conv1d_update")


def _m2_own_initial_states(initial_states, others):
    """initial_states as the scan may keep it for its backward: a copy where autograd records the call. A
    mixer's forward on a cache (training on a cache from an earlier forward, e.g. truncated backprop through
    time) hands the scan the cache's state, then writes the new state into that same tensor
    (cache.update_recurrent_state's copy_): selscan's scan (and mamba_ssm's) keeps its initial_states for
    the backward, which then refused the overwritten tensor (transformers' PyTorch scan keeps none)."""
    if isinstance(initial_states, torch.Tensor) and _checks.requires_grad(
            [t for t in (initial_states, *others) if isinstance(t, torch.Tensor)]):
        return initial_states.clone()
    return initial_states


def _m2_chunk_scan(original, own_on_cuda):
    """own_on_cuda: a CUDA call keeps the module's own scan (mamba_ssm's Triton SSD kernels, installed);
    else selscan's (on CUDA the drop-in's: the SSD kernels)."""
    def mamba2_chunk_scan_(x, dt, A, B, C, chunk_size=None, D=None, z=None, dt_bias=None, initial_states=None,
                           seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                           return_final_states=False, return_varlen_states=False, **kwargs):
        kw = dict(chunk_size=chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
                  cu_seqlens=cu_seqlens, dt_softplus=dt_softplus, dt_limit=dt_limit,
                  return_final_states=return_final_states, return_varlen_states=return_varlen_states)
        if x.dtype not in _KERNEL_DTYPES:  # (a float64 model) transformers' own PyTorch body, which drops
            for name, v in (("seq_idx", seq_idx), ("cu_seqlens", cu_seqlens)):  # packing (its wrapper refuses it)
                if v is not None:
                    raise ValueError(f"selscan_torch.use_in_transformers: a {x.dtype} scan runs transformers' own "
                                     f"PyTorch body, which can't keep packed sequences apart (argument '{name}')")
            return _tf_own(original)(x, dt, A, B, C, **kw, **kwargs)
        kw["initial_states"] = _m2_own_initial_states(initial_states, (x, dt, A, B, C, D, z, dt_bias))
        if x.is_cuda and own_on_cuda:
            if seq_idx is None and cu_seqlens is not None:  # mamba_ssm's scan restarts on seq_idx only (it reads
                # cu_seqlens for the varlen states): selscan's conv restarts on cu_seqlens, so the scan must too
                kw["seq_idx"] = _ssd.seq_idx_of(cu_seqlens, x.shape[1], x.device)
            return original(x, dt, A, B, C, **kw, **kwargs)
        return _m2_scan_op(x, dt, A, B, C, **kw)  # (the model's other keywords are not the scan's)

    return mamba2_chunk_scan_


# Set while a Mamba-2 family mixer's forward (_m2_mixer_forward) runs a training step without a cache and
# without padding in attention_mask (transformers' fused branch does not mask the conv's output, its unfused
# path does): the mixer's gated norm as its unfused path applies it, (group size, norm before gate), or ()
# for none; its fused call may then be selscan's layer where the call's arguments say the same norm.
# Otherwise None.
_M2_FUSED = contextvars.ContextVar("selscan_m2_fused", default=None)
# the keywords selscan's layer takes (its signature's, after the six positional tensors; recompute is selscan's)
_M2_FUSED_KEYWORDS = tuple(inspect.signature(_ssd.mamba_split_conv1d_scan_combined).parameters)[6:-1]
# the model's keywords a mixer passes down into its fused call that say nothing about the layer (any other one,
# e.g. cu_seqlens or an attention kernel's packing keywords, keeps the unfused path, which reads them)
_M2_IGNORED_KEYWORDS = ("output_router_logits", "output_attentions", "output_hidden_states", "num_items_in_batch",
                        "return_dict", "use_cache")


def _calls(fn, name):
    """Whether the function under fn's decorators refers to the global `name` (a mixer's fused call)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code is not None and name in code.co_names


def _m2_gated_norm(mixer):
    """(group size, norm before gate) of the gated norm a Mamba-2 family mixer's unfused path applies, () for
    none (FalconH1 without mamba_rms_norm gates y only), None where unknown. Not always what its fused call
    says: transformers 5.17's Mamba2 normalizes over all channels (its fused call: ngroups groups), FalconH1
    normalizes before the gate by default (its fused call: norm_before_gate=False)."""
    norm = getattr(mixer, "norm", None)
    weight = getattr(norm, "weight", None)
    if norm is None or isinstance(norm, torch.nn.Identity):
        return ()
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return None
    dim = weight.shape[0]
    group = getattr(norm, "group_size", None)
    if group is None:
        group = dim // getattr(norm, "n_groups", 1)
    return int(group), bool(getattr(norm, "norm_before_gate", False))


def _m2_mixer_forward(original, cache_name):
    """A Mamba-2 family mixer's forward (hidden_states, cache, attention_mask, **kwargs) around transformers'
    own: says (_M2_FUSED) whether its fused call may run selscan's layer, and with which gated norm."""
    def forward(self, hidden_states, *args, **kwargs):
        if torch.compiler.is_compiling():  # ContextVar.set is not traced (torch.compile(fullgraph=True) refused the
            return original(self, hidden_states, *args, **kwargs)  # model): the unfused path, on selscan's kernels
        cache = args[0] if args else kwargs.get(cache_name)
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        norm = getattr(self, "norm", None)
        ok = self.training and cache is None and kwargs.get("cache_params") is None and \
            _mixer_padding(self, mask) is None and _plain_linear(self.out_proj) and (norm is None or (
                (isinstance(norm, torch.nn.Identity) or type(norm).__module__.startswith("transformers."))
                and _runs_its_own_forward(norm)))
        # (the layer reads out_proj's and the norm's weights: an adapter, a hook, a subclass or a forward of
        # another's there keeps the unfused path)
        token = _M2_FUSED.set(_m2_gated_norm(self) if ok else None)
        try:
            return original(self, hidden_states, *args, **kwargs)
        finally:
            _M2_FUSED.reset(token)

    forward.__wrapped__ = original
    return forward


def _m2_split_conv1d_scan(original, own_on_cuda):
    """The fused call of a Mamba-2 family mixer's training step: on CUDA with mamba_ssm's Triton SSD
    installed (own_on_cuda) the module's own; else selscan's layer (ssd.mamba_split_conv1d_scan_combined;
    on CUDA recomputed in the backward, as mamba_ssm's is) where the mixer's forward allows it (_M2_FUSED: no cache,
    no padding) and every argument is one it takes; otherwise None: the mixer's unfused path, on
    selscan's conv and scan."""
    def mamba2_split_conv1d_scan_combined_(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, *args, **kwargs):
        if zxbcdt.is_cuda and own_on_cuda:
            return original(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, *args, **kwargs)
        kw = {k: v for k, v in kwargs.items() if v is not None and k not in _M2_IGNORED_KEYWORDS}
        norm = _M2_FUSED.get()
        if norm is None or args or set(kw) - set(_M2_FUSED_KEYWORDS) or zxbcdt.dtype not in _KERNEL_DTYPES \
                or kw.get("activation", "silu") not in _ACTS or not _takes_conv(conv1d_weight):
            return None
        w = kw.get("rmsnorm_weight")  # the call's norm (mamba_ssm's: groups of dim / ngroups) must be the mixer's
        said = () if w is None else (w.shape[0] // kw.get("ngroups", 1), bool(kw.get("norm_before_gate", True)))
        if said != norm:
            return None
        kw.pop("chunk_size", None)
        # recomputed in the backward on CUDA (device memory, as mamba_ssm's); on the CPU kept (the recompute costs
        # time there: bench/NOTES.md SSD-torch-v2)
        return _ssd.mamba_split_conv1d_scan_combined(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D,
                                                     recompute=zxbcdt.is_cuda, **kw)

    return mamba2_split_conv1d_scan_combined_


def _mamba_ssm_ssd_imports():
    """Whether mamba_ssm and its Triton SSD import (what transformers' wrappers then resolve to): a mamba_ssm
    folder without its CUDA build (or a broken one) does not, and transformers falls back to its PyTorch
    body, slower than selscan's route. The package first, as transformers' wrappers import it: its failed
    import leaves the submodules it imported so far in sys.modules, on which importlib imports
    mamba_ssm.ops.triton.ssd_combined alone (its parents found there), a success the wrappers never saw
    (before: this said yes there, and use_in_transformers sent CUDA calls to transformers' PyTorch body).
    What a failed probe imported of mamba_ssm leaves sys.modules again."""
    if not _importable("mamba_ssm"):
        return False
    before = set(_modules_in("mamba_ssm"))
    try:
        importlib.import_module("mamba_ssm")
        importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
        return True
    except Exception:
        _drop_modules_since("mamba_ssm", before)
        return False


def _tf_wrapper(original):
    """transformers' wrapper function of a decorated kernel name (use_kernel_func_from_hub_with_fallback):
    the name itself (transformers without kernels), or read from kernels' Func module around it (its
    forward's closure); None where it cannot be read."""
    if inspect.isfunction(original):
        return original
    try:
        func = inspect.getclosurevars(type(original).forward).nonlocals["func"]
    except Exception:
        return None
    return func if inspect.isfunction(func) else None


def _tf_resolved_package(original):
    """Whether transformers' decorated kernel name (use_kernel_func_from_hub_with_fallback) resolved, when
    its module was imported, to the package's function (mamba_ssm's) rather than its own PyTorch body: its
    wrapper's is_new_implementation; None where it cannot be read."""
    try:
        return bool(inspect.getclosurevars(_tf_wrapper(original)).nonlocals["is_new_implementation"])
    except Exception:
        return None


def _install_transformers_mamba2(h):
    """The Mamba-2 families' five kernel names (transformers 5.x). Returns the modules covered."""
    covered = 0
    triton_ssd = _mamba_ssm_ssd_imports()
    for modname, mod in _tf5_modules(_TF_MAMBA2_MODULES, _TF_MAMBA2_KERNELS):
        g = mod.__dict__
        # CUDA calls keep the module's own scan / fused call where it is mamba_ssm's: where transformers'
        # wrapper says what it resolved to, that (a module imported before mamba_ssm could be), else the probe
        own = {n: _tf_resolved_package(g[n]) for n in ("mamba2_chunk_scan", "mamba2_split_conv1d_scan_combined")}
        own = {n: triton_ssd if v is None else v for n, v in own.items()}
        h._setattr(mod, "mamba2_chunk_scan", _m2_chunk_scan(g["mamba2_chunk_scan"], own["mamba2_chunk_scan"]),
                   f"{modname}.mamba2_chunk_scan")
        h._setattr(mod, "mamba2_split_conv1d_scan_combined",
                   _m2_split_conv1d_scan(g["mamba2_split_conv1d_scan_combined"],
                                         own["mamba2_split_conv1d_scan_combined"]),
                   f"{modname}.mamba2_split_conv1d_scan_combined")
        for m in [v for v in g.values() if isinstance(v, type) and v.__module__ == modname and "forward" in v.__dict__
                  and _calls(v.__dict__["forward"], "mamba2_split_conv1d_scan_combined")]:
            cache_name = _tf_cache_name(m)  # the mixers whose forward makes the fused call
            if cache_name is not None:
                h._setattr(m, "forward", _m2_mixer_forward(m.__dict__["forward"], cache_name),
                           f"{modname}.{m.__name__}.forward")
        h._setattr(mod, "mamba2_selective_state_update",
                   _tf_step(g["mamba2_selective_state_update"], _standin_selective_state_update),
                   f"{modname}.mamba2_selective_state_update")
        h._setattr(mod, "causal_conv1d_fn", _tf_conv_fn(g["causal_conv1d_fn"], packed=True),
                   f"{modname}.causal_conv1d_fn")
        h._setattr(mod, "causal_conv1d_update", _tf_conv_update(g["causal_conv1d_update"]),
                   f"{modname}.causal_conv1d_update")
        covered += 1
    return covered


# ---- mamba_ssm ----------------------------------------------------------------------------------


def _rms_norm_forward(x, weight, bias, eps=1e-6, is_rms_norm=True):
    xf = x.float()
    if is_rms_norm:
        y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    else:
        y = torch.nn.functional.layer_norm(xf, (xf.shape[-1],), eps=eps)
    y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def _interface_module():
    from . import reference as _ref
    from . import reference_block as _refb

    def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                           return_last_state=False):
        r = _ref.selective_scan_ref(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state,
                                    dtype=torch.float32)
        if return_last_state:
            return r[0].to(u.dtype), r[1]
        return r.to(u.dtype)

    def mamba_inner_ref(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                        out_proj_bias, A, B=None, C=None, D=None, delta_bias=None, B_proj_bias=None,
                        C_proj_bias=None, delta_softplus=True):
        return _refb.mamba_inner_ref(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
                                     out_proj_weight, out_proj_bias, A, B, C, D, delta_bias, B_proj_bias,
                                     C_proj_bias, delta_softplus, dtype=torch.float32).to(xz.dtype)

    return _standin("mamba_ssm.ops.selective_scan_interface", selective_scan_fn=_standin_selective_scan_fn,
                    mamba_inner_fn=_standin_mamba_inner_fn, selective_scan_ref=selective_scan_ref,
                    mamba_inner_ref=mamba_inner_ref, rms_norm_forward=_rms_norm_forward,
                    causal_conv1d_fn=_standin_causal_conv1d_fn)


def _install_causal_conv1d(h):
    """A causal_conv1d package on selscan where none can be imported."""
    if _importable("causal_conv1d"):
        return False
    h._own("causal_conv1d")
    iface = _standin("causal_conv1d.causal_conv1d_interface", causal_conv1d_fn=_standin_causal_conv1d_fn,
                     causal_conv1d_update=_standin_causal_conv1d_update)
    varlen = _standin("causal_conv1d.causal_conv1d_varlen",
                      causal_conv1d_varlen_states=_standin_causal_conv1d_varlen_states)
    pkg = _standin("causal_conv1d", package=True, __version__="selscan", causal_conv1d_fn=_standin_causal_conv1d_fn,
                   causal_conv1d_update=_standin_causal_conv1d_update, causal_conv1d_interface=iface,
                   causal_conv1d_varlen=varlen)
    h._sysmod("causal_conv1d", pkg)
    h._sysmod("causal_conv1d.causal_conv1d_interface", iface)
    h._sysmod("causal_conv1d.causal_conv1d_varlen", varlen)
    return True


def _install_mamba_ssm(h):
    h._own("mamba_ssm")
    h._own("mambavision")  # its import binds the interface's selective_scan_fn too
    iface = _interface_module()
    have_real = _importable("mamba_ssm")
    if not have_real:
        # packages on the path of the interface module, so `import mamba_ssm.ops....` resolves
        triton = _standin("mamba_ssm.ops.triton", package=True)
        ssu = _standin("mamba_ssm.ops.triton.selective_state_update",
                       selective_state_update=_standin_selective_state_update)
        ops = _standin("mamba_ssm.ops", package=True, selective_scan_interface=iface, triton=triton)
        triton.selective_state_update = ssu
        pkg = _standin("mamba_ssm", package=True, __version__="selscan", ops=ops,
                       selective_scan_fn=_standin_selective_scan_fn, mamba_inner_fn=_standin_mamba_inner_fn)
        for name, m in (("mamba_ssm", pkg), ("mamba_ssm.ops", ops), ("mamba_ssm.ops.triton", triton),
                        ("mamba_ssm.ops.selective_scan_interface", iface),
                        ("mamba_ssm.ops.triton.selective_state_update", ssu)):
            h._sysmod(name, m)
        _install_causal_conv1d(h)
        return
    h._sysmod("mamba_ssm.ops.selective_scan_interface", iface)
    _install_causal_conv1d(h)
    ssu_name = "mamba_ssm.ops.triton.selective_state_update"
    try:
        importlib.import_module(ssu_name)
    except Exception:  # no triton: selscan's step in its place
        h._sysmod(ssu_name, _standin(ssu_name, selective_state_update=_standin_selective_state_update))
    # the names bound at import by modules that are already loaded (a fresh import binds ours)
    names = dict(selective_scan_fn=_standin_selective_scan_fn, mamba_inner_fn=_standin_mamba_inner_fn,
                 causal_conv1d_fn=_standin_causal_conv1d_fn, causal_conv1d_update=_standin_causal_conv1d_update,
                 selective_state_update=_standin_selective_state_update)
    for modname, attrs in (("mamba_ssm", ("selective_scan_fn", "mamba_inner_fn")),
                           ("mamba_ssm.modules.mamba_simple", tuple(names))):
        mod = sys.modules.get(modname)
        if mod is None and modname == "mamba_ssm.modules.mamba_simple":
            mod = importlib.import_module(modname)  # import it now, on the stand-ins
        if mod is None:
            continue
        for a in attrs:
            if a in mod.__dict__ and mod.__dict__[a] is not names[a]:
                h._setattr(mod, a, names[a], f"{modname}.{a}")
    _install_mamba_ssm_mamba2(h)
    mixer = getattr(sys.modules.get("mamba_ssm.modules.mamba_simple"), "Mamba", None)
    if mixer is not None and "allocate_inference_cache" in mixer.__dict__:
        h._setattr(mixer, "allocate_inference_cache", _f32_ssm_cache(mixer.__dict__["allocate_inference_cache"]),
                   "mamba_ssm.modules.mamba_simple.Mamba.allocate_inference_cache")
    if mixer is not None and "step" in mixer.__dict__:
        h._setattr(mixer, "step", _mamba_step(mixer.__dict__["step"]), "mamba_ssm.modules.mamba_simple.Mamba.step")


def _cpu_or_own(own, ours):
    """ours for CPU tensors, own (mamba_ssm's Triton kernel) for the others: selscan's CUDA SSD kernels
    are slower than mamba_ssm's Triton SSD (bench/RESULTS.md, issue 40)."""
    def call(first, *args, **kwargs):
        return (ours if first.device.type == "cpu" else own)(first, *args, **kwargs)
    call.__wrapped__ = own
    return call


def _rms_norm_gated_forward(own):
    """mamba_ssm's RMSNormGated.forward (Triton) on the CPU: its group RMS norm and gate in float32."""
    from .ssd import _gated_rms_norm

    def forward(self, x, z=None):
        if x.device.type != "cpu" or getattr(self, "bias", None) is not None:
            return own(self, x, z)
        # (z None: the norm alone)
        return _gated_rms_norm(x, z, self.weight, self.eps, self.group_size or x.shape[-1], self.norm_before_gate)
    forward.__wrapped__ = own
    return forward


def _mamba_ssm_chunk_scan(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
                          cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False,
                          return_varlen_states=False):
    """mamba_chunk_scan_combined as mamba_ssm's computes it, for mamba_ssm's modules: cu_seqlens only for the
    varlen states (mamba_ssm drops it otherwise; the scan restarts on seq_idx alone), where selscan's drop-in
    also restarts there. Before, mamba_ssm's Mamba2 given cu_seqlens without seq_idx restarted its scan but not
    its conv on its unfused path, matching neither its fused path nor mamba_ssm (a hostile user's run)."""
    return _ssd.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias,
                                          initial_states=initial_states, seq_idx=seq_idx,
                                          cu_seqlens=cu_seqlens if return_varlen_states else None,
                                          dt_softplus=dt_softplus, dt_limit=dt_limit,
                                          return_final_states=return_final_states,
                                          return_varlen_states=return_varlen_states)


def _install_mamba_ssm_mamba2(h):
    """mamba_ssm's Mamba2 (modules.mamba2) on the CPU: its SSD functions (ssd_combined's and the names
    mamba2 bound at import), its gated RMS norm and its decode step on selscan's for CPU tensors; CUDA
    tensors keep mamba_ssm's Triton kernels. (Its conv: the causal_conv1d stand-in use_in_mamba_ssm
    installs where causal_conv1d is absent.)"""

    try:
        ssdc = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
        m2 = importlib.import_module("mamba_ssm.modules.mamba2")
        lng = importlib.import_module("mamba_ssm.ops.triton.layernorm_gated")
    except Exception as e:  # (no triton, an older mamba_ssm): Mamba2 is left as it is
        logger.info("selscan_torch: mamba_ssm's Mamba2 modules do not import (%s): left as they are", e)
        return
    ours = dict(mamba_chunk_scan_combined=_mamba_ssm_chunk_scan,
                mamba_split_conv1d_scan_combined=_ssd.mamba_split_conv1d_scan_combined)
    for mod, modname in ((ssdc, "mamba_ssm.ops.triton.ssd_combined"), (m2, "mamba_ssm.modules.mamba2")):
        for name, fn in ours.items():
            if callable(mod.__dict__.get(name)):
                h._setattr(mod, name, _cpu_or_own(mod.__dict__[name], fn), f"{modname}.{name}")
    for name, fn in (("selective_state_update", _standin_selective_state_update),
                     ("causal_conv1d_fn", _standin_causal_conv1d_fn),
                     ("causal_conv1d_update", _standin_causal_conv1d_update),
                     ("causal_conv1d_varlen_states", _standin_causal_conv1d_varlen_states)):
        own = m2.__dict__.get(name)
        if own is None:  # causal_conv1d absent: its names bound as None; selscan's on every device
            h._setattr(m2, name, fn, f"mamba_ssm.modules.mamba2.{name}")
        elif own is not fn:
            h._setattr(m2, name, _cpu_or_own(own, fn), f"mamba_ssm.modules.mamba2.{name}")
    norm = lng.__dict__.get("RMSNorm")
    if norm is not None and "forward" in norm.__dict__:
        h._setattr(norm, "forward", _rms_norm_gated_forward(norm.__dict__["forward"]),
                   "mamba_ssm.ops.triton.layernorm_gated.RMSNorm.forward")


_MAMBA_SSM_OPTS = {"float32_state": False}  # use_in_mamba_ssm's options, read at each call


def _f32_ssm_cache(orig):
    """mamba_ssm's Mamba.allocate_inference_cache with a float32 SSM state: the recurrence is not
    rounded to the model's dtype every token. (Written when selscan's step took a float32 state
    only: a state in the model's dtype, mamba_ssm's default, then went through a float32 copy and
    back every token, two more kernels a layer a token, measured 0.75-0.81x mamba_ssm's
    generate(cg=True). The step now updates a state in the model's dtype in place as well
    (SELSCAN_STEP_STATE_T), so this is a choice of accuracy over the state's size and traffic.)"""
    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        conv_state, ssm_state = orig(self, batch_size, max_seqlen, dtype=dtype, **kwargs)
        if _MAMBA_SSM_OPTS["float32_state"] and ssm_state.dtype != torch.float32:
            ssm_state = torch.zeros(ssm_state.shape, dtype=torch.float32, device=ssm_state.device)
        return conv_state, ssm_state
    allocate_inference_cache.__wrapped__ = orig
    return allocate_inference_cache


def _mamba_step(orig):
    """mamba_ssm's Mamba.step (one decode token a layer) on selscan's conv step and step, with
    A = -exp(A_log) computed inside the step kernel (A_is_log): mamba_ssm's step computes it every
    token, two elementwise kernels a layer a token (~1.3 us each in a CUDA graph at batch 1,
    bench/NOTES.md MODELS-v6). Otherwise mamba_ssm's computation: in_proj, the conv update, x_proj,
    dt_proj without its bias, the step (dt_proj's bias and softplus inside), out_proj. A mixer
    this does not cover (another activation) runs mamba_ssm's own step."""
    import torch.nn.functional as F

    def step(self, hidden_states, conv_state, ssm_state):
        if self.activation not in ("silu", "swish") or hidden_states.shape[1] != 1:
            return orig(self, hidden_states, conv_state, ssm_state)
        xz = self.in_proj(hidden_states.squeeze(1))  # (batch, 2 d_inner)
        x, z = xz.chunk(2, dim=-1)
        x = _standin_causal_conv1d_update(x, conv_state, self.conv1d.weight.squeeze(1), self.conv1d.bias,
                                          self.activation)
        dt, B, C = torch.split(self.x_proj(x), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.linear(dt, self.dt_proj.weight)
        y = _standin_selective_state_update(ssm_state, x, dt, self.A_log, B, C, self.D, z=z,
                                            dt_bias=self.dt_proj.bias, dt_softplus=True, A_is_log=True)
        return self.out_proj(y).unsqueeze(1), conv_state, ssm_state
    step.__wrapped__ = orig
    return step


def use_in_mamba_ssm(enable=True, *, float32_state=False):
    """Make mamba_ssm's Mamba / MambaLMHeadModel run on selscan: no selective_scan_cuda and no
    causal_conv1d needed (mamba_ssm's Python files installed, e.g. with MAMBA_SKIP_CUDA_BUILD=TRUE
    MAMBA_FORCE_BUILD=TRUE pip install --no-deps --no-build-isolation mamba-ssm). Call before or
    after importing mamba_ssm. Returns an Integration handle.

    float32_state: False (default) keeps mamba_ssm's SSM state, in the model's dtype, as mamba_ssm
    does; True makes Mamba.allocate_inference_cache (generate's cache) give a float32 one (the
    recurrence is not rounded to the model's dtype every token, at twice the state's memory and
    traffic: generate(cg=True) 0.94x against 0.98x mamba_ssm's at 130m batch 64, bench/NOTES.md
    MODELS-v5). selscan's step updates either in place. A later call with enable=True changes the
    setting; use_in_mamba_ssm(False) restores mamba_ssm and the default."""
    _MAMBA_SSM_OPTS["float32_state"] = bool(float32_state) if enable else False  # off: the default again
    return _toggle("mamba_ssm", enable, _install_mamba_ssm)


# ---- mambavision -------------------------------------------------------------------------------


def _install_mambavision(h):
    h._own("mamba_ssm")
    h._own("mambavision")
    if _importable("mamba_ssm") or "mamba_ssm" in sys.modules:
        # the interface only (mamba_ssm's packages import as they are), nothing imported now; over
        # use_in_mamba_ssm's stand-in too, so that either can be restored first
        h._sysmod("mamba_ssm.ops.selective_scan_interface", _interface_module())
    else:
        iface = _interface_module()
        ops = _standin("mamba_ssm.ops", package=True, selective_scan_interface=iface)
        pkg = _standin("mamba_ssm", package=True, __version__="selscan", ops=ops,
                       selective_scan_fn=_standin_selective_scan_fn, mamba_inner_fn=_standin_mamba_inner_fn)
        for name, m in (("mamba_ssm", pkg), ("mamba_ssm.ops", ops), ("mamba_ssm.ops.selective_scan_interface", iface)):
            h._sysmod(name, m)
    mod = sys.modules.get("mambavision.models.mamba_vision")
    if mod is not None and mod.__dict__.get("selective_scan_fn") is not _standin_selective_scan_fn:
        h._setattr(mod, "selective_scan_fn", _standin_selective_scan_fn,
                   "mambavision.models.mamba_vision.selective_scan_fn")


def use_in_mambavision(enable=True):
    """Make NVlabs' mambavision importable and run without mamba_ssm (its one kernel,
    selective_scan_fn, on selscan). Call before `import mambavision` (or after: an imported
    mambavision is switched too). Returns an Integration handle."""
    return _toggle("mambavision", enable, _install_mambavision)
