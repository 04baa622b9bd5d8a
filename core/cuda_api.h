/* SPDX-License-Identifier: MIT */
/* The CUDA driver API, loaded at run time with dlopen and never linked, so
 * that fatune starts, generates and compiles on a machine with no GPU and
 * says exactly what it looked for when a step needs one. Only the worker
 * process (worker.c) and GPU tests load it: the tuner's parent process never
 * initialises CUDA. cuda.h is included for its types only. */
#ifndef FAT_CUDA_API_H
#define FAT_CUDA_API_H
#include <stddef.h>
#include <cuda.h>

#define FAT_CUDA_PATH_MAX 512

/* Each entry point keeps the type cuda.h gives the name the toolkit maps it
 * to (cuMemAlloc is cuMemAlloc_v2), and is resolved under that real symbol,
 * so the ABI versions can never drift apart from the prototypes. */
#define FAT_CUDA_FN(name) __typeof__(name) *name
typedef struct fat_cuda {
  void *handle;                  /* dlopen handle */
  char path[FAT_CUDA_PATH_MAX];  /* the name or path that loaded */
  FAT_CUDA_FN(cuInit);
  FAT_CUDA_FN(cuDriverGetVersion);
  FAT_CUDA_FN(cuGetErrorName);
  FAT_CUDA_FN(cuGetErrorString);
  FAT_CUDA_FN(cuDeviceGetCount);
  FAT_CUDA_FN(cuDeviceGet);
  FAT_CUDA_FN(cuDeviceGetName);
  FAT_CUDA_FN(cuDeviceGetAttribute);
  FAT_CUDA_FN(cuDeviceTotalMem);
  FAT_CUDA_FN(cuDevicePrimaryCtxRetain);
  FAT_CUDA_FN(cuDevicePrimaryCtxRelease);
  FAT_CUDA_FN(cuCtxSetCurrent);
  FAT_CUDA_FN(cuCtxGetCurrent);  /* libfatune restores the caller's context with it */
  FAT_CUDA_FN(cuCtxSynchronize);
  FAT_CUDA_FN(cuMemGetInfo);
  FAT_CUDA_FN(cuMemAlloc);
  FAT_CUDA_FN(cuMemFree);
  FAT_CUDA_FN(cuMemcpyHtoD);
  FAT_CUDA_FN(cuMemcpyDtoH);
  FAT_CUDA_FN(cuMemcpyDtoDAsync);
  FAT_CUDA_FN(cuMemsetD8);
  FAT_CUDA_FN(cuMemsetD32);
  FAT_CUDA_FN(cuMemsetD8Async);
  FAT_CUDA_FN(cuMemsetD32Async);
  FAT_CUDA_FN(cuModuleLoadData);
  FAT_CUDA_FN(cuModuleUnload);
  FAT_CUDA_FN(cuModuleGetFunction);
  FAT_CUDA_FN(cuFuncSetAttribute);
  FAT_CUDA_FN(cuFuncGetAttribute);
  FAT_CUDA_FN(cuLaunchKernel);
  FAT_CUDA_FN(cuTensorMapEncodeTiled);  /* the TMA families' tensor maps (fwd_launch.c) */
  FAT_CUDA_FN(cuEventCreate);
  FAT_CUDA_FN(cuEventRecord);
  FAT_CUDA_FN(cuEventSynchronize);
  FAT_CUDA_FN(cuEventElapsedTime);
  FAT_CUDA_FN(cuEventDestroy);
  FAT_CUDA_FN(cuStreamCreate);
  FAT_CUDA_FN(cuStreamSynchronize);
  FAT_CUDA_FN(cuStreamDestroy);
} fat_cuda;
#undef FAT_CUDA_FN

/* Message prefix of every "no driver" failure; GPU tests skip on it. */
#define FAT_CUDA_NO_DRIVER "no CUDA driver"

/* Loads the driver into OUT: $FATUNE_LIBCUDA alone when set (so a test can
 * point it at a missing file even on a GPU machine), else "libcuda.so.1",
 * then "libcuda.so". Does not call cuInit. Returns 0, or -1 with err
 * "no CUDA driver: could not load libcuda.so.1 (<dlerror>)" or naming the
 * entry point the library lacks. */
int fat_cuda_load(fat_cuda *out, char *err, size_t errlen);

/* Closes what fat_cuda_load opened (safe on a zeroed struct). */
void fat_cuda_unload(fat_cuda *cu);

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
 * for R, written into BUF (LEN bytes) and returned. Falls back to
 * "CUresult 999" when the driver does not know the code (or CU is NULL). */
const char *fat_cuda_result_text(const fat_cuda *cu, CUresult r, char *buf, size_t len);

/* 1 when R leaves the context unusable (a kernel faulted, trapped or timed
 * out): every later call fails the same way, so the process must report and
 * exit. 0 for errors that concern only the call that returned them (an
 * invalid launch configuration, a cubin for the wrong GPU, out of memory). */
int fat_cuda_result_is_sticky(CUresult r);
#endif
