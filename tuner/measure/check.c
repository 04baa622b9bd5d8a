/* SPDX-License-Identifier: MIT */
/* Checking a variant on one shape, forward and backward: random inputs
 * drawn from the check's seed, outputs poisoned with NaN, the launch, the
 * fp64 reference (reference.c) and the comparison (fwd_compare.h); for a
 * deterministic backward, a second run that must give the same bits.
 *
 * The reference of a (variant kind, shape, seed) is computed once, on
 * inputs no variant has touched, and kept (ref_cache.h) on the GPU: every
 * variant of a problem is checked on the same seed, so the fp64 work --
 * most of a check's time on the long shapes -- is done once a problem
 * instead of once a variant. Each check draws its inputs afresh from the
 * seed, so a variant cannot change what a later one is compared with.
 *
 * The comparison runs where the outputs and the kept references are
 * (templates/fat_util.cu's fat_diff_sums): only its sums and the lse rows
 * come to the host for the verdict. On the host, the threaded pass over a
 * long shape's tens of millions of values read 8 bytes of reference for
 * each -- bound by the host's memory, a quarter of a cold backward tune. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fwd_compare.h"
#include "gpu_run_int.h"

/* 0xFFFF is a NaN in fp16 and in bf16 (all-ones exponent, non-zero
 * mantissa) and 0xFFFFFFFF one in fp32: one byte poisons O and lse alike
 * (and 0xFF is e4m3's NaN: unused K and V rows of e4m3 inputs too). */
#define POISON_BYTE 0xff
#define REF_BWD_MAX_HEAD_DIM 256          /* reference_bwd.cu: 8 columns per lane */
/* fat_diff_sums's launch: a fixed grid, so that its partial sums, and the
 * host's sum of them in block order, are the same on every GPU. */
#define DIFF_BLOCKS 512
#define DIFF_THREADS 256                  /* fat_util.cu's kDiffThreads */
#define DIFF_FIELDS 5                     /* diff2, ref2, max_abs, max_ref, nonfinite */
#define DIFF_COUNT_AT (DIFF_BLOCKS * DIFF_FIELDS * sizeof(double))  /* fat_count_diff's u64 */
/* fat_fingerprint's sums, one u64 for each array of a kept entry, after it. */
#define FINGERPRINT_AT (DIFF_COUNT_AT + sizeof(uint64_t))
#define FINGERPRINT_BLOCKS 264
#define FINGERPRINT_THREADS 256           /* fat_util.cu's kFingerprintThreads */

/* A variable-length shape's K and V rows past each sequence's seqused_k
 * (a cache's stale rows) set to NaN: a kernel that lets them into a row's
 * output -- even times a zero probability -- fails the check. */
