/* SPDX-License-Identifier: MIT */
/* The trust rule for rows from elsewhere (trust.h says what it is); the one
 * place it is written. import.c and merge.c load a table file or another
 * database into a scratch database, and scratch.c's judge_and_merge calls
 * fat_trust_check (here) and then fat_trust_cubins (trust_cubins.c) on it
 * before anything reaches the target. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "family.h"
#include "options.h"
#include "tolerance.h"
#include "sha256.h"
#include "tables_int.h"
#include "trust.h"

#define N_DIRECTIONS 2
#define MAX_HEAD_DIMS 64

/* The tables a scratch database holds, in the order their rows are loaded. */
static const char *const TRUST_TABLES[] = {"gpus",     "ceilings", "variants", "builds",  "build_hashes",
                                           "problems", "checks",   "timings", "winners",
                                           "external_timings"};
#define N_TRUST_TABLES (sizeof TRUST_TABLES / sizeof TRUST_TABLES[0])

/* ---- the generator's space, by name --------------------------------------- */

/* One variant as the generator gives it, its source (its hash names it)
 * kept only where fill_sources is to store it. */
typedef struct known_variant {
  char *name, *family, *params, *entry;
  char *source;  /* a group's, while a check has a sourceless row of its name; else NULL */
  char hash[FAT_SHA256_HEX_CHARS + 1];
  fat_direction direction;
  fat_dtype dtype;
  fat_mask mask;
  int head_dim, block_m, threads, smem_bytes;
  size_t arch;  /* the TABLES_ARCHS space it is of */
} known_variant;

/* Variants of one architecture's space, or of a group of it, sorted by name. */
typedef struct known_space {
  int loaded;  /* expanded (a group's: asked, even where its architecture refused the key) */
  known_variant *v;
  size_t n;
} known_space;

/* The key a variant row claims, one group (gen_group.c's) of the generator:
 * a right row's name is among its hundred or so variants, where a whole
 * (direction, architecture) space expands thousands of sources. */
typedef struct group_key {
  fat_direction direction;
  fat_dtype dtype;
  fat_mask mask;
  int head_dim;
} group_key;

/* One group as the generator gives it, each architecture apart. */
typedef struct known_group {
  group_key key;
  known_space archs[N_TABLES_ARCHS];
} known_group;

struct fat_trust {
  fat_gen *g;
  /* The groups rows have claimed, each expanded once; no more than the
   * space has (directions x dtypes x masks x head dims), and names and
   * metadata only, as the whole spaces below keep them (but for the
   * sources a check is to fill in, until it ends). */
  known_group *groups;
  size_t n_groups, cap_groups;
  /* The names of the variants the check in hand is to fill in (a table's
   * rows come without sources), sorted: a group expanded for it keeps
   * these sources, and no others (a source is some 70 kB). */
  char **wanted;
  size_t n_wanted;
  /* The whole spaces, expanded only where a row's name is not in its
   * claimed group: to say which field it claims wrong. */
  known_space spaces[N_DIRECTIONS][N_TABLES_ARCHS];
  int head_dims[N_DIRECTIONS][MAX_HEAD_DIMS];  /* the space's, ascending */
  int n_head_dims[N_DIRECTIONS];               /* -1 until asked */
};

fat_trust *fat_trust_open(fat_gen *g) {
  fat_trust *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->g = g;
  for (int d = 0; d < N_DIRECTIONS; d++) t->n_head_dims[d] = -1;
  return t;
}

static void known_space_free(known_space *s) {
  for (size_t i = 0; i < s->n; i++) {
    free(s->v[i].name);
    free(s->v[i].family);
    free(s->v[i].params);
    free(s->v[i].entry);
    free(s->v[i].source);
  }
  free(s->v);
}

/* Forgets the check in hand's wanted names and the sources kept for them. */
static void wanted_drop(fat_trust *t) {
  for (size_t i = 0; i < t->n_groups; i++)
    for (size_t a = 0; a < N_TABLES_ARCHS; a++)
      for (size_t j = 0; j < t->groups[i].archs[a].n; j++) {
        free(t->groups[i].archs[a].v[j].source);
        t->groups[i].archs[a].v[j].source = NULL;
      }
  for (size_t i = 0; i < t->n_wanted; i++) free(t->wanted[i]);
  free(t->wanted);
  t->wanted = NULL;
  t->n_wanted = 0;
}

void fat_trust_close(fat_trust *t) {
  if (!t) return;
  wanted_drop(t);
  for (size_t i = 0; i < t->n_groups; i++)
    for (size_t a = 0; a < N_TABLES_ARCHS; a++) known_space_free(&t->groups[i].archs[a]);
  free(t->groups);
  for (int d = 0; d < N_DIRECTIONS; d++)
    for (size_t a = 0; a < N_TABLES_ARCHS; a++) known_space_free(&t->spaces[d][a]);
  free(t);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const known_variant *)a)->name, ((const known_variant *)b)->name);
}

