"""use_in_transformers() on transformers' six Mamba-2 families (issue 40): small random-init models
on the CPU against transformers' own path (its PyTorch bodies; mamba_ssm absent): the loss and every
parameter's gradient in training (with and without a padding mask), and greedy ids."""
import contextlib
import importlib
import inspect
import sys

import pytest
import torch
from _common import DEVICES, GTOL32, TOL32, adapt_mixers, fullgraph_training_loss, rel_err
from _families import COMMON as _COMMON
from _families import FAMILIES

import selscan_torch.integrations as si

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _no_tf32():
    """transformers' own path convolves with nn.Conv1d: on CUDA cuDNN's TF32 by default, 1e-3 off float32."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


# a variant beside _families.py's: FalconH1's gated norm gating first (its default normalizes first, which its
# fused call does not say: selscan's layer must not take that one)
VARIANTS = {"FalconH1-gate-first": ("FalconH1", dict(mamba_norm_before_gate=False))}


def _model(family, device="cpu", **config):
    family, extra = VARIANTS.get(family, (family, {}))
    cfg_name, model_name, kw = FAMILIES[family]
    kw = {**kw, **extra, **config}
    if not hasattr(transformers, model_name):
        pytest.skip(f"transformers {transformers.__version__} has no {model_name}")
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_name)(**_COMMON, **kw)
    return getattr(transformers, model_name)(cfg).float().to(device)


def _count_selscan_calls(model, names):
    """Wraps the installed kernels of model's module to count their calls (restore() puts back what
    use_in_transformers replaced)."""
    mod = importlib.import_module(type(model).__module__)
    calls = dict.fromkeys(names, 0)
    for name in names:
        def counted(*a, _f=getattr(mod, name), _n=name, **k):
            calls[_n] += 1
            return _f(*a, **k)

        setattr(mod, name, counted)
    return calls


@contextlib.contextmanager
def _on_selscan():
    """use_in_transformers() for the block, yielding the list of selscan's whole-layer calls (the mixers' fused
    call; each entry its recompute flag)."""
    h, layer, fused = si.use_in_transformers(), si._ssd.mamba_split_conv1d_scan_combined, []

    def spy(*a, **k):
        fused.append(k.get("recompute", True))
        return layer(*a, **k)

    si._ssd.mamba_split_conv1d_scan_combined = spy
    try:
        yield fused
    finally:
        si._ssd.mamba_split_conv1d_scan_combined = layer
        h.restore()


def _step(model, ids, mask, use_cache):
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=use_cache)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _norms_as_mamba_ssm(model):
    """Whether every Mamba-2 mixer's gated norm works on n_groups groups, gate first, as the fused call
    says (or there is none): transformers 5.24's and 5.25's do; 5.17's Mamba2 normalizes all channels."""
    mixers = [m for m in model.modules() if hasattr(m, "A_log") and hasattr(m, "n_groups")]
    def group(norm):
        return getattr(norm, "group_size", None) or norm.weight.shape[0] // getattr(norm, "n_groups", 1)

    return mixers and all(isinstance(getattr(m, "norm", None), torch.nn.Identity) or (
        group(m.norm) == m.intermediate_size // m.n_groups and not getattr(m.norm, "norm_before_gate", False))
        for m in mixers)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", list(FAMILIES) + list(VARIANTS))
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "left-padded"])
@pytest.mark.parametrize("use_cache", [None, False], ids=["cache-default", "no-cache"])
def test_training_step_matches_transformers(family, padded, use_cache, device):
    """(CUDA: transformers' own path is its PyTorch body where mamba_ssm is absent; selscan's scan there is
    its CUDA SSD kernels, forward and backward.) use_cache None: transformers 5.24 / 5.25 build a cache in
    training (the unfused path); False: none, so the mixer's fused call, selscan's layer where it computes
    what the unfused path computes"""
    model = _model(family, device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (2, 21), generator=g).to(device)
    mask = None
    if padded:
        mask = torch.ones_like(ids)
        mask[0, :5] = 0
    want_loss, want = _step(model, ids, mask, use_cache)
    with _on_selscan() as fused:  # selscan's whole layer: the mixer's fused call (no cache, no padding)
        calls = _count_selscan_calls(model, ("mamba2_chunk_scan", "causal_conv1d_fn"))
        got_loss, got = _step(model, ids, mask, use_cache)
    if padded:  # transformers' fused branch would not mask the conv's output: the unfused path, selscan's kernels
        assert not fused and min(calls.values()) > 0, (fused, calls)
    elif use_cache is False and _norms_as_mamba_ssm(model):  # no cache: selscan's layer (recomputed in the
        assert fused and all(rc == (device == "cuda") for rc in fused), (fused, calls)  # backward on CUDA)
    elif use_cache is False:  # a norm other than the fused call says (transformers 5.17's Mamba2 over all
        assert not fused and min(calls.values()) > 0, (fused, calls)  # channels, FalconH1's norm first): unfused
    else:  # the default: with a cache (transformers 5.24 / 5.25 build one in training) the unfused path,
        # without one (older transformers) selscan's layer where the norms agree
        assert fused or min(calls.values()) > 0, (fused, calls)
    assert rel_err(got_loss, want_loss) < TOL32
    assert got.keys() == want.keys()
    # transformers' chunked float32 algorithm against selscan's step by step: rounding only
    worst = max((rel_err(got[n], want[n]), n) for n in want)
    assert worst[0] < GTOL32, worst


