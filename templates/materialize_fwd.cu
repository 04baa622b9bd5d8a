// The materialising baseline: attention as the textbook writes it, in three
// kernels that each read and write device memory, so that every tuning table
// can show what the fused kernels save, measured on the same GPU:
//   fat_fwd_materialize_scores   S = scale·Q·Kᵀ, fp32, into a workspace of
//                                batch·heads·seqlen_q·seqlen_k floats
//   fat_fwd_materialize_softmax  P = softmax(S) row by row, in place, and
//                                lse = m + ln(l) per row
//   fat_fwd_materialize_pv       O = P·V, rounded to the element type
// Plain shared-memory tiles and fp32 FMA: the point is the traffic, not the
// arithmetic, but kTile x kTile tiles and register blocking keep it from
// being absurdly slow. Each kernel takes (fat_fwd_params, float *workspace);
// tuner/gpu_run.c launches the three in sequence and times them together.
//
// Causal masking is bottom-right aligned like the fused kernels: query i sees
// key j iff j <= i + seqlen_k - seqlen_q. A row that sees no key gets O = 0
// and lse = -inf, and no exp of -inf - (-inf) is ever taken. Score tiles no
// row can see are neither computed nor read.
#include "fat_abi.h"

constexpr int kHeadDim = {{HEAD_DIM}};
constexpr int kTile = {{TILE}};          // rows x columns of one output tile
constexpr bool kIsBf16 = {{IS_BF16}};
constexpr bool kIsCausal = {{IS_CAUSAL}};

constexpr int kThreads = 256;                        // every kernel's block
constexpr int kWarpSize = 32;
constexpr int kRowsPerPass = kThreads / kTile;       // tile rows one pass of the block covers
constexpr int kRowsPerThread = kTile / kRowsPerPass; // register blocking: outputs per thread
constexpr int kPitch = kTile + 1;                    // shared rows padded: column reads hit distinct banks
constexpr int kSoftmaxRows = kThreads / kWarpSize;   // one warp per score row; the host's
                                                     // FAT_MATERIALIZE_SOFTMAX_ROWS (fwd_job.h)

static_assert(kThreads % kTile == 0 && kTile % kRowsPerPass == 0, "tiles split evenly over the block");
static_assert(kHeadDim % kTile == 0, "the head dim is walked a whole tile at a time");

typedef unsigned short elem_t;  // raw fp16 / bf16 bits
typedef unsigned int u32;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ float to_float(elem_t x) {
  if constexpr (kIsBf16) {
    return __uint_as_float((u32)x << 16);
  } else {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
  }
}

__device__ __forceinline__ elem_t from_float(float x) {
  elem_t r;
  if constexpr (kIsBf16)
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

// Keys query row I may see: all of them, or up to the bottom-right diagonal
// (0 or less: the row sees none).
__device__ __forceinline__ int visible_keys(const fat_fwd_params &p, int i) {
  if (!kIsCausal) return p.seqlen_k;
  const int last = i + p.seqlen_k - p.seqlen_q;  // last visible key
  return last + 1 < p.seqlen_k ? last + 1 : p.seqlen_k;
}

// Row (batch b, head h, query i) of the workspace.
__device__ __forceinline__ float *score_row(const fat_fwd_params &p, float *ws, int bh, int i) {
  return ws + ((long long)bh * p.seqlen_q + i) * p.seqlen_k;
}

// S = scale·Q·Kᵀ. Grid (key tiles, query tiles, batch·heads); dynamic shared
// memory 2·kTile·kPitch floats. Each thread owns kRowsPerThread query rows of
// one key column.
extern "C" __global__ void __launch_bounds__(kThreads)
fat_fwd_materialize_scores(const fat_fwd_params p, float *ws) {
  extern __shared__ float smem[];
  float *q_smem = smem;                   // [kTile][kPitch]: query rows x head-dim slice
  float *k_smem = smem + kTile * kPitch;  // [kTile][kPitch]: keys x head-dim slice
  const int j0 = blockIdx.x * kTile, i0 = blockIdx.y * kTile, bh = blockIdx.z;
  const int b = bh / p.heads, h = bh % p.heads, hk = h / (p.heads / p.heads_k);
  const int col = threadIdx.x % kTile, row0 = threadIdx.x / kTile;
  // A tile wholly above the diagonal: no row of it sees any of its keys.
  const int i_last = min(i0 + kTile, p.seqlen_q) - 1;
  if (j0 >= visible_keys(p, i_last)) return;

  const elem_t *q = (const elem_t *)p.q + b * p.q_batch_stride + h * p.q_head_stride;
  const elem_t *k = (const elem_t *)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
  float s_reg[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) s_reg[r] = 0.f;

  for (int d0 = 0; d0 < kHeadDim; d0 += kTile) {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; r++) {
      const int row = row0 + r * kRowsPerPass;
      const int i = i0 + row, j = j0 + row;
      q_smem[row * kPitch + col] = i < p.seqlen_q ? to_float(q[i * p.q_row_stride + d0 + col]) : 0.f;
      k_smem[row * kPitch + col] = j < p.seqlen_k ? to_float(k[j * p.k_row_stride + d0 + col]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int d = 0; d < kTile; d++) {
      const float k_val = k_smem[col * kPitch + d];
#pragma unroll
      for (int r = 0; r < kRowsPerThread; r++)
        s_reg[r] += q_smem[(row0 + r * kRowsPerPass) * kPitch + d] * k_val;
    }
    __syncthreads();
  }
  const int j = j0 + col;
  if (j >= p.seqlen_k) return;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) {
    const int i = i0 + row0 + r * kRowsPerPass;
    if (i < p.seqlen_q) score_row(p, ws, bh, i)[j] = s_reg[r] * p.softmax_scale;
  }
}

