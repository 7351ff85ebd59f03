"""use_in_transformers() calls a Mamba mixer's submodules as transformers' own path calls them: a forward hook on
any one of them (an interpretability probe, an activation cache, a hook that changes the output) fires as often
on selscan as on transformers' own path, in a training step and an eval forward without a cache (where the
stand-ins take their fused blocks, which read weights instead of calling modules) and in generation. A hostile
user found Jamba's and FalconMamba's norms skipped (nineteenth session); this checks every submodule of every
family's mixer, one hooked at a time (a hook elsewhere in the mixer sends the stand-ins to transformers' forward,
which would hide a skipped one)."""
import pytest
import torch
from _families import COMMON, FAMILIES

import selscan_torch.integrations as si

transformers = pytest.importorskip("transformers")

_MAMBA1 = {  # small configs of the Mamba-1 families use_in_transformers() covers
    "Mamba": ("MambaConfig", "MambaForCausalLM", dict(hidden_size=32, num_hidden_layers=2, state_size=8)),
    "FalconMamba": ("FalconMambaConfig", "FalconMambaForCausalLM", dict(hidden_size=32, num_hidden_layers=2,
                                                                         state_size=8)),
    "Jamba": ("JambaConfig", "JambaForCausalLM", dict(hidden_size=32, num_hidden_layers=2, attn_layer_period=2,
                                                      attn_layer_offset=1, expert_layer_period=100,
                                                      num_attention_heads=4, num_key_value_heads=2,
                                                      intermediate_size=64, mamba_d_state=8)),
    "Zamba": ("ZambaConfig", "ZambaForCausalLM", dict(hidden_size=64, intermediate_size=128, mamba_d_state=16,
                                                      num_hidden_layers=5, num_attention_heads=4,
                                                      num_key_value_heads=4, n_mamba_heads=2, attn_layer_period=2,
                                                      attn_layer_offset=1)),
}


@pytest.mark.parametrize("family", [*_MAMBA1, *FAMILIES])
def test_every_mixer_submodule_is_called_as_transformers_calls_it(family):
    config_name, model_name, kw = {**_MAMBA1, **FAMILIES}[family]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**COMMON, **kw))
    mixers = [m for m in model.modules() if hasattr(m, "A_log")]
    names = sorted({n for m in mixers for n, _ in m.named_children()})
    assert mixers and names
    ids = torch.randint(1, 128, (2, 12), generator=torch.Generator().manual_seed(1))

    def calls(name, mode):
        fired = []
        hooks = [getattr(m, name).register_forward_hook(lambda *a: fired.append(1)) for m in mixers]
        try:
            if mode == "train":
                model.train()
                model(ids, labels=ids, use_cache=False).loss.backward()
                model.zero_grad(set_to_none=True)
            else:
                model.eval()
                with torch.no_grad():
                    if mode == "eval":
                        model(ids, use_cache=False)
                    else:
                        model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
        finally:
            for h in hooks:
                h.remove()
        return len(fired)

    for name in names:
        for mode in ("train", "eval", "generate"):
            own = calls(name, mode)
            with si.use_in_transformers():
                got = calls(name, mode)
            assert got == own, (family, name, mode, got, own)
