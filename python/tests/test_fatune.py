"""fatune.attention against PyTorch's scaled_dot_product_attention in float64,
on random inputs, for every bucket of the shipped tables that holds a winner
for this GPU, plus the built-in default of every head dim, and the refusals
with their messages; then its backward (loss.backward() through
fatune.attention) against float64 autograd through an explicit softmax, on
odd lengths, unequal query and key lengths and grouped-query heads, the
deterministic mode's bit-identical gradients, the raw fatune.attention_bwd
writing every element of given gradient tensors, and the backward's refusals.
Needs a CUDA GPU and PyTorch; exits 77 (skipped) without.

    FATUNE_LIB=build/runtime/libfatune.so python3 python/tests/test_fatune.py [TABLES.db]
"""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP = 77
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}  # relative L2 against fp64, as the tuner's check
# Relative L2 of dq, dk and dv against fp64 autograd on the same (rounded)
# inputs. gradcheck's finite differences mean nothing in fp16/bf16, so the
# gradients are compared with an fp64 reference instead.
GRAD_TOLERANCE = {"fp16": 5e-3, "bf16": 2e-2}
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
expect_raises(lambda: fatune.attention(q, q, q, scale="1"),
              "scale must be a float or None, got str", TypeError)
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


# ---- The backward ----------------------------------------------------------


