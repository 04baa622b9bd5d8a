/* SPDX-License-Identifier: MIT */
/* On a GPU: the warp-specialised forward (generator/family_ws90.lua,
 * templates/fwd_ws90.cu) against the fp64 reference, each check on fresh
 * random inputs with poisoned outputs (fat_gpu_check; a variable-length
 * batch's unused cache rows are NaN): every combination of its schedule
 * parameters (key tile, OVERLAP, PINGPONG, PERSISTENT without a mask) at
 * bf16 d128 for every mask, and
 * at d64, d192, d256 for none and causal, a sample at fp16 and d96 (the
 * 128-column template); on lengths 1, 17, 1000 and 4097, causal with
 * seqlen_q above and below seqlen_k (rows that see no key), grouped and
 * multi-query heads, variable lengths with seqused_k, sliding windows,
 * head dims below the template's and the soft-cap; e4m3 (fp8 inputs, O in
 * bf16) every combination at d128 for every mask and those with both
 * schedules on at d64, d96, d192 and d256 for none and causal. Prints one
 * row per check and a count per variant. FATUNE_TEST_PARAM=NAME=VALUE
 * and FATUNE_TEST_DTYPE=e4m3 (or fp16, bf16) narrow the pick. Exits 77
 * (skipped) when no CUDA driver or device is present. */
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
#define TEST_SEED 20261201u
#define COMPILE_JOBS 16

#define N(a) ((int)(sizeof a / sizeof a[0]))

static char err[ERRLEN];

/* Shapes every variant runs, whatever its mask. */
static const fat_check_shape common[] = {
    {FAT_SHAPE_DIMS(1, 2, 2, 1, 1)},                   /* one query, one key */
    {FAT_SHAPE_DIMS(2, 3, 3, 17, 17)},                 /* one partial tile */
    {FAT_SHAPE_DIMS(1, 4, 2, 1000, 1000)},             /* grouped heads, a partial last tile */
    {FAT_SHAPE_DIMS(1, 2, 1, 4097, 4097)},             /* multi-query, one row past a tile */
    {FAT_SHAPE_DIMS(2, 2, 2, 300, 1000)},              /* fewer queries than keys */
    {FAT_SHAPE_DIMS(1, 2, 2, 1000, 300)},              /* more: causal's first rows see nothing */
    {FAT_SHAPE_DIMS(4, 8, 2, 1000, 1000)},             /* 256 query blocks: resident blocks loop, draw */
    {FAT_SHAPE_DIMS(3, 4, 2, 300, 500), .varlen = 1},  /* packed, seqused_k, NaN past it */
    {FAT_SHAPE_DIMS(4, 2, 2, 1000, 1000), .varlen = 1},
    {FAT_SHAPE_DIMS(1, 4, 2, 500, 700), .softcap = 50.f},
};
/* A head dim below the template's (no padded copy), per template; e4m3's a
 * multiple of 16 (its rows, heads x head dim bytes, are tensor-map strides:
 * multiples of 16 bytes). */
static int padded_head_dim(int template_dim, fat_dtype dtype) {
  if (dtype == FAT_E4M3) return template_dim - 16;
  return template_dim == 64 ? 40 : template_dim - 24;
}

/* Windows for the local variants: causal-style, both sides, right only,
 * the diagonal alone, one that shows the first rows nothing, a long one. */
static const fat_check_shape windows[] = {
    {FAT_SHAPE_DIMS(1, 4, 2, 1000, 1000), .window_left = 100, .window_right = 0},
    {FAT_SHAPE_DIMS(4, 8, 2, 1000, 1000), .window_left = 100, .window_right = 0},  /* 256 blocks, drawn */
    {FAT_SHAPE_DIMS(2, 3, 3, 777, 1300), .window_left = 50, .window_right = 30},
    {FAT_SHAPE_DIMS(1, 2, 2, 17, 17), .window_left = -1, .window_right = 5},
    {FAT_SHAPE_DIMS(1, 2, 1, 129, 129), .window_left = 0, .window_right = 0},
    {FAT_SHAPE_DIMS(1, 2, 2, 300, 45), .window_left = 10, .window_right = 0},
    {FAT_SHAPE_DIMS(1, 2, 2, 4097, 4097), .window_left = 1024, .window_right = 0},
    {FAT_SHAPE_DIMS(3, 4, 2, 300, 500), .varlen = 1, .window_left = 64, .window_right = 8},
};

