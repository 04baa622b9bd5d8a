// Utility kernels of the tuning worker (tuner/gpu_run.c), compiled by NVRTC
// for the GPU at hand and never part of a variant:
//   fat_fill_normal   inputs drawn on the GPU: a counter-based hash of
//                     (seed, element index) through Box-Muller gives N(0, 1),
//                     rounded to fp16 or bf16. Each element depends only on
//                     the seed and its index, so any launch shape gives the
//                     same tensor and a test can reproduce it.
//   fat_fill_e4m3_amax, fat_fill_e4m3
//                     e4m3 inputs as an fp8 user makes them: the same N(0, 1)
//                     draws times a spread per descale group (so that the
//                     groups' factors differ), the amax of each group, then
//                     each value divided by its group's descale = amax / 448
//                     and rounded to e4m3 (templates/fat_e4m3.h, prepended by
//                     the tuner); the descale factors are written beside.
//   fat_clock_probe   the SM clock a kernel sees: spins for a fixed time by
//                     %globaltimer (ns) and counts clock64() cycles.
//   fat_diff_sums     a check's comparison where its outputs and the kept
//                     fp64 references already are: for N fp16 / bf16 values
//                     against their references, each block's sums of squared
//                     differences and of squared references (over the finite
//                     values), its largest difference and largest |reference|,
//                     and its count of non-finite values, 5 doubles a block;
//                     the host adds the blocks in order. A fixed grid and a
//                     fixed tree in each block: the same bits on any GPU.
//   fat_count_diff    how many of N 16-bit values differ between two arrays
//                     (a deterministic backward's two runs).
//   fat_fingerprint   a fingerprint of N bytes: the sum, modulo 2^64, of a
//                     hash of each 32-bit word and its index (each trailing
//                     byte alone), so that any changed word changes it and
//                     the order of the additions does not: the kept fp64
//                     references are fingerprinted when they are made and
//                     again around every check (tuner/measure/check.c).
// Self-contained: NVRTC compiles it alone, without the host toolchain
// (tuner/measure/device.c prepends templates/fat_e4m3.h).

typedef unsigned short elem_t;  // raw fp16 / bf16 bits
typedef unsigned long long u64;

constexpr u64 kGolden = 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio: splitmix64's step
constexpr double kTwoPi = 6.283185307179586;
constexpr float kTwoPow32Inv = 2.3283064365386963e-10f;  // 2^-32: 32 random bits → [0, 1)

// splitmix64's finaliser: a bijection of 64-bit words that mixes every input
// bit into every output bit, so consecutive counters give unrelated values.
__device__ __forceinline__ u64 mix64(u64 z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ elem_t to_fp16(float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}

__device__ __forceinline__ elem_t to_bf16(float x) {
  // Round to nearest even on the upper 16 bits (inputs here are finite).
  unsigned int bits = __float_as_uint(x);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (elem_t)(bits >> 16);
}

// Element i's draw from N(0, 1): a function of (seed, i) alone.
__device__ __forceinline__ float normal_at(u64 seed, u64 i) {
  u64 bits = mix64(seed + (i + 1) * kGolden);
  // u1 in (0, 1] keeps log() finite; u2 in [0, 1) picks the angle.
  float u1 = ((float)(unsigned int)(bits >> 32) + 1.0f) * kTwoPow32Inv;
  float u2 = (float)(unsigned int)bits * kTwoPow32Inv;
  return sqrtf(-2.0f * logf(u1)) * cosf((float)kTwoPi * u2);
}

extern "C" __global__ void fat_fill_normal(elem_t *dst, u64 n, int is_bf16, u64 seed) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    float x = normal_at(seed, i);
    dst[i] = is_bf16 ? to_bf16(x) : to_fp16(x);
  }
}

// ---- e4m3 -------------------------------------------------------------------

typedef fat_fp8_fill_layout fp8_layout;  // templates/fat_e4m3.h

// The spread of group g's values: 2^((g mod 5 - 2) / 2), 0.5 to 2, so that
// neighbouring groups have different descale factors.
constexpr int kSpreads = 5;
__device__ __forceinline__ float group_spread(unsigned g) {
  const float spread[kSpreads] = {0.5f, 0.70710678f, 1.0f, 1.41421356f, 2.0f};
  return spread[g % kSpreads];
}

__device__ __forceinline__ unsigned fp8_group(const fp8_layout &t, u64 i) {
  if (!t.per_head) return 0;
  const u64 row = i / ((u64)t.head_dim * t.heads);
  const int h = (int)((i / t.head_dim) % t.heads);
  int b;
  if (t.cu_seqlens) {
    int lo = 0, hi = t.batch - 1;  // the last sequence starting at or before row
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if ((u64)t.cu_seqlens[mid] <= row) lo = mid; else hi = mid - 1;
    }
    b = lo;
  } else {
    b = (int)(row / (u64)t.seqlen);
  }
  return (unsigned)(b * t.heads_k + h / t.group);
}

__device__ __forceinline__ float fp8_value(const fp8_layout &t, u64 seed, u64 i, unsigned *g) {
  *g = fp8_group(t, i);
  return group_spread(*g) * normal_at(seed, i);
}

