/* SPDX-License-Identifier: MIT */
/* How far a variant's forward output may stray from the fp64 reference, per
 * dtype: the one place these numbers live. u is the unit roundoff of the
 * storage type (bf16: 8 significant bits, u = 2^-8 ≈ 3.9e-3; fp16: 11 bits,
 * u = 2^-11 ≈ 4.9e-4). A correct kernel loses about u when it rounds O to
 * the storage type and about u per term when it rounds P to 16 bits before
 * P·V; the bounds leave a few u of headroom and no more, so a wrong mask or
 * a missed rescale (errors of order 1) can never pass. NaN never passes. */
#ifndef FAT_TOLERANCE_H
#define FAT_TOLERANCE_H
#include "types.h"

typedef struct fat_tolerance {
  double rel_l2;       /* ||o - ref||₂ / ||ref||₂ over O */
  double max_abs_rel;  /* max |o - ref| over O, as a fraction of max |ref| */
  double lse_abs;      /* max |lse - lse_ref| over rows that see a key (natural log) */
} fat_tolerance;

/* bf16: rel_l2 1e-2 ≈ 2.5u; max_abs 4e-2 ≈ 10u of the largest output
 * (a single element may take the worst rounding of both O and P). */
#define FAT_TOL_BF16_REL_L2 1e-2
#define FAT_TOL_BF16_MAX_ABS_REL 4e-2
/* fp16: rel_l2 2e-3 ≈ 4u; max_abs 8e-3 ≈ 16u of the largest output. */
#define FAT_TOL_FP16_REL_L2 2e-3
#define FAT_TOL_FP16_MAX_ABS_REL 8e-3
/* lse, both dtypes: scores are fp32 sums of exact products of 16-bit inputs,
 * so lse is good to ~1e-6 in fp32; 2e-3 absolute still rejects any error in
 * the max or the denominator that matters (a dropped key shifts lse by
 * log(1 + p) ≫ 2e-3 unless its weight is negligible anyway). */
#define FAT_TOL_LSE_ABS 2e-3

static inline fat_tolerance fat_tolerance_for(fat_dtype d) {
  fat_tolerance t;
  t.rel_l2 = d == FAT_BF16 ? FAT_TOL_BF16_REL_L2 : FAT_TOL_FP16_REL_L2;
  t.max_abs_rel = d == FAT_BF16 ? FAT_TOL_BF16_MAX_ABS_REL : FAT_TOL_FP16_MAX_ABS_REL;
  t.lse_abs = FAT_TOL_LSE_ABS;
  return t;
}
/* Backward: how far dQ, dK and dV may stray from the fp64 reference
 * gradients, as rel_l2 of each gradient (||g - ref||₂ / ||ref||₂). They
 * carry more rounding than O: besides Q, K, V and dO, the kernel reads O
 * rounded to the dtype (an error of u in D = rowsum(dO ∘ O)), rounds P and
 * dS = P ∘ (dP − D) to the dtype before the dV, dK and dQ products (u per
 * term, and dS's difference cancels, so its relative error grows where dP
 * is close to D), and sums in fp32. Each gradient thus collects a few u
 * more than O's single rounding.
 * tests/test_bwd_cpu.c models exactly these roundings on one head (96 x 96,
 * d64) and measures about 0.6u per gradient (bf16 2.4e-3, fp16 3.0e-4).
 * bf16: 1e-2 ≈ 2.5u, four times the model. fp16: 5e-3 ≈ 10u: fp16 has 3
 * fewer exponent bits, and at the tuner's long check shapes (16k keys) the
 * small entries of P and dS (a few 1e-5) fall into its subnormals, which
 * keep fewer significant bits. A wrong mask, a missed key block or a wrong
 * scale moves a gradient by errors of order 1 (the model's dropped mask:
 * 1.3) and cannot pass; NaN never passes (poisoned outputs left unwritten
 * show as NaN). */
#define FAT_TOL_BWD_BF16_REL_L2 1e-2
#define FAT_TOL_BWD_FP16_REL_L2 5e-3

static inline double fat_bwd_tolerance_for(fat_dtype d) {
  return d == FAT_BF16 ? FAT_TOL_BWD_BF16_REL_L2 : FAT_TOL_BWD_FP16_REL_L2;
}
#endif
