# SPDX-License-Identifier: MIT
"""fatune.attention against PyTorch's scaled_dot_product_attention in float64,
on random inputs, for every bucket of the shipped tables that holds a winner
for this GPU, plus the built-in default of every head dim, and the refusals
with their messages; then sliding windows (FlashAttention's bottom-right
convention, causal=True bounding the right side), soft-capped scores, head
dims without a template of their own (40, 80, 160: padded inside the kernel,
never reading the columns past head_dim), decoding (seqlen_q 1 and 16 against
4097 keys, grouped-query 4) and fatune.attention_varlen (packed sequences,
seqused_k), each output and log-sum-exp against a float64 reference written
here (by looping over the sequences for varlen); then its backward
(loss.backward() through fatune.attention) against float64 autograd through
the same reference, on odd lengths, unequal query and key lengths,
grouped-query heads, windows and padded head dims, the deterministic mode's
bit-identical gradients, the raw fatune.attention_bwd writing every element
of given gradient tensors and nothing past them, the soft-capped backward
and the packed one (each sequence against its own float64 gradients), and
the refusals. Inputs are drawn
fresh for every case. Needs a CUDA GPU and PyTorch; exits 77 (skipped)
without.

Each part is a test function: pytest runs them (python3 -m pytest python/tests),
each skipped without PyTorch or a CUDA device; run as a script (as ctest and
scripts/gpu_run.sh do) it runs them all and exits 77 (skipped) without.

    FATUNE_LIB=build/runtime/libfatune.so python3 python/tests/test_fatune.py [TABLES.db]
    FATUNE_LIB=build/runtime/libfatune.so python3 -m pytest python/tests/test_fatune.py

TABLES.db (or $FATUNE_TABLES, else the build tree's build/runtime/fatune_tables.db)
names the shipped tables whose buckets test_shipped_buckets checks one by one.
"""
import functools
import os
import sqlite3
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP = 77
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}  # relative L2 against fp64, as the tuner's check
# Relative L2 of dq, dk and dv against fp64 autograd on the same (rounded)
# inputs. gradcheck's finite differences mean nothing in fp16/bf16, so the
# gradients are compared with an fp64 reference instead.
GRAD_TOLERANCE = {"fp16": 5e-3, "bf16": 2e-2}
# Largest |lse - reference| on rows that see a key: fp32 accumulation of the
# row sums, and the kernels' tanh approximation under a soft-cap (relative
# error about 2^-11 of a score up to the cap).
LSE_TOLERANCE = 1e-2
HEADS = 2  # small: the fp64 reference materialises (heads, seqlen, seqlen)

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None
try:
    import pytest
except ImportError:
    pytest = None
import fatune  # noqa: E402  (importing the binding needs neither PyTorch nor libfatune)


def unavailable():
    """Why these tests cannot run here, or None."""
    if torch is None:
        return "no PyTorch"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


if pytest is not None:
    pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD_TABLES = os.path.join(ROOT, "build", "runtime", "fatune_tables.db")
# The shipped tables whose buckets test_shipped_buckets checks (main() sets it
# from its argument).
TABLES = os.environ.get("FATUNE_TABLES") or (BUILD_TABLES if os.path.exists(BUILD_TABLES) else "")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16} if torch else {}
failures = 0


def case(fn):
    """A test: it fails (under pytest) when any of its expect()s did, each
    printed as it failed; a script run counts them all."""
    @functools.wraps(fn)
    def run():
        before = failures
        fn()
        assert failures == before, f"{failures - before} expectation(s) failed in {fn.__name__}: see FAIL lines"
    return run


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


def expect_raises_prefix(fn, want, kind=ValueError):
    """As expect_raises, for a message of libfatune's whose start alone is
    this binding's to promise: the API name and the bad value."""
    try:
        fn()
    except kind as e:
        expect(str(e).startswith(want), f"message {str(e)!r}, want it to start {want!r}")
        return
    expect(False, f"no {kind.__name__} (wanted {want!r}...)")


def rel_l2(got, ref):
    return ((got.double() - ref).norm() / ref.norm()).item()


def grad_errors(got, refs):
    """rel_l2 of each gradient. A gradient that is exactly zero (a window of
    (0, 0) makes P = 1 on the diagonal, so dS, dQ and dK vanish) has no scale
    of its own: its error is judged against the largest other reference,
    as the tuner's checker does (tuner/fwd_compare.c)."""
    scale = max(r.norm().item() for r in refs)
    return [((g.double() - r).norm() / (r.norm() if r.norm().item() > 0 else scale)).item()
            for g, r in zip(got, refs)]


_seed = 0


def inputs(dtype, b, sq, sk, h, hk, d, seed=None):
    """q, k, v, dout (batch, seqlen, heads, head_dim), standard normal, drawn
    from a seed of their own: SEED, else the next of a counter, so that no
    two cases share inputs."""
    global _seed
    if seed is None:
        _seed += 1
        seed = 1_000_003 * _seed
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda s, heads: torch.randn(b, s, heads, d, device="cuda", generator=g).to(dtype)
    return make(sq, h), make(sk, hk), make(sk, hk), make(sq, h)


