/* SPDX-License-Identifier: MIT */
/* Build-time tool: expands the generator's default variants (is_default = 1,
 * every head dim, dtype and mask of both directions, and for the backward a
 * deterministic one as well; for the 16-bit forward up to d128 a decoding
 * one too, splitkv's, which the runtime launches for a call its rule finds
 * decoding-shaped; e4m3's, which only the sm_90a family ws90
 * generates, from an sm_90a query of its own; an fp8 K/V cache's, which
 * the decoding families generate from sm_89, from an sm_89 query: its 99
 * KiB of shared memory is the least of those targets') into a C file for the runtime,
 * which cannot embed Lua. Run by runtime/CMakeLists.txt:
 *   gen_defaults OUT.c
 * Writes OUT.c through a temporary name, so a failed run leaves no half file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "family.h"
#include "gen.h"

#define ERRLEN 1024
/* Pruning uses the smallest shared-memory limit of the supported
 * architectures, so every default listed fits every supported GPU. */
#define DEFAULTS_ARCH "sm_80"
#define E4M3_ARCH "sm_90a"  /* e4m3's one family (ws90) is Hopper's */
#define KV8_ARCH "sm_89"    /* the first target that converts e4m3 */

/* Writes S as a C string literal, one source line per literal line. Octal
 * escapes are always three digits (never swallow a following digit) and
 * '?' is escaped so that no trigraph can form under -std=c11. */
static void put_literal(FILE *f, const char *s) {
  fputs("\"", f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '\n') fputs(p[1] ? "\\n\"\n  \"" : "\\n", f);
    else if (*p == '"' || *p == '\\' || *p == '?') fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f) fprintf(f, "\\%03o", *p);
    else fputc(*p, f);
  }
  fputs("\"", f);
}

/* The backward's deterministic default: among the variants of DEF's family
 * and (dtype, mask, head dim) whose dQ mode is deterministic (separate or
 * ordered: fat_dq_deterministic; mma80, the only family with defaults, has
 * separate alone), the one with DEF's tiles, else the first the space
 * lists; NULL when there is none. */
static const fat_variant *deterministic_default(const fat_variant *v, size_t n,
                                                const fat_variant *def) {
  const fat_variant *first = NULL;
  int def_m, def_n, m, bn;
  fat_dq_mode def_mode, mode;
  char e[256];
  if (fat_bwd_params_parse(def->params, &def_m, &def_n, &def_mode, e, sizeof e)) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (v[i].dtype != def->dtype || v[i].mask != def->mask || v[i].head_dim != def->head_dim ||
        strcmp(v[i].family, def->family) ||
        fat_bwd_params_parse(v[i].params, &m, &bn, &mode, e, sizeof e) || !fat_dq_deterministic(mode))
      continue;
    if (!first) first = &v[i];
    if (m == def_m && bn == def_n && v[i].threads == def->threads) return &v[i];
  }
  return first;
}

