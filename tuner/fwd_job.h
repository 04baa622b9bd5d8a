/* What one forward job of the tuning worker is made of: the shapes a variant
 * is checked on, the launch description of a compiled variant, and how it is
 * timed. Shared by the parent's API (worker.h), the wire format
 * (worker_wire.h) and the GPU side (gpu_run.h). */
#ifndef FAT_FWD_JOB_H
#define FAT_FWD_JOB_H
#include <stddef.h>
#include "types.h"

/* One shape a variant is checked on; head_dim, dtype and mask are the
 * variant's own. */
typedef struct fat_check_shape {
  int batch, heads, heads_k, seqlen_q, seqlen_k;
} fat_check_shape;

/* How a compiled variant is launched. */
typedef enum fat_kernel_kind {
  FAT_KERNEL_FUSED = 0,        /* one kernel, the launch contract below */
  FAT_KERNEL_MATERIALIZE = 1,  /* the materialising baseline: three kernels over a workspace */
} fat_kernel_kind;

/* The family whose variants are FAT_KERNEL_MATERIALIZE (generator/
 * family_materialize.lua); never a winner (db.c leaves it out of rankings). */
#ifndef FAT_FAMILY_MATERIALIZE
#define FAT_FAMILY_MATERIALIZE "materialize"
#endif
/* A materialize variant's kernels: its entry with these appended, launched
 * in this order, each taking (fat_fwd_params, float *workspace). */
#define FAT_MATERIALIZE_SCORES_SUFFIX "_scores"    /* S = scale·Q·Kᵀ into the workspace */
#define FAT_MATERIALIZE_SOFTMAX_SUFFIX "_softmax"  /* P = softmax(S) in place, lse */
#define FAT_MATERIALIZE_PV_SUFFIX "_pv"            /* O = P·V */
/* Rows of the workspace one softmax block handles (one warp each). */
#define FAT_MATERIALIZE_SOFTMAX_ROWS 8

/* The launch kind of a variant of FAMILY. */
fat_kernel_kind fat_kernel_kind_of_family(const char *family);

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
  fat_dtype dtype;
  fat_mask mask;
  int head_dim;
  const unsigned char *cubin;        /* not owned */
  size_t cubin_size;
  fat_kernel_kind kind;              /* how to launch it */
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
#endif
