/* SPDX-License-Identifier: MIT */
/* How a compiled variant is launched, as the tuner's worker and the runtime
 * both need it: the kinds of launch (each family's is in family.h), the
 * launch description of one variant and the entry names of the backward's
 * kernels. */
#ifndef FAT_KERNEL_H
#define FAT_KERNEL_H
#include <stddef.h>
#include "types.h"

/* How a compiled variant is launched. */
typedef enum fat_kernel_kind {
  FAT_KERNEL_FUSED = 0,        /* one kernel, the launch contract below */
  FAT_KERNEL_MATERIALIZE = 1,  /* the materialising baseline: three kernels over a workspace */
  FAT_KERNEL_FUSED_TMA = 2,    /* one kernel that also takes tensor maps of q, k and v
                                  (fwd_launch.h); sm_90 and newer */
} fat_kernel_kind;

/* A materialize variant's kernels: its entry with these appended, launched
 * in this order, each taking (fat_fwd_params, float *workspace). */
#define FAT_MATERIALIZE_SCORES_SUFFIX "_scores"    /* S = scale·Q·Kᵀ into the workspace */
#define FAT_MATERIALIZE_SOFTMAX_SUFFIX "_softmax"  /* P = softmax(S) in place, lse */
#define FAT_MATERIALIZE_PV_SUFFIX "_pv"            /* O = P·V */
/* Rows of the workspace one softmax block handles (one warp each). */
#define FAT_MATERIALIZE_SOFTMAX_ROWS 8

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
  int pack_gqa, splits;              /* forward decoding schedule (fwd_launch.h): 0, 1 for most;
                                        splits 0: chosen at launch (fat_fwd_launch_splits) */
  int paged;                         /* forward: K and V read from a paged cache through a block
                                        table (the family's row, family.h) */
  int block_n;                       /* FAT_KERNEL_FUSED_TMA: keys per K/V tile (the maps' box) */
  int tma_slab;                      /* FAT_KERNEL_FUSED_TMA: columns of the maps' box, the
                                        template's slab (FAT_TMA_BOX_COLUMNS, or 32) */
  int persistent;                    /* FAT_KERNEL_FUSED_TMA: PERSISTENT (types.h's FAT_FWD_*):
                                        resident blocks looping over query blocks (a
                                        backward's: over key blocks, FAT_FWD_RESIDENT only) */
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
  fat_dq_mode dq_mode;               /* how dQ is summed (types.h): atomic, separate or ordered */
} fat_kernel_desc;

/* A backward variant (templates/bwd_mma80.cu) is four kernels in one
 * cubin, launched in this order, each taking one fat_bwd_params by value:
 *   FAT_BWD_PREPROCESS_ENTRY  D = rowsum(dO ∘ O), zeroes dq_accum; grid
 *                             (ceil(seqlen_q / rows), heads, batch) of
 *                             FAT_BWD_ROW_THREADS threads, rows = threads / FAT_BWD_ROW_LANES(head_dim)
 *   the variant's entry       dK, dV (and atomic or ordered dQ); grid
 *                             (ceil(seqlen_k / block_m), heads_k, batch),
 *                             threads, smem_bytes; persistent: (min(SMs,
 *                             those blocks), 1, 1)
 *   FAT_BWD_DQ_ENTRY          separate mode: dQ; grid (ceil(seqlen_q /
 *                             block_q), heads, batch), threads, smem_bytes
 *   FAT_BWD_CONVERT_ENTRY     atomic and ordered modes: dq_accum → dQ; grid
 *                             as preprocess
 * An ordered variant (FAT_DQ_ORDERED) also takes int32 semaphores right
 * after dq_accum's batch·heads·seqlen_q rows of FAT_BWD_ACCUM_WIDTH(head_dim)
 * floats, batch·heads·ceil(seqlen_q / block_q) of them (one a batch, head
 * and query tile), which the launch zeroes before the variant's entry runs
 * (bwd_launch.h: fat_bwd_semaphores). */
#define FAT_BWD_PREPROCESS_ENTRY "fat_bwd_preprocess"
#define FAT_BWD_DQ_ENTRY "fat_bwd_dq"
#define FAT_BWD_CONVERT_ENTRY "fat_bwd_convert_dq"

#endif
