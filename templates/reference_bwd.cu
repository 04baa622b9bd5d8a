// The backward reference every backward variant is checked against:
// attention's gradients in double precision. Inputs are the same 16-bit
// Q, K, V and dO the variant read, converted exactly; the softmax is
// recomputed in double from the fp64 forward reference's lse (never from the
// rounded O and lse the variant is given), so these are the exact gradients
// of the exact function, to ~1e-15, far below tuner/tolerance.h's bounds:
//   P  = exp(S·scale − lse),  D_i = Σ_j P_ij·dP_ij,  dP = dO·Vᵀ
//   dS = P ∘ (dP − D),  dQ = scale·dS·K,  dK = scale·dSᵀ·Q,  dV = Pᵀ·dO
// Same contract as the variants: masks bottom-right aligned (query i sits at
// key position i + seqlen_k − seqlen_q; causal sees keys up to it, local the
// keys from it − window_left to it + window_right, a bound of −1 dropped), and
// a row that sees no key (lse = −inf) contributes nothing and gets dQ = 0.
// Columns past the problem's head dim (the head_dim argument) are never read
// or written. With grouped-query attention dK and dV sum over the heads of a
// group. Variable-length batches as the forward reference has them
// (cu_seqlens_q and cu_seqlens_k: packed rows, lse and D (heads, total_q);
// seqused_k: the keys a sequence uses, whose unused rows get dK = dV = 0),
// and the soft-cap: with cap = softcap_out·softmax_scale (fat_abi.h) the
// score is cap·tanh(S·scale / cap) and dS takes its derivative,
//   dS = P ∘ (dP − D) ∘ (1 − tanh²(S·scale / cap)).
//
// tuner/gpu_run.c compiles this file into one module with
// templates/reference_fwd.cu, after templates/fat_abi.h and
// templates/fat_abi_bwd.h; its helpers live in a namespace so that the two
// files never collide.
//
// Three kernels, one warp per row (lanes over the head dimension, so any
// head dim up to kMaxCols·32 works without shared memory):
//   fat_reference_bwd_round  O and lse as a forward kernel returns them
//   fat_reference_bwd_rows   per query row: D and dQ (walks the keys)
//   fat_reference_bwd_cols   per key row: dK and dV (walks the queries)

namespace fat_ref_bwd {

typedef unsigned short elem16;  // raw fp16 / bf16 bits

constexpr int kWarp = 32;
constexpr int kMaxCols = 8;  // head-dim columns per lane: head dims up to 256
constexpr unsigned kFull = 0xffffffffu;
// The MASK argument of the kernels: tuner/types.h's fat_mask values.
constexpr int kMaskNone = 0, kMaskCausal = 1, kMaskLocal = 2;

__device__ __forceinline__ double ninf() { return __longlong_as_double(0xfff0000000000000ll); }

__device__ __forceinline__ double load(const elem16 *p, bool bf16) {
  elem16 bits = *p;
  if (bf16) return (double)__uint_as_float((unsigned)bits << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return (double)f;
}

__device__ __forceinline__ double warp_sum(double x) {
  for (int off = kWarp / 2; off > 0; off /= 2) x += __shfl_xor_sync(kFull, x, off);
  return x;
}

// A row of head_dim 16-bit values into this lane's columns (lane + 32·c).
__device__ __forceinline__ void load_row(double (&dst)[kMaxCols], const elem16 *row, int head_dim,
                                         bool bf16, int lane) {
#pragma unroll
  for (int c = 0; c < kMaxCols; c++) {
    const int col = lane + c * kWarp;
    dst[c] = col < head_dim ? load(row + col, bf16) : 0.0;
  }
}

__device__ __forceinline__ double dot(const double (&a)[kMaxCols], const elem16 *row, int head_dim,
                                      bool bf16, int lane) {
  double acc = 0.0;
#pragma unroll
  for (int c = 0; c < kMaxCols; c++) {
    const int col = lane + c * kWarp;
    if (col < head_dim) acc = fma(a[c], load(row + col, bf16), acc);
  }
  return warp_sum(acc);
}

// Where sequence B of the batch lives: element offsets of its first row in
// Q and dO (q_row0 rows on) and K, V (k_row0), its lengths (len_k: the keys
// it uses, full_k: the rows it has), and stat0, the first of its rows in
// lse and D for head 0, head H's being H·stat_pitch on.
struct Seq {
  long long q_row0, k_row0, stat0, stat_pitch;
  int len_q, len_k, full_k;
  bool packed;
};
__device__ __forceinline__ Seq seq_of(const fat_fwd_params &p, int b) {
  Seq s;
  s.packed = p.cu_seqlens_q != nullptr;
  if (s.packed) {
    s.q_row0 = p.cu_seqlens_q[b];
    s.k_row0 = p.cu_seqlens_k[b];
    s.len_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    s.full_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    s.stat_pitch = p.cu_seqlens_q[p.batch];
    s.stat0 = s.q_row0;
  } else {
    s.q_row0 = s.k_row0 = 0;
    s.len_q = p.seqlen_q;
    s.full_k = p.seqlen_k;
    s.stat_pitch = p.seqlen_q;
    s.stat0 = (long long)b * p.heads * p.seqlen_q;
  }
  s.len_k = p.seqused_k ? min(s.full_k, p.seqused_k[b]) : s.full_k;
  return s;
}
// Element offsets of row I of sequence B in a tensor with these strides.
__device__ __forceinline__ long long row_at(const Seq &s, int b, long long i, bool of_q, long long batch_stride,
                                            long long row_stride) {
  return s.packed ? ((of_q ? s.q_row0 : s.k_row0) + i) * row_stride : b * batch_stride + i * row_stride;
}

// The score of raw product X (Q·K) and its derivative's factor: X·scale, or
// with the soft-cap cap·tanh(X·scale / cap) and 1 − tanh².
__device__ __forceinline__ double score(double x, double scale, double cap, double *factor) {
  if (cap == 0.0) {
    *factor = 1.0;
    return x * scale;
  }
  const double t = tanh(x * scale / cap);
  *factor = 1.0 - t * t;
  return cap * t;
}

// Keys [*first, *end) are the ones query row I sees under MASK, in a
// sequence of len_q queries and len_k keys. Computed in 64 bits: a window
// bound may be as large as an int holds.
__device__ __forceinline__ void visible_keys(const fat_fwd_params &p, int len_q, int len_k, int mask, long long i,
                                             long long *first, long long *end) {
  const long long pos = i + len_k - len_q;  // bottom-right alignment
  *first = 0;
  *end = len_k;
  if (mask == kMaskCausal) *end = min(*end, pos + 1);
  if (mask == kMaskLocal && p.window_right >= 0) *end = min(*end, pos + p.window_right + 1);
  if (mask == kMaskLocal && p.window_left >= 0) *first = max(0ll, pos - p.window_left);
}

}  // namespace fat_ref_bwd

// O rounded to the dtype (nearest even) and lse to fp32: what a forward
// kernel would have handed the backward. Grid-stride over the elements.
extern "C" __global__ void fat_reference_bwd_round(const double *ref_o, unsigned short *o,
                                                   unsigned long long n, int is_bf16,
                                                   const double *ref_lse, float *lse,
                                                   unsigned long long n_rows) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = (float)ref_o[i];
    unsigned short h;
    if (is_bf16)
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    else
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    o[i] = h;
  }
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n_rows; i += stride)
    lse[i] = (float)ref_lse[i];
}