// amax_bits[g] = max |x| over group g, as float bits (non-negative floats
// order as their bits); zeroed by the host first. Each thread takes a run of
// consecutive elements, so that one atomic serves a head's row.
extern "C" __global__ void fat_fill_e4m3_amax(u64 n, u64 seed, fp8_layout t, unsigned *amax_bits) {
  const u64 threads = (u64)gridDim.x * blockDim.x;
  const u64 run = (n + threads - 1) / threads;
  const u64 first = (blockIdx.x * (u64)blockDim.x + threadIdx.x) * run;
  unsigned group = 0, g;
  float m = -1.0f;
  for (u64 i = first; i < n && i < first + run; i++) {
    const float a = fabsf(fp8_value(t, seed, i, &g));
    if (m >= 0.0f && g != group) {
      atomicMax(amax_bits + group, __float_as_uint(m));
      m = -1.0f;
    }
    group = g;
    m = fmaxf(m, a);
  }
  if (m >= 0.0f) atomicMax(amax_bits + group, __float_as_uint(m));
}

// The factor of group g: its amax maps to 448 (1 for an all-zero group).
__device__ __forceinline__ float fp8_descale(const unsigned *amax_bits, unsigned g) {
  const float amax = __uint_as_float(amax_bits[g]);
  return amax > 0.0f ? amax / (float)FAT_E4M3_MAX : 1.0f;
}

// dst[i] = e4m3(x_i / descale of its group); descale[g] for the n_groups.
extern "C" __global__ void fat_fill_e4m3(unsigned char *dst, u64 n, u64 seed, fp8_layout t,
                                         const unsigned *amax_bits, float *descale, int n_groups) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    unsigned g;
    const float x = fp8_value(t, seed, i, &g);
    dst[i] = fat_e4m3_encode((double)(x / fp8_descale(amax_bits, g)));
    if (i < (u64)n_groups) descale[i] = fp8_descale(amax_bits, (unsigned)i);
  }
}

// out[0] = SM cycles and out[1] = nanoseconds over a spin of at least
// spin_ns; the host divides them for MHz. One thread is enough: the clock is
// per SM, and any SM of a busy GPU runs at the clock the variants saw.
extern "C" __global__ void fat_clock_probe(u64 *out, u64 spin_ns) {
  u64 t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < spin_ns);
  long long c1 = clock64();
  out[0] = (u64)(c1 - c0);
  out[1] = t1 - t0;
}

constexpr int kDiffThreads = 256;  // tuner/measure/check.c's DIFF_THREADS
constexpr int kDiffFields = 5;     // diff2, ref2, max_abs, max_ref, nonfinite

// A 16-bit value's exact double: bf16 is a float's upper half; fp16 by the
// conversion instruction (subnormals, inf and NaN as they are).
__device__ __forceinline__ double half_value(elem_t h, int is_bf16) {
  if (is_bf16) return (double)__uint_as_float((unsigned)h << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return (double)f;
}

extern "C" __global__ void __launch_bounds__(kDiffThreads)
    fat_diff_sums(const elem_t *x, int is_bf16, const double *ref, u64 n, double *partials) {
  __shared__ double sums[kDiffFields][kDiffThreads];
  double diff2 = 0, ref2 = 0, max_abs = 0, max_ref = 0, nonfinite = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    const double r = ref[i], v = half_value(x[i], is_bf16);
    max_ref = fmax(max_ref, fabs(r));
    if (!isfinite(v)) {
      nonfinite += 1;
      continue;
    }
    const double e = fabs(v - r);
    diff2 += e * e;
    ref2 += r * r;
    max_abs = fmax(max_abs, e);
  }
  const int t = threadIdx.x;
  sums[0][t] = diff2, sums[1][t] = ref2, sums[2][t] = max_abs, sums[3][t] = max_ref;
  sums[4][t] = nonfinite;
  __syncthreads();
  for (int half = kDiffThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      sums[0][t] += sums[0][t + half];
      sums[1][t] += sums[1][t + half];
      sums[2][t] = fmax(sums[2][t], sums[2][t + half]);
      sums[3][t] = fmax(sums[3][t], sums[3][t + half]);
      sums[4][t] += sums[4][t + half];
    }
    __syncthreads();
  }
  if (t < kDiffFields) partials[blockIdx.x * kDiffFields + t] = sums[t][0];
}

extern "C" __global__ void fat_count_diff(const elem_t *a, const elem_t *b, u64 n, u64 *count) {
  u64 differ = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x)
    differ += a[i] != b[i];
  if (differ) atomicAdd(count, differ);
}

constexpr int kFingerprintThreads = 256;  // tuner/measure/check.c's FINGERPRINT_THREADS

// Word i's term: its value and its index through mix64, so that a word moved
// or two swapped change the sum too.
__device__ __forceinline__ u64 fingerprint_term(u64 i, u64 value) {
  return mix64((i + 1) * kGolden ^ (value << 1 | 1));
}

// *sum (zeroed by the host) += the fingerprint of the n_bytes at p, which
// is at least 4-byte aligned (cuMemAlloc's are 256).
extern "C" __global__ void __launch_bounds__(kFingerprintThreads)
    fat_fingerprint(const unsigned char *p, u64 n_bytes, u64 *sum) {
  const unsigned *words = (const unsigned *)p;
  const u64 n_words = n_bytes / 4;
  u64 acc = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n_words;
       i += (u64)gridDim.x * blockDim.x)
    acc += fingerprint_term(i, words[i]);
  if (blockIdx.x == 0 && threadIdx.x == 0)  // the bytes past the last whole word
    for (u64 j = n_words * 4; j < n_bytes; j++) acc += fingerprint_term(n_words + j, p[j] | 0x100u);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0 && acc) atomicAdd(sum, acc);
}
