/* SPDX-License-Identifier: MIT */
/* On a GPU: the forward's problem features against the fp64 reference,
 * each on fresh random inputs with poisoned outputs (fat_gpu_check):
 * sliding windows (bounded on either side, both, neither, the window that
 * shows a row no key), head dims below their template's (40 on 64, 80 and
 * 88 on 96, 200 on 256), the tanh soft-cap, variable-length batches with
 * seqused_k, and the decoding schedules (packed grouped-query heads, keys
 * split over blocks and merged by the combine kernel) at seqlen_q 1 and 16
 * against 4097 and 65536 keys -- and the combination the issue names:
 * causal-style window + grouped-query + uneven lengths + awkward head dim +
 * variable lengths. Lengths 1, 17, 1000 and 4097 appear. Prints one row per
 * check. Then the references kept for the variants of a problem
 * (ref_cache.h): the same figures from a kept reference as from a fresh
 * one, a hit counted, an altered kept reference failing the check. Exits
 * 77 (skipped) when no CUDA driver or device is present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compile.h"
#include "cuda_api.h"
#include "fwd_launch.h"
#include "gen.h"
#include "gpu_run.h"
#include "ref_cache.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define TEST_SEED 20261130u

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
  fat_build b;
  fat_gpu_kernel k;
  if (load(g, name, arch, &b, &k)) {
    fprintf(stderr, "%s: %s\n", name, err);
    check_record(0);
    fat_build_free(&b);
    return;
  }
  for (int i = 0; i < n; i++) {
    fat_check c;
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%d/%dx%dx%d w%d,%d d%d cap%g%s", s[i].batch, s[i].heads,
             s[i].heads_k, s[i].seqlen_q, s[i].seqlen_k, s[i].window_left, s[i].window_right,
             s[i].head_dim, (double)s[i].softcap, s[i].varlen ? " varlen" : "");
    int rc = fat_gpu_check(g, &k, &s[i], TEST_SEED + seed_counter++, &c, err, sizeof err);
    if (rc != FAT_GPU_OK) {
      fprintf(stderr, "%s on %s: %s\n", name, shape, err);
      check_record(0);
      continue;
    }
    printf("%-46s %-44s rel_l2 %.2e lse %.1e  %s\n", name, shape, c.rel_l2, c.lse_max_abs, c.reason);
    CHECK(c.passed);
  }
  fat_gpu_kernel_unload(g, &k);
  fat_build_free(&b);
}

#define N(a) ((int)(sizeof a / sizeof a[0]))

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int same_check(const fat_check *a, const fat_check *b) {
  return a->passed == b->passed && a->rel_l2 == b->rel_l2 && a->max_abs == b->max_abs &&
         a->lse_max_abs == b->lse_max_abs && a->nonfinite == b->nonfinite;
}

/* A kept reference's first value on the GPU plus 1e3, as a variant that
 * wrote outside its outputs would leave it. */
typedef struct alter_ctx {
  fat_gpu *g;
  const fat_ref_key *key;
  int done;
} alter_ctx;

static int alter_kept(fat_gpu *g, const fat_ref_key *key) {
  fat_ref_entry *e = (fat_ref_entry *)fat_ref_cache_find(fat_gpu_refs(g), key);
  const fat_cuda *cu = fat_gpu_driver(g);
  double was = 0;
  if (!e || !e->dev[0] || cu->cuMemcpyDtoH(&was, (CUdeviceptr)e->dev[0], sizeof was) != CUDA_SUCCESS)
    return 1;
  const double altered_value = was + 1e3;
  return cu->cuMemcpyHtoD((CUdeviceptr)e->dev[0], &altered_value, sizeof altered_value) !=
         CUDA_SUCCESS;
}

static void alter_once(void *ctx) {
  alter_ctx *a = ctx;
  if (!a->done) a->done = alter_kept(a->g, a->key) ? -1 : 1;
}

