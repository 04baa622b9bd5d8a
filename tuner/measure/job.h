/* SPDX-License-Identifier: MIT */
/* What one job of the tuning worker is made of, forward and backward: the
 * shapes a variant is checked on, how it is timed, the GPU's ceilings and
 * the verdicts of a check. Shared by the parent's API (worker.h), the wire
 * format (worker_wire.h) and the GPU side (gpu_run.h). How a compiled
 * variant is launched is core's (kernel.h). */
#ifndef FAT_JOB_H
#define FAT_JOB_H
#include <stddef.h>
#include <stdint.h>
#include "kernel.h"
#include "fwd_compare.h"
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
                     and odd sequences use only part of their keys (seqused_k); with
                     page_size, the caches partly filled instead (fat_paged_used_keys),
                     the queries dense */
  fat_lengths lengths; /* varlen with a profile's lengths instead (lengths.n = batch,
                          the longest = seqlen_q = seqlen_k); n = 0: the formula's */
  int page_size;  /* > 0: K and V in a pool of pages of this many keys, in random order
                     (the fp64 reference reads them contiguous); 0: contiguous */
  int descale_per_head; /* fp8 K and V only (fat_dtype_kv_fp8): 1: descale factors per
                           (batch, key head), strides (heads_k, 1); 0: one per tensor,
                           strides (0, 0) (fat_abi_fp8.h) */
} fat_check_shape;

/* A shape's dense dimensions as designated initializers, for the tables
 * of shapes the checks and tests write: {FAT_SHAPE_DIMS(1, 2, 2, 37, 53),
 * .head_dim = 80}; the fields not named are zero (the plain case). */
#define FAT_SHAPE_DIMS(b, h, hk, sq, sk) \
  .batch = (b), .heads = (h), .heads_k = (hk), .seqlen_q = (sq), .seqlen_k = (sk)

/* The lengths of sequence B of a variable-length check shape: its queries,
 * its keys (rows in K and V) and the keys it uses. Sequence 0 has the full
 * seqlen_q and seqlen_k; the others are shorter, down to one. A shape with
 * a profile (lengths.n > 0) has its lengths, every key used. */
void fat_varlen_lengths(const fat_check_shape *s, int b, int *len_q, int *len_k, int *used_k);

/* The keys sequence B of a paged check shape uses (its cache's length,
 * seqused_k): all seqlen_k for sequence 0 or a shape without varlen, the
 * others fewer, down to one -- so that the last page of most is partly
 * filled and the table rows are of different lengths. */
int fat_paged_used_keys(const fat_check_shape *s, int b);

/* Bytes of the materialising baseline's fp32 score workspace for SHAPE:
 * batch·heads·seqlen_q·seqlen_k·4. */
size_t fat_materialize_workspace_bytes(const fat_check_shape *shape);

/* Peak device memory of a forward pass of problem P, computed from the
 * shape: Q, K, V in their element types (K and V one byte for e4m3 and
 * the fp8 K/V caches), O in its own (bf16 for e4m3), lse in fp32 for a fused
 * kernel; that plus the score workspace when MATERIALIZE is 1. */
size_t fat_fwd_peak_bytes(const fat_problem *p, int materialize);

/* How a variant is timed. */
typedef struct fat_time_opts {
  int reps;      /* timed repetitions (each its own pair of events) */
  int warmup;    /* untimed launches first (clocks, caches, lazy module load) */
  int flush_l2;  /* 1: overwrite a buffer of 2x the L2 size before each repetition */
  double cutoff_ms;  /* > 0: one kernel's timing stops after its first repetition when that
                        took longer than this, and is a timing of 1 repetition (an evaluate
                        job's screening far behind its problem's best so far: db.h's
                        FAT_DROP_FACTOR); 0: none, every repetition runs */
} fat_time_opts;

/* Where a worker's time goes, summed over its jobs: what --json's
 * "tune_seconds" and the run's last lines report, so that the cost of the
 * tune stage can be read off instead of guessed. Wall seconds on the
 * worker's side; GPU work that is only queued is counted where the worker
 * waits for it (a check's random inputs in its run, say). */
