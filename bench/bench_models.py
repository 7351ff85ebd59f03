"""Models end to end, one process: selscan against mamba_ssm + causal_conv1d and transformers' PyTorch path.

Backends (--backends, compared in the same run on the same weights and inputs):
  selscan       transformers with selscan_torch.integrations.use_in_transformers() (the fused block,
                the conv and the step on selscan); MambaVision through use_in_mambavision(); mamba_ssm's
                MambaLMHeadModel through use_in_mamba_ssm()
  mamba_ssm     the kernels transformers resolved at import from mamba_ssm + causal_conv1d (its fused
                mamba_inner_fn in training); MambaVision / MambaLMHeadModel as shipped
  torch         transformers' own PyTorch functions (the five kernel names of modeling_mamba rebound
                to the functions under transformers' kernel wrappers): no fused block, a Python loop
                over L in the scan. Timed for training at a short L only (--torch-train-len)
  selscan-lvl0  (optional) selscan with mamba_inner_fn(checkpoint_lvl=0): the block keeps its conv
                output, delta and the scan's checkpoint (more memory, no recomputation)
  selscan-ssd   (Mamba-2 models) as selscan, and selscan's own SSD scan and fused layer in training where
                mamba_ssm is installed too (use_in_transformers() keeps mamba_ssm's Triton SSD then): what
                a user without mamba_ssm trains on
  selscan-ssd-unfused  (optional, Mamba-2) selscan-ssd with the fused call answering None: transformers'
                unfused mixer forward on selscan's conv and scan (what selscan-ssd was before its fused
                layer; autograd keeps the layer's intermediates)
  selscan-ssd-v2  (optional, Mamba-2) selscan-ssd with the fused layer as it was before SSD-torch-v3 (its
                recompute by torch's selective checkpoint, the gated norm as separate ops: bench/NOTES.md)
  selscan-scan  (optional) selscan's v0.2 drop-in: only the scan and the step rebound in transformers,
                its unfused path around them with PyTorch's conv (what a user got before the block)

Cases (--cases):
  check       correctness guard: one small batch through MambaForCausalLM (train mode, so the fused
              path), fp32 and bf16 autocast: the loss and every parameter's gradient of each backend
              against the reference (mamba_ssm if present, else torch); MISMATCH when the loss's
              relative difference from the reference's or any parameter kind's gradient error (pooled
              over the layers, against transformers' own path on a float64 copy) is over twice the
              reference's own plus a floor (CHECK_LOSS_TOL, CHECK_K, CHECK_FLOOR)
  train       training step of MambaForCausalLM, random init: bf16 autocast (--train-precision fp32: none), forward + backward of the
              LM loss, NO optimizer step (grads dropped before each step; --optimizer adamw adds
              a fused AdamW step); CUDA events, warm-up, backends interleaved round by round, median;
              peak memory = torch.cuda.max_memory_allocated over one step (reset per backend)
  prefill     eval forward that fills a fresh cache (use_cache=True, logits_to_keep=1), the model cast
              to each --gen-dtypes dtype, at the training shape
  gen         greedy model.generate (eager, DynamicCache, disable_compile): --prompt-len prompt,
              --new-tokens new tokens, batch --gen-batches; tokens/s = batch * new / seconds (prefill
              included); ids compared with mamba_ssm's
  graph       the same greedy decode with the model's decode step (forward with cache + argmax)
              captured once in a CUDA graph by hand and replayed per token (transformers 5.x offers
              CUDA graphs for Mamba only through generate's auto torch.compile "reduce-overhead" with a
              static cache: --hf-compile adds that row, minutes of compiling: off by default)
  mambavision NVlabs MambaVision-T training step, batch --mv-batch, 224x224, bf16 autocast, fwd + bwd
              of cross entropy (drop_path 0), plus its fp32 loss vs mamba_ssm's
  mamba-lm    mamba_ssm's MambaLMHeadModel (bf16) greedy generate(cg=True), its own kernels against
              use_in_mamba_ssm(), batch --gen-batches; then its captured decode step replayed alone
              (--ops-reps tokens, median of 5: no host work between tokens, the stabler figure)
  ops         (optional) a layer's two decode kernels alone at each model's shape in mamba_ssm's
              Mamba.step layout: conv update, step, and the pair (every combination of ours and the
              peers'), each captured once per layer in one CUDA graph; us a layer, beside a 1-element
              add (the graph's per-kernel floor)
  block       (optional) the fused block alone: mamba_inner_fn forward + backward at each model's layer
              shape (xz = in_proj(h).transpose(1, 2) under bf16 autocast, as transformers calls it),
              each backend's function; time and the memory the block adds (kept for the backward)
  profile     (optional) one training step of the first model per backend under torch.profiler:
              device time by kernel category (GEMM, scan, conv, copies, ...) and the top kernels, in
              the JSON's "profile" (where the step's time goes: what a faster block can still win);
              with a hybrid or Mamba-2 model of --models, that model's step too (each backend but torch;
              on the CPU the ops' own times), and for Mamba-2 the training goal as a budget: mamba_ssm's
              device time / 1.2 less what selscan's step spends outside the scan, conv and gated norm
              (the JSON's "training_budget")
  hybrid      (--models jamba-small,zamba-small) transformers' JambaForCausalLM / ZambaForCausalLM,
              random init: under "check" the fp32 / bf16-autocast loss and gradients (use_cache=False,
              the fused block on selscan) against mamba_ssm (else torch), under "train" the
              bf16-autocast training step (use_cache=False; torch at --torch-train-len beside the
              others), under "gen" greedy generate in the first --gen-dtypes dtype (ids compared
              with mamba_ssm's and torch's). mamba_ssm here is transformers' own unfused Jamba / Zamba
              forward on mamba_ssm + causal_conv1d (its mixers have no fused branch).
              --models mamba2-130m,mamba2-1.3b: Mamba2ForCausalLM at Mamba2-130m's / 1.3b's shapes
              (24 / 48 layers, headdim 64, dstate 128, chunk 256; batch 8 / 4 x 2048) the same way;
              mamba_ssm = its fused Triton training path and Triton decode step, selscan-ssd above
Models: 130m shape (hidden 768, 24 layers, state 16, expand 2, conv 4, vocab 50280), training batch
8 x 2048; 1.4b shape (hidden 2048, 48 layers), training batch 4 x 2048. jamba-small: hidden 1024, 8
layers (2 attention, MLPs, no experts), vocab 32000; zamba-small: hidden 1024, 13 Mamba layers (2
with the shared attention block), 2 Mamba heads, vocab 32000; both trained at 4 x 2048. Generation in bf16 and fp32
for 130m, bf16 for 1.4b (--gen-dtypes / --gen-dtypes-large); torch in generation for 130m only.

Peers: mamba_ssm 2.3.2.post1 (its Mamba-1 kernel selective_scan_cuda built from source) +
causal_conv1d 1.7.0 for sm_90 only, and mambavision 1.2.0, built on the GPU machine from their
sdists by a git-ignored script that is not part of this repository (.peer/build_peers.sh, with the
sdists beside it) into /tmp/peers. Any install works: the bench only needs them importable.

On the GPU machine (the git-ignored .peer/ folder in the checkout; $OUT: a results folder), one
command, ~8-9 minutes: selscan_torch and the peers built at the same time (~3-4 min on 16 cores,
estimated: the critical path is mamba_ssm's heaviest backward file, 78-105 s of one core for
sm_90 as measured on a 2.25 GHz EPYC), then the bench with what time is left (--deadline-s drops,
in this order, mamba-lm 1.4b, 1.4b inference, mamba-lm 130m, 130m inference: training first):

  export PYTHONUNBUFFERED=1 MAX_JOBS=16; (cd bindings/torch && python3 setup.py build_ext --inplace \
    >$OUT/selscan_build.log 2>&1; echo "selscan_torch build rc=$? at ${SECONDS}s") & \
  bash .peer/build_peers.sh >$OUT/build_peers.log 2>&1; echo "peers rc=$? at ${SECONDS}s"; wait; \
  grep -a "build_peers\\|usable\\|err" $OUT/build_peers.log; \
  PYTHONPATH=/tmp/peers:bindings/torch python3 bench/bench_models.py --deadline-s $((570-SECONDS)) \
    --out $OUT/bench_models.json --md $OUT/bench_models.md 2>&1 | tee $OUT/bench_models.log

The bench alone (peers and selscan_torch already built on a warm machine: the machine goes back
30 s after a call, so chain the calls at once): ~4-5 minutes on an H100/H200, all cases:
  PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/peers:bindings/torch python3 bench/bench_models.py \
    --out $OUT/bench_models.json --md $OUT/bench_models.md
  (--cases prefill,gen,graph,mamba-lm picks up what a first call's deadline dropped)
A GPU smoke test of every code path on tiny models (~1 min): add --quick --device cuda.
Here (CPU, no peers, ~20 s idle / ~1-2 min on a loaded VM; graphs emulated by eager steps):
  PYTHONPATH=bindings/torch python bench/bench_models.py --quick
Jamba / Zamba alone (GPU; here add --quick --device cpu, ~1-2 min on a loaded 2-core VM):
  PYTHONPATH=/tmp/peers:bindings/torch python3 bench/bench_models.py --models jamba-small,zamba-small \
    --cases check,train,gen --out $OUT/bench_hybrid.json --md $OUT/bench_hybrid.md
Exit status 1 when a correctness check says MISMATCH (loss or gradients) or finds selscan's
gradients bitwise mamba_ssm's (the backend not switched). Progress lines are flushed as they come; the
markdown table is printed last ("x mamba" = speed relative to mamba_ssm in the same run, > 1:
faster); the JSON (--out) is rewritten after every block, so a killed run still leaves its rows.
"""
import argparse
import contextlib
import copy
import gc
import inspect
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

T0 = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def elapsed():
    return time.perf_counter() - T0