def reference_grads(q, k, v, dout, causal, scale):
    """dq, dk, dv of softmax(scale · q·kᵀ [bottom-right causal]) · v in float64
    autograd, written out rather than through SDPA: a row that sees no key
    (seqlen_q > seqlen_k, causal) gives 0, as FlashAttention's convention and
    libfatune's lse of -inf say, where a softmax over -inf gives NaN."""
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kr, vr = kd.repeat_interleave(rep, 2), vd.repeat_interleave(rep, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", qd, kr) * scale  # S = Q·Kᵀ · scale
    sq, sk = q.shape[1], k.shape[1]
    if causal:  # query i sees key j iff j <= i + sk - sq
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    m = s.amax(-1, keepdim=True).detach()
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    l = e.sum(-1, keepdim=True)
    p = e / torch.where(l > 0, l, torch.ones_like(l))  # P = softmax(S), 0 for a row seeing nothing
    o = torch.einsum("bhqk,bkhd->bqhd", p, vr)      # O = P·V
    o.backward(dout.double())
    return qd.grad, kd.grad, vd.grad


def rel_l2(got, ref):
    return ((got.double() - ref).norm() / ref.norm()).item()


def inputs(dtype, b, sq, sk, h, hk, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda s, heads: torch.randn(b, s, heads, d, device="cuda", generator=g).to(dtype)
    return make(sq, h), make(sk, hk), make(sk, hk), make(sq, h)  # q, k, v, dout


def compare_bwd(dtype_name, causal, d, b, sq, sk, h, hk, scale=None, deterministic=False, sum_loss=False):
    """loss.backward() through fatune.attention against reference_grads.
    sum_loss: o.sum() as the loss, whose gradient reaches the backward as an
    expanded (stride 0) tensor that must be copied before the kernels read it."""
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    q, k, v, dout = inputs(dtype, b, sq, sk, h, hk, d, seed=sq * 7919 + sk * 31 + d + h)
    if sum_loss:
        dout = torch.ones_like(dout)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    what = (f"bwd {dtype_name} {'causal' if causal else 'none'} d{d} b{b} sq{sq} sk{sk} h{h}/{hk}"
            f"{' scale ' + str(scale) if scale else ''}{' deterministic' if deterministic else ''}"
            f"{' sum-loss' if sum_loss else ''}")
    try:  # a refusal here is one failure, not the end of the run
        o = fatune.attention(q, k, v, causal=causal, scale=scale, deterministic=deterministic)
        if sum_loss:
            o.sum().backward()
        else:
            o.backward(dout)
    except (ValueError, fatune.FatuneError) as e:
        expect(False, f"{what}: {e}")
        return
    choice = fatune.last_choice()
    refs = reference_grads(q, k, v, dout, causal, scale if scale is not None else d ** -0.5)
    errs = [rel_l2(t.grad, r) for t, r in zip((q, k, v), refs)]
    finite = all(torch.isfinite(t.grad).all().item() for t in (q, k, v))
    shapes = tuple(t.grad.shape for t in (q, k, v)) == tuple(t.shape for t in (q, k, v))
    print(f"{what}: {choice.variant} ({choice.origin}, {choice.match}, {choice.load}) rel_l2 "
          f"dq {errs[0]:.3g} dk {errs[1]:.3g} dv {errs[2]:.3g}")
    tol = GRAD_TOLERANCE[dtype_name]
    expect(finite and shapes and max(errs) <= tol,
           f"{what}: rel_l2 {[f'{e:.3g}' for e in errs]} > {tol}, finite {finite}, shapes {shapes}")
    sel = fatune.select_bwd(q, k, v, causal=causal, deterministic=deterministic)
    expect(sel.variant == choice.variant, f"{what}: select_bwd says {sel.variant}, ran {choice.variant}")


for dt in ("fp16", "bf16"):
    for d in (64, 128):
        for causal in (False, True):
            compare_bwd(dt, causal, d, 2, 77, 77, 2, 2)        # a length off every tile
            compare_bwd(dt, causal, d, 1, 1000, 1000, 8, 2)    # grouped-query, 4 heads a group
    for d in (96, 192, 256):
        compare_bwd(dt, d % 128 == 0, d, 1, 333, 333, 4, 2)
    # Unequal lengths: causal with fewer queries (each sees a prefix longer than
    # itself) and with fewer keys (the first rows see nothing: dq 0 there).
    compare_bwd(dt, True, 128, 1, 77, 1000, 2, 2)
    compare_bwd(dt, True, 128, 1, 1000, 77, 2, 2)
    compare_bwd(dt, False, 64, 1, 300, 513, 4, 1)
    compare_bwd(dt, True, 64, 1, 256, 256, 2, 2, scale=0.5)
    compare_bwd(dt, True, 128, 1, 1000, 1000, 8, 2, deterministic=True)
compare_bwd("bf16", False, 128, 1, 200, 200, 2, 2, sum_loss=True)

# Deterministic mode: the same inputs twice give bit-identical gradients.
q, k, v, dout = inputs(torch.bfloat16, 2, 1000, 1000, 8, 2, 128, seed=5)
grads = []
for _ in range(2):
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    fatune.attention(qq, kk, vv, causal=True, deterministic=True).backward(dout)
    grads.append((qq.grad, kk.grad, vv.grad))
same = [torch.equal(a, b) for a, b in zip(*grads)]
print(f"deterministic backward twice: dq, dk, dv bit-identical {same}")
expect(all(same), f"deterministic gradients differ between two runs: {same}")

# The raw backward writes every element of given gradient tensors, and none
# outside them: NaN-filled, each a slice of a wider NaN tensor (strides that
# are not the contiguous ones), fully finite afterwards, the rest still NaN.
for dt, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
    b, sq, sk, h, hk, d = 2, 77, 130, 4, 2, 64
    q, k, v, dout = inputs(dtype, b, sq, sk, h, hk, d, seed=11)
    o, lse = fatune.attention_with_lse(q, k, v, causal=True)
    wide = [torch.full((b, s, heads, 2 * d), float("nan"), device="cuda", dtype=dtype)
            for s, heads in ((sq, h), (sk, hk), (sk, hk))]
    given = [w[..., :d] for w in wide]
    got = fatune.attention_bwd(dout, q, k, v, o, lse, causal=True, dq=given[0], dk=given[1], dv=given[2])
    expect(all(g is w for g, w in zip(got, given)), f"{dt}: attention_bwd did not return the given tensors")
    expect(all(torch.isfinite(g).all().item() for g in given), f"{dt}: NaN left in the given dq, dk, dv")
    expect(all(torch.isnan(w[..., d:]).all().item() for w in wide), f"{dt}: written outside dq, dk, dv")
    refs = reference_grads(q, k, v, dout, True, d ** -0.5)
    errs = [rel_l2(g, r) for g, r in zip(given, refs)]
    print(f"attention_bwd {dt} into NaN-filled strided dq, dk, dv: rel_l2 {[f'{e:.3g}' for e in errs]}")
    expect(max(errs) <= GRAD_TOLERANCE[dt], f"{dt}: attention_bwd into given tensors: rel_l2 {errs}")

# The backward's refusals.
q, k, v, dout = inputs(torch.float16, 1, 64, 64, 2, 2, 64, seed=3)
o, lse = fatune.attention_with_lse(q, k, v)
bwd = fatune.attention_bwd
expect_raises(lambda: bwd(dout.float(), q, k, v, o, lse),
              "dout is torch.float32 (1, 64, 2, 64) on cuda:0; it must match q: "
              "torch.float16 (1, 64, 2, 64) on cuda:0")
expect_raises(lambda: bwd(dout.cpu(), q, k, v, o, lse),
              "dout is torch.float16 (1, 64, 2, 64) on cpu; it must match q: "
              "torch.float16 (1, 64, 2, 64) on cuda:0")
expect_raises(lambda: bwd(dout, q.cpu(), k, v, o, lse),
              "q is on cpu; fatune.attention_bwd needs CUDA tensors")
expect_raises(lambda: bwd(dout, q, k, v, o.bfloat16(), lse),
              "o is torch.bfloat16 (1, 64, 2, 64) on cuda:0; it must match q: "
              "torch.float16 (1, 64, 2, 64) on cuda:0")
expect_raises(lambda: bwd(dout, q, k, v, o, lse.half()),
              "lse is torch.float16 (1, 2, 64) on cuda:0; it must be the forward's contiguous "
              "torch.float32 (1, 2, 64) on cuda:0")
expect_raises(lambda: bwd(dout, q, k, v, o, lse, dk=torch.empty_like(q[:, :32])),
              "dk is torch.float16 (1, 32, 2, 64) on cuda:0; it must match k: "
              "torch.float16 (1, 64, 2, 64) on cuda:0")
expect_raises(lambda: bwd(dout.tolist(), q, k, v, o, lse), "dout must be a torch.Tensor, got list", TypeError)
expect_raises(lambda: bwd(dout, q, k, v, o, lse, deterministic=1), "deterministic must be a bool, got 1",
              TypeError)
expect_raises(lambda: fatune.attention(q, k, v, deterministic="yes"),
              "deterministic must be a bool, got 'yes'", TypeError)
expect_raises(lambda: fatune.attention(q.cpu().requires_grad_(), k, v),
              "q is on cpu; fatune.attention needs CUDA tensors")
expect_raises(lambda: fatune.select_bwd(q80, q80, q80),
              "fatune.select_bwd: head_dim 80 has no template (supported: 64, 96, 128, 192, 256)")

print("python binding:", "FAILED" if failures else "ok", f"({failures} failures)")
sys.exit(1 if failures else 0)
