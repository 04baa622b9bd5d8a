/* SPDX-License-Identifier: MIT */
/* The forward's launch (fwd_launch.h). */
#include "fwd_launch.h"

#define WORKSPACE_ALIGN 256

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void fat_fwd_set_scale(fat_fwd_params *p, double scale, double softcap) {
  const double log2_e = 1.4426950408889634;
  p->softmax_scale = (float)scale;
  p->scale_log2 = (float)(scale * log2_e);
  /* The kernels cap raw scores: raw' = (cap / scale) tanh(raw scale / cap). */
  p->softcap_in = softcap > 0 ? (float)(scale / softcap) : 0.f;
  p->softcap_out = softcap > 0 ? (float)(softcap / scale) : 0.f;
}

size_t fat_fwd_workspace_bytes(const fat_fwd_geometry *g, int batch, int heads, int seqlen_q) {
  if (g->splits <= 1) return 0;
  const size_t rows = (size_t)g->splits * (size_t)batch * (size_t)heads * (size_t)seqlen_q;
  return round_up(rows * (size_t)g->head_dim * sizeof(float), WORKSPACE_ALIGN) +
         round_up(rows * sizeof(float), WORKSPACE_ALIGN);
}

void fat_fwd_set_workspace(const fat_fwd_geometry *g, fat_fwd_params *p, CUdeviceptr workspace) {
  if (g->splits <= 1 || !workspace) {
    p->o_accum = p->lse_accum = NULL;
    return;
  }
  const size_t rows = (size_t)g->splits * (size_t)p->batch * (size_t)p->heads * (size_t)p->seqlen_q;
  p->o_accum = (float *)(uintptr_t)workspace;
  p->lse_accum = (float *)(uintptr_t)(workspace +
                                      round_up(rows * (size_t)g->head_dim * sizeof(float), WORKSPACE_ALIGN));
}

CUresult fat_fwd_launch(const fat_cuda *cu, const fat_fwd_kernels *k, const fat_fwd_geometry *g,
                        fat_fwd_params *p, CUstream stream) {
  const int group = p->heads_k > 0 ? p->heads / p->heads_k : 1;
  const long long rows = (long long)p->seqlen_q * (g->pack_gqa ? group : 1);
  const unsigned grid_x = (unsigned)((rows + g->block_m - 1) / g->block_m);
  const unsigned grid_y = (unsigned)(g->pack_gqa ? p->heads_k : p->heads);
  const unsigned grid_z = (unsigned)p->batch * (unsigned)g->splits;
  void *args[] = {p};
  if (g->splits > 1 && (!k->combine || !p->o_accum || !p->lse_accum)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cu->cuLaunchKernel(k->main, grid_x, grid_y, grid_z, (unsigned)g->threads, 1, 1,
                                  (unsigned)g->smem_bytes, stream, args, NULL);
  if (r == CUDA_SUCCESS && g->splits > 1) {
    const unsigned rows_per_block = FAT_FWD_COMBINE_THREADS / 32;
    const unsigned long long n = (unsigned long long)p->batch * p->heads * p->seqlen_q;
    r = cu->cuLaunchKernel(k->combine, (unsigned)((n + rows_per_block - 1) / rows_per_block), 1, 1,
                           FAT_FWD_COMBINE_THREADS, 1, 1, 0, stream, args, NULL);
  }
  return r;
}
