/* SPDX-License-Identifier: MIT */
/* Tests of the pure arithmetic behind checking and timing: percentiles of
 * repeated timings (tuner/measure/stats.c) on known arrays of odd and even length,
 * the exact decoding of fp16/bf16 bits, and the forward checker's verdicts
 * and reason strings (tuner/measure/fwd_compare.c) against tuner/measure/tolerance.h,
 * including that NaN never passes and that each tolerance is the boundary
 * it claims to be. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fwd_compare.h"
#include "stats.h"
#include "tolerance.h"
#include "check.h"

#define TOL 1e-12
#define FP16_ONE 0x3c00
#define BF16_ONE 0x3f80
#define FP16_NAN 0x7e00
#define LONG_N 10000

static void test_stats_odd(void) {
  const double x[] = {5, 1, 3};
  fat_stats s;
  CHECK(fat_stats_compute(x, 3, &s) == 0);
  CHECK(s.n == 3);
  CHECK_NEAR(s.min, 1, TOL);
  CHECK_NEAR(s.max, 5, TOL);
  CHECK_NEAR(s.median, 3, TOL);
  CHECK_NEAR(s.p10, 1.4, TOL); /* rank 0.2 between 1 and 3 */
  CHECK_NEAR(s.p90, 4.6, TOL); /* rank 1.8 between 3 and 5 */
  CHECK_NEAR(s.mean, 3, TOL);
  CHECK(x[0] == 5 && x[1] == 1); /* input left unsorted */
}

static void test_stats_even(void) {
  const double x[] = {4, 1, 3, 2};
  fat_stats s;
  CHECK(fat_stats_compute(x, 4, &s) == 0);
  CHECK_NEAR(s.median, 2.5, TOL); /* mean of the two middle values */
  CHECK_NEAR(s.p10, 1.3, TOL);
  CHECK_NEAR(s.p90, 3.7, TOL);
  CHECK_NEAR(s.mean, 2.5, TOL);
  /* Twenty timings as the worker takes them: 1..20 ms. */
  double t[20];
  for (int i = 0; i < 20; i++) t[i] = 20 - i;
  CHECK(fat_stats_compute(t, 20, &s) == 0);
  CHECK_NEAR(s.median, 10.5, TOL);
  CHECK_NEAR(s.p10, 2.9, TOL);  /* rank 1.9 */
  CHECK_NEAR(s.p90, 18.1, TOL); /* rank 17.1 */
}

static void test_stats_edges(void) {
  const double one[] = {7};
  const double bad[] = {1, NAN, 2};
  fat_stats s;
  CHECK(fat_stats_compute(one, 1, &s) == 0);
  CHECK(s.min == 7 && s.max == 7 && s.median == 7 && s.p10 == 7 && s.p90 == 7);
  CHECK(fat_stats_compute(one, 0, &s) == -1);
  CHECK(fat_stats_compute(bad, 3, &s) == -1);
  const double sorted[] = {0, 10};
  CHECK_NEAR(fat_percentile_sorted(sorted, 2, 0), 0, TOL);
  CHECK_NEAR(fat_percentile_sorted(sorted, 2, 25), 2.5, TOL);
  CHECK_NEAR(fat_percentile_sorted(sorted, 2, 100), 10, TOL);
}

static void test_half_decoding(void) {
  CHECK(fat_half_to_double(FP16_ONE, FAT_FP16) == 1.0);
  CHECK(fat_half_to_double(0xc000, FAT_FP16) == -2.0);
  CHECK(fat_half_to_double(0x3555, FAT_FP16) == 0.333251953125);
  CHECK(fat_half_to_double(0x0001, FAT_FP16) == ldexp(1, -24)); /* smallest subnormal */
  CHECK(fat_half_to_double(0x7bff, FAT_FP16) == 65504.0);       /* largest finite */
  CHECK(isinf(fat_half_to_double(0x7c00, FAT_FP16)) && fat_half_to_double(0x7c00, FAT_FP16) > 0);
  CHECK(isinf(fat_half_to_double(0xfc00, FAT_FP16)) && fat_half_to_double(0xfc00, FAT_FP16) < 0);
  CHECK(isnan(fat_half_to_double(FP16_NAN, FAT_FP16)));
  CHECK(isnan(fat_half_to_double(0xffff, FAT_FP16))); /* the worker's poison */
  CHECK(fat_half_to_double(BF16_ONE, FAT_BF16) == 1.0);
  CHECK(fat_half_to_double(0xc040, FAT_BF16) == -3.0);
  CHECK(fat_half_to_double(0x3eab, FAT_BF16) == 0.333984375);
  CHECK(isnan(fat_half_to_double(0xffff, FAT_BF16)));
}

/* Every one of the 65536 binary16 patterns against the definition:
 * (-1)^s 2^(e-15) (1 + m/1024), subnormals 2^-14 m/1024, inf and NaN. */
