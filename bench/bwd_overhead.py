#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a backward call's time goes, fatune.attention against SDPA's
FLASH_ATTENTION backend (FlashAttention-2) on the same tensors, at
FlashAttention's benchmark shapes (batch x seqlen = 16384 tokens,
heads x head_dim = 2048), bf16:

  sync    events around torch.autograd.grad(o, (q, k, v), dout) with the GPU
          idle at the first event, as bench/bench_runtime.py times it: the
          host's work before the first launch is inside the figure;
  queued  the same call behind a sleep kernel long enough that the host has
          queued every launch before the GPU reaches the first event: the
          GPU's time alone (kernels and the gaps between them);
  host    microseconds the host spends in the call (queued mode, no sync);
  kernels the device time of each kernel of one call (torch.profiler).

For fatune also the direct call fatune.attention_bwd (no autograd), queued
and host, and (--parts) the host time of each step of that call, to say
where the binding's microseconds go. Medians over --reps calls after warm-up; each configuration's
inputs are drawn fresh. Nothing is checked here: bench/bench_runtime.py
checks the gradients of the same calls before it times them.

    FATUNE_LIB=build/runtime/libfatune.so python3 bench/bwd_overhead.py \
        [--head-dims 64,128,256] [--seqlens 1024,4096] [--masks none,causal]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import cuda_timing  # noqa: E402  (beside this script)
from cuda_timing import host_us  # noqa: E402

