"""transformers' Mamba-1 models on selscan through `kernels` (the recipe of bindings/torch/README.md
"Through Hugging Face kernels"), in a fresh process (not a test module itself; run by
test_hf_kernel.py):

    python _hf_kernel_worker.py REPO DEVICE KIND [KIND ...] [--lift-gate]

REPO: a repository written by `make hf-kernel` (bindings/torch/hf_kernel/generate.py); KIND:
mamba or falcon_mamba (Mamba-1), or a Mamba-2 family of _families.py (Mamba2, Bamba, FalconH1,
GraniteMoeHybrid, NemotronH, Zamba2). For each model (a small random-init config in float32) it
runs transformers' own path (nothing kernelized), the same model in float64 (the rounding
yardstick), then the recipe: `use_kernel_mapping` onto LocalLayerRepository(REPO, name) and
`kernels.kernelize`, in Mode.TRAINING (a training step: loss and every parameter's gradient, also
with a left-padded attention_mask), Mode.TRAINING with the mapping less the fused
call (mamba_inner_fn / mamba_split_conv1d_scan_combined: the training step on the non-fused path),
and Mode.INFERENCE (eval logits, greedy generate ids and per-step logits). It records what each of
transformers' five kernel entry points resolved to and how many of selscan's ops ran. Prints one
JSON line.

--lift-gate: transformers 5.24 turns its hub-kernel decorators into no-ops unless the installed
`kernels` satisfies its version range (transformers/utils/import_utils.py KERNELS_MIN_VERSION
0.18.2 <= version < KERNELS_MAX_VERSION 0.19.0). Where the installed kernels is outside it, the flag
widens the lower bound to the installed version for this process (before any transformers module
that reads it is imported) and the output says so ("gate": "lifted"); where the range is met
nothing is changed ("gate": "met"). mamba_ssm and causal_conv1d are made unimportable first, so that
transformers' own path is its PyTorch functions wherever the test runs.
"""
import copy
import importlib.metadata
import inspect
import json
import math
import os
import sys
import time
from pathlib import Path

NAMES_M1 = ("selective_scan_fn", "selective_state_update", "mamba_inner_fn", "causal_conv1d_fn",
            "causal_conv1d_update")
NAMES_M2 = ("mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined", "selective_state_update",
            "causal_conv1d_fn", "causal_conv1d_update")
FUSED = ("mamba_inner_fn", "mamba_split_conv1d_scan_combined")  # the training calls that short-circuit the mixer


def names_of(kind):
    return NAMES_M1 if kind in ("mamba", "falcon_mamba") else NAMES_M2


def lift_gate():
    """transformers' version gate on `kernels` (see the module docstring): "met", "lifted" or
    "closed" (lifting not asked for)."""
    import transformers.utils.import_utils as iu

    if iu.is_kernels_available():
        return "met"
    if "--lift-gate" not in sys.argv:
        return "closed"
    if "transformers.integrations.hub_kernels" in sys.modules:
        raise RuntimeError("transformers' hub_kernels was imported before the gate could be lifted")
    installed = importlib.metadata.version("kernels")
    orig = iu.is_kernels_available

    def is_kernels_available(MIN_VERSION=installed, MAX_VERSION=iu.KERNELS_MAX_VERSION):
        return orig(MIN_VERSION=MIN_VERSION, MAX_VERSION=MAX_VERSION)

    iu.is_kernels_available = is_kernels_available
    if not iu.is_kernels_available():
        raise RuntimeError(f"kernels {installed} is not importable as transformers wants it")
    return "lifted"


def rel_l2(a, b):
    """||a - b|| / ||b|| in float64; inf where a is missing (a gradient that did not flow)."""
    if a is None:
        return math.inf
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    assert a.shape == b.shape, (a.shape, b.shape)
    den = b.norm().item()
    return (a - b).norm().item() / den if den > 0 else (0.0 if a.norm().item() == 0 else math.inf)


