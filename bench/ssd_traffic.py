#!/usr/bin/env python3
"""bench/ssd_traffic.py - the chunked CUDA SSD backward's DRAM bytes by kernel, from the shapes, as
selscan_cuda.cuh >>ssd-chunk-bwd moves them, and what other designs would move (a model, not a measurement).

Usage: python3 bench/ssd_traffic.py [--batch 8] [--len 2048] [--bw 3.35e12] [--check]

The model (2-byte inputs; NP = 64 NB padded states, NB = 2 for 64 < dstate <= 128; a chain = a (batch row,
head, 64-channel tile), a state = 64 channels x NP floats a chunk of Q steps):
  S   = chains x chunks x 64 x NP x 4 bytes      one set of chunk states (Sloc, Gloc, Sin or Gout)
  Pt  = batch x L x heads x tiles x NP x 4       one of the dB / dC partials (a head's, float32)
  loc   reads x, dy (and z), B, C a group once (the heads' reads of B and C meet L2), writes Sloc, Gloc: 2S
  pass  reads 2S, writes 2S (Sin, Gout over the local parts)
  ckb   reads x, dy (z), B, C, Sin, Gout (2S); writes dx (dz), the partials (2 Pt), ddt's per-step values
  bc    reads 2 Pt, writes dB, dC
--check compares the model at the 130m shape with the DRAM bytes Nsight Compute measured (bench/NOTES.md
"SSD-CUDA: where the chunked backward's time goes, measured", twenty-ninth session, one H100).
"""
import argparse

SHAPES = {"Mamba2-130m": (24, 64, 128, 1), "Mamba2-1.3b": (64, 64, 128, 1), "Mamba2-2.7b": (80, 64, 128, 1),
          "Nemotron-H-like": (128, 64, 128, 8)}
# ncu, twenty-ninth session (a749d91; the kernels' traffic unchanged since: v20-v31 changed how, not what,
# they load), 130m, batch 8 x 2048, bf16, no z: DRAM read + write, MB
NCU_130M = {"loc": 110 + 382, "pass": 403 + 381, "ckb": 517 + 447, "bc": 403 + 10}
# bench_ssd_forms bf16, chunked backward, ms (thirty-fourth session, one H100, v30's kernels)
MEASURED_BWD_MS = {"Mamba2-130m": 2.141, "Mamba2-1.3b": 5.363, "Mamba2-2.7b": 6.650, "Nemotron-H-like": 10.432}


def kernels(b, L, H, P, N, G, Q=64, gated=False, group_sums=False, pass_folded=False, state_bytes=4):
    """{kernel: bytes} of one backward. Q: the chunk's steps; group_sums: dB / dC summed over a group's heads in
    the gradient kernel (no partials, no bc kernel); pass_folded: the states passed between chunks inside the
    local-state kernel (Sin and Gout written once, no pass kernel); state_bytes: a state's element."""
    NP = 64 * (1 if N <= 64 else 2)
    tiles = -(-P // 64)
    chunks = -(-L // Q)
    S = b * H * tiles * chunks * 64 * NP * state_bytes
    Pt = b * L * H * tiles * NP * 4
    xin = b * L * H * P * 2  # one of x, dy, z, dx, dz (2 bytes)
    bc = b * L * G * N * 2  # one of B, C, dB, dC
    small = b * L * H * 2 * 4  # dt in, ddt's per-step values (about)
    ins = xin * (3 if gated else 2) + 2 * bc + small
    k = {"loc": ins + 2 * S}
    if not pass_folded:
        k["pass"] = 4 * S
    k["ckb"] = ins + 2 * S + xin * (2 if gated else 1) + small + (2 * bc if group_sums else 2 * Pt)
    if not group_sums:
        k["bc"] = 2 * Pt + 2 * bc
    return k


DESIGNS = [
    ("now: 64-step chunks, float32 states through DRAM, a head's dB / dC partials", {}),
    ("A: dB / dC summed over a group's heads in the gradient kernel", {"group_sums": True}),
    ("B: the pass inside the local-state kernel", {"pass_folded": True}),
    ("C: 256-step chunks", {"Q": 256}),
    ("A + B", {"group_sums": True, "pass_folded": True}),
    ("A + C", {"group_sums": True, "Q": 256}),
    ("A + B + C", {"group_sums": True, "pass_folded": True, "Q": 256}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--bw", type=float, default=3.35e12, help="DRAM bytes a second (H100 SXM: 3.35e12; H200: 4.8e12)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        k = kernels(8, 2048, *SHAPES["Mamba2-130m"])
        print("| kernel | model MB | ncu MB (twenty-ninth session) | model / ncu |\n|---|---|---|---|")
        for name, mb in NCU_130M.items():
            print(f"| {name} | {k[name] / 1e6:.0f} | {mb} | {k[name] / 1e6 / mb:.2f} |")
        print(f"| all | {sum(k.values()) / 1e6:.0f} | {sum(NCU_130M.values())} | {sum(k.values()) / 1e6 / sum(NCU_130M.values()):.2f} |\n")
    print(f"batch {a.batch} x {a.len}, bf16, no z; GB a backward, and its time at {a.bw / 1e12:.2f} TB/s (the DRAM bound alone)\n")
    print("| design | " + " | ".join(SHAPES) + " |\n|---|" + "---|" * len(SHAPES))
    for label, kw in DESIGNS:
        cells = []
        for name, shp in SHAPES.items():
            t = sum(kernels(a.batch, a.len, *shp, **kw).values())
            cells.append(f"{t / 1e9:.2f} GB, {t / a.bw * 1e3:.2f} ms")
        print(f"| {label} | " + " | ".join(cells) + " |")
    if a.batch == 8 and a.len == 2048:
        print("| measured: the chunked backward now (bench_ssd_forms bf16, one H100, thirty-fourth session) | "
              + " | ".join(f"{v:.2f} ms" for v in MEASURED_BWD_MS.values()) + " |")
        # the two memory-bound kernels ran at 87 % (pass) and 89 % (bc) of the DRAM peak at 130m (ncu): their time
        # at the other shapes by the same fractions, and their share of the measured backward (what A and B remove
        # at most, besides the bytes the other kernels move)
        print("\nThe memory-bound kernels now, at the fractions of the DRAM peak ncu measured at 130m (pass 0.87, bc 0.89):\n")
        print("| kernel | " + " | ".join(SHAPES) + " |\n|---|" + "---|" * len(SHAPES))
        for kn, frac in (("pass", 0.87), ("bc", 0.89)):
            cells = []
            for name, shp in SHAPES.items():
                t = kernels(a.batch, a.len, *shp)[kn] / (frac * a.bw) * 1e3
                cells.append(f"{t:.3f} ms ({100 * t / MEASURED_BWD_MS[name]:.0f} %)")
            print(f"| {kn} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
