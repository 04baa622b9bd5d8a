/* SPDX-License-Identifier: MIT */
/* A call's arguments, each refused by name before anything is launched:
 * the problem's shape and options, every tensor's pointer, alignment,
 * strides and extent, no output sharing a byte with another tensor, and,
 * by asking the driver, that the memory and the stream are this device's;
 * the contiguous strides of a shape, and the workspace sizes. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "bwd_launch.h"
#include "types.h"
#include "runtime_int.h"

#define INDEX_BYTES 4               /* cu_seqlens_q/k and seqused_k: device int32 */
#define ALIGN_BYTES 16              /* kernels load and store 16 bytes at a time: strides are
                                       multiples of ALIGN_BYTES / element bytes (8 of fp16
                                       and bf16, 16 of e4m3) */
#define KV8_ROW_CHUNK 16            /* an fp8 K/V cache's kernels copy a K or V row in 16-byte
                                       chunks of this many e4m3 elements */
#define N_TENSORS 5                 /* q, k, v, o, lse */
#define N_BWD_SPANS (N_TENSORS + 5) /* and the backward's dout, dq, dk, dv, workspace */
#define N_STRIDED 4                 /* q, k, v, o have (batch, row, head) strides */
#define LSE_BYTES 4                 /* fp32 */
#define DESCALE_BYTES 4             /* fp8 inputs' descale factors: device fp32 */
#define N_DESCALES 3                /* q, k, v */

/* ---- the problem -------------------------------------------------------- */

/* A backward's struct sizes, its own and its forward's; the lock is held. */
fat_status fat_rt_check_bwd_size(fat_context *c, const fat_attn_bwd_args *a) {
  if (!a) return fail(c, FAT_ERR_INVALID_ARGUMENT, "args is NULL");
  fat_status st = CHECK_SIZE(c, fat_attn_bwd_args, a, "FAT_ATTN_BWD_ARGS_INIT");
  return st ? st : CHECK_SIZE(c, fat_attn_args, &a->fwd, "FAT_ATTN_ARGS_INIT");
}

/* A paged cache's shape (fatune.h, fat_attn_args.block_table): its page
 * size, pages and table rows, each by name; the table itself is checked
 * with the tensors. Without a block table its fields are 0. */
static fat_status check_pages(fat_context *c, const fat_attn_args *a) {
  if (!a->block_table) {
    if (a->page_size || a->num_pages || a->block_table_stride)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "page_size %d, num_pages %d, block_table_stride %d: "
                  "a paged cache's; set them only with a block_table (0 for a contiguous one)",
                  a->page_size, a->num_pages, a->block_table_stride);
    return FAT_OK;
  }
  if (a->page_size < FAT_PAGE_SIZE_MIN || a->page_size > FAT_PAGE_SIZE_MAX ||
      (a->page_size & (a->page_size - 1)))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "page_size %d: must be a power of two from %d to %d "
                "(a key's page is found by a shift)", a->page_size, FAT_PAGE_SIZE_MIN, FAT_PAGE_SIZE_MAX);
  if (a->num_pages < 1)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "num_pages %d: a paged cache has at least one page",
                a->num_pages);
  const int pages = (int)(((long long)a->seqlen_k + a->page_size - 1) / a->page_size);
  if (a->block_table_stride < pages)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "block_table_stride %d: fewer entries than the %d "
                "pages of seqlen_k %d in pages of %d", a->block_table_stride, pages, a->seqlen_k,
                a->page_size);
  if (a->cu_seqlens_q || a->cu_seqlens_k)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "block_table %p with cu_seqlens_q %p, cu_seqlens_k %p: "
                "a paged cache takes a dense batch of queries (cu_seqlens NULL; seqused_k gives "
                "each sequence's keys)", (const void *)a->block_table, (const void *)a->cu_seqlens_q,
                (const void *)a->cu_seqlens_k);
  return FAT_OK;
}

/* Tensor I's (q, k, v) descale factor and its strides. */
typedef struct descale {
  const char *name;  /* "q_descale" */
  const float *ptr;
  int batch_stride, head_stride;
} descale;

static void descales(const fat_attn_args *a, descale d[N_DESCALES]) {
  d[0] = (descale){"q_descale", a->q_descale, a->q_descale_batch_stride, a->q_descale_head_stride};
  d[1] = (descale){"k_descale", a->k_descale, a->k_descale_batch_stride, a->k_descale_head_stride};
  d[2] = (descale){"v_descale", a->v_descale, a->v_descale_batch_stride, a->v_descale_head_stride};
}

/* The factors D indexes for A's batch and key heads: its largest index + 1
 * (the shape is checked positive; at most INT_MAX once checked). */
static long long descale_count(const fat_attn_args *a, const descale *d) {
  return (long long)(a->batch - 1) * d->batch_stride + (long long)(a->heads_k - 1) * d->head_stride + 1;
}

/* Whether DTYPE is an fp8 K/V cache's (fp16-e4m3kv, bf16-e4m3kv): q and o
 * 16-bit, k and v e4m3. */
