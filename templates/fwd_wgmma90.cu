// FlashAttention forward on Hopper's warpgroup matrix products (wgmma,
// sm_90a): the mma80 family's algorithm, its products moved to the tensor
// cores' asynchronous path. notes/wgmma-forward.md has the layouts and the
// encodings this file relies on, and tests/test_gpu_wgmma.c checks them.
//
// One thread block owns kBlockM query rows of one (batch, head), 64 rows per
// warpgroup of 128 threads. Q stays resident; K/V tiles of kBlockN keys
// stream through shared memory with cp.async, kStages deep. Per tile:
//   S = Q·Kᵀ   wgmma m64n{kBlockN}k16, both operands K-major in shared memory
//   online softmax on S's accumulators (a row's columns within one quad of
//   lanes, as mma.sync's), P rounded straight into A fragments
//   O += P·V   wgmma m64n{kHeadDim}k16, A = P from registers, V N-major
// and at the end O = o / l, lse = m·scale + ln(l); a row that sees no key
// gets O = 0, lse = -inf. Masks compare absolute positions, bottom-right
// aligned (templates/fwd_mma80.cu says more); key tiles no row of the block
// sees are never loaded.
//
// Two schedules (OVERLAP):
//   0  each tile's products are waited for before its softmax, as mma80's;
//   1  FlashAttention-3's intra-warpgroup overlap: S of tile j + 1 and
//      P·V of tile j are issued together, and the softmax of j + 1 runs
//      while the tensor cores still compute P·V of j; only the rescaling
//      of O waits for it. Needs two P fragments a thread and two K/V
//      buffers.
// No warp is set apart to load (cp.async from every thread).
//
// Tiles are 64-column slabs of 128-byte rows, chunk c of row r at
// c ^ (r % 8): wgmma's 128-byte swizzle, every tile 1024-byte aligned.
// Parameters in double braces are substituted by generator/expand.lua; they
// change speed, never results.
#include "fat_abi.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};   // query rows per block: 64 per warpgroup
constexpr int kBlockN = {{BLOCK_N}};   // keys per K/V tile
constexpr int kStages = {{STAGES}};    // K/V tiles in flight
constexpr bool kOverlap = {{OVERLAP}}; // the schedule, above
constexpr bool kIsBf16 = {{IS_BF16}};
constexpr bool kIsCausal = {{IS_CAUSAL}};
constexpr bool kIsLocal = {{IS_LOCAL}};
#if {{IS_BF16}}
#define FAT_ELEM "bf16"
#else
#define FAT_ELEM "f16"
#endif

#include "fwd_common.cuh"

constexpr int kThreads = kBlockM * 2;          // 128 threads (a warpgroup) per 64 rows
constexpr int kKSteps = kHeadDim / 16;         // k-steps of S = Q·Kᵀ
constexpr int kPSteps = kBlockN / 16;          // k-steps of O += P·V
constexpr int kSRegs = kBlockN / 2;            // S accumulators a thread
constexpr int kORegs = kHeadDim / 2;           // O accumulators a thread
constexpr unsigned kQBytes = kBlockM * kHeadDim * 2;
constexpr unsigned kKVBytes = kBlockN * kHeadDim * 2;

static_assert(kBlockM == 64 || kBlockM == 128, "one or two warpgroups of 64 rows");
static_assert(kBlockN == 64 || kBlockN == 128, "S's products: m64n64 and m64n128");
static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "whole 64-column slabs; wgmma's N <= 256");
static_assert(kStages >= 1, "at least one K/V buffer");
static_assert(!kOverlap || kStages == 2, "the overlapped schedule keeps two K/V buffers");
static_assert(!(kIsCausal && kIsLocal), "causal is the local window (-1, 0), generated apart");

#include "wgmma.cuh"

