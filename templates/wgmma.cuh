// Hopper's warpgroup matrix products (wgmma, sm_90a) as the wgmma templates
// use them (fwd_wgmma90.cu, bwd_wgmma90.cu): swizzled tiles copied in with
// cp.async, shared-memory descriptors, the fence/commit/wait protocol and
// the products themselves. notes/wgmma-forward.md has the layouts and
// encodings, tests/test_gpu_wgmma.c checks them. The including template
// defines kHeadDim, kThreads (the block's threads) and FAT_ELEM ("bf16" or
// "f16") first, and includes fat_device.cuh. generator/expand.lua inlines
// this file into each variant's source.
#pragma once

typedef unsigned long long u64;

// What cp.async wrote is read next by the tensor cores' asynchronous
// proxy: each thread fences its own copies, then the block meets.
__device__ __forceinline__ void tiles_landed() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
}

// Byte offset of chunk c of row r in a tile of kRows rows.
template <int kRows>
__device__ __forceinline__ u32 slab_offset(int r, int c) {
  return (u32)((c / 8) * kRows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16);
}

// Copies kRows rows of one head into a tile; rows at or past valid_rows,
// and columns at or past head_dim, are zero-filled. Thread tid copies
// chunk tid % 8 of every slab in rows tid / 8, + kThreads / 8, ...: a pass
// of the block is a multiple of 8 rows, so the swizzle (row % 8) is the
// same in every pass and the shared-memory offsets are constants past one
// base, and one running pointer walks the rows (mma80's load_tile keeps
// one address live the same way).
template <int kRows>
__device__ __forceinline__ void load_tile(u32 tile, const elem_t *src, long long row_stride,
                                          int valid_rows, int head_dim, int tid) {
  constexpr int kRowsPerPass = kThreads / 8;
  static_assert(kRows % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "whole passes of 8-row groups");
  const int row0 = tid / 8, c = tid % 8;
  const elem_t *g = src + row0 * row_stride + c * 8;
  const u32 dst = tile + row0 * 128 + ((c ^ (row0 % 8)) * 16);
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; i++) {
    const bool row_inside = row0 + i * kRowsPerPass < valid_rows;
#pragma unroll
    for (int slab = 0; slab < kHeadDim / 64; slab++) {
      const bool inside = row_inside && slab * 64 + c * 8 < head_dim;
      cp_async_16(dst + slab * kRows * 128 + i * kRowsPerPass * 128, inside ? g + slab * 64 : src,
                  inside ? 16 : 0);
    }
    g += kRowsPerPass * row_stride;
  }
}

// Shared-memory matrix descriptor: start address, leading and stride byte
// offsets (16-byte units), 128-byte swizzle.
__device__ __forceinline__ u64 descriptor(u32 addr, u32 lbo, u32 sbo) {
  return (u64)((addr & 0x3ffff) >> 4) | (u64)((lbo >> 4) & 0x3fff) << 16 |
         (u64)((sbo >> 4) & 0x3fff) << 32 | 1ull << 62;
}

// The descriptor of a start address BYTES (a compile-time constant) past
// that of d: the start field is the address in 16-byte units, in the low
// bits, and shared memory's addresses (< 2^18) never carry out of it.
__device__ __forceinline__ u64 desc_add(u64 d, u32 bytes) { return d + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Pins registers in program order around the asynchronous products: an
// empty asm that reads and writes them. The fence and wait instructions
// name no registers, so without it the compiler may move an accumulator's
// use above the wait that makes it valid (or an operand's definition past
// the fence), and ptxas then injects waits of its own.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int M, int N>
__device__ __forceinline__ void pin(u32 (&r)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; i++)
#pragma unroll
    for (int j = 0; j < N; j++) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Waits until at most kPending of this warpgroup's committed groups are
// still running (groups finish in the order they were committed).
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The accumulator operands of one product: "{%0, ..., %(n-1)}" in the
// instruction and n read-write float operands.
#define FAT_ACC32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FAT_ACC64 FAT_ACC32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FAT_ACC96 FAT_ACC64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FAT_ACC128 FAT_ACC96 ", " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FAT_D8(i)                                                                               \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define FAT_D32 FAT_D8(0), FAT_D8(8), FAT_D8(16), FAT_D8(24)
#define FAT_D64 FAT_D32, FAT_D8(32), FAT_D8(40), FAT_D8(48), FAT_D8(56)
#define FAT_D96 FAT_D64, FAT_D8(64), FAT_D8(72), FAT_D8(80), FAT_D8(88)
#define FAT_D128 FAT_D96, FAT_D8(96), FAT_D8(104), FAT_D8(112), FAT_D8(120)

// One k-step, both operands in shared memory (descriptors da, db): TRANS
// is A's and B's transpose flag, 0 for K-major, 1 for MN-major (A stored
// [k][m], B [k][n]: 16-bit types only).
#define FAT_WGMMA_SS(N, ACC, TAIL, OPS, TRANS)                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." FAT_ELEM "." FAT_ELEM " {" \
               ACC "}, " TAIL ", p, 1, 1, " TRANS ";\n}\n"                               \
               : OPS : "l"(da), "l"(db))