static int kv8(int dtype) { return fat_dtype_is_kv8((fat_dtype)dtype); }

/* The descale factors of fp8 inputs (fatune.h, fat_attn_args.q_descale):
 * for the 16-bit dtypes none (pointers NULL, strides 0), nor q's for an
 * fp8 K/V cache (its q is 16-bit); for the tensors that are e4m3, strides
 * >= 0, set only with their factor, and every (batch, key head) index
 * within an int (the kernels index in int). Each by name; the pointers
 * themselves are checked with the tensors. */
static fat_status check_descales(fat_context *c, const fat_attn_args *a) {
  descale d[N_DESCALES];
  descales(a, d);
  const char *dtype = fat_dtype_name((fat_dtype)a->dtype);
  for (int i = 0; i < N_DESCALES; i++) {
    if (kv8(a->dtype) && i == 0) {
      if (d[i].ptr)
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "q_descale %p: dtype %s has a %s q, which takes "
                    "no descale factor (k_descale and v_descale are its cache's); set it NULL",
                    (const void *)d[i].ptr, dtype, fat_dtype_name(fat_dtype_out((fat_dtype)a->dtype)));
      if (d[i].batch_stride || d[i].head_stride)
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "q_descale_batch_stride %d, q_descale_head_stride "
                    "%d: dtype %s's q takes no descale factor; set them 0", d[i].batch_stride,
                    d[i].head_stride, dtype);
      continue;
    }
    if (!fat_dtype_kv_fp8((fat_dtype)a->dtype)) {
      if (d[i].ptr)
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: descale factors are fp8 inputs' (e4m3, "
                    "fp16-e4m3kv, bf16-e4m3kv); with dtype %s set it NULL", d[i].name,
                    (const void *)d[i].ptr, dtype);
      if (d[i].batch_stride || d[i].head_stride)
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_batch_stride %d, %s_head_stride %d: descale "
                    "strides are fp8 inputs'; with dtype %s set them 0", d[i].name, d[i].batch_stride,
                    d[i].name, d[i].head_stride, dtype);
      continue;
    }
    if (d[i].batch_stride < 0 || d[i].head_stride < 0)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_batch_stride %d, %s_head_stride %d: must be >= 0 "
                  "(0 and 0: one factor for the tensor)", d[i].name, d[i].batch_stride, d[i].name,
                  d[i].head_stride);
    if (!d[i].ptr && (d[i].batch_stride || d[i].head_stride))
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_batch_stride %d, %s_head_stride %d with %s NULL: "
                  "strides of a factor not given; set them 0 (NULL is a factor of 1)", d[i].name,
                  d[i].batch_stride, d[i].name, d[i].head_stride, d[i].name);
    const long long n = descale_count(a, &d[i]);
    if (n - 1 > INT_MAX)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_batch_stride %d, %s_head_stride %d: batch %d x "
                  "heads_k %d factors reach index %lld, past %d", d[i].name, d[i].batch_stride,
                  d[i].name, d[i].head_stride, a->batch, a->heads_k, n - 1, INT_MAX);
  }
  return FAT_OK;
}

fat_status fat_rt_check_problem(fat_context *c, const fat_attn_args *a) {
  if (!a) return fail(c, FAT_ERR_INVALID_ARGUMENT, "args is NULL");
  fat_status st = CHECK_SIZE(c, fat_attn_args, a, "FAT_ATTN_ARGS_INIT");
  if (st) return st;
  if (a->dtype != FAT_ATTN_FP16 && a->dtype != FAT_ATTN_BF16 && a->dtype != FAT_ATTN_E4M3 &&
      !kv8(a->dtype))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "dtype %d: must be FAT_ATTN_FP16, FAT_ATTN_BF16, "
                "FAT_ATTN_E4M3, FAT_ATTN_FP16_E4M3KV or FAT_ATTN_BF16_E4M3KV", (int)a->dtype);
  if (a->mask != FAT_ATTN_MASK_NONE && a->mask != FAT_ATTN_MASK_CAUSAL &&
      a->mask != FAT_ATTN_MASK_LOCAL)
    return fail(c, FAT_ERR_INVALID_ARGUMENT,
                "mask %d: must be FAT_ATTN_MASK_NONE, FAT_ATTN_MASK_CAUSAL or FAT_ATTN_MASK_LOCAL",
                (int)a->mask);
  if (a->mask == FAT_ATTN_MASK_LOCAL && (a->window_left < -1 || a->window_right < -1))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "window (%d, %d): each bound must be >= -1 (-1: "
                "unbounded)", a->window_left, a->window_right);
  if (!(a->softcap >= 0) || isinf(a->softcap))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "softcap %g: must be finite and >= 0 (0: none)",
                (double)a->softcap);
  if (!a->cu_seqlens_q != !a->cu_seqlens_k)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "cu_seqlens_q %p and cu_seqlens_k %p: give both or "
                "neither", (const void *)a->cu_seqlens_q, (const void *)a->cu_seqlens_k);
  if (a->cu_seqlens_q && (a->total_q < 1 || a->total_k < 1))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "total_q %d, total_k %d: a variable-length batch "
                "needs the packed tensors' rows (>= 1)", a->total_q, a->total_k);
  const int dims[5] = {a->batch, a->heads, a->heads_k, a->seqlen_q, a->seqlen_k};
  static const char *const dim_names[5] = {"batch", "heads", "heads_k", "seqlen_q", "seqlen_k"};
  for (int i = 0; i < 5; i++)
    if (dims[i] < 1)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %d: must be >= 1", dim_names[i], dims[i]);
  if (a->heads % a->heads_k)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "heads_k %d does not divide heads %d", a->heads_k,
                a->heads);
  if ((st = check_descales(c, a)) || (st = check_pages(c, a))) return st;
  /* The e4m3 kernels are the ws90 family's, which reads a contiguous
   * cache; the paged family takes 16-bit pages, or an fp8 K/V cache's
   * (whose q is 16-bit). */
  if (a->dtype == FAT_ATTN_E4M3 && a->block_table)
    return fail(c, FAT_ERR_UNSUPPORTED, "dtype e4m3 with block_table %p: a paged cache takes fp16 "
                "or bf16 (the e4m3 forward reads a contiguous K/V cache)", (const void *)a->block_table);
  return FAT_OK;
}