def visible(sq, sk, window, device):
    """(sq, sk) bool, query i sees key j: bottom-right aligned, query i sits
    at key position i + sk - sq and sees keys position - left .. position +
    right of WINDOW (left, right), a bound of -1 dropped. Causal is (-1, 0),
    no mask (-1, -1)."""
    pos = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    left, right = window
    seen = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        seen &= j >= pos - left
    if right >= 0:
        seen &= j <= pos + right
    return seen


def attend(q, k, v, scale, window=(-1, -1), softcap=0.0):
    """(o, lse) of softmax(S) · V for (batch, seqlen, heads, head_dim) Q, K, V
    in their own dtype (float64 here), differentiable: S = scale · Q·Kᵀ,
    soft-capped to softcap · tanh(S / softcap) when softcap > 0, masked by
    visible(WINDOW); lse (batch, heads, seqlen_q). A row that sees no key gives
    o = 0 and lse = -inf, FlashAttention's convention and libfatune's, where a
    softmax over -inf gives NaN."""
    rep = q.shape[2] // k.shape[2]
    kr, vr = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kr) * scale  # S = Q·Kᵀ · scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~visible(q.shape[1], k.shape[1], window, q.device), float("-inf"))
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    p = e / torch.where(l > 0, l, torch.ones_like(l))  # P = softmax(S), 0 for a row seeing nothing
    o = torch.einsum("bhqk,bkhd->bqhd", p, vr)      # O = P·V
    return o, (m + torch.log(l)).squeeze(-1)        # log 0 = -inf for a row seeing nothing


def effective_window(causal, window):
    """FlashAttention's convention, which the binding follows: causal=True
    bounds the window's right side at 0."""
    return (window[0], 0) if causal else window


def expect_close(what, dtype_name, o, lse, ro, rlse, variant):
    """O and LSE against the reference RO and RLSE: relative L2 of the output
    within TOLERANCE, every output finite, lse within LSE_TOLERANCE on the
    rows that see a key and -inf on exactly the others."""
    err = rel_l2(o, ro)
    seen = torch.isfinite(rlse)
    lse_err = (lse.double()[seen] - rlse[seen]).abs().max().item() if seen.any() else 0.0
    pattern = torch.equal(torch.isneginf(lse), ~seen)
    finite = torch.isfinite(o).all().item()
    print(f"{what}: {variant} rel_l2 {err:.3g} lse {lse_err:.3g}")
    expect(finite and pattern and err <= TOLERANCE[dtype_name] and lse_err <= LSE_TOLERANCE,
           f"{what}: rel_l2 {err:.3g} (at most {TOLERANCE[dtype_name]}), lse error {lse_err:.3g} "
           f"(at most {LSE_TOLERANCE}), -inf on the rows that see no key {pattern}, finite {finite}")


def compare(dtype_name, causal, d, seqlen, heads_k=HEADS, seqlen_k=None, heads=HEADS):
    seqlen_k = seqlen if seqlen_k is None else seqlen_k
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(seqlen * 1000 + d)
    q = torch.randn(1, seqlen, heads, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(1, seqlen_k, heads_k, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(1, seqlen_k, heads_k, d, device="cuda", generator=g).to(dtype)
    o = fatune.attention(q, k, v, causal=causal)
    choice = fatune.last_choice()
    rep = heads // heads_k
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    kd, vd = kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1)
    # Causal is bottom-right aligned; SDPA's is_causal is top-left.
    mask = None
    if causal:
        i = torch.arange(seqlen, device="cuda")[:, None]
        mask = torch.arange(seqlen_k, device="cuda")[None, :] <= i + seqlen_k - seqlen
    ref = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask).transpose(1, 2)
    err = ((o.double() - ref).norm() / ref.norm()).item()
    ok = err <= TOLERANCE[dtype_name] and torch.isfinite(o).all().item()
    print(f"{dtype_name} {'causal' if causal else 'none'} d{d} seqlen {seqlen}/{seqlen_k} "
          f"group {rep}: {choice.variant} ({choice.origin}, {choice.match}, {choice.load}) "
          f"rel_l2 {err:.3g}")
    expect(ok, f"rel_l2 {err:.3g} > {TOLERANCE[dtype_name]}")
    return choice


def shipped_buckets(path):
    if not path or not os.path.exists(path):
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT DISTINCT p.dtype, p.mask, p.head_dim, p.seqlen_q, p.seqlen_k, p.heads / p.heads_k"
        " FROM winners w"
        " JOIN problems p ON p.id = w.problem_id JOIN gpus g ON g.id = w.gpu_id"
        # Dense buckets: a variable-length profile (lengths) serves packed
        # calls only, and bench_features.py's row f checks that it does.
        # 16-bit inputs: the fp8 dtypes' buckets (e4m3, an fp8 K/V cache) need
        # quantised inputs and descale factors, which bench_fp8.py and
        # test_gpu_kvcache.py give them.
        " WHERE g.name = ? AND p.direction = 'fwd' AND p.lengths = '' AND p.dtype IN ('fp16', 'bf16')"
        " ORDER BY 1, 2, 3, 4",
        (torch.cuda.get_device_name(),)).fetchall()
    db.close()
    return rows