# a released model's SSD shapes (dstate 128 / 64, headdim 64) over three chunks of 64 steps, the last partial: on
# CUDA the shapes of the backward in chunks (selscan_cuda.cuh >>ssd-chunk-bwd, where selected: 32 < dstate <= 128,
# no packing), which the tiny configs above (dstate 16) never reach
MODEL_SHAPES = {"state128": dict(hidden_size=64, num_heads=2, head_dim=64, expand=2, state_size=128, n_groups=1,
                                 chunk_size=64),
                "state64-groups2": dict(hidden_size=128, num_heads=4, head_dim=64, expand=2, state_size=64,
                                        n_groups=2, chunk_size=64)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", list(MODEL_SHAPES))
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "left-padded"])
def test_training_step_at_a_models_state_size(shape, padded, device):
    model = _model("Mamba2", device, **MODEL_SHAPES[shape])
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 128, (2, 150), generator=g).to(device)
    mask = None
    if padded:
        mask = torch.ones_like(ids)
        mask[0, :70] = 0  # past the first chunk
    want_loss, want = _step(model, ids, mask, False)
    with _on_selscan() as fused:
        calls = _count_selscan_calls(model, ("mamba2_chunk_scan", "causal_conv1d_fn"))
        got_loss, got = _step(model, ids, mask, False)
        got_again = _step(model, ids, mask, False)[1]
    # selscan's layer, or (padding; transformers 5.17's Mamba2 norm over all channels at n_groups 2) the unfused
    # path on selscan's conv and scan: never transformers' alone
    if not padded and _norms_as_mamba_ssm(model):
        assert fused, (fused, calls)
    else:
        assert not fused and min(calls.values()) > 0, (fused, calls)
    assert rel_err(got_loss, want_loss) < TOL32
    assert got.keys() == want.keys()
    worst = max((rel_err(got[n], want[n]), n) for n in want)  # transformers' chunks against selscan's: rounding
    assert worst[0] < GTOL32, worst
    assert all(torch.equal(got[n], got_again[n]) for n in got)  # the backward is deterministic


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "FalconH1"] + ["FalconH1-gate-first"])
@pytest.mark.parametrize("checkpointing", [None, "reentrant", "non-reentrant"])
def test_training_step_with_the_layer_recomputed(family, checkpointing):
    """The mixers' fused call recomputes selscan's layer on CUDA (the scan's out kept, the rest run again);
    on the CPU forced here, inside the model's own gradient checkpointing too: the loss and every gradient
    bitwise those of the layer kept whole (recompute=False)."""
    model = _model(family)
    if checkpointing and not model.supports_gradient_checkpointing:
        pytest.skip(f"{family} has no gradient checkpointing")
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(3))
    layer, res = si._ssd.mamba_split_conv1d_scan_combined, {}
    for rc in (False, True):
        fused = []

        def forced(*a, _rc=rc, **k):
            fused.append(_rc)
            return layer(*a, **{**k, "recompute": _rc})

        with _on_selscan():
            si._ssd.mamba_split_conv1d_scan_combined = forced  # (_on_selscan puts its spy back on leaving)
            res[rc] = _step(model, ids, None, False)
        if not _norms_as_mamba_ssm(model):
            pytest.skip(f"transformers {transformers.__version__}'s {family} norm is not the fused call's")
        assert fused and set(fused) == {rc}, fused
    assert torch.equal(res[True][0], res[False][0])
    assert res[True][1].keys() == res[False][1].keys()
    assert all(torch.equal(res[True][1][n], res[False][1][n]) for n in res[False][1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["Mamba2", "NemotronH"])
@pytest.mark.parametrize("case", ["lora-out_proj", "hook-out_proj", "lora-in_proj", "hook-norm", "forward-out_proj",
                                  "forward-norm", "subclass-norm", "patched-norm"])
def test_training_step_keeps_adapters_and_hooks(family, case, device):
    """An adapter laid out as peft's LoRA, a forward hook, or a forward of another's (set on the instance, a
    subclass's, patched into the class) on a mixer's out_proj or gated norm (which selscan's layer reads the
    weights of): the unfused path (transformers calls them); on in_proj (which transformers calls before the
    fused call) selscan's layer. Against transformers' own path, no cache. Before: out_proj's LoRA got no
    gradient (a hostile user's run, fifteenth session); the forwards of another's were skipped silently (the
    twenty-first session's)."""
    how, _, proj = case.partition("-")
    model = _model(family, device)
    mixers = [m for m in model.modules() if hasattr(m, "A_log") and hasattr(m, "norm")]
    if proj == "norm" and (not isinstance(mixers[0].norm, torch.nn.Module) or isinstance(mixers[0].norm, torch.nn.Identity)):
        pytest.skip(f"{family}'s mixers have no gated norm module")
    restore = []
    if how == "hook":
        for m in mixers:
            m.norm.register_forward_hook(lambda mod, i, o: o * 2)
    elif how == "forward":  # a forward set on the instance: twice the output
        for m in mixers:
            mod = getattr(m, proj)
            mod.forward = (lambda f: lambda *a, **k: 2 * f(*a, **k))(mod.forward)
    elif how == "subclass":
        cls = type(mixers[0].norm)
        sub = type("Doubled" + cls.__name__, (cls,), {"forward": lambda self, *a, **k: 2 * cls.forward(self, *a, **k)})
        for m in mixers:
            m.norm.__class__ = sub
    elif how == "patched":  # the class's forward replaced from elsewhere (a kernel library's way)
        cls, original = type(mixers[0].norm), type(mixers[0].norm).forward
        cls.forward = lambda self, *a, **k: 2 * original(self, *a, **k)
        restore.append(lambda: setattr(cls, "forward", original))
    else:
        adapt_mixers(model, [proj], how=how)
    try:
        ids = torch.randint(0, 128, (2, 21), generator=torch.Generator().manual_seed(4)).to(device)
        want_loss, want = _step(model, ids, None, False)
        with _on_selscan() as fused:
            got_loss, got = _step(model, ids, None, False)
    finally:
        for f in restore:
            f()
    assert bool(fused) == (proj == "in_proj" and bool(_norms_as_mamba_ssm(model))), fused
    assert rel_err(got_loss, want_loss) < TOL32 and got.keys() == want.keys()
    worst = max((rel_err(got[n], want[n]), n) for n in want)
    assert worst[0] < GTOL32, worst


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_ids_match_transformers(family, device):
    model = _model(family, device).eval()
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(2)).to(device)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **kw)
        h = si.use_in_transformers()
        try:
            calls = _count_selscan_calls(model, ("mamba2_chunk_scan", "mamba2_selective_state_update"))
            got = model.generate(ids, **kw)
        finally:
            h.restore()
    assert torch.equal(got, want)
    assert calls["mamba2_chunk_scan"] > 0 and calls["mamba2_selective_state_update"] > 0, calls  # selscan's ran


