"""selscan_torch.integrations against the clients' own PyTorch paths.

- transformers (skipped when absent; CI installs it from PyPI): MambaForCausalLM and
  FalconMambaForCausalLM, small random configs, integration on vs transformers' own PyTorch path:
  training logits, loss and every parameter's gradient; eval logits; greedy generate() ids and
  per-step logits (use_cache). CPU, and CUDA where present.
- mamba_ssm (skipped unless its Python files import: MAMBA_SKIP_CUDA_BUILD=TRUE
  MAMBA_FORCE_BUILD=TRUE pip install --no-deps --no-build-isolation mamba-ssm, plus einops):
  MambaLMHeadModel on selscan vs mamba_ssm's own PyTorch fallbacks (no causal_conv1d, no Triton
  step, a float64 reference scan): logits, gradients, greedy generate ids.
- mambavision (skipped unless mambavision and timm import): a small MambaVision on selscan
  without mamba_ssm vs a float64 reference scan: outputs and gradients.
"""
import contextlib
import copy
import importlib
import importlib.util
import inspect
import sys
import types

import pytest
import torch

import selscan_torch as st
import selscan_torch.integrations as si
from _common import adapt_mixers, lowp_tol, transformers_own_path
from selscan_torch.reference import selective_scan_ref

HAS_CUDA = torch.cuda.is_available() and st.has_cuda_kernels()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


def _have(*mods):
    return all(importlib.util.find_spec(m) is not None for m in mods)


def rel_err(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    assert a.shape == b.shape, (a.shape, b.shape)
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


# ============================================================================================
# transformers
# ============================================================================================

needs_tf = pytest.mark.skipif(not _have("transformers"), reason="transformers is not installed")


def _tf_model(kind, device, seed=0, **config):
    import transformers

    torch.manual_seed(seed)
    if kind == "mamba":
        cfg = transformers.MambaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=100, state_size=16, **config)
        model = transformers.MambaForCausalLM(cfg)
    else:
        cfg = transformers.FalconMambaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=100, state_size=16,
                                             **config)
        model = transformers.FalconMambaForCausalLM(cfg)
    return model.to(device).float()


_TF_KERNEL_NAMES = ("mamba_inner_fn", "mamba_selective_scan", "mamba_selective_state_update", "causal_conv1d_fn",
                    "causal_conv1d_update")


def _tf_own_path(kind):
    """transformers' own PyTorch functions (FalconMamba's fused call under mamba_ssm computes as
    mamba_ssm's kernel does, not as transformers' PyTorch path does)."""
    return transformers_own_path(f"transformers.models.{kind}.modeling_{kind}", _TF_KERNEL_NAMES)


def _tf_run(model, ids, gen_tokens=8, autocast=None):
    device = ids.device
    model.zero_grad(set_to_none=True)
    model.train()
    if autocast is not None:
        with torch.autocast(device.type, dtype=autocast):
            out = model(ids, labels=ids)
    else:
        out = model(ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.eval()
    with torch.no_grad():
        eval_logits = model(ids).logits
        g = model.generate(ids[:, :6], attention_mask=torch.ones_like(ids[:, :6]), max_new_tokens=gen_tokens,
                           do_sample=False, use_cache=True, return_dict_in_generate=True, output_logits=True,
                           pad_token_id=0)
    return dict(logits=out.logits.detach(), loss=out.loss.detach(), grads=grads, eval_logits=eval_logits,
                ids=g.sequences, step_logits=torch.stack(g.logits))


@needs_tf
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_transformers_on_vs_off(device, kind):
    model = _tf_model(kind, device)
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(1)).to(device)
    with _tf_own_path(kind):
        off = _tf_run(model, ids)
    with si.use_in_transformers() as h:
        assert h.active and len(h.replaced) >= 5
        on = _tf_run(model, ids)
    assert rel_err(on["logits"], off["logits"]) < 2e-5
    assert abs(on["loss"].item() - off["loss"].item()) < 1e-5
    assert set(on["grads"]) == set(off["grads"]) == {n for n, p in model.named_parameters() if p.requires_grad}
    for n in off["grads"]:
        assert rel_err(on["grads"][n], off["grads"][n]) < 2e-4, n
    assert rel_err(on["eval_logits"], off["eval_logits"]) < 2e-5
    assert torch.equal(on["ids"], off["ids"])
    assert rel_err(on["step_logits"], off["step_logits"]) < 2e-5