@case
def test_shipped_buckets():
    """Every forward bucket the shipped tables hold for this GPU, served exactly."""
    tables = TABLES
    buckets = shipped_buckets(tables)
    print(f"{len(buckets)} shipped buckets for {torch.cuda.get_device_name()} in {tables or '(none)'}")
    for dt, mask, d, seqlen, seqlen_k, group in buckets:
        # The bucket's own key length and group (decoding buckets have 65536 keys
        # shared by 4 query heads).
        heads = max(HEADS, group)
        c = compare(dt, mask == "causal", d, seqlen, heads_k=heads // group, seqlen_k=seqlen_k, heads=heads)
        expect(c.match == "exact bucket" and c.origin in ("shipped tables", "user database"),
               f"{dt} {mask} d{d} {seqlen}/{seqlen_k} group {group}: served by {c}")


@case
def test_builtin_defaults():
    """The built-in defaults (or winners) of every head dim, on a length off every tile,
    with grouped-query heads."""
    for d in (32, 64, 96, 128, 192, 256):
        for dt in ("fp16", "bf16"):
            compare(dt, d % 128 == 0, d, 333, heads_k=1)


@case
def test_refusals():
    """The forward's refusals, with their messages; a launch on a side stream."""
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
    q84 = torch.randn(1, 64, 2, 84, device="cuda", dtype=torch.float16)
    expect_raises(lambda: fatune.attention(q84, q84, q84),
                  "q has head_dim 84; fatune.attention takes multiples of 8 (the kernels load 16 bytes at a time)")
    q264 = torch.randn(1, 64, 2, 264, device="cuda", dtype=torch.float16)
    expect_raises_prefix(lambda: fatune.attention(q264, q264, q264), "fatune.attention: head_dim 264")
    expect_raises(lambda: fatune.attention(q, q, q, window_size=5),
                  "window_size must be a pair of ints (left, right), got 5", TypeError)
    expect_raises(lambda: fatune.attention(q, q, q, window_size=(1.5, 0)),
                  "window_size must be a pair of ints (left, right), got (1.5, 0)", TypeError)
    expect_raises(lambda: fatune.attention(q, q, q, window_size=(-2, 0)),
                  "window_size (-2, 0): left bound -2 must be -1 (unbounded) or 0 .. 2147483647")
    expect_raises(lambda: fatune.attention(q, q, q, window_size=(0, 2**31)),
                  "window_size (0, 2147483648): right bound 2147483648 must be -1 (unbounded) or 0 .. 2147483647")
    expect_raises(lambda: fatune.attention(q, q, q, softcap=-1.0),
                  "softcap -1.0 must be 0 (no cap) or positive and finite")
    expect_raises(lambda: fatune.attention(q, q, q, softcap=float("inf")),
                  "softcap inf must be 0 (no cap) or positive and finite")
    expect_raises(lambda: fatune.attention(q, q, q, softcap="50"), "softcap must be a float, got str", TypeError)
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


# ---- Windows, soft-cap, padded head dims, decoding -------------------------


def check_fwd(what, dtype_name, q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """fatune.attention_with_lse of Q, K, V against attend() in float64."""
    try:
        o, lse = fatune.attention_with_lse(q, k, v, causal=causal, scale=scale, window_size=window,
                                           softcap=softcap)
    except (ValueError, fatune.FatuneError) as e:  # one failure, not the end of the run
        expect(False, f"{what}: {e}")
        return
    variant = fatune.last_choice().variant
    ro, rlse = attend(q.double(), k.double(), v.double(), scale or q.shape[3] ** -0.5,
                      effective_window(causal, window), softcap)
    expect_close(what, dtype_name, o, lse, ro, rlse, variant)

# (left, right): a causal window, a two-sided one, right only, left only, and
# the diagonal alone. With seqlen_q > seqlen_k the first rows see no key.
WINDOWS = ((64, 0), (32, 16), (-1, 8), (100, -1), (0, 0))


@case
def test_windows():
    """Sliding windows against the float64 reference, causal=True bounding the right side."""
    for dt, dtype in DTYPES.items():
        for d in (64, 128):
            for sq, sk in ((333, 333), (77, 300), (300, 77)):
                for window in WINDOWS:
                    q, k, v, _ = inputs(dtype, 1, sq, sk, 4, 2, d)
                    check_fwd(f"{dt} window {window} d{d} sq{sq} sk{sk} h4/2", dt, q, k, v, window=window)
        # causal=True bounds the right side at 0 whatever the window says.
        q, k, v, _ = inputs(dtype, 2, 333, 333, 4, 2, 128)
        check_fwd(f"{dt} causal window (64, 50) d128 sq333 h4/2", dt, q, k, v, causal=True, window=(64, 50))


@case
def test_window_masks():
    """The masks a window comes down to: (-1, 0), or causal with no left bound, is
    the causal mask and runs the causal variant; a bounded one runs neither the
    causal nor the unmasked one."""
    q, k, v, _ = inputs(torch.bfloat16, 1, 1024, 1024, 2, 2, 128)
    causal_variant = fatune.select(q, k, v, causal=True).variant
    none_variant = fatune.select(q, k, v).variant
    for how, kw in (("window (-1, 0)", dict(window_size=(-1, 0))),
                    ("causal, window (-1, 5)", dict(causal=True, window_size=(-1, 5)))):
        got = fatune.select(q, k, v, **kw).variant
        expect(got == causal_variant, f"{how}: selects {got}, the causal mask {causal_variant}")
    local_variant = fatune.select(q, k, v, window_size=(64, 0)).variant
    expect(local_variant not in (causal_variant, none_variant),
           f"window (64, 0) selects {local_variant}, as the causal ({causal_variant}) or unmasked "
           f"({none_variant}) problem does")


@case
def test_softcap():
    """Soft-cap: 50 at the default scale barely bends N(0, 1) scores; 5 at scale 1
    (scores of deviation sqrt(128)) bends most of them, which the reference
    must show for the case to mean anything."""
    for dt, dtype in DTYPES.items():
        for cap, scale in ((50.0, None), (5.0, 1.0)):
            for causal in (False, True):
                q, k, v, _ = inputs(dtype, 2, 333, 333, 4, 2, 128)
                check_fwd(f"{dt} softcap {cap:g} scale {scale} {'causal' if causal else 'none'} d128 sq333 h4/2",
                          dt, q, k, v, causal=causal, softcap=cap, scale=scale)
        q, k, v, _ = inputs(dtype, 1, 300, 300, 2, 2, 64)
        check_fwd(f"{dt} softcap 5 window (64, 0) d64 sq300", dt, q, k, v, window=(64, 0), softcap=5.0, scale=1.0)
    q, k, v, _ = inputs(torch.float64, 1, 256, 256, 2, 2, 128)
    capped, uncapped = attend(q, k, v, 1.0, softcap=5.0)[0], attend(q, k, v, 1.0)[0]
    expect(rel_l2(capped, uncapped) > 10 * TOLERANCE["bf16"],
           f"softcap 5 changes the reference by only {rel_l2(capped, uncapped):.3g}: the test cannot tell")


@case
def test_padded_head_dims():
    """Head dims without a template of their own run on the next one up. The
    tensors are slices of wider ones whose columns past head_dim are NaN: the
    kernels must read them as zeros, never load them."""
    for dt, dtype in DTYPES.items():
        for d in (40, 80, 160):
            for causal in (False, True):
                for sq, sk in ((333, 333), (77, 300)):
                    wide = [t for t in inputs(dtype, 2, sq, sk, 4, 2, d + 16)[:3]]
                    for t in wide:
                        t[..., d:] = float("nan")
                    q, k, v = (t[..., :d] for t in wide)
                    check_fwd(f"{dt} padded d{d} {'causal' if causal else 'none'} sq{sq} sk{sk} h4/2 (NaN past d)",
                              dt, q, k, v, causal=causal)
        q, k, v, _ = inputs(dtype, 1, 333, 333, 2, 2, 80)
        check_fwd(f"{dt} padded d80 window (32, 16) sq333", dt, q, k, v, window=(32, 16))


@case
def test_decoding():
    """Decoding: one or a few queries against a long K/V (split-KV variants with a
    workspace), grouped-query 4, bottom-right aligned."""
    for dt, dtype in DTYPES.items():
        for sq in (1, 16):
            for causal in (False, True):
                q, k, v, _ = inputs(dtype, 2, sq, 4097, 8, 2, 128)
                check_fwd(f"{dt} decode sq{sq} sk4097 h8/2 d128 {'causal' if causal else 'none'}", dt, q, k, v,
                          causal=causal)
            q, k, v, _ = inputs(dtype, 2, sq, 4097, 8, 2, 128)
            check_fwd(f"{dt} decode sq{sq} sk4097 h8/2 d128 window (1024, 0)", dt, q, k, v, window=(1024, 0))
        q, k, v, _ = inputs(dtype, 2, 1, 4097, 8, 2, 80)
        check_fwd(f"{dt} decode sq1 sk4097 h8/2 d80 causal", dt, q, k, v, causal=True)


# ---- Variable-length batches -----------------------------------------------


def check_varlen(what, dtype_name, lens_q, lens_k, h, hk, d, causal=False, window=(-1, -1), softcap=0.0,
                 used_k=None):
    """fatune.attention_varlen_with_lse on packed sequences of lengths LENS_Q
    and LENS_K (the first USED_K keys of each when given: seqused_k) against
    attend() in float64 on each sequence alone."""
    dtype = DTYPES[dtype_name]
    q, _, _, _ = inputs(dtype, 1, sum(lens_q), 1, h, hk, d)
    _, k, v, _ = inputs(dtype, 1, 1, sum(lens_k), h, hk, d)
    q, k, v = q[0], k[0], v[0]
    offsets = lambda lens: [sum(lens[:i]) for i in range(len(lens) + 1)]
    cq, ck = offsets(lens_q), offsets(lens_k)
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")
    try:
        o, lse = fatune.attention_varlen_with_lse(
            q, k, v, as_tensor(cq), as_tensor(ck), max(lens_q), max(lens_k), causal=causal,
            window_size=window, softcap=softcap, seqused_k=as_tensor(used_k) if used_k else None)
    except (ValueError, fatune.FatuneError) as e:
        expect(False, f"{what}: {e}")
        return
    variant = fatune.last_choice().variant
    ro, rlse = [], []
    for b in range(len(lens_q)):
        keys = slice(ck[b], ck[b] + (used_k[b] if used_k else lens_k[b]))
        o_b, lse_b = attend(q[None, cq[b]:cq[b + 1]].double(), k[None, keys].double(), v[None, keys].double(),
                            d ** -0.5, effective_window(causal, window), softcap)
        ro.append(o_b[0])
        rlse.append(lse_b[0])
    expect(o.shape == q.shape and lse.shape == (h, q.shape[0]),
           f"{what}: out {tuple(o.shape)}, lse {tuple(lse.shape)}; want {tuple(q.shape)}, {(h, q.shape[0])}")
    expect_close(what, dtype_name, o, lse, torch.cat(ro, 0), torch.cat(rlse, 1), variant)


SELF_LENS = [1, 77, 300, 128, 513]  # off every tile, one of a single row


@case
def test_varlen():
    """Packed sequences against the reference on each sequence alone."""
    for dt in DTYPES:
        for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (64, 0)), (False, (32, 16))):
            check_varlen(f"{dt} varlen self {SELF_LENS} h4/2 d128 causal {causal} window {window}", dt,
                         SELF_LENS, SELF_LENS, 4, 2, 128, causal=causal, window=window)
        # Unequal lengths per sequence: decoding rows, and a sequence with more
        # queries than keys whose first rows see nothing.
        check_varlen(f"{dt} varlen cross q [1, 16, 77, 300] k [300, 16, 513, 77] h4/2 d128 causal", dt,
                     [1, 16, 77, 300], [300, 16, 513, 77], 4, 2, 128, causal=True)
        # A K/V cache padded per sequence to 600 rows, of which seqused_k are used.
        check_varlen(f"{dt} varlen seqused_k [1, 257, 600] of 600 h8/2 d128 causal", dt,
                     [1, 16, 77], [600, 600, 600], 8, 2, 128, causal=True, used_k=[1, 257, 600])
        check_varlen(f"{dt} varlen self {SELF_LENS} h2/2 d80", dt, SELF_LENS, SELF_LENS, 2, 2, 80)
        check_varlen(f"{dt} varlen self {SELF_LENS} h2/1 d64 softcap 30", dt, SELF_LENS, SELF_LENS, 2, 1, 64,
                     softcap=30.0)


