// FlashAttention backward on Hopper's warpgroup matrix products (wgmma,
// sm_90a): bwd_mma80.cu's algorithm (which says what the gradients are),
// its products moved to the tensor cores' asynchronous path, the key block
// of each warpgroup as the rows of every product it owns.
//
// One thread block owns kBlockN keys of one (batch, key head), 64 per
// warpgroup of 128 threads; K and V stay in shared memory while the block
// walks the query tiles (kBlockM rows, every query head of its group),
// kStages of them in flight (cp.async from every thread). Per tile, with
// the warpgroup's 64 keys as M:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ   wgmma m64n{kBlockM}k16, all K-major in shared memory
//   Pᵀ = exp2(Sᵀ·scale_log2 − lse·log2e) and dSᵀ = Pᵀ ∘ (dPᵀ − D) on the
//   accumulators (a query's lse and D read from shared memory by column),
//   rounded straight into A fragments, dSᵀ also into shared memory
//   dV += Pᵀ·dO, dK += dSᵀ·Q   wgmma m64n{kHeadDim}k16, A from registers,
//                              dO and Q N-major (the tiles as copied)
//   dQ += dS·K                 wgmma m64n{kDqN}k16 over all kBlockN keys of the
//                              block, dS (dSᵀ as stored) and K MN-major
// and dQ's share goes to the fp32 accumulator with vector reductions
// (atomic mode only: the deterministic mode is mma80's separate pass).
// Masks are bottom-right aligned, tiles no pair of which is visible are
// skipped, a row that sees no key gets zero gradients (bwd_common.cuh).
//
// Past head dim 128, a warpgroup's dK and dV (a head dim's worth of
// accumulators each) no longer fit its registers beside Sᵀ: two
// warpgroups share the 64 keys, each owning half of dK's and dV's columns.
// The first computes Sᵀ and Pᵀ, the second dPᵀ and dSᵀ (from Pᵀ, passed
// through shared memory in the element type), and both take dV's and
// dK's products for their columns with Pᵀ and dSᵀ from shared memory.
//
// The template's head dim is whole 64-column slabs; a problem's head dim
// below it (96 on the 128 template) loads zero columns, which add nothing,
// and no gradient is written there. Tiles are 64-column slabs of 128-byte
// rows in wgmma's 128-byte swizzle (wgmma.cuh). Parameters in double
// braces are substituted by generator/expand.lua; they change speed, never
// results.
#include "fat_abi.h"
#include "fat_abi_bwd.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};   // query rows per tile
constexpr int kBlockN = {{BLOCK_N}};   // keys per thread block: 64 per warpgroup
constexpr int kStages = {{STAGES}};    // query tiles in flight
constexpr bool kIsBf16 = {{IS_BF16}};
constexpr bool kIsCausal = {{IS_CAUSAL}};
constexpr bool kIsLocal = {{IS_LOCAL}};
constexpr bool kDqMode_atomic = true;
constexpr bool kDqSeparate = false;
static_assert(kDqMode_{{DQ_MODE}}, "atomic dQ only: the deterministic mode is mma80's separate pass");
#if {{IS_BF16}}
#define FAT_ELEM "bf16"
#else
#define FAT_ELEM "f16"
#endif

