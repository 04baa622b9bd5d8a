/* SPDX-License-Identifier: MIT */
/* Validation of the forward job's pieces and the memory arithmetic of the
 * materialising baseline (see job.h); the backward check's verdict and
 * its peak memory. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fat_abi.h"
#include "fat_abi_bwd.h"
#include "bwd_launch.h"
#include "fwd_compare.h"
#include "job.h"
#include "tolerance.h"

int fat_check_shape_validate(const fat_check_shape *s, int index, char *err, size_t errlen) {
  const struct { const char *name; int value; } dims[] = {
      {"batch", s->batch},       {"heads", s->heads},       {"heads_k", s->heads_k},
      {"seqlen_q", s->seqlen_q}, {"seqlen_k", s->seqlen_k},
  };
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].value < 1) {
      snprintf(err, errlen, "check shape %d: %s %d is not positive", index, dims[i].name,
               dims[i].value);
      return -1;
    }
  if (s->heads % s->heads_k != 0) {
    snprintf(err, errlen, "check shape %d: heads %d is not a multiple of heads_k %d", index,
             s->heads, s->heads_k);
    return -1;
  }
  if (s->lengths.n != 0) {
    const int longest = s->lengths.n > 0 && s->lengths.n <= FAT_VARLEN_MAX
                            ? fat_lengths_longest(&s->lengths) : 0;
    if (!s->varlen || s->lengths.n != s->batch || longest != s->seqlen_q ||
        s->seqlen_q != s->seqlen_k) {
      snprintf(err, errlen, "check shape %d: a profile of %d lengths (longest %d) does not match "
               "varlen %d, batch %d, seqlen_q %d, seqlen_k %d", index, s->lengths.n, longest,
               s->varlen, s->batch, s->seqlen_q, s->seqlen_k);
      return -1;
    }
    for (int b = 0; b < s->lengths.n; b++)
      if (s->lengths.v[b] < 1) {
        snprintf(err, errlen, "check shape %d: sequence %d has length %d", index, b, s->lengths.v[b]);
        return -1;
      }
  }
  if (s->page_size != 0 &&
      (s->page_size < FAT_PAGE_SIZE_MIN || s->page_size > FAT_PAGE_SIZE_MAX ||
       (s->page_size & (s->page_size - 1)) || s->lengths.n != 0)) {
    snprintf(err, errlen, "check shape %d: page_size %d is not a power of two from %d to %d over "
             "a dense batch", index, s->page_size, FAT_PAGE_SIZE_MIN, FAT_PAGE_SIZE_MAX);
    return -1;
  }
  return 0;
}

int fat_paged_used_keys(const fat_check_shape *s, int b) {
  /* As fat_varlen_lengths cuts its keys: uneven, never a multiple of a page. */
  return b == 0 || !s->varlen ? s->seqlen_k : s->seqlen_k - (b * 53 + 5) % s->seqlen_k;
}

void fat_varlen_lengths(const fat_check_shape *s, int b, int *len_q, int *len_k, int *used_k) {
  if (s->lengths.n > 0) {
    *len_q = *len_k = *used_k = s->lengths.v[b];
    return;
  }
  /* Sequence 0 is the longest; the others shrink by uneven steps (never a
   * multiple of a tile), down to a single query or key. */
  const int cut_q = b == 0 ? 0 : (b * 37 + 11) % s->seqlen_q;
  const int cut_k = b == 0 ? 0 : (b * 53 + 5) % s->seqlen_k;
  *len_q = s->seqlen_q - cut_q;
  *len_k = s->seqlen_k - cut_k;
  /* Odd sequences use part of their keys: a K/V cache padded per sequence. */
  *used_k = b % 2 ? *len_k - *len_k / 3 : *len_k;
}

size_t fat_materialize_workspace_bytes(const fat_check_shape *s) {
  return (size_t)s->batch * (size_t)s->heads * (size_t)s->seqlen_q * (size_t)s->seqlen_k *
         sizeof(float);
}

size_t fat_fwd_peak_bytes(const fat_problem *p, int materialize) {
  /* Q's element, and K's and V's (one byte for an fp8 K/V cache, whose Q
   * is 16-bit). */
  const size_t e = fat_dtype_size(p->dtype), e_kv = fat_dtype_kv_size(p->dtype);
  const size_t d = (size_t)p->head_dim;
  /* Rows of Q (and of K): a packed profile holds its sequences' tokens. */
  size_t rows_q = (size_t)p->batch * p->seqlen_q, rows_k = (size_t)p->batch * p->seqlen_k;
  if (p->lengths.n > 0) rows_q = rows_k = (size_t)fat_lengths_tokens(&p->lengths);
  /* O in its own type: bf16 for e4m3's one-byte inputs, Q's for an fp8
   * K/V cache. */
  const size_t q_o = rows_q * p->heads * d * (e + fat_dtype_size(fat_dtype_out(p->dtype)));
  /* A paged problem's K and V twice: contiguous (the reference's) and in
   * the pool of pages the kernels read (and a spare page a sequence). */
  const size_t k_v = 2 * (p->page_size ? 2 : 1) * rows_k * p->heads_k * d * e_kv;
  const size_t lse = rows_q * p->heads * sizeof(float);
  fat_check_shape s = {FAT_SHAPE_DIMS(p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k)};
  return q_o + k_v + lse + (materialize ? fat_materialize_workspace_bytes(&s) : 0);
}

