# SPDX-License-Identifier: MIT
"""The native host path (python/fatune/native/, csrc/native.cpp) on a GPU,
against the Python path it stands in for: the same out and lse bit for bit
(bf16 and fp16, d64 and d128, grouped-query, causal, a window, odd lengths,
q a strided view of a packed qkv); the same gradients bit for bit through its
C++ autograd node (deterministic), for a dense dout and for the expanded one
o.sum() gives, and for a loss through lse (with o, and alone); the KV-cache
call's out and lse bit for bit (a contiguous cache with cache_seqlens, a
paged one in random page order, grouped-query, causal, a window); what it
declines (a misaligned q, a device whose context is not open, a cache call
whose q needs a gradient or whose lengths are not (batch,) int32) runs the
Python path, whose error or result the caller gets; a CUDA graph of forward
and backward, and one of a decoding step, replayed on new inputs. It builds the module first (torch.utils.cpp_extension: a C++
compiler and ninja) into a fresh folder. Needs PyTorch and a CUDA GPU.

    FATUNE_LIB=build/runtime/libfatune.so python3 -m pytest -v python/tests/test_gpu_native.py
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # graphs
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
os.environ.setdefault("FATUNE_NATIVE_DIR", tempfile.mkdtemp(prefix="fatune-native-"))
import fatune  # noqa: E402
from fatune import _ops, native  # noqa: E402
from graphs import capture  # noqa: E402


@pytest.fixture(scope="module")
def ext():
    """The built and bound module; _ops.native is left as the test found it."""
    native.build()
    module = native.load()
    assert module is not None
    kept = _ops.native
    yield module
    _ops.native = kept


def rand(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).to(dtype)


def both(ext, fn):
    """FN() through the Python path, then through the native path."""
    _ops.native = None
    a = fn()
    _ops.native = ext
    b = fn()
    return a, b


CASES = [  # b, sq, sk, h, hk, d, dtype, options
    (2, 333, 333, 8, 2, 128, torch.bfloat16, {}),
    (2, 333, 333, 8, 2, 128, torch.bfloat16, {"causal": True}),
    (1, 1, 512, 32, 8, 128, torch.bfloat16, {}),
    (3, 200, 517, 4, 4, 64, torch.float16, {"causal": True}),
    (2, 257, 257, 6, 3, 64, torch.bfloat16, {"window_size": (64, 0)}),
    (1, 128, 128, 4, 1, 128, torch.float16, {"softmax_scale": 0.05}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_identical(ext, case):
    b, sq, sk, h, hk, d, dtype, options = CASES[case]
    q, k, v = rand(b, sq, h, d, dtype=dtype, seed=1), rand(b, sk, hk, d, dtype=dtype, seed=2), \
        rand(b, sk, hk, d, dtype=dtype, seed=3)
    fatune.attention(q, k, v, **options)  # opens the context: the native path takes the next call
    assert ext.fwd(q, k, v, *(_options(options, d)), False), "declined a call it should take"
    (o1, l1), (o2, l2) = both(ext, lambda: fatune.attention(q, k, v, return_softmax_lse=True, **options))
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    assert o2.is_contiguous() and o2.dtype == dtype and l2.shape == (b, h, sq)


def _options(options, d):
    from fatune import _flash_options
    return _flash_options("test", options.get("causal", False), options.get("softmax_scale"), None,
                          options.get("window_size", (-1, -1)), 0.0, False, 0.0, None, False, False)


def test_strided_q(ext):
    """q, k, v views of one packed (b, s, 3, h, d) tensor: read where they lie."""
    qkv = rand(2, 300, 3, 8, 128, seed=4)
    q, k, v = qkv.unbind(2)
    (o1, l1), (o2, l2) = both(ext, lambda: fatune.attention(q, k, v, causal=True, return_softmax_lse=True))
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


@pytest.mark.parametrize("expanded", [False, True])
def test_backward_identical(ext, expanded):
    """The C++ autograd node's gradients are the Python Function's, bit for
    bit (deterministic); EXPANDED: dout of stride 0 (o.sum()), copied first."""
    def grads():
        q, k, v = (rand(2, 333, h, 128, seed=s).requires_grad_() for s, h in ((5, 8), (6, 2), (7, 2)))
        o = fatune.attention(q, k, v, causal=True, deterministic=True)
        loss = o.float().sum() if expanded else (o * rand(*o.shape, seed=8)).float().sum()
        return [*torch.autograd.grad(loss, (q, k, v)), o.grad_fn.name()]

    a, b = both(ext, grads)
    assert "Attention" not in a[3] and "Attention" in b[3], (a[3], b[3])
    for x, y in zip(a[:3], b[:3]):
        assert torch.equal(x, y)


@pytest.mark.parametrize("alone", [False, True])
def test_lse_gradient(ext, alone):
    """A loss through lse (with o, or alone: dO zero) gives the Python
    path's gradients, bit for bit (deterministic); dlse expanded (lse.sum())
    is copied first."""
    def grads():
        q, k, v = (rand(2, 300, h, 128, seed=s).requires_grad_() for s, h in ((14, 8), (15, 2), (16, 2)))
        o, lse = fatune.attention(q, k, v, causal=True, deterministic=True, return_softmax_lse=True)
        loss = lse.sum() if alone else (o * rand(*o.shape, seed=17)).float().sum() + (lse * lse).sum()
        return torch.autograd.grad(loss, (q, k, v))

    a, b = both(ext, grads)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_declines_misaligned(ext):
    """A q one element off 16 bytes: declined, and the Python path's error."""
    _ops.native = ext
    buf = rand(1 * 64 * 4 * 64 + 1)
    q = buf[1:].view(1, 64, 4, 64)
    k, v = rand(1, 64, 4, 64, seed=12), rand(1, 64, 4, 64, seed=13)
    assert ext.fwd(q, k, v, 0, -1, -1, 0.125, 0.0, False) == []
    with pytest.raises(ValueError, match="aligned"):
        fatune.attention(q, k, v)


