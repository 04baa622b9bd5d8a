// The forward reference every variant is checked against: attention in
// double precision. Inputs are the same 16-bit values the variant read,
// converted exactly -- or for e4m3 the same bytes decoded exactly
// (templates/fat_e4m3.h) times their descale factors (fat_abi_fp8.h, indexed
// by batch and key head as the variants index them): the dequantised
// values, whose products with the fp32 factors are exact in double; scores, softmax and P·V are all accumulated in double,
// so its error (~1e-15) is far below any tolerance in tuner/tolerance.h.
//
// Same contract as the variants (templates/fat_abi.h): tensors addressed
// through fat_fwd_params' strides, dense or variable-length batches and
// seqused_k, bottom-right aligned masks (query i sits at key position
// i + seqlen_k - seqlen_q; causal sees keys up to it, local the window
// [-window_left, +window_right] around it), the soft-cap, and the empty-row
// policy: a row that sees no key gets O = 0 and lse = -inf, and
// -inf - (-inf) is never computed. Outputs are double: ref_o in O's layout
// (O's strides), ref_lse in lse's. head_dim is the problem's (p.head_dim).
//
// tuner/measure/device.c compiles this file standalone with NVRTC, prepending
// templates/fat_abi.h (the definition of fat_fwd_params) as the generator does
// for every variant, templates/fat_abi_fp8.h and templates/fat_e4m3.h;
// nothing else is included.
//
// One block owns `rows` query rows of one (batch, head); K and V tiles of
// `key_tile` keys stream through shared memory as doubles. The online softmax
// keeps, per row: m (running max of the scaled scores), l (denominator) and
// o (unnormalised output), rescaling l and o by alpha = exp(m_old - m_new)
// when a tile raises the max. The block shape and both tile sizes are launch
// arguments (the host sizes shared memory from them), so the kernel works
// for any head dimension.

typedef unsigned short elem_t;  // raw fp16 / bf16 bits

// The inputs' fat_dtype (core/types.h).
enum { kFp16 = 0, kBf16 = 1, kE4m3 = 2, kFp16E4m3kv = 3, kBf16E4m3kv = 4 };

// How the inputs' dtype reads Q and K/V: an fp8 K/V cache's Q is 16-bit,
// its K and V e4m3 bytes (Q has no descale factor: descale[0] is NULL).
__device__ __forceinline__ int q_type(int dtype) {
  return dtype == kFp16E4m3kv ? kFp16 : dtype == kBf16E4m3kv ? kBf16 : dtype;
}
__device__ __forceinline__ int kv_type(int dtype) {
  return dtype == kFp16E4m3kv || dtype == kBf16E4m3kv ? kE4m3 : dtype;
}

#define LLONG_MIN (-0x7fffffffffffffffll - 1)
#define LLONG_MAX 0x7fffffffffffffffll

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ double neg_inf() { return __longlong_as_double(0xfff0000000000000ll); }

