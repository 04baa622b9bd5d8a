/* SPDX-License-Identifier: MIT */
/* On a GPU: the backward variants' gradients against the fp64 reference.
 * For head dims 64 and 128, bf16 and fp16, causal and not, each dQ strategy
 * (atomic and separate) of the 64x64 configuration passes on a small odd
 * shape, a 2x3x1000x1000 shape, a causal-style 300 x 45 shape whose first
 * 255 rows see no key (zero gradients, never NaN) and a grouped-query
 * shape; head dims 96, 192 and 256 are checked once each. The
 * deterministic modes (mma80's separate dQ pass, ws90's ordered adds) give
 * bit-identical gradients on a second run, on every shape checked. The
 * check can fail: a causal kernel judged as unmasked is rejected. Through
 * the worker, as the tuner drives it, the default is checked and timed, and
 * both strategies are timed on a benchmark problem (backward TFLOP/s =
 * 2.5 x forward FLOPs / time). On sm_90a the wgmma90 and ws90 families'
 * configurations are checked too (all of them at bf16 d64 and d128, on a
 * shape of whole tiles besides: ws90 adds those dQ rows by bulk
 * reductions, partial ones from registers; ws90's persistent ones on a
 * shape of more key blocks than SMs too, the GROUPED ones (bf16) on one
 * of several groups of (key head, batch) pairs, the last partial, the
 * DQ_SHIFT ones on one whose pairs a round of 132 blocks splits). Prints a table of
 * rel_l2 per gradient. FATUNE_TEST_FAMILY=NAME checks only that family's
 * configurations (mma80f, or a Hopper family: a template change's first run
 * on the GPU). mma80f's (variable lengths, the soft-cap) run on every GPU.
 * Exits 77 (skipped) when no CUDA driver or device is present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "cuda_api.h"
#include "gen.h"
#include "gpu_run.h"
#include "tolerance.h"
#include "worker.h"
#include "check.h"
#include "gpu_test.h"

#define ERRLEN 4096
#define TEST_SEED 20240611u
#define TEST_REPS 10
#define TEST_TIMEOUT_S 300.0
#define WRONG_MASK_MIN_REL_L2 0.1  /* a kernel judged against the wrong mask is off by far more */

static char err[ERRLEN];

/* The backward space for ARCH, generated once; variants are looked up by name. */
static fat_variant *space;
static size_t n_space;

static const fat_variant *variant(const char *name) { return gpu_test_variant(space, n_space, name); }

static void print_row(const char *name, const fat_check_shape *s, const fat_bwd_check *bc,
                      const fat_check *c) {
  printf("%-46s %dx%dx%dx%-5d %9.2e %9.2e %9.2e %5s  %s\n", name, s->batch, s->heads, s->seqlen_q,
         s->seqlen_k, bc->rel_l2[FAT_GRAD_DQ], bc->rel_l2[FAT_GRAD_DK], bc->rel_l2[FAT_GRAD_DV],
         bc->deterministic < 0 ? "-" : bc->deterministic ? "yes" : "NO", c->reason);
}

/* Checks variant NAME on each of SHAPES; every check must pass (and, in
 * a deterministic mode, be bit-identical across two runs). */
static void check_variant(fat_gpu *g, const char *arch, const char *name, const fat_check_shape *shapes,
                          int n) {
  const fat_variant *v = variant(name);
  fat_build b;
  fat_gpu_kernel k;
  CHECK(v != NULL);
  if (!v) {
    fprintf(stderr, "%s is not in the %s backward space\n", name, arch);
    return;
  }
  if (gpu_test_load(g, v, arch, &b, &k, err, sizeof err)) {
    fprintf(stderr, "loading %s: %s\n", name, err);
    check_record(0);
    fat_build_free(&b);
    return;
  }
  /* The deterministic modes: mma80's separate dQ pass, ws90's ordered adds. */
  const int deterministic = strstr(name, ".separate") != NULL || strstr(name, ".ordered") != NULL;
  for (int i = 0; i < n; i++) {
    fat_bwd_check bc;
    fat_check c;
    int rc = fat_gpu_check_bwd(g, &k, &shapes[i], TEST_SEED + (uint64_t)i, &bc, &c, err, sizeof err);
    if (rc != FAT_GPU_OK) {
      fprintf(stderr, "%s: %s\n", name, err);
      check_record(0);
      if (rc == FAT_GPU_FATAL) exit(1);
      continue;
    }
    print_row(name, &shapes[i], &bc, &c);
    CHECK(c.passed);
    CHECK(c.nonfinite == 0);
    CHECK(bc.deterministic == (deterministic ? 1 : -1));
  }
  fat_gpu_kernel_unload(g, &k);
  fat_build_free(&b);
}

