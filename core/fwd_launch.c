/* SPDX-License-Identifier: MIT */
/* The forward's launch (fwd_launch.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "fwd_launch.h"
#include "family.h"

#define WORKSPACE_ALIGN 256
#define TMA_ALIGN 16             /* bytes: a map's base and its strides */
#define TMA_MAX_STRIDE (1ll << 40)
#define TMA_MAX_EXTENT (1ll << 32)

static void tma_tensors(const fat_fwd_params *p, const fat_fwd_call *call, int dtype, fat_tma_tensor t[3]) {
  const int packed_q = p->cu_seqlens_q != NULL, packed_k = p->cu_seqlens_k != NULL;
  const long long rq = packed_q ? call->total_q : p->seqlen_q, rk = packed_k ? call->total_k : p->seqlen_k;
  const int e = (int)fat_dtype_size((fat_dtype)dtype), ekv = (int)fat_dtype_kv_size((fat_dtype)dtype);
  t[0] = (fat_tma_tensor){"q", p->q, rq, p->heads, p->batch, p->q_row_stride, p->q_head_stride,
                      p->q_batch_stride, packed_q, e};
  t[1] = (fat_tma_tensor){"k", p->k, rk, p->heads_k, p->batch, p->k_row_stride, p->k_head_stride,
                      p->k_batch_stride, packed_k, ekv};
  t[2] = (fat_tma_tensor){"v", p->v, rk, p->heads_k, p->batch, p->v_row_stride, p->v_head_stride,
                      p->v_batch_stride, packed_k, ekv};
}

/* The (extent, stride) pairs of T's outer dimensions; a dimension of extent
 * 1 is never stepped, and the map is given a stride it accepts instead. */
static int tma_dims(const fat_tma_tensor *t, long long extent[3], long long stride[3]) {
  const long long e[3] = {t->rows, t->heads, t->batch};
  const long long s[3] = {t->row_stride, t->head_stride, t->batch_stride};
  const int n = t->packed ? 2 : 3;
  for (int i = 0; i < n; i++) {
    extent[i] = e[i];
    stride[i] = e[i] == 1 ? TMA_ALIGN / t->elem_bytes : s[i];
  }
  return n;
}

int fat_tma_describable(const fat_tma_tensor *t, int n_tensors, int head_dim, char *err, size_t errlen) {
  static const char *const dim_names[3] = {"rows", "heads", "batch"};
  static const char *const stride_names[3] = {"row_stride", "head_stride", "batch_stride"};
  if (head_dim < 1) {
    snprintf(err, errlen, "head_dim %d is no tensor map's extent", head_dim);  /* below 2^32 as an int */
    return -1;
  }
  for (int i = 0; i < n_tensors; i++) {
    long long extent[3], stride[3];
    const int n = tma_dims(&t[i], extent, stride);
    if ((uintptr_t)t[i].base % TMA_ALIGN) {
      snprintf(err, errlen, "%s at %p is not %d-byte aligned (tensor maps need it)", t[i].name,
               t[i].base, TMA_ALIGN);
      return -1;
    }
    for (int d = 0; d < n; d++) {
      if (extent[d] < 1 || extent[d] >= TMA_MAX_EXTENT) {
        snprintf(err, errlen, "%s has %lld %s: a tensor map's extent is 1 .. 2^32 - 1", t[i].name,
                 extent[d], dim_names[d]);
        return -1;
      }
      if (stride[d] < 0 || stride[d] * t[i].elem_bytes % TMA_ALIGN ||
          stride[d] >= TMA_MAX_STRIDE / t[i].elem_bytes) {
        snprintf(err, errlen,
                 "%s's %s %lld: a tensor map's strides are multiples of %d bytes below 2^40",
                 t[i].name, stride_names[d], stride[d], TMA_ALIGN);
        return -1;
      }
    }
  }
  return 0;
}

int fat_fwd_tma_describable(const fat_fwd_params *p, const fat_fwd_call *call, int dtype, char *err,
                            size_t errlen) {
  fat_tma_tensor t[3];
  tma_tensors(p, call, dtype, t);
  return fat_tma_describable(t, 3, p->head_dim, err, errlen);
}

