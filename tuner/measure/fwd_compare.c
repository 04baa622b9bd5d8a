/* SPDX-License-Identifier: MIT */
/* The forward checker's arithmetic and verdict (see fwd_compare.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "fwd_compare.h"
#include "tolerance.h"

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
#define FP16_EXP_MASK 0x1f
#define FP16_MANT_BITS 10
#define FP16_MANT_MASK 0x3ff
#define FP16_BIAS 15
#define SIGN_BIT_16 0x8000
/* bfloat16 is the top half of a binary32. */
#define BF16_SHIFT 16

double fat_half_to_double(uint16_t bits, fat_dtype d) {
  if (d == FAT_BF16) {
    uint32_t wide = (uint32_t)bits << BF16_SHIFT;
    float f;
    memcpy(&f, &wide, sizeof f);
    return f;
  }
  int exp = (bits >> FP16_MANT_BITS) & FP16_EXP_MASK;
  int mant = bits & FP16_MANT_MASK;
  double sign = (bits & SIGN_BIT_16) ? -1.0 : 1.0;
  if (exp == FP16_EXP_MASK) return mant ? NAN : sign * INFINITY;
  if (exp == 0) return sign * ldexp(mant, 1 - FP16_BIAS - FP16_MANT_BITS); /* subnormal */
  return sign * ldexp(mant + (1 << FP16_MANT_BITS), exp - FP16_BIAS - FP16_MANT_BITS);
}

void fat_compare_fwd(fat_dtype d, const uint16_t *o, const double *ref_o, size_t n_o,
                     const float *lse, const double *ref_lse, size_t n_rows, fat_check *out) {
  const fat_tolerance tol = fat_tolerance_for(d);
  const fat_dtype o_type = fat_dtype_out(d);  /* e4m3's O is bf16, a K/V cache's its Q's type */
  double diff2 = 0, ref2 = 0, max_abs = 0, max_ref = 0, lse_max = 0;
  long long nonfinite = 0;
  char lse_problem[sizeof out->reason] = "";

  for (size_t i = 0; i < n_o; i++) {
    double x = fat_half_to_double(o[i], o_type), r = ref_o[i];
    if (!isfinite(x)) {
      nonfinite++;
      continue;
    }
    double e = fabs(x - r);
    diff2 += e * e;
    ref2 += r * r;
    if (e > max_abs) max_abs = e;
    if (fabs(r) > max_ref) max_ref = fabs(r);
  }
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