# ------------------------------------------------------------------------------------------------
# >>config: model shapes and the run's settings
# ------------------------------------------------------------------------------------------------
MODELS = {  # name: (hidden, layers, vocab, train batch, train L)
    "130m": (768, 24, 50280, 8, 2048),
    "1.4b": (2048, 48, 50280, 4, 2048),
}
QUICK_MODELS = {"tiny": (64, 2, 512, 2, 64), "tiny4": (96, 4, 512, 2, 48)}  # quick runs "tiny" unless --models
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny configs, seconds on a CPU (tests the script)")
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--backends", default="selscan,mamba_ssm,torch",
                    help="comma list of selscan, mamba_ssm, torch, selscan-scan")
    ap.add_argument("--cases", default="check,train,mambavision,prefill,gen,graph,mamba-lm")
    ap.add_argument("--models", default=None,
                    help="comma list (default: 130m,1.4b; quick: tiny); jamba-small / zamba-small: the hybrid case")
    ap.add_argument("--gen-dtypes", default="bf16,fp32", help="model dtypes for prefill / generation")
    ap.add_argument("--gen-dtypes-large", default="bf16", help="the same for models with > 30 layers")
    ap.add_argument("--gen-batches", default=None, help="default 1,16,64 (quick: 1,3)")
    ap.add_argument("--prompt-len", type=int, default=None, help="default 128 (quick: 12)")
    ap.add_argument("--new-tokens", type=int, default=None, help="default 64 (quick: 6)")
    ap.add_argument("--gen-reps", type=int, default=5,
                    help="timed generate calls per backend and batch (batch 1 scatters +-10 %% with 2)")
    ap.add_argument("--train-iters", type=int, default=None, help="timed steps per backend (default 10, quick 2)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ops-reps", type=int, default=50, help="graph replays a timing in the ops case")
    ap.add_argument("--torch-train-len", type=int, default=256, help="L of the training case that times torch")
    ap.add_argument("--hybrid-train-lens", default=None,
                    help="comma list of the hybrid models' training lengths, each with --train-iters steps "
                         "(default: the config's 2048, and --torch-train-len with 3 steps where torch runs)")
    ap.add_argument("--torch-gen-max-layers", type=int, default=30,
                    help="torch backend in prefill / generation only for models with at most this many layers")
    ap.add_argument("--train-precision", choices=["bf16-autocast", "fp32"], default="bf16-autocast",
                    help="the training cases' precision (fp32: no autocast; where a peer cannot train under "
                         "autocast, e.g. mamba_ssm on Jamba)")
    ap.add_argument("--optimizer", choices=["none", "adamw"], default="none")
    ap.add_argument("--mv-batch", type=int, default=None, help="MambaVision batch (default 64, quick 1)")
    ap.add_argument("--hf-compile", action="store_true",
                    help="also time generate(cache_implementation='static'), transformers' auto torch.compile")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="wall seconds for the whole run; blocks that no longer fit are skipped (default 540, quick: none)")
    ap.add_argument("--out", default=None, help="JSON file (rewritten after every block)")
    ap.add_argument("--md", default=None, help="also write the markdown table to this file")
    a = ap.parse_args()
    q = a.quick
    a.device = torch.device(a.device or ("cuda" if torch.cuda.is_available() and not q else "cpu"))
    a.backends = [b for b in a.backends.split(",") if b]
    a.cases = set(c for c in a.cases.split(",") if c)
    a.models = (a.models.split(",") if a.models else (["tiny"] if q else list(MODELS)))
    a.gen_dtypes = [d for d in a.gen_dtypes.split(",") if d]
    a.gen_dtypes_large = [d for d in a.gen_dtypes_large.split(",") if d]
    a.gen_batches = [int(b) for b in (a.gen_batches or ("1,3" if q else "1,16,64")).split(",")]
    a.prompt_len = a.prompt_len or (12 if q else 128)
    a.new_tokens = a.new_tokens or (6 if q else 64)
    a.train_iters = a.train_iters or (2 if q else 10)
    if q:
        a.warmup = min(a.warmup, 1)
        a.torch_train_len = min(a.torch_train_len, 32)
        a.gen_reps = 1
    a.mv_batch = a.mv_batch or (1 if q else 64)
    a.deadline_s = a.deadline_s if a.deadline_s is not None else (0 if q else 540)
    return a


ARGS = None
RESULTS = {"rows": [], "checks": [], "skipped": [], "errors": [], "env": {}}


def remaining():
    return math.inf if not ARGS.deadline_s else ARGS.deadline_s - elapsed()


def fits(what, need_s):
    """True when `need_s` seconds (a rough estimate) still fit before the deadline; else a skip note."""
    if remaining() >= need_s:
        return True
    RESULTS["skipped"].append(f"{what}: deadline ({remaining():.0f} s left, ~{need_s:.0f} s needed)")
    log(f"SKIP {what}: {remaining():.0f} s left, ~{need_s:.0f} s needed")
    return False


