// FlashAttention forward on Hopper, warp-specialised (sm_90a): one producer
// warp streams Q, K and V into shared memory with the tensor copy engine
// (TMA), consumer warpgroups of 64 query rows each compute on Hopper's
// warpgroup products (wgmma). FlashAttention-3's structure; the layouts and
// the online softmax are fwd_wgmma90.cu's (notes/wgmma-forward.md).
//
// Roles (kConsumers + 1 warpgroups of 128 threads):
//   producer   warpgroup 0 gives its registers up (setmaxnreg) and one of
//              its threads issues every copy: Q once, then K and V tile by
//              tile through rings of kStages buffers, each buffer with a
//              full barrier (the copy engine counts its bytes in) and an
//              empty one (each consumer warp arrives once it has read it).
//   consumers  warpgroups 1 .. kConsumers take the registers and own rows
//              64·(w - 1) .. of the block's queries.
// Key tiles run from the last to the first: those a mask cuts (the key
// sequence's end, the causal diagonal, a window's right edge) come first,
// then the unmasked ones in a loop free of mask code, then those a window's
// left edge cuts. Key tiles no row of the block sees are never loaded.
//
// One consumer's schedule, tile j (S(j) = Q·K(j)ᵀ, P(j) its softmax):
//   region 0      issue S(0); wait for it; softmax(0) → P(0)
//   region j      issue S(j) and O += P(j - 1)·V(j - 1), both from shared
//                 memory but P from registers;
//                 OVERLAP 1: wait for S(j) only, softmax(j) while the
//                 tensor cores still run P·V, then wait for P·V -- in the
//                 source: ptxas hoists that wait above the softmax (the
//                 SASS has both WARPGROUP.DEPBARs before the first
//                 MUFU.EX2), so the softmax runs after P·V all the same;
//                 OVERLAP 2: the same, the wait held behind the softmax in
//                 the machine code too (hold_wait_behind, below);
//                 OVERLAP 0: wait for both, then softmax(j);
//                 then rescale O and round P(j) into registers
//   region n      issue O += P(n - 1)·V(n - 1); wait for it
// PINGPONG 1: the consumers take turns to issue their regions (named
// barriers, a token passed from warpgroup to warpgroup), so one's softmax
// runs while the others' products keep the tensor cores busy.
//
// PERSISTENT 1: one block an SM loops over query blocks; the producer
// loads the next block's Q (once every consumer is past its last S: the
// q_empty barrier) and K while the consumers finish this one.
// PERSISTENT 2 (masked blocks, whose work differs): the same, but a block
// takes its next query block from a counter in device memory (the
// workspace, zeroed before the launch: tuner/fwd_launch.c) rather than
// every gridDim.x-th, so an SM that drew short blocks draws more. The
// producer draws and hands the index to the consumers beside Q.
//
// Masks compare absolute positions, bottom-right aligned; a row that sees no
// key gets O = 0 and lse = -inf. O goes straight from the accumulators to
// device memory, so nothing but Q holds the Q tile. Tiles are slabs of
// SLAB columns: 64 (128-byte rows in wgmma's 128-byte swizzle, the copy
// engine's CU_TENSOR_MAP_SWIZZLE_128B), or 32 (64-byte rows, the 64-byte
// swizzle), which lets d96 run on a template of its own width rather than
// on d128's with a quarter of every product on zero columns.
//
// e4m3 (IS_FP8 1: fp8 inputs, O in bf16; templates/fat_abi_fp8.h): S =
// Q·Kᵀ's k-steps take 32 one-byte columns, a slab 128 of them (or 64:
// d64, d192), and the descale factors of Q and K join the softmax's scale.
// P leaves the softmax FlashAttention-3's way, 2^8 times too large (the
// exponent's offset kMaxOffset: P in (0, 256], where e4m3 keeps 3 bits to
// its smallest values), rounded to e4m3, and the same 2^8 in the row sums
// cancels it. wgmma reads fp8 operands K-major only, so P·V needs V with
// its keys contiguous: the producer's copy engine stages V as it is, and
// the producer warpgroup's other three warps write each staged tile
// transposed into a ring of its own (transpose_v, below), which the
// consumers read as they read V in 16 bits. P comes from the consumers'
// registers in the layout S left it: a thread holds keys 2t, 2t + 1,
// 8 + 2t, 9 + 2t of every 16 of its rows, where wgmma's fp8 A fragment
// wants k-indices 4t .. 4t + 3, so the transposed V stores key 2t at
// k-index 4t (and so on: below, at kVtSlabBytes) -- the product sums over the keys
// whatever their order, and no register moves between threads.
// Parameters in double braces are substituted by generator/expand.lua; they
// change speed, never results.
#include "fat_abi.h"
#include "fat_abi_fp8.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};      // query rows per block: 64 per consumer warpgroup
constexpr int kBlockN = {{BLOCK_N}};      // keys per K/V tile
constexpr int kStages = {{STAGES}};       // K and V buffers of each ring
// Columns of a swizzled slab: 64 (128-byte rows) or 32 (64). Enumerators,
// here and below: NVRTC writes every namespace-scope constexpr variable into
// the cubin, and the 64-column variants' cubins stay as they were.
enum : int { kSlabCols = {{SLAB}} };
constexpr bool kOverlap = {{OVERLAP}} != 0;  // the schedule, above
constexpr bool kPingpong = {{PINGPONG}};  // consumers take turns to issue
constexpr bool kPersistent = {{PERSISTENT}} != 0;  // one block an SM, looping over query blocks
// ... drawn from a counter. An enumerator: NVRTC writes every namespace-scope
// constexpr variable into the cubin, and the others' cubins stay as they were.
enum : bool { kDynamic = {{PERSISTENT}} == 2 };
// OVERLAP 2: P·V's wait held behind the softmax in the machine code (an
// enumerator for the same reason).
enum : bool { kHoldWait = {{OVERLAP}} == 2 };
constexpr bool kIsBf16 = {{IS_BF16}};  // O's type (e4m3 inputs: bf16)
constexpr bool kIsCausal = {{IS_CAUSAL}};
constexpr bool kIsLocal = {{IS_LOCAL}};
// e4m3 inputs, and their elements' bytes (enumerators, as above).
enum : bool { kIsFp8 = {{IS_FP8}} != 0 };
enum : int { kElemBytes = kIsFp8 ? 1 : 2 };
#if {{IS_FP8}}
#define FAT_ELEM "e4m3"
#elif {{IS_BF16}}
#define FAT_ELEM "bf16"
#else
#define FAT_ELEM "f16"
#endif

