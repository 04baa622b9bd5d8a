/* SPDX-License-Identifier: MIT */
/* What the files of the worker's GPU work share (gpu_run.h is their public
 * header): the device handle's fields, the CU error macro, the constants
 * more than one of them uses, and the three functions one file lends
 * another. device.c opens the device and makes its buffers and random
 * inputs, reference.c runs the fp64 references, variant.c loads and
 * launches variants, check.c checks them, timing.c times them, ceilings.c
 * measures the GPU's ceilings. Nothing outside tuner/measure/ includes it. */
#ifndef FAT_GPU_RUN_INT_H
#define FAT_GPU_RUN_INT_H
#include <stdarg.h>
#include <stdio.h>
#include "gpu_run.h"
#include "progress.h"  /* fat_now_s, the tuner's one clock */
#include "ref_cache.h"

#define CEILINGS_PATH "templates/ceilings.cu"
#define CEILINGS_WGMMA_PATH "templates/ceilings_wgmma90.cu"
#define FILL_THREADS 256
#define FILL_MAX_BLOCKS 4096            /* grid-stride beyond this */
#define MS_PER_S 1e3
#define WHAT_MAX 512

enum { SEED_Q, SEED_K, SEED_V, SEED_DO, SEED_PAGES };  /* streams of one tensor set */

struct fat_gpu {
  fat_cuda cu;
  CUdevice dev;
  CUcontext ctx;       /* the primary context, retained */
  CUstream stream;
  fat_gpu_info info;
  int device_count;    /* devices the driver reports (cuDeviceGetCount) */
  CUmodule util_module, ref_module;
  CUfunction fill_fn, clock_fn, ref_fn;
  CUfunction fill_e4m3_amax_fn, fill_e4m3_fn;  /* templates/fat_util.cu's e4m3 inputs */
  CUfunction ref_bwd_round_fn, ref_bwd_rows_fn, ref_bwd_cols_fn;  /* templates/reference_bwd.cu */
  CUfunction diff_fn, count_diff_fn;  /* templates/fat_util.cu's comparisons (check.c) */
  CUfunction fingerprint_fn;          /* and its fingerprints of the kept references */
  CUdeviceptr diff_partials;  /* check.c's DIFF_BLOCKS x 5 doubles, then 1 + FAT_REF_DEV_ARRAYS
                               * u64; on first use */
  CUdeviceptr flush;   /* scratch overwritten to evict L2; allocated on first use */
  size_t flush_bytes;
  CUdeviceptr probe;   /* 2 u64 for fat_clock_probe */
  fat_ref_cache refs;  /* the fp64 references of recent check shapes (check.c) */
  void (*run_hook)(void *ctx);  /* fat_gpu_set_run_hook's (tests) */
  void *run_hook_ctx;
  double phase_s[FAT_PHASE_COUNT];  /* seconds in each phase since fat_gpu_take_phases */
};

/* Adds the time since *SINCE to phase P and restarts *SINCE: one call at
 * the end of each phase of a job. */
static inline void phase_lap(fat_gpu *g, fat_phase p, double *since) {
  const double now = fat_now_s();
  g->phase_s[p] += now - *since;
  *since = now;
}

/* "CUDA_ERROR_X: text (what)" into err; FATAL when R kills the context. */
static inline int cu_fail(const fat_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));
static inline int cu_fail(const fat_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt,
                          ...) {
  char what[WHAT_MAX], text[WHAT_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s (%s)", fat_cuda_result_text(&g->cu, r, text, sizeof text), what);
  return fat_cuda_result_is_sticky(r) ? FAT_GPU_FATAL : FAT_GPU_FAILED;
}

/* Runs CALL; on error sets rc from cu_fail and jumps to out. */
#define CU(call, ...)                                                \
  do {                                                               \
    CUresult r_ = (call);                                            \
    if (r_ != CUDA_SUCCESS) {                                        \
      rc = cu_fail(g, r_, err, errlen, __VA_ARGS__);                 \
      goto out;                                                      \
    }                                                                \
  } while (0)

static inline int require_support(const fat_gpu *g, char *err, size_t errlen) {
  if (g->ref_fn) return FAT_GPU_OK;
  snprintf(err, errlen, "support kernels not loaded (fat_gpu_load_support first)");
  return FAT_GPU_FAILED;
}

/* Launches the random fill of N elements of DST in DTYPE from SEED
 * (device.c; the backward's dO and the timing runs' O use it too). */
int fat_gpu_fill_one(fat_gpu *g, CUdeviceptr dst, size_t n, fat_dtype dtype, uint64_t seed,
                     const char *name, char *err, size_t errlen);
/* Launches a forward variant on T, asynchronously (variant.c). */
CUresult fat_gpu_launch_variant(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t);
/* The backward's O, lse and reference gradients (reference.c). */
int fat_gpu_bwd_reference(fat_gpu *g, fat_gpu_bwd_tensors *t, fat_mask mask, int gradients,
                          char *err, size_t errlen);
#endif