def save():
    if ARGS.out:
        os.makedirs(os.path.dirname(os.path.abspath(ARGS.out)), exist_ok=True)
        with open(ARGS.out, "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)


def guarded(name):
    """Runs a block; an exception is printed and recorded, and the run goes on."""
    def deco(fn):
        def run(*a, **k):
            try:
                return fn(*a, **k)
            except Exception as e:  # noqa: BLE001 (a failed block must not lose the others)
                tb = traceback.format_exc()
                log(f"ERROR in {name}: {e!r}\n{tb}")
                RESULTS["errors"].append({"block": name, "error": repr(e), "traceback": tb[-3000:]})
            finally:
                gc.collect()
                if ARGS.device.type == "cuda":
                    torch.cuda.empty_cache()
                save()
        return run
    return deco


def backend_failed(block, backend, e):
    """One backend failed inside a block: recorded, printed; the block goes on without it."""
    tb = traceback.format_exc()
    log(f"  {block} {backend}: FAILED {e!r}\n{tb[-1500:]}")
    RESULTS["errors"].append({"block": f"{block} {backend}", "error": repr(e), "traceback": tb[-3000:]})


def row(case, backend, value, unit, **extra):
    r = {"case": case, "backend": backend, "value": value, "unit": unit}
    r.update(extra)
    RESULTS["rows"].append(r)
    more = " ".join(f"{k}={v}" for k, v in extra.items() if v is not None)
    log(f"  {case:<44} {backend:<13} {value:10.4g} {unit} {more}")


# ------------------------------------------------------------------------------------------------
# >>timing: CUDA events (wall clock on the CPU), synchronised around each measured call
# ------------------------------------------------------------------------------------------------
def sync():
    if ARGS.device.type == "cuda":
        torch.cuda.synchronize()


def time_call(fn):
    """Seconds of one call of fn(), the device idle before it and finished after it."""
    if ARGS.device.type == "cuda":
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        out = fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3, out
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def capture_graph(fn, warmups=2):
    """fn() warmed up on a side stream (allocations outside the graph), then captured in one CUDA
    graph: (graph, fn's outputs from the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def warm_up(model, step, n=None):
    """n (default --warmup) calls of step() (grads dropped before each), then the grads dropped again."""
    for _ in range(ARGS.warmup if n is None else n):
        model.zero_grad(set_to_none=True)
        step()
    model.zero_grad(set_to_none=True)


def peak_reset():
    if ARGS.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_gib():
    if ARGS.device.type == "cuda":
        torch.cuda.synchronize()
        return round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return None


# ------------------------------------------------------------------------------------------------
# >>backends: what transformers' modeling_mamba calls, switched by rebinding its module globals
# ------------------------------------------------------------------------------------------------
def beneath_module(f):
    """transformers >= 5.25 binds each kernel name to a module whose forward calls the hub-kernel wrapper (its
    closure's `func`): that wrapper; else f."""
    fwd = getattr(f, "forward", None)
    if fwd is not None and not inspect.isfunction(f):
        return inspect.getclosurevars(fwd).nonlocals.get("func", f)
    return f


def torch_body(f):
    """The PyTorch body under a transformers kernel name's wrappers."""
    return inspect.unwrap(beneath_module(f))


def fn_name(f):
    """module.qualname of what a transformers kernel name runs: the implementation its
    hub-kernel wrapper resolved at import (closure variable `implementation`), else f itself."""
    g = beneath_module(f)
    for _ in range(6):
        if g is None:
            break
        try:
            impl = inspect.getclosurevars(g).nonlocals.get("implementation")
        except (TypeError, ValueError):
            impl = None
        if impl is not None:
            f = impl
            break
        g = getattr(g, "__wrapped__", None)
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', type(f).__name__)}"


class Transformers:
    """transformers' Mamba module and the five kernel names its mixer calls (5.x: mamba_inner_fn,
    mamba_selective_scan, mamba_selective_state_update, causal_conv1d_fn, causal_conv1d_update,
    each resolved at import to mamba_ssm / causal_conv1d when installed, else its PyTorch body)."""

    NAMES = ["mamba_inner_fn", "mamba_selective_scan", "mamba_selective_state_update",
             "causal_conv1d_fn", "causal_conv1d_update"]

    def __init__(self):
        import transformers
        from transformers.models.mamba import modeling_mamba as mm
        self.version = transformers.__version__
        self.mm = mm
        self.names = [n for n in self.NAMES if hasattr(mm, n)]
        if len(self.names) != len(self.NAMES):
            raise RuntimeError(f"transformers {self.version}: modeling_mamba lacks "
                               f"{sorted(set(self.NAMES) - set(self.names))}; this bench targets 5.x")
        self.orig = {n: getattr(mm, n) for n in self.names}
        self.resolved = {n: fn_name(f) for n, f in self.orig.items()}
        self.torch_fns = {n: torch_body(f) for n, f in self.orig.items()}
        self.cache_kw = "cache" if "cache" in inspect.signature(mm.MambaForCausalLM.forward).parameters else "cache_params"
        mods = {n: r.split(".")[0] for n, r in self.resolved.items()}
        self.has_mamba = (all(mods[n] == "mamba_ssm" for n in self.names[:3])
                          and all(mods[n] == "causal_conv1d" for n in self.names[3:]))

    def current(self):
        return {n: fn_name(getattr(self.mm, n)) for n in self.names}

    def restore(self):
        for n, f in self.orig.items():
            setattr(self.mm, n, f)


def selscan_integrations():
    try:
        import selscan_torch.integrations as integ
        return integ
    except Exception as e:  # noqa: BLE001
        RESULTS["env"]["selscan_integrations_error"] = repr(e)
        return None


def scan_only_fns():
    """selscan_torch's v0.2 scan / step as transformers' mamba_selective_scan /
    mamba_selective_state_update (the step needs a float32 state: copied through where not)."""
    import selscan_torch as st

    def scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
             return_last_state=False, **_):
        return st.selective_scan_fn(hidden_states, dt, A, B, C, D, z, delta_bias, delta_softplus,
                                    return_last_state)

    def step(state, hidden_states, dt, A, B, C, D=None, dt_bias=None, dt_softplus=False, z=None, **_):
        if state.dtype == torch.float32:
            return st.selective_state_update(state, hidden_states, dt, A, B, C, D, z, dt_bias, dt_softplus)
        s = state.float()
        out = st.selective_state_update(s, hidden_states, dt, A, B, C, D, z, dt_bias, dt_softplus)
        state.copy_(s)
        return out
    return scan, step


class Backend:
    """A context that makes transformers' Mamba (and, where given, MambaVision / mamba_ssm's
    modules) run on one backend, and undoes it on exit."""

    def __init__(self, name, tf):
        self.name, self.tf = name, tf

    def available(self):
        """None when usable, else why not."""
        if self.name == "mamba_ssm":
            return None if self.tf.has_mamba else f"transformers resolved {self.tf.resolved}"
        if self.name in ("selscan", "selscan-lvl0"):
            integ = selscan_integrations()
            if integ is None or not hasattr(integ, "use_in_transformers"):
                return "selscan_torch.integrations.use_in_transformers missing"
            return None
        if self.name == "selscan-scan":
            try:
                import selscan_torch  # noqa: F401
                return None
            except Exception as e:  # noqa: BLE001
                return repr(e)
        if self.name == "torch":
            return None
        return "unknown backend"

    def __enter__(self):
        tf, mm = self.tf, self.tf.mm
        tf.restore()
        if self.name == "torch":
            for n, f in tf.torch_fns.items():
                setattr(mm, n, f)
        elif self.name == "selscan-scan":
            for n in ("mamba_inner_fn", "causal_conv1d_fn", "causal_conv1d_update"):
                setattr(mm, n, tf.torch_fns[n])
            mm.mamba_selective_scan, mm.mamba_selective_state_update = scan_only_fns()
        elif self.name in ("selscan", "selscan-lvl0"):
            selscan_integrations().use_in_transformers(True)
            if self.name == "selscan-lvl0":  # the fused block keeping its conv output, delta and scan checkpoint
                import functools
                import selscan_torch.block as blk
                mm.mamba_inner_fn = functools.partial(mm.mamba_inner_fn, checkpoint_lvl=0)
                # the mixer's training forward under use_in_transformers() calls the block directly
                self._blk, self._blk_fn = blk, blk.mamba_inner_fn
                blk.mamba_inner_fn = functools.partial(self._blk_fn, checkpoint_lvl=0)
        return self

    def __exit__(self, *exc):
        if getattr(self, "_blk", None) is not None:
            self._blk.mamba_inner_fn, self._blk = self._blk_fn, None
        if self.name in ("selscan", "selscan-lvl0"):
            selscan_integrations().use_in_transformers(False)
        self.tf.restore()
        return False


# ------------------------------------------------------------------------------------------------
# >>models: random-init MambaForCausalLM at the named shape, built on the device
# ------------------------------------------------------------------------------------------------
def mamba_config(tf, name):
    hidden, layers, vocab, _, _ = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    return tf.mm.MambaConfig(hidden_size=hidden, num_hidden_layers=layers, vocab_size=vocab, state_size=16,
                             expand=2, conv_kernel=4, use_bias=False, use_conv_bias=True,
                             residual_in_fp32=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def build_lm(tf, name, dtype=torch.float32):
    torch.manual_seed(0)
    cfg = mamba_config(tf, name)
    with torch.device(ARGS.device):
        model = tf.mm.MambaForCausalLM(cfg)
    model.to(device=ARGS.device, dtype=dtype)
    gc_ = model.generation_config
    gc_.eos_token_id, gc_.pad_token_id, gc_.bos_token_id = None, 0, None
    n = sum(p.numel() for p in model.parameters())
    log(f"built MambaForCausalLM {name}: {n / 1e6:.1f} M parameters, {dtype}")
    return model


def token_batch(vocab, batch, L, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (batch, L), generator=g).to(ARGS.device)


def autocast(enabled=True):
    return torch.autocast(device_type=ARGS.device.type, dtype=torch.bfloat16, enabled=enabled)


def backends_for(tf, names):
    out = []
    for n in names:
        b = Backend(n, tf)
        why = b.available()
        if why is None:
            out.append(b)
        else:
            note = f"backend {n}: unavailable ({why})"
            if note not in RESULTS["skipped"]:
                RESULTS["skipped"].append(note)
                log(f"SKIP {note}")
    return out


# ------------------------------------------------------------------------------------------------
# >>check: loss and gradients of each backend against the reference on one small batch
# ------------------------------------------------------------------------------------------------
def loss_and_grads(model, ids, amp, dtype=torch.float32, **kw):
    """The loss and every parameter's gradient (copies in dtype, by name; a parameter without one: zeros)."""
    model.zero_grad(set_to_none=True)
    with autocast(amp):
        loss = model(input_ids=ids, labels=ids, **kw).loss
    loss.backward()
    g = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().to(dtype).reshape(-1).clone()
         for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.item(), g


def float64_truth(model, ids, torch_backend, **kw):
    """The truth of the check: the loss and gradients of transformers' own PyTorch path (torch_backend) on a
    float64 copy of the model (float64 wherever that path keeps the model's dtype; a few of its .float()
    casts round to float32, ~1e-7, far below the tolerances)."""
    m = copy.deepcopy(model).double()
    try:
        with torch_backend:
            return loss_and_grads(m, ids, False, torch.float64, **kw)
    finally:
        del m
        gc.collect()


def rel_l2(d, r):
    """|g - ref| / |ref| from d = |g - ref| and r = |ref| (0 when both are 0)."""
    return 0.0 if d == 0 else d / max(r, 1e-30)


def grads_vs_ref(g, ref_g):
    """The whole model's gradient rel L2 against the reference and the worst parameter's (name, rel
    L2): a wrong dD, ddt_bias or dconv is too small to move the whole-model norm, per parameter it
    shows. Norms per parameter (no concatenated copy of a 1.4b model's gradients)."""
    d = {n: (g[n] - ref_g[n]).norm().item() for n in ref_g}
    r = {n: ref_g[n].norm().item() for n in ref_g}
    whole = rel_l2(math.sqrt(sum(x * x for x in d.values())), math.sqrt(sum(x * x for x in r.values())))
    worst = max(((n, rel_l2(d[n], r[n])) for n in ref_g), key=lambda t: t[1])
    return whole, worst


# The guard's tolerances:
# loss, a relative difference against the reference backend's: loose enough for bf16 rounding and the
#   ill-conditioned random init, tight enough to catch a wrong kernel (a wrong conv / gate / bias moves the
#   loss by far more).
CHECK_LOSS_TOL = {False: 2e-4, True: 2e-2}
# gradients, in both modes against the float64 truth (float64_truth: transformers' own path on a float64
#   copy), not against the reference backend, which rounds too (mamba_ssm's Triton SSD takes TF32 for
#   float32 inputs: its Mamba-2 gradients are ~4e-2 off in fp32): each parameter kind's rel L2 (pooled over
#   the layers: a per-head dt_bias / A_log / D has a few elements a layer, and its error alone is one draw
#   of cancelling sums, seen 0.06-6.4x between two correct backends over 100 seeds) at most CHECK_K times
#   the reference backend's own error on the same kind, plus a floor: fp32 1e-3 (the peers' kernels build
#   with --use_fast_math, expf ~1e-6 relative, amplified through 24-48 random-init layers: 6.6e-4 measured
#   at 130m against mamba_ssm, 2026-12-02), bf16 one unit (2^-8), for kinds the reference happens to get
#   almost exactly. Backends round at other points, and at random init that rounding is amplified to O(1)
#   on some parameters for every backend, so a fixed tolerance cannot tell rounding from a bug; twice the
#   reference's own error in the same dtype can (a wrong gradient formula is off by O(1): dD x 1.5 gives 0.5).
CHECK_K = 2.0
CHECK_FLOOR = {False: 1e-3, True: 2.0 ** -8}


def check_verdict(rel_loss, worst_excess, amp):
    """The guard: "OK" when the loss is within tolerance and no parameter kind's gradient error exceeds its
    bound (worst_excess: the worst of err - K * ref_err against the float64 truth)."""
    return "OK" if rel_loss <= CHECK_LOSS_TOL[amp] and worst_excess <= CHECK_FLOOR[amp] else "MISMATCH"


def per_kind_err(g, truth):
    """Each parameter kind's gradient rel L2 against the truth, pooled over the layers (the kind: the name
    with its layer indices as *)."""
    d, r = {}, {}
    for n in truth:
        k = re.sub(r"\.\d+\.", ".*.", n)
        d[k] = d.get(k, 0.0) + (g[n].double() - truth[n]).square().sum().item()
        r[k] = r.get(k, 0.0) + truth[n].square().sum().item()
    return {k: rel_l2(math.sqrt(d[k]), math.sqrt(r[k])) for k in d}


def guard_row(bn, l, g, ref_name, ref_loss, ref_g, truth, ref_err, amp):
    """One backend's row of the guard (the LM check and the hybrid check alike): its loss against the
    reference backend's; each parameter kind's gradient error against the float64 truth within CHECK_K x
    the reference backend's own (ref_err: per_kind_err(ref_g, truth), computed once a mode by the caller)
    + CHECK_FLOOR. Returns (rel_loss, rel L2 of all gradients vs the reference, worst kind, its bound,
    verdict)."""
    rel_loss = abs(l - ref_loss) / max(abs(ref_loss), 1e-12)
    rel_g, _ = grads_vs_ref(g, ref_g)
    err = per_kind_err(g, truth)
    worst_n, worst_x = max(((n, err[n] - CHECK_K * ref_err[n]) for n in err), key=lambda t: t[1])
    floor = "2^-8" if amp else f"{CHECK_FLOOR[amp]:.0e}"
    bound = f"err vs fp64 {err[worst_n]:.2e} <= {CHECK_K:g} x {ref_name}'s {ref_err[worst_n]:.2e} + {floor}"
    verdict = "ref" if bn == ref_name else check_verdict(rel_loss, worst_x, amp)
    return rel_loss, rel_g, worst_n, bound, verdict


@guarded("check")
def case_check(tf, name):
    bks = backends_for(tf, ARGS.backends)
    ref_name = "mamba_ssm" if any(b.name == "mamba_ssm" for b in bks) else "torch"
    if not any(b.name == ref_name for b in bks):
        bks = bks + backends_for(tf, [ref_name])
    model = build_lm(tf, name)
    model.train()
    cfg = model.config
    batch, L = (2, 32) if ARGS.quick else (2, 256)
    ids = token_batch(cfg.vocab_size, batch, L, seed=1)
    _, truth = float64_truth(model, ids, backends_for(tf, ["torch"])[0])  # what both modes are measured against
    for amp in (False, True):
        mode = "bf16-autocast" if amp else "fp32"
        res = {}
        for b in bks:
            with b:
                res[b.name] = loss_and_grads(model, ids, amp)
                res[b.name] = res[b.name] + (loss_and_grads(model, ids, amp)[1],)  # a second run: repeatable?
        ref_loss, ref_g, _ = res[ref_name]
        ref_err = per_kind_err(ref_g, truth)
        for bn, (l, g, g2) in res.items():
            rel_loss, rel_g, worst_n, bound, verdict = guard_row(bn, l, g, ref_name, ref_loss, ref_g, truth, ref_err,
                                                                 amp)
            rep = "bitwise" if all(torch.equal(g[n], g2[n]) for n in g) else f"{grads_vs_ref(g2, g)[0]:.1e}"
            if bn.startswith("selscan") and ref_name == "mamba_ssm" and all(torch.equal(g[n], ref_g[n]) for n in g):
                verdict = "IDENTICAL to mamba_ssm: backend not switched?"
            c = {"model": name, "mode": mode, "batch": batch, "L": L, "backend": bn, "reference": ref_name,
                 "loss": l, "rel_loss_vs_ref": rel_loss, "rel_l2_grads_vs_ref": rel_g,
                 "worst_param": worst_n, "worst_param_bound": bound,
                 "tol_loss": CHECK_LOSS_TOL[amp], "grads_run_to_run": rep, "verdict": verdict}
            RESULTS["checks"].append(c)
            log(f"  check {name} {mode:<13} {bn:<13} loss {l:.6f}  rel diff vs {ref_name} {rel_loss:.2e} "
                f"(tol {CHECK_LOSS_TOL[amp]:.0e})  grads rel L2 vs {ref_name} {rel_g:.2e}; worst parameter "
                f"{worst_n}: {bound}  run-to-run {rep}  {verdict}")
        del res
    del model


# ------------------------------------------------------------------------------------------------
# >>train: training step of MambaForCausalLM (bf16 autocast; --train-precision fp32 without)
# ------------------------------------------------------------------------------------------------
def train_timing(tf, name, model, bks, batch, L, iters, warmup, label, max_iters=None):
    ids = token_batch(model.config.vocab_size, batch, L, seed=2)
    params = [p for p in model.parameters()]
    opt = None
    if ARGS.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-6, fused=ARGS.device.type == "cuda")

    amp = ARGS.train_precision == "bf16-autocast"

    def step():
        with autocast(amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if opt is not None:
            opt.step()
        return loss

    case = f"train {name} {batch}x{L} {ARGS.train_precision}{' +adamw' if opt else ''}"
    peaks, losses, ok = {}, {}, []
    for b in bks:
        try:
            with b:
                warm_up(model, step, warmup)
                peak_reset()
                losses[b.name] = step().item()
                peaks[b.name] = peak_gib()
            ok.append(b)
        except Exception as e:  # noqa: BLE001
            backend_failed(case, b.name, e)
    bks = ok
    times = {b.name: [] for b in bks}
    for r in range(iters):  # backends interleaved, round by round
        for b in bks:
            if max_iters and r >= max_iters.get(b.name, iters):
                continue
            with b:
                model.zero_grad(set_to_none=True)
                times[b.name].append(time_call(step)[0])
    model.zero_grad(set_to_none=True)
    for b in bks:
        row(case, b.name, statistics.median(times[b.name]), "s", peak_gib=peaks[b.name],
            loss=round(losses[b.name], 5), iters=len(times[b.name]), kind="time")
    del opt


@guarded("train")
def case_train(tf, name):
    hidden, layers, vocab, batch, L = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    fast = [n for n in ARGS.backends if n != "torch"]
    bks = backends_for(tf, fast)
    est = (ARGS.warmup + 1 + ARGS.train_iters) * len(bks) * (0.25 if layers <= 30 else 0.7) + 15
    if not bks or not fits(f"train {name}", 0 if ARGS.quick else est):
        return
    model = build_lm(tf, name)
    model.train()
    log(f"train {name}: {batch} x {L}, backends {[b.name for b in bks]}")
    train_timing(tf, name, model, bks, batch, L, ARGS.train_iters, ARGS.warmup, "train")
    if "torch" in ARGS.backends and layers <= 30:
        tb = backends_for(tf, ARGS.backends)
        Lt = ARGS.torch_train_len
        est = 2 * 6.0 * (Lt / 256) * (layers / 24) + 5
        if fits(f"train {name} torch at L {Lt}", 0 if ARGS.quick else est):
            log(f"train {name}: {batch} x {Lt} (the torch path's Python loop over L), backends {[b.name for b in tb]}")
            # one timed step each, its warm-up the peak-memory step (the cases before warmed the rest)
            train_timing(tf, name, model, tb, batch, Lt, 1 if ARGS.quick else 3, 0, "train-torch",
                         max_iters={"torch": 1})
    del model


# ------------------------------------------------------------------------------------------------
# >>block: mamba_inner_fn alone at a model's layer shape
# ------------------------------------------------------------------------------------------------
@guarded("block")
def case_block(tf, name):
    hidden, layers, vocab, batch, L = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    bks = backends_for(tf, [n for n in ARGS.backends if n not in ("torch", "selscan-scan")])
    if not bks:
        return
    torch.manual_seed(0)
    m = tf.mm.MambaMixer(mamba_config(tf, name), layer_idx=0).to(ARGS.device)
    h = torch.randn(batch, L, hidden, device=ARGS.device, requires_grad=True)

    def fwd():
        with autocast():
            xz = m.in_proj(h).transpose(1, 2)
            return tf.mm.mamba_inner_fn(xz, m.conv1d.weight, m.conv1d.bias, m.x_proj.weight, m.dt_proj.weight,
                                        m.out_proj.weight, None, -torch.exp(m.A_log.float()), None, None,
                                        m.D.float(), delta_bias=m.dt_proj.bias.float(), delta_softplus=True)

    dout = None
    for b in bks:
        with b:
            try:
                for _ in range(ARGS.warmup):
                    out = fwd()
                    dout = torch.randn_like(out) if dout is None else dout
                    out.backward(dout)
                sync()
                base = torch.cuda.memory_allocated() if ARGS.device.type == "cuda" else 0
                out = fwd()
                kept = (torch.cuda.memory_allocated() - base) / 2**20 if ARGS.device.type == "cuda" else None
                out.backward(dout)
                del out
                tf_, tb_ = [], []
                for _ in range(max(3, ARGS.train_iters)):
                    t, out = time_call(fwd)
                    tf_.append(t)
                    t, _ = time_call(lambda: out.backward(dout))
                    tb_.append(t)
                    del out
                row(f"block {name} layer {batch}x{L} fwd", b.name, statistics.median(tf_), "s", kind="time")
                row(f"block {name} layer {batch}x{L} bwd", b.name, statistics.median(tb_), "s", kind="time",
                    kept_for_bwd_mib=None if kept is None else round(kept, 1))
            except Exception as e:  # noqa: BLE001
                backend_failed(f"block {name}", b.name, e)
    del m, h


# ------------------------------------------------------------------------------------------------
# >>profile: where one training step's device time goes, by kernel category
# ------------------------------------------------------------------------------------------------
KERNEL_CATEGORIES = [  # (category, substrings of the kernel name, lowercased), first match wins
    # conv first: selscan's conv kernels live in namespace selscan_cuda_detail too
    ("conv", ["causal_conv1d", "conv_fwd", "conv_bwd", "conv_reduce", "conv_final", "conv_dinit", "conv_step", "conv1d",
              "cudnn", "depthwise"]),
    # selscan's gated norm (SSD-torch-v4) before the scan's: its kernels live in selscan_cuda_detail too
    ("gated norm", ["norm_fwd_kernel", "norm_bwd_kernel", "norm_reduce_kernel"]),
    ("scan selscan", ["selscan", "fwd_fast", "bwd_fast", "fwd_short", "bwd_general", "fwd_general", "ssd_"]),
    ("scan mamba_ssm", ["selective_scan"]),
    # mamba_ssm's Triton SSD (Mamba-2): _chunk_cumsum / _chunk_state / _state_passing / _bmm_chunk / _chunk_scan
    ("ssd mamba_ssm", ["_chunk_cumsum", "_chunk_state", "_state_passing", "_bmm_chunk", "_chunk_scan"]),
    # the Mamba-2 mixer's gated RMSNorm: mamba_ssm's Triton _layer_norm_*; selscan's under its own name
    ("gated norm", ["_layer_norm", "rmsnorm", "rms_norm", "gated_norm"]),
    ("gemm", ["gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "matmul"]),
    ("loss / softmax", ["softmax", "nll", "cross_entropy", "log_softmax"]),
    ("copy / cast", ["copy", "cast", "transpose", "cat_", "catarray"]),
    ("reduce", ["reduce"]),
    ("elementwise", ["elementwise", "vectorized", "unrolled"]),
]


def kernel_category(name):
    n = name.lower()
    for cat, keys in KERNEL_CATEGORIES:
        if any(k in n for k in keys):
            return cat
    return "other"


@guarded("profile")
def case_profile(tf, name):
    if ARGS.device.type != "cuda":
        RESULTS["skipped"].append("profile: CUDA only")
        return
    hidden, layers, vocab, batch, L = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    bks = backends_for(tf, [n for n in ARGS.backends if n != "torch"])
    model = build_lm(tf, name)
    model.train()
    ids = token_batch(vocab, batch, L, seed=2)

    def step():
        with autocast():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()

    for b in bks:
        try:
            with b:
                profile_step(model, step, f"{name} {b.name}")
        except Exception as e:  # noqa: BLE001
            backend_failed(f"profile {name}", b.name, e)
        model.zero_grad(set_to_none=True)
    del model


def profile_step(model, step, label):
    """One step under torch.profiler (after warm_up): device time by kernel category and the top
    kernels, into RESULTS["profile"][label] and the log; the category totals returned. On the CPU (--quick's
    check of this code) each op's own CPU time stands for a kernel's."""
    from torch.profiler import ProfilerActivity, profile
    cuda = ARGS.device.type == "cuda"
    warm_up(model, step)
    sync()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step()
        sync()
    kern = {}
    for e in prof.events():
        us = (e.device_time_total if e.device_type == torch.autograd.DeviceType.CUDA else 0) if cuda \
            else e.self_cpu_time_total
        if e.name and us:
            k = kern.setdefault(e.name, [0.0, 0])
            k[0] += us / 1e3
            k[1] += 1
    cats = {}
    for k, (ms, n) in kern.items():
        c = cats.setdefault(kernel_category(k), [0.0, 0])
        c[0] += ms
        c[1] += n
    total = sum(v[0] for v in cats.values())
    top = sorted(kern.items(), key=lambda kv: -kv[1][0])[:30]
    RESULTS.setdefault("profile", {})[label] = {
        "device_ms_total": round(total, 3),
        "categories_ms": {c: [round(v[0], 3), v[1]] for c, v in sorted(cats.items(), key=lambda kv: -kv[1][0])},
        "top_kernels_ms": [[k[:160], round(v[0], 3), v[1]] for k, v in top]}
    log(f"  profile {label}: device {total:.1f} ms: " + ", ".join(
        f"{c} {v[0]:.1f}" for c, v in sorted(cats.items(), key=lambda kv: -kv[1][0])))
    for k, v in top[:12]:
        log(f"      {v[0]:8.2f} ms {v[1]:5d}x  {k[:110]}")
    return {c: v[0] for c, v in cats.items()}


# the kernels a Mamba-2 layer's fused call runs besides its projections: what selscan's kernels replace
M2_LAYER_CATEGORIES = ("ssd mamba_ssm", "scan selscan", "conv", "gated norm")


def m2_training_budget(name, cats):
    """The training goal (a step >= 1.2x faster than mamba_ssm's) as a budget, from one run's profiles
    {backend: category totals}: what is left for selscan's scan, conv and gated norm when the rest of its
    step (GEMMs, the loss, casts, elementwise) stays as measured; into RESULTS["training_budget"]. selscan's
    gated norm is torch's elementwise and reduction kernels, so it counts in selscan's rest, not its layer."""
    ref = cats.get("mamba_ssm")
    for bn, c in cats.items():
        if bn == "mamba_ssm" or ref is None:
            continue
        total, layer = sum(c.values()), sum(c.get(k, 0.0) for k in M2_LAYER_CATEGORIES)
        goal = sum(ref.values()) / 1.2
        r = {"model": name, "backend": bn, "device_ms": round(total, 3), "mamba_ssm_device_ms": round(sum(ref.values()), 3),
             "goal_device_ms": round(goal, 3), "layer_kernels_ms": round(layer, 3),
             "mamba_ssm_layer_kernels_ms": round(sum(ref.get(k, 0.0) for k in M2_LAYER_CATEGORIES), 3),
             "rest_ms": round(total - layer, 3), "budget_for_layer_kernels_ms": round(goal - (total - layer), 3)}
        RESULTS.setdefault("training_budget", []).append(r)
        log(f"  budget {name} {bn}: the goal {goal:.1f} ms of device time (mamba_ssm {r['mamba_ssm_device_ms']} / 1.2); "
            f"{bn}'s step {total:.1f} ms = scan + conv + gated norm {layer:.1f} + the rest {total - layer:.1f}; "
            f"left for scan + conv + gated norm: {goal - (total - layer):.1f} ms "
            f"(mamba_ssm's take {r['mamba_ssm_layer_kernels_ms']} ms)")


# ------------------------------------------------------------------------------------------------
# >>inference: prefill, eager generate, hand-captured CUDA-graph decode
# ------------------------------------------------------------------------------------------------
def get_cache(out):
    c = getattr(out, "cache", None)
    return c if c is not None else getattr(out, "cache_params", None)


def hf_generate(model, ids, new, **extra):
    return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                          min_new_tokens=new, do_sample=False, use_cache=True, **extra)


class GraphDecoder:
    """Greedy decode with the decode step (model forward on one token with the cache, then argmax)
    captured once in a CUDA graph. The cache's conv / recurrent states are allocated by the first
    prefill and keep their addresses (transformers copies into them); reset() + a new prefill
    refill them in place, so the graph stays valid for the next prompt of the same batch."""

    def __init__(self, model, ids, cache_kw, emulate=False):
        self.model, self.kw = model, cache_kw
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            self.cache = get_cache(out)
            self.tok = out.logits[:, -1].argmax(-1, keepdim=True)

            def step():
                o = model(input_ids=self.tok, use_cache=True, **{cache_kw: self.cache})
                self.tok.copy_(o.logits[:, -1].argmax(-1, keepdim=True))

            if emulate:  # CPU test of this class: the same step, run eagerly at each "replay"
                self.graph = type("EagerStep", (), {"replay": staticmethod(lambda: torch.no_grad()(step)())})()
                return
            tok0 = self.tok.clone()
            self.graph, _ = capture_graph(step, warmups=3)
            self.tok.copy_(tok0)

    def generate(self, ids, new):
        with torch.no_grad():
            self.cache.reset()
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self.kw: self.cache})
            self.tok.copy_(out.logits[:, -1].argmax(-1, keepdim=True))
            toks = torch.empty(ids.shape[0], new, dtype=ids.dtype, device=ids.device)
            toks[:, 0] = self.tok[:, 0]
            for i in range(1, new):
                self.graph.replay()
                toks[:, i] = self.tok[:, 0]
            return torch.cat([ids, toks], dim=1)


def same_prefix(a, b):
    """Tokens identical before the first difference (min over the batch rows), new tokens only."""
    if a is None or b is None or a.shape != b.shape:
        return None
    P = ARGS.prompt_len
    diff = (a[:, P:] != b[:, P:]).to(torch.int64)
    if not diff.any():
        return int(a.shape[1] - P)
    first = torch.where(diff.any(1), diff.argmax(1), torch.full_like(diff[:, 0], a.shape[1] - P))
    return int(first.min())


@guarded("inference")
def case_inference(tf, name):
    hidden, layers, vocab, tbatch, tL = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    large = layers > 30
    dtypes = ARGS.gen_dtypes_large if large else ARGS.gen_dtypes
    names = [n for n in ARGS.backends if not (n == "torch" and layers > ARGS.torch_gen_max_layers)]
    bks = backends_for(tf, names)
    if not bks or not fits(f"inference {name}", 0 if ARGS.quick else (40 if large else 25)):
        return
    cuda = ARGS.device.type == "cuda"
    model = None
    P, T = ARGS.prompt_len, ARGS.new_tokens
    for dn in dtypes:
        dtype = DTYPES[dn]
        if model is None:
            model = build_lm(tf, name, dtype)
        else:
            model.to(dtype)
        model.eval()
        # --- prefill ---
        if "prefill" in ARGS.cases and fits(f"prefill {name} {dn}", 0 if ARGS.quick else 20):
            ids = token_batch(vocab, tbatch, tL, seed=3)
            pb = [b for b in bks if b.name != "torch" or tL <= 512 or ARGS.quick]
            f = lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1)  # noqa: E731
            with torch.no_grad():
                for b in list(pb):
                    try:
                        with b:
                            for _ in range(ARGS.warmup):
                                f()
                    except Exception as e:  # noqa: BLE001
                        backend_failed(f"prefill {name} {dn}", b.name, e)
                        pb.remove(b)
                times = {b.name: [] for b in pb}
                for _ in range(max(3, ARGS.train_iters // 2) if not ARGS.quick else 1):
                    for b in pb:
                        with b:
                            times[b.name].append(time_call(f)[0])
            for b in pb:
                row(f"prefill {name} {tbatch}x{tL} {dn}", b.name, statistics.median(times[b.name]), "s", kind="time")
            del ids
        # --- eager generate ---
        ref_ids = {}
        for batch in ARGS.gen_batches:
            if "gen" not in ARGS.cases:
                break
            per_tok = (0.015 if not large else 0.045) * (1.5 if "torch" in names else 1.0)
            est = len(bks) * (ARGS.gen_reps + 0.5) * T * per_tok + 5
            if not fits(f"gen {name} {dn} batch {batch}", 0 if ARGS.quick else est):
                continue
            ids = token_batch(vocab, batch, P, seed=4 + batch)
            res = {}
            with torch.no_grad():
                for b in bks:
                    try:
                        with b:
                            hf_generate(model, ids, min(T, 4), disable_compile=True)  # warm-up (Triton JIT, cuBLAS)
                            ts, seq = [], None
                            for _ in range(ARGS.gen_reps):
                                t, seq = time_call(lambda: hf_generate(model, ids, T, disable_compile=True))
                                ts.append(t)
                            res[b.name] = (statistics.median(ts), seq)
                    except Exception as e:  # noqa: BLE001
                        backend_failed(f"gen eager {name} {dn} b{batch}", b.name, e)
            ref = res.get("mamba_ssm", (None, None))[1]
            for bn, (t, seq) in res.items():
                row(f"gen eager {name} {dn} b{batch} ({P}+{T})", bn, batch * T / t, "tok/s",
                    ms_per_token=round(1e3 * t / T, 3), same_ids_as_mamba=same_prefix(seq, ref), kind="rate")
            ref_ids[batch] = {bn: seq for bn, (t, seq) in res.items()}
            del res
        # --- hand-captured CUDA-graph decode ---
        emulate = not cuda  # on the CPU (--quick): the same decoder, its step run eagerly, rows "graph(emulated)"
        for batch in ARGS.gen_batches:
            if "graph" not in ARGS.cases:
                break
            est = len(bks) * (3 + (ARGS.gen_reps + 1) * T * (0.004 if large else 0.002)) + 3
            if not fits(f"graph {name} {dn} batch {batch}", 0 if ARGS.quick else est):
                continue
            ids = token_batch(vocab, batch, P, seed=4 + batch)
            res = {}
            for b in bks:
                try:
                    with b:
                        t_cap, gd = time_call(lambda: GraphDecoder(model, ids, tf.cache_kw, emulate))
                        gd.generate(ids, T)  # warm-up of the prefill path
                        ts, seq = [], None
                        for _ in range(ARGS.gen_reps):
                            t, seq = time_call(lambda: gd.generate(ids, T))
                            ts.append(t)
                        # decode only: replays of the captured step
                        n_rep = 20
                        t_dec, _ = time_call(lambda: [gd.graph.replay() for _ in range(n_rep)])
                        res[b.name] = (statistics.median(ts), seq, t_dec / n_rep, t_cap)
                        del gd
                except Exception as e:  # noqa: BLE001
                    backend_failed(f"gen graph {name} {dn} b{batch}", b.name, e)
            ref = res.get("mamba_ssm", (None, None))[1]
            for bn, (t, seq, t_step, t_cap) in res.items():
                eager = ref_ids.get(batch, {}).get(bn)
                row(f"gen graph{'(emulated)' if emulate else ''} {name} {dn} b{batch} ({P}+{T})", bn, batch * T / t, "tok/s",
                    ms_per_token=round(1e3 * t / T, 3), decode_step_ms=round(1e3 * t_step, 4),
                    capture_s=round(t_cap, 2), same_ids_as_mamba=same_prefix(seq, ref),
                    same_ids_as_eager=same_prefix(seq, eager), kind="rate")
            del res
            torch.cuda.empty_cache()
        # --- transformers' own CUDA graphs: generate's auto torch.compile with a static cache ---
        if ARGS.hf_compile and cuda:
            for batch in ARGS.gen_batches:
                if not fits(f"hf-compile {name} {dn} batch {batch}", 120):
                    continue
                ids = token_batch(vocab, batch, P, seed=4 + batch)
                for b in bks:
                    try:
                        with b, torch.no_grad():
                            t_c, _ = time_call(lambda: hf_generate(model, ids, T, cache_implementation="static"))
                            t, seq = time_call(lambda: hf_generate(model, ids, T, cache_implementation="static"))
                        row(f"gen hf-compile {name} {dn} b{batch} ({P}+{T})", b.name, batch * T / t, "tok/s",
                            first_call_s=round(t_c, 1), kind="rate")
                    except Exception as e:  # noqa: BLE001
                        log(f"  hf-compile {b.name}: FAILED {e!r}")
                        RESULTS["errors"].append({"block": f"hf-compile {name} {dn} b{batch} {b.name}",
                                                  "error": repr(e)})
                    torch._dynamo.reset()
        save()
    del model


# ------------------------------------------------------------------------------------------------
# >>hybrid: transformers' Jamba / Zamba (random init): training step and greedy generate
# ------------------------------------------------------------------------------------------------
# --models jamba-small,zamba-small (with or without Mamba models; --quick shrinks them to seconds on
# a CPU). Backends: selscan = use_in_transformers() (the fused block without a cache, with Jamba's
# dt / B / C norms; Zamba one grouped scan for its heads; selscan's scan / step / conv in generation);
# mamba_ssm = what transformers resolved at import for the module's four kernel names (mamba_ssm +
# causal_conv1d: its unfused forward, the norms in PyTorch); torch = the PyTorch bodies under
# transformers' kernel wrappers (a Python loop over L: training timed at --torch-train-len).
HYBRID_MODELS = {  # name: (module, model class, config class, config, quick config, train batch, train L)
    "jamba-small": ("transformers.models.jamba.modeling_jamba", "JambaForCausalLM", "JambaConfig",
                    dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=8, attn_layer_period=4, attn_layer_offset=2, num_experts=1,
                         vocab_size=32000),
                    dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, attn_layer_period=4, attn_layer_offset=2, num_experts=1,
                         vocab_size=512),
                    4, 2048),
    "zamba-small": ("transformers.models.zamba.modeling_zamba", "ZambaForCausalLM", "ZambaConfig",
                    dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=13, num_attention_heads=16,
                         num_key_value_heads=16, n_mamba_heads=2, attn_layer_period=6, attn_layer_offset=4,
                         vocab_size=32000),
                    dict(hidden_size=64, intermediate_size=128, num_hidden_layers=5, num_attention_heads=4,
                         num_key_value_heads=4, n_mamba_heads=2, attn_layer_period=2, attn_layer_offset=1,
                         vocab_size=512),
                    4, 2048),
}