@case
def test_varlen_refusals():
    """attention_varlen's refusals, with their messages."""
    qp, kp = torch.randn(130, 2, 64, device="cuda", dtype=torch.float16), torch.randn(130, 2, 64, device="cuda",
                                                                                       dtype=torch.float16)
    cu = torch.tensor([0, 50, 130], dtype=torch.int32, device="cuda")
    varlen = fatune.attention_varlen
    expect_raises(lambda: varlen(qp, kp, kp, cu.long(), cu, 80, 80),
                  "cu_seqlens_q is torch.int64 (3,) on cuda:0; fatune.attention_varlen takes a contiguous "
                  "torch.int32 (3,) on cuda:0")
    expect_raises(lambda: varlen(qp, kp, kp, cu, torch.tensor([0, 50, 100, 130], dtype=torch.int32, device="cuda"),
                                 80, 80), "cu_seqlens_k has 4 entries; expected 3")
    expect_raises(lambda: varlen(qp, kp, kp, cu, cu, 80, 80, seqused_k=cu), "seqused_k has 3 entries; expected 2")
    expect_raises(lambda: varlen(qp, kp, kp, cu.cpu(), cu, 80, 80),
                  "cu_seqlens_q is torch.int32 (3,) on cpu; fatune.attention_varlen takes a contiguous "
                  "torch.int32 (3,) on cuda:0")
    expect_raises(lambda: varlen(qp, kp, kp, cu[:1], cu, 80, 80),
                  "cu_seqlens_q has shape (1,); expected (batch + 1,) with batch >= 1")
    expect_raises(lambda: varlen(qp[None], kp, kp, cu, cu, 80, 80),
                  "q has 4 dimensions; expected 3: (total, heads, head_dim)")
    expect_raises(lambda: varlen(qp, kp[..., :32], kp[..., :32], cu, cu, 80, 80),
                  "shapes q (130, 2, 64), k (130, 2, 32), v (130, 2, 32): k and v must match, with q's head_dim")
    expect_raises(lambda: varlen(qp, kp, kp, cu, cu, 0, 80), "max_seqlen_q 0 must be 1 .. 2147483647")
    expect_raises(lambda: varlen(qp, kp, kp, cu, cu, 80, 80.0), "max_seqlen_k must be an int, got float", TypeError)
    expect_raises(lambda: varlen(qp, kp, kp, [0, 50, 130], cu, 80, 80), "cu_seqlens_q must be a torch.Tensor, got list",
                  TypeError)


