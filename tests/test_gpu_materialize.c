/* SPDX-License-Identifier: MIT */
/* On a GPU, through the worker as the tuner drives it: the materialising
 * baseline passes the reference check (a causal shape with seqlen_q !=
 * seqlen_k whose first rows see no key, grouped-query and ragged shapes),
 * is timed as one launch of three kernels, is slower than the fused default
 * at seqlen 2048 and reports exactly how many bytes it lacks when its
 * workspace does not fit; and the ceilings job returns a copy bandwidth
 * between 1 and 10 TB/s and mma.sync rates between 50 and 2000 TFLOP/s.
 * Exits 77 (skipped) when no CUDA driver or device is present. */
#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "cuda_api.h"
#include "gen.h"
#include "worker.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define TEST_REPS 5
#define TEST_TIMEOUT_S 120.0
#define MIN_COPY_BPS 1e12    /* any sm_80+ GPU copies faster than 1 TB/s ... */
#define MAX_COPY_BPS 10e12   /* ... and none yet at 10 */
#define MIN_MMA_FLOPS 50e12
#define MAX_MMA_FLOPS 2000e12
#define TB 1e12

static char err[ERRLEN];

typedef struct compiled {
  fat_variant v;
  fat_build b;
  int found;
} compiled;

/* Generates the space for ARCH and compiles the variants named in NAMES. */
static int compile_named(const char *arch, const char *const *names, compiled *out, int n) {
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  fat_variant *v = NULL;
  size_t nv = 0;
  int rc = -1;
  fat_gen_query q = {.direction = FAT_FWD, .arch = arch};
  if (!g || fat_gen_variants(g, &q, &v, &nv, NULL, NULL, err, sizeof err)) goto out;
  for (int k = 0; k < n; k++) {
    memset(&out[k], 0, sizeof out[k]);
    for (size_t i = 0; i < nv; i++)
      if (v[i].name && !strcmp(v[i].name, names[k])) { /* NULL: moved out for an earlier name */
        out[k].v = v[i];
        memset(&v[i], 0, sizeof v[i]); /* ownership moves to OUT */
        out[k].found = 1;
      }
    if (!out[k].found) {
      snprintf(err, sizeof err, "%s is not in the %s space", names[k], arch);
      goto out;
    }
    if (fat_compile_one(out[k].v.name, out[k].v.source, arch, &out[k].b, err, sizeof err)) goto out;
    if (!out[k].b.ok) {
      snprintf(err, sizeof err, "%s: %s", names[k], out[k].b.log);
      goto out;
    }
  }
  rc = 0;
out:
  for (size_t i = 0; i < nv; i++) fat_variant_free(&v[i]);
  free(v);
  fat_gen_close(g);
  return rc;
}

static void test_checks(fat_worker *w, const compiled *c, const fat_check_shape *shapes, int n,
                        const fat_problem *p, fat_timing *t) {
  fat_check checks[4];
  char reason[ERRLEN];
  int timed = 0;
  int st = fat_worker_evaluate(w, &c->v, &c->b, shapes, n, p, 0, checks, t, &timed, reason,
                               sizeof reason);
  if (st != FAT_WORKER_OK) fprintf(stderr, "%s: %s\n", c->v.name, reason);
  CHECK(st == FAT_WORKER_OK);
  for (int i = 0; st == FAT_WORKER_OK && i < n; i++) {
    printf("%-40s %dx%dx%dx%d: rel_l2 %.2e lse %.2e %s\n", c->v.name, checks[i].batch,
           checks[i].heads, checks[i].seqlen_q, checks[i].seqlen_k, checks[i].rel_l2,
           checks[i].lse_max_abs, checks[i].reason);
    CHECK(checks[i].passed);
  }
  CHECK(timed == (p != NULL));
  if (timed)
    printf("%-40s %s d%d %s s%d (%dx%d): %.3f ms, %.1f TFLOP/s\n", c->v.name,
           fat_dtype_name(p->dtype), p->head_dim, fat_mask_name(p->mask), p->seqlen_q, p->batch,
           p->heads, t->median_ms, t->tflops);
}

/* A crash prints where it happened (addresses for addr2line against this
 * build) instead of dying silently with its stdout still buffered. */
