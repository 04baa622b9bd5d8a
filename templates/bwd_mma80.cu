// FlashAttention-2 style backward with mma.sync (sm_80 and newer).
//
// Given Q, K, V, the forward's O and lse, and dO, the gradients are
//   D  = rowsum(dO ∘ O)                          (fat_bwd_preprocess)
//   P  = exp(S·scale − lse),  S = Q·Kᵀ            recomputed, never stored
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − D)
//   dK = scale · dSᵀ·Q,  dQ = scale · dS·K
// fat_bwd_mma80 gives each thread block kBlockN keys of one (batch, key
// head): K and V stay in shared memory while the block walks the query
// blocks (and every query head of its group), so dK and dV accumulate in
// registers and are written once. dQ needs a sum over all key blocks; the
// DQ_MODE parameter picks how:
//   atomic    each key block adds its share into an fp32 buffer with
//             atomicAdd (fat_bwd_convert_dq rounds it to the dtype after);
//   separate  fat_bwd_dq walks the key blocks for each query block and sums
//             in registers in a fixed order: no atomics, so the gradients
//             are bit-identical run to run (the deterministic mode).
// PREFETCH=1 double-buffers the query tiles of fat_bwd_mma80: the next
// tile's Q and dO are copied (cp.async) and its lse and D loaded while the
// current tile is computed, instead of all at once before it.
// All four products are m16n8k16 MMAs on tiles in shared memory: P and dS
// are rounded to the element type and staged there, as FlashAttention-2
// does. Masks are bottom-right aligned like the forward's: query i sits at
// key position pos = i + seqlen_k − seqlen_q; causal sees keys j <= pos,
// local pos − window_left <= j <= pos + window_right (a bound of −1 is
// dropped). Tiles no row of which sees a key of the other side's tile are
// skipped; tiles that cross a bound are masked by absolute position. A row
// that sees no key has lse = −inf and gets P = 0, hence zero gradients,
// never NaN.
//
// FEATURES 1 (the mma80f family) adds what dense variants leave out:
// variable-length batches (cu_seqlens_q and cu_seqlens_k, seqused_k), each
// block working on its sequence as a dense batch of one (bwd_common.cuh's
// sequence_view), and the soft-cap, score = cap·tanh(raw·scale / cap), whose
// derivative 1 − tanh² multiplies dS:
//   dS = P ∘ (dP − D) ∘ (1 − tanh²(raw·softcap_in))
// (in the kernels' raw terms, fat_abi.h: raw' = softcap_out·tanh(raw ·
// softcap_in), and d raw'/d raw is that factor). FEATURES 0 reads neither.
//
// The problem's head dim p.head_dim may be below kHeadDim (a multiple of 8):
// the columns past it are copied in as zeros, so they add nothing to any
// product, and no gradient is written there.
//
// Parameters in double braces are substituted by generator/expand.lua; they
// change speed (and, for DQ_MODE, determinism), never results.
#include "fat_abi.h"
#include "fat_abi_bwd.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};   // query rows per tile
constexpr int kBlockN = {{BLOCK_N}};   // keys per tile
constexpr int kWarps = {{WARPS}};
constexpr bool kIsBf16 = {{IS_BF16}};
constexpr bool kIsCausal = {{IS_CAUSAL}};
constexpr bool kIsLocal = {{IS_LOCAL}};
constexpr bool kPrefetch = {{PREFETCH}};  // fat_bwd_mma80 loads query tile i+1 during tile i
constexpr bool kDqMode_atomic = false;
constexpr bool kDqMode_separate = true;
constexpr bool kDqSeparate = kDqMode_{{DQ_MODE}};
// Variable lengths and the soft-cap (above), read at run time; a macro
// (bwd_common.cuh) so that FEATURES 0 compiles to the dense code it always was.
#define FAT_BWD_FEATURES {{FEATURES}}

constexpr int kWarpSize = 32;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMma = 16;       // m16n8k16: rows of A and the k-step
constexpr int kMmaN = 8;       // ... columns of one accumulator tile
constexpr int kChunk = 8;      // elements of one 16-byte copy
constexpr float kLog2e = 1.4426950408889634f;
// The 8 rows an ldmatrix phase reads must fall into 8 different bank
// groups. Q, dO, K and V tiles ([row][head dim]) whose rows are whole
// 128-byte lines (head dims that are multiples of 64) get that from a
// swizzle: chunk c (16 bytes) of row r is stored at chunk c ^ (r % 8) of
// the row, rows unpadded, so each 128-byte line a cp.async brings also
// lands on one 128-byte line of shared memory. Padded by a chunk instead,
// each line straddled two, and ncu counted 2.3 times the ideal
// shared-memory wavefronts for the copies (d256, b6). Other head dims (96),
// and the P and dS tiles that the threads write themselves, are padded by
// one chunk a row.
constexpr bool kSwizzleD = kHeadDim % 64 == 0;
constexpr int kPitchD = kSwizzleD ? kHeadDim : kHeadDim + kChunk;  // Q, dO, K, V tiles (elements)
constexpr int kPitchN = kBlockN + kChunk;                          // P and dS tiles: [query][key]

static_assert(kBlockM % kMma == 0 && kBlockN % kMma == 0, "tiles are whole MMA tiles");
static_assert(FAT_BWD_ROW_THREADS % kWarpSize == 0, "the per-row kernels' blocks are whole warps");
static_assert(kBlockM <= kThreads, "one thread per query row holds a prefetched lse and D");
static_assert(!(kIsCausal && kIsLocal), "one mask per variant");

#include "fat_device.cuh"