constexpr int kWarpSize = 32;
constexpr int kChunk = 8;  // elements of one 16-byte copy
constexpr float kLog2e = 1.4426950408889634f;
// Enumerators, not constexpr variables: NVRTC writes every constexpr
// variable at namespace scope into the cubin, so a new one would change
// every variant's cubin and `fatune rehash` (which compares cubins byte
// for byte) could not carry the shipped winners over.
enum : int {
  kDSplit = kHeadDim > 128 ? 2 : 1,  // warpgroups sharing 64 keys
  kKeyGroups = kBlockN / 64,
  kDCols = kHeadDim / kDSplit,       // dK and dV columns of a warpgroup
};
constexpr int kWarpgroups = kKeyGroups * kDSplit;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kRowBlocks = kBlockM / 64;                  // dQ's 64-row products per tile
constexpr unsigned kTileBytes = kBlockM * kHeadDim * 2;   // a Q or dO tile
constexpr unsigned kKVBytes = kBlockN * kHeadDim * 2;     // K or V
constexpr unsigned kDsBytes = kBlockN * kBlockM * 2;      // dSᵀ: [key][query]
enum : unsigned { kPBytes = kDSplit > 1 ? kDsBytes : 0 };  // Pᵀ, where the warpgroups split
constexpr int kSRegs = kBlockM / 2;                       // Sᵀ (and dPᵀ) accumulators a thread
constexpr int kDRegs = kDCols / 2;                        // dK (and dV) accumulators a thread
constexpr int kPSteps = kBlockM / 16;                     // k-steps of dV and dK
// dV's product issued before dSᵀ is computed needs Sᵀ (as P), dPᵀ, P's A
// fragments, dK and dV in registers at once. Where they exceed 208 (d64
// with 128-query tiles: 224) ptxas spilled, and the early issue measured 8 %
// slower there; at 208 (d128, 64-query tiles) 3-9 % faster (H200,
// notes/kernel-log.md w2).
constexpr bool kEarlyDv = kDSplit == 1 && kSRegs * 2 + kBlockM / 4 + kDRegs * 2 <= 208;
// dQ (kBlockM x kHeadDim) over the warpgroups: whole 64-row blocks each,
// and where there are more warpgroups than row blocks, column slices.
constexpr int kDqSplit = kWarpgroups > kRowBlocks ? kWarpgroups / kRowBlocks : 1;
constexpr int kDqN = kHeadDim / kDqSplit;
constexpr int kDqTasks = kRowBlocks > kWarpgroups ? kRowBlocks / kWarpgroups : 1;

static_assert(kBlockM == 64 || kBlockM == 128, "Sᵀ's N: 64 or 128 queries");
static_assert(kBlockN == 64 || kBlockN == 128, "one or two warpgroups of 64 keys");
static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "whole slabs, halves of 256 whole slabs");
static_assert(kDSplit == 1 || kKeyGroups == 1, "a split pair's meetings are the block's barriers");
static_assert(kDqN % 64 == 0 && kDqN <= 128, "dQ's column slices: whole slabs of K, N at most 128");
static_assert(kStages == 1 || kStages == 2, "one query tile, or one in flight beside it");
static_assert(!(kIsCausal && kIsLocal), "one mask per variant");

#include "fat_device.cuh"
#include "wgmma.cuh"
#include "bwd_common.cuh"

// Atomic dQ's fp32 accumulator within a whole 64-row block (all rows
// inside, head_dim = kHeadDim): each warp's accumulator fragments in
// 128-float blocks, so that one warp's 16-byte reductions cover 512
// contiguous bytes. Block (warp, h, np) holds rows 16·warp + g + 8h,
// columns of the 8-column tiles 2np and 2np + 1: lane g·4 + t's four floats
// are (row, columns 2t, 2t + 1) of each. Partial blocks stay row-major.
__device__ __forceinline__ int dq_whole_offset(int row, int col) {
  const int warp = row / 16, h = row / 8 % 2, g = row % 8;
  const int nt = col / 8, t = col / 2 % 4, e = col % 2;
  const int block = (warp * 2 + h) * (kHeadDim / 16) + nt / 2;
  return (block * kWarpSize + g * 4 + t) * 4 + (nt % 2) * 2 + e;
}

// acc += A·Bᵀ over the head dim for a warpgroup's 64 keys (A: rows of a
// kBlockN-row tile) and a tile's kBlockM queries (B): both K-major; k-step
// ks is slab ks / 4, 32 bytes further per step in it. Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ.
__device__ __forceinline__ void keys_by_queries(float (&acc)[kSRegs], u64 a, u64 b) {
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ks++) {
    const u32 in_slab = (ks % 4) * 32;
    wgmma_ss<kBlockM>(acc, desc_add(a, (ks / 4) * kBlockN * 128 + in_slab), desc_add(b, (ks / 4) * kBlockM * 128 + in_slab));
  }
}

