/* SPDX-License-Identifier: MIT */
/* The launch of a fused forward variant (templates/fwd_mma80.cu), written
 * once for the tuner (measure/variant.c) and the runtime (runtime/launch.c): its
 * grid, for split-KV variants the workspace of partials and the combine
 * kernel that follows, and for the variants that load through the tensor
 * copy engine (templates/fwd_ws90.cu) the tensor maps of q, k and v. */
#ifndef FAT_FWD_LAUNCH_H
#define FAT_FWD_LAUNCH_H
#include <stddef.h>
#include "cuda_api.h"
#include "fat_abi.h"
#include "fat_abi_kv.h"
#include "fat_abi_fp8.h"
#include "kernel.h"
#include "types.h"

/* A split variant's second kernel: its entry with this appended. */
#define FAT_FWD_COMBINE_SUFFIX "_combine"

typedef struct fat_fwd_kernels {
  CUfunction main;     /* the variant's entry */
  CUfunction combine;  /* split variants only (splits > 1), else NULL */
} fat_fwd_kernels;

/* How the variant is launched: resources, and the decoding schedule its
 * parameter string names (fat_fwd_params_parse). */
typedef struct fat_fwd_geometry {
  int block_m;       /* rows per block */
  int threads;
  int smem_bytes;
  int pack_gqa;      /* 1: the rows of a block are (position, head of the group) pairs */
  int splits;        /* blocks the keys of one query block are divided among; 0 until
                        fat_fwd_call_splits sets it for a variant whose launch chooses them */
  int launch_splits; /* 1: the variant's split count is chosen at launch (SPLITS 0), and its
                        kernels read it from fat_fwd_kv_params */
  int paged;         /* 1: K and V are read from a paged cache (fat_fwd_call's block table) */
  int local;         /* 1: the variant applies a local window (P's), which bounds the keys
                        a block sees: a launch's split count counts those */
  int head_dim;      /* the template's: the row pitch of the fp32 partials */
  int block_n;       /* > 0: the kernel takes tensor maps of q, k and v after P, in boxes of
                        tma_slab columns by block_m (q) and block_n (k, v) rows; 0: P alone */
  int tma_slab;      /* with block_n: the boxes' columns, the template's slab: 64, or 32
                        (0 reads as 64); e4m3: 128 or 64 (a slab of 128 or 64 bytes) */
  int dtype;         /* the inputs' fat_dtype: the maps' element type, and e4m3 variants
                        take fat_fwd_fp8_params (fat_fwd_call's) after the maps */
  int persistent;    /* 0: one block a query block; FAT_FWD_RESIDENT: at most one block an SM
                        (fat_fwd_call's sm_count), each looping over the query blocks;
                        FAT_FWD_DRAWN: the same, drawn from a counter in the workspace */
} fat_fwd_geometry;

/* Columns of one tensor-map box: a 128-byte swizzled slab of 16-bit elements.
 * The ws90 forward's SLAB 32 (d96 on a template of its own width) takes
 * boxes of 32, a 64-byte swizzled slab. A box is always a slab of 128 or
 * 64 bytes (the e4m3 variants' 128 or 64 one-byte columns). */
#define FAT_TMA_BOX_COLUMNS 64
#define FAT_TMA_HALF_SLAB 32
#define FAT_TMA_SLAB_BYTES 128

/* One of the tensors a map describes (q, k, v; the backward's dout too):
 * (head_dim, rows, heads, batch), innermost first, strides in elements; a
 * packed batch has no batch dimension (its rows are every sequence's). */
typedef struct fat_tma_tensor {
  const char *name;
  const void *base;
  long long rows, heads, batch;
  long long row_stride, head_stride, batch_stride;
  int packed;
  int elem_bytes;  /* 2 (fp16, bf16) or 1 (e4m3) */
} fat_tma_tensor;

