#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Side-by-side table of where the kernels of an Nsight Compute raw-page
export spend their SM's pipes and memories: every metric whose name holds
one of the words below (the tensor pipe's gmma cycles, shared memory's
wavefronts and banks, L1/L2/DRAM throughput, issue activity), one column a
kernel. Which metrics a report has depends on the sections it collected
(SpeedOfLight, ComputeWorkloadAnalysis, MemoryWorkloadAnalysis and
MemoryWorkloadAnalysis_Tables give these); metric names differ between ncu
versions, so they are matched by words, not listed.

    ncu -i report.ncu-rep --page raw --csv > raw.csv
    python3 bench/ncu_pipes.py raw.csv [WORD ...]

The question it was written for (notes/kernel-log.md ws7): is the ws90
backward bound by shared-memory bandwidth, its SS products' operand reads
beside the copies, where cuDNN's is not?
"""
import csv
import sys

import ncu_stalls  # number(): ncu's CSV figures

WORDS = ("gmma", "pipe_tensor", "mem_shared", "data_bank", "l1tex__throughput", "lts__throughput",
         "dram__throughput", "sm__throughput", "issue_active", "inst_executed_pipe_uniform",
         "gpu__time_duration", "launch__registers", "launch__grid_size", "launch__block_size",
         "shared_mem_per_block")


def short(name):
    return name.split("(")[0].split("<")[0].split("::")[-1].strip()[:30]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    words = tuple(sys.argv[2:]) or WORDS
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3:
        sys.exit(f"{sys.argv[1]}: no kernel rows (was anything profiled?)")
    header, units, kernels = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        sys.exit(f"{sys.argv[1]}: no 'Kernel Name' column: not an ncu --page raw --csv export")
    names = [short(k[col["Kernel Name"]]) for k in kernels]
    chosen = [n for n in header if any(w in n for w in words)]
    if not chosen:
        sys.exit(f"{sys.argv[1]}: no metric holds any of {', '.join(words)}")
    width = max(len(n) + len(units[col[n]]) + 3 for n in chosen)
    print(" " * width + "".join(f"  {n:>30}" for n in names))
    for n in chosen:
        values = [ncu_stalls.number(k[col[n]]) for k in kernels]
        if all(v is None or v == 0 for v in values):
            continue
        label = f"{n} ({units[col[n]]})" if units[col[n]] else n
        cells = "".join(f"  {'-' if v is None else f'{v:.4g}':>30}" for v in values)
        print(f"{label:<{width}}{cells}")


if __name__ == "__main__":
    main()
