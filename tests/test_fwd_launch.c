/* SPDX-License-Identifier: MIT */
/* The forward launch's CPU side (core/fwd_launch.h): which tensors the
 * tensor-map families can take (fat_fwd_tma_describable, with its exact
 * refusals, and the backward's fat_bwd_tma_describable, which adds dout),
 * the launch description a stored variant's family and parameters give
 * (fat_kernel_schedule), and a tensor-map variant's description across the
 * worker's wire. No GPU needed. */
#include <stdint.h>
#include <string.h>
#include "bwd_launch.h"
#include "check.h"
#include "fwd_launch.h"
#include "worker_wire.h"

#define ERRLEN 256

/* Contiguous (batch, seqlen, heads, head_dim) tensors at 16-byte aligned
 * (never dereferenced) addresses. */
static fat_fwd_params dense(int batch, int heads, int heads_k, int sq, int sk, int d) {
  fat_fwd_params p;
  memset(&p, 0, sizeof p);
  p.q = (const void *)(uintptr_t)0x10000000;
  p.k = (const void *)(uintptr_t)0x20000000;
  p.v = (const void *)(uintptr_t)0x30000000;
  p.batch = batch, p.heads = heads, p.heads_k = heads_k, p.seqlen_q = sq, p.seqlen_k = sk, p.head_dim = d;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = d;
  p.q_row_stride = (long long)heads * d;
  p.k_row_stride = p.v_row_stride = (long long)heads_k * d;
  p.q_batch_stride = p.q_row_stride * sq;
  p.k_batch_stride = p.v_batch_stride = p.k_row_stride * sk;
  return p;
}

static void test_describable(void) {
  char err[ERRLEN];
  const fat_fwd_call dense_call = {.total_q = 0, .total_k = 0, .sm_count = 132};
  fat_fwd_params p = dense(2, 16, 4, 1000, 777, 96);
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_BF16, err, sizeof err) == 0);
  /* A batch of one: its batch stride is never stepped, any value serves. */
  p = dense(1, 8, 8, 17, 17, 64);
  p.q_batch_stride = 3;
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_BF16, err, sizeof err) == 0);
  /* What the maps refuse, each by name. */
  p = dense(2, 8, 8, 64, 64, 64);
  p.k = (const void *)(uintptr_t)0x20000008;
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_BF16, err, sizeof err) == -1);
  CHECK_STR(err, "k at 0x20000008 is not 16-byte aligned (tensor maps need it)");
  p = dense(2, 8, 8, 64, 64, 64);
  p.v_row_stride = 516;
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_BF16, err, sizeof err) == -1);
  CHECK_STR(err, "v's row_stride 516: a tensor map's strides are multiples of 16 bytes below 2^40");
  /* Strides are bytes to the maps: 520 elements are 1040 bytes of bf16,
   * 520 of e4m3. */
  p.v_row_stride = 520;
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_BF16, err, sizeof err) == 0);
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_E4M3, err, sizeof err) == -1);
  CHECK_STR(err, "v's row_stride 520: a tensor map's strides are multiples of 16 bytes below 2^40");
  p = dense(2, 8, 8, 64, 64, 64);
  p.q_batch_stride = 1ll << 39;
  CHECK(fat_fwd_tma_describable(&p, &dense_call, FAT_BF16, err, sizeof err) == -1);
  CHECK_STR(err, "q's batch_stride 549755813888: a tensor map's strides are multiples of 16 bytes below 2^40");
  /* A packed batch spans its total rows and has no batch dimension. */
  p = dense(3, 4, 2, 300, 500, 128);
  p.cu_seqlens_q = p.cu_seqlens_k = (const int *)(uintptr_t)0x40000000;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = 0;
  const fat_fwd_call packed = {.total_q = 650, .total_k = 0, .sm_count = 132};
  CHECK(fat_fwd_tma_describable(&p, &packed, FAT_BF16, err, sizeof err) == -1);
  CHECK_STR(err, "k has 0 rows: a tensor map's extent is 1 .. 2^32 - 1");
  const fat_fwd_call packed_ok = {.total_q = 650, .total_k = 1200, .sm_count = 132};
  CHECK(fat_fwd_tma_describable(&p, &packed_ok, FAT_BF16, err, sizeof err) == 0);
}