# ---- The backward ----------------------------------------------------------


def reference_grads(q, k, v, dout, causal, scale, window=(-1, -1), softcap=0.0, dlse=None):
    """dq, dk, dv of attend() (float64 autograd through an explicit softmax,
    not SDPA: a row that sees no key gives 0 there) for these inputs: the
    gradient DOUT of o (None: o not in the loss) and DLSE of lse (None: lse
    not in the loss). A gradient no output reaches is zeros."""
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    o, lse = attend(qd, kd, vd, scale, effective_window(causal, window), softcap)
    outs, grads = zip(*[(t, g.double()) for t, g in ((o, dout), (lse, dlse)) if g is not None])
    torch.autograd.backward(outs, grads)
    return tuple(torch.zeros_like(t) if t.grad is None else t.grad for t in (qd, kd, vd))


def compare_bwd(dtype_name, causal, d, b, sq, sk, h, hk, scale=None, deterministic=False, sum_loss=False,
                window=(-1, -1), softcap=0.0, lse_loss=None):
    """loss.backward() through fatune.attention against reference_grads.
    sum_loss: o.sum() as the loss, whose gradient reaches the backward as an
    expanded (stride 0) tensor that must be copied before the kernels read it.
    lse_loss: "and" a loss through o and lse, "alone" through lse alone (the
    backward's D - dlse; "alone" with dO zero)."""
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    q, k, v, dout = inputs(dtype, b, sq, sk, h, hk, d)
    if sum_loss:
        dout = torch.ones_like(dout)
    dlse = None
    if lse_loss:
        g = torch.Generator(device="cuda").manual_seed(sq * 7919 + sk)
        dlse = torch.randn(b, h, sq, device="cuda", generator=g)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    what = (f"bwd {dtype_name} {'causal' if causal else 'none'} d{d} b{b} sq{sq} sk{sk} h{h}/{hk}"
            f"{' scale ' + str(scale) if scale else ''}{' deterministic' if deterministic else ''}"
            f"{' sum-loss' if sum_loss else ''}{f' window {window}' if window != (-1, -1) else ''}"
            f"{f' softcap {softcap:g}' if softcap else ''}{f' lse-loss {lse_loss}' if lse_loss else ''}")
    try:  # a refusal here is one failure, not the end of the run
        o, lse = fatune.attention(q, k, v, causal=causal, scale=scale, deterministic=deterministic,
                                  window_size=window, softcap=softcap, return_softmax_lse=True)
        if sum_loss:
            o.sum().backward()
        elif lse_loss == "alone":
            lse.backward(dlse)
        elif lse_loss:
            torch.autograd.backward((o, lse), (dout, dlse))
        else:
            o.backward(dout)
    except (ValueError, fatune.FatuneError) as e:
        expect(False, f"{what}: {e}")
        return
    choice = fatune.last_choice()
    refs = reference_grads(q, k, v, None if lse_loss == "alone" else dout, causal,
                           scale if scale is not None else d ** -0.5, window, softcap, dlse)
    errs = grad_errors([t.grad for t in (q, k, v)], refs)
    finite = all(torch.isfinite(t.grad).all().item() for t in (q, k, v))
    shapes = tuple(t.grad.shape for t in (q, k, v)) == tuple(t.shape for t in (q, k, v))
    print(f"{what}: {choice.variant} ({choice.origin}, {choice.match}, {choice.load}) rel_l2 "
          f"dq {errs[0]:.3g} dk {errs[1]:.3g} dv {errs[2]:.3g}")
    tol = GRAD_TOLERANCE[dtype_name]
    expect(finite and shapes and max(errs) <= tol,
           f"{what}: rel_l2 {[f'{e:.3g}' for e in errs]} > {tol}, finite {finite}, shapes {shapes}")
    sel = fatune.select_bwd(q, k, v, causal=causal, deterministic=deterministic, window_size=window,
                            softcap=softcap)
    expect(sel.variant == choice.variant, f"{what}: select_bwd says {sel.variant}, ran {choice.variant}")



