// FlashAttention backward on Hopper, warp-specialised (sm_90a): the
// products, layouts and gradients of bwd_wgmma90.cu (which says what each
// is), with every copy and every meeting taken off the compute warps.
// FlashAttention-3's structure (hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp).
//
// One thread block owns kBlockN keys of one (batch, key head), 64 per
// consumer warpgroup, and walks the query tiles (kBlockM rows, every query
// head of its group) that see them; PERSISTENT 1: one block an SM takes
// such key blocks (items) in turn, the producer loading the next item's
// first tiles and its K and V while the consumers finish the last one and
// store its dK and dV. Roles (kConsumers + 1 warpgroups):
//   producer   warp 0 of warpgroup 0: K and V once, then each tile's Q and
//              dO through a ring of kStages buffers by the tensor copy
//              engine (one thread issues), and the tile's lse and D into
//              the buffer's statistics (every lane stores its rows). A
//              buffer's full barrier takes the bytes and the 32 lanes'
//              arrivals; its empty barrier every consumer thread's, once
//              its products have read the buffer.
//   dQ writer  warp 1: once the consumers have put a tile's dQ into shared
//              memory (fp32), adds it into the accumulator in device memory
//              with one bulk reduction of the copy engine a buffer
//              (cp.reduce.async.bulk .add.f32), then frees the buffers.
//              DQ_MODE ordered: every tile, in turn (below).
//   consumers  warpgroups 1 .. kConsumers take the registers (setmaxnreg):
//              Sᵀ, dPᵀ, Pᵀ, dSᵀ, dV += Pᵀ·dO and dK += dSᵀ·Q for their 64
//              keys exactly as bwd_wgmma90.cu's one-warpgroup path; dSᵀ
//              into shared memory, then dQ = dS·K. DQ_KEYS 0: dSᵀ in one
//              of two buffers (tile parity), a meeting of the consumers by
//              named barrier, then dQ over all the block's keys, each
//              consumer a 64-row block, a column slice of one, or (d64
//              over two) its own keys' share of one; DQ_KEYS 1: each
//              consumer's dQ over its own keys, the second adding its share
//              to the first's in the writer's buffer.
// The consumers never meet the producer but through the ring's mbarriers,
// nor the writer but through two named barriers, and never the whole block
// after the roles part. A tile whose dQ rows are not all inside (the
// sequence's last; or, with a head dim below the template's and
// FAT_DQ_PADDED 0, any) adds its dQ from the registers with vector
// reductions instead, as bwd_wgmma90.cu does.
//
// DQ_MODE ordered (deterministic): float adds do not commute bit for bit,
// and the atomic mode's sums depend on which key block reaches a query tile
// first. Here every tile's dQ goes through the writer, and the key blocks
// add into each (batch, head, query tile) in the order of their items, one
// after another: a semaphore a tile in device memory (int32, after the
// accumulator's rows: core/bwd_launch.h), zeroed by the launch, counts the
// key blocks that have added; the writer waits until it equals its key
// block's rank among those that see the tile, adds (whole 64-row blocks by
// bulk reduction, a partial one lane by lane), waits for its adds to land
// and increments it (FlashAttention-3's deterministic backward). The items
// are numbered so that the key blocks of a tile come in rank order, each
// block takes its items in increasing order, and the blocks start in
// index order (PERSISTENT: all resident), so every wait is for an earlier
// item and the lowest unfinished one can always go on.
//
// DQ_SHIFT 1 (ordered, PERSISTENT, no mask): in that order every key block
// walks its tiles from the first, so key block n reaches a tile about n
// handoffs after key block 0 (a handoff: the last block's bulk add landed,
// its release, the next one's acquire) and waits that long at every tile of
// its walk, the first tiles' wait held by its consumers: 1.28-1.47x the
// atomic mode's time (notes/kernel-log.md ws13 measured). Here the key
// blocks of a pair that one round of the persistent grid holds (its chunk:
// all resident at once, each on its own SM) start their walks spread over
// the pair's tiles, key block k of A at tile k·T/A, wrapping round; each
// tile's order is the order the chunk's blocks reach it (the one that
// started there first, then the one that started before it, ...), after
// the key blocks of the pair's earlier rounds, all of whose adds land
// before any of this round's. Every wait is then for an item of an earlier
// round or one that reached the tile in fewer steps of its walk: the
// chunk's blocks go on together, each T/A tiles of work behind the next.
//
// Head dims 192 and 256 (kDSplit 2): a warpgroup's dK and dV of 64 keys
// would be 192 or 256 accumulators a thread, so two consumers share the
// block's 64 keys, each holding dK and dV for half the columns
// (FlashAttention-3 splits its d256 backward over two warpgroups too).
// Each computes Sᵀ and dPᵀ for half the tile's queries over the whole
// head dim (no product twice), Pᵀ and dSᵀ from them in fp32, and stores
// both into shared memory; after one meeting a tile both read the whole
// Pᵀ and dSᵀ there for dV += Pᵀ·dO and dK += dSᵀ·Q over their columns,
// and dQ = dS·K over their columns as the d128 tile's column slices. The
// ring of Q and dO tiles fills shared memory, so dQ leaves from the
// registers by vector reductions (no writer buffer: no ordered mode) and
// the tile is 64 x 64. d192's halves of 96 columns are a whole slab and
// half of the middle one (the first 32 columns of its 128-byte rows, or
// the last): each product over a consumer's columns is one of N 64 and
// one of N 32, and the second consumer holds its slab's columns first.
//
// Masks are bottom-right aligned, tiles no pair of which is visible are
// skipped, a row that sees no key gets zero gradients (bwd_common.cuh). The
// template's head dim is whole 64-column slabs (96 runs on 128: the copy
// engine fills the missing columns with zeros, which add nothing). Tiles
// are 64-column slabs of 128-byte rows in wgmma's 128-byte swizzle, the
// copy engine's CU_TENSOR_MAP_SWIZZLE_128B. Parameters in double braces are
// substituted by generator/expand.lua; they change speed, never results.
#include "fat_abi.h"
#include "fat_abi_bwd.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};   // query rows per tile
constexpr int kBlockN = {{BLOCK_N}};   // keys per thread block: 64 per consumer warpgroup
constexpr int kStages = {{STAGES}};    // Q and dO buffers of the ring
// dQ of two consumers: 0, the block's dQ shared among them after they meet
// (column slices or partial sums by keys, below); 1, each consumer's over
// its own 64 keys, the second adding its share to the first's in shared
// memory, so that they never meet but through the buffer (their products
// drift apart and fill each other's gaps in the tensor cores).
constexpr bool kOwnKeys = {{DQ_KEYS}} == 1;
// PERSISTENT 1: at most one block an SM, looping over the (key block, key
// head, batch) items in rounds of gridDim.x, every other round reversed
// (the causal mask's items differ in work, heaviest first).
constexpr bool kPersistent = {{PERSISTENT}} == 1;
// GROUPED 1 (causal): the items in groups of (key head, batch) pairs whose
// queries' Q, dO and dQ accumulator fit kGroupBytes, heaviest key block
// first within a group, instead of every pair's key block 0 first. Taken
// over all pairs, a key block's items reduce into every pair's dQ rows
// within one wave: at causal d128 s2048 (128 pairs, 128 MiB of dQ
// accumulator) the kernel read and wrote DRAM at 3.2 TB/s, 66 % of the
// H200's, against 5 % without a mask (ncu, notes/kernel-log.md ws6).
constexpr bool kGrouped = {{GROUPED}} == 1;
// A third of the H200's 50 MiB L2 (which is two partitions; K, V and the
// other items' traffic take the rest).
constexpr long long kGroupBytes = 16ll << 20;
constexpr bool kIsBf16 = {{IS_BF16}};
constexpr bool kIsCausal = {{IS_CAUSAL}};
constexpr bool kIsLocal = {{IS_LOCAL}};
// Both modes sum dQ in the fp32 accumulator (the name is kept: a constexpr
// variable is an object in every cubin, and the atomic variants' machine
// code is what the tables were tuned on); neither has mma80's separate pass.
constexpr bool kDqMode_atomic = true;
constexpr bool kDqSeparate = false;
enum class DqMode : int { atomic, ordered };
#if {{IS_BF16}}
#define FAT_ELEM "bf16"
#else
#define FAT_ELEM "f16"
#endif

