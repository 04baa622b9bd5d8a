# s35: the small call's host time again, by prefixes (what a call costs with
# its later parts stood in for), each as the median and the minimum of 40
# samples of 50 queued calls: hostparts.py's single parts disagreed with one
# another by ~10 us. Run with PYTHONPATH=python FATUNE_LIB=... on the GPU.
import ctypes, statistics, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
sys.path.insert(0, "bench")
import cuda_timing
import fatune
from fatune import _runtime, _ops

b, sq, sk, h, hk, d = 1, 1, 512, 32, 8, 128
dev = torch.device("cuda")
q = torch.randn(b, sq, h, d, device=dev, dtype=torch.bfloat16)
k = torch.randn(b, sk, hk, d, device=dev, dtype=torch.bfloat16)
v = torch.randn(b, sk, hk, d, device=dev, dtype=torch.bfloat16)
sleep = cuda_timing.sleep_cycles(torch, 1.0)
qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
scale = d ** -0.5


def us(fn):
    s = [cuda_timing.queued_host_us(torch, fn, sleep, 50) for _ in range(40)]
    return statistics.median(s), min(s)


o, lse = _runtime.fwd_outputs(q)
a = _runtime.fwd_args(q, k, v, o, lse, 0, -1, -1, scale, 0.0)
lib, ctx, st = _runtime.load(), _runtime.context(0), _runtime.stream(0)
real_launch = _runtime._launch_fwd
rows = [
    ("A fatune.attention", lambda: fatune.attention(q, k, v), None),
    ("B fatune.attention, _launch_fwd stood in for", lambda: fatune.attention(q, k, v), "stub"),
    ("C _ops.forward", lambda: _ops.forward(q, k, v, 0, -1, -1, 0.0, 0.0, False), None),
    ("D _runtime.forward", lambda: _runtime.forward(q, k, v, 0, -1, -1, 0.0, 0.0), None),
    ("E _runtime.forward, _launch_fwd stood in for", lambda: _runtime.forward(q, k, v, 0, -1, -1, 0.0, 0.0), "stub"),
    ("F _launch_fwd (query, workspace, launch)", lambda: real_launch(a, 0, q, "x"), None),
    ("G fat_attention_fwd alone", lambda: lib.fat_attention_fwd(ctx, ctypes.byref(a), st, None), None),
    ("H fwd_outputs", lambda: _runtime.fwd_outputs(q), None),
    ("I sdpa FLASH enable_gqa", lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), "flash"),
    ("J sdpa default enable_gqa", lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), None),
]
fatune.attention(q, k, v)
for name, fn, how in rows:
    _runtime._launch_fwd = (lambda *x: None) if how == "stub" else real_launch
    if how == "flash":
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            med, lo = us(fn)
    else:
        med, lo = us(fn)
    print(f"{name:<48} median {med:6.1f} us  min {lo:6.1f} us")
_runtime._launch_fwd = real_launch
