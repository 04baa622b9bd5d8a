/* SPDX-License-Identifier: MIT */
/* Tests of the generator (tuner/generate/gen.c and the generator/ scripts): the space has what
 * the tuner needs on both architectures, names and hashes are stable, pruning
 * says why with exact figures, the template engine inlines and substitutes
 * and names file:line on error, and the Lua sandbox holds. Fixtures live in
 * tests/data/gen/, found through FATUNE_SOURCE_DIR. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile.h"
#include "family.h"
#include "gen.h"
#include "sha256.h"
#include "check.h"

/* The forward's head dims (mma80 and splitkv); the backward and the
 * materialising baseline have all but the first. */
static const int HEAD_DIMS[] = {32, 64, 96, 128, 192, 256};
#define N_HEAD_DIMS 6
#define N_BWD_HEAD_DIMS 5  /* HEAD_DIMS + 1: 64..256 */
#define N_MASKS 3          /* none, causal, local */
#define MIN_CONFIGS 12 /* the floor per (head dim, dtype, mask) */
#define MMA80_GRID 48  /* BLOCK_M x BLOCK_N x WARPS x STAGES = 2x4x2x3 */
#define SPLITKV_GRID 144 /* BLOCK_N x STAGES x PACK_GQA x SPLITS = 3x4x2x6 */
#define PAGED_GRID 96   /* BLOCK_M x BLOCK_N x WARPS x STAGES x PACK_GQA = 2x3x2x4x2, SPLITS 0 */
#define WGMMA90_GRID 16 /* BLOCK_M x BLOCK_N x STAGES x OVERLAP = 2x2x2x2, sm_90a, d64..d256 by 64 */
#define WS90_GRID 1080  /* BLOCK_M x BLOCK_N x STAGES x OVERLAP x PINGPONG x PERSISTENT x SLAB = 2x10x1x3x2x3x3, sm_90a */
#define N_DTYPES 5      /* fp16, bf16, e4m3 (ws90 alone generates e4m3), fp16-e4m3kv, bf16-e4m3kv
                           (splitkv and paged alone, from sm_89) */
#define WS90_DTYPES 3  /* fp16, bf16, e4m3 */
#define N_KV8_FAMILIES_DTYPES 4  /* splitkv's and paged's: fp16, bf16 and the two fp8 caches */
/* An fp8 K/V cache's variants per mask and head dim on sm_90a: splitkv's
 * launch-split tiles (64 and 128 keys, 32 above d128) on two to six stages
 * (STAGES 4 and 6 its own), packed or not, less what shared memory and the
 * accumulators refuse (128 keys on six stages; at d128 on four too); paged's
 * grid of the same stages under its register and shared-memory rules */
static const int SPLITKV_KV8[] = {16, 16, 16, 14, 8, 8};
static const int PAGED_KV8[] = {24, 24, 24, 21, 23, 14};
/* ws90's e4m3 variants per mask and head dim (HEAD_DIMS' order): its fp8
 * key tiles, registers and shared memory (generator/family_ws90.lua) */
static const int WS90_E4M3[] = {0, 48, 36, 36, 36, 12};
#define MATERIALIZE_TILES 2 /* family_materialize.lua: TILE 16 and 32, none pruned */
#define MATERIALIZE_MASKS 2 /* none and causal: the baseline has no window */
#define BWD_GRID 72    /* backward BLOCK_M x BLOCK_N x WARPS x DQ_MODE x PREFETCH = 3x3x2x2x2 */
#define BWD_WGMMA_GRID 8  /* backward wgmma90: BLOCK_M x BLOCK_N x STAGES = 2x2x2 */
#define BWD_WS90_GRID 1024 /* backward ws90: BLOCK_M x BLOCK_N x STAGES x DQ_KEYS x PERSISTENT x GROUPED x
                              STATS_AHEAD x DS_STSM x DQ_MODE x DQ_SHIFT = 2x2x2x2x2x2x2x2x2x2 */
#define BWD_MIN_CONFIGS 4 /* the floor per (head dim, dtype, mask) and dQ strategy */
#define ERR_LEN 4096

static const char *root(void) {
  const char *r = getenv("FATUNE_SOURCE_DIR");
  return r ? r : ".";
}

static const fat_variant *find(const fat_variant *v, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i].name, name) == 0) return &v[i];
  return NULL;
}

static const char *find_reason(const fat_pruned *p, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(p[i].name, name) == 0) return p[i].reason;
  return NULL;
}

static void free_variants(fat_variant *v, size_t n) {
  for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
  free(v);
}

/* One (direction, architecture) of the space, whole, with what it pruned:
 * expanded once and handed to every test that reads it (each expansion is
 * some hundreds of MB of source, each hashed; under the sanitizers of CI's
 * extra checks this test once spent most of its ten minutes expanding the
 * same spaces again). */
typedef struct whole_space {
  const char *arch;
  fat_direction direction;
  fat_variant *v;
  size_t n;
  fat_pruned *p;
  size_t np;
} whole_space;

static int whole_space_load(fat_gen *g, fat_direction direction, const char *arch, whole_space *s) {
  char err[ERR_LEN];
  fat_gen_query q = {.direction = direction, .arch = arch};
  *s = (whole_space){.arch = arch, .direction = direction};
  if (fat_gen_variants(g, &q, &s->v, &s->n, &s->p, &s->np, err, sizeof err) != 0) {
    CHECK_WHY(0, "%s %s: %s", arch, fat_direction_name(direction), err);
    return -1;
  }
  return 0;
}

static void whole_space_free(whole_space *s) {
  free_variants(s->v, s->n);
  fat_pruned_free_all(s->p, s->np);
  *s = (whole_space){0};
}

static int head_dim_index(int d) {
  for (int i = 0; i < N_HEAD_DIMS; i++)
    if (HEAD_DIMS[i] == d) return i;
  return -1;
}

/* The whole forward space for ARCH, family by family: mma80 has >= 12 per
 * (d, dtype, mask), exactly one default each, the exact counts the
 * constraints allow (worked out by hand in generator/family_mma80.lua's
 * terms); splitkv the exact counts its constraints allow and no default;
 * the materialising baseline has one variant per tile for none and causal
 * (no local, no d32), none a default; nothing is left unsubstituted. */
