/* SPDX-License-Identifier: MIT */
/* Build-time tool: turns the shipped text tables (the .sql files of db/tables) into the
 * read-only table database that installs with libfatune:
 *   build_tables [--keep-stale] OUT.db [TABLE.sql...]
 * Each table goes through fat_tables_import (import.c: authorizer-guarded,
 * every row judged by the trust rule of trust.h, merged by natural keys),
 * as `fatune import` does, with two differences that make it the release's:
 * its cubins are kept (a cubin is trusted by provenance, and these are the
 * release's own), and a stale variant (a template changed since the table
 * was tuned) is left out with a warning rather than failing the build --
 * the runtime never serves it, and tests/test_tables_stale fails until the
 * table is re-tuned or rehashed. --keep-stale keeps stale variants instead,
 * for a working database that `fatune rehash` and `retire-stale` are to
 * carry over (db/tables/README.md). Anything else the trust rule refuses
 * fails the build. OUT.db is written under a temporary name and renamed,
 * so a failed build leaves no half database; with no tables it is an empty
 * database of the current schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tables.h"

#define PATH_CAP 4096
#define ERR_CAP 1024

static const char *const USAGE = "usage: build_tables [--keep-stale] OUT.db [TABLE.sql...]\n";

int main(int argc, char **argv) {
  char tmp[PATH_CAP], side[PATH_CAP + 8], err[ERR_CAP];
  int first = 1, keep_stale = 0;
  if (argc > 1 && !strcmp(argv[1], "--keep-stale")) keep_stale = 1, first = 2;
  if (argc <= first || argv[first][0] == '-') {
    fputs(USAGE, stderr);
    return 2;
  }
  const char *out = argv[first];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  unlink(tmp);
  int rc = 0;
  fat_db *db = NULL;
  fat_gen *gen = NULL;
  fat_trust *trust = NULL;
  if (fat_db_open(tmp, &db, err, sizeof err)) {
    fprintf(stderr, "build_tables: %s\n", err);
    rc = 1;
  } else if (!(gen = fat_gen_open(NULL, err, sizeof err)) || !(trust = fat_trust_open(gen))) {
    fprintf(stderr, "build_tables: the generator: %s\n", gen ? "out of memory" : err);
    rc = 1;
  }
  const fat_import_options io = {.trust = trust, .cubins = FAT_CUBINS_SHIPPED,
                                 .stale = keep_stale ? FAT_STALE_KEEP : FAT_STALE_LEAVE_OUT};
  for (int i = first + 1; rc == 0 && i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    char *text = NULL;
    long n = -1;
    fat_tables_report r;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n + 1)) && fread(text, 1, (size_t)n, f) == (size_t)n) {
      text[n] = 0;
      if (fat_tables_import(db, text, argv[i], &io, &r, err, sizeof err)) {
        fprintf(stderr, "build_tables: %s\n", err);
        rc = 1;
      } else if (r.trust.stale) {
        fprintf(stderr, "build_tables: %s: %s %lld stale variants (re-tune, or rehash and "
                "retire-stale: db/tables/README.md):\n%s", argv[i],
                keep_stale ? "kept" : "left out", r.trust.stale, r.trust.stale_lines);
      }
    } else {
      fprintf(stderr, "build_tables: cannot read %s\n", argv[i]);
      rc = 1;
    }
    free(text);
    if (f) fclose(f);
  }
  fat_trust_close(trust);
  fat_gen_close(gen);
  fat_db_close(db);
  /* A read-only consumer must not need the WAL side files: fold them in. */
  if (rc == 0) {
    sqlite3 *h = NULL;
    if (sqlite3_open(tmp, &h) != SQLITE_OK ||
        sqlite3_exec(h, "PRAGMA journal_mode = DELETE; VACUUM", NULL, NULL, NULL) != SQLITE_OK) {
      fprintf(stderr, "build_tables: %s: %s\n", tmp, h ? sqlite3_errmsg(h) : "cannot open");
      rc = 1;
    }
    sqlite3_close(h);
  }
  if (rc == 0 && rename(tmp, out)) {
    perror("build_tables: rename");
    rc = 1;
  }
  snprintf(side, sizeof side, "%s-wal", tmp);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", tmp);
  unlink(side);
  if (rc) unlink(tmp);
  return rc;
}