// Grid: (ceil(seqlen_q / kBlockM), heads, batch). Dynamic shared memory:
// Q, kStages K and V tiles, and 1 KiB to align them.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
fat_fwd_wgmma90(const fat_fwd_params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 q_base = (smem_u32(smem) + 1023u) & ~1023u;
  const u32 k_base = q_base + kQBytes;                // kStages tiles
  const u32 v_base = k_base + kStages * kKVBytes;    // kStages tiles

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;               // fragment row group, column pair
  const int m_block = kIsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int batch = blockIdx.z, head = blockIdx.y;
  const int head_k = head / (p.heads / p.heads_k);
  const Sequence seq = sequence_of(p, batch);
  const int m0 = m_block * kBlockM;
  if (m0 >= seq.seqlen_q) return;
  const int row_end = min(m0 + kBlockM, seq.seqlen_q);
  const int diag = seq.seqlen_k - seq.seqlen_q;       // bottom-right alignment
  const int first_pos = m0, last_pos = row_end - 1;

  int n_begin = 0, n_end = seq.seqlen_k;
  if (kIsCausal) n_end = min(n_end, last_pos + diag + 1);
  if (kIsLocal && p.window_right >= 0) n_end = min(n_end, last_pos + diag + p.window_right + 1);
  if (kIsLocal && p.window_left >= 0) n_begin = max(0, first_pos + diag - p.window_left);
  const int tile_begin = n_begin / kBlockN;
  const int tile_end = n_end > n_begin ? (n_end + kBlockN - 1) / kBlockN : tile_begin;
  const int n_tiles = tile_end - tile_begin;

  const elem_t *k_g = static_cast<const elem_t *>(p.k) + seq.k_off + head_k * p.k_head_stride;
  const elem_t *v_g = static_cast<const elem_t *>(p.v) + seq.v_off + head_k * p.v_head_stride;
  const int head_dim = p.head_dim;
  auto load_k = [&](int j) {  // the block's j-th key tile, into buffer j % kStages
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN;
      load_tile<kBlockN>(k_base + (j % kStages) * kKVBytes, k_g + n0 * p.k_row_stride,
                         p.k_row_stride, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  };
  auto load_v = [&](int j) {
    if (j < n_tiles) {
      const int n0 = (tile_begin + j) * kBlockN;
      load_tile<kBlockN>(v_base + (j % kStages) * kKVBytes, v_g + n0 * p.v_row_stride,
                         p.v_row_stride, seq.seqlen_k - n0, head_dim, tid);
    }
    cp_async_commit();
  };

  // Groups in order: Q with K[0], V[0], K[1], V[1], ... K and V of the
  // first kStages tiles.
  load_tile<kBlockM>(q_base, static_cast<const elem_t *>(p.q) + seq.q_off + head * p.q_head_stride +
                                 (long long)m0 * p.q_row_stride,
                     p.q_row_stride, seq.seqlen_q - m0, head_dim, tid);
  for (int s = 0; s < kStages; s++) {
    load_k(s);
    load_v(s);
  }

  // This warp's rows: 16 of its warpgroup's 64, lanes g and g + 8.
  const int wg = warp / 4, row0 = 64 * wg + 16 * (warp % 4) + g;
  const int row_pos[2] = {m0 + row0, m0 + row0 + 8};
  float o[kORegs];
  float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kORegs; i++) o[i] = 0.f;
  const float scale_log2 = p.scale_log2;
  const bool softcap = p.softcap_in != 0.f;
  const int win_hi = kIsLocal && p.window_right >= 0 ? diag + p.window_right : 0x3fffffff;
  const int win_lo = kIsLocal && p.window_left >= 0 ? diag - p.window_left : -0x3fffffff;
  // Q's rows of this warpgroup start 64 rows into each slab.
  const u32 q_wg = q_base + wg * 64 * 128;

  // S = Q·Kᵀ of the block's j-th tile into s, issued and committed (not
  // waited for): k-step ks is slab ks / 4, 32 bytes further per step in it.
  auto issue_s = [&](float (&s)[kSRegs], int j) {
    const u32 k_tile = k_base + (j % kStages) * kKVBytes;
#pragma unroll
    for (int i = 0; i < kSRegs; i++) s[i] = 0.f;
    const u64 dq = descriptor(q_wg, 16, 1024), dk = descriptor(k_tile, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ks++) {
      const u32 in_slab = (ks % 4) * 32;
      wgmma_ss<kBlockN>(s, desc_add(dq, (ks / 4) * kBlockM * 128 + in_slab),
                        desc_add(dk, (ks / 4) * kBlockN * 128 + in_slab));
    }
    wgmma_commit();
  };
  // O += P·V of the block's j-th tile, issued and committed: 16 keys (two
  // 8-row groups) a k-step, the next 64 columns one slab (kBlockN rows)
  // further.
  auto issue_pv = [&](const u32 (&a)[kPSteps][4], int j) {
    const u32 v_tile = v_base + (j % kStages) * kKVBytes;
    const u64 dv = descriptor(v_tile, kBlockN * 128, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPSteps; kk++) wgmma_rs<kHeadDim>(o, a[kk], desc_add(dv, kk * 2048));
    wgmma_commit();
  };
  // The softcap, the masks and the online softmax of tile j's scores: the
  // row maxima and sums move on, P is rounded into the A fragments of P·V
  // (k-step kk takes the 8-key tiles 2kk and 2kk + 1), and alpha[h] is what
  // row h's O must be multiplied by before P·V adds to it.
  auto softmax = [&](float (&s)[kSRegs], int j, u32 (&a)[kPSteps][4], float (&alpha)[2]) {
    const int n0 = (tile_begin + j) * kBlockN;
    if (softcap) {
#pragma unroll
      for (int i = 0; i < kSRegs; i++) s[i] = p.softcap_out * fast_tanh(s[i] * p.softcap_in);
    }
    // Accumulator i: row row_pos[(i % 4) / 2], key n0 + 8·(i / 4) + 2t + i % 2.
    const bool needs_mask = n0 + kBlockN > seq.seqlen_k ||
                            (kIsCausal && n0 + kBlockN - 1 > first_pos + diag) ||
                            (kIsLocal && (n0 + kBlockN - 1 > first_pos + win_hi || n0 < last_pos + win_lo));
    if (needs_mask) {
#pragma unroll
      for (int i = 0; i < kSRegs; i++) {
        const int pos = row_pos[(i % 4) / 2];
        const int col = n0 + 8 * (i / 4) + 2 * t + i % 2;
        if (col >= seq.seqlen_k || (kIsCausal && col > pos + diag) ||
            (kIsLocal && (col > pos + win_hi || col < pos + win_lo)))
          s[i] = neg_inf();
      }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float tile_max = neg_inf();
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; nt++)
        tile_max = fmaxf(tile_max, fmaxf(s[4 * nt + 2 * h], s[4 * nt + 2 * h + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_old = row_max[h], m_new = fmaxf(m_old, tile_max);
      row_max[h] = m_new;
      const float m_scaled = m_new == neg_inf() ? 0.f : m_new * scale_log2;
      alpha[h] = fast_exp2(m_old * scale_log2 - m_scaled);
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; nt++) {
        const float p0 = fast_exp2(fmaf(s[4 * nt + 2 * h], scale_log2, -m_scaled));
        const float p1 = fast_exp2(fmaf(s[4 * nt + 2 * h + 1], scale_log2, -m_scaled));
        sum += p0 + p1;
        a[nt / 2][h + 2 * (nt % 2)] = pack2(p0, p1);
      }
      row_sum[h] = row_sum[h] * alpha[h] + sum;
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; dt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) o[4 * dt + e] *= alpha[e / 2];
    }
  };

  float s[kSRegs], alpha[2];
  u32 a[kPSteps][4];
  if constexpr (!kOverlap) {
    for (int j = 0; j < n_tiles; j++) {
      cp_async_wait<2 * kStages - 1>();  // K[j] (and Q) landed
      tiles_landed();
      issue_s(s, j);
      wgmma_wait<0>();
      softmax(s, j, a, alpha);
      rescale_o(alpha);
      cp_async_wait<2 * kStages - 2>();  // V[j] landed
      tiles_landed();
      issue_pv(a, j);
      wgmma_wait<0>();
      __syncthreads();  // every warpgroup is done with buffer j % kStages
      load_k(j + kStages);
      load_v(j + kStages);
    }
  } else if (n_tiles > 0) {
    // Tile 0's scores first; then each round issues S of tile j + 1 and
    // P·V of tile j, runs the softmax of j + 1 once its S is in, and
    // rescales O once P·V of j is. a holds P of tile j (read by the tensor
    // cores until that wait), a_next P of tile j + 1.
    cp_async_wait<3>();  // Q and K[0]
    tiles_landed();
    issue_s(s, 0);
    wgmma_wait<0>();
    softmax(s, 0, a, alpha);  // O is still zero: nothing to rescale
    for (int j = 0; j < n_tiles; j++) {
      const bool next = j + 1 < n_tiles;
      cp_async_wait<1>();  // K[j + 1] and V[j] landed (only V[j + 1] may be in flight)
      tiles_landed();
      if (next) issue_s(s, j + 1);
      issue_pv(a, j);
      u32 a_next[kPSteps][4];
      if (next) {
        wgmma_wait<1>();  // S of tile j + 1 (P·V of j may still run)
        softmax(s, j + 1, a_next, alpha);
      }
      wgmma_wait<0>();
      if (next) {
        rescale_o(alpha);
#pragma unroll
        for (int kk = 0; kk < kPSteps; kk++)
#pragma unroll
          for (int r = 0; r < 4; r++) a[kk][r] = a_next[kk][r];
      }
      __syncthreads();  // K[j] and V[j] are read by every warpgroup: their buffers are free
      load_k(j + 2);
      load_v(j + 2);
    }
  }
  cp_async_wait<0>();

  // O = o / l straight from the accumulators: row row_pos[h], columns
  // 8·dt + 2t and + 1 of the head.
  elem_t *o_head = static_cast<elem_t *>(p.o) + seq.o_off + head * p.o_head_stride;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const float l = quad_sum(row_sum[h]), inv_l = l > 0.f ? 1.f / l : 0.f;
    const int pos = row_pos[h];
    if (pos >= seq.seqlen_q) continue;
    elem_t *dst = o_head + (long long)pos * p.o_row_stride;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; dt++)
      if (8 * dt + 2 * t < head_dim)
        *reinterpret_cast<u32 *>(dst + 8 * dt + 2 * t) = pack2(o[4 * dt + 2 * h] * inv_l, o[4 * dt + 2 * h + 1] * inv_l);
    if (t == 0)
      p.lse[((long long)batch * (p.cu_seqlens_q ? 0 : p.heads) + head) * seq.lse_rows + seq.lse_row0 + pos] =
          row_lse(l, row_max[h], p.softmax_scale);
  }
}
