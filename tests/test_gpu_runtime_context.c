/* SPDX-License-Identifier: MIT */
/* libfatune leaves the calling thread's current CUDA context as it found
 * it. Two contexts on device 0: the primary one (where libfatune's modules
 * and the tensors live, as with PyTorch) and one the program creates and
 * keeps current. After every call that loads, launches or unloads --
 * fat_attention_fwd_workspace, fat_attention_fwd (first and hot calls),
 * fat_attention_bwd, each also failing (a bad argument, a stream of the
 * other context), and fat_context_close -- the program's context must be
 * current again; so must "no context" be, and the primary context stay
 * current when it was. The outputs, poisoned first, must have been written.
 * Exits 77 (skipped) when no CUDA driver or device is present. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "cuda_api.h"
#include "fatune.h"
#include "gpu_test.h"

#define BATCH 1
#define HEADS 2
#define SEQLEN 256
#define HEAD_DIM 128
#define POISON_BF16 0x7fc0u /* a NaN in bf16 */
#define ONE_BF16 0x3f80u    /* 1.0 in bf16: every input */

static fat_cuda cu;
/* Not in fat_cuda's table (libfatune creates no context): resolved here by
 * their real names, with the signatures of those names. */
static CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice);
static CUresult (*ctx_destroy)(CUcontext);

static CUcontext current(void) {
  CUcontext now = (CUcontext)(uintptr_t)0x1; /* not a context: a failure shows */
  REQUIRE_EXIT(cu.cuCtxGetCurrent(&now) == CUDA_SUCCESS);
  return now;
}