// How kWarps warps share one kM x kN product: a kWM x kWN grid of warps,
// each owning kMT 16-row tiles and kNT 8-column tiles (an even number: B is
// loaded two tiles at a time) of the result. Every k-step a warp loads kMT
// A tiles and kNT / 2 B pairs from shared memory for kMT x kNT MMAs, and
// that product is fixed by the shape, so the split with the fewest loads
// is the one whose warp tile is most nearly square (ties go to more warps
// over the rows: fewer A fragments held). Shared memory, not the tensor
// cores, is what a lopsided split runs out of first: 16 x 64 warp tiles
// load 5 x 512 bytes per 8 MMAs, 32 x 32 ones 4 x 512. kValid is false
// when no grid splits the shape; each kernel asserts it for the products
// it runs (the dQ pass's split only matters in separate mode).
// kRowsFirst keeps the split this template had before, as many warps over
// the rows as there are 16-row tiles: the deterministic dQ pass holds S, dP
// and dQ at once, and there the squarer tiles spilled (180 bytes at
// m64n64w4 d128, against 12).
constexpr bool split_fits(int m, int n, int wm) {
  return wm >= 1 && kWarps % wm == 0 && (m / kMma) % wm == 0 && n % (2 * kMmaN * (kWarps / wm)) == 0;
}
constexpr int split_loads(int m, int n, int wm) { return m / kMma / wm + n / kMmaN / (kWarps / wm) / 2; }
constexpr int split_rows(int m, int n, bool rows_first) {  // kWM of the split, 0 if none fits
  const int most = m / kMma < kWarps ? m / kMma : kWarps;
  if (rows_first && split_fits(m, n, most)) return most;
  int best = 0;
  for (int wm = kWarps; wm >= 1; wm--)
    if (split_fits(m, n, wm) && (best == 0 || split_loads(m, n, wm) < split_loads(m, n, best))) best = wm;
  return best;
}
template <int kM, int kN, bool kRowsFirst = false>
struct WarpSplit {
  static constexpr bool kValid = split_rows(kM, kN, kRowsFirst) > 0;
  static constexpr int kWM = kValid ? split_rows(kM, kN, kRowsFirst) : 1;
  static constexpr int kWN = kWarps / kWM;
  static constexpr int kMT = kValid ? kM / kMma / kWM : 1;
  static constexpr int kNT = kValid ? kN / kMmaN / kWN : 2;
};

// Atomic mode sums dQ = dS·K (kBlockM x kHeadDim) in kDqPasses slices of
// kDqCols columns: the fewest passes whose accumulators per thread are at
// most those of S and dP (cols <= 2·kBlockN; those are dead by then), in
// whole 16-column steps that the warps can split. 0 when none can. Each
// pass loads dS again: at most half of S and dP's count (the rule until
// b5) made d256 take four passes and 14 % more ldmatrix than
// FlashAttention-2, which sums its dQ in one; wider, ptxas spilled beside
// dK and dV.
constexpr int dq_passes() {
  for (int passes = 1; passes <= kHeadDim / kMma; passes++) {
    const int cols = kHeadDim / passes;
    if (kHeadDim % passes == 0 && cols % kMma == 0 && cols <= 2 * kBlockN && split_rows(kBlockM, cols, false) > 0)
      return passes;
  }
  return 0;
}
constexpr int kDqPasses = dq_passes();
constexpr int kDqCols = kDqPasses > 0 ? kHeadDim / kDqPasses : kHeadDim;
static_assert(kDqSeparate || kDqPasses > 0, "the warps split atomic dQ's column slices evenly");

// Atomic mode's fp32 accumulator is (batch, heads, seqlen_q, head_dim) in
// memory, but within a whole tile (kBlockM rows, all of them inside, and
// head_dim = kHeadDim) the order of its kBlockM·kHeadDim floats is this
// template's own: pass-major, then each warp's accumulator fragments in
// 128-float blocks, so that one warp's reduction covers 512 contiguous
// bytes. In row-major order a warp's reduction touched 8 rows, 8 cache
// lines for 256 bytes, and dQ's reductions took four times the L1
// wavefronts of FlashAttention-2's (which permutes its accumulator too).
// Block (warp, mt, h, np) holds rows g + 8h of 16-row tile mt, columns of
// 8-column tiles 2np and 2np+1: lane g·4 + t's four floats are (row g+8h,
// columns 2t, 2t+1) of each. fat_bwd_convert_dq reads it back through
// dq_whole_offset(); partial tiles stay row-major.
using DqSplit = WarpSplit<kBlockM, kDqCols>;
static_assert(kDqSeparate || DqSplit::kNT % 2 == 0, "a lane adds two 8-column tiles at once");
__device__ __forceinline__ int dq_whole_offset(int row, int col) {
  using S = DqSplit;
  const int pass = col / kDqCols, c = col % kDqCols;
  const int warp = row / (S::kMT * kMma) + c / (S::kNT * kMmaN) * S::kWM;
  const int mt = row / kMma % S::kMT, h = row / 8 % 2, g = row % 8;
  const int nt = c / kMmaN % S::kNT, t = c / 2 % 4, e = c % 2;
  const int block = ((warp * S::kMT + mt) * 2 + h) * (S::kNT / 2) + nt / 2;
  return pass * kBlockM * kDqCols + (block * kWarpSize + g * 4 + t) * 4 + (nt % 2) * 2 + e;
}

#include "bwd_common.cuh"

// One lane's ldmatrix addresses in one operand tile: the 16-byte column
// chunk chunk0 + step of its row, row being the row's address and x its
// index modulo 8. The step is known at compile time; chunk0 (the operand's
// first chunk plus the lane's 0 or 1) only at run time. Padded tiles: the
// chunk lies at row + 16·(chunk0 + step), an immediate offset from one
// register. Swizzled tiles (kSwizzleD): at row + 16·((chunk0 + step) ^ x).
// When chunk0's low three bits and the step's share none (the operand's
// first chunk is a multiple of kSpan, the chunks the warp reads, and kSpan
// is a power of two or a multiple of 8), that is the address of step 0
// with 16·(step % 8) xor'ed in and 128·(step / 8) added: one register and
// an xor by an immediate per load, the rows being 128-byte aligned. Else
// each load computes its chunk.
template <bool kSwizzled, int kSpan>
struct LaneAddr {
  static constexpr bool kXorSteps = kSpan % 8 == 0 || (kSpan & (kSpan - 1)) == 0;
  u32 base;      // step 0's address
  u32 row;       // the row (for the general case)
  int chunk0, x;
  __device__ __forceinline__ LaneAddr(u32 row_, int chunk0_, int x_) : row(row_), chunk0(chunk0_), x(x_) {
    base = row_ + 16 * (kSwizzled ? chunk0_ ^ x_ : chunk0_);
  }
  // row_offset: a multiple of 8 rows (128-byte aligned when swizzled).
  __device__ __forceinline__ u32 at(u32 row_offset, int step) const {
    if constexpr (!kSwizzled) return base + row_offset + 16 * step;
    else if constexpr (kXorSteps) return (base ^ (16 * (step % 8))) + row_offset + 128 * (step / 8);
    else return row + row_offset + 16 * ((chunk0 + step) ^ x);
  }
};

