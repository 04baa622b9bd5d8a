#!/usr/bin/env python3
# s39: one decoding step a layout, for ncu: bf16 d128, batch 1, 32/8 heads,
# 131072 keys, one query, causal bottom-right; the contiguous cache, pages of
# 16 and of 256 in random order (three calls each), then SDPA's cuDNN and
# FlashAttention-2 backends on the contiguous keys (two calls each).
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import fatune

b, h, hk, sk, d = 1, 32, 8, 131072, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(b, 1, h, d, device="cuda", generator=g).bfloat16()
k = torch.randn(b, sk, hk, d, device="cuda", generator=g).bfloat16()
v = torch.randn_like(k)
for _ in range(3):
    fatune.attention_with_kvcache(q, k, v, causal=True)
print("contiguous", fatune.last_choice().variant, flush=True)
for page in (16, 256):
    per = sk // page
    table = torch.randperm(b * per, device="cuda").int().view(b, per)
    pk = torch.empty(b * per, page, hk, d, dtype=k.dtype, device="cuda")
    pv = torch.empty_like(pk)
    pk[table.flatten().long()] = k.reshape(b * per, page, hk, d)
    pv[table.flatten().long()] = v.reshape(b * per, page, hk, d)
    for _ in range(3):
        fatune.attention_with_kvcache(q, pk, pv, block_table=table, causal=True)
    print("paged", page, fatune.last_choice().variant, flush=True)
qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
    with sdpa_kernel(be):
        for _ in range(2):
            F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
torch.cuda.synchronize()
print("done")
