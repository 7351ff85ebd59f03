"""transformers' Mamba2 mixer: its fused training branch (mamba2_split_conv1d_scan_combined, here on
selscan's drop-in in mamba_ssm's place) against its unfused branch (its own PyTorch conv and chunked scan),
on the CPU in float32: a 2-layer, 256-wide Mamba2ForCausalLM, batch 2 x 128, the loss and every parameter's
gradient. Whether the two branches compute the same thing (bench/RESULTS.md issue 40, thirteenth session).

    PYTHONPATH=bindings/torch python3 bench/check_m2_fused_branch.py
"""
import torch
import transformers
import transformers.models.mamba2.modeling_mamba2 as mm

from selscan_torch.ssd import mamba_split_conv1d_scan_combined as selscan_split

torch.manual_seed(0)
cfg = transformers.Mamba2Config(hidden_size=256, num_hidden_layers=2, num_heads=8, head_dim=64, expand=2, state_size=64,
                                n_groups=1, chunk_size=64, conv_kernel=4, vocab_size=1024)
model = transformers.Mamba2ForCausalLM(cfg).train()
ids = torch.randint(0, 1024, (2, 128), generator=torch.Generator().manual_seed(1))


def run():
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


l0, g0 = run()  # the unfused branch (the fused name's PyTorch body answers None)
orig = mm.mamba2_split_conv1d_scan_combined
mm.mamba2_split_conv1d_scan_combined = lambda *a, **k: selscan_split(*a, **k)
try:
    l1, g1 = run()
finally:
    mm.mamba2_split_conv1d_scan_combined = orig
rel = {n: ((g1[n] - g0[n]).norm() / g0[n].norm()).item() for n in g0}
total = (sum((g1[n] - g0[n]).norm() ** 2 for n in g0) ** 0.5 / sum(g0[n].norm() ** 2 for n in g0) ** 0.5).item()
worst = max(rel, key=rel.get)
print(f"loss: unfused {l0:.7f}, fused on selscan's drop-in {l1:.7f}, relative difference {abs(l1 - l0) / abs(l0):.2e}")
print(f"gradients: relative L2 {total:.2e}, worst parameter {worst} {rel[worst]:.2e}")
