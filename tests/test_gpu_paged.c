/* SPDX-License-Identifier: MIT */
/* On a GPU: the paged family (K and V through a block table, issue 24)
 * against the fp64 reference, which reads the same keys contiguous: each
 * check scatters fresh random K and V into pages of a pool in random order,
 * NaN everywhere else (rows past a sequence's cache length in its last
 * page, the spare pages, which the table's unused entries name), with
 * poisoned outputs (fat_gpu_check). Page sizes 16, 32, 64, 128 and 256;
 * caches of uneven lengths (seqused_k), one query and a few against 65536
 * keys, chunked prefill (hundreds of queries against a longer cache,
 * causal bottom-right on each sequence's own length), grouped-query and
 * multi-query heads, packed and not, sliding windows, the soft-cap, a head
 * dim below its template's, and the split counts the launch chooses for
 * this GPU (one sequence of one K/V head: all 32); and an fp8 K/V cache
 * (dtypes fp16-e4m3kv and bf16-e4m3kv: K and V e4m3 with descale factors
 * per tensor and per (batch, key head), Q 16-bit) on both decoding
 * families, contiguous and paged, where the GPU converts e4m3 (sm_89 and
 * newer). Prints one row per
 * check. Exits 77 (skipped) when no CUDA driver or device is present; the
 * variants to check can be narrowed to those whose name holds
 * $FATUNE_TEST_PARAM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "cuda_api.h"
#include "fwd_launch.h"
#include "gen.h"
#include "gpu_run.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define TEST_SEED 20261205u

static char err[ERRLEN];
static fat_variant *space;
static size_t n_space;

/* Compiles the variant NAME for ARCH and loads it on G. 0 or -1 with err. */
static int load(fat_gpu *g, const char *name, const char *arch, fat_build *b, fat_gpu_kernel *k) {
  return gpu_test_load_named(g, space, n_space, name, arch, b, k, err, sizeof err);
}

static unsigned seed_counter;

/* Checks NAME on each shape; one printed row per shape. */
static void check_variant(fat_gpu *g, const char *arch, const char *name, const fat_check_shape *s,
                          int n) {
  const char *only = getenv("FATUNE_TEST_PARAM");
  fat_build b;
  fat_gpu_kernel k;
  if (only && *only && !strstr(name, only)) return;
  if (load(g, name, arch, &b, &k)) {
    fprintf(stderr, "%s: %s\n", name, err);
    check_record(0);
    fat_build_free(&b);
    return;
  }
  for (int i = 0; i < n; i++) {
    fat_check c;
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%d/%dx%dx%d page %d w%d,%d d%d cap%g%s%s", s[i].batch, s[i].heads,
             s[i].heads_k, s[i].seqlen_q, s[i].seqlen_k, s[i].page_size, s[i].window_left,
             s[i].window_right, s[i].head_dim, (double)s[i].softcap, s[i].varlen ? " partial" : "",
             s[i].descale_per_head ? " per-head" : "");
    int rc = fat_gpu_check(g, &k, &s[i], TEST_SEED + seed_counter++, &c, err, sizeof err);
    if (rc != FAT_GPU_OK) {
      fprintf(stderr, "%s on %s: %s\n", name, shape, err);
      check_record(0);
      continue;
    }
    printf("%-46s %-52s rel_l2 %.2e lse %.1e  %s\n", name, shape, c.rel_l2, c.lse_max_abs, c.reason);
    CHECK(c.passed);
  }
  fat_gpu_kernel_unload(g, &k);
  fat_build_free(&b);
}

#define N(a) ((int)(sizeof a / sizeof a[0]))

