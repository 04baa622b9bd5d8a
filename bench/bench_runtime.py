#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fatune.attention (the tuned winner through libfatune) against PyTorch's
scaled_dot_product_attention with the FLASH_ATTENTION and CUDNN_ATTENTION
backends, on the same tensors in one process, at FlashAttention's benchmark
shapes (batch x seqlen = 16384 tokens, heads x head_dim = 2048), forward and
backward. Times are CUDA-event medians over --reps (--bwd-reps) calls after
warm-up; TFLOP/s by the FlashAttention convention: forward 4·B·H·S²·D,
halved for causal, backward 2.5 times the forward's. Each call is timed
twice: alone ("call": the GPU idle at the first event, so the host's work
before the first launch counts, as for a call nothing else is queued
before) and queued behind a sleep kernel ("queued": the host has launched
everything before the GPU reaches the first event, as in a training step
whose host runs ahead; the GPU's time alone). Also reports which
variant fatune ran and why, and the first call's latency in this process
(context open + module load).

The backward times torch.autograd.grad(o, (q, k, v), dout) alone, on a graph
kept from one forward (retain_graph). Before a backward configuration is
timed, fatune's gradients at its sequence length (batch 1, 2 heads, so the
same tuned bucket) are checked against SDPA's MATH backend in float32; one
that fails is reported and not timed, and the script then exits 1. Then
(unless --no-deterministic) the same backward with deterministic=True:
its gradients from two calls compared bit for bit (a difference fails the
run) and its time over the default backward's, alone and queued, against
issue 20's bound of 1.15.

Then the peak device memory of a forward and backward: fatune's at
--memory-seqlen (batch 1, heads 2048/head_dim), which must be O(seqlen) --
O, dQ, dK, dV, lse and the workspace beyond the inputs -- and the MATH
backend's, which materialises seqlen² scores, at the longest length it can
run (from --memory-seqlen down, halving on out-of-memory); each printed
beside the bytes it should take.

    FATUNE_LIB=build/runtime/libfatune.so python3 bench/bench_runtime.py \
        [--direction fwd,bwd] [--head-dims 64,128] [--seqlens 512,...] [--out bench_runtime.json]

