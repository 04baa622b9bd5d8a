#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Stores the PyTorch SDPA timings of a benchmark's JSON (bench_fwd.py's or
bench_runtime.py's --out) in a fatune database's external_timings table,
so that `fatune report` draws them beside fatune's winners and computes its
summary of speedups from them.

Only what the benchmark measured is stored: per row, the FLASH_ATTENTION
and CUDNN_ATTENTION backends' medians ("flash", "cudnn" under "ms") and
fatune's own in the same run ("fatune", stored as fatune_bench: the report
divides a peer's time by it, so that both come from one harness), or,
where the benchmark also timed the calls queued behind a sleep kernel
(bench_runtime.py's "ms_queued"), those times: the GPU's time alone, as the
tuner's own medians are. A row is stored against the problem row of the
same direction, dtype, mask, head dim, batch, heads and sequence length
(dense, one K/V head per query head, as the benchmarks' shapes are) and the
GPU row of the JSON's GPU name that holds winners; a row with no such
problem, or a time that is missing, not finite or not positive, is skipped
and counted, never invented. Nothing else in the database is written.

    python3 bench/store_peers.py --db fatune.db results.json [more.json ...]

Exit status: 0 stored (possibly nothing, said so), 1 the database or a
file cannot be read, or names another GPU, 2 bad usage.
"""
import argparse
import json
import math
import sqlite3
import sys

# core/db.h FAT_EXTERNAL_*: the peers, and fatune's own time in the same run
SOURCES = {"flash": "sdpa_flash", "cudnn": "sdpa_cudnn", "fatune": "fatune_bench"}
DIRECTIONS = ("fwd", "bwd")
DTYPES = ("fp16", "bf16")
MASKS = ("none", "causal")


class Refused(Exception):
    """A file or database this script will not store from; the message names it."""


def gpu_row(db, name):
    row = db.execute("""
        SELECT g.id FROM gpus g WHERE g.name = ?
        ORDER BY EXISTS (SELECT 1 FROM winners w WHERE w.gpu_id = g.id) DESC, g.id DESC
        LIMIT 1""", (name,)).fetchone()
    if row is None:
        names = ", ".join(r[0] for r in db.execute("SELECT DISTINCT name FROM gpus ORDER BY name"))
        raise Refused(f"no GPU named '{name}' in the database (it holds: {names or 'none'})")
    return row[0]


def problem_row(db, r, direction):
    """The dense problem of benchmark row R, or None."""
    return db.execute("""
        SELECT id FROM problems WHERE direction = ? AND dtype = ? AND mask = ? AND head_dim = ?
          AND batch = ? AND heads = ? AND heads_k = heads AND seqlen_q = ? AND seqlen_k = seqlen_q
          AND window_left = 0 AND window_right = 0 AND lengths = ''""",
                      (direction, r["dtype"], r["mask"], r["head_dim"], r["batch"], r["heads"],
                       r["seqlen"])).fetchone()


def field(r, name, kinds, where):
    v = r.get(name)
    if not isinstance(v, kinds) or isinstance(v, bool):
        raise Refused(f"{where}: '{name}' is {json.dumps(v)}")
    return v


def rows_of(db, path, counts):
    """The external_timings rows of one JSON file (nothing written yet)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise Refused(f"{path}: {e}")
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise Refused(f"{path}: no 'rows' list: not a benchmark's JSON")
    gpu = gpu_row(db, field(doc, "gpu", str, path))
    out = []
    for i, r in enumerate(doc["rows"]):
        where = f"{path}: row {i + 1}"
        if not isinstance(r, dict):
            raise Refused(f"{where}: not an object")
        if "ms" not in r:  # a row the benchmark reported but did not time (a failed check)
            counts["untimed"] += 1
            continue
        direction = r.get("direction", "fwd")  # bench_fwd.py's rows are all forward
        for name, allowed in (("dtype", DTYPES), ("mask", MASKS)):
            if field(r, name, str, where) not in allowed:
                raise Refused(f"{where}: {name} '{r[name]}' is none of {', '.join(allowed)}")
        if direction not in DIRECTIONS:
            raise Refused(f"{where}: direction '{direction}' is none of {', '.join(DIRECTIONS)}")
        for name in ("head_dim", "batch", "heads", "seqlen"):
            field(r, name, int, where)
        prob = problem_row(db, r, direction)
        times = r.get("ms_queued") if isinstance(r.get("ms_queued"), dict) else r["ms"]
        if not isinstance(times, dict):
            raise Refused(f"{where}: 'ms' is {json.dumps(times)}")
        for key, source in SOURCES.items():
            ms = times.get(key)
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not math.isfinite(ms) or ms <= 0:
                counts["no time"] += 1
            elif prob is None:
                counts["no problem"] += 1
            else:
                out.append((gpu, prob[0], source, ms, flops_of(direction, r) / ms / 1e9))
    return out


def flops_of(direction, r):
    """FlashAttention's convention: 4·B·H·S²·D, halved for causal; the
    backward 2.5 times the forward."""
    f = 4.0 * r["batch"] * r["heads"] * r["seqlen"] ** 2 * r["head_dim"]
    if r["mask"] == "causal":
        f /= 2
    return f * 2.5 if direction == "bwd" else f


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, help="the fatune database to store the timings in")
    ap.add_argument("json", nargs="+", help="a benchmark's --out file")
    args = ap.parse_args(argv)
    counts = {"stored": 0, "untimed": 0, "no time": 0, "no problem": 0}
    try:
        db = sqlite3.connect(f"file:{args.db}?mode=rw", uri=True, timeout=30)
        rows = [row for path in args.json for row in rows_of(db, path, counts)]
        with db:  # one transaction: a refused file leaves the database as it was
            db.executemany("""INSERT INTO external_timings (gpu_id, problem_id, source, median_ms, tflops)
                              VALUES (?, ?, ?, ?, ?)""", rows)
        counts["stored"] = len(rows)
    except sqlite3.Error as e:
        print(f"store_peers: {args.db}: {e}", file=sys.stderr)
        return 1
    except Refused as e:
        print(f"store_peers: {e}", file=sys.stderr)
        return 1
    print(f"store_peers: stored {counts['stored']} timings; skipped: {counts['no problem']} "
          f"with no problem row, {counts['no time']} with no finite positive time, "
          f"{counts['untimed']} rows the benchmark did not time")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