/* Whether the ws90 variant V is among those this test runs. */
static int tested(const fat_variant *v, const char *param, int dtype) {
  if (strcmp(v->family, "ws90") != 0) return 0;
  if (param && *param && !strstr(v->params, param)) return 0;
  if (dtype >= 0 && (int)v->dtype != dtype) return 0;
  const int d = v->head_dim;
  /* e4m3: the transposed V, the fp8 products and P's permuted keys on
   * every schedule at d128; on each other slab width (64-byte rows: d64,
   * d192; d96 on the 128 template) with both schedules on. */
  if (v->dtype == FAT_E4M3 && d == 128) return 1;
  if (v->dtype == FAT_E4M3)
    return v->mask != FAT_MASK_LOCAL && strstr(v->params, "OVERLAP=1") && strstr(v->params, "PINGPONG=1");
  if (v->dtype == FAT_BF16 && d == 128) return 1;                       /* every mask */
  if (v->dtype == FAT_BF16 && (d == 64 || d == 192 || d == 256)) return v->mask != FAT_MASK_LOCAL;
  /* d96 on its own 96-column template (SLAB 32, the 64-byte swizzle):
   * every combination, none and causal */
  if (v->dtype == FAT_BF16 && d == 96 && strstr(v->params, "SLAB=32")) return v->mask != FAT_MASK_LOCAL;
  /* fp16 and d96: one tile, both schedules on, not persistent. */
  const char *tag = ".m128n128s2op";
  const size_t len = strlen(v->name), tag_len = strlen(tag);
  if ((v->dtype == FAT_FP16 && d == 128) || (v->dtype == FAT_BF16 && d == 96))
    return v->mask != FAT_MASK_LOCAL && len > tag_len && !strcmp(v->name + len - tag_len, tag);
  return 0;
}

static unsigned seed_counter;

/* Checks the built variant V on N shapes; one row per check. */
static void check_on(fat_gpu *g, const fat_variant *v, const fat_build *b, const fat_check_shape *s,
                     int n) {
  fat_kernel_desc d;
  fat_gpu_kernel k;
  if (fat_kernel_describe(v, b, &d, err, sizeof err) ||
      fat_gpu_kernel_load(g, &d, &k, err, sizeof err) != FAT_GPU_OK) {
    fprintf(stderr, "%s: %s\n", v->name, err);
    check_record(0);
    return;
  }
  for (int i = 0; i < n; i++) {
    fat_check c;
    char shape[160];
    snprintf(shape, sizeof shape, "%dx%d/%dx%dx%d w%d,%d d%d cap%g%s", s[i].batch, s[i].heads,
             s[i].heads_k, s[i].seqlen_q, s[i].seqlen_k, s[i].window_left, s[i].window_right,
             s[i].head_dim, (double)s[i].softcap, s[i].varlen ? " varlen" : "");
    if (fat_gpu_check(g, &k, &s[i], TEST_SEED + seed_counter++, &c, err, sizeof err) != FAT_GPU_OK) {
      fprintf(stderr, "%s on %s: %s\n", v->name, shape, err);
      check_record(0);
      continue;
    }
    printf("%-44s %-40s rel_l2 %.2e lse %.1e  %s\n", v->name, shape, c.rel_l2, c.lse_max_abs, c.reason);
    CHECK(c.passed);
  }
  fat_gpu_kernel_unload(g, &k);
}

