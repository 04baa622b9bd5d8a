/* SPDX-License-Identifier: MIT */
/* What the GPU tests share beyond check.h: their exit status when the
 * machine has no GPU, and the decision that leads to it. Header-only. */
#ifndef FAT_TESTS_GPU_TEST_H
#define FAT_TESTS_GPU_TEST_H

#include <stdio.h>
#include <string.h>
#include "cuda_api.h"
#include "gpu_run.h"

/* ctest's "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define SKIP 77

/* The exit status of a GPU test whose device did not open, ERR saying why
 * (printed): SKIP where there is no CUDA driver or no device, as on CI's
 * machines; 1 for any other failure, which a GPU machine must not hide. */
static inline int gpu_open_failed(int status, const char *err) {
  printf("skipped: %s\n", err);
  return fat_gpu_absent(status) ? SKIP : 1;
}

#endif