@pytest.mark.parametrize("form", ["cu_seqlens", "seq_idx", "both"])
def test_packed_sequences_restart_the_conv_and_the_scan(form):
    """Mamba2Model on packed sequences (the keywords reach the kernels): each sequence as if run alone,
    whichever form says the boundaries (transformers' own PyTorch path refuses them)."""
    model = _model("Mamba2").eval()
    g = torch.Generator().manual_seed(3)
    lens = [5, 9, 1, 7]
    seqs = [torch.randint(0, 128, (1, n), generator=g) for n in lens]
    kw = {}
    if form in ("cu_seqlens", "both"):
        kw["cu_seqlens"] = torch.tensor([0, 5, 14, 15, 22])
    if form in ("seq_idx", "both"):
        kw["seq_idx"] = torch.cat([torch.full((1, n), i, dtype=torch.int32) for i, n in enumerate(lens)], 1)
    with torch.no_grad(), si.use_in_transformers():
        alone = torch.cat([model.backbone(input_ids=s, use_cache=False).last_hidden_state for s in seqs], 1)
        packed = model.backbone(input_ids=torch.cat(seqs, 1), use_cache=False, **kw).last_hidden_state
    assert rel_err(packed, alone) < TOL32


# ---- found by a hostile user's run (tenth session) ------------------------------------------------