typedef enum fat_phase {
  FAT_PHASE_LOAD = 0,       /* loading and unloading the variants' modules */
  FAT_PHASE_CHECK_BUFFERS,  /* a check's buffers: allocating, drawing inputs, poisoning, freeing */
  FAT_PHASE_REFERENCE,      /* the fp64 references not yet kept, and their download */
  FAT_PHASE_CHECK_RUN,      /* a check's launches, until the GPU is done */
  FAT_PHASE_COMPARE,        /* downloading a check's outputs and comparing them */
  FAT_PHASE_TIME_BUFFERS,   /* a timing's buffers: allocating, drawing inputs, freeing */
  FAT_PHASE_TIMED_RUNS,     /* the timed launches, warm-up and L2 flushes included */
  FAT_PHASE_COUNT
} fat_phase;
/* "module loads", "check buffers", ...: the names the report prints. */
const char *fat_phase_name(fat_phase p);
/* The same for --json's keys: "load", "check_buffers", ... */
const char *fat_phase_key(fat_phase p);

#define FAT_MAX_CHECK_SHAPES 64  /* shapes one variant is checked on in one job */
#define FAT_MAX_INTERLEAVED 16   /* variants timed together round-robin */

#define FAT_DEFAULT_REPS 20
#define FAT_DEFAULT_WARMUP 3
/* A screening's untimed launches first (db.h's FAT_SCREEN_REPS): one loads
 * the module and warms the caches; the clocks are already up, the GPU busy
 * with the variant before. */
#define FAT_SCREEN_WARMUP 1

/* The GPU's ceilings, measured by the worker's ceilings job once per GPU
 * (templates/ceilings.cu, and on sm_90a templates/ceilings_wgmma90.cu) and
 * stored in the ceilings table. */
typedef struct fat_ceilings {
  double copy_bytes_per_s;       /* device-memory copy: (read + write bytes) / median time */
  double mma_fp16_flops_per_s;   /* mma.sync m16n8k16 fp16, fp32 accumulate, whole GPU */
  double mma_bf16_flops_per_s;   /* the same in bf16 */
  double wgmma_flops_per_s[2];   /* by fat_dtype: wgmma m64n256k16, fp32 accumulate, both
                                    operands in shared memory, whole GPU; 0: not measured
                                    (an architecture without wgmma) */
  double wgmma_rs_flops_per_s[2];  /* the same with A in registers */
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

/* ---- backward ---------------------------------------------------------- */

/* The gradients a backward check compares, in this order. */
enum { FAT_GRAD_DQ = 0, FAT_GRAD_DK = 1, FAT_GRAD_DV = 2, FAT_N_GRADS = 3 };

/* Name of gradient I: "dQ", "dK", "dV". */
const char *fat_grad_name(int i);

/* Outcome of checking one backward variant on one shape, per gradient. */
typedef struct fat_bwd_check {
  double rel_l2[FAT_N_GRADS];    /* ||g - ref||₂ / ||ref||₂ over the finite values */
  double max_abs[FAT_N_GRADS];   /* max |g - ref| */
  long long nonfinite[FAT_N_GRADS];
  int deterministic;             /* a deterministic dQ mode (separate or ordered): 1 when a
                                    second run gave the same bits, 0 when not; -1: not
                                    tested (atomic mode) */
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
/* The same verdict from the gradients' sums already taken (the worker's,
 * on the GPU: fat_diff_sums_of's fields where the gradients are). */
void fat_compare_bwd_sums(fat_dtype d, const fat_diff_sums sums[FAT_N_GRADS],
                          const size_t n[FAT_N_GRADS], fat_bwd_check *bc, fat_check *out);

/* Peak device memory of a backward pass of problem P, from the shape: Q, K,
 * V, O, dO, dQ, dK, dV in the element type, lse and D in fp32, the fp32 dQ
 * accumulator in the modes that sum into it (atomic and ordered:
 * fat_dq_accumulates), and in ordered mode its int32 semaphores
 * (fat_bwd_semaphores_bound); SIZE_MAX when they do not fit in a size_t.
 * Linear in the sequence lengths: nothing of the backward grows as
 * seqlen_q x seqlen_k. */
size_t fat_bwd_peak_bytes(const fat_problem *p, fat_dq_mode dq_mode);
#endif
