/* SPDX-License-Identifier: MIT */
/* A database's variants against what the generator produces today, and
 * what becomes of the stale ones (a template changed since they were
 * tuned): fat_tables_stale lists them, `fatune retire-stale` retires their
 * measurements, and `fatune rehash` carries those over to today's source
 * where only the text changed and the machine code is the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "nvrtc_api.h"
#include "sha256.h"
#include "tables_int.h"

/* ---- stale check --------------------------------------------------------- */

/* 1 when the source in column COL of row S hashes to HASH: a source
 * altered under its hash (the runtime refuses to compile it) counts stale,
 * and so does none (NULL: a table's stale variant, kept sourceless by
 * build_tables --keep-stale), until rehash fills it in. */
static int source_hashes_to(sqlite3_stmt *s, int col, const char *hash) {
  char hex[FAT_SHA256_HEX_CHARS + 1];
  const char *src = (const char *)sqlite3_column_text(s, col);
  if (!src || !hash) return 0;
  fat_sha256_hex(src, (size_t)sqlite3_column_bytes(s, col), hex);
  return !strcmp(hex, hash);
}

/* The groups (direction, dtype, mask, head dim) a stale check has asked
 * the generator for, their variants' names and hashes kept (the sources
 * freed): the winners come in name order, which meets a group once for
 * each of its winners, and the shipped tables hold hundreds. */
typedef struct group_cache {
  struct cached_group {
    fat_direction dir;
    fat_dtype dt;
    fat_mask mk;
    int hd;
    gen_group gg;
  } *groups;
  size_t n, cap;
} group_cache;

static void group_cache_free(group_cache *c) {
  for (size_t i = 0; i < c->n; i++) gen_group_free(&c->groups[i].gg);
  free(c->groups);
}

/* What the generator produces today for variant NAME of (DIR, DT, MK, HD):
 * its source hash in NOW, or "" when no architecture's space has it.
 * Returns 0, or -1 with err when the generator fails (or memory). */
static int regenerated_hash(fat_gen *g, group_cache *c, const char *name, fat_direction dir,
                            fat_dtype dt, fat_mask mk, int hd,
                            char now[FAT_SHA256_HEX_CHARS + 1], char *err, size_t errlen) {
  struct cached_group *cg = NULL;
  now[0] = 0;
  for (size_t i = 0; i < c->n && !cg; i++)
    if (c->groups[i].dir == dir && c->groups[i].dt == dt && c->groups[i].mk == mk &&
        c->groups[i].hd == hd)
      cg = &c->groups[i];
  if (!cg) {
    gen_group gg = {0};
    if (gen_group_load(g, dir, dt, mk, hd, NULL, &gg, err, errlen)) return -1;
    for (size_t i = 0; i < gg.n; i++) {
      free(gg.v[i].source);
      gg.v[i].source = NULL;
    }
    if (c->n == c->cap) {
      size_t more = c->cap ? 2 * c->cap : 16;
      struct cached_group *grown = realloc(c->groups, more * sizeof *grown);
      if (!grown) {
        gen_group_free(&gg);
        set_err(err, errlen, "out of memory");
        return -1;
      }
      c->groups = grown, c->cap = more;
    }
    cg = &c->groups[c->n++];
    *cg = (struct cached_group){.dir = dir, .dt = dt, .mk = mk, .hd = hd, .gg = gg};
  }
  const fat_variant *v = gen_group_find(&cg->gg, name);
  if (v) snprintf(now, FAT_SHA256_HEX_CHARS + 1, "%s", v->hash);
  return 0;
}

