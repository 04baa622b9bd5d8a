/* SPDX-License-Identifier: MIT */
/* The launch sequence of a backward variant (templates/bwd_mma80.cu), written
 * once for the tuner (gpu_run.c) and the runtime (runtime/fatune.c): the
 * order and grids that fwd_job.h documents. */
#ifndef FAT_BWD_LAUNCH_H
#define FAT_BWD_LAUNCH_H
#include "cuda_api.h"
#include "fat_abi.h"
#include "fat_abi_bwd.h"

/* The four kernels of one loaded backward variant. */
typedef struct fat_bwd_kernels {
  CUfunction preprocess;  /* D = rowsum(dO ∘ O), zeroes the dQ accumulator */
  CUfunction main;        /* the variant's entry: dK, dV (and atomic dQ) per key block */
  CUfunction dq;          /* separate mode: dQ per query block */
  CUfunction convert;     /* atomic mode: the fp32 accumulator → dQ */
} fat_bwd_kernels;

/* How the variant is launched: its parameters (BLOCK_N, BLOCK_M, DQ_MODE)
 * and resources. */
typedef struct fat_bwd_geometry {
  int block_n;      /* keys per block of the main kernel */
  int block_q;      /* query rows per block of the dQ pass */
  int dq_separate;  /* 1: dQ has its own pass; 0: atomics, then the conversion */
  int threads;      /* of the main and dQ kernels */
  int smem_bytes;   /* dynamic shared memory of the main and dQ kernels */
} fat_bwd_geometry;

/* Launches the whole backward for P on STREAM; the first failure's result. */
CUresult fat_bwd_launch(const fat_cuda *cu, const fat_bwd_kernels *k, const fat_bwd_geometry *g,
                        fat_bwd_params *p, CUstream stream);
#endif
