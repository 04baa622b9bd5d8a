# SPDX-License-Identifier: MIT
"""fatune as a Hugging Face transformers attention implementation.

    import fatune.transformers            # registers "fatune"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fatune")

Importing this module registers attention() under the name "fatune" in
transformers' AttentionInterface, and FlashAttention's mask function under
the same name in its AttentionMaskInterface, so that the model hands the
attention a 2D padding mask (batch, keys), or None when nothing is padded,
as it does for flash_attention_2. Then:

- no padding: fatune.attention on the model's own tensors (its (batch,
  heads, seqlen, head_dim) viewed as (batch, seqlen, heads, head_dim), no
  copy), causal as the module says, bottom-right aligned (a decoding step's
  queries see the whole cache);
- a padded batch: the valid tokens packed and fatune.attention_varlen run on
  them (differentiable: its backward is libfatune's packed one, on the
  mma80f family), the output scattered back with zeros at the padding;
- grouped-query and multi-query K/V as they are (the kernels read K/V heads
  directly, no repeat);
- a sliding window (Mistral, Gemma 2's local layers) of W tokens as
  FlashAttention's window_size (W - 1, W - 1), with causal bounding the
  right side, where the keys outnumber W (transformers' convention for
  flash_attention_2);
- a soft-cap (Gemma 2's attn_logit_softcapping) as softcap (its backward on
  the mma80f family, as the packed one's);
- the module's scaling as softmax_scale; dropout must be 0 (an attention
  dropout in training is refused by fatune.attention, naming the value).

What transformers passes that fatune cannot honour (attention weights,
position biases, a 4D mask of its own) is refused with a ValueError naming
it, never ignored.
"""
import torch
import torch.nn.functional as F

import fatune

NAME = "fatune"


def _window(sliding_window, causal, keys):
    if sliding_window is None or keys <= sliding_window:
        return (-1, -1)
    return (sliding_window - 1, 0 if causal else sliding_window - 1)


def _offsets(lengths):
    """int32 cu_seqlens of per-sequence LENGTHS (a device tensor), on the device."""
    return F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
              softcap=None, is_causal=None, **kwargs):
    """transformers' attention-function interface: query (batch, heads,
    seqlen_q, head_dim), key and value (batch, heads_k, seqlen_k, head_dim),
    attention_mask None or the 2D (batch, seqlen_k) padding mask of
    transformers' flash_attention_mask; returns (out (batch, seqlen_q,
    heads, head_dim), None)."""
    if kwargs.get("output_attentions"):
        raise ValueError("fatune attention: output_attentions=True: fatune never forms the attention "
                         "weights; use attn_implementation='eager' to see them")
    if kwargs.get("position_bias") is not None:
        raise ValueError("fatune attention: a position_bias tensor: fatune adds no bias to the scores")
    if kwargs.get("s_aux") is not None:
        raise ValueError("fatune attention: attention sinks (s_aux): fatune has none")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    options = dict(causal=causal, softmax_scale=scaling, softcap=float(softcap or 0.0), dropout_p=dropout,
                   window_size=_window(sliding_window, causal, key.shape[2]))
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (batch, seqlen, heads, head_dim) views
    if attention_mask is None:
        return fatune.attention(q, k, v, **options), None
    if attention_mask.dim() != 2:
        raise ValueError(f"fatune attention: a {attention_mask.dim()}D attention mask "
                         f"{tuple(attention_mask.shape)}: fatune takes transformers' 2D padding mask "
                         "(AttentionMaskInterface 'fatune', which importing fatune.transformers registers)")
    return _padded(q, k, v, attention_mask.bool(), options), None


def _padded(q, k, v, mask, options):
    """attention of a padded batch through attention_varlen: MASK (batch,
    seqlen_k) marks the valid keys; the queries are the last seqlen_q
    columns' (all of them for seqlen_q == seqlen_k; one query a sequence,
    always valid, when decoding)."""
    b, sq, h, d = q.shape
    sk = k.shape[1]
    if mask.shape != (b, sk):
        raise ValueError(f"fatune attention: padding mask {tuple(mask.shape)}; expected (batch, seqlen_k) = "
                         f"{(b, sk)}")
    keys = mask.flatten().nonzero().squeeze(1)  # a host synchronisation, as FlashAttention's unpadding
    k_packed = k.reshape(b * sk, *k.shape[2:]).index_select(0, keys)
    v_packed = v.reshape(b * sk, *v.shape[2:]).index_select(0, keys)
    cu_k = _offsets(mask.sum(1, dtype=torch.int32))
    if sq == 1:
        queries = None
        q_packed = q.reshape(b, h, d)
        cu_q = torch.arange(b + 1, dtype=torch.int32, device=q.device)
    else:
        q_mask = mask if sq == sk else mask[:, -sq:]
        queries = keys if sq == sk else q_mask.flatten().nonzero().squeeze(1)
        q_packed = q.reshape(b * sq, h, d).index_select(0, queries)
        cu_q = _offsets(q_mask.sum(1, dtype=torch.int32))
    # The padded lengths bound the longest sequence: no .max().item() needed.
    out = fatune.attention_varlen(q_packed, k_packed, v_packed, cu_q, cu_k, sq, sk, **options)
    if queries is None:
        return out.view(b, 1, h, d)
    full = out.new_zeros(b * sq, h, d)
    return full.index_copy(0, queries, out).view(b, sq, h, d)


def register(name=NAME):
    """Registers attention() (and FlashAttention's padding-mask function) in
    transformers under NAME; done once on import for "fatune"."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])


register()