static void test_space_counts(const whole_space *s, const int want[N_HEAD_DIMS],
                              const int want_splitkv[N_HEAD_DIMS], const int want_paged[N_HEAD_DIMS],
                              const int want_wgmma[N_HEAD_DIMS], const int want_ws[N_HEAD_DIMS]) {
  const char *arch = s->arch;
  const fat_variant *v = s->v;
  const size_t n = s->n, np = s->np;
  const fat_pruned *p = s->p;
  int count[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}}, defaults[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}};
  int splitkv[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}};
  int splitkv_defaults[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}};
  int paged[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}}, paged_defaults[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}};
  int baseline[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}}, baseline_defaults = 0, other = 0;
  int wgmma[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}}, wgmma_defaults = 0;
  int ws[N_HEAD_DIMS][N_DTYPES][N_MASKS] = {{{0}}}, ws_defaults = 0, ws_e4m3_defaults[N_HEAD_DIMS][N_MASKS] = {{0}};
  for (size_t i = 0; i < n; i++) {
    int d = head_dim_index(v[i].head_dim);
    CHECK_WHY(d >= 0, "%s: unexpected head dim %d", v[i].name, v[i].head_dim);
    CHECK_WHY((int)v[i].mask >= 0 && (int)v[i].mask < N_MASKS, "%s: mask %d", v[i].name, (int)v[i].mask);
    CHECK_WHY((int)v[i].dtype >= 0 && (int)v[i].dtype < N_DTYPES, "%s: dtype %d", v[i].name, (int)v[i].dtype);
    CHECK_WHY(v[i].dtype != FAT_E4M3 || !strcmp(v[i].family, "ws90"), "%s: e4m3 outside ws90", v[i].name);
    if (d < 0 || (int)v[i].mask < 0 || (int)v[i].mask >= N_MASKS || (int)v[i].dtype < 0 ||
        (int)v[i].dtype >= N_DTYPES)
      continue;
    if (strcmp(v[i].family, FAT_FAMILY_MATERIALIZE) == 0) {
      baseline[d][v[i].dtype][v[i].mask]++;
      baseline_defaults += v[i].is_default;
    } else if (strcmp(v[i].family, "mma80") == 0) {
      count[d][v[i].dtype][v[i].mask]++;
      defaults[d][v[i].dtype][v[i].mask] += v[i].is_default;
    } else if (strcmp(v[i].family, "splitkv") == 0) {
      splitkv[d][v[i].dtype][v[i].mask]++;
      splitkv_defaults[d][v[i].dtype][v[i].mask] += v[i].is_default;
      /* every one the launch's splits over the packed decoding tile */
      CHECK_WHY(!v[i].is_default || (strstr(v[i].params, "SPLITS=0") && strstr(v[i].params, "PACK_GQA=1") &&
                                     v[i].block_m == 64),
                "%s: a default of params %s", v[i].name, v[i].params);
    } else if (strcmp(v[i].family, "paged") == 0) {
      paged[d][v[i].dtype][v[i].mask]++;
      paged_defaults[d][v[i].dtype][v[i].mask] += v[i].is_default;
      /* mma80's template and entry, reading pages, its split count the launch's */
      CHECK_WHY(!strcmp(v[i].entry, "fat_fwd_mma80") && strstr(v[i].params, "SPLITS=0") &&
                    strstr(v[i].source, "enum : int { kPaged = 1 };") &&
                    strstr(v[i].source, "constexpr int kSplits = 0;"),
                "%s: entry %s, params %s", v[i].name, v[i].entry, v[i].params);
    } else if (strcmp(v[i].family, "wgmma90") == 0) {
      wgmma[d][v[i].dtype][v[i].mask]++;
      wgmma_defaults += v[i].is_default;
    } else if (strcmp(v[i].family, "ws90") == 0) {
      ws[d][v[i].dtype][v[i].mask]++;
      if (v[i].dtype == FAT_E4M3) ws_e4m3_defaults[d][v[i].mask] += v[i].is_default;
      else ws_defaults += v[i].is_default;
      /* 128 rows on two consumer warpgroups, or 192 on three (d64, and d96
       * on its own template) */
      const int three = v[i].block_m == 192 &&
                        (v[i].head_dim == 64 || (v[i].head_dim == 96 && strstr(v[i].params, "SLAB=32")));
      CHECK_WHY(!strcmp(v[i].entry, "fat_fwd_ws90") && v[i].threads == (three ? 512 : 384) &&
                    (v[i].block_m == 128 || three) &&
                    (v[i].mask == FAT_MASK_NONE || !strstr(v[i].params, "PERSISTENT=1")),
                "%s: entry %s, %d threads, block_m %d", v[i].name, v[i].entry, v[i].threads, v[i].block_m);
    } else {
      other++;
    }
    CHECK_WHY(strstr(v[i].source, "{{") == NULL, "%s: '{{' left in the source", v[i].name);
    CHECK_WHY(v[i].smem_bytes > 0 && v[i].threads > 0 && v[i].block_m > 0, "%s: resources unset", v[i].name);
  }
  for (int d = 0; d < N_HEAD_DIMS; d++)
    for (int t = 0; t < 2; t++)
      for (int m = 0; m < N_MASKS; m++) {
        CHECK_WHY(count[d][t][m] >= MIN_CONFIGS, "%s d%d %s %s: %d configurations", arch, HEAD_DIMS[d],
                  fat_dtype_name(t), fat_mask_name(m), count[d][t][m]);
        CHECK_WHY(count[d][t][m] == want[d], "%s d%d: %d configurations, want %d", arch, HEAD_DIMS[d],
                  count[d][t][m], want[d]);
        CHECK_WHY(defaults[d][t][m] == 1, "%s d%d %s %s: %d defaults", arch, HEAD_DIMS[d], fat_dtype_name(t),
                  fat_mask_name(m), defaults[d][t][m]);
        CHECK_WHY(splitkv[d][t][m] == want_splitkv[d], "%s d%d %s %s: %d splitkv variants, want %d", arch,
                  HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), splitkv[d][t][m], want_splitkv[d]);
        CHECK_WHY(paged[d][t][m] == want_paged[d], "%s d%d %s %s: %d paged variants, want %d", arch,
                  HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), paged[d][t][m], want_paged[d]);
        /* The runtime's decoding default of a contiguous call, one of each
         * problem up to d128 (above, the launch's splits spill: mma80's
         * default serves). */
        CHECK_WHY(splitkv_defaults[d][t][m] == (HEAD_DIMS[d] <= 128), "%s d%d %s %s: %d splitkv defaults",
                  arch, HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), splitkv_defaults[d][t][m]);
        /* The runtime's default for a paged call, one of each problem. */
        CHECK_WHY(paged_defaults[d][t][m] == 1, "%s d%d %s %s: %d paged defaults", arch, HEAD_DIMS[d],
                  fat_dtype_name(t), fat_mask_name(m), paged_defaults[d][t][m]);
        CHECK_WHY(wgmma[d][t][m] == want_wgmma[d], "%s d%d %s %s: %d wgmma90 variants, want %d", arch,
                  HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), wgmma[d][t][m], want_wgmma[d]);
        /* PERSISTENT 1 only without a mask, 2 only with one: as many each */
        const int ws_want = want_ws[d];
        CHECK_WHY(ws[d][t][m] == ws_want, "%s d%d %s %s: %d ws90 variants, want %d", arch,
                  HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), ws[d][t][m], ws_want);
        /* The baseline: d64 and up, none and causal only. */
        const int want_baseline = d > 0 && m < MATERIALIZE_MASKS ? MATERIALIZE_TILES : 0;
        CHECK_WHY(baseline[d][t][m] == want_baseline, "%s d%d %s %s: %d materialize variants, want %d",
                  arch, HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), baseline[d][t][m], want_baseline);
      }
  /* e4m3: ws90 alone, every mask, one built-in default each (the runtime
   * has no other family to fall back on); the other families none. */
  for (int d = 0; d < N_HEAD_DIMS; d++)
    for (int m = 0; m < N_MASKS; m++) {
      const int e4m3_want = want_ws[d] ? WS90_E4M3[d] : 0;
      CHECK_WHY(ws[d][FAT_E4M3][m] == e4m3_want, "%s d%d e4m3 %s: %d ws90 variants, want %d", arch,
                HEAD_DIMS[d], fat_mask_name(m), ws[d][FAT_E4M3][m], e4m3_want);
      CHECK_WHY(ws_e4m3_defaults[d][m] == (e4m3_want > 0), "%s d%d e4m3 %s: %d defaults", arch, HEAD_DIMS[d],
                fat_mask_name(m), ws_e4m3_defaults[d][m]);
      CHECK_WHY(!count[d][FAT_E4M3][m] && !splitkv[d][FAT_E4M3][m] && !paged[d][FAT_E4M3][m] &&
                    !wgmma[d][FAT_E4M3][m] && !baseline[d][FAT_E4M3][m],
                "%s d%d e4m3 %s: a family other than ws90", arch, HEAD_DIMS[d], fat_mask_name(m));
    }
  /* The fp8 caches: splitkv and paged alone, from sm_89 (the e4m3
   * conversion), one built-in default of each family a problem (the
   * runtime's, contiguous and paged: mma80 reads no fp8 cache). */
  const int kv8_arch = strcmp(arch, "sm_90a") == 0;
  for (int t = FAT_FP16_E4M3KV; t <= FAT_BF16_E4M3KV; t++)
    for (int d = 0; d < N_HEAD_DIMS; d++)
      for (int m = 0; m < N_MASKS; m++) {
        const int want_s = kv8_arch ? SPLITKV_KV8[d] : 0, want_p = kv8_arch ? PAGED_KV8[d] : 0;
        CHECK_WHY(splitkv[d][t][m] == want_s && paged[d][t][m] == want_p, "%s d%d %s %s: %d splitkv, %d paged, want %d, %d",
                  arch, HEAD_DIMS[d], fat_dtype_name(t), fat_mask_name(m), splitkv[d][t][m], paged[d][t][m], want_s,
                  want_p);
        CHECK_WHY(splitkv_defaults[d][t][m] == kv8_arch && paged_defaults[d][t][m] == kv8_arch,
                  "%s d%d %s %s: %d splitkv and %d paged defaults", arch, HEAD_DIMS[d], fat_dtype_name(t),
                  fat_mask_name(m), splitkv_defaults[d][t][m], paged_defaults[d][t][m]);
        CHECK_WHY(!count[d][t][m] && !wgmma[d][t][m] && !ws[d][t][m] && !baseline[d][t][m],
                  "%s d%d %s %s: a family other than splitkv and paged", arch, HEAD_DIMS[d], fat_dtype_name(t),
                  fat_mask_name(m));
      }
  CHECK_WHY(baseline_defaults == 0, "%s: %d materialize variants marked default", arch, baseline_defaults);
  CHECK_WHY(wgmma_defaults == 0, "%s: %d wgmma90 variants marked default", arch, wgmma_defaults);
  CHECK_WHY(ws_defaults == 0, "%s: %d ws90 variants marked default", arch, ws_defaults);
  CHECK_WHY(other == 0, "%s: %d variants of an unknown family", arch, other);
  /* every configuration of mma80's 2x4x2x3 grid, of splitkv's 2x2x2x5, of
   * paged's 2x2x2x2x2, of
   * wgmma90's 2x2x2x2 and ws90's 2x10x1x3x2x3x3 over three dtypes (sm_90a's d64 to d256, d32
   * aside) and of
   * the baseline's tiles is either a variant or pruned */
  size_t wgmma_grid = 0;
  for (int d = 0; d < N_HEAD_DIMS; d++)
    wgmma_grid += (want_wgmma[d] ? (size_t)2 * N_MASKS * WGMMA90_GRID : 0) +
                  (want_ws[d] ? (size_t)WS90_DTYPES * N_MASKS * WS90_GRID : 0);
  CHECK_WHY(n + np == (size_t)N_HEAD_DIMS * N_MASKS *
                              (2 * MMA80_GRID + N_KV8_FAMILIES_DTYPES * (SPLITKV_GRID + PAGED_GRID)) +
                          wgmma_grid +
                          (size_t)(N_HEAD_DIMS - 1) * 2 * MATERIALIZE_MASKS * MATERIALIZE_TILES,
            "%s: %zu variants + %zu pruned", arch, n, np);
  /* FlashAttention-2's choices survive: WARPS 4 up to d128, 8 above */
  const fat_variant *d128 = find(v, n, "fwd.mma80.fp16.d128.none.m128n64w4s1");
  const fat_variant *d256 = find(v, n, "fwd.mma80.bf16.d256.causal.m128n64w8s1");
  CHECK_WHY(d128 && d128->is_default, "%s: d128 default missing", arch);
  CHECK_WHY(d256 && d256->is_default, "%s: d256 default missing", arch);
  /* The baseline: named by its tile, launched as 256-thread blocks with two
   * padded fp32 tiles of shared memory, three kernels under one entry. */
  const fat_variant *mat = find(v, n, "fwd.materialize.bf16.d96.causal.t32");
  CHECK_WHY(mat != NULL, "%s: fwd.materialize.bf16.d96.causal.t32 missing", arch);
  if (mat) {
    CHECK_STR(mat->params, "TILE=32");
    CHECK_STR(mat->entry, "fat_fwd_materialize");
    CHECK_WHY(mat->block_m == 32 && mat->threads == 256 && mat->smem_bytes == 2 * 32 * 33 * 4,
              "m%d t%d smem %d", mat->block_m, mat->threads, mat->smem_bytes);
    CHECK_WHY(!mat->is_default && mat->dtype == FAT_BF16 && mat->mask == FAT_MASK_CAUSAL &&
              mat->head_dim == 96, "flags of %s", mat->name);
    CHECK_CONTAINS(mat->source, "constexpr int kTile = 32;");
    CHECK_CONTAINS(mat->source, "constexpr bool kIsCausal = 1;");
    CHECK_CONTAINS(mat->source, "fat_fwd_materialize_softmax");
  }
  const fat_variant *mat16 = find(v, n, "fwd.materialize.fp16.d256.none.t16");
  CHECK_WHY(mat16 && mat16->smem_bytes == 2 * 16 * 17 * 4, "%s: fwd.materialize.fp16.d256.none.t16", arch);
  /* d32 and the local mask: mma80's defaults exist; the baseline has neither. */
  const fat_variant *d32 = find(v, n, "fwd.mma80.fp16.d32.none.m128n64w4s1");
  CHECK_WHY(d32 && d32->is_default && d32->head_dim == 32, "%s: d32 default missing", arch);
  const fat_variant *local = find(v, n, "fwd.mma80.bf16.d128.local.m128n64w4s1");
  CHECK_WHY(local && local->is_default && local->mask == FAT_MASK_LOCAL, "%s: d128 local default missing",
            arch);
  if (local) CHECK_CONTAINS(local->source, "constexpr bool kIsLocal = 1;");
  CHECK_WHY(find(v, n, "fwd.materialize.fp16.d64.local.t16") == NULL, "%s: a local materialize variant",
            arch);
  /* The splitkv family never keeps SPLITS 1 unpacked: that is mma80's schedule. */
  CHECK_STR(find_reason(p, np, "fwd.splitkv.fp16.d64.none.m64n64w4s2.g0x1"),
            "SPLITS 1 unpacked is the mma80 family's own schedule");
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names, params and resources of known variants; names and hashes unique;
 * hash = sha256(source); the same hashes from a second generator. */