#include "fwd_common.cuh"

constexpr int kConsumers = kBlockM / 64;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kConsumerThreads = 128 * kConsumers;
constexpr int kKSteps = kHeadDim * kElemBytes / 32;  // k-steps of S = Q·Kᵀ (32 bytes each)
constexpr int kPSteps = kBlockN * kElemBytes / 32;   // k-steps of O += P·V
constexpr int kSRegs = kBlockN / 2;     // S accumulators a thread
constexpr int kORegs = kHeadDim / 2;    // O accumulators a thread
constexpr int kChunks = kHeadDim * kElemBytes / 16;  // 16-byte chunks of a row
enum : int {
  kRowBytes = kSlabCols * kElemBytes,  // a row of a slab: 128 or 64 bytes
  kGroupBytes = 8 * kRowBytes,  // 8 rows: one swizzle pattern, the descriptors' SBO
  kSlabSteps = kRowBytes / 32,  // k-steps of S in one slab
};
constexpr unsigned kQBytes = kBlockM * kHeadDim * kElemBytes;
constexpr unsigned kKVBytes = kBlockN * kHeadDim * kElemBytes;
// Registers a thread once the warpgroups have traded (the block's, one
// block an SM): the producer keeps what one issuing thread needs,
// FlashAttention-3's figures. One consumer needs no trade.
constexpr int kProducerRegs = kIsFp8 ? 40 : kConsumers == 2 ? 24 : 32;
constexpr int kConsumerRegs = kIsFp8 ? (kConsumers == 2 ? 232 : 152) : kConsumers == 2 ? 240 : 160;
// Named barriers (0 is __syncthreads): the pingpong token of consumer w is
// kTurnBarrier + w; kZeroBarrier meets all consumers.
enum { kTurnBarrier = 1, kZeroBarrier = 4 };

static_assert(kConsumers >= 1 && kConsumers <= 3, "one to three consumer warpgroups");
static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "S's N and P·V's k-steps: multiples of 16");
static_assert(kRowBytes == 128 || kRowBytes == 64, "slabs of 128- or 64-byte rows");
static_assert(kHeadDim % kSlabCols == 0 && kHeadDim <= 256, "whole slabs; wgmma's N <= 256");
static_assert(!kIsFp8 || kBlockN % 32 == 0, "e4m3: whole 32-key k-steps of P·V");
static_assert(kStages >= 2, "a ring of at least two buffers");
static_assert(!kPingpong || kConsumers >= 2, "the pingpong needs two consumers");
// setmaxnreg.inc takes only what the block's own .dec gave back: asked for
// more than the block was launched with (kThreads x 65,536 / kThreads
// rounded down to 8), it waits for ever (the backward hung so:
// notes/kernel-log.md ws6). An expression, not a constexpr variable, which
// NVRTC would put into every cubin.
static_assert(kConsumers == 1 ||
                  kProducerRegs + kConsumers * kConsumerRegs <= (kConsumers + 1) * ((65536 / kThreads) / 8 * 8),
              "the traded registers are the block's own");
static_assert(!(kIsCausal && kIsLocal), "causal is the local window (-1, 0), generated apart");
static_assert({{PERSISTENT}} >= 0 && {{PERSISTENT}} <= 2, "PERSISTENT: 0, 1 or 2");
static_assert({{OVERLAP}} >= 0 && {{OVERLAP}} <= 2, "OVERLAP: 0, 1 or 2");

#include "wgmma.cuh"
#include "tma.cuh"

// The slab layout's three facts, for 64-column slabs those of wgmma.cuh:
// a tile's descriptor (LBO, and SBO = one 8-row group; the swizzle), the
// byte offset of chunk c of row r of a kRows-row tile, and one k-step of
// O += P·V (wgmma's N = kHeadDim: 96 has no case in wgmma.cuh).
__device__ __forceinline__ u64 slab_descriptor(u32 addr, u32 lbo) {
  if constexpr (kRowBytes == 128) return descriptor(addr, lbo, kGroupBytes);
  else return (u64)((addr & 0x3ffff) >> 4) | (u64)((lbo >> 4) & 0x3fff) << 16 |
              (u64)((kGroupBytes >> 4) & 0x3fff) << 32 | 2ull << 62;  // 2: the 64-byte swizzle
}
template <int kRows>
__device__ __forceinline__ u32 tile_offset(int r, int c) {
  if constexpr (kRowBytes == 128) return slab_offset<kRows>(r, c);
  else return (u32)((c / 4) * kRows * kRowBytes + r * kRowBytes + ((c % 4) ^ ((r / 2) % 4)) * 16);
}
template <int kN>
__device__ __forceinline__ void pv_step(float (&d)[kN / 2], const u32 (&a)[4], u64 db) {
  if constexpr (kN == 96)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32." FAT_ELEM "." FAT_ELEM " {" FAT_ACC48
                 "}, {%48, %49, %50, %51}, %52, p, 1, 1, 1;\n}\n"
                 : FAT_RW48
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
  else wgmma_rs<kN>(d, a, db);
}

// ---- e4m3 ------------------------------------------------------------------
// One k-step of S in e4m3 (32 one-byte columns), A and B K-major in shared
// memory, D = A·B (SCALE 0) or accumulating; wgmma's fp8 forms take no
// transpose flags. The tile widths of the family's fp8 list.
#define FAT_WGMMA_S8(N, ACC, OPS, DA, DB, SCALE)                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " #SCALE ", 0;\n"                      \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" ACC "}, %" #DA \
               ", %" #DB ", p, 1, 1;\n}\n"                                                \
               : OPS : "l"(da), "l"(db))