@pytest.mark.parametrize("cu,words", [([2, 5, 10], "first offset not 0"), ([0, 7, 5, 10], "decreasing"),
                                      ([0, 4, 12], "last offset not seqlen"), ([0], "argument 'cu_seqlens'")])
def test_bad_packing_is_refused_naming_cu_seqlens(cu, words):
    """Offsets the scan refuses were turned into a seq_idx for the conv first, so the error named a seq_idx
    the user never passed, blamed a cache that was not there, or none came: now the conv takes the
    offsets as they are and refuses them by the library's rules, naming cu_seqlens."""
    model = _model("Mamba2").eval()
    ids = torch.randint(1, 128, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), si.use_in_transformers(), pytest.raises(ValueError, match=words):
        model.backbone(input_ids=ids, cu_seqlens=torch.tensor(cu), use_cache=False)


@pytest.mark.parametrize("form", ["cu_seqlens", "seq_idx"])
def test_packed_keywords_on_a_forward_that_continues_a_cache(form):
    """A forward after a cached prefill: the conv's input holds the cache's left context before the call's
    positions, which the keywords do not describe; the context continues the first sequence, and the
    second restarts in the conv and the scan (before: a NotImplementedError, or a seq_idx shape error
    naming an internal length). Mamba2's backbone (no attention layer): each sequence against its own run."""
    backbone = _model("Mamba2").eval().backbone
    ids = torch.randint(1, 128, (1, 12), generator=torch.Generator().manual_seed(1))
    kw = dict(cu_seqlens=torch.tensor([0, 2, 5])) if form == "cu_seqlens" else \
        dict(seq_idx=torch.tensor([[0, 0, 1, 1, 1]], dtype=torch.int32))

    def prefill():
        return backbone(input_ids=ids[:, :7], use_cache=True).cache

    with torch.no_grad(), si.use_in_transformers():
        got = backbone(input_ids=ids[:, 7:12], cache=prefill(), use_cache=True, **kw).last_hidden_state
        first = backbone(input_ids=ids[:, 7:9], cache=prefill(), use_cache=True).last_hidden_state  # continues
        second = backbone(input_ids=ids[:, 9:12], use_cache=False).last_hidden_state  # a new sequence
    assert rel_err(got[:, :2], first) < TOL32 and rel_err(got[:, 2:], second) < TOL32