#define MAX_HEAD_DIMS 16

/* "64, 128, 256": the N head dims of DIMS, into LIST (CAP bytes). */
static void list_dims(char *list, size_t cap, const int *dims, int n) {
  list[0] = 0;
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), cap - strlen(list), "%s%d", i ? ", " : "", dims[i]);
}


fat_status fat_rt_unsupported_head_dim(fat_context *c, int head_dim) {
  int dims[MAX_HEAD_DIMS], n = fat_supported_head_dims(dims, MAX_HEAD_DIMS);
  char list[128];
  list_dims(list, sizeof list, dims, n);
  return fail(c, FAT_ERR_UNSUPPORTED, "head_dim %d has no template (templates: %s; any multiple "
              "of 8 up to %d runs on the next one up)", head_dim, list, n ? dims[n - 1] : 0);
}

fat_status fat_rt_unsupported(fat_context *c, const fat_attn_args *a) {
  if (a->dtype == FAT_ATTN_FP16 || a->dtype == FAT_ATTN_BF16)
    return fat_rt_unsupported_head_dim(c, a->head_dim);
  /* The fp8 dtypes run on their own defaults' templates (select.c). */
  const char *name = fat_dtype_name((fat_dtype)a->dtype);
  int all[MAX_HEAD_DIMS], of_mask[MAX_HEAD_DIMS];
  const int n_all = fat_rt_dtype_head_dims(a->dtype, -1, all, MAX_HEAD_DIMS);
  const int n_mask = fat_rt_dtype_head_dims(a->dtype, a->mask, of_mask, MAX_HEAD_DIMS);
  const int tdim = fat_rt_template_head_dim(FAT_FWD, a->dtype, a->head_dim);
  char list[128];
  if (n_all == 0)
    return fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: this libfatune has no %s kernel built in "
                "(none of its built-in defaults is of that dtype)", name, name);
  if (n_mask == 0)
    return fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: no %s kernel takes mask %s", name, name,
                fat_mask_name((fat_mask)a->mask));
  /* The head dim has a template of the mask, but not of the family that
   * reads this cache (an fp8 K/V cache's: splitkv contiguous, paged paged). */
  for (int i = 0; i < n_mask; i++)
    if (of_mask[i] == tdim)
      return fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: no %s kernel reads a %s K/V cache at head_dim "
                  "%d, mask %s", name, name, a->block_table ? "paged" : "contiguous", a->head_dim,
                  fat_mask_name((fat_mask)a->mask));
  list_dims(list, sizeof list, of_mask, n_mask);
  return fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: head_dim %d has no %s template for mask %s "
              "(%s templates: %s; a smaller head dim runs on the next one up)", name, a->head_dim,
              name, fat_mask_name((fat_mask)a->mask), name, list);
}

fat_status fat_rt_check_padded(fat_context *c, const fat_attn_args *a, int template_dim) {
  /* A row of 16 e4m3 bytes at a time: a head dim narrower than its
   * template would have its last chunk read past the row (the 16-bit
   * kernels' chunks are 8 elements, every head dim's multiple). */
  if (kv8(a->dtype) && template_dim != a->head_dim && a->head_dim % KV8_ROW_CHUNK)
    return fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: head_dim %d runs on the d%d template, whose "
                "K and V rows are read in chunks of %d e4m3 elements (16 bytes): a head dim below "
                "its template must be a multiple of %d", fat_dtype_name((fat_dtype)a->dtype),
                a->head_dim, template_dim, KV8_ROW_CHUNK, KV8_ROW_CHUNK);
  return FAT_OK;
}

/* ---- tensors ------------------------------------------------------------ */

/* X * Y, or -1 (a stride fat_attention_check refuses) when it overflows. */
static long long stride_product(long long x, long long y) {
  long long r;
  return __builtin_mul_overflow(x, y, &r) ? -1 : r;
}

