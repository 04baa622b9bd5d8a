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
 * and resources. */
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

/* 0 when tensor maps can describe P's q, k, v and dout (fat_tma_describable),
 * else -1 with err naming the first that cannot: the runtime then serves the
 * call with a family that loads without them. */
int fat_bwd_tma_describable(const fat_bwd_params *p, char *err, size_t errlen);

/* Launches the whole backward for P on STREAM; the first failure's result.
 * CUDA_ERROR_INVALID_VALUE when a tensor-map variant's tensors are none the
 * maps can describe, or a persistent one is given no SM count or more key
 * blocks than an int counts. */
CUresult fat_bwd_launch(const fat_cuda *cu, const fat_bwd_kernels *k, const fat_bwd_geometry *g,
                        fat_bwd_params *p, CUstream stream);
#endif