// c += A·B over kKSteps k-steps of 16, one warp, operands in shared memory.
// A is kMT 16-row tiles of the tile at byte address a (its row 0, row pitch
// a_pitch bytes), from its column chunk a_chunk: stored [m][k], or [k][m]
// when kATrans. B is kNT 8-column tiles of the tile at b from chunk
// b_chunk: stored [n][k], or [k][n] when kBTrans. kASwizzled, kBSwizzled:
// the tile is in kSwizzleD's order (the row offsets here are multiples of
// 8). a_chunk and b_chunk are multiples of the chunks the warp reads of
// that operand (LaneAddr's kSpan). ldmatrix's .trans turns a stored transpose into the fragment the MMA
// wants, so every product of the backward is this one routine.
template <int kMT, int kNT, int kKSteps, bool kATrans, bool kBTrans, bool kASwizzled, bool kBSwizzled>
__device__ __forceinline__ void warp_mma(float (&c)[kMT][kNT][4], u32 a, u32 a_pitch, int a_chunk, u32 b,
                                         u32 b_pitch, int b_chunk, int lane) {
  static_assert(kNT % 2 == 0, "B is loaded two 8-column tiles at a time");
  // This lane's row and column chunk for ldmatrix: x4 loads four 8x8
  // matrices, lanes 8i..8i+7 addressing the rows of matrix i. Every row is
  // lane % 8 modulo 8.
  const LaneAddr<kASwizzled, kATrans ? 2 * kMT : 2 * kKSteps> a_lane(
      a + (kATrans ? (lane % 8) + (lane / 16) * 8 : lane % 16) * a_pitch,
      a_chunk + (kATrans ? (lane / 8) % 2 : lane / 16), lane % 8);
  const LaneAddr<kBSwizzled, kBTrans ? kNT : 2 * kKSteps> b_lane(
      b + (kBTrans ? (lane % 8) + ((lane / 8) % 2) * 8 : (lane % 8) + (lane / 16) * 8) * b_pitch,
      b_chunk + (kBTrans ? lane / 16 : (lane / 8) % 2), lane % 8);
  // A 16-row step is 16 rows down (a multiple of 8: the swizzle's x stays);
  // a 16-column step is two chunks on.
#pragma unroll
  for (int ks = 0; ks < kKSteps; ks++) {
    u32 frag_a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
      if constexpr (kATrans)
        ldmatrix_x4_trans(frag_a[mt], a_lane.at(ks * kMma * a_pitch, 2 * mt));
      else
        ldmatrix_x4(frag_a[mt], a_lane.at(mt * kMma * a_pitch, 2 * ks));
    }
#pragma unroll
    for (int np = 0; np < kNT / 2; np++) {
      u32 frag_b[4];
      if constexpr (kBTrans)
        ldmatrix_x4_trans(frag_b, b_lane.at(ks * kMma * b_pitch, 2 * np));
      else
        ldmatrix_x4(frag_b, b_lane.at(np * 2 * kMmaN * b_pitch, 2 * ks));
#pragma unroll
      for (int mt = 0; mt < kMT; mt++) {
        mma_16816(c[mt][2 * np], frag_a[mt], frag_b[0], frag_b[1]);
        mma_16816(c[mt][2 * np + 1], frag_a[mt], frag_b[2], frag_b[3]);
      }
    }
  }
}

template <int kMT, int kNT>
__device__ __forceinline__ void zero(float (&c)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; mt++)
#pragma unroll
    for (int nt = 0; nt < kNT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) c[mt][nt][e] = 0.f;
}

// Byte offset of element column col (a multiple of kChunk) of tile row
// row in a Q, dO, K or V tile.
__device__ __forceinline__ u32 d_offset(int row, int col) {
  const int chunk = col / kChunk;
  return (u32)(row * kPitchD * (int)sizeof(elem_t) + (kSwizzleD ? chunk ^ (row % 8) : chunk) * 16);
}

// Copies kRows rows of kHeadDim elements into a Q, dO, K or V tile; rows at
// or past valid_rows and columns at or past cols (the problem's head dim, a
// multiple of kChunk) are zero-filled: they then contribute nothing. Where
// the threads cover whole rows each thread keeps one column and steps its
// source pointer by a fixed number of rows (one add a copy: the copies of a
// query tile are on the backward's per-tile path); else each copy derives
// its row and column.
template <int kRows>
__device__ __forceinline__ void load_rows(u32 tile, const elem_t *src, long long row_stride,
                                          int valid_rows, int cols, int tid) {
  constexpr int kChunksPerRow = kHeadDim / kChunk;
  constexpr int kChunks = kRows * kChunksPerRow;
  if constexpr (kThreads % kChunksPerRow == 0 && kChunks % kThreads == 0) {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    const int row0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * kChunk;
    const elem_t *s = src + row0 * row_stride + col;
    const long long step = kRowStep * row_stride;
    // Steps of 8 rows keep the swizzle's row % 8: one offset for all copies.
    const u32 dst = tile + d_offset(row0, col);
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; i++, s += step) {
      const bool inside = row0 + i * kRowStep < valid_rows && col < cols;
      const u32 d = kRowStep % 8 == 0 ? dst + i * kRowStep * kPitchD * sizeof(elem_t)
                                      : tile + d_offset(row0 + i * kRowStep, col);
      cp_async_16(d, inside ? s : src, inside ? 16 : 0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; i++) {
      const int c = tid + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * kChunk;
        const bool inside = row < valid_rows && col < cols;
        cp_async_16(tile + d_offset(row, col), inside ? src + row * row_stride + col : src, inside ? 16 : 0);
      }
    }
  }
}