/* The check is not a rubber stamp: a causal kernel judged as if it were
 * unmasked (the reference then sees every key) fails on its gradients. */
static void check_wrong_mask_fails(fat_gpu *g, const char *arch) {
  const fat_variant *v = variant("bwd.mma80.bf16.d64.causal.m64n64w4.separate");
  fat_build b;
  fat_gpu_kernel k;
  CHECK(v != NULL);
  if (!v) return;
  if (gpu_test_load(g, v, arch, &b, &k, err, sizeof err)) {
    fprintf(stderr, "loading %s: %s\n", v->name, err);
    check_record(0);
    fat_build_free(&b);
    return;
  }
  k.desc.mask = FAT_MASK_NONE;
  const fat_check_shape s = {FAT_SHAPE_DIMS(1, 2, 2, 200, 200)};
  fat_bwd_check bc;
  fat_check c;
  int rc = fat_gpu_check_bwd(g, &k, &s, TEST_SEED, &bc, &c, err, sizeof err);
  CHECK(rc == FAT_GPU_OK);
  if (rc == FAT_GPU_OK) {
    print_row("(causal kernel vs unmasked reference)", &s, &bc, &c);
    CHECK(!c.passed);
    CHECK(c.rel_l2 > WRONG_MASK_MIN_REL_L2);
    CHECK(!strncmp(c.reason, "dQ rel_l2 ", strlen("dQ rel_l2 ")));
  }
  fat_gpu_kernel_unload(g, &k);
  fat_build_free(&b);
}

/* Through the worker: the default checked and timed, then both strategies
 * timed together on one benchmark problem. */