@case
def test_backward():
    """loss.backward() through fatune.attention against float64 autograd."""
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
        # Sliding windows (the backward skips the key blocks outside them too),
        # with unequal lengths whose first rows see nothing, and causal=True
        # bounding the right side.
        for window in ((64, 0), (32, 16), (0, 0)):
            for d in (64, 128):
                compare_bwd(dt, False, d, 2, 333, 333, 4, 2, window=window)
            compare_bwd(dt, False, 128, 1, 300, 77, 2, 2, window=window)
        compare_bwd(dt, True, 128, 1, 1000, 1000, 8, 2, window=(128, 7))
        compare_bwd(dt, False, 128, 1, 1000, 1000, 8, 2, window=(256, 0), deterministic=True)
        # Head dims padded inside the kernels, and the smallest template's.
        for d in (32, 40, 80, 160):
            for causal in (False, True):
                compare_bwd(dt, causal, d, 2, 333, 333, 4, 2)
        compare_bwd(dt, True, 80, 1, 77, 300, 2, 2, window=(64, 0))
    compare_bwd("bf16", False, 128, 1, 200, 200, 2, 2, sum_loss=True)


@case
def test_lse_backward():
    """A loss through lse (fatune.attention's return_softmax_lse) against
    float64 autograd through the log-sum-exp: with o, and alone; grouped-
    query, causal, a window, the soft-cap, deterministic (no row here sees
    no key: there the reference's log 0 has no gradient)."""
    for dt in ("fp16", "bf16"):
        for d in (64, 128):
            for causal in (False, True):
                compare_bwd(dt, causal, d, 2, 333, 333, 4, 2, lse_loss="and")
        compare_bwd(dt, True, 128, 1, 1000, 1000, 8, 2, lse_loss="alone")
        compare_bwd(dt, True, 128, 1, 1000, 1000, 8, 2, deterministic=True, lse_loss="and")
        compare_bwd(dt, False, 128, 2, 333, 333, 4, 2, window=(64, 0), lse_loss="and")
        compare_bwd(dt, True, 128, 1, 333, 333, 4, 2, softcap=5.0, lse_loss="and")
        compare_bwd(dt, False, 256, 1, 200, 300, 4, 4, lse_loss="and")


