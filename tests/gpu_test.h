/* SPDX-License-Identifier: MIT */
/* What the GPU tests share beyond check.h: their exit status when the
 * machine has no GPU, and the decision that leads to it. Header-only. */
#ifndef FAT_TESTS_GPU_TEST_H
#define FAT_TESTS_GPU_TEST_H

#include <stdio.h>
#include <string.h>
#include "cuda_api.h"

/* ctest's "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define SKIP 77

/* The exit status of a GPU test whose device did not open, ERR saying why
 * (printed): SKIP where there is no CUDA driver or no device, as on CI's
 * machines; 1 for any other failure, which a GPU machine must not hide. */
static inline int gpu_open_failed(const char *err) {
  printf("skipped: %s\n", err);
  if (!strncmp(err, FAT_CUDA_NO_DRIVER, strlen(FAT_CUDA_NO_DRIVER)) ||
      !strncmp(err, "no CUDA device", strlen("no CUDA device")))
    return SKIP;
  return 1;
}

#endif
