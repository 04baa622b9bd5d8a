# SPDX-License-Identifier: MIT
"""fatune's torch.library operators on the CPU, with fake and meta tensors:
the schemas registered; the fake implementations' shapes, dtypes, strides and
devices for the forward (out, lse), the backward (dq, dk, dv: the layouts of
q, k, v), the packed forward (out, lse (heads, total_q)) and backward, and their
refusals, which are the real ones' messages; torch._dynamo.explain of a
function calling fatune.attention, fatune.attention_bwd and
fatune.attention_varlen: 0 graph breaks; torch.compile(fullgraph=True) of a
training step (forward and, through AOTAutograd, backward on meta tensors:
fatune::bwd in the backward graph); torch.export of a module calling it.
The real implementations need libfatune and a GPU (python/tests/test_gpu_torch.py);
none is called here. Needs PyTorch: skipped (exit 77 as a script) without.

    python3 -m pytest python/tests/test_ops.py
    python3 python/tests/test_ops.py
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_tests  # noqa: E402
try:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
except ImportError:
    torch = None
try:
    import pytest
except ImportError:
    pytest = None
import fatune  # noqa: E402

if pytest is not None:
    pytestmark = pytest.mark.skipif(torch is None, reason="no PyTorch")

B, SQ, SK, H, HK, D = 2, 100, 300, 8, 2, 128  # grouped-query 4, unequal lengths


def meta(*shape, dtype=None):
    return torch.empty(*shape, device="meta", dtype=dtype or torch.bfloat16)


def dense_meta(dtype=None):
    return meta(B, SQ, H, D, dtype=dtype), meta(B, SK, HK, D, dtype=dtype), meta(B, SK, HK, D, dtype=dtype)


def raised(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None, None


def test_schemas():
    """The four operators and their schemas, as FlashAttention's options map to fat_attn_args
    (a forward's deterministic is its backward's)."""
    want = {
        "fwd": "fatune::fwd(Tensor q, Tensor k, Tensor v, SymInt mask, SymInt window_left, SymInt window_right, "
               "float softmax_scale, float softcap, bool deterministic) -> (Tensor, Tensor)",
        "bwd": "fatune::bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, SymInt mask, "
               "SymInt window_left, SymInt window_right, float softmax_scale, float softcap, "
               "bool deterministic, Tensor? dlse=None) -> (Tensor, Tensor, Tensor)",
        "fwd_varlen": "fatune::fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
                      "Tensor? seqused_k, SymInt max_seqlen_q, SymInt max_seqlen_k, SymInt mask, "
                      "SymInt window_left, SymInt window_right, float softmax_scale, float softcap, "
                      "bool deterministic) -> (Tensor, Tensor)",
        "bwd_varlen": "fatune::bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
                      "Tensor cu_seqlens_q, Tensor cu_seqlens_k, Tensor? seqused_k, SymInt max_seqlen_q, "
                      "SymInt max_seqlen_k, SymInt mask, SymInt window_left, SymInt window_right, "
                      "float softmax_scale, float softcap, bool deterministic, Tensor? dlse=None) "
                      "-> (Tensor, Tensor, Tensor)",
        "fwd_fp8": "fatune::fwd_fp8(Tensor q, Tensor k, Tensor v, Tensor? q_descale, Tensor? k_descale, "
                   "Tensor? v_descale, SymInt mask, SymInt window_left, SymInt window_right, "
                   "float softmax_scale, float softcap) -> (Tensor, Tensor)",
        "fwd_kvcache_fp8": "fatune::fwd_kvcache_fp8(Tensor q, Tensor k_cache, Tensor v_cache, "
                           "Tensor? cache_seqlens, Tensor? block_table, Tensor? k_descale, Tensor? v_descale, "
                           "SymInt mask, SymInt window_left, SymInt window_right, float softmax_scale, "
                           "float softcap) -> (Tensor, Tensor)",
    }
    for name, schema in want.items():
        assert str(getattr(torch.ops.fatune, name).default._schema) == schema, name


def test_fake_forward():
    """Fake CUDA tensors (no GPU): out like q, contiguous; lse fp32 (batch, heads, seqlen_q)."""
    with FakeTensorMode():
        for dtype in (torch.float16, torch.bfloat16):
            q = torch.empty(B, SQ, H, D, device="cuda", dtype=dtype)
            k = torch.empty(B, SK, HK, D, device="cuda", dtype=dtype)
            # A transposed view (transformers' (batch, heads, seqlen, head_dim)
            # seen as (batch, seqlen, heads, head_dim)): out is contiguous all the same.
            qt = torch.empty(B, H, SQ, D, device="cuda", dtype=dtype).transpose(1, 2)
            for qq in (q, qt):
                o, lse = fatune.attention(qq, k, k, causal=True, return_softmax_lse=True)
                assert isinstance(o, FakeTensor) and o.device == q.device
                assert (o.shape, o.dtype, o.stride()) == (q.shape, dtype, q.stride())
                assert (lse.shape, lse.dtype, lse.stride()) == ((B, H, SQ), torch.float32, (H * SQ, SQ, 1))


def test_meta_forward_and_backward():
    """Meta tensors: the forward's out and lse, the backward's dq, dk, dv in
    the layouts of q, k and v (k's strided, to show they are its own)."""
    q, k, v = dense_meta()
    o, lse = fatune.attention_with_lse(q, k, v, window_size=(64, 0))
    assert (o.device.type, o.shape, lse.shape, lse.dtype) == ("meta", q.shape, (B, H, SQ), torch.float32)
    ks = meta(B, HK, SK, D).transpose(1, 2)
    dq, dk, dv = fatune.attention_bwd(o, q, ks, v, o, lse, causal=True, deterministic=True)
    assert (dq.shape, dq.stride()) == (q.shape, q.stride())
    assert (dk.shape, dk.stride()) == (ks.shape, ks.stride())
    assert (dv.shape, dv.stride(), dv.dtype) == (v.shape, v.stride(), v.dtype)


def test_fake_varlen():
    """The packed forward: out (total_q, heads, head_dim), lse (heads, total_q)."""
    with FakeTensorMode():
        q = torch.empty(700, H, D, device="cuda", dtype=torch.float16)
        k = torch.empty(900, HK, D, device="cuda", dtype=torch.float16)
        cu = torch.empty(4, device="cuda", dtype=torch.int32)
        used = torch.empty(3, device="cuda", dtype=torch.int32)
        o, lse = fatune.attention_varlen(q, k, k, cu, cu, 300, 400, seqused_k=used, causal=True,
                                         return_softmax_lse=True)
        assert (o.shape, o.dtype, lse.shape, lse.dtype) == (q.shape, q.dtype, (H, 700), torch.float32)
        # Its backward: the gradients in the layouts of q, k, v.
        dq, dk, dv = torch.ops.fatune.bwd_varlen(o, q, k, k, o, lse, cu, cu, used, 300, 400, 1, -1, 0, 0.0, 0.0,
                                                 False)
        assert [(t.shape, t.dtype) for t in (dq, dk, dv)] == [(q.shape, q.dtype), (k.shape, k.dtype),
                                                              (k.shape, k.dtype)]


def test_fake_kvcache():
    """The KV-cache forward on fake CUDA tensors: out like q, lse (batch,
    heads, seqlen_q), a contiguous cache and a paged one alike; a block table
    of another dtype or batch refused with the real one's message."""
    with FakeTensorMode():
        q = torch.empty(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
        cache = torch.empty(B, SK, HK, D, device="cuda", dtype=torch.bfloat16)
        pool = torch.empty(40, 64, HK, D, device="cuda", dtype=torch.bfloat16)
        table = torch.empty(B, 5, device="cuda", dtype=torch.int32)
        lens = torch.empty(B, device="cuda", dtype=torch.int32)
        for kc, bt in ((cache, None), (pool, table)):
            o, lse = fatune.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=bt, causal=True,
                                                   return_softmax_lse=True)
            assert (o.shape, o.dtype, lse.shape, lse.dtype) == (q.shape, q.dtype, (B, H, 1), torch.float32)
        kind, msg = raised(lambda: fatune.attention_with_kvcache(q, pool, pool, block_table=table.long()))
        assert kind is ValueError and msg.startswith("block_table is torch.int64"), msg
        kind, msg = raised(lambda: fatune.attention_with_kvcache(q, pool, pool, block_table=table[:1]))
        assert kind is ValueError and "batch 2" in msg, msg
    assert str(torch.ops.fatune.fwd_kvcache.default._schema) == (
        "fatune::fwd_kvcache(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? cache_seqlens, "
        "Tensor? block_table, SymInt mask, SymInt window_left, SymInt window_right, float softmax_scale, "
        "float softcap) -> (Tensor, Tensor)")


def test_fake_refusals():
    """The fake implementations refuse what the real ones refuse, with their
    messages: torch.compile reports a bad call when it traces it."""
    q, k, v = dense_meta()
    cases = [
        (lambda: fatune.attention(q.float(), k.float(), v.float()), ValueError,
         "q is torch.float32; fatune.attention takes torch.float16 or torch.bfloat16"),
        (lambda: fatune.attention(meta(B, SQ, H, 84), meta(B, SK, HK, 84), meta(B, SK, HK, 84)), ValueError,
         "q has head_dim 84; fatune.attention takes multiples of 8 (the kernels load 16 bytes at a time)"),
        (lambda: fatune.attention(q[0], k, v), ValueError,
         "q has 3 dimensions; expected 4: (batch, seqlen, heads, head_dim)"),
        (lambda: fatune.attention(q, meta(B, SK, 3, D), meta(B, SK, 3, D)), ValueError,
         "k/v heads 3 do not divide q heads 8"),
        (lambda: fatune.attention(q, k, v.half()), ValueError,
         "q, k and v must share a dtype: got torch.bfloat16, torch.bfloat16, torch.float16"),
        (lambda: fatune.attention(q, k, [1]), TypeError, "v must be a torch.Tensor, got list"),
        (lambda: fatune.attention_bwd(q, q, k, v, q, meta(B, H, SQ, dtype=torch.float16)), ValueError,
         "lse is torch.float16 (2, 8, 100) on meta; it must be the forward's contiguous torch.float32 "
         "(2, 8, 100) on meta"),
    ]
    cu = meta(3, dtype=torch.int32)
    qp, kp = meta(130, H, D), meta(130, HK, D)
    cases += [
        (lambda: fatune.attention_varlen(qp, kp, kp, cu.long(), cu, 80, 80), ValueError,
         "cu_seqlens_q is torch.int64 (3,) on meta; fatune.attention_varlen takes a contiguous torch.int32 (3,) "
         "on meta"),
        (lambda: fatune.attention_varlen(qp, kp, kp, cu, cu, 80, 80, seqused_k=cu), ValueError,
         "seqused_k has 3 entries; expected 2"),
        (lambda: fatune.attention_varlen(qp, kp, kp, cu, cu, 0, 80), ValueError,
         "max_seqlen_q 0 must be 1 .. 2147483647"),
        (lambda: fatune.attention_varlen(qp, kp, kp, cu, cu, 80, 80.0), TypeError,
         "max_seqlen_k must be an int, got float"),
        (lambda: fatune.attention_varlen(qp, kp, kp, [0, 50, 130], cu, 80, 80), TypeError,
         "cu_seqlens_q must be a torch.Tensor, got list"),
    ]
    for fn, kind, message in cases:
        assert raised(fn) == (kind, message)
    # The raw backward speaks under its own name, through the operator too.
    cpu = torch.zeros(1, 8, 2, 64, dtype=torch.float16)
    assert raised(lambda: fatune.attention_bwd(q, cpu, k, v, q, q)) == (
        ValueError, "q is on cpu; fatune.attention_bwd needs CUDA tensors")
    assert raised(lambda: fatune.attention_bwd(q, q, k, v, q[:, :1], q)) == (
        ValueError, "o is torch.bfloat16 (2, 1, 8, 128) on meta; it must match q: torch.bfloat16 (2, 100, 8, 128) "
        "on meta")
    # A CPU tensor is refused by the real implementation (no library needed
    # to say so), a meta one only by a launch, which it never reaches.
    assert raised(lambda: fatune.attention(cpu, cpu, cpu)) == (
        ValueError, "q is on cpu; fatune.attention needs CUDA tensors")


def test_fake_fp8_forward():
    """Fake CUDA e4m3 tensors: out bf16 of q's shape, lse fp32, with descale
    factors per tensor ((), (1,)), FlashAttention-3's (batch, heads_k), or none."""
    e4m3 = torch.float8_e4m3fn
    with FakeTensorMode():
        q = torch.empty(B, SQ, H, D, device="cuda", dtype=e4m3)
        k = torch.empty(B, SK, HK, D, device="cuda", dtype=e4m3)
        for ds in (None, torch.ones((), device="cuda"), torch.ones(1, device="cuda"),
                   torch.ones(B, HK, device="cuda")):
            o, lse = fatune.attention(q, k, k, causal=True, return_softmax_lse=True, q_descale=ds, k_descale=ds,
                                      v_descale=ds)
            assert isinstance(o, FakeTensor)
            assert (o.shape, o.dtype, o.stride()) == (q.shape, torch.bfloat16, q.stride()), ds
            assert (lse.shape, lse.dtype) == ((B, H, SQ), torch.float32)


def test_fp8_refusals():
    """e4m3 on meta tensors: what the fp8 forward takes, each refusal naming
    the value; descale factors with 16-bit inputs; the backward and the
    other calls refuse e4m3 by name."""
    e4m3 = torch.float8_e4m3fn
    q8, k8, v8 = dense_meta(e4m3)
    q, k, v = dense_meta()
    ds = torch.empty((), device="meta", dtype=torch.float32)
    cases = [
        (lambda: fatune.attention(q, k, v, q_descale=ds, v_descale=ds), ValueError,
         "fatune.attention: q_descale, v_descale given with torch.bfloat16 q, k and v: descale factors are "
         "for torch.float8_e4m3fn inputs; pass None"),
        (lambda: fatune.attention(q8, k, v), ValueError,
         "fatune.attention: q, k and v are torch.float8_e4m3fn, torch.bfloat16, torch.bfloat16: fp8 inputs "
         "are all three torch.float8_e4m3fn, or k and v alone with a torch.float16 or torch.bfloat16 q (an "
         "fp8 K/V cache)"),
        (lambda: fatune.attention(q8, k8, v8, k_descale=2.0), TypeError,
         "k_descale must be a torch.Tensor or None, got float"),
        (lambda: fatune.attention(q8, k8, v8, k_descale=meta(B, H, dtype=torch.float32)), ValueError,
         "k_descale has shape (2, 8); fatune.attention takes () or (1,) (one factor) or (batch, heads_k) = "
         "(2, 2)"),
        (lambda: fatune.attention(q8, k8, v8, v_descale=meta(1)), ValueError,
         "v_descale is torch.bfloat16 on meta; fatune.attention takes torch.float32 descale factors on meta"),
        (lambda: fatune.attention(meta(B, SQ, H, 72, dtype=e4m3), meta(B, SK, HK, 72, dtype=e4m3),
                                  meta(B, SK, HK, 72, dtype=e4m3)), ValueError,
         "q has head_dim 72; fatune.attention takes multiples of 16 for torch.float8_e4m3fn (the kernels "
         "load 16 bytes at a time)"),
        (lambda: fatune.attention_bwd(q8, q8, k8, v8, q8, meta(B, H, SQ, dtype=torch.float32)), ValueError,
         "q is torch.float8_e4m3fn: fatune.attention_bwd has no fp8 path (fp8 e4m3 is fatune.attention's "
         "forward only, on Hopper, and an fp8 K/V cache's k and v); it takes torch.float16 or torch.bfloat16"),
        (lambda: fatune.attention_varlen(q8[0], k8[0], v8[0], meta(3, dtype=torch.int32), meta(3, dtype=torch.int32),
                                         64, 64), ValueError,
         "q is torch.float8_e4m3fn: fatune.attention_varlen has no fp8 path (fp8 e4m3 is fatune.attention's "
         "forward only, on Hopper, and an fp8 K/V cache's k and v); it takes torch.float16 or torch.bfloat16"),
    ]
    for fn, kind, message in cases:
        assert raised(fn) == (kind, message), raised(fn)
    o = fatune.attention(q8, k8, v8, causal=True, q_descale=ds)
    assert (o.device.type, o.shape, o.dtype) == ("meta", q8.shape, torch.bfloat16)
    with FakeTensorMode():  # a selection reads no storage before its dtype check
        q8 = torch.empty(B, SQ, H, D, device="cuda", dtype=e4m3)
        assert raised(lambda: fatune.select_bwd(q8, q8, q8)) == (
            ValueError, "q is torch.float8_e4m3fn: fatune.select_bwd has no fp8 path (fp8 e4m3 is "
            "fatune.attention's forward only, on Hopper, and an fp8 K/V cache's k and v); it takes "
            "torch.float16 or torch.bfloat16")


def test_fp8_has_no_backward():
    """A loss through the e4m3 forward: autograd reaches fatune::fwd_fp8's
    backward, which refuses by name (no fp8 backward yet)."""
    from fatune import _ops
    q8, k8, v8 = (t.requires_grad_() for t in dense_meta(torch.float8_e4m3fn))
    o = fatune.attention(q8, k8, v8)
    assert o.requires_grad and o.dtype == torch.bfloat16
    assert raised(lambda: o.float().sum().backward()) == (RuntimeError, _ops.NO_FP8_BACKWARD)


def test_fake_fp8_kv_cache():
    """An fp8 K/V cache on fake CUDA tensors: fp16 or bf16 q over e4m3 k and
    v, through fatune.attention (fatune::fwd_fp8) and
    fatune.attention_with_kvcache, contiguous and paged (fatune::fwd_kvcache_fp8),
    with descale factors per tensor ((), (1,)), per (batch, heads_k) or none:
    out in q's dtype and layout, lse fp32 (batch, heads, seqlen_q)."""
    e4m3 = torch.float8_e4m3fn
    with FakeTensorMode():
        cache = torch.empty(B, SK, HK, D, device="cuda", dtype=e4m3)
        pool = torch.empty(40, 64, HK, D, device="cuda", dtype=e4m3)
        table = torch.empty(B, 5, device="cuda", dtype=torch.int32)
        lens = torch.empty(B, device="cuda", dtype=torch.int32)
        for dtype in (torch.float16, torch.bfloat16):
            q = torch.empty(B, 1, H, D, device="cuda", dtype=dtype)
            for ds in (None, torch.ones((), device="cuda"), torch.ones(1, device="cuda"),
                       torch.ones(B, HK, device="cuda")):
                o, lse = fatune.attention(q, cache, cache, causal=True, return_softmax_lse=True, k_descale=ds,
                                          v_descale=ds)
                assert isinstance(o, FakeTensor)
                assert (o.shape, o.dtype, o.stride()) == (q.shape, dtype, q.stride()), ds
                assert (lse.shape, lse.dtype) == ((B, H, 1), torch.float32)
                for kc, bt in ((cache, None), (pool, table)):
                    o, lse = fatune.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=bt,
                                                           causal=True, return_softmax_lse=True, k_descale=ds,
                                                           v_descale=ds)
                    assert (o.shape, o.dtype, lse.shape, lse.dtype) == (q.shape, dtype, (B, H, 1), torch.float32)


