// FlashAttention-2 style forward with mma.sync (sm_80 and newer).
//
// One thread block owns kBlockM query rows of one (batch, head). Its Q tile
// stays resident; K/V tiles of kBlockN keys stream through shared memory with
// cp.async, kStages deep. Each warp owns kWarpRows whole query rows, so the
// online softmax of a row never leaves its quad of threads:
//   S = Q·Kᵀ            (m16n8k16 MMAs, fp32 accumulators)
//   m_new = max(m, rowmax(S)),  alpha = exp2((m - m_new)·scale_log2)
//   P = exp2(S·scale_log2 - m_new·scale_log2)
//   l = alpha·l + rowsum(P),    o = alpha·o + P·V
// and at the end O = o / l, lse = m·scale + ln(l).
// Causal masking compares absolute positions (bottom-right aligned: query i
// sees key j iff j <= i + seqlen_k - seqlen_q); key tiles no row of the block
// can see are never loaded. A row that sees no key gets O = 0, lse = -inf.
//
// Parameters in double braces are substituted by generator/expand.lua; they change
// speed, never results.
#include "fat_abi.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kBlockM = {{BLOCK_M}};   // query rows per thread block
constexpr int kBlockN = {{BLOCK_N}};   // keys per K/V tile
constexpr int kWarps = {{WARPS}};
constexpr int kStages = {{STAGES}};    // K/V tiles in flight (1: FlashAttention-2's schedule)
constexpr bool kIsBf16 = {{IS_BF16}};
constexpr bool kIsCausal = {{IS_CAUSAL}};

constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kBlockM / kWarps;  // query rows owned by one warp
constexpr int kMTiles = kWarpRows / 16;      // 16-row MMA tiles per warp
constexpr int kKSteps = kHeadDim / 16;       // k-steps of S = Q·Kᵀ
constexpr int kNTiles = kBlockN / 8;         // 8-column tiles of S
constexpr int kPSteps = kBlockN / 16;        // k-steps of O += P·V
constexpr int kDTiles = kHeadDim / 8;        // 8-column tiles of O
// Shared-memory rows are padded by one 16-byte chunk: the row pitch is then
// an odd number of chunks, so the 8 rows an ldmatrix phase reads hit 8
// different bank groups.
constexpr int kRowPitch = kHeadDim + 8;      // elements
constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of one row
// Keep Q's MMA fragments in registers when they fit beside the accumulators;
// otherwise reload them from shared memory at every k-step.
constexpr int kAccumRegs = kMTiles * (kDTiles * 4 + kNTiles * 4);
constexpr int kQFragRegs = kMTiles * kKSteps * 4;
constexpr int kRegBudget = 176;              // of 255; the rest: fragments, addresses, softmax state
constexpr bool kQInRegs = kAccumRegs + kQFragRegs <= kRegBudget;

static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row tiles");
static_assert(kBlockN % 16 == 0, "P·V consumes keys 16 at a time");
static_assert(kHeadDim % 16 == 0, "the MMA k-step is 16");
static_assert(kStages >= 1, "at least one K/V buffer");

