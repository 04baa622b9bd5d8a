// Probes of the two warpgroup matrix products a wgmma forward needs
// (notes/wgmma-forward.md), for tests/test_gpu_wgmma.c: each loads its
// operands into shared memory in the 128-byte-swizzled slab layout of that
// note, runs one product on one warpgroup (128 threads) and writes the fp32
// accumulators out by the documented fragment map, so that the host can
// compare them with its own product. sm_90a only.
//
//   probe_ss: S[64][64] = Q[64][128] · K[64][128]ᵀ, both operands K-major
//             from shared memory (8 k-steps over two 64-column slabs).
//   probe_rs: O[64][128] = P[64][64] · V[64][128], P from registers (the
//             accumulator-shaped fragment), V N-major from shared memory
//             (4 k-steps of 16 keys).
// The descriptors' stride fields are arguments, in bytes, so that a failing
// probe can be run again with other encodings.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

#define ROWS 64          // rows of every tile here: one warpgroup's M
#define SLAB_BYTES (ROWS * 128)

__device__ __forceinline__ u32 smem_u32(const void *p) {
  return (u32)__cvta_generic_to_shared(p);
}

// Byte offset of 16-byte chunk c of row r: 64-column slabs of 128-byte rows,
// chunk xor row % 8 (the 128-byte swizzle atom of 8 rows, 1024 bytes).
__device__ __forceinline__ u32 slab_offset(int r, int c) {
  return (u32)((c / 8) * SLAB_BYTES + r * 128 + ((c % 8) ^ (r % 8)) * 16);
}

// A ROWS x cols tile of 16-bit elements from global (row-major) into shared
// memory at BASE in slab_offset's layout.
__device__ __forceinline__ void load_slabs(unsigned char *base, const u16 *src, int cols) {
  const int chunks = ROWS * cols / 8;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    const int r = i / (cols / 8), c = i % (cols / 8);
    *reinterpret_cast<uint4 *>(base + slab_offset(r, c)) =
        *reinterpret_cast<const uint4 *>(src + r * cols + c * 8);
  }
}

// Matrix descriptor: start address, leading and stride byte offsets (all
// in 16-byte units), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ u64 descriptor(u32 addr, u32 lbo, u32 sbo) {
  return (u64)((addr & 0x3ffff) >> 4) | (u64)((lbo >> 4) & 0x3fff) << 16 |
         (u64)((sbo >> 4) & 0x3fff) << 32 | 1ull << 62;
}

// Ordinary stores wrote the tiles; the tensor cores read them through the
// async proxy: fence, then the barrier.
__device__ __forceinline__ void tiles_ready() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
}

// Accumulator fragment of m64nN (N/2 floats a thread) to a row-major
// [64][n] array: d[4j + e] is row 16·warp + lane/4 (+8 for e >= 2),
// column 8j + 2·(lane % 4) + e % 2.
__device__ __forceinline__ void store_accumulators(const float *d, int n, float *out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = 16 * warp + lane / 4, col = 2 * (lane % 4);
  for (int j = 0; j < n / 8; j++)
    for (int e = 0; e < 4; e++)
      out[(row + (e / 2) * 8) * n + 8 * j + col + e % 2] = d[4 * j + e];
}

// Eight accumulators of D as read-write asm operands.
#define ACC8(i)                                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

extern "C" __global__ void __launch_bounds__(128)
probe_ss(const u16 *q, const u16 *k, float *s, u32 lbo, u32 sbo, int *misaligned) {
  __shared__ __align__(1024) unsigned char q_tile[2 * SLAB_BYTES];
  __shared__ __align__(1024) unsigned char k_tile[2 * SLAB_BYTES];
  if (threadIdx.x == 0) *misaligned = (smem_u32(q_tile) | smem_u32(k_tile)) & 1023;
  load_slabs(q_tile, q, 128);
  load_slabs(k_tile, k, 128);
  tiles_ready();
  float d[32];
  for (int i = 0; i < 32; i++) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int ks = 0; ks < 8; ks++) {
    // k-step ks: slab ks / 4, 32 bytes (16 columns) further per step inside it.
    const u32 step = (ks / 4) * SLAB_BYTES + (ks % 4) * 32;
    const u64 da = descriptor(smem_u32(q_tile) + step, lbo, sbo);
    const u64 db = descriptor(smem_u32(k_tile) + step, lbo, sbo);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : ACC8(0), ACC8(8), ACC8(16), ACC8(24)
        : "l"(da), "l"(db));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  store_accumulators(d, 64, s);
}

extern "C" __global__ void __launch_bounds__(128)
probe_rs(const u16 *p, const u16 *v, float *o, u32 lbo, u32 sbo, int *misaligned) {
  __shared__ __align__(1024) unsigned char v_tile[2 * SLAB_BYTES];
  if (threadIdx.x == 0) *misaligned = smem_u32(v_tile) & 1023;
  load_slabs(v_tile, v, 128);
  tiles_ready();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = 16 * warp + lane / 4, col = 2 * (lane % 4);
  // P's k-step kk as the A fragment: rows row and row + 8, keys 16kk + col
  // and 16kk + 8 + col (two 16-bit elements a register, the lower first).
  auto pair = [&](int r, int c) { return *reinterpret_cast<const u32 *>(p + r * 64 + c); };
  // All of A before the fence: the products read their registers
  // asynchronously, so none may be written between the fence and the wait.
  u32 a[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    a[kk][0] = pair(row, 16 * kk + col);
    a[kk][1] = pair(row + 8, 16 * kk + col);
    a[kk][2] = pair(row, 16 * kk + 8 + col);
    a[kk][3] = pair(row + 8, 16 * kk + 8 + col);
  }
  float d[64];
  for (int i = 0; i < 64; i++) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    // 16 keys = two 8-row groups: 2048 bytes a k-step.
    const u64 db = descriptor(smem_u32(v_tile) + kk * 2048, lbo, sbo);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
        : "r"(a[kk][0]), "r"(a[kk][1]), "r"(a[kk][2]), "r"(a[kk][3]), "l"(db));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  store_accumulators(d, 128, o);
}
