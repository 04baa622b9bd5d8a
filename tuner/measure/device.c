/* SPDX-License-Identifier: MIT */
/* The worker's GPU (gpu_run.h): opening the device, the support kernels'
 * sources, compilation and loading, the tensors of a forward and a backward
 * problem and their random inputs, and copies back to the host. The files
 * beside it check, time and measure on what this one sets up. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "bwd_launch.h"
#include "compile.h"
#include "embedded.h"
#include "fat_e4m3.h"
#include "fwd_launch.h"
#include "gpu_run_int.h"

#define UTIL_PATH "templates/fat_util.cu"
#define REFERENCE_PATH "templates/reference_fwd.cu"
#define REFERENCE_BWD_PATH "templates/reference_bwd.cu"
#define ABI_PATH "templates/fat_abi.h"
#define ABI_BWD_PATH "templates/fat_abi_bwd.h"
#define ABI_FP8_PATH "templates/fat_abi_fp8.h"
#define E4M3_PATH "templates/fat_e4m3.h"
#define FILL_ENTRY "fat_fill_normal"
#define FILL_E4M3_AMAX_ENTRY "fat_fill_e4m3_amax"
#define FILL_E4M3_ENTRY "fat_fill_e4m3"
#define CLOCK_ENTRY "fat_clock_probe"
#define DIFF_ENTRY "fat_diff_sums"
#define COUNT_DIFF_ENTRY "fat_count_diff"
#define FINGERPRINT_ENTRY "fat_fingerprint"
#define REFERENCE_ENTRY "fat_reference_fwd"
#define REF_BWD_ROUND_ENTRY "fat_reference_bwd_round"
#define REF_BWD_ROWS_ENTRY "fat_reference_bwd_rows"
#define REF_BWD_COLS_ENTRY "fat_reference_bwd_cols"
#define SEED_GOLDEN 0x9e3779b97f4a7c15ull
#define POISON_PAGE_BYTE 0xff           /* 0xFFFF: NaN in fp16 and bf16; 0xFF in e4m3 */
#define LOG_EXCERPT 2000                /* bytes of an NVRTC log quoted in an error */
#define TEMPLATES_DIR "templates/"
#define TEMPLATE_NAME_MAX 256           /* a file name in templates/ */
#define TEMPLATE_PATH_MAX (sizeof TEMPLATES_DIR + TEMPLATE_NAME_MAX)
#define INCLUDE_LINE_MAX 512            /* a #line marker naming a template's path */
#define MAX_INLINED 16                  /* templates one assembled source may inline */

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
  int rc = FAT_GPU_OPEN_FAILED, count = 0, cc_major = 0, cc_minor = 0;
  CUresult r;
  char text[WHAT_MAX];
  fat_gpu *g = calloc(1, sizeof *g);
  *out = NULL;
  if (!g) {
    snprintf(err, errlen, "out of host memory opening GPU %d", index);
    return FAT_GPU_OPEN_FAILED;
  }
  fat_ref_cache_init(&g->refs, 0);
  if (fat_cuda_load(&g->cu, err, errlen)) {
    rc = FAT_GPU_NO_DRIVER;
    goto out;
  }
  if ((r = g->cu.cuInit(0)) != CUDA_SUCCESS) {
    snprintf(err, errlen, "no CUDA device: cuInit: %s", fat_cuda_result_text(&g->cu, r, text, sizeof text));
    rc = FAT_GPU_NO_DEVICE;
    goto out;
  }
  CU(g->cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  g->device_count = count;
  if (index < 0 || index >= count) {
    snprintf(err, errlen, "GPU index %d out of range: %d device%s found", index, count,
             count == 1 ? "" : "s");
    rc = FAT_GPU_BAD_INDEX;
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
  rc = FAT_GPU_OPENED;
out:
  if (rc < 0) rc = FAT_GPU_OPEN_FAILED; /* a driver call CU() saw fail */
  if (rc) fat_gpu_close(g);
  return rc;
}

void fat_gpu_close(fat_gpu *g) {
  if (!g) return;
  fat_ref_cache_clear(&g->refs);
  if (g->ctx) {
    /* Best effort: after a fault these fail, and the process exits anyway. */
    if (g->flush) g->cu.cuMemFree(g->flush);
    if (g->probe) g->cu.cuMemFree(g->probe);
    if (g->diff_partials) g->cu.cuMemFree(g->diff_partials);
    if (g->util_module) g->cu.cuModuleUnload(g->util_module);
    if (g->ref_module) g->cu.cuModuleUnload(g->ref_module);
    if (g->stream) g->cu.cuStreamDestroy(g->stream);
    g->cu.cuDevicePrimaryCtxRelease(g->dev);
  }
  fat_cuda_unload(&g->cu);
  free(g);
}

void fat_gpu_take_phases(fat_gpu *g, double out[FAT_PHASE_COUNT]) {
  for (int i = 0; i < FAT_PHASE_COUNT; i++) {
    out[i] += g->phase_s[i];
    g->phase_s[i] = 0;
  }
}

const fat_cuda *fat_gpu_driver(const fat_gpu *g) { return &g->cu; }
int fat_gpu_device_count(const fat_gpu *g) { return g->device_count; }
fat_ref_cache *fat_gpu_refs(fat_gpu *g) { return &g->refs; }

void fat_gpu_set_run_hook(fat_gpu *g, void (*hook)(void *ctx), void *ctx) {
  g->run_hook = hook;
  g->run_hook_ctx = ctx;
}

/* ---- support kernels ------------------------------------------------ */

static const fat_embedded_file *embedded(const char *path, char *err, size_t errlen) {
  const fat_embedded_file *f = fat_embedded_find(path);
  if (!f) snprintf(err, errlen, "%s is not embedded in this build", path);
  return f;
}

/* A growing heap string; FAILED once an allocation failed (the text is then cut). */
typedef struct text_buf {
  char *s;
  size_t len, cap;
  int failed;
} text_buf;

static void text_put(text_buf *t, const char *p, size_t n) {
  if (t->failed) return;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + n + 1) cap *= 2;
    char *grown = realloc(t->s, cap);
    if (!grown) {
      t->failed = 1;
      return;
    }
    t->s = grown;
    t->cap = cap;
  }
  memcpy(t->s + t->len, p, n);
  t->len += n;
  t->s[t->len] = '\0';
}

