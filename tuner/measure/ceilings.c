/* SPDX-License-Identifier: MIT */
/* The ceilings job: the GPU's copy bandwidth and mma.sync fp16 and bf16
 * rates, measured with the microbenchmarks of templates/ceilings.cu, and on
 * Hopper (sm_90a) the wgmma m64n256k16 rates of templates/ceilings_wgmma90.cu
 * (the parent compiles them: device.c), for the roofline floors of explain
 * and report and the tuner's fraction of the peak. */
#include <stdlib.h>
#include <string.h>
#include "gpu_run_int.h"
#include "stats.h"

#define COPY_ENTRY "fat_ceiling_copy"
#define MMA_F16_ENTRY "fat_ceiling_mma_f16"
#define MMA_BF16_ENTRY "fat_ceiling_mma_bf16"
#define WGMMA_SS_ENTRY "fat_ceiling_wgmma_ss"
#define WGMMA_RS_ENTRY "fat_ceiling_wgmma_rs"

/* Ceilings. The copy runs a full GPU of 256-thread blocks (2048 resident
 * threads per SM); the mma loop 4 blocks of 8 warps per SM, 32 warps each
 * with independent accumulators, enough to keep every tensor core busy. */
#define CEIL_THREADS 256
#define CEIL_COPY_BLOCKS_PER_SM 8
#define CEIL_MMA_BLOCKS_PER_SM 4
#define CEIL_MMA_ITERS 16384            /* about 10 ms per run at 600 TFLOP/s on 132 SMs */
#define CEIL_VECTOR_BYTES 16            /* one uint4 */
#define CEIL_COPY_DIRECTIONS 2          /* every byte is read once and written once */
/* 2^-6 twice per 32-bit register: 16-term dot products of 2^-12 summed
 * CEIL_MMA_ITERS times stay small and finite in fp32. */
#define CEIL_F16_BITS 0x24002400u
#define CEIL_BF16_BITS 0x3c803c80u
/* wgmma: one block an SM (its warpgroups' 128 accumulators a thread leave
 * room for no second), of the block size the kernel declares
 * (__launch_bounds__, read back from the cubin rather than copied here). */
#define CEIL_WGMMA_BLOCKS_PER_SM 1
#define CEIL_WGMMA_ITERS 16384          /* about 11 ms per run at 800 TFLOP/s on 132 SMs */
#define CEIL_WGMMA_SEED 0x2545f491u     /* any: the operands' noise */

/* ---- ceilings ------------------------------------------------------- */

/* Median of REPS event-timed launches of FN (BLOCKS of THREADS) after
 * WARMUP untimed ones. */
static int time_launches(fat_gpu *g, CUfunction fn, unsigned blocks, unsigned threads, void **args,
                         int reps, int warmup, const char *what, double *median_ms, char *err,
                         size_t errlen) {
  int rc = FAT_GPU_OK;
  CUevent start = NULL, stop = NULL;
  double *ms = malloc((size_t)reps * sizeof *ms);
  fat_stats st;
  if (!ms) {
    snprintf(err, errlen, "out of host memory timing %s", what);
    return FAT_GPU_FAILED;
  }
  CU(g->cu.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  CU(g->cu.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int w = 0; w < warmup; w++)
    CU(g->cu.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, g->stream, args, NULL),
       "warm-up launch of %s", what);
  for (int r = 0; r < reps; r++) {
    float elapsed;
    CU(g->cu.cuEventRecord(start, g->stream), "cuEventRecord");
    CU(g->cu.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, g->stream, args, NULL),
       "launching %s", what);
    CU(g->cu.cuEventRecord(stop, g->stream), "cuEventRecord");
    CU(g->cu.cuEventSynchronize(stop), "running %s", what);
    CU(g->cu.cuEventElapsedTime(&elapsed, start, stop), "cuEventElapsedTime");
    ms[r] = elapsed;
  }
  if (fat_stats_compute(ms, (size_t)reps, &st) || !(st.median > 0)) {
    snprintf(err, errlen, "timings of %s are not positive numbers", what);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  *median_ms = st.median;
out:
  if (start) g->cu.cuEventDestroy(start);
  if (stop) g->cu.cuEventDestroy(stop);
  free(ms);
  return rc;
}

/* FLOP/s of one tensor-core microbenchmark FN (BLOCKS of THREADS, its
 * arguments ARGS with the FLOP counter FLOPS among them): the FLOPs its
 * warps counted over every launch, per launch, over the median time. */
