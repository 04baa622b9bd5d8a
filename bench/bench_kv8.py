#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An fp8 K/V cache in decoding (issue 24): fatune.attention_with_kvcache
with K and V in e4m3 (torch.float8_e4m3fn, descale factors per (batch, K/V
head), Q and O bf16, or fp16 with --dtype fp16) against the same call on a
cache of q's type -- the issue asks the fp8 cache to take at most 1/1.8 of
the bf16 cache's time from seqlen_k 32768 -- contiguous and in pages of 64
tokens in random order.
d128, causal bottom-right, every cache full, 32 query heads on 8 K/V
heads. Each cell is the median device time of --reps calls (CUDA events,
L2 flushed before each, queued behind a sleep kernel so the events hold
the GPU's time alone), with the rate at which each reads K and V. A first
check compares the fp8 call's output with fatune's 16-bit call on the
dequantised cache (e4m3 times its factor, rounded to the 16-bit type; the
kernels widen e4m3 exactly and apply the factors in fp32) and both with an
fp64 reference on the 16-bit cache's values (small caches only). Writes bench_kv8.md and
bench_kv8.json (bench_kv8_fp16.* with --dtype fp16) into --out.

    FATUNE_LIB=build/runtime/libfatune.so python3 bench/bench_kv8.py --out results/
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_timing  # noqa: E402

SKIP = 77
FLUSH_BYTES = 256 << 20
E4M3_MAX = 448.0
PAGE = 64
HEADS, HEADS_K, HEAD_DIM = 32, 8, 128
BATCHES = (1, 4, 16, 64)
SEQLENS_K = (4096, 32768, 131072)
SEQLENS_Q = (1, 4, 16)
MAX_TOKENS = 1 << 21  # batch x seqlen_k: a bf16 cache of 8.6 GB beside its fp8 copy


def quantise(torch, x):
    """X (batch, seqlen, heads_k, d) as e4m3 with one factor per (batch, K/V
    head), amax / 448: (bytes, descale of shape (batch, heads_k))."""
    amax = x.abs().amax(dim=(1, 3)).float().clamp(min=1e-12)
    descale = amax / E4M3_MAX
    q8 = (x.float() / descale[:, None, :, None]).to(torch.float8_e4m3fn)
    return q8, descale.contiguous()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="", help="folder for bench_kv8.md and bench_kv8.json")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per cell (default 20)")
    ap.add_argument("--quick", action="store_true", help="batch 4 only")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16",
                    help="q's type and the 16-bit cache's (default bf16)")
    o = ap.parse_args()
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return SKIP
    import fatune
    wide = torch.bfloat16 if o.dtype == "bf16" else torch.float16
    w = o.dtype  # the 16-bit cache's columns are named by its type

    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    sleep = cuda_timing.sleep_cycles(torch)

    def timed(fn):
        return cuda_timing.timed(torch, fn, o.reps, sleep=sleep, flush=flush)[0]

    rows = []
    for b in (4,) if o.quick else BATCHES:
        for sk in SEQLENS_K:
            if b * sk > MAX_TOKENS:
                continue
            g = torch.Generator(device="cuda").manual_seed(b * 1000003 + sk)
            k = torch.randn(b, sk, HEADS_K, HEAD_DIM, device="cuda", generator=g)
            v = torch.randn(b, sk, HEADS_K, HEAD_DIM, device="cuda", generator=g)
            k8, kd = quantise(torch, k)
            v8, vd = quantise(torch, v)
            del k, v
            # The 16-bit cache holds the fp8 cache's values (e4m3 is exact in
            # fp16 and bf16; times a factor, bf16 rounds it to 8 bits, fp16 to 11).
            k16 = (k8.float() * kd[:, None, :, None]).to(wide)
            v16 = (v8.float() * vd[:, None, :, None]).to(wide)
            per = sk // PAGE
            table = torch.randperm(b * per, device="cuda").int().view(b, per)
            pool_k8 = torch.empty(b * per, PAGE, HEADS_K, HEAD_DIM, dtype=k8.dtype, device="cuda")
            pool_v8 = torch.empty_like(pool_k8)
            pool_k8[table.flatten().long()] = k8.reshape(b * per, PAGE, HEADS_K, HEAD_DIM)
            pool_v8[table.flatten().long()] = v8.reshape(b * per, PAGE, HEADS_K, HEAD_DIM)
            for sq in SEQLENS_Q:
                q = torch.randn(b, sq, HEADS, HEAD_DIM, device="cuda", generator=g).to(wide)
                row = {"batch": b, "heads": HEADS, "heads_k": HEADS_K, "seqlen_k": sk, "seqlen_q": sq}
                ref16 = fatune.attention_with_kvcache(q, k16, v16, causal=True)
                out8 = fatune.attention_with_kvcache(q, k8, v8, causal=True, k_descale=kd, v_descale=vd)
                row["fp8_variant"] = fatune.last_choice().variant
                outp = fatune.attention_with_kvcache(q, pool_k8, pool_v8, block_table=table, causal=True,
                                                     k_descale=kd, v_descale=vd)
                row["fp8_paged_variant"] = fatune.last_choice().variant
                rel = lambda x, y: ((x.double() - y.double()).norm() / y.double().norm()).item()
                row["fp8_vs_" + w + "_rel_l2"] = rel(out8, ref16)
                row["fp8_paged_vs_fp8_rel_l2"] = rel(outp, out8)
                if b * sk <= 1 << 17:
                    # fp64 on the same values, grouped heads repeated, bottom-right causal
                    qd = q.double().transpose(1, 2)
                    kdd = k16.double().transpose(1, 2).repeat_interleave(HEADS // HEADS_K, dim=1)
                    vdd = v16.double().transpose(1, 2).repeat_interleave(HEADS // HEADS_K, dim=1)
                    s = qd @ kdd.transpose(-1, -2) / HEAD_DIM ** 0.5
                    pos = torch.arange(sq, device="cuda")[:, None] + sk - sq
                    s = s.masked_fill(torch.arange(sk, device="cuda")[None, :] > pos, float("-inf"))
                    want = (s.softmax(-1) @ vdd).transpose(1, 2)
                    row["fp8_vs_fp64_rel_l2"] = rel(out8, want)
                    row[w + "_vs_fp64_rel_l2"] = rel(ref16, want)
                row[w + "_ms"] = timed(lambda: fatune.attention_with_kvcache(q, k16, v16, causal=True))
                row[w + "_variant"] = fatune.last_choice().variant
                row["fp8_ms"] = timed(lambda: fatune.attention_with_kvcache(q, k8, v8, causal=True,
                                                                            k_descale=kd, v_descale=vd))
                row["fp8_paged_ms"] = timed(lambda: fatune.attention_with_kvcache(
                    q, pool_k8, pool_v8, block_table=table, causal=True, k_descale=kd, v_descale=vd))
                row[w + "_over_fp8"] = row[w + "_ms"] / row["fp8_ms"]
                row[w + "_over_fp8_paged"] = row[w + "_ms"] / row["fp8_paged_ms"]
                kv8_bytes = 2 * k8.numel()
                row[w + "_kv_tb_s"] = 2 * kv8_bytes / (row[w + "_ms"] * 1e-3) / 1e12
                row["fp8_kv_tb_s"] = kv8_bytes / (row["fp8_ms"] * 1e-3) / 1e12
                rows.append(row)
                print(f"b{b} k{sk} q{sq}: {w} {row[w + '_ms']:.3f} ms ({row[w + '_kv_tb_s']:.2f} TB/s), "
                      f"fp8 {row['fp8_ms']:.3f} ms ({row['fp8_kv_tb_s']:.2f} TB/s, {row[w + '_over_fp8']:.2f}x), "
                      f"fp8 paged {row['fp8_paged_ms']:.3f} ms ({row[w + '_over_fp8_paged']:.2f}x); "
                      f"rel_l2 vs {w} {row['fp8_vs_' + w + '_rel_l2']:.1e}, paged vs contiguous "
                      f"{row['fp8_paged_vs_fp8_rel_l2']:.1e}"
                      + (f", vs fp64 {row['fp8_vs_fp64_rel_l2']:.1e} ({w} {row[w + '_vs_fp64_rel_l2']:.1e})"
                         if "fp8_vs_fp64_rel_l2" in row else "")
                      + f" [{row[w + '_variant']} | {row['fp8_variant']} | {row['fp8_paged_variant']}]", flush=True)
            del k8, v8, k16, v16, pool_k8, pool_v8
    if o.out:
        os.makedirs(o.out, exist_ok=True)
        stem = "bench_kv8" if o.dtype == "bf16" else "bench_kv8_fp16"
        with open(os.path.join(o.out, stem + ".json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "dtype": o.dtype, "rows": rows}, f, indent=1)
        with open(os.path.join(o.out, stem + ".md"), "w") as f:
            f.write(f"| batch | seqlen_k | seqlen_q | {w} ms | fp8 ms | {w} / fp8 | fp8 paged ms | {w} / paged "
                    f"| {w} K/V TB/s | fp8 K/V TB/s |\n|" + "---|" * 10 + "\n")
            for r in rows:
                f.write(f"| {r['batch']} | {r['seqlen_k']} | {r['seqlen_q']} | {r[w + '_ms']:.3f} | {r['fp8_ms']:.3f} | "
                        f"{r[w + '_over_fp8']:.2f} | {r['fp8_paged_ms']:.3f} | {r[w + '_over_fp8_paged']:.2f} | "
                        f"{r[w + '_kv_tb_s']:.2f} | {r['fp8_kv_tb_s']:.2f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