// Issues acc += A·B over a tile's kBlockM queries for a split warpgroup's
// kDCols columns, one commit group: A = Pᵀ or dSᵀ at a_tile (the
// warpgroup's 64 keys of a [key][query] tile, K-major as K in Sᵀ's
// product), B = dO's or Q's column slabs from b_tile (N-major), 16 queries
// (2048 bytes) a k-step.
__device__ __forceinline__ void keys_by_columns(float (&acc)[kDRegs], u32 a_tile, u32 b_tile) {
  const u64 a = descriptor(a_tile, 16, 1024), b = descriptor(b_tile, kBlockM * 128, 1024);
  pin(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kPSteps; kk++)
    wgmma_ss<kDCols, false, true>(acc, desc_add(a, (kk / 4) * kBlockN * 128 + (kk % 4) * 32), desc_add(b, kk * 2048));
  wgmma_commit();
}

extern "C" __global__ void __launch_bounds__(FAT_BWD_ROW_THREADS)
fat_bwd_preprocess(const fat_bwd_params bp) { preprocess_rows(bp); }

// Grid: (ceil(seqlen_k / kBlockN), heads_k, batch), kThreads threads.
// Dynamic shared memory: K, V, kStages (Q, dO) tiles, dSᵀ, Pᵀ (split
// warpgroups only), the tile's lse and D, and 1 KiB to align the tiles.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
fat_bwd_wgmma90(const fat_bwd_params bp) {
  const fat_fwd_params &p = bp.fwd;
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 k_s = (smem_u32(smem) + 1023u) & ~1023u;   // K [kBlockN keys], slabs
  const u32 v_s = k_s + kKVBytes;                       // V
  const u32 query_s = v_s + kKVBytes;                   // kStages x (Q, dO) [kBlockM queries]
  const u32 ds_s = query_s + kStages * 2 * kTileBytes;  // dSᵀ [kBlockN keys][kBlockM queries]
  const u32 p_s = ds_s + kDsBytes;                      // Pᵀ, as dSᵀ
  float *lse_s = reinterpret_cast<float *>(smem + (p_s + kPBytes - smem_u32(smem)));  // [kBlockM]
  float *delta_s = lse_s + kBlockM;                                                      // [kBlockM]

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize, wg = warp / 4;
  const int kg = wg / kDSplit, col_half = wg % kDSplit;  // key group; which half of dK's and dV's columns
  const int g = lane / 4, t = lane % 4;  // accumulator coordinates: row group, column pair
  // Causal: a key block sees fewer query tiles the later it starts.
  const BlockCoords coords = block_coords<false>();
  const int n0 = coords.block * kBlockN, head_k = coords.head, batch = coords.batch;
  const int group = p.heads / p.heads_k;
  const int offset = p.seqlen_k - p.seqlen_q;  // bottom-right alignment: query i sits at key i + offset
  const KeyWindow window = key_window(p);

  load_tile<kBlockN>(k_s, at<elem_t>(p.k, batch * p.k_batch_stride + head_k * p.k_head_stride +
                                             (long long)n0 * p.k_row_stride),
                     p.k_row_stride, p.seqlen_k - n0, p.head_dim, tid);
  load_tile<kBlockN>(v_s, at<elem_t>(p.v, batch * p.v_batch_stride + head_k * p.v_head_stride +
                                             (long long)n0 * p.v_row_stride),
                     p.v_row_stride, p.seqlen_k - n0, p.head_dim, tid);
  cp_async_commit();

  // Query rows [m_first, m_end) see at least one key of [n0, n_last]
  // (bwd_mma80.cu); the tiles, (query head of the group, query block) in
  // that order, are walked as one sequence so the prefetch crosses heads.
  const int n_last = min(n0 + kBlockN, p.seqlen_k) - 1;
  const int m_first = window.has_right ? max(0, n0 - window.right - offset) : 0;
  const int m_end = window.has_left ? min(p.seqlen_q, n_last + window.left - offset + 1) : p.seqlen_q;
  const int mb_first = m_first / kBlockM;
  const int mb_end = m_end > m_first ? (m_end + kBlockM - 1) / kBlockM : mb_first;
  const int n_tiles = group * (mb_end - mb_first);
  auto load_query = [&](int tile, int hq, int mb) {  // into buffer tile % kStages
    const int head = head_k * group + hq, m0 = mb * kBlockM;
    const u32 dst = query_s + (tile % kStages) * 2 * kTileBytes;
    load_tile<kBlockM>(dst, at<elem_t>(p.q, batch * p.q_batch_stride + head * p.q_head_stride +
                                               (long long)m0 * p.q_row_stride),
                       p.q_row_stride, p.seqlen_q - m0, p.head_dim, tid);
    load_tile<kBlockM>(dst + kTileBytes, at<elem_t>(bp.dout, batch * bp.do_batch_stride +
                                                                 head * bp.do_head_stride +
                                                                 (long long)m0 * bp.do_row_stride),
                       bp.do_row_stride, p.seqlen_q - m0, p.head_dim, tid);
  };
  // A tile's lse and D, one row a thread, loaded a tile ahead and stored
  // into shared memory when the tile starts.
  auto raw_stats = [&](int hq, int mb) {
    const long long row0 = ((long long)batch * p.heads + head_k * group + hq) * p.seqlen_q;
    return raw_row_stats(p.lse + row0, bp.delta + row0, mb * kBlockM + tid, p.seqlen_q);
  };

  float dk[kDRegs], dv[kDRegs];
#pragma unroll
  for (int i = 0; i < kDRegs; i++) dk[i] = dv[i] = 0.f;
  // This thread's keys (accumulator rows) within the block: row_key and
  // row_key + 8, 16 of its warpgroup's 64 per warp.
  const int row_key = 64 * kg + 16 * (warp % 4) + g;
  const float scale_log2 = p.scale_log2;
  // Accumulator i of Sᵀ: key row_key + 8·((i % 4) / 2), query m0 + 8·(i /
  // 4) + 2t + i % 2. Hidden pairs and keys past the end get S = −inf (P =
  // 0); queries past the end have lse = +inf (P = 0).
  auto mask_scores = [&](float (&x)[kSRegs], int m0) {
    if (n0 + kBlockN > p.seqlen_k || window_cuts(window, n0, m0 + offset)) {
#pragma unroll
      for (int i = 0; i < kSRegs; i++) {
        const int key = n0 + row_key + 8 * ((i % 4) / 2);
        const int pos = m0 + 8 * (i / 4) + 2 * t + i % 2 + offset;
        if (key >= p.seqlen_k || hidden(window, key, pos)) x[i] = neg_inf();
      }
    }
  };
  // Where accumulators 4nt + 2h and + 1 (key row_key + 8h, queries 8nt + 2t
  // and + 1) sit in a [key][query] tile (dSᵀ, Pᵀ): one slab per 64 queries,
  // the 128-byte swizzle (row % 8 = g).
  auto kq_offset = [&](int nt, int h) -> u32 {
    return (nt / 8) * kBlockN * 128 + (row_key + 8 * h) * 128 + (((nt % 8) ^ g) * 16) + 4 * t;
  };

  int hq = 0, mb = mb_first;
  RawRowStats next_stats = {0.f, 0.f};
  if (n_tiles > 0) {
    if (kStages == 2) load_query(0, hq, mb);
    cp_async_commit();
    if (tid < kBlockM) next_stats = raw_stats(hq, mb);
  }
  for (int tile = 0; tile < n_tiles; tile++) {
    const int head = head_k * group + hq, m0 = mb * kBlockM;
    int hq_next = hq, mb_next = mb + 1;
    if (mb_next == mb_end) {
      hq_next++;
      mb_next = mb_first;
    }
    const bool has_next = tile + 1 < n_tiles;
    __syncthreads();  // every warpgroup is done with the last tile's buffers, dSᵀ and statistics
    if (tid < kBlockM) {
      const RowStats st = row_stats(next_stats);
      lse_s[tid] = st.lse_log2;
      delta_s[tid] = st.delta;
      if (has_next) next_stats = raw_stats(hq_next, mb_next);
    }
    if constexpr (kStages == 2) {
      if (has_next) load_query(tile + 1, hq_next, mb_next);
      cp_async_commit();  // possibly empty: the wait leaves exactly the next tile in flight
      cp_async_wait_all_but_last();  // K, V and this tile landed
    } else {
      load_query(tile, hq, mb);
      cp_async_commit();
      cp_async_wait_all();
    }
    tiles_landed();  // also publishes lse_s, delta_s

    const u32 q_t = query_s + (tile % kStages) * 2 * kTileBytes, do_t = q_t + kTileBytes;
    if constexpr (kDSplit == 1) {
      // Sᵀ and dPᵀ: this warpgroup's 64 keys x kBlockM queries, two groups
      // (P needs only Sᵀ).
      float s[kSRegs], dp[kSRegs];
#pragma unroll
      for (int i = 0; i < kSRegs; i++) s[i] = dp[i] = 0.f;
      pin(s);
      pin(dp);
      {
        const u64 dk_a = descriptor(k_s + wg * 64 * 128, 16, 1024), dq_b = descriptor(q_t, 16, 1024);
        const u64 dv_a = descriptor(v_s + wg * 64 * 128, 16, 1024), ddo_b = descriptor(do_t, 16, 1024);
        wgmma_fence();
        keys_by_queries(s, dk_a, dq_b);
        wgmma_commit();
        keys_by_queries(dp, dv_a, ddo_b);
        wgmma_commit();
      }

      wgmma_wait<1>();
      pin(s);
      mask_scores(s, m0);
      // Pᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − D) as the A fragments of dV's and dK's
      // products (k-step kk: the 8-query tiles 2kk and 2kk + 1), dSᵀ also
      // into ds_s: row row_key (+ 8), chunk nt of its slab, the 128-byte
      // swizzle (row % 8 = g). Then dV += Pᵀ·dO and dK += dSᵀ·Q: K = the
      // tile's queries, 16 rows (2048 bytes) a k-step; N = the head dim, one
      // slab (kBlockM rows) per 64 columns. kEarlyDv issues dV's product as
      // soon as P is rounded, while dPᵀ may still be computed (groups retire
      // in order), so that dSᵀ's arithmetic runs beside it.
      const u64 ddo_b = descriptor(do_t, kBlockM * 128, 1024), dq_b = descriptor(q_t, kBlockM * 128, 1024);
      u32 pa[kPSteps][4], da[kPSteps][4];
#pragma unroll
      for (int nt = 0; nt < kBlockM / 8; nt++) {
        const float2 lse = *reinterpret_cast<const float2 *>(lse_s + 8 * nt + 2 * t);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int i = 4 * nt + 2 * h;
          s[i] = fast_exp2(s[i] * scale_log2 - lse.x);
          s[i + 1] = fast_exp2(s[i + 1] * scale_log2 - lse.y);
          if constexpr (kEarlyDv) pa[nt / 2][h + 2 * (nt % 2)] = pack2(s[i], s[i + 1]);
        }
      }
      if constexpr (kEarlyDv) {
        pin(pa);
        pin(dv);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) wgmma_rs<kDCols>(dv, pa[kk], desc_add(ddo_b, kk * 2048));
        wgmma_commit();
        wgmma_wait<1>();  // dPᵀ
      } else {
        wgmma_wait<0>();
      }
      pin(dp);
#pragma unroll
      for (int nt = 0; nt < kBlockM / 8; nt++) {
        const float2 delta = *reinterpret_cast<const float2 *>(delta_s + 8 * nt + 2 * t);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int i = 4 * nt + 2 * h;
          const u32 ds2 = pack2(s[i] * (dp[i] - delta.x), s[i + 1] * (dp[i + 1] - delta.y));
          if constexpr (!kEarlyDv) pa[nt / 2][h + 2 * (nt % 2)] = pack2(s[i], s[i + 1]);
          da[nt / 2][h + 2 * (nt % 2)] = ds2;
          const u32 at_s = ds_s + kq_offset(nt, h);
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at_s), "r"(ds2) : "memory");
        }
      }
      if constexpr (!kEarlyDv) {
        pin(pa);
        pin(dv);
      }
      pin(da);
      pin(dk);
      wgmma_fence();
      if constexpr (!kEarlyDv) {
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++) wgmma_rs<kDCols>(dv, pa[kk], desc_add(ddo_b, kk * 2048));
      }
