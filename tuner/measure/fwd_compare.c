/* SPDX-License-Identifier: MIT */
/* The forward checker's arithmetic and verdict (see fwd_compare.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "fwd_compare.h"
#include "tolerance.h"

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
#define FP16_EXP_MASK 0x1f
#define FP16_MANT_BITS 10
#define FP16_MANT_MASK 0x3ff
#define SIGN_BIT_16 0x8000
/* bfloat16 is the top half of a binary32. */
#define BF16_SHIFT 16

/* binary32's layout, for the widening below. */
#define FP32_MANT_BITS 23
#define FP32_EXP_ALL_ONES 0xffu
#define FP16_TO_FP32_MANT_SHIFT (FP32_MANT_BITS - FP16_MANT_BITS)
/* 2^(127 - 15): rebiases the exponent of binary16's bits placed at
 * binary32's positions; exact for normals and subnormals alike (a
 * subnormal half becomes a float subnormal, times a power of two). */
#define FP16_REBIAS 0x1p112f

static inline float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* binary16's bits to the float of the same value, without a branch on
 * the finite path and without libm (ldexp a value was most of a check's
 * comparison). */
static inline float fp16_bits_to_float(uint16_t bits) {
  const uint32_t sign = (uint32_t)(bits & SIGN_BIT_16) << BF16_SHIFT;
  const uint32_t rest = (uint32_t)(bits & ~SIGN_BIT_16);
  if ((rest >> FP16_MANT_BITS) == FP16_EXP_MASK)  /* inf and NaN: every exponent bit set */
    return bits_to_float(sign | FP32_EXP_ALL_ONES << FP32_MANT_BITS |
                         (rest & FP16_MANT_MASK) << FP16_TO_FP32_MANT_SHIFT);
  const float magnitude = bits_to_float(rest << FP16_TO_FP32_MANT_SHIFT) * FP16_REBIAS;
  return sign ? -magnitude : magnitude;
}

static inline float half_to_float(uint16_t bits, fat_dtype d) {
  return d == FAT_BF16 ? bits_to_float((uint32_t)bits << BF16_SHIFT) : fp16_bits_to_float(bits);
}

double fat_half_to_double(uint16_t bits, fat_dtype d) { return half_to_float(bits, d); }

/* ---- the sums, chunk by chunk ---------------------------------------------- */

#define DIFF_LANES 4                      /* independent accumulators in a chunk */
#define DIFF_THREADED_MIN ((size_t)1 << 20) /* values below which one thread does it all */

typedef struct diff_chunk {
  const uint16_t *x;
  const double *ref;
  size_t n;
  fat_dtype d;
  fat_diff_sums sums;
} diff_chunk;

/* One chunk's sums: DIFF_LANES running sums, one per value position
 * mod DIFF_LANES, added in lane order at the end (a fixed order, so a
 * chunk's result does not depend on anything but its values). */
static void diff_chunk_run(diff_chunk *c) {
  double diff2[DIFF_LANES] = {0}, ref2[DIFF_LANES] = {0};
  double max_abs = 0, max_ref = 0;
  long long nonfinite = 0;
  for (size_t i = 0; i < c->n; i++) {
    const double x = half_to_float(c->x[i], c->d), r = c->ref[i];
    const double mr = fabs(r);
    if (mr > max_ref) max_ref = mr;
    if (!isfinite(x)) {
      nonfinite++;
      continue;
    }
    const double e = fabs(x - r);
    diff2[i % DIFF_LANES] += e * e;
    ref2[i % DIFF_LANES] += r * r;
    if (e > max_abs) max_abs = e;
  }
  c->sums = (fat_diff_sums){.max_abs = max_abs, .max_ref = max_ref, .nonfinite = nonfinite};
  for (int l = 0; l < DIFF_LANES; l++) {
    c->sums.diff2 += diff2[l];
    c->sums.ref2 += ref2[l];
  }
}

static void *diff_chunk_thread(void *arg) {
  diff_chunk_run(arg);
  return NULL;
}