void fat_attn_args_contiguous(fat_attn_args *a) {
  if (!a || a->struct_size != sizeof *a) return;
  long long d = a->head_dim;
  a->q_head_stride = a->k_head_stride = a->v_head_stride = a->o_head_stride = d;
  a->q_row_stride = a->o_row_stride = stride_product(d, a->heads);
  a->k_row_stride = a->v_row_stride = stride_product(d, a->heads_k);
  a->q_batch_stride = a->o_batch_stride = stride_product(a->q_row_stride, a->seqlen_q);
  a->k_batch_stride = a->v_batch_stride = stride_product(a->k_row_stride, a->seqlen_k);
}

/* One dimension of a strided tensor. */
typedef struct dim {
  const char *name;  /* "row_stride" */
  long long extent, stride;
} dim;

/* The elements tensor NAME spans (max offset + 1) in *SPAN, after checking
 * that no dimension of more than one element steps by less than what its
 * inner dimensions span: then no two elements share an address. */
static fat_status check_layout(fat_context *c, const char *name, dim *d, int n, long long head_dim,
                               long long *span) {
  /* Insertion sort by stride: the innermost dimension first. */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && d[j].stride < d[j - 1].stride; j--) {
      dim t = d[j];
      d[j] = d[j - 1];
      d[j - 1] = t;
    }
  long long inner = head_dim; /* the contiguous last dimension */
  const char *inside = "head_dim";
  for (int i = 0; i < n; i++) {
    long long step;
    if (d[i].extent < 2) continue;
    if (d[i].stride < inner)
      return fail(c, FAT_ERR_INVALID_ARGUMENT,
                  "%s_%s %lld: smaller than the %lld elements inside it (%s); %s would overlap "
                  "itself", name, d[i].name, d[i].stride, inner, inside, name);
    if (__builtin_mul_overflow(d[i].stride, d[i].extent - 1, &step) ||
        __builtin_add_overflow(inner, step, &inner))
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_%s %lld: %s spans more than %lld elements",
                  name, d[i].name, d[i].stride, name, LLONG_MAX);
    inside = d[i].name;
  }
  *span = inner;
  return FAT_OK;
}

/* [lo, hi) byte ranges. */
static int overlaps(uintptr_t a, unsigned long long an, uintptr_t b, unsigned long long bn) {
  return a < b + bn && b < a + an;
}

/* A tensor the kernels touch: where it is and the bytes it spans. */
typedef struct span {
  const char *name;
  const void *ptr;
  unsigned long long bytes;
} span;

/* NAME at PTR, a (batch, seqlen, heads, head_dim) tensor of ELEM_BYTES
 * elements with the given element strides: not NULL, aligned, strides
 * (multiples of 16 bytes) the kernels can use, no
 * element sharing an address with another, within the address space. *OUT
 * gets the bytes it spans. */
static fat_status check_strided(fat_context *c, const char *name, const void *ptr, long long bs,
                                long long rs, long long hs, int batch, int seqlen, int heads,
                                int head_dim, int elem_bytes, span *out) {
  const int multiple = ALIGN_BYTES / elem_bytes;
  if (!ptr) return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s is NULL", name);
  if ((uintptr_t)ptr % ALIGN_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not %d-byte aligned", name, ptr,
                ALIGN_BYTES);
  /* Innermost first by convention: equal strides keep this order (the sort
   * is stable), so the message blames the outer dimension. */
  dim d[3] = {{"head_stride", heads, hs}, {"row_stride", seqlen, rs}, {"batch_stride", batch, bs}};
  for (int i = 2; i >= 0; i--)
    if (d[i].stride < 0 || d[i].stride % multiple)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s_%s %lld: must be a non-negative multiple of %d",
                  name, d[i].name, d[i].stride, multiple);
  long long n = 0;
  unsigned long long bytes;
  fat_status st = check_layout(c, name, d, 3, head_dim, &n);
  if (st) return st;
  /* Bytes, then room above PTR: a bound computed as UINTPTR_MAX / 2 - PTR
   * wrapped for a pointer in the upper half and passed anything. */
  if (__builtin_mul_overflow((unsigned long long)n, (unsigned long long)elem_bytes, &bytes) ||
      bytes > UINTPTR_MAX - (uintptr_t)ptr)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: its %lld elements run past the end of the "
                "address space", name, ptr, n);
  *out = (span){.name = name, .ptr = ptr, .bytes = bytes};
  return FAT_OK;
}

/* lse (or D): contiguous (batch, heads, seqlen_q) fp32. */
static fat_status check_rows(fat_context *c, const char *name, const void *ptr,
                             const fat_attn_args *a, span *out) {
  if (!ptr) return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s is NULL", name);
  if ((uintptr_t)ptr % ALIGN_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not %d-byte aligned", name, ptr,
                ALIGN_BYTES);
  /* The shape was checked positive, and each factor fits an int. */
  unsigned long long n = (unsigned long long)(a->cu_seqlens_q ? 1 : a->batch) * (unsigned long long)a->heads;
  if (__builtin_mul_overflow(n, (unsigned long long)(a->cu_seqlens_q ? a->total_q : a->seqlen_q), &n) ||
      n > (UINTPTR_MAX - (uintptr_t)ptr) / LSE_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: its batch x heads x seqlen_q floats run past "
                "the end of the address space", name, ptr);
  *out = (span){.name = name, .ptr = ptr, .bytes = n * LSE_BYTES};
  return FAT_OK;
}

