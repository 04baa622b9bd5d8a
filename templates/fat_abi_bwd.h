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

/* Threads of the per-row kernels (preprocess and dq conversion), and the
 * lanes that share one query row of the problem's head dim: 16 bytes of O
 * and of dO a lane, so a block covers FAT_BWD_ROW_THREADS /
 * FAT_BWD_ROW_LANES(head_dim) rows (the host's grid.x divides seqlen_q by
 * that). A power of two, at most a warp. With a warp a row, at head dim 64
 * three quarters of the lanes idled and both kernels were bound by their
 * number of blocks (110 and 84 µs against FlashAttention-2's 73 and 64,
 * 16384 rows x 32 heads). */
#define FAT_BWD_ROW_THREADS 128
#define FAT_BWD_ROW_LANES(head_dim) ((head_dim) <= 64 ? 8 : (head_dim) <= 128 ? 16 : 32)
/* Floats a row of the dQ accumulator is given: the head dim rounded up to
 * whole 64-column slabs, the widest row any family's template uses (ws90
 * runs head dim 96 on its 128-column template and adds whole 128-float
 * rows by bulk reduction). A variant uses its own pitch within it: the
 * problem's head dim, or its template's (bwd_common.cuh, dq_pitch). */
#define FAT_BWD_ACCUM_WIDTH(head_dim) (((head_dim) + 63) / 64 * 64)
/* Changes when the per-row kernels' launch or the workspace does: the
 * runtime launches only stored backward variants whose source carries
 * today's line. 1: rows of FAT_BWD_ROW_LANES lanes (before it there was no
 * line: a warp a row). 2: the dQ accumulator's rows are
 * FAT_BWD_ACCUM_WIDTH(head_dim) floats (a variant built for 1 may use them
 * as they were; one built for 2 needs them). */
#define FAT_ABI_BWD_VERSION 2

typedef struct fat_bwd_params {
  fat_fwd_params fwd;  /* q, k, v, o (read), lse (read), shapes, scales */
  const void *dout;    /* dO: (batch, seqlen_q, heads, head_dim), the dtype of q */
  void *dq;            /* (batch, seqlen_q, heads, head_dim) */
  void *dk;            /* (batch, seqlen_k, heads_k, head_dim) */
  void *dv;            /* (batch, seqlen_k, heads_k, head_dim) */
  float *delta;        /* D = rowsum(dO ∘ O): (batch, heads, seqlen_q), written by preprocess */
  float *dq_accum;     /* fp32 (batch, heads, seqlen_q) rows of FAT_BWD_ACCUM_WIDTH(head_dim):
                          dQ summed with atomics; zeroed by preprocess; unused (may be 0)
                          when dQ has its own pass */
  long long do_batch_stride, do_row_stride, do_head_stride;  /* in elements */
  long long dq_batch_stride, dq_row_stride, dq_head_stride;
  long long dk_batch_stride, dk_row_stride, dk_head_stride;
  long long dv_batch_stride, dv_row_stride, dv_head_stride;
} fat_bwd_params;

#endif
