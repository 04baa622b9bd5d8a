// The tensor-core rate of Hopper's warpgroup product, the instruction the
// wgmma90 and ws90 families issue, measured once per sm_90a GPU by the
// tuning worker (tuner/measure/ceilings.c) beside the copy bandwidth and
// mma.sync rate of ceilings.cu, and stored as the wgmma peaks of the
// database's ceilings table:
//   fat_ceiling_wgmma_ss  wgmma.mma_async m64n256k16, fp32 accumulation,
//                         both operands K-major from shared memory in the
//                         128-byte swizzle: the forward's S = Q·Kᵀ at its
//                         widest key tile (wgmma_s, as fwd_ws90.cu issues it)
//   fat_ceiling_wgmma_rs  the same product with A from registers and B
//                         N-major from shared memory: O += P·V (wgmma_rs)
// Each warpgroup issues kStepsPerGroup products into its one accumulator
// set, commits them as a group and waits only until kGroupsInFlight - 1
// groups are still running, so the tensor cores always have the next group
// queued. Products into the same accumulators follow one another in the
// tensor pipe without a wgmma.fence: nothing else touches the registers
// until the last wait. The operands are pseudo-random small values (a
// datasheet figure is for toggling bits too; zeros would draw less power
// and hold a higher clock than attention's data does). Each warpgroup adds
// the FLOPs it issued to *flops, so the host divides by the count the
// kernel itself did.
//
// wgmma's products name the element type in their text (FAT_ELEM), so this
// file is one cubin per dtype: tuner/measure/device.c compiles it for
// sm_90a only, with FAT_CEILING_BF16 defined first (1: bf16, 0: fp16), and
// inlines its includes as the generator does (generator/expand.lua).
#ifndef FAT_CEILING_BF16
#error "FAT_CEILING_BF16 (1: bf16, 0: fp16) is defined by tuner/measure/device.c"
#endif
constexpr bool kIsBf16 = FAT_CEILING_BF16;
#if FAT_CEILING_BF16
#define FAT_ELEM "bf16"
#else
#define FAT_ELEM "f16"
#endif

constexpr int kWarpgroups = 2;      // a block's issuing warpgroups: FlashAttention-3's two consumers
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kHeadDim = 64;        // the reduction of one group: one 64-column slab (4 k-steps)
constexpr int kN = 256;             // wgmma's widest N: the fewest instructions per FLOP
constexpr int kM = 64;              // one warpgroup's rows
constexpr int kK = 16;              // one product's reduction
constexpr int kAccRegs = kN / 2;    // fp32 accumulators a thread
constexpr int kStepsPerGroup = kHeadDim / kK;
constexpr int kGroupsInFlight = 2;  // committed groups a warpgroup keeps queued
constexpr unsigned kSlabRowBytes = 128;                    // one row of a 64-column slab
constexpr unsigned kStepBytes = kK * 2;                    // one k-step's columns in a K-major row
constexpr unsigned kSwizzleAtomBytes = 8 * kSlabRowBytes;  // 8 rows: the stride of the 128-byte swizzle
constexpr unsigned kATileBytes = kM * kSlabRowBytes;       // A: 64 rows x 64 columns, K-major
constexpr unsigned kBTileBytes = kN * kSlabRowBytes;       // B: 256 rows x 64 columns, K-major (SS),
                                                           // or 64 rows x 4 slabs, N-major (RS)
constexpr unsigned kBSlabBytes = kHeadDim * kSlabRowBytes; // one N-major slab of B (RS): 64 k-rows
typedef unsigned long long u64;
constexpr u64 kProductFlops = 2ull * kM * kN * kK;         // one multiply-add per (m, n, k)
// Random operands near 2^-6 (sign and mantissa random): 16-term products
// of about 2^-12 summed over every k-step stay far inside fp32's range.
constexpr unsigned kF16Exponent = 15 - 6;    // fp16's bias is 15
constexpr unsigned kBf16Exponent = 127 - 6;  // bf16's is 127

#include "fat_device.cuh"
#include "wgmma.cuh"

static_assert(kThreads % 128 == 0 && kWarpgroups >= 1, "whole warpgroups");
static_assert(kGroupsInFlight >= 1 && kGroupsInFlight <= 8, "wgmma_wait's count");
static_assert(kWarpgroups * kATileBytes + kBTileBytes <= 48 * 1024, "static shared memory");

