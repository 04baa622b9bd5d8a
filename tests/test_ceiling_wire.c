/* SPDX-License-Identifier: MIT */
/* Tests, without a GPU, of what the ceilings job and the materialising
 * baseline add to the worker: the new messages keep the old message numbers
 * and survive a round trip field by field, truncated or malformed ones are
 * refused; a kernel description carries its launch kind and a bad kind is
 * refused; the family decides the kind; the workspace and peak-memory
 * arithmetic gives exact byte counts; a call without a worker is refused
 * before anything is sent; and templates/ceilings.cu and materialize
 * variants compile with NVRTC for sm_80 and sm_90a without spilling
 * (templates/ceilings_wgmma90.cu, sm_90a's alone: test_ceilings_wgmma). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "family.h"
#include "fwd_launch.h"
#include "job.h"
#include "gen.h"
#include "gpu_run.h"
#include "worker.h"
#include "worker_wire.h"
#include "check.h"

#define ERRLEN 4096

static const unsigned char fake_cubin[] = {0x7f, 'E', 'L', 'F', 0, 9, 8, 7};

static fat_rbuf reader(const fat_wbuf *b) {
  fat_rbuf r = {.data = b->data, .len = b->len};
  return r;
}

static void test_message_numbers(void) {
  /* Appended after QUIT: every earlier message keeps its number. */
  CHECK(FAT_MSG_P_QUIT == 10);
  CHECK(FAT_MSG_P_CEILINGS == 11);
  CHECK(FAT_MSG_W_CEILINGS == 12);
}

static void test_ceiling_job_round_trip(void) {
  fat_wbuf b = {0};
  fat_ceiling_job job = {.cubin = fake_cubin, .cubin_size = sizeof fake_cubin,
                         .reps = FAT_CEILING_REPS, .warmup = FAT_CEILING_WARMUP}, got;
  fat_put_ceiling_job(&b, &job);
  /* The cubin, then two empty wgmma cubins (no wgmma on this arch). */
  CHECK(!b.failed && b.len == 8 + sizeof fake_cubin + 8 + 8 + 4 + 4);
  fat_rbuf r = reader(&b);
  CHECK(fat_get_ceiling_job(&r, &got) == 0);
  CHECK(got.cubin_size == sizeof fake_cubin && memcmp(got.cubin, fake_cubin, sizeof fake_cubin) == 0);
  CHECK((const unsigned char *)got.cubin >= b.data && (const unsigned char *)got.cubin < b.data + b.len);
  CHECK(got.reps == 10 && got.warmup == 2);
  CHECK(got.wgmma_cubin[FAT_FP16] == NULL && got.wgmma_cubin_size[FAT_FP16] == 0);
  CHECK(got.wgmma_cubin[FAT_BF16] == NULL && got.wgmma_cubin_size[FAT_BF16] == 0);
  /* Cut short by one byte: refused. */
  r = reader(&b);
  r.len--;
  CHECK(fat_get_ceiling_job(&r, &got) == -1);
  fat_wbuf_free(&b);

  /* sm_90a's: each dtype's wgmma cubin travels, in its place. */
  static const unsigned char f16_cubin[] = {0x7f, 'E', 'L', 'F', 16}, bf16_cubin[] = {0x7f, 'E', 'L', 'F', 1, 6};
  job.wgmma_cubin[FAT_FP16] = f16_cubin, job.wgmma_cubin_size[FAT_FP16] = sizeof f16_cubin;
  job.wgmma_cubin[FAT_BF16] = bf16_cubin, job.wgmma_cubin_size[FAT_BF16] = sizeof bf16_cubin;
  fat_put_ceiling_job(&b, &job);
  CHECK(!b.failed && b.len == 8 + sizeof fake_cubin + 8 + sizeof f16_cubin + 8 + sizeof bf16_cubin + 4 + 4);
  r = reader(&b);
  CHECK(fat_get_ceiling_job(&r, &got) == 0);
  CHECK(got.cubin_size == sizeof fake_cubin && memcmp(got.cubin, fake_cubin, sizeof fake_cubin) == 0);
  CHECK(got.wgmma_cubin_size[FAT_FP16] == sizeof f16_cubin &&
        memcmp(got.wgmma_cubin[FAT_FP16], f16_cubin, sizeof f16_cubin) == 0);
  CHECK(got.wgmma_cubin_size[FAT_BF16] == sizeof bf16_cubin &&
        memcmp(got.wgmma_cubin[FAT_BF16], bf16_cubin, sizeof bf16_cubin) == 0);
  CHECK(got.reps == 10 && got.warmup == 2);
  r = reader(&b);
  r.len -= 5;  /* into the bf16 cubin's bytes */
  CHECK(fat_get_ceiling_job(&r, &got) == -1);
  fat_wbuf_free(&b);
  job.wgmma_cubin[FAT_FP16] = job.wgmma_cubin[FAT_BF16] = NULL;
  job.wgmma_cubin_size[FAT_FP16] = job.wgmma_cubin_size[FAT_BF16] = 0;

  /* No timed run, a negative warm-up, no cubin: not jobs. */
  fat_ceiling_job bad[] = {{.cubin = fake_cubin, .cubin_size = sizeof fake_cubin, .reps = 0,
                            .warmup = 2},
                           {.cubin = fake_cubin, .cubin_size = sizeof fake_cubin, .reps = 10,
                            .warmup = -1},
                           {.cubin = fake_cubin, .cubin_size = 0, .reps = 10, .warmup = 2}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fat_put_ceiling_job(&b, &bad[i]);
    r = reader(&b);
    CHECK(fat_get_ceiling_job(&r, &got) == -1);
    fat_wbuf_free(&b);
  }
}