def _mamba1_model():
    torch.manual_seed(0)
    return transformers.MambaForCausalLM(transformers.MambaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=128,
                                                                  state_size=16)).float()


@pytest.mark.parametrize("family", list(FAMILIES) + ["Mamba"])
def test_cached_forward_under_grad_mode(family):
    """A cached decode forward with autograd on (e.g. token-by-token log-probs): the cache then holds
    tensors that require grad, which selscan's inference-only steps refused (RuntimeError), and the
    parameters require grad, which they would leave out of the graph; the 5.x families' steps now defer to
    transformers' own there: the same logits, recorded by autograd as transformers' are. (A backward
    through the step is transformers' own matter: its hybrids' in-place state update refuses it.) Mamba:
    a Mamba-1 family, whose 5.x step is deferred the same way."""
    model = _mamba1_model().eval() if family == "Mamba" else _model(family).eval()
    step = "mamba_selective_state_update" if family == "Mamba" else "mamba2_selective_state_update"
    ids = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(1))

    def run():
        out = model(ids[:, :6], use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        return model(ids[:, 6:7], cache=cache, use_cache=True).logits

    want = run()
    with si.use_in_transformers():
        calls = _count_selscan_calls(model, (step,))
        got = run()
    assert calls[step] > 0, calls  # a decode step ran (not a second prefill)
    assert rel_err(got, want) < TOL32
    assert got.requires_grad and want.requires_grad


@pytest.mark.parametrize("family", list(FAMILIES) + ["Mamba"])
def test_float64_model_runs_transformers_own_path(family):
    """A float64 model (e.g. for gradient checks): selscan's kernels take float32 / float16 / bfloat16,
    so under use_in_transformers() every kernel name defers to transformers' own PyTorch body (a
    hostile user's finding: the conv refused 'x' as float64, a crash). Loss, every gradient and greedy
    ids bitwise transformers' own."""
    if family in ("GraniteMoeHybrid", "NemotronH"):
        pytest.skip("transformers' own MoE layers take no float64 (grouped_mm)")
    model = (_mamba1_model() if family == "Mamba" else _model(family)).double()
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    want = _step(model, ids, mask, use_cache=False)
    with torch.no_grad():
        want_ids = model.eval().generate(input_ids=ids[:1], max_new_tokens=3, do_sample=False)
    with si.use_in_transformers():
        got = _step(model, ids, mask, use_cache=False)
        with torch.no_grad():
            got_ids = model.eval().generate(input_ids=ids[:1], max_new_tokens=3, do_sample=False)
    assert torch.equal(got[0], want[0]) and got[1].keys() == want[1].keys()
    assert all(torch.equal(got[1][n], want[1][n]) for n in want[1])
    assert torch.equal(got_ids, want_ids)


# ---- found by a hostile user's run (issue 40, third round) ----------------------------------------


@pytest.mark.parametrize("family", ["Mamba2", "Zamba2"])
def test_training_on_a_cache_from_an_earlier_forward(family):
    """Training on a cache (a second forward continues the first's cache, both losses backpropagated: truncated
    backprop through time): the mixer hands the scan the cache's state as initial_states, then writes the new
    state into that same tensor; selscan's scan keeps initial_states for its backward, which refused it as
    modified in place (transformers' own PyTorch scan keeps none). Loss and every gradient against
    transformers' own, the state kept in the graph or detached between the forwards."""
    model = _model(family)
    ids = torch.randint(1, 128, (2, 21), generator=torch.Generator().manual_seed(5))

    def run(detach):
        model.train()
        model.zero_grad(set_to_none=True)
        first = model(input_ids=ids[:, :11], labels=ids[:, :11], use_cache=True)
        cache = first.cache
        if detach:
            for layer in cache.layers:
                for t in getattr(layer, "recurrent_states", None) or []:
                    if isinstance(t, torch.Tensor):
                        t.detach_()
        second = model(input_ids=ids[:, 11:], labels=ids[:, 11:], cache=cache, use_cache=True)
        (first.loss + second.loss).backward()
        return second.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    for detach in (False, True):
        want_loss, want = run(detach)
        with si.use_in_transformers():
            calls = _count_selscan_calls(model, ("mamba2_chunk_scan",))
            got_loss, got = run(detach)
        assert calls["mamba2_chunk_scan"] > 0, calls
        assert rel_err(got_loss, want_loss) < TOL32 and got.keys() == want.keys()
        worst = max((rel_err(got[n], want[n]), n) for n in want)
        assert worst[0] < GTOL32, (detach, worst)


def test_cuda_calls_go_to_mamba_ssm_only_where_transformers_resolved_it():
    """use_in_transformers() leaves a CUDA call to the module's own scan / fused call where that is mamba_ssm's
    Triton, else selscan's. The probe imported mamba_ssm.ops.triton.ssd_combined alone: where mamba_ssm itself
    does not import (installed without its CUDA build, as for use_in_mamba_ssm), transformers' failed import of
    it leaves its first submodules in sys.modules, on which that import succeeds: the probe said yes where
    transformers' wrappers had resolved to their PyTorch body, so CUDA calls went there (packed ones refused by
    transformers). Checked on the CPU: what each installed wrapper keeps for CUDA is what transformers'
    wrapper resolved to, and a failed probe leaves sys.modules as it found it."""
    import inspect
    import sys

    try:
        importlib.import_module("mamba_ssm")
        package = True
    except Exception:
        package = False
    before = {k for k in sys.modules if k.startswith("mamba_ssm")}
    probe = si._mamba_ssm_ssd_imports()
    if not probe:
        assert {k for k in sys.modules if k.startswith("mamba_ssm")} == before
    assert probe <= package
    with si.use_in_transformers():
        for modname in si._TF_MAMBA2_MODULES:
            mod = importlib.import_module(modname)
            for name in ("mamba2_chunk_scan", "mamba2_split_conv1d_scan_combined"):
                original = si._SLOTS[(id(mod), name)][2]
                kept = inspect.getclosurevars(getattr(mod, name)).nonlocals["own_on_cuda"]
                resolved = si._tf_resolved_package(original)
                assert kept == (probe if resolved is None else resolved), (modname, name, kept, resolved)
                if resolved is not None and not package:
                    assert not resolved  # (transformers cannot have resolved a package that does not import)


@pytest.mark.parametrize("form", ["seq_idx", "cu_seqlens"])
def test_packed_sequences_with_a_conv_activation_selscan_does_not_fuse(form):
    """A Mamba-2 model whose conv activation is not silu (hidden_act gelu): transformers' own conv ran there,
    without the seq_idx (the conv mixed the packed sequences where the scan restarted: a silent wrong answer)
    or refusing cu_seqlens. Now selscan's conv restarting at each sequence, then the activation: each sequence
    as if run alone, its gradients too (unpacked: transformers' own conv, as before)."""
    model = _model("Mamba2")
    model.config.hidden_act = "gelu"
    for m in model.modules():
        if hasattr(m, "A_log"):
            m.activation, m.act = "gelu", torch.nn.GELU()
    lens = [5, 9, 7]
    seqs = [torch.randint(1, 128, (1, n), generator=torch.Generator().manual_seed(i)) for i, n in enumerate(lens)]
    kw = dict(cu_seqlens=torch.tensor([0, 5, 14, 21])) if form == "cu_seqlens" else \
        dict(seq_idx=torch.cat([torch.full((1, n), i, dtype=torch.int32) for i, n in enumerate(lens)], 1))
    with torch.no_grad():
        want = model.backbone(input_ids=seqs[1], use_cache=False).last_hidden_state
    with si.use_in_transformers():
        with torch.no_grad():
            assert rel_err(model.backbone(input_ids=seqs[1], use_cache=False).last_hidden_state, want) < TOL32
        alone = torch.cat([model.backbone(input_ids=s, use_cache=False).last_hidden_state for s in seqs], 1)
        dy = torch.randn(alone.shape, generator=torch.Generator().manual_seed(9))  # (not a sum of squares: after
        # the final RMSNorm it is nearly constant, its gradient cancellation)
        grads_alone = torch.autograd.grad((alone * dy).sum(), list(model.backbone.parameters()), allow_unused=True)
        packed = model.backbone(input_ids=torch.cat(seqs, 1), use_cache=False, **kw).last_hidden_state
        grads = torch.autograd.grad((packed * dy).sum(), list(model.backbone.parameters()), allow_unused=True)
    assert rel_err(packed, alone) < TOL32
    assert max(rel_err(g, w) for g, w in zip(grads, grads_alone) if w is not None) < GTOL32


def test_fullgraph_compile_of_a_training_step():
    """torch.compile(model, fullgraph=True) of a training forward without a cache: transformers' own path traces
    whole, use_in_transformers() refused it (the mixer's stand-in forward set a ContextVar, which dynamo does not
    trace). Under compilation the mixer now runs its unfused path, on selscan's conv and scan (in the graph).
    The eager backend: dynamo's tracing is what is checked, not inductor's code."""
    model = _model("Mamba2").train()
    ids = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(6))
    want = model(input_ids=ids, labels=ids, use_cache=False).loss
    got, traced = fullgraph_training_loss(model, ids)
    assert {"selscan.ssd_fwd.default", "selscan.conv_fwd.default"} <= set(traced), sorted(set(traced))
    assert rel_err(got, want) < TOL32