/* The backward's maps: q, k, v as the forward's, and dout with its own
 * strides; a refusal names the tensor. */
static void test_bwd_describable(void) {
  char err[ERRLEN];
  fat_bwd_params b;
  memset(&b, 0, sizeof b);
  b.fwd = dense(2, 16, 4, 1000, 777, 128);
  b.dout = (const void *)(uintptr_t)0x50000000;
  b.do_head_stride = 128, b.do_row_stride = 16 * 128, b.do_batch_stride = 16 * 128 * 1000;
  CHECK(fat_bwd_tma_describable(&b, err, sizeof err) == 0);
  b.dout = (const void *)(uintptr_t)0x50000004;
  CHECK(fat_bwd_tma_describable(&b, err, sizeof err) == -1);
  CHECK_STR(err, "dout at 0x50000004 is not 16-byte aligned (tensor maps need it)");
  b.dout = (const void *)(uintptr_t)0x50000000;
  b.do_row_stride = 16 * 128 + 4;
  CHECK(fat_bwd_tma_describable(&b, err, sizeof err) == -1);
  CHECK_STR(err, "dout's row_stride 2052: a tensor map's strides are multiples of 16 bytes below 2^40");
  b.do_row_stride = 16 * 128;
  b.fwd.v = (const void *)(uintptr_t)0x30000002;
  CHECK(fat_bwd_tma_describable(&b, err, sizeof err) == -1);
  CHECK_STR(err, "v at 0x30000002 is not 16-byte aligned (tensor maps need it)");
}

static void test_schedule(void) {
  char err[ERRLEN];
  fat_kernel_desc d;
  memset(&d, 0, sizeof d);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "ws90",
                            "BLOCK_M=128 BLOCK_N=176 OVERLAP=1 PERSISTENT=1 PINGPONG=1 STAGES=2", err,
                            sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED_TMA && d.block_n == 176 && d.persistent == 1 && d.splits == 1 &&
        d.pack_gqa == 0 && d.direction == FAT_FWD);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "ws90", "BLOCK_M=128 BLOCK_N=112 OVERLAP=0 PINGPONG=0 STAGES=2",
                            err, sizeof err) == 0);
  CHECK(d.block_n == 112 && d.persistent == 0);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "ws90", "BLOCK_M=128 BLOCK_N=512 STAGES=2", err, sizeof err) == -1);
  CHECK_STR(err, "forward parameters 'BLOCK_M=128 BLOCK_N=512 STAGES=2': no BLOCK_N of 1 .. 256");
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "ws90", "BLOCK_N=64 PERSISTENT=2", err, sizeof err) == 0);
  CHECK(d.persistent == FAT_FWD_DRAWN);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "ws90", "BLOCK_N=64 PERSISTENT=3", err, sizeof err) == -1);
  CHECK_STR(err, "forward parameters 'BLOCK_N=64 PERSISTENT=3': PERSISTENT is not 0, 1 or 2");
  /* Families that take P alone keep no tensor-map fields. */
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "wgmma90", "BLOCK_M=64 BLOCK_N=128 OVERLAP=0 STAGES=2", err,
                            sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED && d.block_n == 0 && d.persistent == 0);
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "mma80", "BLOCK_M=64 BLOCK_N=128 DQ_MODE=separate WARPS=8", err,
                            sizeof err) == 0);
  CHECK(d.direction == FAT_BWD && d.block_q == 64 && d.dq_mode == FAT_DQ_SEPARATE && d.block_n == 0);
  /* The warp-specialised backward takes maps: K and V in boxes of its key
   * block, Q and dout of its query tile. */
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "ws90", "BLOCK_M=64 BLOCK_N=128 DQ_KEYS=1 DQ_MODE=atomic STAGES=2", err,
                            sizeof err) == 0);
  CHECK(d.direction == FAT_BWD && d.kind == FAT_KERNEL_FUSED_TMA && d.block_q == 64 && d.block_n == 128 &&
        d.dq_mode == FAT_DQ_ATOMIC && d.persistent == 0);
  /* Its ordered dQ: the accumulator's adds in a fixed order, deterministic. */
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "ws90", "BLOCK_M=64 BLOCK_N=128 DQ_MODE=ordered STAGES=2", err,
                            sizeof err) == 0);
  CHECK(d.direction == FAT_BWD && d.kind == FAT_KERNEL_FUSED_TMA && d.block_q == 64 && d.block_n == 128 &&
        d.dq_mode == FAT_DQ_ORDERED && d.persistent == 0);
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "ws90", "BLOCK_M=64 BLOCK_N=128 DQ_MODE=sorted STAGES=2", err,
                            sizeof err) == -1);
  CHECK_STR(err, "backward parameters 'BLOCK_M=64 BLOCK_N=128 DQ_MODE=sorted STAGES=2': DQ_MODE is not "
                 "atomic, separate or ordered");
  /* Its resident blocks, and no drawn ones. */
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "ws90", "BLOCK_M=64 BLOCK_N=128 DQ_KEYS=0 DQ_MODE=atomic PERSISTENT=1 STAGES=2",
                            err, sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED_TMA && d.block_n == 128 && d.persistent == FAT_FWD_RESIDENT);
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "ws90", "BLOCK_M=64 BLOCK_N=128 DQ_MODE=atomic PERSISTENT=2", err,
                            sizeof err) == -1);
  CHECK_STR(err, "backward parameters 'BLOCK_M=64 BLOCK_N=128 DQ_MODE=atomic PERSISTENT=2': PERSISTENT is not 0 or 1");
  /* mma80's backward takes no maps: whatever its string says, it has no persistent schedule. */
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "mma80", "BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic WARPS=4", err,
                            sizeof err) == 0);
  CHECK(d.persistent == 0 && d.block_n == 0);
}

