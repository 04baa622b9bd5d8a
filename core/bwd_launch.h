/* SPDX-License-Identifier: MIT */
/* The launch sequence of a backward variant (templates/bwd_mma80.cu), written
 * once for the tuner (measure/variant.c) and the runtime (runtime/launch.c): the
 * order and grids that kernel.h documents, and for the variants that load
 * through the tensor copy engine (templates/bwd_ws90.cu) the tensor maps of
 * q, k, v and dout. */
#ifndef FAT_BWD_LAUNCH_H
#define FAT_BWD_LAUNCH_H
#include <stddef.h>
#include "cuda_api.h"
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "types.h"

/* The four kernels of one loaded backward variant. */
typedef struct fat_bwd_kernels {
  CUfunction preprocess;  /* D = rowsum(dO ∘ O), zeroes the dQ accumulator */
  CUfunction main;        /* the variant's entry: dK, dV (and atomic or ordered dQ) per key block */
  CUfunction dq;          /* separate mode: dQ per query block */
  CUfunction convert;     /* atomic and ordered modes: the fp32 accumulator → dQ */
} fat_bwd_kernels;

/* How the variant is launched: its parameters (BLOCK_N, BLOCK_M, DQ_MODE)
 * and resources. An ordered variant's semaphores: below, beside the
 * accumulator. */
typedef struct fat_bwd_geometry {
  int block_n;      /* keys per block of the main kernel */
  int block_q;      /* query rows per block of the dQ pass; a tensor-map variant's query tile */
  fat_dq_mode dq_mode;  /* separate: dQ has its own pass; atomic, ordered: the accumulator, then
                           the conversion */
  int threads;      /* of the main and dQ kernels */
  int smem_bytes;   /* dynamic shared memory of the main and dQ kernels */
  int tma;          /* 1: the main kernel takes tensor maps of q, k, v and dout after P, in
                       boxes of 64 columns by block_q (q, dout) and block_n (k, v) rows */
  int bf16;         /* with tma: the maps' element type, 1 bf16, 0 fp16 */
  int persistent;   /* 1 (FAT_FWD_RESIDENT): the main kernel runs at most sm_count blocks, each
                       looping over the key blocks (templates/bwd_ws90.cu's PERSISTENT) */
  int sm_count;     /* with persistent: the GPU's SMs */
} fat_bwd_geometry;

/* An ordered variant's semaphores (FAT_DQ_ORDERED, templates/bwd_ws90.cu):
 * int32 counters in device memory that order the adds of each dQ tile into
 * the accumulator. They lie right after the accumulator's batch·heads·
 * seqlen_q rows of FAT_BWD_ACCUM_WIDTH(head_dim) floats, that is at
 * (int *)(dq_accum + batch·heads·seqlen_q·FAT_BWD_ACCUM_WIDTH(head_dim)),
 * 256-byte aligned since a row is a multiple of 64 floats; one for each
 * (batch, head, query tile of block_q rows), in the order the kernel
 * indexes them; fat_bwd_launch zeroes them before the variant's entry runs.
 * fat_abi_bwd.h does not say this: it is inlined into every backward's
 * source, and a line there would change every shipped variant's hash.
 *
 * Their count for a dense problem: *COUNT = batch·heads·ceil(seqlen_q /
 * block_q); 0, or -1 when an argument is not positive or the count does
 * not fit in a size_t. */
int fat_bwd_semaphores(int batch, int heads, int seqlen_q, int block_q, size_t *count);

/* The smallest query tile (BLOCK_M) an ordered variant may have: the tile
 * fat_bwd_semaphores_bound counts by, so that the bound holds for every
 * variant the launch takes (it refuses an ordered one of a smaller tile).
 * ws90's tiles are 64 and 128; mma80's 32 is of separate and atomic
 * variants, which have no semaphores. */
#define FAT_BWD_ORDERED_MIN_BLOCK_Q 64

/* The semaphores a workspace holds whatever variant serves the call, so
 * that its size is a function of the shape alone: for a dense problem
 * (TOTAL_Q 0) fat_bwd_semaphores with FAT_BWD_ORDERED_MIN_BLOCK_Q, batch·
 * heads·ceil(seqlen_q / 64); for a packed batch (TOTAL_Q > 0 rows over
 * BATCH sequences) heads·(total_q / 64 + batch), which bounds the sum over
 * the sequences of ceil(length / 64). 0, or -1 as fat_bwd_semaphores. */
int fat_bwd_semaphores_bound(int batch, int heads, int seqlen_q, long long total_q, size_t *count);

/* 0 when tensor maps can describe P's q, k, v and dout (fat_tma_describable),
 * else -1 with err naming the first that cannot: the runtime then serves the
 * call with a family that loads without them. */
int fat_bwd_tma_describable(const fat_bwd_params *p, char *err, size_t errlen);

/* The gradient through lse (fat_attn_bwd_args' dlse): the runtime's own
 * kernel FAT_BWD_SUB_DLSE_ENTRY of FAT_BWD_DLSE_PTX (an embedded file:
 * delta[i] -= dlse[i] for i < count, any grid), launched between the
 * preprocess and the main kernel so that every variant reads D − dlse as
 * its D. count: lse's elements, which D shares the layout of (batch·heads·
 * seqlen_q; a packed batch's heads·total_q). */
#define FAT_BWD_DLSE_PTX "templates/bwd_dlse.ptx"
#define FAT_BWD_SUB_DLSE_ENTRY "fat_bwd_sub_dlse"
typedef struct fat_bwd_dlse {
  CUfunction sub;     /* FAT_BWD_SUB_DLSE_ENTRY, loaded */
  const float *dlse;  /* device fp32, count of them */
  size_t count;
} fat_bwd_dlse;

/* Launches the whole backward for P on STREAM; the first failure's result.
 * DLSE (NULL for none): D − dlse in place of D, above.
 * An ordered variant's semaphores (above) are zeroed on STREAM before its
 * main kernel. CUDA_ERROR_INVALID_VALUE, before anything is queued, when a
 * tensor-map variant's tensors are none the maps can describe, a
 * persistent one is given no SM count or more key blocks than an int
 * counts, or an ordered one has a query tile below
 * FAT_BWD_ORDERED_MIN_BLOCK_Q (more semaphores than a workspace holds) or
 * is given no dq_accum or a packed batch (its semaphores' place after
 * heads·total_q rows is not defined yet: the launch does not know
 * total_q). */
CUresult fat_bwd_launch(const fat_cuda *cu, const fat_bwd_kernels *k, const fat_bwd_geometry *g,
                        fat_bwd_params *p, const fat_bwd_dlse *dlse, CUstream stream);
#endif