static void text_line(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_line(text_buf *t, const char *fmt, ...) {
  char line[INCLUDE_LINE_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof line) t->failed = 1;
  else text_put(t, line, (size_t)n);
}

/* The N embedded files PARTS as one NVRTC source, each after a #line that
 * keeps NVRTC's messages pointing into it; NULL with err (naming NAME, the
 * module) when a file is missing or the host is out of memory. */
static char *joined_source(const char *const *parts, size_t n, const char *name, char *err, size_t errlen) {
  text_buf t = {0};
  for (size_t i = 0; i < n; i++) {
    const fat_embedded_file *f = embedded(parts[i], err, errlen);
    if (!f) {
      free(t.s);
      return NULL;
    }
    text_line(&t, "%s#line 1 \"%s\"\n", i ? "\n" : "", parts[i]);
    text_put(&t, f->data, f->size);
  }
  if (t.failed) {
    snprintf(err, errlen, "out of host memory copying %s", name);
    free(t.s);
    return NULL;
  }
  return t.s;
}

char *fat_gpu_util_source(char *err, size_t errlen) {
  /* templates/fat_e4m3.h first: the e4m3 fill quantises with it. */
  static const char *const parts[] = {E4M3_PATH, UTIL_PATH};
  return joined_source(parts, sizeof parts / sizeof parts[0], UTIL_PATH, err, errlen);
}

char *fat_gpu_reference_source(char *err, size_t errlen) {
  /* fat_abi.h, fat_abi_bwd.h and fat_abi_fp8.h first, as the generator does
   * for variants, so the references read the parameter blocks exactly as
   * the host lays them out, and fat_e4m3.h, the e4m3 decoding; the forward
   * and backward references share one module. */
  static const char *const parts[] = {ABI_PATH, ABI_BWD_PATH, ABI_FP8_PATH, E4M3_PATH,
                                      REFERENCE_PATH, REFERENCE_BWD_PATH};
  return joined_source(parts, sizeof parts / sizeof parts[0], REFERENCE_PATH, err, errlen);
}

char *fat_gpu_ceilings_source(char *err, size_t errlen) {
  const fat_embedded_file *f = embedded(CEILINGS_PATH, err, errlen);
  char *s = f ? strdup(f->data) : NULL;
  if (f && !s) snprintf(err, errlen, "out of host memory copying %s", CEILINGS_PATH);
  return s;
}

/* The file a line includes when it is `#include "NAME"` of a file in
 * templates/ (no folder in NAME): NAME into OUT, else 0. */
static int quoted_include(const char *line, const char *end, char *out, size_t cap) {
  const char *p = line;
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  if (p == end || *p++ != '#') return 0;
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  if ((size_t)(end - p) < 7 || strncmp(p, "include", 7)) return 0;
  p += 7;
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  if (p == end || *p++ != '"') return 0;
  const char *q = memchr(p, '"', (size_t)(end - p));
  if (!q || q == p || (size_t)(q - p) >= cap || memchr(p, '/', (size_t)(q - p))) return 0;
  memcpy(out, p, (size_t)(q - p));
  out[q - p] = '\0';
  return 1;
}

/* Appends templates/NAME with its quoted includes of other templates
 * inlined, each file once and between #line markers, so that NVRTC's
 * messages name the file and line: generator/expand.lua's rule, for a
 * template compiled without the generator (the wgmma ceilings). SEEN holds
 * the *N_SEEN files inlined so far. */
static int inline_template(text_buf *t, const char *name, const char **seen, int *n_seen,
                           char *err, size_t errlen) {
  char path[TEMPLATE_PATH_MAX], target[TEMPLATE_NAME_MAX];
  snprintf(path, sizeof path, TEMPLATES_DIR "%s", name);
  const fat_embedded_file *f = embedded(path, err, errlen);
  if (!f) return -1;
  if (*n_seen == MAX_INLINED) {
    snprintf(err, errlen, "%s: more than %d templates included", path, MAX_INLINED);
    return -1;
  }
  seen[(*n_seen)++] = f->path;
  int line_no = 1;
  for (const char *p = f->data; *p; line_no++) {
    const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
    int inlined = 0, again = 0;
    if (quoted_include(p, end, target, sizeof target)) {
      char tpath[TEMPLATE_PATH_MAX];
      snprintf(tpath, sizeof tpath, TEMPLATES_DIR "%s", target);
      for (int i = 0; i < *n_seen; i++) again |= !strcmp(seen[i], tpath);
      if (!again && fat_embedded_find(tpath)) {
        text_line(t, "#line 1 \"%s\"\n", tpath);
        if (inline_template(t, target, seen, n_seen, err, errlen)) return -1;
        text_line(t, "#line %d \"%s\"\n", line_no + 1, path);
        inlined = 1;
      } else if (again) {
        text_line(t, "// %s inlined above\n", tpath);
        inlined = 1;
      }
    }
    if (!inlined) {
      text_put(t, p, (size_t)(end - p));
      text_put(t, "\n", 1);
    }
    p = nl ? nl + 1 : end;
  }
  return 0;
}

char *fat_gpu_wgmma_ceilings_source(fat_dtype dtype, char *err, size_t errlen) {
  text_buf t = {0};
  const char *seen[MAX_INLINED];
  int n_seen = 0;
  text_line(&t, "// %s for %s, its includes inlined (tuner/measure/device.c)\n"
                "#define FAT_CEILING_BF16 %d\n#line 1 \"%s\"\n",
            CEILINGS_WGMMA_PATH, fat_dtype_name(dtype), dtype == FAT_BF16, CEILINGS_WGMMA_PATH);
  if (inline_template(&t, &CEILINGS_WGMMA_PATH[strlen(TEMPLATES_DIR)], seen, &n_seen, err, errlen)) {
    free(t.s);
    return NULL;
  }
  if (t.failed) {
    snprintf(err, errlen, "out of host memory assembling %s", CEILINGS_WGMMA_PATH);
    free(t.s);
    return NULL;
  }
  return t.s;
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

int fat_gpu_compile_wgmma_ceilings(const char *arch, fat_dtype dtype, fat_build *b, char *err,
                                   size_t errlen) {
  memset(b, 0, sizeof *b);
  if (!fat_arch_has_wgmma(arch)) {
    snprintf(err, errlen, "%s is for sm_90a (wgmma), not %s", CEILINGS_WGMMA_PATH, arch ? arch : "(null)");
    return -1;
  }
  if (compile_support_one(CEILINGS_WGMMA_PATH, fat_gpu_wgmma_ceilings_source(dtype, err, errlen),
                          arch, b, err, errlen)) {
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
  CU(g->cu.cuModuleGetFunction(&g->fill_e4m3_amax_fn, g->util_module, FILL_E4M3_AMAX_ENTRY), "%s",
     FILL_E4M3_AMAX_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->fill_e4m3_fn, g->util_module, FILL_E4M3_ENTRY), "%s",
     FILL_E4M3_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->clock_fn, g->util_module, CLOCK_ENTRY), "%s", CLOCK_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->diff_fn, g->util_module, DIFF_ENTRY), "%s", DIFF_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->count_diff_fn, g->util_module, COUNT_DIFF_ENTRY), "%s",
     COUNT_DIFF_ENTRY);
  CU(g->cu.cuModuleGetFunction(&g->fingerprint_fn, g->util_module, FINGERPRINT_ENTRY), "%s",
     FINGERPRINT_ENTRY);
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