// D and dQ of one query row per warp. Grid: (ceil(seqlen_q / warps), heads,
// batch). MASK: 0 none, 1 causal, 2 local (window from bp.fwd). ref_delta in
// (batch, heads, seqlen_q); ref_dq in Q's layout.
extern "C" __global__ void fat_reference_bwd_rows(const fat_bwd_params bp, int head_dim, int is_bf16,
                                                  int mask, const double *ref_lse,
                                                  double *ref_delta, double *ref_dq) {
  using namespace fat_ref_bwd;
  const fat_fwd_params &p = bp.fwd;
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const int i = blockIdx.x * warps + threadIdx.x / kWarp;
  const int h = blockIdx.y, b = blockIdx.z;
  const Seq sq = seq_of(p, b);
  if (i >= sq.len_q) return;
  const int kh = h / (p.heads / p.heads_k);
  const bool bf16 = is_bf16 != 0;
  const double scale = (double)p.softmax_scale;
  const double cap = p.softcap_in != 0.f ? (double)p.softcap_out * p.softmax_scale : 0.0;
  const long long r = sq.stat0 + h * sq.stat_pitch + i;
  const double lse = ref_lse[r];
  const elem16 *k = (const elem16 *)p.k + row_at(sq, b, 0, false, p.k_batch_stride, p.k_row_stride) +
                    kh * p.k_head_stride;
  const elem16 *v = (const elem16 *)p.v + row_at(sq, b, 0, false, p.v_batch_stride, p.v_row_stride) +
                    kh * p.v_head_stride;
  double q[kMaxCols], d_o[kMaxCols], dq[kMaxCols];
  load_row(q, (const elem16 *)p.q + row_at(sq, b, i, true, p.q_batch_stride, p.q_row_stride) + h * p.q_head_stride,
           head_dim, bf16, lane);
  load_row(d_o, (const elem16 *)bp.dout + row_at(sq, b, i, true, bp.do_batch_stride, bp.do_row_stride) +
                    h * bp.do_head_stride, head_dim, bf16, lane);
#pragma unroll
  for (int c = 0; c < kMaxCols; c++) dq[c] = 0.0;

  double delta = 0.0;
  if (lse != ninf()) {
    long long key_first, key_end;
    visible_keys(p, sq.len_q, sq.len_k, mask, i, &key_first, &key_end);
    double factor;
    for (long long j = key_first; j < key_end; j++) {  // D = Σ_j P_j·dP_j
      const double pj = exp(score(dot(q, k + j * p.k_row_stride, head_dim, bf16, lane), scale, cap, &factor) - lse);
      delta += pj * dot(d_o, v + j * p.v_row_stride, head_dim, bf16, lane);
    }
    for (long long j = key_first; j < key_end; j++) {  // dQ = scale·Σ_j dS_j·K_j
      const double pj = exp(score(dot(q, k + j * p.k_row_stride, head_dim, bf16, lane), scale, cap, &factor) - lse);
      const double ds = pj * (dot(d_o, v + j * p.v_row_stride, head_dim, bf16, lane) - delta) * factor;
#pragma unroll
      for (int c = 0; c < kMaxCols; c++) {
        const int col = lane + c * kWarp;
        if (col < head_dim) dq[c] = fma(ds, load(k + j * p.k_row_stride + col, bf16), dq[c]);
      }
    }
  }
  if (lane == 0) ref_delta[r] = delta;
  double *out = ref_dq + row_at(sq, b, i, true, p.q_batch_stride, p.q_row_stride) + h * p.q_head_stride;
#pragma unroll
  for (int c = 0; c < kMaxCols; c++) {
    const int col = lane + c * kWarp;
    if (col < head_dim) out[col] = dq[c] * scale;
  }
}

