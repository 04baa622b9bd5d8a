#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The problems users bring (issue 4), timed: fatune.attention and
fatune.attention_varlen against PyTorch's scaled_dot_product_attention with
the FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends, on the
same bf16 tensors in one process.

Rows:
  a  sliding window: seqlen 16384, batch 1, 16 heads, d128, causal against
     the causal window (1024, 0); SDPA has no window, so its window column is
     an explicit boolean mask (the only SDPA path that runs it, where it fits
     memory; EFFICIENT_ATTENTION's time in the notes).
  b  decoding, packed GQA: batch 8, 32 query heads over 8 K/V heads, d128,
     65536 keys, 1 and 16 queries, causal bottom-right; also K/V bytes per
     second against a device copy measured in the same run.
  c  GQA prefill: seqlen 4096, batch 4, 32 query heads in groups of 1, 4, 8
     and 32 (MQA), d128, causal and not.
  d  uneven causal: 1024 queries against 8192 keys, batch 4, 16 heads, d128.
  e  head dim 80 (padded inside the kernel on the d96 template) against d96
     native, seqlen 4096, batch 4, 16 heads, no mask; soft-cap 50 against
     none at d96 and d128 (SDPA has no soft-cap).
  f  varlen: 8 sequences of lengths drawn from 512..4096 (fixed seed), 16
     heads, d128, causal: fatune.attention_varlen against SDPA looping over
     the sequences and against fatune dense, padded to the longest.

Times are CUDA-event medians over --reps calls of the public Python API
(fatune.attention, F.scaled_dot_product_attention: each call's allocation of
its output is inside), after warm-up, L2 flushed before each, each call made
alone (the host's latency before its first launch inside) and again queued
behind a sleep kernel (the GPU's time alone: the "queued" ratios). TFLOP/s count
the visible (unmasked) query-key pairs only, 4 * head_dim FLOPs each, the
same count for every column of a row: a kernel that computes masked tiles
gets no credit for them. Causal is bottom-right aligned throughout: SDPA
gets is_causal=True where seqlen_q == seqlen_k, no mask where seqlen_q is 1
(the same thing), else torch.nn.attention.bias.causal_lower_right.

Check before time: every fatune row's output (and every SDPA column's) is
compared on a slice -- the first and last batch entry and head, up to 128
query rows -- with a float64 reference computed here from the same inputs;
the max abs error and relative L2 are printed, and a row over the tolerance
is marked FAILED and its fatune time not taken. A row that raises is marked
ERROR with the message; the script goes on to the next and exits 1 at the end
if any row failed.

    FATUNE_LIB=build/runtime/libfatune.so python3 bench/bench_features.py \\
        [--out DIR] [--quick] [--rows a,b,c,d,e,f] [--reps N]

--out DIR writes DIR/bench_features.md (the table) and
DIR/bench_features.json (every row, with the run's GPU and versions).
"""
import argparse
import gc
import json
import math
import os
import random
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import cuda_timing  # noqa: E402  (beside this script)
SKIP = 77
ROWS = "abcdef"
TOLERANCE = 2e-2            # relative L2 of bf16 outputs against float64, as python/tests/test_fatune.py
CHECK_ROWS = 128            # query rows of a check slice (--quick: CHECK_ROWS_QUICK)
CHECK_ROWS_QUICK = 32
FLUSH_BYTES = 512 << 20     # zeroed before every repetition: larger than any GPU's L2
COPY_BYTES = 2 << 30        # the copy whose bandwidth the decoding rows are set against
MASK_HEADROOM = 4           # an explicit SDPA mask runs only with this many times its bytes free
VARLEN_SEED, VARLEN_SEQS, VARLEN_MIN, VARLEN_MAX = 1234, 8, 512, 4096
NONE, CAUSAL = (-1, -1), (-1, 0)  # windows (left, right), bottom-right aligned


def visible_pairs(sq, sk, window):
    """Query-key pairs a (sq, sk) problem's WINDOW (left, right; -1
    unbounded) leaves visible, query i sitting at key position i + sk - sq."""
    left, right = window
    total = 0
    for i in range(sq):
        pos = i + sk - sq
        lo = 0 if left < 0 else max(0, pos - left)
        hi = sk - 1 if right < 0 else min(sk - 1, pos + right)
        total += max(0, hi - lo + 1)
    return total


def fmt(x, spec):
    return format(x, spec) if x is not None else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="", help="folder for bench_features.md and bench_features.json")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and a smaller check slice")
    ap.add_argument("--rows", default=",".join(ROWS), help="which rows (comma-separated letters a..f)")
    ap.add_argument("--reps", type=int, default=0, help="timed calls per measurement (default 30, quick 10)")
    ap.add_argument("--warmup", type=int, default=0, help="untimed calls first (default 5, quick 2)")
    o = ap.parse_args()
    rows_wanted = [r.strip() for r in o.rows.split(",") if r.strip()]
    bad = [r for r in rows_wanted if r not in ROWS]
    if bad or not rows_wanted:
        print(f"bench_features.py: --rows {o.rows!r}: expected letters among {','.join(ROWS)}", file=sys.stderr)
        return 2
    if o.reps < 0 or o.warmup < 0:
        print(f"bench_features.py: --reps {o.reps} / --warmup {o.warmup}: must be >= 0", file=sys.stderr)
        return 2
    reps = o.reps or (10 if o.quick else 30)
    warmup = o.warmup or (2 if o.quick else 5)
    check_rows = CHECK_ROWS_QUICK if o.quick else CHECK_ROWS
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return SKIP
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    import fatune

    dtype = torch.bfloat16
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    backends = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))

    sleep = cuda_timing.sleep_cycles(torch)

    def timed(fn, queued=False):
        """Median device time of FN in ms, L2 flushed before each call.
        QUEUED puts each call behind a sleep kernel after the flush: the host
        has launched it before the GPU reaches the first event, so the events
        hold the GPU's time alone, without the host's latency before the
        first launch (cuda_timing.py)."""
        for _ in range(warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            flush.zero_()
            if queued:
                torch.cuda._sleep(sleep)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    def store(row, name, fn, flops):
        """Times FN both ways into ROW under NAME: ms and TFLOP/s of a call
        made alone (the host's latency inside), ms_queued of the GPU's time.
        Returns the call's ms."""
        ms = timed(fn)
        row["ms"][name], row["tflops"][name] = ms, flops / (ms * 1e-3) / 1e12
        row.setdefault("ms_queued", {})[name] = timed(fn, queued=True)
        return ms

    # ---- the float64 reference on a slice ----------------------------------

    def slice_rows(sq):
        if sq <= check_rows:
            return list(range(sq))
        step = (sq - 1) / (check_rows - 1)
        return sorted({round(i * step) for i in range(check_rows)})

    def reference_rows(q, k, v, b, head, rows, scale, window, softcap):
        """o[b, rows, head] (len(rows), d) in float64 for (batch, seqlen,
        heads, head_dim) Q, K, V, bottom-right WINDOW, soft-cap; 0 for a row
        that sees no key."""
        sq, sk = q.shape[1], k.shape[1]
        kh = head // (q.shape[2] // k.shape[2])
        r = torch.tensor(rows, device=q.device)
        s = (q[b, r, head].double() @ k[b, :, kh].double().T) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        pos = r[:, None] + (sk - sq)
        j = torch.arange(sk, device=q.device)[None, :]
        seen = torch.ones(len(rows), sk, dtype=torch.bool, device=q.device)
        if window[0] >= 0:
            seen &= j >= pos - window[0]
        if window[1] >= 0:
            seen &= j <= pos + window[1]
        s = s.masked_fill(~seen, float("-inf"))
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        l = e.sum(-1, keepdim=True)
        return (e / torch.where(l > 0, l, torch.ones_like(l))) @ v[b, :, kh].double()

    def check_dense(out, q, k, v, window, softcap):
        """(max abs error, relative L2) of OUT (batch, seqlen_q, heads, d) on
        the slice, against reference_rows."""
        scale = q.shape[3] ** -0.5
        rows = slice_rows(q.shape[1])
        got, ref = [], []
        for b in sorted({0, q.shape[0] - 1}):
            for h in sorted({0, q.shape[2] - 1}):
                got.append(out[b, rows, h].double())
                ref.append(reference_rows(q, k, v, b, h, rows, scale, window, softcap))
        got, ref = torch.cat(got), torch.cat(ref)
        if not torch.isfinite(got).all():
            return float("inf"), float("inf")
        return (got - ref).abs().max().item(), ((got - ref).norm() / ref.norm()).item()

    # ---- one row ------------------------------------------------------------

    results = []
    header = (f"{'row':<3} {'case':<44} {'fatune':>9} {'flash':>9} {'cudnn':>9}   TFLOP/s f/fl/cu   "
              f"{'÷fl':>5} {'÷cu':>5}  check            variant")
    gpu = torch.cuda.get_device_name()
    print(f"# {gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"libfatune {os.environ.get('FATUNE_LIB', '(default search)')}; ms median of {reps}, L2 flushed; "
          "TFLOP/s on visible pairs")
    print(header)

    def report(row):
        results.append(row)
        ms, tf = row["ms"], row["tflops"]
        ratio = {b: (ms[b] / ms["fatune"] if ms.get(b) and ms.get("fatune") else None) for b in ("flash", "cudnn")}
        row["speedup"] = ratio
        mq = row.get("ms_queued") or {}
        row["speedup_queued"] = {b: (mq[b] / mq["fatune"] if mq.get(b) and mq.get("fatune") else None)
                                 for b in ("flash", "cudnn")}
        check = row.get("check") or ""
        print(f"{row['row']:<3} {row['case']:<44} {fmt(ms.get('fatune'), '9.3f')} {fmt(ms.get('flash'), '9.3f')} "
              f"{fmt(ms.get('cudnn'), '9.3f')}   {fmt(tf.get('fatune'), '.0f')}/{fmt(tf.get('flash'), '.0f')}/"
              f"{fmt(tf.get('cudnn'), '.0f')}   {fmt(ratio['flash'], '5.2f'):>5} {fmt(ratio['cudnn'], '5.2f'):>5}  "
              f"{check:<16} {row.get('variant', '')}  queued {fmt(row['speedup_queued']['flash'], '.2f')}/"
              f"{fmt(row['speedup_queued']['cudnn'], '.2f')}", flush=True)
        for n in row["notes"]:
            print(f"      {n}", flush=True)

    def new_row(letter, case, **shape):
        return {"row": letter, "case": case, "status": "ok", "ms": {}, "tflops": {}, "notes": [], **shape}

    def sdpa_dense(row, q, k, v, window, pairs, extra=None):
        """Times SDPA's backends on Q, K, V (batch, seqlen, heads, d) for WINDOW
        (none, causal or, with EXTRA a boolean mask, any), each checked on the
        slice first; n/a where a backend refuses the case or gets it wrong."""
        sq, sk = q.shape[1], k.shape[1]
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        kwargs = {}
        if k.shape[2] != q.shape[2]:
            kwargs["enable_gqa"] = True
        if extra is not None:
            kwargs["attn_mask"] = extra
        elif window == CAUSAL and sq == sk:
            kwargs["is_causal"] = True
        elif window == CAUSAL and sq > 1:
            kwargs["attn_mask"] = causal_lower_right(sq, sk)
        elif window not in (NONE, CAUSAL):
            raise ValueError(f"window {window} needs an explicit mask")
        flops = 4.0 * q.shape[3] * pairs * q.shape[0] * q.shape[2]
        for name, be in backends + ((("mem_eff", SDPBackend.EFFICIENT_ATTENTION),) if extra is not None else ()):
            def run(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
            try:
                out = run().transpose(1, 2)
                torch.cuda.synchronize()
            except Exception as e:  # a backend that does not serve the case
                row["ms"][name] = row["tflops"][name] = None
                row["notes"].append(f"{name}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:90]})")
                continue
            err, rel = check_dense(out, q, k, v, window, 0.0)
            del out
            if not rel <= TOLERANCE:
                row["ms"][name] = row["tflops"][name] = None
                row["notes"].append(f"{name}: n/a, wrong on the check slice (rel_l2 {rel:.2e}, max {err:.2e})")
                continue
            store(row, name, run, flops)

    def record_choice(row):
        """The variant that served the last call and the tuned problem it was
        chosen for: a variable-length profile shows as a bucket at its
        longest sequence, a dense problem at its seqlen."""
        c = fatune.last_choice()
        row["variant"] = c.variant
        row["choice"] = dict(origin=c.origin, match=c.match, bucket_seqlen=c.bucket_seqlen,
                             bucket_seqlen_k=c.bucket_seqlen_k, tuned_ms=c.tuned_ms)
        row["notes"].append(f"served by {c.variant} ({c.origin}, {c.match}, tuned at "
                            f"seqlen {c.bucket_seqlen}/{c.bucket_seqlen_k}: {c.tuned_ms:.3f} ms)")

    def fatune_dense(row, q, k, v, window, softcap, pairs):
        """Runs fatune once, checks it on the slice, then times it. False if
        the check failed (the row is then FAILED)."""
        causal = window == CAUSAL
        kw = dict(causal=causal, window_size=(-1, -1) if causal else window, softcap=softcap)
        out = fatune.attention(q, k, v, **kw)
        torch.cuda.synchronize()
        record_choice(row)
        err, rel = check_dense(out, q, k, v, window, softcap)
        del out
        row["check"] = f"max {err:.1e} rel {rel:.1e}"
        row["check_max_abs"], row["check_rel_l2"] = err, rel
        if not rel <= TOLERANCE:
            row["status"] = "FAILED"
            row["check"] = "FAILED " + row["check"]
            return False
        store(row, "fatune", lambda: fatune.attention(q, k, v, **kw), 4.0 * q.shape[3] * pairs * q.shape[0] * q.shape[2])
        return True

    def dense_case(letter, case, b, sq, sk, h, hk, d, window=NONE, softcap=0.0, mask_sdpa=False):
        row = new_row(letter, case, batch=b, seqlen_q=sq, seqlen_k=sk, heads=h, heads_k=hk, head_dim=d,
                      window=list(window), softcap=softcap)
        pairs = visible_pairs(sq, sk, window)
        row["visible_pairs"] = pairs
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=dtype) for _ in range(2))
        fatune_dense(row, q, k, v, window, softcap, pairs)
        if softcap:
            row["notes"].append("SDPA: n/a (no soft-cap)")
        elif window in (NONE, CAUSAL):
            sdpa_dense(row, q, k, v, window, pairs)
        elif mask_sdpa:
            need = sq * sk * 2 * MASK_HEADROOM  # the bool mask, and its bf16 bias in the backends that add one
            if torch.cuda.mem_get_info()[0] >= need:
                i = torch.arange(sq, device="cuda")[:, None] + (sk - sq)
                j = torch.arange(sk, device="cuda")[None, :]
                mask = torch.ones(sq, sk, dtype=torch.bool, device="cuda")
                if window[0] >= 0:
                    mask &= j >= i - window[0]
                if window[1] >= 0:
                    mask &= j <= i + window[1]
                row["notes"].append("SDPA columns: an explicit boolean (sq, sk) mask")
                sdpa_dense(row, q, k, v, window, pairs, extra=mask)
                if row["ms"].get("mem_eff"):
                    row["notes"].append(f"SDPA EFFICIENT_ATTENTION with the mask: {row['ms']['mem_eff']:.3f} ms, "
                                        f"{row['tflops']['mem_eff']:.0f} TFLOP/s")
                del mask
            else:
                row["notes"].append(f"SDPA: n/a (the explicit mask needs {need >> 20} MiB free)")
        else:
            row["notes"].append("SDPA: n/a (no window)")
        del q, k, v
        return row

    # ---- the rows -------------------------------------------------------------

    def row_a():
        s, b, h, d, left = 16384, 1, 16, 128, 1024
        causal = dense_case("a", f"causal s{s} b{b} h{h} d{d}", b, s, s, h, h, d, CAUSAL)
        report(causal)
        win = dense_case("a", f"window ({left}, 0) s{s} b{b} h{h} d{d}", b, s, s, h, h, d, (left, 0), mask_sdpa=True)
        if causal["ms"].get("fatune") and win["ms"].get("fatune"):
            t_ratio = causal["ms"]["fatune"] / win["ms"]["fatune"]
            p_ratio = causal["visible_pairs"] / win["visible_pairs"]
            win["time_ratio_causal_over_window"], win["pair_ratio_causal_over_window"] = t_ratio, p_ratio
            cq, wq = causal.get("ms_queued", {}).get("fatune"), win.get("ms_queued", {}).get("fatune")
            q_ratio = cq / wq if cq and wq else None
            win["time_ratio_queued"] = q_ratio
            win["notes"].append(f"time(causal)/time(window) {t_ratio:.2f} (queued: {fmt(q_ratio, '.2f')}), "
                                f"visible pairs causal/window {p_ratio:.2f} (the window's time follows its "
                                "pairs when the ratios agree)")
        report(win)

    copy = {}

    def copy_tbps():
        """Bytes read + written per second of a device copy of COPY_BYTES,
        measured once per run."""
        if "tbps" not in copy:
            src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            ms = timed(lambda: dst.copy_(src))
            copy["ms"], copy["tbps"] = ms, 2 * COPY_BYTES / (ms * 1e-3) / 1e12
            print(f"# copy of {COPY_BYTES >> 30} GiB: {ms:.3f} ms, {copy['tbps']:.2f} TB/s (read + written)")
            del src, dst
        return copy["tbps"]

    def row_b():
        b, h, hk, d, sk = 8, 32, 8, 128, 65536
        peak = copy_tbps()
        for sq in (1, 16):
            row = dense_case("b", f"decode causal sq{sq} sk{sk} b{b} h{h}/{hk} d{d}", b, sq, sk, h, hk, d, CAUSAL)
            kv_bytes = 2 * b * sk * hk * d * 2  # K and V, bf16
            row["kv_bytes"], row["copy_tbps"] = kv_bytes, peak
            for name in ("fatune", "flash", "cudnn"):
                ms = row["ms"].get(name)
                if ms:
                    tbps = kv_bytes / (ms * 1e-3) / 1e12
                    row.setdefault("kv_tbps", {})[name] = tbps
                    row["notes"].append(f"{name}: K/V {kv_bytes / 1e9:.2f} GB in {ms:.3f} ms = {tbps:.2f} TB/s, "
                                        f"{tbps / peak:.0%} of the copy's {peak:.2f} TB/s")
            report(row)

    def row_c():
        s, b, h, d = 4096, 4, 32, 128
        for group in (1, 4, 8, h):
            hk = h // group
            for window in (NONE, CAUSAL):
                label = "MQA" if hk == 1 else f"group {group}"
                report(dense_case("c", f"GQA {label} {'causal' if window == CAUSAL else 'none'} s{s} b{b} "
                                       f"h{h}/{hk} d{d}", b, s, s, h, hk, d, window))

    def row_d():
        report(dense_case("d", "uneven causal sq1024 sk8192 b4 h16 d128", 4, 1024, 8192, 16, 16, 128, CAUSAL))

    def row_e():
        s, b, h = 4096, 4, 16
        native = dense_case("e", f"d96 native none s{s} b{b} h{h}", b, s, s, h, h, 96)
        report(native)
        padded = dense_case("e", f"d80 padded (d96 template) none s{s} b{b} h{h}", b, s, s, h, h, 80)
        if native["ms"].get("fatune") and padded["ms"].get("fatune"):
            padded["notes"].append(f"time(d80)/time(d96) {padded['ms']['fatune'] / native['ms']['fatune']:.2f} "
                                   "(1.00: padding costs nothing beyond the d96 template's work)")
        report(padded)
        for d in (96, 128):
            plain = native if d == 96 else dense_case("e", f"d{d} none s{s} b{b} h{h}", b, s, s, h, h, d)
            if d != 96:
                report(plain)
            capped = dense_case("e", f"d{d} softcap 50 none s{s} b{b} h{h}", b, s, s, h, h, d, softcap=50.0)
            if plain["ms"].get("fatune") and capped["ms"].get("fatune"):
                capped["notes"].append(f"time(softcap)/time(none) {capped['ms']['fatune'] / plain['ms']['fatune']:.2f}")
            report(capped)

    def row_f():
        h, d = 16, 128
        lens = random.Random(VARLEN_SEED).choices(range(VARLEN_MIN, VARLEN_MAX + 1), k=VARLEN_SEQS)
        total, longest = sum(lens), max(lens)
        cu = [sum(lens[:i]) for i in range(len(lens) + 1)]
        cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
        pairs = sum(visible_pairs(n, n, CAUSAL) for n in lens)
        flops = 4.0 * d * pairs * h
        case = f"varlen causal {VARLEN_SEQS} seqs {min(lens)}..{longest} h{h} d{d}"
        row = new_row("f", case, lengths=lens, heads=h, head_dim=d, visible_pairs=pairs)
        q, k, v = (torch.randn(total, h, d, device="cuda", dtype=dtype) for _ in range(3))
        scale = d ** -0.5

        def check(out):
            """(max abs, rel L2) of OUT (total, h, d) on each sequence's slice."""
            got, ref = [], []
            for i, n in enumerate(lens):
                rows = slice_rows(n)
                seq = slice(cu[i], cu[i + 1])
                for hh in (0, h - 1):
                    got.append(out[seq][rows, hh].double())
                    ref.append(reference_rows(q[None, seq], k[None, seq], v[None, seq], 0, hh, rows, scale,
                                              CAUSAL, 0.0))
            got, ref = torch.cat(got), torch.cat(ref)
            if not torch.isfinite(got).all():
                return float("inf"), float("inf")
            return (got - ref).abs().max().item(), ((got - ref).norm() / ref.norm()).item()

        def run_varlen():
            return fatune.attention_varlen(q, k, v, cu_t, cu_t, longest, longest, causal=True)
        out = run_varlen()
        torch.cuda.synchronize()
        record_choice(row)
        err, rel = check(out)
        del out
        row["check"], row["check_max_abs"], row["check_rel_l2"] = f"max {err:.1e} rel {rel:.1e}", err, rel
        if rel <= TOLERANCE:
            store(row, "fatune", run_varlen, flops)
        else:
            row["status"], row["check"] = "FAILED", "FAILED " + row["check"]
        # SDPA, one call per sequence (what a caller without varlen does).
        views = [tuple(t[None, cu[i]:cu[i + 1]].transpose(1, 2) for t in (q, k, v)) for i in range(len(lens))]
        for name, be in backends:
            def loop(be=be):
                with sdpa_kernel(be):
                    return [F.scaled_dot_product_attention(a, b_, c, is_causal=True) for a, b_, c in views]
            try:
                outs = loop()
                torch.cuda.synchronize()
            except Exception as e:
                row["ms"][name] = row["tflops"][name] = None
                row["notes"].append(f"{name} loop: n/a ({type(e).__name__}: {str(e).splitlines()[0][:90]})")
                continue
            err, rel = check(torch.cat([x[0].transpose(0, 1) for x in outs]))
            del outs
            if not rel <= TOLERANCE:
                row["ms"][name] = row["tflops"][name] = None
                row["notes"].append(f"{name} loop: n/a, wrong on the check slice (rel_l2 {rel:.2e})")
                continue
            store(row, name, loop, flops)
        row["notes"].append(f"lengths {lens}; SDPA columns loop over the {VARLEN_SEQS} sequences")
        # fatune dense on the batch padded to the longest (the padding computed, not credited).
        qp, kp, vp = (torch.zeros(len(lens), longest, h, d, device="cuda", dtype=dtype) for _ in range(3))
        for i, n in enumerate(lens):
            for dst, src in ((qp, q), (kp, k), (vp, v)):
                dst[i, :n] = src[cu[i]:cu[i + 1]]
        # Bottom-right causal on padded rows would shift the diagonal: pad
        # queries and keys alike and read the first n rows, which see exactly
        # their sequence's keys (top-left = bottom-right when sq == sk).
        padded = fatune.attention(qp, kp, vp, causal=True)
        torch.cuda.synchronize()
        err, rel = check(torch.cat([padded[i, :n] for i, n in enumerate(lens)]))
        if rel <= TOLERANCE:
            ms = store(row, "fatune_padded", lambda: fatune.attention(qp, kp, vp, causal=True), flops)
            note = f"fatune dense padded to {longest}: {ms:.3f} ms, {row['tflops']['fatune_padded']:.0f} TFLOP/s"
            if row["ms"].get("fatune"):
                note += f"; padded/varlen time {ms / row['ms']['fatune']:.2f}"
            row["notes"].append(note)
        else:
            row["notes"].append(f"fatune dense padded: FAILED its check (rel_l2 {rel:.2e})")
            row["status"] = "FAILED"
        report(row)  # the tensors go with this function's frame

    for letter in rows_wanted:
        t0 = time.perf_counter()
        try:
            {"a": row_a, "b": row_b, "c": row_c, "d": row_d, "e": row_e, "f": row_f}[letter]()
        except Exception as e:  # one row's failure is that row's, not the run's
            msg = f"{type(e).__name__}: {e}"
            print(f"{letter:<3} ERROR {msg}", flush=True)
            traceback.print_exc(limit=3)
            results.append({"row": letter, "case": "(row raised)", "status": "ERROR", "error": msg, "ms": {},
                            "tflops": {}, "notes": []})
        gc.collect()
        torch.cuda.empty_cache()
        print(f"# row {letter}: {time.perf_counter() - t0:.0f} s", flush=True)

    failures = sum(1 for r in results if r["status"] != "ok")
    if o.out:
        write_outputs(o.out, results, {
            "gpu": gpu, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "fatune_lib": os.environ.get("FATUNE_LIB", ""), "reps": reps, "warmup": warmup, "quick": o.quick,
            "copy": copy, "tolerance_rel_l2": TOLERANCE})
    if failures:
        print(f"{failures} rows FAILED their check or raised")
    return 1 if failures else 0


def write_outputs(folder, rows, run):
    """FOLDER/bench_features.md (one table, then each row's notes) and
    FOLDER/bench_features.json (RUN and every row)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bench_features.json"), "w") as f:
        json.dump({"run": run, "rows": rows}, f, indent=1, default=str)

    def cell(row, key, spec):
        v = row["ms" if spec == "ms" else "tflops"].get(key)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "n/a"
        return f"{v:.3f}" if spec == "ms" else f"{v:.0f}"

    lines = [
        f"# fatune features against SDPA: {run['gpu']}",
        "",
        f"torch {run['torch']}, cuDNN {run['cudnn']}; bf16; ms = median of {run['reps']} calls of the public API "
        "(L2 flushed), each made alone (the host's latency before its first launch inside); TFLOP/s on "
        "the visible pairs only; speedup = SDPA time / fatune time; queued: the same calls queued behind "
        "a sleep kernel, the GPU's time alone; causal is bottom-right aligned. Generated by "
        "bench/bench_features.py.",
        "",
        "| row | case | fatune ms | fatune TFLOP/s | FA2 ms | FA2 TFLOP/s | cuDNN ms | cuDNN TFLOP/s "
        "| ÷FA2 | ÷cuDNN | queued ÷FA2 | queued ÷cuDNN | check | variant |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|",
    ]
    for r in rows:
        sp, sq = r.get("speedup") or {}, r.get("speedup_queued") or {}
        status = r.get("check", "") if r["status"] != "ERROR" else "ERROR: " + r.get("error", "")[:80]
        lines.append(
            f"| {r['row']} | {r['case']} | {cell(r, 'fatune', 'ms')} | {cell(r, 'fatune', 'tf')} "
            f"| {cell(r, 'flash', 'ms')} | {cell(r, 'flash', 'tf')} | {cell(r, 'cudnn', 'ms')} "
            f"| {cell(r, 'cudnn', 'tf')} | {fmt(sp.get('flash'), '.2f')} | {fmt(sp.get('cudnn'), '.2f')} "
            f"| {fmt(sq.get('flash'), '.2f')} | {fmt(sq.get('cudnn'), '.2f')} "
            f"| {status.replace('|', '/')} | {r.get('variant', '')} |")
    lines += ["", "## Notes", ""]
    if run.get("copy"):
        lines.append(f"- device copy of 2 GiB: {run['copy']['ms']:.3f} ms, {run['copy']['tbps']:.2f} TB/s "
                     "(bytes read + written)")
    for r in rows:
        for n in r["notes"]:
            lines.append(f"- {r['row']}, {r['case']}: {n}")
    with open(os.path.join(folder, "bench_features.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"# wrote {folder}/bench_features.md and bench_features.json")


if __name__ == "__main__":
    sys.exit(main())