@needs_tf
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_transformers_conv_width_selscan_does_not_take(device, kind):
    """conv_kernel 5 (selscan's conv takes 2 .. 4): training, eval and generate as transformers' own
    (its PyTorch conv; selscan's scan and step where transformers calls them). Before: every path
    raised NotImplementedError under the integration (a hostile user's run, sixth session)."""
    model = _tf_model(kind, device, conv_kernel=5)
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(1)).to(device)
    with _tf_own_path(kind):
        off = _tf_run(model, ids)
    with si.use_in_transformers():
        on = _tf_run(model, ids)
    assert rel_err(on["logits"], off["logits"]) < 2e-5
    for n in off["grads"]:
        assert rel_err(on["grads"][n], off["grads"][n]) < 2e-4, n
    assert rel_err(on["eval_logits"], off["eval_logits"]) < 2e-5
    assert torch.equal(on["ids"], off["ids"])


def _assert_trains_as_own(model, kind, device="cpu"):
    """A training step without a cache under use_in_transformers() as on transformers' own path: the loss, and
    every gradient."""
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(1)).to(device)
    on, off = _train_vs_own(model, kind, ids)
    assert abs(on[0] - off[0]) < 1e-5 * abs(off[0]) and set(on[1]) == set(off[1])
    for n in off[1]:
        assert rel_err(on[1][n], off[1][n]) < 2e-4, n


def _train_vs_own(model, kind, ids):
    """A training step (no cache) on transformers' own path and under use_in_transformers(): (loss, grads) each."""
    def step():
        model.train()
        model.zero_grad(set_to_none=True)
        out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        return out.loss.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}

    with _tf_own_path(kind):
        off = step()
    with si.use_in_transformers():
        on = step()
    return on, off


@needs_tf
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
@pytest.mark.parametrize("case", ["gelu", "relu", "lora-out_proj", "lora-x_proj", "lora-in_proj", "hook-out_proj"])
def test_transformers_training_keeps_what_the_fused_block_cannot_do(device, kind, case):
    """A conv activation other than silu (config.hidden_act), an adapter laid out as peft's LoRA or a forward
    hook on a projection: the fused block (silu only, the projections' weights read, not called) would drop
    it; transformers' unfused path applies it, on selscan's conv and scan. Before: the training step lost it
    (gelu: gradients 54 % off; LoRA: its parameters got no gradient; a hostile user's run, fifteenth session)."""
    act, _, proj = case.partition("-")
    model = _tf_model(kind, device, **({"hidden_act": act} if not proj else {}))
    if proj:
        adapt_mixers(model, [proj], how=act)
    _assert_trains_as_own(model, kind, device)


@needs_tf
@pytest.mark.parametrize("norm", ["dt_layernorm", "b_layernorm", "c_layernorm"])
def test_falcon_mamba_keeps_a_hook_on_a_mixer_norm(norm):
    """A forward hook on one of FalconMamba's weightless mixer norms: the stand-in's fused block computes the
    norms itself, so the hook never fired there (a hostile user's run, nineteenth session: logits 9 % off
    without a cache); transformers' forward runs instead."""
    model = adapt_mixers(_tf_model("falcon_mamba", "cpu"), [norm], how="hook")
    _assert_trains_as_own(model, "falcon_mamba")


@needs_tf
def test_falcon_mamba_keeps_a_replaced_mixer_norm():
    """A FalconMamba mixer norm replaced by another norm class of the same transformers module (its weighted
    FalconMambaRMSNorm, weight 3): the stand-in's block computes the weightless norm, so only the exact class
    may take it (a same-module rule accepted this: logits 11 % off; the review's finding)."""
    import transformers.models.falcon_mamba.modeling_falcon_mamba as fm

    model = _tf_model("falcon_mamba", "cpu")
    for mixer in [m for m in model.modules() if hasattr(m, "A_log")]:
        norm = fm.FalconMambaRMSNorm(mixer.ssm_state_size, eps=mixer.b_layernorm.variance_epsilon)
        with torch.no_grad():
            norm.weight.fill_(3.0)
        mixer.b_layernorm = norm
    _assert_trains_as_own(model, "falcon_mamba")


