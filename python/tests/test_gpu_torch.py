# SPDX-License-Identifier: MIT
"""fatune inside PyTorch programs, on a GPU: torch.library.opcheck of the
operators (schema, fake against real outputs, autograd registration,
AOTAutograd); torch._dynamo.explain on CUDA tensors, 0 graph breaks for the
forward, the backward and the packed forward; a compiled training step
(torch.compile fullgraph=True, and mode="reduce-overhead", whose CUDA graphs
replay fatune) against eager; CUDA graphs captured by hand and replayed on new
inputs against eager calls on the same inputs: the forward, forward and
backward (deterministic: bit-identical), the decoding problem that runs the
split-KV path with its workspace, and a packed batch whose offsets and used
lengths change between replays (they are read on the device only).
Needs PyTorch and a CUDA GPU: each test skips without.

    FATUNE_LIB=build/runtime/libfatune.so python3 -m pytest -v python/tests/test_gpu_torch.py
"""
import ctypes
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # graphs
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
import fatune  # noqa: E402
from fatune import _runtime  # noqa: E402
from graphs import capture  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
BF16 = torch.bfloat16


def rand(*shape, dtype=BF16, seed=None, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed if seed is not None else 1234)
    return (torch.randn(*shape, device="cuda", generator=g) * scale).to(dtype)


def rel_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def dense(seed=0, b=2, sq=333, sk=333, h=8, hk=2, d=128):
    return rand(b, sq, h, d, seed=seed), rand(b, sk, hk, d, seed=seed + 1), rand(b, sk, hk, d, seed=seed + 2)


