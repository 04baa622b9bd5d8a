/* SPDX-License-Identifier: MIT */
/* The worker's GPU work (see gpu_run.h): device setup, support kernels,
 * random inputs, the fp64 reference, checking and timing of variants. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bwd_launch.h"
#include "fwd_launch.h"
#include "compile.h"
#include "embedded.h"
#include "fwd_compare.h"
#include "gpu_run.h"
#include "stats.h"

#define UTIL_PATH "templates/fat_util.cu"
#define CEILINGS_PATH "templates/ceilings.cu"
#define REFERENCE_PATH "templates/reference_fwd.cu"
#define REFERENCE_BWD_PATH "templates/reference_bwd.cu"
#define ABI_PATH "templates/fat_abi.h"
#define ABI_BWD_PATH "templates/fat_abi_bwd.h"
#define FILL_ENTRY "fat_fill_normal"
#define CLOCK_ENTRY "fat_clock_probe"
#define REFERENCE_ENTRY "fat_reference_fwd"
#define REF_BWD_ROUND_ENTRY "fat_reference_bwd_round"
#define REF_BWD_ROWS_ENTRY "fat_reference_bwd_rows"
#define REF_BWD_COLS_ENTRY "fat_reference_bwd_cols"
#define COPY_ENTRY "fat_ceiling_copy"
#define MMA_F16_ENTRY "fat_ceiling_mma_f16"
#define MMA_BF16_ENTRY "fat_ceiling_mma_bf16"

#define DEFAULT_SMEM_LIMIT (48 * 1024)  /* more needs the opt-in attribute */
#define FILL_THREADS 256
#define FILL_MAX_BLOCKS 4096            /* grid-stride beyond this */
#define REF_THREADS 256
#define REF_ROWS 16                     /* query rows per reference block */
#define REF_KEY_TILE 32                 /* one key per lane when scoring */
#define REF_MIN_KEY_TILE 8              /* below this, give up rows instead */
#define REF_ROW_STATE 3                 /* m, l, alpha per row */
/* 0xFFFF is a NaN in fp16 and in bf16 (all-ones exponent, non-zero
 * mantissa) and 0xFFFFFFFF one in fp32: one byte poisons O and lse alike. */
#define POISON_BYTE 0xff
#define CLOCK_SPIN_NS 2000000ull        /* 2 ms: long enough to average the clock */
#define FLUSH_L2_FACTOR 2               /* write twice the L2 to evict everything */
#define FLUSH_MIN_BYTES (64u << 20)     /* if the driver reports no L2 size */
#define MS_PER_S 1e3
#define FLOP_PER_TFLOP 1e12
#define KHZ_PER_MHZ 1e3
#define WHAT_MAX 512
#define SEED_GOLDEN 0x9e3779b97f4a7c15ull
#define LOG_EXCERPT 2000                /* bytes of an NVRTC log quoted in an error */
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

enum { SEED_Q, SEED_K, SEED_V, SEED_DO };  /* streams of one tensor set */

struct fat_gpu {
  fat_cuda cu;
  CUdevice dev;
  CUcontext ctx;       /* the primary context, retained */
  CUstream stream;
  fat_gpu_info info;
  CUmodule util_module, ref_module;
  CUfunction fill_fn, clock_fn, ref_fn;
  CUfunction ref_bwd_round_fn, ref_bwd_rows_fn, ref_bwd_cols_fn;  /* templates/reference_bwd.cu */
  CUdeviceptr flush;   /* scratch overwritten to evict L2; allocated on first use */
  size_t flush_bytes;
  CUdeviceptr probe;   /* 2 u64 for fat_clock_probe */
};