#pragma unroll
      for (int kk = 0; kk < kPSteps; kk++) wgmma_rs<kDCols>(dk, da[kk], desc_add(dq_b, kk * 2048));
      wgmma_commit();
      tiles_landed();  // every warpgroup's dSᵀ written and visible to the tensor cores
      wgmma_wait<0>();  // the A fragments are free
      pin(pa);
      pin(da);
      pin(dv);
      pin(dk);
    } else {
      // The pair's first warpgroup computes Sᵀ = K·Qᵀ, the second dPᵀ = V·dOᵀ
      // (the layouts as above).
      float x[kSRegs];
#pragma unroll
      for (int i = 0; i < kSRegs; i++) x[i] = 0.f;
      pin(x);
      {
        const u64 a = descriptor((col_half == 0 ? k_s : v_s) + kg * 64 * 128, 16, 1024);
        const u64 b = descriptor(col_half == 0 ? q_t : do_t, 16, 1024);
        wgmma_fence();
        keys_by_queries(x, a, b);
        wgmma_commit();
        wgmma_wait<0>();
        pin(x);
      }
      // Pᵀ (masked as above) into p_s in the element type, laid out as dSᵀ.
      if (col_half == 0) {
        mask_scores(x, m0);
#pragma unroll
        for (int nt = 0; nt < kBlockM / 8; nt++) {
          const float2 lse = *reinterpret_cast<const float2 *>(lse_s + 8 * nt + 2 * t);
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int i = 4 * nt + 2 * h;
            const u32 p2 = pack2(fast_exp2(x[i] * scale_log2 - lse.x), fast_exp2(x[i + 1] * scale_log2 - lse.y));
            const u32 at_s = p_s + kq_offset(nt, h);
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at_s), "r"(p2) : "memory");
          }
        }
      }
      tiles_landed();  // Pᵀ written and visible to the tensor cores and the other warpgroup
      // dV += Pᵀ·dO over this warpgroup's columns: A = Pᵀ K-major (as K in
      // Sᵀ's product), B = dO's column half N-major (as in the RS products).
      const u32 col_slabs = col_half * (kDCols / 64) * kBlockM * 128;
      keys_by_columns(dv, p_s + kg * 64 * 128, do_t + col_slabs);
      // dSᵀ = Pᵀ ∘ (dPᵀ − D) from the rounded Pᵀ, into ds_s, while dV's
      // product runs.
      if (col_half == 1) {
#pragma unroll
        for (int nt = 0; nt < kBlockM / 8; nt++) {
          const float2 delta = *reinterpret_cast<const float2 *>(delta_s + 8 * nt + 2 * t);
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const int i = 4 * nt + 2 * h;
            const u32 off = kq_offset(nt, h);
            u32 p2;
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(p2) : "r"(p_s + off) : "memory");
            const u32 ds2 = pack2(to_float((elem_t)(p2 & 0xffffu)) * (x[i] - delta.x),
                                  to_float((elem_t)(p2 >> 16)) * (x[i + 1] - delta.y));
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(ds_s + off), "r"(ds2) : "memory");
          }
        }
      }
      tiles_landed();  // dSᵀ written and visible to the tensor cores
      // dK += dSᵀ·Q over this warpgroup's columns (as dV's).
      keys_by_columns(dk, ds_s + kg * 64 * 128, q_t + col_slabs);
      wgmma_wait<0>();
      pin(dv);
      pin(dk);
    }

    // dQ += dS·K over the block's kBlockN keys: A = dS, stored [key][query]
    // (MN-major, one slab per 64 queries); B = K, [key][column] (MN-major);
    // 16 keys (2048 bytes) a k-step.