static void check_worker(const char *arch) {
  fat_worker_options opts;
  fat_worker *w = NULL;
  fat_gpu_info info;
  char reason[ERRLEN];
  fat_worker_options_default(&opts);
  opts.timeout_base_s = TEST_TIMEOUT_S;
  opts.time.reps = TEST_REPS;
  if (fat_worker_start(0, &opts, &w, &info, err, sizeof err)) {
    fprintf(stderr, "worker: %s\n", err);
    check_record(0);
    return;
  }
  static const char *const names[] = {"bwd.mma80.bf16.d128.none.m64n64w4.atomic",
                                      "bwd.mma80.bf16.d128.none.m64n64w4.separate"};
  enum { N = sizeof names / sizeof names[0] };
  fat_build b[N];
  const fat_variant *v[N];
  memset(b, 0, sizeof b);
  int ok = 1;
  for (int i = 0; i < N && ok; i++) {
    v[i] = variant(names[i]);
    ok = v[i] && !fat_compile_one(v[i]->name, v[i]->source, arch, &b[i], err, sizeof err) && b[i].ok;
  }
  CHECK(ok);
  if (ok) {
    /* FlashAttention's benchmark shape for seqlen 2048: 8 x 2048 tokens, 16 heads of 128. */
    const fat_problem p = {.direction = FAT_BWD, .dtype = FAT_BF16, .mask = FAT_MASK_NONE,
                           .head_dim = 128, .batch = 8, .heads = 16, .heads_k = 16,
                           .seqlen_q = 2048, .seqlen_k = 2048};
    const fat_check_shape shapes[] = {{FAT_SHAPE_DIMS(1, 2, 2, 77, 77)},
                                      {FAT_SHAPE_DIMS(1, 4, 2, 129, 65)}};
    fat_check checks[2];
    fat_timing t, ti[N];
    int timed = 0;
    int st = fat_worker_evaluate(w, v[0], &b[0], shapes, 2, &p, 0, checks, &t, &timed, reason, sizeof reason);
    if (st != FAT_WORKER_OK) fprintf(stderr, "%s: %s\n", names[0], reason);
    CHECK(st == FAT_WORKER_OK);
    for (int i = 0; st == FAT_WORKER_OK && i < 2; i++) {
      printf("worker %-39s %dx%dx%dx%d: worst rel_l2 %.2e %s\n", names[0], checks[i].batch,
             checks[i].heads, checks[i].seqlen_q, checks[i].seqlen_k, checks[i].rel_l2, checks[i].reason);
      CHECK(checks[i].passed);
    }
    CHECK(timed == 1);
    const fat_variant *const vv[N] = {v[0], v[1]};
    const fat_build *const bb[N] = {&b[0], &b[1]};
    st = fat_worker_time_interleaved(w, vv, bb, N, &p, ti, reason, sizeof reason);
    if (st != FAT_WORKER_OK) fprintf(stderr, "interleaved: %s\n", reason);
    CHECK(st == FAT_WORKER_OK);
    for (int i = 0; st == FAT_WORKER_OK && i < N; i++) {
      printf("timed  %-39s bf16 d128 s2048 (8x16): %.3f ms, %.1f TFLOP/s (backward, 2.5x forward FLOPs)\n",
             names[i], ti[i].median_ms, ti[i].tflops);
      CHECK(ti[i].median_ms > 0 && ti[i].tflops > 0);
    }
    printf("peak device memory of this backward: %.3f GB atomic, %.3f GB separate (linear in seqlen)\n",
           fat_bwd_peak_bytes(&p, 0) / 1e9, fat_bwd_peak_bytes(&p, 1) / 1e9);
  }
  for (int i = 0; i < N; i++) fat_build_free(&b[i]);
  fat_worker_stop(w);
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
  fat_gen_query q = {.direction = FAT_BWD, .arch = arch, .smem_limit = info.smem_per_block_optin};
  if (!gen || fat_gen_variants(gen, &q, &space, &n_space, NULL, NULL, err, sizeof err) ||
      fat_gpu_compile_support(arch, &util, &ref, err, sizeof err) ||
      fat_gpu_load_support(g, util.cubin, ref.cubin, err, sizeof err) != FAT_GPU_OK) {
    fprintf(stderr, "setup: %s\n", err);
    check_record(0);
    goto out;
  }
  printf("tolerances: rel_l2 per gradient <= %.1e (bf16), %.1e (fp16)\n", FAT_TOL_BWD_BF16_REL_L2,
         FAT_TOL_BWD_FP16_REL_L2);
  printf("%-46s %-15s %9s %9s %9s %5s  %s\n", "variant", "shape", "dQ", "dK", "dV", "det", "verdict");

  /* Odd lengths; causal 300 x 45: rows 0..254 see no key; grouped-query heads. */
  const fat_check_shape shapes[] = {{FAT_SHAPE_DIMS(1, 2, 2, 77, 77)}, {FAT_SHAPE_DIMS(2, 3, 3, 1000, 1000)},
                                    {FAT_SHAPE_DIMS(1, 2, 2, 300, 45)}, {FAT_SHAPE_DIMS(1, 4, 2, 129, 65)}};
  const int n_shapes = sizeof shapes / sizeof shapes[0];
  static const char *const dtypes[] = {"bf16", "fp16"}, *const masks[] = {"none", "causal"},
                           *const modes[] = {"atomic", "separate"};
  static const int dims[] = {64, 128};
  /* FATUNE_TEST_FAMILY=NAME: that family's checks alone; FATUNE_TEST_PARAM=
   * "NAME=VALUE ...": of the Hopper families' variants only those with every
   * one (a new schedule's part of the space, e.g. "DQ_MODE=ordered
   * BLOCK_N=128"); FATUNE_TEST_HEAD_DIM=D: of those only head dim D's. */
  const char *only = getenv("FATUNE_TEST_FAMILY"), *param = getenv("FATUNE_TEST_PARAM");
  const char *only_dim = getenv("FATUNE_TEST_HEAD_DIM");
  char *dim_end = NULL;
  const long head_dim_only = only_dim && *only_dim ? strtol(only_dim, &dim_end, 10) : 0;
  if (only_dim && *only_dim && (*dim_end || head_dim_only < 8 || head_dim_only > 256 || head_dim_only % 8)) {
    fprintf(stderr, "test_gpu_bwd: FATUNE_TEST_HEAD_DIM=%s: not a head dim (8 to 256, a multiple of 8)\n", only_dim);
    check_record(0);
    goto out;
  }
  const int all = !(only && *only);
  if (all) {
    for (size_t di = 0; di < 2; di++)
      for (size_t ti = 0; ti < 2; ti++)
        for (size_t mi = 0; mi < 2; mi++)
          for (size_t oi = 0; oi < 2; oi++) {
            char name[128];
            snprintf(name, sizeof name, "bwd.mma80.%s.d%d.%s.m64n64w4.%s", dtypes[ti], dims[di], masks[mi],
                     modes[oi]);
            check_variant(g, arch, name, shapes, n_shapes);
          }
    /* The other head dims, once each, on the shape with empty rows. */
    check_variant(g, arch, "bwd.mma80.bf16.d96.causal.m64n64w8.atomic", &shapes[2], 1);
    check_variant(g, arch, "bwd.mma80.fp16.d192.none.m64n64w8.separate", &shapes[0], 1);
    check_variant(g, arch, "bwd.mma80.bf16.d256.causal.m64n64w8.separate", &shapes[2], 1);
    check_variant(g, arch, "bwd.mma80.bf16.d256.none.m64n64w8.atomic", &shapes[0], 1);
  }
  /* mma80f, the family with variable lengths and the soft-cap: packed
   * batches of uneven sequences (the shortest one row, odd ones using part
   * of their keys through seqused_k, whose unused K and V rows are NaN:
   * poisoned, so a kernel that reads them fails), causal with query and
   * key lengths that differ per sequence, grouped-query heads; the soft-cap
   * (2: tanh bends most scores of random inputs) packed and dense. Every
   * head dim, both dtypes, both dQ modes and masks at the defaults' tiles
   * (separate: bit-identical across two runs), the prefetch and the local
   * mask once each. */
  if (all || !strcmp(only, "mma80f")) {
    const fat_check_shape featured[] = {
        {FAT_SHAPE_DIMS(3, 4, 2, 300, 300), .varlen = 1},
        {FAT_SHAPE_DIMS(4, 2, 2, 129, 200), .varlen = 1, .softcap = 2.f},
        {FAT_SHAPE_DIMS(1, 2, 2, 77, 77), .softcap = 2.f},
        {FAT_SHAPE_DIMS(2, 3, 3, 300, 45), .varlen = 1}};
    const int n_featured = sizeof featured / sizeof featured[0];
    static const int feature_dims[] = {64, 96, 128, 192, 256};
    for (size_t di = 0; di < sizeof feature_dims / sizeof feature_dims[0]; di++)
      for (size_t ti = 0; ti < 2; ti++)
        for (size_t mi = 0; mi < 2; mi++)
          for (size_t oi = 0; oi < 2; oi++) {
            const int d = feature_dims[di];
            /* Both dtypes, masks and modes at d64 and d128; bf16 at the others. */
            if (d != 64 && d != 128 && ti == 1) continue;
            char name[128];
            snprintf(name, sizeof name, "bwd.mma80f.%s.d%d.%s.m64n64w%d.%s", dtypes[ti], d, masks[mi],
                     d <= 64 ? 4 : 8, modes[oi]);
            check_variant(g, arch, name, featured, n_featured);
          }
    check_variant(g, arch, "bwd.mma80f.bf16.d128.causal.m64n64w8.atomic.p1", featured, n_featured);
    const fat_check_shape local[] = {
        {FAT_SHAPE_DIMS(3, 4, 2, 333, 300), .varlen = 1, .window_left = 70, .window_right = 9},
        {FAT_SHAPE_DIMS(3, 4, 2, 333, 300), .varlen = 1, .window_left = 70, .window_right = 9,
         .softcap = 2.f}};
    check_variant(g, arch, "bwd.mma80f.fp16.d128.local.m64n64w8.atomic", local, 2);
  }
  /* Hopper's wgmma families: every configuration at bf16 d64, d128, d192
   * (ws90) and d256 (two warpgroups sharing the keys), causal and not, on
   * all four shapes; fp16, the padded d96 and sliding windows once each,
   * d96 once more at head dim 88, and the bf16 ones past 128 once more at
   * their head dim less 40 (152, 216: the runtime's calls of a head dim
   * below the template's). */
  if (!strcmp(arch, "sm_90a")) {
    const fat_check_shape window = {FAT_SHAPE_DIMS(1, 4, 2, 333, 300), .window_left = 70,
                                    .window_right = 9};
    /* More key blocks than the H200's 132 SMs (192 of 128 keys, 384 of 64),
     * grouped-query heads and partial tiles: a persistent block's second
     * and third items, its rings and barriers carried over. */
    const fat_check_shape many = {FAT_SHAPE_DIMS(24, 8, 4, 200, 200)},
                          many_window = {FAT_SHAPE_DIMS(24, 8, 4, 333, 300), .window_left = 70,
                                         .window_right = 9};
    /* A head dim below the d96 variants' 128-column template that ends
     * inside a 16-column group of the accumulator's order (88): whole
     * 64-row blocks (ws90: through the bulk reduction, rows 128 floats
     * apart) and a partial one. */
    const fat_check_shape padded = {.batch = 2, .heads = 4, .heads_k = 2, .seqlen_q = 200, .seqlen_k = 170,
                                    .head_dim = 88};
    /* ws90's GROUPED (causal): pairs of (key head, batch) in groups whose
     * queries' Q, dO and dQ accumulator fit 16 MiB -- at 4096 queries and
     * four query heads a key head, two pairs (8 MiB each) on the 64-column
     * template, one (16 MiB) on the 128-column: of three pairs a group of
     * two and a partial one, or three groups of one. */
    const fat_check_shape grouped = {FAT_SHAPE_DIMS(1, 12, 3, 4096, 4096)};
    /* ws90's DQ_SHIFT (ordered, persistent): 18 (key head, batch) pairs of
     * 8 key blocks of 128 (16 of 64), 144 or 288 items, so that a round of
     * the H100's or H200's 132 blocks ends inside a pair (its chunk in the
     * next round ranks after the first's at every tile), four query heads
     * a key head (64 tiles a walk) and a partial last query tile. */
    const fat_check_shape shifted = {FAT_SHAPE_DIMS(9, 8, 2, 1000, 1000)};
    for (size_t i = 0; i < n_space; i++) {
      const fat_variant *v = &space[i];
      if (strcmp(v->family, "wgmma90") != 0 && strcmp(v->family, "ws90") != 0) continue;
      if (!all && strcmp(v->family, only) != 0) continue;
      if (!fat_params_have_all(v->params, param)) continue;
      if (head_dim_only && v->head_dim != head_dim_only) continue;
      if (v->dtype == FAT_BF16 && v->head_dim != 96 && v->mask != FAT_MASK_LOCAL)
        check_variant(g, arch, v->name, shapes, n_shapes);
      else if (v->mask == FAT_MASK_LOCAL && v->head_dim >= 128)
        check_variant(g, arch, v->name, &window, 1);
      else if (v->mask != FAT_MASK_LOCAL)
        check_variant(g, arch, v->name, &shapes[v->mask == FAT_MASK_CAUSAL ? 2 : 3], 1);
      if (v->head_dim == 96 && v->mask != FAT_MASK_LOCAL) check_variant(g, arch, v->name, &padded, 1);
      if (v->head_dim > 128 && v->dtype == FAT_BF16 && v->mask != FAT_MASK_LOCAL) {
        fat_check_shape below = padded;
        below.head_dim = v->head_dim - 40;
        check_variant(g, arch, v->name, &below, 1);
      }
      if (strstr(v->params, "PERSISTENT=1") && (v->mask != FAT_MASK_LOCAL || v->head_dim >= 128))
        check_variant(g, arch, v->name, v->mask == FAT_MASK_LOCAL ? &many_window : &many, 1);
      if (strstr(v->params, "GROUPED=1") && v->dtype == FAT_BF16) check_variant(g, arch, v->name, &grouped, 1);
      if (strstr(v->params, "DQ_SHIFT=1")) check_variant(g, arch, v->name, &shifted, 1);
    }
  }
  if (all) {
    check_wrong_mask_fails(g, arch);
    check_worker(arch);
  }
out:
  for (size_t i = 0; i < n_space; i++) fat_variant_free(&space[i]);
  free(space);
  if (gen) fat_gen_close(gen);
  fat_build_free(&util);
  fat_build_free(&ref);
  fat_gpu_close(g);
  return check_summary("test_gpu_bwd");
}