@needs_tf
@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_transformers_bf16_autocast(kind):
    """bfloat16 autocast training: the loss and gradients of selscan's path against the same model
    in float64 (transformers' own path), within a multiple of the error that transformers' own path
    makes under the same autocast (its own rounding, measured on the same model and tokens)."""
    model = _tf_model(kind, "cpu", seed=3)
    ids = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(2))
    with _tf_own_path(kind):
        off = _tf_run(model, ids, gen_tokens=2, autocast=torch.bfloat16)
        m64 = copy.deepcopy(model).double().train()
        out = m64(ids, labels=ids)
        out.loss.backward()
        ref = dict(loss=out.loss.item(), grads={n: p.grad for n, p in m64.named_parameters() if p.grad is not None})
    with si.use_in_transformers():
        on = _tf_run(model, ids, gen_tokens=2, autocast=torch.bfloat16)
    bf = torch.bfloat16
    # k = 3 (as test_block's check_lowp_block): selscan's path rounds where autocast rounds
    # transformers' own path (its float32 scan aside), in another order: another draw of an error
    # of own's size, measured at most 2.0 own over these two models' gradients
    loss_err = lambda r: abs(r["loss"].item() - ref["loss"]) / abs(ref["loss"])  # noqa: E731
    assert loss_err(on) < lowp_tol(bf, 1e-5, 3, own=loss_err(off)), (loss_err(on), loss_err(off))
    assert set(on["grads"]) == set(ref["grads"])
    for n in ref["grads"]:
        own = rel_err(off["grads"][n], ref["grads"][n])
        assert rel_err(on["grads"][n], ref["grads"][n]) < lowp_tol(bf, 2e-4, 3, own=own), (n, own)