#pragma unroll
    for (int task = 0; task < kDqTasks; task++) {
      const int rb = kDqSplit > 1 ? wg / kDqSplit : wg + task * kWarpgroups;  // 64-row block
      const int col0 = (wg % kDqSplit) * kDqN;
      float dq[kDqN / 2];
#pragma unroll
      for (int i = 0; i < kDqN / 2; i++) dq[i] = 0.f;
      pin(dq);
      const u64 ds_a = descriptor(ds_s + rb * kBlockN * 128, kBlockN * 128, 1024);
      const u64 k_b = descriptor(k_s + (col0 / 64) * kBlockN * 128, kBlockN * 128, 1024);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; kk++)
        wgmma_ss<kDqN, true>(dq, desc_add(ds_a, kk * 2048), desc_add(k_b, kk * 2048));
      wgmma_commit();
      wgmma_wait<0>();
      pin(dq);
      // Into the fp32 accumulator: a whole block in dq_whole_offset()'s
      // order, a partial one row-major (rows past the end, columns past the
      // head dim left out). The scale comes in fat_bwd_convert_dq.
      const int r0 = m0 + 64 * rb;
      const long long row0 = ((long long)batch * p.heads + head) * p.seqlen_q;
      float *dq_block = bp.dq_accum + (row0 + r0) * p.head_dim;
      if (r0 + 64 <= p.seqlen_q && p.head_dim == kHeadDim) {
        float *lane_base = dq_block + ((warp % 4) * 2 * (kHeadDim / 16)) * 128 + lane * 4;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int np = 0; np < kDqN / 16; np++) {
            const int i = 8 * np + 2 * h;  // tile 2np of the slice: accumulators i, i + 1; tile 2np + 1: i + 4, i + 5
            red_add4(lane_base + (h * (kHeadDim / 16) + col0 / 16 + np) * 128, dq[i], dq[i + 1], dq[i + 4],
                     dq[i + 5]);
          }
      } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = 16 * (warp % 4) + g + 8 * h;
          if (r0 + row >= p.seqlen_q) continue;
