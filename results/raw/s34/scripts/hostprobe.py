import time, sys, torch
from torch import Tensor
sys.path.insert(0, "python")
N = 20000
def per_call(f, *a, **k):
    for _ in range(200): f(*a, **k)
    t0 = time.perf_counter()
    for _ in range(N): f(*a, **k)
    return (time.perf_counter() - t0) / N * 1e6

@torch.library.custom_op("probe::fwd", mutates_args=())
def pfwd(q: Tensor, k: Tensor, v: Tensor, mask: int, wl: int, wr: int, scale: float, softcap: float,
         det: bool) -> tuple[Tensor, Tensor]:
    return torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1])
@pfwd.register_fake
def _(q, k, v, mask, wl, wr, scale, softcap, det):
    return torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1])

def plain(q, k, v, mask, wl, wr, scale, softcap, det):
    return torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1])

q = torch.randn(1, 1, 32, 128, dtype=torch.bfloat16); k = torch.randn(1, 512, 8, 128, dtype=torch.bfloat16); v = k.clone()
print("plain python fn + 2 empties: %.1f us" % per_call(plain, q, k, v, 0, -1, -1, 0.088, 0.0, False))
print("custom_op, no grad needed:   %.1f us" % per_call(pfwd, q, k, v, 0, -1, -1, 0.088, 0.0, False))
qg = q.clone().requires_grad_()
pfwd.register_autograd(lambda ctx, go, gl: (go, None, None, None, None, None, None, None, None),
                       setup_context=lambda ctx, inputs, output: None)
print("custom_op with autograd, q requires grad: %.1f us" % per_call(pfwd, qg, k, v, 0, -1, -1, 0.088, 0.0, False))
with torch.no_grad():
    print("  ... under no_grad:          %.1f us" % per_call(pfwd, qg, k, v, 0, -1, -1, 0.088, 0.0, False))
# fatune's public wrapper with the op stubbed
import fatune, fatune._ops as ops
calls = []
orig = ops.fwd
ops.fwd = pfwd
try:
    print("fatune.attention (op stubbed by the probe op): %.1f us" % per_call(fatune.attention, q, k, v, causal=False))
except Exception as e:
    print("fatune.attention refused:", repr(e)[:300])
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        return torch.empty_like(q)
    @staticmethod
    def backward(ctx, go):
        return go, None, None
print("autograd.Function, q requires grad: %.1f us" % per_call(F.apply, qg, k, v))
print("torch.compiler.is_compiling(): %.2f us" % per_call(torch.compiler.is_compiling))
