#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Side-by-side table of the kernels in an Nsight Compute raw-page export:
duration, instructions, cycles per issued instruction and what the warps
stalled on (cycles per issued instruction, per reason), one column per
kernel. Reasons under 0.05 cycles in every kernel are left out.

    ncu -i report.ncu-rep --page raw --csv > raw.csv
    python3 bench/ncu_stalls.py raw.csv

The report needs the WarpStateStats section (the stall reasons), and
SpeedOfLight and InstructionStats for the first rows.
"""
import csv
import sys

STALL = "smsp__average_warps_issue_stalled_"
SUFFIX = "_per_issue_active.ratio"
DURATION = "gpu__time_duration.sum"  # in the unit the export's second row names
TO_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
         "s": 1e3, "second": 1e3}
SUMMARY = [
    ("instructions (G)", "smsp__inst_executed.sum", 1e-9),
    ("cycles / issued instruction", "smsp__average_warp_latency_per_inst_issued.ratio", 1.0),
]
MIN_STALL = 0.05


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(f))
    header, units, kernels = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    names = [k[col["Kernel Name"]].split("(")[0].split("<")[0].split("::")[-1].strip()[:28] for k in kernels]
    lines = []
    if DURATION in col and units[col[DURATION]] in TO_MS:
        scale = TO_MS[units[col[DURATION]]]
        lines.append(("duration (ms)", [v * scale if v is not None else None
                                        for v in (number(k[col[DURATION]]) for k in kernels)]))
    for label, metric, scale in SUMMARY:
        if metric in col:
            values = [number(k[col[metric]]) for k in kernels]
            lines.append((label, [v * scale if v is not None else None for v in values]))
    for name in header:
        if name.startswith(STALL) and name.endswith(SUFFIX):
            values = [number(k[col[name]]) for k in kernels]
            if any(v is not None and v >= MIN_STALL for v in values):
                lines.append(("stall " + name[len(STALL):-len(SUFFIX)], values))
    width = max(len(label) for label, _ in lines)
    print(" " * width + "".join(f"  {n:>28}" for n in names))
    for label, values in lines:
        cells = "".join(f"  {v:28.3f}" if v is not None else f"  {'-':>28}" for v in values)
        print(f"{label:<{width}}{cells}")


if __name__ == "__main__":
    main()