class OpCounter:
    """Counts the selscan:: ops dispatched while active (a TorchDispatchMode: sees the ops below
    autograd, the backward's included)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counts = self.counts = {}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._schema.name
                if name.startswith("selscan::"):
                    counts[name] = counts.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def make_model(kind, device, dtype):
    import torch
    import transformers

    torch.manual_seed(0)
    if kind in ("mamba", "falcon_mamba"):
        cfg_cls, model_cls = {
            "mamba": (transformers.MambaConfig, transformers.MambaForCausalLM),
            "falcon_mamba": (transformers.FalconMambaConfig, transformers.FalconMambaForCausalLM),
        }[kind]
        cfg = cfg_cls(hidden_size=64, num_hidden_layers=2, vocab_size=100, state_size=16)
        kw = {}
    else:
        from _families import COMMON, FAMILIES

        cfg_name, model_name, kw = FAMILIES[kind]
        cfg = getattr(transformers, cfg_name)(**COMMON, **kw)
        model_cls = getattr(transformers, model_name)
    model = model_cls(cfg)
    if "num_local_experts" in kw or "n_routed_experts" in kw:  # eager experts: grouped_mm takes no float64
        model.set_experts_implementation("eager")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # the conv biases off their initial zeros: a padded position's conv output then
        for n, p in model.named_parameters():  # differs from 0, so an unmasked one shows in the padded step
            if n.endswith("conv1d.bias"):
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.to(device=device, dtype=dtype)


def train_step(model, ids, mask=None):
    """One training step (no cache: the mixers take their fused call first): loss and gradients."""
    model.zero_grad(set_to_none=True)
    model.train()
    out = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach(), grads


def infer(model, ids, gen_tokens=8):
    import torch

    model.eval()
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits
        g = model.generate(ids[:, :6], attention_mask=torch.ones_like(ids[:, :6]), max_new_tokens=gen_tokens,
                           do_sample=False, use_cache=True, return_dict_in_generate=True, output_logits=True,
                           pad_token_id=0)
    return logits, g.sequences, torch.stack(g.logits)


def packed(model, device):
    """{form: rel_l2 of the base model's hidden states on four packed sequences against each run
    alone}, the packing given by cu_seqlens, seq_idx or both (mamba_ssm's keywords, which the model
    hands its kernels)."""
    import torch

    g = torch.Generator().manual_seed(3)
    lens = (5, 9, 1, 7)
    seqs = [torch.randint(0, 100, (1, n), generator=g).to(device) for n in lens]
    cu = torch.tensor([0, 5, 14, 15, 22])
    idx = torch.cat([torch.full((1, n), i, dtype=torch.int32) for i, n in enumerate(lens)], 1).to(device)
    base = model.base_model
    out = {}
    with torch.no_grad():
        alone = torch.cat([base(input_ids=s, use_cache=False).last_hidden_state for s in seqs], 1)
        for form, kw in (("cu_seqlens", dict(cu_seqlens=cu)), ("seq_idx", dict(seq_idx=idx)),
                         ("both", dict(cu_seqlens=cu, seq_idx=idx))):
            out[form] = rel_l2(base(input_ids=torch.cat(seqs, 1), use_cache=False, **kw).last_hidden_state, alone)
    return out


def mixers(model, names):
    """The modules holding transformers' kernel entry points of these names (use_kernelized_func's
    _kernel_funcs): the Mamba mixers (a hybrid's attention layers may hold others)."""
    return [m for m in model.modules()
            if any(fn.kernel_layer_name in names for fn in (getattr(m, "_kernel_funcs", None) or {}).values())]


def hooks(model, names):
    """transformers' kernel entry points of these names as kernelize finds them: {layer name: the
    nn.Module use_kernel_func_from_hub_with_fallback made}, from the first mixer's _kernel_funcs."""
    return {fn.kernel_layer_name: fn for fn in mixers(model, names)[0]._kernel_funcs.values()
            if fn.kernel_layer_name in names}


def resolution(model, repo, names):
    """{name: "selscan" (the forward is the layer of that name in the kernel loaded from repo),
    "transformers" (the hook's own forward) or a description}."""
    out = {}
    for name, fn in hooks(model, names).items():
        f = getattr(fn.forward, "__func__", None)
        if f is type(fn).forward:
            out[name] = "transformers"
            continue
        mod = sys.modules.get(getattr(f, "__module__", ""), None)
        where = Path(getattr(mod, "__file__", "") or "")
        if f is not None and f.__qualname__ == f"{name}.forward" and repo in where.parents:
            out[name] = "selscan"
        else:
            out[name] = f"other: {getattr(f, '__qualname__', f)} from {where}"
    return out


def own_path(model, names):
    """Whether each hook's own forward is transformers' PyTorch function (not an installed
    mamba_ssm / causal_conv1d it found): read from the wrapper's closure."""
    out = {}
    for name, fn in hooks(model, names).items():
        try:
            wrapped = inspect.getclosurevars(type(fn).forward).nonlocals["func"]
            out[name] = not inspect.getclosurevars(wrapped).nonlocals["is_new_implementation"]
        except (KeyError, TypeError):
            out[name] = None
    return out


def run_kind(kind, device, repo, mapping_for):
    import torch
    from kernels import Mode, kernelize, use_kernel_mapping

    t0 = time.perf_counter()
    res = {"kind": kind}
    names = names_of(kind)
    model = make_model(kind, device, torch.float32)
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(1)).to(device)
    # a left-padded batch: transformers' PyTorch path masks the conv's output, which the fused call is not
    # handed (Mamba-2's layer answers None: the unfused path; Mamba-1's reads the mixer's attention_mask)
    masks = {"": None, "_padded": torch.ones_like(ids)}
    masks["_padded"][0, :5] = 0
    res["hooks"] = sorted(hooks(model, names))
    res["own_path"] = own_path(model, names)
    res["mamba_layers"] = len(mixers(model, names))

    # transformers' own path, float32 and float64
    with OpCounter() as c:
        ref32 = {k: train_step(model, ids, m) for k, m in masks.items()}
        logits32, seq32, steps32 = infer(model, ids)
    res["ops_reference"] = c.counts
    m64 = copy.deepcopy(model).double()
    ref64 = {k: train_step(m64, ids, m) for k, m in masks.items()}
    logits64, _, _ = infer(m64, ids)
    del m64
    t1 = time.perf_counter()

    def compare(loss, grads, k):
        (loss32, grads32), (loss64, grads64) = ref32[k], ref64[k]
        return {
            "loss": abs(loss.item() - loss32.item()) / abs(loss32.item()),
            "loss_ref": abs(loss32.item() - loss64.item()) / abs(loss64.item()),
            "grads": {n: [rel_l2(grads.get(n), grads32[n]), rel_l2(grads32[n], grads64[n]),
                          rel_l2(grads.get(n), grads64[n])]
                      for n in grads32},
            "grad_names": [sorted(grads), sorted(grads32)],
        }

    def training(key, mapped, **mapping_kw):  # kernelized for training with the mapped kernels, a step a mask
        with use_kernel_mapping(mapping_for(mapped), **mapping_kw):
            kernelize(model, mode=Mode.TRAINING)
        res["resolved_" + key] = resolution(model, repo, names)
        for k, m in masks.items():
            with OpCounter() as c:
                loss, grads = train_step(model, ids, m)
            res["ops_" + key + k] = c.counts
            res[key + k] = compare(loss, grads, k)

    # the recipe: training (the fused call first), training on the non-fused path, inference
    training("training", names)
    training("training_unfused", tuple(n for n in names if n not in FUSED), inherit_mapping=False)

    with use_kernel_mapping(mapping_for(names)):
        kernelize(model, mode=Mode.INFERENCE)
    res["resolved_inference"] = resolution(model, repo, names)
    with OpCounter() as c:
        logits, seq, steps = infer(model, ids)
    res["ops_inference"] = c.counts
    res["eval_logits"] = [rel_l2(logits, logits32), rel_l2(logits32, logits64)]
    res["ids_equal"] = bool(torch.equal(seq, seq32))
    res["ids"] = seq.tolist()
    res["step_logits"] = rel_l2(steps, steps32)
    if kind == "Mamba2":  # packed sequences (transformers' own path refuses them): each as if run alone
        res["packed"] = packed(model, device)

    # back to transformers' own functions: a mapping without these names
    with use_kernel_mapping({}, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE)
    res["resolved_after_reset"] = resolution(model, repo, names)
    res["seconds"] = {"reference": round(t1 - t0, 2), "kernelized": round(time.perf_counter() - t1, 2)}
    return res


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repo, device, kinds = Path(args[0]).resolve(), args[1], args[2:]
    t0 = time.perf_counter()
    # transformers' own path is its PyTorch functions: an installed mamba_ssm / causal_conv1d would
    # take their place (use_kernel_func_from_hub_with_fallback imports them when it can)
    for name in ("mamba_ssm", "causal_conv1d"):
        sys.modules.setdefault(name, None)
    gate = lift_gate()
    import kernels
    import torch
    import transformers
    from kernels import LocalLayerRepository

    torch.set_num_threads(1)
    # float32 on both paths: no TF32 in cuDNN's convolutions (transformers' conv1d; on by default)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"gate": gate, "kernels": kernels.__version__, "transformers": transformers.__version__,
           "torch": torch.__version__, "device": device, "models": []}
    if gate != "closed":

        def mapping_for(mapped):
            return {n: {d: LocalLayerRepository(repo_path=repo, layer_name=n) for d in ("cpu", "cuda")}
                    for n in mapped}

        for kind in kinds:
            out["models"].append(run_kind(kind, device, repo, mapping_for))
        loaded = [m for n, m in sys.modules.items() if n.startswith("_selscan_mamba_") and n.count(".") == 0]
        out["kernel_modules"] = sorted(str(Path(m.__file__).parent.relative_to(repo)) for m in loaded)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