static void test_half_decoding_exhaustive(void) {
  int bad = 0;
  for (uint32_t bits = 0; bits <= 0xffff; bits++) {
    const int e = (int)(bits >> 10) & 0x1f, m = (int)(bits & 0x3ff);
    const double sign = bits & 0x8000 ? -1.0 : 1.0;
    const double want = e == 0x1f ? (m ? NAN : sign * INFINITY)
                        : e == 0  ? sign * ldexp(m, -24)
                                  : sign * ldexp(m + 1024, e - 25);
    const double got = fat_half_to_double((uint16_t)bits, FAT_FP16);
    const int same = isnan(want) ? isnan(got) : got == want && signbit(got) == signbit(want);
    if (!same && bad++ < 5) fprintf(stderr, "fp16 0x%04x: got %a, want %a\n", bits, got, want);
  }
  CHECK_INT(bad, 0);
}

/* fat_diff_sums_of: the same bits on one thread (short) as on many (long),
 * and the sums those of a plain serial pass to rounding. */
static void test_diff_sums(void) {
  const size_t n = ((size_t)3 << 20) + 12345;  /* past the threaded minimum, not a multiple */
  uint16_t *x = malloc(n * sizeof *x);
  double *ref = malloc(n * sizeof *ref);
  REQUIRE(x && ref);
  uint32_t state = 12345;
  double diff2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    const uint16_t h = (uint16_t)(0x3000 + (state >> 20));  /* positive, finite fp16 */
    x[i] = h;
    ref[i] = fat_half_to_double(h, FAT_FP16) * (1 + 1e-3 * ((double)(state & 0xff) / 255 - 0.5));
  }
  x[n / 3] = 0x7e00;  /* one NaN, one inf: not summed, counted */
  x[n - 1] = 0x7c00;
  for (size_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    if (i == n / 3 || i == n - 1) continue;
    const double e = fabs(fat_half_to_double(x[i], FAT_FP16) - ref[i]);
    diff2 += e * e, ref2 += ref[i] * ref[i];
    if (e > max_abs) max_abs = e;
  }
  fat_diff_sums a, b;
  fat_diff_sums_of(x, FAT_FP16, ref, n, &a);
  fat_diff_sums_of(x, FAT_FP16, ref, n, &b);
  CHECK(!memcmp(&a, &b, sizeof a));
  CHECK_INT(a.nonfinite, 2);
  CHECK(fabs(a.diff2 - diff2) <= 1e-12 * diff2);  /* the same sums, in another order */
  CHECK(fabs(a.ref2 - ref2) <= 1e-12 * ref2);
  CHECK(a.max_abs == max_abs);
  CHECK(a.max_ref == max_ref);
  /* A short array: one thread, the same chunks. */
  fat_diff_sums s;
  fat_diff_sums_of(x, FAT_FP16, ref, 1000, &s);
  double d2 = 0;
  for (size_t i = 0; i < 1000; i++) {
    const double e = fat_half_to_double(x[i], FAT_FP16) - ref[i];
    d2 += e * e;
  }
  CHECK(fabs(s.diff2 - d2) <= 1e-12 * d2 && s.nonfinite == 0);
  fat_diff_sums_of(x, FAT_FP16, ref, 0, &s);
  CHECK(s.diff2 == 0 && s.ref2 == 0 && s.nonfinite == 0);
out:
  free(x);
  free(ref);
}

/* N outputs all 1.0 against a reference of 1.0, lse rows all 0.5. */
typedef struct case_t {
  uint16_t o[LONG_N];
  double ref[LONG_N];
  float lse[4];
  double ref_lse[4];
} case_t;

static void fill_case(case_t *c, uint16_t one) {
  for (int i = 0; i < LONG_N; i++) {
    c->o[i] = one;
    c->ref[i] = 1.0;
  }
  for (int i = 0; i < 4; i++) c->lse[i] = 0.5f, c->ref_lse[i] = 0.5;
}

