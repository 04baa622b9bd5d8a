/* SPDX-License-Identifier: MIT */
/* Checking a variant on one shape, forward and backward: random inputs
 * drawn from the check's seed, outputs poisoned with NaN, the launch, the
 * fp64 reference (reference.c) and the comparison (fwd_compare.h); for a
 * deterministic backward, a second run that must give the same bits.
 *
 * The reference of a (variant kind, shape, seed) is computed once, on
 * inputs no variant has touched, and kept on the host (ref_cache.h): every
 * variant of a problem is checked on the same seed, so the fp64 work --
 * most of a check's time on the long shapes -- is done once a problem
 * instead of once a variant. Each check draws its inputs afresh from the
 * seed, so a variant cannot change what a later one is compared with. */
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

/* The forward reference of T's inputs (drawn, not yet run on), into a new
 * entry of G's cache, or into OWN (the caller frees both) when the cache
 * cannot keep it; REF_O and REF_LSE point at what was filled. */
static int fwd_reference(fat_gpu *g, fat_gpu_tensors *t, const fat_ref_key *key,
                         const double **ref_o, const double **ref_lse, double *own[2], char *err,
                         size_t errlen) {
  int rc;
  if ((rc = fat_gpu_reference(g, t, key->mask, err, errlen)) != FAT_GPU_OK) return rc;
  fat_ref_entry *e = fat_ref_cache_insert(&g->refs, key, t->n_q, 0, t->n_rows, 0);
  double *o = e ? e->ref[0] : (own[0] = malloc(t->n_q * sizeof(double)));
  double *lse = e ? e->ref[1] : (own[1] = malloc(t->n_rows * sizeof(double)));
  if (!o || !lse) {
    snprintf(err, errlen, "out of host memory for the reference of %dx%dx%dx%d", key->shape.batch,
             key->shape.heads, key->shape.seqlen_q, key->shape.seqlen_k);
    return FAT_GPU_FAILED;
  }
  if ((rc = fat_gpu_download(g, o, t->ref_o, t->n_q * sizeof *o, err, errlen)) ||
      (rc = fat_gpu_download(g, lse, t->ref_lse, t->n_rows * sizeof *lse, err, errlen))) {
    if (e) fat_ref_cache_drop(&g->refs, key);
    return rc;
  }
  *ref_o = o;
  *ref_lse = lse;
  return FAT_GPU_OK;
}

