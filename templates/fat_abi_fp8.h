/* The fp8 parameter block: the descale factors of an e4m3 forward's
 * inputs, the last kernel argument of every e4m3 variant (the ws90
 * family's: templates/fwd_ws90.cu). Like fat_abi.h it is written in the
 * common subset of C11 and CUDA C++: the host includes it (after
 * fat_abi.h), the generator inlines it into every source of
 * templates/fwd_ws90.cu.
 *
 * Design (issue 26: fp8 attention).
 *
 * Q, K and V arrive in e4m3 (FP8 E4M3FN: 1 sign, 4 exponent, 3 mantissa
 * bits, no infinity, finite up to 448) with one fp32 factor each that
 * turns a stored value back into the value it stands for: q = q8 ·
 * q_descale, and so on (FlashAttention-3's q_descale, k_descale and
 * v_descale; cuDNN's descale_q, descale_k, descale_v). The factors are
 * device data, indexed by (batch, key head): descale[b · batch_stride +
 * head_k · head_stride], so one value per tensor is strides 0 and 0, and
 * FlashAttention-3's (batch, heads_k) tensors are strides heads_k and 1.
 * Q's factor is also taken per key head: every query head of a group
 * shares its K and V, and with one factor for them all the kernel folds
 * q_descale · k_descale into the softmax's scale, once per block. A NULL
 * pointer stands for 1.
 *
 * Why a block of its own: fat_fwd_params is inside the source hash of
 * every variant tuned so far (fat_abi_kv.h says the same of the paged
 * block), so the e4m3 variants alone take this one, as a fifth argument
 * after the three tensor maps. O leaves in bf16 (fat_dtype_out), lse in
 * fp32, both as the 16-bit variants write them. */
#ifndef FAT_ABI_FP8_H
#define FAT_ABI_FP8_H

/* Bumped with every change to the layout below: the runtime launches a
 * stored e4m3 variant only if its source carries the current line. */
#define FAT_ABI_FP8_VERSION 1

typedef struct fat_fwd_fp8_params {
  const float *descale[3];  /* q, k, v: device fp32 factors, or 0 for 1 */
  int batch_stride[3];      /* in floats; both 0: one factor for the tensor */
  int head_stride[3];       /* indexed by the key head (the group's) */
} fat_fwd_fp8_params;

#endif