/* A persistent backward runs at most one block an SM: without an SM count,
 * or with more key blocks than the kernel's int counts, the launch is
 * refused before anything is queued. */
static void test_bwd_persistent_launch(void) {
  fat_bwd_params p;
  memset(&p, 0, sizeof p);
  p.fwd = dense(1, 16, 16, 4096, 4096, 128);
  const fat_bwd_kernels k = {.preprocess = NULL, .main = NULL, .dq = NULL, .convert = NULL};
  fat_bwd_geometry g = {.block_n = 128, .block_q = 64, .threads = 384, .smem_bytes = 200000, .tma = 1,
                        .bf16 = 1, .persistent = FAT_FWD_RESIDENT, .sm_count = 0};
  fat_cuda cu;
  memset(&cu, 0, sizeof cu); /* no driver: the refusals come before any call into it */
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
  g.sm_count = 132;
  p.fwd.seqlen_k = 1 << 30, p.fwd.heads_k = 1 << 12, p.fwd.batch = 1;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
}

/* What the backward's launch queued, in order: a kernel (its function) or
 * a 32-bit memset (fn NULL, its address and count). */
enum { QUEUED_MAX = 8 };
typedef struct queued {
  CUfunction fn;
  unsigned grid[3];
  CUdeviceptr at;
  size_t n;
  unsigned value;
} queued;
static queued queue[QUEUED_MAX];
static int n_queued;

static CUresult record_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned smem, CUstream stream, void **params, void **extra) {
  (void)bx, (void)by, (void)bz, (void)smem, (void)stream, (void)params, (void)extra;
  if (n_queued < QUEUED_MAX) queue[n_queued] = (queued){.fn = f, .grid = {gx, gy, gz}};
  n_queued++;
  return CUDA_SUCCESS;
}

static CUresult record_memset(CUdeviceptr at, unsigned value, size_t n, CUstream stream) {
  (void)stream;
  if (n_queued < QUEUED_MAX) queue[n_queued] = (queued){.fn = NULL, .at = at, .n = n, .value = value};
  n_queued++;
  return CUDA_SUCCESS;
}

/* A driver table whose launches and 32-bit memsets are recorded (queue). */
static fat_cuda recording_cuda(void) {
  fat_cuda cu;
  memset(&cu, 0, sizeof cu);
  cu.cuLaunchKernel = record_launch;
  cu.cuMemsetD32Async = record_memset;
  n_queued = 0;
  return cu;
}