static void test_names_and_hashes(const whole_space *s) {
  char err[ERR_LEN];
  fat_gen_query q = {.direction = s->direction, .arch = s->arch};
  const fat_variant *v = s->v;
  const size_t n = s->n;
  fat_variant *w = NULL;
  size_t nw = 0;
  fat_gen *g2 = NULL;
  const char **names = NULL, **hashes = NULL;
  const fat_variant *a = find(v, n, "fwd.mma80.bf16.d128.causal.m128n64w4s2");
  CHECK_WHY(a != NULL, "fwd.mma80.bf16.d128.causal.m128n64w4s2 missing");
  if (a) {
    CHECK_STR(a->params, "BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4");
    CHECK_STR(a->family, "mma80");
    CHECK_STR(a->entry, "fat_fwd_mma80");
    CHECK_WHY(a->direction == FAT_FWD && a->dtype == FAT_BF16 && a->mask == FAT_MASK_CAUSAL, "enums wrong");
    CHECK_WHY(a->head_dim == 128 && a->block_m == 128 && a->threads == 128, "d%d m%d t%d", a->head_dim,
              a->block_m, a->threads);
    /* (128 + 2*2*64) rows * 128 elements (swizzled, unpadded) * 2 bytes */
    CHECK_WHY(a->smem_bytes == 98304, "smem %d", a->smem_bytes);
    CHECK_WHY(!a->is_default, "not the default");
    const char *header = "// fwd.mma80.bf16.d128.causal.m128n64w4s2\n"
                         "// from templates/fwd_mma80.cu with BLOCK_M=128 BLOCK_N=64 STAGES=2 WARPS=4\n"
                         "// generated by fatune; do not edit.\n";
    CHECK_WHY(strncmp(a->source, header, strlen(header)) == 0, "header: %.200s", a->source);
    char hex[65];
    fat_sha256_hex(a->source, strlen(a->source), hex);
    CHECK_STR(a->hash, hex);
    /* fat_abi.h is inlined, so NVRTC needs no include path */
    CHECK_CONTAINS(a->source, "typedef struct fat_fwd_params {");
    CHECK_WHY(strstr(a->source, "#include \"fat_abi.h\"") == NULL, "fat_abi.h include left in");
    CHECK_CONTAINS(a->source, "constexpr int kHeadDim = 128;");
  }
  /* mma80's schedule is fixed: one block per query block and head. */
  if (a) {
    CHECK_CONTAINS(a->source, "constexpr bool kPackGqa = 0;");
    CHECK_CONTAINS(a->source, "constexpr int kSplits = 1;");
    CHECK_CONTAINS(a->source, "enum : int { kPaged = 0 };");
  }
  /* A decoding variant: mma80's template and entry, its tiles' resources,
   * the schedule in its name, parameters and source. */
  const fat_variant *sk = find(v, n, "fwd.splitkv.bf16.d128.local.m64n64w4s2.g1x8");
  CHECK_WHY(sk != NULL, "fwd.splitkv.bf16.d128.local.m64n64w4s2.g1x8 missing");
  if (sk) {
    CHECK_STR(sk->params, "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=8 STAGES=2 WARPS=4");
    CHECK_STR(sk->family, "splitkv");
    CHECK_STR(sk->entry, "fat_fwd_mma80");
    CHECK_WHY(sk->direction == FAT_FWD && sk->dtype == FAT_BF16 && sk->mask == FAT_MASK_LOCAL &&
              !sk->is_default, "enums wrong");
    /* (64 + 2*2*64) rows * 128 elements * 2 bytes */
    CHECK_WHY(sk->head_dim == 128 && sk->block_m == 64 && sk->threads == 128 && sk->smem_bytes == 81920,
              "d%d m%d t%d smem %d", sk->head_dim, sk->block_m, sk->threads, sk->smem_bytes);
    CHECK_CONTAINS(sk->source, "constexpr bool kIsLocal = 1;");
    CHECK_CONTAINS(sk->source, "constexpr bool kPackGqa = 1;");
    CHECK_CONTAINS(sk->source, "constexpr int kSplits = 8;");
  }
  const fat_variant *b = find(v, n, "fwd.mma80.fp16.d64.none.m64n16w4s3");
  CHECK_WHY(b != NULL, "fwd.mma80.fp16.d64.none.m64n16w4s3 missing");
  if (b) {
    CHECK_STR(b->params, "BLOCK_M=64 BLOCK_N=16 STAGES=3 WARPS=4");
    CHECK_WHY(b->smem_bytes == (64 + 2 * 3 * 16) * 64 * 2, "smem %d", b->smem_bytes);
  }

  names = calloc(n, sizeof *names);
  hashes = calloc(n, sizeof *hashes);
  for (size_t i = 0; i < n; i++) {
    names[i] = v[i].name;
    hashes[i] = v[i].hash;
  }
  qsort(names, n, sizeof *names, cmp_str);
  qsort(hashes, n, sizeof *hashes, cmp_str);
  for (size_t i = 1; i < n; i++) {
    CHECK_WHY(strcmp(names[i - 1], names[i]) != 0, "name %s twice", names[i]);
    CHECK_WHY(strcmp(hashes[i - 1], hashes[i]) != 0, "hash %s twice", hashes[i]);
  }

  g2 = fat_gen_open(NULL, err, sizeof err);
  CHECK_WHY(g2 != NULL, "second open: %s", err);
  if (!g2 || fat_gen_variants(g2, &q, &w, &nw, NULL, NULL, err, sizeof err) != 0) {
    CHECK_WHY(0, "second generator: %s", err);
    goto out;
  }
  CHECK_WHY(nw == n, "%zu variants, then %zu", n, nw);
  for (size_t i = 0; i < n && i < nw; i++) {
    CHECK_STR(w[i].name, v[i].name);
    CHECK_STR(w[i].hash, v[i].hash);
  }
out:
  free(names);
  free(hashes);
  free_variants(w, nw);
  fat_gen_close(g2);
}