@case
def test_deterministic_backward():
    """Deterministic mode: the same inputs twice give bit-identical gradients."""
    q, k, v, dout = inputs(torch.bfloat16, 2, 1000, 1000, 8, 2, 128, seed=5)
    grads = []
    for _ in range(2):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        fatune.attention(qq, kk, vv, causal=True, deterministic=True).backward(dout)
        grads.append((qq.grad, kk.grad, vv.grad))
    same = [torch.equal(a, b) for a, b in zip(*grads)]
    print(f"deterministic backward twice: dq, dk, dv bit-identical {same}")
    expect(all(same), f"deterministic gradients differ between two runs: {same}")


@case
def test_attention_bwd_into_given_tensors():
    """The raw backward writes every element of given gradient tensors, and none
    outside them: NaN-filled, each a slice of a wider NaN tensor (strides that
    are not the contiguous ones), fully finite afterwards, the rest still NaN.
    At head dim 80 the kernel's template is 96 wide: columns 80..95 of the wide
    tensors are where a padded store would land."""
    for (dt, dtype), d in ((("fp16", torch.float16), 64), (("bf16", torch.bfloat16), 64),
                           (("fp16", torch.float16), 80), (("bf16", torch.bfloat16), 80)):
        b, sq, sk, h, hk = 2, 77, 130, 4, 2
        q, k, v, dout = inputs(dtype, b, sq, sk, h, hk, d)
        o, lse = fatune.attention_with_lse(q, k, v, causal=True)
        wide = [torch.full((b, s, heads, 2 * d), float("nan"), device="cuda", dtype=dtype)
                for s, heads in ((sq, h), (sk, hk), (sk, hk))]
        given = [w[..., :d] for w in wide]
        got = fatune.attention_bwd(dout, q, k, v, o, lse, causal=True, dq=given[0], dk=given[1], dv=given[2])
        expect(all(g is w for g, w in zip(got, given)), f"{dt} d{d}: attention_bwd did not return the given tensors")
        expect(all(torch.isfinite(g).all().item() for g in given), f"{dt} d{d}: NaN left in the given dq, dk, dv")
        expect(all(torch.isnan(w[..., d:]).all().item() for w in wide), f"{dt} d{d}: written outside dq, dk, dv")
        refs = reference_grads(q, k, v, dout, True, d ** -0.5)
        errs = grad_errors(given, refs)
        print(f"attention_bwd {dt} d{d} into NaN-filled strided dq, dk, dv: rel_l2 {[f'{e:.3g}' for e in errs]}")
        expect(max(errs) <= GRAD_TOLERANCE[dt], f"{dt} d{d}: attention_bwd into given tensors: rel_l2 {errs}")


@case
def test_backward_refusals():
    """The backward's refusals, with their messages."""
    q264 = torch.randn(1, 64, 2, 264, device="cuda", dtype=torch.float16)
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
    expect_raises(lambda: bwd(dout, q, k, v, o, lse, window_size=(-3, 0)),
                  "window_size (-3, 0): left bound -3 must be -1 (unbounded) or 0 .. 2147483647")
    expect_raises(lambda: fatune.attention(q, k, v, deterministic="yes"),
                  "deterministic must be a bool, got 'yes'", TypeError)
    expect_raises(lambda: fatune.attention(q.cpu().requires_grad_(), k, v),
                  "q is on cpu; fatune.attention needs CUDA tensors")
    expect_raises_prefix(lambda: fatune.select_bwd(q264, q264, q264), "fatune.select_bwd: head_dim 264")


@case
def test_softcap_backward():
    """loss.backward() through a soft-capped fatune.attention against float64
    autograd of the capped softmax: caps that bend most scores (2) and
    Gemma 2's (50), causal, grouped-query, deterministic, on mma80f."""
    for dt in ("fp16", "bf16"):
        for d in (64, 128, 256):
            compare_bwd(dt, True, d, 1, 333, 333, 4, 2, softcap=2.0)
        compare_bwd(dt, False, 128, 2, 77, 300, 4, 1, softcap=50.0)
        compare_bwd(dt, True, 128, 1, 1000, 1000, 8, 2, softcap=5.0, deterministic=True)
    q, k, v, _ = inputs(torch.bfloat16, 1, 128, 128, 2, 2, 64)
    sel = fatune.select_bwd(q, k, v, causal=True, softcap=5.0)
    expect(".mma80f." in sel.variant, f"a soft-capped backward runs on mma80f, not {sel.variant}")


