#!/usr/bin/env python3
"""bench/ncu_lines.py: where a CUDA kernel's time goes, by source line and function (Nsight Compute's SASS-level stall
samples mapped back to selscan_cuda.cuh through the binary's line table).

    # on the GPU machine, a build with -lineinfo (e.g. bench_ssd_forms: nvcc ... -lineinfo bench/bench_ssd_forms.cu):
    ncu --clock-control none --kernel-name regex:'ssd_ckb_kernel' --launch-count 1 --section SourceCounters \\
        --section WarpStateStats --csv --page source --print-source sass ./bench_ssd_forms bf16 > src.csv
    # here, on the object file that was linked (cuobjdump / nvdisasm from the nvidia-cuda-cuobjdump / -nvdisasm wheels):
    cuobjdump -xelf all bench_ssd_forms.o && nvdisasm -gi -c bench_ssd_forms.sm_90.cubin > dis.txt
    python3 bench/ncu_lines.py src.csv dis.txt ssd_ckb_kernelI13__nv_bfloat16Li2ELb0E

The CSV's first kernel is matched, instruction by instruction, to the disassembly of the function whose mangled name
contains the third argument (the CSV's addresses less its first one are the cubin's offsets). A line inlined into
another is counted at the innermost line; "function" is the selscan_cuda.cuh function that line is in (other files by
name). Prints: samples and executed instructions by function with their top stall reasons, the top lines, the stall
reasons overall, the opcode mix.
"""
import collections
import csv
import os
import re
import sys

if len(sys.argv) != 4:
    sys.exit(__doc__)
csv_path, dis_path, want = sys.argv[1:]
here = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(here, '..', 'selscan_cuda.cuh')).read().split('\n')

# the enclosing function of each selscan_cuda.cuh line: the last definition line above it
func_of, last = {}, '?'
defn = re.compile(r'^(template\s*<.*>\s*)?(static\s+)?(__device__|__global__|__host__|inline|__forceinline__)[^;]*$')
for i, line in enumerate(src, 1):
    if defn.match(line):
        names = [n for n in re.findall(r'(\w+)\s*\(', line) if n not in ('__launch_bounds__', 'template')]
        last = names[0] if names else last
    func_of[i] = last

def where(f, n):  # (file, line) -> label
    return (f'{func_of.get(n, "?")}', f'{n}') if f.endswith('selscan_cuda.cuh') else (os.path.basename(f), f'{os.path.basename(f)}:{n}')

# the disassembly: offset -> (innermost (file, line), instruction)
dis = open(dis_path).read().split('\n')
head = next((i for i, l in enumerate(dis) if l.startswith('//---') and '.text.' in l and want in l), None)
if head is None:
    sys.exit(f'ncu_lines: no function containing {want!r} in {dis_path}')
loc, cur, fresh = {}, None, True
for l in dis[head + 1:]:
    if l.startswith('//---'):
        break
    m = re.match(r'\s*//## File "(.*?)", line (\d+)', l)
    if m:
        if fresh:  # the first comment of a block is the innermost location
            cur, fresh = (m.group(1), int(m.group(2))), False
        continue
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$', l)
    if m:
        loc[int(m.group(1), 16)] = (cur, m.group(2))
        fresh = True

rows = list(csv.reader(open(csv_path)))
h = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
hdr = rows[h]
data = []
for r in rows[h + 1:]:
    if not r or not r[0].startswith('0x'):
        break  # (the next kernel's table)
    data.append(r)
col = {c: i for i, c in enumerate(hdr)}
stalls = [c for c in hdr if c.startswith('stall_') and '(Not Issued)' not in c]
base = int(data[0][0], 16)
samples = collections.Counter(); insts = collections.Counter(); lines = collections.Counter()
reasons = collections.defaultdict(collections.Counter); overall = collections.Counter(); ops = collections.Counter()
missing = 0
for r in data:
    off = int(r[0], 16) - base
    if off not in loc:
        missing += 1
        continue
    (f, n), ins = loc[off] if loc[off][0] else (('?', 0), loc[off][1])
    fn, ln = where(f, n)
    s, e = int(r[col['Warp Stall Sampling (All Samples)']] or 0), int(r[col['Instructions Executed']] or 0)
    samples[fn] += s; insts[fn] += e; lines[(fn, ln)] += s
    for c in stalls:
        v = int(r[col[c]] or 0)
        reasons[fn][c] += v; overall[c] += v
    ops[re.sub(r'^@!?U?P\w+\s+', '', ins).split(' ')[0].split('.')[0]] += e
S, E = sum(samples.values()) or 1, sum(insts.values()) or 1
print(f'{len(data)} instructions, {S} stall samples, {E} warp instructions executed; unmatched offsets {missing}')
print('\n% samples  % instructions  function: its top stall reasons (% of its samples)')
for fn, s in samples.most_common(25):
    top = ', '.join(f'{c[6:]} {v * 100 / max(s, 1):.0f}' for c, v in reasons[fn].most_common(3))
    print(f'{s * 100 / S:8.1f} {insts[fn] * 100 / E:14.1f}  {fn}: {top}')
print('\n% samples  line')
for (fn, ln), s in lines.most_common(30):
    text = src[int(ln) - 1].strip()[:90] if ln.isdigit() else ''
    print(f'{s * 100 / S:8.1f}  {ln} [{fn}] {text}')
print('\nstall reasons overall (% of samples): ' + ', '.join(f'{c[6:]} {v * 100 / S:.1f}' for c, v in overall.most_common(10)))
print('opcodes (% of instructions executed): ' + ', '.join(f'{o} {n * 100 / E:.1f}' for o, n in ops.most_common(20)))
