#!/usr/bin/env python3
"""bench/tf32_split.py: the tensor cores' split of a float operand (ssd_tc_mm, selscan_cuda.cuh), emulated in NumPy.

A float operand v of an mma.sync m16n8k8 tf32 product is split into two tf32 parts; the product takes lo*b, a*lo
(both split) and hi*hi, in ssd_tc_mm's order per 8-term block, each mma an exact 8-term sum added to the float32
accumulator and rounded (round to nearest; 'rz': toward zero, as some tensor cores accumulate). Splits:
  rna        before SSD-CUDA-v24: hi = cvt.rna(v), lo = cvt.rna(v - hi)
  trunc      v24's first draft: hi = v's bits (the mma reads the top 19), lo = v - trunc(v) as it is (truncated)
  trunc+rna  v24: hi = trunc(v) (masked), lo = cvt.rna(v - hi)
against an exact float64 sum and a float32 FMA loop; errors relative to sum |a| |b|, 20000 dot products a case
(K = 64 and 128 terms; a a float over 8 binades; b bf16-exact or a float too; mixed signs or all positive: the
worst case for a rounding's bias). Prints max, median and mean (the bias) of each. bench/NOTES.md SSD-CUDA-v24.
"""
import numpy as np
rng = np.random.default_rng(12345)
M = 0xffffe000

def bits(x): return np.asarray(x, np.float32).view(np.uint32)
def fl(u): return np.asarray(u, np.uint32).view(np.float32)
def trunc(x): return fl(bits(x) & np.uint32(M))
def rna(x):  # cvt.rna.tf32.f32 for finite x
    return fl((bits(x) + np.uint32(0x1000)) & np.uint32(M))

def split(x, mode):
    x = np.asarray(x, np.float32)
    if mode == 'rna':
        hi = rna(x); lo = rna((x - hi).astype(np.float32))
    elif mode == 'trunc':
        hi = trunc(x); lo = trunc((x - hi).astype(np.float32))
    elif mode == 'trunc+rna':
        hi = trunc(x); lo = rna((x - hi).astype(np.float32))
    return hi.astype(np.float64), lo.astype(np.float64)

def rz32(x):
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f

def mma_dot(a, b, mode, sa, sb, acc_round='rn'):
    """a, b: (T, K) float32. ssd_tc_mm's order per 8-k block: al*bh, ah*bl, ah*bh; each mma = exact 8-sum + acc, rounded"""
    T, K = a.shape
    rnd = (lambda x: x.astype(np.float32)) if acc_round == 'rn' else rz32
    if sa: ah, al = split(a, mode)
    else: ah, al = a.astype(np.float64), None
    if sb: bh, bl = split(b, mode)
    else: bh, bl = b.astype(np.float64), None
    acc = np.zeros(T, np.float32)
    for k in range(0, K, 8):
        s = slice(k, k + 8)
        if sa: acc = rnd(acc.astype(np.float64) + (al[:, s] * bh[:, s]).sum(1))
        if sb: acc = rnd(acc.astype(np.float64) + (ah[:, s] * bl[:, s]).sum(1))
        acc = rnd(acc.astype(np.float64) + (ah[:, s] * bh[:, s]).sum(1))
    return acc.astype(np.float64)

def fma_dot(a, b):
    acc = np.zeros(a.shape[0], np.float32)
    for k in range(a.shape[1]):
        acc = (acc.astype(np.float64) + a[:, k].astype(np.float64) * b[:, k].astype(np.float64)).astype(np.float32)
    return acc.astype(np.float64)

def to_bf16(x):
    u = bits(np.asarray(x, np.float32)).astype(np.uint64)
    u = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16
    return fl(u.astype(np.uint32))

def gen_float(T, K, sign, binades=8):
    m = rng.uniform(1, 2, (T, K)); e = rng.integers(-binades // 2, binades // 2 + 1, (T, K))
    s = rng.choice([-1.0, 1.0], (T, K)) if sign == 'mixed' else 1.0
    return (s * m * 2.0 ** e).astype(np.float32)

def gen_bf16(T, K, sign):
    v = rng.standard_normal((T, K))
    if sign == 'pos': v = np.abs(v) + 0.05
    return to_bf16(v)

T = 20000
print(f"{'case':44s} {'split':13s} {'max|e|/S':>10s} {'med|e|/S':>10s} {'mean e/S':>10s}")
for K in (64, 128):
    for sign in ('mixed', 'pos'):
        for other in ('bf16', 'float'):
            a = gen_float(T, K, sign)
            b = gen_bf16(T, K, sign) if other == 'bf16' else gen_float(T, K, sign)
            sb = other == 'float'
            ex = (a.astype(np.float64) * b.astype(np.float64)).sum(1)
            S = (np.abs(a.astype(np.float64)) * np.abs(b.astype(np.float64))).sum(1)
            res = {'fma32': fma_dot(a, b)}
            for mode in ('rna', 'trunc', 'trunc+rna'):
                res[mode] = mma_dot(a, b, mode, True, sb)
                res[mode + '/rz'] = mma_dot(a, b, mode, True, sb, 'rz')
            name = f"K={K} a=float({sign}) b={other}{' (3 products)' if sb else ' (2 products)'}"
            for m, r in res.items():
                e = (r - ex) / S
                print(f"{name:44s} {m:13s} {np.abs(e).max():10.3g} {np.median(np.abs(e)):10.3g} {e.mean():+10.3g}")
            print()
