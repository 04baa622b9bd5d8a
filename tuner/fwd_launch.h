/* SPDX-License-Identifier: MIT */
/* The launch of a fused forward variant (templates/fwd_mma80.cu), written
 * once for the tuner (gpu_run.c) and the runtime (runtime/fatune.c): its
 * grid, and for split-KV variants the workspace of partials and the combine
 * kernel that follows. */
#ifndef FAT_FWD_LAUNCH_H
#define FAT_FWD_LAUNCH_H
#include <stddef.h>
#include "cuda_api.h"
#include "fat_abi.h"
#include "types.h"

/* A split variant's second kernel: its entry with this appended. */
#define FAT_FWD_COMBINE_SUFFIX "_combine"

typedef struct fat_fwd_kernels {
  CUfunction main;     /* the variant's entry */
  CUfunction combine;  /* split variants only (splits > 1), else NULL */
} fat_fwd_kernels;

/* How the variant is launched: resources, and the decoding schedule its
 * parameter string names (fat_fwd_params_parse). */
typedef struct fat_fwd_geometry {
  int block_m;       /* rows per block */
  int threads;
  int smem_bytes;
  int pack_gqa;      /* 1: the rows of a block are (position, head of the group) pairs */
  int splits;        /* blocks the keys of one query block are divided among */
  int head_dim;      /* the template's: the row pitch of the fp32 partials */
} fat_fwd_geometry;

/* Sets P's softmax_scale to SCALE and what the kernels derive from it:
 * scale_log2, and the soft-cap's softcap_in / softcap_out for a cap of
 * SOFTCAP (> 0; 0: none), the one place that conversion is written. */
void fat_fwd_set_scale(fat_fwd_params *p, double scale, double softcap);

/* Bytes of device workspace the variant needs for a problem of this
 * batch, heads and (longest) seqlen_q: 0 unless split; then the fp32
 * partial outputs and log-sum-exps, splits x batch x heads x seqlen_q rows,
 * each part rounded up to 256 bytes. */
size_t fat_fwd_workspace_bytes(const fat_fwd_geometry *g, int batch, int heads, int seqlen_q);

/* Points P's o_accum and lse_accum into WORKSPACE (a device address of at
 * least fat_fwd_workspace_bytes), or at 0 for a variant that needs none. */
void fat_fwd_set_workspace(const fat_fwd_geometry *g, fat_fwd_params *p, CUdeviceptr workspace);

/* Launches the variant (and its combine kernel) for P on STREAM; the first
 * failure's result. CUDA_ERROR_INVALID_VALUE when a split variant has no
 * workspace or no combine kernel. */
CUresult fat_fwd_launch(const fat_cuda *cu, const fat_fwd_kernels *k, const fat_fwd_geometry *g,
                        fat_fwd_params *p, CUstream stream);
#endif