#pragma unroll
          for (int nt = 0; nt < kDqN / 8; nt++) {
            const int col = col0 + 8 * nt + 2 * t;  // a column pair is wholly in or past the head dim
            if (col < p.head_dim) red_add2(dq_block + row * p.head_dim + col, dq[4 * nt + 2 * h], dq[4 * nt + 2 * h + 1]);
          }
        }
      }
    }
    hq = hq_next;
    mb = mb_next;
  }
  cp_async_wait_all();  // K and V landed even when no query tile was visited

  // dK = scale · Σ dSᵀ·Q and dV in the element type: key row_key + 8h,
  // columns col_half·kDCols + 8·dt + 2t and + 1; keys past the end and
  // columns past the head dim dropped (a column pair is wholly in or out).
  elem_t *dk_g = at<elem_t>(bp.dk, batch * bp.dk_batch_stride + head_k * bp.dk_head_stride);
  elem_t *dv_g = at<elem_t>(bp.dv, batch * bp.dv_batch_stride + head_k * bp.dv_head_stride);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int key = n0 + row_key + 8 * h;
    if (key >= p.seqlen_k) continue;
#pragma unroll
    for (int dt = 0; dt < kDCols / 8; dt++) {
      const int col = col_half * kDCols + 8 * dt + 2 * t;
      if (col >= p.head_dim) continue;
      const int i = 4 * dt + 2 * h;
      *reinterpret_cast<u32 *>(dk_g + key * bp.dk_row_stride + col) =
          pack2(dk[i] * p.softmax_scale, dk[i + 1] * p.softmax_scale);
      *reinterpret_cast<u32 *>(dv_g + key * bp.dv_row_stride + col) = pack2(dv[i], dv[i + 1]);
    }
  }
}

// Atomic mode only: no separate dQ pass (the launcher never starts it).
extern "C" __global__ void __launch_bounds__(kThreads) fat_bwd_dq(const fat_bwd_params bp) {}

// dQ = scale · dq_accum in the element type, whole 64-row blocks in
// dq_whole_offset()'s order (bwd_common.cuh). Grid as fat_bwd_preprocess.
extern "C" __global__ void __launch_bounds__(FAT_BWD_ROW_THREADS)
fat_bwd_convert_dq(const fat_bwd_params bp) {
  convert_dq_rows<64>(bp, [](int row, int col) { return dq_whole_offset(row, col); });
}