#define FAT_S8_CASE(N, C, C1)                                                     \
  if constexpr (kN == N) {                                                        \
    if constexpr (kAccumulate) FAT_WGMMA_S8(N, FAT_ACC##C, FAT_RW##C, C, C1, 1); \
    else FAT_WGMMA_S8(N, FAT_ACC##C, FAT_WO##C, C, C1, 0);                       \
  }
template <int kN, bool kAccumulate>
__device__ __forceinline__ void wgmma_s8(float (&d)[kN / 2], u64 da, u64 db) {
  static_assert(kN == 96 || kN == 128 || kN == 160 || kN == 192 || kN == 224, "e4m3 key tiles");
  FAT_S8_CASE(96, 48, 49)
  FAT_S8_CASE(128, 64, 65)
  FAT_S8_CASE(160, 80, 81)
  FAT_S8_CASE(192, 96, 97)
  FAT_S8_CASE(224, 112, 113)
}
#undef FAT_S8_CASE
// One k-step of O += P·V in e4m3: P's 32 keys from registers (four bytes a
// register), V transposed (K-major) in shared memory; N the head dim.
#define FAT_WGMMA_RS8(N, ACC, TAIL, OPS)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n" N "k32.f32.e4m3.e4m3 {" ACC "}, " TAIL \
               ", p, 1, 1;\n}\n"                                                          \
               : OPS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
template <int kN>
__device__ __forceinline__ void pv_step8(float (&d)[kN / 2], const u32 (&a)[4], u64 db) {
  if constexpr (kN == 64) FAT_WGMMA_RS8("64", FAT_ACC32, "{%32, %33, %34, %35}, %36", FAT_D32);
  else if constexpr (kN == 128) FAT_WGMMA_RS8("128", FAT_ACC64, "{%64, %65, %66, %67}, %68", FAT_D64);
  else if constexpr (kN == 192) FAT_WGMMA_RS8("192", FAT_ACC96, "{%96, %97, %98, %99}, %100", FAT_D96);
  else if constexpr (kN == 256) FAT_WGMMA_RS8("256", FAT_ACC128, "{%128, %129, %130, %131}, %132", FAT_D128);
  else static_assert(kN == 64, "e4m3 O's N: 64, 128, 192 or 256");
}

// V transposed: a slab a k-step of P·V (32 keys), kHeadDim rows (one a
// column of the head) of 32 bytes in wgmma's 32-byte swizzle: byte k of
// row r of slab g is at g · kVtSlabBytes + 32 r + 16 ((k / 16) ^ (r / 4 %
// 2)) + k % 16, and holds the key the A fragment of P puts at k-index k
// (round_p): k-index 16q + 4t + e holds key 16q + 2t + e % 2 + 8 (e / 2).
enum : int {
  kMaxOffset = 8,  // P = 2^(s - max + 8): (0, 256]
  kVtSlabBytes = kHeadDim * 32,
  kTransposers = 96,  // the producer warpgroup's warps 1 .. 3
};
// The descriptor of slab G: K-major, SBO one 8-row group (256 bytes), the
// 32-byte swizzle (3); LBO unused (one k-step spans the swizzle).
__device__ __forceinline__ u64 vt_descriptor(u32 tile, int g) {
  const u32 addr = tile + (u32)(g * kVtSlabBytes);
  return (u64)((addr & 0x3ffff) >> 4) | (u64)1 << 16 | (u64)(256 >> 4) << 32 | 3ull << 62;
}
// Byte I of an e4m3 x4 word from four fp32 values, I = 0 lowest (the A
// fragment's lowest k-index); round to nearest, saturating at +-448.
__device__ __forceinline__ u32 pack4_e4m3(float x0, float x1, float x2, float x3) {
  u32 r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r) : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}
// One staged V tile (kBlockN keys of kHeadDim bytes, the copy engine's
// swizzled slabs at STAGED) written transposed at VT by the 96 threads of
// warps 1 .. 3 of the producer warpgroup (TID 0 .. 95); keys at or past
// VALID are read from ZERO, 16 zero bytes (past a packed or cache-limited
// sequence's end the copy engine loads other rows, which may hold NaN: P is
// 0 there, but 0 · NaN is not).
// A warp moves 32 keys (slab g) by 16 columns (d0 .. d0 + 15) a step, in
// FlashAttention-3's way: ldmatrix .trans reads the 32 x 16 bytes as four 8
// x 8 blocks of 16-bit pairs, keys 8i .. 8i + 7 in block i (lane 8i + j
// names key 8i + j's row), and leaves lane t, of every block, keys 2(t % 4)
// and + 1 at columns 2(t / 4) and + 1; two byte permutes of blocks 0 and 1
// give the words of k-indices 4(t % 4) .. + 3 (keys 2t, 2t + 1, 8 + 2t, 9 +
// 2t: the layout's order) of columns 2(t / 4) and + 1, blocks 2 and 3 those
// of k-indices 16 + 4(t % 4); stmatrix writes the four words as rows d0 +
// 2c (+ 1) of the slab, lane 8i + j naming row d0 + 2j + i % 2, half i / 2.
// A step is one ldmatrix, four PRMT and one stmatrix. The warps take the
// 16-column chunks in turn and each walks the tile's slabs at one chunk:
// its addresses then step by constants (32 keys of the copy's tile, one
// slab of the transposed one) -- every slab's within the unrolled loop --
// and the step is those six instructions (a loop of address arithmetic
// ran ~29 a step: 18 % of the kernel's instructions at d128). A tile that
// holds fewer than kBlockN keys of its sequence (VALID: the last of a
// packed or cache-limited one) takes the same steps with each lane's key
// checked.
__device__ __forceinline__ void transpose_v(u32 staged, u32 vt, int valid, u32 zero, unsigned tid) {
  constexpr unsigned kSlabs = kBlockN / 32, kChunks16 = kHeadDim / 16;
  const unsigned lane = tid % 32, i = lane / 8, j = lane % 8;
  const unsigned half = i / 2, odd = i % 2;
  // this lane's key row of slab 0 (8i + j) and transposed row (2j + odd) of chunk 0
  const unsigned key = 8 * i + j, row = 2 * j + odd;
  // (row / 4) % 2 of rows 16 chunk + row: the same for every chunk
  const u32 to_lane = vt + row * 32 + ((half ^ ((row / 4) % 2)) * 16);
#pragma unroll 1
  for (unsigned chunk = tid / 32; chunk < kChunks16; chunk += kTransposers / 32) {
    // tile_offset's: chunk of row key of the copy's swizzled slabs (key % 8
    // and (key / 2) % 4 are the same in every slab: 32 keys apart)
    const unsigned swizzled = kRowBytes == 128 ? (chunk % 8) ^ (key % 8) : (chunk % 4) ^ ((key / 2) % 4);
    const u32 from = staged + (chunk / (kRowBytes / 16)) * kBlockN * kRowBytes + key * kRowBytes + swizzled * 16;
    const u32 to = to_lane + chunk * 16 * 32;
    const bool whole = valid >= kBlockN;
#pragma unroll
    for (unsigned g = 0; g < kSlabs; g++) {
      u32 r[4];
      ldmatrix_x4_trans(r, whole || (int)(32 * g + key) < valid ? from + g * 32 * kRowBytes : zero);
      const u32 w0 = __byte_perm(r[0], r[1], 0x6420), w1 = __byte_perm(r[0], r[1], 0x7531);
      const u32 w2 = __byte_perm(r[2], r[3], 0x6420), w3 = __byte_perm(r[2], r[3], 0x7531);
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(to + g * kVtSlabBytes),
                   "r"(w0), "r"(w1), "r"(w2), "r"(w3)
                   : "memory");
    }
  }
}

