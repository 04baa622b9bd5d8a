/* SPDX-License-Identifier: MIT */
/* Judging one forward output against the fp64 reference, on the host: the
 * numbers in fat_check and the verdict by tolerance.h. Pure CPU code, so
 * every verdict and every reason string is tested without a GPU. */
#ifndef FAT_FWD_COMPARE_H
#define FAT_FWD_COMPARE_H
#include <stddef.h>
#include <stdint.h>
#include "types.h"

/* The exact value of a 16-bit float stored as raw bits: IEEE binary16 for
 * FAT_FP16 (subnormals, inf and NaN included), bfloat16 for FAT_BF16. */
double fat_half_to_double(uint16_t bits, fat_dtype d);

/* What a comparison of N 16-bit values X (of type D, as above) with their
 * fp64 references REF adds up: over the finite values of X, the sums of
 * squares of the differences and of the references and the largest
 * difference; over all of REF its largest magnitude; and X's non-finite
 * values. */
typedef struct fat_diff_sums {
  double diff2, ref2, max_abs, max_ref;
  long long nonfinite;
} fat_diff_sums;

/* The sums of X against REF, in FAT_DIFF_CHUNKS fixed chunks summed in
 * order -- the same bits however many threads ran them -- on up to that
 * many threads when N is large enough to pay for them (the long check
 * shapes: a serial pass over 17 million fp16 values took most of a tune
 * stage). */
#define FAT_DIFF_CHUNKS 16
void fat_diff_sums_of(const uint16_t *x, fat_dtype d, const double *ref, size_t n,
                      fat_diff_sums *out);

/* Compares O (N_O 16-bit values of fat_dtype_out(D): bf16 for e4m3, fp16
 * or bf16 for the fp8 K/V caches) with
 * REF_O and LSE (N_ROWS) with REF_LSE, by D's tolerances, filling rel_l2, max_abs, lse_max_abs, nonfinite, passed and
 * reason of OUT (the shape fields are the caller's). Reasons, first failing
 * test first: "3 non-finite outputs" ("1 non-finite output"), "rel_l2 1.3e-02 > 1.0e-02",
 * "max_abs 1.5e-01 > 4.0e-02 x max|ref| 3.2e+00", "lse row 7 is 1.2e+00,
 * expected -inf", "lse row 7 is nan, expected 1.2e+00",
 * "lse max_abs 5.0e-03 > 2.0e-03", or "ok". */
void fat_compare_fwd(fat_dtype d, const uint16_t *o, const double *ref_o, size_t n_o,
                     const float *lse, const double *ref_lse, size_t n_rows, fat_check *out);
/* The same verdict from O's sums already taken (the worker's, on the GPU:
 * fat_diff_sums_of's fields from O and its reference where they are). */
void fat_compare_fwd_sums(fat_dtype d, const fat_diff_sums *o_sums, const float *lse,
                          const double *ref_lse, size_t n_rows, fat_check *out);
#endif
