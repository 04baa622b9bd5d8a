/* SPDX-License-Identifier: MIT */
/* The stand-in CUDA driver (stand_in_cuda.c) for the runtime's tests that
 * launch without a GPU: tests/CMakeLists.txt names it in
 * FATUNE_STAND_IN_CUDA, and libfatune loads what FATUNE_LIBCUDA names.
 * Header-only, as check.h. */
#ifndef FAT_TESTS_STAND_IN_H
#define FAT_TESTS_STAND_IN_H

#include <stdio.h>
#include <stdlib.h>

/* Makes the stand-in driver libfatune's: its path (for dlopen of its
 * records), or NULL, said on stderr, when the test was started without
 * one. */
static inline const char *use_stand_in_driver(void) {
  const char *driver = getenv("FATUNE_STAND_IN_CUDA");
  if (!driver || !*driver) {
    fprintf(stderr, "FATUNE_STAND_IN_CUDA must name the stand-in driver (tests/CMakeLists.txt "
            "sets it)\n");
    return NULL;
  }
  setenv("FATUNE_LIBCUDA", driver, 1);
  return driver;
}

#endif