typedef unsigned short elem_t;  // raw fp16 / bf16 bits
typedef unsigned int u32;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ u32 smem_u32(const void *p) {
  u32 r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// 16-byte asynchronous copy global → shared; bytes = 0 zero-fills the chunk
// without reading global memory (rows past the end of a sequence).
__device__ __forceinline__ void cp_async_16(u32 dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c += a·b for one m16n8k16 tile, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (kIsBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two fp32 values rounded to the element type, lo in the low half.
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (kIsBf16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// Copies kRows rows of one head (kHeadDim elements each) into a padded
// shared-memory tile; rows at or past valid_rows are zero-filled. Each thread
// walks one column chunk down the rows with a running pointer, so the loop
// keeps one address live, not one per row it copies.
template <int kRows>
__device__ __forceinline__ void load_tile(u32 tile, const elem_t *src, long long row_stride,
                                          int valid_rows, int tid) {
  constexpr int kChunks = kRows * kChunksPerRow;
  if constexpr (kThreads % kChunksPerRow == 0) {
    constexpr int kRowsPerPass = kThreads / kChunksPerRow;
    const int row0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * 8;
    const elem_t *g = src + row0 * row_stride + col;
    const u32 dst = tile + (row0 * kRowPitch + col) * sizeof(elem_t);
#pragma unroll
    for (int i = 0; i < (kRows + kRowsPerPass - 1) / kRowsPerPass; i++) {
      const int row = row0 + i * kRowsPerPass;
      if (kRows % kRowsPerPass == 0 || row < kRows) {
        const bool inside = row < valid_rows;
        cp_async_16(dst + i * kRowsPerPass * kRowPitch * sizeof(elem_t), inside ? g : src, inside ? 16 : 0);
      }
      g += kRowsPerPass * row_stride;
    }
  } else {
#pragma unroll
    for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; i++) {
      const int c = tid + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
        const bool inside = row < valid_rows;
        cp_async_16(tile + (row * kRowPitch + col) * sizeof(elem_t),
                    inside ? src + row * row_stride + col : src, inside ? 16 : 0);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
fat_fwd_mma80(const fat_fwd_params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Shared-memory addresses as 32-bit offsets, so that every operand address
  // below is one base register plus a constant.
  constexpr u32 kTileBytesN = kBlockN * kRowPitch * sizeof(elem_t);
  elem_t *q_smem = reinterpret_cast<elem_t *>(smem);
  const u32 q_base = smem_u32(smem);
  const u32 k_base = q_base + kBlockM * kRowPitch * sizeof(elem_t);  // kStages tiles
  const u32 v_base = k_base + kStages * kTileBytesN;                 // kStages tiles

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;  // MMA fragment coordinates: row group, column pair
  // Causal blocks further down see more keys: launch them first.
  const int m_block = kIsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  const int head_k = head / (p.heads / p.heads_k);
  const int m0 = m_block * kBlockM;
  const int causal_offset = p.seqlen_k - p.seqlen_q;  // bottom-right alignment

  // Keys [0, n_end) are visible to at least one row of this block.
  int n_end = p.seqlen_k;
  if (kIsCausal) n_end = min(n_end, m0 + kBlockM + causal_offset);
  const int n_tiles = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;

  const elem_t *q_g = static_cast<const elem_t *>(p.q) + batch * p.q_batch_stride +
                      head * p.q_head_stride + (long long)m0 * p.q_row_stride;
  const elem_t *k_g = static_cast<const elem_t *>(p.k) + batch * p.k_batch_stride + head_k * p.k_head_stride;
  const elem_t *v_g = static_cast<const elem_t *>(p.v) + batch * p.v_batch_stride + head_k * p.v_head_stride;

  auto load_k = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * kBlockN;
      load_tile<kBlockN>(k_base + (tile % kStages) * kTileBytesN, k_g + n0 * p.k_row_stride,
                         p.k_row_stride, p.seqlen_k - n0, tid);
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  };
  auto load_v = [&](int tile) {
    if (tile < n_tiles) {
      const int n0 = tile * kBlockN;
      load_tile<kBlockN>(v_base + (tile % kStages) * kTileBytesN, v_g + n0 * p.v_row_stride,
                         p.v_row_stride, p.seqlen_k - n0, tid);
    }
    cp_async_commit();
  };

  // Prologue: Q with the first K tile in one group, then the tiles ahead.
  load_tile<kBlockM>(q_base, q_g, p.q_row_stride, p.seqlen_q - m0, tid);
  load_k(0);
  if constexpr (kStages > 1) {
    load_v(0);
    for (int s = 1; s < kStages - 1; s++) {
      load_k(s);
      load_v(s);
    }
  }

  const int warp_row0 = warp * kWarpRows;  // first row of this warp inside the block
  float o[kMTiles][kDTiles][4];            // unnormalised output
  float row_max[kMTiles][2];               // m, raw scores (rows g and g+8)
  float row_sum[kMTiles][2];               // l, this thread's partial sum
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; dt++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = neg_inf();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  u32 q_frag[kQInRegs ? kMTiles : 1][kQInRegs ? kKSteps : 1][4];

  // This lane's ldmatrix row addresses (bytes), before the tile's base.
  constexpr u32 kPitchBytes = kRowPitch * sizeof(elem_t);
  const u32 q_lane = q_base + (warp_row0 + lane % 16) * kPitchBytes + (lane / 16) * 16;  // Q as row-major A
  const u32 kb_lane = ((lane % 8) + (lane / 16) * 8) * kPitchBytes + ((lane / 8) % 2) * 16;  // K as B
  const u32 vb_lane = ((lane % 8) + ((lane / 8) % 2) * 8) * kPitchBytes + (lane / 16) * 16;  // V as B, transposed
  const float scale_log2 = p.scale_log2;

  for (int j = 0; j < n_tiles; j++) {
    const int n0 = j * kBlockN;
    const u32 k_tile = k_base + (j % kStages) * kTileBytesN + kb_lane;
    const u32 v_tile = v_base + (j % kStages) * kTileBytesN + vb_lane;

    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done with the previous V tile
      load_v(j);
      cp_async_wait<1>();  // K[j] (and Q) landed
    } else {
      cp_async_wait<2 * kStages - 3>();  // K[j] (and Q) landed
    }
    __syncthreads();
    if constexpr (kStages > 1) {
      // The buffer of tile j-1 is free: every warp has passed the barrier.
      load_k(j + kStages - 1);
      load_v(j + kStages - 1);
    }
    if constexpr (kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
          for (int ks = 0; ks < kKSteps; ks++)
            ldmatrix_x4(q_frag[mt][ks], q_lane + mt * 16 * kPitchBytes + ks * 32);
      }
    }

    // S = Q·Kᵀ
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
      for (int nt = 0; nt < kNTiles; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ks++) {
      u32 a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; e++) a[mt][e] = q_frag[mt][ks][e];
        } else {
          ldmatrix_x4(a[mt], q_lane + mt * 16 * kPitchBytes + ks * 32);
        }
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; np++) {
        u32 b[4];
        ldmatrix_x4(b, k_tile + np * 16 * kPitchBytes + ks * 32);
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++) {
          mma_16816(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    if constexpr (kStages == 1) {
      __syncthreads();  // every warp is done with this K tile
      load_k(j + 1);
    }

    // Mask by absolute position: keys past the end, and keys after the
    // query's diagonal. Only tiles that cross either boundary pay for it.
    const bool needs_mask = n0 + kBlockN > p.seqlen_k ||
                            (kIsCausal && n0 + kBlockN - 1 > m0 + causal_offset);
    if (needs_mask) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int row = m0 + warp_row0 + mt * 16 + g + (e / 2) * 8;
            const int col = n0 + nt * 8 + 2 * t + (e % 2);
            if (col >= p.seqlen_k || (kIsCausal && col > row + causal_offset)) s[mt][nt][e] = neg_inf();
          }
    }

    // Online softmax: raise the running max, rescale l and o by alpha, and
    // round P to the element type at once: the S accumulators of two 8-key
    // tiles form one A fragment of P·V.
    u32 p_frag[kMTiles][kPSteps][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {  // rows g and g+8
        float tile_max = neg_inf();
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++)
          tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_old = row_max[mt][h];
        const float m_new = fmaxf(m_old, tile_max);
        row_max[mt][h] = m_new;
        // A row that has seen no key yet keeps m = -inf: never form -inf - -inf.
        const float m_scaled = m_new == neg_inf() ? 0.f : m_new * scale_log2;
        const float alpha = fast_exp2(m_old * scale_log2 - m_scaled);  // exp2(-inf) = 0
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; nt++) {
          const float p0 = fast_exp2(fmaf(s[mt][nt][2 * h], scale_log2, -m_scaled));
          const float p1 = fast_exp2(fmaf(s[mt][nt][2 * h + 1], scale_log2, -m_scaled));
          sum += p0 + p1;
          p_frag[mt][nt / 2][h + 2 * (nt % 2)] = pack2(p0, p1);
        }
        row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < kDTiles; dt++) {
          o[mt][dt][2 * h] *= alpha;
          o[mt][dt][2 * h + 1] *= alpha;
        }
      }
    }

    if constexpr (kStages == 1)
      cp_async_wait<1>();  // V[j] landed
    else
      cp_async_wait<2 * kStages - 2>();
    __syncthreads();

    // O += P·V
