/* SPDX-License-Identifier: MIT */
/* A stand-in for the CUDA driver (libcuda.so.1), so that a CPU test can
 * drive libfatune's launch path -- the lookup, the module load, the
 * parameter block and the launch -- on a machine without a GPU: a test
 * points FATUNE_LIBCUDA at this library. It describes one H200 (compute
 * capability 9.0, 132 SMs), or the devices FATUNE_STAND_IN_DEVICES lists
 * (kinds, comma-separated: "h200,h200,a100"; an unknown kind or a list
 * longer than STAND_IN_MAX_DEVICES fails cuInit), "loads" any image as a
 * module that remembers the image's text, and records each launch instead
 * of running it. Device memory is addresses handed out and never backed
 * (an allocation, a memset and a synchronisation succeed; a copy is
 * refused), so that a benchmark's loop runs here too, and so does the
 * tuner's worker up to its first copy back: it opens its device (a stream
 * is a handle handed out), loads its support kernels and has every check
 * refused, as a job the worker could not run; events are refused
 * (CUDA_ERROR_NOT_SUPPORTED). FATUNE_STAND_IN_LOSE=INDEX:PATH loses device
 * INDEX as a GPU that falls off the bus does: the first kernel launched on
 * it creates PATH and kills the process (SIGKILL), and once PATH exists
 * cuInit finds no device. The test reads what
 * was launched through the stand_in_* functions at the end (dlsym on the
 * same path, which dlopen hands back as the same library). Each entry
 * point is defined under cuda.h's name, which maps it to the symbol the
 * runtime resolves (cuMemAlloc is cuMemAlloc_v2). */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda.h>

#define STAND_IN_DRIVER 13000
#define STAND_IN_DEVICES_ENV "FATUNE_STAND_IN_DEVICES"
#define STAND_IN_LOSE_ENV "FATUNE_STAND_IN_LOSE"
#define STAND_IN_MAX_DEVICES 16
#define STAND_IN_KIND_MAX 16           /* characters of a kind's name, at most */
#define STAND_IN_IMAGE_CAP 256         /* bytes of a module's image remembered */
#define STAND_IN_ENTRIES 8             /* entry points a module hands out */
#define STAND_IN_MEMORY_BASE (1ull << 40)  /* the first device address handed out */
#define STAND_IN_MEMORY_ALIGN 256ull       /* as cuMemAlloc's are, at least */

/* A kind of GPU the stand-in describes. */
typedef struct stand_in_kind {
  const char *kind;       /* its name in FATUNE_STAND_IN_DEVICES */
  const char *name;       /* cuDeviceGetName's */
  int cc_major, cc_minor, sms;
  int smem_optin;         /* opt-in shared memory per block */
  size_t mem_bytes;
  int clock_khz, mem_clock_khz;
} stand_in_kind;

static const stand_in_kind kinds[] = {
  {"h200", "NVIDIA H200", 9, 0, 132, 232448, 143771533312ull, 1980000, 3201000},
  {"h100", "NVIDIA H100 80GB HBM3", 9, 0, 132, 232448, 85029158912ull, 1980000, 2619000},
  {"a100", "NVIDIA A100-SXM4-80GB", 8, 0, 108, 166912, 85097971712ull, 1410000, 1593000},
};
#define N_KINDS (int)(sizeof kinds / sizeof kinds[0])

/* The devices, read from the environment on cuInit; one H200 without it. */
static const stand_in_kind *devices[STAND_IN_MAX_DEVICES];
static int n_devices;

/* Fills DEVICES from FATUNE_STAND_IN_DEVICES. Returns 0, or -1 for an
 * unknown kind, an empty item or too many devices. */
static int read_devices(void) {
  const char *list = getenv(STAND_IN_DEVICES_ENV);
  n_devices = 0;
  if (!list || !*list) {
    devices[n_devices++] = &kinds[0];
    return 0;
  }
  for (const char *p = list;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const stand_in_kind *k = NULL;
    for (int i = 0; i < N_KINDS && len < STAND_IN_KIND_MAX; i++)
      if (strlen(kinds[i].kind) == len && !strncmp(kinds[i].kind, p, len)) k = &kinds[i];
    if (!k || n_devices == STAND_IN_MAX_DEVICES) return -1;
    devices[n_devices++] = k;
    if (!end) return 0;
    p = end + 1;
  }
}

/* FATUNE_STAND_IN_LOSE's device (-1 none) and the path that says it is lost. */
static int lose_device = -1;
static const char *lose_path;
static CUdevice retained = -1;  /* the device whose primary context this process retained */

static void read_lose(void) {
  const char *s = getenv(STAND_IN_LOSE_ENV);
  const char *colon = s ? strchr(s, ':') : NULL;
  lose_device = colon && colon > s ? atoi(s) : -1;
  lose_path = colon && colon[1] ? colon + 1 : NULL;
  if (!lose_path) lose_device = -1;
}

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

/* A launch as the stand-in saw it: the function, its grid, and the first
 * bytes its second parameter points at (a forward variant's second block,
 * fat_fwd_kv_params, where it takes one; a tensor map or nothing else). */
#define STAND_IN_PARAM_BYTES 24  /* sizeof(fat_fwd_kv_params) */
#define STAND_IN_FP8_BYTES 48    /* sizeof(fat_fwd_fp8_params): test_runtime_fp8 asserts it */
#define STAND_IN_FP8_ARG 4       /* an e4m3 forward's fifth argument: P, three maps, the block */
#define STAND_IN_KV8_ARG 2       /* an fp8 K/V cache's third: P, fat_fwd_kv_params, the block */
typedef struct stand_in_launch {
  const stand_in_fn *fn;
  unsigned grid[3];
  unsigned char second[STAND_IN_PARAM_BYTES];
  unsigned char fp8[STAND_IN_FP8_BYTES];  /* an e4m3 or e4m3kv entry's (its name says which) */
} stand_in_launch;
#define STAND_IN_LAUNCHES_KEPT 4  /* the most recent, newest first */