/* The kept references (ref_cache.h): a second check of a shape on the same
 * seed is answered from the cache (one hit, no new miss) with the figures
 * of the first, and so is a check with a cache that keeps nothing. The
 * guard of what is kept on the GPU: a kept reference altered between two
 * checks is found changed before the next variant runs, dropped and made
 * again (the check passes with the first figures); one altered while a
 * variant runs fails that variant's check ("wrote outside its outputs")
 * and is dropped; one altered and fingerprinted again (as if it had been
 * made so) fails the next check, so a hit is really compared with what was
 * kept. Prints how long a check took with and without the reference on a
 * long shape (not a timed assertion). */
static void test_kept_references(fat_gpu *g, const char *arch, const char *name,
                                 const fat_check_shape *s, int n) {
  fat_build b;
  fat_gpu_kernel k;
  fat_ref_cache *refs = fat_gpu_refs(g);
  if (load(g, name, arch, &b, &k)) {
    fprintf(stderr, "%s: %s\n", name, err);
    check_record(0);
    fat_build_free(&b);
    return;
  }
  for (int i = 0; i < n; i++) {
    const uint64_t seed = TEST_SEED + 1000003u * (unsigned)(i + 1);
    fat_check first, again, unkept, altered;
    fat_ref_cache_clear(refs);
    const unsigned long long hits = refs->hits, misses = refs->misses;
    double t0 = now_s();
    int rc = fat_gpu_check(g, &k, &s[i], seed, &first, err, sizeof err);
    double t1 = now_s();
    rc |= fat_gpu_check(g, &k, &s[i], seed, &again, err, sizeof err);
    double t2 = now_s();
    if (rc != FAT_GPU_OK) {
      fprintf(stderr, "%s on shape %d: %s\n", name, i, err);
      check_record(0);
      continue;
    }
    CHECK(first.passed);
    CHECK_WHY(refs->hits == hits + 1 && refs->misses == misses + 1,
              "%s shape %d: %llu hits, %llu misses (want 1 and 1)", name, i, refs->hits - hits,
              refs->misses - misses);
    CHECK_WHY(same_check(&first, &again), "%s shape %d: rel_l2 %.17g then %.17g from the kept reference",
              name, i, first.rel_l2, again.rel_l2);
    printf("%-46s shape %d %dx%dx%dx%d: check %.1f ms computing the reference, %.1f ms with it kept\n",
           name, i, s[i].batch, s[i].heads, s[i].seqlen_q, s[i].seqlen_k, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    fat_ref_key key = {.direction = k.desc.direction, .dtype = k.desc.dtype, .mask = k.desc.mask,
                       .head_dim = k.desc.head_dim, .shape = s[i], .seed = seed};
    /* Altered between checks: found, dropped, made again. */
    const unsigned long long damaged = refs->damaged;
    REQUIRE(alter_kept(g, &key) == 0);
    rc = fat_gpu_check(g, &k, &s[i], seed, &altered, err, sizeof err);
    CHECK_WHY(rc == FAT_GPU_OK && same_check(&first, &altered) && refs->damaged == damaged + 1,
              "%s shape %d: after an altered kept reference: rc %d, rel_l2 %.17g (first %.17g), "
              "%llu found damaged (want 1)",
              name, i, rc, altered.rel_l2, first.rel_l2, refs->damaged - damaged);
    CHECK(fat_ref_cache_find(refs, &key) != NULL);  /* kept again */
    /* Altered while the variant runs: its check fails, the entry goes. */
    alter_ctx during = {.g = g, .key = &key};
    fat_gpu_set_run_hook(g, alter_once, &during);
    rc = fat_gpu_check(g, &k, &s[i], seed, &altered, err, sizeof err);
    fat_gpu_set_run_hook(g, NULL, NULL);
    /* The first array kept: the forward's O, the backward's dQ. */
    const char *want = k.desc.direction == FAT_BWD
                           ? "wrote outside its outputs: the kept reference dQ changed"
                           : "wrote outside its outputs: the kept reference O changed";
    CHECK_WHY(rc == FAT_GPU_OK && during.done == 1 && !altered.passed && strstr(altered.reason, want),
              "%s shape %d: a kept reference altered during the run: rc %d, passed %d, reason \"%s\"",
              name, i, rc, altered.passed, altered.reason);
    CHECK(fat_ref_cache_find(refs, &key) == NULL);
    /* Altered and fingerprinted again: the next check is judged against
     * it, and must fail. */
    rc = fat_gpu_check(g, &k, &s[i], seed, &altered, err, sizeof err);
    CHECK_WHY(rc == FAT_GPU_OK && same_check(&first, &altered), "%s shape %d: rc %d remaking", name, i,
              rc);
    fat_ref_entry *e = (fat_ref_entry *)fat_ref_cache_find(refs, &key);
    REQUIRE(e != NULL && alter_kept(g, &key) == 0 &&
            fat_gpu_ref_fingerprint(g, e, err, sizeof err) == FAT_GPU_OK);
    rc = fat_gpu_check(g, &k, &s[i], seed, &altered, err, sizeof err);
    CHECK_WHY(rc == FAT_GPU_OK && !altered.passed && !strstr(altered.reason, "outside"),
              "%s shape %d: an altered kept reference passed (reason \"%s\")", name, i,
              altered.reason);
    /* Nothing kept (a budget of one byte): the same figures. */
    fat_ref_cache_clear(refs);
    fat_ref_cache_init(refs, 1);
    rc = fat_gpu_check(g, &k, &s[i], seed, &unkept, err, sizeof err);
    CHECK_WHY(rc == FAT_GPU_OK && same_check(&first, &unkept),
              "%s shape %d: rel_l2 %.17g kept, %.17g without the cache", name, i, first.rel_l2,
              unkept.rel_l2);
    fat_ref_cache_init(refs, 0);
  }
out:
  fat_ref_cache_clear(refs);
  fat_ref_cache_init(refs, 0);
  fat_gpu_kernel_unload(g, &k);
  fat_build_free(&b);
}

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
  fat_gen_query qb = {.direction = FAT_BWD, .arch = arch, .smem_limit = info.smem_per_block_optin};
  fat_variant *bwd = NULL;
  size_t n_bwd = 0;
  if (!gen || fat_gen_variants(gen, &q, &space, &n_space, NULL, NULL, err, sizeof err) ||
      fat_gen_variants(gen, &qb, &bwd, &n_bwd, NULL, NULL, err, sizeof err) ||
      fat_gpu_compile_support(arch, &util, &ref, err, sizeof err) ||
      fat_gpu_load_support(g, util.cubin, ref.cubin, err, sizeof err) != FAT_GPU_OK) {
    fprintf(stderr, "setup: %s\n", err);
    check_record(0);
    goto out;
  }
  /* One space of both directions: variants are looked up by name. */
  fat_variant *both = realloc(space, (n_space + n_bwd) * sizeof *both);
  if (!both) {
    fprintf(stderr, "out of memory\n");
    check_record(0);
    goto out;
  }
  space = both;
  memcpy(space + n_space, bwd, n_bwd * sizeof *bwd);
  n_space += n_bwd;
  free(bwd);

  /* Windows: causal-style (left, 0), both sides, right only, (0, 0) (the
   * diagonal alone), one that shows the first rows nothing (300 queries
   * over 45 keys, right bound 0: rows 0..254 sit before every key), and
   * a long one whose skipped tiles matter. */
  const fat_check_shape windows[] = {
      {FAT_SHAPE_DIMS(1, 4, 2, 1000, 1000), .window_left = 100, .window_right = 0},
      {FAT_SHAPE_DIMS(2, 3, 3, 777, 1300), .window_left = 50, .window_right = 30},
      {FAT_SHAPE_DIMS(1, 2, 2, 17, 17), .window_left = -1, .window_right = 5},
      {FAT_SHAPE_DIMS(1, 2, 1, 129, 129), .window_left = 0, .window_right = 0},
      {FAT_SHAPE_DIMS(1, 2, 2, 300, 45), .window_left = 10, .window_right = 0},
      {FAT_SHAPE_DIMS(1, 2, 2, 4097, 4097), .window_left = 1024, .window_right = 0},
  };
  check_variant(g, arch, "fwd.mma80.bf16.d128.local.m128n64w4s1", windows, N(windows));
  check_variant(g, arch, "fwd.mma80.fp16.d64.local.m64n32w4s2", windows, N(windows));
  check_variant(g, arch, "fwd.mma80.bf16.d256.local.m128n64w8s1", windows, 3);

  /* Head dims below the template's, no padded copy. */
  const fat_check_shape pad80[] = {{FAT_SHAPE_DIMS(2, 3, 3, 129, 257), .head_dim = 80},
                                   {FAT_SHAPE_DIMS(1, 4, 2, 1000, 1000), .head_dim = 88}};
  const fat_check_shape pad40[] = {{FAT_SHAPE_DIMS(2, 3, 3, 129, 257), .head_dim = 40}};
  const fat_check_shape pad200[] = {{FAT_SHAPE_DIMS(1, 2, 2, 300, 200), .head_dim = 200}};
  check_variant(g, arch, "fwd.mma80.bf16.d96.none.m128n64w4s1", pad80, N(pad80));
  check_variant(g, arch, "fwd.mma80.fp16.d96.causal.m128n64w4s1", pad80, N(pad80));
  check_variant(g, arch, "fwd.mma80.bf16.d64.causal.m128n64w4s1", pad40, N(pad40));
  check_variant(g, arch, "fwd.mma80.bf16.d256.none.m128n64w8s1", pad200, N(pad200));
  /* The native 32. */
  const fat_check_shape plain[] = {{FAT_SHAPE_DIMS(2, 3, 3, 1000, 1000)},
                                   {FAT_SHAPE_DIMS(1, 4, 2, 17, 4097)}};
  check_variant(g, arch, "fwd.mma80.bf16.d32.causal.m128n64w4s1", plain, N(plain));
  check_variant(g, arch, "fwd.mma80.fp16.d32.none.m128n64w4s1", plain, N(plain));

  /* Soft-cap (Gemma 2 uses 50 on its attention scores). */
  const fat_check_shape capped[] = {{FAT_SHAPE_DIMS(1, 4, 2, 500, 700), .softcap = 50.f},
                                    {FAT_SHAPE_DIMS(1, 2, 2, 300, 300), .softcap = 5.f}};
  check_variant(g, arch, "fwd.mma80.bf16.d128.causal.m128n64w4s1", capped, N(capped));
  check_variant(g, arch, "fwd.mma80.fp16.d128.none.m128n64w4s1", capped, N(capped));

  /* Variable-length batches, with per-sequence key counts. */
  const fat_check_shape varlen[] = {{FAT_SHAPE_DIMS(3, 4, 2, 300, 500), .varlen = 1},
                                    {FAT_SHAPE_DIMS(4, 2, 2, 1000, 1000), .varlen = 1},
                                    {FAT_SHAPE_DIMS(3, 4, 4, 500, 77), .varlen = 1}};
  check_variant(g, arch, "fwd.mma80.bf16.d128.none.m128n64w4s1", varlen, N(varlen));
  check_variant(g, arch, "fwd.mma80.bf16.d128.causal.m128n64w4s1", varlen, N(varlen));
  const fat_check_shape varlen_local[] = {
      {FAT_SHAPE_DIMS(3, 4, 2, 300, 500), .varlen = 1, .window_left = 64, .window_right = 8}};
  check_variant(g, arch, "fwd.mma80.fp16.d64.local.m64n32w4s2", varlen_local, 1);

  /* Decoding: one and 16 queries against long caches, grouped heads. */
  const fat_check_shape decode[] = {{FAT_SHAPE_DIMS(2, 8, 2, 1, 4097)},
                                    {FAT_SHAPE_DIMS(2, 8, 2, 16, 4097)},
                                    {FAT_SHAPE_DIMS(1, 8, 2, 1, 65536)},
                                    {FAT_SHAPE_DIMS(1, 8, 1, 16, 1000)},
                                    {FAT_SHAPE_DIMS(3, 8, 2, 16, 700), .varlen = 1}};
  static const char *const decoders[] = {
      "fwd.splitkv.bf16.d128.causal.m64n64w4s2.g1x8", "fwd.splitkv.bf16.d128.causal.m64n64w4s2.g0x16",
      "fwd.splitkv.bf16.d128.none.m64n128w4s2.g1x1", "fwd.splitkv.fp16.d64.causal.m64n64w4s3.g1x32",
      "fwd.mma80.bf16.d128.causal.m128n64w4s1"};
  for (int i = 0; i < N(decoders); i++) check_variant(g, arch, decoders[i], decode, N(decode));

  /* The combination: causal-style window, grouped-query heads, uneven
   * lengths, head dim 88 on the 96 template, variable lengths, soft-cap. */
  const fat_check_shape all[] = {
      {FAT_SHAPE_DIMS(3, 8, 2, 300, 1000), .window_left = 200, .window_right = 0, .head_dim = 88,
       .varlen = 1, .softcap = 30.f},
      {FAT_SHAPE_DIMS(2, 8, 2, 1, 4097), .window_left = 1000, .window_right = 0, .head_dim = 88}};
  check_variant(g, arch, "fwd.mma80.bf16.d96.local.m128n64w4s1", all, N(all));
  check_variant(g, arch, "fwd.splitkv.bf16.d96.local.m64n64w4s2.g1x4", all, N(all));

  /* The backward's share: windows and padded head dims (dQ, dK and dV
   * against the fp64 gradients), both dQ strategies, with the prefetch. */
  const fat_check_shape bwd_shapes[] = {
      {FAT_SHAPE_DIMS(1, 4, 2, 1000, 1000), .window_left = 100, .window_right = 0},
      {FAT_SHAPE_DIMS(2, 3, 3, 300, 500), .window_left = 50, .window_right = 30},
      {FAT_SHAPE_DIMS(1, 2, 2, 300, 45), .window_left = 10, .window_right = 0},
      {FAT_SHAPE_DIMS(1, 4, 2, 257, 129), .window_left = -1, .window_right = 7, .head_dim = 88}};
  check_variant(g, arch, "bwd.mma80.bf16.d96.local.m64n64w4.atomic", bwd_shapes, N(bwd_shapes));
  check_variant(g, arch, "bwd.mma80.fp16.d96.local.m64n64w4.separate", bwd_shapes, N(bwd_shapes));
  const fat_check_shape bwd_pad[] = {{FAT_SHAPE_DIMS(2, 3, 3, 129, 257), .head_dim = 80},
                                     {FAT_SHAPE_DIMS(1, 4, 2, 1000, 1000), .head_dim = 40}};
  check_variant(g, arch, "bwd.mma80.bf16.d128.causal.m64n128w8.atomic.p1", &bwd_pad[0], 1);
  check_variant(g, arch, "bwd.mma80.bf16.d64.none.m32n128w4.atomic.p1", &bwd_pad[1], 1);
  check_variant(g, arch, "bwd.mma80.bf16.d64.causal.m32n128w4.separate.p1", &bwd_pad[1], 1);

  /* The references kept for the variants of a problem (a separate-mode
   * backward: its gradients are the same bits run to run). */
  const fat_check_shape kept[] = {{FAT_SHAPE_DIMS(1, 2, 2, 8192, 8192)},
                                  {FAT_SHAPE_DIMS(3, 4, 2, 300, 500), .varlen = 1, .softcap = 30.f},
                                  {FAT_SHAPE_DIMS(2, 3, 3, 777, 1300), .window_left = 50,
                                   .window_right = 30, .head_dim = 88}};
  test_kept_references(g, arch, "fwd.mma80.bf16.d128.causal.m128n64w4s1", kept, 2);
  test_kept_references(g, arch, "fwd.mma80.fp16.d96.local.m128n64w4s1", &kept[2], 1);
  test_kept_references(g, arch, "bwd.mma80.fp16.d96.local.m64n64w4.separate", &kept[2], 1);
  const fat_check_shape kept_bwd[] = {{FAT_SHAPE_DIMS(1, 2, 2, 4096, 4096)}};
  test_kept_references(g, arch, "bwd.mma80.bf16.d64.causal.m32n128w4.separate.p1", kept_bwd, 1);
out:
  for (size_t i = 0; i < n_space; i++) fat_variant_free(&space[i]);
  free(space);
  if (gen) fat_gen_close(gen);
  fat_build_free(&util);
  fat_build_free(&ref);
  fat_gpu_close(g);
  return check_summary("test_gpu_features");
}