def _mamba2_entry(hidden, layers, batch):
    """A Mamba2ForCausalLM entry of HYBRID_MODELS at a Mamba2 release's shape (headdim 64, dstate 128,
    chunk 256, expand 2: hidden / 32 heads), with the one quick config."""
    same = dict(expand=2, n_groups=1, conv_kernel=4)
    return ("transformers.models.mamba2.modeling_mamba2", "Mamba2ForCausalLM", "Mamba2Config",
            dict(hidden_size=hidden, num_hidden_layers=layers, num_heads=hidden // 32, head_dim=64, state_size=128,
                 chunk_size=256, vocab_size=50288, **same),
            dict(hidden_size=64, num_hidden_layers=2, num_heads=4, head_dim=32, state_size=16, chunk_size=16,
                 vocab_size=512, **same),
            batch, 2048)


# Mamba-2 (issue 40): Mamba2-130m's and 1.3b's shapes
HYBRID_MODELS["mamba2-130m"] = _mamba2_entry(768, 24, 8)
HYBRID_MODELS["mamba2-1.3b"] = _mamba2_entry(2048, 48, 4)
HYBRID_KERNELS = ["mamba_selective_scan", "mamba_selective_state_update", "causal_conv1d_fn", "causal_conv1d_update"]
MAMBA2_KERNELS = ["mamba2_chunk_scan", "mamba2_split_conv1d_scan_combined", "mamba2_selective_state_update",
                  "causal_conv1d_fn", "causal_conv1d_update"]


