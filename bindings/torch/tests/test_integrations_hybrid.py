"""selscan_torch.use_in_transformers() on transformers' hybrid Mamba-1 families, Jamba and Zamba
(issue 42 item 4), against transformers' own PyTorch path: small random configs on the CPU, float32.

Each model is run both ways (integration on / transformers' own functions):
- a training step without a cache (use_cache=False: Jamba on selscan's fused block with its dt / B /
  C RMS norms; Zamba on one grouped scan for its Mamba heads) and one with a cache (transformers' forward on
  selscan's rebound scan and conv: its prefill path, differentiated): logits, loss, every
  parameter's gradient;
- greedy generate(): ids and every step's logits (prefill, then the decode step);
with and without a left-padded batch (attention_mask). Spies check which of selscan's functions ran.

Bounds (float32 both ways; the paths differ only in summation order: GEMMs in other shapes, the
scan's recurrence, the RMS norms' sums): the test_integrations bounds, logits 2e-5 and gradients
2e-4 relative to each tensor's largest entry (about 100x and 1000x float32's 1.2e-7 unit roundoff
over a few layers of width <= 128; measured <= 1e-6 for logits and <= 3e-5 for gradients, the
largest the norm weights' gradients, sums over every batch row and position).
"""
import contextlib
import importlib
import importlib.util
import inspect

import pytest
import torch

import selscan_torch as st
import selscan_torch.integrations as si
from _common import adapt_mixers, transformers_own_path

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and st.has_cuda_kernels() else [])
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")

_KERNELS = ("mamba_selective_scan", "mamba_selective_state_update", "causal_conv1d_fn", "causal_conv1d_update")
_MODULES = {"jamba": ("transformers.models.jamba.modeling_jamba", "JambaMambaMixer"),
            "zamba": ("transformers.models.zamba.modeling_zamba", "ZambaMambaMixer")}


def rel_err(a, b):
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape, (a.shape, b.shape)
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def _hy_model(kind, seed=0, device="cpu", **config):
    """A small random Jamba (layers mamba, mamba, attention, mamba; one MLP each) or Zamba (5 Mamba
    layers, 2 of them hybrid with the shared attention block; 2 Mamba heads) with in_proj /
    out_proj biases, and the conv bias, dt projection and Jamba's norm weights moved off their
    initial values (zeros / ones), so that each reaches the result."""
    import transformers

    torch.manual_seed(seed)
    common = dict(vocab_size=100, hidden_size=64, intermediate_size=128, mamba_d_state=16, mamba_expand=2,
                  mamba_proj_bias=True, pad_token_id=0)  # in_proj / out_proj biases (off by default)
    common.update(config)
    if kind == "jamba":
        cfg = transformers.JambaConfig(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                       attn_layer_period=4, attn_layer_offset=2, num_experts=1, **common)
        model = transformers.JambaForCausalLM(cfg)
    else:
        cfg = transformers.ZambaConfig(num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=4,
                                       n_mamba_heads=2, attn_layer_period=2, attn_layer_offset=1, **common)
        model = transformers.ZambaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".mamba." in n and any(k in n for k in ("conv1d.bias", "in_proj.bias", "dt_proj", "layernorm")):
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.to(device).float()


def _own_path(kind):
    """transformers' own PyTorch functions for the hybrid's four kernel names."""
    return transformers_own_path(_MODULES[kind][0], _KERNELS)


@contextlib.contextmanager
def _spies(monkeypatch):
    """Counts of calls into selscan: the fused block, the scan, the step, the conv and its update."""
    calls = dict(block=0, scan=0, step=0, conv=0, conv_update=0)

    def spy(owner, name, key):
        real = getattr(owner, name)

        def f(*args, **kwargs):
            calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, f)

    spy(si._block, "mamba_inner_fn", "block")
    spy(si, "_hy_scan_op", "scan")
    spy(si, "_selective_state_update", "step")  # (the hybrids step through _standin_selective_state_update)
    spy(si._conv, "causal_conv1d_fn", "conv")
    spy(si._conv, "causal_conv1d_update", "conv_update")
    yield calls