constexpr int kWarpSize = 32;
constexpr int kChunk = 8;  // elements of one 16-byte copy
constexpr float kLog2e = 1.4426950408889634f;
enum : int {
  // STATS_AHEAD 1: a tile's lse and D read from shared memory into
  // registers as soon as the tile has landed, before its products, rather
  // than beside their first use: there the FFMA of P = exp2(S·scale − lse)
  // and the FADD of dP − D waited for the loads (short scoreboard, 14.5 % of
  // the consumers' stall samples at d128 none s4096; ncu, notes/kernel-log.md
  // ws7). An enumerator, not a constexpr variable: NVRTC puts every one of
  // those into the cubin, and a new one would change the machine code of the
  // STATS_AHEAD 0 variants.
  kStatsAhead = {{STATS_AHEAD}},
  // DS_STSM 1: dSᵀ into shared memory by stmatrix, four 8 x 8 blocks of a
  // warp an instruction (kPSteps a thread a tile), where 0 stores its 32-bit
  // pairs one st.shared each (kBlockM / 4): the MIO queue throttled the
  // consumers 0.80 cycles an issued instruction against cuDNN's 0.07, whose
  // kernel stores dSᵀ with STSM (ncu, notes/kernel-log.md ws7). An
  // enumerator, as STATS_AHEAD.
  kDsStsm = {{DS_STSM}},
  // DQ_MODE ordered: the tiles' dQ added in the items' order (above), every
  // tile through the writer. An enumerator, as STATS_AHEAD.
  kDqOrdered = DqMode::{{DQ_MODE}} == DqMode::ordered,
  // DQ_SHIFT 1: the walks of a round's key blocks start spread over the
  // pair's tiles (above). An enumerator, as STATS_AHEAD.
  kDqShift = {{DQ_SHIFT}},
  // Consumers a group of 64 keys: two past head dim 128, each half the
  // columns of dK and dV and half the queries of Sᵀ and dPᵀ (above).
  kDSplit = kHeadDim > 128 ? 2 : 1,
  kConsumers = kBlockN / 64 * kDSplit,
  kThreads = 128 * (kConsumers + 1),
  kConsumerThreads = 128 * kConsumers,
  kRowBlocks = kBlockM / 64,  // dQ's 64-row products per tile
  kSCols = kBlockM / kDSplit, // queries of a consumer's Sᵀ and dPᵀ
  kSRegs = kSCols / 2,        // Sᵀ (and dPᵀ) accumulators a thread
  kDCols = kHeadDim / kDSplit,  // columns of a consumer's dK and dV
  kDRegs = kDCols / 2,        // dK (and dV) accumulators a thread
  kPSteps = kBlockM / 16,     // k-steps of dV and dK
  kSSteps = kSCols / 16,      // A fragments of a consumer's Pᵀ and dSᵀ
  // dQ through the writer's buffer and bulk reduction: not beside kDSplit
  // 2's ring (from the registers, as partial tiles).
  kDqBulk = kDSplit == 1,
  // dQ (kBlockM x kHeadDim) over the consumers (kOwnKeys: each all of it
  // over its own keys): whole 64-row blocks each, and where there are more
  // consumers than row blocks, the block shared kDqShares ways: by column
  // slices of whole slabs (kDqN columns), or where the head dim has no such
  // slices (d64 over two) by keys, each consumer its own 64 (kDqSplitK):
  // partial sums, a dQ buffer each.
  kDqShares = !kOwnKeys && kConsumers > kRowBlocks ? kConsumers / kRowBlocks : 1,
  kDqSplitK = kDSplit == 1 && kDqShares > 1 && (kHeadDim / kDqShares) % 64 != 0,
  kDqSplit = kDqSplitK ? 1 : kDqShares,  // column slices
  // kOwnKeys: a slab of columns at a time (a product of N 128 beside dK and
  // dV spilled at d128).
  // kDSplit 2: a slab of this consumer's columns at a time too (a product
  // of N 128 beside its dK and dV spilled); d192's half slab as a task of
  // its own.
  kDqColTasks = kOwnKeys ? kHeadDim / 64 : kDSplit > 1 ? (kDCols + 63) / 64 : 1,
  kDqN = kOwnKeys || kDSplit > 1 ? 64 : kHeadDim / kDqSplit,
  kDqKSteps = kOwnKeys ? 4 : kBlockN / 16 / (kDqSplitK ? kDqShares : 1),  // of dQ's product, 16 keys each
  kDqBuffers = kDqSplitK ? kDqShares : 1,
  kDqTasks = kOwnKeys || kDSplit > 1 ? kRowBlocks * kDqColTasks : kRowBlocks > kConsumers ? kRowBlocks / kConsumers : 1,
  kDsBuffers = kOwnKeys ? 1 : 2,  // dSᵀ's: the consumers meet (0) or each reads its own rows (1)
  // Threads at the dQ buffer's hand-over to the writer: the consumers that
  // arrive (kOwnKeys: the second alone) and the writer's warp.
  kDqHandThreads = (kOwnKeys ? 128 : kConsumerThreads) + kWarpSize,
  // Registers a thread once the warpgroups have traded: the block's own,
  // kLaunchRegs a thread as launched (setmaxnreg.inc takes what .dec gave
  // back; asked for more, it waits for ever). One consumer needs no trade:
  // 256 threads have 255 each. PERSISTENT: the producer's item loop spills
  // at 24.
  kLaunchRegs = (65536 / kThreads) / 8 * 8,
  kProducerRegs = kPersistent ? 40 : 24,
  kConsumerRegs = kPersistent ? 232 : 240,
  // Named barriers (0 is __syncthreads'): the consumers' dSᵀ written
  // (kOwnKeys: one a consumer, kOwnDsBarrier + w); the dQ buffer written
  // (consumers arrive, the writer waits) and read (the writer arrives, the
  // consumers wait); kOwnKeys: the first consumer's share written (it
  // arrives, the second waits).
  kDsBarrier = 1,
  kDqFullBarrier = 2,
  kDqEmptyBarrier = 3,
  kDqChainBarrier = 4,
  kOwnDsBarrier = 5,
};
constexpr unsigned kTileBytes = kBlockM * kHeadDim * 2;   // a Q or dO tile
constexpr unsigned kKVBytes = kBlockN * kHeadDim * 2;     // K or V
constexpr unsigned kDsBytes = kBlockN * kBlockM * 2;      // dSᵀ: [key][query]
constexpr unsigned kDqBytes = kBlockM * kHeadDim * 4;     // a tile's dQ (or a split-K partial), fp32
// As bwd_wgmma90.cu: dV's product issued before dSᵀ is computed where the
// registers hold it (notes/kernel-log.md w2).
// kDSplit 2 has Pᵀ in shared memory only once both consumers have met.
constexpr bool kEarlyDv = kDSplit == 1 && kSRegs * 2 + kBlockM / 4 + kDRegs * 2 <= 208;

static_assert(kBlockM == 64 || kBlockM == 128, "Sᵀ's N: 64 or 128 queries");
static_assert(kBlockN == 64 || kBlockN == 128, "one or two groups of 64 keys");
static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
              "whole slabs; dK and dV of 64 keys in one warpgroup, or (192, 256) in two");
static_assert(kDSplit == 1 || (kBlockM == 64 && kBlockN == 64 && !kOwnKeys && !kDqOrdered),
              "head dims past 128: 64 x 64 tiles (the ring fills shared memory), dQ shared by columns, atomic");
static_assert(kDqN % 64 == 0 && kDqN <= 128, "dQ's column slices: whole slabs of K, N at most 128");
static_assert(!kDqSplitK || kDqKSteps * 16 == 64, "split-K dQ: each consumer its own 64 keys");
static_assert(!kOwnKeys || kConsumers == 2, "DQ_KEYS 1: two consumers (one owns every key already)");
static_assert(kStages >= 2 && kStages <= 4, "a ring of two to four buffers");
static_assert({{PERSISTENT}} == 0 || {{PERSISTENT}} == 1, "PERSISTENT: 0 or 1");
static_assert(kStatsAhead == 0 || kStatsAhead == 1, "STATS_AHEAD: 0 or 1");
static_assert(kDsStsm == 0 || kDsStsm == 1, "DS_STSM: 0 or 1");
static_assert(!kGrouped || kIsCausal, "GROUPED: causal items only (without a mask they go pair by pair already)");
static_assert(kConsumers == 1 || kProducerRegs + kConsumers * kConsumerRegs <= (kConsumers + 1) * kLaunchRegs,
              "the traded registers are the block's own");
static_assert(!(kIsCausal && kIsLocal), "one mask per variant");
static_assert(kDqShift == 0 || (kDqShift == 1 && kDqOrdered && kPersistent && !kIsCausal && !kIsLocal),
              "DQ_SHIFT 1: ordered dQ, PERSISTENT (a round's blocks all resident), no mask (every walk the "
              "pair's every tile)");
