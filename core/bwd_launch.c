/* SPDX-License-Identifier: MIT */
/* The backward's launch sequence (bwd_launch.h). */
#include "bwd_launch.h"
#include <limits.h>
#include <stdint.h>
#include "fwd_launch.h"

enum { BWD_MAPS = 4 };  /* q, k, v, dout: the kernel's parameters after P, in this order */

static void bwd_tensors(const fat_bwd_params *p, fat_tma_tensor t[BWD_MAPS]) {
  const fat_fwd_params *f = &p->fwd;
  t[0] = (fat_tma_tensor){"q", f->q, f->seqlen_q, f->heads, f->batch, f->q_row_stride, f->q_head_stride,
                          f->q_batch_stride, 0, 2};
  t[1] = (fat_tma_tensor){"k", f->k, f->seqlen_k, f->heads_k, f->batch, f->k_row_stride, f->k_head_stride,
                          f->k_batch_stride, 0, 2};
  t[2] = (fat_tma_tensor){"v", f->v, f->seqlen_k, f->heads_k, f->batch, f->v_row_stride, f->v_head_stride,
                          f->v_batch_stride, 0, 2};
  t[3] = (fat_tma_tensor){"dout", p->dout, f->seqlen_q, f->heads, f->batch, p->do_row_stride,
                          p->do_head_stride, p->do_batch_stride, 0, 2};
}

int fat_bwd_semaphores(int batch, int heads, int seqlen_q, int block_q, size_t *count) {
  if (batch < 1 || heads < 1 || seqlen_q < 1 || block_q < 1) return -1;
  const size_t tiles = ((size_t)seqlen_q + (size_t)block_q - 1) / (size_t)block_q;
  return __builtin_mul_overflow((size_t)batch, (size_t)heads, count) ||
                 __builtin_mul_overflow(*count, tiles, count)
             ? -1
             : 0;
}

int fat_bwd_semaphores_bound(int batch, int heads, int seqlen_q, long long total_q, size_t *count) {
  if (total_q == 0) return fat_bwd_semaphores(batch, heads, seqlen_q, FAT_BWD_ORDERED_MIN_BLOCK_Q, count);
  /* A sequence of length n has ceil(n / 64) <= floor(n / 64) + 1 tiles,
   * and the floors of the lengths sum to at most floor(total_q / 64). */
  if (batch < 1 || heads < 1 || total_q < 1 || (unsigned long long)total_q > SIZE_MAX) return -1;
  const size_t tiles = (size_t)total_q / FAT_BWD_ORDERED_MIN_BLOCK_Q + (size_t)batch;
  return __builtin_mul_overflow((size_t)heads, tiles, count) ? -1 : 0;
}

/* Where P's semaphores start for an ordered variant of query tile
 * BLOCK_Q, and how many there are (bwd_launch.h); -1 when the tile is
 * below the one the workspace's bound counts by, P has no accumulator or
 * is a packed batch, or the place does not fit in the address space. */
static int semaphores_of(const fat_bwd_params *p, int block_q, CUdeviceptr *at, size_t *count) {
  const fat_fwd_params *f = &p->fwd;
  size_t rows, offset;
  if (block_q < FAT_BWD_ORDERED_MIN_BLOCK_Q || !p->dq_accum || f->cu_seqlens_q ||
      fat_bwd_semaphores(f->batch, f->heads, f->seqlen_q, block_q, count) ||
      __builtin_mul_overflow((size_t)f->batch, (size_t)f->heads, &rows) ||
      __builtin_mul_overflow(rows, (size_t)f->seqlen_q, &rows) ||
      __builtin_mul_overflow(rows, FAT_BWD_ACCUM_WIDTH((size_t)f->head_dim) * sizeof(float), &offset) ||
      __builtin_add_overflow((CUdeviceptr)(uintptr_t)p->dq_accum, (CUdeviceptr)offset, at))
    return -1;
  return 0;
}

int fat_bwd_tma_describable(const fat_bwd_params *p, char *err, size_t errlen) {
  fat_tma_tensor t[BWD_MAPS];
  bwd_tensors(p, t);
  return fat_tma_describable(t, BWD_MAPS, p->fwd.head_dim, err, errlen);
}

enum { DLSE_THREADS = 256, DLSE_MAX_BLOCKS = 4096 };  /* fat_bwd_sub_dlse loops over the rest */