/* The semaphores of an ordered variant (bwd_launch.h): one a (batch, head,
 * query tile), and the bound a workspace holds whatever the tile. */
static void test_bwd_semaphores(void) {
  size_t n = 0;
  CHECK(fat_bwd_semaphores(2, 16, 1000, 64, &n) == 0 && n == 2 * 16 * 16);  /* ceil(1000 / 64) = 16 */
  CHECK(fat_bwd_semaphores(2, 16, 1000, 128, &n) == 0 && n == 2 * 16 * 8);
  CHECK(fat_bwd_semaphores(1, 1, 1, 128, &n) == 0 && n == 1);
  CHECK(fat_bwd_semaphores(2, 16, 1000, 0, &n) == -1);
  CHECK(fat_bwd_semaphores(0, 16, 1000, 64, &n) == -1);
  CHECK(fat_bwd_semaphores_bound(2, 16, 1000, 0, &n) == 0 && n == 2 * 16 * 16);
  CHECK(fat_bwd_semaphores_bound(2147483647, 2147483647, 2147483647, 0, &n) == -1);
  /* A packed batch of 3 sequences, 650 rows: heads x (650 / 64 + 3) =
   * 4 x 13, which the tiles of lengths 64, 65 and 521 (1 + 2 + 9 = 12) fit. */
  CHECK(fat_bwd_semaphores_bound(3, 4, 521, 650, &n) == 0 && n == 4 * 13);
  CHECK(fat_bwd_semaphores_bound(3, 4, 521, -1, &n) == -1);
}

/* The backward's launch by mode: atomic converts the accumulator; separate
 * runs its dQ pass instead; ordered zeroes its semaphores (after the
 * accumulator's batch x heads x seqlen_q rows) before the main kernel,
 * then converts as atomic does. What it cannot place it refuses before
 * queueing anything. */
static void test_bwd_launch_modes(void) {
  fat_bwd_params p;
  memset(&p, 0, sizeof p);
  p.fwd = dense(2, 16, 4, 1000, 777, 96);
  p.dq_accum = (float *)(uintptr_t)0x40000000;
  const CUfunction pre = (CUfunction)(uintptr_t)0x11, main_fn = (CUfunction)(uintptr_t)0x12,
                   dq = (CUfunction)(uintptr_t)0x13, convert = (CUfunction)(uintptr_t)0x14;
  const fat_bwd_kernels k = {.preprocess = pre, .main = main_fn, .dq = dq, .convert = convert};
  fat_bwd_geometry g = {.block_n = 128, .block_q = 64, .dq_mode = FAT_DQ_ORDERED, .threads = 384,
                        .smem_bytes = 200000};
  fat_cuda cu = recording_cuda();
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_SUCCESS);
  /* d96's accumulator rows are 128 floats: the semaphores start 2 x 16 x
   * 1000 x 128 floats in, 2 x 16 x ceil(1000 / 64) of them. */
  CHECK_INT(n_queued, 4);
  CHECK(queue[0].fn == pre);
  CHECK(queue[1].fn == NULL && queue[1].at == 0x40000000 + (CUdeviceptr)2 * 16 * 1000 * 128 * 4 &&
        queue[1].n == 2 * 16 * 16 && queue[1].value == 0);
  CHECK(queue[2].fn == main_fn && queue[2].grid[0] == 7 && queue[2].grid[1] == 4 && queue[2].grid[2] == 2);
  CHECK(queue[3].fn == convert);
  /* A tile of 128 rows: half the semaphores. */
  g.block_q = 128;
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_SUCCESS);
  CHECK(n_queued == 4 && queue[1].fn == NULL && queue[1].n == 2 * 16 * 8);
  /* Atomic: no semaphores; separate: its dQ pass, no conversion. */
  g.dq_mode = FAT_DQ_ATOMIC;
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_SUCCESS);
  CHECK(n_queued == 3 && queue[0].fn == pre && queue[1].fn == main_fn && queue[2].fn == convert);
  g.dq_mode = FAT_DQ_SEPARATE;
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_SUCCESS);
  CHECK(n_queued == 3 && queue[0].fn == pre && queue[1].fn == main_fn && queue[2].fn == dq &&
        queue[2].grid[0] == 8);
  /* Ordered without an accumulator, on a packed batch (its semaphores'
   * place is not defined), or with a tile below the workspace bound's:
   * refused, nothing queued. */
  g.dq_mode = FAT_DQ_ORDERED, g.block_q = 64;
  p.dq_accum = NULL;
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
  p.dq_accum = (float *)(uintptr_t)0x40000000;
  p.fwd.cu_seqlens_q = p.fwd.cu_seqlens_k = (const int *)(uintptr_t)0x50000000;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
  p.fwd.cu_seqlens_q = p.fwd.cu_seqlens_k = NULL;
  g.block_q = 32;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_ERROR_INVALID_VALUE);
  CHECK_INT(n_queued, 0);
}