def test_declines_other_dtypes(ext):
    q = rand(1, 64, 4, 64, dtype=torch.float32)
    assert ext.fwd(q, q, q, 0, -1, -1, 0.125, 0.0, False) == []
    assert ext.fwd(q.cpu(), q.cpu(), q.cpu(), 0, -1, -1, 0.125, 0.0, False) == []


def test_cuda_graph(ext):
    """Forward and backward captured with the native path, replayed on new
    inputs, against eager calls on them."""
    _ops.native = ext
    shape_q, shape_k = (2, 256, 8, 128), (2, 256, 2, 128)
    q, k, v = (rand(*s, seed=i).requires_grad_() for i, s in ((20, shape_q), (21, shape_k), (22, shape_k)))
    dout = rand(*shape_q, seed=23)

    def step():
        o = fatune.attention(q, k, v, causal=True, deterministic=True)
        return (o, *torch.autograd.grad(o, (q, k, v), dout))

    graph, captured = capture(step)
    with torch.no_grad():
        for t, seed in ((q, 30), (k, 31), (v, 32), (dout, 33)):
            t.copy_(rand(*t.shape, seed=seed))
    graph.replay()
    torch.cuda.synchronize()
    expected = step()
    for x, y in zip(captured, expected):
        assert torch.equal(x, y)


KV_CASES = [  # batch, seqlen_q, cache keys, heads, heads_k, head_dim, dtype, page size (None: contiguous), options
    (4, 1, 1000, 32, 8, 128, torch.bfloat16, None, {}),
    (3, 4, 777, 16, 4, 64, torch.float16, None, {"causal": True}),
    (2, 1, 1024, 8, 2, 128, torch.bfloat16, 64, {}),
    (2, 16, 700, 8, 8, 128, torch.bfloat16, 16, {"causal": True, "window_size": (256, 0)}),
]


def kv_inputs(case, seed=40):
    """q, k_cache, v_cache, cache_seqlens (each sequence its own length, the
    last full) and the block table (pages in random order) of CASE."""
    b, sq, keys, h, hk, d, dtype, page, _ = KV_CASES[case]
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(sq, keys + 1, (b,), generator=g, dtype=torch.int32)
    lengths[-1] = keys
    q = rand(b, sq, h, d, dtype=dtype, seed=seed)
    if page is None:
        kc, vc = rand(b, keys, hk, d, dtype=dtype, seed=seed + 1), rand(b, keys, hk, d, dtype=dtype, seed=seed + 2)
        table = None
    else:
        per_seq = -(-keys // page)
        pages = b * per_seq + 3
        kc, vc = rand(pages, page, hk, d, dtype=dtype, seed=seed + 1), rand(pages, page, hk, d, dtype=dtype,
                                                                             seed=seed + 2)
        table = torch.randperm(pages, generator=g)[:b * per_seq].to(torch.int32).view(b, per_seq).cuda()
    return q, kc, vc, lengths.cuda(), table


@pytest.mark.parametrize("case", range(len(KV_CASES)))
def test_kvcache_identical(ext, case):
    options = KV_CASES[case][-1]
    q, kc, vc, lengths, table = kv_inputs(case)
    fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=lengths, block_table=table, **options)
    assert ext.fwd_kvcache(q, kc, vc, lengths, table, *_options(options, q.shape[3])), "declined a call it should take"
    (o1, l1), (o2, l2) = both(ext, lambda: fatune.attention_with_kvcache(
        q, kc, vc, cache_seqlens=lengths, block_table=table, return_softmax_lse=True, **options))
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


def test_kvcache_declines(ext):
    """A q that needs a gradient, lengths of another type or count, an int64
    block table: declined; the Python path's answer or error follows."""
    _ops.native = ext
    q, kc, vc, lengths, table = kv_inputs(2)
    opts = _options({}, q.shape[3])
    assert ext.fwd_kvcache(q.clone().requires_grad_(), kc, vc, lengths, table, *opts) == []
    assert ext.fwd_kvcache(q, kc, vc, lengths.long(), table, *opts) == []
    assert ext.fwd_kvcache(q, kc, vc, lengths[:1], table, *opts) == []
    assert ext.fwd_kvcache(q, kc, vc, lengths, table.long(), *opts) == []
    with pytest.raises(ValueError, match="cache_seqlens"):
        fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=lengths[:1], block_table=table)
    with pytest.raises(ValueError, match="block_table"):
        fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=lengths, block_table=table.long())


def test_kvcache_cuda_graph(ext):
    """A decoding step over a paged cache captured with the native path,
    replayed after its lengths, table and q changed, against an eager call."""
    _ops.native = ext
    q, kc, vc, lengths, table = kv_inputs(2, seed=50)

    def step():
        return fatune.attention_with_kvcache(q, kc, vc, cache_seqlens=lengths, block_table=table)

    graph, captured = capture(step)
    with torch.no_grad():
        q.copy_(rand(*q.shape, seed=51))
        lengths.sub_(7)
        table.copy_(table.flip(0))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, step())
