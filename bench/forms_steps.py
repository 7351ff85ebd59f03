#!/usr/bin/env python3
"""bench/forms_steps.py: kernel steps side by side from `bench_ssd_forms bf16` outputs (one file a build, run one after
another in one device call), the chunked forward and backward in ms and each step's change against the one before.

    python3 bench/forms_steps.py base=b_v24.txt v25=b_v25.txt v26=b_v26.txt ...

Reads the lines `| <shape> | walk fwd | chunks fwd | ...` and `backward | <shape> | walks X ms | chunks Y ms | ...`;
prints a Markdown table (ms) and the per-step changes in percent, then the last step against the first, then whether
each step kept the forward's and the backward's bits (the `forward bits` / `backward bits` lines' hashes of every
form, where both outputs have them): a step meant to keep every bit (SSD-CUDA-v33's chains, v38's loads) is checked
by those lines.
"""
import re
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
runs = []
for arg in sys.argv[1:]:
    name, _, path = arg.partition('=')
    if not path:
        sys.exit(f'forms_steps: {arg!r} is not NAME=FILE')
    text = open(path).read()
    fwd = {m[1]: float(m[3]) for m in re.finditer(r'^\| ((?:Mamba2|Nemotron)\S*) \| ([\d.]+) \| ([\d.]+) \|', text, re.M)}
    bwd = {m[1]: float(m[2]) for m in re.finditer(r'^backward \| (\S+) \| walks [\d.]+ ms \| chunks ([\d.]+) ms', text, re.M)}
    if not fwd or not bwd:
        sys.exit(f'forms_steps: no forward or backward rows in {path}')
    bits = {k: {m[1]: m[2].strip() for m in re.finditer(rf'^{k} bits \| (\S+) \|(.*)$', text, re.M)}
            for k in ('forward', 'backward')}
    runs.append((name, fwd, bwd, bits))
shapes = [s for s in runs[0][1] if all(s in f and s in b for _, f, b, _ in runs)]
head = ' | '.join([f'{s} fwd' for s in shapes] + [f'{s} bwd' for s in shapes])
print(f'| build | {head} |')
print('|---' * (1 + 2 * len(shapes)) + '|')
for name, f, b, _ in runs:
    print(f'| {name} | ' + ' | '.join([f'{f[s]:.3f}' for s in shapes] + [f'{b[s]:.3f}' for s in shapes]) + ' |')
print()

def change(a, b):
    return ' '.join(f'{(b[s] / a[s] - 1) * 100:+.1f}%' for s in shapes)

for (n0, f0, b0, _), (n1, f1, b1, _) in zip(runs, runs[1:]):
    print(f'{n0} -> {n1}: forward {change(f0, f1)}; backward {change(b0, b1)}')
(n0, f0, b0, _), (n1, f1, b1, _) = runs[0], runs[-1]
print(f'{n0} -> {n1} (all): forward {change(f0, f1)}; backward {change(b0, b1)}')
print()
for (n0, _, _, b0), (n1, _, _, b1) in zip(runs, runs[1:]):
    for kind in ('forward', 'backward'):
        h0, h1 = b0[kind], b1[kind]
        common = [s for s in shapes if s in h0 and s in h1]
        if not common:
            print(f'{n0} -> {n1}: {kind} bits not in both outputs')
            continue
        differ = [s for s in common if h0[s] != h1[s]]
        print(f'{n0} -> {n1}: {kind} bits ' + (f'equal at all {len(common)} shapes' if not differ else 'DIFFER at ' + ', '.join(differ)))
