/* SPDX-License-Identifier: MIT */
/* The generator's variants of one (direction, dtype, mask, head dim), with
 * their sources: what stale.c compares a database's variants with, and
 * what trust.c fills a table's sourceless variants from. */
#include <stdlib.h>
#include "tables_int.h"

void gen_group_free(gen_group *gg) {
  for (size_t i = 0; i < gg->n; i++) fat_variant_free(&gg->v[i]);
  free(gg->v);
  gg->v = NULL;
  gg->n = 0;
}

int gen_group_load(fat_gen *g, fat_direction dir, fat_dtype dt, fat_mask mk, int hd,
                   const char *arch, gen_group *gg, char *err, size_t errlen) {
  gen_group_free(gg);
  /* An architecture whose space lacks the dtype or head dim (e4m3 is
   * sm_90a's alone; the fp8 K/V caches, sm_89's and later, are not
   * sm_80's) refuses the query, or answers it with nothing; the group is
   * the others'. Only when every architecture refuses is it an error (the
   * last one's). */
  int answered = 0, asked = 0;
  for (size_t a = 0; a < N_TABLES_ARCHS; a++) {
    if (arch && strcmp(arch, TABLES_ARCHS[a])) continue;
    fat_gen_query q = {.direction = dir, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                       .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = TABLES_ARCHS[a]};
    fat_variant *v = NULL;
    size_t n = 0;
    asked++;
    if (fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, errlen)) continue;
    answered++;
    fat_variant *all = realloc(gg->v, (gg->n + n) * sizeof *all);
    if (!all && gg->n + n) {
      for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
      free(v);
      set_err(err, errlen, "out of memory");
      return -1;
    }
    if (n) memcpy(all + gg->n, v, n * sizeof *v);
    gg->v = all;
    gg->n += n;
    free(v);
  }
  return answered || !asked ? 0 : -1;
}

const fat_variant *gen_group_find(const gen_group *gg, const char *name) {
  for (size_t i = 0; i < gg->n; i++)
    if (!strcmp(gg->v[i].name, name)) return &gg->v[i];
  return NULL;
}