/* lse's gradient (bwd_launch.h's fat_bwd_dlse): the runtime's kernel runs
 * between the preprocess (D) and the main kernel, on D's place, over the
 * count given, in at most 4096 blocks of 256 threads (it loops over the
 * rest); none without one, and none for a count of 0. */
static void test_bwd_launch_dlse(void) {
  fat_bwd_params p;
  memset(&p, 0, sizeof p);
  p.fwd = dense(2, 16, 4, 1000, 777, 128);
  p.delta = (float *)(uintptr_t)0x30000000;
  p.dq_accum = (float *)(uintptr_t)0x40000000;
  const CUfunction pre = (CUfunction)(uintptr_t)0x11, main_fn = (CUfunction)(uintptr_t)0x12,
                   convert = (CUfunction)(uintptr_t)0x14, sub = (CUfunction)(uintptr_t)0x15;
  const fat_bwd_kernels k = {.preprocess = pre, .main = main_fn, .dq = NULL, .convert = convert};
  fat_bwd_geometry g = {.block_n = 128, .block_q = 64, .dq_mode = FAT_DQ_ORDERED, .threads = 384,
                        .smem_bytes = 200000};
  fat_cuda cu = recording_cuda();
  fat_bwd_dlse x = {.sub = sub, .dlse = (const float *)(uintptr_t)0x50000000, .count = 2 * 16 * 1000};
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, &x, NULL) == CUDA_SUCCESS);
  CHECK_INT(n_queued, 5);
  CHECK(queue[0].fn == pre);
  CHECK(queue[1].fn == sub && queue[1].grid[0] == 125 && queue[1].grid[1] == 1);  /* 32000 / 256 */
  CHECK(queue[2].fn == NULL && queue[3].fn == main_fn && queue[4].fn == convert);
  x.count = 16ull * 131072 * 64;  /* past 4096 blocks: the kernel loops */
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, &x, NULL) == CUDA_SUCCESS);
  CHECK(n_queued == 5 && queue[1].fn == sub && queue[1].grid[0] == 4096);
  x.count = 0;
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, &x, NULL) == CUDA_SUCCESS);
  CHECK(n_queued == 4 && queue[1].fn == NULL);
  g.dq_mode = FAT_DQ_ATOMIC;
  n_queued = 0;
  CHECK(fat_bwd_launch(&cu, &k, &g, &p, NULL, NULL) == CUDA_SUCCESS);
  CHECK(n_queued == 3 && queue[0].fn == pre && queue[1].fn == main_fn);
}

/* A variant that draws its query blocks needs a counter's workspace, which
 * becomes P's o_accum; without one the launch is refused before anything
 * is queued. Others keep their sizes. */
