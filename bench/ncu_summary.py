"""Prints the lines of an Nsight Compute CSV (`ncu --set full --csv --page details ...`) that the SSD kernels'
analysis reads (bench/NOTES.md): per kernel launch its name, grid and block, duration, throughputs, occupancy,
registers and shared memory, issue rate, and the rules with an estimated speedup (largest first).

    python3 bench/ncu_summary.py ncu.csv
"""
import csv
import sys

KEEP = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "L1/TEX Hit Rate",
        "L2 Hit Rate", "Registers Per Thread", "Dynamic Shared Memory Per Block", "Theoretical Occupancy",
        "Achieved Occupancy", "Issue Slots Busy", "Eligible Warps Per Scheduler", "Warp Cycles Per Issued Instruction",
        "Executed Instructions")


def main(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"ncu_summary: no metrics table in {path} (did ncu profile a kernel?)")
    rows = list(csv.reader(lines[start:]))
    ix = {h: i for i, h in enumerate(rows[0])}
    launches = {}
    for r in rows[1:]:
        if len(r) >= ix["Metric Value"] + 1:  # (metric rows end there; rule rows carry the rule's columns)
            launches.setdefault(r[ix["ID"]], []).append(r)
    for lid, rs in launches.items():
        r0 = rs[0]
        print(f"\n[{lid}] {r0[ix['Kernel Name']][:110]}  grid {r0[ix['Grid Size']]} block {r0[ix['Block Size']]}")
        seen = set()
        for r in rs:
            name = r[ix["Metric Name"]]
            if name in KEEP and name not in seen:
                seen.add(name)
                print(f"  {name:40s} {r[ix['Metric Value']]:>20s} {r[ix['Metric Unit']]}")
        rules = sorted(((float(r[ix["Estimated Speedup"]].replace(",", "") or 0), r[ix["Rule Name"]],
                         r[ix["Rule Description"]]) for r in rs
                        if len(r) == len(rows[0]) and r[ix["Rule Name"]] and r[ix["Estimated Speedup"]]),
                       reverse=True)
        for sp, name, desc in rules[:6]:
            print(f"  rule {name} (est. {sp:g} %): {desc[:220]}")


if __name__ == "__main__":
    main(sys.argv[1])