// dK and dV of one key row per warp, summed over the query heads of its
// group. Needs fat_reference_bwd_rows' D. Grid: (ceil(seqlen_k / warps),
// heads_k, batch). MASK as for the rows. ref_dk, ref_dv in K's layout.
extern "C" __global__ void fat_reference_bwd_cols(const fat_bwd_params bp, int head_dim, int is_bf16,
                                                  int mask, const double *ref_lse,
                                                  const double *ref_delta, double *ref_dk,
                                                  double *ref_dv) {
  using namespace fat_ref_bwd;
  const fat_fwd_params &p = bp.fwd;
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const int j = blockIdx.x * warps + threadIdx.x / kWarp;
  const int kh = blockIdx.y, b = blockIdx.z;
  const Seq sq = seq_of(p, b);
  if (j >= sq.full_k) return;
  const int group = p.heads / p.heads_k;
  const bool bf16 = is_bf16 != 0;
  const double scale = (double)p.softmax_scale;
  const double cap = p.softcap_in != 0.f ? (double)p.softcap_out * p.softmax_scale : 0.0;
  double k[kMaxCols], v[kMaxCols], dk[kMaxCols], dv[kMaxCols];
  load_row(k, (const elem16 *)p.k + row_at(sq, b, j, false, p.k_batch_stride, p.k_row_stride) + kh * p.k_head_stride,
           head_dim, bf16, lane);
  load_row(v, (const elem16 *)p.v + row_at(sq, b, j, false, p.v_batch_stride, p.v_row_stride) + kh * p.v_head_stride,
           head_dim, bf16, lane);
#pragma unroll
  for (int c = 0; c < kMaxCols; c++) dk[c] = dv[c] = 0.0;

  // The queries that see key j: position i + seqlen_k − seqlen_q within
  // [j − window_right, j + window_left] (causal: right bound 0, no left).
  // In 64 bits: a window bound may be as large as an int holds.
  // A key past the ones its sequence uses (seqused_k) is seen by none.
  const long long key = j, offset = (long long)sq.len_k - sq.len_q;
  long long first = 0, end = j < sq.len_k ? sq.len_q : 0;
  if (mask == kMaskCausal) first = max(first, key - offset);
  if (mask == kMaskLocal && p.window_right >= 0) first = max(first, key - p.window_right - offset);
  if (mask == kMaskLocal && p.window_left >= 0) end = min(end, key + p.window_left - offset + 1);
  for (int hq = 0; hq < group; hq++) {
    const int h = kh * group + hq;
    const elem16 *q = (const elem16 *)p.q + row_at(sq, b, 0, true, p.q_batch_stride, p.q_row_stride) +
                      h * p.q_head_stride;
    const elem16 *d_o = (const elem16 *)bp.dout + row_at(sq, b, 0, true, bp.do_batch_stride, bp.do_row_stride) +
                        h * bp.do_head_stride;
    const long long row0 = sq.stat0 + h * sq.stat_pitch;
    for (long long i = first; i < end; i++) {
      const double lse = ref_lse[row0 + i];
      if (lse == ninf()) continue;
      double factor;
      const double pij = exp(score(dot(k, q + i * p.q_row_stride, head_dim, bf16, lane), scale, cap, &factor) - lse);
      const double ds =
          pij * (dot(v, d_o + i * bp.do_row_stride, head_dim, bf16, lane) - ref_delta[row0 + i]) * factor;
#pragma unroll
      for (int c = 0; c < kMaxCols; c++) {
        const int col = lane + c * kWarp;
        if (col < head_dim) {
          dv[c] = fma(pij, load(d_o + i * bp.do_row_stride + col, bf16), dv[c]);
          dk[c] = fma(ds, load(q + i * p.q_row_stride + col, bf16), dk[c]);
        }
      }
    }
  }
  const long long at = row_at(sq, b, j, false, p.k_batch_stride, p.k_row_stride) + kh * p.k_head_stride;
#pragma unroll
  for (int c = 0; c < kMaxCols; c++) {
    const int col = lane + c * kWarp;
    if (col < head_dim) {
      ref_dk[at + col] = dk[c] * scale;
      ref_dv[at + col] = dv[c];
    }
  }
}