int fat_tables_stale(fat_db *db, fat_gen *g, char *report, size_t cap, char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL;
  int n_stale = 0, rc = -1;
  size_t used = 0;
  group_cache groups = {0};
  if (report && cap) report[0] = 0;
  if (sqlite3_prepare_v2(h,
                         "SELECT DISTINCT v.name, v.source_hash, v.direction, v.dtype, v.mask,"
                         " v.head_dim, v.source FROM main.winners w JOIN main.variants v ON v.id ="
                         " w.variant_id ORDER BY v.name, v.source_hash",
                         -1, &s, NULL) != SQLITE_OK) {
    set_err(err, errlen, "stale check: %s", sqlite3_errmsg(h));
    return -1;
  }
  int step;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(s, 0);
    const char *hash = (const char *)sqlite3_column_text(s, 1);
    fat_direction dir;
    fat_dtype dt;
    fat_mask mk;
    int hd = sqlite3_column_int(s, 5);
    if (fat_direction_parse((const char *)sqlite3_column_text(s, 2), &dir) ||
        fat_dtype_parse((const char *)sqlite3_column_text(s, 3), &dt) ||
        fat_mask_parse((const char *)sqlite3_column_text(s, 4), &mk)) {
      set_err(err, errlen, "stale check: %s: unknown direction, dtype or mask", name);
      goto out;
    }
    char now[FAT_SHA256_HEX_CHARS + 1] = "", e2[ERRLEN];
    const int sourceless = sqlite3_column_type(s, 6) == SQLITE_NULL;
    const int altered = !sourceless && !source_hashes_to(s, 6, hash);
    /* A generator failure counts the variant stale (as before): nothing
     * today produces it. */
    if (regenerated_hash(g, &groups, name, dir, dt, mk, hd, now, e2, sizeof e2)) now[0] = 0;
    if (!strcmp(now, hash) && !altered && !sourceless) continue;
    n_stale++;
    if (report && used < cap) {
      int k = altered ? snprintf(report + used, cap - used,
                                 "stale: %s: its source does not hash to its source_hash %s\n",
                                 name, hash)
            : !strcmp(now, hash) ? snprintf(report + used, cap - used,
                                            "stale: %s: no stored source (fatune rehash fills it"
                                            " in)\n", name)
            : now[0] ? snprintf(report + used, cap - used,
                                "stale: %s: table source_hash %s, generator gives %s\n", name,
                                hash, now)
                     : snprintf(report + used, cap - used,
                                "stale: %s: the generator no longer produces this variant\n",
                                name);
      if (k > 0) used += (size_t)k < cap - used ? (size_t)k : cap - used - 1;
    }
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "stale check: %s", sqlite3_errmsg(h));
    goto out;
  }
  rc = n_stale;
out:
  sqlite3_finalize(s);
  group_cache_free(&groups);
  return rc;
}

/* ---- retiring stale variants ------------------------------------------- */

/* Variants anything live still refers to (a live timing or check, or a
 * winner), grouped by (direction, dtype, mask, head dim) for the
 * generator: what retire-stale and rehash walk. */
static const char *const LIVE_VARIANTS_SQL =
    "SELECT v.id, v.name, v.source_hash, v.direction, v.dtype, v.mask, v.head_dim, v.source"
    " FROM variants v WHERE"
    " EXISTS (SELECT 1 FROM timings t WHERE t.variant_id = v.id AND t.retired = 0)"
    " OR EXISTS (SELECT 1 FROM checks c WHERE c.variant_id = v.id AND c.retired = 0)"
    " OR EXISTS (SELECT 1 FROM winners w WHERE w.variant_id = v.id)"
    " ORDER BY v.direction, v.dtype, v.mask, v.head_dim, v.name";

/* The group's variant NAME's source hash today, or NULL. */
static const char *group_hash(const gen_group *gg, const char *name) {
  const fat_variant *v = gen_group_find(gg, name);
  return v ? v->hash : NULL;
}

