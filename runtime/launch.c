/* SPDX-License-Identifier: MIT */
/* Running the selected variant: the forward's and the backward's parameter
 * blocks and launches (and, when the tuned variant cannot run the call --
 * too little workspace, tensors no tensor map describes -- the best one
 * that can), the forward's workspace size, the choice that ran; and the
 * public entry points, which put the caller's CUDA context back on every
 * exit. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "bwd_launch.h"
#include "embedded.h"
#include "fwd_launch.h"
#include "types.h"
#include "runtime_int.h"

/* ---- launch ------------------------------------------------------------- */

/* The caller's RAN of fat_attention_fwd / _bwd (may be NULL): checked
 * before anything is launched, so that no launch goes unreported. */
static fat_status check_ran(fat_context *c, const fat_choice *ran) {
  if (!ran) return FAT_OK;
  pthread_mutex_lock(&c->lock);
  fat_status st = CHECK_SIZE(c, fat_choice, ran, "FAT_CHOICE_INIT");
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* The forward's parameter block for A. */
static void fwd_params(const fat_attn_args *a, fat_fwd_params *p) {
  memset(p, 0, sizeof *p);
  p->q = a->q;
  p->k = a->k;
  p->v = a->v;
  p->o = a->o;
  p->lse = a->lse;
  p->q_batch_stride = a->q_batch_stride;
  p->q_row_stride = a->q_row_stride;
  p->q_head_stride = a->q_head_stride;
  p->k_batch_stride = a->k_batch_stride;
  p->k_row_stride = a->k_row_stride;
  p->k_head_stride = a->k_head_stride;
  p->v_batch_stride = a->v_batch_stride;
  p->v_row_stride = a->v_row_stride;
  p->v_head_stride = a->v_head_stride;
  p->o_batch_stride = a->o_batch_stride;
  p->o_row_stride = a->o_row_stride;
  p->o_head_stride = a->o_head_stride;
  p->batch = a->batch;
  p->heads = a->heads;
  p->heads_k = a->heads_k;
  p->seqlen_q = a->seqlen_q;
  p->seqlen_k = a->seqlen_k;
  p->head_dim = a->head_dim;
  p->cu_seqlens_q = a->cu_seqlens_q;
  p->cu_seqlens_k = a->cu_seqlens_k;
  p->seqused_k = a->seqused_k;
  p->window_left = a->mask == FAT_ATTN_MASK_LOCAL ? a->window_left : -1;
  p->window_right = a->mask == FAT_ATTN_MASK_LOCAL ? a->window_right : -1;
  fat_fwd_set_scale(p, a->softmax_scale > 0 ? a->softmax_scale : 1.0 / sqrt((double)a->head_dim),
                    a->softcap);
}

/* What a launch of A needs beyond P: its packed rows, the GPU's SMs, a
 * paged cache's table and the descale factors of fp8 inputs -- e4m3's
 * three, an fp8 K/V cache's k and v (its q's NULL and 0, as for the
 * 16-bit dtypes all three: fat_attention_check requires it), which
 * fat_fwd_launch hands an e4m3 variant last and an fp8 K/V cache's third. */
static fat_fwd_call fwd_call(const fat_context *c, const fat_attn_args *a) {
  return (fat_fwd_call){.total_q = a->cu_seqlens_q ? a->total_q : 0,
                        .total_k = a->cu_seqlens_k ? a->total_k : 0, .sm_count = c->sm_count,
                        .block_table = a->block_table, .block_table_stride = a->block_table_stride,
                        .page_size = a->page_size,
                        .fp8 = {.descale = {a->q_descale, a->k_descale, a->v_descale},
                                .batch_stride = {a->q_descale_batch_stride, a->k_descale_batch_stride,
                                                 a->v_descale_batch_stride},
                                .head_stride = {a->q_descale_head_stride, a->k_descale_head_stride,
                                                a->v_descale_head_stride}}};
}

/* The geometry a record's variant launches P's call with: its split count
 * chosen for the call where the launch chooses it, and then one split
 * (which needs no workspace) where the caller's WORKSPACE_BYTES are too few
 * for more. */
static fat_fwd_geometry call_geometry(const sel_record *e, const fat_fwd_params *p, const fat_fwd_call *call,
                                      size_t workspace_bytes) {
  fat_fwd_geometry g = {.block_m = e->block_m, .threads = e->threads, .smem_bytes = e->smem_bytes,
                        .pack_gqa = e->pack_gqa, .splits = e->splits, .launch_splits = e->splits == 0,
                        .paged = e->paged, .local = e->mask == FAT_ATTN_MASK_LOCAL,
                        .head_dim = e->template_dim, .block_n = e->block_n, .tma_slab = e->tma_slab,
                        .dtype = (int)e->dtype, .persistent = e->persistent};
  g.splits = fat_fwd_call_splits(&g, p, call);
  if (g.launch_splits && fat_fwd_workspace_bytes(&g, p->batch, p->heads, p->seqlen_q) > workspace_bytes)
    g.splits = 1;
  return g;
}

/* The entry point's lock, offline refusal and checks; on FAT_OK *E serves
 * the problem and the lock is released (E->rec is the context's till it
 * closes). */
typedef fat_status (*args_check)(fat_context *c, const void *args);

static fat_status prepare_launch(fat_context *c, sel_key key, const fat_attn_args *a,
                                 const void *args, args_check check, void *stream,
                                 sel_served *e) {
  fat_status st;
  pthread_mutex_lock(&c->lock);
  if (c->offline)
    st = fail(c, FAT_ERR_INVALID_ARGUMENT,
              "this context describes %s without a device: it can select, not launch", c->gpu_name);
  else if (!(st = check(c, args)) && !(st = fat_rt_check_on_device(c, args, key.direction, stream)))
    st = fat_rt_lookup_entry(c, key, a, e);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* After the launches: the outcome, and the choice it ran. */
static fat_status finish_launch(fat_context *c, sel_served e, CUresult r, fat_choice *ran) {
  fat_status st = FAT_OK;
  pthread_mutex_lock(&c->lock);
  if (r != CUDA_SUCCESS) {
    char t[256];
    st = fail(c, FAT_ERR_CUDA, "launching %s: %s", e.rec->choice.variant,
              fat_cuda_result_text(&c->cu, r, t, sizeof t));
  } else {
    c->last = e;
    if (ran) put_served(ran, e);
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* The runtime's fat_bwd_sub_dlse (bwd_launch.h) in *FN: loaded from the
 * embedded PTX once a context, on its first backward given a dlse (the
 * driver compiles it for the GPU); the primary context is current. */
static fat_status dlse_kernel(fat_context *c, CUfunction *fn) {
  fat_status st = FAT_OK;
  pthread_mutex_lock(&c->lock);
  if (!c->dlse_fn) {
    const fat_embedded_file *ptx = fat_embedded_find(FAT_BWD_DLSE_PTX);
    CUmodule m = NULL;
    CUresult r = ptx ? c->cu.cuModuleLoadData(&m, ptx->data) : CUDA_ERROR_FILE_NOT_FOUND;
    if (r == CUDA_SUCCESS) r = c->cu.cuModuleGetFunction(&c->dlse_fn, m, FAT_BWD_SUB_DLSE_ENTRY);
    if (r == CUDA_SUCCESS) {
      c->dlse_module = m;
    } else {
      char t[256];
      if (m) c->cu.cuModuleUnload(m);
      c->dlse_fn = NULL;
      st = fail(c, FAT_ERR_CUDA, "loading %s (%s, the gradient through lse): %s", FAT_BWD_SUB_DLSE_ENTRY,
                FAT_BWD_DLSE_PTX, fat_cuda_result_text(&c->cu, r, t, sizeof t));
    }
  }
  *fn = c->dlse_fn;
  pthread_mutex_unlock(&c->lock);
  return st;
}

static fat_status check_fwd(fat_context *c, const void *args) { return fat_rt_check_args(c, args); }

static fat_status attention_fwd(fat_context *c, const fat_attn_args *a, void *stream,
                               fat_choice *ran) {
  sel_served served;
  const sel_record *e = NULL;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  fat_status st = check_ran(c, ran);
  if (st) return st;
  /* The hot path: records are never changed once published. The tuned
   * variant, or the best one that can run the call: one that needs no
   * scratch when the caller's is too small for the tuned split, one that
   * loads without tensor maps when they cannot describe the tensors. */
  sel_key key = fat_rt_fwd_key(c, a);
  fat_fwd_params p;
  fat_fwd_call call;
  fat_fwd_geometry g;
  for (;;) {
    if ((st = prepare_launch(c, key, a, a, check_fwd, stream, &served))) return st;
    e = served.rec;
    fwd_params(a, &p);  /* A is checked now */
    call = fwd_call(c, a);
    g = call_geometry(e, &p, &call, a->workspace ? a->workspace_bytes : 0);
    size_t need = fat_fwd_workspace_bytes(&g, a->batch, a->heads, a->seqlen_q);
    char why[256];
    const int short_workspace = need > 0 && (!a->workspace || a->workspace_bytes < need);
    const int no_maps = g.block_n > 0 && fat_fwd_tma_describable(&p, &call, g.dtype, why, sizeof why);
    if (!key.no_workspace && short_workspace) {
      key.no_workspace = 1;
    } else if (!key.no_tma && no_maps) {
      logf_(c, "%s: %s", e->choice.variant, why);
      key.no_tma = 1;
    } else if (short_workspace || no_maps) {
      /* Nothing that could run the call is left: every e4m3 variant loads
       * through tensor maps, and a built-in default may need workspace. */
      pthread_mutex_lock(&c->lock);
      st = short_workspace
               ? fail(c, FAT_ERR_INVALID_ARGUMENT, "workspace_bytes %zu: %s needs %zu "
                      "(fat_attention_fwd_workspace) and no variant that needs none serves %s",
                      a->workspace ? a->workspace_bytes : (size_t)0, e->choice.variant, need,
                      fat_dtype_name((fat_dtype)a->dtype))
               : fail(c, FAT_ERR_UNSUPPORTED, "dtype %s: %s (%s loads through tensor maps, and no "
                      "variant that loads without serves it)", fat_dtype_name((fat_dtype)a->dtype),
                      why, e->choice.variant);
      pthread_mutex_unlock(&c->lock);
      return st;
    } else {
      break;
    }
  }
  fat_fwd_set_workspace(&g, &p, (CUdeviceptr)(uintptr_t)a->workspace);
  const fat_fwd_kernels fns = {.main = e->k->fn, .combine = e->k->combine_fn};
  CUresult r = c->cu.cuCtxSetCurrent(c->pctx);
  if (r == CUDA_SUCCESS) r = fat_fwd_launch(&c->cu, &fns, &g, &p, &call, (CUstream)stream);
  return finish_launch(c, served, r, ran);
}

static fat_status attention_fwd_workspace(fat_context *c, const fat_attn_args *a, size_t *bytes) {
  selection sel;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  sel_served e = {.rec = NULL};
  fat_status st;
  if (!bytes)
    st = fail(c, FAT_ERR_INVALID_ARGUMENT, "bytes is NULL");
  else if (c->offline)
    st = fat_rt_select_variant(c, fat_rt_fwd_key(c, a), a, &sel);
  else if (!(st = fat_rt_check_problem(c, a)))
    /* With a device, what serves the launch: asked before every call, it
     * must cost no more than the launch's lookup. */
    st = fat_rt_lookup_entry(c, fat_rt_fwd_key(c, a), a, &e);
  if (st == FAT_OK) {
    /* The bytes of the split count the launch will choose (the record of
     * an offline selection: its variant's schedule). */
    sel_record offline = {.splits = 1};
    if (!e.rec)
      offline = (sel_record){.mask = a->mask, .block_m = sel.block_m, .threads = sel.threads,
                             .smem_bytes = sel.smem_bytes,
                             .pack_gqa = sel.pack_gqa, .splits = sel.splits, .paged = sel.paged,
                             .template_dim = sel.head_dim, .block_n = sel.block_n,
                             .tma_slab = sel.tma_slab, .dtype = a->dtype, .persistent = sel.persistent};
    fat_fwd_params p;
    fwd_params(a, &p);
    const fat_fwd_call call = fwd_call(c, a);
    const fat_fwd_geometry g = call_geometry(e.rec ? e.rec : &offline, &p, &call, SIZE_MAX);
    *bytes = fat_fwd_workspace_bytes(&g, a->batch, a->heads, a->seqlen_q);
    if (*bytes == SIZE_MAX) st = fat_rt_workspace_overflow(c, a);
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---- backward ------------------------------------------------------------- */

static fat_status attention_bwd(fat_context *c, const fat_attn_bwd_args *a, void *stream,
                               fat_choice *ran) {
  sel_served served;
  const sel_record *e = NULL;
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  fat_status st = check_ran(c, ran);
  if (st) return st;
  pthread_mutex_lock(&c->lock);
  st = fat_rt_check_bwd_size(c, a);  /* before deterministic is read */
  pthread_mutex_unlock(&c->lock);
  if (st) return st;
  /* The tuned variant, or where tensor maps cannot describe the tensors
   * the best one that loads without them. */
  sel_key key = {.direction = FAT_BWD, .deterministic = a->deterministic,
                 .features = fat_rt_bwd_features(&a->fwd)};
  const fat_attn_args *f = &a->fwd;
  fat_bwd_params p;
  for (;;) {
    if ((st = prepare_launch(c, key, &a->fwd, a, fat_rt_check_bwd_args, stream, &served))) return st;
    e = served.rec;
    memset(&p, 0, sizeof p);
    fwd_params(f, &p.fwd);  /* A is checked now */
    p.dout = a->dout;
    p.do_batch_stride = a->do_batch_stride;
    p.do_row_stride = a->do_row_stride;
    p.do_head_stride = a->do_head_stride;
    char why[256];
    if (key.no_tma || e->block_n < 1 || !fat_bwd_tma_describable(&p, why, sizeof why)) break;
    logf_(c, "%s: %s", e->choice.variant, why);
    key.no_tma = 1;
  }
  size_t delta, accum, sems, d_rows;
  /* fits: checked by fat_rt_check_bwd_args; the semaphores follow the
   * accumulator, where the launch finds them (bwd_launch.h). */
  fat_rt_bwd_workspace_parts(f, &delta, &accum, &sems, &d_rows);
  p.dq = a->dq;
  p.dk = a->dk;
  p.dv = a->dv;
  p.delta = (float *)a->workspace;
  /* The accumulator for the modes that sum into it (atomic, ordered). */
  p.dq_accum = fat_dq_accumulates(e->dq_mode) ? (float *)((char *)a->workspace + delta) : NULL;
  p.dq_batch_stride = a->dq_batch_stride;
  p.dq_row_stride = a->dq_row_stride;
  p.dq_head_stride = a->dq_head_stride;
  p.dk_batch_stride = a->dk_batch_stride;
  p.dk_row_stride = a->dk_row_stride;
  p.dk_head_stride = a->dk_head_stride;
  p.dv_batch_stride = a->dv_batch_stride;
  p.dv_row_stride = a->dv_row_stride;
  p.dv_head_stride = a->dv_head_stride;
  const fat_bwd_kernels fns = {.preprocess = e->k->pre_fn, .main = e->k->fn, .dq = e->k->dq_fn,
                               .convert = e->k->convert_fn};
  const fat_bwd_geometry geo = {.block_n = e->block_m, .block_q = e->block_q, .dq_mode = e->dq_mode,
                                .threads = e->threads, .smem_bytes = e->smem_bytes, .tma = e->block_n > 0,
                                .bf16 = e->dtype == FAT_ATTN_BF16, .persistent = e->persistent,
                                .sm_count = c->sm_count};
  CUresult r = c->cu.cuCtxSetCurrent(c->pctx);
  /* lse's gradient: D − dlse over D's entries, which are lse's. */
  fat_bwd_dlse dlse = {.dlse = a->dlse, .count = d_rows};
  if (r == CUDA_SUCCESS && a->dlse && (st = dlse_kernel(c, &dlse.sub))) return st;
  if (r == CUDA_SUCCESS) r = fat_bwd_launch(&c->cu, &fns, &geo, &p, a->dlse ? &dlse : NULL, (CUstream)stream);
  return finish_launch(c, served, r, ran);
}

fat_status fat_context_last_choice(fat_context *c, fat_choice *out) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&c->lock);
  fat_status st = FAT_OK;
  if (!out) st = fail(c, FAT_ERR_INVALID_ARGUMENT, "out is NULL");
  else st = CHECK_SIZE(c, fat_choice, out, "FAT_CHOICE_INIT");
  if (!st && !c->last.rec) st = fail(c, FAT_ERR_INVALID_ARGUMENT, "no launch has succeeded yet");
  if (!st) put_served(out, c->last);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---- entry points that make the primary context current --------------------- */

/* Each restores the caller's current context on every exit (fat_rt_save_current). */

fat_status fat_attention_fwd(fat_context *c, const fat_attn_args *a, void *stream,
                             fat_choice *ran) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  const saved_ctx caller = fat_rt_save_current(c);
  const fat_status st = attention_fwd(c, a, stream, ran);
  fat_rt_restore_current(c, caller);
  return st;
}

fat_status fat_attention_fwd_workspace(fat_context *c, const fat_attn_args *a, size_t *bytes) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  const saved_ctx caller = fat_rt_save_current(c);
  const fat_status st = attention_fwd_workspace(c, a, bytes);
  fat_rt_restore_current(c, caller);
  return st;
}

fat_status fat_attention_bwd(fat_context *c, const fat_attn_bwd_args *a, void *stream,
                             fat_choice *ran) {
  if (!c) return FAT_ERR_INVALID_ARGUMENT;
  const saved_ctx caller = fat_rt_save_current(c);
  const fat_status st = attention_bwd(c, a, stream, ran);
  fat_rt_restore_current(c, caller);
  return st;
}