// The exact value of element I of an input: bf16 is the upper half of a
// float; fp16 → fp32 is exact; an e4m3 byte decodes exactly, times its
// tensor's DESCALE.
__device__ __forceinline__ double load_elem(const void *base, long long i, int dtype, double descale) {
  if (dtype == kE4m3) return fat_e4m3_decode(((const unsigned char *)base)[i]) * descale;
  elem_t bits = ((const elem_t *)base)[i];
  if (dtype == kBf16) return (double)__uint_as_float((unsigned)bits << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return (double)f;
}

// Tensor T's descale factor for (batch b, key head kh): 1 when none is given.
__device__ __forceinline__ double descale_of(const fat_fwd_fp8_params &fp8, int t, int b, int kh) {
  const float *d = fp8.descale[t];
  return d ? (double)d[(long long)b * fp8.batch_stride[t] + (long long)kh * fp8.head_stride[t]] : 1.0;
}

__device__ __forceinline__ double warp_max(double x) {
  for (int off = kWarpSize / 2; off > 0; off /= 2) x = fmax(x, __shfl_xor_sync(kFullMask, x, off));
  return x;
}

__device__ __forceinline__ double warp_sum(double x) {
  for (int off = kWarpSize / 2; off > 0; off /= 2) x += __shfl_xor_sync(kFullMask, x, off);
  return x;
}

// Shared memory, all double:
//   q_s[rows][d]            the block's queries
//   kv_s[key_tile][d + 1]   a K tile, then the V tile of the same keys; the
//                           odd pitch puts the rows a warp reads at one d in
//                           different banks
//   p_s[rows][key_tile]     scores S, then probabilities P
//   o_s[rows][d]            unnormalised output o
//   m_s, l_s, alpha_s[rows] per-row softmax state
// mask: 0 none, 1 causal, 2 local (core/types.h's fat_mask); dtype the
// inputs' fat_dtype; fp8 the descale factors of e4m3 inputs (unread else).
extern "C" __global__ void fat_reference_fwd(const fat_fwd_params p, int head_dim, int dtype,
                                             int mask, double *ref_o, double *ref_lse,
                                             int rows, int key_tile, const fat_fwd_fp8_params fp8) {
  extern __shared__ double smem[];
  const int d = head_dim;
  const int kv_pitch = d + 1;
  double *q_s = smem;
  double *kv_s = q_s + rows * d;
  double *p_s = kv_s + key_tile * kv_pitch;
  double *o_s = p_s + rows * key_tile;
  double *m_s = o_s + rows * d;
  double *l_s = m_s + rows;
  double *alpha_s = l_s + rows;

  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid % kWarpSize, warp = tid / kWarpSize, nwarps = nthreads / kWarpSize;
  const int q0 = blockIdx.x * rows;
  const int h = blockIdx.y, b = blockIdx.z;
  const int kh = h / (p.heads / p.heads_k);  // grouped-query attention: heads share K/V
  // This sequence's rows and lengths (variable-length batches pack them).
  long long q_off = b * p.q_batch_stride, o_off = b * p.o_batch_stride;
  long long k_off = b * p.k_batch_stride, v_off = b * p.v_batch_stride;
  long long lse_off = ((long long)b * p.heads + h) * p.seqlen_q;
  int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;
  if (p.cu_seqlens_q) {
    const int first = p.cu_seqlens_q[b];
    seqlen_q = p.cu_seqlens_q[b + 1] - first;
    q_off = first * p.q_row_stride;
    o_off = first * p.o_row_stride;
    lse_off = (long long)h * p.cu_seqlens_q[p.batch] + first;
  }
  if (p.cu_seqlens_k) {
    const int first = p.cu_seqlens_k[b];
    seqlen_k = p.cu_seqlens_k[b + 1] - first;
    k_off = first * p.k_row_stride;
    v_off = first * p.v_row_stride;
  }
  if (p.seqused_k) seqlen_k = min(seqlen_k, p.seqused_k[b]);
  if (q0 >= seqlen_q) return;
  // Element offsets of this (batch, head) in q, k and v.
  const long long q_at = q_off + h * p.q_head_stride;
  const long long k_at = k_off + kh * p.k_head_stride;
  const long long v_at = v_off + kh * p.v_head_stride;
  const int qt = q_type(dtype), kvt = kv_type(dtype);
  const double q_descale = qt == kE4m3 ? descale_of(fp8, 0, b, kh) : 1.0;
  const double k_descale = kvt == kE4m3 ? descale_of(fp8, 1, b, kh) : 1.0;
  const double v_descale = kvt == kE4m3 ? descale_of(fp8, 2, b, kh) : 1.0;
  const double scale = (double)p.softmax_scale;
  // The soft-cap in the variants' terms: cap = softcap_out · softmax_scale.
  const double cap = p.softcap_in != 0.f ? (double)p.softcap_out * p.softmax_scale : 0.0;
  // Query i sits at key position i + diag.
  const long long diag = (long long)seqlen_k - seqlen_q;
  const bool is_causal = mask == 1, is_local = mask == 2;
  const long long win_lo = is_local && p.window_left >= 0 ? diag - p.window_left : LLONG_MIN / 2;
  const long long win_hi = is_causal ? diag : is_local && p.window_right >= 0 ? diag + p.window_right
                                                                             : LLONG_MAX / 2;

  for (int i = tid; i < rows * d; i += nthreads) {
    int r = i / d, c = i % d;
    q_s[i] = q0 + r < seqlen_q
                 ? load_elem(p.q, q_at + (long long)(q0 + r) * p.q_row_stride + c, qt, q_descale)
                 : 0.0;
    o_s[i] = 0.0;
  }
  for (int r = tid; r < rows; r += nthreads) {
    m_s[r] = neg_inf();
    l_s[r] = 0.0;
    alpha_s[r] = 1.0;
  }

  // Keys past the last one the block's last row may see are never loaded.
  const int last_row = min(q0 + rows, seqlen_q) - 1;
  long long key_end = seqlen_k;
  if (last_row + win_hi + 1 < key_end) key_end = last_row + win_hi + 1;

  for (long long k0 = 0; k0 < key_end; k0 += key_tile) {
    const int n = (int)min((long long)key_tile, key_end - k0);
    __syncthreads();  // the previous tile's V is no longer read
    for (int i = tid; i < n * d; i += nthreads) {
      int j = i / d, c = i % d;
      kv_s[j * kv_pitch + c] = load_elem(p.k, k_at + (k0 + j) * p.k_row_stride + c, kvt, k_descale);
    }
    __syncthreads();

    // S = Q·Kᵀ · scale, -inf where the mask hides the key.
    for (int i = tid; i < rows * key_tile; i += nthreads) {
      int r = i / key_tile, j = i % key_tile;
      long long qi = q0 + r, kj = k0 + j;
      bool visible = qi < seqlen_q && j < n && kj <= qi + win_hi && kj >= qi + win_lo;
      double s = neg_inf();
      if (visible) {
        double acc = 0.0;
        const double *qr = q_s + r * d, *kr = kv_s + j * kv_pitch;
        for (int c = 0; c < d; c++) acc = fma(qr[c], kr[c], acc);
        s = acc * scale;
        if (cap > 0.0) s = cap * tanh(s / cap);
      }
      p_s[i] = s;
    }
    __syncthreads();

    // V replaces K while each warp turns its rows' scores into P.
    for (int i = tid; i < n * d; i += nthreads) {
      int j = i / d, c = i % d;
      kv_s[j * kv_pitch + c] = load_elem(p.v, v_at + (k0 + j) * p.v_row_stride + c, kvt, v_descale);
    }
    for (int r = warp; r < rows; r += nwarps) {
      double tile_max = neg_inf();
      for (int j = lane; j < key_tile; j += kWarpSize) tile_max = fmax(tile_max, p_s[r * key_tile + j]);
      tile_max = warp_max(tile_max);
      const double m_old = m_s[r];
      const double m_new = fmax(m_old, tile_max);
      double sum = 0.0;
      if (m_new == neg_inf()) {
        // Nothing visible yet: P = 0 and the state stays as it is.
        for (int j = lane; j < key_tile; j += kWarpSize) p_s[r * key_tile + j] = 0.0;
      } else {
        for (int j = lane; j < key_tile; j += kWarpSize) {
          double s = p_s[r * key_tile + j];
          double pj = s == neg_inf() ? 0.0 : exp(s - m_new);
          p_s[r * key_tile + j] = pj;
          sum += pj;
        }
      }
      sum = warp_sum(sum);
      __syncwarp();  // every lane has read m_s[r] (above) before lane 0 writes it
      if (lane == 0) {
        // alpha = exp(m_old - m_new); 0 when there was nothing to rescale.
        double alpha = m_new == neg_inf() ? 1.0 : (m_old == neg_inf() ? 0.0 : exp(m_old - m_new));
        alpha_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();

    // o = alpha·o + P·V
    for (int i = tid; i < rows * d; i += nthreads) {
      int r = i / d, c = i % d;
      double acc = o_s[i] * alpha_s[r];
      const double *pr = p_s + r * key_tile;
      for (int j = 0; j < n; j++) acc = fma(pr[j], kv_s[j * kv_pitch + c], acc);
      o_s[i] = acc;
    }
  }
  __syncthreads();

  // O = o / l and lse = m + ln(l); an empty row (l = 0) gets 0 and -inf.
  for (int i = tid; i < rows * d; i += nthreads) {
    int r = i / d, c = i % d;
    long long qi = q0 + r;
    if (qi >= seqlen_q) continue;
    double l = l_s[r];
    ref_o[o_off + qi * p.o_row_stride + h * p.o_head_stride + c] = l > 0.0 ? o_s[i] / l : 0.0;
  }
  for (int r = tid; r < rows; r += nthreads) {
    long long qi = q0 + r;
    if (qi >= seqlen_q) continue;
    double l = l_s[r];
    ref_lse[lse_off + qi] = l > 0.0 ? m_s[r] + log(l) : neg_inf();
  }
}