static_assert(!kDqOrdered || !kDqSplitK, "ordered dQ: one buffer a tile (split-K's two bulk adds of one tile "
                                         "are not ordered with each other)");

// A head dim below the template's (96 on 128) keeps the dQ accumulator's
// rows kHeadDim floats apart (bwd_common.cuh), so that its whole tiles go
// through the writer's bulk reduction as whole rows too (through the
// registers d96 ran at 0.7-0.8 of d128's rate: notes/kernel-log.md ws5).
#define FAT_DQ_PADDED {{PADS_HEAD_DIM}}

#include "fat_device.cuh"
#include "wgmma.cuh"
#include "tma.cuh"
#include "bwd_common.cuh"

// kDSplit 2's consumer coordinates in the kernel below: its group of 64
// keys, and X offset to its first query (FAT_Q), query group of 8
// (FAT_QG), first query row of a 128-byte-row slab (FAT_Q128), first
// column (FAT_D) and first column's slab in a Q or dO tile (FAT_D_SLAB).
// Macros, so that the other variants' source is token for token what
// their tables were tuned on: a new local there, even an unused constant,
// renumbers NVRTC's PTX, and ptxas then allocates registers otherwise.
#if {{HEAD_DIM}} > 128
#define FAT_KEY_GROUP (wg / kDSplit)
#define FAT_Q(x) ((x) + q_first)
#define FAT_QG(x) (q_first / 8 + (x))
#define FAT_Q128(x) ((x) + q_first * 128)
#if {{HEAD_DIM}} == 192
// d192: a consumer's columns 0-63 are its whole slab's (slab 0, or 2 for
// the second consumer), 64-95 half of slab 1's (its columns 64-95, or
// 96-127); FAT_D_SLAB is the whole slab, and FAT_DQ_N(task) the columns
// of dQ's task (the whole slab's 64, then the half slab's 32).
#define FAT_D(x) ((x) + ((x) < 64 ? half * 128 : half * 32))
#define FAT_D_SLAB(x) ((x) + half * 2 * kBlockM * 128)
#define FAT_DQ_N(task) ((task) == 0 ? 64 : 32)
#else
#define FAT_D(x) (d_first + (x))
#define FAT_D_SLAB(x) ((x) + (d_first / 64) * kBlockM * 128)
#define FAT_DQ_N(task) kDqN
#endif
#else
#define FAT_KEY_GROUP wg
#define FAT_Q(x) x
#define FAT_QG(x) x
#define FAT_Q128(x) x
#define FAT_D(x) x
#define FAT_D_SLAB(x) x
#define FAT_DQ_N(task) kDqN
#endif

// Atomic dQ's fp32 accumulator within a whole 64-row block (bwd_wgmma90.cu,
// whose conversion kernel this template shares): each warp's accumulator
// fragments in 128-float blocks, lane g·4 + t's four floats (row, columns
// 2t, 2t + 1) of the 8-column tiles 2np and 2np + 1.
__device__ __forceinline__ int dq_whole_offset(int row, int col) {
  const int warp = row / 16, h = row / 8 % 2, g = row % 8;
  const int nt = col / 8, t = col / 2 % 4, e = col % 2;
  const int block = (warp * 2 + h) * (kHeadDim / 16) + nt / 2;
  return (block * kWarpSize + g * 4 + t) * 4 + (nt % 2) * 2 + e;
}

#if {{HEAD_DIM}} > 128
// One k-step of m64n32k16, both operands K-major in shared memory: the
// Sᵀ and dPᵀ of kDSplit 2's 32 queries a consumer (wgmma.cuh's products
// are 64 or 128 wide; here, not there, so that no other template's
// source changes).
#define FAT_WS_ACC16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FAT_WS_D16 FAT_D8(0), FAT_D8(8)
__device__ __forceinline__ void wgmma_ss32(float (&d)[16], u64 da, u64 db) {
  FAT_WGMMA_SS("32", FAT_WS_ACC16, "%16, %17", FAT_WS_D16, "0, 0");
}
#endif
#if {{HEAD_DIM}} == 192
// d192's products over a consumer's 96 columns, one k-step: dK's or dV's
// (A K-major, B MN-major) into accumulators 0-31 (N 64: the whole slab)
// and 32-47 (N 32: the half slab, its descriptor 64 bytes into the
// 128-byte rows for the second consumer, as a k-step's is for K-major
// operands); dQ's half slab (both MN-major) into accumulators 0-15.
__device__ __forceinline__ void wgmma_slab64(float (&d)[kDRegs], u64 da, u64 db) {
  FAT_WGMMA_SS("64", FAT_ACC32, "%32, %33", FAT_D32, "0, 1");
}
#define FAT_WS_D16_HALF FAT_D8(32), FAT_D8(40)
__device__ __forceinline__ void wgmma_half32(float (&d)[kDRegs], u64 da, u64 db) {
  FAT_WGMMA_SS("32", FAT_WS_ACC16, "%16, %17", FAT_WS_D16_HALF, "0, 1");
}
__device__ __forceinline__ void wgmma_dq32(float (&d)[32], u64 da, u64 db) {
  FAT_WGMMA_SS("32", FAT_WS_ACC16, "%16, %17", FAT_WS_D16, "1, 1");
}
#endif

// acc += A·Bᵀ over the head dim for a warpgroup's 64 keys and kSCols of a
// tile's queries (B: from the first of them, in slabs of kBlockM rows),
// both K-major (bwd_wgmma90.cu's keys_by_queries).
__device__ __forceinline__ void keys_by_queries(float (&acc)[kSRegs], u64 a, u64 b) {
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ks++) {
    const u32 in_slab = (ks % 4) * 32;
#if {{HEAD_DIM}} > 128
    wgmma_ss32(acc, desc_add(a, (ks / 4) * kBlockN * 128 + in_slab), desc_add(b, (ks / 4) * kBlockM * 128 + in_slab));
#else
    wgmma_ss<kBlockM>(acc, desc_add(a, (ks / 4) * kBlockN * 128 + in_slab), desc_add(b, (ks / 4) * kBlockM * 128 + in_slab));
#endif
  }
}

