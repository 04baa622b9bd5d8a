// What the backward templates share (bwd_mma80.cu, bwd_wgmma90.cu) beyond
// fat_device.cuh: small numeric and memory helpers, the query rows'
// statistics as P needs them, the mask's key window, the order in which
// thread blocks take their (block, head, batch), and the bodies of the two
// per-row kernels (the D preprocess and the dQ conversion: each template
// defines the kernels, calling these). The including template defines
// kIsBf16, kIsCausal, kIsLocal, kDqSeparate, kHeadDim, kBlockM (query rows
// per tile), kBlockN (keys per block), kChunk, kWarpSize and kLog2e first,
// and may define FAT_DQ_PADDED 1 (below). generator/expand.lua inlines this
// file into each variant's source.
#pragma once

#include "fat_device.cuh"

// FAT_DQ_PADDED 1: the dQ accumulator's rows are the template's kHeadDim
// floats apart whatever the problem's head dim (at most
// FAT_BWD_ACCUM_WIDTH(head_dim), which the host gives every row), so that a
// whole tile of a padded head dim is in the template's order too (bwd_ws90
// adds its whole 128-float rows by bulk reduction at head dim 96). 0: the
// problem's head dim apart, as the other templates have them. A macro, not
// a constant: a constexpr variable puts a symbol into every cubin.
#ifndef FAT_DQ_PADDED
#define FAT_DQ_PADDED 0
#endif
// Floats between two rows of the dQ accumulator.
__device__ __forceinline__ int dq_pitch(const fat_fwd_params &p) { return FAT_DQ_PADDED ? kHeadDim : p.head_dim; }

// FAT_BWD_FEATURES 1: the variant takes what training batches bring beyond
// a dense batch (the mma80f family): variable lengths (cu_seqlens_q and
// cu_seqlens_k, seqused_k) and the soft-cap, read from the parameters at
// run time. 0: neither (the parameters' fields are not read), and the
// machine code is what it was before the feature came: a macro, as
// FAT_DQ_PADDED, so that the dense variants' cubins stay byte for byte
// their tuned ones (fatune rehash).
#ifndef FAT_BWD_FEATURES
#define FAT_BWD_FEATURES 0
#endif

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000u); }

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
// All but the most recent group landed (the prefetched tile may still fly).
__device__ __forceinline__ void cp_async_wait_all_but_last() {
  asm volatile("cp.async.wait_group 1;\n" ::);
}

__device__ __forceinline__ float to_float(elem_t x) {
  if constexpr (kIsBf16) return __uint_as_float((u32)x << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}

// a.lo·b.lo + a.hi·b.hi of two packed pairs, in fp32.
__device__ __forceinline__ float dot2(u32 a, u32 b) {
  return to_float((elem_t)(a & 0xffffu)) * to_float((elem_t)(b & 0xffffu)) +
         to_float((elem_t)(a >> 16)) * to_float((elem_t)(b >> 16));
}

// *addr += a, *(addr + 1) += b in global memory, unordered (dQ's fp32
// sums; addr 8-byte aligned). sm_90 adds both with one vector reduction,
// half the requests to L2 of two scalar ones.
__device__ __forceinline__ void red_add2(float *addr, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
#endif
}

// The same for four floats at a 16-byte aligned addr.
__device__ __forceinline__ void red_add4(float *addr, float a, float b, float c, float d) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
#else
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
  atomicAdd(addr + 2, c);
  atomicAdd(addr + 3, d);
#endif
}

template <typename T>
__device__ __forceinline__ T *at(void *base, long long offset) {
  return static_cast<T *>(base) + offset;
}
template <typename T>
__device__ __forceinline__ const T *at(const void *base, long long offset) {
  return static_cast<const T *>(base) + offset;
}