def test_fp8_kv_cache_refusals():
    """An fp8 K/V cache on meta tensors: each refusal names the value -- a
    q_descale (q is not fp8), an fp8 q over an fp8 cache, k and v of
    different kinds, e5m2, descale factors with a 16-bit cache or of the
    wrong shape, k/v appends, a head dim the one-byte loads cannot read, the
    16-bit operator handed an fp8 cache -- and a loss through the fp8
    forward reaches its backward's refusal."""
    from fatune import _ops
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    q = meta(B, 1, H, D)
    k8, k16 = meta(B, SK, HK, D, dtype=e4m3), meta(B, SK, HK, D)
    ds = torch.empty((), device="meta", dtype=torch.float32)
    api = "fatune.attention_with_kvcache"
    no_q_descale = ("q_descale given with torch.bfloat16 q: q takes no descale factor (only an fp8 q does; an "
                    "fp8 K/V cache's factors are k_descale and v_descale); pass None")
    cases = [
        (lambda: fatune.attention(q, k8, k8, q_descale=ds), ValueError, f"fatune.attention: {no_q_descale}"),
        (lambda: fatune.attention_with_kvcache(q, k8, k8, q_descale=ds), ValueError, f"{api}: {no_q_descale}"),
        (lambda: fatune.attention(q, k8, k16), ValueError,
         "fatune.attention: q, k and v are torch.bfloat16, torch.float8_e4m3fn, torch.bfloat16: fp8 inputs are "
         "all three torch.float8_e4m3fn, or k and v alone with a torch.float16 or torch.bfloat16 q (an fp8 K/V "
         "cache)"),
        (lambda: fatune.attention_with_kvcache(q, k16, k8), ValueError,
         f"{api}: q, k_cache and v_cache are torch.bfloat16, torch.bfloat16, torch.float8_e4m3fn: fp8 inputs "
         "are all three torch.float8_e4m3fn, or k_cache and v_cache alone with a torch.float16 or "
         "torch.bfloat16 q (an fp8 K/V cache)"),
        (lambda: fatune.attention_with_kvcache(meta(B, 1, H, D, dtype=e4m3), k8, k8), ValueError,
         f"{api}: q is torch.float8_e4m3fn: an fp8 K/V cache takes a torch.float16 or torch.bfloat16 q (fp8 "
         "q, k and v are fatune.attention's e4m3 forward)"),
        (lambda: fatune.attention_with_kvcache(q, meta(B, SK, HK, D, dtype=e5m2), meta(B, SK, HK, D, dtype=e5m2)),
         ValueError, f"{api}: k_cache is torch.float8_e5m2: fatune's fp8 is FP8 E4M3FN (torch.float8_e4m3fn) "
         "only"),
        (lambda: fatune.attention(q, meta(B, SK, HK, D, dtype=e5m2), meta(B, SK, HK, D, dtype=e5m2)),
         ValueError, "fatune.attention: k is torch.float8_e5m2: fatune's fp8 is FP8 E4M3FN "
         "(torch.float8_e4m3fn) only"),
        (lambda: fatune.attention_with_kvcache(q, k16, k16, k_descale=ds, v_descale=ds), ValueError,
         f"{api}: k_descale, v_descale given with a torch.bfloat16 cache: descale factors are for a "
         "torch.float8_e4m3fn cache; pass None"),
        (lambda: fatune.attention_with_kvcache(q, k8, k8, k_descale=meta(B, H, dtype=torch.float32)), ValueError,
         f"k_descale has shape (2, 8); {api} takes () or (1,) (one factor) or (batch, heads_k) = (2, 2)"),
        (lambda: fatune.attention_with_kvcache(q, k8, k8, v_descale=2.0), TypeError,
         "v_descale must be a torch.Tensor or None, got float"),
        (lambda: fatune.attention_with_kvcache(q, k8, k8, k8[:, :1], k8[:, :1]), ValueError,
         f"{api}: k Tensor: fatune's KV-cache call has no k; k must be None"),
        (lambda: fatune.attention_with_kvcache(meta(B, 1, H, 72), meta(B, SK, HK, 72, dtype=e4m3),
                                               meta(B, SK, HK, 72, dtype=e4m3)), ValueError,
         f"k_cache has head_dim 72; {api} takes multiples of 16 for torch.float8_e4m3fn (the kernels load 16 "
         "bytes at a time)"),
        (lambda: torch.ops.fatune.fwd_kvcache(q, k8, k8, None, None, 1, -1, -1, 0.0, 0.0), ValueError,
         f"{api}: k_cache and v_cache are torch.float8_e4m3fn: an fp8 cache is fatune::fwd_kvcache_fp8's, "
         "with its descale factors"),
        (lambda: torch.ops.fatune.fwd_kvcache_fp8(q, k16, k16, None, None, None, None, 1, -1, -1, 0.0, 0.0),
         ValueError, f"{api}: k_cache and v_cache are torch.bfloat16: fatune::fwd_kvcache_fp8 takes "
         "torch.float8_e4m3fn caches"),
    ]
    for fn, kind, message in cases:
        assert raised(fn) == (kind, message), raised(fn)
    o = fatune.attention_with_kvcache(q, k8, k8, causal=True, k_descale=ds)
    assert (o.device.type, o.shape, o.dtype) == ("meta", q.shape, torch.bfloat16)
    qg = meta(B, 1, H, D).requires_grad_()
    o = fatune.attention(qg, k8, k8)
    assert o.requires_grad and o.dtype == torch.bfloat16
    assert raised(lambda: o.float().sum().backward()) == (RuntimeError, _ops.NO_FP8_BACKWARD)


