#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Each problem of a tuning database, the fastest checked variant of each
kernel family side by side, and how many of each family's variants failed
their check: how a new family compares with the ones it joins, read from one
tuning run (so every family met the same GPU, clocks and inputs).

    bench/family_best.py DB [--family NEW]   (NEW: the family whose ratio to
                                               the best other family is printed)
"""
import argparse
import sqlite3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db")
    ap.add_argument("--family", default="wgmma90")
    a = ap.parse_args()
    con = sqlite3.connect(a.db)
    rows = con.execute(
        "SELECT p.id, p.direction, p.dtype, p.mask, p.head_dim, p.seqlen_q, p.seqlen_k,"
        " v.family, v.name, MIN(t.median_ms), t.tflops"
        " FROM timings t JOIN variants v ON v.id = t.variant_id JOIN problems p ON p.id = t.problem_id"
        " WHERE t.retired = 0 AND v.family <> 'materialize'"
        " AND EXISTS (SELECT 1 FROM checks c WHERE c.variant_id = v.id AND c.problem_id = p.id"
        "             AND c.passed = 1 AND c.retired = 0)"
        " GROUP BY p.id, v.family ORDER BY p.id, v.family").fetchall()
    best = {}
    for pid, d, dt, mask, hd, sq, sk, fam, name, ms, tf in rows:
        best.setdefault((pid, d, dt, mask, hd, sq, sk), {})[fam] = (ms, tf, name)
    print(f"{'problem':34} {'family':9} {'ms':>8} {'TFLOP/s':>8}  variant")
    for key, fams in best.items():
        _, d, dt, mask, hd, sq, sk = key
        label = f"{d} {dt} {mask} d{hd} s{sq}" + (f"/{sk}" if sk != sq else "")
        for fam, (ms, tf, name) in sorted(fams.items()):
            print(f"{label:34} {fam:9} {ms:8.4f} {tf:8.1f}  {name}")
        if a.family in fams and len(fams) > 1:
            other = min(v[0] for f, v in fams.items() if f != a.family)
            print(f"{label:34} {a.family} time / best other family: {fams[a.family][0] / other:.3f}")
    print("\nchecks by family (passed / failed):")
    for fam, ok, bad in con.execute(
            "SELECT v.family, SUM(c.passed), SUM(1 - c.passed) FROM checks c"
            " JOIN variants v ON v.id = c.variant_id WHERE c.retired = 0 GROUP BY v.family"):
        print(f"  {fam:12} {ok:6} / {bad}")
    for name, reason in con.execute(
            "SELECT DISTINCT v.name, c.reason FROM checks c JOIN variants v ON v.id = c.variant_id"
            " WHERE c.passed = 0 AND c.retired = 0 AND v.family = ? LIMIT 12", (a.family,)):
        print(f"  failed: {name}: {reason}")


if __name__ == "__main__":
    main()