/* What a kernel writes (T[0 .. N_WRITTEN)) must share no byte with anything
 * else it reads or writes: another block may still be reading it. */
static fat_status check_no_alias(fat_context *c, const span *t, int n, int n_written) {
  for (int i = 0; i < n_written; i++)
    for (int j = 0; j < n; j++) {
      if (j == i || (j < n_written && j < i)) continue; /* each written pair once */
      if (overlaps((uintptr_t)t[i].ptr, t[i].bytes, (uintptr_t)t[j].ptr, t[j].bytes))
        return fail(c, FAT_ERR_INVALID_ARGUMENT,
                    "%s [%p, +%llu bytes) overlaps %s [%p, +%llu bytes): the outputs must not "
                    "alias another tensor", t[i].name, t[i].ptr, t[i].bytes, t[j].name, t[j].ptr,
                    t[j].bytes);
    }
  return FAT_OK;
}

/* The forward's tensors in T: o, lse (written by the forward), q, k, v. */
static fat_status check_tensors(fat_context *c, const fat_attn_args *a, span t[N_TENSORS]) {
  fat_status st;
  /* A variable-length batch is one sequence of total rows as far as the
   * layout goes: its batch strides are not used. */
  const int vl = a->cu_seqlens_q != NULL;
  const int bq = vl ? 1 : a->batch, sq = vl ? a->total_q : a->seqlen_q;
  /* A paged cache's k and v are pools of num_pages pages of page_size
   * rows, the batch stride the page's. */
  const int paged = a->block_table != NULL;
  const int bk = paged ? a->num_pages : bq, sk = paged ? a->page_size : vl ? a->total_k : a->seqlen_k;
  /* q of the dtype's queries, k and v of its cache (e4m3 and the fp8 K/V
   * caches: one byte), o of its output (e4m3: bf16; an fp8 K/V cache: q's). */
  const int in_q = (int)fat_dtype_size((fat_dtype)a->dtype);
  const int in_kv = (int)fat_dtype_kv_size((fat_dtype)a->dtype);
  const int out = (int)fat_dtype_size(fat_dtype_out((fat_dtype)a->dtype));
  if ((st = check_strided(c, "q", a->q, vl ? 0 : a->q_batch_stride, a->q_row_stride,
                          a->q_head_stride, bq, sq, a->heads, a->head_dim, in_q, &t[2])) ||
      (st = check_strided(c, "k", a->k, vl ? 0 : a->k_batch_stride, a->k_row_stride,
                          a->k_head_stride, bk, sk, a->heads_k, a->head_dim, in_kv, &t[3])) ||
      (st = check_strided(c, "v", a->v, vl ? 0 : a->v_batch_stride, a->v_row_stride,
                          a->v_head_stride, bk, sk, a->heads_k, a->head_dim, in_kv, &t[4])) ||
      (st = check_strided(c, "o", a->o, vl ? 0 : a->o_batch_stride, a->o_row_stride,
                          a->o_head_stride, bq, sq, a->heads, a->head_dim, out, &t[0])) ||
      (st = check_rows(c, "lse", a->lse, a, &t[1])))
    return st;
  if (!(a->softmax_scale >= 0) || isinf(a->softmax_scale))
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "softmax_scale %g: must be finite and >= 0 (0: default)",
                (double)a->softmax_scale);
  /* The variable-length index arrays and the block table (device int32)
   * and fp8 inputs' descale factors (device fp32, their counts checked to fit
   * an int): read by the blocks beside the outputs they write. */
  descale d[N_DESCALES];
  descales(a, d);
  const struct { const char *name; const void *ptr; unsigned long long n; const char *entries; } index[] = {
      {"cu_seqlens_q", a->cu_seqlens_q, (unsigned long long)a->batch + 1, "int32 entries"},
      {"cu_seqlens_k", a->cu_seqlens_k, (unsigned long long)a->batch + 1, "int32 entries"},
      {"seqused_k", a->seqused_k, (unsigned long long)a->batch, "int32 entries"},
      {"block_table", a->block_table, (unsigned long long)a->batch * (unsigned)a->block_table_stride,
       "int32 entries"},
      {d[0].name, d[0].ptr, (unsigned long long)descale_count(a, &d[0]), "fp32 factors"},
      {d[1].name, d[1].ptr, (unsigned long long)descale_count(a, &d[1]), "fp32 factors"},
      {d[2].name, d[2].ptr, (unsigned long long)descale_count(a, &d[2]), "fp32 factors"}};
  /* INDEX_BYTES and DESCALE_BYTES are both 4: one rule for all of them. */
  _Static_assert(INDEX_BYTES == DESCALE_BYTES, "index arrays and descale factors are 4-byte words");
  for (size_t i = 0; i < sizeof index / sizeof index[0]; i++) {
    const uintptr_t at = (uintptr_t)index[i].ptr;
    const unsigned long long bytes = index[i].n * INDEX_BYTES;
    if (!at) continue;
    if (at % INDEX_BYTES)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not %d-byte aligned (%s)",
                  index[i].name, index[i].ptr, INDEX_BYTES, index[i].entries);
    if (bytes > UINTPTR_MAX - at)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p: its %llu entries run past the end of the "
                  "address space", index[i].name, index[i].ptr, index[i].n);
    for (int w = 0; w < 2; w++) /* o and lse, which the forward writes */
      if (overlaps(at, bytes, (uintptr_t)t[w].ptr, t[w].bytes))
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s [%p, +%llu bytes) overlaps %s [%p, +%llu "
                    "bytes)", index[i].name, index[i].ptr, bytes, t[w].name, t[w].ptr, t[w].bytes);
  }
  /* The forward's scratch (split variants write their partials there). */
  if (a->workspace && a->workspace_bytes > 0) {
    if ((uintptr_t)a->workspace % ALIGN_BYTES)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p is not %d-byte aligned", a->workspace,
                  ALIGN_BYTES);
    if (a->workspace_bytes > UINTPTR_MAX - (uintptr_t)a->workspace)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p: its %zu bytes run past the end of "
                  "the address space", a->workspace, a->workspace_bytes);
    for (int i = 0; i < N_TENSORS; i++)
      if (overlaps((uintptr_t)a->workspace, a->workspace_bytes, (uintptr_t)t[i].ptr, t[i].bytes))
        return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace [%p, +%zu bytes) overlaps %s [%p, "
                    "+%llu bytes)", a->workspace, a->workspace_bytes, t[i].name, t[i].ptr,
                    t[i].bytes);
  }
  return FAT_OK;
}