int fat_tables_retire_stale(fat_db *db, fat_gen *g, long long *n_variants, long long *n_winners,
                            char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  /* Its eliminations go with its winners: a decision whose loser or best
   * it was is void (the next tune decides again). */
  enum { RETIRE_WINNERS = 2, N_RETIRE = 4 };
  sqlite3_stmt *s = NULL, *retire[N_RETIRE] = {NULL, NULL, NULL, NULL};
  static const char *const RETIRE_SQL[N_RETIRE] = {
      "UPDATE checks SET retired = 1 WHERE variant_id = ?1 AND retired = 0",
      "UPDATE timings SET retired = 1 WHERE variant_id = ?1 AND retired = 0",
      [RETIRE_WINNERS] = "DELETE FROM winners WHERE variant_id = ?1",
      ("DELETE FROM eliminations WHERE variant_id = ?1 OR best_timing_id IN"
       " (SELECT id FROM timings WHERE variant_id = ?1)")};
  gen_group gg = {0};
  sqlite3_int64 *stale = NULL;
  size_t variants = 0, cap = 0;
  long long winners = 0;
  int rc = -1, in_tx = 0, step, have_group = 0;
  char group_key[64] = "";
  if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 1;
  if (sqlite3_prepare_v2(h, LIVE_VARIANTS_SQL, -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  for (int i = 0; i < N_RETIRE; i++)
    if (sqlite3_prepare_v2(h, RETIRE_SQL[i], -1, &retire[i], NULL) != SQLITE_OK) goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(s, 1);
    const char *hash = (const char *)sqlite3_column_text(s, 2);
    const char *dir_s = (const char *)sqlite3_column_text(s, 3);
    const char *dt_s = (const char *)sqlite3_column_text(s, 4);
    const char *mk_s = (const char *)sqlite3_column_text(s, 5);
    const int hd = sqlite3_column_int(s, 6);
    fat_direction dir;
    fat_dtype dt;
    fat_mask mk;
    if (fat_direction_parse(dir_s, &dir) || fat_dtype_parse(dt_s, &dt) || fat_mask_parse(mk_s, &mk)) {
      set_err(err, errlen, "retire stale: %s: unknown direction, dtype or mask", name);
      goto out;
    }
    char key[64];
    snprintf(key, sizeof key, "%s %s %s %d", dir_s, dt_s, mk_s, hd);
    if (!have_group || strcmp(key, group_key)) {
      if (gen_group_load(g, dir, dt, mk, hd, NULL, &gg, err, errlen)) goto out;
      snprintf(group_key, sizeof group_key, "%s", key);
      have_group = 1;
    }
    const char *now = group_hash(&gg, name);
    if (now && !strcmp(now, hash) && source_hashes_to(s, 7, hash)) continue;
    if (variants == cap) {  /* retired after the walk, not under its cursor */
      size_t more = cap ? 2 * cap : 64;
      sqlite3_int64 *grown = realloc(stale, more * sizeof *grown);
      if (!grown) {
        set_err(err, errlen, "out of memory");
        goto out;
      }
      stale = grown;
      cap = more;
    }
    stale[variants++] = sqlite3_column_int64(s, 0);
  }
  if (step != SQLITE_DONE) goto sqlfail;
  for (size_t k = 0; k < variants; k++)
    for (int i = 0; i < N_RETIRE; i++) {
      sqlite3_reset(retire[i]);
      sqlite3_bind_int64(retire[i], 1, stale[k]);
      if (sqlite3_step(retire[i]) != SQLITE_DONE) goto sqlfail;
      if (i == RETIRE_WINNERS) winners += sqlite3_changes(h);
    }
  if (sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 0;
  if (n_variants) *n_variants = (long long)variants;
  if (n_winners) *n_winners = winners;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "retire stale: %s", sqlite3_errmsg(h));
out:
  free(stale);
  sqlite3_finalize(s);
  for (int i = 0; i < N_RETIRE; i++) sqlite3_finalize(retire[i]);
  if (in_tx) sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  gen_group_free(&gg);
  return rc;
}

/* ---- carrying measurements over a source-only change ------------------ */

/* A stale variant REHASH may carry over: its id and its (direction, dtype,
 * mask, head dim) group, for the generator. */
typedef struct rehash_item {
  sqlite3_int64 id;
  int fill;  /* sourceless, of the generator's hash today: its source is filled in */
  char *name, *key;
  fat_direction dir;
  fat_dtype dt;
  fat_mask mk;
  int hd;
} rehash_item;

/* 1 when variant ID's stored shape (family, entry, launch geometry) is
 * NOW's and its parameters are NOW's or a subset of them; 0 when not; -1
 * on an SQL error. A parameter added to the family is one the stored
 * variant had without naming it only if the machine code proves it:
 * same_machine_code decides. (Every parameter is substituted into the
 * template; one only a launcher read would not show in the machine code,
 * and none does: the launchers read BLOCK_M, BLOCK_N, DQ_MODE, PERSISTENT,
 * PACK_GQA and SPLITS (core/types.c), which the kernels read too.) */
static int same_shape(sqlite3 *h, sqlite3_int64 id, const fat_variant *now) {
  sqlite3_stmt *s = NULL;
  int same = -1;
  if (sqlite3_prepare_v2(h,
                         "SELECT family = ?2 AND entry = ?3 AND block_m = ?4"
                         " AND threads = ?5 AND smem_bytes = ?6, params FROM variants WHERE id = ?1",
                         -1, &s, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(s, 1, id);
  sqlite3_bind_text(s, 2, now->family, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, now->entry, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 4, now->block_m);
  sqlite3_bind_int(s, 5, now->threads);
  sqlite3_bind_int(s, 6, now->smem_bytes);
  if (sqlite3_step(s) == SQLITE_ROW) {
    const char *params = (const char *)sqlite3_column_text(s, 1);
    same = sqlite3_column_int(s, 0) && params && fat_params_have_all(now->params, params);
  }
  sqlite3_finalize(s);
  return same;
}

/* Compiles NOW's source for every stored build of variant ID and compares
 * the cubins byte for byte. 1: every build (at least one) is identical and
 * was made with today's options and NVRTC; 0: not; -1 with err: NVRTC or
 * SQL failed. */
static int same_machine_code(sqlite3 *h, sqlite3_int64 id, const fat_variant *now,
                             const char *nvrtc_version, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int same = 1, builds = 0, step = SQLITE_DONE;
  if (sqlite3_prepare_v2(h,
                         "SELECT arch, options, nvrtc_version, cubin FROM builds"
                         " WHERE variant_id = ?1 AND ok = 1 ORDER BY id",
                         -1, &s, NULL) != SQLITE_OK) {
    set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
    return -1;
  }
  sqlite3_bind_int64(s, 1, id);
  while (same == 1 && (step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *arch = (const char *)sqlite3_column_text(s, 0);
    builds++;
    if (strcmp((const char *)sqlite3_column_text(s, 1), fat_compile_options()) ||
        strcmp((const char *)sqlite3_column_text(s, 2), nvrtc_version)) {
      same = 0;  /* another compiler or options: nothing to compare with */
      break;
    }
    fat_build b = {0};
    /* In a compile process, under the caps, as every compile the command makes. */
    if (fat_compile_all(now, 1, arch, 1, NULL, &b, NULL, NULL, fat_interrupted, err, errlen)) {
      same = -1;
      break;
    }
    const int n = sqlite3_column_bytes(s, 3);
    same = b.ok && b.cubin_size == (size_t)n && !memcmp(b.cubin, sqlite3_column_blob(s, 3), (size_t)n);
    fat_build_free(&b);
  }
  if (same == 1 && step != SQLITE_DONE) {  /* the walk itself failed */
    set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
    same = -1;
  }
  sqlite3_finalize(s);
  return same == 1 && builds == 0 ? 0 : same;
}

/* Points variant ID and its builds at NOW's source: the variant's source,
 * hash and parameters, each build's cache key (and its build_hashes row, which names the
 * key). Ids stay, so checks, timings and winners stay with it. */
static int carry_over(sqlite3 *h, sqlite3_int64 id, const fat_variant *now, char *err,
                      size_t errlen) {
  sqlite3_stmt *up = NULL, *sel = NULL, *hash_get = NULL, *hash_del = NULL, *build_up = NULL,
               *hash_put = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h, "UPDATE variants SET source = ?2, source_hash = ?3, params = ?4 WHERE id = ?1",
                         -1, &up, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT id, key, arch FROM builds WHERE variant_id = ?1 AND ok = 1",
                         -1, &sel, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT cubin_sha256 FROM build_hashes WHERE build_key = ?1", -1,
                         &hash_get, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "DELETE FROM build_hashes WHERE build_key = ?1", -1, &hash_del,
                         NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "UPDATE builds SET key = ?2 WHERE id = ?1", -1, &build_up, NULL) !=
          SQLITE_OK ||
      sqlite3_prepare_v2(h, "INSERT INTO build_hashes (build_key, cubin_sha256) VALUES (?1, ?2)",
                         -1, &hash_put, NULL) != SQLITE_OK)
    goto sqlfail;
  sqlite3_bind_int64(up, 1, id);
  sqlite3_bind_text(up, 2, now->source, -1, SQLITE_STATIC);
  sqlite3_bind_text(up, 3, now->hash, -1, SQLITE_STATIC);
  sqlite3_bind_text(up, 4, now->params, -1, SQLITE_STATIC);
  if (sqlite3_step(up) != SQLITE_DONE) goto sqlfail;
  sqlite3_bind_int64(sel, 1, id);
  while ((step = sqlite3_step(sel)) == SQLITE_ROW) {
    const sqlite3_int64 bid = sqlite3_column_int64(sel, 0);
    char old_key[FAT_SHA256_HEX_CHARS + 1], key[65], sha[FAT_SHA256_HEX_CHARS + 1] = "";
    snprintf(old_key, sizeof old_key, "%s", (const char *)sqlite3_column_text(sel, 1));
    if (fat_build_key(now->source, (const char *)sqlite3_column_text(sel, 2), key, err, errlen))
      goto out;
    sqlite3_reset(hash_get);
    sqlite3_bind_text(hash_get, 1, old_key, -1, SQLITE_TRANSIENT);
    if ((step = sqlite3_step(hash_get)) == SQLITE_ROW)
      snprintf(sha, sizeof sha, "%s", (const char *)sqlite3_column_text(hash_get, 0));
    else if (step != SQLITE_DONE)
      goto sqlfail;
    sqlite3_reset(hash_del);
    sqlite3_bind_text(hash_del, 1, old_key, -1, SQLITE_TRANSIENT);
    sqlite3_reset(build_up);
    sqlite3_bind_int64(build_up, 1, bid);
    sqlite3_bind_text(build_up, 2, key, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(hash_del) != SQLITE_DONE || sqlite3_step(build_up) != SQLITE_DONE) goto sqlfail;
    if (sha[0]) {
      sqlite3_reset(hash_put);
      sqlite3_bind_text(hash_put, 1, key, -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(hash_put, 2, sha, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(hash_put) != SQLITE_DONE) goto sqlfail;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
out:
  sqlite3_finalize(up);
  sqlite3_finalize(sel);
  sqlite3_finalize(hash_get);
  sqlite3_finalize(hash_del);
  sqlite3_finalize(build_up);
  sqlite3_finalize(hash_put);
  return rc;
}

int fat_tables_rehash(fat_db *db, fat_gen *g, long long *n_carried, long long *n_left,
                      char *err, size_t errlen) {
  sqlite3 *h = fat_db_handle(db);
  sqlite3_stmt *s = NULL, *taken = NULL;
  gen_group gg = {0};
  rehash_item *items = NULL;
  size_t n = 0, cap = 0;
  long long carried = 0, left = 0;
  int rc = -1, in_tx = 0, step;
  char group_key[64] = "", nvrtc_version[32];
  const fat_nvrtc *nv = fat_nvrtc_get(err, errlen);
  if (!nv) return -1;
  snprintf(nvrtc_version, sizeof nvrtc_version, "%d.%d", nv->major, nv->minor);
  if (sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 1;
  /* The live variants, as retire-stale walks them; the stale ones are
   * collected first and changed after the walk, not under its cursor. */
  if (sqlite3_prepare_v2(h, LIVE_VARIANTS_SQL, -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT 1 FROM variants WHERE name = ?1 AND source_hash = ?2", -1,
                         &taken, NULL) != SQLITE_OK)
    goto sqlfail;
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    rehash_item it = {.id = sqlite3_column_int64(s, 0)};
    const char *name = (const char *)sqlite3_column_text(s, 1);
    const char *hash = (const char *)sqlite3_column_text(s, 2);
    const char *dir_s = (const char *)sqlite3_column_text(s, 3);
    const char *dt_s = (const char *)sqlite3_column_text(s, 4);
    const char *mk_s = (const char *)sqlite3_column_text(s, 5);
    it.hd = sqlite3_column_int(s, 6);
    if (fat_direction_parse(dir_s, &it.dir) || fat_dtype_parse(dt_s, &it.dt) ||
        fat_mask_parse(mk_s, &it.mk)) {
      set_err(err, errlen, "rehash: %s: unknown direction, dtype or mask", name);
      goto out;
    }
    char key[64];
    snprintf(key, sizeof key, "%s %s %s %d", dir_s, dt_s, mk_s, it.hd);
    if (strcmp(key, group_key)) {
      if (gen_group_load(g, it.dir, it.dt, it.mk, it.hd, NULL, &gg, err, errlen)) goto out;
      snprintf(group_key, sizeof group_key, "%s", key);
    }
    const char *now = group_hash(&gg, name);
    const int sourceless = sqlite3_column_type(s, 7) == SQLITE_NULL;
    const int altered = !sourceless && !source_hashes_to(s, 7, hash);
    if (now && !strcmp(now, hash) && !altered && !sourceless) continue;
    /* The space no longer has it, or its stored source is not the one its
     * hash names (its builds were made from who knows what): nothing to
     * compare with. A sourceless one has no text to have been altered:
     * its cubins are compared with today's source's as any other's. */
    if (!now || altered) {
      left++;
      continue;
    }
    it.fill = sourceless && !strcmp(now, hash);
    if (n == cap) {
      size_t more = cap ? 2 * cap : 64;
      rehash_item *grown = realloc(items, more * sizeof *grown);
      if (!grown) {
        set_err(err, errlen, "out of memory");
        goto out;
      }
      items = grown;
      cap = more;
    }
    it.name = strdup(name);
    it.key = strdup(key);
    items[n++] = it;
    if (!it.name || !it.key) {
      set_err(err, errlen, "out of memory");
      goto out;
    }
  }
  if (step != SQLITE_DONE) goto sqlfail;
  group_key[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(items[i].key, group_key)) {
      if (gen_group_load(g, items[i].dir, items[i].dt, items[i].mk, items[i].hd, NULL,
                         &gg, err, errlen))
        goto out;
      snprintf(group_key, sizeof group_key, "%s", items[i].key);
    }
    const fat_variant *now = gen_group_find(&gg, items[i].name);
    /* Its hash names today's source: the text its builds were made from. */
    if (items[i].fill) {
      if (carry_over(h, items[i].id, now, err, errlen)) goto out;
      carried++;
      continue;
    }
    int same = same_shape(h, items[i].id, now);
    if (same < 0) goto sqlfail;
    sqlite3_reset(taken);
    sqlite3_bind_text(taken, 1, now->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(taken, 2, now->hash, -1, SQLITE_STATIC);
    if ((step = sqlite3_step(taken)) == SQLITE_ROW) same = 0;  /* today's source has a row of its own */
    else if (step != SQLITE_DONE) goto sqlfail;
    if (same) same = same_machine_code(h, items[i].id, now, nvrtc_version, err, errlen);
    if (same < 0) goto out;
    if (!same) {
      left++;
      continue;
    }
    if (carry_over(h, items[i].id, now, err, errlen)) goto out;
    carried++;
  }
  if (sqlite3_exec(h, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto sqlfail;
  in_tx = 0;
  if (n_carried) *n_carried = carried;
  if (n_left) *n_left = left;
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "rehash: %s", sqlite3_errmsg(h));
out:
  for (size_t i = 0; i < n; i++) {
    free(items[i].name);
    free(items[i].key);
  }
  free(items);
  sqlite3_finalize(s);
  sqlite3_finalize(taken);
  if (in_tx) sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  gen_group_free(&gg);
  return rc;
}