#if FAT_BWD_FEATURES
// One sequence of the batch as a dense batch of one: the parameters with
// every tensor's pointer at the sequence's first row and the batch strides
// 0 (so that the kernels' batch · stride is 0 whatever their batch), its
// own lengths (seqlen_k: the keys it uses), and where its statistics lie.
// A packed batch's lse, D and dQ accumulator rows are (heads, total_q),
// lse's layout from the forward (fat_abi.h): the view's lse, delta and
// dq_accum start at the sequence's first row and a head's rows are
// stat_rows = total_q apart; a dense batch's are (batch, heads, seqlen_q)
// as ever. full_k: the key rows dK and dV have for the sequence, which the
// kernels write in full (zeros past the used ones: a K/V cache padded per
// sequence gets no gradient in its padding, never garbage).
struct SequenceView {
  fat_bwd_params bp;
  int full_k;     // rows of K (dK, dV) the sequence owns: its seqlen_k before seqused_k
  int stat_rows;  // rows between two heads' statistics: total_q packed, seqlen_q dense
  bool packed;
  // The first row of (batch, head)'s statistics (lse, D, the dQ accumulator)
  // in the view's arrays.
  __device__ long long stats_row0(int batch, int head) const {
    return ((long long)(packed ? 0 : batch) * bp.fwd.heads + head) * stat_rows;
  }
};

__device__ __forceinline__ SequenceView sequence_view(const fat_bwd_params &in, int batch) {
  SequenceView s;
  s.bp = in;
  fat_bwd_params &b = s.bp;
  fat_fwd_params &p = b.fwd;
  s.packed = p.cu_seqlens_q != nullptr;
  s.stat_rows = p.seqlen_q;
  if (s.packed) {
    const int q0 = p.cu_seqlens_q[batch], k0 = p.cu_seqlens_k[batch];
    s.stat_rows = p.cu_seqlens_q[p.batch];
    p.seqlen_q = p.cu_seqlens_q[batch + 1] - q0;
    p.seqlen_k = p.cu_seqlens_k[batch + 1] - k0;
    p.q = at<elem_t>(p.q, q0 * p.q_row_stride);
    p.o = at<elem_t>(p.o, q0 * p.o_row_stride);
    b.dout = at<elem_t>(b.dout, q0 * b.do_row_stride);
    b.dq = at<elem_t>(b.dq, q0 * b.dq_row_stride);
    p.k = at<elem_t>(p.k, k0 * p.k_row_stride);
    p.v = at<elem_t>(p.v, k0 * p.v_row_stride);
    b.dk = at<elem_t>(b.dk, k0 * b.dk_row_stride);
    b.dv = at<elem_t>(b.dv, k0 * b.dv_row_stride);
    p.lse += q0;
    b.delta += q0;
    if (b.dq_accum) b.dq_accum += (long long)q0 * dq_pitch(p);
    p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = 0;
    b.do_batch_stride = b.dq_batch_stride = b.dk_batch_stride = b.dv_batch_stride = 0;
  }
  s.full_k = p.seqlen_k;
  if (p.seqused_k) p.seqlen_k = min(p.seqlen_k, p.seqused_k[batch]);
  return s;
}