// The global side of dQ's bulk reduction: BYTES (a multiple of 16) of fp32
// at SRC in shared memory added into DST, one bulk group.
__device__ __forceinline__ void bulk_reduce_add(float *dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Returns once the copy engine has read every bulk group's source.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// BYTES more to land in BAR's current phase, without an arrival: the
// producer's lanes arrive only once their statistics are stored (an
// arrival with the bytes, before lane 0's stores, let the phase complete
// without them: racecheck, H200). Here rather than in tma.cuh, which every
// forward ws90 variant inlines.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// A 4 x 4 transpose of 32-bit values within each quad (lanes 4g .. 4g + 3,
// T = lane % 4): lane T's V holds row T of the quad's matrix, and lane T
// gets back column T, (row 0's value, row 1's, row 2's, row 3's). Two
// exchanges of halves, across lanes T ^ 2 and then T ^ 1; every lane of
// the warp must call it.
__device__ __forceinline__ uint4 quad_transpose(uint4 v, int t) {
  const bool hi = t & 2, odd = t & 1;
  // Columns 2·hi and 2·hi + 1 of rows T and T ^ 2.
  const u32 a0 = hi ? v.z : v.x, a1 = hi ? v.w : v.y;
  const u32 b0 = __shfl_xor_sync(0xffffffffu, hi ? v.x : v.z, 2);
  const u32 b1 = __shfl_xor_sync(0xffffffffu, hi ? v.y : v.w, 2);
  // Column T of rows T ^ 1 and T ^ 3, from lane T ^ 1, which has them.
  const u32 c0 = __shfl_xor_sync(0xffffffffu, odd ? a0 : a1, 1);
  const u32 c1 = __shfl_xor_sync(0xffffffffu, odd ? b0 : b1, 1);
  // Column T of row r is, by r ^ T: 0 mine, 1 c0, 2 mine of T ^ 2, 3 c1.
  const u32 r[4] = {odd ? a1 : a0, c0, odd ? b1 : b0, c1};
  return hi ? (odd ? make_uint4(r[3], r[2], r[1], r[0]) : make_uint4(r[2], r[3], r[0], r[1]))
            : (odd ? make_uint4(r[1], r[0], r[3], r[2]) : make_uint4(r[0], r[1], r[2], r[3]));
}

// Whether the dQ accumulator's rows are the template's kHeadDim floats (the
// head dim's own, or padded to it), so that a whole 64-row block of it is
// dq_whole_offset()'s contiguous order.
__device__ __forceinline__ bool dq_rows_whole(int head_dim) { return FAT_DQ_PADDED || head_dim == kHeadDim; }

// This lane's pairs of row h in the 8-column groups 4k .. 4k + 3 of a dK or
// dV accumulator (I = 16k + 2h: accumulators I + 4·j and + 1 for group
// 4k + j) times SCALE, in the element type: quad_transpose's row.
__device__ __forceinline__ uint4 pack_quad_row(const float (&x)[kDRegs], int i, float scale) {
  return make_uint4(pack2(x[i] * scale, x[i + 1] * scale), pack2(x[i + 4] * scale, x[i + 5] * scale),
                    pack2(x[i + 8] * scale, x[i + 9] * scale), pack2(x[i + 12] * scale, x[i + 13] * scale));
}

// The query tiles of a key block, which every role derives alike: (query
// head of the group, query block) in that order, blocks mb_first ..
// mb_end - 1 of each head; those below mb_whole have all their rows inside.
// A role's loop counts the walk's steps; step s is tile at(s): s itself,
// or DQ_SHIFT (shift_walk) the tile `shift` steps on, wrapping round.
// (The preprocessor's choice, not if constexpr's: DQ_SHIFT 0 keeps the
// machine code of the variants tuned before DQ_SHIFT, which ptxas
// scheduled otherwise with at() inlined into every role.)
struct Walk {
  int group, mb_first, mb_end, mb_whole, n_tiles;
#if {{DQ_SHIFT}}
  // The first tile, and the key block's chunk (those of its pair in its
  // round of the persistent grid): its first key block and size.
  int shift, chunk_first, chunk_size;
  __device__ int at(int step) const {
    const int tile = step + shift;
    return tile < n_tiles ? tile : tile - n_tiles;
  }
  __device__ int hq(int step) const { return at(step) / (mb_end - mb_first); }
  __device__ int mb(int step) const { return mb_first + at(step) % (mb_end - mb_first); }
#else
  __device__ int hq(int tile) const { return tile / (mb_end - mb_first); }
  __device__ int mb(int tile) const { return mb_first + tile % (mb_end - mb_first); }
#endif
  // dQ through shared memory and the writer: whole rows of whole
  // accumulator rows, which it adds by bulk reduction; DQ_MODE ordered,
  // every tile.
  // (kDSplit 2's dQ through the registers: the preprocessor's, as at(), for
  // the other variants' machine code.)
  __device__ bool dq_bulk(int tile, int head_dim) const {
#if {{HEAD_DIM}} > 128
    return false;
#else
    return kDqOrdered || (dq_rows_whole(head_dim) && mb(tile) < mb_whole);
#endif
  }
  __device__ int bulk_tiles(int head_dim) const {
#if {{HEAD_DIM}} > 128
    return 0;
#endif
    if constexpr (kDqOrdered) return n_tiles;
    return dq_rows_whole(head_dim) ? group * max(0, min(mb_end, mb_whole) - mb_first) : 0;
  }
};

__device__ __forceinline__ Walk walk_of(const fat_fwd_params &p, int n0) {
  const KeyWindow window = key_window(p);
  const int offset = p.seqlen_k - p.seqlen_q;  // query i sits at key i + offset
  // Query rows [m_first, m_end) see at least one key of [n0, n_last].
  const int n_last = min(n0 + kBlockN, p.seqlen_k) - 1;
  const int m_first = window.has_right ? max(0, n0 - window.right - offset) : 0;
  const int m_end = window.has_left ? min(p.seqlen_q, n_last + window.left - offset + 1) : p.seqlen_q;
  Walk w;
  w.group = p.heads / p.heads_k;
  w.mb_first = m_first / kBlockM;
  w.mb_end = m_end > m_first ? (m_end + kBlockM - 1) / kBlockM : w.mb_first;
  w.mb_whole = p.seqlen_q / kBlockM;
  w.n_tiles = w.group * (w.mb_end - w.mb_first);
  return w;
}

// DQ_MODE ordered: the rank of key block N among the key blocks whose walk
// takes query tile MB, the order in which they add into its dQ. Those are
// consecutive key blocks (walk_of's bounds grow with the key block) from the
// first whose last key the tile's first row sees: key block 0 unless the
// window has a left edge.
__device__ __forceinline__ int dq_rank(const fat_fwd_params &p, int n, int mb) {
  const KeyWindow window = key_window(p);
  if (!window.has_left) return n;
  const int first_key = mb * kBlockM + (p.seqlen_k - p.seqlen_q) - window.left;
  return n - max(0, first_key) / kBlockN;
}

// DQ_SHIFT: the rank of key block N at tile TILE of WALK (shift_walk's):
// the chunk's blocks in the order they reach the tile, after the pair's
// earlier rounds' chunk_first blocks. Block k of the chunk's A starts at
// tile k·T/A (rounded down), so the K = ceil((TILE + 1)·A / T) blocks
// k < K start at or before TILE and reach it in the order K - 1, ..., 0,
// then come the rest, A - 1, ..., K (after wrapping round): rank K - 1 - k
// modulo A.
#if {{DQ_SHIFT}}
__device__ __forceinline__ int dq_rank_shifted(const Walk &walk, int n, int tile) {
  const int a = walk.chunk_size, k = n - walk.chunk_first;
  const int starts = (int)min((long long)a, ((long long)(tile + 1) * a + walk.n_tiles - 1) / walk.n_tiles);
  const int r = starts - 1 - k;
  return walk.chunk_first + (r < 0 ? r + a : r);
}
#endif

// DQ_MODE ordered: query tile MB's semaphore of (BATCH, HEAD), int32, after
// the accumulator's batch x heads x seqlen_q rows of FAT_BWD_ACCUM_WIDTH
// floats, ceil(seqlen_q / kBlockM) a (batch, head) (core/bwd_launch.h).
__device__ __forceinline__ int *dq_semaphore(const fat_bwd_params &bp, int batch, int head, int mb) {
  const fat_fwd_params &p = bp.fwd;
  const long long rows = (long long)p.batch * p.heads * p.seqlen_q;
  int *const first = reinterpret_cast<int *>(bp.dq_accum + rows * FAT_BWD_ACCUM_WIDTH(p.head_dim));
  return first + ((long long)batch * p.heads + head) * ((p.seqlen_q + kBlockM - 1) / kBlockM) + mb;
}

// The semaphore's acquire and release, at the GPU's scope: what the key
// blocks before this one added is seen once the count is read; this one's
// adds are seen before the count it leaves.
__device__ __forceinline__ int ld_acquire_gpu(const int *at) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(at) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu_add(int *at, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(at), "r"(v) : "memory");
}
// Orders the generic proxy's accesses to global memory (the semaphore, the
// lanes' vector adds) with the copy engine's (the bulk reductions), both
// ways.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// The items, (key block, key head, batch), in block_coords()'s order of
// thread blocks (causal: key block slowest, heaviest first; GROUPED, so
// within each group of group_pairs (key head, batch) pairs). A block takes
// items first, first + stride, ... below count: its own linear index alone,
// or PERSISTENT blockIdx.x and every gridDim.x-th.
struct Items {
  int blocks, heads_k, count, first, stride;  // stride: PERSISTENT only
  int group_pairs;                            // GROUPED only
  // The block's item after INDEX: count (none) without PERSISTENT, so that
  // the compiler sees one pass of every loop over items.
  __device__ int next(int index) const { return kPersistent ? index + stride : count; }
  // Item INDEX's coordinates. PERSISTENT: every odd round of gridDim.x
  // items (the last may be short) is taken in reverse, so that a block
  // which drew a heavy item draws a light one next.
  __device__ BlockCoords coords(int index) const {
    if constexpr (kPersistent) {
      const int base = index - (int)blockIdx.x, n = min((int)gridDim.x, count - base);
      if ((base / (int)gridDim.x) & 1) index = base + n - 1 - (int)blockIdx.x;
    }
    if constexpr (kGrouped) {
      // Group c holds pairs c·group_pairs onwards (the last may hold fewer),
      // all their key blocks, key block slowest.
      const int pairs = count / blocks, group_items = group_pairs * blocks;
      const int c = index / group_items, in_group = index - c * group_items;
      const int n = min(group_pairs, pairs - c * group_pairs);
      const int pair = c * group_pairs + in_group % n;
      return {in_group / n, pair % heads_k, pair / heads_k};
    } else if constexpr (kIsCausal) {
      const int pairs = count / blocks;
      return {index / pairs, index % pairs % heads_k, index % pairs / heads_k};
    } else {
      return {index % blocks, index / blocks % heads_k, index / (blocks * heads_k)};
    }
  }
};