`python3 bench/store_peers.py --db DB OUT.json` stores the --out file's
SDPA timings (and fatune's own in the same run) in a fatune database, for
`fatune report`.
"""
import argparse
import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import cuda_timing  # noqa: E402  (beside this script)
TOKENS = 16384
MODEL_WIDTH = 2048
BWD_FLOPS_PER_FWD = 2.5  # FlashAttention's convention: the backward's 5 matmuls to the forward's 2
GRAD_TOLERANCE = {"fp16": 5e-3, "bf16": 2e-2}  # relative L2 of dq, dk, dv, as python/tests/test_fatune.py
CHECK_HEADS = 2  # the gradient check's heads: the float32 reference materialises (heads, seqlen, seqlen)
WARMUP = 3
DETERMINISTIC_BOUND = 1.15  # issue 20: the deterministic backward's time over the default one's
MIB = 1 << 20


def fmt_ms(x):
    return f"{x:9.3f}" if x else "        -"


def fmt_num(x, spec=".0f"):
    return format(x, spec) if x else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--direction", default="fwd,bwd", help="fwd, bwd or both (comma-separated)")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384", help="forward's")
    ap.add_argument("--dtypes", default="bf16,fp16", help="forward's")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--reps", type=int, default=30, help="forward's timed calls")
    ap.add_argument("--bwd-seqlens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--bwd-dtypes", default="bf16")
    ap.add_argument("--bwd-reps", type=int, default=10, help="backward's timed calls (at least 10)")
    ap.add_argument("--memory-seqlen", type=int, default=16384, help="0: no memory measurement")
    ap.add_argument("--no-deterministic", action="store_true",
                    help="skip the deterministic backward's column (timed beside the default one, its "
                         "gradients compared bit for bit between two calls)")
    ap.add_argument("--out", default="")
    o = ap.parse_args()
    directions = o.direction.split(",")
    bad = [x for x in directions if x not in ("fwd", "bwd")]
    if bad or not directions:
        print(f"bench_runtime.py: --direction {o.direction!r}: expected fwd, bwd or fwd,bwd", file=sys.stderr)
        return 2
    if o.bwd_reps < 10:
        print(f"bench_runtime.py: --bwd-reps {o.bwd_reps}: at least 10", file=sys.stderr)
        return 2
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return 77
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fatune

    sleep = cuda_timing.sleep_cycles(torch)

    def timed_both(fn, reps):
        """Median ms of FN called alone and queued (cuda_timing)."""
        return (cuda_timing.timed(torch, fn, reps, WARMUP)[0],
                cuda_timing.timed(torch, fn, reps, WARMUP, sleep)[0])

    def ratios(ms):
        """÷flash and ÷cudnn: their time over fatune's (above 1: fatune faster)."""
        return {k2: (ms[k2] / ms["fatune"] if ms.get(k2) else None) for k2 in ("flash", "cudnn")}

    sdpa_backends = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
    head_dims = [int(x) for x in o.head_dims.split(",")]
    masks = o.masks.split(",")
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows, memory = [], []
    first = None
    failures = 0
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")

    def forward():
        nonlocal first
        print(f"{'forward':<34} {'fatune':>9} {'flash':>9} {'cudnn':>9}  TFLOP/s f/fl/cu   "
              f"{'÷fl':>5} {'÷cu':>5}  queued: {'÷fl':>5} {'÷cu':>5}  variant (origin, match)")
        for dt in o.dtypes.split(","):
            dtype = dtypes[dt]
            for mask in masks:
                causal = mask == "causal"
                for d in head_dims:
                    for s in (int(x) for x in o.seqlens.split(",")):
                        b, h = max(1, TOKENS // s), MODEL_WIDTH // d
                        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
                        if first is None:
                            torch.cuda.synchronize()
                            t0 = time.perf_counter()
                            fatune.attention(q, k, v, causal=causal)
                            torch.cuda.synchronize()
                            first = (time.perf_counter() - t0) * 1e3
                        ms, mq = {}, {}
                        ms["fatune"], mq["fatune"] = timed_both(lambda: fatune.attention(q, k, v, causal=causal),
                                                                o.reps)
                        choice = fatune.last_choice()
                        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
                        for name, be in sdpa_backends:
                            try:
                                with sdpa_kernel(be):
                                    ms[name], mq[name] = timed_both(lambda: F.scaled_dot_product_attention(
                                        qt, kt, vt, is_causal=causal), o.reps)
                            except RuntimeError as e:
                                ms[name] = mq[name] = None
                                print(f"  {name} unavailable: {str(e).splitlines()[0][:80]}")
                        flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
                        tf = {k2: (flops / (m * 1e-3) / 1e12 if m else None) for k2, m in ms.items()}
                        ratio, ratio_q = ratios(ms), ratios(mq)
                        print(f"{dt} {mask:<6} d{d:<3} s{s:<5} b{b:<3} h{h:<3}   {fmt_ms(ms['fatune'])} "
                              f"{fmt_ms(ms['flash'])} {fmt_ms(ms['cudnn'])}  {fmt_num(tf['fatune'])}/"
                              f"{fmt_num(tf['flash'])}/{fmt_num(tf['cudnn'])}   "
                              f"{fmt_num(ratio['flash'], '5.2f'):>5} {fmt_num(ratio['cudnn'], '5.2f'):>5}  "
                              f"queued: {fmt_num(ratio_q['flash'], '5.2f'):>5} {fmt_num(ratio_q['cudnn'], '5.2f'):>5}  "
                              f"{choice.variant} ({choice.origin}, {choice.match})")
                        rows.append({"direction": "fwd", "dtype": dt, "mask": mask, "head_dim": d, "seqlen": s,
                                     "batch": b, "heads": h, "ms": ms, "ms_queued": mq, "tflops": tf,
                                     "speed_ratio": ratio, "speed_ratio_queued": ratio_q, "variant": choice.variant,
                                     "origin": choice.origin, "match": choice.match, "load": choice.load})

    def rel_l2(got, ref):
        return ((got.double() - ref.double()).norm() / ref.double().norm()).item()

    def grad_check(dtype, d, s, causal):
        """Relative L2 errors of fatune's dq, dk, dv against SDPA's MATH backend
        in float32 on the same inputs (batch 1, CHECK_HEADS heads, length S),
        and the backward variant fatune ran."""
        q, k, v, dout = (torch.randn(1, s, CHECK_HEADS, d, device="cuda", dtype=dtype) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        got = torch.autograd.grad(fatune.attention(q, k, v, causal=causal), (q, k, v), dout)
        variant = fatune.last_choice().variant
        qf, kf, vf = (t.detach().float().transpose(1, 2).requires_grad_() for t in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            of = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
        ref = torch.autograd.grad(of, (qf, kf, vf), dout.float().transpose(1, 2))
        return [rel_l2(g, r.transpose(1, 2)) for g, r in zip(got, ref)], variant

    def backward():
        nonlocal failures
        print(f"{'backward':<34} {'fatune':>9} {'flash':>9} {'cudnn':>9}  TFLOP/s f/fl/cu   "
              f"{'÷fl':>5} {'÷cu':>5}  queued: {'÷fl':>5} {'÷cu':>5}  variant (origin, match)")
        for dt in o.bwd_dtypes.split(","):
            dtype = dtypes[dt]
            for mask in masks:
                causal = mask == "causal"
                for d in head_dims:
                    for s in (int(x) for x in o.bwd_seqlens.split(",")):
                        b, h = max(1, TOKENS // s), MODEL_WIDTH // d
                        what = f"{dt} {mask:<6} d{d:<3} s{s:<5} b{b:<3} h{h:<3}"
                        row = {"direction": "bwd", "dtype": dt, "mask": mask, "head_dim": d, "seqlen": s,
                               "batch": b, "heads": h}
                        rows.append(row)
                        # Check before time: a wrong backward is not timed.
                        try:
                            errs, checked = grad_check(dtype, d, s, causal)
                        except (ValueError, fatune.FatuneError) as e:
                            print(f"{what}   refused: {e}")
                            row["error"] = str(e)
                            failures += 1
                            continue
                        row["grad_rel_l2"] = errs
                        if not max(errs) <= GRAD_TOLERANCE[dt]:
                            print(f"{what}   gradient check FAILED, not timed: rel_l2 dq {errs[0]:.3g} "
                                  f"dk {errs[1]:.3g} dv {errs[2]:.3g} > {GRAD_TOLERANCE[dt]} ({checked})")
                            row["error"] = "gradient check failed"
                            failures += 1
                            continue
                        q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
                        q, k, v = (t.requires_grad_() for t in (q, k, v))
                        out = fatune.attention(q, k, v, causal=causal)
                        ms, mq = {}, {}
                        ms["fatune"], mq["fatune"] = timed_both(
                            lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), o.bwd_reps)
                        choice = fatune.last_choice()
                        qt, kt, vt, dot = (t.transpose(1, 2) for t in (q, k, v, dout))
                        for name, be in sdpa_backends:
                            try:
                                with sdpa_kernel(be):
                                    ot = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                                ms[name], mq[name] = timed_both(
                                    lambda: torch.autograd.grad(ot, (q, k, v), dot, retain_graph=True), o.bwd_reps)
                            except RuntimeError as e:
                                ms[name] = mq[name] = None
                                print(f"  {name} unavailable: {str(e).splitlines()[0][:80]}")
                        flops = BWD_FLOPS_PER_FWD * 4.0 * b * h * s * s * d / (2 if causal else 1)
                        tf = {k2: (flops / (m * 1e-3) / 1e12 if m else None) for k2, m in ms.items()}
                        ratio, ratio_q = ratios(ms), ratios(mq)
                        note = "" if checked == choice.variant else f"; checked {checked}"
                        print(f"{what}   {fmt_ms(ms['fatune'])} {fmt_ms(ms['flash'])} {fmt_ms(ms['cudnn'])}  "
                              f"{fmt_num(tf['fatune'])}/{fmt_num(tf['flash'])}/{fmt_num(tf['cudnn'])}   "
                              f"{fmt_num(ratio['flash'], '5.2f'):>5} {fmt_num(ratio['cudnn'], '5.2f'):>5}  "
                              f"queued: {fmt_num(ratio_q['flash'], '5.2f'):>5} {fmt_num(ratio_q['cudnn'], '5.2f'):>5}  "
                              f"{choice.variant} ({choice.origin}, {choice.match}{note})")
                        row.update({"ms": ms, "ms_queued": mq, "tflops": tf, "speed_ratio": ratio,
                                    "speed_ratio_queued": ratio_q, "variant": choice.variant,
                                    "checked_variant": checked, "origin": choice.origin, "match": choice.match,
                                    "load": choice.load})
                        if not o.no_deterministic:
                            deterministic(what, row, q, k, v, dout, causal, ms["fatune"], mq["fatune"])

    def deterministic(what, row, q, k, v, dout, causal, ms, mq):
        """The deterministic backward of ROW's inputs: bit-identical gradients
        from two calls (issue 20), and its time over the default backward's,
        alone and queued (issue 20's bound: 1.15)."""
        nonlocal failures
        out = fatune.attention(q, k, v, causal=causal, deterministic=True)
        grad = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)  # noqa: E731
        first, second = grad(), grad()
        same = all(torch.equal(a, b) for a, b in zip(first, second))
        del first, second
        det_ms, det_mq = timed_both(grad, o.bwd_reps)
        choice = fatune.last_choice()
        r, rq = det_ms / ms, det_mq / mq
        print(f"{what}   deterministic {fmt_ms(det_ms)}  ÷ default {r:5.2f}, queued {rq:5.2f} "
              f"(bound 1.15: {'met' if max(r, rq) <= DETERMINISTIC_BOUND else 'NOT met'}); "
              f"{'bit-identical twice' if same else 'gradients DIFFER between two calls'}  {choice.variant}")
        row.update({"ms_deterministic": det_ms, "ms_deterministic_queued": det_mq,
                    "deterministic_ratio": r, "deterministic_ratio_queued": rq,
                    "deterministic_bit_identical": same, "deterministic_variant": choice.variant})
        if not same:
            failures += 1

    def peak_bytes(fn, *shape):
        """Peak device bytes that FN (a forward and backward on bf16 inputs
        q, k, v, dout of SHAPE, allocated beforehand) allocates beyond them,
        and the inputs' bytes."""
        q, k, v, dout = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        grads = fn(q, k, v, dout)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        inputs = 4 * q.numel() * q.element_size()
        del q, k, v, dout, grads
        return peak, inputs

    def fatune_fwd_bwd(q, k, v, dout):
        return torch.autograd.grad(fatune.attention(q, k, v), (q, k, v), dout)

    def math_fwd_bwd(q, k, v, dout):
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            ot = F.scaled_dot_product_attention(qt, kt, vt)
        return torch.autograd.grad(ot, (q, k, v), dout.transpose(1, 2))

    def fatune_memory(d, s):
        h = MODEL_WIDTH // d
        peak, inputs = peak_bytes(fatune_fwd_bwd, 1, s, h, d)
        tensor = 2 * s * h * d  # one bf16 (1, s, h, d) tensor
        # fp32 lse; the workspace as include/fatune.h states it: D and the
        # accumulator, then an int32 semaphore a (head, 64 query rows).
        lse, workspace = 4 * h * s, 4 * h * s * (1 + d) + 4 * h * -(-s // 64)
        expected = 4 * tensor + lse + workspace
        print(f"memory fatune d{d} s{s} b1 h{h}: peak {peak / MIB:.1f} MiB beyond Q, K, V, dO "
              f"({inputs / MIB:.0f} MiB); expected O, dQ, dK, dV 4 x 2·N·H·D = {4 * tensor / MIB:.1f} MiB + "
              f"lse 4·H·N = {lse / MIB:.2f} MiB + workspace 4·H·(N·(1+D) + ⌈N/64⌉) = {workspace / MIB:.1f} MiB = "
              f"{expected / MIB:.1f} MiB (measured/expected {peak / expected:.3f}): linear in N")
        memory.append({"impl": "fatune", "head_dim": d, "seqlen": s, "batch": 1, "heads": h,
                       "peak_bytes": peak, "input_bytes": inputs, "expected_bytes": expected})
        return peak

    def math_memory(d):
        h = MODEL_WIDTH // d
        s = o.memory_seqlen
        while s >= 512:
            try:
                peak, inputs = peak_bytes(math_fwd_bwd, 1, s, h, d)
                break
            except torch.cuda.OutOfMemoryError:
                print(f"memory sdpa-math d{d} s{s}: out of memory; halving")
            gc.collect()
            torch.cuda.empty_cache()
            s //= 2
        else:
            return
        torch.cuda.empty_cache()
        scores = h * s * s  # elements of one (1, H, N, N) score or probability matrix
        fat = fatune_memory(d, s) if s != o.memory_seqlen else None
        print(f"memory sdpa-math d{d} s{s} b1 h{h}: peak {peak / MIB:.1f} MiB beyond Q, K, V, dO; "
              f"the N² scores alone: H·N² = {scores:.3g} elements = {4 * scores / MIB:.0f} MiB per fp32 copy, "
              f"{2 * scores / MIB:.0f} MiB per bf16 copy (peak = {peak / (4 * scores):.2f} fp32 copies)"
              + (f"; fatune at this length {fat / MIB:.1f} MiB ({peak / fat:.0f}x less)" if fat else ""))
        memory.append({"impl": "sdpa_math", "head_dim": d, "seqlen": s, "batch": 1, "heads": h,
                       "peak_bytes": peak, "input_bytes": inputs, "score_elements": scores})

    if "fwd" in directions:
        forward()
    if "bwd" in directions:
        backward()
        if o.memory_seqlen:
            for d in head_dims:
                try:
                    fatune_memory(d, o.memory_seqlen)
                except (ValueError, fatune.FatuneError) as e:
                    print(f"memory fatune d{d}: refused: {e}")
                    failures += 1
                    continue
                math_memory(d)
    if first is not None:
        print(f"first fatune.attention call in this process: {first:.1f} ms (context open, lookup, module load)")
    if o.out:
        with open(o.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "first_call_ms": first, "rows": rows,
                       "memory": memory}, f, indent=1)
    if failures:
        print(f"{failures} backward configurations refused, failing their gradient check or not "
              "bit-identical when deterministic")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