def test_opcheck_fp8_kv_cache():
    """torch.library.opcheck of the fp8 K/V cache's operators on meta
    tensors, which run their fake implementations: the schema (no
    mutation, no aliasing) and the fake tensors' agreement with them."""
    e4m3 = torch.float8_e4m3fn
    q = meta(B, 1, H, D, dtype=torch.float16)
    cache, pool = meta(B, SK, HK, D, dtype=e4m3), meta(40, 64, HK, D, dtype=e4m3)
    table, lens = meta(B, 5, dtype=torch.int32), meta(B, dtype=torch.int32)
    ds = meta(B, HK, dtype=torch.float32)
    utils = ("test_schema", "test_faketensor")
    for kc, bt in ((cache, None), (pool, table)):
        torch.library.opcheck(torch.ops.fatune.fwd_kvcache_fp8.default,
                              (q, kc, kc, lens, bt, ds, ds, 1, -1, -1, 0.0, 0.0), test_utils=utils)
    torch.library.opcheck(torch.ops.fatune.fwd_fp8.default, (q, cache, cache, None, ds, None, 1, -1, -1, 0.0, 0.0),
                          test_utils=utils)


def explain(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
        return torch._dynamo.explain(fn)(*args)


def test_no_graph_breaks():
    """torch._dynamo.explain: one graph, no break, for the forward (with every
    option), the backward and the packed forward."""
    q, k, v = dense_meta()

    def forward(q, k, v):
        o, lse = fatune.attention(q, k, v, causal=True, softmax_scale=0.1, window_size=(64, 0), softcap=30.0,
                                  deterministic=True, return_softmax_lse=True)
        return o * 2, lse

    def backward(dout, q, k, v, o, lse):
        return fatune.attention_bwd(dout, q, k, v, o, lse, causal=True)

    cu = meta(5, dtype=torch.int32)

    def varlen(q, k, v, cu):
        return fatune.attention_varlen(q, k, v, cu, cu, 64, 64, seqused_k=cu[1:], causal=True)

    o, lse = fatune.attention_with_lse(q, k, v)
    for name, fn, args in (("forward", forward, (q, k, v)), ("backward", backward, (o, q, k, v, o, lse)),
                           ("varlen", varlen, (q[0], k[0], v[0], cu))):
        ex = explain(fn, *args)
        assert (ex.graph_break_count, ex.graph_count) == (0, 1), (name, ex.break_reasons)
        ops = [str(n.target) for g in ex.graphs for n in g.graph.nodes if n.op == "call_function"]
        assert any(o.startswith("fatune.") for o in ops), (name, ops)


def test_compiled_training_step():
    """torch.compile(fullgraph=True) of a step through fatune.attention, on meta
    tensors that require grad (aot_eager: AOTAutograd's forward and backward
    graphs run on the meta implementations): the gradients' shapes, and
    fatune::bwd in the backward graph, with a soft-cap too."""
    from torch._functorch.aot_autograd import aot_module_simplified

    seen = []

    def backend(gm, inputs):
        def compiler(g, _):
            seen.append({str(n.target) for n in g.graph.nodes if n.op == "call_function"})
            return g.forward
        return aot_module_simplified(gm, inputs, fw_compiler=compiler, bw_compiler=compiler)

    for softcap, want in ((0.0, "fatune.bwd.default"), (30.0, "fatune.bwd.default")):
        torch._dynamo.reset()
        seen.clear()
        q, k, v = (t.requires_grad_() for t in dense_meta())
        step = torch.compile(lambda q, k, v: fatune.attention(q, k, v, causal=True, softcap=softcap).sum(),
                             fullgraph=True, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step(q, k, v).backward()
        assert [t.grad.shape for t in (q, k, v)] == [q.shape, k.shape, v.shape]
        assert len(seen) == 2 and "fatune.fwd.default" in seen[0] and want in seen[1], seen


def test_export():
    """torch.export of a module calling fatune.attention: the operator in its graph."""
    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return fatune.attention(q, k, v, causal=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(Attend(), dense_meta())
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "fatune.fwd.default" in targets, targets


def _reference(q, k, v, scale):
    """out and lse of plain attention in float64 (q (b, sq, h, d), k and v
    (b, sk, hk, d), grouped-query by repeating), cast as the kernels return
    them: out in q's dtype, lse fp32 (b, h, sq)."""
    g = q.shape[2] // k.shape[2]
    qd, kd, vd = (t.double() for t in (q, k, v))
    kd, vd = (t.repeat_interleave(g, dim=2) for t in (kd, vd))
    s = torch.einsum("bqhd,bkhd->bhqk", qd, kd) * scale
    lse = torch.logsumexp(s, dim=-1)
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vd)
    return out.to(q.dtype), lse.float()


def test_eager_path_matches_operators():
    """The eager path (_ops.forward / backward outside torch.compile, on plain
    CUDA tensors) against the operators: with libfatune's calls stood in for
    by a float64 reference on the CPU (both paths call the same _runtime
    functions), the same out, lse and gradients through autograd, for a loss
    through out and lse, through lse alone (dO zero, the gradient from dlse:
    D - dlse in place of D) and through out alone; no autograd node where
    nothing needs grad. And those gradients are autograd's of the float64
    reference. Also when it applies: never for meta, CPU or fake tensors."""
    from fatune import _ops, _runtime

    def fwd(q, k, v, mask, left, right, scale, softcap):
        return _reference(q, k, v, scale)

    def bwd(dout, q, k, v, o, lse, mask, left, right, scale, softcap, deterministic, dlse=None):
        # By hand (the operator's implementation runs below autograd), as
        # the kernels do: dS = P (dP - D), D = rowsum(dO o O) - dlse.
        g = q.shape[2] // k.shape[2]
        qd, do = q.double(), dout.double()
        kd, vd = (t.double().repeat_interleave(g, dim=2) for t in (k, v))
        p = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", qd, kd) * scale, dim=-1)
        dv = torch.einsum("bhqk,bqhd->bkhd", p, do)
        dp = torch.einsum("bqhd,bkhd->bhqk", do, vd)
        d = (dp * p).sum(-1, keepdim=True)
        if dlse is not None:
            d = d - dlse.double().unsqueeze(-1)
        ds = p * (dp - d) * scale
        dq = torch.einsum("bhqk,bkhd->bqhd", ds, kd)
        dk = torch.einsum("bhqk,bqhd->bkhd", ds, qd)
        dk, dv = (t.unflatten(2, (k.shape[2], g)).sum(3) for t in (dk, dv))
        return tuple(a.to(t.dtype) for a, t in zip((dq, dk, dv), (q, k, v)))

    saved = (_runtime.forward, _runtime.backward, _ops.eager)
    _runtime.forward, _runtime.backward = fwd, bwd
    try:
        torch.manual_seed(0)
        q0, k0, v0 = torch.randn(2, 5, 4, 8), torch.randn(2, 7, 2, 8), torch.randn(2, 7, 2, 8)
        dout, dlse = torch.randn(2, 5, 4, 8), torch.randn(2, 4, 5)
        options = (0, -1, -1, 0.3, 0.0, False)
        losses = {"out and lse": lambda o, l: (o * dout).sum() + (l * dlse).sum(),
                  "lse alone": lambda o, l: (l * dlse).sum(),
                  "out alone": lambda o, l: (o * dout).sum()}
        results = {}
        for path in ("operator", "eager"):
            _ops.eager = (lambda *t: path == "eager")
            for what, loss in losses.items():
                q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
                out, lse = _ops.forward(q, k, v, *options)
                assert out.grad_fn is not None and lse.requires_grad, (path, what)
                loss(out, lse).backward()
                results[path, what] = (out.detach(), lse.detach(), q.grad, k.grad, v.grad)
            with torch.no_grad():
                out, _ = _ops.forward(q, k, v, *options)
            assert out.grad_fn is None, path
            o, lse = results[path, "out alone"][:2]
            dq, dk, dv = _ops.backward(dout, q0, k0, v0, o, lse, *options)
            assert all(torch.equal(a, b) for a, b in zip((dq, dk, dv), results[path, "out alone"][2:])), path
            dq, dk, dv = _ops.backward(dout, q0, k0, v0, o, lse, *options, dlse=dlse)
            assert all(torch.equal(a, b) for a, b in zip((dq, dk, dv), results[path, "out and lse"][2:])), path
        for what in losses:
            for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), results["operator", what],
                                  results["eager", what]):
                assert torch.equal(a, b), (what, name)
            # And they are the reference's gradients (autograd of it, outside any operator).
            q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
            losses[what](*_reference(q, k, v, options[3])).backward()
            for name, t, got in zip(("dq", "dk", "dv"), (q, k, v), results["eager", what][2:]):
                want = torch.zeros_like(t) if t.grad is None else t.grad  # lse does not read v
                assert torch.allclose(want, got, rtol=1e-5, atol=1e-5), (what, name)
    finally:
        _runtime.forward, _runtime.backward, _ops.eager = saved
    q, k, v = dense_meta()
    assert not _ops.eager(q, k, v)
    assert not _ops.eager(torch.empty(1), None)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.empty(1))
        assert isinstance(fake, FakeTensor) and not _ops.eager(fake)
    # Inside a torch.func transform (its wrapped tensors are of type Tensor).
    seen = []
    torch.func.grad(lambda x: (seen.append(_ops.eager()), x.sum())[1])(torch.randn(3))
    assert seen == [False], seen