def test_resolution_read_without_kernels():
    """Without the kernels package transformers' decorated name is its wrapper function itself (no Func module
    around it): _tf_resolved_package read only the Func module's closure, so there it said None and the probe
    decided, where the wrapper says what it resolved to. The wrapper function read directly gives the same
    answer as through its Func module."""
    for modname in si._TF_MAMBA2_MODULES:
        mod = importlib.import_module(modname)
        for name in ("mamba2_chunk_scan", "mamba2_split_conv1d_scan_combined"):
            original = mod.__dict__[name]
            if inspect.isfunction(original):  # (kernels absent here: the wrapper is the function)
                wrapper = original
            else:
                wrapper = inspect.getclosurevars(type(original).forward).nonlocals["func"]
            got = si._tf_resolved_package(wrapper)
            assert got is not None and got == si._tf_resolved_package(original), (modname, name, got)
    assert si._tf_resolved_package(lambda x: x) is None


def test_own_body_behind_a_resolved_wrapper():
    """_tf_own (transformers' own PyTorch body: where selscan's kernels do not take a call, e.g. a float64
    model, and the package transformers resolved to might not either) unwrapped the decorated name, which
    with kernels installed is kernels' Func module (nothing to unwrap): it returned the dispatcher, which
    calls the package's function where transformers resolved to it. A name decorated as transformers
    decorates mamba_ssm's, resolved here to math.sqrt: its own body must come back, with or without kernels."""
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

    def body(x):
        return ("body", x)

    decorated = use_kernel_func_from_hub_with_fallback("sqrt", "math")(body)
    assert decorated(4.0) == 2.0 and si._tf_resolved_package(decorated) is True  # resolved to the package
    assert si._tf_own(decorated) is body and si._tf_own(si._tf_wrapper(decorated)) is body  # (without kernels:
    # transformers' wrapper function is the name itself)
    for modname in si._TF_MAMBA2_MODULES:  # the real names: a function of transformers', never the Func module
        mod = importlib.import_module(modname)
        for name in ("mamba2_chunk_scan", "mamba2_selective_state_update", "causal_conv1d_fn"):
            own = si._tf_own(mod.__dict__[name])
            assert inspect.isfunction(own) and own.__module__.startswith("transformers"), (modname, name, own)