/* Everything about ARGS that needs no GPU; the context lock is held. */
fat_status fat_rt_check_args(fat_context *c, const fat_attn_args *a) {
  span t[N_TENSORS];
  fat_status st = fat_rt_check_problem(c, a);
  if (st) return st;
  const int tdim = fat_rt_template_head_dim(FAT_FWD, a->dtype, a->head_dim);
  if (!fat_rt_find_default(fat_rt_fwd_key(c, a), a->dtype, a->mask, tdim)) return fat_rt_unsupported(c, a);
  if ((st = fat_rt_check_padded(c, a, tdim)) || (st = check_tensors(c, a, t))) return st;
  return check_no_alias(c, t, N_TENSORS, 2);
}

fat_status fat_attention_check(fat_context *c, const fat_attn_args *a) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = fat_rt_check_args(c, a);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* What only the driver can tell: every tensor is memory of this context's
 * device, and STREAM belongs to its primary context. A launch with either
 * wrong faults the context (or runs on another GPU's stream); refusing
 * costs a few driver calls per launch. The lock is held. */
fat_status fat_rt_check_on_device(fat_context *c, const void *args, int direction, void *stream) {
  /* ARGS is a fat_attn_args, or a fat_attn_bwd_args (which begins with one). */
  const fat_attn_args *a = direction == FAT_BWD ? &((const fat_attn_bwd_args *)args)->fwd : args;
  const fat_attn_bwd_args *b = direction == FAT_BWD ? args : NULL;
  const void *ptrs[N_BWD_SPANS + 1] = {a->q, a->k, a->v, a->o, a->lse};
  static const char *const names[N_BWD_SPANS + 1] = {"q", "k", "v", "o", "lse", "dout",
                                                      "dq", "dk", "dv", "workspace", "dlse"};
  int n = N_TENSORS;
  if (b) {
    ptrs[n++] = b->dout;
    ptrs[n++] = b->dq;
    ptrs[n++] = b->dk;
    ptrs[n++] = b->dv;
    ptrs[n++] = b->workspace;
    if (b->dlse) ptrs[n++] = b->dlse;
  }
  char t[256];
  for (int i = 0; i < n && c->ptr_attr; i++) {
    int ordinal = -1;
    unsigned long long managed = 0; /* the driver writes a bool or an int: zeroed wider */
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptrs[i];
    CUresult r = c->ptr_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    if (r == CUDA_ERROR_INVALID_VALUE)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is not memory CUDA knows (%s)", names[i],
                  ptrs[i], fat_cuda_result_text(&c->cu, r, t, sizeof t));
    if (r != CUDA_SUCCESS || managed) continue; /* managed memory migrates on demand */
    r = c->ptr_attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (r == CUDA_SUCCESS && ordinal != c->ordinal)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "%s %p is memory of device %d; this context is on "
                  "device %d", names[i], ptrs[i], ordinal, c->ordinal);
  }
  /* The legacy and per-thread default streams (handles 0, 1, 2) are those
   * of whatever context is current: ours, made current by the launch. */
  if (stream && (uintptr_t)stream > (uintptr_t)CU_STREAM_PER_THREAD && c->stream_ctx) {
    CUcontext sc = NULL;
    CUresult r = c->stream_ctx((CUstream)stream, &sc);
    if (r != CUDA_SUCCESS)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "stream %p: %s", stream,
                  fat_cuda_result_text(&c->cu, r, t, sizeof t));
    if (sc != c->pctx)
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "stream %p belongs to another CUDA context (%p), "
                  "not the primary context of device %d (%p)", stream, (void *)sc, c->ordinal,
                  (void *)c->pctx);
  }
  return FAT_OK;
}