/* Reasons name the rule and the figures. */
static void test_pruning(fat_gen *g) {
  char err[ERR_LEN];
  const int d256[] = {256}, d128[] = {128};
  const fat_dtype fp16[] = {FAT_FP16};
  const fat_mask none[] = {FAT_MASK_NONE};
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = d256, .n_head_dims = 1, .dtypes = fp16,
                     .n_dtypes = 1, .masks = none, .n_masks = 1, .arch = "sm_90a"};
  fat_variant *v;
  size_t n;
  fat_pruned *p;
  size_t np;
  if (fat_gen_variants(g, &q, &v, &n, &p, &np, err, sizeof err) != 0) {
    CHECK_WHY(0, "%s", err);
    return;
  }
  /* mma80's 19, splitkv's 18 (BLOCK_N 64: the rest do not fit), paged's
   * 7, wgmma90's 8, ws90's 24 and the materialising baseline's 2 tiles;
   * mma80's 29, splitkv's 30, paged's 41, wgmma90's 8 and ws90's 120 of 128
   * rows pruned (PERSISTENT 2 wants a mask), all 144 of 192 (three
   * consumers' registers) and all 360 with SLAB 32 (d256 is whole 64-column
   * slabs) or BLOCK_N 144; and the 432 e4m3's values add: the 360 of SLAB
   * 128 (one-byte elements only), the 72 others of BLOCK_N 224; and
   * splitkv's 24 of BLOCK_N 32 (an fp8 cache's tile) and 72 of STAGES 4
   * and 6, paged's 48 of those stages (an fp8 cache's too) */
  CHECK_WHY(n == 19 + 18 + 7 + 8 + 24 + MATERIALIZE_TILES &&
                np == 29 + 30 + 24 + 72 + 41 + 48 + 8 + 120 + 144 + 360 + 432,
            "%zu variants, %zu pruned", n, np);
  CHECK_STR(find_reason(p, np, "fwd.splitkv.fp16.d256.none.m64n64w4s2.g1x0"),
            "SPLITS 0 above head dim 128 on 64-key tiles: its blocks spill");
  CHECK_STR(find_reason(p, np, "fwd.paged.fp16.d256.none.m128n64w4s2.g0x0"),
            "accumulators 320 > 192 registers per thread; rows per warp BLOCK_M/WARPS = 32 is not 16; "
            "registers: 160 accumulators + 2 x 16 copies > 176");
  /* 128 + 32 accumulators, 4 rows a pass of 128 threads: 16 copies */
  CHECK_STR(find_reason(p, np, "fwd.paged.fp16.d256.none.m64n64w4s2.g0x0"),
            "registers: 160 accumulators + 2 x 16 copies > 176");
  CHECK_STR(find_reason(p, np, "fwd.paged.fp16.d256.none.m128n64w8s2.g1x0"),
            "PACK_GQA 1 is for decoding's BLOCK_M 64, not 128");
  /* (128 + 2*2*96) * 256 * 2 + 1024 + 10 barriers of 8 bytes = 263248,
   * and BLOCK_N 96 is in no list at d256 (its 48 + 128 + 24 accumulators
   * would fit); at BLOCK_N 112, 56 + 128 + 28 do not */
  /* three consumers' 160 registers: 32 + 128 + 16 accumulators and 32 more */
  CHECK_STR(find_reason(p, np, "fwd.ws90.fp16.d256.none.m192n64s2op"),
            "registers: 176 accumulators + 32 > the 160 a consumer thread has");
  CHECK_STR(find_reason(p, np, "fwd.ws90.fp16.d256.none.m128n96s2op"),
            "BLOCK_N 96 is not among head dim 256's key tiles (64, 80); shared memory 263248 > 232448 bytes");
  CHECK_STR(find_reason(p, np, "fwd.ws90.fp16.d256.none.m128n112s2"),
            "BLOCK_N 112 is not among head dim 256's key tiles (64, 80); shared memory 296016 > 232448 bytes; "
            "registers: 212 accumulators + 32 > the 240 a consumer thread has");
  CHECK_STR(find_reason(p, np, "fwd.ws90.fp16.d256.none.m128n64s2d"),
            "PERSISTENT 2: only with a mask (PERSISTENT 1 is even without)");
  /* (64 + 2*2*128) * 256 * 2 + 1024 bytes of alignment slack = 295936 */
  CHECK_STR(find_reason(p, np, "fwd.wgmma90.fp16.d256.none.m64n128s2"), "shared memory 295936 > 232448 bytes");
  CHECK_STR(find_reason(p, np, "fwd.wgmma90.fp16.d256.none.m128n64s1o"), "OVERLAP keeps two K/V buffers: STAGES 2");
  /* (64 + 2*2*128) * 256 * 2 = 294912 */
  CHECK_STR(find_reason(p, np, "fwd.splitkv.fp16.d256.none.m64n128w4s2.g0x4"), "shared memory 294912 > 232448 bytes");
  /* (128 + 2*2*128) * 256 * 2 = 327680 */
  CHECK_STR(find_reason(p, np, "fwd.mma80.fp16.d256.none.m128n128w8s2"), "shared memory 327680 > 232448 bytes");
  /* two 16-row tiles * (256/8*4 + 64/8*4) */
  CHECK_STR(find_reason(p, np, "fwd.mma80.fp16.d256.none.m128n64w4s1"), "accumulators 320 > 192 registers per thread");
  CHECK_STR(find_reason(p, np, "fwd.mma80.fp16.d256.none.m64n128w8s3"),
            "BLOCK_M 64 is not a multiple of 16*WARPS = 128; rows per warp BLOCK_M/WARPS = 8 is not 16 or 32; "
            "shared memory 425984 > 232448 bytes; STAGES 3 needs BLOCK_N <= 64, not 128");
  CHECK_WHY(find(v, n, "fwd.mma80.fp16.d256.none.m128n128w8s2") == NULL, "pruned variant generated");
  free_variants(v, n);
  fat_pruned_free_all(p, np);

  /* sm_80's smaller limit, and an explicit limit from the GPU */
  q.arch = "sm_80";
  if (fat_gen_variants(g, &q, &v, &n, &p, &np, err, sizeof err) == 0) {
    CHECK_STR(find_reason(p, np, "fwd.mma80.fp16.d256.none.m128n128w8s2"), "shared memory 327680 > 166912 bytes");
    free_variants(v, n);
    fat_pruned_free_all(p, np);
  } else {
    CHECK_WHY(0, "%s", err);
  }
  q.head_dims = d128;
  q.smem_limit = 61440;
  if (fat_gen_variants(g, &q, &v, &n, &p, &np, err, sizeof err) == 0) {
    /* (128 + 2*64) * 128 * 2 = 65536: the default itself no longer fits */
    CHECK_STR(find_reason(p, np, "fwd.mma80.fp16.d128.none.m128n64w4s1"), "shared memory 65536 > 61440 bytes");
    for (size_t i = 0; i < n; i++) CHECK_WHY(v[i].smem_bytes <= 61440, "%s: %d", v[i].name, v[i].smem_bytes);
    free_variants(v, n);
    fat_pruned_free_all(p, np);
  } else {
    CHECK_WHY(0, "%s", err);
  }
}

/* The backward space for ARCH: both dQ strategies have >= 4 configurations
 * per (d, dtype, mask), in exactly the counts family_bwd_mma80.lua's
 * constraints allow; one default each (FlashAttention-2's 64x64 tiles with
 * atomic dQ); names, parameters and resources as documented; pruning
 * reasons that name the limit. */