/* Whether the current context is WANT, named for the failure's message. */
#define CHECK_CURRENT(want, after)                                                       \
  CHECK_WHY(current() == (want), "after %s the current context is %p, want %p (%s)", after, \
            (void *)current(), (void *)(want), #want)

/* Device memory of N bytes in the primary context P, each 16-bit element BITS. */
static CUdeviceptr alloc_filled(CUcontext p, size_t n, unsigned short bits) {
  CUdeviceptr d = 0;
  CUcontext was = current();
  REQUIRE_EXIT(cu.cuCtxSetCurrent(p) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemAlloc(&d, n) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemsetD32(d, (unsigned)bits << 16 | bits, n / 4) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuCtxSetCurrent(was) == CUDA_SUCCESS);
  return d;
}

/* The number of NaN (poison) bf16 elements among the N bytes at D. */
static size_t count_poisoned(CUcontext p, CUdeviceptr d, size_t n) {
  unsigned short *h = malloc(n);
  size_t bad = 0;
  CUcontext was = current();
  REQUIRE_EXIT(h && cu.cuCtxSetCurrent(p) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemcpyDtoH(h, d, n) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuCtxSetCurrent(was) == CUDA_SUCCESS);
  for (size_t i = 0; i < n / 2; i++) bad += (h[i] & 0x7f80u) == 0x7f80u && (h[i] & 0x7fu);
  free(h);
  return bad;
}

static double bf16_value(unsigned short bits) {
  const unsigned u = (unsigned)bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* How many of dq, dk, dv's elements (bf16, read back in the primary
 * context P) are off the values a dlse of ones gives (main's comment)
 * by more than bf16's rounding allows; the first few are printed. */
static long long check_dlse_grads(CUcontext p, CUdeviceptr dq, CUdeviceptr dk, CUdeviceptr dv) {
  const size_t n = (size_t)BATCH * SEQLEN * HEADS * HEAD_DIM;
  unsigned short *h = malloc(3 * n * sizeof *h);
  REQUIRE_EXIT(h);
  CUcontext was = current();
  REQUIRE_EXIT(cu.cuCtxSetCurrent(p) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemcpyDtoH(h, dq, n * 2) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemcpyDtoH(h + n, dk, n * 2) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemcpyDtoH(h + 2 * n, dv, n * 2) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuCtxSetCurrent(was) == CUDA_SUCCESS);
  const double scale = 1.0 / sqrt((double)HEAD_DIM);
  double harmonic[SEQLEN + 1];
  harmonic[SEQLEN] = 0;
  for (int j = SEQLEN - 1; j >= 0; j--) harmonic[j] = harmonic[j + 1] + 1.0 / (j + 1);
  long long off = 0;
  for (size_t e = 0; e < 3 * n; e++) {
    const int which = (int)(e / n), row = (int)(e % n / ((size_t)HEADS * HEAD_DIM));
    const double want = which == 0 ? scale : which == 1 ? scale * harmonic[row] : harmonic[row];
    const double got = bf16_value(h[e]);
    if (fabs(got - want) > 1e-2 * fabs(want) + 1e-6) {
      if (off++ < 5)
        fprintf(stderr, "dlse: %s[row %d] %.6g, want %.6g\n", which == 0 ? "dq" : which == 1 ? "dk" : "dv",
                row, got, want);
    }
  }
  free(h);
  return off;
}

int main(void) {
  char err[1024];
  if (fat_cuda_load(&cu, err, sizeof err)) return gpu_open_failed(FAT_GPU_NO_DRIVER, err);
  CUresult r = cu.cuInit(0);
  int count = 0;
  if (r != CUDA_SUCCESS || cu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1) {
    snprintf(err, sizeof err, "no CUDA device (cuInit: %d, %d devices)", (int)r, count);
    return gpu_open_failed(FAT_GPU_NO_DEVICE, err);
  }
  *(void **)&ctx_create = dlsym(cu.handle, "cuCtxCreate_v2");
  *(void **)&ctx_destroy = dlsym(cu.handle, "cuCtxDestroy_v2");
  REQUIRE_EXIT(ctx_create && ctx_destroy);
  CUdevice dev;
  CUcontext primary = NULL, mine = NULL;
  REQUIRE_EXIT(cu.cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuDevicePrimaryCtxRetain(&primary, dev) == CUDA_SUCCESS);

  /* The tensors live in the primary context, as PyTorch's do. */
  const size_t nq = (size_t)BATCH * SEQLEN * HEADS * HEAD_DIM * 2, nlse = (size_t)BATCH * HEADS * SEQLEN * 4;
  CUdeviceptr q = alloc_filled(primary, nq, ONE_BF16), k = alloc_filled(primary, nq, ONE_BF16);
  CUdeviceptr v = alloc_filled(primary, nq, ONE_BF16), o = alloc_filled(primary, nq, POISON_BF16);
  CUdeviceptr lse = alloc_filled(primary, nlse, POISON_BF16);
  CUdeviceptr dout = alloc_filled(primary, nq, ONE_BF16), dq = alloc_filled(primary, nq, POISON_BF16);
  CUdeviceptr dk = alloc_filled(primary, nq, POISON_BF16), dv = alloc_filled(primary, nq, POISON_BF16);

  /* The program's own context, current from here on. */
  REQUIRE_EXIT(ctx_create(&mine, 0, dev) == CUDA_SUCCESS);
  REQUIRE_EXIT(mine != primary);
  CHECK_CURRENT(mine, "cuCtxCreate");
  CUstream other_stream = NULL; /* a stream of the program's context */
  REQUIRE_EXIT(cu.cuStreamCreate(&other_stream, 0) == CUDA_SUCCESS);

  fat_context_options opts = FAT_CONTEXT_OPTIONS_INIT;
  opts.user_db = ""; /* nothing stored: the shipped tables or the built-in default */
  fat_context *c = NULL;
  fat_status st = fat_context_open(&c, &opts);
  if (st) fprintf(stderr, "fat_context_open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  CHECK_CURRENT(mine, "fat_context_open");

  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.q = (void *)(uintptr_t)q, a.k = (void *)(uintptr_t)k, a.v = (void *)(uintptr_t)v;
  a.o = (void *)(uintptr_t)o, a.lse = (float *)(uintptr_t)lse;
  a.batch = BATCH, a.heads = a.heads_k = HEADS, a.seqlen_q = a.seqlen_k = SEQLEN;
  a.head_dim = HEAD_DIM, a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  fat_attn_args_contiguous(&a);

  size_t ws = 0;
  CHECK_INT(fat_attention_fwd_workspace(c, &a, &ws), FAT_OK);
  CHECK_CURRENT(mine, "fat_attention_fwd_workspace (the first call: loads the module)");
  fat_choice ran = FAT_CHOICE_INIT;
  st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "fat_attention_fwd: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_CURRENT(mine, "fat_attention_fwd");
  printf("forward ran %s (%s)\n", ran.variant, fat_origin_name(ran.origin));
  CHECK_INT(fat_attention_fwd(c, &a, NULL, NULL), FAT_OK); /* the hot path */
  CHECK_CURRENT(mine, "a second fat_attention_fwd");

  /* Refusals restore it too: one before any driver call, one after. */
  fat_attn_args bad = a;
  bad.seqlen_q = 0;
  CHECK_INT(fat_attention_fwd(c, &bad, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK_CURRENT(mine, "a refused fat_attention_fwd (seqlen_q 0)");
  CHECK_INT(fat_attention_fwd(c, &a, other_stream, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(fat_context_error(c), "belongs to another CUDA context") != NULL);
  CHECK_CURRENT(mine, "fat_attention_fwd on a stream of the program's context");

  /* No context current: none after. The primary one current: it stays. */
  REQUIRE_EXIT(cu.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  CHECK_INT(fat_attention_fwd(c, &a, NULL, NULL), FAT_OK);
  CHECK_CURRENT((CUcontext)NULL, "fat_attention_fwd with no current context");
  REQUIRE_EXIT(cu.cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  CHECK_INT(fat_attention_fwd(c, &a, NULL, NULL), FAT_OK);
  CHECK_CURRENT(primary, "fat_attention_fwd with the primary context current");
  REQUIRE_EXIT(cu.cuCtxSetCurrent(mine) == CUDA_SUCCESS);

  /* The backward. */
  fat_attn_bwd_args b = FAT_ATTN_BWD_ARGS_INIT;
  b.fwd = a;
  b.dout = (void *)(uintptr_t)dout, b.dq = (void *)(uintptr_t)dq;
  b.dk = (void *)(uintptr_t)dk, b.dv = (void *)(uintptr_t)dv;
  fat_attn_bwd_args_contiguous(&b);
  CHECK_INT(fat_attention_bwd_workspace(c, &b, &b.workspace_bytes), FAT_OK);
  CUdeviceptr work = alloc_filled(primary, b.workspace_bytes, 0);
  b.workspace = (void *)(uintptr_t)work;
  st = fat_attention_bwd(c, &b, NULL, &ran);
  if (st) fprintf(stderr, "fat_attention_bwd: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_CURRENT(mine, "fat_attention_bwd");
  printf("backward ran %s (%s)\n", ran.variant, fat_origin_name(ran.origin));
  const size_t need = b.workspace_bytes;
  b.workspace_bytes = 16;
  CHECK_INT(fat_attention_bwd(c, &b, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK_CURRENT(mine, "a refused fat_attention_bwd (workspace too small)");
  b.workspace_bytes = need;

  /* Memory the driver does not know (a host allocation) is refused by name
   * at the launch, for every tensor the driver is asked about. */
  void *host = aligned_alloc(256, nq);
  REQUIRE_EXIT(host);
  bad = a;
  bad.q = host;
  CHECK_INT(fat_attention_fwd(c, &bad, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK_WHY(strstr(fat_context_error(c), "q ") == fat_context_error(c) &&
                strstr(fat_context_error(c), "is not memory CUDA knows") != NULL,
            "a host q: %s", fat_context_error(c));
  b.dlse = host;
  CHECK_INT(fat_attention_bwd(c, &b, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK_WHY(strstr(fat_context_error(c), "dlse ") == fat_context_error(c) &&
                strstr(fat_context_error(c), "is not memory CUDA knows") != NULL,
            "a host dlse: %s", fat_context_error(c));

  /* lse's gradient (dlse, the runtime's own kernel between D's and the
   * variant's): every input 1 and dO 1 make dP - D zero, so the gradients
   * through o alone have dq = dk = 0; with dlse = 1 everywhere dS = P,
   * whence dq = scale (every row's P sums to 1 against keys of 1), dk of
   * key j = scale * H_j and dv of key j = H_j, H_j = sum over the causal
   * rows i >= j of 1 / (i + 1) (P of row i is 1 / (i + 1) on its keys). */
  CUdeviceptr dl = alloc_filled(primary, nlse, 0);
  REQUIRE_EXIT(cu.cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuMemsetD32(dl, 0x3f800000u, nlse / 4) == CUDA_SUCCESS); /* fp32 1.0 */
  REQUIRE_EXIT(cu.cuCtxSetCurrent(mine) == CUDA_SUCCESS);
  b.dlse = (const float *)(uintptr_t)dl;
  b.deterministic = 1;
  st = fat_attention_bwd(c, &b, NULL, &ran);
  if (st) fprintf(stderr, "fat_attention_bwd with dlse: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_CURRENT(mine, "fat_attention_bwd with dlse");
  printf("backward with dlse ran %s\n", ran.variant);
  CHECK_INT(check_dlse_grads(primary, dq, dk, dv), 0);
  b.dlse = NULL;
  b.deterministic = 0;

  /* What ran wrote every element (read back in the primary context). */
  CHECK_INT((long long)count_poisoned(primary, o, nq), 0);
  CHECK_INT((long long)count_poisoned(primary, dq, nq), 0);
  CHECK_INT((long long)count_poisoned(primary, dk, nq), 0);
  CHECK_INT((long long)count_poisoned(primary, dv, nq), 0);
  CHECK_CURRENT(mine, "the read-back");

  fat_context_close(c);
  CHECK_CURRENT(mine, "fat_context_close");

  cu.cuStreamDestroy(other_stream);
  REQUIRE_EXIT(ctx_destroy(mine) == CUDA_SUCCESS);
  REQUIRE_EXIT(cu.cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  free(host);
  const CUdeviceptr bufs[] = {q, k, v, o, lse, dout, dq, dk, dv, work, dl};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cu.cuMemFree(bufs[i]);
  cu.cuDevicePrimaryCtxRelease(dev);
  return check_summary("test_gpu_runtime_context");
}