// One k-step, A from registers (mma.sync's A fragment), B N-major (db).
#define FAT_WGMMA_RS(N, ACC, TAIL, OPS)                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." FAT_ELEM "." FAT_ELEM " {" \
               ACC "}, " TAIL ", p, 1, 1, 1;\n}\n"                                       \
               : OPS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))

// d += A·B for one k-step of m64nNk16, A and B in shared memory: K-major,
// or MN-major where kMNMajorA (A) and kMNMajorB (B, by default as A).
template <int N, bool kMNMajorA = false, bool kMNMajorB = kMNMajorA>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 da, u64 db) {
  static_assert(N == 64 || N == 128, "N: 64 or 128");
  static_assert(kMNMajorB || !kMNMajorA, "A MN-major with B K-major is not used");
  if constexpr (N == 64 && !kMNMajorA && !kMNMajorB) FAT_WGMMA_SS("64", FAT_ACC32, "%32, %33", FAT_D32, "0, 0");
  else if constexpr (N == 128 && !kMNMajorA && !kMNMajorB) FAT_WGMMA_SS("128", FAT_ACC64, "%64, %65", FAT_D64, "0, 0");
  else if constexpr (N == 64 && kMNMajorA) FAT_WGMMA_SS("64", FAT_ACC32, "%32, %33", FAT_D32, "1, 1");
  else if constexpr (N == 128 && kMNMajorA) FAT_WGMMA_SS("128", FAT_ACC64, "%64, %65", FAT_D64, "1, 1");
  else if constexpr (N == 64) FAT_WGMMA_SS("64", FAT_ACC32, "%32, %33", FAT_D32, "0, 1");
  else FAT_WGMMA_SS("128", FAT_ACC64, "%64, %65", FAT_D64, "0, 1");
}

// d += A·B for one k-step of m64nNk16, A from registers, B N-major.
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 db) {
  if constexpr (N == 64) FAT_WGMMA_RS("64", FAT_ACC32, "{%32, %33, %34, %35}, %36", FAT_D32);
  else if constexpr (N == 128) FAT_WGMMA_RS("128", FAT_ACC64, "{%64, %65, %66, %67}, %68", FAT_D64);
  else if constexpr (N == 192) FAT_WGMMA_RS("192", FAT_ACC96, "{%96, %97, %98, %99}, %100", FAT_D96);
  else if constexpr (N == 256)
    FAT_WGMMA_RS("256", FAT_ACC128, "{%128, %129, %130, %131}, %132", FAT_D128);
  else static_assert(N == 64, "O's N: the head dim, 64 to 256");
}
// ---- S = Q·Kᵀ of any tile width (the warp-specialised forward) ------------
// The accumulator operands of products of 8 to 128 registers (m64n16 to
// m64n256) in steps of 8, and their operand lists: read-write (FAT_RWn,
// accumulate) and write-only (FAT_WOn: the first k-step, D = A·B).
#define FAT_ACC8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FAT_ACC16 FAT_ACC8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define FAT_ACC24 FAT_ACC16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define FAT_ACC40 FAT_ACC32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FAT_ACC48 FAT_ACC40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define FAT_ACC56 FAT_ACC48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define FAT_ACC72 FAT_ACC64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define FAT_ACC80 FAT_ACC72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define FAT_ACC88 FAT_ACC80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define FAT_ACC104 FAT_ACC96 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define FAT_ACC112 FAT_ACC104 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define FAT_ACC120 FAT_ACC112 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define FAT_W8(i)                                                                               \
  "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), \
      "=f"(d[i + 6]), "=f"(d[i + 7])
