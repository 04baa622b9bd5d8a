/* The parameter block every fatune forward kernel takes by value.
 * Written in the common subset of C11 and CUDA C++ (plain types only): the
 * host includes it from C, the generator inlines it into every kernel source,
 * so the two sides can never disagree on the layout.
 *
 * Tensors are in the (batch, seqlen, heads, head_dim) layout of FlashAttention
 * and PyTorch's SDPA, addressed through element strides; the last dimension
 * must be contiguous.
 *
 * Variable-length batches (cu_seqlens_q set): sequence b's queries are rows
 * cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q and o, whose batch strides are
 * then ignored, seqlen_q is the longest sequence (it sizes the grid) and lse
 * is (heads, total_q) with total_q = cu_seqlens_q[batch]. cu_seqlens_k does
 * the same for k and v (seqlen_k the longest). seqused_k, when set, limits
 * sequence b to its first seqused_k[b] keys (a padded K/V cache). Bottom-right
 * alignment uses each sequence's own lengths.
 *
 * Masks: a query at position i of a sequence with sq queries and sk keys sits
 * at key position i + sk - sq. Causal: it sees keys up to that position.
 * Local (sliding window): keys from position - window_left to position +
 * window_right, either bound dropped when it is -1; causal is local (-1, 0).
 * Which of the three a kernel applies is fixed when it is generated. */
#ifndef FAT_ABI_H
#define FAT_ABI_H

/* Bumped with every change to the layout below. Every generated source
 * carries this line (the generator inlines this file), and the runtime
 * launches a stored variant only if its source has the current one: a
 * kernel built against another layout would read the wrong fields. */
#define FAT_ABI_VERSION 2

/* Threads of a split-KV variant's combine kernel, fat_fwd_mma80_combine: one
 * warp per query row. */
#define FAT_FWD_COMBINE_THREADS 128

typedef struct fat_fwd_params {
  const void *q;  /* (batch, seqlen_q, heads, head_dim) */
  const void *k;  /* (batch, seqlen_k, heads_k, head_dim) */
  const void *v;  /* (batch, seqlen_k, heads_k, head_dim) */
  void *o;        /* (batch, seqlen_q, heads, head_dim), same dtype as q */
  float *lse;     /* (batch, heads, seqlen_q), natural-log log-sum-exp of the
                     scaled (and soft-capped) scores; -inf for a row that sees
                     no key */
  const int *cu_seqlens_q;  /* batch + 1 row offsets of each sequence, or 0: dense */
  const int *cu_seqlens_k;  /* batch + 1 key offsets, or 0: dense */
  const int *seqused_k;     /* batch keys used per sequence, or 0: all */
  float *o_accum;    /* split-KV kernels: fp32 partial outputs, (splits, batch, heads,
                        seqlen_q, template head dim); 0 for the others */
  float *lse_accum;  /* ... and their log-sum-exps, (splits, batch, heads, seqlen_q) */
  long long q_batch_stride, q_row_stride, q_head_stride;  /* in elements */
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  int batch;
  int heads;      /* query heads */
  int heads_k;    /* key/value heads; divides heads (1 per group of heads/heads_k) */
  int seqlen_q;
  int seqlen_k;
  int head_dim;   /* the problem's: a multiple of 8, at most the template's; the
                     columns past it are read as zeros and never written */
  int window_left, window_right;  /* local mask bounds, -1: unbounded */
  float softmax_scale;  /* multiplies Q·Kᵀ before the softmax */
  float scale_log2;     /* softmax_scale · log2(e): the kernels work in exp2 */
  /* Soft-cap (Gemma 2): score = cap · tanh(Q·Kᵀ · softmax_scale / cap). The
   * kernels keep working on "raw" scores, so they store
   * softcap_in = softmax_scale / cap and softcap_out = cap / softmax_scale:
   * raw' = softcap_out · tanh(raw · softcap_in). 0, 0: no soft-cap. */
  float softcap_in, softcap_out;
} fat_fwd_params;

#endif
