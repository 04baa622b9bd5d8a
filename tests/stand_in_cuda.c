/* SPDX-License-Identifier: MIT */
/* A stand-in for the CUDA driver (libcuda.so.1), so that a CPU test can
 * drive libfatune's launch path -- the lookup, the module load, the
 * parameter block and the launch -- on a machine without a GPU: a test
 * points FATUNE_LIBCUDA at this library. It describes one H200 (compute
 * capability 9.0, 132 SMs), "loads" any image as a module that remembers
 * the image's text, and records each launch instead of running it. Device
 * memory is addresses handed out and never backed (an allocation, a
 * memset and a synchronisation succeed; a copy is refused), so that a
 * benchmark's loop runs here too; events are refused
 * (CUDA_ERROR_NOT_SUPPORTED). The test reads what
 * was launched through the stand_in_* functions at the end (dlsym on the
 * same path, which dlopen hands back as the same library). Each entry
 * point is defined under cuda.h's name, which maps it to the symbol the
 * runtime resolves (cuMemAlloc is cuMemAlloc_v2). */
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

#define STAND_IN_NAME "NVIDIA H200"
#define STAND_IN_CC_MAJOR 9
#define STAND_IN_CC_MINOR 0
#define STAND_IN_SMS 132
#define STAND_IN_SMEM_OPTIN 232448     /* an H200's opt-in shared memory per block */
#define STAND_IN_DRIVER 13000
#define STAND_IN_IMAGE_CAP 256         /* bytes of a module's image remembered */
#define STAND_IN_ENTRIES 8             /* entry points a module hands out */
#define STAND_IN_MEMORY_BASE (1ull << 40)  /* the first device address handed out */
#define STAND_IN_MEMORY_ALIGN 256ull       /* as cuMemAlloc's are, at least */

/* A loaded module: the text of its image, and its functions by name. */
typedef struct stand_in_fn {
  struct stand_in_module *module;
  char name[128];
} stand_in_fn;

typedef struct stand_in_module {
  char image[STAND_IN_IMAGE_CAP];
  stand_in_fn fns[STAND_IN_ENTRIES];
  int n_fns;
} stand_in_module;

static int primary_ctx;                   /* its address is the primary context */
static _Thread_local CUcontext current;   /* the driver's current context is per thread */
static unsigned long launches, modules_loaded;
static CUdeviceptr next_address = STAND_IN_MEMORY_BASE;
static const stand_in_fn *last_launched;

/* ---- what the test reads -------------------------------------------------- */

unsigned long stand_in_launches(void) { return launches; }
unsigned long stand_in_modules_loaded(void) { return modules_loaded; }

/* The image text of the module whose function was launched last ("" before
 * the first launch), and that function's name. */
const char *stand_in_last_image(void) { return last_launched ? last_launched->module->image : ""; }
const char *stand_in_last_entry(void) { return last_launched ? last_launched->name : ""; }

/* ---- the driver ---------------------------------------------------------- */

CUresult cuInit(unsigned int flags) {
  (void)flags;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
  *version = STAND_IN_DRIVER;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
  *name = error == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_NOT_SUPPORTED";
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  *text = error == CUDA_SUCCESS ? "no error" : "not supported by the stand-in driver";
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  (void)dev;
  strncpy(name, STAND_IN_NAME, (size_t)len - 1);
  name[len - 1] = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
  (void)dev;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = STAND_IN_CC_MAJOR; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = STAND_IN_CC_MINOR; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = STAND_IN_SMS; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = STAND_IN_SMEM_OPTIN; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  (void)dev;
  *bytes = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  (void)dev;
  *pctx = (CUcontext)&primary_ctx;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  (void)dev;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  current = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  *pctx = current;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = *total = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* Addresses only: nothing behind them is read or written. */
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes) {
  *dptr = next_address;
  next_address += (bytes + STAND_IN_MEMORY_ALIGN - 1) / STAND_IN_MEMORY_ALIGN * STAND_IN_MEMORY_ALIGN;
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr) {
  (void)dptr;
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  (void)dst, (void)value, (void)n;
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t n) {
  (void)dst, (void)value, (void)n;
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  (void)dst, (void)value, (void)n, (void)stream;
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream) {
  (void)dst, (void)value, (void)n, (void)stream;
  return CUDA_SUCCESS;
}

/* The image is the test's stand-in cubin: text, of which the first
 * STAND_IN_IMAGE_CAP - 1 bytes are kept. */
CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  stand_in_module *m = calloc(1, sizeof *m);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  strncpy(m->image, image, sizeof m->image - 1);
  modules_loaded++;
  *module = (CUmodule)m;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  free(module);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name) {
  stand_in_module *m = (stand_in_module *)module;
  if (m->n_fns == STAND_IN_ENTRIES) return CUDA_ERROR_NOT_FOUND;
  stand_in_fn *f = &m->fns[m->n_fns++];
  f->module = m;
  strncpy(f->name, name, sizeof f->name - 1);
  *fn = (CUfunction)f;
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attrib, int value) {
  (void)fn, (void)attrib, (void)value;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attrib, CUfunction fn) {
  (void)attrib, (void)fn;
  *value = 0;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z,
                        unsigned int smem_bytes, CUstream stream, void **params, void **extra) {
  (void)grid_x, (void)grid_y, (void)grid_z, (void)block_x, (void)block_y, (void)block_z;
  (void)smem_bytes, (void)stream, (void)params, (void)extra;
  last_launched = (const stand_in_fn *)f;
  launches++;
  return CUDA_SUCCESS;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                void *address, const cuuint64_t *dims, const cuuint64_t *strides,
                                const cuuint32_t *box, const cuuint32_t *element_strides,
                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill) {
  (void)type, (void)rank, (void)address, (void)dims, (void)strides, (void)box;
  (void)element_strides, (void)interleave, (void)swizzle, (void)l2, (void)fill;
  memset(map, 0, sizeof *map);
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
  (void)flags;
  *event = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  (void)event, (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuEventSynchronize(CUevent event) {
  (void)event;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  (void)start, (void)end;
  *ms = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuEventDestroy(CUevent event) {
  (void)event;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  (void)flags;
  *stream = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream stream) {
  (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;
}