static int flop_rate(fat_gpu *g, CUfunction fn, const char *what, unsigned blocks, unsigned threads,
                     void **args, CUdeviceptr flops, int reps, int warmup, double *rate, char *err,
                     size_t errlen) {
  int rc = FAT_GPU_OK;
  unsigned long long counted = 0;
  double ms = 0;
  CU(g->cu.cuMemsetD8Async(flops, 0, sizeof counted, g->stream), "clearing the FLOP counter");
  if ((rc = time_launches(g, fn, blocks, threads, args, reps, warmup, what, &ms, err, errlen)) !=
      FAT_GPU_OK)
    goto out;
  if ((rc = fat_gpu_download(g, &counted, flops, sizeof counted, err, errlen)) != FAT_GPU_OK) goto out;
  *rate = (double)counted / (reps + warmup) / (ms / MS_PER_S);
out:
  return rc;
}

/* The mma.sync rate of FN, its operands' bits BITS. */
static int mma_rate(fat_gpu *g, CUfunction fn, const char *what, unsigned bits, CUdeviceptr sink,
                    CUdeviceptr flops, int reps, int warmup, double *rate, char *err,
                    size_t errlen) {
  int iters = CEIL_MMA_ITERS;
  unsigned a_bits = bits, b_bits = bits;
  void *args[] = {&sink, &flops, &a_bits, &b_bits, &iters};
  return flop_rate(g, fn, what, (unsigned)g->info.sm_count * CEIL_MMA_BLOCKS_PER_SM, CEIL_THREADS,
                   args, flops, reps, warmup, rate, err, errlen);
}

/* The wgmma rates of one dtype's cubin: SS into *SS_RATE, RS into *RS_RATE. */
static int wgmma_rates(fat_gpu *g, const void *cubin, const char *dtype, int reps, int warmup,
                       double *ss_rate, double *rs_rate, char *err, size_t errlen) {
  int rc = FAT_GPU_OK, threads = 0, iters = CEIL_WGMMA_ITERS;
  unsigned seed = CEIL_WGMMA_SEED;
  CUmodule module = NULL;
  CUfunction ss_fn, rs_fn;
  CUdeviceptr sink = 0, flops = 0;
  char what[2][64];
  snprintf(what[0], sizeof what[0], "%s (%s)", WGMMA_SS_ENTRY, dtype);
  snprintf(what[1], sizeof what[1], "%s (%s)", WGMMA_RS_ENTRY, dtype);
  CU(g->cu.cuModuleLoadData(&module, cubin), "loading %s for %s", CEILINGS_WGMMA_PATH, dtype);
  CU(g->cu.cuModuleGetFunction(&ss_fn, module, WGMMA_SS_ENTRY), "%s", WGMMA_SS_ENTRY);
  CU(g->cu.cuModuleGetFunction(&rs_fn, module, WGMMA_RS_ENTRY), "%s", WGMMA_RS_ENTRY);
  CU(g->cu.cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, ss_fn),
     "the block size of %s", WGMMA_SS_ENTRY);
  const unsigned blocks = (unsigned)g->info.sm_count * CEIL_WGMMA_BLOCKS_PER_SM;
  CU(g->cu.cuMemAlloc(&sink, (size_t)blocks * (unsigned)threads * sizeof(float)),
     "cuMemAlloc of the wgmma sink");
  CU(g->cu.cuMemAlloc(&flops, sizeof(unsigned long long)), "cuMemAlloc of the FLOP counter");
  void *args[] = {&sink, &flops, &seed, &iters};
  if ((rc = flop_rate(g, ss_fn, what[0], blocks, (unsigned)threads, args, flops, reps, warmup,
                      ss_rate, err, errlen)) == FAT_GPU_OK)
    rc = flop_rate(g, rs_fn, what[1], blocks, (unsigned)threads, args, flops, reps, warmup, rs_rate,
                   err, errlen);
out:
  if (rc != FAT_GPU_FATAL) {
    if (sink) g->cu.cuMemFree(sink);
    if (flops) g->cu.cuMemFree(flops);
    if (module) g->cu.cuModuleUnload(module);
  }
  return rc;
}

