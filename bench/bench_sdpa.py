# SPDX-License-Identifier: MIT
"""Times fatune's forward kernels against PyTorch's scaled_dot_product_attention
(FLASH_ATTENTION = FlashAttention-2, and CUDNN_ATTENTION) on the same tensors,
in the same process, and prints TFLOP/s and the ratios.

Kernels come either from a fatune database (--db: the stored winners of the
GPU this runs on) or from a folder of cubins with a manifest.json (--manifest:
kernel development). Every kernel is checked against a float64 reference on
fresh random inputs, with poisoned outputs, before it is timed.

Shapes are FlashAttention's benchmark shapes: batch x seqlen = 16384 tokens,
heads x head_dim = 2048. FLOPs: 4*B*H*S*S*D, halved for causal.

With --db, the SDPA timings are also stored in the database's
external_timings table (sources sdpa_flash and sdpa_cudnn), and fatune's own
time in the same run (fatune_bench), against the matching problem row and
this GPU's row, so `fatune report` shows the peers beside fatune's winners
and divides their times by fatune's from this harness. Nothing else in the
database is written.
"""
import argparse
import json
import math
import os
import sqlite3
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatlaunch import Kernel, reference  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOL_REL_L2 = {"bf16": 1e-2, "fp16": 2e-3}  # same thresholds as tuner/measure/tolerance.h
TOKENS, HIDDEN = 16384, 2048


def flops(b, h, sq, sk, d, causal):
    f = 4.0 * b * h * sq * sk * d
    return f / 2 if causal and sq == sk else f


def check(kern, dtype, d, causal, shapes):
    worst = 0.0
    for (b, h, sq, sk) in shapes:
        q = torch.randn(b, sq, h, d, device="cuda", dtype=DTYPES[dtype])
        k = torch.randn(b, sk, h, d, device="cuda", dtype=DTYPES[dtype])
        v = torch.randn(b, sk, h, d, device="cuda", dtype=DTYPES[dtype])
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, sq), float("nan"), device="cuda")
        kern.launch(kern.params(q, k, v, o, lse))
        torch.cuda.synchronize()
        ro, rlse = reference(q, k, v, causal)
        if not torch.isfinite(o).all():
            return float("inf"), f"{int((~torch.isfinite(o)).sum())} non-finite outputs at {b}x{h}x{sq}x{sk}"
        rel = ((o.double() - ro).norm() / ro.norm()).item()
        fin = torch.isfinite(rlse)
        lse_err = (lse.double()[fin] - rlse[fin]).abs().max().item() if fin.any() else 0.0
        if not torch.equal(torch.isinf(lse), ~fin):
            return float("inf"), f"lse -inf pattern differs at {b}x{h}x{sq}x{sk}"
        worst = max(worst, rel)
        if rel > TOL_REL_L2[dtype] or lse_err > 2e-3:
            return rel, f"rel_l2 {rel:.2e} lse {lse_err:.2e} at {b}x{h}x{sq}x{sk}"
    return worst, "ok"


class Timer:
    """Median of device-event times; L2 flushed before every repetition."""

    def __init__(self, reps, warmup):
        self.reps, self.warmup = reps, warmup
        self.flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")

    def __call__(self, fn):
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for i in range(self.reps):
            self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def sdpa_fn(backend, q, k, v, causal):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    try:
        run()
        torch.cuda.synchronize()
        return run
    except RuntimeError:
        return None


def kernels_from_manifest(path):
    folder = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        for e in json.load(f):
            with open(os.path.join(folder, e["cubin"]), "rb") as c:
                cubin = c.read()
            yield e, cubin


