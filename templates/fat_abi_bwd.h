/* The parameter block every fatune backward kernel takes by value, and the
 * launch constants the host and the kernels share. Like fat_abi.h it is
 * written in the common subset of C11 and CUDA C++: the host includes it
 * from C (after fat_abi.h), the generator inlines it into every backward
 * source, so the two sides can never disagree on the layout.
 *
 * The forward's block is embedded whole: Q, K, V, O and lse are the
 * forward's tensors (O and lse as the forward kernel wrote them), and the
 * gradients use the same (batch, seqlen, heads, head_dim) layout through
 * their own element strides. */
#ifndef FAT_ABI_BWD_H
#define FAT_ABI_BWD_H
#ifndef FAT_ABI_H
#error "include fat_abi.h before fat_abi_bwd.h"
#endif

/* Threads of the per-row kernels (preprocess and dq conversion): one warp
 * per query row, so a block covers FAT_BWD_ROW_THREADS / 32 rows. */
#define FAT_BWD_ROW_THREADS 128

typedef struct fat_bwd_params {
  fat_fwd_params fwd;  /* q, k, v, o (read), lse (read), shapes, scales */
  const void *dout;    /* dO: (batch, seqlen_q, heads, head_dim), the dtype of q */
  void *dq;            /* (batch, seqlen_q, heads, head_dim) */
  void *dk;            /* (batch, seqlen_k, heads_k, head_dim) */
  void *dv;            /* (batch, seqlen_k, heads_k, head_dim) */
  float *delta;        /* D = rowsum(dO ∘ O): (batch, heads, seqlen_q), written by preprocess */
  float *dq_accum;     /* fp32 (batch, heads, seqlen_q, head_dim): dQ summed with atomics;
                          zeroed by preprocess; unused (may be 0) when dQ has its own pass */
  long long do_batch_stride, do_row_stride, do_head_stride;  /* in elements */
  long long dq_batch_stride, dq_row_stride, dq_head_stride;
  long long dk_batch_stride, dk_row_stride, dk_head_stride;
  long long dv_batch_stride, dv_row_stride, dv_head_stride;
} fat_bwd_params;

#endif