def test_memo_builds_the_same_args():
    """_runtime.forward's, backward's and forward_kvcache's memo: a call whose
    signature (shapes, strides, dtypes, devices, options) was seen skips the
    Python checks and copies the kept args, which must be, byte for byte,
    the args a fresh build gives for its tensors (a KV-cache call's lengths
    and block table too); a new option, shape or misaligned data runs every
    check again; a gradient the kernels cannot read is copied on every call.
    On the CPU: libfatune's launches and the CUDA-only checks stood in for."""
    from fatune import _abi, _runtime
    calls, launched = [], []
    saved = (_runtime.check_qkv, _runtime.check_bwd, _runtime._launch_fwd, _runtime._launch_bwd,
             _runtime.device_index, _runtime.check_kvcache)
    _runtime.device_index = lambda t: 0
    _runtime.check_qkv = lambda *a, **k: calls.append("qkv")
    _runtime.check_bwd = lambda *a, **k: calls.append("bwd")
    _runtime.check_kvcache = lambda *a, **k: calls.append("kvcache")
    _runtime._launch_fwd = lambda a, device, like, api: launched.append(bytes(a))
    needs = []  # the backward's workspace bytes each launch was handed (None: it asks libfatune)

    def launch_bwd(a, q, api, need=None):
        launched.append(bytes(a))
        needs.append(need)
        return 4096 if need is None else need
    _runtime._launch_bwd = launch_bwd
    _runtime._fwd_memo.clear()
    _runtime._bwd_memo.clear()
    _runtime._kvcache_memo.clear()
    try:
        def tensors(offset=0):
            """q, k, v of one signature, fresh storage; OFFSET elements into it."""
            def one(*shape):
                n = 1
                for x in shape:
                    n *= x
                return torch.randn(n + offset, dtype=torch.bfloat16)[offset:].view(shape)
            return one(2, 5, 4, 16), one(2, 7, 2, 16), one(2, 7, 2, 16)

        options = (1, -1, 0, 0.25, 0.0)
        for round_ in range(2):
            q, k, v = tensors()
            o, lse = _runtime.forward(q, k, v, *options)
            want = _runtime.fwd_args(q, k, v, o, lse, *options)
            assert launched.pop() == bytes(want), round_
        assert calls == ["qkv"], calls  # checked once: the second call hit
        q, k, v = tensors(offset=1)  # the same signature, data 2 bytes off
        o, lse = _runtime.forward(q, k, v, *options)
        assert calls == ["qkv"] * 2, calls
        launched.clear()
        q, k, v = tensors()
        _runtime.forward(q, k, v, 1, -1, 0, 0.5, 0.0)  # another scale: another signature
        assert calls == ["qkv"] * 3, calls

        # The backward, with a gradient the kernels cannot read (expanded:
        # stride 0), copied on the miss and on the hit alike.
        del calls[:]
        for round_ in range(2):
            q, k, v = tensors()
            o = torch.randn(q.shape, dtype=q.dtype)
            lse = torch.randn(2, 4, 5)
            dout = torch.randn(1, 1, 1, 16, dtype=q.dtype).expand(q.shape)
            dq, dk, dv = _runtime.backward(dout, q, k, v, o, lse, *options, True)
            got = _abi.fat_attn_bwd_args.from_buffer_copy(launched.pop())
            assert got.dout != dout.data_ptr() and got.do_row_stride == 4 * 16, round_
            copy = torch.empty(q.shape, dtype=q.dtype)  # a contiguous copy's strides
            want = _runtime.bwd_args(_runtime.fwd_args(q, k, v, o, lse, *options), copy, dq, dk, dv, True)
            want.dout = got.dout  # the copy's pointer, which only the launch saw
            assert bytes(got) == bytes(want), round_
        assert calls == ["bwd"], calls
        assert needs == [None, 4096], needs  # asked once, then the kept bytes

        # The KV-cache call, contiguous and paged: a decoding loop's steps
        # (new q, new lengths and table in the same shapes) hit.
        del calls[:]
        launched.clear()
        for paged in (False, True):
            for round_ in range(2):
                q = torch.randn(2, 1, 4, 16, dtype=torch.bfloat16)
                shape = (6, 16, 2, 16) if paged else (2, 40, 2, 16)
                kc, vc = torch.randn(shape, dtype=torch.bfloat16), torch.randn(shape, dtype=torch.bfloat16)
                seqlens = torch.tensor([5 + round_, 9], dtype=torch.int32)
                table = torch.tensor([[0, 2, 4], [1, 3, 5]], dtype=torch.int32) if paged else None
                o, lse = _runtime.forward_kvcache(q, kc, vc, seqlens, table, *options)
                want = _runtime.kvcache_args(q, kc, vc, o, lse, seqlens, table, *options)
                assert launched.pop() == bytes(want), (paged, round_)
        assert calls == ["kvcache"] * 2, calls  # once a layout
    finally:
        (_runtime.check_qkv, _runtime.check_bwd, _runtime._launch_fwd, _runtime._launch_bwd,
         _runtime.device_index, _runtime.check_kvcache) = saved
        _runtime._fwd_memo.clear()
        _runtime._bwd_memo.clear()
        _runtime._kvcache_memo.clear()


