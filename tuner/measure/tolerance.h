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

/* e4m3 (fp8 inputs, O in bf16): the inputs are exact -- the reference reads
 * the same bytes times the same descale factors -- and the products of
 * e4m3 values are exact, but Hopper's fp8 wgmma does not keep a full fp32
 * sum of them: its accumulator holds about 14 significant bits (DeepSeek-V3
 * measured it on the H800), so a score of magnitude |s| is off by up to
 * ~|s| 2^-13, and lse with it (FAT_TOL_E4M3_LSE_ABS, below). What is new
 * besides is P: the kernel
 * rounds P = exp2(s - m + 8), in (0, 256] so that almost none is subnormal,
 * to e4m3 before P·V, a unit roundoff of 2^-4 (3 mantissa bits) on every
 * term; l sums P in fp32 before the rounding; O = acc · v_descale / l is
 * rounded to bf16 (2^-9). A row's error is then about u · rms(p·v) / |Σp·v|
 * and does not average away with many keys.
 * tests/test_fp8_cpu.c models exactly these roundings (online softmax over
 * blocks of 128 keys) on random heads of 128 to 16384 keys, d 64 to 256,
 * rows sharp and flat, and measures rel_l2 7.6e-3 (sharp rows: the
 * largest P is 256, exact) to 2.9e-2 (flat rows: every term rounded, about
 * u/√3 ≈ 3.6e-2 at worst), max_abs_rel 1.3e-2 to 3.7e-2; 16k keys 2.6e-2
 * and 2.7e-2. rel_l2 7e-2 ≈ 2.4x the worst measured, max_abs_rel 1.2e-1
 * ≈ 3.2x. A dropped causal mask moves O by 0.86, a missed rescale by 0.29
 * to 0.72 (0.095 on the flattest rows, whose max barely moves: still out),
 * a forgotten v_descale by ~1e2; none can pass. */
#define FAT_TOL_E4M3_REL_L2 7e-2
#define FAT_TOL_E4M3_MAX_ABS_REL 1.2e-1
/* e4m3's lse: measured on the H100 (thirtieth session, the tuner's checks
 * of d64-d256 at 1024-16384 keys), 5e-6 to 2e-4 on most shapes and 3.1e-3
 * to 9.9e-3 on the 2-batch, 3-head check shape, whose per-(batch, head)
 * descale groups have the widest spreads (scores several times larger:
 * the accumulator's error grows with them); 3e-2 is 3x the worst. A
 * forgotten q or k descale or the 2^8 offset left in lse (8 ln 2) move it
 * by order 1. */
#define FAT_TOL_E4M3_LSE_ABS 3e-2

/* fp16-e4m3kv and bf16-e4m3kv (an fp8 K/V cache: Q and O 16-bit, K and V
 * e4m3 with descale factors) take the bounds of their Q's 16-bit type, no
 * looser: their kernels round exactly as that type's do. An e4m3 byte
 * converts to fp16 and to bf16 exactly (3 mantissa bits, exponents from
 * 2^-9 to 2^8, within both), so S = Q·Kᵀ sums the same exact products of
 * 16-bit values in fp32; K's descale scales S and V's scales O in fp32
 * (one rounding of 2^-24 each, far below u); P is rounded to 16 bits
 * before P·V and O to the storage type as in the 16-bit kernels. The
 * reference reads the same bytes times the same factors, so the inputs
 * are exact on both sides, and lse's bound holds as it does for fp16 and
 * bf16. A forgotten descale (amax / 448: about 1e-2 for the tuner's
 * inputs, templates/fat_util.cu) scales S or O by about 1e2 and cannot
 * pass. */

static inline fat_tolerance fat_tolerance_for(fat_dtype d) {
  fat_tolerance t;
  if (fat_dtype_is_kv8(d)) d = fat_dtype_out(d);
  t.rel_l2 = d == FAT_E4M3 ? FAT_TOL_E4M3_REL_L2
             : d == FAT_BF16 ? FAT_TOL_BF16_REL_L2 : FAT_TOL_FP16_REL_L2;
  t.max_abs_rel = d == FAT_E4M3 ? FAT_TOL_E4M3_MAX_ABS_REL
                  : d == FAT_BF16 ? FAT_TOL_BF16_MAX_ABS_REL : FAT_TOL_FP16_MAX_ABS_REL;
  t.lse_abs = d == FAT_E4M3 ? FAT_TOL_E4M3_LSE_ABS : FAT_TOL_LSE_ABS;
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

/* (e4m3 and the fp8 K/V caches have no backward: the tuner refuses them,
 * the schema too; their rows are judged, if ever, by bf16's bound -- e4m3's
 * O's type -- and an fp16-e4m3kv one by bf16's as well, the looser.) */
static inline double fat_bwd_tolerance_for(fat_dtype d) {
  return d == FAT_FP16 ? FAT_TOL_BWD_FP16_REL_L2 : FAT_TOL_BWD_BF16_REL_L2;
}
#endif
