/* SPDX-License-Identifier: MIT */
/* The GPUs of a tuning run (gpus.c): --gpu's indices resolved (all: every
 * device the driver reports), a worker started for each -- from the
 * calling thread, before any compile thread exists (worker.h says why) --
 * and the GPUs grouped by architecture, which the run generates and
 * compiles for once each. Grouping by model (a gpus row of the database)
 * is the tune stage's business (tune_problem.h's fat_model). */
#ifndef FAT_GPUS_H
#define FAT_GPUS_H
#include <stddef.h>
#include "options.h"
#include "types.h"
#include "worker.h"

/* GPUs of one run at most: --gpu all on a host with more tunes these. */
#define FAT_MAX_GPUS 64
/* An architecture's name, "sm_90a". */
#define FAT_ARCH_CAP 16

/* One GPU of the run. */
typedef struct fat_run_gpu {
  int index;           /* its CUDA device index */
  fat_worker *worker;  /* running from the start on */
  fat_gpu_info info;   /* as its worker saw it (nvrtc_* are the caller's to fill) */
  int arch;            /* its architecture: an index into fat_run_gpus.archs */
} fat_run_gpu;

/* An architecture of the run: what is generated and compiled once for the
 * GPUs that share it. */
typedef struct fat_run_arch {
  char name[FAT_ARCH_CAP];  /* "sm_90a" */
  int smem_limit;           /* the least opt-in shared memory per block of its GPUs: what
                               the generator prunes by (0: no GPU, prune by the space's) */
} fat_run_arch;

typedef struct fat_run_gpus {
  fat_run_gpu gpus[FAT_MAX_GPUS];  /* in --gpu's order (all: 0, 1, ...) */
  int n;
  fat_run_arch archs[FAT_MAX_GPUS];  /* in the order of their first GPU */
  int n_archs;
  int failed_index;                  /* the GPU fat_run_gpus_start could not open */
} fat_run_gpus;

/* Starts a worker (options WO) on every GPU O's --gpu names, in order:
 * with --gpu all, GPU 0 first, then every other device its driver reports
 * (at most FAT_MAX_GPUS). Returns FAT_GPU_OPENED (0) with G filled, or
 * the code of the first GPU that would not open (gpu_run.h's
 * fat_gpu_open_status: FAT_GPU_BAD_INDEX for an index past the devices,
 * fat_gpu_absent for no driver or no device) with G's workers stopped,
 * G->failed_index its index and ERR the worker's words ("GPU index 3 out
 * of range: 2 devices found"). */
int fat_run_gpus_start(const fat_options *o, const fat_worker_options *wo, fat_run_gpus *g,
                       char *err, size_t errlen);

/* Groups G's GPUs by architecture (fat_arch_for_cc). ARCH (--arch, "" for
 * none) must be every GPU's: -1 with ERR "--arch sm_80: GPU 1 is NVIDIA
 * H200 (compute capability 9.0), which runs sm_90a" otherwise. With no GPU
 * (G->n 0) one architecture, ARCH or sm_90a. Returns 0 or -1. */
int fat_run_gpus_archs(fat_run_gpus *g, const char *arch, char *err, size_t errlen);

/* "GPU 0, 1 and 3" for the GPUs of G whose MEMBER[i] is nonzero (every GPU
 * when MEMBER is NULL), into OUT. */
void fat_run_gpus_list(const fat_run_gpus *g, const unsigned char *member, char *out, size_t cap);

/* Stops every worker of G. */
void fat_run_gpus_stop(fat_run_gpus *g);
#endif
