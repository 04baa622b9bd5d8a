/* SPDX-License-Identifier: MIT */
/* How a C program uses libfatune: open a context, describe the tensors,
 * launch, ask which variant ran. It draws random fp16 inputs, runs
 * fatune's forward pass and compares it with a double-precision attention
 * on the CPU. The CUDA driver is loaded with dlopen only so that this example
 * builds and exits 77 (skipped) on a machine without one; a real program
 * would link -lcuda or use the CUDA runtime.
 *
 *   attention_example [seqlen] [head_dim] [causal 0|1]
 * Exit status: 0 when the output matches, 1 when it does not or a call
 * fails, 77 when no CUDA driver or device is present. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fatune.h"

#define SKIP 77
#define BATCH 2
#define HEADS 4
#define HEADS_K 2            /* grouped-query: 2 query heads per key/value head */
#define REL_L2_TOLERANCE 1e-2 /* fp16 inputs, fp32 accumulation */

static struct {
  int (*Init)(unsigned);
  int (*DeviceGet)(int *, int);
  int (*PrimaryCtxRetain)(void **, int);
  int (*CtxSetCurrent)(void *);
  int (*MemAlloc)(uint64_t *, size_t);
  int (*MemFree)(uint64_t);
  int (*MemcpyHtoD)(uint64_t, const void *, size_t);
  int (*MemcpyDtoH)(void *, uint64_t, size_t);
  int (*CtxSynchronize)(void);
} cu;

static int load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return -1;
  *(void **)&cu.Init = dlsym(h, "cuInit");
  *(void **)&cu.DeviceGet = dlsym(h, "cuDeviceGet");
  *(void **)&cu.PrimaryCtxRetain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.CtxSetCurrent = dlsym(h, "cuCtxSetCurrent");
  *(void **)&cu.MemAlloc = dlsym(h, "cuMemAlloc_v2");
  *(void **)&cu.MemFree = dlsym(h, "cuMemFree_v2");
  *(void **)&cu.MemcpyHtoD = dlsym(h, "cuMemcpyHtoD_v2");
  *(void **)&cu.MemcpyDtoH = dlsym(h, "cuMemcpyDtoH_v2");
  *(void **)&cu.CtxSynchronize = dlsym(h, "cuCtxSynchronize");
  return cu.Init && cu.MemAlloc && cu.CtxSynchronize ? 0 : -1;
}

static uint16_t to_half(float f) { /* round to nearest even, normal range only */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (exp <= 0) return (uint16_t)sign;
  uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)h;
}

static double from_half(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp ? ldexp(1.0 + man / 1024.0, exp - 15) : ldexp(man / 1024.0, -14);
  return (h & 0x8000) ? -v : v;
}

/* O = softmax(scale·Q·Kᵀ)·V in double, bottom-right causal. */
static void reference(const uint16_t *q, const uint16_t *k, const uint16_t *v, double *o, int S,
                      int D, int causal, double scale) {
  double *p = malloc(sizeof *p * (size_t)S);
  for (int b = 0; b < BATCH; b++)
    for (int h = 0; h < HEADS; h++) {
      int hk = h / (HEADS / HEADS_K);
      for (int i = 0; i < S; i++) {
        double m = -INFINITY, l = 0;
        int last = causal ? i : S - 1;
        for (int j = 0; j <= last; j++) {
          double s = 0;
          for (int d = 0; d < D; d++)
            s += from_half(q[(((size_t)b * S + i) * HEADS + h) * D + d]) *
                 from_half(k[(((size_t)b * S + j) * HEADS_K + hk) * D + d]);
          p[j] = s * scale;
          if (p[j] > m) m = p[j];
        }
        for (int j = 0; j <= last; j++) l += (p[j] = exp(p[j] - m));
        for (int d = 0; d < D; d++) {
          double acc = 0;
          for (int j = 0; j <= last; j++)
            acc += p[j] * from_half(v[(((size_t)b * S + j) * HEADS_K + hk) * D + d]);
          o[(((size_t)b * S + i) * HEADS + h) * D + d] = acc / l;
        }
      }
    }
  free(p);
}

