# SPDX-License-Identifier: MIT
"""fatune.attention_with_kvcache on a GPU (issue 24): a contiguous cache and a
paged one (pages of 16, 64 and 256 tokens, in random order in a pool whose
other pages are NaN) against PyTorch SDPA on the same keys gathered
contiguous, in float64 on the GPU: one query and a few, and a prefill chunk,
caches of uneven lengths (an int and a tensor cache_seqlens), causal
(bottom-right on each sequence's cache length), grouped-query heads, a
sliding window and the soft-cap; the choice names the paged family for a
paged call and never for a contiguous one; opcheck of fatune::fwd_kvcache;
torch.compile(fullgraph=True) of the call. Needs PyTorch and a CUDA GPU: each
test skips without.

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


def paged(k, v, lens, page, seed=0):
    """K and V (batch, seqlen, heads_k, d) scattered into a pool of pages of
    PAGE tokens in random order, NaN wherever no used key is; the block
    table (batch, pages a sequence) names one NaN spare past each cache."""
    b, s, hk, d = k.shape
    per = (s + page - 1) // page
    used_pages = [(n + page - 1) // page for n in lens]
    n_pages = sum(used_pages) + 1
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(n_pages, generator=g).tolist()
    pool_k = torch.full((n_pages, page, hk, d), float("nan"), dtype=k.dtype, device=k.device)
    pool_v = torch.full_like(pool_k, float("nan"))
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