static int by_string(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the names of H's sourceless variants into T's wanted list. 0, or
 * -1 with err. */
static int wanted_load(fat_trust *t, sqlite3 *h, const char *name, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  size_t cap = 0;
  int step, rc = -1;
  wanted_drop(t);
  if (sqlite3_prepare_v2(h, "SELECT DISTINCT name FROM main.variants WHERE source IS NULL", -1, &s,
                         NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
    return -1;
  }
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    if (t->n_wanted == cap) {
      const size_t more = cap ? 2 * cap : 64;
      char **grown = realloc(t->wanted, more * sizeof *grown);
      if (!grown) goto oom;
      t->wanted = grown, cap = more;
    }
    if (!(t->wanted[t->n_wanted] = strdup((const char *)sqlite3_column_text(s, 0)))) goto oom;
    t->n_wanted++;
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
    goto out;
  }
  if (t->n_wanted) qsort(t->wanted, t->n_wanted, sizeof *t->wanted, by_string);
  rc = 0;
  goto out;
oom:
  set_err(err, errlen, "out of memory");
out:
  sqlite3_finalize(s);
  return rc;
}

/* Expands Q (its arch TABLES_ARCHS[A]) into S, an empty space, at the
 * architecture's own shared-memory limit, keeping the sources of T's
 * wanted names where KEEP. 0, or -1 with err (the generator refused Q, or
 * memory; S is left empty). */
static int known_load(fat_trust *t, fat_gen_query *q, size_t a, int keep, known_space *s,
                      char *err, size_t errlen) {
  fat_variant *v = NULL;
  size_t n = 0;
  q->arch = TABLES_ARCHS[a];
  if (fat_gen_variants(t->g, q, &v, &n, NULL, NULL, err, errlen)) return -1;
  s->v = calloc(n ? n : 1, sizeof *s->v);
  for (size_t i = 0; i < n; i++) {
    if (s->v) {
      known_variant *k = &s->v[i];
      /* The strings move over; the source, the bulk of it, is freed
       * unless it is wanted. */
      k->name = v[i].name, k->family = v[i].family, k->params = v[i].params;
      k->entry = v[i].entry;
      v[i].name = v[i].family = v[i].params = v[i].entry = NULL;
      memcpy(k->hash, v[i].hash, sizeof k->hash);
      k->direction = v[i].direction, k->dtype = v[i].dtype, k->mask = v[i].mask;
      k->head_dim = v[i].head_dim, k->block_m = v[i].block_m, k->threads = v[i].threads;
      k->smem_bytes = v[i].smem_bytes;
      k->arch = a;
      if (keep && t->n_wanted &&
          bsearch(&k->name, t->wanted, t->n_wanted, sizeof *t->wanted, by_string))
        k->source = v[i].source, v[i].source = NULL;
    }
    fat_variant_free(&v[i]);
  }
  free(v);
  if (!s->v) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  s->n = n;
  qsort(s->v, n, sizeof *s->v, by_name);
  s->loaded = 1;
  return 0;
}

/* Expands (DIR, architecture A) once: the whole space, all head dims,
 * dtypes and masks. */
static int space_load(fat_trust *t, fat_direction dir, size_t a, char *err, size_t errlen) {
  fat_gen_query q = {.direction = dir};
  if (t->spaces[dir][a].loaded) return 0;
  return known_load(t, &q, a, 0, &t->spaces[dir][a], err, errlen);
}

/* The group KEY as the lookups have it so far (an architecture's variants
 * are expanded on the first need of them); NULL out of memory. */
static known_group *group_of(fat_trust *t, const group_key *key) {
  for (size_t i = 0; i < t->n_groups; i++) {
    const group_key *c = &t->groups[i].key;
    if (c->direction == key->direction && c->dtype == key->dtype && c->mask == key->mask &&
        c->head_dim == key->head_dim)
      return &t->groups[i];
  }
  if (t->n_groups == t->cap_groups) {
    const size_t more = t->cap_groups ? 2 * t->cap_groups : 16;
    known_group *grown = realloc(t->groups, more * sizeof *grown);
    if (!grown) return NULL;
    t->groups = grown, t->cap_groups = more;
  }
  known_group *gr = &t->groups[t->n_groups++];
  *gr = (known_group){.key = *key};
  return gr;
}

/* The generator's variant NAME, first in the group KEY its row claims (NULL
 * when the row's key does not parse), architecture by architecture; where
 * the group has no such name, in the whole spaces: KEY's direction's, then
 * the other's, so that a row claiming the wrong key is told which field is
 * wrong. The generator names a variant by its group (direction.family.
 * dtype.dHD.mask.tag) and prunes it by its own configuration, so a group
 * holds just the variants its key selects from the whole space, and both
 * find the same one. *OUT is NULL when no space has it. 0, or -1 with err. */
static int known_find(fat_trust *t, fat_direction dir, const group_key *key, const char *name,
                      const known_variant **out, char *err, size_t errlen) {
  const known_variant probe = {.name = (char *)name};
  known_group *gr = key ? group_of(t, key) : NULL;
  *out = NULL;
  for (size_t a = 0; gr && a < N_TABLES_ARCHS; a++) {
    known_space *s = &gr->archs[a];
    if (!s->loaded) {
      /* An architecture whose space refuses the key (e4m3 on sm_80, a head
       * dim no template has) has none of its variants, as in the whole
       * space; a failure of the generator is the whole spaces' to report. */
      char e2[ERRLEN];
      fat_gen_query q = {.direction = key->direction, .head_dims = &key->head_dim,
                         .n_head_dims = 1, .dtypes = &key->dtype, .n_dtypes = 1,
                         .masks = &key->mask, .n_masks = 1};
      known_load(t, &q, a, 1, s, e2, sizeof e2);
      s->loaded = 1;
    }
    /* (A refused architecture's group has no array at all to search.) */
    if (s->n && (*out = bsearch(&probe, s->v, s->n, sizeof *s->v, by_name))) return 0;
  }
  for (int pass = 0; pass < N_DIRECTIONS; pass++) {
    const fat_direction d = pass == 0 ? dir : (dir == FAT_FWD ? FAT_BWD : FAT_FWD);
    for (size_t a = 0; a < N_TABLES_ARCHS; a++) {
      if (space_load(t, d, a, err, errlen)) return -1;
      const known_space *s = &t->spaces[d][a];
      if (s->n && (*out = bsearch(&probe, s->v, s->n, sizeof *s->v, by_name))) return 0;
    }
  }
  return 0;
}

/* The head dim of the template that serves HEAD_DIM in DIR: the space's
 * smallest at least HEAD_DIM (the kernels zero the padding), 0 for none. */
static int template_dim(fat_trust *t, fat_direction dir, int head_dim, int *out, char *err,
                        size_t errlen) {
  if (t->n_head_dims[dir] < 0) {
    int n = fat_gen_head_dims(t->g, dir, t->head_dims[dir], MAX_HEAD_DIMS, err, errlen);
    if (n < 0) return -1;
    t->n_head_dims[dir] = n;
  }
  *out = 0;
  for (int i = 0; i < t->n_head_dims[dir]; i++) {
    const int d = t->head_dims[dir][i];
    if (d >= head_dim && (!*out || d < *out)) *out = d;
  }
  return 0;
}

/* ---- the rows' own consistency -------------------------------------------- */

/* Every column of every table holds the storage class its declaration names
 * (SQLite would keep 'many' in an INTEGER column, and 'many' >= 0 is true,
 * so the CHECKs alone do not catch it). */
static int check_types(sqlite3 *h, const char *name, char *err, size_t errlen) {
  char sql[512];
  for (size_t t = 0; t < N_TRUST_TABLES; t++) {
    sqlite3_stmt *info = NULL;
    snprintf(sql, sizeof sql, "PRAGMA main.table_info(%s)", TRUST_TABLES[t]);
    if (sqlite3_prepare_v2(h, sql, -1, &info, NULL) != SQLITE_OK) {
      set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
      return -1;
    }
    while (sqlite3_step(info) == SQLITE_ROW) {
      const char *col = (const char *)sqlite3_column_text(info, 1);
      const char *decl = (const char *)sqlite3_column_text(info, 2);
      const char *want = !strcmp(decl, "INTEGER") ? "integer" : !strcmp(decl, "REAL") ? "real"
                         : !strcmp(decl, "TEXT") ? "text" : !strcmp(decl, "BLOB") ? "blob" : NULL;
      sqlite3_stmt *q = NULL;
      if (!want) continue;
      snprintf(sql, sizeof sql, "SELECT rowid, typeof(\"%s\") FROM main.%s WHERE typeof(\"%s\")"
               " NOT IN ('%s', 'null') ORDER BY rowid LIMIT 1", col, TRUST_TABLES[t], col, want);
      int bad = sqlite3_prepare_v2(h, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW;
      if (bad)
        set_err(err, errlen, "%s: %s row %lld: %s holds %s, declared %s", name, TRUST_TABLES[t],
                (long long)sqlite3_column_int64(q, 0), col, sqlite3_column_text(q, 1), decl);
      sqlite3_finalize(q);
      if (bad) {
        sqlite3_finalize(info);
        return -1;
      }
    }
    sqlite3_finalize(info);
  }
  return 0;
}

/* No cubin over the cap; every variable-length profile one fatune can read
 * back (at most FAT_VARLEN_MAX lengths, each within FAT_VARLEN_MAX_LENGTH:
 * the schema checks only its form), its longest being its seqlen; every
 * source hashing to its source_hash; every build_hashes row to its cubin. */
static int check_contents(sqlite3 *h, const char *name, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  char hex[FAT_SHA256_HEX_CHARS + 1], e2[ERRLEN];
  if (sqlite3_prepare_v2(h, "SELECT key, length(cubin) FROM main.builds WHERE length(cubin) > ?1"
                            " ORDER BY id LIMIT 1", -1, &s, NULL) != SQLITE_OK) goto sqlfail;
  sqlite3_bind_int64(s, 1, FAT_TABLES_MAX_CUBIN_BYTES);
  if ((step = sqlite3_step(s)) == SQLITE_ROW) {
    set_err(err, errlen, "%s: build %s: cubin of %lld bytes is over the %lld-byte cap", name,
            sqlite3_column_text(s, 0), (long long)sqlite3_column_int64(s, 1),
            (long long)FAT_TABLES_MAX_CUBIN_BYTES);
    goto out;
  }
  if (step != SQLITE_DONE) goto sqlfail;
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(h, "SELECT id, lengths, seqlen_q FROM main.problems WHERE lengths <> ''"
                            " ORDER BY id", -1, &s, NULL) != SQLITE_OK) goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    fat_lengths l;
    const long long id = sqlite3_column_int64(s, 0);
    if (fat_lengths_parse((const char *)sqlite3_column_text(s, 1), &l, e2, sizeof e2)) {
      set_err(err, errlen, "%s: problem %lld: %s", name, id, e2);
      goto out;
    }
    if (fat_lengths_longest(&l) != sqlite3_column_int(s, 2)) {
      set_err(err, errlen, "%s: problem %lld: seqlen_q %d is not its profile's longest, %d", name,
              id, sqlite3_column_int(s, 2), fat_lengths_longest(&l));
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  sqlite3_finalize(s);
  /* A sourceless variant (a table's) gets its source from the generator
   * in check_variants, or none when it is stale. */
  if (sqlite3_prepare_v2(h, "SELECT name, source_hash, source FROM main.variants"
                            " WHERE source IS NOT NULL ORDER BY id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *src = (const char *)sqlite3_column_text(s, 2);
    fat_sha256_hex(src, (size_t)sqlite3_column_bytes(s, 2), hex);
    if (strcmp(hex, (const char *)sqlite3_column_text(s, 1))) {
      set_err(err, errlen, "%s: variant %s: source_hash %s is not the hash of its source (%s)",
              name, sqlite3_column_text(s, 0), sqlite3_column_text(s, 1), hex);
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  sqlite3_finalize(s);
  if (sqlite3_prepare_v2(h, "SELECT h.build_key, h.cubin_sha256, b.cubin FROM main.build_hashes h"
                            " LEFT JOIN main.builds b ON b.key = h.build_key ORDER BY h.build_key",
                         -1, &s, NULL) != SQLITE_OK) goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    if (sqlite3_column_type(s, 2) != SQLITE_BLOB) {
      set_err(err, errlen, "%s: build_hashes %s: no build with a cubin has this key", name,
              sqlite3_column_text(s, 0));
      goto out;
    }
    fat_sha256_hex(sqlite3_column_blob(s, 2), (size_t)sqlite3_column_bytes(s, 2), hex);
    if (strcmp(hex, (const char *)sqlite3_column_text(s, 1))) {
      set_err(err, errlen, "%s: build %s: cubin sha256 %s does not match its stored hash %s", name,
              sqlite3_column_text(s, 0), hex, sqlite3_column_text(s, 1));
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* ---- each variant against the generator ----------------------------------- */

/* A variant row as check_variants reads it, and the columns it names. */
#define VARIANT_SQL                                                                         \
  "SELECT id, name, source_hash, family, direction, dtype, mask, head_dim, params, entry,"  \
  " block_m, threads, smem_bytes, source IS NULL FROM main.variants ORDER BY name, source_hash"
enum { V_ID, V_NAME, V_HASH, V_FAMILY, V_DIRECTION, V_DTYPE, V_MASK, V_HEAD_DIM, V_PARAMS,
       V_ENTRY, V_BLOCK_M, V_THREADS, V_SMEM_BYTES, V_SOURCELESS };

/* The first field of the stored row S that is not K's, as "block_m 16 is
 * not the generator's 64" in WHY; "" when every field agrees. */
static void first_difference(sqlite3_stmt *s, const known_variant *k, char *why, size_t cap) {
  const struct { int col; const char *name, *text; long long num; } fields[] = {
      {V_FAMILY, "family", k->family, 0},
      {V_DIRECTION, "direction", fat_direction_name(k->direction), 0},
      {V_DTYPE, "dtype", fat_dtype_name(k->dtype), 0},
      {V_MASK, "mask", fat_mask_name(k->mask), 0},
      {V_HEAD_DIM, "head_dim", NULL, k->head_dim},
      {V_PARAMS, "params", k->params, 0},
      {V_ENTRY, "entry", k->entry, 0},
      {V_BLOCK_M, "block_m", NULL, k->block_m},
      {V_THREADS, "threads", NULL, k->threads},
      {V_SMEM_BYTES, "smem_bytes", NULL, k->smem_bytes},
  };
  why[0] = 0;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    const int c = fields[i].col;
    if (fields[i].text && strcmp((const char *)sqlite3_column_text(s, c), fields[i].text)) {
      snprintf(why, cap, "%s '%s' is not the generator's '%s'", fields[i].name,
               (const char *)sqlite3_column_text(s, c), fields[i].text);
      return;
    }
    if (!fields[i].text && sqlite3_column_int64(s, c) != fields[i].num) {
      snprintf(why, cap, "%s %lld is not the generator's %lld", fields[i].name,
               (long long)sqlite3_column_int64(s, c), fields[i].num);
      return;
    }
  }
}

static void note_stale(fat_trust_report *r, const char *vname, const char *hash,
                       const known_variant *k) {
  size_t used = strlen(r->stale_lines), cap = sizeof r->stale_lines;
  r->stale++;
  if (used + 1 >= cap) return;
  if (k)
    snprintf(r->stale_lines + used, cap - used, "stale: %s: table source_hash %s, generator gives %s\n",
             vname, hash, k->hash);
  else
    snprintf(r->stale_lines + used, cap - used,
             "stale: %s: the generator no longer produces this variant\n", vname);
}

/* What refers to a variant, deleted before it (foreign keys are on). */
static const char *const LEAVE_OUT_SQL =
    "DELETE FROM main.winners WHERE variant_id = ?1;"
    "DELETE FROM main.eliminations WHERE variant_id = ?1 OR best_timing_id IN (SELECT id FROM"
    " main.timings WHERE variant_id = ?1);"
    "DELETE FROM main.timing_jobs WHERE job IN (SELECT id FROM main.timings WHERE variant_id = ?1)"
    " OR timing_id IN (SELECT id FROM main.timings WHERE variant_id = ?1);"
    "DELETE FROM main.timings WHERE variant_id = ?1;"
    "DELETE FROM main.checks WHERE variant_id = ?1;"
    "DELETE FROM main.build_hashes WHERE build_key IN (SELECT key FROM main.builds WHERE"
    " variant_id = ?1);"
    "DELETE FROM main.builds WHERE variant_id = ?1;"
    "DELETE FROM main.variants WHERE id = ?1;";

static int leave_out(sqlite3 *h, sqlite3_int64 id) {
  const char *tail = LEAVE_OUT_SQL;
  while (tail && *tail) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(h, tail, -1, &s, &tail) != SQLITE_OK) return -1;
    if (!s) break;
    sqlite3_bind_int64(s, 1, id);
    const int step = sqlite3_step(s);
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) return -1;
  }
  return 0;
}

/* A variant that came without its source and that the generator produces
 * with its source_hash: its row and the generator's record of it. */
typedef struct to_fill {
  sqlite3_int64 id;
  const known_variant *k;
} to_fill;

/* By the generator's group (direction, dtype, mask, head dim, architecture). */
static int by_group(const void *a, const void *b) {
  const known_variant *x = ((const to_fill *)a)->k, *y = ((const to_fill *)b)->k;
  if (x->direction != y->direction) return x->direction < y->direction ? -1 : 1;
  if (x->dtype != y->dtype) return x->dtype < y->dtype ? -1 : 1;
  if (x->mask != y->mask) return x->mask < y->mask ? -1 : 1;
  if (x->head_dim != y->head_dim) return x->head_dim < y->head_dim ? -1 : 1;
  if (x->arch != y->arch) return x->arch < y->arch ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Fills in the source of each of the N variants of FILL from the
 * generator: the source its group kept when the lookup expanded it, or,
 * for a group expanded before this check, FILL sorted by group, each
 * (direction, dtype, mask, head dim, architecture) expanded once more with
 * its sources (gen_group); each source hashed again before it is stored.
 * 0, or -1 with err. */
static int fill_sources(fat_trust *t, sqlite3 *h, const char *name, to_fill *fill, size_t n,
                        char *err, size_t errlen) {
  gen_group gg = {0};
  const known_variant *group = NULL;  /* the group GG holds: one of its variants */
  sqlite3_stmt *up = NULL;
  char e2[ERRLEN], hex[FAT_SHA256_HEX_CHARS + 1];
  int rc = -1;
  if (sqlite3_prepare_v2(h, "UPDATE main.variants SET source = ?2 WHERE id = ?1", -1, &up,
                         NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
    return -1;
  }
  if (n) qsort(fill, n, sizeof *fill, by_group);
  for (size_t i = 0; i < n; i++) {
    const known_variant *k = fill[i].k;
    const char *source = k->source;
    if (!source) {
      if (!group || group->direction != k->direction || group->dtype != k->dtype ||
          group->mask != k->mask || group->head_dim != k->head_dim || group->arch != k->arch) {
        if (gen_group_load(t->g, k->direction, k->dtype, k->mask, k->head_dim,
                           TABLES_ARCHS[k->arch], &gg, e2, sizeof e2)) {
          set_err(err, errlen, "%s: variant %s: the generator failed: %s", name, k->name, e2);
          goto out;
        }
        group = k;
      }
      const fat_variant *v = gen_group_find(&gg, k->name);
      source = v ? v->source : NULL;
    }
    if (source) fat_sha256_hex(source, strlen(source), hex);
    if (!source || strcmp(hex, k->hash)) {
      set_err(err, errlen, "%s: variant %s: the generator gives it with source_hash %s in its "
              "%s space but %s%s expanded for head dim %d alone", name, k->name, k->hash,
              TABLES_ARCHS[k->arch], source ? "a source hashing to " : "not at all",
              source ? hex : "", k->head_dim);
      goto out;
    }
    sqlite3_reset(up);
    sqlite3_bind_int64(up, 1, fill[i].id);
    sqlite3_bind_text(up, 2, source, -1, SQLITE_STATIC);
    if (sqlite3_step(up) != SQLITE_DONE) {
      set_err(err, errlen, "%s: variant %s: %s", name, k->name, sqlite3_errmsg(h));
      goto out;
    }
  }
  rc = 0;
out:
  sqlite3_finalize(up);
  gen_group_free(&gg);
  return rc;
}

/* Each variant against the generator (trust.h); a sourceless one it
 * produces with its hash gets its source (fill_sources), after the walk. */
static int check_variants(fat_trust *t, sqlite3 *h, const char *name, fat_stale stale,
                          fat_trust_report *r, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  sqlite3_int64 *out = NULL;
  to_fill *fill = NULL;
  size_t n_out = 0, cap = 0, n_fill = 0, fill_cap = 0;
  int rc = -1, step;
  char e2[ERRLEN], why[512];
  if (wanted_load(t, h, name, err, errlen)) goto out;
  if (sqlite3_prepare_v2(h, VARIANT_SQL, -1, &s, NULL) != SQLITE_OK) goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *vname = (const char *)sqlite3_column_text(s, V_NAME);
    const char *hash = (const char *)sqlite3_column_text(s, V_HASH);
    const known_variant *k;
    group_key key = {.head_dim = sqlite3_column_int(s, V_HEAD_DIM)};
    /* The schema's CHECK admits only directions, dtypes and masks that parse. */
    if (fat_direction_parse((const char *)sqlite3_column_text(s, V_DIRECTION), &key.direction))
      key.direction = FAT_FWD;
    const int claims = !fat_dtype_parse((const char *)sqlite3_column_text(s, V_DTYPE), &key.dtype) &&
                       !fat_mask_parse((const char *)sqlite3_column_text(s, V_MASK), &key.mask);
    if (known_find(t, key.direction, claims ? &key : NULL, vname, &k, e2, sizeof e2)) {
      set_err(err, errlen, "%s: variant %s: the generator failed: %s", name, vname, e2);
      goto out;
    }
    if (!k || strcmp(k->hash, hash)) {
      if (stale == FAT_STALE_REFUSE) {
        if (!k)
          set_err(err, errlen, "%s: variant %s: the generator does not produce this variant; "
                  "refusing the table", name, vname);
        else
          set_err(err, errlen, "%s: variant %s: table source_hash %s, generator gives %s; "
                  "refusing a stale table", name, vname, hash, k->hash);
        goto out;
      }
      note_stale(r, vname, hash, k);
      if (stale == FAT_STALE_KEEP) continue;
      if (n_out == cap) {  /* left out after the walk, not under its cursor */
        size_t more = cap ? 2 * cap : 16;
        sqlite3_int64 *grown = realloc(out, more * sizeof *grown);
        if (!grown) {
          set_err(err, errlen, "out of memory");
          goto out;
        }
        out = grown, cap = more;
      }
      out[n_out++] = sqlite3_column_int64(s, V_ID);
      continue;
    }
    /* The same source: every other field must be the generator's too (the
     * launch reads them, not the source). */
    first_difference(s, k, why, sizeof why);
    if (why[0]) {
      set_err(err, errlen, "%s: variant %s: %s; refusing the table", name, vname, why);
      goto out;
    }
    if (!sqlite3_column_int(s, V_SOURCELESS)) continue;
    if (n_fill == fill_cap) {  /* filled after the walk, not under its cursor */
      size_t more = fill_cap ? 2 * fill_cap : 64;
      to_fill *grown = realloc(fill, more * sizeof *grown);
      if (!grown) {
        set_err(err, errlen, "out of memory");
        goto out;
      }
      fill = grown, fill_cap = more;
    }
    fill[n_fill++] = (to_fill){.id = sqlite3_column_int64(s, V_ID), .k = k};
  }
  if (step != SQLITE_DONE) goto sqlfail;
  sqlite3_finalize(s);
  s = NULL;
  for (size_t i = 0; i < n_out; i++)
    if (leave_out(h, out[i])) goto sqlfail;
  if (fill_sources(t, h, name, fill, n_fill, err, errlen)) goto out;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  free(out);
  free(fill);
  sqlite3_finalize(s);
  wanted_drop(t);
  return rc;
}

/* ---- each result against its problem ------------------------------------- */

/* Every row that puts a variant on a problem: the winners (what the runtime
 * serves), the timings (the deterministic backward is served from them) and
 * the checks; each with its variant's and its problem's key. */
static const char *const RESULTS_SQL =
    "SELECT 'winners', w.rowid, v.name, v.direction, v.dtype, v.mask, v.head_dim, p.id,"
    " p.direction, p.dtype, p.mask, p.head_dim, v.family, p.page_size FROM main.winners w"
    " JOIN main.variants v ON v.id = w.variant_id JOIN main.problems p ON p.id = w.problem_id"
    " UNION ALL SELECT 'timings', t.id, v.name, v.direction, v.dtype, v.mask, v.head_dim, p.id,"
    " p.direction, p.dtype, p.mask, p.head_dim, v.family, p.page_size FROM main.timings t"
    " JOIN main.variants v ON v.id = t.variant_id JOIN main.problems p ON p.id = t.problem_id"
    " UNION ALL SELECT 'checks', c.id, v.name, v.direction, v.dtype, v.mask, v.head_dim, p.id,"
    " p.direction, p.dtype, p.mask, p.head_dim, v.family, p.page_size FROM main.checks c"
    " JOIN main.variants v ON v.id = c.variant_id JOIN main.problems p ON p.id = c.problem_id";
enum { R_TABLE, R_ROW, R_VARIANT, R_V_KEY /* 3 columns: direction, dtype, mask */,
       R_V_HEAD_DIM = R_V_KEY + 3, R_PROBLEM, R_P_KEY, R_P_HEAD_DIM = R_P_KEY + 3, R_V_FAMILY,
       R_P_PAGE_SIZE };

static int check_results(fat_trust *t, sqlite3 *h, const char *name, char *err, size_t errlen) {
  static const char *const fields[3] = {"direction", "dtype", "mask"};
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  char e2[ERRLEN];
  if (sqlite3_prepare_v2(h, RESULTS_SQL, -1, &s, NULL) != SQLITE_OK) goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *table = (const char *)sqlite3_column_text(s, R_TABLE);
    const long long row = sqlite3_column_int64(s, R_ROW);
    const long long problem = sqlite3_column_int64(s, R_PROBLEM);
    const char *vname = (const char *)sqlite3_column_text(s, R_VARIANT);
    for (int f = 0; f < 3; f++) {
      const char *of_variant = (const char *)sqlite3_column_text(s, R_V_KEY + f);
      const char *of_problem = (const char *)sqlite3_column_text(s, R_P_KEY + f);
      if (strcmp(of_variant, of_problem)) {
        set_err(err, errlen, "%s: %s row %lld: variant %s has %s %s, its problem %lld has %s",
                name, table, row, vname, fields[f], of_variant, problem, of_problem);
        goto out;
      }
    }
    fat_direction dir;
    int tdim;
    const int vdim = sqlite3_column_int(s, R_V_HEAD_DIM), pdim = sqlite3_column_int(s, R_P_HEAD_DIM);
    if (fat_direction_parse((const char *)sqlite3_column_text(s, R_P_KEY), &dir)) dir = FAT_FWD;
    /* A paged family's variant reads pages: it runs a paged problem, and
     * only it does (the family table's row; a family without one is the
     * generator check's to refuse). */
    const fat_family *fam = fat_family_find((const char *)sqlite3_column_text(s, R_V_FAMILY), dir);
    const int page_size = sqlite3_column_int(s, R_P_PAGE_SIZE);
    if (fam && fam->paged != (page_size > 0)) {
      set_err(err, errlen, "%s: %s row %lld: variant %s %s a paged cache, its problem %lld has page "
              "size %d", name, table, row, vname, fam->paged ? "reads" : "does not read", problem,
              page_size);
      goto out;
    }
    if (template_dim(t, dir, pdim, &tdim, e2, sizeof e2)) {
      set_err(err, errlen, "%s: the generator failed: %s", name, e2);
      goto out;
    }
    if (vdim == tdim) continue;
    if (!tdim)
      set_err(err, errlen, "%s: %s row %lld: variant %s has head_dim %d, its problem %lld has %d,"
              " which no %s template serves", name, table, row, vname, vdim, problem, pdim,
              fat_direction_name(dir));
    else if (tdim == pdim)
      set_err(err, errlen, "%s: %s row %lld: variant %s has head_dim %d, its problem %lld has %d",
              name, table, row, vname, vdim, problem, pdim);
    else
      set_err(err, errlen, "%s: %s row %lld: variant %s has head_dim %d, its problem %lld has %d,"
              " which runs on the head_dim %d template", name, table, row, vname, vdim, problem,
              pdim, tdim);
    goto out;
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* ---- the measurements' own bounds ------------------------------------------ */

/* What a row may claim, by what a GPU, a problem and a measurement can be.
 * Outside these a row is false (or made to win): an edited table, not a
 * tune. */
#define MAX_GPU_NAME 255           /* fat_gpu_info's name, without its NUL */
#define MAX_CC_MAJOR 99            /* what "sm_XY" can say */
#define MAX_CC_MINOR 9
#define MAX_SM_COUNT 65536
#define MAX_VERSION 1000000        /* cuDriverGetVersion's 13000, NVRTC's 13 */
#define MAX_CLOCK_KHZ 100000000    /* 100 GHz */
#define MAX_SHAPE 65536            /* batch and heads of a problem or a check */
#define MIN_MEDIAN_MS 1e-3         /* no launch finishes in less than a microsecond */
#define MAX_MEDIAN_MS 3.6e6        /* an hour */
/* A median that puts a problem's FLOPs past this rate is no measurement (the
 * H200's dense fp16 peak is about 1e3 TFLOP/s): it would win every merge. */
#define MAX_PLAUSIBLE_TFLOPS 1e4
#define MAX_SM_CLOCK_MHZ 100000
/* A copy rate past this is no measurement (the H200 copies at about 4e12 B/s). */
#define MAX_PLAUSIBLE_BYTES_PER_S 1e14
#define MAX_TIMESTAMP_BYTES 64     /* strftime's "2026-12-02T05:50:24.486Z" is 24 */

/* The first byte of TEXT (BYTES long) no GPU name has -- a control
 * character (a newline would add lines to an export's header) or a NUL --
 * as its index; -1 when there is none. */
static long bad_name_byte(const unsigned char *text, int bytes) {
  for (int i = 0; i < bytes; i++)
    if (text[i] < 0x20 || text[i] == 0x7f) return i;
  return -1;
}

static int check_gpus(sqlite3 *h, const char *name, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "SELECT id, name, cc_major, cc_minor, sm_count, driver_version,"
                            " nvrtc_major, nvrtc_minor, clock_khz, mem_clock_khz FROM main.gpus"
                            " ORDER BY id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const long long id = sqlite3_column_int64(s, 0);
    const unsigned char *gname = sqlite3_column_text(s, 1);
    const int bytes = sqlite3_column_bytes(s, 1);
    const long bad = gname ? bad_name_byte(gname, bytes) : 0;
    const struct { const char *col; long long lo, hi; } bounds[] = {
        {"cc_major", 1, MAX_CC_MAJOR}, {"cc_minor", 0, MAX_CC_MINOR}, {"sm_count", 1, MAX_SM_COUNT},
        {"driver_version", 1, MAX_VERSION}, {"nvrtc_major", 1, MAX_VERSION},
        {"nvrtc_minor", 0, MAX_VERSION}, {"clock_khz", 0, MAX_CLOCK_KHZ},
        {"mem_clock_khz", 0, MAX_CLOCK_KHZ}};
    if (bytes > MAX_GPU_NAME) {
      set_err(err, errlen, "%s: gpus row %lld: a name of %d bytes, more than %d", name, id, bytes,
              MAX_GPU_NAME);
      goto out;
    }
    if (bad >= 0) {
      set_err(err, errlen, "%s: gpus row %lld: byte %ld of the name is 0x%02x, a control character",
              name, id, bad + 1, gname[bad]);
      goto out;
    }
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
      const long long v = sqlite3_column_int64(s, (int)b + 2);
      if (v < bounds[b].lo || v > bounds[b].hi) {
        set_err(err, errlen, "%s: gpus row %lld: %s %lld is outside [%lld, %lld]", name, id,
                bounds[b].col, v, bounds[b].lo, bounds[b].hi);
        goto out;
      }
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* Problems within what the tuner tunes (a local problem's FLOPs are
 * counted row by row: a seqlen of 2^31 would take that long). */
static int check_problems(sqlite3 *h, const char *name, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "SELECT id, batch, heads, seqlen_q, seqlen_k, window_left, window_right"
                            " FROM main.problems ORDER BY id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  static const char *const cols[] = {"batch", "heads", "seqlen_q", "seqlen_k", "window_left",
                                     "window_right"};
  const long long hi[] = {MAX_SHAPE, MAX_SHAPE, FAT_MAX_SEQLEN, FAT_MAX_SEQLEN, FAT_MAX_SEQLEN,
                          FAT_MAX_SEQLEN};
  while ((step = sqlite3_step(s)) == SQLITE_ROW)
    for (int c = 0; c < 6; c++) {
      const long long v = sqlite3_column_int64(s, c + 1);
      if (v > hi[c]) {
        set_err(err, errlen, "%s: problems row %lld: %s %lld is more than %lld", name,
                (long long)sqlite3_column_int64(s, 0), cols[c], v, hi[c]);
        goto out;
      }
    }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* A passed check is within its tolerance (tolerance.h), finite: the
 * schema lets +Inf through (rel_l2 >= 0). */
static int check_checks(sqlite3 *h, const char *name, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "SELECT c.id, v.direction, v.dtype, c.rel_l2, c.max_abs, c.lse_max_abs,"
                            " c.batch, c.heads, c.seqlen_q, c.seqlen_k FROM main.checks c"
                            " JOIN main.variants v ON v.id = c.variant_id WHERE c.passed = 1"
                            " ORDER BY c.id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const long long id = sqlite3_column_int64(s, 0);
    fat_direction dir;
    fat_dtype dt;
    if (fat_direction_parse((const char *)sqlite3_column_text(s, 1), &dir)) dir = FAT_FWD;
    if (fat_dtype_parse((const char *)sqlite3_column_text(s, 2), &dt)) dt = FAT_FP16;
    const double rel_l2 = sqlite3_column_double(s, 3), max_abs = sqlite3_column_double(s, 4);
    const double lse = sqlite3_column_double(s, 5);
    const double tol = dir == FAT_BWD ? fat_bwd_tolerance_for(dt) : fat_tolerance_for(dt).rel_l2;
    const char *why = NULL;
    char what[160];
    if (!(rel_l2 <= tol)) {
      snprintf(what, sizeof what, "rel_l2 %g over the %s %s tolerance %g", rel_l2,
               fat_direction_name(dir), fat_dtype_name(dt), tol);
      why = what;
    } else if (!isfinite(max_abs)) {
      why = "max_abs is not finite";
    } else if (!isfinite(lse) || (dir == FAT_FWD && lse > fat_tolerance_for(dt).lse_abs)) {
      snprintf(what, sizeof what, "lse_max_abs %g over the tolerance %g", lse, fat_tolerance_for(dt).lse_abs);
      why = what;
    }
    for (int c = 6; !why && c < 10; c++)
      if (sqlite3_column_int64(s, c) > (c < 8 ? MAX_SHAPE : FAT_MAX_SEQLEN)) {
        snprintf(what, sizeof what, "%s %lld is more than %lld", sqlite3_column_name(s, c),
                 (long long)sqlite3_column_int64(s, c), c < 8 ? (long long)MAX_SHAPE : (long long)FAT_MAX_SEQLEN);
        why = what;
      }
    if (why) {
      set_err(err, errlen, "%s: checks row %lld: passed with %s", name, id, why);
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* A timing is a measurement: reps the tuner takes (a winner's a full
 * timing's, at least FAT_FULL_REPS; another's at least a screening's,
 * FAT_SCREEN_REPS, or a drop's -- a screening stopped after its first
 * repetition, whose median is then more than FAT_DROP_FACTOR times the
 * best timing of at least FAT_SCREEN_REPS of its GPU and problem: never a
 * contender, it decides nothing, but a shard's database holds them), a
 * median no launch can beat and no problem's FLOPs can make faster than
 * MAX_PLAUSIBLE_TFLOPS. */
/* The problem of a row whose columns FIRST.. are a problems row's
 * direction, mask, head_dim, batch, heads, seqlen_q, seqlen_k,
 * window_left, window_right and lengths (what fat_problem_flops needs). */
static fat_problem problem_of_row(sqlite3_stmt *s, int first) {
  fat_problem p = {0};
  char e2[ERRLEN];
  if (fat_direction_parse((const char *)sqlite3_column_text(s, first), &p.direction)) p.direction = FAT_FWD;
  if (fat_mask_parse((const char *)sqlite3_column_text(s, first + 1), &p.mask)) p.mask = FAT_MASK_NONE;
  p.head_dim = sqlite3_column_int(s, first + 2), p.batch = sqlite3_column_int(s, first + 3);
  p.heads = sqlite3_column_int(s, first + 4), p.seqlen_q = sqlite3_column_int(s, first + 5);
  p.seqlen_k = sqlite3_column_int(s, first + 6), p.window_left = sqlite3_column_int(s, first + 7);
  p.window_right = sqlite3_column_int(s, first + 8);
  const char *lengths = (const char *)sqlite3_column_text(s, first + 9);
  if (lengths && *lengths && fat_lengths_parse(lengths, &p.lengths, e2, sizeof e2)) p.lengths.n = 0;
  return p;
}

/* What is wrong with a measured MEDIAN (and its TFLOPS) of problem P, into
 * WHAT: outside the timings' bounds, or faster than any GPU could run P.
 * 1 when something is (WHAT says it), else 0 (WHAT left as it was). */
static int time_bounds(double median, double tflops, const fat_problem *p, char *what, size_t cap) {
  if (!(median >= MIN_MEDIAN_MS && median <= MAX_MEDIAN_MS))
    snprintf(what, cap, "median_ms %g is outside [%g, %g]", median, MIN_MEDIAN_MS, MAX_MEDIAN_MS);
  else if (!isfinite(tflops) || tflops > MAX_PLAUSIBLE_TFLOPS)
    snprintf(what, cap, "tflops %g is more than %g", tflops, MAX_PLAUSIBLE_TFLOPS);
  else if (fat_problem_flops(p) / (median * 1e-3) / 1e12 > MAX_PLAUSIBLE_TFLOPS)
    snprintf(what, cap, "median_ms %g puts its problem at %.3g TFLOP/s, more than %g", median,
             fat_problem_flops(p) / (median * 1e-3) / 1e12, MAX_PLAUSIBLE_TFLOPS);
  else
    return 0;
  return 1;
}

static int check_timings(sqlite3 *h, const char *name, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "SELECT t.id, t.reps, t.median_ms, t.min_ms, t.max_ms, t.tflops,"
                            " t.sm_clock_mhz, p.direction, p.mask, p.head_dim, p.batch, p.heads,"
                            " p.seqlen_q, p.seqlen_k, p.window_left, p.window_right, p.lengths,"
                            " EXISTS (SELECT 1 FROM main.winners w WHERE w.timing_id = t.id),"
                            " CASE WHEN t.reps < " FAT_SQL_SCREEN_REPS " THEN (SELECT"
                            " min(b.median_ms) FROM main.timings b WHERE b.gpu_id = t.gpu_id AND"
                            " b.problem_id = t.problem_id AND b.reps >= " FAT_SQL_SCREEN_REPS ") END"
                            " FROM main.timings t JOIN main.problems p ON p.id = t.problem_id"
                            " ORDER BY t.id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const long long id = sqlite3_column_int64(s, 0), reps = sqlite3_column_int64(s, 1);
    const double median = sqlite3_column_double(s, 2), lo = sqlite3_column_double(s, 3);
    const double hi = sqlite3_column_double(s, 4), tflops = sqlite3_column_double(s, 5);
    const fat_problem p = problem_of_row(s, 7);
    char what[256] = "";
    const int winning = sqlite3_column_int(s, 17);
    const int least = winning ? FAT_FULL_REPS : FAT_SCREEN_REPS;
    /* A drop is no winner's, and its best (the fastest timing of at least
     * a screening's reps) is more than FAT_DROP_FACTOR ahead of it. */
    const int drop = !winning && reps >= 1 && reps < FAT_SCREEN_REPS;
    const int has_best = sqlite3_column_type(s, 18) != SQLITE_NULL;
    const double best = sqlite3_column_double(s, 18);
    char best_text[64] = "its problem has none";
    if (has_best) snprintf(best_text, sizeof best_text, "%g", best);
    if (drop && !(has_best && median > FAT_DROP_FACTOR * best))
      snprintf(what, sizeof what, "reps %lld is fewer than a screening's %d, and median_ms %g is not"
               " more than %gx its problem's best of at least %d reps (%s)", reps, FAT_SCREEN_REPS,
               median, FAT_DROP_FACTOR, FAT_SCREEN_REPS, best_text);
    else if (!drop && (reps < least || reps > FAT_MAX_REPS))
      snprintf(what, sizeof what, "reps %lld is outside [%d, %d]%s", reps, least, FAT_MAX_REPS,
               winning ? ": a winner's timing is a full one" : "");
    else if (!isfinite(lo) || !isfinite(hi))
      snprintf(what, sizeof what, "median_ms %g is outside [%g, %g]", median, MIN_MEDIAN_MS,
               MAX_MEDIAN_MS);
    else if (!time_bounds(median, tflops, &p, what, sizeof what) &&
             sqlite3_column_int64(s, 6) > MAX_SM_CLOCK_MHZ)
      snprintf(what, sizeof what, "sm_clock_mhz %lld is more than %d",
               (long long)sqlite3_column_int64(s, 6), MAX_SM_CLOCK_MHZ);
    if (what[0]) {
      set_err(err, errlen, "%s: timings row %lld: %s", name, id, what);
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* A ceiling is a measurement of its GPU: one of the names the tuner
 * measures, in that name's unit, finite and positive, no more than any GPU
 * could reach (a copy above MAX_PLAUSIBLE_BYTES_PER_S, a matrix peak above
 * MAX_PLAUSIBLE_TFLOPS), of a GPU row the table has. */
static int check_ceilings(sqlite3 *h, const char *name, char *err, size_t errlen) {
  static const struct { const char *name, *unit; double max; } known[] = {
      {FAT_CEILING_COPY_BANDWIDTH, "B/s", MAX_PLAUSIBLE_BYTES_PER_S},
      {FAT_CEILING_PEAK_FP16, "FLOP/s", MAX_PLAUSIBLE_TFLOPS * 1e12},
      {FAT_CEILING_PEAK_BF16, "FLOP/s", MAX_PLAUSIBLE_TFLOPS * 1e12},
      {FAT_CEILING_WGMMA_PEAK_FP16, "FLOP/s", MAX_PLAUSIBLE_TFLOPS * 1e12},
      {FAT_CEILING_WGMMA_PEAK_BF16, "FLOP/s", MAX_PLAUSIBLE_TFLOPS * 1e12},
      {FAT_CEILING_WGMMA_RS_PEAK_FP16, "FLOP/s", MAX_PLAUSIBLE_TFLOPS * 1e12},
      {FAT_CEILING_WGMMA_RS_PEAK_BF16, "FLOP/s", MAX_PLAUSIBLE_TFLOPS * 1e12},
  };
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "SELECT c.id, c.name, c.value, c.unit, g.id, length(c.measured_at)"
                            " FROM main.ceilings c LEFT JOIN main.gpus g ON g.id = c.gpu_id"
                            " ORDER BY c.id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const long long id = sqlite3_column_int64(s, 0);
    const char *cname = (const char *)sqlite3_column_text(s, 1), *unit = (const char *)sqlite3_column_text(s, 3);
    const double value = sqlite3_column_double(s, 2);
    size_t k = 0;
    char what[200] = "";
    while (k < sizeof known / sizeof known[0] && strcmp(known[k].name, cname ? cname : "")) k++;
    if (k == sizeof known / sizeof known[0])
      snprintf(what, sizeof what, "'%.64s' is no ceiling the tuner measures", cname ? cname : "");
    else if (strcmp(unit ? unit : "", known[k].unit))
      snprintf(what, sizeof what, "%s in '%.32s', not %s", known[k].name, unit ? unit : "", known[k].unit);
    else if (!(isfinite(value) && value > 0 && value <= known[k].max))
      snprintf(what, sizeof what, "%s %g %s is outside (0, %g]", known[k].name, value, known[k].unit,
               known[k].max);
    else if (sqlite3_column_type(s, 4) == SQLITE_NULL)
      snprintf(what, sizeof what, "its gpu_id is no GPU row of the table");
    else if (sqlite3_column_int(s, 5) > MAX_TIMESTAMP_BYTES)
      snprintf(what, sizeof what, "measured_at of %d bytes, more than %d", sqlite3_column_int(s, 5),
               MAX_TIMESTAMP_BYTES);
    if (what[0]) {
      set_err(err, errlen, "%s: ceilings row %lld: %s", name, id, what);
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* Another implementation's timing (a peer the report draws beside
 * fatune's) is a measurement like a timing: of a source the benchmarks
 * store (bench/store_peers.py), of a GPU and a problem rows of the table
 * (the foreign keys), a median within the timings' bounds that puts its
 * problem below MAX_PLAUSIBLE_TFLOPS, its tflops finite and no more than
 * that, a timestamp of at most MAX_TIMESTAMP_BYTES. */
static int check_external(sqlite3 *h, const char *name, char *err, size_t errlen) {
  static const char *const sources[] = {FAT_EXTERNAL_SDPA_FLASH, FAT_EXTERNAL_SDPA_CUDNN,
                                        FAT_EXTERNAL_FATUNE_BENCH};
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "SELECT e.id, e.source, e.median_ms, e.tflops, length(e.measured_at),"
                            " p.direction, p.mask, p.head_dim, p.batch, p.heads, p.seqlen_q,"
                            " p.seqlen_k, p.window_left, p.window_right, p.lengths"
                            " FROM main.external_timings e JOIN main.problems p ON p.id = e.problem_id"
                            " ORDER BY e.id", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const long long id = sqlite3_column_int64(s, 0);
    const char *source = (const char *)sqlite3_column_text(s, 1);
    const double median = sqlite3_column_double(s, 2), tflops = sqlite3_column_double(s, 3);
    const fat_problem p = problem_of_row(s, 5);
    char what[200] = "";
    size_t k = 0;
    while (k < sizeof sources / sizeof sources[0] && strcmp(sources[k], source ? source : "")) k++;
    if (k == sizeof sources / sizeof sources[0])
      snprintf(what, sizeof what, "source '%.64s' is none the benchmarks store", source ? source : "");
    else if (!time_bounds(median, tflops, &p, what, sizeof what) &&
             sqlite3_column_int(s, 4) > MAX_TIMESTAMP_BYTES)
      snprintf(what, sizeof what, "measured_at of %d bytes, more than %d", sqlite3_column_int(s, 4),
               MAX_TIMESTAMP_BYTES);
    if (what[0]) {
      set_err(err, errlen, "%s: external_timings row %lld: %s", name, id, what);
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}

/* A GPU row nothing refers to (no winner, check or timing) says nothing:
 * it is left out, not merged into the target's list of GPUs, and its
 * ceilings and peers' timings with it. */
static int drop_idle_gpus(sqlite3 *h, const char *name, char *err, size_t errlen) {
  static const char *const IDLE = "(SELECT id FROM main.gpus WHERE id NOT IN (SELECT gpu_id FROM"
                                  " main.winners UNION SELECT gpu_id FROM main.checks UNION"
                                  " SELECT gpu_id FROM main.timings))";
  char sql[1024];
  snprintf(sql, sizeof sql, "DELETE FROM main.ceilings WHERE gpu_id IN %s; DELETE FROM"
           " main.external_timings WHERE gpu_id IN %s; DELETE FROM main.gpus WHERE id IN %s", IDLE,
           IDLE, IDLE);
  if (sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK)
    return 0;
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
  return -1;
}

int fat_trust_check(fat_trust *t, sqlite3 *h, const char *name, fat_stale stale,
                    fat_trust_report *r, char *err, size_t errlen) {
  if (!t) {
    set_err(err, errlen, "%s: no generator to check its variants against", name);
    return -1;
  }
  if (check_types(h, name, err, errlen) || check_contents(h, name, err, errlen) ||
      check_gpus(h, name, err, errlen) || check_problems(h, name, err, errlen) ||
      check_checks(h, name, err, errlen) || check_timings(h, name, err, errlen) ||
      check_ceilings(h, name, err, errlen) || check_external(h, name, err, errlen) ||
      check_variants(t, h, name, stale, r, err, errlen) || check_results(t, h, name, err, errlen) ||
      drop_idle_gpus(h, name, err, errlen))
    return -1;
  return 0;
}
