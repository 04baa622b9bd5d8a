// Utility kernels of the tuning worker (tuner/gpu_run.c), compiled by NVRTC
// for the GPU at hand and never part of a variant:
//   fat_fill_normal   inputs drawn on the GPU: a counter-based hash of
//                     (seed, element index) through Box-Muller gives N(0, 1),
//                     rounded to fp16 or bf16. Each element depends only on
//                     the seed and its index, so any launch shape gives the
//                     same tensor and a test can reproduce it.
//   fat_clock_probe   the SM clock a kernel sees: spins for a fixed time by
//                     %globaltimer (ns) and counts clock64() cycles.
// Self-contained: NVRTC compiles it alone, without the host toolchain.

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

extern "C" __global__ void fat_fill_normal(elem_t *dst, u64 n, int is_bf16, u64 seed) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    u64 bits = mix64(seed + (i + 1) * kGolden);
    // u1 in (0, 1] keeps log() finite; u2 in [0, 1) picks the angle.
    float u1 = ((float)(unsigned int)(bits >> 32) + 1.0f) * kTwoPow32Inv;
    float u2 = (float)(unsigned int)bits * kTwoPow32Inv;
    float x = sqrtf(-2.0f * logf(u1)) * cosf((float)kTwoPi * u2);
    dst[i] = is_bf16 ? to_bf16(x) : to_fp16(x);
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