/* "CUDA_ERROR_X: text (what)" into err; FATAL when R kills the context. */
static int cu_fail(const fat_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int cu_fail(const fat_gpu *g, CUresult r, char *err, size_t errlen, const char *fmt, ...) {
  char what[WHAT_MAX], text[WHAT_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s (%s)", fat_cuda_result_text(&g->cu, r, text, sizeof text), what);
  return fat_cuda_result_is_sticky(r) ? FAT_GPU_FATAL : FAT_GPU_FAILED;
}

/* Runs CALL; on error sets rc from cu_fail and jumps to out. */
#define CU(call, ...)                                                \
  do {                                                               \
    CUresult r_ = (call);                                            \
    if (r_ != CUDA_SUCCESS) {                                        \
      rc = cu_fail(g, r_, err, errlen, __VA_ARGS__);                 \
      goto out;                                                      \
    }                                                                \
  } while (0)

uint64_t fat_seed_derive(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * SEED_GOLDEN;  /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- device --------------------------------------------------------- */

static int device_attribute(fat_gpu *g, CUdevice_attribute a, const char *name, int *out,
                            char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  CU(g->cu.cuDeviceGetAttribute(out, a, g->dev), "cuDeviceGetAttribute %s", name);
out:
  return rc;
}

int fat_gpu_open(int index, fat_gpu **out, fat_gpu_info *info, char *err, size_t errlen) {
  int rc = -1, count = 0, cc_major = 0, cc_minor = 0;
  CUresult r;
  char text[WHAT_MAX];
  fat_gpu *g = calloc(1, sizeof *g);
  *out = NULL;
  if (!g) {
    snprintf(err, errlen, "out of host memory opening GPU %d", index);
    return -1;
  }
  if (fat_cuda_load(&g->cu, err, errlen)) goto out;
  if ((r = g->cu.cuInit(0)) != CUDA_SUCCESS) {
    snprintf(err, errlen, "no CUDA device: cuInit: %s", fat_cuda_result_text(&g->cu, r, text, sizeof text));
    goto out;
  }
  CU(g->cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (index < 0 || index >= count) {
    snprintf(err, errlen, "GPU index %d out of range: %d device%s found", index, count,
             count == 1 ? "" : "s");
    goto out;
  }
  CU(g->cu.cuDeviceGet(&g->dev, index), "cuDeviceGet %d", index);
  fat_gpu_info *gi = &g->info;
  CU(g->cu.cuDeviceGetName(gi->name, sizeof gi->name, g->dev), "cuDeviceGetName");
  CU(g->cu.cuDriverGetVersion(&gi->driver_version), "cuDriverGetVersion");
  CU(g->cu.cuDeviceTotalMem(&gi->mem_bytes, g->dev), "cuDeviceTotalMem");
#define ATTR(a, field)                                                   \
  if (device_attribute(g, a, #a, &field, err, errlen) != FAT_GPU_OK) goto out
  ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cc_major);
  ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cc_minor);
  ATTR(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, gi->sm_count);
  ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, gi->smem_per_block_optin);
  ATTR(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, gi->l2_bytes);
  ATTR(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, gi->clock_khz);
  ATTR(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, gi->mem_clock_khz);
#undef ATTR
  gi->cc_major = cc_major;
  gi->cc_minor = cc_minor;
  CU(g->cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain on GPU %d", index);
  CU(g->cu.cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent");
  CU(g->cu.cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CU(g->cu.cuMemAlloc(&g->probe, 2 * sizeof(uint64_t)), "cuMemAlloc of the clock probe");
  if (info) *info = g->info;
  *out = g;
  rc = 0;
out:
  if (rc) fat_gpu_close(g);
  return rc ? -1 : 0;
}

void fat_gpu_close(fat_gpu *g) {
  if (!g) return;
  if (g->ctx) {
    /* Best effort: after a fault these fail, and the process exits anyway. */
    if (g->flush) g->cu.cuMemFree(g->flush);
    if (g->probe) g->cu.cuMemFree(g->probe);
    if (g->util_module) g->cu.cuModuleUnload(g->util_module);
    if (g->ref_module) g->cu.cuModuleUnload(g->ref_module);
    if (g->stream) g->cu.cuStreamDestroy(g->stream);
    g->cu.cuDevicePrimaryCtxRelease(g->dev);
  }
  fat_cuda_unload(&g->cu);
  free(g);
}

const fat_cuda *fat_gpu_driver(const fat_gpu *g) { return &g->cu; }

/* ---- support kernels ------------------------------------------------ */

static const fat_embedded_file *embedded(const char *path, char *err, size_t errlen) {
  const fat_embedded_file *f = fat_embedded_find(path);
  if (!f) snprintf(err, errlen, "%s is not embedded in this build", path);
  return f;
}

char *fat_gpu_util_source(char *err, size_t errlen) {
  const fat_embedded_file *f = embedded(UTIL_PATH, err, errlen);
  char *s = f ? strdup(f->data) : NULL;
  if (f && !s) snprintf(err, errlen, "out of host memory copying %s", UTIL_PATH);
  return s;
}

char *fat_gpu_reference_source(char *err, size_t errlen) {
  /* fat_abi.h and fat_abi_bwd.h first, as the generator does for variants,
   * so the references read the parameter blocks exactly as the host lays
   * them out; the forward and backward references share one module, and
   * #line keeps NVRTC's messages pointing into each file. */
  static const char abi_bwd_line[] = "\n#line 1 \"" ABI_BWD_PATH "\"\n";
  static const char fwd_line[] = "\n#line 1 \"" REFERENCE_PATH "\"\n";
  static const char bwd_line[] = "\n#line 1 \"" REFERENCE_BWD_PATH "\"\n";
  const fat_embedded_file *abi = embedded(ABI_PATH, err, errlen);
  const fat_embedded_file *abi_bwd = abi ? embedded(ABI_BWD_PATH, err, errlen) : NULL;
  const fat_embedded_file *ref = abi_bwd ? embedded(REFERENCE_PATH, err, errlen) : NULL;
  const fat_embedded_file *ref_bwd = ref ? embedded(REFERENCE_BWD_PATH, err, errlen) : NULL;
  if (!ref_bwd) return NULL;
  size_t n = abi->size + sizeof abi_bwd_line - 1 + abi_bwd->size + sizeof fwd_line - 1 + ref->size +
             sizeof bwd_line - 1 + ref_bwd->size;
  char *s = malloc(n + 1);
  if (!s) {
    snprintf(err, errlen, "out of host memory copying %s", REFERENCE_PATH);
    return NULL;
  }
  snprintf(s, n + 1, "%s%s%s%s%s%s%s", abi->data, abi_bwd_line, abi_bwd->data, fwd_line, ref->data,
           bwd_line, ref_bwd->data);
  return s;
}

char *fat_gpu_ceilings_source(char *err, size_t errlen) {
  const fat_embedded_file *f = embedded(CEILINGS_PATH, err, errlen);
  char *s = f ? strdup(f->data) : NULL;
  if (f && !s) snprintf(err, errlen, "out of host memory copying %s", CEILINGS_PATH);
  return s;
}

static int compile_support_one(const char *name, char *source, const char *arch, fat_build *b,
                               char *err, size_t errlen) {
  int rc = -1;
  if (!source) goto out;
  if (fat_compile_one(name, source, arch, b, err, errlen)) goto out;
  if (!b->ok) {
    snprintf(err, errlen, "%s failed to compile for %s: %.*s", name, arch, LOG_EXCERPT,
             b->log ? b->log : "(no log)");
    goto out;
  }
  rc = 0;
out:
  free(source);
  return rc;
}

int fat_gpu_compile_support(const char *arch, fat_build *util, fat_build *ref, char *err,
                            size_t errlen) {
  memset(util, 0, sizeof *util);
  memset(ref, 0, sizeof *ref);
  if (compile_support_one(UTIL_PATH, fat_gpu_util_source(err, errlen), arch, util, err, errlen) ||
      compile_support_one(REFERENCE_PATH, fat_gpu_reference_source(err, errlen), arch, ref, err,
                          errlen)) {
    fat_build_free(util);
    fat_build_free(ref);
    return -1;
  }
  return 0;
}

int fat_gpu_compile_ceilings(const char *arch, fat_build *b, char *err, size_t errlen) {
  memset(b, 0, sizeof *b);
  if (compile_support_one(CEILINGS_PATH, fat_gpu_ceilings_source(err, errlen), arch, b, err,
                          errlen)) {
    fat_build_free(b);
    return -1;
  }
  return 0;
}

int fat_gpu_load_support(fat_gpu *g, const void *util_cubin, const void *ref_cubin, char *err,
                         size_t errlen) {
  int rc = FAT_GPU_OK;
  CU(g->cu.cuModuleLoadData(&g->util_module, util_cubin), "loading %s", UTIL_PATH);
  CU(g->cu.cuModuleLoadData(&g->ref_module, ref_cubin), "loading %s", REFERENCE_PATH);
  CU(g->cu.cuModuleGetFunction(&g->fill_fn, g->util_module, FILL_ENTRY), "%s", FILL_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->clock_fn, g->util_module, CLOCK_ENTRY), "%s", CLOCK_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->ref_fn, g->ref_module, REFERENCE_ENTRY), "%s", REFERENCE_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->ref_bwd_round_fn, g->ref_module, REF_BWD_ROUND_ENTRY), "%s",
     REF_BWD_ROUND_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->ref_bwd_rows_fn, g->ref_module, REF_BWD_ROWS_ENTRY), "%s",
     REF_BWD_ROWS_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->ref_bwd_cols_fn, g->ref_module, REF_BWD_COLS_ENTRY), "%s",
     REF_BWD_COLS_ENTRY);
out:
  return rc;
}

static int require_support(const fat_gpu *g, char *err, size_t errlen) {
  if (g->ref_fn) return FAT_GPU_OK;
  snprintf(err, errlen, "support kernels not loaded (fat_gpu_load_support first)");
  return FAT_GPU_FAILED;
}

/* ---- tensors -------------------------------------------------------- */

int fat_gpu_tensors_alloc(fat_gpu *g, const fat_check_shape *s, int head_dim, fat_dtype dtype,
                          int with_reference, fat_gpu_tensors *t, char *err, size_t errlen) {
  int rc = FAT_GPU_FAILED;
  int *lengths = NULL;
  memset(t, 0, sizeof *t);
  if (fat_check_shape_validate(s, 0, err, errlen)) goto out;
  if (head_dim < 1) {
    snprintf(err, errlen, "head_dim %d is not positive", head_dim);
    goto out;
  }
  /* The problem's head dim (tensors and scale) may be below the template's. */
  const int dp = s->head_dim > 0 ? s->head_dim : head_dim;
  if (dp > head_dim || dp % 8 != 0) {
    snprintf(err, errlen, "head_dim %d: not a multiple of 8 at most the template's %d", dp, head_dim);
    goto out;
  }
  rc = FAT_GPU_OK;
  const size_t d = (size_t)dp, e = fat_dtype_size(dtype);
  long long total_q = (long long)s->batch * s->seqlen_q, total_k = (long long)s->batch * s->seqlen_k;
  if (s->varlen) {
    /* cu_seqlens_q, cu_seqlens_k (batch + 1 each) and seqused_k (batch). */
    const int n_ints = 3 * s->batch + 2;
    lengths = malloc((size_t)n_ints * sizeof *lengths);
    if (!lengths) {
      snprintf(err, errlen, "out of host memory");
      rc = FAT_GPU_FAILED;
      goto out;
    }
    int *cu_q = lengths, *cu_k = lengths + s->batch + 1, *used = lengths + 2 * s->batch + 2;
    cu_q[0] = cu_k[0] = 0;
    for (int b = 0; b < s->batch; b++) {
      int lq, lk, uk;
      fat_varlen_lengths(s, b, &lq, &lk, &uk);
      cu_q[b + 1] = cu_q[b] + lq;
      cu_k[b + 1] = cu_k[b] + lk;
      used[b] = uk;
    }
    total_q = cu_q[s->batch];
    total_k = cu_k[s->batch];
    t->call.total_q = total_q;
    t->call.total_k = total_k;
    CU(g->cu.cuMemAlloc(&t->seqinfo, (size_t)n_ints * sizeof *lengths), "cuMemAlloc of cu_seqlens");
    CU(g->cu.cuMemcpyHtoD(t->seqinfo, lengths, (size_t)n_ints * sizeof *lengths), "copying cu_seqlens");
  }
  t->dtype = dtype;
  t->head_dim = dp;
  t->n_q = (size_t)total_q * s->heads * d;
  t->n_kv = (size_t)total_k * s->heads_k * d;
  t->n_rows = (size_t)total_q * s->heads;
  CU(g->cu.cuMemAlloc(&t->q, t->n_q * e), "cuMemAlloc of Q, %zu bytes", t->n_q * e);
  CU(g->cu.cuMemAlloc(&t->k, t->n_kv * e), "cuMemAlloc of K, %zu bytes", t->n_kv * e);
  CU(g->cu.cuMemAlloc(&t->v, t->n_kv * e), "cuMemAlloc of V, %zu bytes", t->n_kv * e);
  CU(g->cu.cuMemAlloc(&t->o, t->n_q * e), "cuMemAlloc of O, %zu bytes", t->n_q * e);
  CU(g->cu.cuMemAlloc(&t->lse, t->n_rows * sizeof(float)), "cuMemAlloc of lse");
  if (with_reference) {
    CU(g->cu.cuMemAlloc(&t->ref_o, t->n_q * sizeof(double)), "cuMemAlloc of the reference O, %zu bytes",
       t->n_q * sizeof(double));
    CU(g->cu.cuMemAlloc(&t->ref_lse, t->n_rows * sizeof(double)), "cuMemAlloc of the reference lse");
  }
  fat_fwd_params *p = &t->params;
  p->q = (const void *)(uintptr_t)t->q;
  p->k = (const void *)(uintptr_t)t->k;
  p->v = (const void *)(uintptr_t)t->v;
  p->o = (void *)(uintptr_t)t->o;
  p->lse = (float *)(uintptr_t)t->lse;
  if (s->varlen) {
    p->cu_seqlens_q = (const int *)(uintptr_t)t->seqinfo;
    p->cu_seqlens_k = p->cu_seqlens_q + s->batch + 1;
    p->seqused_k = p->cu_seqlens_k + s->batch + 1;
  }
  /* Contiguous (batch, seqlen, heads, head_dim); packed rows when varlen. */
  p->q_head_stride = p->k_head_stride = p->v_head_stride = p->o_head_stride = dp;
  p->q_row_stride = p->o_row_stride = (long long)s->heads * dp;
  p->k_row_stride = p->v_row_stride = (long long)s->heads_k * dp;
  p->q_batch_stride = p->o_batch_stride = (long long)s->seqlen_q * p->q_row_stride;
  p->k_batch_stride = p->v_batch_stride = (long long)s->seqlen_k * p->k_row_stride;
  p->batch = s->batch;
  p->heads = s->heads;
  p->heads_k = s->heads_k;
  p->seqlen_q = s->seqlen_q;
  p->seqlen_k = s->seqlen_k;
  p->head_dim = dp;
  p->window_left = s->window_left;
  p->window_right = s->window_right;
  fat_fwd_set_scale(p, 1.0 / sqrt((double)dp), s->softcap);
out:
  free(lengths);
  if (rc != FAT_GPU_OK) fat_gpu_tensors_free(g, t);
  return rc;
}

void fat_gpu_tensors_free(fat_gpu *g, fat_gpu_tensors *t) {
  CUdeviceptr *all[] = {&t->q,     &t->k,       &t->v,         &t->o,      &t->lse,
                        &t->ref_o, &t->ref_lse, &t->workspace, &t->seqinfo};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (*all[i]) {
      g->cu.cuMemFree(*all[i]);
      *all[i] = 0;
    }
  t->workspace_bytes = 0;
}

static int fill_one(fat_gpu *g, CUdeviceptr dst, size_t n, fat_dtype dtype, uint64_t seed,
                    const char *name, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  unsigned long long count = n, s = seed;
  int is_bf16 = dtype == FAT_BF16;
  size_t blocks = (n + FILL_THREADS - 1) / FILL_THREADS;
  if (blocks > FILL_MAX_BLOCKS) blocks = FILL_MAX_BLOCKS;
  void *args[] = {&dst, &count, &is_bf16, &s};
  CU(g->cu.cuLaunchKernel(g->fill_fn, (unsigned)blocks, 1, 1, FILL_THREADS, 1, 1, 0, g->stream,
                          args, NULL),
     "filling %s with random values", name);
out:
  return rc;
}

int fat_gpu_fill_random(fat_gpu *g, fat_gpu_tensors *t, uint64_t seed, char *err, size_t errlen) {
  int rc;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fill_one(g, t->q, t->n_q, t->dtype, fat_seed_derive(seed, SEED_Q), "Q", err, errlen)) ||
      (rc = fill_one(g, t->k, t->n_kv, t->dtype, fat_seed_derive(seed, SEED_K), "K", err, errlen)) ||
      (rc = fill_one(g, t->v, t->n_kv, t->dtype, fat_seed_derive(seed, SEED_V), "V", err, errlen)))
    return rc;
  return FAT_GPU_OK;
}