static void test_ceilings_round_trip(void) {
  fat_wbuf b = {0};
  fat_ceilings c = {.copy_bytes_per_s = 4.21e12, .mma_fp16_flops_per_s = 6.15e14,
                    .mma_bf16_flops_per_s = 6.125e14,
                    .wgmma_flops_per_s = {[FAT_FP16] = 8.25e14, [FAT_BF16] = 8.375e14},
                    .wgmma_rs_flops_per_s = {[FAT_FP16] = 8.5e14, [FAT_BF16] = 8.625e14},
                    .copy_bytes = 251658240ull, .reps = 10};
  fat_ceilings got;
  fat_put_ceilings(&b, &c);
  CHECK(!b.failed && b.len == 8 * 8 + 4);
  fat_rbuf r = reader(&b);
  CHECK(fat_get_ceilings_result(&r, &got) == 0);
  CHECK(got.copy_bytes_per_s == 4.21e12 && got.mma_fp16_flops_per_s == 6.15e14 &&
        got.mma_bf16_flops_per_s == 6.125e14 && got.copy_bytes == 251658240ull && got.reps == 10);
  CHECK_DBL(got.wgmma_flops_per_s[FAT_FP16], 8.25e14);
  CHECK_DBL(got.wgmma_flops_per_s[FAT_BF16], 8.375e14);
  CHECK_DBL(got.wgmma_rs_flops_per_s[FAT_FP16], 8.5e14);
  CHECK_DBL(got.wgmma_rs_flops_per_s[FAT_BF16], 8.625e14);
  r = reader(&b);
  r.len -= 4;
  CHECK(fat_get_ceilings_result(&r, &got) == -1);
  /* Bytes left over are an error too. */
  fat_put_i32(&b, 0);
  r = reader(&b);
  CHECK(fat_get_ceilings_result(&r, &got) == -1);
  fat_wbuf_free(&b);
}