static void test_bwd_space(const whole_space *s, const int want_atomic[N_BWD_HEAD_DIMS],
                           const int want_separate[N_BWD_HEAD_DIMS], const int want_wgmma[N_BWD_HEAD_DIMS],
                           const int want_ws90[N_BWD_HEAD_DIMS], const int want_ws90_shift[N_BWD_HEAD_DIMS]) {
  const char *arch = s->arch;
  const fat_variant *v = s->v;
  const size_t n = s->n, np = s->np;
  const fat_pruned *p = s->p;
  int count[N_BWD_HEAD_DIMS][2][N_MASKS][2] = {{{{0}}}}, defaults[N_BWD_HEAD_DIMS][2][N_MASKS] = {{{0}}};
  int wgmma[N_BWD_HEAD_DIMS][2][N_MASKS] = {{{0}}}, ws90[N_BWD_HEAD_DIMS][2][N_MASKS] = {{{0}}};
  int features_defaults[N_BWD_HEAD_DIMS][2][N_MASKS] = {{{0}}};
  size_t n_wgmma = 0, n_ws90 = 0, n_features = 0;
  for (size_t i = 0; i < n; i++) {
    int d = head_dim_index(v[i].head_dim) - 1; /* no d32 backward */
    int separate = strstr(v[i].name, ".separate") != NULL;
    CHECK_WHY(d >= 0, "%s: unexpected head dim %d", v[i].name, v[i].head_dim);
    /* mma80f: mma80's template and configurations with FEATURES 1, each one
     * a configuration mma80 has too (fewer: the soft-cap's rule), one
     * default a (d, dtype, mask). */
    if (!strcmp(v[i].family, "mma80f")) {
      char dense[160];
      snprintf(dense, sizeof dense, "bwd.mma80.%s", v[i].name + strlen("bwd.mma80f."));
      const fat_variant *twin = find(v, n, dense);
      CHECK_WHY(twin != NULL && !strcmp(twin->params, v[i].params) && !strcmp(v[i].entry, "fat_bwd_mma80") &&
                    strstr(v[i].source, "#define FAT_BWD_FEATURES 1\n") != NULL,
                "%s on %s: no dense twin %s, or entry %s params %s", v[i].name, arch, dense, v[i].entry,
                v[i].params);
      if (d >= 0 && (int)v[i].mask >= 0 && (int)v[i].mask < N_MASKS)
        features_defaults[d][v[i].dtype][v[i].mask] += v[i].is_default;
      n_features++;
      continue;
    }
    /* Hopper's families (wgmma90, ws90): atomic dQ (ws90 also ordered),
     * never the default, sm_90a only, each its own entry fat_bwd_FAMILY. */
    const int is_ws90 = !strcmp(v[i].family, "ws90");
    if (is_ws90 || !strcmp(v[i].family, "wgmma90")) {
      char entry[64];
      snprintf(entry, sizeof entry, "fat_bwd_%s", v[i].family);
      /* ws90's ordered variants end in .ordered, and are never split-K's
       * (d64, DQ_KEYS 0, BLOCK_M 64 over BLOCK_N 128). */
      const char *const ordered_tag = ".ordered";
      size_t name_len = strlen(v[i].name);
      const int ordered = name_len > strlen(ordered_tag) &&
                          !strcmp(v[i].name + name_len - strlen(ordered_tag), ordered_tag);
      CHECK_WHY(!strcmp(arch, "sm_90a") && v[i].direction == FAT_BWD && !strcmp(v[i].entry, entry) &&
                    !v[i].is_default && strstr(v[i].params, ordered ? "DQ_MODE=ordered" : "DQ_MODE=atomic") &&
                    (is_ws90 || !ordered) && strstr(v[i].source, "{{") == NULL,
                "%s on %s: entry %s params %s", v[i].name, arch, v[i].entry, v[i].params);
      CHECK_WHY(!ordered || v[i].head_dim != 64 || strstr(v[i].params, "DQ_KEYS=1") ||
                    !strstr(v[i].params, "BLOCK_M=64 BLOCK_N=128"),
                "%s: ordered with dQ split by keys", v[i].name);
      if (ordered) name_len -= strlen(ordered_tag);
      /* ws90's tag ends in p for PERSISTENT=1, then g for GROUPED=1 (causal
       * only), then a for STATS_AHEAD=1, then x for DS_STSM=1, then r for
       * DQ_SHIFT=1 (ordered, persistent, no mask only). */
      const int shift = is_ws90 && v[i].name[name_len - 1] == 'r';
      CHECK_WHY(shift == (strstr(v[i].params, "DQ_SHIFT=1") != NULL) &&
                    (!shift || (ordered && strstr(v[i].params, "PERSISTENT=1") && v[i].mask == FAT_MASK_NONE)),
                "%s: params %s", v[i].name, v[i].params);
      name_len -= shift;
      const int stsm = is_ws90 && v[i].name[name_len - 1] == 'x';
      const int ahead = is_ws90 && v[i].name[name_len - 1 - stsm] == 'a';
      const int grouped = is_ws90 && v[i].name[name_len - 1 - stsm - ahead] == 'g';
      CHECK_WHY(!is_ws90 || (stsm == (strstr(v[i].params, "DS_STSM=1") != NULL) &&
                             ahead == (strstr(v[i].params, "STATS_AHEAD=1") != NULL) &&
                             grouped == (strstr(v[i].params, "GROUPED=1") != NULL) &&
                             (v[i].name[name_len - 1 - stsm - ahead - grouped] == 'p') ==
                                 (strstr(v[i].params, "PERSISTENT=1") != NULL) &&
                             (!grouped || v[i].mask == FAT_MASK_CAUSAL)),
                "%s: params %s", v[i].name, v[i].params);
      if (d >= 0 && (int)v[i].mask >= 0 && (int)v[i].mask < N_MASKS)
        (is_ws90 ? ws90 : wgmma)[d][v[i].dtype][v[i].mask]++;
      *(is_ws90 ? &n_ws90 : &n_wgmma) += 1;
      continue;
    }
    CHECK_WHY(v[i].direction == FAT_BWD && !strcmp(v[i].family, "mma80") &&
              !strcmp(v[i].entry, "fat_bwd_mma80"),
              "%s: direction %d family %s entry %s", v[i].name, v[i].direction, v[i].family, v[i].entry);
    CHECK_WHY(separate == (strstr(v[i].params, "DQ_MODE=separate") != NULL), "%s: params %s", v[i].name,
              v[i].params);
    CHECK_WHY(strstr(v[i].source, "{{") == NULL, "%s: '{{' left in the source", v[i].name);
    CHECK_WHY(strstr(v[i].source, "#define FAT_BWD_FEATURES 0\n") != NULL, "%s: FEATURES not 0", v[i].name);
    CHECK_WHY((strstr(v[i].name, ".p1") != NULL) == (strstr(v[i].params, "PREFETCH=1") != NULL),
              "%s: params %s", v[i].name, v[i].params);
    CHECK_WHY((int)v[i].mask >= 0 && (int)v[i].mask < N_MASKS, "%s: mask %d", v[i].name, (int)v[i].mask);
    if (d < 0 || (int)v[i].mask < 0 || (int)v[i].mask >= N_MASKS) continue;
    count[d][v[i].dtype][v[i].mask][separate]++;
    defaults[d][v[i].dtype][v[i].mask] += v[i].is_default;
    CHECK_WHY(!v[i].is_default || !separate, "%s: a separate-mode default", v[i].name);
  }
  for (int d = 0; d < N_BWD_HEAD_DIMS; d++)
    for (int t = 0; t < 2; t++)
      for (int m = 0; m < N_MASKS; m++) {
        CHECK_WHY(count[d][t][m][0] == want_atomic[d] && count[d][t][m][1] == want_separate[d],
                  "%s bwd d%d: %d atomic + %d separate, want %d + %d", arch, HEAD_DIMS[d + 1], count[d][t][m][0],
                  count[d][t][m][1], want_atomic[d], want_separate[d]);
        CHECK_WHY(count[d][t][m][0] >= BWD_MIN_CONFIGS && count[d][t][m][1] >= BWD_MIN_CONFIGS,
                  "%s bwd d%d: fewer than %d configurations", arch, HEAD_DIMS[d + 1], BWD_MIN_CONFIGS);
        CHECK_WHY(defaults[d][t][m] == 1, "%s bwd d%d: %d defaults", arch, HEAD_DIMS[d + 1], defaults[d][t][m]);
        CHECK_WHY(features_defaults[d][t][m] == 1, "%s bwd mma80f d%d: %d defaults", arch, HEAD_DIMS[d + 1],
                  features_defaults[d][t][m]);
        CHECK_WHY(wgmma[d][t][m] == want_wgmma[d], "%s bwd wgmma90 d%d: %d, want %d", arch, HEAD_DIMS[d + 1],
                  wgmma[d][t][m], want_wgmma[d]);
        /* causal: each again with GROUPED 1; no mask: the ordered
         * persistent ones again with DQ_SHIFT 1 */
        const int want = want_ws90[d] * (m == FAT_MASK_CAUSAL ? 2 : 1) + (m == FAT_MASK_NONE ? want_ws90_shift[d] : 0);
        CHECK_WHY(ws90[d][t][m] == want, "%s bwd ws90 d%d mask %d: %d, want %d", arch, HEAD_DIMS[d + 1], m,
                  ws90[d][t][m], want);
      }
  /* wgmma90's grid: BLOCK_M x BLOCK_N x STAGES = 2x2x2 over head dims 64,
   * 96, 128 and 256 (where two warpgroups share 64 keys: only 64-query
   * tiles and one key group fit, the pair's 255 registers a thread). */
  size_t wgmma_grid = !strcmp(arch, "sm_90a") ? 4 * 2 * N_MASKS * BWD_WGMMA_GRID : 0;
  /* ws90's: the same grid over head dims 64, 96, 128, 192 and 256. */
  size_t ws90_grid = !strcmp(arch, "sm_90a") ? 5 * 2 * N_MASKS * BWD_WS90_GRID : 0;
  size_t np_wgmma = 0, np_ws90 = 0, np_features = 0;
  for (size_t i = 0; i < np; i++) {
    np_wgmma += strncmp(p[i].name, "bwd.wgmma90.", 12) == 0;
    np_ws90 += strncmp(p[i].name, "bwd.ws90.", 9) == 0;
    np_features += strncmp(p[i].name, "bwd.mma80f.", 11) == 0;
  }
  /* mma80f's grid is mma80's. */
  const size_t mma80_grid = (size_t)N_BWD_HEAD_DIMS * 2 * N_MASKS * BWD_GRID;
  CHECK_WHY(n - n_wgmma - n_ws90 - n_features + np - np_wgmma - np_ws90 - np_features == mma80_grid &&
                n_features + np_features == mma80_grid && n_wgmma + np_wgmma == wgmma_grid &&
                n_ws90 + np_ws90 == ws90_grid,
            "%s bwd: %zu variants + %zu pruned (wgmma90 %zu + %zu, ws90 %zu + %zu, mma80f %zu + %zu)", arch, n,
            np, n_wgmma, np_wgmma, n_ws90, np_ws90, n_features, np_features);
  /* Four warps at d128 hold mma80's accumulators and no more. */
  CHECK_STR(find_reason(p, np, "bwd.mma80f.bf16.d128.none.m64n64w4.atomic"),
            "soft-cap: accumulators 224 > 192 registers per thread");
  if (!strcmp(arch, "sm_90a")) {
    CHECK_STR(find_reason(p, np, "bwd.ws90.bf16.d128.none.m64n128s2g"),
              "GROUPED 1: only causal (the other masks go pair by pair)");
    CHECK_STR(find_reason(p, np, "bwd.ws90.fp16.d64.local.m64n128s3kpg"),
              "GROUPED 1: only causal (the other masks go pair by pair)");
    CHECK_STR(find_reason(p, np, "bwd.ws90.bf16.d128.none.m64n128s2xr.ordered"),
              "DQ_SHIFT 1: only DQ_MODE ordered with PERSISTENT 1 and no mask");
    CHECK_STR(find_reason(p, np, "bwd.ws90.bf16.d128.causal.m64n128s2pxr.ordered"),
              "DQ_SHIFT 1: only DQ_MODE ordered with PERSISTENT 1 and no mask");
    CHECK_STR(find_reason(p, np, "bwd.ws90.bf16.d64.causal.m64n128s2pax.ordered"),
              "DQ_MODE ordered: dQ split by keys over two buffers (d64, DQ_KEYS 0, BLOCK_M 64 over BLOCK_N 128)");
  }
  /* d128: K, V, Q, dO tiles of 64 rows x 128 elements (swizzled, unpadded),
   * P and dS of 64 x (64 + 8), lse and D of 64 rows: 65536 + 18432 + 512
   * bytes. block_m is the key block. */
  const fat_variant *def = find(v, n, "bwd.mma80.bf16.d128.causal.m64n64w4.atomic");
  CHECK_WHY(def != NULL, "%s: bwd.mma80.bf16.d128.causal.m64n64w4.atomic missing", arch);
  if (def) {
    CHECK_WHY(def->is_default, "%s: d128 bwd default not marked", arch);
    CHECK_STR(def->params, "BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic PREFETCH=0 WARPS=4");
    CHECK_WHY(def->smem_bytes == 84480 && def->threads == 128 && def->block_m == 64,
              "%s: d128 bwd resources smem %d threads %d block_m %d", arch, def->smem_bytes, def->threads,
              def->block_m);
    CHECK_WHY(def->head_dim == 128 && def->dtype == FAT_BF16 && def->mask == FAT_MASK_CAUSAL, "enums wrong");
  }
  const fat_variant *d256 = find(v, n, "bwd.mma80.fp16.d256.none.m64n64w8.separate");
  CHECK_WHY(d256 && !d256->is_default && d256->threads == 256, "%s: d256 separate variant", arch);
  /* PREFETCH doubles the Q and dO tiles: 2 x 64 x 128 x 2 more bytes. */
  const fat_variant *p1 = find(v, n, "bwd.mma80.bf16.d128.local.m64n64w4.atomic.p1");
  CHECK_WHY(p1 && !p1->is_default && p1->mask == FAT_MASK_LOCAL && p1->smem_bytes == 84480 + 32768,
            "%s: bwd.mma80.bf16.d128.local.m64n64w4.atomic.p1: smem %d", arch, p1 ? p1->smem_bytes : -1);
  if (p1) CHECK_STR(p1->params, "BLOCK_M=64 BLOCK_N=64 DQ_MODE=atomic PREFETCH=1 WARPS=4");
  const struct { const char *name, *reason; } want[] = {
      /* 2x(64 keys x 256 columns) + 2x(64 x 64) fp32 over 128 threads */
      {"bwd.mma80.fp16.d256.none.m64n64w4.atomic", "accumulators 320 > 192 registers per thread"},
      /* 32 rows give 2 row tiles, so 8 warps split the columns at least 4 ways */
      {"bwd.mma80.fp16.d96.none.m32n32w8.atomic",
       "atomic dQ: no slice of head dim 96 of at most 64 columns splits over 8 warps; "
       "S: 32 x 32 does not split into whole 16 x 16 tiles over 8 warps"},
      {"bwd.mma80.fp16.d96.none.m32n64w8.separate", "dQ: 32 x 96 does not split into whole 16 x 16 tiles over 8 warps"},
  };
  for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
    const char *got = NULL;
    for (size_t i = 0; i < np; i++)
      if (!strcmp(p[i].name, want[w].name)) got = p[i].reason;
    CHECK_WHY(got && !strcmp(got, want[w].reason), "%s: %s pruned for '%s', want '%s'", arch, want[w].name,
              got ? got : "(not pruned)", want[w].reason);
  }
  /* (64 + 256) rows x 256 (swizzled) + 2 x 128 x 40 elements (P, dS) + 1024 bytes of row stats */
  if (!strcmp(arch, "sm_80")) {
    const char *got = NULL;
    for (size_t i = 0; i < np; i++)
      if (!strcmp(p[i].name, "bwd.mma80.fp16.d256.none.m128n32w4.atomic")) got = p[i].reason;
    CHECK_WHY(got && !strcmp(got, "shared memory 185344 > 166912 bytes"), "sm_80 d256 m128n32w4: '%s'",
              got ? got : "(not pruned)");
  }
  /* ... and with PREFETCH's second Q and dO: (64 + 2 x 256) rows x 256 + ... */
  const char *got_p1 = NULL;
  for (size_t i = 0; i < np; i++)
    if (!strcmp(p[i].name, "bwd.mma80.fp16.d256.none.m128n32w4.atomic.p1")) got_p1 = p[i].reason;
  char want_p1[64];
  snprintf(want_p1, sizeof want_p1, "shared memory 316416 > %d bytes", !strcmp(arch, "sm_80") ? 166912 : 232448);
  CHECK_WHY(got_p1 && !strcmp(got_p1, want_p1), "%s d256 m128n32w4.p1: '%s'", arch, got_p1 ? got_p1 : "(not pruned)");
}

