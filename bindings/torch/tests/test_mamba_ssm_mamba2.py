"""use_in_mamba_ssm() on mamba_ssm's Mamba2 (issue 40), on the CPU, where mamba_ssm's Python files are
installed (its CUDA build not needed): the layer's output and every parameter's gradient against the
float64 composition of its math (reference.mamba_split_conv1d_scan_ref on its own weights), the decode
step against the full forward, and MambaLMHeadModel's training step and generate."""
import importlib.util

import pytest
import torch
from _common import GTOL32, TOL32, rel_err

import selscan_torch.integrations as si
from selscan_torch.reference import mamba_split_conv1d_scan_ref

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) is not None for m in ("mamba_ssm", "einops", "triton")),
    reason="mamba_ssm's Python files, einops or triton are not installed")


@pytest.fixture
def mamba2():
    with si.use_in_mamba_ssm():
        import mamba_ssm.modules.mamba2 as m2

        yield m2


@pytest.mark.parametrize("opts", [dict(), dict(norm_before_gate=True, ngroups=1), dict(D_has_hdim=True),
                                  dict(rmsnorm=False)], ids=["default", "norm-before-gate", "D-per-channel",
                                                             "no-rmsnorm"])
def test_mamba2_layer_matches_float64(mamba2, opts):
    torch.manual_seed(0)
    kw = dict(d_model=32, d_state=8, d_conv=4, expand=2, headdim=8, ngroups=2, chunk_size=16)
    kw.update(opts)
    layer = mamba2.Mamba2(**kw)
    u = torch.randn(2, 19, 32, requires_grad=True)
    params = [p for p in layer.parameters() if p.requires_grad]
    y = layer(u)
    zxbcdt = torch.nn.functional.linear(u.double(), layer.in_proj.weight.double())
    A = -torch.exp(layer.A_log.double())
    D = layer.D.unflatten(0, (-1, layer.headdim)) if layer.D_has_hdim else layer.D  # (mamba2 stores it flat)
    want, _ = mamba_split_conv1d_scan_ref(zxbcdt, layer.conv1d.weight.squeeze(1), layer.conv1d.bias, layer.dt_bias,
                                          A, D, None, layer.dt_limit,
                                          layer.norm.weight if layer.rmsnorm else None,
                                          layer.norm.eps if layer.rmsnorm else 0.0, layer.out_proj.weight,
                                          layer.out_proj.bias, layer.headdim, layer.ngroups, layer.norm_before_gate)
    assert rel_err(y, want) < TOL32
    dy = torch.randn(y.shape)
    got = torch.autograd.grad((y * dy).sum(), [u, *params])
    ref = torch.autograd.grad((want * dy.double()).sum(), [u, *params])
    worst = max(rel_err(g, r) for g, r in zip(got, ref))
    assert worst < GTOL32


def test_mamba2_decode_step_matches_the_full_forward(mamba2):
    from mamba_ssm.utils.generation import InferenceParams

    torch.manual_seed(1)
    layer = mamba2.Mamba2(d_model=32, d_state=8, d_conv=4, expand=2, headdim=8, ngroups=2, chunk_size=16,
                          layer_idx=0).eval()
    u = torch.randn(2, 11, 32)
    with torch.no_grad():
        full = layer(u)
        ip = InferenceParams(max_seqlen=16, max_batch_size=2)
        prefill = layer(u[:, :10], inference_params=ip)
        ip.seqlen_offset = 10
        step = layer(u[:, 10:11], inference_params=ip)
    assert rel_err(prefill, full[:, :10]) < TOL32
    assert rel_err(step, full[:, 10:11]) < TOL32


def test_mamba_lm_head_model_trains_and_generates(mamba2):
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    torch.manual_seed(2)
    cfg = MambaConfig(d_model=32, n_layer=2, vocab_size=64, rms_norm=False, fused_add_norm=False,
                      ssm_cfg=dict(layer="Mamba2", headdim=8, d_state=8, ngroups=2, chunk_size=16))
    model = MambaLMHeadModel(cfg)
    ids = torch.randint(0, 64, (2, 12))
    logits = model(ids).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    with torch.no_grad():
        out = model.generate(ids[:, :8], max_length=12)  # greedy (top_k 1)
        seq = out if torch.is_tensor(out) else out.sequences
        for t in range(8, 12):  # each generated token is the full forward's argmax at its place
            assert torch.equal(seq[:, t], model(seq[:, :t]).logits[:, -1].argmax(-1))


