/* SPDX-License-Identifier: MIT */
/* What one forward job of the tuning worker is made of: the shapes a variant
 * is checked on, the launch description of a compiled variant, and how it is
 * timed. Shared by the parent's API (worker.h), the wire format
 * (worker_wire.h) and the GPU side (gpu_run.h). */
#ifndef FAT_FWD_JOB_H
#define FAT_FWD_JOB_H
#include <stddef.h>
#include <stdint.h>
#include "types.h"

/* One shape a variant is checked on; dtype and mask are the variant's own.
 * The fields after seqlen_k default to the plain problem when zero. */
typedef struct fat_check_shape {
  int batch, heads, heads_k, seqlen_q, seqlen_k;
  int window_left, window_right;  /* a local variant's window (-1: unbounded) */
  int head_dim;   /* the problem's, a multiple of 8 below the template's; 0: the template's */
  float softcap;  /* > 0: scores capped at cap · tanh(score / cap) */
  int varlen;     /* 1: a variable-length batch: sequence b has seqlen_q - f(b)
                     queries and seqlen_k - f'(b) keys (fat_varlen_lengths), packed,
                     and odd sequences use only part of their keys (seqused_k) */
  fat_lengths lengths; /* varlen with a profile's lengths instead (lengths.n = batch,
                          the longest = seqlen_q = seqlen_k); n = 0: the formula's */
} fat_check_shape;

/* The lengths of sequence B of a variable-length check shape: its queries,
 * its keys (rows in K and V) and the keys it uses. Sequence 0 has the full
 * seqlen_q and seqlen_k; the others are shorter, down to one. A shape with
 * a profile (lengths.n > 0) has its lengths, every key used. */
void fat_varlen_lengths(const fat_check_shape *s, int b, int *len_q, int *len_k, int *used_k);

/* How a compiled variant is launched. */
typedef enum fat_kernel_kind {
  FAT_KERNEL_FUSED = 0,        /* one kernel, the launch contract below */
  FAT_KERNEL_MATERIALIZE = 1,  /* the materialising baseline: three kernels over a workspace */
  FAT_KERNEL_FUSED_TMA = 2,    /* one kernel that also takes tensor maps of q, k and v
                                  (fwd_launch.h); sm_90 and newer */
} fat_kernel_kind;

/* The family whose variants are FAT_KERNEL_MATERIALIZE (generator/
 * family_materialize.lua); never a winner (db.c leaves it out of rankings). */
#ifndef FAT_FAMILY_MATERIALIZE
#define FAT_FAMILY_MATERIALIZE "materialize"
#endif
/* The forward's fused families: mma.sync (generator/family_mma80.lua),
 * Hopper's wgmma (generator/family_wgmma90.lua) and the warp-specialised
 * wgmma with the tensor copy engine (generator/family_ws90.lua), whose
 * variants are FAT_KERNEL_FUSED_TMA. */
#define FAT_FAMILY_MMA80 "mma80"
#define FAT_FAMILY_WGMMA90 "wgmma90"
#define FAT_FAMILY_WS90 "ws90"
/* The decoding family (generator/family_splitkv.lua), and the longest
 * seqlen_q it is timed on and may serve: its 64-row blocks and key splits
 * are for few queries against many keys. */
#define FAT_FAMILY_SPLITKV "splitkv"
#define FAT_SPLITKV_MAX_SEQLEN_Q 128

/* A materialize variant's kernels: its entry with these appended, launched
 * in this order, each taking (fat_fwd_params, float *workspace). */
#define FAT_MATERIALIZE_SCORES_SUFFIX "_scores"    /* S = scale·Q·Kᵀ into the workspace */
#define FAT_MATERIALIZE_SOFTMAX_SUFFIX "_softmax"  /* P = softmax(S) in place, lse */
#define FAT_MATERIALIZE_PV_SUFFIX "_pv"            /* O = P·V */
/* Rows of the workspace one softmax block handles (one warp each). */
#define FAT_MATERIALIZE_SOFTMAX_ROWS 8

