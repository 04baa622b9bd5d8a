#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two tuning databases side by side: for every problem both measured, each
variant's median ms in A and in B (matched by name) and B/A, then the
fastest of each. For an A/B of a template change measured in one call:

    fatune --gpu 0 ... --templates OLD_TREE --db a.db
    fatune --gpu 0 ... --db b.db
    python3 bench/compare_dbs.py a.db b.db [--top 12]

Only timings not retired; variants that failed their check have none.
"""
import argparse
import sqlite3
import sys

# LENGTHS: the problem's variable-length profile ('' when dense; the column
# exists from schema version 3).
QUERY = """
select p.direction, p.dtype, p.mask, p.head_dim, p.batch, p.heads, p.seqlen_q, p.seqlen_k,
       {lengths}, v.name, min(t.median_ms)
from timings t join variants v on v.id = t.variant_id join problems p on p.id = t.problem_id
where t.retired = 0
group by p.id, v.name
"""


def load(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    lengths = "p.lengths" if db.execute("PRAGMA user_version").fetchone()[0] >= 3 else "''"
    out = {}
    for *problem, name, ms in db.execute(QUERY.format(lengths=lengths)):
        out.setdefault(tuple(problem), {})[name] = ms
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=12, help="variants shown per problem (by B's time)")
    o = ap.parse_args()
    a, b = load(o.a), load(o.b)
    for problem in sorted(set(a) & set(b)):
        ta, tb = a[problem], b[problem]
        d, dt, mask, hd, bsz, h, sq, sk, lengths = problem
        varlen = f" varlen {lengths}" if lengths else ""
        print(f"\n{d} {dt} {mask} d{hd} b{bsz} h{h} s{sq}/{sk}{varlen}: {'A ms':>8} {'B ms':>8} {'B/A':>6}")
        both = sorted(set(ta) & set(tb), key=lambda n: tb[n])
        for name in both[:o.top]:
            print(f"  {name.split('.', 4)[-1]:<40} {ta[name]:8.3f} {tb[name]:8.3f} {tb[name] / ta[name]:6.3f}")
        if ta and tb:
            ba, bb = min(ta, key=ta.get), min(tb, key=tb.get)
            print(f"  fastest: A {ba.split('.', 4)[-1]} {ta[ba]:.3f}, B {bb.split('.', 4)[-1]} {tb[bb]:.3f}: "
                  f"B/A {tb[bb] / ta[ba]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