void fat_diff_sums_of(const uint16_t *x, fat_dtype d, const double *ref, size_t n,
                      fat_diff_sums *out) {
  diff_chunk c[FAT_DIFF_CHUNKS];
  pthread_t th[FAT_DIFF_CHUNKS];
  int started[FAT_DIFF_CHUNKS] = {0};
  const size_t per = (n + FAT_DIFF_CHUNKS - 1) / FAT_DIFF_CHUNKS;
  for (int k = 0; k < FAT_DIFF_CHUNKS; k++) {
    const size_t lo = (size_t)k * per < n ? (size_t)k * per : n;
    const size_t hi = lo + per < n ? lo + per : n;
    c[k] = (diff_chunk){.x = x + lo, .ref = ref + lo, .n = hi - lo, .d = d};
  }
  /* Chunk 0 on this thread; the others on their own where it pays. A
   * thread that cannot start leaves its chunk to this one. */
  for (int k = 1; k < FAT_DIFF_CHUNKS && n >= DIFF_THREADED_MIN; k++)
    started[k] = pthread_create(&th[k], NULL, diff_chunk_thread, &c[k]) == 0;
  for (int k = 0; k < FAT_DIFF_CHUNKS; k++)
    if (!started[k]) diff_chunk_run(&c[k]);
  for (int k = 1; k < FAT_DIFF_CHUNKS; k++)
    if (started[k]) pthread_join(th[k], NULL);
  *out = (fat_diff_sums){0};
  for (int k = 0; k < FAT_DIFF_CHUNKS; k++) {
    out->diff2 += c[k].sums.diff2;
    out->ref2 += c[k].sums.ref2;
    if (c[k].sums.max_abs > out->max_abs) out->max_abs = c[k].sums.max_abs;
    if (c[k].sums.max_ref > out->max_ref) out->max_ref = c[k].sums.max_ref;
    out->nonfinite += c[k].sums.nonfinite;
  }
}

void fat_compare_fwd(fat_dtype d, const uint16_t *o, const double *ref_o, size_t n_o,
                     const float *lse, const double *ref_lse, size_t n_rows, fat_check *out) {
  fat_diff_sums sums;
  fat_diff_sums_of(o, fat_dtype_out(d), ref_o, n_o, &sums);
  fat_compare_fwd_sums(d, &sums, lse, ref_lse, n_rows, out);
}

void fat_compare_fwd_sums(fat_dtype d, const fat_diff_sums *sums, const float *lse,
                          const double *ref_lse, size_t n_rows, fat_check *out) {
  const fat_tolerance tol = fat_tolerance_for(d);
  double lse_max = 0;
  char lse_problem[sizeof out->reason] = "";
  const double diff2 = sums->diff2, ref2 = sums->ref2, max_abs = sums->max_abs,
               max_ref = sums->max_ref;
  const long long nonfinite = sums->nonfinite;
  for (size_t i = 0; i < n_rows; i++) {
    double x = lse[i], r = ref_lse[i];
    if (isinf(r) && r < 0) {
      /* A row that sees no key must say so exactly: -inf, not a large
       * negative number and not NaN. */
      if (!(isinf(x) && x < 0) && !lse_problem[0])
        snprintf(lse_problem, sizeof lse_problem, "lse row %zu is %.1e, expected -inf", i, x);
      continue;
    }
    if (!isfinite(x)) {
      if (!lse_problem[0])
        snprintf(lse_problem, sizeof lse_problem, "lse row %zu is %.1e, expected %.1e", i, x, r);
      continue;
    }
    if (fabs(x - r) > lse_max) lse_max = fabs(x - r);
  }

  out->nonfinite = nonfinite;
  out->max_abs = nonfinite ? NAN : max_abs;
  /* An all-zero reference (every row empty) admits only an all-zero output. */
  out->rel_l2 = nonfinite ? NAN : ref2 > 0 ? sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0);
  out->lse_max_abs = lse_max;
  out->passed = 0;
  if (nonfinite)
    snprintf(out->reason, sizeof out->reason, "%lld non-finite output%s", nonfinite,
             nonfinite == 1 ? "" : "s");
  else if (!(out->rel_l2 <= tol.rel_l2))
    snprintf(out->reason, sizeof out->reason, "rel_l2 %.1e > %.1e", out->rel_l2, tol.rel_l2);
  else if (max_abs > tol.max_abs_rel * max_ref)
    snprintf(out->reason, sizeof out->reason, "max_abs %.1e > %.1e x max|ref| %.1e", max_abs,
             tol.max_abs_rel, max_ref);
  else if (lse_problem[0])
    snprintf(out->reason, sizeof out->reason, "%s", lse_problem);
  else if (lse_max > tol.lse_abs)
    snprintf(out->reason, sizeof out->reason, "lse max_abs %.1e > %.1e", lse_max, tol.lse_abs);
  else {
    snprintf(out->reason, sizeof out->reason, "ok");
    out->passed = 1;
  }
}