/* Bytes of the materialising baseline's fp32 score workspace for SHAPE:
 * batch·heads·seqlen_q·seqlen_k·4. */
size_t fat_materialize_workspace_bytes(const fat_check_shape *shape);

/* Peak device memory of a forward pass of problem P, computed from the
 * shape: Q, K, V and O in the element type plus lse in fp32 for a fused
 * kernel; that plus the score workspace when MATERIALIZE is 1. */
size_t fat_fwd_peak_bytes(const fat_problem *p, int materialize);

#define FAT_KERNEL_NAME_MAX 256
#define FAT_KERNEL_ENTRY_MAX 128

/* A compiled forward variant as the GPU side launches it (the launch
 * contract: grid = (ceil(seqlen_q / block_m), heads, batch),
 * block = (threads, 1, 1), dynamic shared memory smem_bytes, one
 * fat_fwd_params by value). */
typedef struct fat_kernel_desc {
  char name[FAT_KERNEL_NAME_MAX];    /* the variant's name, for messages */
  char entry[FAT_KERNEL_ENTRY_MAX];  /* kernel symbol in the cubin */
  int block_m, threads, smem_bytes;
  int pack_gqa, splits;              /* forward decoding schedule (fwd_launch.h): 0, 1 for most */
  int block_n;                       /* FAT_KERNEL_FUSED_TMA: keys per K/V tile (the maps' box) */
  int persistent;                    /* FAT_KERNEL_FUSED_TMA: PERSISTENT (types.h's FAT_FWD_*):
                                        resident blocks looping over query blocks */
  fat_dtype dtype;
  fat_mask mask;
  int head_dim;
  const unsigned char *cubin;        /* not owned */
  size_t cubin_size;
  fat_kernel_kind kind;              /* how to launch it */
  /* Backward variants (direction FAT_BWD): block_m above is the key block
   * (grid.x = ceil(seqlen_k / block_m)); these say the rest. */
  fat_direction direction;
  int block_q;                       /* query rows per tile (BLOCK_M) */
  int dq_separate;                   /* 1: dQ by its own pass (deterministic); 0: atomics */
} fat_kernel_desc;

/* How a variant is timed. */
typedef struct fat_time_opts {
  int reps;      /* timed repetitions (each its own pair of events) */
  int warmup;    /* untimed launches first (clocks, caches, lazy module load) */
  int flush_l2;  /* 1: overwrite a buffer of 2x the L2 size before each repetition */
} fat_time_opts;

#define FAT_MAX_CHECK_SHAPES 64  /* shapes one variant is checked on in one job */
#define FAT_MAX_INTERLEAVED 16   /* variants timed together round-robin */

#define FAT_DEFAULT_REPS 20
#define FAT_DEFAULT_WARMUP 3

/* The GPU's ceilings, measured by the worker's ceilings job once per GPU
 * (templates/ceilings.cu) and stored in the ceilings table. */
typedef struct fat_ceilings {
  double copy_bytes_per_s;       /* device-memory copy: (read + write bytes) / median time */
  double mma_fp16_flops_per_s;   /* mma.sync m16n8k16 fp16, fp32 accumulate, whole GPU */
  double mma_bf16_flops_per_s;   /* the same in bf16 */
  unsigned long long copy_bytes; /* bytes of each copy buffer (source and destination) */
  int reps;                      /* timed runs each figure is the median of */
} fat_ceilings;

/* How the ceilings are measured. */
#define FAT_CEILING_REPS 10           /* timed runs of each microbenchmark */
#define FAT_CEILING_WARMUP 2          /* untimed runs first */
#define FAT_CEILING_L2_FACTOR 4       /* each copy buffer is at least 4x the L2 ... */
#define FAT_CEILING_MIN_COPY_BYTES ((unsigned long long)256 << 20)  /* ... and 256 MiB */

