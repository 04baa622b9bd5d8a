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

/* 0 when SHAPE is usable with head dim HEAD_DIM, else -1 with err naming the
 * bad value: "check shape 1: heads 6 is not a multiple of heads_k 4". INDEX
 * is the shape's position, for the message. */
int fat_check_shape_validate(const fat_check_shape *s, int index, char *err, size_t errlen);
#endif
