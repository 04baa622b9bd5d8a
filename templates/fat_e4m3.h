/* The e4m3 format (FP8 E4M3FN) in the common subset of C11 and CUDA C++,
 * for the tuner's support kernels and its host code alike: the random
 * fill quantises with fat_e4m3_encode (templates/fat_util.cu), the fp64
 * reference reads with fat_e4m3_decode (templates/reference_fwd.cu), and
 * the CPU tests run the same two functions (tests/test_fp8_cpu.c), so what
 * they prove of every byte holds on the GPU. No variant includes it: the
 * kernels convert with the hardware's cvt (templates/fwd_ws90.cu).
 *
 * E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 holds
 * the subnormals m · 2^-9; no infinity; S.1111.111 (0x7F, 0xFF) is NaN, so
 * the largest finite value is 1.110 · 2^8 = 448. */
#ifndef FAT_E4M3_H
#define FAT_E4M3_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FAT_E4M3_FN __host__ __device__ __forceinline__
#else
#define FAT_E4M3_FN static inline
#endif

#define FAT_E4M3_BIAS 7
#define FAT_E4M3_MANT_BITS 3
#define FAT_E4M3_MANT_MASK 0x7
#define FAT_E4M3_EXP_MAX 15        /* the top exponent: finite except for mantissa 7 */
#define FAT_E4M3_SIGN 0x80
#define FAT_E4M3_NAN 0x7f          /* and 0xff */
#define FAT_E4M3_MAX 448.0         /* 1.110b · 2^8 */
#define FAT_E4M3_MAX_BYTE 0x7e
#define FAT_E4M3_MIN_NORMAL 0.015625     /* 2^-6 */
#define FAT_E4M3_SUBNORMAL_QUANTUM 0.001953125  /* 2^-9: the spacing below 2^-6 */

/* 2^k, exactly, for the small k of this format (|k| < 16). */
FAT_E4M3_FN double fat_e4m3_pow2(int k) {
  double p = 1.0;
  for (; k > 0; k--) p *= 2.0;
  for (; k < 0; k++) p *= 0.5;
  return p;
}

/* The value of byte B, exactly; NaN for 0x7F and 0xFF. */
FAT_E4M3_FN double fat_e4m3_decode(unsigned char b) {
  const int e = (b >> FAT_E4M3_MANT_BITS) & FAT_E4M3_EXP_MAX, m = b & FAT_E4M3_MANT_MASK;
  const double sign = (b & FAT_E4M3_SIGN) ? -1.0 : 1.0;
  if (e == FAT_E4M3_EXP_MAX && m == FAT_E4M3_MANT_MASK) {
    const double zero = 0.0;
    return zero / zero;
  }
  if (e == 0) return sign * m * FAT_E4M3_SUBNORMAL_QUANTUM;
  return sign * (double)(m + (1 << FAT_E4M3_MANT_BITS)) *
         fat_e4m3_pow2(e - FAT_E4M3_BIAS - FAT_E4M3_MANT_BITS);
}

/* X rounded to the nearest e4m3 value, ties to even, saturating: |X| past
 * 448 gives ±448 (cvt.rn.satfinite.e4m3x2.f32's rule); NaN gives 0x7F. */
FAT_E4M3_FN unsigned char fat_e4m3_encode(double x) {
  if (x != x) return FAT_E4M3_NAN;
  const unsigned char sign = x < 0 ? FAT_E4M3_SIGN : 0;
  const double a = x < 0 ? -x : x;
  if (a >= FAT_E4M3_MAX) return (unsigned char)(sign | FAT_E4M3_MAX_BYTE);
  /* The binade of A: exponent field e (0: the subnormals) and its spacing q. */
  int e = 0;
  double q = FAT_E4M3_SUBNORMAL_QUANTUM;
  if (a >= FAT_E4M3_MIN_NORMAL) {
    double base = FAT_E4M3_MIN_NORMAL;
    e = 1;
    while (e < FAT_E4M3_EXP_MAX && a >= 2.0 * base) base *= 2.0, e++;
    q = base / (1 << FAT_E4M3_MANT_BITS);
  }
  /* n = A / q rounded to even (A / q is exact: q is a power of two). */
  const double t = a / q;
  long long n = (long long)t;
  const double frac = t - (double)n;
  if (frac > 0.5 || (frac == 0.5 && (n & 1))) n++;
  /* A carry into the next binade: 8 subnormal steps are 2^-6, 16 steps 2^(e+1). */
  if (e == 0 && n == (1 << FAT_E4M3_MANT_BITS)) e = 1;
  else if (e > 0 && n == (2 << FAT_E4M3_MANT_BITS)) e++, n = 1 << FAT_E4M3_MANT_BITS;
  if (e == 0) return (unsigned char)(sign | n);
  if (e > FAT_E4M3_EXP_MAX || (e == FAT_E4M3_EXP_MAX && n - (1 << FAT_E4M3_MANT_BITS) == FAT_E4M3_MANT_MASK))
    return (unsigned char)(sign | FAT_E4M3_MAX_BYTE);  /* (a < 448 never gets here) */
  return (unsigned char)(sign | (e << FAT_E4M3_MANT_BITS) | (n - (1 << FAT_E4M3_MANT_BITS)));
}

/* The layout of a tensor the tuner fills with e4m3 values (the argument of
 * templates/fat_util.cu's fat_fill_e4m3_amax and fat_fill_e4m3, packed by
 * tuner/measure/device.c): (rows, heads, head_dim), the rows of sequence b
 * at b · seqlen (dense) or from cu_seqlens[b] (packed); GROUP query heads
 * share a key head (1 for K and V). PER_HEAD 0: one descale factor for the
 * tensor; 1: one a (batch, key head), b · heads_k + kh, as
 * templates/fat_abi_fp8.h indexes them with strides heads_k and 1. */
typedef struct fat_fp8_fill_layout {
  int head_dim, heads, group, heads_k, seqlen, batch, per_head;
  const int *cu_seqlens;  /* device rows of a packed batch (batch + 1), or 0 */
} fat_fp8_fill_layout;
#endif