static int poison_unused_keys(fat_gpu *g, const fat_check_shape *s, fat_gpu_tensors *t, char *err,
                              size_t errlen) {
  int rc = FAT_GPU_OK;
  /* (A paged shape's rows past its caches' lengths are never copied into
   * its pages, which are NaN where nothing was.) */
  if (!s->varlen || s->page_size) return rc;
  const size_t row_bytes = (size_t)s->heads_k * (size_t)t->head_dim * fat_dtype_kv_size(t->dtype);
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

static fat_ref_key ref_key(const fat_kernel_desc *d, const fat_check_shape *s, uint64_t seed) {
  return (fat_ref_key){.direction = d->direction, .dtype = d->dtype, .mask = d->mask,
                       .head_dim = d->head_dim, .shape = *s, .seed = seed};
}

/* The cache's way of freeing what a kept entry holds on the device. */
static void free_kept(void *ctx, uint64_t handle) {
  fat_gpu *g = ctx;
  g->cu.cuMemFree((CUdeviceptr)handle);
}

/* G's buffer of the comparisons' results (DIFF_BLOCKS x DIFF_FIELDS
 * doubles, then fat_count_diff's u64, then the fingerprints of a kept
 * entry's arrays), made on first use. */
static int ensure_partials(fat_gpu *g, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  if (!g->diff_partials)
    CU(g->cu.cuMemAlloc(&g->diff_partials, FINGERPRINT_AT + FAT_REF_DEV_ARRAYS * sizeof(uint64_t)),
       "cuMemAlloc of the comparison's partial sums");
out:
  return rc;
}

/* The sums of N values X (of the 16-bit DTYPE) against the fp64 REF, both
 * on the device (fwd_compare.h's fat_diff_sums). */
static int diff_sums(fat_gpu *g, CUdeviceptr x, fat_dtype dtype, CUdeviceptr ref, size_t n,
                     fat_diff_sums *out, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  double part[DIFF_BLOCKS * DIFF_FIELDS];
  unsigned long long count = n;
  int is_bf16 = dtype == FAT_BF16;
  if ((rc = ensure_partials(g, err, errlen)) != FAT_GPU_OK) return rc;
  void *args[] = {&x, &is_bf16, &ref, &count, &g->diff_partials};
  CU(g->cu.cuLaunchKernel(g->diff_fn, DIFF_BLOCKS, 1, 1, DIFF_THREADS, 1, 1, 0, g->stream, args, NULL),
     "launching the comparison of %zu values", n);
  if ((rc = fat_gpu_download(g, part, g->diff_partials, sizeof part, err, errlen)) != FAT_GPU_OK)
    goto out;
  *out = (fat_diff_sums){0};
  for (int b = 0; b < DIFF_BLOCKS; b++) {
    const double *p = &part[b * DIFF_FIELDS];
    out->diff2 += p[0];
    out->ref2 += p[1];
    out->max_abs = fmax(out->max_abs, p[2]);
    out->max_ref = fmax(out->max_ref, p[3]);
    out->nonfinite += (long long)p[4];
  }
out:
  return rc;
}

/* How many of N 16-bit values differ between A and B, on the device. */
static int count_diff(fat_gpu *g, CUdeviceptr a, CUdeviceptr b, size_t n, unsigned long long *differ,
                      char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  unsigned long long count = n;
  if ((rc = ensure_partials(g, err, errlen)) != FAT_GPU_OK) return rc;
  CUdeviceptr at = g->diff_partials + DIFF_COUNT_AT;
  void *args[] = {&a, &b, &count, &at};
  CU(g->cu.cuMemsetD32Async(at, 0, 2, g->stream), "clearing the count of differences");
  CU(g->cu.cuLaunchKernel(g->count_diff_fn, DIFF_BLOCKS, 1, 1, DIFF_THREADS, 1, 1, 0, g->stream, args,
                          NULL),
     "launching the count of differences");
  rc = fat_gpu_download(g, differ, at, sizeof *differ, err, errlen);
out:
  return rc;
}

/* The fingerprints of E's device arrays (ref_cache.h) as they are now,
 * into OUT (0 for an array the entry does not hold). */
static int fingerprints(fat_gpu *g, const fat_ref_entry *e, uint64_t out[FAT_REF_DEV_ARRAYS],
                        char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  if ((rc = ensure_partials(g, err, errlen)) != FAT_GPU_OK) return rc;
  const CUdeviceptr at = g->diff_partials + FINGERPRINT_AT;
  CU(g->cu.cuMemsetD32Async(at, 0, 2 * FAT_REF_DEV_ARRAYS, g->stream),
     "clearing the kept references' fingerprints");
  for (int i = 0; i < FAT_REF_DEV_ARRAYS; i++) {
    CUdeviceptr p = (CUdeviceptr)e->dev[i], sum = at + i * sizeof(uint64_t);
    unsigned long long bytes = fat_ref_dev_bytes(e, i);
    if (!p || !bytes) continue;
    void *args[] = {&p, &bytes, &sum};
    CU(g->cu.cuLaunchKernel(g->fingerprint_fn, FINGERPRINT_BLOCKS, 1, 1, FINGERPRINT_THREADS, 1, 1, 0,
                            g->stream, args, NULL),
       "launching the fingerprint of the kept %s", fat_ref_dev_name(e, i));
  }
  rc = fat_gpu_download(g, out, at, FAT_REF_DEV_ARRAYS * sizeof(uint64_t), err, errlen);
out:
  return rc;
}

int fat_gpu_ref_fingerprint(fat_gpu *g, fat_ref_entry *e, char *err, size_t errlen) {
  return fingerprints(g, e, e->dev_sum, err, errlen);
}

/* *CHANGED = the first of E's device arrays whose fingerprint is no
 * longer the one taken when it was made, -1 when none. */
static int kept_changed(fat_gpu *g, const fat_ref_entry *e, int *changed, char *err, size_t errlen) {
  uint64_t now[FAT_REF_DEV_ARRAYS];
  int rc = fingerprints(g, e, now, err, errlen);
  *changed = -1;
  for (int i = 0; rc == FAT_GPU_OK && i < FAT_REF_DEV_ARRAYS && *changed < 0; i++)
    if (now[i] != e->dev_sum[i]) *changed = i;
  return rc;
}

/* KEY's kept entry when it is still as it was made; one found changed (an
 * earlier launch wrote outside its outputs: ref_cache.h) is dropped, said
 * on stderr and counted, and *KEPT is NULL as on a miss, so that the
 * reference is computed again. */
static int find_kept(fat_gpu *g, const fat_ref_key *key, const fat_ref_entry **kept, char *err,
                     size_t errlen) {
  int changed, rc;
  *kept = fat_ref_cache_find(&g->refs, key);
  if (!*kept) return FAT_GPU_OK;
  if ((rc = kept_changed(g, *kept, &changed, err, errlen)) != FAT_GPU_OK) return rc;
  if (changed >= 0) {
    fprintf(stderr,
            "fatune: the kept fp64 reference %s of %dx%dx%dx%d changed after it was made (a launch "
            "before this check wrote outside its outputs); computing it again\n",
            fat_ref_dev_name(*kept, changed), key->shape.batch, key->shape.heads,
            key->shape.seqlen_q, key->shape.seqlen_k);
    g->refs.damaged++;
    fat_ref_cache_drop(&g->refs, key);
    *kept = NULL;
  }
  return FAT_GPU_OK;
}

/* After a variant ran: when it changed KEPT (the entry its check uses, or
 * NULL), its check fails with the reason in OUT and the entry is dropped;
 * *FAILED says so. */
static int guard_kept(fat_gpu *g, const fat_ref_key *key, const fat_ref_entry *kept, fat_check *out,
                      int *failed, char *err, size_t errlen) {
  int changed = -1, rc = FAT_GPU_OK;
  *failed = 0;
  if (g->run_hook) g->run_hook(g->run_hook_ctx);
  if (!kept || (rc = kept_changed(g, kept, &changed, err, errlen)) != FAT_GPU_OK || changed < 0)
    return rc;
  out->passed = 0;
  snprintf(out->reason, sizeof out->reason,
           "wrote outside its outputs: the kept reference %s changed", fat_ref_dev_name(kept, changed));
  out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
  fat_ref_cache_drop(&g->refs, key);
  *failed = 1;
  return FAT_GPU_OK;
}

/* The forward reference of T's inputs (drawn, not yet run on): O kept on
 * the device in a new entry of G's cache (T's buffer handed over), lse on
 * the host beside it; when the cache cannot keep it, O stays T's and lse
 * goes into *OWN (the caller frees it). *REF_O and *REF_LSE say where. */
static int fwd_reference(fat_gpu *g, fat_gpu_tensors *t, const fat_ref_key *key, CUdeviceptr *ref_o,
                         const double **ref_lse, double **own, const fat_ref_entry **kept,
                         char *err, size_t errlen) {
  int rc;
  if ((rc = fat_gpu_reference(g, t, key->mask, err, errlen)) != FAT_GPU_OK) return rc;
  fat_ref_entry *e =
      fat_ref_cache_insert_device(&g->refs, key, t->n_q, 0, t->n_rows, 0, free_kept, g);
  double *lse = e ? e->ref[1] : (*own = malloc(t->n_rows * sizeof(double)));
  if (!lse) {
    snprintf(err, errlen, "out of host memory for the reference of %dx%dx%dx%d", key->shape.batch,
             key->shape.heads, key->shape.seqlen_q, key->shape.seqlen_k);
    return FAT_GPU_FAILED;
  }
  if ((rc = fat_gpu_download(g, lse, t->ref_lse, t->n_rows * sizeof *lse, err, errlen))) {
    if (e) fat_ref_cache_drop(&g->refs, key);
    return rc;
  }
  *ref_o = t->ref_o;
  if (e) {  /* the entry owns it now */
    e->dev[0] = t->ref_o;
    t->ref_o = 0;
    if ((rc = fat_gpu_ref_fingerprint(g, e, err, errlen)) != FAT_GPU_OK) {
      fat_ref_cache_drop(&g->refs, key);
      return rc;
    }
    *kept = e;
  }
  *ref_lse = lse;
  return FAT_GPU_OK;
}

int fat_gpu_check(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                  fat_check *out, char *err, size_t errlen) {
  int rc;
  fat_gpu_tensors t;
  float *lse = NULL;
  double *own = NULL;
  CUdeviceptr ref_o = 0;
  const double *ref_lse = NULL;
  const fat_kernel_desc *d = &k->desc;

  if (d->direction == FAT_BWD) return fat_gpu_check_bwd(g, k, s, seed, NULL, out, err, errlen);
  memset(out, 0, sizeof *out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  double t0 = fat_now_s();
  const fat_ref_key key = ref_key(d, s, seed);
  const fat_ref_entry *kept;
  if ((rc = find_kept(g, &key, &kept, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_tensors_alloc(g, s, d->head_dim, d->dtype, !kept, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  if ((rc = fat_gpu_fill_random(g, &t, seed, err, errlen)) != FAT_GPU_OK) goto out;
  if ((rc = poison_unused_keys(g, s, &t, err, errlen)) != FAT_GPU_OK) goto out;
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  if (kept) {
    ref_o = (CUdeviceptr)kept->dev[0];
    ref_lse = kept->ref[1];
  } else if ((rc = fwd_reference(g, &t, &key, &ref_o, &ref_lse, &own, &kept, err, errlen)) !=
             FAT_GPU_OK) {
    goto out;
  }
  phase_lap(g, FAT_PHASE_REFERENCE, &t0);
  /* Poisoned outputs: anything the variant fails to write reads as NaN. */
  CU(g->cu.cuMemsetD8Async(t.o, POISON_BYTE, t.n_q * fat_dtype_size(fat_dtype_out(d->dtype)), g->stream),
     "poisoning O");
  CU(g->cu.cuMemsetD8Async(t.lse, POISON_BYTE, t.n_rows * sizeof(float), g->stream), "poisoning lse");
  if ((rc = fat_gpu_ensure_workspace(g, k, &t, out->reason, sizeof out->reason)) != FAT_GPU_OK) {
    /* A workspace that does not fit is the variant's failure on this shape. */
    snprintf(err, errlen, "%s", out->reason);
    out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
    rc = rc == FAT_GPU_FATAL ? rc : FAT_GPU_OK;
    goto out;
  }
  CUresult r = fat_gpu_launch_variant(g, k, &t);
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
  phase_lap(g, FAT_PHASE_CHECK_RUN, &t0);
  int wild;
  if ((rc = guard_kept(g, &key, kept, out, &wild, err, errlen)) != FAT_GPU_OK || wild) goto out;
  lse = malloc(t.n_rows * sizeof *lse);
  if (!lse) {
    snprintf(err, errlen, "out of host memory for the lse of %dx%dx%dx%d", s->batch, s->heads,
             s->seqlen_q, s->seqlen_k);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  fat_diff_sums o_sums;
  if ((rc = diff_sums(g, t.o, fat_dtype_out(d->dtype), ref_o, t.n_q, &o_sums, err, errlen)) ||
      (rc = fat_gpu_download(g, lse, t.lse, t.n_rows * sizeof *lse, err, errlen)))
    goto out;
  fat_compare_fwd_sums(d->dtype, &o_sums, lse, ref_lse, t.n_rows, out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
  phase_lap(g, FAT_PHASE_COMPARE, &t0);
out:
  free(lse);
  free(own);
  fat_gpu_tensors_free(g, &t);
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  return rc;
}

/* ---- backward ------------------------------------------------------- */

/* NaN into every output of the variant. */
static int bwd_poison(fat_gpu *g, fat_gpu_bwd_tensors *t, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  const size_t e = fat_dtype_size(t->fwd.dtype);
  CU(g->cu.cuMemsetD8Async(t->dq, POISON_BYTE, t->fwd.n_q * e, g->stream), "poisoning dQ");
  CU(g->cu.cuMemsetD8Async(t->dk, POISON_BYTE, t->fwd.n_kv * e, g->stream), "poisoning dK");
  CU(g->cu.cuMemsetD8Async(t->dv, POISON_BYTE, t->fwd.n_kv * e, g->stream), "poisoning dV");
  CU(g->cu.cuMemsetD8Async(t->delta, POISON_BYTE, t->fwd.n_rows * sizeof(float), g->stream), "poisoning D");
  CU(g->cu.cuMemsetD8Async(t->dq_accum, POISON_BYTE, t->n_accum * sizeof(float), g->stream),
     "poisoning the dQ accumulator");
out:
  return rc;
}

/* Runs K once on T (poisoned first), to the end. A refused launch sets
 * REFUSED to its result and returns OK. */
static int bwd_run_once(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_bwd_tensors *t,
                        CUresult *refused, char *err, size_t errlen) {
  int rc;
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
out:
  return rc;
}

/* The backward's reference on T's inputs (Q, K, V and dO drawn): O and lse
 * rounded into T as a forward kernel returns them, and the gradients; kept
 * on the device in a new entry of G's cache -- T's gradient buffers handed
 * over, copies of the rounded O and lse beside them -- or left in T when
 * the cache cannot keep them. REF says where the gradients are. */
static int bwd_reference(fat_gpu *g, fat_gpu_bwd_tensors *t, const fat_ref_key *key,
                         CUdeviceptr ref[FAT_N_GRADS], const fat_ref_entry **kept, char *err,
                         size_t errlen) {
  int rc;
  const size_t o_bytes = t->fwd.n_q * fat_dtype_size(t->fwd.dtype),
               lse_bytes = t->fwd.n_rows * sizeof(float);
  CUdeviceptr o_in = 0, lse_in = 0;
  if ((rc = fat_gpu_bwd_reference(g, t, key->mask, 1, err, errlen)) != FAT_GPU_OK) return rc;
  ref[FAT_GRAD_DQ] = t->ref_dq;
  ref[FAT_GRAD_DK] = t->ref_dk;
  ref[FAT_GRAD_DV] = t->ref_dv;
  fat_ref_entry *e = fat_ref_cache_insert_device(&g->refs, key, t->fwd.n_q, t->fwd.n_kv,
                                                 t->fwd.n_rows, fat_dtype_size(t->fwd.dtype),
                                                 free_kept, g);
  if (!e) return FAT_GPU_OK;
  /* Kept only whole: without room for the copies, T keeps its own. */
  if (g->cu.cuMemAlloc(&o_in, o_bytes ? o_bytes : 1) != CUDA_SUCCESS ||
      g->cu.cuMemAlloc(&lse_in, lse_bytes ? lse_bytes : 1) != CUDA_SUCCESS) {
    if (o_in) g->cu.cuMemFree(o_in);
    fat_ref_cache_drop(&g->refs, key);
    return FAT_GPU_OK;
  }
  e->dev[3] = o_in;
  e->dev[4] = lse_in;
  CU(g->cu.cuMemcpyDtoDAsync(o_in, t->fwd.o, o_bytes, g->stream), "keeping the reference O");
  CU(g->cu.cuMemcpyDtoDAsync(lse_in, t->fwd.lse, lse_bytes, g->stream), "keeping the reference lse");
  e->dev[0] = t->ref_dq;
  e->dev[1] = t->ref_dk;
  e->dev[2] = t->ref_dv;
  t->ref_dq = t->ref_dk = t->ref_dv = 0;  /* the entry's now */
  if ((rc = fat_gpu_ref_fingerprint(g, e, err, errlen)) == FAT_GPU_OK) *kept = e;
out:
  if (rc != FAT_GPU_OK) fat_ref_cache_drop(&g->refs, key);
  return rc;
}

/* T's O and lse from a kept reference, as bwd_reference left them. */
static int bwd_reference_inputs(fat_gpu *g, fat_gpu_bwd_tensors *t, const fat_ref_entry *e,
                                char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  CU(g->cu.cuMemcpyDtoDAsync(t->fwd.o, (CUdeviceptr)e->dev[3], t->fwd.n_q * e->elem_bytes, g->stream),
     "copying the reference O");
  CU(g->cu.cuMemcpyDtoDAsync(t->fwd.lse, (CUdeviceptr)e->dev[4], t->fwd.n_rows * sizeof(float),
                             g->stream),
     "copying the reference lse");
out:
  return rc;
}

int fat_gpu_check_bwd(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                      fat_bwd_check *bc, fat_check *out, char *err, size_t errlen) {
  int rc;
  fat_gpu_bwd_tensors t;
  fat_bwd_check local;
  CUdeviceptr first = 0;  /* the first run's gradients, for a deterministic variant's second */
  CUdeviceptr ref[FAT_N_GRADS] = {0};
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
  double t0 = fat_now_s();
  const fat_ref_key key = ref_key(d, s, seed);
  const fat_ref_entry *kept;
  if ((rc = find_kept(g, &key, &kept, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_bwd_tensors_alloc(g, s, d->head_dim, d->dtype, !kept, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  const size_t n[FAT_N_GRADS] = {t.fwd.n_q, t.fwd.n_kv, t.fwd.n_kv};
  const CUdeviceptr grad[FAT_N_GRADS] = {t.dq, t.dk, t.dv};
  const size_t e_bytes = fat_dtype_size(d->dtype);
  if ((rc = fat_gpu_fill_random(g, &t.fwd, seed, err, errlen)) != FAT_GPU_OK ||
      (rc = poison_unused_keys(g, s, &t.fwd, err, errlen)) != FAT_GPU_OK ||
      (rc = fat_gpu_fill_one(g, t.dout, t.fwd.n_q, d->dtype, fat_seed_derive(seed, SEED_DO), "dO", err,
                             errlen)) != FAT_GPU_OK)
    goto out;
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  if (kept) {
    for (int i = 0; i < FAT_N_GRADS; i++) ref[i] = (CUdeviceptr)kept->dev[i];
    if ((rc = bwd_reference_inputs(g, &t, kept, err, errlen)) != FAT_GPU_OK) goto out;
  } else if ((rc = bwd_reference(g, &t, &key, ref, &kept, err, errlen)) != FAT_GPU_OK) {
    goto out;
  }
  phase_lap(g, FAT_PHASE_REFERENCE, &t0);
  if ((rc = bwd_run_once(g, k, &t, &refused, err, errlen)) != FAT_GPU_OK) goto out;
  phase_lap(g, FAT_PHASE_CHECK_RUN, &t0);
  int wild;
  if ((rc = guard_kept(g, &key, kept, out, &wild, err, errlen)) != FAT_GPU_OK || wild) goto out;
  if (refused != CUDA_SUCCESS) {
    /* A refused launch is the variant's failure, not the worker's. */
    char text[WHAT_MAX];
    snprintf(out->reason, sizeof out->reason, "launch: %s",
             fat_cuda_result_text(&g->cu, refused, text, sizeof text));
    out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
    goto out;
  }
  fat_diff_sums sums[FAT_N_GRADS];
  for (int i = 0; i < FAT_N_GRADS; i++)
    if ((rc = diff_sums(g, grad[i], d->dtype, ref[i], n[i], &sums[i], err, errlen)) != FAT_GPU_OK)
      goto out;
  fat_compare_bwd_sums(d->dtype, sums, n, bc, out);
  phase_lap(g, FAT_PHASE_COMPARE, &t0);
  if (fat_dq_deterministic(d->dq_mode)) {
    /* The deterministic modes' promise (separate and ordered alike): the
     * same inputs give the same bits. */
    const size_t all = n[0] + n[1] + n[2];
    CU(g->cu.cuMemAlloc(&first, all * e_bytes), "cuMemAlloc of the first run's gradients");
    for (size_t i = 0, at = 0; i < FAT_N_GRADS; at += n[i], i++)
      CU(g->cu.cuMemcpyDtoDAsync(first + at * e_bytes, grad[i], n[i] * e_bytes, g->stream),
         "keeping the first run's %s", fat_grad_name((int)i));
    if ((rc = bwd_run_once(g, k, &t, &refused, err, errlen)) != FAT_GPU_OK) goto out;
    phase_lap(g, FAT_PHASE_CHECK_RUN, &t0);
    if ((rc = guard_kept(g, &key, kept, out, &wild, err, errlen)) != FAT_GPU_OK || wild) goto out;
    bc->deterministic = refused == CUDA_SUCCESS;
    if (!bc->deterministic && out->passed) {
      char text[WHAT_MAX];
      out->passed = 0;
      snprintf(out->reason, sizeof out->reason, "launch: %s (second run)",
               fat_cuda_result_text(&g->cu, refused, text, sizeof text));
    }
    size_t at = 0;
    for (int i = 0; i < FAT_N_GRADS && bc->deterministic; at += n[i], i++) {
      unsigned long long differ = 0;
      if ((rc = count_diff(g, first + at * e_bytes, grad[i], n[i], &differ, err, errlen)) != FAT_GPU_OK)
        goto out;
      if (differ) {
        bc->deterministic = 0;
        if (out->passed) {
          out->passed = 0;
          snprintf(out->reason, sizeof out->reason, "not deterministic: %s differs between two runs",
                   fat_grad_name(i));
        }
      }
    }
    phase_lap(g, FAT_PHASE_COMPARE, &t0);
  }
out:
  if (first) g->cu.cuMemFree(first);
  fat_gpu_bwd_tensors_free(g, &t);
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  return rc;
}