/* ---- tensors -------------------------------------------------------- */

/* A paged shape's pools, table and used keys (fat_gpu_tensors says what
 * they hold): ROW_BYTES a key row of one head. Each sequence b uses
 * fat_paged_used_keys(s, b) keys in ceil(used / page_size) pages; the pool
 * has those pages and one spare a sequence, and every table row
 * ceil(seqlen_k / page_size) entries. */
static int paged_alloc(fat_gpu *g, const fat_check_shape *s, size_t row_bytes, fat_gpu_tensors *t,
                       char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  const int page = s->page_size, stride = (s->seqlen_k + page - 1) / page;
  t->used_keys = malloc((size_t)s->batch * sizeof *t->used_keys);
  if (!t->used_keys) {
    snprintf(err, errlen, "out of host memory");
    return FAT_GPU_FAILED;
  }
  t->num_pages = s->batch;  /* the spares */
  for (int b = 0; b < s->batch; b++) {
    t->used_keys[b] = fat_paged_used_keys(s, b);
    t->num_pages += (t->used_keys[b] + page - 1) / page;
  }
  t->batch = s->batch, t->seqlen_k = s->seqlen_k, t->heads_k = s->heads_k;
  t->call.page_size = page;
  t->call.block_table_stride = stride;
  const size_t pool = (size_t)t->num_pages * page * s->heads_k * row_bytes;
  const size_t table = (size_t)s->batch * stride * sizeof(int);
  CU(g->cu.cuMemAlloc(&t->k_pages, pool), "cuMemAlloc of the K pages, %zu bytes", pool);
  CU(g->cu.cuMemAlloc(&t->v_pages, pool), "cuMemAlloc of the V pages, %zu bytes", pool);
  CU(g->cu.cuMemAlloc(&t->block_table, table), "cuMemAlloc of the block table");
  CU(g->cu.cuMemAlloc(&t->seqinfo, (size_t)s->batch * sizeof(int)), "cuMemAlloc of seqused_k");
  CU(g->cu.cuMemcpyHtoD(t->seqinfo, t->used_keys, (size_t)s->batch * sizeof(int)), "copying seqused_k");
  t->call.block_table = (const int *)(uintptr_t)t->block_table;
out:
  return rc;
}

