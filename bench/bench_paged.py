#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Paged decoding (issue 24): fatune.attention_with_kvcache over a paged K/V
cache, pages of 16, 64 and 256 tokens in random order, against the same call
on the cache contiguous (fatune's own, its paged-cache cost alone) and
against PyTorch SDPA's FlashAttention-2 and cuDNN backends on the keys made
contiguous (FlashInfer and flash_attn are not on the GPU machine). bf16,
causal bottom-right, every cache full; each cell the median device time of
--reps calls (CUDA events, L2 flushed before each, queued behind a sleep
kernel so the events hold the GPU's time), the K/V read rate fatune's time
gives, the paged/contiguous ratio (the issue asks <= 1.05) and the speed-up
over the faster peer. A first check compares each paged output with the
contiguous one. Writes bench_paged.md and bench_paged.json into --out.

    FATUNE_LIB=build/runtime/libfatune.so python3 bench/bench_paged.py --out results/
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_timing  # noqa: E402

SKIP = 77
FLUSH_BYTES = 256 << 20
PAGES = (16, 64, 256)
# (batch, query heads, K/V heads, seqlen_k, seqlen_q): the grid's corners
SHAPES = [(1, 32, 8, 4096, 1), (1, 32, 8, 131072, 1), (1, 64, 8, 131072, 8), (4, 32, 8, 32768, 1),
          (16, 32, 8, 32768, 4), (64, 32, 8, 4096, 1), (64, 32, 32, 4096, 16), (8, 32, 8, 65536, 16)]
HEAD_DIM = 128


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="", help="folder for bench_paged.md and bench_paged.json")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per cell (default 20)")
    ap.add_argument("--quick", action="store_true", help="the first three shapes only")
    o = ap.parse_args()
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return SKIP
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    import fatune

    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    sleep = cuda_timing.sleep_cycles(torch)

    def timed(fn):
        for _ in range(3):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(o.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(o.reps)]
        for i in range(o.reps):
            flush.zero_()
            torch.cuda._sleep(sleep)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        return ms[len(ms) // 2]

    rows = []
    for b, h, hk, sk, sq in SHAPES[:3] if o.quick else SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, sq, h, HEAD_DIM, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, sk, hk, HEAD_DIM, device="cuda", generator=g).bfloat16()
        v = torch.randn_like(k)
        kv_bytes = 2 * k.numel() * k.element_size()
        row = {"batch": b, "heads": h, "heads_k": hk, "seqlen_k": sk, "seqlen_q": sq}
        row["contiguous_ms"] = timed(lambda: fatune.attention_with_kvcache(q, k, v, causal=True))
        want = fatune.attention_with_kvcache(q, k, v, causal=True)
        row["contiguous_variant"] = fatune.last_choice().variant
        for page in PAGES:
            per = sk // page
            n_pages = b * per
            order = torch.randperm(n_pages, device="cuda").int()
            table = order.view(b, per)
            pool_k = torch.empty(n_pages, page, hk, HEAD_DIM, dtype=k.dtype, device="cuda")
            pool_v = torch.empty_like(pool_k)
            pool_k[table.flatten().long()] = k.reshape(b * per, page, hk, HEAD_DIM)
            pool_v[table.flatten().long()] = v.reshape(b * per, page, hk, HEAD_DIM)
            out = fatune.attention_with_kvcache(q, pool_k, pool_v, block_table=table, causal=True)
            err = ((out.double() - want.double()).norm() / want.double().norm()).item()
            ms = timed(lambda: fatune.attention_with_kvcache(q, pool_k, pool_v, block_table=table, causal=True))
            row[f"paged{page}_ms"] = ms
            row[f"paged{page}_vs_contiguous"] = ms / row["contiguous_ms"]
            row[f"paged{page}_rel_l2"] = err
            row[f"paged{page}_variant"] = fatune.last_choice().variant
            del pool_k, pool_v
        # The peers on the same keys made contiguous, (batch, heads, seqlen, d).
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        mask = causal_lower_right(sq, sk)
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    row[f"{name}_ms"] = timed(lambda: F.scaled_dot_product_attention(
                        qt, kt, vt, attn_mask=mask if sq > 1 else None, enable_gqa=hk != h))
            except RuntimeError as e:
                row[f"{name}_ms"] = None
                row[f"{name}_error"] = str(e).splitlines()[0][:120]
        peers = [row[f"{n}_ms"] for n in ("flash", "cudnn") if row.get(f"{n}_ms")]
        best_paged = min(row[f"paged{p}_ms"] for p in PAGES)
        row["speedup_vs_best_peer"] = min(peers) / best_paged if peers else None
        row["kv_tb_per_s_paged16"] = kv_bytes / (row["paged16_ms"] * 1e-3) / 1e12
        rows.append(row)
        print(f"b{b} h{h}/{hk} k{sk} q{sq}: contiguous {row['contiguous_ms']:.3f} ms; "
              + "; ".join(f"page {p} {row[f'paged{p}_ms']:.3f} ms ({row[f'paged{p}_vs_contiguous']:.3f}x, "
                          f"rel_l2 {row[f'paged{p}_rel_l2']:.1e})" for p in PAGES)
              + f"; FA2 {row['flash_ms']}, cuDNN {row['cudnn_ms']}", flush=True)
    if o.out:
        os.makedirs(o.out, exist_ok=True)
        with open(os.path.join(o.out, "bench_paged.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
        with open(os.path.join(o.out, "bench_paged.md"), "w") as f:
            f.write("| batch | heads | seqlen_k | seqlen_q | contiguous ms | "
                    + " | ".join(f"page {p} ms (x)" for p in PAGES) + " | FA2 ms | cuDNN ms | K/V TB/s (16) |\n")
            f.write("|" + "---|" * (7 + len(PAGES)) + "\n")
            for r in rows:
                fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"
                f.write(f"| {r['batch']} | {r['heads']}/{r['heads_k']} | {r['seqlen_k']} | {r['seqlen_q']} | "
                        f"{fmt(r['contiguous_ms'])} | "
                        + " | ".join(f"{fmt(r[f'paged{p}_ms'])} ({r[f'paged{p}_vs_contiguous']:.3f})" for p in PAGES)
                        + f" | {fmt(r['flash_ms'])} | {fmt(r['cudnn_ms'])} | {r['kv_tb_per_s_paged16']:.2f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