int fat_gpu_check(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                  fat_check *out, char *err, size_t errlen) {
  int rc;
  fat_gpu_tensors t;
  uint16_t *o = NULL;
  float *lse = NULL;
  double *own[2] = {NULL, NULL};
  const double *ref_o = NULL, *ref_lse = NULL;
  const fat_kernel_desc *d = &k->desc;

  if (d->direction == FAT_BWD) return fat_gpu_check_bwd(g, k, s, seed, NULL, out, err, errlen);
  memset(out, 0, sizeof *out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  double t0 = gpu_now_s();
  const fat_ref_key key = ref_key(d, s, seed);
  const fat_ref_entry *kept = fat_ref_cache_find(&g->refs, &key);
  if ((rc = fat_gpu_tensors_alloc(g, s, d->head_dim, d->dtype, !kept, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  if ((rc = fat_gpu_fill_random(g, &t, seed, err, errlen)) != FAT_GPU_OK) goto out;
  if ((rc = poison_unused_keys(g, s, &t, err, errlen)) != FAT_GPU_OK) goto out;
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  if (kept) {
    ref_o = kept->ref[0];
    ref_lse = kept->ref[1];
  } else if ((rc = fwd_reference(g, &t, &key, &ref_o, &ref_lse, own, err, errlen)) != FAT_GPU_OK) {
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
  o = malloc(t.n_q * sizeof *o);
  lse = malloc(t.n_rows * sizeof *lse);
  if (!o || !lse) {
    snprintf(err, errlen, "out of host memory for the outputs of %dx%dx%dx%d", s->batch, s->heads,
             s->seqlen_q, s->seqlen_k);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  if ((rc = fat_gpu_download(g, o, t.o, t.n_q * sizeof *o, err, errlen)) ||
      (rc = fat_gpu_download(g, lse, t.lse, t.n_rows * sizeof *lse, err, errlen)))
    goto out;
  fat_compare_fwd(d->dtype, o, ref_o, t.n_q, lse, ref_lse, t.n_rows, out);
  out->batch = s->batch;
  out->heads = s->heads;
  out->seqlen_q = s->seqlen_q;
  out->seqlen_k = s->seqlen_k;
  phase_lap(g, FAT_PHASE_COMPARE, &t0);
out:
  free(o);
  free(lse);
  free(own[0]);
  free(own[1]);
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

/* The backward's reference on T's inputs (Q, K, V and dO drawn): O and lse
 * rounded into T as a forward kernel returns them, and the gradients; kept
 * in a new entry of G's cache with the rounded O and lse, or in OWN (the
 * caller frees it) when the cache cannot keep it. REF points at the
 * gradients. */
static int bwd_reference(fat_gpu *g, fat_gpu_bwd_tensors *t, const fat_ref_key *key,
                         const double *ref[FAT_N_GRADS], double *own[FAT_N_GRADS], char *err,
                         size_t errlen) {
  int rc;
  const size_t n[FAT_N_GRADS] = {t->fwd.n_q, t->fwd.n_kv, t->fwd.n_kv};
  const CUdeviceptr src[FAT_N_GRADS] = {t->ref_dq, t->ref_dk, t->ref_dv};
  const size_t e_bytes = fat_dtype_size(t->fwd.dtype);
  if ((rc = fat_gpu_bwd_reference(g, t, key->mask, 1, err, errlen)) != FAT_GPU_OK) return rc;
  fat_ref_entry *e = fat_ref_cache_insert(&g->refs, key, t->fwd.n_q, t->fwd.n_kv, t->fwd.n_rows, e_bytes);
  for (int i = 0; i < FAT_N_GRADS; i++) {
    double *dst = e ? e->ref[i] : (own[i] = malloc(n[i] * sizeof(double)));
    if (!dst) {
      snprintf(err, errlen, "out of host memory for the reference gradients of %dx%dx%dx%d",
               key->shape.batch, key->shape.heads, key->shape.seqlen_q, key->shape.seqlen_k);
      return FAT_GPU_FAILED;
    }
    if ((rc = fat_gpu_download(g, dst, src[i], n[i] * sizeof(double), err, errlen)) != FAT_GPU_OK)
      goto fail;
    ref[i] = dst;
  }
  if (e && ((rc = fat_gpu_download(g, e->o_in, t->fwd.o, t->fwd.n_q * e_bytes, err, errlen)) ||
            (rc = fat_gpu_download(g, e->lse_in, t->fwd.lse, t->fwd.n_rows * sizeof(float), err,
                                   errlen))))
    goto fail;
  return FAT_GPU_OK;
fail:
  if (e) fat_ref_cache_drop(&g->refs, key);
  return rc;
}

/* T's O and lse from a kept reference, as bwd_reference left them. */
static int bwd_reference_inputs(fat_gpu *g, fat_gpu_bwd_tensors *t, const fat_ref_entry *e,
                                char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  CU(g->cu.cuMemcpyHtoD(t->fwd.o, e->o_in, t->fwd.n_q * e->elem_bytes), "copying the reference O");
  CU(g->cu.cuMemcpyHtoD(t->fwd.lse, e->lse_in, t->fwd.n_rows * sizeof(float)),
     "copying the reference lse");
out:
  return rc;
}

int fat_gpu_check_bwd(fat_gpu *g, const fat_gpu_kernel *k, const fat_check_shape *s, uint64_t seed,
                      fat_bwd_check *bc, fat_check *out, char *err, size_t errlen) {
  int rc;
  fat_gpu_bwd_tensors t;
  fat_bwd_check local;
  uint16_t *grads[FAT_N_GRADS] = {NULL}, *again[FAT_N_GRADS] = {NULL};
  double *own[FAT_N_GRADS] = {NULL};
  const double *ref[FAT_N_GRADS] = {NULL};
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
  double t0 = gpu_now_s();
  const fat_ref_key key = ref_key(d, s, seed);
  const fat_ref_entry *kept = fat_ref_cache_find(&g->refs, &key);
  if ((rc = fat_gpu_bwd_tensors_alloc(g, s, d->head_dim, d->dtype, !kept, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  const size_t n[FAT_N_GRADS] = {t.fwd.n_q, t.fwd.n_kv, t.fwd.n_kv};
  for (int i = 0; i < FAT_N_GRADS; i++) {
    grads[i] = malloc(n[i] * sizeof **grads);
    again[i] = d->dq_separate ? malloc(n[i] * sizeof **again) : NULL;
    if (!grads[i] || (d->dq_separate && !again[i])) {
      snprintf(err, errlen, "out of host memory for the gradients of %dx%dx%dx%d", s->batch, s->heads,
               s->seqlen_q, s->seqlen_k);
      rc = FAT_GPU_FAILED;
      goto out;
    }
  }
  if ((rc = fat_gpu_fill_random(g, &t.fwd, seed, err, errlen)) != FAT_GPU_OK ||
      (rc = poison_unused_keys(g, s, &t.fwd, err, errlen)) != FAT_GPU_OK ||
      (rc = fat_gpu_fill_one(g, t.dout, t.fwd.n_q, d->dtype, fat_seed_derive(seed, SEED_DO), "dO", err,
                             errlen)) != FAT_GPU_OK)
    goto out;
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  if (kept) {
    for (int i = 0; i < FAT_N_GRADS; i++) ref[i] = kept->ref[i];
    if ((rc = bwd_reference_inputs(g, &t, kept, err, errlen)) != FAT_GPU_OK) goto out;
  } else if ((rc = bwd_reference(g, &t, &key, ref, own, err, errlen)) != FAT_GPU_OK) {
    goto out;
  }
  phase_lap(g, FAT_PHASE_REFERENCE, &t0);
  if ((rc = bwd_run_once(g, k, &t, grads, &refused, err, errlen)) != FAT_GPU_OK) goto out;
  phase_lap(g, FAT_PHASE_CHECK_RUN, &t0);
  if (refused != CUDA_SUCCESS) {
    /* A refused launch is the variant's failure, not the worker's. */
    char text[WHAT_MAX];
    snprintf(out->reason, sizeof out->reason, "launch: %s",
             fat_cuda_result_text(&g->cu, refused, text, sizeof text));
    out->rel_l2 = out->max_abs = out->lse_max_abs = NAN;
    goto out;
  }
  fat_compare_bwd(d->dtype, (const uint16_t *const *)grads, ref, n, bc, out);
  phase_lap(g, FAT_PHASE_COMPARE, &t0);
  if (d->dq_separate) {
    /* The deterministic mode's promise: the same inputs give the same bits. */
    if ((rc = bwd_run_once(g, k, &t, again, &refused, err, errlen)) != FAT_GPU_OK) goto out;
    phase_lap(g, FAT_PHASE_CHECK_RUN, &t0);
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
    phase_lap(g, FAT_PHASE_COMPARE, &t0);
  }
out:
  for (int i = 0; i < FAT_N_GRADS; i++) {
    free(grads[i]);
    free(again[i]);
    free(own[i]);
  }
  fat_gpu_bwd_tensors_free(g, &t);
  phase_lap(g, FAT_PHASE_CHECK_BUFFERS, &t0);
  return rc;
}