int fat_gpu_measure_ceilings(fat_gpu *g, const void *cubin, const void *const wgmma_cubin[2],
                             int reps, int warmup, fat_ceilings *out, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  CUmodule module = NULL;
  CUfunction copy_fn, f16_fn, bf16_fn;
  CUdeviceptr src = 0, dst = 0, sink = 0, flops = 0;
  double copy_ms = 0;

  memset(out, 0, sizeof *out);
  if (reps < 1 || warmup < 0) {
    snprintf(err, errlen, "ceilings need at least one run (got %d runs, %d warm-up)", reps, warmup);
    return FAT_GPU_FAILED;
  }
  CU(g->cu.cuModuleLoadData(&module, cubin), "loading %s", CEILINGS_PATH);
  CU(g->cu.cuModuleGetFunction(&copy_fn, module, COPY_ENTRY), "%s", COPY_ENTRY);
  CU(g->cu.cuModuleGetFunction(&f16_fn, module, MMA_F16_ENTRY), "%s", MMA_F16_ENTRY);
  CU(g->cu.cuModuleGetFunction(&bf16_fn, module, MMA_BF16_ENTRY), "%s", MMA_BF16_ENTRY);

  /* Copy: buffers several times the L2, so the copy measures DRAM. */
  unsigned long long bytes = (unsigned long long)FAT_CEILING_L2_FACTOR * (unsigned)g->info.l2_bytes;
  if (bytes < FAT_CEILING_MIN_COPY_BYTES) bytes = FAT_CEILING_MIN_COPY_BYTES;
  bytes -= bytes % CEIL_VECTOR_BYTES;
  unsigned long long n = bytes / CEIL_VECTOR_BYTES;
  CU(g->cu.cuMemAlloc(&src, (size_t)bytes), "cuMemAlloc of the copy source, %llu bytes", bytes);
  CU(g->cu.cuMemAlloc(&dst, (size_t)bytes), "cuMemAlloc of the copy destination, %llu bytes", bytes);
  CU(g->cu.cuMemsetD32Async(src, 0, (size_t)(bytes / sizeof(uint32_t)), g->stream), "filling the copy source");
  void *copy_args[] = {&src, &dst, &n};
  if ((rc = time_launches(g, copy_fn, (unsigned)g->info.sm_count * CEIL_COPY_BLOCKS_PER_SM,
                          CEIL_THREADS, copy_args, reps, warmup, COPY_ENTRY, &copy_ms, err,
                          errlen)) != FAT_GPU_OK)
    goto out;
  out->copy_bytes = bytes;
  out->copy_bytes_per_s = (double)CEIL_COPY_DIRECTIONS * (double)bytes / (copy_ms / MS_PER_S);

  /* mma.sync: one sink float per thread, one FLOP counter. */
  size_t sink_bytes = (size_t)g->info.sm_count * CEIL_MMA_BLOCKS_PER_SM * CEIL_THREADS * sizeof(float);
  CU(g->cu.cuMemAlloc(&sink, sink_bytes), "cuMemAlloc of the mma sink");
  CU(g->cu.cuMemAlloc(&flops, sizeof(unsigned long long)), "cuMemAlloc of the FLOP counter");
  if ((rc = mma_rate(g, f16_fn, MMA_F16_ENTRY, CEIL_F16_BITS, sink, flops, reps, warmup,
                     &out->mma_fp16_flops_per_s, err, errlen)) != FAT_GPU_OK ||
      (rc = mma_rate(g, bf16_fn, MMA_BF16_ENTRY, CEIL_BF16_BITS, sink, flops, reps, warmup,
                     &out->mma_bf16_flops_per_s, err, errlen)) != FAT_GPU_OK)
    goto out;

  /* wgmma, where the parent compiled it (sm_90a). */
  for (int t = FAT_FP16; t <= FAT_BF16; t++)
    if (wgmma_cubin[t] &&
        (rc = wgmma_rates(g, wgmma_cubin[t], fat_dtype_name((fat_dtype)t), reps, warmup,
                          &out->wgmma_flops_per_s[t], &out->wgmma_rs_flops_per_s[t], err,
                          errlen)) != FAT_GPU_OK)
      goto out;
  out->reps = reps;
out:
  if (rc != FAT_GPU_FATAL) {
    CUdeviceptr *all[] = {&src, &dst, &sink, &flops};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
      if (*all[i]) g->cu.cuMemFree(*all[i]);
    if (module) g->cu.cuModuleUnload(module);
  }
  return rc;
}