def is_mamba2(mod):
    return mod.__name__.endswith("modeling_mamba2")


# the hybrid (Mamba-2) models' selscan backends; all but the first run selscan's SSD
SELSCAN_HY = ("selscan", "selscan-ssd", "selscan-ssd-unfused", "selscan-ssd-v2")


class HybridBackend:
    """A context that runs one hybrid module (Jamba's / Zamba's) on one backend and undoes it."""

    def __init__(self, name, mod):
        self.name, self.mod = name, mod
        self.orig = {n: getattr(mod, n) for n in (MAMBA2_KERNELS if is_mamba2(mod) else HYBRID_KERNELS)}
        self.resolved = {n: fn_name(f) for n, f in self.orig.items()}

    def available(self):
        if self.name == "mamba_ssm":  # every name on its peer: causal_conv1d's on causal_conv1d, the rest mamba_ssm
            ok = all(r.split(".")[0] == ("causal_conv1d" if n.startswith("causal_conv1d") else "mamba_ssm")
                     for n, r in self.resolved.items())
            return None if ok else f"transformers resolved {self.resolved}"
        if self.name in SELSCAN_HY[1:] and not is_mamba2(self.mod):
            return "a Mamba-2 backend"
        if self.name in SELSCAN_HY:
            integ = selscan_integrations()
            return None if integ is not None and hasattr(integ, "use_in_transformers") else "no selscan_torch"
        return None if self.name == "torch" else "not a hybrid backend"

    def restore(self):
        for n, f in self.orig.items():
            setattr(self.mod, n, f)

    def __enter__(self):
        self.restore()
        if self.name == "torch":
            for n, f in self.orig.items():
                setattr(self.mod, n, torch_body(f))
        elif self.name in SELSCAN_HY:
            integ = selscan_integrations()
            integ.use_in_transformers(True)
            if self.name != "selscan":  # selscan's SSD kernels in training even where mamba_ssm is installed
                # (use_in_transformers keeps mamba_ssm's Triton SSD then): what a user without mamba_ssm runs
                self.mod.mamba2_chunk_scan = integ._m2_chunk_scan(self.orig["mamba2_chunk_scan"], False)
                self.mod.mamba2_split_conv1d_scan_combined = (
                    integ._m2_split_conv1d_scan(self.orig["mamba2_split_conv1d_scan_combined"], False)
                    if self.name != "selscan-ssd-unfused" else lambda *a, **k: None)  # None: the unfused path
            if self.name == "selscan-ssd-v2":  # the layer before SSD-torch-v3
                from bench_ssd import layer_before_v3
                self.before = layer_before_v3()
                self.before.__enter__()
        return self

    def __exit__(self, *exc):
        if self.name in SELSCAN_HY:
            selscan_integrations().use_in_transformers(False)
        if self.name == "selscan-ssd-v2":
            self.before.__exit__(None, None, None)
        self.restore()
        return False


