"""use_in_transformers() under torch.compile(model, fullgraph=True) for a Mamba-1 family (a hostile user's run,
issue 40 third round; the Mamba-2 families' case is in test_integrations_mamba2.py): where transformers' own path
traces whole, selscan's must too. The eager backend: dynamo's tracing is what is checked, not inductor's code."""
import pytest
import torch
from _common import TOL32, fullgraph_training_loss, rel_err

transformers = pytest.importorskip("transformers")


def test_falcon_mamba_training_step_traces_whole():
    """FalconMamba's fused training call (transformers 5.25: selscan's stand-in for its forward) handed the
    block one ones tensor as both B's and C's weightless RMS norm weight: dynamo refuses an autograd.Function
    given a tensor twice ("duplicate tensor input"), so fullgraph=True refused the model."""
    torch.manual_seed(0)
    model = transformers.FalconMambaForCausalLM(transformers.FalconMambaConfig(
        hidden_size=64, num_hidden_layers=1, vocab_size=128, state_size=16)).train()
    ids = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(1))
    want = model(input_ids=ids, labels=ids, use_cache=False).loss
    got, traced = fullgraph_training_loss(model, ids)
    assert any("selscan" in t or "autograd_function_apply" in t for t in traced), sorted(set(traced))
    assert rel_err(got, want) < TOL32
