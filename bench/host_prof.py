"""bench/host_prof.py: where a selscan_torch call's host time goes, on a machine without perf (the GPU
machines): bench/host_prof.c samples the stacks, this runs the calls and resolves the samples with nm.

    cc -O2 -shared -fPIC -o build/libhostprof.so bench/host_prof.c
    LD_PRELOAD=$PWD/build/libhostprof.so PYTHONPATH=<package> python3 bench/host_prof.py run CASE OUT.raw
    python3 bench/host_prof.py report A.raw [B.raw]     # B given: B - A, per call

CASE: bench/host_cost.py's cases by key: fwd (the scan forward without grad, b1 dim 64 L 16 N 16),
fwdgrad (with grad), fwdbwd (forward + sum().backward()), ssu (selective_state_update, b1 dim 1536
N 16 float32), step (torch.ops.selscan.step, the same sizes). The report gives microseconds of the calling thread's wall time a call by shared
object and by function (self: the interrupted function; total: on the stack), from samples at 10 kHz
of wall time, each standing for the loop's wall time (less the sampler's own) over the samples."""
import bisect
import collections
import ctypes
import os
import subprocess
import sys

HZ = 10000


def run(case, out, calls=20000):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import host_cost  # the cases (and selscan_torch as PYTHONPATH finds it)

    ss = host_cost.ss
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    fn = {key: f for _, key, f in host_cost.cases(dev)}[case]
    if case == "fwdbwd":
        calls //= 10
    for _ in range(500):
        fn()
    sync()
    lib = ctypes.CDLL(None)
    lib.hostprof_start.argtypes = [ctypes.c_int]
    lib.hostprof_stop.argtypes = [ctypes.c_char_p]
    lib.hostprof_stop.restype = ctypes.c_long
    if lib.hostprof_start(HZ) != 0:
        sys.exit("host_prof: hostprof_start failed")
    for _ in range(calls):
        fn()
    sync()
    n = lib.hostprof_stop(out.encode())
    with open(out, "a") as f:
        f.write(f"calls {calls} case {case} package {ss.__file__}\n")
    print(f"host_prof: {case}: {calls} calls, {n} samples -> {out}")


class Symbols:
    """Functions of one ELF file by address (nm: the symbol table, else the dynamic one)."""

    def __init__(self, path):
        self.addrs, self.names = [], []
        seen = {}
        for args in (["nm", "-C", "--defined-only", path], ["nm", "-D", "-C", "--defined-only", path]):
            try:
                text = subprocess.run(args, capture_output=True, text=True, timeout=300).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in text.splitlines():
                p = line.split(" ", 2)
                if len(p) == 3 and p[1] in "TtWwi":
                    seen.setdefault(int(p[0], 16), p[2])
        for a in sorted(seen):
            self.addrs.append(a)
            self.names.append(seen[a])
        self.exec_ = False
        try:
            with open(path, "rb") as f:
                h = f.read(18)
            self.exec_ = h[16] == 2  # ET_EXEC: addresses are absolute
        except OSError:
            pass

    def name(self, vaddr):
        i = bisect.bisect_right(self.addrs, vaddr) - 1
        return self.names[i] if i >= 0 else f"?{vaddr:x}"


def load(raw):
    maps, samples, meta, seconds = [], [], {}, 0.0
    with open(raw) as f:
        lines = f.read().splitlines()
    i = 1
    while not lines[i].startswith("samples "):
        p = lines[i].split(None, 5)
        if len(p) == 6 and p[5].startswith("/"):
            lo, hi = (int(v, 16) for v in p[0].split("-"))
            maps.append((lo, hi, int(p[2], 16), p[5]))
        i += 1
    seconds = float(lines[i].split()[3])
    for line in lines[i + 1:]:
        if line.startswith("calls "):
            p = line.split()
            meta = {"calls": int(p[1]), "case": p[3], "package": p[5]}
        elif line:
            samples.append([int(v, 16) for v in line.split()])
    meta["seconds"] = seconds
    return maps, samples, meta


def resolve(raw, cache):
    maps, samples, meta = load(raw)
    base = {}
    for lo, hi, off, path in maps:
        if off == 0:
            base[path] = min(base.get(path, lo), lo)
    starts = sorted(maps)
    los = [m[0] for m in starts]

    def where(a):
        i = bisect.bisect_right(los, a) - 1
        if i < 0 or a >= starts[i][1]:
            return "[anon]", "[anon]"
        path = starts[i][3]
        if path not in cache:
            cache[path] = Symbols(path)
        s = cache[path]
        v = a if s.exec_ else a - base.get(path, starts[i][0])
        return os.path.basename(path), s.name(v)

    per_call = meta["seconds"] * 1e6 / max(1, len(samples)) / meta["calls"]  # us of wall time a sample stands for, a call
    self_fn, total_fn, self_obj = collections.Counter(), collections.Counter(), collections.Counter()
    for s in samples:
        frames = [where(a) for a in s]
        self_fn[frames[0]] += per_call
        self_obj[frames[0][0]] += per_call
        for fr in set(frames):
            total_fn[fr] += per_call
    return meta, len(samples) * per_call, self_obj, self_fn, total_fn


def short(fr, width=110):
    obj, fn = fr
    s = f"{obj}: {fn}"
    return s if len(s) <= width else s[: width - 3] + "..."


def report(paths):
    cache = {}
    rs = [resolve(p, cache) for p in paths]
    for p, (meta, tot, so, sf, tf) in zip(paths, rs):
        print(f"\n== {p}: {meta['case']}, {meta['calls']} calls, {tot:.2f} us a call ({meta['package']})")
        print("by object (self):")
        for k, v in so.most_common(12):
            print(f"  {v:7.2f}  {k}")
        print("by function (self):")
        for k, v in sf.most_common(30):
            print(f"  {v:7.2f}  {short(k)}")
        print("by function (total, on the stack):")
        for k, v in tf.most_common(60):
            print(f"  {v:7.2f}  {short(k)}")
    if len(rs) == 2:
        (ma, ta, soa, sfa, tfa), (mb, tb, sob, sfb, tfb) = rs
        print(f"\n== {paths[1]} - {paths[0]}: {tb - ta:+.2f} us a call ({ta:.2f} -> {tb:.2f})")
        for title, a, b, n in (("by object (self)", soa, sob, 12), ("by function (self)", sfa, sfb, 30),
                               ("by function (total)", tfa, tfb, 50)):
            print(title + ":")
            keys = set(a) | set(b)
            for k in sorted(keys, key=lambda k: -abs(b[k] - a[k]))[:n]:
                print(f"  {b[k] - a[k]:+7.2f}  ({a[k]:6.2f} -> {b[k]:6.2f})  {short(k) if isinstance(k, tuple) else k}")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], *(int(v) for v in sys.argv[4:5]))
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "report":
        report(sys.argv[2:])
    else:
        sys.exit(__doc__)