// Keeps the arithmetic that produced X ahead of the next wgmma wait in the
// machine code. ptxas moves a WARPGROUP.DEPBAR up to the first point its
// own operands allow, and the softmax has no dependence on it: left alone,
// OVERLAP's wait for P·V lands right after S's and every MUFU.EX2 of the
// softmax follows it. A shared-memory store is not moved across the wait,
// and this one needs X -- the row sums, the softmax's last results -- for
// its predicate; it never executes (a sum of exponentials is not negative,
// and NaN compares false), so it orders and writes nothing. ADDR: any
// shared address of the block.
__device__ __forceinline__ void hold_wait_behind(float x, u32 addr) {
  asm volatile("{\n.reg .pred p;\nsetp.lt.f32 p, %1, 0f00000000;\n@p st.shared.f32 [%0], %1;\n}\n" ::"r"(addr), "f"(x)
               : "memory");
}

// The work of one query block, which producer and consumers derive alike
// from its index: blocks are numbered with the query block fastest (the
// launch order of a grid (m_blocks, heads, batch): the blocks running at
// once share their head's K and V in L2), causal ones longest first.
struct Block {
  int m_block, head, batch, head_k;
  int seqlen_q, seqlen_k;     // the sequence's
  int m0;                     // its first query row; m0 >= seqlen_q: no rows (a short sequence)
  int tile_end, n_tiles;      // key tiles tile_end - n_tiles .. tile_end - 1, the last first
  int unmasked_hi, unmasked_lo;  // in that order, j < unmasked_hi and j >= unmasked_lo need masks
  __device__ int tile_n0(int j) const { return (tile_end - 1 - j) * kBlockN; }
};

__device__ __forceinline__ Block block_of(const fat_fwd_params &p, int index, int m_blocks) {
  Block b;
  const int bh = index / m_blocks, m_index = index - bh * m_blocks;
  b.m_block = kIsCausal ? m_blocks - 1 - m_index : m_index;
  b.head = bh % p.heads;
  b.batch = bh / p.heads;
  b.head_k = b.head / (p.heads / p.heads_k);
  const Sequence seq = sequence_of(p, b.batch);
  b.seqlen_q = seq.seqlen_q;
  b.seqlen_k = seq.seqlen_k;
  b.m0 = b.m_block * kBlockM;
  const int last_pos = min(b.m0 + kBlockM, b.seqlen_q) - 1, first_pos = b.m0;
  const int diag = b.seqlen_k - b.seqlen_q;  // bottom-right alignment
  // The keys some row of the block sees, and those every row sees without
  // a mask: keys below no_mask_end are visible to the first row on the
  // right, keys from no_mask_begin to the last row on the left.
  int n_begin = 0, n_end = b.seqlen_k, no_mask_end = b.seqlen_k, no_mask_begin = 0;
  if (kIsCausal) {
    n_end = min(n_end, last_pos + diag + 1);
    no_mask_end = min(no_mask_end, first_pos + diag + 1);
  }
  if (kIsLocal && p.window_right >= 0) {
    n_end = min(n_end, last_pos + diag + p.window_right + 1);
    no_mask_end = min(no_mask_end, first_pos + diag + p.window_right + 1);
  }
  if (kIsLocal && p.window_left >= 0) {
    n_begin = max(0, first_pos + diag - p.window_left);
    no_mask_begin = last_pos + diag - p.window_left;
  }
  const int tile_begin = n_begin / kBlockN;
  b.tile_end = n_end > n_begin ? (n_end + kBlockN - 1) / kBlockN : tile_begin;
  b.n_tiles = b.m0 < b.seqlen_q ? b.tile_end - tile_begin : 0;
  b.unmasked_hi = min(max(b.tile_end - max(no_mask_end, 0) / kBlockN, 0), b.n_tiles);
  const int first_unmasked_tile = no_mask_begin > 0 ? (no_mask_begin + kBlockN - 1) / kBlockN : 0;
  b.unmasked_lo = min(max(b.tile_end - first_unmasked_tile, b.unmasked_hi), b.n_tiles);
  return b;
}