static void test_compare(void) {
  static case_t c;
  fat_check k;

  fill_case(&c, FP16_ONE);
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 1);
  CHECK_STR(k.reason, "ok");
  CHECK(k.rel_l2 == 0 && k.max_abs == 0 && k.lse_max_abs == 0 && k.nonfinite == 0);

  /* NaN never passes, whatever else is right. */
  c.o[17] = FP16_NAN;
  c.o[18] = 0x7c00; /* +inf */
  c.o[19] = 0xffff;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 0 && k.nonfinite == 3);
  CHECK_STR(k.reason, "3 non-finite outputs");
  fill_case(&c, FP16_ONE);
  c.o[0] = FP16_NAN;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK_STR(k.reason, "1 non-finite output");

  /* Everything off by 2^-6 = 1.5625e-2: over fp16's 2e-3 and bf16's 1e-2. */
  fill_case(&c, 0x3c10);
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 0);
  CHECK_NEAR(k.rel_l2, 0.015625, TOL);
  CHECK_STR(k.reason, "rel_l2 1.6e-02 > 2.0e-03");
  fill_case(&c, 0x3f82); /* bf16 1 + 2^-6 */
  fat_compare_fwd(FAT_BF16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK_STR(k.reason, "rel_l2 1.6e-02 > 1.0e-02");
  /* bf16 1 + 2^-7 = 7.8e-3 is inside bf16's bound. */
  fill_case(&c, 0x3f81);
  fat_compare_fwd(FAT_BF16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 1);
  CHECK_NEAR(k.rel_l2, 0.0078125, TOL);

  /* One element off by 0.125: rel_l2 = 0.125 / sqrt(10000) = 1.25e-3 passes,
   * max_abs does not. */
  fill_case(&c, FP16_ONE);
  c.o[5] = 0x3c80; /* 1.125 */
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 0);
  CHECK_NEAR(k.rel_l2, 0.00125, TOL);
  CHECK_NEAR(k.max_abs, 0.125, TOL);
  CHECK_STR(k.reason, "max_abs 1.2e-01 > 8.0e-03 x max|ref| 1.0e+00");

  /* lse: an empty row must be exactly -inf; finite rows within 2e-3. */
  fill_case(&c, FP16_ONE);
  c.ref_lse[1] = -INFINITY;
  c.lse[1] = -INFINITY;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 1);
  c.lse[1] = -1e30f;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK_STR(k.reason, "lse row 1 is -1.0e+30, expected -inf");
  c.lse[1] = -INFINITY;
  c.lse[2] = NAN;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK_STR(k.reason, "lse row 2 is nan, expected 5.0e-01");
  c.lse[2] = 0.5f;
  c.lse[3] = 0.5f + 0.01f;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 0);
  CHECK(fabs(k.lse_max_abs - 0.01) < 1e-6);
  CHECK_STR(k.reason, "lse max_abs 1.0e-02 > 2.0e-03");
  c.lse[3] = 0.5f + 0.001f;
  fat_compare_fwd(FAT_FP16, c.o, c.ref, LONG_N, c.lse, c.ref_lse, 4, &k);
  CHECK(k.passed == 1);

  /* Every row empty: the reference is all zeros, and only zeros match it. */
  uint16_t zeros[3] = {0, 0, 0x8000}, one_off[3] = {0, FP16_ONE, 0};
  double ref0[3] = {0, 0, 0}, ref_lse0[1] = {-INFINITY};
  float lse0[1] = {-INFINITY};
  fat_compare_fwd(FAT_FP16, zeros, ref0, 3, lse0, ref_lse0, 1, &k);
  CHECK(k.passed == 1 && k.rel_l2 == 0);
  fat_compare_fwd(FAT_FP16, one_off, ref0, 3, lse0, ref_lse0, 1, &k);
  CHECK(k.passed == 0 && isinf(k.rel_l2));
  CHECK_STR(k.reason, "rel_l2 inf > 2.0e-03");
}

static void test_tolerances(void) {
  fat_tolerance b = fat_tolerance_for(FAT_BF16), h = fat_tolerance_for(FAT_FP16);
  CHECK(b.rel_l2 == 1e-2 && b.max_abs_rel == 4e-2 && b.lse_abs == 2e-3);
  CHECK(h.rel_l2 == 2e-3 && h.max_abs_rel == 8e-3 && h.lse_abs == 2e-3);
  /* An fp8 K/V cache is held to its Q's 16-bit bounds, not e4m3's looser ones. */
  fat_tolerance hk = fat_tolerance_for(FAT_FP16_E4M3KV), bk = fat_tolerance_for(FAT_BF16_E4M3KV);
  CHECK(hk.rel_l2 == h.rel_l2 && hk.max_abs_rel == h.max_abs_rel && hk.lse_abs == h.lse_abs);
  CHECK(bk.rel_l2 == b.rel_l2 && bk.max_abs_rel == b.max_abs_rel && bk.lse_abs == b.lse_abs);
  /* And its O is read as that type: fp16 bits are no bf16 value. */
  fat_check c;
  const uint16_t one_fp16 = 0x3c00;  /* 1.0 in fp16; 0x3c00 as bf16 is 2^-7 */
  const double ref_one = 1.0;
  const float lse0 = 0.f;
  const double ref_lse0 = 0.0;
  fat_compare_fwd(FAT_FP16_E4M3KV, &one_fp16, &ref_one, 1, &lse0, &ref_lse0, 1, &c);
  CHECK(c.passed && c.rel_l2 == 0);
  fat_compare_fwd(FAT_BF16_E4M3KV, &one_fp16, &ref_one, 1, &lse0, &ref_lse0, 1, &c);
  CHECK(!c.passed);
}

int main(void) {
  test_stats_odd();
  test_stats_even();
  test_stats_edges();
  test_half_decoding();
  test_half_decoding_exhaustive();
  test_diff_sums();
  test_compare();
  test_tolerances();
  return check_summary("test_stats");
}