def check_varlen_bwd(what, dtype_name, lens_q, lens_k, h, hk, d, causal=False, window=(-1, -1), softcap=0.0,
                     used_k=None, deterministic=False, lse_loss=False):
    """loss.backward() through fatune.attention_varlen on packed sequences
    against float64 autograd of attend() on each sequence alone: dq, dk, dv
    of the packed tensors, the rows of keys past seqused_k zero. lse_loss:
    the loss reads the packed lse (heads, total_q) too."""
    dtype = DTYPES[dtype_name]
    q, _, _, dout = inputs(dtype, 1, sum(lens_q), 1, h, hk, d)
    _, k, v, _ = inputs(dtype, 1, 1, sum(lens_k), h, hk, d)
    q, k, v, dout = (t[0].clone().requires_grad_() if i < 3 else t[0] for i, t in enumerate((q, k, v, dout)))
    offsets = lambda lens: [sum(lens[:i]) for i in range(len(lens) + 1)]
    cq, ck = offsets(lens_q), offsets(lens_k)
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")
    dlse = torch.randn(h, sum(lens_q), device="cuda") if lse_loss else None
    try:
        o, lse = fatune.attention_varlen(q, k, v, as_tensor(cq), as_tensor(ck), max(lens_q), max(lens_k),
                                         causal=causal, window_size=window, softcap=softcap,
                                         seqused_k=as_tensor(used_k) if used_k else None,
                                         deterministic=deterministic, return_softmax_lse=True)
        torch.autograd.backward((o, lse) if lse_loss else (o,), (dout, dlse) if lse_loss else (dout,))
    except (ValueError, fatune.FatuneError) as e:
        expect(False, f"{what}: {e}")
        return
    variant = fatune.last_choice().variant
    ref = [torch.zeros(t.shape, dtype=torch.float64, device="cuda") for t in (q, k, v)]
    for b in range(len(lens_q)):
        rows = slice(cq[b], cq[b + 1])
        keys = slice(ck[b], ck[b] + (used_k[b] if used_k else lens_k[b]))
        rq, rk, rv = reference_grads(q[None, rows], k[None, keys], v[None, keys], dout[None, rows], causal,
                                     d ** -0.5, window, softcap, None if dlse is None else dlse[None, :, rows])
        ref[0][rows], ref[1][keys], ref[2][keys] = rq[0], rk[0], rv[0]
    errs = grad_errors([t.grad for t in (q, k, v)], ref)
    unused_zero = all((t.grad[ck[b] + used_k[b]:ck[b + 1]] == 0).all().item()
                      for t in (k, v) for b in range(len(lens_k))) if used_k else True
    print(f"{what}: {variant} rel_l2 dq {errs[0]:.3g} dk {errs[1]:.3g} dv {errs[2]:.3g}")
    tol = GRAD_TOLERANCE[dtype_name]
    expect(max(errs) <= tol and unused_zero and ".mma80f." in variant,
           f"{what}: rel_l2 {[f'{e:.3g}' for e in errs]} > {tol}, unused keys' gradients zero {unused_zero}, "
           f"variant {variant}")


@case
def test_varlen_backward():
    """The packed backward against each sequence's own float64 gradients:
    uneven lengths off every tile (one of a single row), causal with more
    keys than queries per sequence, grouped-query, seqused_k (the unused
    keys' gradients zero), a sliding window, the soft-cap, deterministic, a
    loss through the packed lse."""
    lens_k = [n + 40 for n in SELF_LENS]
    for dt in ("fp16", "bf16"):
        for d in (64, 128):
            for causal in (False, True):
                check_varlen_bwd(f"varlen bwd {dt} d{d} causal {causal}", dt, SELF_LENS, SELF_LENS, 4, 2, d,
                                 causal)
        check_varlen_bwd(f"varlen bwd {dt} causal sk > sq", dt, SELF_LENS, lens_k, 8, 2, 128, True)
        check_varlen_bwd(f"varlen bwd {dt} seqused_k", dt, SELF_LENS, lens_k, 4, 4, 96, True,
                         used_k=[1, 50, 320, 100, 553])
        check_varlen_bwd(f"varlen bwd {dt} window", dt, SELF_LENS, SELF_LENS, 4, 2, 128, window=(64, 0))
        check_varlen_bwd(f"varlen bwd {dt} softcap", dt, SELF_LENS, SELF_LENS, 4, 2, 128, True, softcap=5.0)
        check_varlen_bwd(f"varlen bwd {dt} deterministic", dt, SELF_LENS, SELF_LENS, 4, 2, 256, True,
                         deterministic=True)
        check_varlen_bwd(f"varlen bwd {dt} lse in the loss", dt, SELF_LENS, lens_k, 8, 2, 128, True,
                         lse_loss=True)


def main(argv):
    """The script: every test in order, each failure printed; 77 when they
    cannot run here."""
    global TABLES, failures
    why = unavailable()
    if why:
        print(f"skipped: {why}")
        return SKIP
    if argv:
        TABLES = argv[0]
    tests = [f for name, f in globals().items() if name.startswith("test_") and callable(f)]
    tests.sort(key=lambda f: f.__wrapped__.__code__.co_firstlineno)
    for t in tests:
        try:
            t()
        except AssertionError:
            pass  # its expectations are counted in failures
        except Exception:  # one test's crash, not the end of the run
            traceback.print_exc()
            failures += 1
    print("python binding:", "FAILED" if failures else "ok", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