static void test_kernel_kind(void) {
  fat_wbuf b = {0};
  fat_kernel_desc k, got;
  memset(&k, 0, sizeof k);
  snprintf(k.name, sizeof k.name, "fwd.materialize.bf16.d128.causal.t32");
  snprintf(k.entry, sizeof k.entry, "fat_fwd_materialize");
  k.block_m = 32, k.threads = 256, k.smem_bytes = 8448, k.dtype = FAT_BF16;
  k.mask = FAT_MASK_CAUSAL, k.head_dim = 128, k.cubin = fake_cubin, k.cubin_size = sizeof fake_cubin;
  k.kind = FAT_KERNEL_MATERIALIZE;
  k.splits = 1;
  fat_put_kernel(&b, &k);
  fat_rbuf r = reader(&b);
  fat_get_kernel(&r, &got);
  CHECK(fat_rbuf_done(&r) == 0);
  CHECK(got.kind == FAT_KERNEL_MATERIALIZE && got.block_m == 32 && got.smem_bytes == 8448 &&
        got.splits == 1 && got.pack_gqa == 0);
  CHECK_STR(got.entry, "fat_fwd_materialize");
  /* The kind follows the cubin, before direction, block_q, dq_mode,
   * pack_gqa, splits, block_n, persistent, tma_slab and paged: overwrite
   * it with a value that is no kind. */
  int32_t bogus = 7;
  memcpy(b.data + b.len - 10 * sizeof bogus, &bogus, sizeof bogus);
  r = reader(&b);
  fat_get_kernel(&r, &got);
  CHECK(fat_rbuf_done(&r) == -1);
  fat_wbuf_free(&b);

  /* The launch kind is the family's row; a family without one is refused
   * by name rather than launched as some default (libfatune's lookup). */
  fat_kernel_desc d;
  char err[256];
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "materialize", "TILE=16", err, sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_MATERIALIZE);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "ws90", "BLOCK_N=64", err, sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED_TMA);
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "ws90", "BLOCK_M=64 BLOCK_N=128 DQ_MODE=atomic", err,
                            sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED_TMA);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "mma80", "BLOCK_M=64", err, sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED);
  CHECK(fat_kernel_schedule(&d, FAT_FWD, "materialized", "TILE=16", err, sizeof err) == -1);
  CHECK_STR(err, "unknown fwd family 'materialized'");
  CHECK(fat_kernel_schedule(&d, FAT_BWD, "splitkv", "SPLITS=2", err, sizeof err) == -1);
  CHECK_STR(err, "unknown bwd family 'splitkv'");
  CHECK(fat_kernel_schedule(&d, FAT_FWD, NULL, "", err, sizeof err) == -1);
  CHECK_STR(err, "unknown fwd family '(null)'");

  /* The tuner's variant of a family a template folder added (the
   * fault-isolation test's "faulty") launches as a fused kernel. */
  static const unsigned char cubin[] = {1, 2, 3};
  fat_variant v = {.name = "fwd.faulty.bf16.d64.none.trap", .family = "faulty", .entry = "fat_fwd_faulty",
                   .params = "MODE=2", .direction = FAT_FWD, .block_m = 64, .threads = 128};
  fat_build built = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = sizeof cubin};
  CHECK(fat_kernel_describe(&v, &built, &d, err, sizeof err) == 0);
  CHECK(d.kind == FAT_KERNEL_FUSED && d.direction == FAT_FWD && d.block_m == 64 && d.persistent == 0);
  v.family = "naive"; /* test_gpu_worker's hand-written kernels */
  v.params = "";
  CHECK(fat_kernel_describe(&v, &built, &d, err, sizeof err) == 0 && d.kind == FAT_KERNEL_FUSED);
  const fat_family row = fat_family_of_template("faulty", FAT_BWD);
  CHECK(row.kind == FAT_KERNEL_FUSED && row.may_win && !row.packed && row.max_seqlen_q == 0 &&
        !row.builtin_default && row.direction == FAT_BWD);
}

static void test_memory_arithmetic(void) {
  /* The benchmark shape of bf16 d128 at 16384: batch 1, 16 heads. */
  fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL,
                   .head_dim = 128, .batch = 1, .heads = 16, .heads_k = 16, .seqlen_q = 16384,
                   .seqlen_k = 16384};
  fat_check_shape s = {FAT_SHAPE_DIMS(1, 16, 16, 16384, 16384)};
  /* 16 * 16384 * 16384 fp32 scores = 2^4 * 2^14 * 2^14 * 2^2 = 2^34 */
  CHECK(fat_materialize_workspace_bytes(&s) == 17179869184ull);
  /* Q + O: 2 * 16384 * 16 * 128 * 2 = 2^27, K + V the same, lse 16 * 16384 * 4 = 2^20 */
  CHECK(fat_fwd_peak_bytes(&p, 0) == 134217728ull * 2 + 1048576ull);
  CHECK(fat_fwd_peak_bytes(&p, 1) == 134217728ull * 2 + 1048576ull + 17179869184ull);
  /* Grouped-query, unequal lengths: K and V count heads_k and seqlen_k. */
  fat_problem g = {.direction = FAT_FWD, .dtype = FAT_FP16, .mask = FAT_MASK_NONE, .head_dim = 64,
                   .batch = 2, .heads = 8, .heads_k = 2, .seqlen_q = 100, .seqlen_k = 300};
  fat_check_shape gs = {FAT_SHAPE_DIMS(2, 8, 2, 100, 300)};
  CHECK(fat_materialize_workspace_bytes(&gs) == 2ull * 8 * 100 * 300 * 4);
  CHECK(fat_fwd_peak_bytes(&g, 0) == 2ull * 2 * 100 * 8 * 64 * 2 + 2ull * 2 * 300 * 2 * 64 * 2 +
                                         2ull * 8 * 100 * 4);
  /* An fp8 K/V cache: Q and O of two bytes, K and V of one (e4m3 all
   * three of one and O of two); a paged one's K and V twice (the
   * contiguous copy and the pool). */
  fat_problem kv = g;
  kv.dtype = FAT_BF16_E4M3KV;
  CHECK(fat_fwd_peak_bytes(&kv, 0) == 2ull * 100 * 8 * 64 * (2 + 2) + 2ull * 2 * 300 * 2 * 64 * 1 +
                                          2ull * 8 * 100 * 4);
  kv.page_size = 16;
  CHECK(fat_fwd_peak_bytes(&kv, 0) == 2ull * 100 * 8 * 64 * (2 + 2) + 2ull * 2 * 2 * 300 * 2 * 64 +
                                          2ull * 8 * 100 * 4);
  kv.page_size = 0, kv.dtype = FAT_E4M3;
  CHECK(fat_fwd_peak_bytes(&kv, 0) == 2ull * 100 * 8 * 64 * (1 + 2) + 2ull * 2 * 300 * 2 * 64 * 1 +
                                          2ull * 8 * 100 * 4);
}