__device__ __forceinline__ Items items_of(const fat_fwd_params &p) {
  Items it;
  it.blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  it.heads_k = p.heads_k;
  it.count = it.blocks * p.heads_k * p.batch;
  it.first = kPersistent ? (int)blockIdx.x : (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  it.stride = gridDim.x;
  if constexpr (kGrouped) {
    // A pair's queries (every head of its group) hold Q and dO in the element
    // type and the dQ accumulator's fp32 rows (the template's width at most).
    const long long pair_bytes = (long long)(p.heads / p.heads_k) * p.seqlen_q * kHeadDim * (2 * 2 + 4);
    it.group_pairs = (int)max(1ll, min((long long)(it.count / it.blocks), kGroupBytes / max(1ll, pair_bytes)));
  }
  return it;
}

// DQ_SHIFT: WALK's first tile and chunk for the item of the loop's INDEX
// (ITEM, Items::coords()'s): the key blocks of its pair among the items of
// INDEX's round of the persistent grid, gridDim.x items from index -
// blockIdx.x (coords() reverses the order within a round, never across).
__device__ __forceinline__ Walk shift_walk(Walk walk, const Items &items, int index, const BlockCoords &item) {
#if {{DQ_SHIFT}}
  const int pair_first = (item.batch * items.heads_k + item.head) * items.blocks;
  const int round_first = index - (int)blockIdx.x;
  walk.chunk_first = max(0, round_first - pair_first);
  walk.chunk_size = min(items.blocks, round_first + items.stride - pair_first) - walk.chunk_first;
  walk.shift = (int)((long long)(item.block - walk.chunk_first) * walk.n_tiles / walk.chunk_size);
#endif
  return walk;
}

extern "C" __global__ void __launch_bounds__(FAT_BWD_ROW_THREADS)
fat_bwd_preprocess(const fat_bwd_params bp) { preprocess_rows(bp); }

// DQ_MODE ordered, the writer warp once the consumers have put TILE's dQ
// into the buffer at DQ_S: waits for the key blocks before ITEM's to have
// added into the tile, adds (whole 64-row blocks by bulk reduction, a
// partial one by the lanes' vector adds into its row-major rows), frees the
// buffer, and once its adds have landed, passes the tile on to the next key
// block.
__device__ __forceinline__ void ordered_dq_add(const fat_bwd_params &bp, const BlockCoords &item, const Walk &walk,
                                               int tile, u32 dq_s, int lane) {
  const fat_fwd_params &p = bp.fwd;
  const int head = item.head * walk.group + walk.hq(tile), mb = walk.mb(tile), m0 = mb * kBlockM;
  const long long row0 = ((long long)item.batch * p.heads + head) * p.seqlen_q;
  int *const sem = dq_semaphore(bp, item.batch, head, mb);
  if (lane == 0) {
#if {{DQ_SHIFT}}
    const int rank = dq_rank_shifted(walk, item.block, walk.at(tile));
#else
    const int rank = dq_rank(p, item.block, mb);
#endif
    while (ld_acquire_gpu(sem) != rank) {
    }
    fence_proxy_async_global();  // the bulk adds below come after the ones the count stands for
  }
  __syncwarp();
#pragma unroll
  for (int rb = 0; rb < kRowBlocks; rb++) {
    const int r0 = m0 + 64 * rb;
    const u32 block_s = dq_s + rb * 64 * kHeadDim * 4;
    if (r0 + 64 <= p.seqlen_q && dq_rows_whole(p.head_dim)) {
      // dq_whole_offset()'s order in the buffer and in the accumulator alike.
      if (lane == 0) bulk_reduce_add(bp.dq_accum + (row0 + r0) * kHeadDim, block_s, 64 * kHeadDim * 4);
    } else if (r0 < p.seqlen_q) {
      // The rows inside, row-major at dq_pitch() (what the conversion reads
      // there), column pairs below the head dim, a pair a lane at a time.
      float *const dq_block = bp.dq_accum + (row0 + r0) * dq_pitch(p);
      const int rows = min(64, p.seqlen_q - r0);
      for (int i = lane; i < rows * (kHeadDim / 2); i += kWarpSize) {
        const int row = i / (kHeadDim / 2), col = 2 * (i % (kHeadDim / 2));
        if (col >= p.head_dim) continue;
        float2 v;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                     : "=f"(v.x), "=f"(v.y)
                     : "r"(block_s + dq_whole_offset(row, col) * 4)
                     : "memory");
        red_add2(dq_block + row * dq_pitch(p) + col, v.x, v.y);
      }
    }
  }
  if (lane == 0) bulk_wait_read();
  __syncwarp();
  named_arrive(kDqEmptyBarrier, kDqHandThreads);  // the buffer is read
  if (lane == 0) bulk_wait();                      // the bulk adds have landed
  // Each lane's vector adds before lane 0's release (a partial tile's only:
  // fence.sc, __threadfence()'s, cost every tile more than its adds).
  if (m0 + kBlockM > p.seqlen_q || !dq_rows_whole(p.head_dim))
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  __syncwarp();
  if (lane == 0) {
    fence_proxy_async_global();  // the copy engine's adds before the release
    red_release_gpu_add(sem, 1);
  }
}