int main(void) {
  fat_gpu *g = NULL;
  fat_gpu_info info;
  fat_build util, ref;
  fat_variant *space = NULL, *pick = NULL;
  fat_build *builds = NULL;
  size_t n_space = 0, n_pick = 0;
  char arch[16];
  memset(&util, 0, sizeof util);
  memset(&ref, 0, sizeof ref);
  int opened = fat_gpu_open(0, &g, &info, err, sizeof err);
  if (opened != FAT_GPU_OPENED) return gpu_open_failed(opened, err);
  printf("%s, sm_%d%d, %d SMs\n", info.name, info.cc_major, info.cc_minor, info.sm_count);
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);
  if (strcmp(arch, "sm_90a") != 0) {
    printf("skipped: ws90 is an sm_90a family; this GPU compiles for %s\n", arch);
    fat_gpu_close(g);
    return SKIP;
  }
  fat_gen *gen = fat_gen_open(NULL, err, sizeof err);
  fat_gen_query q = {.direction = FAT_FWD, .arch = arch, .smem_limit = info.smem_per_block_optin};
  if (!gen || fat_gen_variants(gen, &q, &space, &n_space, NULL, NULL, err, sizeof err) ||
      fat_gpu_compile_support(arch, &util, &ref, err, sizeof err) ||
      fat_gpu_load_support(g, util.cubin, ref.cubin, err, sizeof err) != FAT_GPU_OK) {
    fprintf(stderr, "setup: %s\n", err);
    check_record(0);
    goto out;
  }
  pick = calloc(n_space, sizeof *pick);
  builds = calloc(n_space, sizeof *builds);
  if (!pick || !builds) {
    fprintf(stderr, "out of memory\n");
    check_record(0);
    goto out;
  }
  /* FATUNE_TEST_PARAM=NAME=VALUE: only the variants with it (a new
   * schedule's half of the space, e.g. BLOCK_M=192). */
  const char *param = getenv("FATUNE_TEST_PARAM"), *dtype_name = getenv("FATUNE_TEST_DTYPE");
  fat_dtype dtype = FAT_FP16;
  if (dtype_name && *dtype_name && fat_dtype_parse(dtype_name, &dtype)) {
    fprintf(stderr, "FATUNE_TEST_DTYPE '%s': not fp16, bf16 or e4m3\n", dtype_name);
    check_record(0);
    goto out;
  }
  const int only = dtype_name && *dtype_name ? (int)dtype : -1;
  for (size_t i = 0; i < n_space; i++)
    if (tested(&space[i], param, only)) pick[n_pick++] = space[i]; /* shallow: space owns the strings */
  /* bf16 d128: 36 configurations without a mask (OVERLAP 0, 1, 2;
   * PERSISTENT 1 too), 36 for causal and local each (PERSISTENT 2 too); d64
   * 36 + 36 of 128 rows and 12 + 12 of 192, d192 and d256 24 + 24; 1 at
   * fp16 d128 and bf16 d96 for none and causal each; d96 with SLAB 32
   * 60 + 60; e4m3 d128 36 a mask, d64 16 (192-row blocks too), d96 and
   * d192 12, d256 4 */
  if (!(param && *param) && only < 0)
    CHECK_WHY(n_pick == 108 + 96 + 48 + 48 + 2 + 2 + 120 + 108 + 16 + 12 + 12 + 4, "%zu ws90 variants picked",
              n_pick);
  printf("%zu ws90 variants picked%s%s%s%s\n", n_pick, param && *param ? " with " : "", param ? param : "",
         only >= 0 ? " of " : "", only >= 0 ? dtype_name : "");
  if (fat_compile_all(pick, n_pick, arch, COMPILE_JOBS, NULL, builds, NULL, NULL, NULL, err, sizeof err)) {
    fprintf(stderr, "compile: %s\n", err);
    check_record(0);
    goto out;
  }
  for (size_t i = 0; i < n_pick; i++) {
    const fat_variant *v = &pick[i];
    if (!builds[i].ok) {
      fprintf(stderr, "%s: %.2000s\n", v->name, builds[i].log ? builds[i].log : "");
      check_record(0);
      continue;
    }
    if (builds[i].spill_stores || builds[i].stack_frame)
      printf("%s: %d bytes spilled, %d of stack\n", v->name, builds[i].spill_stores, builds[i].stack_frame);
    const fat_check_shape padded = {FAT_SHAPE_DIMS(2, 3, 3, 129, 257),
                                    .head_dim = padded_head_dim(v->head_dim, v->dtype)};
    if (v->mask == FAT_MASK_LOCAL) {
      check_on(g, v, &builds[i], windows, N(windows));
    } else {
      check_on(g, v, &builds[i], common, N(common));
      check_on(g, v, &builds[i], &padded, 1);
    }
  }
out:
  for (size_t i = 0; builds && i < n_pick; i++) fat_build_free(&builds[i]);
  free(builds);
  free(pick);
  for (size_t i = 0; i < n_space; i++) fat_variant_free(&space[i]);
  free(space);
  if (gen) fat_gen_close(gen);
  fat_build_free(&util);
  fat_build_free(&ref);
  fat_gpu_close(g);
  return check_summary("test_gpu_ws90");
}
