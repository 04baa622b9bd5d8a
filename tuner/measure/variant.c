/* SPDX-License-Identifier: MIT */
/* A variant on the worker's GPU: its cubin loaded (every kernel of a
 * materialising, split-KV or backward variant), the workspace it needs, and
 * its launch in either direction, through core's fwd_launch and
 * bwd_launch. check.c and timing.c run variants through these. */
#include <string.h>
#include "bwd_launch.h"
#include "fwd_launch.h"
#include "gpu_run_int.h"

#define DEFAULT_SMEM_LIMIT (48 * 1024)  /* more needs the opt-in attribute */

/* ---- variants ------------------------------------------------------- */

int fat_gpu_kernel_load(fat_gpu *g, const fat_kernel_desc *d, fat_gpu_kernel *k, char *err,
                        size_t errlen) {
  int rc = FAT_GPU_OK;
  double t0 = fat_now_s();
  memset(k, 0, sizeof *k);
  k->desc = *d;
  k->desc.cubin = NULL;
  k->desc.cubin_size = 0;
  if (d->block_m < 1 || d->threads < 1 || d->smem_bytes < 0 || d->head_dim < 1) {
    snprintf(err, errlen, "%s: bad launch geometry block_m %d, threads %d, smem %d, head_dim %d",
             d->name, d->block_m, d->threads, d->smem_bytes, d->head_dim);
    return FAT_GPU_FAILED;
  }
  CU(g->cu.cuModuleLoadData(&k->module, d->cubin), "loading the cubin of %s", d->name);
  if (d->direction == FAT_BWD) {
    /* Four kernels (kernel.h); the key-block and dQ kernels share the
     * variant's shared-memory size, the per-row ones need none. */
    if (d->block_q < 1) {
      snprintf(err, errlen, "%s: bad query tile %d", d->name, d->block_q);
      rc = FAT_GPU_FAILED;
      goto out;
    }
    CU(g->cu.cuModuleGetFunction(&k->fn, k->module, d->entry), "entry %s of %s", d->entry, d->name);
    CU(g->cu.cuModuleGetFunction(&k->bwd_pre_fn, k->module, FAT_BWD_PREPROCESS_ENTRY), "entry %s of %s",
       FAT_BWD_PREPROCESS_ENTRY, d->name);
    CU(g->cu.cuModuleGetFunction(&k->bwd_dq_fn, k->module, FAT_BWD_DQ_ENTRY), "entry %s of %s",
       FAT_BWD_DQ_ENTRY, d->name);
    CU(g->cu.cuModuleGetFunction(&k->bwd_convert_fn, k->module, FAT_BWD_CONVERT_ENTRY), "entry %s of %s",
       FAT_BWD_CONVERT_ENTRY, d->name);
    if (d->smem_bytes > DEFAULT_SMEM_LIMIT) {
      CU(g->cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, d->smem_bytes),
         "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
      CU(g->cu.cuFuncSetAttribute(k->bwd_dq_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  d->smem_bytes),
         "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
    }
    goto out;
  }
  if (d->kind == FAT_KERNEL_MATERIALIZE) {
    /* Three kernels: scores, softmax, P·V; the first two-thirds share the
     * tile's shared memory, the softmax needs none. */
    static const char *const suffix[] = {FAT_MATERIALIZE_SCORES_SUFFIX,
                                         FAT_MATERIALIZE_SOFTMAX_SUFFIX, FAT_MATERIALIZE_PV_SUFFIX};
    CUfunction *fn[] = {&k->fn, &k->softmax_fn, &k->pv_fn};
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
      char entry[FAT_KERNEL_ENTRY_MAX + 16];
      snprintf(entry, sizeof entry, "%s%s", d->entry, suffix[i]);
      CU(g->cu.cuModuleGetFunction(fn[i], k->module, entry), "entry %s of %s", entry, d->name);
    }
    if (d->smem_bytes > DEFAULT_SMEM_LIMIT)
      for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i += 2)
        CU(g->cu.cuFuncSetAttribute(*fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    d->smem_bytes),
           "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
    goto out;
  }
  CU(g->cu.cuModuleGetFunction(&k->fn, k->module, d->entry), "entry %s of %s", d->entry, d->name);
  if (d->splits != 1) { /* a fixed split count, or one the launch chooses (0) */
    char entry[FAT_KERNEL_ENTRY_MAX + 16];
    snprintf(entry, sizeof entry, "%s%s", d->entry, FAT_FWD_COMBINE_SUFFIX);
    CU(g->cu.cuModuleGetFunction(&k->combine_fn, k->module, entry), "entry %s of %s", entry, d->name);
  }
  if (d->smem_bytes > DEFAULT_SMEM_LIMIT)
    CU(g->cu.cuFuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, d->smem_bytes),
       "%s asks for %d bytes of shared memory", d->name, d->smem_bytes);