def test_options_memo_keeps_the_refusals():
    """fatune._flash_options' memo: an accepted call's result is reused only
    for arguments of the same values and types -- True accepted first does
    not make causal=1 (== True) acceptable, nor 1.0 a softcap where 1 was
    not refused --, and unhashable arguments still get their refusal."""
    def options(**kw):
        a = dict(causal=False, softmax_scale=None, scale=None, window_size=(-1, -1), softcap=0.0,
                 deterministic=False, dropout_p=0.0, alibi_slopes=None, return_attn_probs=False,
                 return_softmax_lse=False)
        a.update(kw)
        return fatune._flash_options("fatune.attention", **a)

    fatune._flash_options_kept.clear()
    assert options(causal=True) == options(causal=True)
    assert len(fatune._flash_options_kept) == 1
    for bad, kind in ((dict(causal=1), TypeError), (dict(causal=True, deterministic=0), TypeError),
                      (dict(causal=True, window_size=(-1.0, -1)), TypeError),
                      (dict(softcap=[1.0]), TypeError), (dict(window_size=[-2, 0]), ValueError)):
        try:
            options(**bad)
        except kind:
            pass
        else:
            raise AssertionError(f"{bad} accepted")
    assert options(window_size=[-1, 0]) == options(causal=True)  # a list: checked, not kept


