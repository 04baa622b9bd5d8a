#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fatune inside a PyTorch program against SDPA's backends, in one process:
the measured half of issue 23's "Done when" (its correctness half --
opcheck, CUDA-graph replays, the transformers bound -- is
python/tests/test_gpu_torch.py's and test_gpu_transformers.py's):

  graphs  torch._dynamo.explain on CUDA tensors of a function calling
          fatune.attention, fatune.attention_bwd and fatune.attention_varlen:
          graphs, breaks (0 expected), whether the fatune operator is in the
          graph, the first break's reason; then a loss through
          fatune.attention compiled with fullgraph=True by an AOTAutograd
          backend that keeps its graphs and runs them eagerly (no inductor):
          fatune::bwd must be in the backward graph, and the compiled
          gradients are compared with eager's (relative L2).
  host    host µs of one call, queued behind a sleep kernel so the GPU never
          makes the host wait (median over --samples of the mean of a burst,
          cuda_timing.queued_host_us). The small call: batch 1, 1 query, 512
          keys, 32 query heads over 8 K/V heads, d128, bf16 (a decoding
          step), fatune.attention against scaled_dot_product_attention
          unpinned and pinned to FLASH_ATTENTION (FlashAttention-2),
          CUDNN_ATTENTION and EFFICIENT_ATTENTION, with enable_gqa=True where
          the backend takes it, else on K/V repeated beforehand (the K/V
          column says which), and the same call as a decoding step through
          fatune.attention_with_kvcache (a contiguous cache, the lengths
          an int32 tensor). Then the autograd backward,
          torch.autograd.grad(o, (q, k, v), dout) on a kept graph, bf16 d128
          seqlen 4096 batch 4 heads 16, none and causal, against
          FLASH_ATTENTION and CUDNN_ATTENTION (half as many samples), its
          gradients first checked against FLASH's. fatune ÷ each (below 1:
          fatune spends less), and issue 23's bound, fatune ≤ 1.0 × FLASH.
  model   a random-init Llama (hidden 2048, 16 query and 4 K/V heads,
          intermediate 5632, vocab 32000, --layers 4), bf16, --batch 1 x
          --seqlen 8192: a training step (forward, loss, backward, AdamW)
          between CUDA events, median of --reps after --warmup, with
          attn_implementation "fatune" against "sdpa" unpinned and pinned
          to FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION and MATH;
          each from the same weights with a fresh optimizer; its peak memory
          (max_memory_allocated, the resident weights included). Before
          timing, each configuration's logits of the first sequence against
          the same weights in float64 (SDPA MATH): relative L2 and argmax
          agreement; fatune above CHECK_TOLERANCE is not timed.

A cell that fails prints why (the exception and SDPA's first warnings, or
"out of memory") and the run goes on. Exit status 1 when a fatune cell
failed, broke a graph or failed its check; 77 without PyTorch or a GPU.

    PYTHONPATH=$PWD/python FATUNE_LIB=build/runtime/libfatune.so python3 bench/bench_torch.py \\
        [--tables graphs,host,model] [--quick] [--batch 1] [--seqlen 8192] [--json OUT]
"""
import argparse
import contextlib
import copy
import gc
import json
import os
import re
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import cuda_timing  # noqa: E402  (beside this script)

SKIP = 77
TABLES = ("graphs", "host", "model")
SMALL = (1, 1, 512, 32, 8, 128)   # issue 23's small call: batch, seqlen_q, seqlen_k, heads, heads_k, head_dim
TRAIN = (4, 4096, 16, 128)        # the backward's training shape: batch, seqlen, heads, head_dim
LLAMA = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_attention_heads=16,
             num_key_value_heads=4)
CALL_SLEEP_MS = 1.0       # GPU sleep queued per small call: far above its host time
SMALL_BURST = 50          # small calls a host-time sample (at most a few launches each: far below the queue's depth)
BACKWARD_BURST = 10       # backward calls a host-time sample (each queued behind cuda_timing.SLEEP_MS)
GRAD_TOLERANCE = 2e-2     # relative L2 of bf16 gradients against another implementation's
CHECK_TOLERANCE = 5e-2    # relative L2 of the model's bf16 logits against float64: above, not timed
PEER_BOUND = 1.2          # issue 23: fatune's logit error within 1.2 x the larger of FLASH's and CUDNN's
LR = 1e-5
GIB = 1 << 30
DEVICE = "cuda"

torch = F = SDPBackend = sdpa_kernel = fatune = None  # imported by main once a GPU is seen


def first_line(text, width=160):
    return next((x.strip()[:width] for x in str(text).splitlines() if x.strip()), "")


def attempt(what, fn):
    """(FN(), None), or (None, why) having printed why WHAT failed: "out of
    memory", or the exception with the first warnings (SDPA says in
    warnings why a pinned backend refused)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(), None
        except torch.cuda.OutOfMemoryError:
            reason = "out of memory"
        except Exception as e:  # a cell's failure is that cell's, not the run's
            notes = "; ".join(first_line(w.message) for w in caught[:2])
            reason = f"{type(e).__name__}: {first_line(e)}" + (f" ({notes})" if notes else "")
    gc.collect()
    torch.cuda.empty_cache()
    print(f"  {what}: {reason}", flush=True)
    return None, reason