/* 0 when tensor maps can describe the N tensors T of HEAD_DIM columns
 * (bases 16-byte aligned, strides multiples of 16 bytes below 2^40,
 * extents below 2^32), else -1 with err naming the first that cannot. */
int fat_tma_describable(const fat_tma_tensor *t, int n, int head_dim, char *err, size_t errlen);

/* Encodes the map of T (elements of fat_dtype DTYPE) in boxes of
 * BOX_COLUMNS columns by BOX_ROWS rows, a box's row 128 or 64 bytes, with
 * the swizzle of the templates' tiles (wgmma's 128-byte one, or its 64-byte
 * one for a half slab); rows and columns past its extents load as zeros. T
 * must be describable. */
CUresult fat_tma_encode(const fat_cuda *cu, CUtensorMap *map, const fat_tma_tensor *t, int head_dim,
                        int dtype, int box_columns, int box_rows);

/* What a launch needs of the call and its GPU beyond P: the rows of a
 * packed batch's q and o (total_q) and k and v (total_k, cu_seqlens_*[batch];
 * 0 for a dense batch), which the tensor maps span, and the GPU's SMs,
 * which bound a persistent grid. */
typedef struct fat_fwd_call {
  long long total_q, total_k;
  int sm_count;
  /* A paged cache (fat_abi_kv.h): P's k and v are pools of pages of
   * page_size rows (a power of two), their batch strides a page's, and
   * block_table batch rows of block_table_stride page indices; NULL for a
   * contiguous cache. */
  const int *block_table;
  int block_table_stride, page_size;
  /* The descale factors (fat_abi_fp8.h) of an e4m3 variant, its last
   * argument, and of an fp8 K/V cache's (dtype fp16-e4m3kv or bf16-e4m3kv:
   * K's and V's, Q's NULL), its third; unread by the others. */
  fat_fwd_fp8_params fp8;
} fat_fwd_call;

/* Whether a variant of geometry G takes fat_fwd_kv_params as its second
 * argument: it reads pages, its launch chooses its split count, or it
 * reads an fp8 K/V cache (whose descale factors follow as the third). */
static inline int fat_fwd_takes_kv(const fat_fwd_geometry *g) {
  return g->paged || g->launch_splits || fat_dtype_is_kv8(g->dtype);
}

/* The key splits of a launch whose variant lets the launch choose them
 * (SPLITS 0): BLOCKS, the blocks of one split (query blocks x heads or
 * K/V heads x batch), each reading at most KEYS keys, on a GPU of SM_COUNT
 * SMs; 1 .. FAT_FWD_MAX_LAUNCH_SPLITS. The rule and its reasons are beside
 * its code (fwd_launch.c). */
int fat_fwd_launch_splits(long long blocks, long long keys, int sm_count);

/* The split count a launch of G runs P's call with: G's own, or, for a
 * variant whose launch chooses it, fat_fwd_launch_splits for P's grid, the
 * keys one query block sees (its window's, for a local variant: P's
 * window is read only then) and CALL's SMs. */
int fat_fwd_call_splits(const fat_fwd_geometry *g, const fat_fwd_params *p, const fat_fwd_call *call);

/* 0 when the tensor maps of P's q, k and v, of elements of fat_dtype
 * DTYPE, can describe them (bases 16-byte aligned, strides multiples of 16
 * bytes below 2^40, extents below 2^32), else -1 with err naming the first
 * that cannot: the runtime then serves the call with a family that loads
 * without them. */
int fat_fwd_tma_describable(const fat_fwd_params *p, const fat_fwd_call *call, int dtype, char *err,
                            size_t errlen);

/* The part of D its name and resources do not say, from the variant's
 * DIRECTION, FAMILY and canonical PARAMS: the launch kind (the family's
 * row, family.h), the backward's query tile and dQ mode, the forward's
 * decoding schedule and a tensor-map variant's key tile. 0, or -1 with err
 * naming the unknown family ("unknown fwd family 'x'") or the bad
 * parameter. Every caller that turns a stored variant into a launch asks
 * this one function. */
