/* SPDX-License-Identifier: MIT */
/* The backward's launch sequence (bwd_launch.h). */
#include "bwd_launch.h"


CUresult fat_bwd_launch(const fat_cuda *cu, const fat_bwd_kernels *k, const fat_bwd_geometry *g,
                        fat_bwd_params *p, CUstream stream) {
  const fat_fwd_params *f = &p->fwd;
  /* The per-row kernels: FAT_BWD_ROW_LANES lanes per query row. */
  const unsigned rows_per_block = FAT_BWD_ROW_THREADS / FAT_BWD_ROW_LANES(f->head_dim);
  const unsigned row_blocks = ((unsigned)f->seqlen_q + rows_per_block - 1) / rows_per_block;
  const unsigned key_blocks = (unsigned)((f->seqlen_k + g->block_n - 1) / g->block_n);
  const unsigned query_blocks = (unsigned)((f->seqlen_q + g->block_q - 1) / g->block_q);
  const unsigned heads = (unsigned)f->heads, batch = (unsigned)f->batch;
  const unsigned threads = (unsigned)g->threads, smem = (unsigned)g->smem_bytes;
  void *args[] = {p};
  CUresult r = cu->cuLaunchKernel(k->preprocess, row_blocks, heads, batch, FAT_BWD_ROW_THREADS, 1,
                                  1, 0, stream, args, NULL);
  if (r == CUDA_SUCCESS)
    r = cu->cuLaunchKernel(k->main, key_blocks, (unsigned)f->heads_k, batch, threads, 1, 1, smem,
                           stream, args, NULL);
  if (r == CUDA_SUCCESS && g->dq_separate)
    r = cu->cuLaunchKernel(k->dq, query_blocks, heads, batch, threads, 1, 1, smem, stream, args,
                           NULL);
  if (r == CUDA_SUCCESS && !g->dq_separate)
    r = cu->cuLaunchKernel(k->convert, row_blocks, heads, batch, FAT_BWD_ROW_THREADS, 1, 1, 0,
                           stream, args, NULL);
  return r;
}