def test_float64_scan_refuses_packed_sequences():
    """A float64 scan runs transformers' own PyTorch body (selscan's kernels take f32 / f16 / bf16), which
    drops seq_idx / cu_seqlens: transformers' wrapper refuses them there, and so must the stand-in (after
    _tf_own learnt to read through kernels' Func module it reached the bare body, which ran the sequences
    as one: the review's finding)."""
    import transformers.models.mamba2.modeling_mamba2 as m2

    b, L, h, p, g, n = 1, 8, 2, 4, 1, 4
    x, dt = torch.randn(b, L, h, p, dtype=torch.float64), torch.rand(b, L, h, dtype=torch.float64)
    A, B, C = -torch.rand(h, dtype=torch.float64), *torch.randn(2, b, L, g, n, dtype=torch.float64)
    with si.use_in_transformers():
        m2.mamba2_chunk_scan(x, dt, A, B, C, chunk_size=4)  # unpacked: transformers' body
        for kw in (dict(seq_idx=torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]], dtype=torch.int32)),
                   dict(cu_seqlens=torch.tensor([0, 3, 8], dtype=torch.int32))):
            with pytest.raises(ValueError, match=f"argument '{next(iter(kw))}'"):
                m2.mamba2_chunk_scan(x, dt, A, B, C, chunk_size=4, **kw)