int fat_kernel_schedule(fat_kernel_desc *d, fat_direction direction, const char *family,
                        const char *params, char *err, size_t errlen);

/* D, the launch description of variant V built into B: its name, entry,
 * resources and cubin (not copied: B must outlive D), and what
 * fat_kernel_schedule reads from its family and parameters; a family the
 * table does not name is one a template folder added, described by
 * fat_family_of_template's row. 0, or -1 with err naming the variant and
 * what is wrong (no cubin, a name too long, a bad parameter). The worker
 * and the GPU tests describe variants with it (libfatune never does). */
int fat_kernel_describe(const fat_variant *v, const fat_build *b, fat_kernel_desc *d, char *err,
                        size_t errlen);

/* Sets P's softmax_scale to SCALE and what the kernels derive from it:
 * scale_log2, and the soft-cap's softcap_in / softcap_out for a cap of
 * SOFTCAP (> 0; 0: none), the one place that conversion is written. */
void fat_fwd_set_scale(fat_fwd_params *p, double scale, double softcap);

/* Whether a forward variant of this schedule (fat_kernel_desc's or
 * fat_fwd_geometry's splits and persistent) needs a workspace at all: the
 * rule fat_fwd_workspace_bytes sizes and the runtime's no-workspace lookup
 * skips by. A variant whose launch chooses its splits (0) needs none: with
 * too little workspace its launch runs one split. */
int fat_fwd_needs_workspace(int splits, int persistent);

/* The grid.x of a persistent kernel over BLOCKS blocks (the forward's query
 * blocks, the backward's key blocks), which it walks itself: at most one
 * block an SM of SM_COUNT; 0 when SM_COUNT is none (the launch is refused). */
static inline unsigned fat_resident_grid(unsigned long long blocks, int sm_count) {
  if (sm_count < 1) return 0;
  return blocks < (unsigned long long)sm_count ? (unsigned)blocks : (unsigned)sm_count;
}

/* Bytes of device workspace the variant needs for a problem of this
 * batch, heads and (longest) seqlen_q: for a split variant the fp32
 * partial outputs and log-sum-exps, splits x batch x heads x seqlen_q rows,
 * each part rounded up to 256 bytes; for a FAT_FWD_DRAWN one the counter
 * its blocks draw query blocks from (256 bytes); else 0. */
size_t fat_fwd_workspace_bytes(const fat_fwd_geometry *g, int batch, int heads, int seqlen_q);
/* (SIZE_MAX when the size does not fit in a size_t: no workspace can be given.) */

/* Points P's o_accum and lse_accum into WORKSPACE (a device address of at
 * least fat_fwd_workspace_bytes), or at 0 for a variant that needs none.
 * A FAT_FWD_DRAWN variant has no partials: its o_accum is the counter,
 * which fat_fwd_launch zeroes on the stream before each launch. */
void fat_fwd_set_workspace(const fat_fwd_geometry *g, fat_fwd_params *p, CUdeviceptr workspace);

/* Launches the variant (and its combine kernel) for P on STREAM; the first
 * failure's result. CUDA_ERROR_INVALID_VALUE when a split variant has no
 * workspace or no combine kernel, or when a tensor-map variant's tensors
 * are none the maps can describe (fat_fwd_tma_describable), or when a
 * persistent variant is given no SM count, or a paged one no block table,
 * or when G's splits are not set (0: fat_fwd_call_splits first). CALL: the
 * call's packed rows, its GPU's SMs and its pages (read by tensor-map,
 * persistent and paged variants; NULL for none of them). */
CUresult fat_fwd_launch(const fat_cuda *cu, const fat_fwd_kernels *k, const fat_fwd_geometry *g,
                        fat_fwd_params *p, const fat_fwd_call *call, CUstream stream);
#endif
