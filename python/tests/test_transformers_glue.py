# SPDX-License-Identifier: MIT
"""fatune.transformers' glue on the CPU: the registration under "fatune"
(AutoModelForCausalLM.from_config(cfg, attn_implementation="fatune")), and
what the glue hands fatune, checked by putting a float64 CPU reference of
fatune.attention and fatune.attention_varlen (FlashAttention's semantics:
bottom-right causal, window_size (left, right), softcap, grouped-query K/V,
packed sequences) in their place: small random-init Llama, Mistral (sliding
window) and Gemma 2 (soft-cap, sliding and global layers) models in float64
give the logits of transformers' own eager attention, unpadded, on a padded
batch (left and right padding: the varlen path) and for a decoding step
from a cache, to 1e-6 (eager's softmax is float32). The GPU test (test_gpu_transformers.py) runs the real
kernels. Needs PyTorch and transformers: skipped without.

    python3 -m pytest python/tests/test_transformers_glue.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import fatune  # noqa: E402
import fatune.transformers  # noqa: E402,F401  (registers "fatune")

# Float64 models, but transformers' eager attention takes its softmax in
# float32 (about 1e-8 of difference here); a wrong mask, window or cap
# differs by 1e-2 and more.
TOLERANCE = 1e-6
calls = []        # (function, options) of each call the glue made


def reference(q, k, v, causal, softmax_scale, window_size, softcap):
    """softmax(scale · q·kᵀ, soft-capped, masked) · v for one dense batch
    (batch, seqlen, heads, head_dim), FlashAttention's conventions."""
    sq, sk, h, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    rep = h // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * (softmax_scale or d ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    left, right = window_size
    if causal:
        right = 0
    pos = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    seen = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        seen &= j >= pos - left
    if right >= 0:
        seen &= j <= pos + right
    p = torch.softmax(s.masked_fill(~seen, float("-inf")), -1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def fake_attention(q, k, v, *, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                   dropout_p=0.0):
    assert dropout_p == 0.0
    calls.append(("attention", dict(causal=causal, window_size=window_size, softcap=softcap)))
    return reference(q, k, v, causal, softmax_scale, window_size, softcap)


def fake_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, causal=False, softmax_scale=None, window_size=(-1, -1),
                softcap=0.0, dropout_p=0.0):
    assert dropout_p == 0.0 and cu_q.dtype == cu_k.dtype == torch.int32
    calls.append(("varlen", dict(causal=causal, window_size=window_size, softcap=softcap)))
    cq, ck = cu_q.tolist(), cu_k.tolist()
    assert max(b - a for a, b in zip(cq, cq[1:])) <= max_q and max(b - a for a, b in zip(ck, ck[1:])) <= max_k
    outs = [reference(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]], v[None, ck[i]:ck[i + 1]], causal,
                      softmax_scale, window_size, softcap)[0] for i in range(len(cq) - 1)]
    return torch.cat(outs, 0)


@pytest.fixture(autouse=True)
def cpu_fatune(monkeypatch):
    monkeypatch.setattr(fatune, "attention", fake_attention)
    monkeypatch.setattr(fatune, "attention_varlen", fake_varlen)
    calls.clear()


def configs():
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=128)
    return {
        "llama": transformers.LlamaConfig(**common),
        "mistral": transformers.MistralConfig(**common, sliding_window=8),
        "gemma2": transformers.Gemma2Config(**common, sliding_window=8, attn_logit_softcapping=5.0,
                                            final_logit_softcapping=None, query_pre_attn_scalar=16,
                                            layer_types=["sliding_attention", "full_attention"]),
    }


def models(name):
    """(fatune model, eager model), the same float64 weights."""
    torch.manual_seed(0)  # a config each: a model's attention is its config's
    ours = transformers.AutoModelForCausalLM.from_config(configs()[name], attn_implementation="fatune")
    eager = transformers.AutoModelForCausalLM.from_config(configs()[name], attn_implementation="eager")
    ours, eager = ours.double().eval(), eager.double().eval()
    eager.load_state_dict(ours.state_dict())
    return ours, eager