@pytest.mark.skipif(importlib.util.find_spec("causal_conv1d") is not None,
                    reason="causal_conv1d is installed: its own varlen kernel runs (CUDA only)")
def test_mamba2_varlen_prefill_into_a_cache(mamba2):
    """Packed sequences prefilled into a cache (forward(u, seq_idx=, cu_seqlens=, inference_params=): one
    cache row a sequence), then a decode step of each: mamba_ssm's Mamba2 takes the conv states from
    causal_conv1d.causal_conv1d_varlen, which the stand-in lacked (AssertionError "varlen inference
    requires causal_conv1d package"; a hostile user's run, issue 40 third round). Each sequence as if run
    alone, an empty one and ones shorter than the conv included, on either path of the layer."""
    from mamba_ssm.utils.generation import InferenceParams

    lens = [2, 0, 9, 1]
    u = torch.randn(1, sum(lens), 32, generator=torch.Generator().manual_seed(3))
    nxt = torch.randn(len(lens), 1, 32, generator=torch.Generator().manual_seed(4))
    cu = torch.tensor([0, 2, 2, 11, 12])
    seq_idx = torch.tensor([[0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3]], dtype=torch.int32)
    for fused in (True, False):
        torch.manual_seed(5)
        layer = mamba2.Mamba2(d_model=32, d_state=8, d_conv=4, expand=2, headdim=8, ngroups=2, chunk_size=16,
                              layer_idx=0, use_mem_eff_path=fused).eval()
        parts = torch.split(u, lens, 1)
        with torch.no_grad():
            ip = InferenceParams(max_seqlen=16, max_batch_size=len(lens))
            prefill = layer(u, seq_idx=seq_idx, cu_seqlens=cu, inference_params=ip)
            ip.seqlen_offset = 1
            step = layer(nxt, inference_params=ip)
            alone = torch.cat([layer(p) for p in parts if p.shape[1]], 1)
            want = torch.cat([layer(torch.cat([p, nxt[i:i + 1]], 1))[:, -1:] for i, p in enumerate(parts)])
        assert rel_err(prefill, alone) < TOL32 and rel_err(step, want) < TOL32


def test_varlen_states_refuse_bad_offsets():
    """The stand-in's causal_conv1d_varlen_states names cu_seqlens where its offsets do not pack x."""
    x = torch.randn(6, 3)
    for cu in ([0, 4], [1, 6], [0, 4, 2, 6], [[0, 6]]):
        with pytest.raises(ValueError, match="cu_seqlens"):
            si._standin_causal_conv1d_varlen_states(x, torch.tensor(cu), 4)
    states = si._standin_causal_conv1d_varlen_states(x, [0, 1, 6], 3)
    assert torch.equal(states[0], torch.cat([torch.zeros(3, 2), x[:1].T], 1)) and torch.equal(states[1], x[3:].T)


@pytest.mark.parametrize("order", ["alone", "under-mambavision"])
def test_layers_made_in_the_block_keep_running_after_it(order):
    """The README's promise: objects made from mamba_ssm modules imported under use_in_mamba_ssm() keep running
    on selscan after it is restored. restore() put mamba_ssm's own functions back into those modules (which
    leave sys.modules) and their classes (Mamba.step, RMSNorm.forward), so a Mamba2 made in the block raised
    "'NoneType' object is not callable" in its forward and Triton's "invalid argument to exchangeDevice" in
    its decode (a hostile user's run, nineteenth session). Also: the parent packages that stay in sys.modules
    (left there by a failed import of mamba_ssm) keep no attribute naming a submodule that left. Restores come
    in any order: under-mambavision restores use_in_mamba_ssm first while use_in_mambavision, which covers the
    same namespace, is still on (the review's finding: mamba_ssm's own functions came back there)."""
    import contextlib
    import sys

    try:  # a failed import (no mamba_ssm CUDA build) leaves mamba_ssm's first packages in sys.modules
        import mamba_ssm  # noqa: F401
    except Exception:
        pass
    else:  # mamba_ssm's own build imports: its modules stay, and get their own functions back (as they should)
        pytest.skip("mamba_ssm imports with its CUDA build: its modules are not the integration's to keep")
    before = {k: m for k, m in sys.modules.copy().items() if k.startswith("mamba_ssm")}
    outer = si.use_in_mambavision() if order == "under-mambavision" else contextlib.nullcontext()
    with outer, si.use_in_mamba_ssm():
        from mamba_ssm import Mamba, Mamba2
        from mamba_ssm.utils.generation import InferenceParams

        torch.manual_seed(2)
        layers = [Mamba(d_model=32, d_state=8, layer_idx=0).eval(),
                  Mamba2(d_model=32, d_state=8, headdim=8, chunk_size=4, layer_idx=0).eval()]
        u = torch.randn(1, 6, 32)

        def run(layer):
            with torch.no_grad():
                ip = InferenceParams(max_seqlen=8, max_batch_size=1)
                prefill = layer(u[:, :5], inference_params=ip)
                ip.seqlen_offset = 5
                return layer(u), prefill, layer(u[:, 5:], inference_params=ip)

        inside = [run(layer) for layer in layers]
    after = [run(layer) for layer in layers]
    for a, b in zip(after, inside):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert {k: m for k, m in sys.modules.copy().items() if k.startswith("mamba_ssm")} == before
    for k, m in before.items():  # no attribute of a staying package names a module that left
        for name, v in vars(m).items():
            if isinstance(v, type(sys)) and v.__name__.startswith("mamba_ssm"):
                assert sys.modules.get(v.__name__) is v, (k, name)