out:
  if (rc != FAT_GPU_OK) fat_gpu_kernel_unload(g, k);
  phase_lap(g, FAT_PHASE_LOAD, &t0);
  return rc;
}

void fat_gpu_kernel_unload(fat_gpu *g, fat_gpu_kernel *k) {
  double t0 = fat_now_s();
  if (k->module) g->cu.cuModuleUnload(k->module);
  phase_lap(g, FAT_PHASE_LOAD, &t0);
  k->module = NULL;
  k->fn = k->softmax_fn = k->pv_fn = k->combine_fn = NULL;
  k->bwd_pre_fn = k->bwd_dq_fn = k->bwd_convert_fn = NULL;
}

/* The launch geometry of a fused forward variant. */
static fat_fwd_geometry fwd_geometry(const fat_kernel_desc *d) {
  /* block_n and persistent are 0 unless the variant takes tensor maps
   * (fat_kernel_schedule, and the wire refuses anything else). */
  fat_fwd_geometry geo = {.block_m = d->block_m, .threads = d->threads, .smem_bytes = d->smem_bytes,
                          .pack_gqa = d->pack_gqa, .splits = d->splits > 1 ? d->splits : 1,
                          .launch_splits = d->splits == 0, .paged = d->paged,
                          .local = d->mask == FAT_MASK_LOCAL,
                          .head_dim = d->head_dim, .block_n = d->block_n, .tma_slab = d->tma_slab,
                          .dtype = (int)d->dtype, .persistent = d->persistent};
  return geo;
}

/* ... and the split count a launch on T runs with (chosen for the call
 * and this GPU where the variant lets the launch choose). */
static fat_fwd_geometry call_geometry(const fat_gpu *g, const fat_kernel_desc *d, fat_gpu_tensors *t) {
  fat_fwd_geometry geo = fwd_geometry(d);
  t->call.sm_count = g->info.sm_count;
  geo.splits = fat_fwd_call_splits(&geo, &t->params, &t->call);
  return geo;
}

int fat_gpu_ensure_workspace(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t, char *err,
                             size_t errlen) {
  int rc = FAT_GPU_OK;
  size_t free_bytes = 0, total_bytes = 0;
  const fat_fwd_params *p = &t->params;
  const fat_check_shape s = {FAT_SHAPE_DIMS(p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k)};
  const fat_fwd_geometry geo = call_geometry(g, &k->desc, t);
  size_t need = 0;
  if (k->desc.direction == FAT_FWD && k->desc.kind == FAT_KERNEL_MATERIALIZE)
    need = fat_materialize_workspace_bytes(&s);
  else if (k->desc.direction == FAT_FWD)
    need = fat_fwd_workspace_bytes(&geo, p->batch, p->heads, p->seqlen_q);
  if (need == 0) return FAT_GPU_OK;
  if (t->workspace && t->workspace_bytes >= need) return FAT_GPU_OK;
  if (t->workspace) {
    g->cu.cuMemFree(t->workspace);
    t->workspace = 0;
    t->workspace_bytes = 0;
  }
  CU(g->cu.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
  CUresult r = need <= free_bytes ? g->cu.cuMemAlloc(&t->workspace, need) : CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    snprintf(err, errlen, "does not fit: needs %zu bytes, %zu free (workspace of %s, %dx%dx%dx%d)",
             need, free_bytes, k->desc.name, s.batch, s.heads, s.seqlen_q, s.seqlen_k);
    t->workspace = 0;
    return FAT_GPU_FAILED;
  }
  CU(r, "cuMemAlloc of the score workspace, %zu bytes", need);
  t->workspace_bytes = need;
out:
  return rc;
}