SEQ = 24  # three windows of 8
# Row 1 left-padded by 5, row 2 right-padded by 7: both ways a batch is padded.
MASK = torch.ones(3, SEQ, dtype=torch.long)
MASK[1, :5] = 0
MASK[2, -7:] = 0


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2"])
def test_registered(name):
    ours, _ = models(name)
    assert ours.config._attn_implementation == "fatune"


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2"])
def test_unpadded(name):
    ours, eager = models(name)
    ids = torch.randint(0, 97, (2, SEQ))
    with torch.no_grad():
        got, want = ours(ids).logits, eager(ids).logits
    assert (got - want).abs().max().item() < TOLERANCE
    assert {c[0] for c in calls} == {"attention"}
    assert all(c[1]["causal"] for c in calls)
    windows = {c[1]["window_size"] for c in calls}
    softcaps = {c[1]["softcap"] for c in calls}
    assert windows == ({(-1, -1), (7, 0)} if name == "gemma2" else {(7, 0)} if name == "mistral" else {(-1, -1)})
    assert softcaps == ({5.0} if name == "gemma2" else {0.0})


def alone(model, ids, mask, nxt=None):
    """The logits of each row of a padded batch run by itself, its padding
    cut: transformers' eager attention gives NaN for a left-padded row in
    float64 (its fully masked queries), and the rotary embedding makes a
    sequence's logits those of its tokens whatever positions it starts at.
    With NXT, the logits of one more token each from the row's cache."""
    rows = []
    for b in range(ids.shape[0]):
        row = ids[b:b + 1, mask[b].bool()]
        with torch.no_grad():
            out = model(row, use_cache=nxt is not None)
            rows.append(out.logits[0] if nxt is None else
                        model(nxt[b:b + 1], past_key_values=out.past_key_values).logits[0])
    return rows


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2"])
def test_padded(name):
    """A padded batch goes through attention_varlen; the valid positions'
    logits are those of each sequence alone under eager attention."""
    ours, eager = models(name)
    ids = torch.randint(0, 97, (3, SEQ))
    with torch.no_grad():
        got = ours(ids, attention_mask=MASK).logits
    assert {c[0] for c in calls} == {"varlen"}
    for b, want in enumerate(alone(eager, ids, MASK)):
        assert (got[b, MASK[b].bool()] - want).abs().max().item() < TOLERANCE, f"row {b}"


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2"])
@pytest.mark.parametrize("padded", [False, True])
def test_decoding_step(name, padded):
    """Prefill, then one token from the cache (one query against the whole
    cache, left-padded or not, as generation pads): the next token's logits
    are those of each sequence alone under eager attention."""
    ours, eager = models(name)
    ids = torch.randint(0, 97, (3, SEQ))
    mask = torch.ones_like(MASK)
    if padded:
        mask[1, :5] = 0
        mask[2, :3] = 0
    nxt = torch.randint(0, 97, (3, 1))
    with torch.no_grad():
        out = ours(ids, attention_mask=mask, use_cache=True)
        step_mask = torch.cat([mask, torch.ones(3, 1, dtype=mask.dtype)], 1)
        calls.clear()
        got = ours(nxt, attention_mask=step_mask, past_key_values=out.past_key_values).logits
    # A sliding layer's cache keeps the last window's keys, unpadded here
    # (dense; every Mistral layer slides), the global layers' are packed.
    kinds = {c[0] for c in calls}
    padded_kinds = {"llama": {"varlen"}, "mistral": {"attention"}, "gemma2": {"attention", "varlen"}}[name]
    assert kinds == (padded_kinds if padded else {"attention"}), kinds
    for b, want in enumerate(alone(eager, ids, mask, nxt)):
        assert (got[b] - want).abs().max().item() < TOLERANCE, f"row {b}"


def test_refusals():
    """What the glue cannot honour, refused by name."""
    q = torch.zeros(1, 2, 4, 8, dtype=torch.float64)
    module = torch.nn.Module()
    attend = fatune.transformers.attention
    with pytest.raises(ValueError, match="output_attentions=True: fatune never forms the attention weights"):
        attend(module, q, q, q, None, output_attentions=True)
    with pytest.raises(ValueError, match="a position_bias tensor"):
        attend(module, q, q, q, None, position_bias=q)
    with pytest.raises(ValueError, match=r"a 4D attention mask \(1, 1, 4, 4\): fatune takes transformers' 2D"):
        attend(module, q, q, q, torch.ones(1, 1, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"padding mask \(1, 3\); expected \(batch, seqlen_k\) = \(1, 4\)"):
        attend(module, q, q, q, torch.ones(1, 3, dtype=torch.bool))
