"""Where a hybrid model's training step goes: the Mamba mixers' share (forward + backward) of a
transformers Jamba / Zamba training step, on each backend, and what that share bounds.

The models are bench_models.py's (HYBRID_MODELS: jamba-small, zamba-small, random init). A step is
forward + backward of the causal-LM loss (no optimizer). Timed twice per backend: the plain step
(CUDA events around it), then the step with module hooks that put CUDA events around every Mamba
mixer's forward (module hooks) and backward (tensor hooks on its output and input); the hooks'
own cost is the difference of the two step times, printed. From the mixers' time M and the step's T:
R = T - M, the time outside the mixers (attention, MLP, norms, embeddings, loss), which no mixer
kernel changes. Where two backends run in one process, the step ratio x = T_peer / T_selscan and the
mixer ratio M_peer / M_selscan are printed; with one backend, the mixer speed-up a step ratio goal
(--goal, default 1.2) needs: M_peer / M_selscan >= goal + (goal - 1) R / M_selscan.

  PYTHONPATH=bindings/torch[:peers] python3 bench/profile_hybrid_mixers.py \\
      [--backends selscan[,mamba_ssm]] [--models jamba-small,zamba-small] [--lens 2048,256] \\
      [--precision fp32|bf16-autocast] [--iters 10] [--warmup 3] [--quick]
"""
import argparse
import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models as bm  # noqa: E402  (HYBRID_MODELS, HybridBackend: one owner of the configs)


def mixers(model):
    return [m for m in model.modules() if type(m).__name__.endswith("MambaMixer")]


class MixerClock:
    """CUDA events around every mixer's forward (module hooks) and backward (tensor hooks: its
    output's gradient arriving starts it, its input's gradient computed ends it; the mixers take
    hidden_states by keyword, which module backward hooks do not see); total() after a synchronize."""

    def __init__(self, model):
        self.pairs, self.handles, self.open = [], [], {}
        for m in mixers(model):
            self.handles += [m.register_forward_pre_hook(self._pre, with_kwargs=True),
                             m.register_forward_hook(self._post)]

    @staticmethod
    def _event():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    @staticmethod
    def _first_tensor(x):
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(x, (tuple, list)):
            return next((t for t in x if isinstance(t, torch.Tensor)), None)
        return None

    def _pre(self, mod, args, kwargs):
        self.open[(id(mod), "f")] = self._event()
        x = self._first_tensor(args) if args else kwargs.get("hidden_states")
        if x is not None and x.requires_grad:
            key = (id(mod), "b")

            def end(grad):
                if key in self.open:
                    self.pairs.append(("b", self.open.pop(key), self._event()))
            x.register_hook(end)

    def _post(self, mod, args, out):
        self.pairs.append(("f", self.open.pop((id(mod), "f")), self._event()))
        y = self._first_tensor(out)
        if y is not None and y.requires_grad:
            key = (id(mod), "b")

            def start(grad):
                self.open[key] = self._event()
            y.register_hook(start)

    def total(self):
        f = sum(a.elapsed_time(b) for k, a, b in self.pairs if k == "f")
        b = sum(a.elapsed_time(b) for k, a, b in self.pairs if k == "b")
        self.pairs = []
        return f / 1e3, b / 1e3

    def remove(self):
        for h in self.handles:
            h.remove()


def step(model, ids, amp):
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext()
    with ctx:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss.item()


def timed(model, ids, amp, iters, warmup, clock=None):
    for _ in range(warmup):
        step(model, ids, amp)
    torch.cuda.synchronize()
    if clock:
        clock.total()
    times, mf, mb = [], [], []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step(model, ids, amp)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
        if clock:
            f, bw = clock.total()
            mf.append(f)
            mb.append(bw)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return med(times), (med(mf) if mf else None), (med(mb) if mb else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="selscan")
    ap.add_argument("--models", default="jamba-small,zamba-small")
    ap.add_argument("--lens", default="2048,256", help="training lengths (batch: the model's, 4)")
    ap.add_argument("--precision", choices=["fp32", "bf16-autocast"], default="fp32")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--goal", type=float, default=1.2)
    ap.add_argument("--quick", action="store_true", help="the quick configs, L 32 (tests the script)")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs a GPU (CUDA events)"
    bm.ARGS = argparse.Namespace(quick=args.quick, device="cuda")
    amp = args.precision == "bf16-autocast"
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {args.precision}, median of {args.iters}")
    print("| model | batch x L | backend | step T (s) | with hooks (s) | mixers fwd + bwd M (s) | M / T | "
          "R = T - M (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        mod, model = bm.build_hybrid(name)
        model.train()
        batch = 2 if args.quick else bm.HYBRID_MODELS[name][5]
        for L in ([32] if args.quick else [int(x) for x in args.lens.split(",")]):
            ids = torch.randint(1, model.config.vocab_size, (batch, L), device="cuda",
                                generator=torch.Generator("cuda").manual_seed(0))
            rows = {}
            for bn in args.backends.split(","):
                b = bm.HybridBackend(bn, mod)
                why = b.available()
                if why is not None:
                    print(f"| {name} | {batch} x {L} | {bn} | skipped: {why} |||||")
                    continue
                with b:
                    T, _, _ = timed(model, ids, amp, args.iters, args.warmup)
                    clock = MixerClock(model)
                    try:
                        Th, f, bw = timed(model, ids, amp, args.iters, args.warmup, clock)
                    finally:
                        clock.remove()
                M = f + bw
                rows[bn] = (T, M)
                print(f"| {name} | {batch} x {L} | {bn} | {T:.4f} | {Th:.4f} | {f:.4f} + {bw:.4f} = {M:.4f} | "
                      f"{M / T:.0%} | {T - M:.4f} |", flush=True)
            if "selscan" in rows and "mamba_ssm" in rows and rows["selscan"][1] > 0:
                (Ts, Ms), (Tp, Mp) = rows["selscan"], rows["mamba_ssm"]
                print(f"|  | {batch} x {L} | step x = {Tp / Ts:.2f}, mixer x = {Mp / Ms:.2f} |||||")
            elif "selscan" in rows and rows["selscan"][1] > 0:  # (no mixer found: nothing to bound)
                Ts, Ms = rows["selscan"]
                need = args.goal + (args.goal - 1) * (Ts - Ms) / Ms
                print(f"|  | {batch} x {L} | a step ratio of {args.goal}x needs mixers {need:.2f}x faster than the "
                      f"peer's |||||")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