def test_sys_modules_changing_while_it_is_read(monkeypatch):
    """use_in_transformers() read sys.modules by iterating it (the mamba_ssm probe, the namespaces it covers and
    restores): another thread importing at that moment made it raise "dictionary changed size during iteration"
    (a hostile user's threads, 3 calls in 3000). Made deterministic: every name test of the reads adds or removes
    a module, as such a thread would between two steps of the iteration. Those reads run only where mamba_ssm
    is found (without it the probe answers at once, and nothing here would be exercised)."""
    import types

    if not si._importable("mamba_ssm"):
        pytest.skip("mamba_ssm not installed: the sys.modules reads under test are its probe's")

    real = si._in_namespace
    flip = [0]

    def changing(name, ns):
        flip[0] += 1
        key = f"_selscan_test_churn_{flip[0] % 3}"
        if sys.modules.pop(key, None) is None:
            sys.modules[key] = types.ModuleType(key)
        return real(name, ns)

    monkeypatch.setattr(si, "_in_namespace", changing)
    try:
        for _ in range(3):
            with si.use_in_transformers():
                pass
            si._mamba_ssm_ssd_imports()
    finally:
        for i in range(3):
            sys.modules.pop(f"_selscan_test_churn_{i}", None)
    assert flip[0] > 0


def test_failed_probe_leaves_sys_modules_as_it_found_them():
    """The probe as the first importer of mamba_ssm (a fresh process): where mamba_ssm does not import, what
    the failed probe imported of it leaves sys.modules (the test above runs after its own import of mamba_ssm,
    which left the leftovers there first: the probe's clean-up went unchecked)."""
    import subprocess
    import sys

    code = ("import sys, selscan_torch.integrations as si\n"
            "ns = lambda: {k for k in sys.modules if k == 'mamba_ssm' or k.startswith('mamba_ssm.')}\n"
            "before = ns()\n"
            "ok = si._mamba_ssm_ssd_imports()\n"
            "print(ok, sorted(ns() - before))\n"
            "assert ok or ns() == before, sorted(ns() - before)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