/* fat_bwd_sub_dlse over P's D (bwd_launch.h). */
static CUresult sub_dlse(const fat_cuda *cu, const fat_bwd_dlse *x, fat_bwd_params *p, CUstream stream) {
  if (!x->count) return CUDA_SUCCESS;
  size_t blocks = (x->count + DLSE_THREADS - 1) / DLSE_THREADS;
  if (blocks > DLSE_MAX_BLOCKS) blocks = DLSE_MAX_BLOCKS;
  CUdeviceptr delta = (CUdeviceptr)(uintptr_t)p->delta, dlse = (CUdeviceptr)(uintptr_t)x->dlse;
  unsigned long long count = x->count;
  void *args[] = {&delta, &dlse, &count};
  return cu->cuLaunchKernel(x->sub, (unsigned)blocks, 1, 1, DLSE_THREADS, 1, 1, 0, stream, args, NULL);
}

CUresult fat_bwd_launch(const fat_cuda *cu, const fat_bwd_kernels *k, const fat_bwd_geometry *g,
                        fat_bwd_params *p, const fat_bwd_dlse *dlse, CUstream stream) {
  const fat_fwd_params *f = &p->fwd;
  /* The per-row kernels: FAT_BWD_ROW_LANES lanes per query row. */
  const unsigned rows_per_block = FAT_BWD_ROW_THREADS / FAT_BWD_ROW_LANES(f->head_dim);
  const unsigned row_blocks = ((unsigned)f->seqlen_q + rows_per_block - 1) / rows_per_block;
  const unsigned key_blocks = (unsigned)((f->seqlen_k + g->block_n - 1) / g->block_n);
  const unsigned query_blocks = (unsigned)((f->seqlen_q + g->block_q - 1) / g->block_q);
  const unsigned heads = (unsigned)f->heads, batch = (unsigned)f->batch;
  const unsigned threads = (unsigned)g->threads, smem = (unsigned)g->smem_bytes;
  /* The main kernel: a block a (key block, key head, batch), or persistent
   * at most one an SM, the kernel walking the items itself. */
  unsigned main_x = key_blocks, main_y = (unsigned)f->heads_k, main_z = batch;
  if (g->persistent) {
    const unsigned long long items = (unsigned long long)key_blocks * main_y * main_z;
    if (items > INT_MAX || !(main_x = fat_resident_grid(items, g->sm_count))) return CUDA_ERROR_INVALID_VALUE;
    main_y = main_z = 1;
  }
  /* An ordered variant's semaphores: refused before anything is queued
   * when they have no place. */
  CUdeviceptr sems = 0;
  size_t n_sems = 0;
  if (g->dq_mode == FAT_DQ_ORDERED && semaphores_of(p, g->block_q, &sems, &n_sems)) return CUDA_ERROR_INVALID_VALUE;
  CUtensorMap maps[BWD_MAPS];
  void *args[] = {p}, *main_args[] = {p, &maps[0], &maps[1], &maps[2], &maps[3]};
  if (g->tma) {
    char why[256];
    fat_tma_tensor t[BWD_MAPS];
    if (fat_bwd_tma_describable(p, why, sizeof why)) return CUDA_ERROR_INVALID_VALUE;
    bwd_tensors(p, t);
    for (int i = 0; i < BWD_MAPS; i++) {
      const int rows = i == 1 || i == 2 ? g->block_n : g->block_q;
      CUresult e = fat_tma_encode(cu, &maps[i], &t[i], f->head_dim, g->bf16 ? FAT_BF16 : FAT_FP16, FAT_TMA_BOX_COLUMNS, rows);
      if (e != CUDA_SUCCESS) return e;
    }
  }
  CUresult r = cu->cuLaunchKernel(k->preprocess, row_blocks, heads, batch, FAT_BWD_ROW_THREADS, 1,
                                  1, 0, stream, args, NULL);
  if (r == CUDA_SUCCESS && dlse) r = sub_dlse(cu, dlse, p, stream);
  /* Every tile's count of adds starts at 0 (the kernel waits on it), on the
   * stream, so that the main kernel sees zeroes whatever ran before. */
  if (r == CUDA_SUCCESS && g->dq_mode == FAT_DQ_ORDERED) r = cu->cuMemsetD32Async(sems, 0, n_sems, stream);
  if (r == CUDA_SUCCESS)
    r = cu->cuLaunchKernel(k->main, main_x, main_y, main_z, threads, 1, 1, smem, stream,
                           g->tma ? main_args : args, NULL);
  if (r == CUDA_SUCCESS && g->dq_mode == FAT_DQ_SEPARATE)
    r = cu->cuLaunchKernel(k->dq, query_blocks, heads, batch, threads, 1, 1, smem, stream, args,
                           NULL);
  if (r == CUDA_SUCCESS && fat_dq_accumulates(g->dq_mode))
    r = cu->cuLaunchKernel(k->convert, row_blocks, heads, batch, FAT_BWD_ROW_THREADS, 1, 1, 0,
                           stream, args, NULL);
  return r;
}