#pragma unroll
    for (int kk = 0; kk < kPSteps; kk++) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; dp++) {
        u32 b[4];
        ldmatrix_x4_trans(b, v_tile + kk * 16 * kPitchBytes + dp * 32);
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++) {
          mma_16816(o[mt][2 * dp], p_frag[mt][kk], b[0], b[1]);
          mma_16816(o[mt][2 * dp + 1], p_frag[mt][kk], b[2], b[3]);
        }
      }
    }
  }

  // Epilogue: O = o / l through shared memory (Q's tile, free now), so that
  // global stores are 16 bytes wide; lse = m·scale + ln(l), -inf if l = 0.
  cp_async_wait<0>();
  __syncthreads();
  float *lse_g = p.lse + ((long long)batch * p.heads + head) * p.seqlen_q;
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv_l = l > 0.f ? 1.f / l : 0.f;
      const int r = warp_row0 + mt * 16 + g + h * 8;
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt++)
        *reinterpret_cast<u32 *>(q_smem + r * kRowPitch + dt * 8 + 2 * t) =
            pack2(o[mt][dt][2 * h] * inv_l, o[mt][dt][2 * h + 1] * inv_l);
      if (t == 0 && m0 + r < p.seqlen_q)
        lse_g[m0 + r] = l > 0.f ? row_max[mt][h] * p.softmax_scale + logf(l) : neg_inf();
    }
  }
  __syncthreads();
  elem_t *o_g = static_cast<elem_t *>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride +
                (long long)m0 * p.o_row_stride;
  constexpr int kOutChunks = kBlockM * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kOutChunks + kThreads - 1) / kThreads; i++) {
    const int c = tid + i * kThreads;
    if (kOutChunks % kThreads == 0 || c < kOutChunks) {
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      if (m0 + row < p.seqlen_q)
        *reinterpret_cast<uint4 *>(o_g + row * p.o_row_stride + col) =
            *reinterpret_cast<const uint4 *>(q_smem + row * kRowPitch + col);
    }
  }
}