def test_eager_path_of_the_inference_operators():
    """fatune.attention_with_kvcache (16-bit and fp8 caches) and the fp8
    forward: outside tracing, on plain CUDA tensors, with no input needing
    grad, they call _runtime directly; otherwise the operator, whose body
    calls the same function -- told apart here by the caller's name. On the
    CPU, _runtime's functions and the eager predicate stood in for."""
    from fatune import _ops, _runtime
    seen = []

    def stand_in(*args):
        seen.append(sys._getframe(1).f_code.co_name)
        q = args[0]
        return torch.zeros(q.shape, dtype=torch.bfloat16), torch.zeros(q.shape[0], q.shape[2], q.shape[1])

    names = ("forward_kvcache", "forward_kvcache_fp8", "forward_fp8")
    saved = tuple(getattr(_runtime, n) for n in names) + (_ops.eager,)
    for n in names:
        setattr(_runtime, n, stand_in)
    try:
        q, k, v = torch.randn(2, 1, 4, 16), torch.randn(2, 9, 2, 16), torch.randn(2, 9, 2, 16)
        seqlens = torch.full((2,), 9, dtype=torch.int32)
        options = (1, -1, 0, 0.25, 0.0)
        calls = (
            (lambda q: _ops.forward_kvcache(q, k, v, seqlens, None, *options), "fwd_kvcache"),
            (lambda q: _ops.forward_kvcache_fp8(q, k, v, seqlens, None, None, None, *options), "fwd_kvcache_fp8"),
            (lambda q: _ops.forward_fp8(q, k, v, None, None, None, *options), "fwd_fp8"),
        )
        for call, operator in calls:
            for eager, grad, want in ((True, False, "forward"), (False, False, operator),
                                      (True, True, operator)):
                _ops.eager = (lambda *t, e=eager: e)
                del seen[:]
                try:
                    call(q.clone().requires_grad_(grad))
                except RuntimeError:  # an operator without autograd may refuse a grad input
                    pass
                expect = want if want != "forward" else dict(fwd_kvcache="forward_kvcache",
                                                             fwd_kvcache_fp8="forward_kvcache_fp8",
                                                             fwd_fp8="forward_fp8")[operator]
                assert seen[:1] == [expect], (operator, eager, grad, seen)
    finally:
        for n, f in zip(names + ("eager",), saved):
            setattr(_runtime if n != "eager" else _ops, n, f)


def main():
    return script_tests.run(globals(), "no PyTorch" if torch is None else None)


if __name__ == "__main__":
    sys.exit(main())
