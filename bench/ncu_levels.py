"""bench/ncu_levels.py: the per-level medians of an ncu raw CSV (device_session.sh's tck step).

ncu --page raw --csv with gpu__time_duration.sum, kernels in launch order: bench_ssd_forms bf16 runs the
130m shape's backward 18 times at ssd_ckb_tc 2, then 1, then 0, each call launching ssd_ckb_loc_kernel
and ssd_ckb_kernel; each kernel's launches are split in three equal runs, one a level, and the median of
each printed in microseconds."""
import csv
import statistics
import sys


def main(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    kn, tm = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
    unit = rows[head + 1][tm] if head + 1 < len(rows) else ""
    times = {}
    for r in rows[head + 1:]:
        if len(r) <= max(kn, tm):  # the benchmark's own output lines
            continue
        try:
            v = float(r[tm].replace(",", ""))
        except ValueError:  # the units row
            continue
        name = "ssd_ckb_loc_kernel" if "loc" in r[kn] else "ssd_ckb_kernel"
        times.setdefault(name, []).append(v)
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit.strip(), 1.0)
    for name, ts in sorted(times.items()):
        n = len(ts) // 3
        if n == 0:
            print(f"{name}: {len(ts)} launches, too few for three levels")
            continue
        med = [statistics.median(ts[i * n:(i + 1) * n]) * scale for i in range(3)]
        print(f"tck | {name} | level 2 {med[0]:.1f} us | level 1 {med[1]:.1f} us | level 0 {med[2]:.1f} us | "
              f"{n} launches a level (unit {unit.strip() or '?'})")


if __name__ == "__main__":
    main(sys.argv[1])
