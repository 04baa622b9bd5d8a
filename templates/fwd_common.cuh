// What the forward templates share (fwd_mma80.cu, fwd_wgmma90.cu) beyond
// fat_device.cuh: the copies' wait, the soft-cap's tanh, the row
// statistics' epilogue and where a sequence of the batch lives. The
// including template defines kIsBf16 first. generator/expand.lua inlines
// this file into each variant's source.
#pragma once

#include "fat_device.cuh"

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// tanh on the special-function unit: one MUFU op, as FlashAttention does.
// Its relative error (2^-11) moves a capped score of 5 by 2.4e-3 before the
// exponential, below bf16's rounding of P; the exact form 1 - 2/(e^2x + 1)
// costs two MUFU ops more per score and measured 2.5x the time of the
// uncapped kernel on the H200 (notes/kernel-log.md).
__device__ __forceinline__ float fast_tanh(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// A row's softmax denominator l: the partial sums of the quad of lanes
// that hold the row's columns, added.
__device__ __forceinline__ float quad_sum(float partial) {
  partial += __shfl_xor_sync(0xffffffffu, partial, 1);
  return partial + __shfl_xor_sync(0xffffffffu, partial, 2);
}

// The log-sum-exp of a row with denominator l and raw max m: m·scale +
// ln l; -inf for a row that saw no key (l = 0), whose output is zeros.
__device__ __forceinline__ float row_lse(float l, float m, float softmax_scale) {
  return l > 0.f ? m * softmax_scale + logf(l) : neg_inf();
}

// Where one sequence of the batch lives, for dense and variable-length
// batches alike (templates/fat_abi.h).
struct Sequence {
  long long q_off, o_off, k_off, v_off;  // element offsets of its first row
  int seqlen_q, seqlen_k;                 // its own lengths
  int lse_row0;                           // its first row in lse's row dimension
  int lse_rows;                           // lse's row dimension: seqlen_q, or total_q
};

__device__ __forceinline__ Sequence sequence_of(const fat_fwd_params &p, int batch) {
  Sequence s;
  if (p.cu_seqlens_q) {
    const int q0 = p.cu_seqlens_q[batch];
    s.seqlen_q = p.cu_seqlens_q[batch + 1] - q0;
    s.q_off = q0 * p.q_row_stride;
    s.o_off = q0 * p.o_row_stride;
    s.lse_row0 = q0;
    s.lse_rows = p.cu_seqlens_q[p.batch];
  } else {
    s.seqlen_q = p.seqlen_q;
    s.q_off = batch * p.q_batch_stride;
    s.o_off = batch * p.o_batch_stride;
    s.lse_row0 = 0;
    s.lse_rows = p.seqlen_q;
  }
  if (p.cu_seqlens_k) {
    const int k0 = p.cu_seqlens_k[batch];
    s.seqlen_k = p.cu_seqlens_k[batch + 1] - k0;
    s.k_off = k0 * p.k_row_stride;
    s.v_off = k0 * p.v_row_stride;
  } else {
    s.seqlen_k = p.seqlen_k;
    s.k_off = batch * p.k_batch_stride;
    s.v_off = batch * p.v_batch_stride;
  }
  if (p.seqused_k) s.seqlen_k = min(s.seqlen_k, p.seqused_k[batch]);
  return s;
}