static const char *const PHASE_NAMES[FAT_PHASE_COUNT][2] = {
    [FAT_PHASE_LOAD] = {"module loads", "load"},
    [FAT_PHASE_CHECK_BUFFERS] = {"check buffers", "check_buffers"},
    [FAT_PHASE_REFERENCE] = {"references", "reference"},
    [FAT_PHASE_CHECK_RUN] = {"check runs", "check_run"},
    [FAT_PHASE_COMPARE] = {"comparisons", "compare"},
    [FAT_PHASE_TIME_BUFFERS] = {"timing buffers", "time_buffers"},
    [FAT_PHASE_TIMED_RUNS] = {"timed runs", "timed_runs"},
};

const char *fat_phase_name(fat_phase p) {
  return p >= 0 && p < FAT_PHASE_COUNT ? PHASE_NAMES[p][0] : "?";
}

const char *fat_phase_key(fat_phase p) {
  return p >= 0 && p < FAT_PHASE_COUNT ? PHASE_NAMES[p][1] : "?";
}

const char *fat_grad_name(int i) {
  static const char *const names[FAT_N_GRADS] = {"dQ", "dK", "dV"};
  return i >= 0 && i < FAT_N_GRADS ? names[i] : "?";
}

void fat_compare_bwd(fat_dtype d, const uint16_t *const g[FAT_N_GRADS],
                     const double *const ref[FAT_N_GRADS], const size_t n[FAT_N_GRADS],
                     fat_bwd_check *bc, fat_check *out) {
  fat_diff_sums sums[FAT_N_GRADS];
  for (int k = 0; k < FAT_N_GRADS; k++) fat_diff_sums_of(g[k], d, ref[k], n[k], &sums[k]);
  fat_compare_bwd_sums(d, sums, n, bc, out);
}

void fat_compare_bwd_sums(fat_dtype d, const fat_diff_sums sums[FAT_N_GRADS],
                          const size_t n[FAT_N_GRADS], fat_bwd_check *bc, fat_check *out) {
  const double tol = fat_bwd_tolerance_for(d);
  int bad_nonfinite = -1, bad_l2 = -1;
  double diff2[FAT_N_GRADS], ref2[FAT_N_GRADS], mean_ref2 = 0;
  out->rel_l2 = out->max_abs = 0;
  out->lse_max_abs = 0;
  out->nonfinite = 0;
  for (int k = 0; k < FAT_N_GRADS; k++) {
    diff2[k] = sums[k].diff2;
    ref2[k] = sums[k].ref2;
    if (n[k] && ref2[k] / (double)n[k] > mean_ref2) mean_ref2 = ref2[k] / (double)n[k];
    bc->max_abs[k] = sums[k].max_abs;
    bc->nonfinite[k] = sums[k].nonfinite;
  }
  for (int k = 0; k < FAT_N_GRADS; k++) {
    /* An all-zero reference (dQ and dK when every row sees one key: P = 1,
     * dS = P·(dP − D) = 0) is exact only up to the rounding of dP − D in
     * fp32: the error is measured against the mean square of the largest
     * other gradient instead; with every reference zero, any difference is
     * infinitely wrong. */
    if (ref2[k] > 0) bc->rel_l2[k] = sqrt(diff2[k] / ref2[k]);
    else if (diff2[k] == 0) bc->rel_l2[k] = 0;
    else if (mean_ref2 > 0) bc->rel_l2[k] = sqrt(diff2[k] / ((double)n[k] * mean_ref2));
    else bc->rel_l2[k] = INFINITY;
    const double max_abs = bc->max_abs[k];
    const long long nonfinite = bc->nonfinite[k];
    if (bc->rel_l2[k] > out->rel_l2) out->rel_l2 = bc->rel_l2[k];
    if (max_abs > out->max_abs) out->max_abs = max_abs;
    out->nonfinite += nonfinite;
    if (nonfinite && bad_nonfinite < 0) bad_nonfinite = k;
    if (!(bc->rel_l2[k] <= tol) && bad_l2 < 0) bad_l2 = k;
  }
  out->passed = bad_nonfinite < 0 && bad_l2 < 0;
  if (bad_nonfinite >= 0)
    snprintf(out->reason, sizeof out->reason, "%s: %lld non-finite value%s", fat_grad_name(bad_nonfinite),
             bc->nonfinite[bad_nonfinite], bc->nonfinite[bad_nonfinite] == 1 ? "" : "s");
  else if (bad_l2 >= 0)
    snprintf(out->reason, sizeof out->reason, "%s rel_l2 %.1e > %.1e", fat_grad_name(bad_l2),
             bc->rel_l2[bad_l2], tol);
  else
    snprintf(out->reason, sizeof out->reason, "ok");
}

size_t fat_bwd_peak_bytes(const fat_problem *p, fat_dq_mode dq_mode) {
  const size_t e = fat_dtype_size(p->dtype), d = (size_t)p->head_dim;
  const size_t q_rows = (size_t)p->batch * p->seqlen_q * p->heads;
  const size_t kv_rows = (size_t)p->batch * p->seqlen_k * p->heads_k;
  /* An ordered variant's semaphores, as many as the workspace holds for
   * any (bwd_launch.h). */
  size_t sems = 0;
  if (dq_mode == FAT_DQ_ORDERED && fat_bwd_semaphores_bound(p->batch, p->heads, p->seqlen_q, 0, &sems))
    return SIZE_MAX;
  /* Q, O, dO, dQ; K, V, dK, dV; lse and D; the fp32 dQ accumulator and the
   * semaphores. */
  return 4 * q_rows * d * e + 4 * kv_rows * d * e + 2 * q_rows * sizeof(float) +
         (fat_dq_accumulates(dq_mode) ? q_rows * FAT_BWD_ACCUM_WIDTH(d) * sizeof(float) : 0) +
         sems * sizeof(int32_t);
}
