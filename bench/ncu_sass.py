#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sums Nsight Compute's per-instruction source page by opcode.

    ncu -i rep.ncu-rep --kernel-name regex:K --page source --csv --print-source sass > k.csv
    bench/ncu_sass.py k.csv [--top 25]

For each opcode (LDSM kept with its shape, since .T and plain loads differ)
it prints how many SASS instructions there are, how often they executed,
their share of the warp-stall samples and the stall reasons that dominate
them, and their shared-memory wavefronts against the ideal count (the excess
is bank conflicts). scripts/gpu_run.sh PROFILE=1 runs it on fatune's
backward and on FlashAttention-2's.
"""
import argparse
import collections
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_stalls  # noqa: E402  (its number(): ncu's CSV figures)

REASONS = ["stall_barrier", "stall_lg", "stall_mio", "stall_short_sb", "stall_long_sb", "stall_math",
           "stall_wait", "stall_not_selected", "stall_selected", "stall_dispatch", "stall_branch_resolving",
           "stall_no_inst", "stall_drain"]


def number(x):
    """ncu's figure as a float ("1,234.5"), 0 where the cell is empty or text."""
    return ncu_stalls.number(x) or 0.0


def opcode(sass):
    words = sass.split()
    if not words:
        return ""
    if words[0].startswith("@") and len(words) > 1:
        words = words[1:]
    op = words[0].rstrip(";")
    return op if op.startswith("LDSM") else op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv, newline="")))
    header = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
    if header is None:
        sys.exit(f"{args.csv}: no source-page header (Address, Source, ...)")
    name = next((r[1] for r in rows[:header] if r and r[0] == "Kernel Name" and len(r) > 1), "?")
    col = {h: i for i, h in enumerate(rows[header])}

    def get(r, key):
        i = col.get(key)
        return number(r[i]) if i is not None and i < len(r) else 0.0

    ops = collections.defaultdict(collections.Counter)
    for r in rows[header + 1:]:
        if len(r) <= col["Source"] or r[0] == "Kernel Name":
            continue
        c = ops[opcode(r[col["Source"]])]
        c["count"] += 1
        c["executed"] += get(r, "Instructions Executed")
        c["samples"] += get(r, "Warp Stall Sampling (All Samples)")
        c["wavefronts"] += get(r, "L1 Wavefronts Shared")
        c["ideal"] += get(r, "L1 Wavefronts Shared Ideal")
        for reason in REASONS:
            c[reason] += get(r, reason)
    total = sum(c["samples"] for c in ops.values()) or 1.0
    executed = sum(c["executed"] for c in ops.values())
    print(f"{name}: {executed / 1e6:.1f} M warp instructions executed, {total:.0f} stall samples")
    print(f"{'opcode':24s} {'sass':>5s} {'exec M':>8s} {'samples':>8s}  {'smem wf M':>9s} {'ideal M':>8s}  top stalls")
    for op, c in sorted(ops.items(), key=lambda kv: -kv[1]["samples"])[: args.top]:
        top = sorted(((c[r], r[6:]) for r in REASONS if c[r] > 0), reverse=True)[:3]
        stalls = ", ".join(f"{r} {v / total * 100:.1f}%" for v, r in top)
        print(f"{op:24s} {c['count']:5.0f} {c['executed'] / 1e6:8.2f} {c['samples'] / total * 100:7.1f}%"
              f"  {c['wavefronts'] / 1e6:9.2f} {c['ideal'] / 1e6:8.2f}  {stalls}")


if __name__ == "__main__":
    main()