int main(int argc, char **argv) {
  char err[ERRLEN], tmp[ERRLEN / 2];
  int rc = 1;
  fat_gen *g = NULL;
  /* The forward and backward spaces of DEFAULTS_ARCH, e4m3's forward, and
   * the fp8 caches'. */
  fat_variant *v[4] = {NULL, NULL, NULL, NULL};
  size_t n[4] = {0, 0, 0, 0};
  /* What goes into the table: (variant, deterministic) pairs. */
  const fat_variant **pick = NULL;
  int *pick_det = NULL, count = 0;
  FILE *f = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: gen_defaults OUT.c\n");
    return 2;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  if (!(g = fat_gen_open(NULL, err, sizeof err))) goto fail;
  for (int d = 0; d < 2; d++) {
    fat_gen_query q = {.direction = d ? FAT_BWD : FAT_FWD, .arch = DEFAULTS_ARCH};
    if (fat_gen_variants(g, &q, &v[d], &n[d], NULL, NULL, err, sizeof err)) goto fail;
  }
  const fat_dtype e4m3[] = {FAT_E4M3};
  fat_gen_query q8 = {.direction = FAT_FWD, .arch = E4M3_ARCH, .dtypes = e4m3, .n_dtypes = 1};
  if (fat_gen_variants(g, &q8, &v[2], &n[2], NULL, NULL, err, sizeof err)) goto fail;
  const fat_dtype kv8[] = {FAT_FP16_E4M3KV, FAT_BF16_E4M3KV};
  fat_gen_query qkv = {.direction = FAT_FWD, .arch = KV8_ARCH, .dtypes = kv8, .n_dtypes = 2};
  if (fat_gen_variants(g, &qkv, &v[3], &n[3], NULL, NULL, err, sizeof err)) goto fail;
  pick = calloc(2 * (n[0] + n[1]) + n[2] + n[3] + 1, sizeof *pick);
  pick_det = calloc(2 * (n[0] + n[1]) + n[2] + n[3] + 1, sizeof *pick_det);
  if (!pick || !pick_det) {
    snprintf(err, sizeof err, "out of memory");
    goto fail;
  }
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < n[d]; i++) {
      const fat_variant *x = &v[d][i];
      /* The families of the built-in defaults (family.h): one fused kernel
       * per call that every GPU runs (splitkv's with its combine kernel);
       * the materialising baseline's several kernels are the tuner's
       * yardstick only. */
      const fat_family *f = fat_family_find(x->family, x->direction);
      if (!x->is_default || !f || !f->builtin_default) continue;
      pick[count] = x;
      /* A backward default whose dQ mode is deterministic is the
       * deterministic default already. */
      int m, bn;
      fat_dq_mode mode = FAT_DQ_ATOMIC;
      const int det_already = x->direction == FAT_BWD &&
                              !fat_bwd_params_parse(x->params, &m, &bn, &mode, err, sizeof err) &&
                              fat_dq_deterministic(mode);
      pick_det[count++] = det_already;
      if (x->direction != FAT_BWD || det_already) continue;
      const fat_variant *det = deterministic_default(v[d], n[d], x);
      if (!det) {
        snprintf(err, sizeof err, "%s: no deterministic variant (separate or ordered dQ) for the "
                 "deterministic default", x->name);
        goto fail;
      }
      pick[count] = det;
      pick_det[count++] = 1;
    }
  /* e4m3: the generator's default of each (head dim, mask), of the family
   * that alone serves the dtype. */
  for (size_t i = 0; i < n[2]; i++)
    if (v[2][i].is_default && v[2][i].dtype == FAT_E4M3) pick_det[count] = 0, pick[count++] = &v[2][i];
  /* The fp8 caches: the defaults of the two families that read them, the
   * contiguous cache's (splitkv) and the paged one's. */
  for (size_t i = 0; i < n[3]; i++)
    if (v[3][i].is_default && fat_dtype_is_kv8(v[3][i].dtype))
      pick_det[count] = 0, pick[count++] = &v[3][i];
  if (count == 0) {
    snprintf(err, sizeof err, "the generator produced no default variant");
    goto fail;
  }
  if (!(f = fopen(tmp, "w"))) {
    snprintf(err, sizeof err, "cannot write %s", tmp);
    goto fail;
  }
  fprintf(f, "/* Generated by tuner/generate/gen_defaults.c from the embedded generator and\n"
             " * templates (fatune %s): the built-in default variants. Do not edit. */\n"
             "#include \"defaults.h\"\n\n", FAT_VERSION);
  for (int i = 0; i < count; i++) {
    fprintf(f, "static const char source_%d[] =\n  ", i);
    put_literal(f, pick[i]->source);
    fputs(";\n\n", f);
  }
  fputs("const fat_default_variant fat_default_variants[] = {\n", f);
  for (int i = 0; i < count; i++) {
    const fat_variant *x = pick[i];
    fprintf(f, "  {\"%s\", %d, %d, \"%s\", \"%s\", \"%s\", \"%s\", %d, %d, %d, %d, %d, %d, source_%d},\n",
            x->name, (int)x->direction, pick_det[i], x->family, x->params, x->entry, x->hash,
            (int)x->dtype, (int)x->mask, x->head_dim, x->block_m, x->threads, x->smem_bytes, i);
  }
  fprintf(f, "};\nconst int fat_n_default_variants = %d;\n", count);
  if (fclose(f)) {
    f = NULL;
    snprintf(err, sizeof err, "cannot write %s", tmp);
    goto fail;
  }
  f = NULL;
  if (rename(tmp, argv[1])) {
    snprintf(err, sizeof err, "cannot rename %s", tmp);
    goto fail;
  }
  rc = 0;
  goto out;
fail:
  fprintf(stderr, "gen_defaults: %s\n", err);
out:
  if (f) fclose(f);
  for (int d = 0; d < 4; d++) {
    for (size_t i = 0; i < n[d]; i++) fat_variant_free(&v[d][i]);
    free(v[d]);
  }
  free(pick);
  free(pick_det);
  fat_gen_close(g);
  return rc;
}
