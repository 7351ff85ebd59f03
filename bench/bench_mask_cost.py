"""bench_mask_cost.py: what issue 38's padding-mask fix costs a training step under use_in_transformers().

transformers' MambaForCausalLM (a 130m-like config: hidden 768, 24 layers, state 16, random init, bf16
autocast off: float32 weights, batch 8 x 1024 tokens) on CUDA, one training step (forward, loss,
backward), 3 steps queued between two CUDA events (a host sync shows as lost run-ahead), after
warm-up, median of N rounds, the variants interleaved: attention_mask None, all ones
(the padding check: one host sync a forward), and right-padded (the masked fused block). Prints one line a
variant with the median ms and its ratio to None.

    python bench/bench_mask_cost.py [--steps 12] [--layers 24]
"""
import argparse
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seqlen", type=int, default=1024)
    a = ap.parse_args()
    from transformers import MambaConfig, MambaForCausalLM

    import selscan_torch.integrations as integ

    integ.use_in_transformers()
    cfg = MambaConfig(vocab_size=50280, hidden_size=768, num_hidden_layers=a.layers, state_size=16, use_cache=False)
    torch.manual_seed(0)
    model = MambaForCausalLM(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seqlen), device="cuda")
    ones = torch.ones_like(ids)
    padded = ones.clone()
    padded[:, -a.seqlen // 8:] = 0
    variants = {"mask None": None, "mask all ones": ones, "right-padded mask": padded}

    def step(mask):
        model.zero_grad(set_to_none=True)
        out = model(ids, attention_mask=mask, labels=ids)
        out.loss.backward()

    times = {k: [] for k in variants}
    for _ in range(3):
        for m in variants.values():
            step(m)
    torch.cuda.synchronize()
    for _ in range(a.steps):  # a round: each variant's 3 steps queued back to back (its host syncs show)
        for k, m in variants.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(3):
                step(m)
            e.record()
            torch.cuda.synchronize()
            times[k].append(s.elapsed_time(e) / 3)
    base = statistics.median(times["mask None"])
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {a.layers} layers, batch {a.batch} x {a.seqlen}, "
          f"median of {a.steps} interleaved rounds of 3 queued steps")
    for k, v in times.items():
        med = statistics.median(v)
        print(f"{k:20s} {med:8.2f} ms  {med / base:.3f}x of mask None")


if __name__ == "__main__":
    main()
