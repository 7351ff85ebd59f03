"""transformers' Mamba-1 models on selscan through `kernels` (the recipe of bindings/torch/README.md
"Through Hugging Face kernels"), in a fresh process (not a test module itself; run by
test_hf_kernel.py):

    python _hf_kernel_worker.py REPO DEVICE KIND [KIND ...] [--lift-gate]

REPO: a repository written by `make hf-kernel` (bindings/torch/hf_kernel/generate.py); KIND:
mamba or falcon_mamba. For each model (a small random-init config in float32) it runs transformers'
own path (nothing kernelized), the same model in float64 (the rounding yardstick), then the recipe:
`use_kernel_mapping` onto LocalLayerRepository(REPO, name) and `kernels.kernelize`, in
Mode.TRAINING (a training step: loss and every parameter's gradient), Mode.TRAINING with the
mapping less mamba_inner_fn (the training step on the non-fused path: selective_scan_fn and
causal_conv1d_fn), and Mode.INFERENCE (eval logits, greedy generate ids and per-step logits).
It records what each of transformers' five kernel entry points resolved to and how many of
selscan's ops ran. Prints one JSON line.

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

NAMES = ("selective_scan_fn", "selective_state_update", "mamba_inner_fn", "causal_conv1d_fn", "causal_conv1d_update")


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
    """||a - b|| / ||b|| in float64."""
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
    cfg_cls, model_cls = {
        "mamba": (transformers.MambaConfig, transformers.MambaForCausalLM),
        "falcon_mamba": (transformers.FalconMambaConfig, transformers.FalconMambaForCausalLM),
    }[kind]
    cfg = cfg_cls(hidden_size=64, num_hidden_layers=2, vocab_size=100, state_size=16)
    return model_cls(cfg).to(device=device, dtype=dtype)


def train_step(model, ids):
    model.zero_grad(set_to_none=True)
    model.train()
    out = model(ids, labels=ids)
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


def hooks(model):
    """transformers' kernel entry points as kernelize finds them: {layer name: the nn.Module
    use_kernel_func_from_hub_with_fallback made}, from the first mixer's _kernel_funcs."""
    mixer = next(m for m in model.modules() if getattr(m, "_kernel_funcs", None))
    return {fn.kernel_layer_name: fn for fn in mixer._kernel_funcs.values()}


def resolution(model, repo):
    """{name: "selscan" (the forward is the layer of that name in the kernel loaded from repo),
    "transformers" (the hook's own forward) or a description}."""
    out = {}
    for name, fn in hooks(model).items():
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


def own_path(model):
    """Whether each hook's own forward is transformers' PyTorch function (not an installed
    mamba_ssm / causal_conv1d it found): read from the wrapper's closure."""
    out = {}
    for name, fn in hooks(model).items():
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
    model = make_model(kind, device, torch.float32)
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(1)).to(device)
    res["hooks"] = sorted(hooks(model))
    res["own_path"] = own_path(model)

    # transformers' own path, float32 and float64
    with OpCounter() as c:
        loss32, grads32 = train_step(model, ids)
        logits32, seq32, steps32 = infer(model, ids)
    res["ops_reference"] = c.counts
    m64 = copy.deepcopy(model).double()
    loss64, grads64 = train_step(m64, ids)
    logits64, _, _ = infer(m64, ids)
    del m64
    t1 = time.perf_counter()

    def compare(loss, grads):
        return {
            "loss": abs(loss.item() - loss32.item()) / abs(loss32.item()),
            "loss_ref": abs(loss32.item() - loss64.item()) / abs(loss64.item()),
            "grads": {n: [rel_l2(grads[n], grads32[n]), rel_l2(grads32[n], grads64[n]), rel_l2(grads[n], grads64[n])]
                      for n in grads32},
            "grad_names": [sorted(grads), sorted(grads32)],
        }

    def training(key, names, **mapping_kw):  # kernelized for training with the names' kernels, one step
        with use_kernel_mapping(mapping_for(names), **mapping_kw):
            kernelize(model, mode=Mode.TRAINING)
        res["resolved_" + key] = resolution(model, repo)
        with OpCounter() as c:
            loss, grads = train_step(model, ids)
        res["ops_" + key] = c.counts
        res[key] = compare(loss, grads)

    # the recipe: training (fused mamba_inner_fn), training on the non-fused path, inference
    training("training", NAMES)
    training("training_unfused", tuple(n for n in NAMES if n != "mamba_inner_fn"), inherit_mapping=False)

    with use_kernel_mapping(mapping_for(NAMES)):
        kernelize(model, mode=Mode.INFERENCE)
    res["resolved_inference"] = resolution(model, repo)
    with OpCounter() as c:
        logits, seq, steps = infer(model, ids)
    res["ops_inference"] = c.counts
    res["eval_logits"] = [rel_l2(logits, logits32), rel_l2(logits32, logits64)]
    res["ids_equal"] = bool(torch.equal(seq, seq32))
    res["ids"] = seq.tolist()
    res["step_logits"] = rel_l2(steps, steps32)

    # back to transformers' own functions: a mapping without these names
    with use_kernel_mapping({}, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE)
    res["resolved_after_reset"] = resolution(model, repo)
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

        def mapping_for(names):
            return {n: {d: LocalLayerRepository(repo_path=repo, layer_name=n) for d in ("cpu", "cuda")}
                    for n in names}

        for kind in kinds:
            out["models"].append(run_kind(kind, device, repo, mapping_for))
        loaded = [m for n, m in sys.modules.items() if n.startswith("_selscan_mamba_") and n.count(".") == 0]
        out["kernel_modules"] = sorted(str(Path(m.__file__).parent.relative_to(repo)) for m in loaded)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