/* The materialising baseline: scores, softmax and P·V over T's workspace
 * (fat_gpu_ensure_workspace first), grids as templates/materialize_fwd.cu
 * documents them; block_m is the tile. */
static CUresult launch_materialize(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t) {
  const fat_fwd_params *p = &t->params;
  const unsigned tile = (unsigned)k->desc.block_m, threads = (unsigned)k->desc.threads;
  const unsigned smem = (unsigned)k->desc.smem_bytes, bh = (unsigned)(p->batch * p->heads);
  const unsigned q_tiles = ((unsigned)p->seqlen_q + tile - 1) / tile;
  const unsigned k_tiles = ((unsigned)p->seqlen_k + tile - 1) / tile;
  const unsigned long long rows = (unsigned long long)bh * (unsigned)p->seqlen_q;
  const unsigned softmax_blocks =
      (unsigned)((rows + FAT_MATERIALIZE_SOFTMAX_ROWS - 1) / FAT_MATERIALIZE_SOFTMAX_ROWS);
  void *args[] = {&t->params, &t->workspace};
  if (!t->workspace) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = g->cu.cuLaunchKernel(k->fn, k_tiles, q_tiles, bh, threads, 1, 1, smem, g->stream,
                                    args, NULL);
  if (r == CUDA_SUCCESS)
    r = g->cu.cuLaunchKernel(k->softmax_fn, softmax_blocks, 1, 1, threads, 1, 1, 0, g->stream, args,
                             NULL);
  if (r == CUDA_SUCCESS)
    r = g->cu.cuLaunchKernel(k->pv_fn, (unsigned)t->head_dim / tile, q_tiles, bh, threads, 1, 1, smem,
                             g->stream, args, NULL);
  return r;
}

CUresult fat_gpu_launch_variant(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_tensors *t) {
  if (k->desc.kind == FAT_KERNEL_MATERIALIZE) return launch_materialize(g, k, t);
  const fat_fwd_geometry geo = call_geometry(g, &k->desc, t);
  const fat_fwd_kernels fns = {.main = k->fn, .combine = k->combine_fn};
  /* A paged variant reads the pages (the reference read t->params'). */
  fat_fwd_params p = fat_gpu_variant_params(t, k->desc.paged);
  fat_fwd_set_workspace(&geo, &p, t->workspace);
  return fat_fwd_launch(&g->cu, &fns, &geo, &p, &t->call, g->stream);
}

CUresult fat_gpu_bwd_launch(fat_gpu *g, const fat_gpu_kernel *k, fat_gpu_bwd_tensors *t) {
  const fat_kernel_desc *d = &k->desc;
  const fat_bwd_kernels fns = {.preprocess = k->bwd_pre_fn, .main = k->fn, .dq = k->bwd_dq_fn,
                               .convert = k->bwd_convert_fn};
  const fat_bwd_geometry geo = {.block_n = d->block_m, .block_q = d->block_q, .dq_mode = d->dq_mode,
                                .threads = d->threads, .smem_bytes = d->smem_bytes,
                                .tma = d->kind == FAT_KERNEL_FUSED_TMA, .bf16 = d->dtype == FAT_BF16,
                                .persistent = d->persistent, .sm_count = g->info.sm_count};
  return fat_bwd_launch(&g->cu, &fns, &geo, &t->params, NULL, g->stream);
}