// Grid: (ceil(seqlen_k / kBlockN), heads_k, batch), or PERSISTENT (at most
// the SM count of those items, 1, 1), kThreads threads. Dynamic shared
// memory: K, V, kStages (Q, dO) tiles, kDsBuffers dSᵀ buffers, the dQ
// buffers, kStages (lse, D) rows, and 1 KiB to align the tiles. The
// tensor maps (host: core/bwd_launch.c) describe q and dout as (head_dim,
// seqlen_q, heads, batch) in boxes of 64 columns by kBlockM rows, k and v
// as (head_dim, seqlen_k, heads_k, batch) by kBlockN rows.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
fat_bwd_ws90(const fat_bwd_params bp, const __grid_constant__ TensorMap q_map,
             const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
             const __grid_constant__ TensorMap do_map) {
  const fat_fwd_params &p = bp.fwd;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) u64 barriers[2 + 2 * kStages];
  const u32 k_s = (smem_u32(smem) + 1023u) & ~1023u;   // K [kBlockN keys], slabs
  const u32 v_s = k_s + kKVBytes;                       // V
  const u32 query_s = v_s + kKVBytes;                   // kStages x (Q, dO) [kBlockM queries]
  const u32 ds_s = query_s + kStages * 2 * kTileBytes;  // kDsBuffers x dSᵀ [kBlockN keys][kBlockM queries]
  const u32 p_s = ds_s + kDsBuffers * kDsBytes;         // kDSplit 2: kDsBuffers x Pᵀ, as dSᵀ
  const u32 dq_s = p_s + (kDSplit > 1 ? kDsBuffers * kDsBytes : 0);  // kDqBuffers x dQ, dq_whole_offset()'s order
  const u32 stats_s = dq_s + (kDqBulk ? kDqBuffers * kDqBytes : 0);  // kStages x (lse·log2e, D) [kBlockM]
  float *const stats = reinterpret_cast<float *>(smem + (stats_s - smem_u32(smem)));
  const u32 kv_full = smem_u32(&barriers[0]);
  const u32 kv_empty = smem_u32(&barriers[1]);  // PERSISTENT: K and V read for the last time
  auto q_full = [&](int s) { return smem_u32(&barriers[2 + s]); };
  auto q_empty = [&](int s) { return smem_u32(&barriers[2 + kStages + s]); };
  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    mbar_init(kv_empty, kConsumerThreads);
    for (int s = 0; s < kStages; s++) {
      mbar_init(q_full(s), kWarpSize);          // the producer warp's lanes
      mbar_init(q_empty(s), kConsumerThreads);  // every consumer thread
    }
    mbar_init_fence();
  }
  __syncthreads();

  // Every role walks the same items and counts alike what passes through
  // the barriers: loaded, the items with query tiles (kv_full's and
  // kv_empty's phases) and their tiles (ring slot `it`: buffer it % kStages,
  // its (it / kStages)-th use).
  const Items items = items_of(p);
  const int lane = threadIdx.x % kWarpSize;

  if (threadIdx.x < 128) {
    if constexpr (kConsumers > 1) regs_release<kProducerRegs>();
    const int warp = threadIdx.x / kWarpSize;
    if (warp == 0) {
      // ---- producer ---------------------------------------------------------
      if (lane == 0) {
        tma_prefetch(q_map);
        tma_prefetch(do_map);
        tma_prefetch(k_map);
        tma_prefetch(v_map);
      }
      int it = 0, loaded = 0;
      for (int index = items.first; index < items.count; index = items.next(index)) {
        const BlockCoords item = items.coords(index);
        const int n0 = item.block * kBlockN, head_k = item.head, batch = item.batch;
        const Walk walk = shift_walk(walk_of(p, n0), items, index, item);
        // One tile of MAP: its 64-column slabs, ROWS rows each, from row ROW.
        auto load = [&](const TensorMap &map, u32 dst, u32 bar, int rows, int row, int h, u64 policy) {
#pragma unroll
          for (int slab = 0; slab < kHeadDim / 64; slab++)
            tma_load_4d(dst + slab * rows * 128, map, bar, slab * 64, row, h, batch, policy);
        };
        for (int tile = 0; tile < walk.n_tiles; tile++, it++) {
          const int s = it % kStages, head = head_k * walk.group + walk.hq(tile), m0 = walk.mb(tile) * kBlockM;
          mbar_wait(q_empty(s), ((it / kStages) & 1) ^ 1);
          if (lane == 0) {
            mbar_expect_tx(q_full(s), 2 * kTileBytes);
            const u32 q_t = query_s + s * 2 * kTileBytes;
            load(q_map, q_t, q_full(s), kBlockM, m0, head, kEvictLast);
            load(do_map, q_t + kTileBytes, q_full(s), kBlockM, m0, head, kEvictLast);
            // K and V are this item's alone (Q and dO every key block's of
            // the head), after its first tile: PERSISTENT, once the
            // consumers have read the last item's.
            if (tile == 0) {
              mbar_wait(kv_empty, (loaded & 1) ^ 1);
              mbar_arrive_expect(kv_full, 2 * kKVBytes);
              load(k_map, k_s, kv_full, kBlockN, n0, head_k, kEvictFirst);
              load(v_map, v_s, kv_full, kBlockN, n0, head_k, kEvictFirst);
            }
          }
          // The tile's lse (as P needs it) and D, a row a lane at a time.
          const long long row0 = ((long long)batch * p.heads + head) * p.seqlen_q;
          float *lse_s = stats + s * 2 * kBlockM;
          for (int r = lane; r < kBlockM; r += kWarpSize) {
            const RowStats st = row_stats(raw_row_stats(p.lse + row0, bp.delta + row0, m0 + r, p.seqlen_q));
            lse_s[r] = st.lse_log2;
            lse_s[kBlockM + r] = st.delta;
          }
          mbar_arrive(q_full(s));  // releases this lane's stores
        }
        if (walk.n_tiles > 0) loaded++;
      }
    } else if (warp == 1) {
      // ---- dQ writer --------------------------------------------------------
      // The consumers wait for the buffer before every bulk tile but the
      // block's first, and once more at the end: the writer frees it after
      // every one.
      for (int index = items.first; index < items.count; index = items.next(index)) {
        const BlockCoords item = items.coords(index);
        const int head_k = item.head, batch = item.batch;
        const Walk walk = shift_walk(walk_of(p, item.block * kBlockN), items, index, item);
        if (walk.bulk_tiles(p.head_dim) == 0) continue;
        for (int tile = 0; tile < walk.n_tiles; tile++) {
          if (!walk.dq_bulk(tile, p.head_dim)) continue;
          named_sync(kDqFullBarrier, kDqHandThreads);
          if constexpr (kDqOrdered) {
            ordered_dq_add(bp, item, walk, tile, dq_s, lane);
            continue;
          }
          if (lane == 0) {
            const int head = head_k * walk.group + walk.hq(tile), m0 = walk.mb(tile) * kBlockM;
            const long long row0 = ((long long)batch * p.heads + head) * p.seqlen_q;
#pragma unroll
            for (int b = 0; b < kDqBuffers; b++)
              bulk_reduce_add(bp.dq_accum + (row0 + m0) * kHeadDim, dq_s + b * kDqBytes, kDqBytes);
            bulk_wait_read();
          }
          __syncwarp();
          named_arrive(kDqEmptyBarrier, kDqHandThreads);
        }
      }
      if (lane == 0) bulk_wait();  // the sums have landed before the block's shared memory goes
    }
    return;
  }

  // ---- consumers ------------------------------------------------------------
  if constexpr (kConsumers > 1) regs_claim<kConsumerRegs>();
  const int ctid = threadIdx.x - 128;  // thread among the consumers
  // wg through a shuffle: ptxas then knows it is warp-uniform and keeps what
  // derives from it (the descriptors of a consumer's own keys) in uniform
  // registers.
  const int warp = ctid / kWarpSize, wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  const int g = lane / 4, t = lane % 4;  // accumulator coordinates: row group, column pair
  const int offset = p.seqlen_k - p.seqlen_q;
  const KeyWindow window = key_window(p);

  // This thread's keys (accumulator rows) within the block: row_key and
  // row_key + 8, 16 of its key group's 64 per warp. kDSplit 2: the
  // group's consumer `half` has Sᵀ's queries from q_first and dK's and
  // dV's columns from d_first.
  const int row_key = 64 * FAT_KEY_GROUP + 16 * (warp % 4) + g;
#if {{HEAD_DIM}} == 192
  const int half = wg % kDSplit, q_first = half * kSCols;
#elif {{HEAD_DIM}} > 128
  const int half = wg % kDSplit, q_first = half * kSCols, d_first = half * kDCols;
#endif
  const float scale_log2 = p.scale_log2;
  // Where accumulators 4nt + 2h and + 1 sit in a [key][query] tile (dSᵀ):
  // one slab per 64 queries, the 128-byte swizzle (row % 8 = g).
  auto kq_offset = [&](int nt, int h) -> u32 {
    return (nt / 8) * kBlockN * 128 + (row_key + 8 * h) * 128 + (((nt % 8) ^ g) * 16) + 4 * t;
  };

  int it = 0, loaded = 0, bulk_done = 0;
  for (int index = items.first; index < items.count; index = items.next(index)) {
    const BlockCoords item = items.coords(index);
    const int n0 = item.block * kBlockN, head_k = item.head, batch = item.batch;
    const Walk walk = shift_walk(walk_of(p, n0), items, index, item);
    const int n_tiles = walk.n_tiles;
    float dk[kDRegs], dv[kDRegs];
#pragma unroll
    for (int i = 0; i < kDRegs; i++) dk[i] = dv[i] = 0.f;
    // Accumulator i of Sᵀ: key row_key + 8·((i % 4) / 2), query m0 + 8·(i /
    // 4) + 2t + i % 2. Hidden pairs and keys past the end get S = −inf (P =
    // 0); queries past the end have lse = +inf (P = 0).
    auto mask_scores = [&](float (&x)[kSRegs], int m0) {
      if (n0 + kBlockN > p.seqlen_k || window_cuts(window, n0, m0 + offset)) {
#pragma unroll
        for (int i = 0; i < kSRegs; i++) {
          const int key = n0 + row_key + 8 * ((i % 4) / 2);
          const int pos = FAT_Q(m0) + 8 * (i / 4) + 2 * t + i % 2 + offset;
          if (key >= p.seqlen_k || hidden(window, key, pos)) x[i] = neg_inf();
        }
      }
    };
    if (n_tiles > 0) mbar_wait(kv_full, loaded & 1);
    for (int tile = 0; tile < n_tiles; tile++, it++) {
      const int s = it % kStages;
      const int head = head_k * walk.group + walk.hq(tile), m0 = walk.mb(tile) * kBlockM;
      const u32 q_t = query_s + s * 2 * kTileBytes, do_t = q_t + kTileBytes;
      const u32 ds_t = ds_s + (it % kDsBuffers) * kDsBytes;
      const float *lse_s = FAT_Q(stats + s * 2 * kBlockM), *delta_s = lse_s + kBlockM;
      mbar_wait(q_full(s), (it / kStages) & 1);
      // STATS_AHEAD: this thread's columns' lse (2t and 2t + 1 of each
      // 8-query group) loaded under the products below, D under P's
      // arithmetic (both under the products spilled at d96 and d128).
      float lse_r[kSCols / 4], delta_r[kSCols / 4];
      auto stats_ahead = [&](const float *from, float (&to)[kSCols / 4]) {
#pragma unroll
        for (int nt = 0; nt < kSCols / 8; nt++) {
          const float2 v = *reinterpret_cast<const float2 *>(from + 8 * nt + 2 * t);
          to[2 * nt] = v.x, to[2 * nt + 1] = v.y;
        }
        pin(to);
      };
      if constexpr (kStatsAhead) stats_ahead(lse_s, lse_r);

      // Sᵀ and dPᵀ: this warpgroup's 64 keys x kSCols queries, two groups.
      float sc[kSRegs], dp[kSRegs];
#pragma unroll
      for (int i = 0; i < kSRegs; i++) sc[i] = dp[i] = 0.f;
      pin(sc);
      pin(dp);
      {
        const u64 dk_a = descriptor(k_s + FAT_KEY_GROUP * 64 * 128, 16, 1024), dq_b = descriptor(FAT_Q128(q_t), 16, 1024);
        const u64 dv_a = descriptor(v_s + FAT_KEY_GROUP * 64 * 128, 16, 1024), ddo_b = descriptor(FAT_Q128(do_t), 16, 1024);
        wgmma_fence();
        keys_by_queries(sc, dk_a, dq_b);
        wgmma_commit();
        keys_by_queries(dp, dv_a, ddo_b);
        wgmma_commit();
      }
      wgmma_wait<1>();
      pin(sc);
      if constexpr (kStatsAhead) stats_ahead(delta_s, delta_r);
      mask_scores(sc, m0);
      // Pᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − D) as the A fragments of dV's and dK's
      // products, dSᵀ also into ds_t; then dV += Pᵀ·dO and dK += dSᵀ·Q
      // (bwd_wgmma90.cu says the layouts). kDSplit 2: Pᵀ into p_t too, and
      // the products over this consumer's columns with every query's Pᵀ
      // and dSᵀ from shared memory.
      const u64 ddo_b = descriptor(FAT_D_SLAB(do_t), kBlockM * 128, 1024), dq_b = descriptor(FAT_D_SLAB(q_t), kBlockM * 128, 1024);
#if {{HEAD_DIM}} > 128
      const u32 p_t = p_s + (it % kDsBuffers) * kDsBytes;
#endif
      u32 pa[kSSteps][4], da[kSSteps][4];
#pragma unroll
      for (int nt = 0; nt < kSCols / 8; nt++) {
        float2 lse;
        if constexpr (kStatsAhead)
          lse = make_float2(lse_r[2 * nt], lse_r[2 * nt + 1]);
        else
          lse = *reinterpret_cast<const float2 *>(lse_s + 8 * nt + 2 * t);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int i = 4 * nt + 2 * h;
          sc[i] = fast_exp2(sc[i] * scale_log2 - lse.x);
          sc[i + 1] = fast_exp2(sc[i + 1] * scale_log2 - lse.y);
          if constexpr (kEarlyDv) pa[nt / 2][h + 2 * (nt % 2)] = pack2(sc[i], sc[i + 1]);
        }
      }
      if constexpr (kEarlyDv) {
        pin(pa);
        pin(dv);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kSSteps; kk++) wgmma_rs<kDCols>(dv, pa[kk], desc_add(ddo_b, kk * 2048));
        wgmma_commit();
        wgmma_wait<1>();  // dPᵀ
      } else {
        wgmma_wait<0>();
      }
      pin(dp);