// tanh on the special-function unit, as the forward's soft-cap
// (fwd_common.cuh's fast_tanh, which the backward templates do not include).
__device__ __forceinline__ float softcap_tanh(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
#endif

// One query row's softmax statistics in the form P needs: lse·log2(e), and
// +inf for a row that sees no key or lies past the end, so that
// exp2(s·scale_log2 − it) = 0 there (never −inf − −inf); D, 0 past the end.
struct RowStats {
  float lse_log2, delta;
};
// The same as stored: lse and D, −inf and 0 past the end. The prefetch
// loads these a tile ahead and converts them only when it stores them:
// converted at once, the loading warps waited on global memory just before
// the next barrier, and every other warp at it (ncu, d128: 5 % of the
// stall samples).
struct RawRowStats {
  float lse, delta;
};
__device__ __forceinline__ RawRowStats raw_row_stats(const float *lse, const float *delta, int row,
                                                     int seqlen_q) {
  const bool inside = row < seqlen_q;
  return {inside ? lse[row] : neg_inf(), inside ? delta[row] : 0.f};
}
__device__ __forceinline__ RowStats row_stats(RawRowStats r) {
  return {r.lse == neg_inf() ? pos_inf() : r.lse * kLog2e, r.delta};
}

// The keys a query at key position pos sees: pos − left <= key <= pos +
// right, a bound ignored when its flag is off. The flags are compile-time:
// causal is right = 0 and no left, so its tests are the ones it always had;
// local tests both bounds, an absent one (−1) becoming seqlen_q + seqlen_k,
// which hides no key. Bounds are clamped to that too, so pos ± bound stays
// in an int. (No run-time flags: at 255 registers each one is a spill.)
struct KeyWindow {
  static constexpr bool has_left = kIsLocal, has_right = kIsCausal || kIsLocal;
  int left, right;
};
__device__ __forceinline__ KeyWindow key_window(const fat_fwd_params &p) {
  const int widest = p.seqlen_q + p.seqlen_k;
  KeyWindow w;
  w.left = kIsLocal && p.window_left >= 0 ? min(p.window_left, widest) : widest;
  w.right = kIsCausal ? 0 : kIsLocal && p.window_right >= 0 ? min(p.window_right, widest) : widest;
  return w;
}

// Whether the window hides KEY from the query at key position POS.
__device__ __forceinline__ bool hidden(const KeyWindow &w, int key, int pos) {
  return (w.has_right && key > pos + w.right) || (w.has_left && key < pos - w.left);
}

// Whether some pair of keys [n0, n0 + kBlockN) x queries at positions
// [pos0, pos0 + kBlockM) is hidden: the tile then needs the per-element test.
__device__ __forceinline__ bool window_cuts(const KeyWindow &w, int n0, int pos0) {
  return (w.has_right && n0 + kBlockN - 1 > pos0 + w.right) ||
         (w.has_left && n0 < pos0 + kBlockM - 1 - w.left);
}

// This thread block's (block, head, batch). Causal: the blocks of one
// (batch, head) differ in work, and thread blocks start in the order of
// their linear index; that index is mapped block slowest, so that every
// (batch, head)'s heaviest block runs first and the lightest ones last
// (longest first), rather than one (batch, head) after another, which left
// the last one's heaviest block to run on alone at the end. The heaviest is
// block 0 for key blocks, the last one for query blocks (kLastHeaviest).
struct BlockCoords {
  int block, head, batch;
};
template <bool kLastHeaviest>
__device__ __forceinline__ BlockCoords block_coords() {
  if constexpr (kIsCausal) {
    const int blocks = gridDim.x, heads = gridDim.y, pairs = heads * gridDim.z;
    const int linear = blockIdx.x + blocks * (blockIdx.y + heads * blockIdx.z);
    const int order = linear / pairs;
    return {kLastHeaviest ? blocks - 1 - order : order, linear % pairs % heads, linear % pairs / heads};
  } else {
    return {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
  }
}

// The per-row kernels' thread: FAT_BWD_ROW_LANES(head_dim) lanes (a power
// of two, aligned within the warp) share one query row; mask is theirs, for
// the shuffles (a group whose row is past the end leaves as one).
struct RowThread {
  int row, lane, lanes;
  unsigned mask;
};
__device__ __forceinline__ RowThread row_thread(const fat_fwd_params &p) {
  const int lanes = FAT_BWD_ROW_LANES(p.head_dim);
  const int group_first = (int)(threadIdx.x % kWarpSize) & ~(lanes - 1);
  return {(int)(blockIdx.x * (FAT_BWD_ROW_THREADS / lanes) + threadIdx.x / lanes), (int)(threadIdx.x % lanes),
          lanes, (lanes == kWarpSize ? 0xffffffffu : (1u << lanes) - 1u) << group_first};
}

// D = rowsum(dO ∘ O) for each query row over the problem's head dim, in
// fp32 from the 16-bit values; in atomic mode the row's fp32 dQ accumulator
// is zeroed here too. Grid: (ceil(seqlen_q / rows), heads, batch),
// FAT_BWD_ROW_THREADS threads, FAT_BWD_ROW_LANES(head_dim) lanes a row.
__device__ __forceinline__ void preprocess_rows(const fat_bwd_params &bp_in) {
#if FAT_BWD_FEATURES
  const SequenceView view = sequence_view(bp_in, blockIdx.z);
  const fat_bwd_params &bp = view.bp;
#else
  const fat_bwd_params &bp = bp_in;
#endif
  const fat_fwd_params &p = bp.fwd;
  const RowThread rt = row_thread(p);
  const int row = rt.row, lane = rt.lane;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const elem_t *o = at<elem_t>(p.o, batch * p.o_batch_stride + row * p.o_row_stride + head * p.o_head_stride);
  const elem_t *d_o = at<elem_t>(bp.dout, batch * bp.do_batch_stride + row * bp.do_row_stride +
                                              head * bp.do_head_stride);
  // 16 bytes a lane (strides are multiples of 8 elements and the tensors
  // 16-byte aligned: fat_attention_bwd checks); one element a lane left
  // most of each request unused.
  float sum = 0.f;
  for (int c = lane * kChunk; c < p.head_dim; c += rt.lanes * kChunk) {
    const uint4 a = *reinterpret_cast<const uint4 *>(o + c), b = *reinterpret_cast<const uint4 *>(d_o + c);
    sum += dot2(a.x, b.x) + dot2(a.y, b.y) + dot2(a.z, b.z) + dot2(a.w, b.w);
  }
  for (int off = rt.lanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(rt.mask, sum, off);
#if FAT_BWD_FEATURES
  const long long r = view.stats_row0(batch, head) + row;
#else
  const long long r = ((long long)batch * p.heads + head) * p.seqlen_q + row;
#endif
  if (lane == 0) bp.delta[r] = sum;
  if constexpr (!kDqSeparate)
    for (int c = lane * 4; c < dq_pitch(p); c += rt.lanes * 4)
      *reinterpret_cast<float4 *>(bp.dq_accum + r * dq_pitch(p) + c) = make_float4(0.f, 0.f, 0.f, 0.f);
}

// dQ = scale · dq_accum rounded to the element type, over the problem's
// head dim: dq_accum's rows are dq_pitch() floats apart, and a whole tile
// (kTileRows rows, all inside, and head_dim = kHeadDim or FAT_DQ_PADDED) is
// in the including template's order: whole_offset(row in the tile, column)
// is where its floats of columns c, c + 1 (and of c + 8, c + 9, 16 bytes
// on) lie; the padding's columns are never written out. The body of
// fat_bwd_convert_dq in atomic mode; grid as fat_bwd_preprocess.
template <int kTileRows, class WholeOffset>
__device__ __forceinline__ void convert_dq_rows(const fat_bwd_params &bp_in, WholeOffset whole_offset) {
#if FAT_BWD_FEATURES
  const SequenceView view = sequence_view(bp_in, blockIdx.z);
  const fat_bwd_params &bp = view.bp;
#else
  const fat_bwd_params &bp = bp_in;
#endif
  const fat_fwd_params &p = bp.fwd;
  const RowThread rt = row_thread(p);
  const int row = rt.row, lane = rt.lane;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
#if FAT_BWD_FEATURES
  const float *slab = bp.dq_accum + view.stats_row0(batch, head) * dq_pitch(p);
#else
  const float *slab = bp.dq_accum + ((long long)batch * p.heads + head) * p.seqlen_q * dq_pitch(p);
#endif
  const bool whole = (FAT_DQ_PADDED || p.head_dim == kHeadDim) && row < p.seqlen_q / kTileRows * kTileRows;
  const float *tile = slab + (long long)(row / kTileRows) * kTileRows * kHeadDim;
  const float *acc = slab + (long long)row * dq_pitch(p);
  elem_t *dq = at<elem_t>(bp.dq, batch * bp.dq_batch_stride + row * bp.dq_row_stride +
                                     head * bp.dq_head_stride);
  const float scale = p.softmax_scale;
  if (whole) {
    // One lane's 16 bytes in whole_offset's order are columns c, c+1,
    // c+8 and c+9 of a 16-column group: q is the (group, t) pair.
    for (int q = lane; q < kHeadDim / 4; q += rt.lanes) {
      const int c = q / 4 * 16 + q % 4 * 2;
      if (FAT_DQ_PADDED && c >= p.head_dim) break;  // c grows with q
      const float4 v = *reinterpret_cast<const float4 *>(tile + whole_offset(row % kTileRows, c));
      *reinterpret_cast<u32 *>(dq + c) = pack2(v.x * scale, v.y * scale);
      // A head dim of 8 (mod 16) ends between c and c + 8.
      if (!FAT_DQ_PADDED || c + 8 < p.head_dim) *reinterpret_cast<u32 *>(dq + c + 8) = pack2(v.z * scale, v.w * scale);
    }
  } else {
    for (int c = 4 * lane; c < p.head_dim; c += 4 * rt.lanes) {
      const float4 v = *reinterpret_cast<const float4 *>(acc + c);
      *reinterpret_cast<uint2 *>(dq + c) = make_uint2(pack2(v.x * scale, v.y * scale), pack2(v.z * scale, v.w * scale));
    }
  }
}