#define FAT_RW8 FAT_D8(0)
#define FAT_RW16 FAT_RW8, FAT_D8(8)
#define FAT_RW24 FAT_RW16, FAT_D8(16)
#define FAT_RW32 FAT_RW24, FAT_D8(24)
#define FAT_RW40 FAT_RW32, FAT_D8(32)
#define FAT_RW48 FAT_RW40, FAT_D8(40)
#define FAT_RW56 FAT_RW48, FAT_D8(48)
#define FAT_RW64 FAT_RW56, FAT_D8(56)
#define FAT_RW72 FAT_RW64, FAT_D8(64)
#define FAT_RW80 FAT_RW72, FAT_D8(72)
#define FAT_RW88 FAT_RW80, FAT_D8(80)
#define FAT_RW96 FAT_RW88, FAT_D8(88)
#define FAT_RW104 FAT_RW96, FAT_D8(96)
#define FAT_RW112 FAT_RW104, FAT_D8(104)
#define FAT_RW120 FAT_RW112, FAT_D8(112)
#define FAT_RW128 FAT_RW120, FAT_D8(120)
#define FAT_WO8 FAT_W8(0)
#define FAT_WO16 FAT_WO8, FAT_W8(8)
#define FAT_WO24 FAT_WO16, FAT_W8(16)
#define FAT_WO32 FAT_WO24, FAT_W8(24)
#define FAT_WO40 FAT_WO32, FAT_W8(32)
#define FAT_WO48 FAT_WO40, FAT_W8(40)
#define FAT_WO56 FAT_WO48, FAT_W8(48)
#define FAT_WO64 FAT_WO56, FAT_W8(56)
#define FAT_WO72 FAT_WO64, FAT_W8(64)
#define FAT_WO80 FAT_WO72, FAT_W8(72)
#define FAT_WO88 FAT_WO80, FAT_W8(80)
#define FAT_WO96 FAT_WO88, FAT_W8(88)
#define FAT_WO104 FAT_WO96, FAT_W8(96)
#define FAT_WO112 FAT_WO104, FAT_W8(104)
#define FAT_WO120 FAT_WO112, FAT_W8(112)
#define FAT_WO128 FAT_WO120, FAT_W8(120)

// One k-step of S, A and B K-major in shared memory: accumulate when SCALE
// is 1, D = A·B when 0.
#define FAT_WGMMA_S(N, ACC, OPS, DA, DB, SCALE)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " #SCALE ", 0;\n"                         \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FAT_ELEM "." FAT_ELEM " {" \
               ACC "}, %" #DA ", %" #DB ", p, 1, 1, 0, 0;\n}\n"                            \
               : OPS : "l"(da), "l"(db))
#define FAT_S_CASE(N, C, C1)                                                     \
  if constexpr (kN == N) {                                                       \
    if constexpr (kAccumulate) FAT_WGMMA_S(N, FAT_ACC##C, FAT_RW##C, C, C1, 1); \
    else FAT_WGMMA_S(N, FAT_ACC##C, FAT_WO##C, C, C1, 0);                       \
  }

// d (+)= A·B for one k-step of m64nNk16, A and B K-major in shared memory,
// N any multiple of 16 up to 256: S = Q·Kᵀ of a kN-key tile.
template <int kN, bool kAccumulate>
__device__ __forceinline__ void wgmma_s(float (&d)[kN / 2], u64 da, u64 db) {
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= 256, "S's N: a multiple of 16 up to 256");
  FAT_S_CASE(16, 8, 9)
  FAT_S_CASE(32, 16, 17)
  FAT_S_CASE(48, 24, 25)
  FAT_S_CASE(64, 32, 33)
  FAT_S_CASE(80, 40, 41)
  FAT_S_CASE(96, 48, 49)
  FAT_S_CASE(112, 56, 57)
  FAT_S_CASE(128, 64, 65)
  FAT_S_CASE(144, 72, 73)
  FAT_S_CASE(160, 80, 81)
  FAT_S_CASE(176, 88, 89)
  FAT_S_CASE(192, 96, 97)
  FAT_S_CASE(208, 104, 105)
  FAT_S_CASE(224, 112, 113)
  FAT_S_CASE(240, 120, 121)
  FAT_S_CASE(256, 128, 129)
}
#undef FAT_S_CASE
