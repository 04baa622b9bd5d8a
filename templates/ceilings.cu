// Microbenchmarks of the GPU's ceilings, measured once per GPU by the tuning
// worker (tuner/gpu_run.c, fat_gpu_measure_ceilings) and stored in the
// database's ceilings table, so that every timing can be read as a fraction
// of what this GPU does at best rather than of a datasheet figure:
//   fat_ceiling_copy      device-memory copy bandwidth: a grid-stride copy of
//                         16-byte vectors between two buffers each several
//                         times the L2, so every byte comes from and goes to
//                         DRAM; the host counts read + write bytes.
//   fat_ceiling_mma_f16   the tensor-core rate of the mma80 family's
//   fat_ceiling_mma_bf16  instruction, mma.sync m16n8k16 with fp32
//                         accumulation: kChains independent accumulators
//                         per warp issued back to back, so the pipe never
//                         waits on a dependency. Each warp adds the FLOPs it
//                         issued to *flops, so the host divides by the count
//                         the kernel itself did, not a constant copied here.
// Self-contained: NVRTC compiles it alone (sm_80 and newer).

typedef unsigned int u32;
typedef unsigned long long u64;

constexpr int kCopyUnroll = 4;   // independent 16-byte loads in flight per thread
constexpr int kChains = 8;       // independent accumulators per warp
constexpr int kWarpSize = 32;
constexpr u64 kMmaFlops = 2ull * 16 * 8 * 16;  // m16n8k16: one multiply-add per (m, n, k)

extern "C" __global__ void fat_ceiling_copy(const uint4 *src, uint4 *dst, u64 n) {
  const u64 stride = (u64)gridDim.x * blockDim.x;
  u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (kCopyUnroll - 1) * stride < n; i += kCopyUnroll * stride) {
    uint4 v[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; u++) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; u++) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

template <bool kBf16>
__device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  if constexpr (kBf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A_BITS and B_BITS (two packed 16-bit values each) come from the host so
// the compiler cannot fold the products; the host picks small values so that
// ITERS accumulations stay finite. Every thread writes its sum to SINK.
template <bool kBf16>
__device__ __forceinline__ void mma_loop(float *sink, u64 *flops, u32 a_bits, u32 b_bits, int iters) {
  const u32 a[4] = {a_bits, a_bits ^ threadIdx.x, a_bits, a_bits};
  const u32 b[2] = {b_bits, b_bits};
  float acc[kChains][4];
#pragma unroll
  for (int c = 0; c < kChains; c++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[c][e] = 0.f;
#pragma unroll 1
  for (int it = 0; it < iters; it++)
#pragma unroll
    for (int c = 0; c < kChains; c++) mma<kBf16>(acc[c], a, b);
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; c++) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  sink[(u64)blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x % kWarpSize == 0) atomicAdd(flops, (u64)iters * kChains * kMmaFlops);
}

extern "C" __global__ void fat_ceiling_mma_f16(float *sink, u64 *flops, u32 a_bits, u32 b_bits,
                                               int iters) {
  mma_loop<false>(sink, flops, a_bits, b_bits, iters);
}

extern "C" __global__ void fat_ceiling_mma_bf16(float *sink, u64 *flops, u32 a_bits, u32 b_bits,
                                                int iters) {
  mma_loop<true>(sink, flops, a_bits, b_bits, iters);
}