def build_hybrid(name, dtype=torch.float32):
    import importlib
    modname, cls, cfg_cls, full, quick, _, _ = HYBRID_MODELS[name]
    mod = importlib.import_module(modname)
    torch.manual_seed(0)
    common = {} if is_mamba2(mod) else dict(mamba_d_state=16, mamba_expand=2, mamba_d_conv=4)
    cfg = getattr(mod, cfg_cls)(pad_token_id=0, bos_token_id=0, eos_token_id=0, **common, **(quick if ARGS.quick else full))
    with torch.device(ARGS.device):
        model = getattr(mod, cls)(cfg)
    model.to(device=ARGS.device, dtype=dtype)
    gc_ = model.generation_config
    gc_.eos_token_id, gc_.pad_token_id, gc_.bos_token_id = None, 0, None
    log(f"built {cls} {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, {dtype}")
    return mod, model


def hybrid_train_step(model, ids):
    """A hybrid model's training step: forward (--train-precision) and backward of the LM loss, no cache."""
    def step():
        with autocast(ARGS.train_precision == "bf16-autocast"):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss
    return step


@guarded("hybrid")
def case_hybrid(name):
    _, _, _, _, _, batch, L = HYBRID_MODELS[name]
    if ARGS.quick:
        batch, L = 2, 32
    if not fits(f"hybrid {name}", 0 if ARGS.quick else 60):
        return
    mod, model = build_hybrid(name)
    bks = []
    for n in ARGS.backends:
        if n not in (*SELSCAN_HY, "mamba_ssm", "torch"):
            continue
        b = HybridBackend(n, mod)
        why = b.available()
        if why is None:
            bks.append(b)
        else:
            RESULTS["skipped"].append(f"hybrid {name} backend {n}: unavailable ({why})")
            log(f"SKIP hybrid {name} backend {n}: {why}")
    vocab = model.config.vocab_size
    ref_name = "mamba_ssm" if any(b.name == "mamba_ssm" for b in bks) else "torch"
    # --- check: fp32 and bf16-autocast loss and gradients against the reference (training, no cache) ---
    if "check" in ARGS.cases and any(b.name == ref_name for b in bks):
        ids = token_batch(vocab, 2, 32 if ARGS.quick else 256, seed=1)
        model.train()
        _, truth = float64_truth(model, ids, HybridBackend("torch", mod), use_cache=False)
        for amp in (False, True):
            res = {}
            for b in bks:
                with b:
                    model.zero_grad(set_to_none=True)
                    with autocast(amp):
                        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                    loss.backward()
                    res[b.name] = (loss.item(), {n: (p.grad if p.grad is not None else torch.zeros_like(p))
                                                 .detach().float().reshape(-1).clone()
                                                 for n, p in model.named_parameters()})
            model.zero_grad(set_to_none=True)
            ref_loss, ref_g = res[ref_name]
            ref_err = per_kind_err(ref_g, truth)
            for bn, (l, g) in res.items():
                rel_loss, rel_g, worst_n, bound, verdict = guard_row(bn, l, g, ref_name, ref_loss, ref_g, truth,
                                                                     ref_err, amp)
                mode = "bf16-autocast" if amp else "fp32"
                RESULTS["checks"].append({"model": name, "mode": mode, "batch": 2, "L": ids.shape[1], "backend": bn,
                                          "reference": ref_name, "loss": l, "rel_loss_vs_ref": rel_loss,
                                          "rel_l2_grads_vs_ref": rel_g, "worst_param": worst_n,
                                          "worst_param_bound": bound, "tol_loss": CHECK_LOSS_TOL[amp],
                                          "verdict": verdict})
                log(f"  check {name} {mode:<13} {bn:<13} loss {l:.6f}  rel diff vs {ref_name} {rel_loss:.2e} "
                    f"(tol {CHECK_LOSS_TOL[amp]:.0e})  grads rel L2 {rel_g:.2e}; worst parameter {worst_n}: {bound}  {verdict}")
            del res
    # --- train: fwd + bwd (--train-precision), no cache (use_cache=False: the fused block on selscan) ---
    if "train" in ARGS.cases:
        model.train()
        Lt = ARGS.torch_train_len
        has_torch = any(b.name == "torch" for b in bks)
        sets = ([(L, [b for b in bks if b.name != "torch"]), (Lt, bks)] if has_torch and Lt < L else [(L, bks)])
        if ARGS.hybrid_train_lens:  # chosen lengths, torch only at those <= --torch-train-len
            sets = [(int(x), [b for b in bks if b.name != "torch" or int(x) <= Lt])
                    for x in ARGS.hybrid_train_lens.split(",")]
        for Lx, names in sets:  # torch (a Python loop over L) at --torch-train-len, with the others beside it
            if not names:
                continue
            step = hybrid_train_step(model, token_batch(vocab, batch, Lx, seed=2))

            case = f"train {name} {batch}x{Lx} {ARGS.train_precision}"
            iters = ARGS.train_iters if Lx == L or ARGS.hybrid_train_lens else (1 if ARGS.quick else 3)
            peaks, losses, times = {}, {}, {}
            for b in names:
                try:
                    with b:
                        warm_up(model, step)
                        peak_reset()
                        losses[b.name] = step().item()
                        peaks[b.name] = peak_gib()
                        times[b.name] = []
                except Exception as e:  # noqa: BLE001
                    backend_failed(case, b.name, e)
            for _ in range(iters):
                for b in names:
                    if b.name in times:
                        with b:
                            model.zero_grad(set_to_none=True)
                            times[b.name].append(time_call(step)[0])
            model.zero_grad(set_to_none=True)
            for bn, ts in times.items():
                row(case, bn, statistics.median(ts), "s", peak_gib=peaks[bn], loss=round(losses[bn], 5),
                    iters=len(ts), kind="time")
            del step
    # --- profile: one training step's device time by kernel category, each backend but torch; for
    #     Mamba-2, the training goal as a budget for selscan's layer kernels (m2_training_budget) ---
    if "profile" in ARGS.cases:
        model.train()
        step, cats = hybrid_train_step(model, token_batch(vocab, batch, L, seed=2)), {}
        for b in bks:
            if b.name == "torch":
                continue
            try:
                with b:
                    cats[b.name] = profile_step(model, step, f"{name} {b.name} {batch}x{L}")
            except Exception as e:  # noqa: BLE001
                backend_failed(f"profile {name}", b.name, e)
            model.zero_grad(set_to_none=True)
        if is_mamba2(mod):
            m2_training_budget(name, cats)
        del step
    # --- gen: greedy generate (eager, DynamicCache), the model in the first --gen-dtypes dtype ---
    if "gen" in ARGS.cases:
        dn = ARGS.gen_dtypes[0]
        model.to(DTYPES[dn]).eval()
        P, T = ARGS.prompt_len, ARGS.new_tokens
        for gb in ARGS.gen_batches:
            if not fits(f"gen {name} b{gb}", 0 if ARGS.quick else 20):
                continue
            ids = token_batch(vocab, gb, P, seed=4 + gb)
            res = {}
            with torch.no_grad():
                for b in bks:
                    try:
                        with b:
                            hf_generate(model, ids, min(T, 4), disable_compile=True)
                            ts, seq = [], None
                            for _ in range(ARGS.gen_reps):
                                t, seq = time_call(lambda: hf_generate(model, ids, T, disable_compile=True))
                                ts.append(t)
                            res[b.name] = (statistics.median(ts), seq)
                    except Exception as e:  # noqa: BLE001
                        backend_failed(f"gen {name} {dn} b{gb}", b.name, e)
            ref, tref = res.get("mamba_ssm", (None, None))[1], res.get("torch", (None, None))[1]
            for bn, (t, seq) in res.items():
                row(f"gen eager {name} {dn} b{gb} ({P}+{T})", bn, gb * T / t, "tok/s",
                    ms_per_token=round(1e3 * t / T, 3), same_ids_as_mamba=same_prefix(seq, ref),
                    same_ids_as_torch=None if bn == "torch" else same_prefix(seq, tref), kind="rate")
            del res
    del model


# ------------------------------------------------------------------------------------------------
# >>mambavision: NVlabs MambaVision-T training step (mamba_ssm's selective_scan_fn vs selscan)
# ------------------------------------------------------------------------------------------------
def import_mambavision():
    """mambavision.models.mamba_vision, imported with mamba_ssm when it is installed, else under
    use_in_mambavision() (selscan standing in for mamba_ssm at import), else (selscan-scan only)
    under a stand-in module that gives it selscan_torch.selective_scan_fn."""
    try:
        import mambavision.models.mamba_vision as mv
        return mv, "mamba_ssm"
    except ImportError as e:
        first = e
    integ = selscan_integrations()
    if integ is not None and hasattr(integ, "use_in_mambavision"):
        integ.use_in_mambavision(True)
        try:
            import mambavision.models.mamba_vision as mv
            return mv, "use_in_mambavision"
        finally:
            integ.use_in_mambavision(False)
    if "selscan-scan" in ARGS.backends:
        import types
        import selscan_torch as st
        names = ["mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.selective_scan_interface"]
        if any(n in sys.modules for n in names):
            raise first
        for n in names:
            sys.modules[n] = types.ModuleType(n)
        sys.modules[names[-1]].selective_scan_fn = st.selective_scan_fn
        try:
            import mambavision.models.mamba_vision as mv
            return mv, "stand-in module (selscan_torch.selective_scan_fn)"
        finally:
            for n in names:
                del sys.modules[n]
    raise first


class MVBackend:
    def __init__(self, name, mv, orig):
        self.name, self.mv, self.orig = name, mv, orig

    def __enter__(self):
        self.mv.selective_scan_fn = self.orig
        if self.name == "selscan":
            selscan_integrations().use_in_mambavision(True)
            if self.mv.selective_scan_fn is self.orig and self.orig.__module__.startswith("mamba_ssm"):
                selscan_integrations().use_in_mambavision(False)
                raise RuntimeError("use_in_mambavision() left mambavision.models.mamba_vision.selective_scan_fn "
                                   "on mamba_ssm's: the selscan row would time mamba_ssm")
        elif self.name == "selscan-scan":
            import selscan_torch as st
            self.mv.selective_scan_fn = st.selective_scan_fn
        return self

    def __exit__(self, *exc):
        if self.name == "selscan":
            selscan_integrations().use_in_mambavision(False)
        self.mv.selective_scan_fn = self.orig
        return False