static void on_crash(int sig) {
  void *frames[64];
  int n = backtrace(frames, 64);
  static const char msg[] = "test_gpu_materialize: crashed; backtrace:\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(128 + sig);
  backtrace_symbols_fd(frames, n, 2);
  _exit(128 + sig);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGSEGV, on_crash);
  signal(SIGBUS, on_crash);
  signal(SIGABRT, on_crash);
  fat_worker_options opts;
  fat_worker *w = NULL;
  fat_gpu_info info;
  char arch[16], reason[ERRLEN];
  static const char *const names[] = {
      "fwd.materialize.bf16.d64.causal.t32", "fwd.materialize.fp16.d128.none.t16",
      "fwd.materialize.bf16.d128.none.t32", "fwd.mma80.bf16.d128.none.m128n64w4s1"};
  enum { CAUSAL, GQA, BASELINE, FUSED, N_NAMES };
  compiled c[N_NAMES];
  memset(c, 0, sizeof c);

  fat_worker_options_default(&opts);
  opts.timeout_base_s = TEST_TIMEOUT_S;
  opts.time.reps = TEST_REPS;
  int started = fat_worker_start(0, &opts, &w, &info, err, sizeof err);
  if (started != FAT_GPU_OPENED) return gpu_open_failed(started, err);
  printf("%s, sm_%d%d, %d SMs\n", info.name, info.cc_major, info.cc_minor, info.sm_count);
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);
  if (compile_named(arch, names, c, N_NAMES)) {
    fprintf(stderr, "compiling: %s\n", err);
    check_record(0);
    goto out;
  }

  /* Causal, seqlen_q 100 > seqlen_k 37: rows 0..62 see no key (O = 0,
   * lse = -inf), the rest a bottom-right-aligned diagonal; then a shape
   * longer in keys than queries, and grouped-query heads. */
  fat_timing t;
  const fat_check_shape causal[] = {{FAT_SHAPE_DIMS(1, 2, 2, 100, 37)},
                                    {FAT_SHAPE_DIMS(2, 4, 2, 77, 131)}};
  fat_problem pc = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL,
                    .head_dim = 64, .batch = 2, .heads = 8, .heads_k = 8, .seqlen_q = 1024,
                    .seqlen_k = 1024};
  test_checks(w, &c[CAUSAL], causal, 2, &pc, &t);
  const fat_check_shape ragged[] = {{FAT_SHAPE_DIMS(1, 3, 1, 129, 65)},
                                    {FAT_SHAPE_DIMS(2, 2, 2, 33, 200)}};
  test_checks(w, &c[GQA], ragged, 2, NULL, &t);

  /* The fused default beats the baseline at seqlen 2048. */
  fat_problem p2k = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_NONE,
                     .head_dim = 128, .batch = 8, .heads = 16, .heads_k = 16, .seqlen_q = 2048,
                     .seqlen_k = 2048};
  const fat_check_shape small[] = {{FAT_SHAPE_DIMS(1, 2, 2, 160, 160)}};
  fat_timing t_base, t_fused;
  test_checks(w, &c[BASELINE], small, 1, &p2k, &t_base);
  test_checks(w, &c[FUSED], small, 1, &p2k, &t_fused);
  CHECK(t_fused.median_ms > 0 && t_fused.median_ms < t_base.median_ms);
  printf("fused %.3f ms, materialising %.3f ms: %.2fx; peak memory %.3f GB vs %.3f GB\n",
         t_fused.median_ms, t_base.median_ms, t_base.median_ms / t_fused.median_ms,
         fat_fwd_peak_bytes(&p2k, 0) / 1e9, fat_fwd_peak_bytes(&p2k, 1) / 1e9);

  /* 64 heads of 131072 x 131072 fp32 scores = 2^42 bytes: no GPU has them.
   * The checks pass; timing is refused with the figures, and the worker
   * lives on. */
  fat_problem huge = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_NONE,
                      .head_dim = 128, .batch = 1, .heads = 64, .heads_k = 64, .seqlen_q = 131072,
                      .seqlen_k = 131072};
  fat_check chk[1];
  int timed = -1;
  int st = fat_worker_evaluate(w, &c[BASELINE].v, &c[BASELINE].b, small, 1, &huge, 0, chk, &t, &timed,
                               reason, sizeof reason);
  printf("huge: %s\n", reason);
  CHECK(st == FAT_WORKER_REJECTED);
  CHECK(!strncmp(reason, "does not fit: needs 4398046511104 bytes, ", 41));
  CHECK(fat_worker_alive(w));

  /* Ceilings, through the worker as the tuner asks for them. */
  fat_ceilings ce;
  st = fat_worker_measure_ceilings(w, &ce, reason, sizeof reason);
  if (st != FAT_WORKER_OK) fprintf(stderr, "ceilings: %s\n", reason);
  CHECK(st == FAT_WORKER_OK);
  printf("ceilings: copy %.2f TB/s (2 x %llu bytes), mma.sync bf16 %.0f TFLOP/s, fp16 %.0f TFLOP/s, "
         "median of %d\n", ce.copy_bytes_per_s / TB, ce.copy_bytes, ce.mma_bf16_flops_per_s / TB,
         ce.mma_fp16_flops_per_s / TB, ce.reps);
  CHECK(ce.copy_bytes_per_s > MIN_COPY_BPS && ce.copy_bytes_per_s < MAX_COPY_BPS);
  CHECK(ce.mma_bf16_flops_per_s > MIN_MMA_FLOPS && ce.mma_bf16_flops_per_s < MAX_MMA_FLOPS);
  CHECK(ce.mma_fp16_flops_per_s > MIN_MMA_FLOPS && ce.mma_fp16_flops_per_s < MAX_MMA_FLOPS);
  CHECK(ce.copy_bytes >= 4ull * (unsigned)info.l2_bytes && ce.reps == FAT_CEILING_REPS);
out:
  for (int k = 0; k < N_NAMES; k++) {
    fat_variant_free(&c[k].v);
    fat_build_free(&c[k].b);
  }
  fat_worker_stop(w);
  return check_summary("test_gpu_materialize");
}