/* A query for what the space lacks gets a message naming the bad value. */
/* N_SM80 and N_SM90A: the forward's variant counts of those two (the
 * whole spaces main expanded); the others are expanded here. */
static void test_query_errors(fat_gen *g, size_t n_sm80, size_t n_sm90a) {
  char err[ERR_LEN];
  const int d80[] = {80};
  fat_variant *v;
  size_t n;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = d80, .n_head_dims = 1, .arch = "sm_80"};
  CHECK_WHY(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == -1 && n == 0 && v == NULL, "accepted d80");
  CHECK_STR(err, "head dim 80 is not in the fwd space (32, 64, 96, 128, 192, 256)");
  q.n_head_dims = 0;
  q.arch = "sm_75";
  CHECK_WHY(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == -1, "accepted sm_75");
  CHECK_STR(err, "unknown arch 'sm_75' (known: sm_80, sm_86, sm_87, sm_89, sm_90a, sm_100, sm_103, "
                 "sm_120)");
  /* The targets the space knows, as --arch checks them; and each of them
   * generates (the GeForce parts' 99 KiB prune more than sm_80's 163). */
  char archs[16][16];
  const int n_archs = fat_gen_archs(g, archs, 16, err, sizeof err);
  CHECK_INT(n_archs, 8);
  CHECK(n_archs == 8 && !strcmp(archs[0], "sm_80") && !strcmp(archs[1], "sm_86") &&
        !strcmp(archs[2], "sm_87") && !strcmp(archs[3], "sm_89") && !strcmp(archs[4], "sm_90a") &&
        !strcmp(archs[5], "sm_100") && !strcmp(archs[6], "sm_103") && !strcmp(archs[7], "sm_120"));
  size_t n_by_arch[8] = {0};
  for (int a = 0; a < n_archs && a < 8; a++) {
    if (!strcmp(archs[a], "sm_80") || !strcmp(archs[a], "sm_90a")) {
      n_by_arch[a] = !strcmp(archs[a], "sm_80") ? n_sm80 : n_sm90a;
      continue;
    }
    fat_gen_query qa = {.direction = FAT_FWD, .arch = archs[a]};
    CHECK_WHY(fat_gen_variants(g, &qa, &v, &n_by_arch[a], NULL, NULL, err, sizeof err) == 0,
              "%s: %s", archs[a], err);
    for (size_t i = 0; i < n_by_arch[a]; i++) fat_variant_free(&v[i]);
    free(v);
  }
  /* sm_89 and sm_120 (99 KiB too) add the fp8 caches' variants to sm_86's. */
  CHECK(n_by_arch[1] < n_by_arch[0] && n_by_arch[3] > n_by_arch[1] && n_by_arch[3] == n_by_arch[7]);
  CHECK(n_by_arch[2] == n_by_arch[0]);
  q.arch = "sm_80";
  q.direction = FAT_BWD;
  q.n_head_dims = 1;
  CHECK_WHY(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == -1, "accepted bwd d80");
  CHECK_STR(err, "head dim 80 is not in the bwd space (64, 96, 128, 192, 256)");

  int dims[8];
  int nd = fat_gen_head_dims(g, FAT_FWD, dims, 8, err, sizeof err);
  CHECK_WHY(nd == N_HEAD_DIMS, "%d head dims: %s", nd, nd < 0 ? err : "");
  for (int i = 0; i < nd && i < N_HEAD_DIMS; i++) CHECK_WHY(dims[i] == HEAD_DIMS[i], "head dim %d: %d", i, dims[i]);
  nd = fat_gen_head_dims(g, FAT_BWD, dims, 8, err, sizeof err);
  CHECK_WHY(nd == N_BWD_HEAD_DIMS, "%d bwd head dims", nd);
  for (int i = 0; i < nd && i < N_BWD_HEAD_DIMS; i++)
    CHECK_WHY(dims[i] == HEAD_DIMS[i + 1], "bwd head dim %d: %d", i, dims[i]);
  CHECK_WHY(fat_gen_head_dims(g, FAT_FWD, dims, 2, err, sizeof err) == -1, "cap 2 accepted");
  CHECK_STR(err, "the space has 6 head dims, more than the 2 asked for");
}

