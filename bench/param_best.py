#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A parameter's A/B read from one tuning run: for each problem, the fastest
checked variant of a family with each value of PARAM (the rest of the
space free), side by side, and the ratio of each value's best to the
baseline value's; then the geometric mean of each ratio over the problems
and how many checks of each value failed. Every value met the same GPU,
clocks and inputs, so the ratio is the parameter's effect where the tuner
would pick it.

Only full timings (at least 20 repetitions) are compared; tune with
--exhaustive, or a value whose best was eliminated after screening shows
its screening time, marked '*'.

    bench/param_best.py DB --family ws90 --param SMEM_O [--base 0]
"""
import argparse
import math
import sqlite3

FULL_REPS = 20


def param_value(params, name):
    """NAME's value in a variant's parameters ("BLOCK_M=128 BLOCK_N=176 ..."), or None."""
    for kv in params.split():
        k, _, v = kv.partition("=")
        if k == name:
            return v
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db")
    ap.add_argument("--family", required=True)
    ap.add_argument("--param", required=True, help="the parameter's name, as fatune --list prints it")
    ap.add_argument("--base", default=None, help="the value the others are compared with (default: the smallest)")
    a = ap.parse_args()
    con = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT p.direction, p.dtype, p.mask, p.head_dim, p.seqlen_q, p.seqlen_k, v.params, v.name,"
        " t.median_ms, t.reps"
        " FROM timings t JOIN variants v ON v.id = t.variant_id JOIN problems p ON p.id = t.problem_id"
        " WHERE t.retired = 0 AND v.family = ?"
        " AND EXISTS (SELECT 1 FROM checks c WHERE c.variant_id = v.id AND c.problem_id = p.id"
        "             AND c.passed = 1 AND c.retired = 0)", (a.family,)).fetchall()
    best, values = {}, set()
    for d, dt, mask, hd, sq, sk, params, name, ms, reps in rows:
        val = param_value(params, a.param)
        if val is None:
            raise SystemExit(f"param_best.py: {name} has no parameter {a.param} (its parameters: {params})")
        values.add(val)
        key = (d, dt, mask, hd, sq, sk)
        cand = (reps < FULL_REPS, ms, name)  # a full timing first, then the faster
        cur = best.setdefault(key, {}).get(val)
        if cur is None or cand < cur:
            best[key][val] = cand
    if not best:
        raise SystemExit(f"param_best.py: no checked and timed {a.family} variant in {a.db}")
    order = sorted(values, key=lambda v: (float(v) if v.replace(".", "", 1).lstrip("-").isdigit() else math.inf, v))
    base = a.base if a.base is not None else order[0]
    if base not in values:
        raise SystemExit(f"param_best.py: no variant with {a.param}={base} (values: {', '.join(order)})")
    ratios = {v: [] for v in order if v != base}
    print(f"{'problem':30}" + "".join(f" {a.param + '=' + v:>14}" for v in order) + "  ratios to " + base)
    for key in sorted(best):
        d, dt, mask, hd, sq, sk = key
        label = f"{d} {dt} {mask} d{hd} s{sq}" + (f"/{sk}" if sk != sq else "")
        cells, notes = [], []
        for v in order:
            b = best[key].get(v)
            cells.append(f" {b[1]:13.4f}{'*' if b[0] else ' '}" if b else f" {'-':>14}")
        for v in ratios:
            if base in best[key] and v in best[key]:
                r = best[key][base][1] / best[key][v][1]
                ratios[v].append(r)
                notes.append(f"{v}: {r:.3f}")
        print(f"{label:30}" + "".join(cells) + "  " + ", ".join(notes))
    print(f"\nspeed of each value against {a.param}={base} (above 1: faster):")
    for v, rs in ratios.items():
        if rs:
            g = math.exp(sum(map(math.log, rs)) / len(rs))
            print(f"  {a.param}={v}: geometric mean {g:.3f} over {len(rs)} problems, {min(rs):.3f}-{max(rs):.3f}")
    print("\nchecks (passed / failed) by value:")
    counts = {}
    for params, passed in con.execute(
            "SELECT v.params, c.passed FROM checks c JOIN variants v ON v.id = c.variant_id"
            " WHERE c.retired = 0 AND v.family = ?", (a.family,)):
        c = counts.setdefault(param_value(params, a.param), [0, 0])
        c[0 if passed else 1] += 1
    for v in order:
        ok, bad = counts.get(v, [0, 0])
        print(f"  {a.param}={v}: {ok} / {bad}")


if __name__ == "__main__":
    main()
