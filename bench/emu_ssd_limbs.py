"""The SSD's chunked form with its matrix products on bf16 tensor cores, emulated in numpy (issue 40; no GPU):
how many bf16 limbs each float32 operand needs for the results >>ssd-api promises (computed in float32, rounded
once to the output's dtype), before a tensor-core kernel is written (bench/NOTES.md SSD-CUDA-v8's next step (2):
operands split once into shared memory).

The chunked form and the exact walks are bench/emu_ssd_chunk_bwd.py's (one (batch row, head) of a Mamba2-like
layer: headdim 64, dstate 128, chunks of 64 steps, the decay's pair matrix from C B^T and dy x^T in double and its
sums in double, as the CUDA backward in chunks computes them; the last row takes that pair matrix's two products
on the tensor cores too, and the gated rows (z: dy0 = dy z sigmoid(z) is a float32 operand) too); here every other matrix product goes through
limb_mm: an operand that is exactly a bf16 value (x, B, C and dy of a bf16 problem) is one bf16 operand, any other
(the chunk's weights C B^T o decay o dt, the states, their gradients) the sum of k bf16 limbs (v = l0 + l1 + ..,
l_i = bf16(v - l0 - .. - l_{i-1}), round to nearest even), and the products of the limb pairs (i, j) with
i + j < max(k_a, k_b) summed in one float32 accumulation (as an mma.sync accumulator sums them; numpy's float32
product sums in float32 too, in another order). k = 0: plain float32 products (the float32 units).

Prints, for bf16 problems (x, B, C, dy rounded to bf16 first) and float32 problems, each k, the norm-wise relative
error against the exact float64 walk of the same inputs, before any rounding to the output dtype: y, the final
state, dx, dB, dC, ddt, dA, dinitial_state; then the worst over seeds, paddings and initial states, and the
tensor work a chunk takes relative to one bf16 product per product (the limb pairs). The bounds these are held to:
tests/test_cuda_ssd.cu's (a bf16 problem: 1e-5 + 2 u_bf16 = 7.8e-3 for y and the gradients, 1e-5 for the float32
final state; a float32 problem: 1e-5 for y, 1e-4 for the gradients) and test_ssd.py's one bf16 rounding (3.9e-3)
after the output's own rounding, which leaves the products about 1e-3 at most.

    python3 bench/emu_ssd_limbs.py [L] [seeds]     (L 512, 2 seeds: about a minute)
"""
import sys

import numpy as np

from emu_ssd_chunk_bwd import chunked, rel, walks

f32 = np.float32


def bf16(v):
    """v rounded to the nearest bf16 value (ties to even), as float32; NaN stays NaN"""
    u = np.ascontiguousarray(v, f32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(f32)
    return np.where(np.isnan(v), v, r).astype(f32)


def limbs(v, k):
    out, r = [], np.asarray(v, f32)
    for _ in range(k):
        h = bf16(r)
        out.append(h)
        r = (r - h).astype(f32)
    return out


class LimbMM:
    """A matrix product on bf16 tensor cores with k limbs for each operand that is not exactly bf16; counts the
    limb-pair products against one product each (the tensor work's factor)."""

    def __init__(self, k):
        self.k, self.pairs, self.calls = k, 0, 0

    def __call__(self, a, b):
        a, b = np.asarray(a, f32), np.asarray(b, f32)
        self.calls += 1
        if self.k == 0:
            self.pairs += 1
            return a @ b
        la = [a] if np.array_equal(bf16(a), a) else limbs(a, self.k)
        lb = [b] if np.array_equal(bf16(b), b) else limbs(b, self.k)
        top = max(len(la), len(lb))
        pa, pb = zip(*[(ai, bj) for i, ai in enumerate(la) for j, bj in enumerate(lb) if i + j < top])
        self.pairs += len(pa)
        return np.concatenate(pa, axis=1) @ np.concatenate(pb, axis=0)  # one float32 accumulation


def run(seed, L, lpad, with_h0, problem, k, pair64=True, P=64, N=128):
    rng = np.random.default_rng(seed)
    A = float(np.float32(-rng.uniform(0.2, 4.0)))
    dt = np.asarray(np.log1p(np.exp(rng.uniform(-3, 0.5, L))), f32)
    x = rng.uniform(-1, 1, (L, P))
    x[:lpad] = 0
    B, C, dy = rng.uniform(-1, 1, (L, N)), rng.uniform(-1, 1, (L, N)), rng.uniform(-1, 1, (L, P))
    h0 = rng.uniform(-1, 1, (P, N)) if with_h0 else np.zeros((P, N))
    x, B, C, dy, h0 = (np.asarray(v, f32) for v in (x, B, C, dy, h0))
    if problem.startswith("bf16"):  # a bf16 problem's operands (dy: the gradient of a bf16 y); dt, A, states float32
        x, B, C, dy = (bf16(v) for v in (x, B, C, dy))
    if problem == "bf16 with z":  # the gate: the scan sees dy0 = dy z sigmoid(z), a float32 value
        z = bf16(rng.uniform(-3, 3, (L, P)).astype(f32))
        dy = (dy * (z / (1 + np.exp(-z)))).astype(f32)
    a = np.exp(dt.astype(np.float64) * np.float32(A))
    ex = walks(x, B, C, dy, dt, a, h0, np.float64)
    ddt_ex = ex["dexp"] + A * ex["g"]
    dA_ex = float(np.sum(dt.astype(np.float64) * ex["g"]))
    mm = LimbMM(k)
    ck = chunked(x, B, C, dy, dt, A, h0, SUMS=np.float64, pair64=pair64, mm=mm)
    ddt_ck = ck["dexp"].astype(np.float64) + A * ck["da"].astype(np.float64)
    dA_ck = float(np.sum(dt.astype(np.float64) * ck["da"].astype(np.float64)))
    return {"y": rel(ck["y"], ex["y"]), "hT": rel(ck["hT"], ex["hT"]), "dx": rel(ck["dx"], ex["dx"]),
            "dB": rel(ck["dB"], ex["dB"]), "dC": rel(ck["dC"], ex["dC"]), "ddt": rel(ddt_ck, ddt_ex),
            "dA": abs(dA_ck - dA_ex) / abs(dA_ex), "dh0": rel(ck["dh0"], ex["dh0"])}, mm.pairs / mm.calls


def main():
    L = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = ([(p, k, True) for p in ("bf16", "f32") for k in (0, 1, 2, 3)] + [("bf16", 2, False)]
            + [("bf16 with z", k, False) for k in (0, 2, 3)])
    for problem, k, pair64 in runs:
        worst, work = {}, 0.0
        for seed in range(seeds):
            for lpad in (0, L // 3):
                for with_h0 in (False, True):
                    r, work = run(seed, L, lpad, with_h0, problem, k, pair64)
                    for n, v in r.items():
                        worst[n] = max(worst.get(n, 0.0), v)
        what = "float32 products" if k == 0 else f"{k} bf16 limb{'s' if k > 1 else ''}"
        what += "" if pair64 else ", the pair matrix's C B^T and dy x^T " + ("in float32 too" if k == 0 else "on tensor cores too")
        print(f"{problem} problem, {what:16s} (tensor work x{work:.2f} a product): "
              + "  ".join(f"{n} {v:.2g}" for n, v in worst.items()), flush=True)
    print(f"L {L}, worst over {seeds} seeds x 2 paddings x 2 initial states, before rounding to the output dtype")


if __name__ == "__main__":
    main()
