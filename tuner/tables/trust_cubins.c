/* SPDX-License-Identifier: MIT */
/* The cubins of rows from elsewhere, believed by provenance alone
 * (fat_trust_cubins, after trust.c's fat_trust_check has judged the rest):
 * dropped, compiled again here and kept where they come out byte for byte
 * (--keep-cubins), or kept as the release's own tables ship them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "interrupt.h"
#include "nvrtc_api.h"
#include "sha256.h"
#include "tables_int.h"
#include "trust.h"

#define ARCH_CAP 32

/* Runs SQL (no parameters); the rows it changed, or -1. */
static long long exec_changes(sqlite3 *h, const char *sql) {
  if (sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK) return -1;
  return sqlite3_changes(h);
}

/* Deletes build ID through DROP, counting it in R. */
static int drop_build(sqlite3_stmt *drop, sqlite3_int64 id, fat_trust_report *r) {
  sqlite3_reset(drop);
  sqlite3_bind_int64(drop, 1, id);
  if (sqlite3_step(drop) != SQLITE_DONE) return -1;
  r->builds_dropped++;
  return 0;
}

/* FAT_CUBINS_RECOMPILE for the builds of one architecture ARCH: each made by
 * NVRTC_VERSION with today's options is compiled here, and kept as this
 * machine's build (its key, resource usage and log) where its cubin comes
 * out byte for byte; the others go. */
