/* SPDX-License-Identifier: MIT */
/* On a GPU, through the worker as the tuner asks for them: the ceilings
 * job's tensor-core rates. On a Hopper GPU (sm_90a) the wgmma m64n256k16
 * rates of both dtypes, operands in shared memory (SS) and A in registers
 * (RS), are finite, above the mma.sync rate of the same dtype measured in
 * the same job (wgmma is the instruction that reaches Hopper's peak) and
 * below what the SMs could do at their highest clock
 * (HOPPER_DENSE_FLOPS_PER_CLOCK_SM); their median is of FAT_CEILING_REPS
 * runs. On any other GPU nothing of wgmma is measured (every wgmma rate is
 * 0). The rates are printed, for the notes. Exits 77 (skipped) when no CUDA
 * driver or device is present. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "compile.h"
#include "cuda_api.h"
#include "worker.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define TEST_TIMEOUT_S 120.0
#define TERA 1e12
#define KHZ 1e3
/* Hopper's dense fp16/bf16 tensor rate: 1024 multiply-adds a clock on each
 * of an SM's four tensor cores (H100 whitepaper: 989.4 TFLOP/s at 1830 MHz
 * on 132 SMs), 4096 FLOPs an SM a clock. */
#define HOPPER_DENSE_FLOPS_PER_CLOCK_SM 4096.0

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  fat_worker_options opts;
  fat_worker *w = NULL;
  fat_gpu_info info;
  char arch[16], err[ERRLEN], reason[ERRLEN];
  fat_worker_options_default(&opts);
  opts.timeout_base_s = TEST_TIMEOUT_S;
  int started = fat_worker_start(0, &opts, &w, &info, err, sizeof err);
  if (started != FAT_GPU_OPENED) return gpu_open_failed(started, err);
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);
  printf("%s, %s, %d SMs, %d MHz at most\n", info.name, arch, info.sm_count, info.clock_khz / 1000);

  fat_ceilings c;
  int st = fat_worker_measure_ceilings(w, &c, reason, sizeof reason);
  if (st != FAT_WORKER_OK) fprintf(stderr, "ceilings: %s\n", reason);
  REQUIRE(st == FAT_WORKER_OK);
  CHECK_INT(c.reps, FAT_CEILING_REPS);
  const double mma[2] = {c.mma_fp16_flops_per_s, c.mma_bf16_flops_per_s};
  for (int t = FAT_FP16; t <= FAT_BF16; t++)
    printf("%s: mma.sync %.1f TFLOP/s, wgmma %.1f TFLOP/s (A in registers %.1f)\n",
           fat_dtype_name((fat_dtype)t), mma[t] / TERA, c.wgmma_flops_per_s[t] / TERA,
           c.wgmma_rs_flops_per_s[t] / TERA);
  if (!fat_arch_has_wgmma(arch)) {
    for (int t = FAT_FP16; t <= FAT_BF16; t++) {
      CHECK_DBL(c.wgmma_flops_per_s[t], 0);
      CHECK_DBL(c.wgmma_rs_flops_per_s[t], 0);
    }
    goto out;
  }
  const double bound = HOPPER_DENSE_FLOPS_PER_CLOCK_SM * info.sm_count * info.clock_khz * KHZ;
  printf("bound: %.1f TFLOP/s\n", bound / TERA);
  for (int t = FAT_FP16; t <= FAT_BF16; t++) {
    const double rates[2] = {c.wgmma_flops_per_s[t], c.wgmma_rs_flops_per_s[t]};
    for (int k = 0; k < 2; k++) {
      CHECK_WHY(isfinite(rates[k]) && rates[k] > mma[t] && rates[k] < bound,
                "%s wgmma %s: %.1f TFLOP/s, mma.sync %.1f, bound %.1f", fat_dtype_name((fat_dtype)t),
                k ? "RS" : "SS", rates[k] / TERA, mma[t] / TERA, bound / TERA);
    }
  }
out:
  fat_worker_stop(w);
  return check_summary("test_gpu_ceilings");
}