def _resolve(label):
    """'pkg.module.attr' or 'pkg.module.Class.attr' -> (owner object, attr)."""
    parts = label.split(".")
    for i in range(len(parts) - 1, 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            owner = mod
            for p in parts[i:-1]:
                owner = getattr(owner, p)
            return owner, parts[-1]
    raise KeyError(label)


def _value(label):
    owner, attr = _resolve(label)
    return owner.__dict__.get(attr, "<missing>")


def test_transformers_mixer_stand_in_signatures():
    """The 5.x mixer stand-in: taken for the signatures of 5.1x (cache_params) and 5.2x (cache), not
    for others; with a cache, in eval mode or with an argument it does not know, transformers' own
    forward runs (the stand-in only replaces the training step without a cache)."""
    calls = []

    def make(cache_name):
        ns = {}
        exec(f"def forward(self, hidden_states, {cache_name}=None, attention_mask=None, **kwargs):\n"
             f"    calls.append(('orig', {cache_name}, kwargs))\n    return 'orig'", {"calls": calls}, ns)
        return type("MambaMixer", (torch.nn.Module,), {"forward": ns["forward"]})

    mask = lambda h, m: h  # noqa: E731
    for name in ("cache", "cache_params"):
        mixer = make(name)
        hook = si._tf_cm_hook({"MambaMixer": mixer, "apply_mask_to_padding_states": mask})
        assert hook is not None and hook[0] is mixer and hook[2] == name
        fwd = si._tf_mixer_forward_cm(mixer.__dict__["forward"], mask, name)
        m = mixer()
        m.train()
        calls.clear()
        assert fwd(m, torch.zeros(1, 2, 3), **{name: "a cache"}) == "orig"  # a cache: transformers'
        assert fwd(m, torch.zeros(1, 2, 3), "a cache") == "orig"
        assert fwd(m, torch.zeros(1, 2, 3), None, None, extra=1) == "orig"  # an argument it does not know
        m.eval()
        assert fwd(m, torch.zeros(1, 2, 3)) == "orig"  # eval: transformers'
        assert len(calls) == 4
    other = type("MambaMixer", (torch.nn.Module,), {"forward": lambda self, hidden_states, cache_position=None: 0})
    assert si._tf_cm_hook({"MambaMixer": other, "apply_mask_to_padding_states": mask}) is None
    assert si._tf_cm_hook({"MambaMixer": make("cache")}) is None  # no mask helper


@needs_tf
def test_transformers_lifecycle():
    from transformers.models.mamba import modeling_mamba as mm  # noqa: F401  (imported before the patch)

    h1 = si.use_in_transformers()
    try:
        assert si.use_in_transformers() is h1  # idempotent
        assert any(lbl.startswith("transformers.models.mamba.modeling_mamba.") for lbl in h1.replaced)
        assert "selscan_torch transformers integration, active" in repr(h1)
        patched = {lbl: _value(lbl) for lbl in h1.replaced}
    finally:
        restored = si.use_in_transformers(False)
    assert restored == h1.replaced and not h1.active
    originals = {lbl: _value(lbl) for lbl in h1.replaced}
    assert all(patched[lbl] is not originals[lbl] for lbl in patched)
    assert si.use_in_transformers(False) == []  # nothing to undo
    with si.use_in_transformers() as h2:
        assert h2 is not h1 and h2.replaced == h1.replaced
        assert all(_value(lbl) is not originals[lbl] for lbl in h2.replaced)
    assert all(_value(lbl) is originals[lbl] for lbl in h1.replaced)


@needs_tf
def test_transformers_unknown_version_names_it(monkeypatch):
    import transformers

    fake = types.ModuleType("transformers.models.mamba.modeling_mamba")

    class MambaMixer:  # neither the 5.x nor the 4.x hook points
        pass

    fake.MambaMixer = MambaMixer
    monkeypatch.setitem(sys.modules, "transformers.models.mamba.modeling_mamba", fake)
    with pytest.raises(RuntimeError, match=f"transformers {transformers.__version__}"):
        si.use_in_transformers()
    assert "transformers" not in si._ACTIVE


# ============================================================================================
# mamba_ssm
# ============================================================================================

needs_mamba_ssm = pytest.mark.skipif(not _have("mamba_ssm", "einops"),
                                     reason="mamba_ssm's Python files (and einops) are not installed")


def _ref_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False,
              *args, **kwargs):
    r = selective_scan_ref(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
    if return_last_state:
        return r[0].to(u.dtype), r[1].float()
    return r.to(u.dtype)


def _ms_run(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(ids).logits
    (logits.float().square().mean()).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        out = model.generate(ids[:, :5], max_length=14, cg=False, top_k=1)
    seq = out if isinstance(out, torch.Tensor) else out.sequences
    return logits.detach(), grads, seq


@needs_mamba_ssm
@pytest.mark.parametrize("device", DEVICES)
def test_mamba_ssm_lm_head_model(device, monkeypatch):
    with si.use_in_mamba_ssm() as h:
        assert "sys.modules['mamba_ssm.ops.selective_scan_interface']" in h.replaced
        from mamba_ssm.models.config_mamba import MambaConfig
        from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
        import mamba_ssm.modules.mamba_simple as ms

        assert ms.mamba_inner_fn is si._standin_mamba_inner_fn and ms.selective_scan_fn is si._standin_selective_scan_fn
        assert ms.causal_conv1d_fn is not None and ms.selective_state_update is si._standin_selective_state_update
        assert "mamba_ssm.modules.mamba_simple.Mamba.step" in h.replaced  # A_log into the step kernel
        torch.manual_seed(0)
        norm = dict(rms_norm=False, fused_add_norm=False) if device == "cpu" else {}  # Triton norms: CUDA only
        cfg = MambaConfig(d_model=64, n_layer=2, vocab_size=100, ssm_cfg={"layer": "Mamba1"},
                          pad_vocab_size_multiple=8, **norm)
        model = MambaLMHeadModel(cfg, device=device)
        # the decode cache: mamba_ssm's own dtypes by default; float32_state=True: a float32 SSM state
        cache = model.allocate_inference_cache(2, 8, dtype=torch.bfloat16)
        assert {(c.dtype, s.dtype) for c, s in cache.values()} == {(torch.bfloat16, torch.bfloat16)}
        assert si.use_in_mamba_ssm(float32_state=True) is h  # the same handle, the option changed
        cache = model.allocate_inference_cache(2, 8, dtype=torch.bfloat16)
        assert {(c.dtype, s.dtype) for c, s in cache.values()} == {(torch.bfloat16, torch.float32)}
        ids = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(1)).to(device)
        on = _ms_run(model, ids)
        # mamba_ssm's own PyTorch fallbacks: nn.Conv1d, the float64 reference scan, the torch step
        with monkeypatch.context() as mp:
            for name in ("causal_conv1d_fn", "causal_conv1d_update", "selective_state_update"):
                mp.setattr(ms, name, None)
            mp.setattr(ms, "selective_scan_fn", _ref_scan)
            mp.setattr(ms.Mamba, "step", ms.Mamba.step.__wrapped__)  # mamba_ssm's own decode step
            off = _ms_run(model, ids)
    # restored: the model was made from mamba_ssm modules imported under the integration, which left sys.modules
    # and keep selscan's stand-ins (the README's promise: objects made from them keep running on selscan; mamba_ssm's
    # own kernels are what this machine cannot run); a later import loads mamba_ssm's own, with its own dtypes
    cache = model.allocate_inference_cache(2, 8, dtype=torch.bfloat16)
    assert {(c.dtype, s.dtype) for c, s in cache.values()} == {(torch.bfloat16, torch.float32)}
    assert "mamba_ssm.models.mixer_seq_simple" not in sys.modules
    assert rel_err(_ms_run(model, ids)[0], on[0]) == 0  # still on selscan, after restore
    assert rel_err(on[0], off[0]) < 2e-5
    assert set(on[1]) == set(off[1])
    for n in off[1]:
        assert rel_err(on[1][n], off[1][n]) < 2e-4, n
    assert torch.equal(on[2], off[2])


@needs_mamba_ssm
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU (generate(cg=True) captures CUDA graphs)")
def test_mamba_ssm_generate_cuda_graphs():
    with si.use_in_mamba_ssm():
        from mamba_ssm.models.config_mamba import MambaConfig
        from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

        torch.manual_seed(0)
        model = MambaLMHeadModel(MambaConfig(d_model=64, n_layer=2, vocab_size=100, ssm_cfg={"layer": "Mamba1"}),
                                 device="cuda")
        ids = torch.randint(0, 100, (2, 8), device="cuda")
        a = model.generate(ids, max_length=20, cg=False, top_k=1)
        b = model.generate(ids, max_length=20, cg=True, top_k=1)
    a = a if isinstance(a, torch.Tensor) else a.sequences
    b = b if isinstance(b, torch.Tensor) else b.sequences
    assert torch.equal(a, b)


# ============================================================================================
# mambavision
# ============================================================================================

needs_mambavision = pytest.mark.skipif(not _have("mambavision", "timm", "einops"),
                                       reason="mambavision / timm / einops are not installed")


@needs_mambavision
@pytest.mark.parametrize("device", DEVICES)
def test_mambavision(device, monkeypatch):
    with si.use_in_mambavision() as h:
        assert h.replaced
        from mambavision.models import mamba_vision as mv

        assert mv.selective_scan_fn is si._standin_selective_scan_fn
        torch.manual_seed(0)
        model = mv.MambaVision(depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 4], window_size=[8, 8, 4, 2], dim=16,
                               in_dim=8, mlp_ratio=2, resolution=64, drop_path_rate=0.0, num_classes=10).to(device)
        x = torch.randn(2, 3, 64, 64, device=device)

        def run():
            model.zero_grad(set_to_none=True)
            y = model(x)
            y.square().sum().backward()
            return y.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

        on = run()
        with monkeypatch.context() as mp:
            mp.setattr(mv, "selective_scan_fn", _ref_scan)
            off = run()
    assert rel_err(on[0], off[0]) < 2e-5
    # some gradients are 0 analytically (biases before a BatchNorm): a sum of ~10^3 terms that cancels
    # to 0 keeps ~sqrt(n) float32 ulps of its terms, so each error gets 64 ulps of the model's largest
    # gradient on top of 2e-4 of its own (the scan's float32 rounding through the network)
    scale = max(g.abs().max().item() for g in off[1].values())
    for n in off[1]:
        err = (on[1][n] - off[1][n]).abs().max().item()
        assert err <= 2e-4 * off[1][n].abs().max().item() + 64 * torch.finfo(torch.float32).eps * scale, n