// Grid: (m_blocks, heads, batch), m_blocks = ceil(seqlen_q / kBlockM), one
// query block each; PERSISTENT: at most one block an SM, each taking every
// gridDim.x-th query block in turn, or (PERSISTENT 2) the next one the
// counter at p.o_accum hands out after its first, blockIdx.x (the producer
// loads the next one's Q and K while the consumers finish this one). Dynamic
// shared memory: Q,
// kStages K and V tiles (e4m3: and kStages of V transposed), and 1 KiB to
// align them. The tensor maps (host: tuner/fwd_launch.c) describe q, k and
// v as (head_dim, rows, heads, batch), or (head_dim, total rows, heads)
// for a packed batch, in boxes of a slab's columns by kBlockM (Q) or
// kBlockN (K, V) rows. e4m3 variants take their descale factors last.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
fat_fwd_ws90(const fat_fwd_params p, const __grid_constant__ TensorMap q_map,
             const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map
#if {{IS_FP8}}
             , const fat_fwd_fp8_params f8
#endif
) {
#if !{{IS_FP8}}
  const fat_fwd_fp8_params f8 = {};  // read only by e4m3 code
#endif
  extern __shared__ __align__(128) unsigned char smem[];
  // The rings' barriers and, PERSISTENT 2, one more word: the query block
  // the producer drew, published with q_full.
  __shared__ __align__(8) u64 barriers[2 + 4 * kStages + (kDynamic ? 1 : 0)];
  volatile int *const drawn = reinterpret_cast<volatile int *>(&barriers[2 + 4 * kStages]);
#if {{IS_FP8}}
  // e4m3: the staged V ring's barriers (full: the copy engine's bytes;
  // empty: the transposing threads' arrivals) and the keys each staged
  // tile holds for them (-1: no more tiles), written before its full
  // barrier's arrival.
  __shared__ __align__(8) u64 staged_barriers[2 * kStages];
  __shared__ int staged_valid[kStages];
  __shared__ __align__(16) u32 zero_row[4];  // what transpose_v reads for keys past a sequence's end
#else
  u64 *const staged_barriers = nullptr;
  int *const staged_valid = nullptr;
  u32 *const zero_row = nullptr;
#endif
  const u32 q_tile = (smem_u32(smem) + 1023u) & ~1023u;
  const u32 k_tiles = q_tile + kQBytes;               // kStages tiles
  // kStages tiles of V as the consumers read it (e4m3: transposed)
  const u32 v_tiles = k_tiles + kStages * kKVBytes;
  const u32 staged_tiles = v_tiles + kStages * kKVBytes;  // e4m3: kStages tiles of V as copied
  const u32 q_full = smem_u32(&barriers[0]), q_empty = smem_u32(&barriers[1]);
  auto k_full = [&](int s) { return smem_u32(&barriers[2 + s]); };
  auto k_empty = [&](int s) { return smem_u32(&barriers[2 + kStages + s]); };
  auto v_full = [&](int s) { return smem_u32(&barriers[2 + 2 * kStages + s]); };
  auto v_empty = [&](int s) { return smem_u32(&barriers[2 + 3 * kStages + s]); };
  auto staged_full = [&](int s) { return smem_u32(&staged_barriers[s]); };
  auto staged_empty = [&](int s) { return smem_u32(&staged_barriers[kStages + s]); };
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 4 * kConsumers);  // one arrival a consumer warp
    for (int s = 0; s < kStages; s++) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), kIsFp8 ? kTransposers : 1);  // e4m3: each transposing thread's arrival
      mbar_init(k_empty(s), 4 * kConsumers);
      mbar_init(v_empty(s), 4 * kConsumers);
      if constexpr (kIsFp8) {
        mbar_init(staged_full(s), 1);
        mbar_init(staged_empty(s), kTransposers);
      }
    }
    if constexpr (kIsFp8)
      for (int i = 0; i < 4; i++) zero_row[i] = 0;
    mbar_init_fence();
  }
  __syncthreads();

  const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  const int n_blocks = m_blocks * p.heads * p.batch;
  const int first = kPersistent ? blockIdx.x : blockIdx.x + m_blocks * (blockIdx.y + p.heads * blockIdx.z);
  const int stride = kPersistent ? gridDim.x : n_blocks;
  // PERSISTENT 2: the counter of query blocks drawn after the first gridDim.x
  // (the split-KV partials' pointer: a ws90 variant has none).
  unsigned *const counter = reinterpret_cast<unsigned *>(p.o_accum);
  auto next_block = [&](int index) {
    return kDynamic ? (int)(gridDim.x + atomicAdd(counter, 1u)) : index + stride;
  };
  const bool packed_q = p.cu_seqlens_q != nullptr, packed_k = p.cu_seqlens_k != nullptr;
  // Both sides count the K/V tiles and the Q tiles this block has passed
  // through the rings: tile j of a query block is ring slot kv + j, in
  // buffer slot % kStages, its (slot / kStages)-th use.

  if (threadIdx.x < 128) {
    // ---- producer -------------------------------------------------------
    if constexpr (kConsumers > 1) regs_release<kProducerRegs>();
    if constexpr (kIsFp8) {
      // Warps 1 .. 3: each staged V tile, in ring order, transposed into
      // the consumers' V ring, until the tile count says there are no more.
      if (threadIdx.x >= 32) {
        const int tid = threadIdx.x - 32;
        for (int slot = 0;; slot++) {
          const int s = slot % kStages, parity = (slot / kStages) & 1;
          mbar_wait(staged_full(s), parity);
          const int valid = staged_valid[s];
          if (valid < 0) break;
          mbar_wait(v_empty(s), parity ^ 1);
          transpose_v(staged_tiles + s * kKVBytes, v_tiles + s * kKVBytes, valid, smem_u32(zero_row), tid);
          mbar_arrive(staged_empty(s));  // its loads are done
          fence_async_shared();          // its stores, for the consumers' products
          mbar_arrive(v_full(s));
        }
        return;
      }
    }
    if (threadIdx.x != 0) return;
    tma_prefetch(q_map);
    tma_prefetch(k_map);
    tma_prefetch(v_map);
    int kv = 0, qn = 0;
    for (int index = first; index < n_blocks; index = next_block(index)) {
      const Block b = block_of(p, index, m_blocks);
      // Without the counter the consumers skip what the producer skips; with
      // it they see only what it hands them: a block with rows but no key
      // tile (they write its zeros), nothing without rows.
      if (kDynamic ? b.m0 >= b.seqlen_q : b.n_tiles == 0) continue;
      const int q_row0 = packed_q ? p.cu_seqlens_q[b.batch] : 0;  // the sequence's rows in a packed tensor
      const int k_row0 = packed_k ? p.cu_seqlens_k[b.batch] : 0;
      // One tile of MAP: its 64-column slabs, ROWS rows each, from row ROW.
      auto load = [&](const TensorMap &map, u32 dst, u32 bar, int rows, int row, int h, bool packed,
                      u64 policy) {
#pragma unroll
        for (int slab = 0; slab < kHeadDim / kSlabCols; slab++) {
          if (packed)
            tma_load_3d(dst + slab * rows * kRowBytes, map, bar, slab * kSlabCols, row, h, policy);
          else
            tma_load_4d(dst + slab * rows * kRowBytes, map, bar, slab * kSlabCols, row, h, b.batch, policy);
        }
      };
      // Q once the consumers are past the last query block's last S.
      mbar_wait(q_empty, (qn & 1) ^ 1);
      qn++;
      if constexpr (kDynamic) {
        *drawn = index;  // released to the consumers by the arrival on q_full
        if (b.n_tiles == 0) {
          mbar_arrive(q_full);
          continue;
        }
      }
      mbar_arrive_expect(q_full, kQBytes);
      load(q_map, q_tile, q_full, kBlockM, q_row0 + b.m0, b.head, packed_q, kEvictFirst);
      // A buffer's next use waits for the consumers to release its last.
      auto load_k = [&](int j) {
        const int slot = kv + j, s = slot % kStages;
        mbar_wait(k_empty(s), ((slot / kStages) & 1) ^ 1);
        mbar_arrive_expect(k_full(s), kKVBytes);
        load(k_map, k_tiles + s * kKVBytes, k_full(s), kBlockN, k_row0 + b.tile_n0(j), b.head_k, packed_k,
             kEvictLast);
      };
      auto load_v = [&](int j) {
        const int slot = kv + j, s = slot % kStages;
        if constexpr (kIsFp8) {
          // Into the staging ring, with the keys the tile holds of its
          // sequence (past a packed or cache-limited sequence's end the
          // copy engine loads other rows; past the tensor's, zeros).
          mbar_wait(staged_empty(s), ((slot / kStages) & 1) ^ 1);
          staged_valid[s] = packed_k || p.seqused_k ? min(kBlockN, b.seqlen_k - b.tile_n0(j)) : kBlockN;
          mbar_arrive_expect(staged_full(s), kKVBytes);
          load(v_map, staged_tiles + s * kKVBytes, staged_full(s), kBlockN, k_row0 + b.tile_n0(j), b.head_k,
               packed_k, kEvictLast);
          return;
        }
        mbar_wait(v_empty(s), ((slot / kStages) & 1) ^ 1);
        mbar_arrive_expect(v_full(s), kKVBytes);
        load(v_map, v_tiles + s * kKVBytes, v_full(s), kBlockN, k_row0 + b.tile_n0(j), b.head_k, packed_k,
             kEvictLast);
      };
      // The order the consumers read them in: K(j + 1) before V(j).
      load_k(0);
      for (int j = 1; j < b.n_tiles; j++) {
        load_k(j);
        load_v(j - 1);
      }
      load_v(b.n_tiles - 1);
      kv += b.n_tiles;
    }
    if constexpr (kDynamic) {  // the end, handed over as a block past the last
      mbar_wait(q_empty, (qn & 1) ^ 1);
      *drawn = n_blocks;
      mbar_arrive(q_full);
    }
    if constexpr (kIsFp8) {  // the end, to the transposing warps: a staged slot without a tile
      const int s = kv % kStages;
      mbar_wait(staged_empty(s), ((kv / kStages) & 1) ^ 1);
      staged_valid[s] = -1;
      mbar_arrive(staged_full(s));
    }
    return;
  }

  // ---- consumers ----------------------------------------------------------
  if constexpr (kConsumers > 1) regs_claim<kConsumerRegs>();
  const int w = threadIdx.x / 128 - 1;          // this consumer warpgroup
  const int ctid = threadIdx.x - 128;           // thread among the consumers
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row0 = 64 * w + 16 * ((threadIdx.x / 32) % 4) + g;  // rows row0 and row0 + 8 of a block
  const float scale_log2 = p.scale_log2;
  const bool softcap = p.softcap_in != 0.f;
  const u32 q_rows = q_tile + w * 64 * kRowBytes;  // this warpgroup's rows start 64w rows into each slab
  // One arrival of this warp on an empty barrier, once its products have
  // read the buffer.
  auto release = [&](u32 bar) {
    if (lane == 0) mbar_arrive(bar);
  };
  int kv = 0, qn = 0;
  // PERSISTENT 2: the block the producer handed over with Q. A block without
  // key tiles has no Q: its q_empty arrival comes at once.
  auto handed = [&]() {
    mbar_wait(q_full, qn & 1);
    const int index = *drawn;
    __syncwarp();  // every lane has read it before lane 0 may let the producer write the next
    return index;
  };
  for (int index = kDynamic ? handed() : first; index < n_blocks; index = kDynamic ? handed() : index + stride) {
    const Block b = block_of(p, index, m_blocks);
    if (b.m0 >= b.seqlen_q) continue;
    if (kDynamic && b.n_tiles == 0) {
      release(q_empty);
      qn++;
    }
    const int row_pos[2] = {b.m0 + row0, b.m0 + row0 + 8};
    // The keys row h sees: col_begin[h] <= key < col_end[h].
    const int diag = b.seqlen_k - b.seqlen_q;
    int col_begin[2], col_end[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      col_end[h] = b.seqlen_k;
      if (kIsCausal) col_end[h] = min(col_end[h], row_pos[h] + diag + 1);
      if (kIsLocal && p.window_right >= 0) col_end[h] = min(col_end[h], row_pos[h] + diag + p.window_right + 1);
      col_begin[h] = kIsLocal && p.window_left >= 0 ? row_pos[h] + diag - p.window_left : 0;
    }
    float o[kORegs];
    float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kORegs; i++) o[i] = 0.f;
    // e4m3: the block's descale factors (its batch's and key head's), Q's
    // and K's folded into the softmax's scale, V's into O's at the end.
    float qk_descale = 1.f, v_descale = 1.f;
    if constexpr (kIsFp8) {
      auto factor = [&](int i) {
        return f8.descale[i] ? f8.descale[i][(long long)b.batch * f8.batch_stride[i] +
                                            (long long)b.head_k * f8.head_stride[i]]
                             : 1.f;
      };
      qk_descale = factor(0) * factor(1);
      v_descale = factor(2);
    }
    const float sl2 = kIsFp8 ? scale_log2 * qk_descale : scale_log2;

    // The pingpong token before and after region r of 0 .. n_tiles:
    // consumer 0 holds it first, and the last consumer keeps it at the end.
    auto turn_take = [&](int r) {
      if constexpr (kPingpong)
        if (w > 0 || r > 0) named_sync(kTurnBarrier + w, 256);
    };
    auto turn_pass = [&](int r) {
      if constexpr (kPingpong)
        if (w < kConsumers - 1 || r < b.n_tiles) named_arrive(kTurnBarrier + (w + 1) % kConsumers, 256);
    };
    // S = Q·Kᵀ of tile j (buffer s), issued, not waited for: k-step ks is
    // slab ks / kSlabSteps, 32 bytes further per step in it; the first one
    // overwrites.
    auto issue_s = [&](float (&s_acc)[kSRegs], int s) {
      const u64 dq = slab_descriptor(q_rows, 16), dk = slab_descriptor(k_tiles + s * kKVBytes, 16);
  #pragma unroll
      for (int ks = 0; ks < kKSteps; ks++) {
        const u32 in_slab = (ks % kSlabSteps) * 32;
        const u64 a = desc_add(dq, (ks / kSlabSteps) * kBlockM * kRowBytes + in_slab);
        const u64 b = desc_add(dk, (ks / kSlabSteps) * kBlockN * kRowBytes + in_slab);
        if constexpr (kIsFp8) {
          if (ks == 0)
            wgmma_s8<kBlockN, false>(s_acc, a, b);
          else
            wgmma_s8<kBlockN, true>(s_acc, a, b);
        } else if (ks == 0)
          wgmma_s<kBlockN, false>(s_acc, a, b);
        else
          wgmma_s<kBlockN, true>(s_acc, a, b);
      }
      wgmma_commit();
    };
    // O += P·V of buffer s: 16 keys (two 8-row groups) a k-step, the next
    // kSlabCols columns one slab (kBlockN rows) further.
    auto issue_pv = [&](const u32 (&a)[kPSteps][4], int s) {
      if constexpr (kIsFp8) {  // 32 keys a k-step: a slab of V transposed
  #pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) pv_step8<kHeadDim>(o, a[kk], vt_descriptor(v_tiles + s * kKVBytes, kk));
      } else {
        const u64 dv = slab_descriptor(v_tiles + s * kKVBytes, kBlockN * kRowBytes);
  #pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) pv_step<kHeadDim>(o, a[kk], desc_add(dv, kk * 2 * kGroupBytes));
      }
      wgmma_commit();
    };
    // The soft-cap, the mask (when MASKED) and the online softmax of tile j's
    // scores, in place: s_acc becomes P in fp32, the row maxima and sums move
    // on, and alpha[h] is what row h's O must be multiplied by.
    auto softmax = [&](float (&s_acc)[kSRegs], int j, bool masked, float (&alpha)[2]) {
      if (softcap) {
        // e4m3: raw scores are the stored values' products, qk_descale times too small
        const float cap_in = kIsFp8 ? p.softcap_in * qk_descale : p.softcap_in;
        const float cap_out = kIsFp8 ? p.softcap_out / qk_descale : p.softcap_out;
  #pragma unroll
        for (int i = 0; i < kSRegs; i++) s_acc[i] = cap_out * fast_tanh(s_acc[i] * cap_in);
      }
      if (masked) {
        // Accumulator i: row row_pos[(i % 4) / 2], key n0 + 2t + 8·(i / 4) + i % 2:
        // the row's bounds less n0 + 2t against constants.
        const int base = b.tile_n0(j) + 2 * t;
        const int end[2] = {col_end[0] - base, col_end[1] - base};
        const int begin[2] = {col_begin[0] - base, col_begin[1] - base};
  #pragma unroll
        for (int i = 0; i < kSRegs; i++) {
          const int h = (i % 4) / 2, at = 8 * (i / 4) + i % 2;
          if (at >= end[h] || (kIsLocal && at < begin[h])) s_acc[i] = neg_inf();
        }
      }
  #pragma unroll
      for (int h = 0; h < 2; h++) {
        float tile_max = neg_inf();
  #pragma unroll
        for (int nt = 0; nt < kBlockN / 8; nt++)
          tile_max = fmaxf(tile_max, fmaxf(s_acc[4 * nt + 2 * h], s_acc[4 * nt + 2 * h + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_old = row_max[h], m_new = fmaxf(m_old, tile_max);
        row_max[h] = m_new;
        const float m_scaled = m_new == neg_inf() ? 0.f : m_new * sl2;
        alpha[h] = fast_exp2(m_old * sl2 - m_scaled);
        const float m_exp = kIsFp8 ? m_scaled - kMaxOffset : m_scaled;  // e4m3: P 2^8 times larger
        float sum = 0.f;
  #pragma unroll
        for (int nt = 0; nt < kBlockN / 8; nt++) {
  #pragma unroll
          for (int e = 0; e < 2; e++) {
            float &x = s_acc[4 * nt + 2 * h + e];
            x = fast_exp2(fmaf(x, sl2, -m_exp));
            sum += x;
          }
        }
        row_sum[h] = row_sum[h] * alpha[h] + sum;
      }
    };
    // P rounded into the A fragments of P·V: k-step kk takes the 8-key tiles
    // 2kk and 2kk + 1.
    // e4m3: k-step kk takes the 8-key tiles 4kk .. 4kk + 3; register h +
    // 2q of row h holds tiles 4kk + 2q and + 1's two keys each (k-indices
    // 16q + 4t .. + 3: the transposed V's order, at kVtSlabBytes).
    auto round_p = [&](const float (&s_acc)[kSRegs], u32 (&a)[kPSteps][4]) {
      if constexpr (kIsFp8) {
  #pragma unroll
        for (int kk = 0; kk < kPSteps; kk++)
  #pragma unroll
          for (int q = 0; q < 2; q++)
  #pragma unroll
            for (int h = 0; h < 2; h++) {
              const int i = 4 * (4 * kk + 2 * q) + 2 * h;
              a[kk][h + 2 * q] = pack4_e4m3(s_acc[i], s_acc[i + 1], s_acc[i + 4], s_acc[i + 5]);
            }
      } else {
  #pragma unroll
        for (int nt = 0; nt < kBlockN / 8; nt++)
  #pragma unroll
          for (int h = 0; h < 2; h++) a[nt / 2][h + 2 * (nt % 2)] = pack2(s_acc[4 * nt + 2 * h], s_acc[4 * nt + 2 * h + 1]);
      }
    };
    auto rescale_o = [&](const float (&alpha)[2]) {
  #pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; dt++)
  #pragma unroll
        for (int e = 0; e < 4; e++) o[4 * dt + e] *= alpha[e / 2];
    };
    // Keys past a packed or cache-limited sequence's end are another
    // sequence's rows (or stale cache) that the copy engine loaded: P is 0
    // there, but 0 · NaN is not, so the first tile's V rows past the end are
    // zeroed by all consumers together before any P·V reads them.
    auto clear_tail_v = [&](int s) {
      if constexpr (kIsFp8) return;  // transpose_v wrote those keys as zeros
      const int valid = b.seqlen_k - b.tile_n0(0);
      if (!(packed_k || p.seqused_k) || valid >= kBlockN) return;
      const u32 v = v_tiles + s * kKVBytes;
      for (int i = ctid; i < (kBlockN - valid) * kChunks; i += kConsumerThreads) {
        const int r = valid + i / kChunks, c = i % kChunks;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(v + tile_offset<kBlockN>(r, c)),
                     "r"(0u)
                     : "memory");
      }
      fence_async_shared();
      named_sync(kZeroBarrier, kConsumerThreads);
    };
    auto stage = [&](int j) { return (kv + j) % kStages; };
    auto parity = [&](int j) { return ((kv + j) / kStages) & 1; };

    float s[kSRegs], alpha[2];
    u32 a[kPSteps][4];
    if (b.n_tiles > 0) {
      if constexpr (!kDynamic) mbar_wait(q_full, qn & 1);  // (handed() waited)
      // Region 0: S(0), its softmax and P(0).
      mbar_wait(k_full(stage(0)), parity(0));
      turn_take(0);
      wgmma_fence();
      issue_s(s, stage(0));
      turn_pass(0);
      wgmma_wait<0>();
      pin(s);
      release(k_empty(stage(0)));
      if (b.n_tiles == 1) release(q_empty);  // this warp's last S is done
      softmax(s, 0, b.unmasked_hi > 0 || b.unmasked_lo == 0, alpha);  // O is still zero: no rescale
      round_p(s, a);
      // Region j: S(j) with P·V of j - 1.
      auto region = [&](int j, bool masked) {
        const int sk = stage(j), sv = stage(j - 1);
        mbar_wait(k_full(sk), parity(j));
        mbar_wait(v_full(sv), parity(j - 1));
        turn_take(j);
        wgmma_fence();
        issue_s(s, sk);
        issue_pv(a, sv);
        turn_pass(j);
        if constexpr (kOverlap) {
          wgmma_wait<1>();  // S(j); P·V may still run
          pin(s);
          release(k_empty(sk));
          if (j == b.n_tiles - 1) release(q_empty);
          softmax(s, j, masked, alpha);
          if constexpr (kHoldWait) hold_wait_behind(row_sum[0] + row_sum[1], q_rows);
          wgmma_wait<0>();
          pin(o);
          pin(a);
        } else {
          wgmma_wait<0>();
          pin(s);
          pin(o);
          pin(a);
          release(k_empty(sk));
          if (j == b.n_tiles - 1) release(q_empty);
          softmax(s, j, masked, alpha);
        }
        release(v_empty(sv));
        rescale_o(alpha);
        round_p(s, a);
      };
      // The first tile's V before any P·V reads it (out of the loop: its
      // code would cost the loop registers).
      mbar_wait(v_full(stage(0)), parity(0));
      clear_tail_v(stage(0));
      int j = 1;
      for (; j < b.unmasked_hi; j++) region(j, true);
      for (; j < b.unmasked_lo; j++) region(j, false);
      for (; j < b.n_tiles; j++) region(j, true);
      // Region n: the last P·V.
      const int sv = stage(b.n_tiles - 1);
      mbar_wait(v_full(sv), parity(b.n_tiles - 1));
      turn_take(b.n_tiles);
      wgmma_fence();
      issue_pv(a, sv);
      turn_pass(b.n_tiles);
      wgmma_wait<0>();
      pin(o);
      release(v_empty(sv));
      kv += b.n_tiles;
      qn++;
    }

    // O = o / l straight from the accumulators (row row_pos[h], columns
    // 8·dt + 2t and + 1 of the head), lse from the row statistics.
    const Sequence seq = sequence_of(p, b.batch);
    elem_t *o_head = static_cast<elem_t *>(p.o) + seq.o_off + b.head * p.o_head_stride;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float l = quad_sum(row_sum[h]), inv_l = l > 0.f ? (kIsFp8 ? v_descale : 1.f) / l : 0.f;
      const int pos = row_pos[h];
      if (pos >= b.seqlen_q) continue;
      elem_t *dst = o_head + (long long)pos * p.o_row_stride;
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; dt++)
        if (8 * dt + 2 * t < p.head_dim)
          *reinterpret_cast<u32 *>(dst + 8 * dt + 2 * t) = pack2(o[4 * dt + 2 * h] * inv_l, o[4 * dt + 2 * h + 1] * inv_l);
      if (t == 0) {
        // e4m3: l is 2^kMaxOffset times the row's sum
        const float lse = row_lse(l, row_max[h], kIsFp8 ? p.softmax_scale * qk_descale : p.softmax_scale);
        p.lse[((long long)b.batch * (p.cu_seqlens_q ? 0 : p.heads) + b.head) * seq.lse_rows + seq.lse_row0 + pos] =
            kIsFp8 ? lse - kMaxOffset * 0.69314718f : lse;
      }
    }
  }
}