static int primary_ctx;                   /* its address is the primary context */
static _Thread_local CUcontext current;   /* the driver's current context is per thread */
static unsigned long launches, modules_loaded;
static CUdeviceptr next_address = STAND_IN_MEMORY_BASE;
static const stand_in_fn *last_launched;
static stand_in_launch recent[STAND_IN_LAUNCHES_KEPT];

/* ---- what the test reads -------------------------------------------------- */

unsigned long stand_in_launches(void) { return launches; }
unsigned long stand_in_modules_loaded(void) { return modules_loaded; }

/* The image text of the module whose function was launched last ("" before
 * the first launch), and that function's name. */
const char *stand_in_last_image(void) { return last_launched ? last_launched->module->image : ""; }
const char *stand_in_last_entry(void) { return last_launched ? last_launched->name : ""; }

/* The launch BACK launches before the last (0: the last): its entry's name
 * ("" when there was none), and into GRID and SECOND (may be NULL) its grid
 * and the first N <= 24 bytes of its second parameter. */
/* The fp8 parameter block of the launch BACK launches ago, into OUT (N
 * bytes at most); its entry's name, "" when there is none. */
const char *stand_in_recent_fp8(int back, void *out, size_t n) {
  if (back < 0 || back >= STAND_IN_LAUNCHES_KEPT || !recent[back].fn) return "";
  memcpy(out, recent[back].fp8, n < STAND_IN_FP8_BYTES ? n : STAND_IN_FP8_BYTES);
  return recent[back].fn->name;
}

const char *stand_in_recent_launch(int back, unsigned grid[3], void *second, size_t n) {
  if (back < 0 || back >= STAND_IN_LAUNCHES_KEPT || !recent[back].fn) return "";
  if (grid) memcpy(grid, recent[back].grid, sizeof recent[back].grid);
  if (second) memcpy(second, recent[back].second, n < STAND_IN_PARAM_BYTES ? n : STAND_IN_PARAM_BYTES);
  return recent[back].fn->name;
}

/* ---- the driver ---------------------------------------------------------- */

CUresult cuInit(unsigned int flags) {
  (void)flags;
  read_lose();
  if (lose_path && access(lose_path, F_OK) == 0) return CUDA_ERROR_NO_DEVICE;
  return read_devices() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
  *version = STAND_IN_DRIVER;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
  *name = error == CUDA_SUCCESS         ? "CUDA_SUCCESS"
          : error == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
          : error == CUDA_ERROR_INVALID_DEVICE ? "CUDA_ERROR_INVALID_DEVICE"
          : error == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE"
                                         : "CUDA_ERROR_NOT_SUPPORTED";
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  *text = error == CUDA_SUCCESS         ? "no error"
          : error == CUDA_ERROR_INVALID_VALUE ? "bad " STAND_IN_DEVICES_ENV " (kinds: h200, h100, a100)"
          : error == CUDA_ERROR_INVALID_DEVICE ? "no such stand-in device"
          : error == CUDA_ERROR_NO_DEVICE ? "the stand-in device was lost (" STAND_IN_LOSE_ENV ")"
                                         : "not supported by the stand-in driver";
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  *count = n_devices;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal < 0 || ordinal >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

/* Device DEV's kind; the first for a device cuInit has not described (the
 * runtime asks before, as its tests do). */
static const stand_in_kind *kind_of(CUdevice dev) {
  return dev >= 0 && dev < n_devices ? devices[dev] : &kinds[0];
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  strncpy(name, kind_of(dev)->name, (size_t)len - 1);
  name[len - 1] = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
  const stand_in_kind *k = kind_of(dev);
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = k->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = k->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = k->sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = k->smem_optin; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = k->clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = k->mem_clock_khz; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  *bytes = kind_of(dev)->mem_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  retained = dev;
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

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  (void)dst, (void)src, (void)bytes, (void)stream;
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
  (void)block_x, (void)block_y, (void)block_z, (void)smem_bytes, (void)stream, (void)extra;
  if (retained >= 0 && retained == lose_device) {
    int fd = open(lose_path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) close(fd);
    raise(SIGKILL);
  }
  last_launched = (const stand_in_fn *)f;
  launches++;
  memmove(&recent[1], &recent[0], (STAND_IN_LAUNCHES_KEPT - 1) * sizeof recent[0]);
  recent[0] = (stand_in_launch){.fn = last_launched, .grid = {grid_x, grid_y, grid_z}};
  /* libfatune passes the mma80 forward's kernels (the main one and its
   * combine) an array of at least two parameter pointers: its block, then
   * the second block or the first tensor map (fwd_launch.c). */
  if (params && !strncmp(last_launched->name, "fat_fwd_mma80", strlen("fat_fwd_mma80")))
    memcpy(recent[0].second, params[1], STAND_IN_PARAM_BYTES);
  /* ... an fp8 K/V cache's forward its descale factors third, after its
   * second block, and an e4m3 forward its own after the three maps. */
  if (params && strstr(last_launched->name, "e4m3kv"))
    memcpy(recent[0].fp8, params[STAND_IN_KV8_ARG], STAND_IN_FP8_BYTES);
  else if (params && strstr(last_launched->name, "e4m3"))
    memcpy(recent[0].fp8, params[STAND_IN_FP8_ARG], STAND_IN_FP8_BYTES);
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

/* A handle for the worker to hold: nothing is queued on it. */
static int stream_handle;

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  (void)flags;
  *stream = (CUstream)&stream_handle;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}