TOKENS = 16384
MODEL_WIDTH = 2048
WARMUP = 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--parts", action="store_true", help="host µs of each step of one call "
                    "(the first head dim and length, no mask)")
    o = ap.parse_args()
    torch = cuda_timing.cuda_torch()
    if torch is None:
        return 77
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile
    import fatune

    sleep_cycles = cuda_timing.sleep_cycles(torch)

    def timed(fn, queued):
        """Median device ms of FN between two events, and median host µs."""
        return cuda_timing.timed(torch, fn, o.reps, WARMUP, sleep_cycles if queued else 0)

    def kernels(fn):
        """(name, device µs) of each kernel of one call of FN, in launch order."""
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        out = []
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                out.append((e.name, e.time_range.elapsed_us()))
        return out

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, sleep kernel "
          f"{sleep_cycles / cuda_timing.SLEEP_MS / 1e6:.2f} GHz")
    print(f"{'bf16 backward':<30} {'sync ms':>8} {'queued':>8} {'host µs':>8}   fatune/flash: "
          "sync, queued")
    summary = []
    for mask in o.masks.split(","):
        causal = mask == "causal"
        for d in (int(x) for x in o.head_dims.split(",")):
            for s in (int(x) for x in o.seqlens.split(",")):
                bsz, h = max(1, TOKENS // s), MODEL_WIDTH // d
                what = f"{mask:<6} d{d:<3} s{s:<5} b{bsz:<2} h{h:<2}"
                q, k, v, dout = (torch.randn(bsz, s, h, d, device="cuda", dtype=torch.bfloat16)
                                 for _ in range(4))
                q, k, v = (t.requires_grad_() for t in (q, k, v))
                out, lse = fatune.attention_with_lse(q, k, v, causal=causal)
                qt, kt, vt, dot = (t.transpose(1, 2) for t in (q, k, v, dout))
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    ot = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                calls = {
                    "fatune": lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                    "fatune direct": lambda: fatune.attention_bwd(dout, q.detach(), k.detach(),
                                                                  v.detach(), out.detach(), lse,
                                                                  causal=causal),
                    "flash": lambda: torch.autograd.grad(ot, (q, k, v), dot, retain_graph=True),
                }
                res = {}
                for name, fn in calls.items():
                    sync = timed(fn, False) if name != "fatune direct" else (None, None)
                    queued, host = timed(fn, True)
                    res[name] = (sync[0], queued, host)
                    ks = kernels(fn)
                    print(f"{what} {name:<14} {sync[0] or 0:8.3f} {queued:8.3f} {host:8.0f}   "
                          + ", ".join(f"{n[:40]} {t:.0f}" for n, t in ks))
                f, fl = res["fatune"], res["flash"]
                summary.append((what, f[0] / fl[0], f[1] / fl[1], f[2], fl[2], res["fatune direct"][2]))
    if o.parts:
        parts(torch, fatune, int(o.head_dims.split(",")[0]), int(o.seqlens.split(",")[0]), sleep_cycles)
    print(f"\n{'bf16 backward':<30} {'flash/fatune sync':>18} {'queued':>7}  host µs fatune / "
          "flash / fatune direct")
    for what, rs, rq, hf, hfl, hd in summary:
        print(f"{what:<30} {1 / rs:18.3f} {1 / rq:7.3f}  {hf:6.0f} / {hfl:6.0f} / {hd:6.0f}")
    return 0


def parts(torch, fatune, d, s, sleep_cycles):
    """Host µs of each step of fatune.attention_bwd (the binding's internals,
    named as python/fatune/_runtime.py names them), mean of many calls; the
    launching steps run behind a sleep kernel so that no call waits for the
    GPU."""
    import ctypes
    from fatune import _abi
    F = fatune
    R = fatune._runtime
    bsz, h = max(1, TOKENS // s), MODEL_WIDTH // d
    q, k, v, dout = (torch.randn(bsz, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = F.attention_with_lse(q, k, v)
    lib, dev = R.load(), R.device_index(q)
    ctx = R.context(dev)
    opts = F._options(False, None, (-1, -1), 0.0)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    a = R.bwd_args(R.fwd_args(q, k, v, out, lse, *opts), dout, dq, dk, dv, False)
    need = ctypes.c_size_t()
    assert lib.fat_attention_bwd_workspace(ctx, ctypes.byref(a), ctypes.byref(need)) == F.FAT_OK
    ws = torch.empty(need.value, dtype=torch.uint8, device=q.device)
    a.workspace, a.workspace_bytes = ws.data_ptr(), need.value
    choice = _abi.fat_choice()
    steps = {
        "_options": lambda: F._options(False, None, (-1, -1), 0.0),
        "check_qkv(q, k, v)": lambda: R.check_qkv(q, k, v),
        "check_bwd(dout, ..., lse)": lambda: R.check_bwd(dout, q, k, v, out, lse, "api"),
        "kernel_layout(dout)": lambda: R.kernel_layout(dout),
        "3 torch.empty_like": lambda: [torch.empty_like(t) for t in (q, k, v)],
        "torch.empty(workspace)": lambda: torch.empty(need.value, dtype=torch.uint8, device=q.device),
        "fwd_args + bwd_args": lambda: R.bwd_args(R.fwd_args(q, k, v, out, lse, *opts), dout, dq, dk, dv, False),
        "context + stream": lambda: (R.context(dev), R.stream(dev)),
        "fat_attention_bwd_workspace": lambda: lib.fat_attention_bwd_workspace(ctx, ctypes.byref(a),
                                                                                ctypes.byref(need)),
        "fat_attention_bwd_check": lambda: lib.fat_attention_bwd_check(ctx, ctypes.byref(a)),
        "fat_attention_bwd_select": lambda: lib.fat_attention_bwd_select(ctx, ctypes.byref(a),
                                                                          ctypes.byref(choice)),
    }
    print(f"\nhost µs of the steps of fatune.attention_bwd, none d{d} s{s} (mean of 200)")
    for name, fn in steps.items():
        print(f"  {name:<36} {host_us(fn):7.1f}")

    class Noop(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g

    xq = q.detach().requires_grad_()
    y = Noop.apply(xq)
    print(f"  {'autograd.grad, a no-op Function':<36} "
          f"{host_us(lambda: torch.autograd.grad(y, xq, dout, retain_graph=True)):7.1f}")
    # Inside and around the binding when autograd calls it: _runtime's
    # backward (which the fatune::bwd operator calls) wrapped in a clock; then
    # replaced by one that launches nothing, for autograd's own part.
    xs = [t.detach().requires_grad_() for t in (q, k, v)]
    y = F.attention(*xs)
    inner, real = [], R.backward

    def clocked(*args, **kw):
        t0 = time.perf_counter()
        r = real(*args, **kw)
        inner.append(time.perf_counter() - t0)
        return r

    def idle(*args, **kw):
        return dq, dk, dv

    R.backward = idle
    try:
        print(f"  {'autograd.grad, backward launching nothing':<36} "
              f"{host_us(lambda: torch.autograd.grad(y, xs, dout, retain_graph=True)):7.1f}")
    finally:
        R.backward = real
    R.backward = clocked
    try:
        grad = lambda: torch.autograd.grad(y, xs, dout, retain_graph=True)
        t = cuda_timing.queued_host_us(torch, grad, sleep_cycles)
        inside = sum(inner[1:]) / len(inner[1:]) * 1e6  # the first call's is not in t
        print(f"  {'autograd.grad through fatune':<36} {t:7.1f}  (mean of 10, queued; inside "
              f"backward {inside:.1f})")
        from torch.profiler import ProfilerActivity, profile
        for name, fn in (("fatune", grad), ("flash", None)):
            if fn is None:
                from torch.nn.attention import SDPBackend, sdpa_kernel
                qt, kt, vt = (t.transpose(1, 2) for t in xs)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    yt = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
                dot = dout.transpose(1, 2)
                fn = lambda: torch.autograd.grad(yt, xs, dot, retain_graph=True)
            fn()
            torch.cuda.synchronize()
            torch.cuda._sleep(sleep_cycles * 10)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    fn()
            torch.cuda.synchronize()
            print(f"\nCPU profile of 5 autograd.grad calls through {name}:")
            print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=14))
    finally:
        R.backward = real
    stream = R.stream(dev)
    launching = {
        "fat_attention_bwd (3 launches)": lambda: lib.fat_attention_bwd(ctx, ctypes.byref(a), stream, None),
        "fatune.attention_bwd": lambda: F.attention_bwd(dout, q, k, v, out, lse),
    }
    for name, fn in launching.items():
        print(f"  {name:<36} {cuda_timing.queued_host_us(torch, fn, sleep_cycles):7.1f}  (mean of 10, queued)")


if __name__ == "__main__":
    sys.exit(main())