static int recompile_arch(sqlite3 *h, const char *name, const char *arch,
                          const char *nvrtc_version, fat_trust_report *r, char *err,
                          size_t errlen) {
  sqlite3_stmt *s = NULL, *keep = NULL, *hash = NULL, *drop = NULL;
  fat_variant *v = NULL;
  fat_build *b = NULL;
  sqlite3_int64 *ids = NULL;
  size_t n = 0, cap = 0;
  int rc = -1, step;
  if (sqlite3_prepare_v2(h,
                         "SELECT b.id, v.name, v.source, b.options = ?2 AND b.nvrtc_version = ?3"
                         " AND v.source IS NOT NULL"
                         " FROM main.builds b JOIN main.variants v ON v.id = b.variant_id"
                         " WHERE b.arch = ?1 AND b.ok = 1 ORDER BY b.id", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h,
                         "UPDATE OR IGNORE main.builds SET key = ?2, registers = ?3, smem_static = ?4,"
                         " stack_frame = ?5, spill_stores = ?6, spill_loads = ?7, compile_ms = ?8,"
                         " log = ?9 WHERE id = ?1", -1, &keep, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "INSERT INTO main.build_hashes (build_key, cubin_sha256) VALUES (?1, ?2)",
                         -1, &hash, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "DELETE FROM main.builds WHERE id = ?1", -1, &drop, NULL) != SQLITE_OK)
    goto sqlfail;
  sqlite3_bind_text(s, 1, arch, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, fat_compile_options(), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, nvrtc_version, -1, SQLITE_STATIC);
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    if (n == cap) {
      size_t more = cap ? 2 * cap : 16;
      fat_variant *gv = realloc(v, more * sizeof *gv);
      if (gv) v = gv;
      sqlite3_int64 *gi = realloc(ids, more * sizeof *gi);
      if (gi) ids = gi;
      if (!gv || !gi) {
        set_err(err, errlen, "out of memory");
        goto out;
      }
      cap = more;
    }
    memset(&v[n], 0, sizeof v[n]);
    ids[n] = sqlite3_column_int64(s, 0);
    /* Another compiler or options, or no source (a stale variant kept
     * sourceless): nothing here reproduces it (dropped below). */
    if (sqlite3_column_int(s, 3)) {
      v[n].name = strdup((const char *)sqlite3_column_text(s, 1));
      v[n].source = strdup((const char *)sqlite3_column_text(s, 2));
      if (!v[n].name || !v[n].source) {
        n++;
        set_err(err, errlen, "out of memory");
        goto out;
      }
    }
    n++;
  }
  if (step != SQLITE_DONE) goto sqlfail;
  sqlite3_finalize(s);
  s = NULL;
  if (n == 0) {
    rc = 0;
    goto out;
  }
  if (!(b = calloc(n, sizeof *b))) {
    set_err(err, errlen, "out of memory");
    goto out;
  }
  /* Only the reproducible ones go to NVRTC: the others are marked cached. */
  unsigned char *skip = calloc(n, 1);
  if (!skip) {
    set_err(err, errlen, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) skip[i] = v[i].source == NULL;
  /* jobs 0: one thread per core. */
  int crc = fat_compile_all(v, n, arch, 0, skip, b, NULL, NULL, fat_interrupted, err, errlen);
  free(skip);
  if (crc) goto out;
  if (fat_interrupted()) {  /* the pool stopped handing out work: nothing is decided */
    set_err(err, errlen, "%s: interrupted", name);
    goto out;
  }
  if (sqlite3_prepare_v2(h, "SELECT cubin FROM main.builds WHERE id = ?1", -1, &s, NULL) != SQLITE_OK)
    goto sqlfail;
  for (size_t i = 0; i < n; i++) {
    char key[FAT_SHA256_HEX_CHARS + 1], sha[FAT_SHA256_HEX_CHARS + 1], e2[ERRLEN];
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, ids[i]);
    if (sqlite3_step(s) != SQLITE_ROW) goto sqlfail;
    const size_t len = (size_t)sqlite3_column_bytes(s, 0);
    const int same = v[i].source && b[i].ok && b[i].cubin_size == len &&
                     !memcmp(b[i].cubin, sqlite3_column_blob(s, 0), len);
    if (!same) {
      if (drop_build(drop, ids[i], r)) goto sqlfail;
      continue;
    }
    if (fat_build_key(v[i].source, arch, key, e2, sizeof e2)) {
      set_err(err, errlen, "%s: %s", name, e2);
      goto out;
    }
    fat_sha256_hex(b[i].cubin, b[i].cubin_size, sha);
    sqlite3_reset(keep);
    sqlite3_bind_int64(keep, 1, ids[i]);
    sqlite3_bind_text(keep, 2, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(keep, 3, b[i].registers);
    sqlite3_bind_int(keep, 4, b[i].smem_static);
    sqlite3_bind_int(keep, 5, b[i].stack_frame);
    sqlite3_bind_int(keep, 6, b[i].spill_stores);
    sqlite3_bind_int(keep, 7, b[i].spill_loads);
    sqlite3_bind_double(keep, 8, b[i].compile_ms);
    sqlite3_bind_text(keep, 9, b[i].log ? b[i].log : "", -1, SQLITE_STATIC);
    if (sqlite3_step(keep) != SQLITE_DONE) goto sqlfail;
    if (sqlite3_changes(h) == 0) {
      /* Another build already has this machine's key (two names, one
       * source): that one stands for both. */
      if (drop_build(drop, ids[i], r)) goto sqlfail;
      continue;
    }
    sqlite3_reset(hash);
    sqlite3_bind_text(hash, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(hash, 2, sha, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(hash) != SQLITE_DONE) goto sqlfail;
    r->builds_kept++;
  }
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  for (size_t i = 0; i < n; i++) {
    free(v[i].name);
    free(v[i].source);
    if (b) fat_build_free(&b[i]);
  }
  free(v);
  free(b);
  free(ids);
  sqlite3_finalize(s);
  sqlite3_finalize(keep);
  sqlite3_finalize(hash);
  sqlite3_finalize(drop);
  return rc;
}

int fat_trust_cubins(sqlite3 *h, const char *name, fat_cubins cubins, fat_trust_report *r,
                     char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1, step;
  long long n;
  char done[ARCH_CAP] = "", version[32];
  /* Never a failed build, whatever the policy. */
  if ((n = exec_changes(h, "DELETE FROM main.builds WHERE ok = 0")) < 0) goto sqlfail;
  r->builds_dropped += n;
  if (cubins == FAT_CUBINS_SHIPPED) {
    if (sqlite3_prepare_v2(h, "SELECT count(*) FROM main.builds", -1, &s, NULL) != SQLITE_OK ||
        sqlite3_step(s) != SQLITE_ROW)
      goto sqlfail;
    r->builds_kept += sqlite3_column_int64(s, 0);
    rc = 0;
    goto out;
  }
  /* The recorded hashes go: a kept build gets the hash of this machine's
   * compile (the same bytes). */
  if (exec_changes(h, "DELETE FROM main.build_hashes") < 0) goto sqlfail;
  if (cubins == FAT_CUBINS_DROP) {
    if ((n = exec_changes(h, "DELETE FROM main.builds")) < 0) goto sqlfail;
    r->builds_dropped += n;
    rc = 0;
    goto out;
  }
  const fat_nvrtc *nv = fat_nvrtc_get(err, errlen);
  if (!nv) {
    char e2[ERRLEN];
    snprintf(e2, sizeof e2, "%s", err);
    set_err(err, errlen, "%s: keeping cubins needs NVRTC to compile them again: %s", name, e2);
    goto out;
  }
  snprintf(version, sizeof version, "%d.%d", nv->major, nv->minor);
  /* One architecture at a time, each looked up after the last is done. */
  for (;;) {
    char arch[ARCH_CAP] = "";
    if (sqlite3_prepare_v2(h, "SELECT arch FROM main.builds WHERE arch > ?1 ORDER BY arch LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK)
      goto sqlfail;
    sqlite3_bind_text(s, 1, done, -1, SQLITE_STATIC);
    if ((step = sqlite3_step(s)) == SQLITE_ROW)
      snprintf(arch, sizeof arch, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    s = NULL;
    if (step == SQLITE_DONE) break;
    if (step != SQLITE_ROW) goto sqlfail;
    snprintf(done, sizeof done, "%s", arch);
    if (!fat_arch_valid(arch)) {  /* the schema admits any sm_<n>; NVRTC may not */
      if (sqlite3_prepare_v2(h, "DELETE FROM main.builds WHERE arch = ?1", -1, &s, NULL) != SQLITE_OK)
        goto sqlfail;
      sqlite3_bind_text(s, 1, arch, -1, SQLITE_STATIC);
      if (sqlite3_step(s) != SQLITE_DONE) goto sqlfail;
      r->builds_dropped += sqlite3_changes(h);
      sqlite3_finalize(s);
      s = NULL;
      continue;
    }
    if (recompile_arch(h, name, arch, version, r, err, errlen)) goto out;
  }
  rc = 0;
  goto out;
sqlfail:
  set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
out:
  sqlite3_finalize(s);
  return rc;
}
