/* SPDX-License-Identifier: MIT */
/* The fp64 references (templates/reference_fwd.cu, reference_bwd.cu) run
 * on a problem's tensors: the forward's O and lse, and for the backward the
 * forward's outputs rounded as a kernel returns them, then the reference
 * gradients. check.c compares variants against them. */
#include "gpu_run_int.h"

#define REF_THREADS 256
#define REF_ROWS 16                     /* query rows per reference block */
#define REF_KEY_TILE 32                 /* one key per lane when scoring */
#define REF_MIN_KEY_TILE 8              /* below this, give up rows instead */
#define REF_ROW_STATE 3                 /* m, l, alpha per row */
#define REF_BWD_THREADS 256               /* 8 warps: 8 rows (or keys) per reference block */

/* ---- reference ------------------------------------------------------ */

static size_t reference_smem(int rows, int key_tile, int d) {
  size_t doubles = (size_t)rows * d            /* q_s */
                   + (size_t)key_tile * (d + 1) /* kv_s */
                   + (size_t)rows * key_tile    /* p_s */
                   + (size_t)rows * d           /* o_s */
                   + (size_t)REF_ROW_STATE * rows;
  return doubles * sizeof(double);
}

int fat_gpu_reference(fat_gpu *g, fat_gpu_tensors *t, fat_mask mask, char *err, size_t errlen) {
  int rc;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  if (!t->ref_o) {
    snprintf(err, errlen, "tensors were allocated without the reference outputs");
    return FAT_GPU_FAILED;
  }
  /* Big head dims shrink the key tile, then the rows, until the tiles fit. */
  int rows = REF_ROWS, key_tile = REF_KEY_TILE, d = t->head_dim;
  size_t limit = (size_t)g->info.smem_per_block_optin;
  while (reference_smem(rows, key_tile, d) > limit) {
    if (key_tile > REF_MIN_KEY_TILE)
      key_tile /= 2;
    else if (rows > 1)
      rows /= 2;
    else {
      snprintf(err, errlen, "head_dim %d is too large for the reference: %zu bytes of shared "
               "memory > %zu", d, reference_smem(rows, key_tile, d), limit);
      return FAT_GPU_FAILED;
    }
  }
  size_t smem = reference_smem(rows, key_tile, d);
  /* The inputs' dtype, which says how each of Q, K and V is read (an fp8
   * K/V cache's Q in its 16-bit type, K and V as e4m3 bytes), and for fp8
   * inputs their descale factors (the variant's: Q's NULL for a K/V cache,
   * read as 1). */
  int dtype = (int)t->dtype, mask_mode = (int)mask;
  fat_fwd_fp8_params fp8 = t->call.fp8;
  const fat_fwd_params *p = &t->params;
  unsigned grid_x = (unsigned)((p->seqlen_q + rows - 1) / rows);
  void *args[] = {&t->params, &d, &dtype, &mask_mode, &t->ref_o, &t->ref_lse, &rows, &key_tile, &fp8};
  rc = FAT_GPU_OK;
  CU(g->cu.cuFuncSetAttribute(g->ref_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
     "reference: %zu bytes of shared memory", smem);
  CU(g->cu.cuLaunchKernel(g->ref_fn, grid_x, (unsigned)p->heads, (unsigned)p->batch, REF_THREADS, 1,
                          1, (unsigned)smem, g->stream, args, NULL),
     "launching the reference");
  CU(g->cu.cuStreamSynchronize(g->stream), "running the reference on %dx%dx%dx%d", p->batch,
     p->heads, p->seqlen_q, p->seqlen_k);
out:
  return rc;
}

/* ---- backward reference -------------------------------------------- */

/* O and lse for the backward: the fp64 forward reference rounded as a
 * forward kernel returns them (O to the dtype, lse to fp32), then the fp64
 * reference gradients (and D) when T has them. */
int fat_gpu_bwd_reference(fat_gpu *g, fat_gpu_bwd_tensors *t, fat_mask mask, int gradients,
                          char *err, size_t errlen) {
  int rc;
  if ((rc = fat_gpu_reference(g, &t->fwd, mask, err, errlen)) != FAT_GPU_OK) return rc;
  const fat_fwd_params *p = &t->params.fwd;
  unsigned long long n = t->fwd.n_q, rows = t->fwd.n_rows;
  int is_bf16 = t->fwd.dtype == FAT_BF16, mask_mode = (int)mask, d = t->fwd.head_dim;
  size_t blocks = (n + FILL_THREADS - 1) / FILL_THREADS;
  if (blocks > FILL_MAX_BLOCKS) blocks = FILL_MAX_BLOCKS;
  void *round_args[] = {&t->fwd.ref_o, &t->fwd.o, &n, &is_bf16, &t->fwd.ref_lse, &t->fwd.lse, &rows};
  CU(g->cu.cuLaunchKernel(g->ref_bwd_round_fn, (unsigned)blocks, 1, 1, FILL_THREADS, 1, 1, 0, g->stream,
                          round_args, NULL),
     "rounding the reference O and lse");
  if (gradients) {
    const unsigned warps = REF_BWD_THREADS / 32;
    void *rows_args[] = {&t->params, &d, &is_bf16, &mask_mode, &t->fwd.ref_lse, &t->ref_delta, &t->ref_dq};
    void *cols_args[] = {&t->params, &d,          &is_bf16,    &mask_mode,
                         &t->fwd.ref_lse, &t->ref_delta, &t->ref_dk, &t->ref_dv};
    CU(g->cu.cuLaunchKernel(g->ref_bwd_rows_fn, ((unsigned)p->seqlen_q + warps - 1) / warps,
                            (unsigned)p->heads, (unsigned)p->batch, REF_BWD_THREADS, 1, 1, 0, g->stream,
                            rows_args, NULL),
       "launching the backward reference (rows)");
    CU(g->cu.cuLaunchKernel(g->ref_bwd_cols_fn, ((unsigned)p->seqlen_k + warps - 1) / warps,
                            (unsigned)p->heads_k, (unsigned)p->batch, REF_BWD_THREADS, 1, 1, 0, g->stream,
                            cols_args, NULL),
       "launching the backward reference (columns)");
  }
  CU(g->cu.cuStreamSynchronize(g->stream), "running the backward reference on %dx%dx%dx%d", p->batch,
     p->heads, p->seqlen_q, p->seqlen_k);
out:
  return rc;
}