/* The refusal of a shape whose workspace does not fit in a size_t. */
fat_status fat_rt_workspace_overflow(fat_context *c, const fat_attn_args *a) {
  return fail(c, FAT_ERR_INVALID_ARGUMENT, "batch %d x heads %d x seqlen_q %d: the workspace "
              "would be more bytes than a size_t holds", a->batch, a->heads, a->seqlen_q);
}

/* ---- backward ------------------------------------------------------------- */

#define WORKSPACE_ALIGN 256  /* D, then the dQ accumulator at this alignment */
/* The semaphores follow the accumulator, whose rows are whole 64-float
 * (256-byte) slabs: they are as aligned as it is. */
_Static_assert(FAT_BWD_ACCUM_WIDTH(1) * sizeof(float) % WORKSPACE_ALIGN == 0,
               "an accumulator row is a multiple of the workspace's alignment");
#define BWD_ELEM_BYTES 2     /* dO and the gradients: fp16 or bf16 (no fp8 backward) */

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

fat_status fat_rt_check_bwd_problem(fat_context *c, const fat_attn_args *a) {
  fat_status st = fat_rt_check_problem(c, a);
  if (!st && a->dtype != FAT_ATTN_FP16 && a->dtype != FAT_ATTN_BF16)
    st = fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: the backward takes fp16 or bf16 (the %s "
              "forward has no backward yet)", fat_dtype_name((fat_dtype)a->dtype),
              fat_dtype_name((fat_dtype)a->dtype));
  else if (!st && a->block_table)
    st = fail(c, FAT_ERR_UNSUPPORTED, "block_table %p: the backward reads contiguous K and V (a "
              "paged cache is the forward's)", (const void *)a->block_table);
  return st;
}

int fat_rt_bwd_features(const fat_attn_args *a) {
  return a->cu_seqlens_q || a->cu_seqlens_k || a->seqused_k || a->softcap > 0;
}

/* Bytes of D, of the dQ accumulator and of the ordered dQ's semaphores for
 * A's shape (checked positive), which lie in the workspace in this order.
 * Every call gets all three, deterministic or not: an ordered variant
 * (bwd_launch.h) is deterministic and sums into the accumulator, and it
 * may also be the fastest variant a call without `deterministic` is
 * served. The semaphores are fat_bwd_semaphores_bound's, so that the size
 * is a function of the shape alone. Returns -1 when they do not fit in a
 * size_t (batch, heads and seqlen_q near INT_MAX once wrapped to a small
 * number, with FAT_OK). */
int fat_rt_bwd_workspace_parts(const fat_attn_args *a, size_t *delta, size_t *accum, size_t *sems,
                               size_t *d_rows) {
  size_t rows, d_bytes, n_sems, sum;
  /* The accumulator's rows: as wide as any family's template uses them. A
   * packed batch's D and accumulator rows are lse's, (heads, total_q). */
  const size_t width = FAT_BWD_ACCUM_WIDTH((size_t)a->head_dim) * sizeof(float);
  const int packed = a->cu_seqlens_q != NULL;
  if (__builtin_mul_overflow((size_t)(packed ? 1 : a->batch), (size_t)a->heads, &rows) ||
      __builtin_mul_overflow(rows, (size_t)(packed ? a->total_q : a->seqlen_q), &rows) ||
      __builtin_mul_overflow(rows, sizeof(float), &d_bytes) || d_bytes > SIZE_MAX - WORKSPACE_ALIGN ||
      __builtin_mul_overflow(rows, width, accum) ||
      fat_bwd_semaphores_bound(a->batch, a->heads, a->seqlen_q, packed ? a->total_q : 0, &n_sems) ||
      __builtin_mul_overflow(n_sems, sizeof(int32_t), sems))
    return -1;
  *delta = round_up(d_bytes, WORKSPACE_ALIGN);
  if (d_rows) *d_rows = rows;
  return __builtin_add_overflow(*delta, *accum, &sum) || __builtin_add_overflow(sum, *sems, &sum) ? -1 : 0;
}

void fat_attn_bwd_args_contiguous(fat_attn_bwd_args *a) {
  if (!a || a->struct_size != sizeof *a || a->fwd.struct_size != sizeof a->fwd) return;
  fat_attn_args_contiguous(&a->fwd);
  const fat_attn_args *f = &a->fwd;
  a->do_batch_stride = a->dq_batch_stride = f->q_batch_stride;
  a->do_row_stride = a->dq_row_stride = f->q_row_stride;
  a->do_head_stride = a->dq_head_stride = f->q_head_stride;
  a->dk_batch_stride = a->dv_batch_stride = f->k_batch_stride;
  a->dk_row_stride = a->dv_row_stride = f->k_row_stride;
  a->dk_head_stride = a->dv_head_stride = f->k_head_stride;
}