def pinned(backend):
    """sdpa_kernel(BACKEND), or no pin for None (SDPA's own choice)."""
    return sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()


def rand(*shape, grad=False):
    return torch.randn(*shape, device=DEVICE, dtype=torch.bfloat16).requires_grad_(grad)


def rel_l2(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def host_us(fn, calls, samples, sleep):
    """Median over SAMPLES of the mean host µs of CALLS calls of FN queued
    behind a sleep kernel of CALLS x SLEEP cycles (the GPU busy throughout).
    Warnings are ignored while timing: recording one per call would be the
    recorder's time, not the call's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return statistics.median(cuda_timing.queued_host_us(torch, fn, sleep, calls) for _ in range(samples))


def in_graph(op, graph_text):
    """Whether OP (e.g. "fatune.fwd", not matching fatune.fwd_varlen) is called in a graph's text."""
    return re.search(rf"\b{re.escape(op)}\b", graph_text) is not None


def sdpa_backends(default=True):
    named = [("sdpa FLASH_ATTENTION", SDPBackend.FLASH_ATTENTION), ("sdpa CUDNN_ATTENTION", SDPBackend.CUDNN_ATTENTION),
             ("sdpa EFFICIENT_ATTENTION", SDPBackend.EFFICIENT_ATTENTION)]
    return ([("sdpa default", None)] if default else []) + named


# ---- graphs --------------------------------------------------------------------------


def explained(fn, args, op):
    """torch._dynamo.explain of FN(*ARGS): graphs, breaks, their reasons, and whether OP is in a graph."""
    torch._dynamo.reset()
    ex = torch._dynamo.explain(fn)(*args)
    return {"graphs": ex.graph_count, "breaks": ex.graph_break_count,
            "reasons": [first_line(r.reason) for r in ex.break_reasons],
            "op_in_graph": any(in_graph(op, str(g.graph)) for g in ex.graphs)}


def compiled_training(loss, leaves):
    """explain of LOSS, then LOSS compiled (fullgraph=True) through an
    AOTAutograd backend that keeps its graphs and runs them eagerly: whether
    fatune::bwd is in the backward graph, and the compiled gradients'
    largest relative L2 difference from eager's."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    row = explained(loss, leaves, "fatune.fwd")
    backward = []

    def keep_backward(gm, example_inputs):
        backward.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: make_boxed_func(gm.forward),
                           bw_compiler=keep_backward)
    compiled = [t.detach().clone().requires_grad_() for t in leaves]
    torch.compile(loss, backend=backend, fullgraph=True)(*compiled).backward()
    loss(*leaves).backward()
    row.update(op_in_graph=any(in_graph("fatune.bwd", g) for g in backward), backward_graphs=len(backward),
               grads_rel_l2_vs_eager=max(rel_l2(c.grad, e.grad) for c, e in zip(compiled, leaves)))
    return row


def graph_breaks(_):
    """The graph-break table's rows, and how many of fatune's failed or broke a graph."""
    q, k, v = rand(2, 333, 8, 128), rand(2, 333, 2, 128), rand(2, 333, 2, 128)
    out, lse = fatune.attention_with_lse(q, k, v, causal=True)
    cu = torch.tensor([0, 100, 333], dtype=torch.int32, device=q.device)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]

    def loss(q, k, v):
        return fatune.attention(q, k, v, causal=True).float().square().mean()

    paths = [("forward", "fatune.attention", "fatune.fwd",
              lambda: explained(lambda q, k, v: fatune.attention(q, k, v, causal=True), (q, k, v), "fatune.fwd")),
             ("backward", "fatune.attention_bwd", "fatune.bwd",
              lambda: explained(lambda d, q, k, v, o, lse: fatune.attention_bwd(d, q, k, v, o, lse, causal=True),
                                (out, q, k, v, out, lse), "fatune.bwd")),
             ("varlen", "fatune.attention_varlen", "fatune.fwd_varlen",
              lambda: explained(lambda q, k, v, cu: fatune.attention_varlen(q, k, v, cu, cu, 233, 233, causal=True),
                                (q[0], k[0], v[0], cu), "fatune.fwd_varlen")),
             ("training", "loss.backward() compiled", "fatune.bwd", lambda: compiled_training(loss, leaves))]
    print(f"{'graph breaks (explain, CUDA)':<36} {'graphs':>6} {'breaks':>6}  {'op in graph':<22} first break reason")
    rows = []
    for path, call, op, run in paths:
        res, why = attempt(f"{path} {call}", run)
        rows.append(dict(path=path, call=call, op=op, error=why, **(res or {})))
        if res is not None:
            extra = (f"   (backward graphs {res['backward_graphs']}; compiled grads vs eager rel L2 "
                     f"{res['grads_rel_l2_vs_eager']:.2e})" if path == "training" else "")
            print(f"{path:<9} {call:<26} {res['graphs']:>6} {res['breaks']:>6}  "
                  f"{op + (' yes' if res['op_in_graph'] else ' NO'):<22} {(res['reasons'] or ['-'])[0]}{extra}")
    torch._dynamo.reset()
    return rows, sum(bool(r["error"] or r.get("breaks") or not r.get("op_in_graph")) for r in rows)


# ---- host ----------------------------------------------------------------------------


def host_cells(what, calls, samples, burst, sleep):
    """{name: cell} of CALLS, (name, backend, fn, note) each: FN's host µs
    with BACKEND pinned (fn None: not run, NOTE says why), and fatune ÷ it;
    printed as rows, then issue 23's bound."""
    cells = {}
    for name, backend, fn, note in calls:
        def run():
            with pinned(backend):
                return host_us(fn, burst, samples, sleep)
        if fn is None:
            print(f"  {what} {name}: {note}")
        us, why = attempt(f"{what} {name}", run) if fn else (None, note)
        cells[name] = {"us": us, "note": note, "error": why}
    for name, c in cells.items():
        c["fatune_ratio"] = ratio(cells["fatune"]["us"], c["us"])
        print(f"  {what:<7} {name:<26} {fmt(c['us'], '8.1f'):>8} {fmt(c['fatune_ratio'], '9.2f'):>9}  "
              f"{c['note'] if c['us'] is not None else ''}")
    r = cells["sdpa FLASH_ATTENTION"]["fatune_ratio"]
    met = None if r is None else r <= 1.0
    print(f"  issue 23 ({what}): fatune host µs ≤ 1.0 x sdpa FLASH_ATTENTION (FlashAttention-2): "
          + ("not measured" if met is None else f"{'met' if met else 'NOT met'} ({r:.2f})"))
    return {"cells": cells, "bound_met": met}


def host_small(o):
    """The small call's host µs, fatune and each SDPA configuration; 1 if fatune's failed."""
    b, sq, sk, h, hk, d = SMALL
    q, k, v = rand(b, sq, h, d), rand(b, sk, hk, d), rand(b, sk, hk, d)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    krep, vrep = (t.repeat_interleave(h // hk, dim=1) for t in (kt, vt))
    print(f"\nhost µs of a small call: batch {b}, {sq} query, {sk} keys, {h} heads over {hk} K/V heads, d{d}, bf16 "
          f"(median of {o.samples} x mean of {SMALL_BURST} queued calls)")
    ref = F.scaled_dot_product_attention(qt.float(), krep.float(), vrep.float()).transpose(1, 2)
    err, why = attempt("small check", lambda: rel_l2(fatune.attention(q, k, v), ref))
    mine = (lambda: fatune.attention(q, k, v)) if err is not None else None
    note = f"rel L2 {err:.2e} against float32 SDPA ({fatune.last_choice().variant})" if mine else why
    print(f"  {'':<7} {'':<26} {'host µs':>8} {'fatune ÷':>9}  K/V")

    def sdpa_call(backend):
        """SDPA as BACKEND takes the call: enable_gqa=True, else on K/V repeated beforehand (not timed)."""
        gqa = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)  # noqa: E731
        with pinned(backend), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                gqa()
                return gqa, "enable_gqa=True"
            except RuntimeError:
                return (lambda: F.scaled_dot_product_attention(qt, krep, vrep)), "K/V repeated"

    # The same call as a decoding step through the KV-cache API (the cache
    # its K and V, every sequence's length in an int32 tensor).
    lengths = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    kv_err, kv_why = attempt("small kvcache check", lambda: rel_l2(
        fatune.attention_with_kvcache(q, k, v, cache_seqlens=lengths), ref))
    kv_call = (lambda: fatune.attention_with_kvcache(q, k, v, cache_seqlens=lengths)) if kv_err is not None else None
    kv_note = f"rel L2 {kv_err:.2e}, attention_with_kvcache" if kv_call else kv_why
    calls = ([("fatune", None, mine, note), ("fatune kvcache", None, kv_call, kv_note)]
             + [(name, be, *sdpa_call(be)) for name, be in sdpa_backends()])
    res = host_cells("small", calls, o.samples, SMALL_BURST, cuda_timing.sleep_cycles(torch, CALL_SLEEP_MS))
    return dict(res, shape=SMALL, check_rel_l2=err), int(res["cells"]["fatune"]["us"] is None)


def host_backward(o):
    """The autograd backward's host µs at the training shape, none and causal; fatune's failed cells."""
    b, s, h, d = TRAIN
    samples = max(3, o.samples // 2)
    print(f"\nhost µs of the autograd backward: torch.autograd.grad, bf16 d{d} s{s} batch {b} heads {h} "
          f"(median of {samples} x mean of {BACKWARD_BURST} queued calls)")
    print(f"  {'':<7} {'':<26} {'host µs':>8} {'fatune ÷':>9}  check")
    rows = []
    for mask in ("none", "causal"):
        causal = mask == "causal"
        q, k, v = (rand(b, s, h, d, grad=True) for _ in range(3))
        dout = rand(b, s, h, d)
        qt, kt, vt, dot = (t.transpose(1, 2) for t in (q, k, v, dout))
        out, why = attempt(f"{mask} fatune forward", lambda: fatune.attention(q, k, v, causal=causal))
        mine = (lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)) if why is None else None
        peers = []
        for name, backend in sdpa_backends(default=False)[:2]:  # FLASH and CUDNN
            with pinned(backend):
                ot, err = attempt(f"{mask} {name} forward",
                                  lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
            fn = (lambda ot=ot: torch.autograd.grad(ot, (q, k, v), dot, retain_graph=True)) if err is None else None
            peers.append((name, None, fn, "" if fn else "not timed: its forward failed"))
        check = None
        if mine and peers[0][2]:  # check before time: fatune's gradients against FlashAttention-2's
            check, why = attempt(f"{mask} check", lambda: max(rel_l2(g, w) for g, w in zip(mine(), peers[0][2]())))
            if check is not None and not check <= GRAD_TOLERANCE:
                why = f"gradients differ from FLASH's by {check:.2e} > {GRAD_TOLERANCE}: not timed"
            mine = mine if why is None else None
        note = why or (f"grads vs FLASH rel L2 {check:.2e}" if check is not None else "")
        res = host_cells(mask, [("fatune", None, mine, note)] + peers, samples, BACKWARD_BURST,
                         cuda_timing.sleep_cycles(torch))
        rows.append(dict(res, mask=mask, shape=TRAIN, grads_rel_l2_vs_flash=check))
    return rows, sum(r["cells"]["fatune"]["us"] is None for r in rows)


# ---- model ---------------------------------------------------------------------------


def set_attention(model, impl):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:  # an older transformers: the modules read the config at each call
        model.config._attn_implementation = impl


def train_ms(model, ids, backend, warmup, reps):
    """Median ms between CUDA events of REPS training steps after WARMUP, a fresh AdamW."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    ms = []
    for i in range(warmup + reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        with pinned(backend):
            model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        b.record()
        b.synchronize()
        if i >= warmup:
            ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def model_steps(o):
    """The Llama's training-step table, and how many of fatune's cells failed."""
    import transformers
    import fatune.transformers  # noqa: F401  (registers "fatune")
    cfg = transformers.LlamaConfig(**LLAMA, num_hidden_layers=o.layers, max_position_embeddings=max(o.seqlen, 4096))
    torch.manual_seed(0)
    # Made in bf16 (the default dtype while it is built), as a bf16 checkpoint loads: buffers the model
    # computes in fp32 on purpose (the rotary frequencies) stay fp32, which model.to(bf16) would round.
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(DEVICE), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(default)
    model.train()
    initial = {k: t.clone() for k, t in model.state_dict().items()}
    ids = torch.randint(0, LLAMA["vocab_size"], (o.batch, o.seqlen), device=DEVICE,
                        generator=torch.Generator(device=DEVICE).manual_seed(1))
    params = sum(p.numel() for p in model.parameters())
    print(f"\nmodel: Llama, {o.layers} layers, hidden {LLAMA['hidden_size']}, {LLAMA['num_attention_heads']} query / "
          f"{LLAMA['num_key_value_heads']} K/V heads, {params / 1e6:.0f}M parameters, bf16, batch {o.batch} x "
          f"seqlen {o.seqlen}; training step (forward, loss, backward, AdamW), median of {o.reps} after {o.warmup}")

    def reference():  # the same weights in float64, SDPA's MATH backend: the first sequence's logits
        ref = copy.deepcopy(model).to(torch.float64)
        set_attention(ref, "sdpa")
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            return ref(input_ids=ids[:1]).logits.float()

    def check(backend):
        with torch.no_grad(), pinned(backend):
            logits = model(input_ids=ids[:1]).logits.float()
        return rel_l2(logits, ref_logits), (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean().item()

    ref_logits, ref_error = attempt("float64 reference", reference)
    resident = torch.cuda.memory_allocated()
    print(f"  resident throughout: {resident / GIB:.2f} GiB (weights, their initial copy, the reference logits)")
    configs = [("fatune", "fatune", None)] + [(name, "sdpa", be) for name, be in sdpa_backends()]
    rows, failures = [], 0
    for name, impl, backend in configs + [("sdpa MATH", "sdpa", SDPBackend.MATH)]:
        model.load_state_dict(initial)
        set_attention(model, impl)
        row = {"config": name, "ms": None, "peak_bytes": None, "rel_l2": None, "argmax_agree": None, "error": None}
        rows.append(row)
        if ref_logits is not None:  # check before time
            res, row["error"] = attempt(f"{name} check", lambda: check(backend))
            row["rel_l2"], row["argmax_agree"] = res or (None, None)
            if res and name == "fatune" and not row["rel_l2"] <= CHECK_TOLERANCE:
                row["error"] = f"logits differ from float64 by {row['rel_l2']:.3g} > {CHECK_TOLERANCE}: not timed"
                print(f"  fatune: {row['error']}")
            if row["error"]:
                failures += name == "fatune"
                continue
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        row["ms"], row["error"] = attempt(name, lambda: train_ms(model, ids, backend, o.warmup, o.reps))
        row["peak_bytes"] = torch.cuda.max_memory_allocated() if row["ms"] is not None else None
        failures += name == "fatune" and row["ms"] is None
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
        print(f"  ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
    tokens = o.batch * o.seqlen
    print(f"  {'':<26} {'ms/step':>8} {'tokens/s':>9} {'fatune ÷':>9} {'peak GiB':>9}  logits vs float64: "
          "rel L2, argmax agree")
    for r in rows:
        r["fatune_ratio"] = ratio(rows[0]["ms"], r["ms"])
        print(f"  {r['config']:<26} {fmt(r['ms'], '8.1f'):>8} {fmt(r['ms'] and tokens / r['ms'] * 1e3, '9.0f'):>9} "
              f"{fmt(r['fatune_ratio'], '9.2f'):>9} {fmt(r['peak_bytes'] and r['peak_bytes'] / GIB, '9.2f'):>9}  "
              f"{fmt(r['rel_l2'], '.3e')}, {fmt(r['argmax_agree'] and 100 * r['argmax_agree'], '.1f')} %"
              + (f"  ({r['error'][:80]})" if r["error"] else ""))
    peers = {r["config"]: r["rel_l2"] for r in rows
             if r["config"] in ("sdpa FLASH_ATTENTION", "sdpa CUDNN_ATTENTION") and r["rel_l2"] is not None}
    if rows[0]["rel_l2"] is not None and peers:
        worst = max(peers.values())
        print(f"  fatune's logit error {rows[0]['rel_l2']:.3e} "
              f"{'within' if rows[0]['rel_l2'] <= PEER_BOUND * worst else 'NOT within'} {PEER_BOUND} x the larger "
              f"of {' and '.join(peers)}'s, {worst:.3e} (test_gpu_transformers.py's bound)")
    return {"layers": o.layers, "batch": o.batch, "seqlen": o.seqlen, "parameters": params, "resident_bytes": resident,
            "reference_error": ref_error, "rows": rows}, failures


def main():
    global torch, F, SDPBackend, sdpa_kernel, fatune
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", default=",".join(TABLES), help="which tables (comma-separated: graphs,host,model)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: few samples, a 2-layer model at seqlen 1024")
    ap.add_argument("--batch", type=int, default=1, help="the model's batch")
    ap.add_argument("--seqlen", type=int, default=0, help="the model's sequence length (default 8192, quick 1024)")
    ap.add_argument("--layers", type=int, default=0, help="the model's layers (default 4, quick 2)")
    ap.add_argument("--reps", type=int, default=0, help="timed training steps (default 10, quick 2)")
    ap.add_argument("--warmup", type=int, default=0, help="untimed training steps first (default 3, quick 1)")
    ap.add_argument("--samples", type=int, default=0, help="host-time samples a cell (default 20, quick 3)")
    ap.add_argument("--json", default="", metavar="OUT", help="write every table to OUT")
    o = ap.parse_args()
    tables = [t.strip() for t in o.tables.split(",") if t.strip()]
    if not tables or any(t not in TABLES for t in tables):
        print(f"bench_torch.py: --tables {o.tables!r}: expected some of {','.join(TABLES)}", file=sys.stderr)
        return 2
    for name in ("batch", "seqlen", "layers", "reps", "warmup", "samples"):
        least = 1 if name == "batch" else 0  # 0: the default
        if getattr(o, name) < least:
            print(f"bench_torch.py: --{name} {getattr(o, name)}: must be at least {least}", file=sys.stderr)
            return 2
    o.seqlen = o.seqlen or (1024 if o.quick else 8192)
    o.layers = o.layers or (2 if o.quick else 4)
    o.reps = o.reps or (2 if o.quick else 10)
    o.warmup = o.warmup or (1 if o.quick else 3)
    o.samples = o.samples or (3 if o.quick else 20)
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return SKIP
    import torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fatune
    F = torch.nn.functional
    t0 = time.perf_counter()
    from fatune import _ops
    native = "used" if _ops.native is not None else "not used"  # python -m fatune.native says why
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"libfatune {os.environ.get('FATUNE_LIB') or '(found by the package)'}, native host path {native}",
          flush=True)
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "fatune_lib": os.environ.get("FATUNE_LIB", ""), "native": native, "quick": o.quick}
    failures = 0
    runs = (("graphs", "graphs", graph_breaks), ("host", "host_small", host_small),
            ("host", "host_backward", host_backward), ("model", "model", model_steps))
    for table, key, run in runs:  # each returns (its table, how many of fatune's cells failed)
        if table in tables:
            res, why = attempt(key, lambda: run(o))
            out[key] = res[0] if res else {"error": why}
            failures += res[1] if res else 1
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if o.json:
        with open(o.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    if failures:
        print(f"{failures} fatune cells failed, broke a graph or failed their check")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