# ============================================================================================
# issue 38
# ============================================================================================


def _pad_batch(side, L=16, seed=5):
    """(ids, attention_mask, labels): row 0 unpadded, rows 1 and 2 padded by 5 and 11 tokens on
    `side` (pad id 0, labels -100 there)."""
    ids = torch.randint(1, 100, (3, L), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(3, L, dtype=torch.long)
    for row, n in ((1, 5), (2, 11)):
        if side == "left":
            mask[row, :n] = 0
        else:
            mask[row, L - n:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask, ids.masked_fill(mask == 0, -100)


def _tf_run_masked(model, ids, mask, labels):
    model.zero_grad(set_to_none=True)
    model.train()
    out = model(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.eval()
    with torch.no_grad():
        eval_logits = model(ids, attention_mask=mask).logits
    return dict(logits=out.logits.detach(), loss=out.loss.detach(), grads=grads, eval_logits=eval_logits)


@needs_tf
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_38_2_padding_mask_as_transformers(device, kind, side):
    """Issue 38 cause 2: a padded batch in training (and eval) gives transformers' own PyTorch
    path's logits, loss and gradients: attention_mask applied to the conv's output as well as
    before in_proj (before the fix the fused path masked before in_proj only: the conv bias at pad
    positions reached the state, the loss and gradients up to 0.8 relative off)."""
    # in_proj / out_proj biases (use_bias) and a trained model's conv bias (transformers initialises
    # it to 0): what reaches pad positions differs between the paths only through these biases
    model = _tf_model(kind, device, seed=4, use_bias=True)
    with torch.no_grad():
        for i, layer in enumerate(model.backbone.layers):
            for bias in (layer.mixer.conv1d.bias, layer.mixer.in_proj.bias):
                bias.copy_(torch.randn(bias.shape, generator=torch.Generator().manual_seed(i)) * 0.5)
    ids, mask, labels = (t.to(device) for t in _pad_batch(side))
    with _tf_own_path(kind):
        off = _tf_run_masked(model, ids, mask, labels)
    with si.use_in_transformers():
        on = _tf_run_masked(model, ids, mask, labels)
    # float32 both ways, summed in other orders (GEMMs, the scan): bounds of test_transformers_on_vs_off
    assert rel_err(on["logits"], off["logits"]) < 2e-5
    assert abs(on["loss"].item() - off["loss"].item()) < 1e-5
    assert set(on["grads"]) == set(off["grads"])
    for n in off["grads"]:  # sums over the batch and sequence: 10x the logits' bound
        assert rel_err(on["grads"][n], off["grads"][n]) < 2e-4, n
    assert rel_err(on["eval_logits"], off["eval_logits"]) < 2e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lvl", [0, 1])
def test_38_2_block_mask_against_reference(device, lvl):
    """mamba_inner_fn(mask=...) against the float64 reference masking the conv's output, at both
    checkpoint levels (the conv output kept masked / recomputed and masked again), with B / C / dt
    RMS norms (FalconMamba's) and a bool mask, left and right padding in one batch."""
    from test_block import block_inputs, ref_block, run_block

    xz, p = block_inputs(batch=3, rms="pre", device=device, seed=lvl + 40)
    mask = torch.ones(3, xz.shape[2], dtype=torch.bool, device=device)
    mask[1, :6] = False
    mask[2, -9:] = False
    out, grads, gout = run_block(xz, p, lvl=lvl, pre=True, mask=mask)
    ref, rgrads = ref_block(xz, p, gout, pre=True, mask=mask)
    # float32 against float64: test_block's bounds (TOL / GTOL float32)
    assert rel_err(out, ref) < 2e-5
    assert set(grads) == set(rgrads)
    for k in rgrads:
        assert rel_err(grads[k], rgrads[k]) < 1e-4, k
    unmasked, _, _ = run_block(xz, p, gout, lvl=lvl, pre=True)
    assert torch.equal(out[0], unmasked[0])  # the unpadded row: bitwise the unmasked block's


@needs_tf
@pytest.mark.parametrize("kind", ["mamba", "falcon_mamba"])
def test_38_2_unpadded_mask_keeps_fast_path(kind, monkeypatch):
    """attention_mask None or all ones: selscan's block runs unmasked (no extra kernel; bitwise the
    result without a mask); a mask with padding reaches it. The padding check is remembered for the
    later layers of one forward (mask tensor, version, a rising layer index; a mask changed in place,
    or the next forward, is checked again)."""
    model = _tf_model(kind, "cpu", seed=6).train()
    ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(7))
    seen = []
    real = si._block.mamba_inner_fn

    def spy(*args, **kwargs):
        seen.append(kwargs.get("mask"))
        return real(*args, **kwargs)

    monkeypatch.setattr(si._block, "mamba_inner_fn", spy)
    with si.use_in_transformers():
        outs = []
        for mask in (None, torch.ones_like(ids), torch.ones(ids.shape, dtype=torch.bool)):
            seen.clear()
            outs.append(model(ids, attention_mask=mask).logits)
            assert seen == [None, None]  # one call a layer, unmasked
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
        padded = torch.ones_like(ids)
        padded[1, :4] = 0
        seen.clear()
        model(ids, attention_mask=padded)
        assert len(seen) == 2 and all(m is padded for m in seen)
    m = torch.ones(2, 5)
    assert si._padding_mask(None, 0) is None and si._padding_mask(m, 0) is None
    m[0, 0] = 0  # in place: a new version, checked again
    assert si._padding_mask(m, 1) is m
    m[0, 0] = 0.5  # a mask that scales (transformers multiplies by it): applied
    assert si._padding_mask(m, 2) is m
    # the answer reused by the later layers of one forward only: a layer index not above the last
    # (the next forward) looks again, so a change without a version bump (.data, numpy) is seen
    m.data[0, 0] = 1
    assert si._padding_mask(m, 3) is m and si._padding_mask(m, 0) is None
    m.data[0, 0] = 0
    assert si._padding_mask(m, 0) is m and si._padding_mask(m, None) is m
    with torch.inference_mode():  # no version counter: checked every time
        assert si._padding_mask(torch.ones(2, 5), 0) is None and si._padding_mask(torch.zeros(2, 5), 1) is not None
    # within one backward (gradient checkpointing recomputes the layers in falling order) any layer
    # reuses the answer; after it, a lower layer (the next forward) looks again
    m = torch.ones(2, 5)
    seen = []

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            seen.append(si._padding_mask(m, 3))
            m.data[0, 0] = 0  # refilled without a version bump: not seen within this backward
            seen.append(si._padding_mask(m, 2))
            seen.append(si._padding_mask(m, 1))
            return g

    Recompute.apply(torch.zeros(3, requires_grad=True)).sum().backward()
    assert seen == [None, None, None]
    assert si._padding_mask(m, 0) is m
    # traced by torch.compile: no data-dependent branch (fullgraph), a given mask is applied
    traced = torch.compile(lambda m, x: x if si._padding_mask(m, 0) is None else x * m, fullgraph=True,
                           backend="eager")
    assert torch.equal(traced(torch.ones(2, 5), torch.full((2, 5), 3.0)), torch.full((2, 5), 3.0))

    def fwd_4x(self, hidden_states, cache_params=None, cache_position=None, attention_mask=None):
        pass

    # transformers 4.x's cuda_kernels_forward arguments, by keyword or by position
    assert si._tf_arg(fwd_4x, "attention_mask", (None, None, "mask"), {}) == "mask"
    assert si._tf_arg(fwd_4x, "attention_mask", (), {"attention_mask": "mask"}) == "mask"
    assert si._tf_arg(fwd_4x, "cache_params", ("cache",), {}) == "cache"
    assert si._tf_arg(fwd_4x, "attention_mask", ("cache",), {}) is None


_STANDIN_NAMESPACES = ("mamba_ssm", "causal_conv1d", "mambavision")
_IFACE = "mamba_ssm.ops.selective_scan_interface"


def _namespace_modules():
    return {k: m for k, m in sys.modules.items() if k.split(".")[0] in _STANDIN_NAMESPACES}


@pytest.mark.parametrize("order", ["fifo", "lifo"])
def test_38_8_mambavision_and_mamba_ssm_restore_sys_modules(order, monkeypatch):
    """Issue 38 cause 8: use_in_mambavision() then use_in_mamba_ssm(), restored in either order:
    while one is still on, the interface module is its stand-in; after both, sys.modules holds
    exactly the modules it held before (the same objects; the modules imported on the stand-ins,
    mamba_ssm's own where its Python files are installed, are gone) and every patched attribute
    is back (before the fix: FIFO left use_in_mambavision's interface stand-in in sys.modules
    (and took mamba_ssm's away while use_in_mamba_ssm was still on), LIFO the mamba_ssm modules
    imported on the stand-ins)."""
    assert not {"mamba_ssm", "mambavision"} & set(si._ACTIVE)
    for k in _namespace_modules():  # what other tests imported there: this test starts without it
        monkeypatch.delitem(sys.modules, k)
    # mambavision imported before the integration: its module attribute is patched, then restored
    fake = types.ModuleType("mambavision.models.mamba_vision")
    own_scan = fake.selective_scan_fn = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, fake.__name__, fake)

    def cycle():
        v = si.use_in_mambavision()
        try:
            iface_v = sys.modules[_IFACE]
            m = si.use_in_mamba_ssm()
        except BaseException:
            v.restore()
            raise
        try:
            iface_m = sys.modules[_IFACE]
            assert iface_v is not iface_m and fake.selective_scan_fn is si._standin_selective_scan_fn
            sys.modules["mambavision.imported_meanwhile"] = types.ModuleType("mambavision.imported_meanwhile")
            patched = [(*_resolve(lbl), _value(lbl)) for lbl in v.replaced + m.replaced if not lbl.startswith("sys.")]
            first, second = (v, m) if order == "fifo" else (m, v)
            first.restore()
            assert sys.modules.get(_IFACE) is (iface_m if first is v else iface_v)  # the other one's, still on
            second.restore()
        finally:  # a failure leaves neither on for the next test
            v.restore()
            m.restore()
        assert fake.selective_scan_fn is own_scan
        staying = {id(mod) for mod in sys.modules.copy().values()}
        for owner, attr, value in patched:  # back where the module stays; a module imported on the stand-ins
            held = id(sys.modules.get(owner.__module__)) if isinstance(owner, type) else id(owner)  # left
            if held in staying:  # sys.modules and keeps them (objects made from it keep running on selscan)
                assert owner.__dict__.get(attr) is not value, attr
        assert not [k for k, mod in sys.modules.items() if type(mod) is types.ModuleType and
                    mod.__dict__.get("__selscan_standin__")]

    # a first cycle loads what mamba_ssm's files import from other packages (transformers, triton,
    # einops, ...) for good: real modules, not stand-ins; under the stand-ins' namespaces nothing
    # may stay
    before = _namespace_modules()
    cycle()
    after = _namespace_modules()
    assert sorted(after) == sorted(before) and all(after[k] is before[k] for k in before)
    # a second cycle: all of sys.modules exactly as before, the same module objects
    before = dict(sys.modules)
    cycle()
    assert sorted(set(sys.modules) ^ set(before)) == []
    assert [k for k, mod in before.items() if sys.modules[k] is not mod] == []
    assert si._SLOTS == {} and si._NAMESPACES == {}


def test_38_2_mixer_arguments_found_positionally():
    """The 4.x mixer stand-in finds cache_params / attention_mask passed positionally too (it read
    the bound method's signature two places off: attention_mask came back as cache_position)."""
    from selscan_torch.integrations import _tf_arg

    class Mixer:
        def cuda_kernels_forward(self, hidden_states, cache_params=None, cache_position=None, attention_mask=None):
            pass

    fwd = Mixer().cuda_kernels_forward
    assert _tf_arg(fwd, "attention_mask", ("cache", "pos", "mask"), {}) == "mask"
    assert _tf_arg(fwd, "cache_params", ("cache",), {}) == "cache"
    assert _tf_arg(fwd, "attention_mask", ("cache",), {}) is None
    assert _tf_arg(fwd, "attention_mask", (), {"attention_mask": "kw"}) == "kw"