static void test_drawn_workspace(void) {
  fat_fwd_geometry g = {.block_m = 128, .threads = 384, .smem_bytes = 164944, .splits = 1, .head_dim = 128,
                        .block_n = 128, .dtype = FAT_BF16, .persistent = FAT_FWD_DRAWN};
  CHECK(fat_fwd_workspace_bytes(&g, 16, 16, 1024) == 256);
  fat_fwd_params p = dense(16, 16, 16, 1024, 1024, 128);
  fat_fwd_set_workspace(&g, &p, (CUdeviceptr)0x7000);
  CHECK(p.o_accum == (float *)(uintptr_t)0x7000 && p.lse_accum == NULL);
  fat_fwd_set_workspace(&g, &p, 0);
  CHECK(p.o_accum == NULL);
  const fat_fwd_kernels k = {.main = NULL, .combine = NULL};
  const fat_fwd_call call = {.total_q = 0, .total_k = 0, .sm_count = 132};
  fat_cuda cu;
  memset(&cu, 0, sizeof cu); /* no driver: the refusal comes before any call into it */
  CHECK(fat_fwd_launch(&cu, &k, &g, &p, &call, NULL) == CUDA_ERROR_INVALID_VALUE);
  g.persistent = FAT_FWD_RESIDENT;
  CHECK(fat_fwd_workspace_bytes(&g, 16, 16, 1024) == 0);
  fat_fwd_set_workspace(&g, &p, (CUdeviceptr)0x7000);
  CHECK(p.o_accum == NULL);
}

/* Whether D, made DIRECTION and PERSISTENT, survives the worker's wire. */
static int wire_passes(fat_kernel_desc *d, fat_direction direction, int persistent) {
  fat_kernel_desc back;
  d->direction = direction;
  d->persistent = persistent;
  fat_wbuf b = {0};
  fat_put_kernel(&b, d);
  fat_rbuf r = {.data = b.data, .len = b.len};
  fat_get_kernel(&r, &back);
  fat_wbuf_free(&b);
  return fat_rbuf_done(&r) == 0;
}