def _left_padded(L=16, seed=5):
    ids = torch.randint(1, 100, (3, L), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(3, L, dtype=torch.long)
    mask[1, :5] = 0
    mask[2, :9] = 0
    return ids.masked_fill(mask == 0, 0), mask


def _hy_run(model, ids, mask, calls=None, gen_tokens=6, prompt=10):
    """Training steps without and with a cache, then greedy generate; calls (spies) per phase."""
    labels = ids if mask is None else ids.masked_fill(mask == 0, -100)
    res, seen = {}, {}
    model.train()
    for use_cache in (False, True):
        before = dict(calls) if calls is not None else None
        model.zero_grad(set_to_none=True)
        out = model(ids, attention_mask=mask, labels=labels, use_cache=use_cache)
        out.loss.backward()
        res[use_cache] = dict(logits=out.logits.detach(), loss=out.loss.detach(),
                              grads={n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        if calls is not None:
            seen[use_cache] = {k: calls[k] - before[k] for k in calls}
    model.eval()
    before = dict(calls) if calls is not None else None
    with torch.no_grad():
        g = model.generate(ids[:, :prompt], attention_mask=None if mask is None else mask[:, :prompt],
                           max_new_tokens=gen_tokens, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                           output_logits=True)
    if calls is not None:
        seen["generate"] = {k: calls[k] - before[k] for k in calls}
    res["ids"], res["step_logits"] = g.sequences, torch.stack(g.logits)
    return res, seen


def _mixers(model, kind):
    return [m for m in model.modules() if type(m).__name__ == _MODULES[kind][1]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("kind", ["jamba", "zamba"])
def test_hybrid_on_vs_off(kind, padded, device, monkeypatch):
    model = _hy_model(kind, device=device)
    if padded:
        ids, mask = (t.to(device) for t in _left_padded())
    else:
        ids, mask = torch.randint(1, 100, (3, 16), generator=torch.Generator().manual_seed(5)).to(device), None
    with _own_path(kind):
        off, _ = _hy_run(model, ids, mask)
    with si.use_in_transformers() as h, _spies(monkeypatch) as calls:
        modname, mixer = _MODULES[kind]
        assert {f"{modname}.{n}" for n in _KERNELS} | {f"{modname}.{mixer}.forward"} <= set(h.replaced)
        on, seen = _hy_run(model, ids, mask, calls)
    n_mixers = len(_mixers(model, kind))
    heads = model.config.n_mamba_heads if kind == "zamba" else 1
    # which path ran without a cache: Jamba the fused block (one a layer), Zamba one conv and one
    # grouped scan a layer (its heads the scan's groups); with one transformers' forward on selscan's
    # conv and scan (Zamba: a scan a head), then the conv update and step when decoding
    no_cache = dict(block=0, scan=n_mixers, conv=n_mixers) if kind == "zamba" else dict(block=n_mixers, scan=0, conv=0)
    assert seen[False] == dict(step=0, conv_update=0, **no_cache)
    assert seen[True] == dict(block=0, scan=n_mixers * heads, step=0, conv=n_mixers, conv_update=0)
    g = seen["generate"]
    assert g["block"] == 0 and g["scan"] == n_mixers * heads and g["conv"] == n_mixers
    assert g["step"] == 5 * n_mixers * heads and g["conv_update"] == 5 * n_mixers  # 6 tokens: 1 prefill, 5 steps
    params = {n for n, p in model.named_parameters() if p.requires_grad}
    for use_cache in (False, True):
        a, b = on[use_cache], off[use_cache]
        assert rel_err(a["logits"], b["logits"]) < 2e-5, use_cache
        assert abs(a["loss"].item() - b["loss"].item()) < 1e-5 * max(1.0, abs(b["loss"].item())), use_cache
        assert set(a["grads"]) == set(b["grads"]) == params
        for n in b["grads"]:
            assert rel_err(a["grads"][n], b["grads"][n]) < 2e-4, (use_cache, n)
    assert torch.equal(on["ids"], off["ids"])
    assert rel_err(on["step_logits"], off["step_logits"]) < 2e-5


@pytest.mark.parametrize("kind", ["jamba", "zamba"])
def test_hybrid_bf16_autocast(kind):
    """bfloat16 autocast training without a cache (the fused block), both paths against the float32
    result: selscan's loss within bfloat16 precision, and each parameter's gradient no further from
    float32 than 3x transformers' own bfloat16 path is (+ 1e-2, bfloat16's rounding: a wrong formula
    is off by O(1)). Measured up to 1.9x (Jamba): the fused block rounds Jamba's normalised B / C to
    bfloat16 for the scan, as mamba_ssm's kernels do, where transformers' JambaRMSNorm returns float32
    (a float32 weight times the bfloat16 normalised input); Zamba 1.2x. Without in_proj / out_proj
    biases (the configs' default)."""
    model = _hy_model(kind, seed=3, mamba_proj_bias=False).train()
    ids = torch.randint(1, 100, (2, 16), generator=torch.Generator().manual_seed(2))

    def run(amp=True):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = model(ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def l2(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30)).item()

    with _own_path(kind):
        ref = run(amp=False)
        off = run()
    with si.use_in_transformers():
        on = run()
    assert abs(on[0].item() - ref[0].item()) < 2e-2 * abs(ref[0].item())
    assert set(on[1]) == set(off[1]) == set(ref[1])
    for n in ref[1]:
        assert l2(on[1][n], ref[1][n]) <= 3 * l2(off[1][n], ref[1][n]) + 1e-2, n


class _Hook:  # an accelerate hook's interface, doing nothing
    def pre_forward(self, module, *args, **kwargs):
        return args, kwargs

    def post_forward(self, module, output):
        return output


@pytest.mark.parametrize("kind", ["jamba", "zamba"])
def test_hybrid_fused_only_where_it_applies(kind, monkeypatch):
    """The mixer stand-in runs without a cache, other keywords ignored (the
    Trainer's num_items_in_batch); transformers' forward (on selscan's kernels) with packed
    sequences (seq_idx), a quantized config, an accelerate hook on a child it reads, another
    activation or the deprecated cache_params; each gives transformers' own result."""
    model = _hy_model(kind, seed=7)
    mixer = _mixers(model, kind)[0].train()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(8))
    with _own_path(kind):
        ref = mixer(x)
    with si.use_in_transformers(), _spies(monkeypatch) as calls:
        def ran_block(**kwargs):  # the stand-in ran: Jamba's fused block, Zamba's one grouped scan
            before = dict(calls)  # (transformers' forward on the rebound scan: one a head)
            out = mixer(x, **kwargs)
            assert rel_err(out, ref) < 2e-5
            ran = {k: calls[k] - before[k] for k in calls}
            return ran["block"] == 1 if kind == "jamba" else ran["scan"] == 1

        assert ran_block() and ran_block(num_items_in_batch=torch.tensor(7))
        assert not ran_block(seq_idx=torch.zeros(2, 8, dtype=torch.int32))  # one sequence a row: same result
        assert not ran_block(cache_params=None)
        monkeypatch.setattr(mixer.config, "_is_quantized", True, raising=False)
        assert not ran_block()
        monkeypatch.delattr(mixer.config, "_is_quantized")
        monkeypatch.setattr(mixer.conv1d, "_hf_hook", _Hook(), raising=False)
        assert not ran_block()
        monkeypatch.delattr(mixer.conv1d, "_hf_hook")
        assert ran_block()
    with _own_path(kind):
        monkeypatch.setattr(mixer, "activation", "gelu")
        ref = mixer(x)
    with si.use_in_transformers(), _spies(monkeypatch) as calls:
        assert not ran_block()  # the conv too: transformers' own for an activation selscan's does not fuse


def test_hybrid_lifecycle():
    """use_in_transformers() covers Jamba's and Zamba's modules (their four kernel names and the
    mixer's forward); restoring it puts every one back."""
    mods = {k: importlib.import_module(m) for k, (m, _) in _MODULES.items()}
    originals = {k: ({n: mods[k].__dict__[n] for n in _KERNELS}, getattr(mods[k], c).__dict__["forward"])
                 for k, (_, c) in _MODULES.items()}
    with si.use_in_transformers() as h:
        for k, (modname, cls) in _MODULES.items():
            for n in _KERNELS:
                assert f"{modname}.{n}" in h.replaced
                assert mods[k].__dict__[n] is not originals[k][0][n]
            fwd = getattr(mods[k], cls).__dict__["forward"]
            assert fwd is not originals[k][1] and fwd.__wrapped__ is originals[k][1]
        assert mods["jamba"].mamba_selective_scan.__wrapped__ is si._hy_selective_scan  # (_tf_step: float64)
        assert mods["zamba"].mamba_selective_state_update.__wrapped__ is si._hy_selective_state_update  # (_tf_step)
    for k, (modname, cls) in _MODULES.items():
        assert {n: mods[k].__dict__[n] for n in _KERNELS} == originals[k][0]
        assert all(mods[k].__dict__[n] is originals[k][0][n] for n in _KERNELS)
        assert getattr(mods[k], cls).__dict__["forward"] is originals[k][1]


# ---- found by a hostile user's run (sixth session) ------------------------------------------------


@pytest.mark.parametrize("width", [1, 5])
@pytest.mark.parametrize("kind", ["jamba", "zamba"])
def test_hybrid_conv_width_selscan_does_not_take(kind, width, monkeypatch):
    """A conv width outside selscan's (2 .. 4, selscan.h SELSCAN_CONV_MIN_WIDTH / _MAX_WIDTH, which
    transformers runs with its own conv): the model runs as transformers' own (training with and
    without a cache, generate), selscan's conv and fused block never called (the scan and step still
    selscan's). Before: every path raised NotImplementedError."""
    model = _hy_model(kind, mamba_d_conv=width)
    ids, mask = _left_padded()
    with _own_path(kind):
        off, _ = _hy_run(model, ids, mask)
    with si.use_in_transformers(), _spies(monkeypatch) as calls:
        on, seen = _hy_run(model, ids, mask, calls)
    for phase in (False, True, "generate"):
        assert seen[phase]["block"] == seen[phase]["conv"] == seen[phase]["conv_update"] == 0, (phase, seen[phase])
    assert seen[True]["scan"] > 0 and seen["generate"]["step"] > 0
    for use_cache in (False, True):
        a, b = on[use_cache], off[use_cache]
        assert rel_err(a["logits"], b["logits"]) < 2e-5, use_cache
        for n in b["grads"]:
            assert rel_err(a["grads"][n], b["grads"][n]) < 2e-4, (use_cache, n)
    assert torch.equal(on["ids"], off["ids"])


@pytest.mark.parametrize("kind, case", [(k, c) for k in ("jamba", "zamba") for c in (
    "gelu", "lora-out_proj", "lora-x_proj", "lora-dt_proj", "hook-in_proj", "hook-out_proj")
    if not (k == "zamba" and c in ("lora-x_proj", "lora-dt_proj"))])  # (Zamba's x / dt projections: parameters)
def test_hybrid_training_keeps_what_the_fused_block_cannot_do(kind, case):
    """A conv activation other than silu, an adapter laid out as peft's LoRA or a forward hook on a projection
    of the Mamba mixers: a training step without a cache against transformers' own. Jamba's stand-in (the
    fused block) reads its projections' weights: transformers' forward runs instead; Zamba's calls in_proj /
    out_proj. Before: Jamba's LoRA parameters got no gradient (a hostile user's run, fifteenth session).
    (Zamba's x_proj / dt_proj are per-head parameters, not Linears: its LoRA cases there adapted nothing and
    were dropped when adapt_mixers learnt to refuse that, nineteenth session.)"""
    act, _, proj = case.partition("-")
    model = _hy_model(kind, **({"hidden_act": act} if not proj else {}))
    if proj:
        adapt_mixers(model, [proj], how=act)
    _assert_training_as_own(kind, model)


@pytest.mark.parametrize("norm", ["dt_layernorm", "b_layernorm", "c_layernorm"])
def test_jamba_keeps_a_hook_on_a_mixer_norm(norm):
    """A forward hook on one of Jamba's mixer norms (dt / B / C): the stand-in's fused block computes the norms
    from their weights, so the hook never fired there (a hostile user's run, nineteenth session: logits 1e-3
    off without a cache, a recording hook collecting nothing); transformers' forward runs instead."""
    model = adapt_mixers(_hy_model("jamba"), [norm], how="hook")
    _assert_training_as_own("jamba", model)
    ids = torch.randint(1, 100, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        model.eval()
        with _own_path("jamba"):
            want = model(ids, use_cache=False).logits
        with si.use_in_transformers():
            got = model(ids, use_cache=False).logits
    assert rel_err(got, want) < 2e-5


def _assert_training_as_own(kind, model):
    """A training step without a cache under use_in_transformers() against transformers' own: the loss, and
    every gradient."""
    ids = torch.randint(1, 100, (2, 16), generator=torch.Generator().manual_seed(3))

    def step():
        model.train()
        model.zero_grad(set_to_none=True)
        out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        return out.loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    with _own_path(kind):
        off = step()
    with si.use_in_transformers():
        on = step()
    assert abs(on[0] - off[0]) < 1e-5 * abs(off[0]) and set(on[1]) == set(off[1])
    for n in off[1]:
        assert rel_err(on[1][n], off[1][n]) < 2e-4, n


def test_hybrid_mask_refilled_in_place_is_looked_at_again():
    """An attention_mask whose contents change without a version bump (a torch.from_numpy buffer
    refilled through numpy): the padding answer is not reused across calls of the same layer (it
    was: the mixer skipped the mask, 40 % off on the padded row's real tokens)."""
    import numpy as np

    model = _hy_model("jamba", seed=4)
    mixer = _mixers(model, "jamba")[0].train()
    x = torch.randn(2, 6, 64, generator=torch.Generator().manual_seed(9))
    buf = np.ones((2, 6), dtype=np.int64)
    mask = torch.from_numpy(buf)
    with si.use_in_transformers():
        mixer(x, attention_mask=mask)  # all ones: no padding
        buf[1, :3] = 0  # left padding, the tensor's version unchanged
        on = mixer(x, attention_mask=mask)
    with _own_path("jamba"):
        off = mixer(x, attention_mask=mask)
    assert rel_err(on, off) < 2e-5


def test_integration_nested_with_keeps_the_outer():
    """A with-block inside another (the same handle): leaving the inner one keeps the integration
    until the outer one ends; an earlier call outside any block keeps it past a later block; a
    plain call inside a block leaves the restore to the block."""
    jamba = importlib.import_module(_MODULES["jamba"][0])
    own = jamba.__dict__["mamba_selective_scan"]
    with si.use_in_transformers() as outer:
        with si.use_in_transformers() as inner:
            assert inner is outer
        assert outer.active and jamba.mamba_selective_scan.__wrapped__ is si._hy_selective_scan
    assert not outer.active and jamba.mamba_selective_scan is own
    h = si.use_in_transformers()
    try:
        with si.use_in_transformers():
            pass
        assert h.active and jamba.mamba_selective_scan.__wrapped__ is si._hy_selective_scan
    finally:
        h.restore()
    assert jamba.mamba_selective_scan is own
    with si.use_in_transformers() as h:  # a call inside the block, not a block of its own (a helper's)
        si.use_in_transformers()
    assert not h.active and jamba.mamba_selective_scan is own