/* 0 when SHAPE is usable with head dim HEAD_DIM, else -1 with err naming the
 * bad value: "check shape 1: heads 6 is not a multiple of heads_k 4". INDEX
 * is the shape's position, for the message. */
int fat_check_shape_validate(const fat_check_shape *s, int index, char *err, size_t errlen);

/* ---- backward ----------------------------------------------------------
 * A backward variant (templates/bwd_mma80.cu) is four kernels in one
 * cubin, launched in this order, each taking one fat_bwd_params by value:
 *   FAT_BWD_PREPROCESS_ENTRY  D = rowsum(dO ∘ O), zeroes dq_accum; grid
 *                             (ceil(seqlen_q / rows), heads, batch) of
 *                             FAT_BWD_ROW_THREADS threads, rows = threads / FAT_BWD_ROW_LANES(head_dim)
 *   the variant's entry       dK, dV (and atomic dQ); grid (ceil(seqlen_k /
 *                             block_m), heads_k, batch), threads, smem_bytes
 *   FAT_BWD_DQ_ENTRY          separate mode: dQ; grid (ceil(seqlen_q /
 *                             block_q), heads, batch), threads, smem_bytes
 *   FAT_BWD_CONVERT_ENTRY     atomic mode: dq_accum → dQ; grid as preprocess */
#define FAT_BWD_PREPROCESS_ENTRY "fat_bwd_preprocess"
#define FAT_BWD_DQ_ENTRY "fat_bwd_dq"
#define FAT_BWD_CONVERT_ENTRY "fat_bwd_convert_dq"

/* The gradients a backward check compares, in this order. */
enum { FAT_GRAD_DQ = 0, FAT_GRAD_DK = 1, FAT_GRAD_DV = 2, FAT_N_GRADS = 3 };

/* Name of gradient I: "dQ", "dK", "dV". */
const char *fat_grad_name(int i);

/* Outcome of checking one backward variant on one shape, per gradient. */
typedef struct fat_bwd_check {
  double rel_l2[FAT_N_GRADS];    /* ||g - ref||₂ / ||ref||₂ over the finite values */
  double max_abs[FAT_N_GRADS];   /* max |g - ref| */
  long long nonfinite[FAT_N_GRADS];
  int deterministic;             /* separate mode: 1 when a second run gave the same
                                    bits, 0 when not; -1: not tested (atomic mode) */
} fat_bwd_check;

/* Compares the gradients G[i] (N[i] 16-bit values of dtype D) with REF[i],
 * filling BC and, as one verdict, OUT: rel_l2 and max_abs the worst of the
 * three, nonfinite their sum, lse_max_abs 0, passed, and reason, first
 * failing test first: "dK: 3 non-finite values" ("1 non-finite value"),
 * "dQ rel_l2 3.1e-02 > 2.0e-02", or "ok". A gradient whose reference is all
 * zero (dQ and dK where every row sees a single key) has its error measured
 * against the root mean square of the largest other gradient; when all three
 * references are zero it passes only when it is all zero too. Shape fields
 * are the caller's;
 * BC->deterministic is left as it was. */
void fat_compare_bwd(fat_dtype d, const uint16_t *const g[FAT_N_GRADS],
                     const double *const ref[FAT_N_GRADS], const size_t n[FAT_N_GRADS],
                     fat_bwd_check *bc, fat_check *out);

/* Peak device memory of a backward pass of problem P, from the shape: Q, K,
 * V, O, dO, dQ, dK, dV in the element type, lse and D in fp32, and the fp32
 * dQ accumulator in atomic mode (DQ_SEPARATE 0). Linear in the sequence
 * lengths: nothing of the backward grows as seqlen_q x seqlen_k. */
size_t fat_bwd_peak_bytes(const fat_problem *p, int dq_separate);
#endif