static void test_no_worker(void) {
  char reason[256] = "";
  fat_ceilings c = {.reps = 99, .wgmma_flops_per_s = {1, 1}};
  CHECK(fat_worker_measure_ceilings(NULL, &c, reason, sizeof reason) == FAT_WORKER_ERROR);
  CHECK_STR(reason, "no worker running (restart it after a fault or timeout)");
  CHECK(c.reps == 0 && c.copy_bytes_per_s == 0 && c.wgmma_flops_per_s[FAT_BF16] == 0);
}

/* NVRTC: the ceilings kernels and a corner of the materialize family (both
 * tiles, the smallest and largest head dims, both dtypes and masks). The
 * whole family is compiled by test_slow_compile_space. */
static void test_compiles(void) {
  static const char *const archs[] = {"sm_80", "sm_90a"};
  char err[ERRLEN];
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  CHECK(g != NULL);
  if (!g) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    fat_build b;
    if (fat_gpu_compile_ceilings(archs[a], &b, err, sizeof err)) {
      fprintf(stderr, "%s: %s\n", archs[a], err);
      CHECK(!"templates/ceilings.cu compiles");
    } else {
      CHECK(b.ok && b.cubin_size > 0 && b.spill_stores == 0 && b.spill_loads == 0);
      fat_build_free(&b);
    }
    const int dims[] = {64, 256};
    fat_gen_query q = {.direction = FAT_FWD, .head_dims = dims, .n_head_dims = 2, .arch = archs[a]};
    fat_variant *v = NULL;
    size_t n = 0, compiled = 0;
    if (fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      CHECK(!"generate");
      continue;
    }
    for (size_t i = 0; i < n; i++) {
      if (strcmp(v[i].family, FAT_FAMILY_MATERIALIZE) != 0) continue;
      /* one of each (dtype, mask) per head dim, alternating tiles */
      if ((strstr(v[i].name, "bf16") != NULL) != (strstr(v[i].name, "causal") != NULL)) continue;
      if (fat_compile_one(v[i].name, v[i].source, archs[a], &b, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(!"NVRTC runs");
        break;
      }
      if (!b.ok || b.spill_stores || b.spill_loads)
        fprintf(stderr, "%s for %s: ok %d, spills %d/%d\n%s\n", v[i].name, archs[a], b.ok,
                b.spill_stores, b.spill_loads, b.log ? b.log : "");
      CHECK(b.ok && b.spill_stores == 0 && b.spill_loads == 0);
      fat_build_free(&b);
      compiled++;
    }
    /* 2 head dims x (fp16 none, bf16 causal) x 2 tiles */
    CHECK(compiled == 8);
    for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
    free(v);
  }
  fat_gen_close(g);
}

int main(void) {
  test_message_numbers();
  test_ceiling_job_round_trip();
  test_ceilings_round_trip();
  test_kernel_kind();
  test_memory_arithmetic();
  test_no_worker();
  test_compiles();
  return check_summary("test_ceiling_wire");
}
