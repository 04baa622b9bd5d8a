# SPDX-License-Identifier: MIT
"""fatune.attention_with_kvcache on a GPU (issue 24): a contiguous cache and a
paged one (pages of 16, 64 and 256 tokens, in random order in a pool whose
other pages are NaN) against PyTorch SDPA on the same keys gathered
contiguous, in float64 on the GPU: one query and a few, and a prefill chunk,
caches of uneven lengths (an int and a tensor cache_seqlens), causal
(bottom-right on each sequence's cache length), grouped-query heads, a
sliding window and the soft-cap; the choice names the paged family for a
paged call and never for a contiguous one; opcheck of fatune::fwd_kvcache;
torch.compile(fullgraph=True) of the call. An fp8 cache (issue 24): k and v
quantised to torch.float8_e4m3fn with descale factors per tensor and per
(batch, heads_k), under fp16 and bf16 queries, contiguous and paged, against
SDPA on the dequantised keys (the same values the kernel reads), out in q's
dtype, the variant of the dtype fp16-e4m3kv or bf16-e4m3kv; opcheck of
fatune::fwd_kvcache_fp8; its refusals on the GPU. Needs PyTorch and a CUDA
GPU: each test skips without (the fp8 ones also below compute capability
8.9, and where this libfatune has no kernel of the dtype built in).

    FATUNE_LIB=build/runtime/libfatune.so python3 -m pytest -v python/tests/test_gpu_kvcache.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
import fatune  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
BF16 = torch.bfloat16
TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}  # rel_l2 against float64


def rand(*shape, dtype=BF16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).to(dtype)


def rel_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0   # the largest finite e4m3fn value
E4M3_NAN = 0x7F    # an e4m3fn NaN byte (S.1111.111)


def paged(k, v, lens, page, seed=0):
    """K and V (batch, seqlen, heads_k, d) scattered into a pool of pages of
    PAGE tokens in random order, NaN wherever no used key is; the block
    table (batch, pages a sequence) names one NaN spare past each cache.
    e4m3 caches are paged as their bytes (NaN the byte E4M3_NAN)."""
    if k.dtype == E4M3:
        pool_k, pool_v, table = paged(k.view(torch.uint8), v.view(torch.uint8), lens, page, seed)
        return pool_k.view(E4M3), pool_v.view(E4M3), table
    b, s, hk, d = k.shape
    per = (s + page - 1) // page
    used_pages = [(n + page - 1) // page for n in lens]
    n_pages = sum(used_pages) + 1
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(n_pages, generator=g).tolist()
    nan = E4M3_NAN if k.dtype == torch.uint8 else float("nan")
    pool_k = torch.full((n_pages, page, hk, d), nan, dtype=k.dtype, device=k.device)
    pool_v = torch.full_like(pool_k, nan)
    table = torch.full((b, per), order[-1], dtype=torch.int32)
    nxt = 0
    for i in range(b):
        for j in range(used_pages[i]):
            at = order[nxt]
            nxt += 1
            table[i, j] = at
            rows = min(page, lens[i] - j * page)
            pool_k[at, :rows] = k[i, j * page:j * page + rows]
            pool_v[at, :rows] = v[i, j * page:j * page + rows]
    return pool_k, pool_v, table.to(k.device)


def reference(q, k, v, lens, causal, window=(-1, -1), softcap=0.0):
    """SDPA in float64 on each sequence's used keys gathered contiguous, the
    mask bottom-right aligned on its length (query i at key position
    i + len - seqlen_q); with a soft-cap, the same softmax by hand."""
    b, sq, h, d = q.shape
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for i in range(b):
        n = lens[i]
        qi = q[i].double().transpose(0, 1)                                  # (h, sq, d)
        ki = k[i, :n].double().transpose(0, 1).repeat_interleave(h // k.shape[2], 0)
        vi = v[i, :n].double().transpose(0, 1).repeat_interleave(h // k.shape[2], 0)
        s = qi @ ki.transpose(1, 2) / math.sqrt(d)
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(sq, device=q.device)[:, None] + n - sq
        key = torch.arange(n, device=q.device)[None, :]
        left, right = window
        if causal:
            right = 0
        allowed = torch.ones(sq, n, dtype=torch.bool, device=q.device)
        if right >= 0:
            allowed &= key <= pos + right
        if left >= 0:
            allowed &= key >= pos - left
        if softcap:  # SDPA has no soft-cap: its softmax by hand
            p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
            out[i] = (p @ vi).transpose(0, 1)
        else:
            o = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, attn_mask=allowed)
            out[i] = o.nan_to_num(0.0).transpose(0, 1)  # a row that sees no key: 0, as fatune's
    return out


CASES = [  # (batch, seqlen_q, heads, heads_k, d, seqlen_cache, causal, window, softcap)
    (3, 1, 8, 2, 128, 4097, True, (-1, -1), 0.0),
    (2, 16, 8, 2, 128, 2000, True, (-1, -1), 0.0),
    (2, 4, 4, 4, 64, 777, False, (-1, -1), 0.0),
    (2, 300, 8, 2, 128, 1300, True, (-1, -1), 0.0),
    (3, 8, 8, 2, 128, 3000, True, (500, 0), 30.0),
]


@pytest.mark.parametrize("page", [None, 16, 64, 256])
@pytest.mark.parametrize("case", CASES)
def test_against_sdpa(case, page):
    b, sq, h, hk, d, s, causal, window, softcap = case
    q, k, v = rand(b, sq, h, d, seed=1), rand(b, s, hk, d, seed=2), rand(b, s, hk, d, seed=3)
    lens = [s - (i * 53 + 5) % s if i else s for i in range(b)]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    want = reference(q, k, v, lens, causal, window, softcap)
    if page is None:
        kc, vc, table = k, v, None
    else:
        kc, vc, table = paged(k, v, lens, page, seed=page)
    o, lse = fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, causal=causal,
                                           window_size=window, softcap=softcap, return_softmax_lse=True)
    torch.cuda.synchronize()
    assert lse.shape == (b, h, sq)
    assert torch.isfinite(o).all(), f"page {page}: non-finite output"
    err = rel_l2(o, want)
    assert err < TOL[q.dtype], f"page {page}: rel_l2 {err:.2e}"
    choice = fatune.last_choice()
    assert choice.variant.startswith("fwd.paged.") == (page is not None), choice.variant


def test_int_cache_seqlens_and_whole_cache():
    """cache_seqlens as an int, and None (the whole cache), paged or not."""
    q, k, v = rand(2, 1, 8, 128, seed=4), rand(2, 1024, 2, 128, seed=5), rand(2, 1024, 2, 128, seed=6)
    want = reference(q, k, v, [700, 700], True)
    o = fatune.attention_with_kvcache(q, k, v, cache_seqlens=700, causal=True)
    assert rel_l2(o, want) < TOL[BF16]
    kc, vc, table = paged(k, v, [1024, 1024], 64)
    o = fatune.attention_with_kvcache(q, kc, vc, block_table=table, causal=True)
    assert rel_l2(o, reference(q, k, v, [1024, 1024], True)) < TOL[BF16]


def test_refusals():
    q, k = rand(1, 1, 8, 128), rand(1, 64, 2, 128)
    with pytest.raises(ValueError, match="k Tensor: fatune's KV-cache call has no k"):
        fatune.attention_with_kvcache(q, k, k, k)
    with pytest.raises(ValueError, match="num_splits 4"):
        fatune.attention_with_kvcache(q, k, k, num_splits=4)
    pool = rand(4, 48, 2, 128)
    table = torch.zeros(1, 2, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="page_size 48: must be a power of two from 16 to 65536"):
        fatune.attention_with_kvcache(q, pool, pool, block_table=table)
    with pytest.raises(ValueError, match="block_table is torch.int64"):
        fatune.attention_with_kvcache(q, pool, pool, block_table=table.long())


# ---- an fp8 K/V cache ---------------------------------------------------------------

KV8_TOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2}  # rel_l2 against float64 on the dequantised cache


def need_kv8():
    """Skips below compute capability 8.9 (the fp8 cache's kernels are
    sm_89's and newer); the refusal there is test_fp8_cache_refusals'."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("an fp8 K/V cache needs compute capability 8.9 or newer")


def quantise(x, per_head):
    """X (batch, seqlen, heads_k, d) as e4m3 and its fp32 descale factors,
    FlashAttention-3's: amax / 448 per (batch, heads_k) (PER_HEAD) or one
    for the tensor (shape (1,)); and the dequantised values the kernel
    reads, e4m3 x descale, in float64."""
    amax = x.float().abs().amax(dim=(1, 3)) if per_head else x.float().abs().amax().reshape(1)
    descale = (amax / E4M3_MAX).clamp(min=1e-12)
    scale = descale[:, None, :, None] if per_head else descale
    x8 = (x.float() / scale).to(E4M3)
    return x8, descale.contiguous(), x8.float().double() * scale.double()


def kv8_call(*args, **kwargs):
    """fatune.attention_with_kvcache, skipping where this libfatune has no
    kernel of the fp8 cache's dtype built in (the generator's decoding
    families make them)."""
    try:
        return fatune.attention_with_kvcache(*args, **kwargs)
    except ValueError as e:
        if "kernel built in" in str(e):
            pytest.skip(str(e))
        raise


KV8_CASES = [  # (batch, seqlen_q, heads, heads_k, d, seqlen_cache, causal, window, per_head)
    (3, 1, 8, 2, 128, 4097, True, (-1, -1), True),
    (2, 4, 8, 2, 128, 2000, True, (-1, -1), False),
    (2, 1, 4, 4, 64, 777, False, (-1, -1), True),
    (3, 8, 8, 2, 128, 3000, True, (500, 0), True),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("page", [None, 16, 64])
@pytest.mark.parametrize("case", KV8_CASES)
def test_fp8_cache_against_sdpa(case, page, dtype):
    need_kv8()
    b, sq, h, hk, d, s, causal, window, per_head = case
    q = rand(b, sq, h, d, dtype=dtype, seed=11)
    k, v = rand(b, s, hk, d, dtype=torch.float32, seed=12), rand(b, s, hk, d, dtype=torch.float32, seed=13)
    k8, k_descale, k_dq = quantise(k, per_head)
    v8, v_descale, v_dq = quantise(v, per_head)
    lens = [s - (i * 53 + 5) % s if i else s for i in range(b)]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    want = reference(q, k_dq, v_dq, lens, causal, window)
    if page is None:
        kc, vc, table = k8, v8, None
    else:
        kc, vc, table = paged(k8, v8, lens, page, seed=page)
    o, lse = kv8_call(q, kc, vc, cache_seqlens=seqlens, block_table=table, causal=causal, window_size=window,
                      return_softmax_lse=True, k_descale=k_descale, v_descale=v_descale)
    torch.cuda.synchronize()
    assert (o.dtype, o.shape, lse.shape) == (dtype, q.shape, (b, h, sq))
    assert torch.isfinite(o).all(), f"page {page}: non-finite output"
    err = rel_l2(o, want)
    assert err < KV8_TOL[dtype], f"page {page}: rel_l2 {err:.2e}"
    choice = fatune.last_choice()
    name = "fp16-e4m3kv" if dtype == torch.float16 else "bf16-e4m3kv"
    assert f".{name}." in choice.variant, choice.variant
    assert choice.variant.startswith("fwd.paged.") == (page is not None), choice.variant


def test_fp8_cache_through_attention():
    """fatune.attention(q16, k8, v8, k_descale=, v_descale=): the same
    forward over a whole contiguous cache (fatune::fwd_fp8)."""
    need_kv8()
    q = rand(2, 1, 8, 128, seed=14)
    k8, k_descale, k_dq = quantise(rand(2, 1500, 2, 128, dtype=torch.float32, seed=15), True)
    v8, v_descale, v_dq = quantise(rand(2, 1500, 2, 128, dtype=torch.float32, seed=16), False)
    try:
        o = fatune.attention(q, k8, v8, causal=True, k_descale=k_descale, v_descale=v_descale)
    except ValueError as e:
        if "kernel built in" in str(e):
            pytest.skip(str(e))
        raise
    assert o.dtype == BF16
    assert rel_l2(o, reference(q, k_dq, v_dq, [1500, 1500], True)) < KV8_TOL[BF16]


def test_fp8_cache_refusals():
    """What the fp8 cache does not take, each by name: a q_descale, an fp8
    q, e5m2, descale factors with a 16-bit cache, k/v appends; and below
    compute capability 8.9 the cache itself, naming the GPU's architecture."""
    q = rand(1, 1, 8, 128)
    k8 = rand(1, 64, 2, 128, dtype=torch.float32).to(E4M3)
    one = torch.ones((), device="cuda")
    with pytest.raises(ValueError, match="q_descale given with torch.bfloat16 q: q takes no descale factor"):
        fatune.attention_with_kvcache(q, k8, k8, q_descale=one)
    with pytest.raises(ValueError, match="an fp8 K/V cache takes a torch.float16 or torch.bfloat16 q"):
        fatune.attention_with_kvcache(q.to(E4M3), k8, k8)
    k5 = rand(1, 64, 2, 128, dtype=torch.float32).to(torch.float8_e5m2)
    with pytest.raises(ValueError, match=r"k_cache is torch.float8_e5m2: fatune's fp8 is FP8 E4M3FN"):
        fatune.attention_with_kvcache(q, k5, k5)
    with pytest.raises(ValueError, match="descale factors are for a torch.float8_e4m3fn cache"):
        fatune.attention_with_kvcache(q, rand(1, 64, 2, 128), rand(1, 64, 2, 128), k_descale=one)
    with pytest.raises(ValueError, match="k Tensor: fatune's KV-cache call has no k"):
        fatune.attention_with_kvcache(q, k8, k8, k8[:, :1], k8[:, :1])
    if torch.cuda.get_device_capability() < (8, 9):
        with pytest.raises(ValueError, match="its kernels need compute capability 8.9 or newer"):
            fatune.attention_with_kvcache(q, k8, k8, k_descale=one, v_descale=one)


def test_fp8_cache_opcheck():
    need_kv8()
    q = rand(2, 4, 8, 128, seed=17)
    k8, k_descale, _ = quantise(rand(2, 512, 2, 128, dtype=torch.float32, seed=18), True)
    v8, v_descale, _ = quantise(rand(2, 512, 2, 128, dtype=torch.float32, seed=19), True)
    kc, vc, table = paged(k8, v8, [512, 300], 16)
    seqlens = torch.tensor([512, 300], dtype=torch.int32, device="cuda")
    kv8_call(q, kc, vc, cache_seqlens=seqlens, block_table=table, k_descale=k_descale, v_descale=v_descale)
    torch.library.opcheck(torch.ops.fatune.fwd_kvcache_fp8,
                          (q, kc, vc, seqlens, table, k_descale, v_descale, 1, -1, -1, 0.0, 0.0),
                          # not test_schema: it compares the inputs before and after
                          # by arithmetic PyTorch has no float8_e4m3fn kernel for
                          # ("mul_cuda" not implemented, on the H100)
                          test_utils=("test_faketensor",))


def test_opcheck_and_compile():
    q, k, v = rand(2, 4, 8, 128, seed=7), rand(2, 512, 2, 128, seed=8), rand(2, 512, 2, 128, seed=9)
    kc, vc, table = paged(k, v, [512, 300], 16)
    seqlens = torch.tensor([512, 300], dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.fatune.fwd_kvcache, (q, kc, vc, seqlens, table, 1, -1, -1, 0.0, 0.0),
                          test_utils=("test_schema", "test_faketensor"))
    step = torch.compile(lambda q: fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens,
                                                                 block_table=table, causal=True),
                         fullgraph=True)
    eager = fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=table, causal=True)
    assert torch.equal(step(q), eager)