#pragma unroll
      for (int nt = 0; nt < kSCols / 8; nt++) {
        float2 delta;
        if constexpr (kStatsAhead)
          delta = make_float2(delta_r[2 * nt], delta_r[2 * nt + 1]);
        else
          delta = *reinterpret_cast<const float2 *>(delta_s + 8 * nt + 2 * t);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int i = 4 * nt + 2 * h;
          const u32 ds2 = pack2(sc[i] * (dp[i] - delta.x), sc[i + 1] * (dp[i + 1] - delta.y));
          if constexpr (!kEarlyDv) pa[nt / 2][h + 2 * (nt % 2)] = pack2(sc[i], sc[i + 1]);
          da[nt / 2][h + 2 * (nt % 2)] = ds2;
          if constexpr (!kDsStsm)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(ds_t + kq_offset(FAT_QG(nt), h)), "r"(ds2) : "memory");
#if {{HEAD_DIM}} > 128
          if constexpr (!kDsStsm)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(p_t + kq_offset(FAT_QG(nt), h)),
                         "r"(pa[nt / 2][h + 2 * (nt % 2)])
                         : "memory");
#endif
        }
      }
      if constexpr (kDsStsm) {
        // da[kk] holds the 8 x 8 blocks (query groups 2kk, 2kk + 1) x (keys
        // row_key's 8, and 8 more) in stmatrix's order: lane 4g + t has row
        // g's columns 2t, 2t + 1 of each, matrix m = 2·(group - 2kk) + h.
        // Lane L gives the address of row L % 8 of matrix L / 8: its key,
        // its query group, the 128-byte swizzle as kq_offset's (row % 8 is
        // the key's, L % 8).
        const int m = lane / 8, r = lane % 8;
        const int key = 64 * FAT_KEY_GROUP + 16 * (warp % 4) + 8 * (m % 2) + r;
#pragma unroll
        for (int kk = 0; kk < kSSteps; kk++) {
          const int nt = FAT_QG(2 * kk + m / 2);
          const u32 row = ds_t + (nt / 8) * kBlockN * 128 + key * 128 + (((nt % 8) ^ r) * 16);
          asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row),
                       "r"(da[kk][0]), "r"(da[kk][1]), "r"(da[kk][2]), "r"(da[kk][3])
                       : "memory");
#if {{HEAD_DIM}} > 128
          // Pᵀ the same way into p_t.
          asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row - ds_t + p_t),
                       "r"(pa[kk][0]), "r"(pa[kk][1]), "r"(pa[kk][2]), "r"(pa[kk][3])
                       : "memory");
#endif
        }
      }
      if constexpr (!kEarlyDv) {
        pin(pa);
        pin(dv);
      }
      pin(da);
      pin(dk);
#if {{HEAD_DIM}} > 128
      // Both halves' Pᵀ and dSᵀ written and visible to the tensor cores (the
      // other buffers are free, as below); then the products over this
      // consumer's columns, A = Pᵀ or dSᵀ of the key group's 64 keys by
      // every query ([key][query]: K-major), B = dO or Q (MN-major).
      fence_async_shared();
      named_sync(kDsBarrier, kConsumerThreads);
      {
        const u64 p_a = descriptor(p_t + FAT_KEY_GROUP * 64 * 128, 16, 1024);
        const u64 ds_a = descriptor(ds_t + FAT_KEY_GROUP * 64 * 128, 16, 1024);
#if {{HEAD_DIM}} == 192
        // B's half slab: slab 1, from column 32 for the second consumer.
        const u64 ddo_h = descriptor(do_t + kBlockM * 128 + half * 64, kBlockM * 128, 1024);
        const u64 dq_h = descriptor(q_t + kBlockM * 128 + half * 64, kBlockM * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) {
          const u64 a = desc_add(p_a, (kk / 4) * kBlockN * 128 + (kk % 4) * 32);
          wgmma_slab64(dv, a, desc_add(ddo_b, kk * 2048));
          wgmma_half32(dv, a, desc_add(ddo_h, kk * 2048));
        }
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) {
          const u64 a = desc_add(ds_a, (kk / 4) * kBlockN * 128 + (kk % 4) * 32);
          wgmma_slab64(dk, a, desc_add(dq_b, kk * 2048));
          wgmma_half32(dk, a, desc_add(dq_h, kk * 2048));
        }
#else
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++)
          wgmma_ss<kDCols, false, true>(dv, desc_add(p_a, (kk / 4) * kBlockN * 128 + (kk % 4) * 32),
                                        desc_add(ddo_b, kk * 2048));
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++)
          wgmma_ss<kDCols, false, true>(dk, desc_add(ds_a, (kk / 4) * kBlockN * 128 + (kk % 4) * 32),
                                        desc_add(dq_b, kk * 2048));
#endif
        wgmma_commit();
      }
#else
      wgmma_fence();
      if constexpr (!kEarlyDv) {
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) wgmma_rs<kHeadDim>(dv, pa[kk], desc_add(ddo_b, kk * 2048));
      }
#pragma unroll
      for (int kk = 0; kk < kPSteps; kk++) wgmma_rs<kHeadDim>(dk, da[kk], desc_add(dq_b, kk * 2048));
      wgmma_commit();
      // Every consumer's dSᵀ written and visible to the tensor cores. The
      // other buffer is free: each consumer passed this meeting after its
      // last tile's dQ product, which read it. kOwnKeys: this consumer's rows,
      // which its own last product read.
      fence_async_shared();
      if constexpr (kOwnKeys)
        named_sync(kOwnDsBarrier + wg, 128);
      else
        named_sync(kDsBarrier, kConsumerThreads);
