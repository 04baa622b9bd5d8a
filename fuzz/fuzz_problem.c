/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the problem validator (fat_attention_check), the
 * gate every fat_attention_fwd passes before it selects or launches: the
 * input bytes fill a fat_attn_args -- small shapes mostly, but any sign,
 * arbitrary strides, pointers and scale bits -- and the check, on an
 * offline context (no GPU, nothing dereferenced), must answer FAT_OK or a
 * refusal with a message, never crash, overflow or read out of bounds.
 * With flag bit 4 the rest of the input also feeds the backward's validator
 * (fat_attention_bwd_check) on the same forward arguments. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fatune.h"

static fat_context *ctx;

/* The next N bytes of the input as an unsigned integer (zeros past its end). */
static uint64_t take(const uint8_t **p, size_t *left, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) {
    v = v << 8 | (*left ? **p : 0);
    if (*left) (*p)++, (*left)--;
  }
  return v;
}

/* A shape value: mostly small (-2 .. 253), so that the checks past the
 * shape are reached; a flag byte lets any int through. */
static int shape(const uint8_t **p, size_t *left) {
  uint64_t v = take(p, left, 1);
  return v == 0xff ? (int)(int32_t)take(p, left, 4) : (int)v - 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) {
    fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
    const char *none[1] = {"/nonexistent/fatune_tables.db"};
    o.user_db = "", o.tables = none, o.n_tables = 1;
    o.gpu_name = "NVIDIA H200", o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = 132;
    if (fat_context_open(&ctx, &o) != FAT_OK) abort();
  }
  const uint8_t *p = data;
  size_t left = size;
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = shape(&p, &left);
  a.heads = shape(&p, &left);
  a.heads_k = shape(&p, &left);
  a.seqlen_q = shape(&p, &left);
  a.seqlen_k = shape(&p, &left);
  a.head_dim = shape(&p, &left);
  a.dtype = (fat_attn_dtype)shape(&p, &left);
  a.mask = (fat_attn_mask)shape(&p, &left);
  uint64_t flags = take(&p, &left, 1);
  if (flags & 1) fat_attn_args_contiguous(&a); /* then perturb a few */
  long long *strides[12] = {&a.q_batch_stride, &a.q_row_stride, &a.q_head_stride,
                            &a.k_batch_stride, &a.k_row_stride, &a.k_head_stride,
                            &a.v_batch_stride, &a.v_row_stride, &a.v_head_stride,
                            &a.o_batch_stride, &a.o_row_stride, &a.o_head_stride};
  for (int i = 0; i < 12; i++)
    if (!(flags & 1) || take(&p, &left, 1) & 1) *strides[i] = (long long)take(&p, &left, 8);
  const void **ptrs[4] = {&a.q, &a.k, &a.v, (const void **)&a.o};
  for (int i = 0; i < 4; i++) *ptrs[i] = (const void *)(uintptr_t)take(&p, &left, 8);
  a.lse = (float *)(uintptr_t)take(&p, &left, 8);
  uint32_t bits = (uint32_t)take(&p, &left, 4);
  memcpy(&a.softmax_scale, &bits, sizeof bits);
  /* Flag bit 64: a struct_size of another layout, to be refused. */
  if (flags & 64) a.struct_size = (size_t)take(&p, &left, 2);

  fat_status st = fat_attention_check(ctx, flags & 2 ? NULL : &a);
  if (st != FAT_OK && st != FAT_ERR_INVALID_ARGUMENT && st != FAT_ERR_UNSUPPORTED) abort();
  if (st != FAT_OK && !fat_context_error(ctx)[0]) abort();

  /* The backward's validator on the same forward arguments, with the rest
   * of the input for its gradients, strides and workspace. */
  if (!(flags & 4)) return 0;
  fat_attn_bwd_args b = FAT_ATTN_BWD_ARGS_INIT;
  b.fwd = a;
  if (flags & 8) fat_attn_bwd_args_contiguous(&b);
  long long *bstrides[12] = {&b.do_batch_stride, &b.do_row_stride, &b.do_head_stride,
                             &b.dq_batch_stride, &b.dq_row_stride, &b.dq_head_stride,
                             &b.dk_batch_stride, &b.dk_row_stride, &b.dk_head_stride,
                             &b.dv_batch_stride, &b.dv_row_stride, &b.dv_head_stride};
  for (int i = 0; i < 12; i++)
    if (!(flags & 8) || take(&p, &left, 1) & 1) *bstrides[i] = (long long)take(&p, &left, 8);
  const void **bptrs[5] = {&b.dout, (const void **)&b.dq, (const void **)&b.dk,
                           (const void **)&b.dv, (const void **)&b.workspace};
  for (int i = 0; i < 5; i++) *bptrs[i] = (const void *)(uintptr_t)take(&p, &left, 8);
  b.deterministic = shape(&p, &left);
  size_t need = 0;
  if (flags & 16 && fat_attention_bwd_workspace(ctx, &b, &need) == FAT_OK) b.workspace_bytes = need;
  else b.workspace_bytes = (size_t)take(&p, &left, 8);
  st = fat_attention_bwd_check(ctx, flags & 32 ? NULL : &b);
  if (st != FAT_OK && st != FAT_ERR_INVALID_ARGUMENT && st != FAT_ERR_UNSUPPORTED) abort();
  if (st != FAT_OK && !fat_context_error(ctx)[0]) abort();
  return 0;
}
