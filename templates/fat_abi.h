/* The parameter block every fatune forward kernel takes by value.
 * Written in the common subset of C11 and CUDA C++ (plain types only): the
 * host includes it from C, the generator inlines it into every kernel source,
 * so the two sides can never disagree on the layout.
 *
 * Tensors are in the (batch, seqlen, heads, head_dim) layout of FlashAttention
 * and PyTorch's SDPA, addressed through element strides; the last dimension
 * must be contiguous. */
#ifndef FAT_ABI_H
#define FAT_ABI_H

typedef struct fat_fwd_params {
  const void *q;  /* (batch, seqlen_q, heads, head_dim) */
  const void *k;  /* (batch, seqlen_k, heads_k, head_dim) */
  const void *v;  /* (batch, seqlen_k, heads_k, head_dim) */
  void *o;        /* (batch, seqlen_q, heads, head_dim), same dtype as q */
  float *lse;     /* (batch, heads, seqlen_q), natural-log log-sum-exp of the
                     scaled scores; -inf for a row that sees no key */
  long long q_batch_stride, q_row_stride, q_head_stride;  /* in elements */
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  int batch;
  int heads;      /* query heads */
  int heads_k;    /* key/value heads; divides heads (1 per group of heads/heads_k) */
  int seqlen_q;
  int seqlen_k;
  float softmax_scale;  /* multiplies Q·Kᵀ before the softmax */
  float scale_log2;     /* softmax_scale · log2(e): the kernels work in exp2 */
  int reserved;         /* keeps the block a multiple of 8 bytes */
} fat_fwd_params;

#endif