/* T's pages laid out anew from SEED: the contiguous K and V (filled) copied
 * a page at a time into pages of the pool in a random order (Fisher-Yates
 * on splitmix64), every other row of the pool NaN, and the table's entries
 * past a sequence's pages naming one of the spares (NaN too): a kernel
 * that reads a row it should not gets NaN into its output. */
static int paged_fill(fat_gpu *g, fat_gpu_tensors *t, uint64_t seed, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  const int page = t->call.page_size, stride = t->call.block_table_stride;
  /* Rows of K and V: one byte an element for e4m3 and the fp8 K/V caches. */
  const size_t e = fat_dtype_kv_size(t->dtype), row = (size_t)t->heads_k * (size_t)t->head_dim * e;
  const size_t page_bytes = (size_t)page * row, pool = (size_t)t->num_pages * page_bytes;
  int *order = malloc((size_t)t->num_pages * sizeof *order);
  int *table = malloc((size_t)t->batch * stride * sizeof *table);
  if (!order || !table) {
    snprintf(err, errlen, "out of host memory");
    rc = FAT_GPU_FAILED;
    goto out;
  }
  for (int i = 0; i < t->num_pages; i++) order[i] = i;
  for (int i = t->num_pages - 1; i > 0; i--) {
    const int j = (int)(fat_seed_derive(seed, (uint64_t)i) % (uint64_t)(i + 1));
    const int x = order[i];
    order[i] = order[j], order[j] = x;
  }
  CU(g->cu.cuMemsetD8Async(t->k_pages, POISON_PAGE_BYTE, pool, g->stream), "poisoning the K pages");
  CU(g->cu.cuMemsetD8Async(t->v_pages, POISON_PAGE_BYTE, pool, g->stream), "poisoning the V pages");
  const int spare = order[t->num_pages - 1];  /* never written */
  int next = 0;
  for (int b = 0; b < t->batch; b++)
    for (int i = 0; i < stride; i++) {
      const int r0 = i * page, rows = t->used_keys[b] - r0 < page ? t->used_keys[b] - r0 : page;
      if (rows <= 0) {
        table[b * stride + i] = spare;
        continue;
      }
      const int at = table[b * stride + i] = order[next++];
      const size_t from = ((size_t)b * t->seqlen_k + (size_t)r0) * row, to = (size_t)at * page_bytes;
      CU(g->cu.cuMemcpyDtoDAsync(t->k_pages + to, t->k + from, (size_t)rows * row, g->stream),
         "copying K rows into page %d", at);
      CU(g->cu.cuMemcpyDtoDAsync(t->v_pages + to, t->v + from, (size_t)rows * row, g->stream),
         "copying V rows into page %d", at);
    }
  /* Synchronous: the table on the host is freed below. */
  CU(g->cu.cuStreamSynchronize(g->stream), "waiting for the pages");
  CU(g->cu.cuMemcpyHtoD(t->block_table, table, (size_t)t->batch * stride * sizeof *table),
     "copying the block table");
out:
  free(order);
  free(table);
  return rc;
}