int main(void) {
  fat_gpu *g = NULL;
  fat_gpu_info info;
  fat_build util, ref;
  char arch[16];
  memset(&util, 0, sizeof util);
  memset(&ref, 0, sizeof ref);
  int opened = fat_gpu_open(0, &g, &info, err, sizeof err);
  if (opened != FAT_GPU_OPENED) return gpu_open_failed(opened, err);
  printf("%s, sm_%d%d, %d SMs\n", info.name, info.cc_major, info.cc_minor, info.sm_count);
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);
  fat_gen *gen = fat_gen_open(NULL, err, sizeof err);
  fat_gen_query q = {.direction = FAT_FWD, .arch = arch, .smem_limit = info.smem_per_block_optin};
  if (!gen || fat_gen_variants(gen, &q, &space, &n_space, NULL, NULL, err, sizeof err) ||
      fat_gpu_compile_support(arch, &util, &ref, err, sizeof err) ||
      fat_gpu_load_support(g, util.cubin, ref.cubin, err, sizeof err) != FAT_GPU_OK) {
    fprintf(stderr, "setup: %s\n", err);
    check_record(0);
    goto out;
  }

  /* Decoding: one query and 16 against caches of uneven lengths in pages
   * of 16 to 256 (varlen: the caches partly filled, the last page of most
   * half empty); one sequence of one K/V head against 65536 keys, which
   * the launch splits 32 ways on any GPU of 32 SMs or more. */
  const fat_check_shape decode[] = {
      {FAT_SHAPE_DIMS(3, 8, 2, 1, 4097), .page_size = 16, .varlen = 1},
      {FAT_SHAPE_DIMS(2, 8, 2, 16, 4097), .page_size = 64, .varlen = 1},
      {FAT_SHAPE_DIMS(1, 8, 1, 1, 65536), .page_size = 256},
      {FAT_SHAPE_DIMS(4, 4, 4, 4, 300), .page_size = 32, .varlen = 1},
      {FAT_SHAPE_DIMS(2, 8, 2, 1, 17), .page_size = 128, .varlen = 1},
  };
  static const char *const decoders[] = {
      "fwd.paged.bf16.d128.causal.m64n64w4s2.g0x0",  /* the built-in default */
      "fwd.paged.bf16.d128.causal.m64n64w4s2.g1x0",
      "fwd.paged.bf16.d128.none.m64n128w4s2.g1x0",
      "fwd.paged.fp16.d128.causal.m64n64w4s3.g1x0",
      "fwd.paged.bf16.d64.causal.m64n128w4s2.g1x0",
      "fwd.paged.fp16.d256.causal.m64n32w4s2.g0x0",
      "fwd.paged.bf16.d192.none.m64n64w4s2.g1x0",
  };
  for (int i = 0; i < N(decoders); i++) check_variant(g, arch, decoders[i], decode, N(decode));

  /* Chunked prefill: a chunk of queries against a longer paged cache,
   * causal on each sequence's own length (its chunk the last rows). */
  const fat_check_shape prefill[] = {
      {FAT_SHAPE_DIMS(2, 4, 2, 500, 1300), .page_size = 64, .varlen = 1},
      {FAT_SHAPE_DIMS(2, 8, 2, 1000, 1000), .page_size = 16},
      {FAT_SHAPE_DIMS(1, 4, 4, 257, 4097), .page_size = 256},
  };
  check_variant(g, arch, "fwd.paged.bf16.d128.causal.m128n64w8s2.g0x0", prefill, N(prefill));
  check_variant(g, arch, "fwd.paged.fp16.d128.none.m128n128w8s2.g0x0", prefill, N(prefill));
  check_variant(g, arch, "fwd.paged.bf16.d96.causal.m128n64w8s3.g0x0", prefill, 2);

  /* Windows, the soft-cap, and a head dim below its template's (88 on 96):
   * alone and all at once. */
  const fat_check_shape local[] = {
      {FAT_SHAPE_DIMS(3, 8, 2, 16, 4097), .window_left = 1000, .window_right = 0, .page_size = 64,
       .varlen = 1},
      {FAT_SHAPE_DIMS(2, 4, 2, 300, 700), .window_left = 50, .window_right = 30, .page_size = 16},
      {FAT_SHAPE_DIMS(2, 8, 2, 1, 2000), .window_left = 256, .window_right = -1, .page_size = 32,
       .varlen = 1, .softcap = 30.f},
  };
  check_variant(g, arch, "fwd.paged.bf16.d128.local.m64n64w4s3.g1x0", local, N(local));
  check_variant(g, arch, "fwd.paged.fp16.d64.local.m128n64w8s2.g0x0", local, N(local));
  const fat_check_shape capped[] = {
      {FAT_SHAPE_DIMS(3, 8, 2, 1, 2000), .page_size = 16, .varlen = 1, .softcap = 5.f},
      {FAT_SHAPE_DIMS(2, 4, 1, 64, 1000), .page_size = 64, .softcap = 50.f, .head_dim = 88},
  };
  check_variant(g, arch, "fwd.paged.bf16.d96.causal.m64n64w4s2.g1x0", capped, N(capped));
  const fat_check_shape all[] = {
      {FAT_SHAPE_DIMS(3, 8, 2, 16, 3000), .window_left = 700, .window_right = 0, .head_dim = 88,
       .page_size = 16, .varlen = 1, .softcap = 30.f}};
  check_variant(g, arch, "fwd.paged.bf16.d96.local.m64n64w4s2.g1x0", all, N(all));

  /* An fp8 K/V cache, where the GPU converts e4m3 (the generator's rule:
   * sm_89 and newer). Contiguous (splitkv, its splits the launch's) and
   * paged, decoding and a prefill chunk, grouped heads, partly filled
   * caches, windows, the soft-cap and a head dim below its template's (80
   * on 96: a multiple of 16, the runtime's rule for one-byte rows); the
   * descale factors one per tensor and one per (batch, key head). */
  if (info.cc_major * 10 + info.cc_minor >= 89) {
    const fat_check_shape kv8_dense[] = {
        {FAT_SHAPE_DIMS(2, 8, 2, 1, 4097)},
        {FAT_SHAPE_DIMS(2, 8, 2, 16, 4097), .descale_per_head = 1},
        {FAT_SHAPE_DIMS(1, 8, 1, 1, 65536), .descale_per_head = 1},
        {FAT_SHAPE_DIMS(3, 8, 2, 16, 700), .varlen = 1, .descale_per_head = 1},
        {FAT_SHAPE_DIMS(4, 4, 4, 4, 300)},
        {FAT_SHAPE_DIMS(2, 4, 2, 300, 1000), .descale_per_head = 1}, /* a prefill chunk on the default */
    };
    static const char *const kv8_dense_variants[] = {
        "fwd.splitkv.bf16-e4m3kv.d128.causal.m64n64w4s2.g1x0", /* the built-in default */
        "fwd.splitkv.bf16-e4m3kv.d128.causal.m64n64w4s6.g0x0", /* six stages */
        "fwd.splitkv.fp16-e4m3kv.d128.none.m64n128w4s2.g1x0",
        "fwd.splitkv.bf16-e4m3kv.d64.causal.m64n64w4s3.g1x0",
        "fwd.splitkv.fp16-e4m3kv.d256.causal.m64n32w4s2.g0x0",
        "fwd.splitkv.bf16-e4m3kv.d192.none.m64n32w4s2.g1x0",
    };
    for (int i = 0; i < N(kv8_dense_variants); i++)
      check_variant(g, arch, kv8_dense_variants[i], kv8_dense, N(kv8_dense));
    const fat_check_shape kv8_paged[] = {
        {FAT_SHAPE_DIMS(3, 8, 2, 1, 4097), .page_size = 16, .varlen = 1},
        {FAT_SHAPE_DIMS(2, 8, 2, 16, 4097), .page_size = 64, .varlen = 1, .descale_per_head = 1},
        {FAT_SHAPE_DIMS(1, 8, 1, 1, 65536), .page_size = 256, .descale_per_head = 1},
        {FAT_SHAPE_DIMS(2, 8, 2, 1, 17), .page_size = 128, .varlen = 1},
    };
    static const char *const kv8_paged_variants[] = {
        "fwd.paged.bf16-e4m3kv.d128.causal.m64n64w4s2.g1x0", /* the built-in default */
        "fwd.paged.bf16-e4m3kv.d128.causal.m64n128w4s4.g1x0",  /* four stages of 128 keys */
        "fwd.paged.fp16-e4m3kv.d128.causal.m64n64w4s3.g1x0",
        "fwd.paged.bf16-e4m3kv.d128.none.m64n128w4s2.g1x0",
        "fwd.paged.bf16-e4m3kv.d256.causal.m64n32w4s2.g0x0",
    };
    for (int i = 0; i < N(kv8_paged_variants); i++)
      check_variant(g, arch, kv8_paged_variants[i], kv8_paged, N(kv8_paged));
    check_variant(g, arch, "fwd.paged.bf16-e4m3kv.d128.causal.m128n64w8s2.g0x0", prefill, N(prefill));
    const fat_check_shape kv8_all[] = {
        {FAT_SHAPE_DIMS(3, 8, 2, 16, 3000), .window_left = 700, .window_right = 0, .head_dim = 80,
         .page_size = 16, .varlen = 1, .softcap = 30.f, .descale_per_head = 1},
        {FAT_SHAPE_DIMS(2, 8, 2, 1, 2000), .window_left = 256, .window_right = -1, .head_dim = 80,
         .softcap = 30.f}};
    check_variant(g, arch, "fwd.paged.fp16-e4m3kv.d96.local.m64n64w4s2.g1x0", kv8_all, 1);
    check_variant(g, arch, "fwd.splitkv.bf16-e4m3kv.d96.local.m64n64w4s2.g1x0", &kv8_all[1], 1);
  }
out:
  for (size_t i = 0; i < n_space; i++) fat_variant_free(&space[i]);
  free(space);
  if (gen) fat_gen_close(gen);
  fat_build_free(&util);
  fat_build_free(&ref);
  fat_gpu_close(g);
  return check_summary("test_gpu_paged");
}