/* fat_gen_open on a fixture folder fails with a message containing WANT. */
static void expect_open_error(const char *fixture, const char *want) {
  char dir[4096], err[ERR_LEN];
  snprintf(dir, sizeof dir, "%s/tests/data/gen/%s", root(), fixture);
  fat_gen *g = fat_gen_open(dir, err, sizeof err);
  CHECK_WHY(g == NULL, "%s: opened", fixture);
  if (!g) CHECK_CONTAINS(err, want);
  fat_gen_close(g);
}

static void test_script_errors(void) {
  expect_open_error("syntax", "generator/space.lua:4: unexpected symbol near '='");
  expect_open_error("runtime", "generator/space.lua:3: attempt to index a nil value (local 'family')");
  expect_open_error("nested", "generator/helper.lua:2: helper refuses to load");
  expect_open_error("missing_module",
                    "generator/space.lua:2: fat.require: no generator script 'nope' (generator/nope.lua not found)");
  expect_open_error("bad_template_name",
                    "generator/space.lua:2: bad argument #1 to 'read_template' (template name "
                    "'../generator/space.lua' must be a file name in templates/ (no '/' or '..'))");
  expect_open_error("runaway", "generator/space.lua:3: generator script exceeded 200000000 instructions");
  expect_open_error("sandbox",
                    "generator/space.lua:6: globals: os=nil io=nil debug=nil package=nil require=nil "
                    "dofile=nil loadfile=nil load=nil print=nil string=table table=table math=table "
                    "utf8=table fat=table");
  expect_open_error("no_such_fixture", "is not a folder");
}

/* What Lua returns is checked field by field. */
static void test_bad_variant(void) {
  char dir[4096], err[ERR_LEN];
  fat_variant *v = NULL;
  size_t n = 7;
  fat_gen_query q = {.direction = FAT_FWD, .arch = "sm_80"};
  snprintf(dir, sizeof dir, "%s/tests/data/gen/bad_variant", root());
  fat_gen *g = fat_gen_open(dir, err, sizeof err);
  CHECK_WHY(g != NULL, "%s", err);
  if (!g) return;
  CHECK_WHY(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == -1 && v == NULL && n == 0,
            "bad variant accepted");
  CHECK_STR(err, "space.generate: variant 1: field 'family' must be a string, not nil");
  fat_gen_close(g);
}