int main(int argc, char **argv) {
  int S = argc > 1 ? atoi(argv[1]) : 300, D = argc > 2 ? atoi(argv[2]) : 128;
  int causal = argc > 3 ? atoi(argv[3]) : 1, rc = 1;
  fat_context *ctx = NULL;
  void *pctx = NULL;
  int dev = 0;
  if (load_driver() || cu.Init(0) || cu.DeviceGet(&dev, 0) || cu.PrimaryCtxRetain(&pctx, dev) ||
      cu.CtxSetCurrent(pctx)) {
    printf("attention_example: skipped: no CUDA driver or device\n");
    return SKIP;
  }
  size_t nq = (size_t)BATCH * S * HEADS * D, nk = (size_t)BATCH * S * HEADS_K * D;
  size_t nlse = (size_t)BATCH * HEADS * S;
  uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *o = malloc(nq * 2);
  double *ref = malloc(nq * sizeof *ref);
  uint64_t dq = 0, dk = 0, dv = 0, dout = 0, dlse = 0;
  srand(1);
  for (size_t i = 0; i < nq; i++) q[i] = to_half((float)rand() / RAND_MAX * 2 - 1);
  for (size_t i = 0; i < nk; i++) k[i] = to_half((float)rand() / RAND_MAX * 2 - 1);
  for (size_t i = 0; i < nk; i++) v[i] = to_half((float)rand() / RAND_MAX * 2 - 1);
  if (cu.MemAlloc(&dq, nq * 2) || cu.MemAlloc(&dk, nk * 2) || cu.MemAlloc(&dv, nk * 2) ||
      cu.MemAlloc(&dout, nq * 2) || cu.MemAlloc(&dlse, nlse * 4) || cu.MemcpyHtoD(dq, q, nq * 2) ||
      cu.MemcpyHtoD(dk, k, nk * 2) || cu.MemcpyHtoD(dv, v, nk * 2)) {
    fprintf(stderr, "attention_example: device memory failed\n");
    goto out;
  }

  /* 1. A context for device 0 with the default databases. */
  fat_status st = fat_context_open(&ctx, NULL);
  if (st) {
    fprintf(stderr, "attention_example: %s: %s\n", fat_strerror(st), fat_context_error(ctx));
    goto out;
  }
  /* 2. The problem: contiguous (batch, seqlen, heads, head_dim) tensors. */
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.q = (void *)(uintptr_t)dq;
  a.k = (void *)(uintptr_t)dk;
  a.v = (void *)(uintptr_t)dv;
  a.o = (void *)(uintptr_t)dout;
  a.lse = (float *)(uintptr_t)dlse;
  a.batch = BATCH;
  a.heads = HEADS;
  a.heads_k = HEADS_K;
  a.seqlen_q = a.seqlen_k = S;
  a.head_dim = D;
  a.dtype = FAT_ATTN_FP16;
  a.mask = causal ? FAT_ATTN_MASK_CAUSAL : FAT_ATTN_MASK_NONE;
  fat_attn_args_contiguous(&a);
  /* 3. Launch on the default stream, and learn what ran. */
  fat_choice ran = FAT_CHOICE_INIT;
  if ((st = fat_attention_fwd(ctx, &a, NULL, &ran))) {
    fprintf(stderr, "attention_example: %s: %s\n", fat_strerror(st), fat_context_error(ctx));
    goto out;
  }
  if (cu.CtxSynchronize() || cu.MemcpyDtoH(o, dout, nq * 2)) {
    fprintf(stderr, "attention_example: the kernel failed\n");
    goto out;
  }
  printf("ran %s (%s, %s, bucket %d, %s)\n", ran.variant, fat_origin_name(ran.origin),
         fat_match_name(ran.match), ran.bucket_seqlen, fat_load_name(ran.load));

  /* 4. Compare with the reference. */
  reference(q, k, v, ref, S, D, causal, 1.0 / sqrt((double)D));
  double num = 0, den = 0;
  for (size_t i = 0; i < nq; i++) {
    double d = from_half(o[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  double rel = sqrt(num / den);
  printf("seqlen %d head_dim %d %s: rel_l2 %.3g (tolerance %.0e)\n", S, D,
         causal ? "causal" : "none", rel, REL_L2_TOLERANCE);
  rc = rel <= REL_L2_TOLERANCE ? 0 : 1;
out:
  fat_context_close(ctx);
  if (dq) cu.MemFree(dq);
  if (dk) cu.MemFree(dk);
  if (dv) cu.MemFree(dv);
  if (dout) cu.MemFree(dout);
  if (dlse) cu.MemFree(dlse);
  free(q), free(k), free(v), free(o), free(ref);
  return rc;
}