def test_mamba2_cu_seqlens_alone_as_mamba_ssm(mamba2):
    """mamba_ssm's mamba_chunk_scan_combined reads cu_seqlens only for the varlen states (its scan restarts on
    seq_idx alone): Mamba2.forward(u, cu_seqlens=...) without seq_idx computes the unpacked layer on both of its
    paths. Under use_in_mamba_ssm() the unfused path restarted its scan there (selscan's drop-in does) but not its
    conv: 7e-3 off its fused path, 0.73 off each sequence alone (a hostile user's run, nineteenth session)."""
    torch.manual_seed(3)
    fused = mamba2.Mamba2(d_model=32, d_state=8, d_conv=4, expand=2, headdim=8, ngroups=2, chunk_size=4)
    unfused = mamba2.Mamba2(d_model=32, d_state=8, d_conv=4, expand=2, headdim=8, ngroups=2, chunk_size=4,
                            use_mem_eff_path=False)
    unfused.load_state_dict(fused.state_dict())
    u = torch.randn(1, 13, 32)
    cu = torch.tensor([0, 5, 13], dtype=torch.int32)
    with torch.no_grad():
        want = fused(u)
        for layer in (fused, unfused):
            assert rel_err(layer(u, cu_seqlens=cu), want) < TOL32


@pytest.mark.parametrize("gate", [None, "after-norm", "before-norm"])
def test_rmsnorm_gated_matches_float64(mamba2, gate):
    """mamba_ssm's RMSNormGated on the CPU (selscan's forward under use_in_mamba_ssm): group RMS norm, with
    the gate after the norm, before it, or none (z None), against the float64 formula; and its gradients"""
    from mamba_ssm.ops.triton.layernorm_gated import RMSNorm

    torch.manual_seed(3)
    norm = RMSNorm(12, eps=1e-5, group_size=4, norm_before_gate=gate == "after-norm")
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 12, requires_grad=True)
    z = None if gate is None else torch.randn(3, 5, 12, requires_grad=True)
    y = norm(x, z)

    def ref(x, z, w):
        g = None if z is None else torch.nn.functional.silu(z)
        if g is not None and gate == "before-norm":
            x = x * g
        grp = x.unflatten(-1, (-1, 4))
        r = (grp * torch.rsqrt(grp.square().mean(-1, keepdim=True) + 1e-5)).flatten(-2) * w
        return r * g if g is not None and gate == "after-norm" else r

    ins = [x.detach().double().requires_grad_()] + ([] if z is None else [z.detach().double().requires_grad_()])
    w64 = norm.weight.detach().double().requires_grad_()
    r = ref(ins[0], None if z is None else ins[1], w64)
    assert y.dtype == torch.float32 and rel_err(y, r) <= TOL32
    dy = torch.randn_like(y)
    got = torch.autograd.grad(y, [x] + ([] if z is None else [z]) + [norm.weight], dy)
    want = torch.autograd.grad(r, ins + [w64], dy.double())
    for g, w in zip(got, want):
        assert rel_err(g, w) <= GTOL32