/* Copies every regular file of FROM into TO; returns 0 or -1. */
static int copy_dir(const char *from, const char *to) {
  DIR *d = opendir(from);
  if (!d) return -1;
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char src[4096], dst[4096], buf[65536];
    snprintf(src, sizeof src, "%s/%s", from, e->d_name);
    snprintf(dst, sizeof dst, "%s/%s", to, e->d_name);
    struct stat st;
    if (stat(src, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    if (!in || !out) rc = -1;
    for (size_t k; in && out && (k = fread(buf, 1, sizeof buf, in)) > 0;)
      if (fwrite(buf, 1, k, out) != k) rc = -1;
    if (in) fclose(in);
    if (out && fclose(out) != 0) rc = -1;
  }
  closedir(d);
  return rc;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    char path[4096];
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
      remove_dir(path);
    else
      unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* A source folder with the real generator/ and the fixture templates in
 * tests/data/gen/TEMPLATES; DIR receives its path. Returns 0 or -1. */
static int make_source_dir(const char *templates, char dir[64]) {
  char path[4096], sub[4096];
  strcpy(dir, "/tmp/fatune-test-gen-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  snprintf(sub, sizeof sub, "%s/generator", dir);
  snprintf(path, sizeof path, "%s/generator", root());
  if (mkdir(sub, 0700) != 0 || copy_dir(path, sub) != 0) return -1;
  snprintf(sub, sizeof sub, "%s/templates", dir);
  snprintf(path, sizeof path, "%s/tests/data/gen/%s", root(), templates);
  if (mkdir(sub, 0700) != 0 || copy_dir(path, sub) != 0) return -1;
  return 0;
}

/* Includes: quoted includes of templates/ files inlined once each, others
 * kept; placeholders substituted in every inlined file. */
static void test_engine_include(void) {
  char dir[64], err[ERR_LEN];
  fat_gen *g = NULL;
  fat_variant *v = NULL;
  size_t n = 0;
  const int d64[] = {64};
  const fat_dtype fp16[] = {FAT_FP16};
  const fat_mask none[] = {FAT_MASK_NONE};
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = d64, .n_head_dims = 1, .dtypes = fp16,
                     .n_dtypes = 1, .masks = none, .n_masks = 1, .arch = "sm_80"};
  if (make_source_dir("templates_include", dir) != 0) {
    CHECK_WHY(0, "cannot make a source folder under /tmp");
    goto out;
  }
  g = fat_gen_open(dir, err, sizeof err);
  CHECK_WHY(g != NULL, "%s", err);
  if (!g) goto out;
  if (fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) != 0) {
    CHECK_WHY(0, "%s", err);
    goto out;
  }
  const fat_variant *a = find(v, n, "fwd.mma80.fp16.d64.none.m64n32w4s2");
  CHECK_WHY(a != NULL, "variant missing");
  if (a)
    CHECK_STR(a->source,
              "// fwd.mma80.fp16.d64.none.m64n32w4s2\n"
              "// from templates/fwd_mma80.cu with BLOCK_M=64 BLOCK_N=32 STAGES=2 WARPS=4\n"
              "// generated by fatune; do not edit.\n"
              "// Fixture for test_gen: include inlining (stands in for the real template).\n"
              "// begin templates/inc_a.cuh\n"
              "// inc_a.cuh: includes inc_b.h, which must appear once in the result.\n"
              "// begin templates/inc_b.h\n"
              "#define B_MARK 1\n"
              "// end templates/inc_b.h\n"
              "#define A_ROWS 64\n"
              "// end templates/inc_a.cuh\n"
              "#include <cuda_fp16.h>\n"
              "#include \"sub/inc_b.h\"\n"
              "#include \"not_there.h\"\n"
              "// templates/inc_b.h inlined above\n"
              "extern \"C\" __global__ void fat_fwd_mma80() { int rows = 64, d = 64; }\n");
out:
  free_variants(v, n);
  fat_gen_close(g);
  remove_dir(dir);
}

/* An unknown placeholder names the included file, its line and the name. */
static void test_engine_unknown_placeholder(void) {
  char dir[64], err[ERR_LEN];
  fat_gen *g = NULL;
  fat_variant *v = NULL;
  size_t n = 0;
  fat_gen_query q = {.direction = FAT_FWD, .arch = "sm_80"};
  if (make_source_dir("templates_unknown", dir) != 0) {
    CHECK_WHY(0, "cannot make a source folder under /tmp");
    goto out;
  }
  g = fat_gen_open(dir, err, sizeof err);
  CHECK_WHY(g != NULL, "%s", err);
  if (!g) goto out;
  CHECK_WHY(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == -1, "unknown placeholder accepted");
  CHECK_STR(err, "templates/inc_bad.h:3: unknown placeholder {{NO_SUCH}}");
out:
  free_variants(v, n);
  fat_gen_close(g);
  remove_dir(dir);
}

/* No generated source reads a file (compile.c refuses to hand one that
 * would to NVRTC): the generator inlines every template include. */
static void test_sources_self_contained(const whole_space *s) {
  char why[256];
  size_t refused = 0;
  for (size_t i = 0; i < s->n; i++) {
    fat_source_file_reads(s->v[i].source, why, sizeof why);
    if (why[0] && !refused++) fprintf(stderr, "%s: %s\n", s->v[i].name, why);
  }
  CHECK_WHY(s->n > 0 && refused == 0, "%s %s: %zu of %zu sources refused", s->arch,
            fat_direction_name(s->direction), refused, s->n);
}

/* The family table (core/family.h) against the generator: every family the
 * generator produces, on either architecture and in either direction, has
 * its row, and every row is produced by the generator; the family of the
 * runtime's built-in defaults has a default variant of every head dim,
 * dtype and mask on sm_80 (which every GPU runs); a family that is never a
 * winner has no default. */
typedef struct family_tally {
  size_t seen[16], defaults_sm80[16];
} family_tally;

/* Counts the space S's variants and defaults by family row into T. */
static void family_table_count(family_tally *t, const whole_space *s) {
  for (size_t i = 0; i < s->n; i++) {
    const fat_variant *v = &s->v[i];
    const fat_family *f = fat_family_find(v->family, v->direction);
    CHECK_WHY(f != NULL, "%s: family '%s' (%s) has no row in core/family.c", v->name, v->family,
              fat_direction_name(v->direction));
    if (!f) continue;
    size_t row = (size_t)(f - fat_family_at(0));
    if (row >= sizeof t->seen / sizeof t->seen[0]) continue;  /* test_family_table says */
    t->seen[row]++;
    if (!strcmp(s->arch, "sm_80") && v->is_default) t->defaults_sm80[row]++;
    CHECK_WHY(f->may_win || !v->is_default, "%s: a default of a family that never wins", v->name);
  }
}

/* T: family_table_count's tally of both directions on sm_80 and sm_90a. */
static void test_family_table(const family_tally *t) {
  const size_t *seen = t->seen, *defaults_sm80 = t->defaults_sm80;
  size_t nf = fat_family_count();
  CHECK_WHY(nf > 0 && nf <= sizeof t->seen / sizeof t->seen[0], "%zu families", nf);
  if (nf == 0 || nf > sizeof t->seen / sizeof t->seen[0]) return;
  /* A default for each dtype and mask at least (2 x 2); the exact sets,
   * head dim by head dim, are the space tests'. */
  for (size_t i = 0; i < nf; i++) {
    const fat_family *f = fat_family_at(i);
    CHECK_WHY(seen[i] > 0, "family '%s' (%s) of core/family.c: the generator produces no variant",
              f->name, fat_direction_name(f->direction));
    CHECK_WHY(!f->builtin_default || defaults_sm80[i] >= 4, "family '%s' (%s) serves the built-in "
              "defaults but has %zu defaults on sm_80", f->name, fat_direction_name(f->direction),
              defaults_sm80[i]);
    CHECK_WHY(f->may_win || (!f->builtin_default && !f->packed), "family '%s': never a winner, "
              "yet marked as serving", f->name);
  }
  CHECK(fat_family_find("mma80", FAT_FWD) != fat_family_find("mma80", FAT_BWD));
  CHECK(fat_family_find("splitkv", FAT_BWD) == NULL);
  CHECK(fat_family_find(NULL, FAT_FWD) == NULL);
}

int main(void) {
  char err[ERR_LEN];
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  if (!g) {
    fprintf(stderr, "fat_gen_open(embedded): %s\n", err);
    return 1;
  }
  /* per head dim 32..256; see family_mma80.lua's constraints */
  const int want_sm80[N_HEAD_DIMS] = {33, 33, 31, 31, 18, 16};
  const int want_sm90a[N_HEAD_DIMS] = {33, 33, 31, 31, 21, 19};
  /* splitkv: 40 less SPLITS 1 unpacked (4) less STAGES 3 with BLOCK_N 128
   * (9 more) is 27; shared memory leaves BLOCK_N 64 with STAGES 2 only
   * (9) at d192 and d256 on sm_80, and BLOCK_N 64 (18) at d256 on sm_90a
   * (the tiles of head dims that are multiples of 64 are unpadded) */
  /* ... and SPLITS 0 (the launch's) with each of the three tiles, packed
   * or not, up to d128 (6 more) */
  const int splitkv_sm80[N_HEAD_DIMS] = {33, 33, 33, 33, 9, 9};
  const int splitkv_sm90a[N_HEAD_DIMS] = {33, 33, 33, 33, 27, 18};
  /* paged: one 16-row tile a warp leaves BLOCK_M 64 on 4 warps (6: key
   * tiles 64 and 128, STAGES 3 with 64 keys only, packed or not) and
   * BLOCK_M 128 on 8 (3: unpacked only), BLOCK_N 32 only from d192; there
   * the register rule (accumulators and copies) leaves 32 and 64 keys at
   * d192 (BLOCK_M 64 with 64 keys: STAGES 2 alone on sm_80, shared memory)
   * and 32 at d256 (BLOCK_M 128 with 64 too on sm_90a) */
  const int paged_sm80[N_HEAD_DIMS] = {9, 9, 9, 9, 9, 6};
  const int paged_sm90a[N_HEAD_DIMS] = {9, 9, 9, 9, 12, 7};
  /* wgmma90: sm_90a only, head dims 64, 128, 192, 256 and 96 (on the d128
   * template: its shared memory); OVERLAP only with STAGES 2 (4 of 16
   * pruned), then shared memory prunes more at d192 and d256 */
  const int wgmma_sm80[N_HEAD_DIMS] = {0, 0, 0, 0, 0, 0};
  const int wgmma_sm90a[N_HEAD_DIMS] = {0, 12, 12, 12, 10, 8};
  /* ws90 without a mask: sm_90a only, each head dim's key tiles (3 up to
   * d128, 2 above) times OVERLAP (3), PINGPONG and PERSISTENT; its register and
   * shared-memory rules leave all of them (they prune the tiles the lists
   * leave out), and of 192 rows (three consumers' 160 registers) d64's
   * 128-key tile alone; d96 also on its own 96-column template (SLAB 32):
   * four key tiles of 128 rows and the 96-key one of 192; causal and local
   * as many (PERSISTENT 2 for 1) */
  const int ws_sm80[N_HEAD_DIMS] = {0, 0, 0, 0, 0, 0};
  const int ws_sm90a[N_HEAD_DIMS] = {0, 36 + 12, 36 + 48 + 12, 36, 24, 24};
  /* per head dim 64..256, atomic and separate, PREFETCH 0 and 1; see
   * family_bwd_mma80.lua's constraints (sm_90a's larger shared memory keeps
   * more of d192, d256; PREFETCH only where accumulators are many; atomic
   * d96 loses BLOCK_M 32 with 8 warps: no 32-row slice of dQ splits 8 ways;
   * d128 and d192 each keep one more on sm_80 since their tiles are
   * swizzled, not padded) */
  const int bwd_atomic_sm80[N_BWD_HEAD_DIMS] = {23, 14, 20, 11, 7};
  const int bwd_separate_sm80[N_BWD_HEAD_DIMS] = {23, 14, 20, 10, 7};
  const int bwd_atomic_sm90a[N_BWD_HEAD_DIMS] = {24, 15, 22, 12, 12};
  const int bwd_separate_sm90a[N_BWD_HEAD_DIMS] = {24, 15, 22, 11, 11};
  /* wgmma90 (sm_90a): d64 loses BLOCK_M 64 with two warpgroups (dQ's
   * 32-column slices), d96 and d128 BLOCK_M 128 (accumulators); d256
   * (two warpgroups per 64 keys) keeps only BLOCK_M 64, BLOCK_N 64 (256
   * threads), both stage counts; d192 has none */
  const int bwd_wgmma_sm80[N_BWD_HEAD_DIMS] = {0, 0, 0, 0, 0};
  const int bwd_wgmma_sm90a[N_BWD_HEAD_DIMS] = {6, 4, 4, 0, 2};
  /* ws90 (sm_90a): DQ_KEYS 1 only with two consumers (BLOCK_N 128); d64
   * loses BLOCK_M 128 with two consumers (registers; with three stages
   * shared memory too), d96 and d128 BLOCK_M 128 (accumulators); d192 and
   * d256 (two consumers share 64 keys) 64 x 64 tiles, DQ_KEYS 0 and atomic
   * dQ only, two stages (d192 also three); each with PERSISTENT 0 and 1 but DQ_KEYS 1 with PERSISTENT 1 on
   * the 128-column template (d96, d128: spills); causal each also with
   * GROUPED 1; every one with STATS_AHEAD and DS_STSM 0 and 1: 64, 40, 40,
   * 16 and 8 atomic; each again ordered but d64's 16 of dQ split by keys
   * (DQ_KEYS 0, BLOCK_M 64 over BLOCK_N 128): 48, 40 and 40; without a
   * mask the ordered persistent ones again with DQ_SHIFT 1: 24, 16, 16 */
  const int bwd_ws90_sm90a[N_BWD_HEAD_DIMS] = {64 + 48, 40 + 40, 40 + 40, 16, 8};
  const int bwd_ws90_shift_sm90a[N_BWD_HEAD_DIMS] = {24, 16, 16, 0, 0};
  const int bwd_ws90_sm80[N_BWD_HEAD_DIMS] = {0, 0, 0, 0, 0};
  /* Each whole space is expanded once and every test of it run on that
   * expansion; one at a time, freed before the next (the sm_90a
   * forward's sources alone are some 400 MB). */
  family_tally tally = {{0}, {0}};
  size_t n_fwd_sm80 = 0, n_fwd_sm90a = 0;
  whole_space s;
  if (whole_space_load(g, FAT_FWD, "sm_80", &s) == 0) {
    test_sources_self_contained(&s);
    family_table_count(&tally, &s);
    test_space_counts(&s, want_sm80, splitkv_sm80, paged_sm80, wgmma_sm80, ws_sm80);
    n_fwd_sm80 = s.n;
    whole_space_free(&s);
  }
  if (whole_space_load(g, FAT_FWD, "sm_90a", &s) == 0) {
    test_sources_self_contained(&s);
    family_table_count(&tally, &s);
    test_space_counts(&s, want_sm90a, splitkv_sm90a, paged_sm90a, wgmma_sm90a, ws_sm90a);
    test_names_and_hashes(&s);
    n_fwd_sm90a = s.n;
    whole_space_free(&s);
  }
  if (whole_space_load(g, FAT_BWD, "sm_80", &s) == 0) {
    test_sources_self_contained(&s);
    family_table_count(&tally, &s);
    test_bwd_space(&s, bwd_atomic_sm80, bwd_separate_sm80, bwd_wgmma_sm80, bwd_ws90_sm80, bwd_ws90_sm80);
    whole_space_free(&s);
  }
  if (whole_space_load(g, FAT_BWD, "sm_90a", &s) == 0) {
    test_sources_self_contained(&s);
    family_table_count(&tally, &s);
    test_bwd_space(&s, bwd_atomic_sm90a, bwd_separate_sm90a, bwd_wgmma_sm90a, bwd_ws90_sm90a, bwd_ws90_shift_sm90a);
    whole_space_free(&s);
  }
  test_family_table(&tally);
  test_pruning(g);
  test_query_errors(g, n_fwd_sm80, n_fwd_sm90a);
  fat_gen_close(g);
  test_script_errors();
  test_bad_variant();
  test_engine_include();
  test_engine_unknown_placeholder();
  return check_summary("test_gen");
}