@guarded("mambavision")
def case_mambavision():
    if not fits("mambavision", 0 if ARGS.quick else 25):
        return
    try:
        mv, how = import_mambavision()
    except Exception as e:  # noqa: BLE001
        RESULTS["skipped"].append(f"mambavision: cannot import ({e!r})")
        log(f"SKIP mambavision: {e!r}")
        return
    orig = mv.selective_scan_fn
    RESULTS["env"]["mambavision_import"] = how
    RESULTS["env"]["mambavision_scan_at_import"] = fn_name(orig)
    bks = []
    integ = selscan_integrations()
    for n in ARGS.backends:
        if n == "mamba_ssm" and not orig.__module__.startswith("mamba_ssm"):
            RESULTS["skipped"].append("mambavision mamba_ssm: not installed")
        elif n == "selscan" and (integ is None or not hasattr(integ, "use_in_mambavision")):
            RESULTS["skipped"].append("mambavision selscan: use_in_mambavision missing")
        elif n in ("mamba_ssm", "selscan", "selscan-scan"):
            b = MVBackend(n, mv, orig)
            try:
                with b:
                    RESULTS["env"][f"mambavision scan under {n}"] = fn_name(mv.selective_scan_fn)
                bks.append(b)
            except Exception as e:  # noqa: BLE001
                RESULTS["errors"].append({"block": f"mambavision {n}", "error": repr(e)})
                log(f"ERROR mambavision {n}: {e!r}")
    if not bks:
        return
    torch.manual_seed(0)
    # quick: MambaVision-T's layout at 1/20 of its width and depth (224x224 still: its windows need it)
    small = dict(dim=32, in_dim=16, depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 4]) if ARGS.quick else {}
    model = mv.mamba_vision_T(pretrained=False, drop_path_rate=0.0, **small).to(ARGS.device)
    model.train()
    log(f"MambaVision-T: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
        f"imported via {how}; backends {[b.name for b in bks]}")
    # correctness: fp32 loss of a small batch against mamba_ssm's (or the first backend's)
    g = torch.Generator().manual_seed(5)
    xs = torch.randn(2, 3, 224, 224, generator=g).to(ARGS.device)
    ys = torch.randint(0, 1000, (2,), generator=g).to(ARGS.device)
    losses = {}
    for b in list(bks):
        try:
            with b:
                losses[b.name] = F.cross_entropy(model(xs), ys).item()
        except Exception as e:  # noqa: BLE001
            backend_failed("check MambaVision-T", b.name, e)
            bks.remove(b)
    if not losses:
        return
    refn = "mamba_ssm" if "mamba_ssm" in losses else next(iter(losses))
    for bn, l in losses.items():
        rel = abs(l - losses[refn]) / max(abs(losses[refn]), 1e-12)
        verdict = "ref" if bn == refn else ("OK" if rel <= 1e-3 else "MISMATCH")
        RESULTS["checks"].append({"model": "MambaVision-T", "mode": "fp32", "batch": 2, "backend": bn,
                                  "reference": refn, "loss": l, "rel_loss_vs_ref": rel, "verdict": verdict})
        log(f"  check MambaVision-T fp32 {bn:<13} loss {l:.6f} rel diff vs {refn} {rel:.2e} {verdict}")
    B = ARGS.mv_batch
    x = torch.randn(B, 3, 224, 224, generator=g).to(ARGS.device)
    y = torch.randint(0, 1000, (B,), generator=g).to(ARGS.device)

    def step():
        with autocast():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    peaks, ok = {}, []
    for b in bks:
        try:
            with b:
                warm_up(model, step)
                if ARGS.device.type == "cuda":  # one step alone for the peak
                    peak_reset()
                    step()
                    peaks[b.name] = peak_gib()
            ok.append(b)
        except Exception as e:  # noqa: BLE001
            backend_failed("train MambaVision-T", b.name, e)
    bks = ok
    if "profile" in ARGS.cases and ARGS.device.type == "cuda":  # where MambaVision's step goes
        for b in bks:
            try:
                with b:
                    profile_step(model, step, f"MambaVision-T b{B} {b.name}")
            except Exception as e:  # noqa: BLE001
                backend_failed("profile MambaVision-T", b.name, e)
            model.zero_grad(set_to_none=True)
    times = {b.name: [] for b in bks}
    for _ in range(1 if ARGS.quick else ARGS.train_iters):
        for b in bks:
            with b:
                model.zero_grad(set_to_none=True)
                times[b.name].append(time_call(step)[0])
    for b in bks:
        row(f"train MambaVision-T{'-small' if ARGS.quick else ''} b{B} 224 bf16-autocast", b.name, statistics.median(times[b.name]), "s",
            peak_gib=peaks.get(b.name), iters=len(times[b.name]), kind="time")
    del model


# ------------------------------------------------------------------------------------------------
# >>mamba-lm: mamba_ssm's MambaLMHeadModel.generate(cg=True), its own kernels vs use_in_mamba_ssm()
# ------------------------------------------------------------------------------------------------
@guarded("mamba-lm")
def case_mamba_lm(name):
    if ARGS.device.type != "cuda":
        RESULTS["skipped"].append("mamba-lm: needs mamba_ssm on a GPU")
        return
    try:
        from mamba_ssm.models.config_mamba import MambaConfig
        from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
    except Exception as e:  # noqa: BLE001
        RESULTS["skipped"].append(f"mamba-lm: mamba_ssm not importable ({e!r})")
        log(f"SKIP mamba-lm: {e!r}")
        return
    hidden, layers, vocab, _, _ = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    integ = selscan_integrations()
    # selscan-f32state: use_in_mamba_ssm(float32_state=True), a float32 SSM state
    names = [n for n in ARGS.backends if n in ("mamba_ssm", "selscan", "selscan-f32state")]
    for n in ("selscan", "selscan-f32state"):
        if n in names and (integ is None or not hasattr(integ, "use_in_mamba_ssm")):
            names.remove(n)
            RESULTS["skipped"].append(f"mamba-lm {n}: use_in_mamba_ssm missing")
    if not names:
        return
    est = len(names) * len(ARGS.gen_batches) * (4 + (ARGS.gen_reps + 1) * ARGS.new_tokens * 0.004) + 10
    if not fits(f"mamba-lm {name}", est):
        return
    torch.manual_seed(0)
    cfg = MambaConfig(d_model=hidden, n_layer=layers, vocab_size=vocab, ssm_cfg={"layer": "Mamba1"},
                      rms_norm=True, residual_in_fp32=True, fused_add_norm=True, pad_vocab_size_multiple=8)
    model = MambaLMHeadModel(cfg, device=ARGS.device, dtype=torch.bfloat16).eval()
    P, T = ARGS.prompt_len, ARGS.new_tokens
    log(f"mamba_ssm MambaLMHeadModel {name} bf16: backends {names}")

    import mamba_ssm.modules.mamba_simple as ms
    ms_names = ["selective_scan_fn", "mamba_inner_fn", "causal_conv1d_fn", "causal_conv1d_update",
                "selective_state_update"]

    @contextlib.contextmanager
    def on(bn):
        ours = bn.startswith("selscan")
        if ours:
            integ.use_in_mamba_ssm(True, **({"float32_state": True} if bn == "selscan-f32state" else {}))
        RESULTS["env"][f"mamba_simple names under {bn}"] = {
            n: fn_name(getattr(ms, n)) if getattr(ms, n, None) is not None else None for n in ms_names}
        try:
            yield
        finally:
            if ours:
                integ.use_in_mamba_ssm(False)

    for batch in ARGS.gen_batches:
        ids = token_batch(vocab, batch, P, seed=4 + batch)
        res, steps = {}, {}
        for bn in names:
            try:
                with on(bn), torch.no_grad():
                    model._decoding_cache = None  # a fresh capture for this backend
                    gen = lambda: model.generate(input_ids=ids, max_length=P + T, cg=True, top_k=1)  # noqa: E731
                    t_cap, _ = time_call(gen)  # captures the decode graph
                    ts, seq = [], None
                    for _ in range(ARGS.gen_reps):
                        t, seq = time_call(gen)
                        ts.append(t)
                    res[bn] = (statistics.median(ts), seq, t_cap)
                    # its captured decode step alone (input copies, graph replay, logits clone), the
                    # stabler figure: no host work between tokens
                    run = getattr(model._decoding_cache, "callables", {}).get((batch, 1))
                    if run is not None:
                        nid, pos = ids[:, -1:], torch.full((batch, 1), P, dtype=torch.long, device=ids.device)
                        with torch.inference_mode():  # generate's cache tensors are inference tensors
                            st = sorted(time_call(lambda: [run(nid, pos, P) for _ in range(ARGS.ops_reps)])[0]
                                        for _ in range(5))
                        steps[bn] = 1e3 * st[2] / ARGS.ops_reps
            except Exception as e:  # noqa: BLE001
                backend_failed(f"mamba-lm {name} b{batch}", bn, e)
            finally:
                model._decoding_cache = None
                gc.collect()
        ref = res.get("mamba_ssm", (None, None))[1]
        for bn, (t, seq, t_cap) in res.items():
            row(f"mamba_ssm generate(cg=True) {name} bf16 b{batch} ({P}+{T})", bn, batch * T / t, "tok/s",
                ms_per_token=round(1e3 * t / T, 3), first_call_s=round(t_cap, 2),
                same_ids_as_mamba=same_prefix(seq, ref), kind="rate")
        for bn, ms in steps.items():
            row(f"mamba_ssm decode step, its CUDA graph {name} bf16 b{batch}", bn, ms, "ms", kind="time")
    del model


# ------------------------------------------------------------------------------------------------
# >>ops: a layer's two decode kernels alone, in a CUDA graph (where decode's per-layer gap sits)
# ------------------------------------------------------------------------------------------------
def peer_decode_ops():
    """mamba_ssm's Triton selective_state_update and causal_conv1d's update, or (None, None)."""
    try:
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update as ssu
    except Exception:  # noqa: BLE001
        ssu = None
    try:
        from causal_conv1d import causal_conv1d_update as ccu
    except Exception:  # noqa: BLE001
        ccu = None
    return ssu, ccu