/* The first of q, k and v (0, 1, 2: fat_fwd_fp8_params' order) that DTYPE
 * holds in e4m3: 0 for e4m3, 1 for an fp8 K/V cache (Q 16-bit). */
static int fp8_first_tensor(fat_dtype dtype) { return dtype == FAT_E4M3 ? 0 : 1; }

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
  /* Bytes an element of Q, of K and V (one for e4m3 and the fp8 K/V
   * caches, whose Q is 16-bit) and of O. */
  const size_t d = (size_t)dp, e = fat_dtype_size(dtype), e_kv = fat_dtype_kv_size(dtype);
  const size_t e_out = fat_dtype_size(fat_dtype_out(dtype));
  long long total_q = (long long)s->batch * s->seqlen_q, total_k = (long long)s->batch * s->seqlen_k;
  if (s->page_size > 0) {
    if ((rc = paged_alloc(g, s, d * e_kv, t, err, errlen)) != FAT_GPU_OK) goto out;
  } else if (s->varlen) {
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
  CU(g->cu.cuMemAlloc(&t->k, t->n_kv * e_kv), "cuMemAlloc of K, %zu bytes", t->n_kv * e_kv);
  CU(g->cu.cuMemAlloc(&t->v, t->n_kv * e_kv), "cuMemAlloc of V, %zu bytes", t->n_kv * e_kv);
  CU(g->cu.cuMemAlloc(&t->o, t->n_q * e_out), "cuMemAlloc of O, %zu bytes", t->n_q * e_out);
  if (fat_dtype_kv_fp8(dtype)) {
    /* Each of q, k and v: its descale factors, then its amax scratch (q's
     * unused by an fp8 K/V cache, whose Q is 16-bit and has no factor:
     * descale[0] stays NULL, as the kernels and the reference expect). */
    const int per_head = s->descale_per_head != 0;
    t->descale_groups = per_head ? s->batch * s->heads_k : 1;
    const size_t bytes = (size_t)FAT_FP8_TENSORS * 2 * (size_t)t->descale_groups * sizeof(float);
    CU(g->cu.cuMemAlloc(&t->descale, bytes), "cuMemAlloc of the descale factors, %zu bytes", bytes);
    for (int i = fp8_first_tensor(dtype); i < FAT_FP8_TENSORS; i++) {
      t->call.fp8.descale[i] = (const float *)(uintptr_t)(t->descale + (size_t)i * t->descale_groups *
                                                                        sizeof(float));
      t->call.fp8.batch_stride[i] = per_head ? s->heads_k : 0;
      t->call.fp8.head_stride[i] = per_head ? 1 : 0;
    }
  }
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
  if (s->page_size > 0) {
    p->seqused_k = (const int *)(uintptr_t)t->seqinfo;
  } else if (s->varlen) {
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
  CUdeviceptr *all[] = {&t->q,       &t->k,       &t->v,         &t->o,      &t->lse,
                        &t->ref_o,   &t->ref_lse, &t->workspace, &t->seqinfo,
                        &t->k_pages, &t->v_pages, &t->block_table, &t->descale};
  free(t->used_keys);
  t->used_keys = NULL;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (*all[i]) {
      g->cu.cuMemFree(*all[i]);
      *all[i] = 0;
    }
  t->workspace_bytes = 0;
}

int fat_gpu_fill_one(fat_gpu *g, CUdeviceptr dst, size_t n, fat_dtype dtype, uint64_t seed,
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

/* Fills e4m3 tensor I (0 q, 1 k, 2 v) of T at DST, N elements of LAYOUT,
 * from SEED: its amax per descale group, then the bytes and the factors. */
static int fill_e4m3(fat_gpu *g, fat_gpu_tensors *t, int i, CUdeviceptr dst, size_t n,
                     fat_fp8_fill_layout layout, uint64_t seed, const char *name, char *err,
                     size_t errlen) {
  int rc = FAT_GPU_OK;
  unsigned long long count = n, s = seed;
  const size_t groups = (size_t)t->descale_groups;
  CUdeviceptr descale = t->descale + (size_t)i * groups * sizeof(float);
  CUdeviceptr amax = t->descale + (FAT_FP8_TENSORS + (size_t)i) * groups * sizeof(float);
  int n_groups = t->descale_groups;
  size_t blocks = (n + FILL_THREADS - 1) / FILL_THREADS;
  if (blocks > FILL_MAX_BLOCKS) blocks = FILL_MAX_BLOCKS;
  void *amax_args[] = {&count, &s, &layout, &amax};
  void *fill_args[] = {&dst, &count, &s, &layout, &amax, &descale, &n_groups};
  CU(g->cu.cuMemsetD32Async(amax, 0, groups, g->stream), "zeroing the amax of %s", name);
  CU(g->cu.cuLaunchKernel(g->fill_e4m3_amax_fn, (unsigned)blocks, 1, 1, FILL_THREADS, 1, 1, 0,
                          g->stream, amax_args, NULL),
     "the amax of %s's random values", name);
  CU(g->cu.cuLaunchKernel(g->fill_e4m3_fn, (unsigned)blocks, 1, 1, FILL_THREADS, 1, 1, 0, g->stream,
                          fill_args, NULL),
     "filling %s with random e4m3 values", name);
out:
  return rc;
}

/* T's e4m3 K and V, and Q too for e4m3 (an fp8 K/V cache's is 16-bit,
 * drawn as the 16-bit dtypes' are), from SEED (fat_gpu_fill_random). */
static int fill_random_fp8(fat_gpu *g, fat_gpu_tensors *t, uint64_t seed, char *err, size_t errlen) {
  const fat_fwd_params *p = &t->params;
  /* K's factors are there for every dtype with fp8 K and V. */
  const int per_head = t->call.fp8.batch_stride[1] != 0 || t->call.fp8.head_stride[1] != 0;
  const fat_fp8_fill_layout q = {.head_dim = t->head_dim, .heads = p->heads,
                                 .group = p->heads / p->heads_k, .heads_k = p->heads_k,
                                 .seqlen = p->seqlen_q, .batch = p->batch, .per_head = per_head,
                                 .cu_seqlens = p->cu_seqlens_q};
  fat_fp8_fill_layout kv = q;
  kv.heads = p->heads_k, kv.group = 1, kv.seqlen = p->seqlen_k, kv.cu_seqlens = p->cu_seqlens_k;
  int rc;
  if ((rc = fp8_first_tensor(t->dtype) == 0
                ? fill_e4m3(g, t, 0, t->q, t->n_q, q, fat_seed_derive(seed, SEED_Q), "Q", err, errlen)
                : fat_gpu_fill_one(g, t->q, t->n_q, fat_dtype_out(t->dtype), fat_seed_derive(seed, SEED_Q),
                                   "Q", err, errlen)) ||
      (rc = fill_e4m3(g, t, 1, t->k, t->n_kv, kv, fat_seed_derive(seed, SEED_K), "K", err, errlen)) ||
      (rc = fill_e4m3(g, t, 2, t->v, t->n_kv, kv, fat_seed_derive(seed, SEED_V), "V", err, errlen)))
    return rc;
  return FAT_GPU_OK;
}

int fat_gpu_fill_random(fat_gpu *g, fat_gpu_tensors *t, uint64_t seed, char *err, size_t errlen) {
  int rc;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if (fat_dtype_kv_fp8(t->dtype)) {
    if ((rc = fill_random_fp8(g, t, seed, err, errlen)) != FAT_GPU_OK) return rc;
  } else if ((rc = fat_gpu_fill_one(g, t->q, t->n_q, t->dtype, fat_seed_derive(seed, SEED_Q), "Q", err,
                                     errlen)) ||
             (rc = fat_gpu_fill_one(g, t->k, t->n_kv, t->dtype, fat_seed_derive(seed, SEED_K), "K", err,
                                    errlen)) ||
             (rc = fat_gpu_fill_one(g, t->v, t->n_kv, t->dtype, fat_seed_derive(seed, SEED_V), "V", err,
                                    errlen))) {
    return rc;
  }
  return t->block_table ? paged_fill(g, t, fat_seed_derive(seed, SEED_PAGES), err, errlen) : FAT_GPU_OK;
}

fat_fwd_params fat_gpu_variant_params(const fat_gpu_tensors *t, int paged) {
  fat_fwd_params p = t->params;
  if (!paged || !t->block_table) return p;
  p.k = (const void *)(uintptr_t)t->k_pages;
  p.v = (const void *)(uintptr_t)t->v_pages;
  p.k_batch_stride = p.v_batch_stride = (long long)t->call.page_size * p.k_row_stride;
  return p;
}

int fat_gpu_download(fat_gpu *g, void *dst, CUdeviceptr src, size_t bytes, char *err,
                     size_t errlen) {
  int rc = FAT_GPU_OK;
  CU(g->cu.cuStreamSynchronize(g->stream), "waiting for the stream before a copy");
  CU(g->cu.cuMemcpyDtoH(dst, src, bytes), "copying %zu bytes to the host", bytes);
out:
  return rc;
}

/* ---- backward tensors --------------------------------------------- */

int fat_gpu_bwd_tensors_alloc(fat_gpu *g, const fat_check_shape *s, int head_dim, fat_dtype dtype,
                              int with_reference, fat_gpu_bwd_tensors *t, char *err, size_t errlen) {
  int rc;
  memset(t, 0, sizeof *t);
  if (dtype != FAT_FP16 && dtype != FAT_BF16) {
    snprintf(err, errlen, "dtype %s has no backward (forward only)", fat_dtype_name(dtype));
    return FAT_GPU_FAILED;
  }
  if ((rc = fat_gpu_tensors_alloc(g, s, head_dim, dtype, with_reference, &t->fwd, err, errlen)) !=
      FAT_GPU_OK)
    return rc;
  const size_t e = fat_dtype_size(dtype), n_q = t->fwd.n_q, n_kv = t->fwd.n_kv, rows = t->fwd.n_rows;
  CU(g->cu.cuMemAlloc(&t->dout, n_q * e), "cuMemAlloc of dO, %zu bytes", n_q * e);
  CU(g->cu.cuMemAlloc(&t->dq, n_q * e), "cuMemAlloc of dQ, %zu bytes", n_q * e);
  CU(g->cu.cuMemAlloc(&t->dk, n_kv * e), "cuMemAlloc of dK, %zu bytes", n_kv * e);
  CU(g->cu.cuMemAlloc(&t->dv, n_kv * e), "cuMemAlloc of dV, %zu bytes", n_kv * e);
  CU(g->cu.cuMemAlloc(&t->delta, rows * sizeof(float)), "cuMemAlloc of D");
  /* The accumulator's rows, then an ordered variant's int32 semaphores, as
   * many as any variant of the shape uses (bwd_launch.h; they start after
   * the rows of the problem's head dim, which are no wider than the
   * template's allocated here). */
  size_t n_sems;
  if (fat_bwd_semaphores_bound(s->batch, s->heads, s->seqlen_q, t->fwd.call.total_q, &n_sems)) {
    snprintf(err, errlen, "batch %d x heads %d x seqlen_q %d: more semaphores than a size_t counts",
             s->batch, s->heads, s->seqlen_q);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  _Static_assert(sizeof(int32_t) == sizeof(float), "n_accum counts floats and semaphores alike");
  t->n_accum = rows * FAT_BWD_ACCUM_WIDTH((size_t)head_dim) + n_sems;
  CU(g->cu.cuMemAlloc(&t->dq_accum, t->n_accum * sizeof(float)),
     "cuMemAlloc of the dQ accumulator and its semaphores, %zu bytes", t->n_accum * sizeof(float));
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