fat_status fat_attention_bwd_workspace(fat_context *c, const fat_attn_bwd_args *a, size_t *bytes) {
  size_t delta, accum, sems;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = fat_rt_check_bwd_size(c, a);
  if (!st)
    st = !bytes ? fail(c, FAT_ERR_INVALID_ARGUMENT, "bytes is NULL")
                : fat_rt_check_bwd_problem(c, &a->fwd);
  if (!st && fat_rt_bwd_workspace_parts(&a->fwd, &delta, &accum, &sems, NULL))
    st = fat_rt_workspace_overflow(c, &a->fwd);
  else if (!st)
    *bytes = delta + accum + sems;
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* Everything about A that needs no GPU; the lock is held. */
fat_status fat_rt_check_bwd_args(fat_context *c, const void *args) {
  const fat_attn_bwd_args *a = args;
  fat_status st = fat_rt_check_bwd_size(c, a);
  if (st) return st;
  const fat_attn_args *f = &a->fwd;
  /* The written ones first: dq, dk, dv, workspace; then dout and the
   * forward's, and dlse where there is one. */
  span t[N_BWD_SPANS + 1];
  if ((st = fat_rt_check_bwd_problem(c, f))) return st;
  if (a->deterministic != 0 && a->deterministic != 1)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "deterministic %d: must be 0 or 1", a->deterministic);
  const sel_key key = {.direction = FAT_BWD, .deterministic = a->deterministic,
                       .features = fat_rt_bwd_features(f)};
  if (!fat_rt_find_default(key, f->dtype, f->mask, fat_rt_template_head_dim(FAT_BWD, f->dtype, f->head_dim)))
    return fat_rt_unsupported_head_dim(c, f->head_dim);
  /* The gradients have their inputs' shapes: a packed batch's are one
   * sequence of total rows, their batch strides unused (check_tensors). */
  const int vl = f->cu_seqlens_q != NULL;
  const int bq = vl ? 1 : f->batch, sq = vl ? f->total_q : f->seqlen_q, sk = vl ? f->total_k : f->seqlen_k;
  if ((st = check_tensors(c, f, t + 5)) ||
      (st = check_strided(c, "dout", a->dout, vl ? 0 : a->do_batch_stride, a->do_row_stride,
                          a->do_head_stride, bq, sq, f->heads, f->head_dim, BWD_ELEM_BYTES, &t[4])) ||
      (st = check_strided(c, "dq", a->dq, vl ? 0 : a->dq_batch_stride, a->dq_row_stride,
                          a->dq_head_stride, bq, sq, f->heads, f->head_dim, BWD_ELEM_BYTES, &t[0])) ||
      (st = check_strided(c, "dk", a->dk, vl ? 0 : a->dk_batch_stride, a->dk_row_stride,
                          a->dk_head_stride, bq, sk, f->heads_k, f->head_dim, BWD_ELEM_BYTES, &t[1])) ||
      (st = check_strided(c, "dv", a->dv, vl ? 0 : a->dv_batch_stride, a->dv_row_stride,
                          a->dv_head_stride, bq, sk, f->heads_k, f->head_dim, BWD_ELEM_BYTES, &t[2])))
    return st;
  size_t delta, accum, sems;
  if (fat_rt_bwd_workspace_parts(f, &delta, &accum, &sems, NULL)) return fat_rt_workspace_overflow(c, f);
  const size_t need = delta + accum + sems; /* fits: checked by the parts */
  if (!a->workspace)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace is NULL (fat_attention_bwd_workspace: "
                "%zu bytes)", need);
  if ((uintptr_t)a->workspace % ALIGN_BYTES)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p is not %d-byte aligned", a->workspace,
                ALIGN_BYTES);
  if (a->workspace_bytes < need)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace_bytes %zu: this problem needs %zu "
                "(fat_attention_bwd_workspace)", a->workspace_bytes, need);
  if (a->workspace_bytes > UINTPTR_MAX - (uintptr_t)a->workspace)
    return fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace %p: its %zu bytes run past the end of the "
                "address space", a->workspace, a->workspace_bytes);
  t[3] = (span){"workspace", a->workspace, need};
  int n = N_BWD_SPANS;
  if (a->dlse) {  /* lse's layout and bytes (t[6], check_tensors') */
    if ((uintptr_t)a->dlse % sizeof(float))
      return fail(c, FAT_ERR_INVALID_ARGUMENT, "dlse %p is not %zu-byte aligned", (const void *)a->dlse,
                  sizeof(float));
    t[n++] = (span){"dlse", a->dlse, t[6].bytes};
  }
  return check_no_alias(c, t, n, 4);
}

fat_status fat_attention_bwd_check(fat_context *c, const fat_attn_bwd_args *a) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = fat_rt_check_bwd_args(c, a);
  pthread_mutex_unlock(&c->lock);
  return st;
}