def device_arch():
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def dense_only(db, alias):
    """The SQL condition that keeps dense problems: a database of schema
    version 3 or newer also holds variable-length profiles."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    return f"{alias}.lengths = ''" if version >= 3 else "1"


def kernels_from_db(path, gpu_name):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(f"""
        SELECT v.name, v.dtype, v.head_dim, v.mask, p.seqlen_q, b.cubin, v.entry, v.block_m,
               v.threads, v.smem_bytes
        FROM winners w JOIN variants v ON v.id = w.variant_id JOIN problems p ON p.id = w.problem_id
        JOIN gpus g ON g.id = w.gpu_id
        JOIN builds b ON b.variant_id = v.id AND b.ok = 1 AND b.arch = ?
        WHERE g.name = ? AND v.direction = 'fwd' AND {dense_only(db, "p")}
        GROUP BY w.gpu_id, w.problem_id
        ORDER BY v.head_dim, v.dtype, v.mask, p.seqlen_q""", (device_arch(), gpu_name)).fetchall()
    for (name, dtype, d, mask, seqlen, cubin, entry, block_m, threads, smem) in rows:
        yield dict(name=name, dtype=dtype, head_dim=d, causal=mask == "causal", seqlen=seqlen,
                   entry=entry, block_m=block_m, threads=threads, smem_bytes=smem), cubin


# core/db.h FAT_EXTERNAL_*: the SDPA backends, and fatune's own kernel timed beside them
SDPA_SOURCES = {"fa2": "sdpa_flash", "cudnn": "sdpa_cudnn", "fatune": "fatune_bench"}


class ExternalTimings:
    """Writes SDPA timings into a fatune database: one row per (backend,
    problem), committed as it is made. The GPU row is the latest one of this
    GPU's name that holds winners (the one kernels_from_db read); a shape
    with no problem row of its own is skipped, never invented."""

    def __init__(self, path, gpu_name):
        self.db = sqlite3.connect(path, timeout=30)
        row = self.db.execute("""
            SELECT g.id FROM gpus g WHERE g.name = ?
            ORDER BY EXISTS (SELECT 1 FROM winners w WHERE w.gpu_id = g.id) DESC, g.id DESC
            LIMIT 1""", (gpu_name,)).fetchone()
        self.gpu_id = row[0] if row else None
        self.stored = 0

    def put(self, label, dtype, d, causal, b, h, s, ms, tflops):
        if self.gpu_id is None or not math.isfinite(ms) or ms <= 0:
            return
        row = self.db.execute(f"""
            SELECT id FROM problems p WHERE direction = 'fwd' AND dtype = ? AND mask = ? AND head_dim = ?
              AND batch = ? AND heads = ? AND heads_k = ? AND seqlen_q = ? AND seqlen_k = ?
              AND {dense_only(self.db, "p")}""",
            (dtype, "causal" if causal else "none", d, b, h, h, s, s)).fetchone()
        if not row:
            return
        with self.db:
            self.db.execute("""INSERT INTO external_timings (gpu_id, problem_id, source, median_ms, tflops)
                               VALUES (?, ?, ?, ?, ?)""", (self.gpu_id, row[0], SDPA_SOURCES[label], ms, tflops))
        self.stored += 1

    def close(self):
        self.db.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--db", help="fatune database holding this GPU's winners")
    src.add_argument("--manifest", help="manifest.json beside a folder of cubins")
    ap.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--head-dims", help="only these head dims (comma-separated)")
    args = ap.parse_args()

    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    gpu = torch.cuda.get_device_name()
    timer = Timer(args.reps, args.warmup)
    seqlens = [int(s) for s in args.seqlens.split(",")]
    entries = (kernels_from_db(args.db, gpu) if args.db else kernels_from_manifest(args.manifest))
    external = ExternalTimings(args.db, gpu) if args.db else None

    rows = []
    sdpa_ms = {}
    print(f"# {gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"TFLOP/s, median of {args.reps}, L2 flushed")
    print(f"{'variant':48s} {'seqlen':>6s} {'relL2':>8s} {'fatune':>7s} {'FA2':>7s} {'cuDNN':>7s} "
          f"{'/FA2':>6s} {'/cuDNN':>6s}")
    only = {int(x) for x in args.head_dims.split(",")} if args.head_dims else None
    for e, cubin in entries:
        if only and e["head_dim"] not in only:
            continue
        kern = Kernel(cubin, e["entry"], e["block_m"], e["threads"], e["smem_bytes"], e["name"])
        d, dtype, causal = e["head_dim"], e["dtype"], e["causal"]
        odd = 1000 + 17
        err, why = check(kern, dtype, d, causal, [(1, 2, 1024, 1024), (2, 3, odd, odd), (1, 2, 77, 300)])
        if why != "ok":
            print(f"{e['name']:48s} CHECK FAILED: {why}")
            rows.append(dict(e, status="check failed", why=why))
            continue
        for s in ([e["seqlen"]] if "seqlen" in e else seqlens):
            b, h = TOKENS // s, HIDDEN // d
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[dtype]) for _ in range(3))
            o = torch.empty_like(q)
            lse = torch.empty((b, h, s), device="cuda")
            p = kern.params(q, k, v, o, lse)
            f = flops(b, h, s, s, d, causal)
            t_fat = timer(lambda: kern.launch(p))
            if external:
                external.put("fatune", dtype, d, causal, b, h, s, t_fat, f / t_fat / 1e9)
            res = dict(name=e["name"], dtype=dtype, head_dim=d, causal=causal, seqlen=s, rel_l2=err,
                       fatune_ms=t_fat, fatune_tflops=f / t_fat / 1e9)
            for label, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                key = (label, dtype, d, causal, s)
                if key not in sdpa_ms:  # each SDPA shape timed once per run
                    fn = sdpa_fn(backend, q, k, v, causal)
                    sdpa_ms[key] = timer(fn) if fn else float("nan")
                    if external:
                        external.put(label, dtype, d, causal, b, h, s, sdpa_ms[key], f / sdpa_ms[key] / 1e9)
                t = sdpa_ms[key]
                res[f"{label}_ms"], res[f"{label}_tflops"] = t, f / t / 1e9
            rows.append(res)
            print(f"{e['name']:48s} {s:6d} {err:8.1e} {res['fatune_tflops']:7.1f} {res['fa2_tflops']:7.1f} "
                  f"{res['cudnn_tflops']:7.1f} {res['fa2_ms'] / t_fat:6.2f} {res['cudnn_ms'] / t_fat:6.2f}",
                  flush=True)
            del q, k, v, o, lse
    if external:
        print(f"# stored {external.stored} timings in {args.db} (external_timings)")
        external.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
