#!/usr/bin/env python3
"""fatune.attention (the tuned winner through libfatune) against PyTorch's
scaled_dot_product_attention with the FLASH_ATTENTION and CUDNN_ATTENTION
backends, on the same tensors in one process, at FlashAttention's benchmark
shapes (batch x seqlen = 16384 tokens, heads x head_dim = 2048). Times are
CUDA-event medians over --reps calls after warm-up; TFLOP/s by the
FlashAttention convention (4·B·H·S²·D, halved for causal). Also reports
which variant fatune ran and why, and the first call's latency in this
process (context open + module load).

    FATUNE_LIB=build/runtime/libfatune.so python3 scripts/bench_runtime.py \
        [--head-dims 64,128] [--seqlens 512,...] [--out bench_runtime.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
TOKENS = 16384
MODEL_WIDTH = 2048


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default="")
    o = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    import fatune

    def timed(fn):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(o.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    rows = []
    first = None
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'problem':<34} {'fatune':>9} {'flash':>9} {'cudnn':>9}  TFLOP/s f/fl/cu   variant (origin, match)")
    for dt in o.dtypes.split(","):
        dtype = torch.bfloat16 if dt == "bf16" else torch.float16
        for mask in o.masks.split(","):
            causal = mask == "causal"
            for d in (int(x) for x in o.head_dims.split(",")):
                for s in (int(x) for x in o.seqlens.split(",")):
                    b, h = max(1, TOKENS // s), MODEL_WIDTH // d
                    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
                    if first is None:
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        fatune.attention(q, k, v, causal=causal)
                        torch.cuda.synchronize()
                        first = (time.perf_counter() - t0) * 1e3
                    ms = {"fatune": timed(lambda: fatune.attention(q, k, v, causal=causal))}
                    choice = fatune.last_choice()
                    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
                    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(be):
                                ms[name] = timed(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
                        except RuntimeError as e:
                            ms[name] = None
                            print(f"  {name} unavailable: {str(e).splitlines()[0][:80]}")
                    flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
                    tf = {k2: (flops / (m * 1e-3) / 1e12 if m else None) for k2, m in ms.items()}
                    fmt = lambda x: f"{x:9.3f}" if x else "        -"
                    fmtt = lambda x: f"{x:.0f}" if x else "-"
                    print(f"{dt} {mask:<6} d{d:<3} s{s:<5} b{b:<3} h{h:<3}   {fmt(ms['fatune'])} {fmt(ms['flash'])} "
                          f"{fmt(ms['cudnn'])}  {fmtt(tf['fatune'])}/{fmtt(tf['flash'])}/{fmtt(tf['cudnn'])}   "
                          f"{choice.variant} ({choice.origin}, {choice.match})")
                    rows.append({"dtype": dt, "mask": mask, "head_dim": d, "seqlen": s, "batch": b, "heads": h,
                                 "ms": ms, "tflops": tf, "variant": choice.variant, "origin": choice.origin,
                                 "match": choice.match, "load": choice.load})
                    del q, k, v, qt, kt, vt
    print(f"first fatune.attention call in this process: {first:.1f} ms (context open, lookup, module load)")
    if o.out:
        with open(o.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "first_call_ms": first, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