class quiet(warnings.catch_warnings):
    """Warnings off inside (Dynamo's and inductor's notes about this machine)."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore")


# ---- the operators ---------------------------------------------------------------


def test_opcheck_forward_backward():
    """opcheck of fatune::fwd through its autograd formula (fatune::bwd in
    the backward) and of fatune::bwd alone."""
    q, k, v = (t.requires_grad_() for t in dense())
    for options in ((0, -1, -1, 0.0, 0.0, False), (1, -1, -1, 0.0, 0.0, True), (2, 64, 0, 0.1, 0.0, False)):
        torch.library.opcheck(torch.ops.fatune.fwd.default, (q, k, v, *options))
    o, lse = fatune.attention_with_lse(q.detach(), k.detach(), v.detach(), causal=True)
    torch.library.opcheck(torch.ops.fatune.bwd.default,
                          (rand(*q.shape, seed=9), q.detach(), k.detach(), v.detach(), o, lse, 1, -1, -1, 0.0, 0.0,
                           False))


def test_opcheck_varlen():
    """opcheck of fatune::fwd_varlen through its autograd formula
    (fatune::bwd_varlen in the backward) and of fatune::bwd_varlen alone."""
    lens = [1, 77, 300, 128]
    cu = torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32, device="cuda")
    q, k, v = rand(sum(lens), 8, 128, seed=1), rand(sum(lens), 2, 128, seed=2), rand(sum(lens), 2, 128, seed=3)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    used = torch.tensor([1, 50, 300, 100], dtype=torch.int32, device="cuda")
    for seqused in (None, used):
        torch.library.opcheck(torch.ops.fatune.fwd_varlen.default,
                              (q, k, v, cu, cu, seqused, 300, 300, 1, -1, -1, 0.0, 0.0, False))
    o, lse = fatune.attention_varlen_with_lse(q.detach(), k.detach(), v.detach(), cu, cu, 300, 300, causal=True,
                                              seqused_k=used, softcap=5.0)
    torch.library.opcheck(torch.ops.fatune.bwd_varlen.default,
                          (rand(*q.shape, seed=9), q.detach(), k.detach(), v.detach(), o, lse, cu, cu, used, 300, 300,
                           1, -1, -1, 0.0, 5.0, False))


def test_no_graph_breaks_on_cuda():
    """torch._dynamo.explain with real CUDA tensors: one graph each, no break."""
    q, k, v = dense()
    o, lse = fatune.attention_with_lse(q, k, v, causal=True)
    cu = torch.tensor([0, 100, 333], dtype=torch.int32, device="cuda")
    calls = {
        "forward": (lambda q, k, v: fatune.attention(q, k, v, causal=True, window_size=(64, 0), softcap=20.0),
                    (q, k, v)),
        "backward": (lambda d, q, k, v, o, lse: fatune.attention_bwd(d, q, k, v, o, lse, causal=True),
                     (o, q, k, v, o, lse)),
        "varlen": (lambda q, k, v, cu: fatune.attention_varlen(q, k, v, cu, cu, 233, 233, causal=True),
                   (q[0], k[0], v[0], cu)),
    }
    for name, (fn, args) in calls.items():
        torch._dynamo.reset()
        with quiet():
            ex = torch._dynamo.explain(fn)(*args)
        assert (ex.graph_break_count, ex.graph_count) == (0, 1), (name, ex.break_reasons)


class Block(torch.nn.Module):
    """One attention block: projections, fatune.attention (GQA, causal), output."""

    def __init__(self, width=512, heads=8, heads_k=2, d=64):
        super().__init__()
        self.heads, self.heads_k, self.d = heads, heads_k, d
        self.q = torch.nn.Linear(width, heads * d, bias=False)
        self.kv = torch.nn.Linear(width, 2 * heads_k * d, bias=False)
        self.o = torch.nn.Linear(heads * d, width, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.d)
        k, v = self.kv(x).view(b, s, 2, self.heads_k, self.d).unbind(2)
        return self.o(fatune.attention(q, k, v, causal=True).reshape(b, s, -1))


def test_compiled_training_step_matches_eager():
    """torch.compile(fullgraph=True) of a training step's loss and gradients
    against eager on the same weights and input."""
    torch.manual_seed(0)
    eager = Block().cuda().to(BF16)
    compiled_model = Block().cuda().to(BF16)
    compiled_model.load_state_dict(eager.state_dict())
    step = torch.compile(lambda m, x: m(x).float().square().mean(), fullgraph=True)
    x = rand(2, 777, 512, seed=5)
    for model, fn in ((eager, lambda m, x: m(x).float().square().mean()), (compiled_model, step)):
        with quiet():
            fn(model, x).backward()
    for (name, pe), pc in zip(eager.named_parameters(), compiled_model.parameters()):
        err = rel_l2(pc.grad, pe.grad)
        assert err < 2e-2, f"{name}: compiled gradient differs from eager by {err:.3g}"
    with torch.no_grad():
        err = rel_l2(torch.compile(compiled_model, fullgraph=True)(x), eager(x))
    assert err < 2e-2, f"compiled forward differs from eager by {err:.3g}"


def test_reduce_overhead_matches_eager():
    """mode="reduce-overhead" (inductor's CUDA graphs) replays fatune's forward
    on new inputs as eager computes it."""
    torch.manual_seed(0)
    model = Block().cuda().to(BF16).eval()
    fast = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad(), quiet():
        for seed in range(4):  # the first calls record, the later ones replay
            x = rand(2, 512, 512, seed=100 + seed)
            got, want = fast(x).clone(), model(x)
            assert rel_l2(got, want) < 2e-2, f"call {seed}: {rel_l2(got, want):.3g}"


# ---- CUDA graphs by hand -----------------------------------------------------------


def refill(static, fresh):
    for s, f in zip(static, fresh):
        s.copy_(f)


def test_graph_forward():
    """The forward captured once, replayed on three new inputs: bit-identical
    to eager calls on them (one variant, the same inputs)."""
    static = dense(seed=10)
    graph, out = capture(lambda: fatune.attention_with_lse(*static, causal=True))
    for seed in (20, 30, 40):
        fresh = dense(seed=seed)
        refill(static, fresh)
        graph.replay()
        o, lse = fatune.attention_with_lse(*fresh, causal=True)
        assert torch.equal(out[0], o) and torch.equal(out[1], lse), f"replay on inputs {seed} differs from eager"


@pytest.mark.parametrize("deterministic", [True, False])
def test_graph_backward(deterministic):
    """Forward and backward (autograd.grad) captured together and replayed on
    new q, k, v and dout; deterministic: the gradients bit-identical to eager,
    else within bf16 rounding of it (atomic dQ sums in another order)."""
    static = [t.requires_grad_() for t in dense(seed=11)]
    dout = rand(*static[0].shape, seed=12)

    def step():
        o = fatune.attention(*static, causal=True, deterministic=deterministic)
        return torch.autograd.grad(o, static, dout)

    graph, grads = capture(step)
    for seed in (21, 31):
        fresh = dense(seed=seed)
        with torch.no_grad():
            refill(static, fresh)
            dout.copy_(rand(*dout.shape, seed=seed + 5))
        graph.replay()
        leaves = [t.clone().requires_grad_() for t in fresh]
        want = torch.autograd.grad(fatune.attention(*leaves, causal=True, deterministic=deterministic), leaves,
                                   dout)
        for name, g, w in zip(("dq", "dk", "dv"), grads, want):
            if deterministic:
                assert torch.equal(g, w), f"{name}: replay differs from eager"
            else:
                assert rel_l2(g, w) < 1e-2, f"{name}: replay differs from eager by {rel_l2(g, w):.3g}"


def fwd_workspace_bytes(q, k, v, mask):
    """What fat_attention_fwd_workspace asks for this problem: > 0 where the
    served variant splits the keys (or draws its query blocks from a counter)."""
    lib, ctx = _runtime.load(), _runtime.context(_runtime.device_index(q))
    o, lse = _runtime.fwd_outputs(q)
    a = _runtime.fwd_args(q, k, v, o, lse, mask, -1, -1, 0.0, 0.0)
    need = ctypes.c_size_t()
    assert lib.fat_attention_fwd_workspace(ctx, ctypes.byref(a), ctypes.byref(need)) == _runtime.FAT_OK
    return need.value


def test_graph_decoding():
    """The decoding problem (batch 8, one query of 16 heads over 4 K/V heads,
    65536 keys: the shipped split-KV bucket), whose launch takes a workspace
    from the caching allocator and merges the splits with a second kernel:
    captured and replayed on new queries and a new cache."""
    b, h, hk, sk, d = 8, 16, 4, 65536, 128
    static = [rand(b, 1, h, d, seed=50), rand(b, sk, hk, d, seed=51), rand(b, sk, hk, d, seed=52)]
    assert fwd_workspace_bytes(*static, 1) > 0, (
        f"the decoding problem is served by {fatune.select(*static, causal=True)}, which needs no workspace: "
        "this test would not cover the split-KV path")
    graph, out = capture(lambda: fatune.attention(*static, causal=True))
    for seed in (60, 70):
        fresh = [rand(b, 1, h, d, seed=seed), rand(b, sk, hk, d, seed=seed + 1), rand(b, sk, hk, d, seed=seed + 2)]
        refill(static, fresh)
        graph.replay()
        want = fatune.attention(*fresh, causal=True)
        assert torch.equal(out, want), f"decoding replay on inputs {seed} differs from eager"


def test_graph_varlen_offsets_change():
    """A packed decoding batch captured once; between replays the offsets
    (cu_seqlens_k) and the used lengths (seqused_k) change on the device, as
    a serving loop's would: each replay equals eager with the new values,
    which only a launch that never read them on the host can do."""
    batch, cache, h, hk, d = 4, 4096, 16, 4, 128
    q = rand(batch, h, d, seed=80)
    k, v = rand(batch * cache, hk, d, seed=81), rand(batch * cache, hk, d, seed=82)
    cu_q = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    cu_k = torch.arange(0, batch * cache + 1, cache, dtype=torch.int32, device="cuda")
    used = torch.tensor([1, 100, 2000, 4096], dtype=torch.int32, device="cuda")

    def call():
        return fatune.attention_varlen(q, k, v, cu_q, cu_k, 1, cache, seqused_k=used, causal=True)

    graph, out = capture(call)
    for new_used in ([4096, 1, 17, 3000], [513, 513, 1, 2]):
        used.copy_(torch.tensor(new_used, dtype=torch.int32))
        graph.replay()
        want = call()
        assert torch.equal(out, want), f"replay with seqused_k {new_used} differs from eager"
    # The offsets too: the same keys as two sequences' caches moved by one row.
    cu_k.copy_(cu_k + torch.tensor([0, 1, 1, 1, 0], dtype=torch.int32, device="cuda"))
    graph.replay()
    assert torch.equal(out, call()), "replay with new cu_seqlens_k differs from eager"
