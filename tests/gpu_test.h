/* SPDX-License-Identifier: MIT */
/* What the GPU tests share beyond check.h: their exit status when the
 * machine has no GPU, and the decision that leads to it; finding a variant
 * of a generated space by name, and compiling and loading it. Header-only. */
#ifndef FAT_TESTS_GPU_TEST_H
#define FAT_TESTS_GPU_TEST_H

#include <stdio.h>
#include <string.h>
#include "compile.h"
#include "cuda_api.h"
#include "fwd_launch.h"
#include "gpu_run.h"
#include "types.h"

/* ctest's "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define SKIP 77

/* The exit status of a GPU test whose device did not open, ERR saying why
 * (printed): SKIP where there is no CUDA driver or no device, as on CI's
 * machines; 1 for any other failure, which a GPU machine must not hide. */
static inline int gpu_open_failed(int status, const char *err) {
  printf("skipped: %s\n", err);
  return fat_gpu_absent(status) ? SKIP : 1;
}

/* The variant of SPACE (N of them) named NAME, or NULL. */
static inline const fat_variant *gpu_test_variant(const fat_variant *space, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(space[i].name, name)) return &space[i];
  return NULL;
}

/* Compiles V for ARCH into B (zeroed first: the caller frees it either way)
 * and loads it on G as K. 0, or -1 with ERR (CAP bytes) saying why. */
static inline int gpu_test_load(fat_gpu *g, const fat_variant *v, const char *arch, fat_build *b,
                                fat_gpu_kernel *k, char *err, size_t cap) {
  fat_kernel_desc d;
  memset(b, 0, sizeof *b);
  if (fat_compile_one(v->name, v->source, arch, b, err, cap)) return -1;
  if (!b->ok) {
    snprintf(err, cap, "%s: %.2000s", v->name, b->log ? b->log : "");
    return -1;
  }
  if (fat_kernel_describe(v, b, &d, err, cap)) return -1;
  return fat_gpu_kernel_load(g, &d, k, err, cap) == FAT_GPU_OK ? 0 : -1;
}

/* gpu_test_load of SPACE's variant NAME; -1 with ERR where SPACE has none. */
static inline int gpu_test_load_named(fat_gpu *g, const fat_variant *space, size_t n, const char *name,
                                      const char *arch, fat_build *b, fat_gpu_kernel *k, char *err,
                                      size_t cap) {
  const fat_variant *v = gpu_test_variant(space, n, name);
  if (!v) {
    memset(b, 0, sizeof *b);
    snprintf(err, cap, "%s is not in the space", name);
    return -1;
  }
  return gpu_test_load(g, v, arch, b, k, err, cap);
}

#endif