// A 16-bit operand near 2^-6 from the bits of a hash of INDEX and SEED.
__device__ __forceinline__ u32 random_elem(u32 index, u32 seed) {
  u32 h = (index ^ seed) * 0x9e3779b1u;
  h ^= h >> 15;
  h *= 0x85ebca77u;
  h ^= h >> 13;
  const u32 sign = (h >> 31) << 15;
  if constexpr (kIsBf16) return sign | kBf16Exponent << 7 | (h & 0x7fu);
  else return sign | kF16Exponent << 10 | (h & 0x3ffu);
}

// BYTES of random operands into a tile, then made visible to the tensor
// cores: the layout is whatever the descriptors read, the values are noise.
__device__ __forceinline__ void fill(unsigned char *tile, unsigned bytes, u32 seed) {
  for (unsigned i = threadIdx.x; i < bytes / 4; i += kThreads)
    reinterpret_cast<u32 *>(tile)[i] = random_elem(2 * i, seed) | random_elem(2 * i + 1, seed) << 16;
}

// kGroupsInFlight groups of kStepsPerGroup products, ITERS times: A and B
// from shared memory (SS) or A from the registers of A_FRAG (RS).
template <bool kRS>
__device__ __forceinline__ void issue_loop(float (&acc)[kAccRegs], u64 da, u64 db,
                                           const u32 (&a_frag)[4], int iters) {
#pragma unroll 1
  for (int it = 0; it < iters; it++) {
    // Every group behind a fence, as CUTLASS's main loops issue theirs: the
    // accumulators cross the loop's back edge, and without it ptxas injects
    // one of its own (info C7519) rather than trust them.
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kStepsPerGroup; ks++) {
      if constexpr (kRS)
        wgmma_rs<kN>(acc, a_frag, desc_add(db, ks * kK * kSlabRowBytes));  // 16 k-rows a step
      else
        wgmma_s<kN, true>(acc, desc_add(da, ks * kStepBytes), desc_add(db, ks * kStepBytes));
    }
    wgmma_commit();
    wgmma_wait<kGroupsInFlight - 1>();
  }
  wgmma_wait<0>();
  pin(acc);
}

template <bool kRS>
__device__ __forceinline__ void wgmma_rate(float *sink, u64 *flops, u32 seed, int iters) {
  __shared__ __align__(1024) unsigned char a_tiles[kWarpgroups][kATileBytes];  // SS only
  __shared__ __align__(1024) unsigned char b_tile[kBTileBytes];
  const int wg = threadIdx.x / 128;
  if constexpr (!kRS) fill(&a_tiles[0][0], sizeof a_tiles, seed);
  fill(b_tile, kBTileBytes, ~seed);
  tiles_landed();
  u32 a_frag[4];
#pragma unroll
  for (int r = 0; r < 4; r++)
    a_frag[r] = random_elem(8 * threadIdx.x + 2 * r, seed) | random_elem(8 * threadIdx.x + 2 * r + 1, seed) << 16;
  float acc[kAccRegs];
#pragma unroll
  for (int i = 0; i < kAccRegs; i++) acc[i] = 0.f;
  // SS: K-major tiles (leading offset unused in the swizzle, stride one
  // swizzle atom); RS: B's 64-column slabs one kBSlabBytes apart.
  const u64 da = descriptor(smem_u32(a_tiles[wg]), 16, kSwizzleAtomBytes);
  const u64 db = kRS ? descriptor(smem_u32(b_tile), kBSlabBytes, kSwizzleAtomBytes)
                     : descriptor(smem_u32(b_tile), 16, kSwizzleAtomBytes);
  issue_loop<kRS>(acc, da, db, a_frag, iters);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kAccRegs; i++) sum += acc[i];
  sink[(u64)blockIdx.x * kThreads + threadIdx.x] = sum;
  if (threadIdx.x % 128 == 0) atomicAdd(flops, (u64)iters * kStepsPerGroup * kProductFlops);
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
fat_ceiling_wgmma_ss(float *sink, u64 *flops, u32 seed, int iters) {
  wgmma_rate<false>(sink, flops, seed, iters);
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
fat_ceiling_wgmma_rs(float *sink, u64 *flops, u32 seed, int iters) {
  wgmma_rate<true>(sink, flops, seed, iters);
}
