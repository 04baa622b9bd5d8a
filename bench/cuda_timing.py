# SPDX-License-Identifier: MIT
"""Timing shared by the benchmark scripts (bench_runtime.py,
bwd_overhead.py): CUDA-event medians of a call made alone or queued behind
a sleep kernel, and the host's microseconds.

A call made alone starts with the GPU idle, so the host's work before its
first launch is inside the events; queued behind a sleep kernel long enough
for the host to launch everything first, the events hold the GPU's time
alone (kernels and the gaps between them), as in a training step whose
host runs ahead of the GPU.
"""
import statistics
import time

SLEEP_MS = 3.0  # longer than the host's part of any call these scripts time


def cuda_torch():
    """torch, when it imports and sees a CUDA device; else None, having
    printed why (the script then exits 77: skipped)."""
    try:
        import torch
    except ImportError as e:
        print(f"skipped: {e}")
        return None
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return None
    return torch


def sleep_cycles(torch, ms=SLEEP_MS):
    """Cycles of torch.cuda._sleep that take about MS on this GPU (its SM
    clock is not known ahead: measured)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    return int(ms * 10_000_000 / a.elapsed_time(b))


def timed(torch, fn, reps, warmup=3, sleep=0, flush=None):
    """(median ms between CUDA events around FN, median host µs of the call)
    over REPS calls after WARMUP; SLEEP > 0 queues each call behind a sleep
    kernel of that many cycles; FLUSH, a device tensor larger than the L2,
    is zeroed before each call, so that no call finds its inputs cached."""
    for _ in range(warmup):
        fn()
    dev, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if flush is not None:
            flush.zero_()
        if sleep:
            torch.cuda._sleep(sleep)
        a.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        b.record()
        b.synchronize()
        dev.append(a.elapsed_time(b))
    return statistics.median(dev), statistics.median(host)


def host_us(fn, n=200):
    """Mean host µs of N calls of FN, after one."""
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def queued_host_us(torch, fn, sleep, n=10):
    """Mean host µs of N calls of FN that launch work, after one: queued
    behind a sleep kernel of N · SLEEP cycles, so that no call waits for the
    GPU (a full launch queue would block the host)."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(sleep * n)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t