#endif
      wgmma_wait<0>();  // dV and dK read Q and dO: the buffer goes back
      pin(pa);
      pin(da);
      pin(dv);
      pin(dk);
      mbar_arrive(q_empty(s));

      // dQ += dS·K over the block's kBlockN keys (kDqSplitK, kOwnKeys: this
      // consumer's 64): A = dS, stored [key][query] (MN-major, one slab per 64
      // queries); B = K, [key][column] (MN-major); 16 keys (2048 bytes) a
      // k-step.
      const bool bulk = walk.dq_bulk(tile, p.head_dim);
      // kOwnKeys: the second consumer adds its share to the first's.
      const bool adds = kOwnKeys && wg == 1;
      // The buffer is free once the writer has read the last tile's (the
      // adding consumer follows the first, below).
      if (bulk && !adds && bulk_done > 0) named_sync(kDqEmptyBarrier, kDqHandThreads);
#pragma unroll
      for (int task = 0; task < kDqTasks; task++) {
        // 64-row block
        const int rb = kOwnKeys ? task / kDqColTasks : kDqShares > 1 ? wg / kDqShares : wg + task * kConsumers;
#if {{HEAD_DIM}} == 192
        const int col0 = task == 0 ? half * 128 : 64 + half * 32;
#elif {{HEAD_DIM}} > 128
        const int col0 = d_first + task * kDqN;
#else
        const int col0 = kOwnKeys ? (task % kDqColTasks) * kDqN : (wg % kDqSplit) * kDqN;
#endif
        const int kk0 = kOwnKeys || kDqSplitK ? (wg % kConsumers) * kDqKSteps : 0;  // first k-step
        const u32 dq_buf = dq_s + (kDqSplitK ? wg % kDqShares : 0) * kDqBytes;
        float dq[kDqN / 2];
#pragma unroll
        for (int i = 0; i < kDqN / 2; i++) dq[i] = 0.f;
        pin(dq);
        const u64 ds_a = descriptor(ds_t + rb * kBlockN * 128, kBlockN * 128, 1024);
#if {{HEAD_DIM}} == 192
        // The half slab's B: 64 bytes into slab 1's rows for the second consumer.
        const u64 k_b = descriptor(k_s + (col0 / 64) * kBlockN * 128 + (col0 % 64) * 2, kBlockN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = kk0; kk < kk0 + kDqKSteps; kk++) {
          if (task == 0)
            wgmma_ss<kDqN, true>(dq, desc_add(ds_a, kk * 2048), desc_add(k_b, kk * 2048));
          else
            wgmma_dq32(dq, desc_add(ds_a, kk * 2048), desc_add(k_b, kk * 2048));
        }
#else
        const u64 k_b = descriptor(k_s + (col0 / 64) * kBlockN * 128, kBlockN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = kk0; kk < kk0 + kDqKSteps; kk++)
          wgmma_ss<kDqN, true>(dq, desc_add(ds_a, kk * 2048), desc_add(k_b, kk * 2048));
#endif
        wgmma_commit();
        wgmma_wait<0>();
        pin(dq);
        const int r0 = m0 + 64 * rb;
        if (bulk) {
          // Into the dQ buffer in dq_whole_offset()'s order (one warp's
          // 16-byte stores cover 512 contiguous bytes); where this consumer
          // adds, once the first has written this tile's share (each thread
          // adds to the floats its counterpart there wrote).
          if (adds && task == 0) named_sync(kDqChainBarrier, kConsumerThreads);
          const u32 lane_base = dq_buf + (rb * 64 * kHeadDim + (warp % 4) * 2 * (kHeadDim / 16) * 128 + lane * 4) * 4;
#pragma unroll
          for (int h = 0; h < 2; h++)
#pragma unroll
            for (int np = 0; np < FAT_DQ_N(task) / 16; np++) {
              const int i = 8 * np + 2 * h;
              const u32 at_s = lane_base + (h * (kHeadDim / 16) + col0 / 16 + np) * 128 * 4;
              float4 v = make_float4(dq[i], dq[i + 1], dq[i + 4], dq[i + 5]);
              if (adds) {
                float4 first;
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                             : "=f"(first.x), "=f"(first.y), "=f"(first.z), "=f"(first.w)
                             : "r"(at_s)
                             : "memory");
                v.x += first.x, v.y += first.y, v.z += first.z, v.w += first.w;
              }
              asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(at_s), "f"(v.x), "f"(v.y), "f"(v.z),
                           "f"(v.w)
                           : "memory");
            }
        } else {
          // Straight from the registers: a whole 64-row block in
          // dq_whole_offset()'s order (what the conversion reads there), a
          // partial one row-major (rows past the end and columns past the
          // head dim left out). The scale comes in fat_bwd_convert_dq.
          const long long row0 = ((long long)batch * p.heads + head) * p.seqlen_q;
          float *dq_block = bp.dq_accum + (row0 + r0) * dq_pitch(p);
          if (r0 + 64 <= p.seqlen_q && dq_rows_whole(p.head_dim)) {
            float *lane_base = dq_block + ((warp % 4) * 2 * (kHeadDim / 16)) * 128 + lane * 4;
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
              for (int np = 0; np < FAT_DQ_N(task) / 16; np++) {
                const int i = 8 * np + 2 * h;
                red_add4(lane_base + (h * (kHeadDim / 16) + col0 / 16 + np) * 128, dq[i], dq[i + 1], dq[i + 4],
                         dq[i + 5]);
              }
          } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
              const int row = 16 * (warp % 4) + g + 8 * h;
              if (r0 + row >= p.seqlen_q) continue;
#pragma unroll
              for (int nt = 0; nt < FAT_DQ_N(task) / 8; nt++) {
                const int col = col0 + 8 * nt + 2 * t;
                if (col < p.head_dim)
                red_add2(dq_block + row * dq_pitch(p) + col, dq[4 * nt + 2 * h], dq[4 * nt + 2 * h + 1]);
              }
            }
          }
        }
      }
      if (bulk) {
        if (kOwnKeys && !adds) {
          named_arrive(kDqChainBarrier, kConsumerThreads);  // to the second consumer
        } else {
          fence_async_shared();  // the copy engine reads what these stores wrote
          named_arrive(kDqFullBarrier, kDqHandThreads);
        }
        bulk_done++;
      }
    }
    // The last tile's dQ product was the last to read K: the producer may
    // load the next item's.
    if (n_tiles > 0) {
      mbar_arrive(kv_empty);
      loaded++;
    }

    // dK = scale · Σ dSᵀ·Q and dV in the element type: key row_key + 8h,
    // 16 bytes (8 columns) a store. A quad's four lanes hold column pairs
    // 2t of the same 8-column groups; quad_transpose gives lane t all of
    // group 4k + t, so that a warp's store covers 64 contiguous bytes of
    // each of its 8 keys (a pair a store left the stores throttled and half
    // of each sector unwritten: 9 % of the stall samples at causal d128
    // s2048, ncu, notes/kernel-log.md ws5). The shuffles run in every lane;
    // keys past the end and 8-column groups past the head dim are not
    // stored.
    elem_t *dk_g = at<elem_t>(bp.dk, batch * bp.dk_batch_stride + head_k * bp.dk_head_stride);
    elem_t *dv_g = at<elem_t>(bp.dv, batch * bp.dv_batch_stride + head_k * bp.dv_head_stride);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int key = n0 + row_key + 8 * h;
#pragma unroll
      for (int k = 0; k < kDCols / 32; k++) {
        const int i = 16 * k + 2 * h;  // accumulators of group 4k: 4·dt + 2h
        const uint4 dk4 = quad_transpose(pack_quad_row(dk, i, p.softmax_scale), t);
        const uint4 dv4 = quad_transpose(pack_quad_row(dv, i, 1.f), t);
        const int col = FAT_D(8 * (4 * k + t));
        if (key < p.seqlen_k && col < p.head_dim) {
          *reinterpret_cast<uint4 *>(dk_g + key * bp.dk_row_stride + col) = dk4;
          *reinterpret_cast<uint4 *>(dv_g + key * bp.dv_row_stride + col) = dv4;
        }
      }
    }
  }
  // The writer's freeing of the buffer after the block's last bulk tile.
  if (bulk_done > 0 && !(kOwnKeys && wg == 1)) named_sync(kDqEmptyBarrier, kDqHandThreads);
}

// Atomic mode only: no separate dQ pass (the launcher never starts it).
extern "C" __global__ void __launch_bounds__(kThreads) fat_bwd_dq(const fat_bwd_params bp) {}

// dQ = scale · dq_accum in the element type, whole 64-row blocks in
// dq_whole_offset()'s order (bwd_common.cuh). Grid as fat_bwd_preprocess.
extern "C" __global__ void __launch_bounds__(FAT_BWD_ROW_THREADS)
fat_bwd_convert_dq(const fat_bwd_params bp) {
  convert_dq_rows<64>(bp, [](int row, int col) { return dq_whole_offset(row, col); });
}