// The statistics of kBlockM query rows from m0 into shared memory.
__device__ __forceinline__ void load_row_stats(float *lse_s, float *delta_s, const float *lse,
                                               const float *delta, int m0, int seqlen_q, int tid) {
  for (int r = tid; r < kBlockM; r += kThreads) {
    const RowStats st = row_stats(raw_row_stats(lse, delta, m0 + r, seqlen_q));
    lse_s[r] = st.lse_log2;
    delta_s[r] = st.delta;
  }
}

// S = Q·Kᵀ and dP = dO·Vᵀ of the kBlockM queries at q_s, do_s (rows m0
// on) against the kBlockN keys at k_s, v_s (keys n0 on), split over the
// warps as Split; then P = exp2(S·scale_log2 − lse·log2e), 0 where masked,
// and dS = P ∘ (dP − D), rounded to the element type into the [query][key]
// tiles ds_ptr and, when kStoreP, p_ptr. Queries are the rows, as in
// FlashAttention-2: a thread's accumulators span 2·kMT queries, whose lse
// and D it reads once. Both the key-block kernel and the separate dQ pass
// start from this.
template <class Split, bool kStoreP>
__device__ __forceinline__ void probabilities(const fat_fwd_params &p, const KeyWindow &window, int m0, int n0,
                                              u32 q_s, u32 do_s, u32 k_s, u32 v_s, const float *lse_s,
                                              const float *delta_s, elem_t *p_ptr, elem_t *ds_ptr, int warp,
                                              int lane) {
  constexpr u32 kRowD = kPitchD * sizeof(elem_t);
  const int g = lane / 4, t = lane % 4;  // accumulator coordinates: row group, column pair
  const int s_m = (warp % Split::kWM) * Split::kMT * kMma, s_n = (warp / Split::kWM) * Split::kNT * kMmaN;
  const int offset = p.seqlen_k - p.seqlen_q;  // bottom-right alignment: query i sits at key i + offset
  float s[Split::kMT][Split::kNT][4], dp[Split::kMT][Split::kNT][4];
  zero(s);
  zero(dp);
  warp_mma<Split::kMT, Split::kNT, kHeadDim / kMma, false, false, kSwizzleD, kSwizzleD>(
      s, q_s + s_m * kRowD, kRowD, 0, k_s + s_n * kRowD, kRowD, 0, lane);
  warp_mma<Split::kMT, Split::kNT, kHeadDim / kMma, false, false, kSwizzleD, kSwizzleD>(
      dp, do_s + s_m * kRowD, kRowD, 0, v_s + s_n * kRowD, kRowD, 0, lane);
#if FAT_BWD_FEATURES
  // The soft-cap before the mask (tanh of −inf would be a finite score):
  // raw' = softcap_out·tanh(raw·softcap_in), and its derivative 1 − tanh²
  // kept for dS.
  const bool softcap = p.softcap_in != 0.f;
  float dcap[Split::kMT][Split::kNT][4];
  if (softcap) {
#pragma unroll
    for (int mt = 0; mt < Split::kMT; mt++)
#pragma unroll
      for (int nt = 0; nt < Split::kNT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float th = softcap_tanh(s[mt][nt][e] * p.softcap_in);
          s[mt][nt][e] = p.softcap_out * th;
          dcap[mt][nt][e] = 1.f - th * th;
        }
  }
#endif
  // Hidden pairs and keys past the end get S = −inf, so P = exp2(−inf) = 0,
  // in a pass of their own that only tiles crossing a bound take: tested
  // inside the loop below, the mask's registers spilled around every tile
  // (up to 236 bytes in the causal variants).
  if (n0 + kBlockN > p.seqlen_k || window_cuts(window, n0, m0 + offset)) {
#pragma unroll
    for (int mt = 0; mt < Split::kMT; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int pos = m0 + s_m + mt * kMma + g + h * 8 + offset;
#pragma unroll
        for (int nt = 0; nt < Split::kNT; nt++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int key = n0 + s_n + nt * kMmaN + 2 * t + e;
            if (key >= p.seqlen_k || hidden(window, key, pos)) s[mt][nt][2 * h + e] = neg_inf();
          }
      }
  }
#pragma unroll
  for (int mt = 0; mt < Split::kMT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {  // query rows g and g+8
      const int query = s_m + mt * kMma + g + h * 8;
      const float lse_q = lse_s[query], delta_q = delta_s[query];
#pragma unroll
      for (int nt = 0; nt < Split::kNT; nt++) {
        float pv[2], ds[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          pv[e] = fast_exp2(s[mt][nt][2 * h + e] * p.scale_log2 - lse_q);
          ds[e] = pv[e] * (dp[mt][nt][2 * h + e] - delta_q);
#if FAT_BWD_FEATURES
          if (softcap) ds[e] *= dcap[mt][nt][2 * h + e];
#endif
        }
        const int off = query * kPitchN + s_n + nt * kMmaN + 2 * t;
        if constexpr (kStoreP) *reinterpret_cast<u32 *>(p_ptr + off) = pack2(pv[0], pv[1]);
        *reinterpret_cast<u32 *>(ds_ptr + off) = pack2(ds[0], ds[1]);
      }
    }
}

// Atomic mode, one query tile: dQ_i += dS·K_j into the fp32 dq_tile (the
// tile's first row; the scale comes in fat_bwd_convert_dq) with
// reductions, kDqCols columns a pass, then dK += dSᵀ·Q. In that order, as
// FlashAttention-2 has it, so that the reductions drain while the dK
// products run: issued last, they left each warp in one burst and every
// warp waited on the load/store queue and then at the next tile's barrier
// (ncu, d128: lg_throttle 0.60 and barrier 1.26 cycles per issued
// instruction, FA2 0.01 and 0.24). kWhole: all kBlockM rows exist and the
// problem's head dim is kHeadDim, so the tile is stored in
// dq_whole_offset()'s order, one 16-byte reduction per lane and pair of
// 8-column tiles, nothing tested, straight-line code the scheduler can
// interleave; else the tile is row-major and rows at or past rows, passes
// past the head dim and the columns past it (zeros: K's padding) are left
// out.
template <bool kWhole, class S2>
__device__ __forceinline__ void add_dq_then_dk(float (&dk)[S2::kMT][S2::kNT][4], float *dq_tile,
                                               const fat_fwd_params &p, int rows, u32 ds_s, u32 k_s, u32 q_s,
                                               int warp, int lane) {
  constexpr u32 kRowD = kPitchD * sizeof(elem_t), kRowN = kPitchN * sizeof(elem_t);
  using S3 = DqSplit;
  const int g = lane / 4, t = lane % 4;
  const int s3_m = (warp % S3::kWM) * S3::kMT * kMma, s3_n = (warp / S3::kWM) * S3::kNT * kMmaN;
  // Row-major: this lane's first element; its accumulator (mt, h, nt) of
  // pass k lies (mt·16 + h·8)·head_dim + k·kDqCols + nt·8 floats on.
  // Whole: this lane's four floats of the warp's first block.
  float *dq_lane = kWhole ? dq_tile + warp * S3::kMT * S3::kNT * kMma * kMmaN + lane * 4
                          : dq_tile + (s3_m + g) * p.head_dim + s3_n + 2 * t;
  const int passes = kWhole ? kDqPasses : min(kDqPasses, (p.head_dim + kDqCols - 1) / kDqCols);
#pragma unroll 1  // unrolled, two passes' fragments spilled at m64n64w4 d128
  for (int pass = 0; pass < passes; pass++) {
    const int col0 = pass * kDqCols;
    float acc[S3::kMT][S3::kNT][4];
    zero(acc);
    warp_mma<S3::kMT, S3::kNT, kBlockN / kMma, false, true, false, kSwizzleD>(
        acc, ds_s + s3_m * kRowN, kRowN, 0, k_s, kRowD, (col0 + s3_n) / kChunk, lane);
    if constexpr (kWhole) {
      float *dq_pass = dq_lane + pass * kBlockM * kDqCols;
#pragma unroll
      for (int mt = 0; mt < S3::kMT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int np = 0; np < S3::kNT / 2; np++)
            red_add4(dq_pass + (((mt * 2 + h) * (S3::kNT / 2) + np) * kWarpSize) * 4, acc[mt][2 * np][2 * h],
                     acc[mt][2 * np][2 * h + 1], acc[mt][2 * np + 1][2 * h], acc[mt][2 * np + 1][2 * h + 1]);
    } else {
#pragma unroll
      for (int mt = 0; mt < S3::kMT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          if (s3_m + mt * kMma + g + h * 8 >= rows) continue;
          float *dq_row = dq_lane + (mt * kMma + h * 8) * p.head_dim + col0;
#pragma unroll
          for (int nt = 0; nt < S3::kNT; nt++)  // a column pair is wholly in or past the head dim
            if (col0 + s3_n + nt * kMmaN + 2 * t < p.head_dim)
              red_add2(dq_row + nt * kMmaN, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
        }
    }
  }
  const int s2_m = (warp % S2::kWM) * S2::kMT * kMma, s2_n = (warp / S2::kWM) * S2::kNT * kMmaN;
  warp_mma<S2::kMT, S2::kNT, kBlockM / kMma, true, true, false, kSwizzleD>(dk, ds_s, kRowN, s2_m / kChunk, q_s,
                                                                           kRowD, s2_n / kChunk, lane);
}

// D = rowsum(dO ∘ O), and in atomic mode the fp32 dQ accumulator zeroed
// (bwd_common.cuh).
extern "C" __global__ void __launch_bounds__(FAT_BWD_ROW_THREADS)
fat_bwd_preprocess(const fat_bwd_params bp) { preprocess_rows(bp); }

// Issues the cp.async copies of query tile m0 of one (batch, head): Q into
// q_dst, dO into do_dst, rows past the end and columns past the head dim
// zero-filled. The caller commits them as one group.
__device__ __forceinline__ void load_query_tile(u32 q_dst, u32 do_dst, const fat_bwd_params &bp, int batch,
                                                int head, int m0, int tid) {
  const fat_fwd_params &p = bp.fwd;
  load_rows<kBlockM>(q_dst, at<elem_t>(p.q, batch * p.q_batch_stride + head * p.q_head_stride +
                                                (long long)m0 * p.q_row_stride),
                     p.q_row_stride, p.seqlen_q - m0, p.head_dim, tid);
  load_rows<kBlockM>(do_dst, at<elem_t>(bp.dout, batch * bp.do_batch_stride + head * bp.do_head_stride +
                                                     (long long)m0 * bp.do_row_stride),
                     bp.do_row_stride, p.seqlen_q - m0, p.head_dim, tid);
}

// dK and dV of kBlockN keys of one (batch, key head); in atomic mode also
// this key block's share of dQ. Grid: (ceil(seqlen_k / kBlockN), heads_k,
// batch), kThreads threads.
extern "C" __global__ void __launch_bounds__(kThreads)
fat_bwd_mma80(const fat_bwd_params bp_in) {
  // Causal: a key block sees fewer query tiles the later it starts.
  const BlockCoords coords = block_coords<false>();
#if FAT_BWD_FEATURES
  const SequenceView view = sequence_view(bp_in, coords.batch);
  const fat_bwd_params &bp = view.bp;
  // A block past its sequence's keys has no rows of dK and dV to write.
  if (coords.block * kBlockN >= view.full_k) return;
#else
  const fat_bwd_params &bp = bp_in;
#endif
  const fat_fwd_params &p = bp.fwd;
  extern __shared__ __align__(128) unsigned char smem[];  // whole lines: the swizzle's xor
  constexpr u32 kRowD = kPitchD * sizeof(elem_t), kRowN = kPitchN * sizeof(elem_t);
  constexpr int kQueryBuffers = kPrefetch ? 2 : 1;     // the tile computed, and the one in flight
  constexpr u32 kQueryBufferBytes = 2 * kBlockM * kRowD;  // Q_i then dO_i
  const u32 k_s = smem_u32(smem);                      // K_j   [kBlockN][kPitchD]
  const u32 v_s = k_s + kBlockN * kRowD;               // V_j   [kBlockN][kPitchD]
  const u32 query_s = v_s + kBlockN * kRowD;           // kQueryBuffers x (Q_i, dO_i [kBlockM][kPitchD])
  const u32 p_s = query_s + kQueryBuffers * kQueryBufferBytes;  // P  [kBlockM][kPitchN]
  const u32 ds_s = p_s + kBlockM * kRowN;              // dS    [kBlockM][kPitchN]
  unsigned char *stats = smem + (ds_s + kBlockM * kRowN - k_s);
  float *lse_s = reinterpret_cast<float *>(stats);  // [kBlockM]
  float *delta_s = lse_s + kBlockM;                 // [kBlockM]
  elem_t *p_ptr = reinterpret_cast<elem_t *>(smem + (p_s - k_s));
  elem_t *ds_ptr = reinterpret_cast<elem_t *>(smem + (ds_s - k_s));

  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int g = lane / 4, t = lane % 4;  // accumulator coordinates: row group, column pair
  const int n0 = coords.block * kBlockN, head_k = coords.head, batch = coords.batch;
  const int group = p.heads / p.heads_k;
  const int offset = p.seqlen_k - p.seqlen_q;  // bottom-right alignment: query i sits at key i + offset
  const KeyWindow window = key_window(p);

  load_rows<kBlockN>(k_s, at<elem_t>(p.k, batch * p.k_batch_stride + head_k * p.k_head_stride +
                                              (long long)n0 * p.k_row_stride),
                     p.k_row_stride, p.seqlen_k - n0, p.head_dim, tid);
  load_rows<kBlockN>(v_s, at<elem_t>(p.v, batch * p.v_batch_stride + head_k * p.v_head_stride +
                                              (long long)n0 * p.v_row_stride),
                     p.v_row_stride, p.seqlen_k - n0, p.head_dim, tid);
  cp_async_commit();

  // S and dP: kBlockM queries x kBlockN keys, queries as rows as in
  // FlashAttention-2: a thread's accumulators then span 2·kMT queries, not
  // kNT, so it holds their lse and D in registers. dK and dV: kBlockN x kHeadDim.
  using S1 = WarpSplit<kBlockM, kBlockN>;
  using S2 = WarpSplit<kBlockN, kHeadDim>;
  static_assert(S1::kValid && S2::kValid, "warps split S and dK/dV evenly");
  const int s2_m = (warp % S2::kWM) * S2::kMT * kMma, s2_n = (warp / S2::kWM) * S2::kNT * kMmaN;
  float dk[S2::kMT][S2::kNT][4], dv[S2::kMT][S2::kNT][4];
  zero(dk);
  zero(dv);

  // Query rows [m_first, m_end) see at least one key of [n0, n_last]: the
  // right bound hides the block from rows above m_first, the left bound from
  // rows at or past m_end. The tiles outside are skipped.
  const int n_last = min(n0 + kBlockN, p.seqlen_k) - 1;
  const int m_first = window.has_right ? max(0, n0 - window.right - offset) : 0;
  const int m_end = window.has_left ? min(p.seqlen_q, n_last + window.left - offset + 1) : p.seqlen_q;
  const int mb_first = m_first / kBlockM;
  const int mb_end = m_end > m_first ? (m_end + kBlockM - 1) / kBlockM : mb_first;
  // The tiles, (query head of the group, query block) in that order, walked
  // as one sequence so that the prefetch crosses from one head to the next.
#if FAT_BWD_FEATURES
  // Keys past the used ones (seqused_k) see no query: their rows get zeros.
  const int n_tiles = n0 < p.seqlen_k ? group * (mb_end - mb_first) : 0;
#else
  const int n_tiles = group * (mb_end - mb_first);
#endif
  int hq = 0, mb = mb_first;
  RawRowStats next_stats = {0.f, 0.f};  // PREFETCH: the next tile's lse and D, in flight in registers
  if (kPrefetch && n_tiles > 0) {
    load_query_tile(query_s, query_s + kBlockM * kRowD, bp, batch, head_k * group, mb * kBlockM, tid);
    cp_async_commit();
    if (tid < kBlockM) {
#if FAT_BWD_FEATURES
      const long long row0 = view.stats_row0(batch, head_k * group);
#else
      const long long row0 = ((long long)batch * p.heads + head_k * group) * p.seqlen_q;
#endif
      next_stats = raw_row_stats(p.lse + row0, bp.delta + row0, mb * kBlockM + tid, p.seqlen_q);
    }
  }
  for (int tile = 0; tile < n_tiles; tile++) {
    const int head = head_k * group + hq;
    const int m0 = mb * kBlockM;
#if FAT_BWD_FEATURES
    const long long row0 = view.stats_row0(batch, head);  // of lse, D, dq_accum
#else
    const long long row0 = ((long long)batch * p.heads + head) * p.seqlen_q;  // of lse, D, dq_accum
#endif
    const u32 q_s = query_s + (tile % kQueryBuffers) * kQueryBufferBytes;  // Q_i  [kBlockM][kPitchD]
    const u32 do_s = q_s + kBlockM * kRowD;                                 // dO_i [kBlockM][kPitchD]
    int hq_next = hq, mb_next = mb + 1;
    if (mb_next == mb_end) {
      hq_next++;
      mb_next = mb_first;
    }
    __syncthreads();  // every warp is done with the previous Q, dO, P, dS and row statistics
    if constexpr (kPrefetch) {
      // Tile i's lse and D, loaded one tile ago, into shared memory, and
      // tile i+1's loaded; then tile i+1's Q and dO into the other buffer
      // (the one tile i−1 used), to land while tile i is computed.
      const bool has_next = tile + 1 < n_tiles;
      if (tid < kBlockM) {
        const RowStats st = row_stats(next_stats);
        lse_s[tid] = st.lse_log2;
        delta_s[tid] = st.delta;
        if (has_next) {
#if FAT_BWD_FEATURES
          const long long next_row0 = view.stats_row0(batch, head_k * group + hq_next);
#else
          const long long next_row0 = ((long long)batch * p.heads + head_k * group + hq_next) * p.seqlen_q;
#endif
          next_stats = raw_row_stats(p.lse + next_row0, bp.delta + next_row0, mb_next * kBlockM + tid, p.seqlen_q);
        }
      }
      if (has_next) {
        const u32 next_q_s = query_s + ((tile + 1) % kQueryBuffers) * kQueryBufferBytes;
        load_query_tile(next_q_s, next_q_s + kBlockM * kRowD, bp, batch, head_k * group + hq_next,
                        mb_next * kBlockM, tid);
      }
      cp_async_commit();  // possibly empty: the wait below then always leaves one group
      cp_async_wait_all_but_last();  // K, V and tile i landed
    } else {
      load_query_tile(q_s, do_s, bp, batch, head, m0, tid);
      cp_async_commit();
      load_row_stats(lse_s, delta_s, p.lse + row0, bp.delta + row0, m0, p.seqlen_q, tid);
      cp_async_wait_all();
    }
    __syncthreads();

    probabilities<S1, true>(p, window, m0, n0, q_s, do_s, k_s, v_s, lse_s, delta_s, p_ptr, ds_ptr, warp, lane);
    __syncthreads();

    // dV += Pᵀ·dO and dK += dSᵀ·Q (the scale applied once, at the end),
    // with dQ's share between them in atomic mode; Pᵀ and dSᵀ are read
    // transposed from their [query][key] tiles.
    warp_mma<S2::kMT, S2::kNT, kBlockM / kMma, true, true, false, kSwizzleD>(dv, p_s, kRowN, s2_m / kChunk, do_s,
                                                                             kRowD, s2_n / kChunk, lane);
    if constexpr (kDqSeparate) {
      warp_mma<S2::kMT, S2::kNT, kBlockM / kMma, true, true, false, kSwizzleD>(dk, ds_s, kRowN, s2_m / kChunk, q_s,
                                                                               kRowD, s2_n / kChunk, lane);
    } else {
      float *dq_tile = bp.dq_accum + (row0 + m0) * p.head_dim;
      if (m0 + kBlockM <= p.seqlen_q && p.head_dim == kHeadDim)
        add_dq_then_dk<true, S2>(dk, dq_tile, p, kBlockM, ds_s, k_s, q_s, warp, lane);
      else
        add_dq_then_dk<false, S2>(dk, dq_tile, p, p.seqlen_q - m0, ds_s, k_s, q_s, warp, lane);
    }
    hq = hq_next;
    mb = mb_next;
  }
  cp_async_wait_all();  // K and V landed even when no query block was visited

  // dK = scale · Σ dSᵀ·Q and dV in the element type; rows past the end and
  // columns past the head dim dropped (a column pair is wholly in or out).
  // FEATURES: the end is the sequence's rows of K, the unused keys' zeros.
#if FAT_BWD_FEATURES
  const int key_rows = view.full_k;
#else
  const int key_rows = p.seqlen_k;
#endif
  elem_t *dk_g = at<elem_t>(bp.dk, batch * bp.dk_batch_stride + head_k * bp.dk_head_stride);
  elem_t *dv_g = at<elem_t>(bp.dv, batch * bp.dv_batch_stride + head_k * bp.dv_head_stride);
#pragma unroll
  for (int mt = 0; mt < S2::kMT; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int key = n0 + s2_m + mt * kMma + g + h * 8;
      if (key >= key_rows) continue;
#pragma unroll
      for (int nt = 0; nt < S2::kNT; nt++) {
        const int col = s2_n + nt * kMmaN + 2 * t;
        if (col >= p.head_dim) continue;
        *reinterpret_cast<u32 *>(dk_g + key * bp.dk_row_stride + col) =
            pack2(dk[mt][nt][2 * h] * p.softmax_scale, dk[mt][nt][2 * h + 1] * p.softmax_scale);
        *reinterpret_cast<u32 *>(dv_g + key * bp.dv_row_stride + col) =
            pack2(dv[mt][nt][2 * h], dv[mt][nt][2 * h + 1]);
      }
    }
}

// Separate mode: dQ of kBlockM query rows of one (batch, head) as
// scale · Σ_j dS_ij·K_j over the visible key blocks in order, in registers:
// deterministic. Grid: (ceil(seqlen_q / kBlockM), heads, batch), kThreads
// threads. Compiled empty in atomic mode.
extern "C" __global__ void __launch_bounds__(kThreads)
fat_bwd_dq(const fat_bwd_params bp_in) {
  if constexpr (kDqSeparate) {
    // Causal: the later a query block, the more key tiles it sees.
    const BlockCoords coords = block_coords<true>();
#if FAT_BWD_FEATURES
    const SequenceView view = sequence_view(bp_in, coords.batch);
    const fat_bwd_params &bp = view.bp;
    if (coords.block * kBlockM >= bp.fwd.seqlen_q) return;  // past its sequence's queries
#else
    const fat_bwd_params &bp = bp_in;
#endif
    const fat_fwd_params &p = bp.fwd;
    extern __shared__ __align__(128) unsigned char smem[];  // whole lines: the swizzle's xor
    constexpr u32 kRowD = kPitchD * sizeof(elem_t), kRowN = kPitchN * sizeof(elem_t);
    const u32 q_s = smem_u32(smem);                 // Q_i   [kBlockM][kPitchD]
    const u32 do_s = q_s + kBlockM * kRowD;         // dO_i  [kBlockM][kPitchD]
    const u32 k_s = do_s + kBlockM * kRowD;         // K_j   [kBlockN][kPitchD]
    const u32 v_s = k_s + kBlockN * kRowD;          // V_j   [kBlockN][kPitchD]
    const u32 ds_s = v_s + kBlockN * kRowD;         // dS    [kBlockM][kPitchN]
    float *lse_s = reinterpret_cast<float *>(smem + (ds_s + kBlockM * kRowN - q_s));
    float *delta_s = lse_s + kBlockM;
    elem_t *ds_ptr = reinterpret_cast<elem_t *>(smem + (ds_s - q_s));

    const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
    const int g = lane / 4, t = lane % 4;
    const int m0 = coords.block * kBlockM, head = coords.head, batch = coords.batch;
    const int head_k = head / (p.heads / p.heads_k);
    const int offset = p.seqlen_k - p.seqlen_q;  // bottom-right alignment: query i sits at key i + offset
    const KeyWindow window = key_window(p);
#if FAT_BWD_FEATURES
    const long long row0 = view.stats_row0(batch, head);
#else
    const long long row0 = ((long long)batch * p.heads + head) * p.seqlen_q;
#endif

    load_rows<kBlockM>(q_s, at<elem_t>(p.q, batch * p.q_batch_stride + head * p.q_head_stride +
                                                (long long)m0 * p.q_row_stride),
                       p.q_row_stride, p.seqlen_q - m0, p.head_dim, tid);
    load_rows<kBlockM>(do_s, at<elem_t>(bp.dout, batch * bp.do_batch_stride + head * bp.do_head_stride +
                                                     (long long)m0 * bp.do_row_stride),
                       bp.do_row_stride, p.seqlen_q - m0, p.head_dim, tid);
    cp_async_commit();
    load_row_stats(lse_s, delta_s, p.lse + row0, bp.delta + row0, m0, p.seqlen_q, tid);

    // S and dP: kBlockM queries x kBlockN keys; dQ: kBlockM x kHeadDim.
    using S1 = WarpSplit<kBlockM, kBlockN, true>;
    using S2 = WarpSplit<kBlockM, kHeadDim, true>;
    static_assert(!kDqSeparate || (S1::kValid && S2::kValid), "warps split S and dQ evenly");
    const int s2_m = (warp % S2::kWM) * S2::kMT * kMma, s2_n = (warp / S2::kWM) * S2::kNT * kMmaN;
    float dq[S2::kMT][S2::kNT][4];
    zero(dq);

    // Keys [n_first, n_end) are visible to at least one row of this block:
    // the right bound of its last row ends them, the left bound of its first
    // row starts them. The key tiles outside are skipped.
    const int n_first = window.has_left ? max(0, m0 + offset - window.left) : 0;
    const int n_end = window.has_right ? min(p.seqlen_k, m0 + kBlockM - 1 + offset + window.right + 1)
                                       : p.seqlen_k;
    const int j_first = n_first / kBlockN;
    const int j_end = n_end > n_first ? (n_end + kBlockN - 1) / kBlockN : j_first;
    const elem_t *k_g = at<elem_t>(p.k, batch * p.k_batch_stride + head_k * p.k_head_stride);
    const elem_t *v_g = at<elem_t>(p.v, batch * p.v_batch_stride + head_k * p.v_head_stride);
    for (int j = j_first; j < j_end; j++) {
      const int n0 = j * kBlockN;
      __syncthreads();  // every warp is done with the previous K, V and dS
      load_rows<kBlockN>(k_s, k_g + (long long)n0 * p.k_row_stride, p.k_row_stride, p.seqlen_k - n0,
                         p.head_dim, tid);
      load_rows<kBlockN>(v_s, v_g + (long long)n0 * p.v_row_stride, p.v_row_stride, p.seqlen_k - n0,
                         p.head_dim, tid);
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();

      probabilities<S1, false>(p, window, m0, n0, q_s, do_s, k_s, v_s, lse_s, delta_s, nullptr, ds_ptr, warp,
                               lane);
      __syncthreads();

      // dQ += dS·K_j
      warp_mma<S2::kMT, S2::kNT, kBlockN / kMma, false, true, false, kSwizzleD>(
          dq, ds_s + s2_m * kRowN, kRowN, 0, k_s, kRowD, s2_n / kChunk, lane);
    }
    cp_async_wait_all();  // Q and dO landed even when no key block was visited

    // Rows past the end and columns past the head dim dropped.
    elem_t *dq_g = at<elem_t>(bp.dq, batch * bp.dq_batch_stride + head * bp.dq_head_stride);
#pragma unroll
    for (int mt = 0; mt < S2::kMT; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = m0 + s2_m + mt * kMma + g + h * 8;
        if (row >= p.seqlen_q) continue;
#pragma unroll
        for (int nt = 0; nt < S2::kNT; nt++) {
          const int col = s2_n + nt * kMmaN + 2 * t;
          if (col >= p.head_dim) continue;
          *reinterpret_cast<u32 *>(dq_g + row * bp.dq_row_stride + col) =
              pack2(dq[mt][nt][2 * h] * p.softmax_scale, dq[mt][nt][2 * h + 1] * p.softmax_scale);
        }
      }
  }
}

// Atomic mode: dQ = scale · dq_accum in the element type, a whole tile's
// floats in dq_whole_offset()'s order (bwd_common.cuh). Grid as
// fat_bwd_preprocess. Compiled empty in separate mode.
extern "C" __global__ void __launch_bounds__(FAT_BWD_ROW_THREADS)
fat_bwd_convert_dq(const fat_bwd_params bp) {
  if constexpr (!kDqSeparate)
    convert_dq_rows<kBlockM>(bp, [](int row, int col) { return dq_whole_offset(row, col); });
}