int fat_gpu_download(fat_gpu *g, void *dst, CUdeviceptr src, size_t bytes, char *err,
                     size_t errlen) {
  int rc = FAT_GPU_OK;
  CU(g->cu.cuStreamSynchronize(g->stream), "waiting for the stream before a copy");
  CU(g->cu.cuMemcpyDtoH(dst, src, bytes), "copying %zu bytes to the host", bytes);
out:
  return rc;
}

/* ---- reference ------------------------------------------------------ */

static size_t reference_smem(int rows, int key_tile, int d) {
  size_t doubles = (size_t)rows * d            /* q_s */
                   + (size_t)key_tile * (d + 1) /* kv_s */
                   + (size_t)rows * key_tile    /* p_s */
                   + (size_t)rows * d           /* o_s */
                   + (size_t)REF_ROW_STATE * rows;
  return doubles * sizeof(double);
}

int fat_gpu_reference(fat_gpu *g, fat_gpu_tensors *t, fat_mask mask, char *err, size_t errlen) {
  int rc;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if (!t->ref_o) {
    snprintf(err, errlen, "tensors were allocated without the reference outputs");
    return FAT_GPU_FAILED;
  }
  /* Big head dims shrink the key tile, then the rows, until the tiles fit. */
  int rows = REF_ROWS, key_tile = REF_KEY_TILE, d = t->head_dim;
  size_t limit = (size_t)g->info.smem_per_block_optin;
  while (reference_smem(rows, key_tile, d) > limit) {
    if (key_tile > REF_MIN_KEY_TILE)
      key_tile /= 2;
    else if (rows > 1)
      rows /= 2;
    else {
      snprintf(err, errlen, "head_dim %d is too large for the reference: %zu bytes of shared "
               "memory > %zu", d, reference_smem(rows, key_tile, d), limit);
      return FAT_GPU_FAILED;
    }
  }
  size_t smem = reference_smem(rows, key_tile, d);
  int is_bf16 = t->dtype == FAT_BF16, mask_mode = (int)mask;
  const fat_fwd_params *p = &t->params;
  unsigned grid_x = (unsigned)((p->seqlen_q + rows - 1) / rows);
  void *args[] = {&t->params, &d, &is_bf16, &mask_mode, &t->ref_o, &t->ref_lse, &rows, &key_tile};
  rc = FAT_GPU_OK;
  CU(g->cu.cuFuncSetAttribute(g->ref_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
     "reference: %zu bytes of shared memory", smem);
  CU(g->cu.cuLaunchKernel(g->ref_fn, grid_x, (unsigned)p->heads, (unsigned)p->batch, REF_THREADS, 1,
                          1, (unsigned)smem, g->stream, args, NULL),
     "launching the reference");
  CU(g->cu.cuStreamSynchronize(g->stream), "running the reference on %dx%dx%dx%d", p->batch,
     p->heads, p->seqlen_q, p->seqlen_k);
out:
  return rc;
}

/* ---- variants ------------------------------------------------------- */

int fat_gpu_kernel_load(fat_gpu *g, const fat_kernel_desc *d, fat_gpu_kernel *k, char *err,
                        size_t errlen) {
  int rc = FAT_GPU_OK;
  memset(k, 0, sizeof *k);
  k->desc = *d;
  k->desc.cubin = NULL;
  k->desc.cubin_size = 0;
  if (d->block_m < 1 || d->threads < 1 || d->smem_bytes < 0 || d->head_dim < 1) {
    snprintf(err, errlen, "%s: bad launch geometry block_m %d, threads %d, smem %d, head_dim %d",
             d->name, d->block_m, d->threads, d->smem_bytes, d->head_dim);
    return FAT_GPU_FAILED;
  }
  CU(g->cu.cuModuleLoadData(&k->module, d->cubin), "loading the cubin of %s", d->name);
  if (d->direction == FAT_BWD) {
    /* Four kernels (kernel.h); the key-block and dQ kernels share the
     * variant's shared-memory size, the per-row ones need none. */
    if (d->block_q < 1) {
      snprintf(err, errlen, "%s: bad query tile %d", d->name, d->block_q);
      rc = FAT_GPU_FAILED;
      goto out;
    }
    CU(g->cu.cuModuleGetFunction(&k->fn, k->module, d->entry), "entry %s of %s", d->entry, d->name);
    CU(g->cu.cuModuleGetFunction(&k->bwd_pre_fn, k->module, FAT_BWD_PREPROCESS_ENTRY), "entry %s of %s",
       FAT_BWD_PREPROCESS_ENTRY, d->name);
    CU(g->cu.cuModuleGetFunction(&k->bwd_dq_fn, k->module, FAT_BWD_DQ_ENTRY), "entry %s of %s",
       FAT_BWD_DQ_ENTRY, d->name);
    CU(g->cu.cuModuleGetFunction(&k->bwd_convert_fn, k->module, FAT_BWD_CONVERT_ENTRY), "entry %s of %s",
       FAT_BWD_CONVERT_ENTRY, d->name);
    if (d->smem_bytes > DEFAULT_SMEM_LIMIT) {
      CU(g->cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, d->smem_bytes),
         "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
      CU(g->cu.cuFuncSetAttribute(k->bwd_dq_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  d->smem_bytes),
         "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
    }
    goto out;
  }
  if (d->kind == FAT_KERNEL_MATERIALIZE) {
    /* Three kernels: scores, softmax, P·V; the first two-thirds share the
     * tile's shared memory, the softmax needs none. */
    static const char *const suffix[] = {FAT_MATERIALIZE_SCORES_SUFFIX,
                                         FAT_MATERIALIZE_SOFTMAX_SUFFIX, FAT_MATERIALIZE_PV_SUFFIX};
    CUfunction *fn[] = {&k->fn, &k->softmax_fn, &k->pv_fn};
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
      char entry[FAT_KERNEL_ENTRY_MAX + 16];
      snprintf(entry, sizeof entry, "%s%s", d->entry, suffix[i]);
      CU(g->cu.cuModuleGetFunction(fn[i], k->module, entry), "entry %s of %s", entry, d->name);
    }
    if (d->smem_bytes > DEFAULT_SMEM_LIMIT)
      for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i += 2)
        CU(g->cu.cuFuncSetAttribute(*fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    d->smem_bytes),
           "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
    goto out;
  }
  CU(g->cu.cuModuleGetFunction(&k->fn, k->module, d->entry), "entry %s of %s", d->entry, d->name);
  if (d->splits > 1) {
    char entry[FAT_KERNEL_ENTRY_MAX + 16];
    snprintf(entry, sizeof entry, "%s%s", d->entry, FAT_FWD_COMBINE_SUFFIX);
    CU(g->cu.cuModuleGetFunction(&k->combine_fn, k->module, entry), "entry %s of %s", entry, d->name);
  }
  if (d->smem_bytes > DEFAULT_SMEM_LIMIT)
    CU(g->cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, d->smem_bytes),
       "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
out:
  if (rc != FAT_GPU_OK) fat_gpu_kernel_unload(g, k);
  return rc;
}

void fat_gpu_kernel_unload(fat_gpu *g, fat_gpu_kernel *k) {
  if (k->module) g->cu.cuModuleUnload(k->module);
  k->module = NULL;
  k->fn = k->softmax_fn = k->pv_fn = k->combine_fn = NULL;
  k->bwd_pre_fn = k->bwd_dq_fn = k->bwd_convert_fn = NULL;
}

/* The launch geometry of a fused forward variant. */
static fat_fwd_geometry fwd_geometry(const fat_kernel_desc *d) {
  /* block_n and persistent are 0 unless the variant takes tensor maps
   * (fat_kernel_schedule, and the wire refuses anything else). */
  fat_fwd_geometry geo = {.block_m = d->block_m, .threads = d->threads, .smem_bytes = d->smem_bytes,
                          .pack_gqa = d->pack_gqa, .splits = d->splits > 1 ? d->splits : 1,
                          .head_dim = d->head_dim, .block_n = d->block_n, .bf16 = d->dtype == FAT_BF16,
                          .persistent = d->persistent};
  return geo;
}

int fat_gpu_ensure_workspace(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t, char *err,
                             size_t errlen) {
  int rc = FAT_GPU_OK;
  size_t free_bytes = 0, total_bytes = 0;
  const fat_fwd_params *p = &t->params;
  const fat_check_shape s = {p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k};
  const fat_fwd_geometry geo = fwd_geometry(&k->desc);
  size_t need = 0;
  if (k->desc.direction == FAT_FWD && k->desc.kind == FAT_KERNEL_MATERIALIZE)
    need = fat_materialize_workspace_bytes(&s);
  else if (k->desc.direction == FAT_FWD)
    need = fat_fwd_workspace_bytes(&geo, p->batch, p->heads, p->seqlen_q);
  if (need == 0) return FAT_GPU_OK;
  if (t->workspace && t->workspace_bytes >= need) return FAT_GPU_OK;
  if (t->workspace) {
    g->cu.cuMemFree(t->workspace);
    t->workspace = 0;
    t->workspace_bytes = 0;
  }
  CU(g->cu.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
  CUresult r = need <= free_bytes ? g->cu.cuMemAlloc(&t->workspace, need) : CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    snprintf(err, errlen, "does not fit: needs %zu bytes, %zu free (workspace of %s, %dx%dx%dx%d)",
             need, free_bytes, k->desc.name, s.batch, s.heads, s.seqlen_q, s.seqlen_k);
    t->workspace = 0;
    return FAT_GPU_FAILED;
  }
  CU(r, "cuMemAlloc of the score workspace, %zu bytes", need);
  t->workspace_bytes = need;
out:
  return rc;
}

/* The materialising baseline: scores, softmax and P·V over T's workspace
 * (fat_gpu_ensure_workspace first), grids as templates/materialize_fwd.cu
 * documents them; block_m is the tile. */
static CUresult launch_materialize(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t) {
  const fat_fwd_params *p = &t->params;
  const unsigned tile = (unsigned)k->desc.block_m, threads = (unsigned)k->desc.threads;
  const unsigned smem = (unsigned)k->desc.smem_bytes, bh = (unsigned)(p->batch * p->heads);
  const unsigned q_tiles = ((unsigned)p->seqlen_q + tile - 1) / tile;
  const unsigned k_tiles = ((unsigned)p->seqlen_k + tile - 1) / tile;
  const unsigned long long rows = (unsigned long long)bh * (unsigned)p->seqlen_q;
  const unsigned softmax_blocks =
      (unsigned)((rows + FAT_MATERIALIZE_SOFTMAX_ROWS - 1) / FAT_MATERIALIZE_SOFTMAX_ROWS);
  void *args[] = {&t->params, &t->workspace};
  if (!t->workspace) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = g->cu.cuLaunchKernel(k->fn, k_tiles, q_tiles, bh, threads, 1, 1, smem, g->stream,
                                    args, NULL);
  if (r == CUDA_SUCCESS)
    r = g->cu.cuLaunchKernel(k->softmax_fn, softmax_blocks, 1, 1, threads, 1, 1, 0, g->stream, args,
                             NULL);
  if (r == CUDA_SUCCESS)
    r = g->cu.cuLaunchKernel(k->pv_fn, (unsigned)t->head_dim / tile, q_tiles, bh, threads, 1, 1, smem,
                             g->stream, args, NULL);
  return r;
}

static CUresult launch_variant(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t) {
  if (k->desc.kind == FAT_KERNEL_MATERIALIZE) return launch_materialize(g, k, t);
  const fat_fwd_geometry geo = fwd_geometry(&k->desc);
  const fat_fwd_kernels fns = {k->fn, k->combine_fn};
  fat_fwd_set_workspace(&geo, &t->params, t->workspace);
  t->call.sm_count = g->info.sm_count;
  return fat_fwd_launch(&g->cu, &fns, &geo, &t->params, &t->call, g->stream);
}

/* A variable-length shape's K and V rows past each sequence's seqused_k
 * (a cache's stale rows) set to NaN: a kernel that lets them into a row's
 * output -- even times a zero probability -- fails the check. */
static int poison_unused_keys(fat_gpu *g, const fat_check_shape *s, fat_gpu_tensors *t, char *err,
                              size_t errlen) {
  int rc = FAT_GPU_OK;
  if (!s->varlen) return rc;
  const size_t row_bytes = (size_t)s->heads_k * (size_t)t->head_dim * fat_dtype_size(t->dtype);
  size_t k0 = 0;
  for (int b = 0; b < s->batch; b++) {
    int lq, lk, uk;
    fat_varlen_lengths(s, b, &lq, &lk, &uk);
    if (uk < lk) {
      const size_t at = (k0 + (size_t)uk) * row_bytes, bytes = (size_t)(lk - uk) * row_bytes;
      CU(g->cu.cuMemsetD8Async(t->k + at, POISON_BYTE, bytes, g->stream), "poisoning unused K rows");
      CU(g->cu.cuMemsetD8Async(t->v + at, POISON_BYTE, bytes, g->stream), "poisoning unused V rows");
    }
    k0 += (size_t)lk;
  }
out:
  return rc;
}

int fat_gpu_check(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                  fat_check *out, char *err, size_t errlen) {
  int rc;
  fat_gpu_tensors t;
  uint16_t *o = NULL;
  float *lse = NULL;
  double *ref_o = NULL, *ref_lse = NULL;
  const fat_kernel_desc *d = &k->desc;

  if (d->direction == FAT_BWD) return fat_gpu_check_bwd(g, k, s, seed, NULL, out, err, errlen);
  memset(out, 0, sizeof *out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_tensors_alloc(g, s, d->head_dim, d->dtype, 1, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  if ((rc = fat_gpu_fill_random(g, &t, seed, err, errlen)) != FAT_GPU_OK) goto out;
  if ((rc = poison_unused_keys(g, s, &t, err, errlen)) != FAT_GPU_OK) goto out;
  /* Poisoned outputs: anything the variant fails to write reads as NaN. */
  CU(g->cu.cuMemsetD8Async(t.o, POISON_BYTE, t.n_q * fat_dtype_size(d->dtype), g->stream),
     "poisoning O");
  CU(g->cu.cuMemsetD8Async(t.lse, POISON_BYTE, t.n_rows * sizeof(float), g->stream), "poisoning lse");
  if ((rc = fat_gpu_ensure_workspace(g, k, &t, out->reason, sizeof out->reason)) != FAT_GPU_OK) {
    /* A workspace that does not fit is the variant's failure on this shape. */
    snprintf(err, errlen, "%s", out->reason);
    out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
    rc = rc == FAT_GPU_FATAL ? rc : FAT_GPU_OK;
    goto out;
  }
  CUresult r = launch_variant(g, k, &t);
  if (r != CUDA_SUCCESS) {
    /* A refused launch (bad geometry, too much shared memory) is the
     * variant's failure, not the worker's. */
    char text[WHAT_MAX];
    if (fat_cuda_result_is_sticky(r)) {
      rc = cu_fail(g, r, err, errlen, "launching %s", d->name);
      goto out;
    }
    snprintf(out->reason, sizeof out->reason, "launch: %s",
             fat_cuda_result_text(&g->cu, r, text, sizeof text));
    out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
    goto out;
  }
  CU(g->cu.cuStreamSynchronize(g->stream), "running %s on %dx%dx%dx%d", d->name, s->batch, s->heads,
     s->seqlen_q, s->seqlen_k);
  if ((rc = fat_gpu_reference(g, &t, d->mask, err, errlen)) != FAT_GPU_OK) goto out;
  o = malloc(t.n_q * sizeof *o);
  lse = malloc(t.n_rows * sizeof *lse);
  ref_o = malloc(t.n_q * sizeof *ref_o);
  ref_lse = malloc(t.n_rows * sizeof *ref_lse);
  if (!o || !lse || !ref_o || !ref_lse) {
    snprintf(err, errlen, "out of host memory for the outputs of %dx%dx%dx%d", s->batch, s->heads,
             s->seqlen_q, s->seqlen_k);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  if ((rc = fat_gpu_download(g, o, t.o, t.n_q * sizeof *o, err, errlen)) ||
      (rc = fat_gpu_download(g, lse, t.lse, t.n_rows * sizeof *lse, err, errlen)) ||
      (rc = fat_gpu_download(g, ref_o, t.ref_o, t.n_q * sizeof *ref_o, err, errlen)) ||
      (rc = fat_gpu_download(g, ref_lse, t.ref_lse, t.n_rows * sizeof *ref_lse, err, errlen)))
    goto out;
  fat_compare_fwd(d->dtype, o, ref_o, t.n_q, lse, ref_lse, t.n_rows, out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
out:
  free(o);
  free(lse);
  free(ref_o);
  free(ref_lse);
  fat_gpu_tensors_free(g, &t);
  return rc;
}

/* ---- timing --------------------------------------------------------- */

static int time_bwd(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                    const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                    size_t errlen);

int fat_gpu_clock_mhz(fat_gpu *g, int *mhz, char *err, size_t errlen) {
  int rc;
  uint64_t probe[2] = {0, 0};
  unsigned long long spin = CLOCK_SPIN_NS;
  void *args[] = {&g->probe, &spin};
  *mhz = 0;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  CU(g->cu.cuLaunchKernel(g->clock_fn, 1, 1, 1, 1, 1, 1, 0, g->stream, args, NULL),
     "launching the clock probe");
  if ((rc = fat_gpu_download(g, probe, g->probe, sizeof probe, err, errlen)) != FAT_GPU_OK) goto out;
  /* cycles per ns = GHz; x1000 = MHz. */
  if (probe[1] > 0) *mhz = (int)lround((double)probe[0] / (double)probe[1] * KHZ_PER_MHZ);
out:
  return rc;
}

static int ensure_flush_buffer(fat_gpu *g, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  if (g->flush) return rc;
  size_t bytes = (size_t)FLUSH_L2_FACTOR * (size_t)g->info.l2_bytes;
  if (bytes < FLUSH_MIN_BYTES) bytes = FLUSH_MIN_BYTES;
  CU(g->cu.cuMemAlloc(&g->flush, bytes), "cuMemAlloc of the L2 flush buffer, %zu bytes", bytes);
  g->flush_bytes = bytes;
out:
  return rc;
}

/* Launches kernel K of a timing run on its prepared tensors. */
typedef CUresult (*timed_launch)(fat_gpu *g, const fat_gpu_kernel *k, void *tensors);

static CUresult launch_fwd(fat_gpu *g, const fat_gpu_kernel *k, void *tensors) {
  return launch_variant(g, k, tensors);
}

static CUresult launch_bwd(fat_gpu *g, const fat_gpu_kernel *k, void *tensors) {
  return fat_gpu_bwd_launch(g, k, tensors);
}

/* The timed part of fat_gpu_time, both directions: O->warmup untimed rounds,
 * then O->reps rounds of every kernel in turn (A B C A B C ...), each launch
 * between its own pair of events with the L2 flushed outside them; OUT[i]
 * gets kernel i's statistics and the SM clock seen right after. */
static int time_round_robin(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                            const fat_time_opts *o, timed_launch launch, void *tensors,
                            fat_timing *out, char *err, size_t errlen) {
  int rc = FAT_GPU_FAILED, clock_mhz = 0;
  const size_t n_events = 2 * (size_t)n * (size_t)o->reps;
  /* start of (kernel i, rep r) at 2(i·reps + r), stop right after */
  CUevent *events = calloc(n_events, sizeof *events);
  double *ms = malloc((size_t)o->reps * sizeof *ms);
  if (!events || !ms) {
    snprintf(err, errlen, "out of host memory for %zu events", n_events);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  for (size_t e = 0; e < n_events; e++) CU(g->cu.cuEventCreate(&events[e], CU_EVENT_DEFAULT), "cuEventCreate");

  for (int w = 0; w < o->warmup; w++)
    for (int i = 0; i < n; i++)
      CU(launch(g, k[i], tensors), "warm-up launch of %s", k[i]->desc.name);
  for (int r = 0; r < o->reps; r++)
    for (int i = 0; i < n; i++) {
      size_t e = 2 * ((size_t)i * o->reps + r);
      /* The flush sits outside the events, so only the kernel is timed. */
      if (o->flush_l2)
        CU(g->cu.cuMemsetD32Async(g->flush, (unsigned)r, g->flush_bytes / sizeof(uint32_t), g->stream),
           "flushing L2");
      CU(g->cu.cuEventRecord(events[e], g->stream), "cuEventRecord");
      CU(launch(g, k[i], tensors), "launching %s", k[i]->desc.name);
      CU(g->cu.cuEventRecord(events[e + 1], g->stream), "cuEventRecord");
    }
  CU(g->cu.cuStreamSynchronize(g->stream), "running the timed repetitions of %s%s", k[0]->desc.name,
     n > 1 ? " and others" : "");
  /* Right after the repetitions, while the clocks are still where the
   * variants ran them. */
  if ((rc = fat_gpu_clock_mhz(g, &clock_mhz, err, errlen)) != FAT_GPU_OK) goto out;

  for (int i = 0; i < n; i++) {
    fat_stats st;
    for (int r = 0; r < o->reps; r++) {
      size_t e = 2 * ((size_t)i * o->reps + r);
      float elapsed;
      CU(g->cu.cuEventElapsedTime(&elapsed, events[e], events[e + 1]), "cuEventElapsedTime");
      ms[r] = elapsed;
    }
    if (fat_stats_compute(ms, (size_t)o->reps, &st)) {
      snprintf(err, errlen, "timings of %s are not numbers", k[i]->desc.name);
      rc = FAT_GPU_FAILED;
      goto out;
    }
    fat_timing *ti = &out[i];
    memset(ti, 0, sizeof *ti);
    ti->reps = o->reps;
    ti->median_ms = st.median;
    ti->min_ms = st.min;
    ti->max_ms = st.max;
    ti->p10_ms = st.p10;
    ti->p90_ms = st.p90;
    ti->tflops = st.median > 0 ? fat_problem_flops(p) / (st.median / MS_PER_S) / FLOP_PER_TFLOP : 0;
    ti->sm_clock_mhz = clock_mhz;
  }
  rc = FAT_GPU_OK;
out:
  if (events)
    for (size_t e = 0; e < n_events; e++)
      if (events[e]) g->cu.cuEventDestroy(events[e]);
  free(events);
  free(ms);
  return rc;
}

int fat_gpu_time(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                 const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                 size_t errlen) {
  int rc = FAT_GPU_FAILED;
  fat_gpu_tensors t;
  fat_check_shape shape = {.batch = p->batch, .heads = p->heads, .heads_k = p->heads_k,
                           .seqlen_q = p->seqlen_q, .seqlen_k = p->seqlen_k,
                           .window_left = p->window_left, .window_right = p->window_right,
                           .varlen = p->lengths.n > 0, .lengths = p->lengths};

  memset(&t, 0, sizeof t);
  if (n >= 1 && k[0]->desc.direction == FAT_BWD) return time_bwd(g, k, n, p, o, seed, out, err, errlen);
  if (n < 1 || o->reps < 1 || o->warmup < 0) {
    snprintf(err, errlen, "timing needs at least one variant and one repetition (got %d variants, "
             "%d reps, %d warm-up)", n, o->reps, o->warmup);
    return FAT_GPU_FAILED;
  }
  for (int i = 0; i < n; i++)
    if (k[i]->desc.head_dim != p->head_dim || k[i]->desc.dtype != p->dtype ||
        k[i]->desc.mask != p->mask) {
      snprintf(err, errlen, "%s (d%d %s %s) cannot run the problem d%d %s %s", k[i]->desc.name,
               k[i]->desc.head_dim, fat_dtype_name(k[i]->desc.dtype), fat_mask_name(k[i]->desc.mask),
               p->head_dim, fat_dtype_name(p->dtype), fat_mask_name(p->mask));
      return FAT_GPU_FAILED;
    }
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if (o->flush_l2 && (rc = ensure_flush_buffer(g, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_tensors_alloc(g, &shape, p->head_dim, p->dtype, 0, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  if ((rc = fat_gpu_fill_random(g, &t, seed, err, errlen)) != FAT_GPU_OK) goto out;
  for (int i = 0; i < n; i++)
    if ((rc = fat_gpu_ensure_workspace(g, k[i], &t, err, errlen)) != FAT_GPU_OK) goto out;

  rc = time_round_robin(g, k, n, p, o, launch_fwd, &t, out, err, errlen);
out:
  fat_gpu_tensors_free(g, &t);
  return rc;
}

/* ---- ceilings ------------------------------------------------------- */

/* Median of REPS event-timed launches of FN after WARMUP untimed ones. */
static int time_launches(fat_gpu *g, CUfunction fn, unsigned blocks, void **args, int reps,
                         int warmup, const char *what, double *median_ms, char *err,
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
    CU(g->cu.cuLaunchKernel(fn, blocks, 1, 1, CEIL_THREADS, 1, 1, 0, g->stream, args, NULL),
       "warm-up launch of %s", what);
  for (int r = 0; r < reps; r++) {
    float elapsed;
    CU(g->cu.cuEventRecord(start, g->stream), "cuEventRecord");
    CU(g->cu.cuLaunchKernel(fn, blocks, 1, 1, CEIL_THREADS, 1, 1, 0, g->stream, args, NULL),
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

/* FLOP/s of one mma microbenchmark: the FLOPs its warps counted over every
 * launch, per launch, over the median time. */
static int mma_rate(fat_gpu *g, CUfunction fn, const char *what, unsigned bits, CUdeviceptr sink,
                    CUdeviceptr flops, int reps, int warmup, double *rate, char *err,
                    size_t errlen) {
  int rc = FAT_GPU_OK, iters = CEIL_MMA_ITERS;
  unsigned long long counted = 0;
  double ms = 0;
  unsigned a_bits = bits, b_bits = bits;
  const unsigned blocks = (unsigned)g->info.sm_count * CEIL_MMA_BLOCKS_PER_SM;
  void *args[] = {&sink, &flops, &a_bits, &b_bits, &iters};
  CU(g->cu.cuMemsetD8Async(flops, 0, sizeof counted, g->stream), "clearing the FLOP counter");
  if ((rc = time_launches(g, fn, blocks, args, reps, warmup, what, &ms, err, errlen)) != FAT_GPU_OK)
    goto out;
  if ((rc = fat_gpu_download(g, &counted, flops, sizeof counted, err, errlen)) != FAT_GPU_OK) goto out;
  *rate = (double)counted / (reps + warmup) / (ms / MS_PER_S);
out:
  return rc;
}

int fat_gpu_measure_ceilings(fat_gpu *g, const void *cubin, int reps, int warmup,
                             fat_ceilings *out, char *err, size_t errlen) {
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
  if ((rc = time_launches(g, copy_fn, (unsigned)g->info.sm_count * CEIL_COPY_BLOCKS_PER_SM, copy_args,
                          reps, warmup, COPY_ENTRY, &copy_ms, err, errlen)) != FAT_GPU_OK)
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

/* ---- backward ------------------------------------------------------- */

#define REF_BWD_THREADS 256               /* 8 warps: 8 rows (or keys) per reference block */
#define REF_BWD_MAX_HEAD_DIM 256          /* reference_bwd.cu: 8 columns per lane */
#define BWD_TIMING_LSE 8.0f               /* lse of timing runs: values are irrelevant there,
                                             this keeps P small and finite */

int fat_gpu_bwd_tensors_alloc(fat_gpu *g, const fat_check_shape *s, int head_dim, fat_dtype dtype,
                              int with_reference, fat_gpu_bwd_tensors *t, char *err, size_t errlen) {
  int rc;
  memset(t, 0, sizeof *t);
  if ((rc = fat_gpu_tensors_alloc(g, s, head_dim, dtype, with_reference, &t->fwd, err, errlen)) !=
      FAT_GPU_OK)
    return rc;
  const size_t e = fat_dtype_size(dtype), n_q = t->fwd.n_q, n_kv = t->fwd.n_kv, rows = t->fwd.n_rows;
  CU(g->cu.cuMemAlloc(&t->dout, n_q * e), "cuMemAlloc of dO, %zu bytes", n_q * e);
  CU(g->cu.cuMemAlloc(&t->dq, n_q * e), "cuMemAlloc of dQ, %zu bytes", n_q * e);
  CU(g->cu.cuMemAlloc(&t->dk, n_kv * e), "cuMemAlloc of dK, %zu bytes", n_kv * e);
  CU(g->cu.cuMemAlloc(&t->dv, n_kv * e), "cuMemAlloc of dV, %zu bytes", n_kv * e);
  CU(g->cu.cuMemAlloc(&t->delta, rows * sizeof(float)), "cuMemAlloc of D");
  CU(g->cu.cuMemAlloc(&t->dq_accum, n_q * sizeof(float)), "cuMemAlloc of the dQ accumulator, %zu bytes",
     n_q * sizeof(float));
  if (with_reference) {
    CU(g->cu.cuMemAlloc(&t->ref_dq, n_q * sizeof(double)), "cuMemAlloc of the reference dQ");
    CU(g->cu.cuMemAlloc(&t->ref_dk, n_kv * sizeof(double)), "cuMemAlloc of the reference dK");
    CU(g->cu.cuMemAlloc(&t->ref_dv, n_kv * sizeof(double)), "cuMemAlloc of the reference dV");
    CU(g->cu.cuMemAlloc(&t->ref_delta, rows * sizeof(double)), "cuMemAlloc of the reference D");
  }
  fat_bwd_params *p = &t->params;
  const fat_fwd_params *f = &t->fwd.params;
  p->fwd = *f;
  p->dout = (const void *)(uintptr_t)t->dout;
  p->dq = (void *)(uintptr_t)t->dq;
  p->dk = (void *)(uintptr_t)t->dk;
  p->dv = (void *)(uintptr_t)t->dv;
  p->delta = (float *)(uintptr_t)t->delta;
  p->dq_accum = (float *)(uintptr_t)t->dq_accum;
  /* Gradients in their inputs' (contiguous) layouts. */
  p->do_batch_stride = p->dq_batch_stride = f->q_batch_stride;
  p->do_row_stride = p->dq_row_stride = f->q_row_stride;
  p->do_head_stride = p->dq_head_stride = f->q_head_stride;
  p->dk_batch_stride = p->dv_batch_stride = f->k_batch_stride;
  p->dk_row_stride = p->dv_row_stride = f->k_row_stride;
  p->dk_head_stride = p->dv_head_stride = f->k_head_stride;
out:
  if (rc != FAT_GPU_OK) fat_gpu_bwd_tensors_free(g, t);
  return rc;
}

void fat_gpu_bwd_tensors_free(fat_gpu *g, fat_gpu_bwd_tensors *t) {
  CUdeviceptr *all[] = {&t->dout, &t->dq, &t->dk, &t->dv, &t->delta, &t->dq_accum,
                        &t->ref_dq, &t->ref_dk, &t->ref_dv, &t->ref_delta};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (*all[i]) {
      g->cu.cuMemFree(*all[i]);
      *all[i] = 0;
    }
  fat_gpu_tensors_free(g, &t->fwd);
}

CUresult fat_gpu_bwd_launch(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_bwd_tensors *t) {
  const fat_kernel_desc *d = &k->desc;
  const fat_bwd_kernels fns = {k->bwd_pre_fn, k->fn, k->bwd_dq_fn, k->bwd_convert_fn};
  const fat_bwd_geometry geo = {.block_n = d->block_m, .block_q = d->block_q, .dq_separate = d->dq_separate,
                                .threads = d->threads, .smem_bytes = d->smem_bytes,
                                .tma = d->kind == FAT_KERNEL_FUSED_TMA, .bf16 = d->dtype == FAT_BF16};
  return fat_bwd_launch(&g->cu, &fns, &geo, &t->params, g->stream);
}

/* O and lse for the backward: the fp64 forward reference rounded as a
 * forward kernel returns them (O to the dtype, lse to fp32), then the fp64
 * reference gradients (and D) when T has them. */
static int bwd_reference(fat_gpu *g, fat_gpu_bwd_tensors *t, fat_mask mask, int gradients,
                         char *err, size_t errlen) {
  int rc;
  if ((rc = fat_gpu_reference(g, &t->fwd, mask, err, errlen)) != FAT_GPU_OK) return rc;
  const fat_fwd_params *p = &t->params.fwd;
  unsigned long long n = t->fwd.n_q, rows = t->fwd.n_rows;
  int is_bf16 = t->fwd.dtype == FAT_BF16, mask_mode = (int)mask, d = t->fwd.head_dim;
  size_t blocks = (n + FILL_THREADS - 1) / FILL_THREADS;
  if (blocks > FILL_MAX_BLOCKS) blocks = FILL_MAX_BLOCKS;
  void *round_args[] = {&t->fwd.ref_o, &t->fwd.o, &n, &is_bf16, &t->fwd.ref_lse, &t->fwd.lse, &rows};
  CU(g->cu.cuLaunchKernel(g->ref_bwd_round_fn, (unsigned)blocks, 1, 1, FILL_THREADS, 1, 1, 0, g->stream,
                          round_args, NULL),
     "rounding the reference O and lse");
  if (gradients) {
    const unsigned warps = REF_BWD_THREADS / 32;
    void *rows_args[] = {&t->params, &d, &is_bf16, &mask_mode, &t->fwd.ref_lse, &t->ref_delta, &t->ref_dq};
    void *cols_args[] = {&t->params, &d,          &is_bf16,    &mask_mode,
                         &t->fwd.ref_lse, &t->ref_delta, &t->ref_dk, &t->ref_dv};
    CU(g->cu.cuLaunchKernel(g->ref_bwd_rows_fn, ((unsigned)p->seqlen_q + warps - 1) / warps,
                            (unsigned)p->heads, (unsigned)p->batch, REF_BWD_THREADS, 1, 1, 0, g->stream,
                            rows_args, NULL),
       "launching the backward reference (rows)");
    CU(g->cu.cuLaunchKernel(g->ref_bwd_cols_fn, ((unsigned)p->seqlen_k + warps - 1) / warps,
                            (unsigned)p->heads_k, (unsigned)p->batch, REF_BWD_THREADS, 1, 1, 0, g->stream,
                            cols_args, NULL),
       "launching the backward reference (columns)");
  }
  CU(g->cu.cuStreamSynchronize(g->stream), "running the backward reference on %dx%dx%dx%d", p->batch,
     p->heads, p->seqlen_q, p->seqlen_k);
out:
  return rc;
}

/* NaN into every output of the variant. */
static int bwd_poison(fat_gpu *g, fat_gpu_bwd_tensors *t, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  const size_t e = fat_dtype_size(t->fwd.dtype);
  CU(g->cu.cuMemsetD8Async(t->dq, POISON_BYTE, t->fwd.n_q * e, g->stream), "poisoning dQ");
  CU(g->cu.cuMemsetD8Async(t->dk, POISON_BYTE, t->fwd.n_kv * e, g->stream), "poisoning dK");
  CU(g->cu.cuMemsetD8Async(t->dv, POISON_BYTE, t->fwd.n_kv * e, g->stream), "poisoning dV");
  CU(g->cu.cuMemsetD8Async(t->delta, POISON_BYTE, t->fwd.n_rows * sizeof(float), g->stream), "poisoning D");
  CU(g->cu.cuMemsetD8Async(t->dq_accum, POISON_BYTE, t->fwd.n_q * sizeof(float), g->stream),
     "poisoning the dQ accumulator");
out:
  return rc;
}

/* Runs K once on T (poisoned first) and downloads the three gradients into
 * G (dQ: n_q values, dK and dV: n_kv). A refused launch sets REFUSED to its
 * result and returns OK. */
static int bwd_run_once(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_bwd_tensors *t,
                        uint16_t *const grads[FAT_N_GRADS], CUresult *refused, char *err, size_t errlen) {
  int rc;
  const size_t e = fat_dtype_size(t->fwd.dtype);
  *refused = CUDA_SUCCESS;
  if ((rc = bwd_poison(g, t, err, errlen)) != FAT_GPU_OK) return rc;
  CUresult r = fat_gpu_bwd_launch(g, k, t);
  if (r != CUDA_SUCCESS) {
    if (fat_cuda_result_is_sticky(r)) return cu_fail(g, r, err, errlen, "launching %s", k->desc.name);
    *refused = r;
    return FAT_GPU_OK;
  }
  const fat_fwd_params *p = &t->params.fwd;
  CU(g->cu.cuStreamSynchronize(g->stream), "running %s on %dx%dx%dx%d", k->desc.name, p->batch, p->heads,
     p->seqlen_q, p->seqlen_k);
  if ((rc = fat_gpu_download(g, grads[FAT_GRAD_DQ], t->dq, t->fwd.n_q * e, err, errlen)) ||
      (rc = fat_gpu_download(g, grads[FAT_GRAD_DK], t->dk, t->fwd.n_kv * e, err, errlen)) ||
      (rc = fat_gpu_download(g, grads[FAT_GRAD_DV], t->dv, t->fwd.n_kv * e, err, errlen)))
    return rc;
out:
  return rc;
}

int fat_gpu_check_bwd(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                      fat_bwd_check *bc, fat_check *out, char *err, size_t errlen) {
  int rc;
  fat_gpu_bwd_tensors t;
  fat_bwd_check local;
  uint16_t *grads[FAT_N_GRADS] = {NULL}, *again[FAT_N_GRADS] = {NULL};
  double *ref[FAT_N_GRADS] = {NULL};
  const fat_kernel_desc *d = &k->desc;
  CUresult refused = CUDA_SUCCESS;

  if (!bc) bc = &local;
  memset(bc, 0, sizeof *bc);
  bc->deterministic = -1;
  memset(out, 0, sizeof *out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if (d->head_dim > REF_BWD_MAX_HEAD_DIM) {
    snprintf(err, errlen, "head_dim %d is too large for the backward reference (at most %d)",
             d->head_dim, REF_BWD_MAX_HEAD_DIM);
    return FAT_GPU_FAILED;
  }
  if ((rc = fat_gpu_bwd_tensors_alloc(g, s, d->head_dim, d->dtype, 1, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  const size_t n[FAT_N_GRADS] = {t.fwd.n_q, t.fwd.n_kv, t.fwd.n_kv};
  for (int i = 0; i < FAT_N_GRADS; i++) {
    grads[i] = malloc(n[i] * sizeof **grads);
    again[i] = d->dq_separate ? malloc(n[i] * sizeof **again) : NULL;
    ref[i] = malloc(n[i] * sizeof **ref);
    if (!grads[i] || !ref[i] || (d->dq_separate && !again[i])) {
      snprintf(err, errlen, "out of host memory for the gradients of %dx%dx%dx%d", s->batch, s->heads,
               s->seqlen_q, s->seqlen_k);
      rc = FAT_GPU_FAILED;
      goto out;
    }
  }
  if ((rc = fat_gpu_fill_random(g, &t.fwd, seed, err, errlen)) != FAT_GPU_OK ||
      (rc = fill_one(g, t.dout, t.fwd.n_q, d->dtype, fat_seed_derive(seed, SEED_DO), "dO", err, errlen)) !=
          FAT_GPU_OK ||
      (rc = bwd_reference(g, &t, d->mask, 1, err, errlen)) != FAT_GPU_OK)
    goto out;
  if ((rc = bwd_run_once(g, k, &t, grads, &refused, err, errlen)) != FAT_GPU_OK) goto out;
  if (refused != CUDA_SUCCESS) {
    /* A refused launch is the variant's failure, not the worker's. */
    char text[WHAT_MAX];
    snprintf(out->reason, sizeof out->reason, "launch: %s",
             fat_cuda_result_text(&g->cu, refused, text, sizeof text));
    out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
    goto out;
  }
  if ((rc = fat_gpu_download(g, ref[FAT_GRAD_DQ], t.ref_dq, n[0] * sizeof(double), err, errlen)) ||
      (rc = fat_gpu_download(g, ref[FAT_GRAD_DK], t.ref_dk, n[1] * sizeof(double), err, errlen)) ||
      (rc = fat_gpu_download(g, ref[FAT_GRAD_DV], t.ref_dv, n[2] * sizeof(double), err, errlen)))
    goto out;
  fat_compare_bwd(d->dtype, (const uint16_t *const *)grads, (const double *const *)ref, n, bc, out);
  if (d->dq_separate) {
    /* The deterministic mode's promise: the same inputs give the same bits. */
    if ((rc = bwd_run_once(g, k, &t, again, &refused, err, errlen)) != FAT_GPU_OK) goto out;
    bc->deterministic = refused == CUDA_SUCCESS;
    if (!bc->deterministic && out->passed) {
      char text[WHAT_MAX];
      out->passed = 0;
      snprintf(out->reason, sizeof out->reason, "launch: %s (second run)",
               fat_cuda_result_text(&g->cu, refused, text, sizeof text));
    }
    for (int i = 0; i < FAT_N_GRADS && bc->deterministic; i++)
      if (memcmp(grads[i], again[i], n[i] * sizeof **grads) != 0) {
        bc->deterministic = 0;
        if (out->passed) {
          out->passed = 0;
          snprintf(out->reason, sizeof out->reason, "not deterministic: %s differs between two runs",
                   fat_grad_name(i));
        }
      }
  }
out:
  for (int i = 0; i < FAT_N_GRADS; i++) {
    free(grads[i]);
    free(again[i]);
    free(ref[i]);
  }
  fat_gpu_bwd_tensors_free(g, &t);
  return rc;
}

/* fat_gpu_time for backward kernels: the whole backward (every kernel of
 * it) between one pair of events, on inputs random once from SEED and a
 * constant lse (timing needs no reference). */
static int time_bwd(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                    const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                    size_t errlen) {
  int rc = FAT_GPU_FAILED;
  fat_gpu_bwd_tensors t;
  const fat_check_shape shape = {.batch = p->batch, .heads = p->heads, .heads_k = p->heads_k,
                                 .seqlen_q = p->seqlen_q, .seqlen_k = p->seqlen_k,
                                 .window_left = p->window_left, .window_right = p->window_right};
  const float lse_value = BWD_TIMING_LSE;
  unsigned lse_bits;

  memset(&t, 0, sizeof t);
  if (o->reps < 1 || o->warmup < 0) {
    snprintf(err, errlen, "timing needs at least one variant and one repetition (got %d variants, "
             "%d reps, %d warm-up)", n, o->reps, o->warmup);
    return FAT_GPU_FAILED;
  }
  if (p->lengths.n > 0) {
    snprintf(err, errlen, "the backward takes dense batches only, not a variable-length profile");
    return FAT_GPU_FAILED;
  }
  for (int i = 0; i < n; i++)
    if (k[i]->desc.direction != p->direction || k[i]->desc.head_dim != p->head_dim ||
        k[i]->desc.dtype != p->dtype || k[i]->desc.mask != p->mask) {
      snprintf(err, errlen, "%s (%s d%d %s %s) cannot run the problem %s d%d %s %s", k[i]->desc.name,
               fat_direction_name(k[i]->desc.direction), k[i]->desc.head_dim,
               fat_dtype_name(k[i]->desc.dtype), fat_mask_name(k[i]->desc.mask),
               fat_direction_name(p->direction), p->head_dim, fat_dtype_name(p->dtype),
               fat_mask_name(p->mask));
      return FAT_GPU_FAILED;
    }
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if (o->flush_l2 && (rc = ensure_flush_buffer(g, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_bwd_tensors_alloc(g, &shape, p->head_dim, p->dtype, 0, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  memcpy(&lse_bits, &lse_value, sizeof lse_bits);
  if ((rc = fat_gpu_fill_random(g, &t.fwd, seed, err, errlen)) != FAT_GPU_OK ||
      (rc = fill_one(g, t.fwd.o, t.fwd.n_q, p->dtype, fat_seed_derive(seed, SEED_DO + 1), "O", err,
                     errlen)) != FAT_GPU_OK ||
      (rc = fill_one(g, t.dout, t.fwd.n_q, p->dtype, fat_seed_derive(seed, SEED_DO), "dO", err, errlen)) !=
          FAT_GPU_OK)
    goto out;
  CU(g->cu.cuMemsetD32Async(t.fwd.lse, lse_bits, t.fwd.n_rows, g->stream), "filling lse");

  rc = time_round_robin(g, k, n, p, o, launch_bwd, &t, out, err, errlen);
out:
  fat_gpu_bwd_tensors_free(g, &t);
  return rc;
}
