"""fatune.attention against PyTorch's scaled_dot_product_attention in float64,
on random inputs, for every bucket of the shipped tables that holds a winner
for this GPU, plus the built-in default of every head dim, and the refusals
with their messages. Needs a CUDA GPU and PyTorch; exits 77 (skipped) without.

    FATUNE_LIB=build/runtime/libfatune.so python3 python/tests/test_fatune.py [TABLES.db]
"""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP = 77
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}  # relative L2 against fp64, as the tuner's check
HEADS = 2  # small: the fp64 reference materialises (heads, seqlen, seqlen)

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: no PyTorch")
    sys.exit(SKIP)
if not torch.cuda.is_available():
    print("skipped: no CUDA device")
    sys.exit(SKIP)
import fatune  # noqa: E402

failures = 0


def expect(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def expect_raises(fn, want, kind=ValueError):
    try:
        fn()
    except kind as e:
        expect(str(e) == want, f"message {str(e)!r}, want {want!r}")
        return
    expect(False, f"no {kind.__name__} (wanted {want!r})")


def compare(dtype_name, causal, d, seqlen, heads_k=HEADS):
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(seqlen * 1000 + d)
    q = torch.randn(1, seqlen, HEADS, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(1, seqlen, heads_k, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(1, seqlen, heads_k, d, device="cuda", generator=g).to(dtype)
    o = fatune.attention(q, k, v, causal=causal)
    choice = fatune.last_choice()
    rep = HEADS // heads_k
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    kd, vd = kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1)
    ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal).transpose(1, 2)
    err = ((o.double() - ref).norm() / ref.norm()).item()
    ok = err <= TOLERANCE[dtype_name] and torch.isfinite(o).all().item()
    print(f"{dtype_name} {'causal' if causal else 'none'} d{d} seqlen {seqlen}: {choice.variant} "
          f"({choice.origin}, {choice.match}, {choice.load}) rel_l2 {err:.3g}")
    expect(ok, f"rel_l2 {err:.3g} > {TOLERANCE[dtype_name]}")
    return choice


def shipped_buckets(path):
    if not path or not os.path.exists(path):
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT DISTINCT p.dtype, p.mask, p.head_dim, p.seqlen_q FROM winners w"
        " JOIN problems p ON p.id = w.problem_id JOIN gpus g ON g.id = w.gpu_id"
        " WHERE g.name = ? AND p.direction = 'fwd' ORDER BY 1, 2, 3, 4",
        (torch.cuda.get_device_name(),)).fetchall()
    db.close()
    return rows


tables = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FATUNE_TABLES", "")
buckets = shipped_buckets(tables)
print(f"{len(buckets)} shipped buckets for {torch.cuda.get_device_name()} in {tables or '(none)'}")
for dt, mask, d, seqlen in buckets:
    c = compare(dt, mask == "causal", d, seqlen)
    expect(c.match == "exact bucket" and c.origin in ("shipped tables", "user database"),
           f"{dt} {mask} d{d} {seqlen}: served by {c}")
# The built-in defaults (or winners) of every head dim, on a length off every tile,
# with grouped-query heads.
for d in (64, 96, 128, 192, 256):
    for dt in ("fp16", "bf16"):
        compare(dt, d % 128 == 0, d, 333, heads_k=1)

# Refusals.
q = torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.float16)
expect_raises(lambda: fatune.attention(q.float(), q.float(), q.float()),
              "q is torch.float32; fatune.attention takes torch.float16 or torch.bfloat16")
expect_raises(lambda: fatune.attention(q.cpu(), q, q),
              "q is on cpu; fatune.attention needs CUDA tensors")
expect_raises(lambda: fatune.attention(q[0], q, q),
              "q has 3 dimensions; expected 4: (batch, seqlen, heads, head_dim)")
qt = torch.randn(1, 64, 64, 2, device="cuda", dtype=torch.float16).transpose(2, 3)
expect_raises(lambda: fatune.attention(qt, qt, qt),
              "q has stride 2 in its last dimension; it must be contiguous (stride 1)")
expect_raises(lambda: fatune.attention(q, q.bfloat16(), q),
              "q, k and v must share a dtype: got torch.float16, torch.bfloat16, torch.float16")
q80 = torch.randn(1, 64, 2, 80, device="cuda", dtype=torch.float16)
expect_raises(lambda: fatune.attention(q80, q80, q80),
              "fatune.attention: head_dim 80 has no template (supported: 64, 96, 128, 192, 256)")
expect_raises(lambda: fatune.attention([1], q, q), "q must be a torch.Tensor, got list", TypeError)
expect_raises(lambda: fatune.attention(q, q, q, causal=1), "causal must be a bool, got 1", TypeError)
expect_raises(lambda: fatune.attention(q, q, q, scale="1"), "scale must be a float or None, got str",
              TypeError)
expect_raises(lambda: fatune.attention(q[:, :0], q, q),
              "q has shape (1, 0, 2, 64): every dimension must be >= 1")
expect_raises(lambda: fatune.attention(q, q[:, :, :1].expand(1, 64, 3, 64).contiguous(),
                                       q[:, :, :1].expand(1, 64, 3, 64).contiguous()),
              "k/v heads 3 do not divide q heads 2")
# The current stream is used: a launch on a side stream is ordered on it.
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    o = fatune.attention(q, q, q)
s.synchronize()
expect(torch.isfinite(o).all().item(), "output on a side stream")

print("python binding:", "FAILED" if failures else "ok", f"({failures} failures)")
sys.exit(1 if failures else 0)