// P = softmax(S) in place over each row's visible keys, lse = m + ln(l).
// Grid (ceil(batch·heads·seqlen_q / kSoftmaxRows)); one warp per row, three
// passes over the row (max, sum, write) as a materialising softmax makes.
extern "C" __global__ void __launch_bounds__(kThreads)
fat_fwd_materialize_softmax(const fat_fwd_params p, float *ws) {
  const long long row = (long long)blockIdx.x * kSoftmaxRows + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const long long rows = (long long)p.batch * p.heads * p.seqlen_q;
  if (row >= rows) return;
  const int i = (int)(row % p.seqlen_q), bh = (int)(row / p.seqlen_q);
  const int n = visible_keys(p, i);
  if (n <= 0) {
    // Empty row: lse = -inf; P is never read (the P·V kernel masks it), O = 0.
    if (lane == 0) p.lse[row] = neg_inf();
    return;
  }
  float *s = score_row(p, ws, bh, i);
  float m = neg_inf();
  for (int j = lane; j < n; j += kWarpSize) m = fmaxf(m, s[j]);
#pragma unroll
  for (int off = kWarpSize / 2; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float l = 0.f;
  for (int j = lane; j < n; j += kWarpSize) l += expf(s[j] - m);
#pragma unroll
  for (int off = kWarpSize / 2; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
  const float inv_l = 1.f / l;  // l >= 1: the maximum contributes exp(0)
  for (int j = lane; j < n; j += kWarpSize) s[j] = expf(s[j] - m) * inv_l;
  if (lane == 0) p.lse[row] = m + logf(l);
}

// O = P·V. Grid (kHeadDim / kTile, query tiles, batch·heads); dynamic shared
// memory 2·kTile·kPitch floats. Probabilities of keys a row cannot see are
// read as 0, so partial tiles on the diagonal and empty rows need no
// special case; key tiles past the block's last visible key are skipped.
extern "C" __global__ void __launch_bounds__(kThreads)
fat_fwd_materialize_pv(const fat_fwd_params p, float *ws) {
  extern __shared__ float smem[];
  float *p_smem = smem;                   // [kTile][kPitch]: query rows x keys
  float *v_smem = smem + kTile * kPitch;  // [kTile][kPitch]: keys x head-dim slice
  const int c0 = blockIdx.x * kTile, i0 = blockIdx.y * kTile, bh = blockIdx.z;
  const int b = bh / p.heads, h = bh % p.heads, hk = h / (p.heads / p.heads_k);
  const int col = threadIdx.x % kTile, row0 = threadIdx.x / kTile;
  const int i_last = min(i0 + kTile, p.seqlen_q) - 1;
  const int keys = visible_keys(p, i_last);  // the block's last row sees the most

  const elem_t *v = (const elem_t *)p.v + b * p.v_batch_stride + hk * p.v_head_stride + c0;
  int seen[kRowsPerThread];  // keys each of this thread's loading rows may see
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) {
    const int i = i0 + row0 + r * kRowsPerPass;
    seen[r] = i < p.seqlen_q ? visible_keys(p, i) : 0;
  }
  float o_reg[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) o_reg[r] = 0.f;

  for (int j0 = 0; j0 < keys; j0 += kTile) {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; r++) {
      const int row = row0 + r * kRowsPerPass;
      const int j = j0 + col, jv = j0 + row;
      p_smem[row * kPitch + col] = j < seen[r] ? score_row(p, ws, bh, i0 + row)[j] : 0.f;
      v_smem[row * kPitch + col] = jv < p.seqlen_k ? to_float(v[jv * p.v_row_stride + col]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < kTile; j++) {
      const float v_val = v_smem[j * kPitch + col];
#pragma unroll
      for (int r = 0; r < kRowsPerThread; r++)
        o_reg[r] += p_smem[(row0 + r * kRowsPerPass) * kPitch + j] * v_val;
    }
    __syncthreads();
  }
  elem_t *o = (elem_t *)p.o + b * p.o_batch_stride + h * p.o_head_stride + c0 + col;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) {
    const int i = i0 + row0 + r * kRowsPerPass;
    if (i < p.seqlen_q) o[i * p.o_row_stride] = from_float(o_reg[r]);
  }
}