static void test_wire(void) {
  static const unsigned char cubin[] = {1, 2, 3};
  fat_kernel_desc d, back;
  memset(&d, 0, sizeof d);
  snprintf(d.name, sizeof d.name, "fwd.ws90.bf16.d128.none.m128n176s2opr");
  snprintf(d.entry, sizeof d.entry, "fat_fwd_ws90");
  d.block_m = 128, d.threads = 384, d.smem_bytes = 214096, d.head_dim = 128, d.dtype = FAT_BF16;
  d.cubin = cubin, d.cubin_size = sizeof cubin, d.kind = FAT_KERNEL_FUSED_TMA, d.splits = 1;
  d.block_n = 176, d.persistent = 1, d.tma_slab = FAT_TMA_BOX_COLUMNS;
  fat_wbuf b = {0};
  fat_put_kernel(&b, &d);
  fat_rbuf r = {.data = b.data, .len = b.len};
  fat_get_kernel(&r, &back);
  CHECK(fat_rbuf_done(&r) == 0);
  CHECK(back.kind == FAT_KERNEL_FUSED_TMA && back.block_n == 176 && back.persistent == 1 &&
        back.tma_slab == FAT_TMA_BOX_COLUMNS);
  /* The maps' box is a slab of 64 columns or a half slab of 32 (SLAB 32);
   * any other width, or none on a tensor-map kind, is a garbled frame. */
  d.tma_slab = FAT_TMA_HALF_SLAB;
  CHECK(wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = 48;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = 0;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  /* A slab is 128 or 64 bytes: e4m3's 128 or 64 columns, never 32 or 256;
   * 128 is no 16-bit width. The dtype is one of FAT_N_DTYPES. */
  d.tma_slab = 128;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.dtype = FAT_E4M3;
  CHECK(wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = 64;
  CHECK(wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = 32;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = 256;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = FAT_TMA_BOX_COLUMNS;
  d.dtype = (fat_dtype)FAT_N_DTYPES;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.dtype = (fat_dtype)-1;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  /* An fp8 K/V cache's Q is 16-bit: its slab is Q's 64 or 32 columns. */
  d.dtype = FAT_FP16_E4M3KV;
  CHECK(wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = 128;
  CHECK(!wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN));
  d.tma_slab = FAT_TMA_BOX_COLUMNS;
  d.dtype = FAT_BF16;
  /* Drawn blocks pass; a schedule past them does not. A backward's
   * resident blocks pass; drawn ones do not. */
  CHECK(wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN) && !wire_passes(&d, FAT_FWD, FAT_FWD_DRAWN + 1));
  CHECK(wire_passes(&d, FAT_BWD, FAT_FWD_RESIDENT) && !wire_passes(&d, FAT_BWD, FAT_FWD_DRAWN));
  d.direction = FAT_FWD;
  d.persistent = 1;
  /* A persistent flag on a kind that takes P alone is a garbled frame. */
  d.kind = FAT_KERNEL_FUSED, d.block_n = 0;
  fat_wbuf b2 = {0};
  fat_put_kernel(&b2, &d);
  fat_rbuf r2 = {.data = b2.data, .len = b2.len};
  fat_get_kernel(&r2, &back);
  CHECK(fat_rbuf_done(&r2) != 0);
  fat_wbuf_free(&b);
  fat_wbuf_free(&b2);
  /* The fp8 K/V caches' kernels (the splitkv and paged families: the fused
   * launch, a paged one or not) cross the wire with their dtype, and no
   * backward of theirs is asked of it (the tuner refuses one first). */
  static const fat_dtype kv8[] = {FAT_FP16_E4M3KV, FAT_BF16_E4M3KV};
  for (int i = 0; i < 2; i++)
    for (int paged = 0; paged <= 1; paged++) {
      fat_kernel_desc k = {.block_m = 64, .threads = 128, .smem_bytes = 24576, .head_dim = 128,
                           .dtype = kv8[i], .cubin = cubin, .cubin_size = sizeof cubin,
                           .kind = FAT_KERNEL_FUSED, .pack_gqa = 1, .paged = paged};
      fat_wbuf kb = {0};
      fat_put_kernel(&kb, &k);
      fat_rbuf kr = {.data = kb.data, .len = kb.len};
      fat_get_kernel(&kr, &back);
      CHECK(fat_rbuf_done(&kr) == 0 && back.dtype == kv8[i] && back.paged == paged);
      fat_wbuf_free(&kb);
    }
}

/* The split count a launch chooses (fwd_launch.c says why): none where the
 * unsplit grid fills most of the GPU's block slots (two an SM) or its keys
 * are one split's 256; else the fewest whose last wave is within 85 % of the
 * fullest, among counts up to 32 that change the keys a split reads. */
static void test_launch_splits(void) {
  CHECK_INT(fat_fwd_launch_splits(8, 4096, 132), 16);      /* 8 K/V heads, batch 1 */
  CHECK_INT(fat_fwd_launch_splits(8, 131072, 132), 29);
  CHECK_INT(fat_fwd_launch_splits(1, 65536, 132), 29);     /* one K/V head */
  CHECK_INT(fat_fwd_launch_splits(64, 4096, 132), 4);      /* batch 8 */
  CHECK_INT(fat_fwd_launch_splits(256, 4096, 132), 1);     /* fills the GPU */
  CHECK_INT(fat_fwd_launch_splits(8, 256, 132), 1);        /* one split's keys */
  CHECK_INT(fat_fwd_launch_splits(8, 4096, 0), 1);         /* no SM count */
  /* From a geometry: packed rows, the window's keys for a local variant
   * (its window read only then). */
  fat_fwd_geometry g = {.block_m = 64, .threads = 128, .smem_bytes = 81920, .pack_gqa = 1, .splits = 0,
                        .launch_splits = 1, .head_dim = 128};
  fat_fwd_params p = dense(1, 32, 8, 1, 131072, 128);
  p.window_left = 1024, p.window_right = 0;
  const fat_fwd_call call = {.sm_count = 132};
  CHECK_INT(fat_fwd_call_splits(&g, &p, &call), 29);      /* causal: every key */
  g.local = 1;
  CHECK_INT(fat_fwd_call_splits(&g, &p, &call), fat_fwd_launch_splits(8, 1024 + 0 + 16, 132));
  g.launch_splits = 0, g.splits = 8;
  CHECK_INT(fat_fwd_call_splits(&g, &p, &call), 8);        /* a fixed count is kept */
}

int main(void) {
  test_launch_splits();
  test_describable();
  test_bwd_describable();
  test_schedule();
  test_drawn_workspace();
  test_bwd_persistent_launch();
  test_bwd_semaphores();
  test_bwd_launch_modes();
  test_bwd_launch_dlse();
  test_wire();
  return check_summary("test_fwd_launch");
}
