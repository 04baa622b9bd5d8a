/* SPDX-License-Identifier: MIT */
/* Loading the CUDA driver with dlopen and naming its errors. The worker
 * process is the only caller in the tuner; see cuda_api.h for why. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_api.h"
#include "elf_check.h"

/* The real symbol of an entry point: cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2, and stringifying after expansion yields that name. */
#define SYMBOL_NAME_(x) #x
#define SYMBOL_NAME(x) SYMBOL_NAME_(x)

static const char *const default_candidates[] = {"libcuda.so.1", "libcuda.so"};
#define N_DEFAULT_CANDIDATES (sizeof default_candidates / sizeof default_candidates[0])

static int resolve_all(fat_cuda *cu, char *err, size_t errlen) {
  /* One line per entry point; the first missing one is named. A fallback
   * already stored in a field survives when the preferred symbol is absent. */
#define RESOLVE(fn)                                                               \
  do {                                                                            \
    void *sym_ = dlsym(cu->handle, SYMBOL_NAME(fn));                              \
    if (sym_) *(void **)&cu->fn = sym_;                                           \
    if (!cu->fn) {                                                                \
      snprintf(err, errlen, FAT_CUDA_NO_DRIVER ": %s lacks the entry point %s",   \
               cu->path, SYMBOL_NAME(fn));                                        \
      return -1;                                                                  \
    }                                                                             \
  } while (0)
  RESOLVE(cuInit);
  RESOLVE(cuDriverGetVersion);
  RESOLVE(cuGetErrorName);
  RESOLVE(cuGetErrorString);
  RESOLVE(cuDeviceGetCount);
  RESOLVE(cuDeviceGet);
  RESOLVE(cuDeviceGetName);
  RESOLVE(cuDeviceGetAttribute);
  RESOLVE(cuDeviceTotalMem);
  RESOLVE(cuDevicePrimaryCtxRetain);
  RESOLVE(cuDevicePrimaryCtxRelease);
  RESOLVE(cuCtxSetCurrent);
  RESOLVE(cuCtxGetCurrent);
  RESOLVE(cuCtxSynchronize);
  RESOLVE(cuMemGetInfo);
  RESOLVE(cuMemAlloc);
  RESOLVE(cuMemFree);
  RESOLVE(cuMemcpyHtoD);
  RESOLVE(cuMemcpyDtoH);
  RESOLVE(cuMemcpyDtoDAsync);
  RESOLVE(cuMemsetD8);
  RESOLVE(cuMemsetD32);
  RESOLVE(cuMemsetD8Async);
  RESOLVE(cuMemsetD32Async);
  RESOLVE(cuModuleLoadData);
  RESOLVE(cuModuleUnload);
  RESOLVE(cuModuleGetFunction);
  RESOLVE(cuFuncSetAttribute);
  RESOLVE(cuFuncGetAttribute);
  RESOLVE(cuLaunchKernel);
  RESOLVE(cuTensorMapEncodeTiled);
  RESOLVE(cuEventCreate);
  RESOLVE(cuEventRecord);
  RESOLVE(cuEventSynchronize);
  /* cuEventElapsedTime_v2 (CUDA 12.8+) keeps the original signature; a
   * driver older than the headers has only the original name. */
  *(void **)&cu->cuEventElapsedTime = dlsym(cu->handle, "cuEventElapsedTime");
  RESOLVE(cuEventElapsedTime);
  RESOLVE(cuEventDestroy);
  RESOLVE(cuStreamCreate);
  RESOLVE(cuStreamSynchronize);
  RESOLVE(cuStreamDestroy);
#undef RESOLVE
  return 0;
}

int fat_cuda_load(fat_cuda *out, char *err, size_t errlen) {
  int rc = -1;
  const char *override = getenv("FATUNE_LIBCUDA");
  const char *const *candidates = default_candidates;
  size_t n = N_DEFAULT_CANDIDATES;
  const char *first_name = NULL;
  char first_error[FAT_CUDA_PATH_MAX] = "";

  memset(out, 0, sizeof *out);
  if (override && *override) {
    candidates = &override;
    n = 1;
  }
  for (size_t i = 0; i < n && !out->handle; i++) {
    char damaged[FAT_CUDA_PATH_MAX];
    /* A truncated file would raise SIGBUS inside dlopen. */
    if (fat_library_check(candidates[i], damaged, sizeof damaged)) {
      if (!first_name) {
        first_name = candidates[i];
        snprintf(first_error, sizeof first_error, "%s", damaged);
      }
      continue;
    }
    out->handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (out->handle) {
      snprintf(out->path, sizeof out->path, "%s", candidates[i]);
    } else if (!first_name) {
      /* The first failure is the one worth reading: later names are
       * fallbacks for unusual installs. */
      const char *why = dlerror();
      first_name = candidates[i];
      snprintf(first_error, sizeof first_error, "%s", why ? why : "unknown dlopen error");
    }
  }
  if (!out->handle) {
    snprintf(err, errlen, FAT_CUDA_NO_DRIVER ": could not load %s (%s)", first_name, first_error);
    goto out;
  }
  if (resolve_all(out, err, errlen)) goto out;
  rc = 0;
out:
  if (rc) fat_cuda_unload(out);
  return rc;
}

void fat_cuda_unload(fat_cuda *cu) {
  if (cu->handle) dlclose(cu->handle);
  memset(cu, 0, sizeof *cu);
}

const char *fat_cuda_result_text(const fat_cuda *cu, CUresult r, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (cu && cu->cuGetErrorName && cu->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (cu && cu->cuGetErrorString && cu->cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  if (name && text)
    snprintf(buf, len, "%s: %s", name, text);
  else
    snprintf(buf, len, "CUresult %d", (int)r);
  return buf;
}

int fat_cuda_result_is_sticky(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:     /* the memory itself is suspect */
    case CUDA_ERROR_ILLEGAL_ADDRESS:       /* a kernel touched memory it does not own */
    case CUDA_ERROR_LAUNCH_TIMEOUT:        /* the display watchdog killed a kernel */
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ASSERT:                /* device-side assert() */
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:   /* includes asm("trap;") */
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:         /* any other exception during a launch */
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_UNKNOWN:               /* nothing known: assume the worst */
      return 1;
    default:
      return 0;
  }
}
