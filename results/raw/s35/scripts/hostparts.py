# s35: where fatune.attention's host microseconds go, the small GQA decoding
# call of bench_torch.py (batch 1, 1 query, 512 keys, 32 heads over 8, d128,
# bf16): each part timed alone, queued behind a sleep kernel so the GPU never
# makes the host wait. Run with PYTHONPATH=python FATUNE_LIB=... on the GPU.
import ctypes, statistics, sys, time
import torch
import torch.nn.functional as F
sys.path.insert(0, "bench")
import cuda_timing
import fatune
from fatune import _runtime, _ops, _abi

b, sq, sk, h, hk, d = 1, 1, 512, 32, 8, 128
dev = torch.device("cuda")
q = torch.randn(b, sq, h, d, device=dev, dtype=torch.bfloat16)
k = torch.randn(b, sk, hk, d, device=dev, dtype=torch.bfloat16)
v = torch.randn(b, sk, hk, d, device=dev, dtype=torch.bfloat16)
sleep = cuda_timing.sleep_cycles(torch, 1.0)
N = 50


def us(fn):
    return statistics.median(cuda_timing.queued_host_us(torch, fn, sleep, N) for _ in range(20))


scale = d ** -0.5
o, lse = _runtime.fwd_outputs(q)
a = _runtime.fwd_args(q, k, v, o, lse, 0, -1, -1, scale, 0.0)
lib, ctx = _runtime.load(), _runtime.context(0)
need = ctypes.c_size_t()
lib.fat_attention_fwd_workspace(ctx, ctypes.byref(a), ctypes.byref(need))
print("workspace bytes", need.value, "variant", (fatune.attention(q, k, v), fatune.last_choice())[1])
st = _runtime.stream(0)
qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
parts = [
    ("fatune.attention", lambda: fatune.attention(q, k, v)),
    ("_ops.forward (eager path)", lambda: _ops.forward(q, k, v, 0, -1, -1, scale, 0.0, False)),
    ("torch.ops.fatune.fwd (custom_op)", lambda: torch.ops.fatune.fwd(q, k, v, 0, -1, -1, scale, 0.0, False)),
    ("_runtime.forward", lambda: _runtime.forward(q, k, v, 0, -1, -1, scale, 0.0)),
    ("  check_qkv", lambda: _runtime.check_qkv(q, k, v)),
    ("  fwd_outputs (2 empties)", lambda: _runtime.fwd_outputs(q)),
    ("  fwd_args (ctypes struct)", lambda: _runtime.fwd_args(q, k, v, o, lse, 0, -1, -1, scale, 0.0)),
    ("  _ops.eager predicate", lambda: _ops.eager(q, k, v)),
    ("  stream(0)", lambda: _runtime.stream(0)),
    ("  fat_attention_fwd_workspace (C)", lambda: lib.fat_attention_fwd_workspace(ctx, ctypes.byref(a), ctypes.byref(need))),
    ("  fat_attention_fwd (C, launch)", lambda: lib.fat_attention_fwd(ctx, ctypes.byref(a), st, None)),
    ("  torch.empty workspace", lambda: torch.empty(max(need.value, 1), dtype=torch.uint8, device=dev)),
    ("sdpa FLASH enable_gqa", None),
    ("sdpa default enable_gqa", lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)),
]
from torch.nn.attention import sdpa_kernel, SDPBackend
parts[-2] = ("sdpa FLASH enable_gqa (pinned outside)", lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True))
for name, fn in parts:
    try:
        if "FLASH" in name:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                t = us(fn)
        else:
            t = us(fn)
        print(f"{name:<50} {t:8.1f} us")
    except Exception as e:  # noqa: BLE001
        print(f"{name:<50} failed: {e!r:.200}")
