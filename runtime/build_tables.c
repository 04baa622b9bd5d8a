/* SPDX-License-Identifier: MIT */
/* Build-time tool: turns the shipped text tables (the .sql files of db/tables) into the
 * read-only table database that installs with libfatune:
 *   build_tables OUT.db [TABLE.sql...]
 * Each table goes through fat_tables_import (tables.c: authorizer-guarded,
 * rows validated, merged by natural keys). OUT.db is written under a temporary name and
 * renamed, so a failed build leaves no half database; with no tables it is
 * an empty database of the current schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tables.h"

#define PATH_CAP 4096

int main(int argc, char **argv) {
  char tmp[PATH_CAP], side[PATH_CAP + 8];
  if (argc < 2) {
    fprintf(stderr, "usage: build_tables OUT.db [TABLE.sql...]\n");
    return 2;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  unlink(tmp);
  /* Each table is imported as `fatune import` does, less the generator
   * check: a stale shipped table is test_tables_stale's to report (with every
   * stale variant named), not a reason for the build itself to fail. */
  int rc = 0;
  char err[1024];
  fat_db *db = NULL;
  if (fat_db_open(tmp, &db, err, sizeof err)) {
    fprintf(stderr, "build_tables: %s\n", err);
    rc = 1;
  }
  for (int i = 2; rc == 0 && i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    char *text = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n + 1)) && fread(text, 1, (size_t)n, f) == (size_t)n) {
      text[n] = 0;
      if (fat_tables_import(db, text, argv[i], NULL, err, sizeof err)) {
        fprintf(stderr, "build_tables: %s\n", err);
        rc = 1;
      }
    } else {
      fprintf(stderr, "build_tables: cannot read %s\n", argv[i]);
      rc = 1;
    }
    free(text);
    if (f) fclose(f);
  }
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
  if (rc == 0 && rename(tmp, argv[1])) {
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