CUresult fat_tma_encode(const fat_cuda *cu, CUtensorMap *map, const fat_tma_tensor *t, int head_dim,
                        int dtype, int box_columns, int box_rows) {
  const int box_bytes = box_columns * t->elem_bytes;
  if ((box_bytes != FAT_TMA_SLAB_BYTES && box_bytes != FAT_TMA_SLAB_BYTES / 2) ||
      t->elem_bytes != (int)fat_dtype_size((fat_dtype)dtype))
    return CUDA_ERROR_INVALID_VALUE;
  const CUtensorMapDataType type = dtype == FAT_BF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == FAT_E4M3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  long long extent[3], stride[3];
  const int n = tma_dims(t, extent, stride);
  cuuint64_t dims[4] = {(cuuint64_t)head_dim}, strides[3];
  cuuint32_t box[4] = {(cuuint32_t)box_columns, (cuuint32_t)box_rows, 1, 1}, steps[4] = {1, 1, 1, 1};
  for (int d = 0; d < n; d++) {
    dims[d + 1] = (cuuint64_t)extent[d];
    strides[d] = (cuuint64_t)(stride[d] * t->elem_bytes);
  }
  return cu->cuTensorMapEncodeTiled(map, type,
                                    (cuuint32_t)(n + 1), (void *)t->base, dims, strides, box, steps,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    box_bytes == FAT_TMA_SLAB_BYTES ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                    : CU_TENSOR_MAP_SWIZZLE_64B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* fat_kernel_schedule by the family's row F. */
static int schedule(fat_kernel_desc *d, fat_direction direction, const fat_family *f, const char *params,
                    char *err, size_t errlen) {
  int block_n = 0;
  d->direction = direction;
  d->kind = f->kind;
  d->pack_gqa = d->block_q = d->block_n = d->persistent = d->tma_slab = d->paged = 0;
  d->dq_mode = FAT_DQ_ATOMIC;
  d->splits = 1;
  /* A backward variant's block_m is its key block; its query tile and dQ
   * strategy are in its parameters. */
  if (direction == FAT_BWD) {
    if (fat_bwd_params_parse(params, &d->block_q, &block_n, &d->dq_mode, err, errlen)) return -1;
    /* A tensor-map backward's maps: K and V in boxes of its key block; and
     * whether its blocks are resident, looping over key blocks. */
    if (d->kind != FAT_KERNEL_FUSED_TMA) return 0;
    d->block_n = block_n;
    d->tma_slab = FAT_TMA_BOX_COLUMNS;
    return fat_bwd_tma_parse(params, &d->persistent, err, errlen);
  }
  if (fat_fwd_params_parse(params, &d->pack_gqa, &d->splits, err, errlen)) return -1;
  d->paged = f->paged;
  return d->kind == FAT_KERNEL_FUSED_TMA
             ? fat_fwd_tma_parse(params, &d->block_n, &d->persistent, &d->tma_slab, err, errlen)
             : 0;
}

int fat_kernel_schedule(fat_kernel_desc *d, fat_direction direction, const char *family,
                        const char *params, char *err, size_t errlen) {
  const fat_family *f = fat_family_find(family, direction);
  if (!f) {
    snprintf(err, errlen, "unknown %s family '%s'", fat_direction_name(direction),
             family ? family : "(null)");
    return -1;
  }
  return schedule(d, direction, f, params, err, errlen);
}

int fat_kernel_describe(const fat_variant *v, const fat_build *b, fat_kernel_desc *d, char *err,
                        size_t errlen) {
  memset(d, 0, sizeof *d);
  if (!v || !b || !v->name || !v->entry) {
    snprintf(err, errlen, "variant without a name or entry point");
    return -1;
  }
  if (!b->ok || !b->cubin || !b->cubin_size) {
    snprintf(err, errlen, "%s has no cubin (compilation failed or was not run)", v->name);
    return -1;
  }
  char why[256];
  /* The tuner's variant may be of a family a template folder added. */
  const fat_family *row = fat_family_find(v->family, v->direction);
  const fat_family of_template = fat_family_of_template(v->family, v->direction);
  if (schedule(d, v->direction, row ? row : &of_template, v->params, why, sizeof why)) {
    snprintf(err, errlen, "%s: %s", v->name, why);
    return -1;
  }
  if (strlen(v->name) >= sizeof d->name || strlen(v->entry) >= sizeof d->entry) {
    snprintf(err, errlen, "variant name or entry longer than %zu bytes: %s", sizeof d->entry - 1, v->name);
    return -1;
  }
  snprintf(d->name, sizeof d->name, "%s", v->name);
  snprintf(d->entry, sizeof d->entry, "%s", v->entry);
  d->block_m = v->block_m;
  d->threads = v->threads;
  d->smem_bytes = v->smem_bytes;
  d->dtype = v->dtype;
  d->mask = v->mask;
  d->head_dim = v->head_dim;
  d->cubin = b->cubin;
  d->cubin_size = b->cubin_size;
  return 0;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void fat_fwd_set_scale(fat_fwd_params *p, double scale, double softcap) {
  const double log2_e = 1.4426950408889634;
  p->softmax_scale = (float)scale;
  p->scale_log2 = (float)(scale * log2_e);
  /* The kernels cap raw scores: raw' = (cap / scale) tanh(raw scale / cap). */
  p->softcap_in = softcap > 0 ? (float)(scale / softcap) : 0.f;
  p->softcap_out = softcap > 0 ? (float)(softcap / scale) : 0.f;
}

int fat_fwd_needs_workspace(int splits, int persistent) { return splits > 1 || persistent == FAT_FWD_DRAWN; }

/* The split rule (FlashAttention-2's num_splits_heuristic, on keys rather
 * than tiles). Decoding reads K and V once and computes little on them: its
 * time is the bytes over the bandwidth the blocks in flight can draw, so a
 * launch wants enough blocks to keep every SM streaming, and no more --
 * each split adds a block's fixed cost (its Q tile, its partial written
 * and read again by the combine kernel).
 *   - An unsplit grid that fills SPLIT_FILL of the GPU's block slots
 *     (SPLIT_SLOTS_PER_SM an SM: two decoding blocks stream side by side
 *     in one SM's shared memory) runs unsplit.
 *   - Otherwise a split count s gives waves = blocks·s / slots, and a
 *     last wave as full as waves / ceil(waves); among the counts up to
 *     FAT_FWD_MAX_LAUNCH_SPLITS that leave each split at least
 *     SPLIT_MIN_KEYS keys (fewer, and its fixed cost is no longer small
 *     beside its reads) and that differ in keys a split (11 splits of 64
 *     chunks are 6 a split, as 12 are: the larger count only adds blocks),
 *     the smallest whose last wave is within SPLIT_EFFICIENCY of the
 *     fullest. */
#define SPLIT_SLOTS_PER_SM 2
#define SPLIT_FILL 0.8
#define SPLIT_MIN_KEYS 256
#define SPLIT_EFFICIENCY 0.85

static long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

_Static_assert(FAT_FWD_MAX_SPLITS == FAT_FWD_MAX_LAUNCH_SPLITS,
               "one combine kernel merges fixed and launch-chosen splits: a lane each");
_Static_assert(FAT_PAGE_SIZE_MIN == FAT_FWD_PAGE_GROUP,
               "a page holds at least a key tile's group, whose table entry one lane reads");

int fat_fwd_launch_splits(long long blocks, long long keys, int sm_count) {
  if (blocks < 1 || keys < 1 || sm_count < 1) return 1;
  const double slots = (double)sm_count * SPLIT_SLOTS_PER_SM;
  if (blocks >= SPLIT_FILL * slots) return 1;
  const long long chunks = ceil_div(keys, SPLIT_MIN_KEYS);
  const int most = chunks < FAT_FWD_MAX_LAUNCH_SPLITS ? (int)chunks : FAT_FWD_MAX_LAUNCH_SPLITS;
  double fill[FAT_FWD_MAX_LAUNCH_SPLITS + 1] = {0}, fullest = 0;
  for (int s = 1; s <= most; s++) {
    if (s > 1 && ceil_div(chunks, s) == ceil_div(chunks, s - 1)) continue; /* fill[s] stays 0 */
    const double waves = (double)blocks * s / slots;
    fill[s] = waves / ceil(waves);
    if (fill[s] > fullest) fullest = fill[s];
  }
  for (int s = 1; s <= most; s++)
    if (fill[s] > 0 && fill[s] >= SPLIT_EFFICIENCY * fullest) return s;
  return 1;
}

int fat_fwd_call_splits(const fat_fwd_geometry *g, const fat_fwd_params *p, const fat_fwd_call *call) {
  if (!g->launch_splits) return g->splits;
  const int group = p->heads_k > 0 ? p->heads / p->heads_k : 1;
  const long long rows = (long long)p->seqlen_q * (g->pack_gqa ? group : 1);
  const long long blocks = ceil_div(rows, g->block_m) * (g->pack_gqa ? p->heads_k : p->heads) * p->batch;
  /* A window bounds the keys a query block sees: its width and the
   * block's query positions (a bound of -1 is none). */
  long long keys = p->seqlen_k;
  if (g->local && (p->window_left >= 0 || p->window_right >= 0)) {
    const long long left = p->window_left >= 0 ? p->window_left : p->seqlen_k;
    const long long right = p->window_right >= 0 ? p->window_right : p->seqlen_k;
    const long long positions = g->pack_gqa ? ceil_div(g->block_m, group) : g->block_m;
    if (left + right + positions < keys) keys = left + right + positions;
  }
  return fat_fwd_launch_splits(blocks, keys, call ? call->sm_count : 0);
}

size_t fat_fwd_workspace_bytes(const fat_fwd_geometry *g, int batch, int heads, int seqlen_q) {
  if (!fat_fwd_needs_workspace(g->splits, g->persistent)) return 0;
  if (g->persistent == FAT_FWD_DRAWN) return WORKSPACE_ALIGN;
  /* The same sum, overflow-checked: SIZE_MAX says it does not fit. */
  size_t rows, o_bytes, lse_bytes, total;
  if (__builtin_mul_overflow((size_t)g->splits, (size_t)batch, &rows) ||
      __builtin_mul_overflow(rows, (size_t)heads, &rows) ||
      __builtin_mul_overflow(rows, (size_t)seqlen_q, &rows) ||
      __builtin_mul_overflow(rows, (size_t)g->head_dim * sizeof(float), &o_bytes) ||
      __builtin_mul_overflow(rows, sizeof(float), &lse_bytes) ||
      o_bytes > SIZE_MAX - 2 * WORKSPACE_ALIGN || lse_bytes > SIZE_MAX - 2 * WORKSPACE_ALIGN ||
      __builtin_add_overflow(round_up(o_bytes, WORKSPACE_ALIGN), round_up(lse_bytes, WORKSPACE_ALIGN),
                             &total) || total == SIZE_MAX)
    return SIZE_MAX;
  return total;
}

void fat_fwd_set_workspace(const fat_fwd_geometry *g, fat_fwd_params *p, CUdeviceptr workspace) {
  p->o_accum = p->lse_accum = NULL;
  if (g->persistent == FAT_FWD_DRAWN) {
    p->o_accum = (float *)(uintptr_t)workspace; /* the counter (templates/fwd_ws90.cu) */
    return;
  }
  if (g->splits <= 1 || !workspace) return;
  const size_t rows = (size_t)g->splits * (size_t)p->batch * (size_t)p->heads * (size_t)p->seqlen_q;
  p->o_accum = (float *)(uintptr_t)workspace;
  p->lse_accum = (float *)(uintptr_t)(workspace +
                                      round_up(rows * (size_t)g->head_dim * sizeof(float), WORKSPACE_ALIGN));
}

CUresult fat_fwd_launch(const fat_cuda *cu, const fat_fwd_kernels *k, const fat_fwd_geometry *g,
                        fat_fwd_params *p, const fat_fwd_call *call, CUstream stream) {
  const fat_fwd_call none = {.total_q = 0, .total_k = 0, .sm_count = 0};
  if (!call) call = &none;
  const int group = p->heads_k > 0 ? p->heads / p->heads_k : 1;
  const long long query_rows = (long long)p->seqlen_q * (g->pack_gqa ? group : 1);
  unsigned grid_x = (unsigned)((query_rows + g->block_m - 1) / g->block_m);
  unsigned grid_y = (unsigned)(g->pack_gqa ? p->heads_k : p->heads);
  unsigned grid_z = (unsigned)p->batch * (unsigned)g->splits;
  if (g->persistent) {
    /* The kernel numbers the query blocks as this grid would and takes
     * every gridDim.x-th: at most one block an SM, each resident. */
    const unsigned long long blocks = (unsigned long long)grid_x * grid_y * grid_z;
    if (!(grid_x = fat_resident_grid(blocks, call->sm_count))) return CUDA_ERROR_INVALID_VALUE;
    grid_y = grid_z = 1;
  }
  CUtensorMap maps[3];
  /* An e4m3 variant takes its descale factors after the maps. */
  void *args[] = {p, &maps[0], &maps[1], &maps[2], (void *)&call->fp8};
  /* Variants that take the second block: the pages, the launch's splits. */
  fat_fwd_kv_params kv = {.block_table = call->block_table, .block_table_stride = call->block_table_stride,
                          .splits = g->splits};
  if (g->splits < 1) return CUDA_ERROR_INVALID_VALUE;
  if (g->paged) {
    const int size = call->page_size;
    if (!call->block_table || call->block_table_stride < 1 || size < 1 || (size & (size - 1)))
      return CUDA_ERROR_INVALID_VALUE;
    while ((1 << kv.page_shift) < size) kv.page_shift++;
  }
  if (fat_fwd_takes_kv(g)) args[1] = &kv;
  /* An fp8 K/V cache's variant takes its descale factors third. */
  if (fat_dtype_is_kv8(g->dtype)) args[2] = (void *)&call->fp8;
  if (g->splits > 1 && (!k->combine || !p->o_accum || !p->lse_accum)) return CUDA_ERROR_INVALID_VALUE;
  if (g->persistent == FAT_FWD_DRAWN && !p->o_accum) return CUDA_ERROR_INVALID_VALUE;
  if (g->block_n > 0) {
    /* q in boxes of a query block, k and v of a key tile. */
    char why[256];
    fat_tma_tensor t[3];
    if (fat_fwd_tma_describable(p, call, g->dtype, why, sizeof why)) return CUDA_ERROR_INVALID_VALUE;
    tma_tensors(p, call, g->dtype, t);
    for (int i = 0; i < 3; i++) {
      CUresult e = fat_tma_encode(cu, &maps[i], &t[i], p->head_dim, g->dtype,
                                  g->tma_slab ? g->tma_slab : FAT_TMA_BOX_COLUMNS, i == 0 ? g->block_m : g->block_n);
      if (e != CUDA_SUCCESS) return e;
    }
  }
  CUresult r = CUDA_SUCCESS;
  /* The blocks count the query blocks they draw from zero. */
  if (g->persistent == FAT_FWD_DRAWN) r = cu->cuMemsetD32Async((CUdeviceptr)(uintptr_t)p->o_accum, 0, 1, stream);
  if (r == CUDA_SUCCESS)
    r = cu->cuLaunchKernel(k->main, grid_x, grid_y, grid_z, (unsigned)g->threads, 1, 1, (unsigned)g->smem_bytes,
                           stream, args, NULL);
  if (r == CUDA_SUCCESS && g->splits > 1) {
    const unsigned rows_per_block = FAT_FWD_COMBINE_THREADS / 32;
    const unsigned long long n = (unsigned long long)p->batch * p->heads * p->seqlen_q;
    r = cu->cuLaunchKernel(k->combine, (unsigned)((n + rows_per_block - 1) / rows_per_block), 1, 1,
                           FAT_FWD_COMBINE_THREADS, 1, 1, 0, stream, args, NULL);
  }
  return r;
}