@guarded("ops")
def case_ops(name):
    """mamba_ssm's Mamba.step operands (bf16 model: x / z halves of in_proj's (batch, 2 d_inner)
    output, B / C columns of x_proj's output, dt from F.linear, D float32, dt_proj.bias and both
    states bf16), one state pair per layer; each op captured once per layer in one CUDA graph,
    replayed (--ops-reps times, median of 5 timings): us a call, our conv update / step against
    causal_conv1d's / mamba_ssm's, the layer's pair in every combination, the pair with Mamba.step's
    A = -exp(A_log) (mamba_ssm: two elementwise kernels; selscan: inside the step), and a 1-element
    add as the graph's per-kernel floor."""
    if ARGS.device.type != "cuda":
        RESULTS["skipped"].append("ops: needs a GPU (CUDA graphs)")
        return
    integ = selscan_integrations()
    if integ is None:
        return
    import selscan_torch
    ssu, ccu = peer_decode_ops()
    hidden, layers, _, _, _ = (QUICK_MODELS if ARGS.quick else MODELS)[name]
    Dn, n, W = 2 * hidden, 16, 4
    R = math.ceil(hidden / 16)
    dev, bf = ARGS.device, torch.bfloat16
    alog_ok = "A_is_log" in inspect.signature(selscan_torch.selective_state_update).parameters
    for batch in ARGS.gen_batches:
        g = torch.Generator(device=dev).manual_seed(batch)
        rn = lambda *s, dtype=bf: torch.randn(*s, device=dev, generator=g).to(dtype)  # noqa: E731
        L = []
        for _ in range(layers):
            xz = rn(batch, 2 * Dn)
            xdb = rn(batch, R + 2 * n)
            L.append(dict(x=xz[:, :Dn], z=xz[:, Dn:], B=xdb[:, R:R + n], C=xdb[:, R + n:], dt=rn(batch, Dn) * 0.5,
                          cs=rn(batch, Dn, W), ss=rn(batch, Dn, n) * 0.1, w=rn(Dn, W) * 0.5, cb=rn(Dn),
                          Alog=torch.log(torch.arange(1, n + 1, device=dev, dtype=torch.float32)).repeat(Dn, 1),
                          Dp=torch.ones(Dn, device=dev), db=rn(Dn) - 4.0))
        for l in L:
            l["A"] = -torch.exp(l["Alog"])
        conv = {"selscan": lambda l, x: integ._standin_causal_conv1d_update(x, l["cs"], l["w"], l["cb"], "silu")}
        ssu = integ._standin_selective_state_update  # what use_in_mamba_ssm's Mamba.step calls
        step = {"selscan": lambda l, x: ssu(l["ss"], x, l["dt"], l["A"], l["B"], l["C"], l["Dp"], z=l["z"],
                                            dt_bias=l["db"], dt_softplus=True)}
        # Mamba.step's A = -exp(A_log) every token: mamba_ssm's two elementwise kernels, or inside
        # selscan's step (A_is_log, what use_in_mamba_ssm's Mamba.step does)
        step_alog = {"selscan (A in torch)": lambda l, x: step["selscan"](dict(l, A=-torch.exp(l["Alog"])), x)}
        if alog_ok:
            step_alog["selscan"] = lambda l, x: selscan_torch.selective_state_update(
                l["ss"], x, l["dt"], l["Alog"], l["B"], l["C"], l["Dp"], z=l["z"], dt_bias=l["db"], dt_softplus=True,
                A_is_log=True)
        if ccu is not None:
            conv["mamba_ssm"] = lambda l, x: ccu(x, l["cs"], l["w"], l["cb"], "silu")
        if ssu is not None:
            step["mamba_ssm"] = lambda l, x: ssu(l["ss"], x, l["dt"], l["A"], l["B"], l["C"], l["Dp"], z=l["z"],
                                                 dt_bias=l["db"], dt_softplus=True)
            step_alog["mamba_ssm"] = lambda l, x: step["mamba_ssm"](dict(l, A=-torch.exp(l["Alog"])), x)
        one = torch.zeros(1, device=dev)
        cases = {"floor (1-element add)": {"floor": lambda l: one.add_(1.0)}}
        cases["conv update"] = {k: (lambda f: lambda l: f(l, l["x"]))(f) for k, f in conv.items()}
        cases["step"] = {k: (lambda f: lambda l: f(l, l["x"]))(f) for k, f in step.items()}
        cases["conv -> step"] = {}
        for ck, cf in conv.items():
            for sk, sf in step.items():
                cases["conv -> step"][f"{ck}+{sk}" if ck != sk else ck] = (lambda cf, sf: lambda l: sf(l, cf(l, l["x"])))(cf, sf)
        cases["conv -> step, A from A_log"] = {k: (lambda cf, sf: lambda l: sf(l, cf(l, l["x"])))(conv[k.split()[0]], f)
                                                for k, f in step_alog.items() if k.split()[0] in conv}
        for cname, fns in cases.items():
            for bn, f in fns.items():
                try:
                    us = graph_us(lambda: [f(l) for l in L], layers)
                except Exception as e:  # noqa: BLE001
                    backend_failed(f"ops {cname} {name} b{batch}", bn, e)
                    continue
                row(f"decode op {cname} {name} bf16 b{batch}", bn, us, "us/layer", kind="time")
        del L
        gc.collect()


def graph_us(enqueue, per):
    """us per item of enqueue() (per items) captured in one CUDA graph: median of 5 timings of
    --ops-reps replays each (warm-up replays first)."""
    graph, keep = capture_graph(enqueue)  # noqa: F841 (the graph's outputs stay allocated while it is replayed)
    for _ in range(3):
        graph.replay()
    ts = []
    for _ in range(5):
        t, _ = time_call(lambda: [graph.replay() for _ in range(ARGS.ops_reps)])
        ts.append(t)
    del graph, keep
    return 1e6 * statistics.median(ts) / (ARGS.ops_reps * per)


# ------------------------------------------------------------------------------------------------
# >>report: environment, markdown table (ratios against mamba_ssm in the same run)
# ------------------------------------------------------------------------------------------------
def pkg_version(dist, mod=None):
    """The installed distribution's version (no import: mambavision's import needs mamba_ssm);
    a package built in place (selscan_torch) has no metadata: its __version__."""
    import importlib.metadata as md
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        pass
    try:
        return getattr(__import__(mod or dist), "__version__", "?")
    except Exception as e:  # noqa: BLE001
        return f"absent ({type(e).__name__})"


def environment(tf):
    env = RESULTS["env"]
    env.update({
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "device": torch.cuda.get_device_name(0) if ARGS.device.type == "cuda" else platform.processor() or "cpu",
        "cpu_threads": torch.get_num_threads(),
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "transformers": tf.version if tf else None,
        "mamba_ssm": pkg_version("mamba_ssm"), "causal_conv1d": pkg_version("causal_conv1d"),
        "selscan_torch": pkg_version("selscan_torch"), "mambavision": pkg_version("mambavision"),
        "timm": pkg_version("timm"), "triton": pkg_version("triton"),
        "args": {k: (sorted(v) if isinstance(v, set) else str(v) if isinstance(v, torch.device) else v)
                 for k, v in vars(ARGS).items()},
        "transformers_resolved_at_import": tf.resolved if tf else None,
        "matmul_fp32_precision": torch.get_float32_matmul_precision(),
    })
    for mod in ("causal_conv1d", "mamba_ssm", "mamba_ssm.ops.selective_scan_interface",
                "mamba_ssm.ops.triton.selective_state_update"):
        try:
            __import__(mod)
            env[f"import {mod}"] = "ok"
        except Exception as e:  # noqa: BLE001  (why transformers fell back, when it did)
            env[f"import {mod}"] = repr(e)
            if mod in ("causal_conv1d", "mamba_ssm") and "No module named" not in repr(e):
                log(f"env import {mod} FAILED: {traceback.format_exc()[-1500:]}")
    try:
        import selscan_torch
        env["selscan_torch_cuda_kernels"] = selscan_torch.has_cuda_kernels()
        env["selscan_torch_path"] = os.path.dirname(selscan_torch.__file__)
    except Exception as e:  # noqa: BLE001
        env["selscan_torch_cuda_kernels"] = repr(e)
    if ARGS.device.type == "cuda":
        env["cuda_device_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    if tf is not None and "selscan" in ARGS.backends and Backend("selscan", tf).available() is None:
        with Backend("selscan", tf):
            env["transformers_under_use_in_transformers"] = cur = tf.current()
        same = [n for n in tf.names if cur[n] == tf.resolved[n]]
        if same:
            RESULTS["skipped"].append(f"warning: under use_in_transformers() these names still run what transformers "
                                      f"resolved at import: {same}")
            log(f"WARNING use_in_transformers() left {same} as resolved at import")
    for k in ("device", "torch", "transformers", "mamba_ssm", "causal_conv1d", "selscan_torch", "selscan_torch_cuda_kernels",
              "selscan_torch_path", "mambavision"):
        log(f"env {k}: {env.get(k, '(not importable)')}")
    if tf:
        for n, r in tf.resolved.items():
            log(f"env transformers {n} -> {r}")
        for n, r in (env.get("transformers_under_use_in_transformers") or {}).items():
            log(f"env use_in_transformers(): {n} -> {r}")


def table():
    lines = []
    e = RESULTS["env"]
    lines.append(f"### bench_models: {e.get('device')}, {e.get('date_utc')} UTC; torch {e.get('torch')}, "
                 f"transformers {e.get('transformers')}, mamba_ssm {e.get('mamba_ssm')}, "
                 f"causal_conv1d {e.get('causal_conv1d')}, selscan_torch {e.get('selscan_torch')}")
    lines.append("")
    precision = "under bf16 autocast" if ARGS.train_precision == "bf16-autocast" else "in float32"
    lines.append(f"training: fwd + bwd of the LM loss {precision}, "
                 + ("no optimizer step" if ARGS.optimizer == "none" else "plus fused AdamW step")
                 + "; time = median step; x mamba = mamba_ssm time / this time, or this rate / mamba_ssm's rate")
    lines.append("")
    lines.append("| case | backend | value | x mamba | peak GiB | notes |")
    lines.append("|---|---|---|---|---|---|")
    by_case = {}
    for r in RESULTS["rows"]:
        by_case.setdefault(r["case"], []).append(r)
    for case, rows in by_case.items():
        ref = next((r for r in rows if r["backend"] == "mamba_ssm"), None)
        for r in rows:
            ratio = ""
            if ref is not None and r["value"]:
                x = ref["value"] / r["value"] if r["kind"] == "time" else r["value"] / ref["value"]
                ratio = f"{x:.2f}x"
            v = f"{r['value']:.4g} {r['unit']}"
            notes = []
            for k in ("ms_per_token", "decode_step_ms", "same_ids_as_mamba", "same_ids_as_eager", "same_ids_as_torch",
                      "loss"):
                if r.get(k) is not None and not (k == "same_ids_as_mamba" and r["backend"] == "mamba_ssm"):
                    notes.append(f"{k}={r[k]}")
            pk = "" if r.get("peak_gib") is None else f"{r['peak_gib']:.2f}"
            lines.append(f"| {case} | {r['backend']} | {v} | {ratio} | {pk} | {' '.join(notes)} |")
    if RESULTS["checks"]:
        lines.append("")
        lines.append("| correctness check | backend | loss | rel diff vs ref | grads rel L2 | worst parameter: its bound | "
                     "run-to-run | verdict |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for c in RESULTS["checks"]:
            gr, wn = c.get("rel_l2_grads_vs_ref"), c.get("worst_param")
            worst = "" if wn is None else f"{wn}: {c['worst_param_bound']}"
            lines.append(f"| {c['model']} {c['mode']} (ref {c['reference']}) | {c['backend']} | {c['loss']:.6f} | "
                         f"{c['rel_loss_vs_ref']:.2e} | {'' if gr is None else f'{gr:.2e}'} | {worst} | "
                         f"{c.get('grads_run_to_run', '')} | {c['verdict']} |")
    for s in RESULTS["skipped"]:
        lines.append(f"- skipped: {s}")
    for e_ in RESULTS["errors"]:
        lines.append(f"- ERROR in {e_['block']}: {e_['error']}")
    return "\n".join(lines)


def main():
    global ARGS
    ARGS = parse_args()
    if ARGS.device.type == "cuda":
        torch.cuda.init()
    log(f"bench_models on {ARGS.device}: models {ARGS.models}, backends {ARGS.backends}, cases {sorted(ARGS.cases)}, "
        f"deadline {ARGS.deadline_s or 'none'} s")
    tf = None
    try:
        tf = Transformers()
    except Exception as e:  # noqa: BLE001
        RESULTS["errors"].append({"block": "transformers import", "error": repr(e)})
        log(f"ERROR transformers: {e!r}")
    environment(tf)
    save()
    hybrids = [m for m in ARGS.models if m in HYBRID_MODELS]  # Jamba / Zamba: case_hybrid
    ARGS.models = [m for m in ARGS.models if m not in HYBRID_MODELS]
    small = ARGS.models[0] if ARGS.models else None
    if tf is not None and small is not None:
        if "check" in ARGS.cases:
            case_check(tf, small)
        if "train" in ARGS.cases:
            for m in ARGS.models:
                case_train(tf, m)
        if "block" in ARGS.cases:
            for m in ARGS.models:
                case_block(tf, m)
        if "profile" in ARGS.cases:
            case_profile(tf, small)
    if "mambavision" in ARGS.cases:
        case_mambavision()
    for m in hybrids:
        case_hybrid(m)
    infer = ARGS.cases & {"prefill", "gen", "graph"}
    for i, m in enumerate(ARGS.models):
        if tf is not None and infer:
            case_inference(tf, m)
        if "mamba-lm" in ARGS.cases:
            case_mamba_lm(m)
        if "ops" in ARGS.cases:
            case_ops(m)
    RESULTS["env"]["total_s"] = round(elapsed(), 1)
    save()
    md = table()
    if ARGS.md:
        with open(ARGS.md, "w") as f:
            f.write(md + "\n")
    print("\n" + md, flush=True)
    log(f"done in {elapsed():.0f} s" + (f"; JSON in {ARGS.out}" if ARGS.out else ""))
    # any verdict but OK / ref fails the run (MISMATCH, or selscan's gradients bitwise mamba_ssm's)
    return 1 if any(c["verdict"] not in ("OK", "ref") for c in RESULTS["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
