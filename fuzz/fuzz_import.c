/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the table importer (fat_tables_import): the input is
 * the text of a table file. Import runs untrusted SQL under an authorizer;
 * whatever the bytes, it must not crash, must refuse with a message, and
 * must leave the database passing PRAGMA quick_check. One database per
 * process, in $TMPDIR, reused across inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "db.h"
#include "gen.h"
#include "tables.h"

static fat_db *db;
/* Today's generator, expanded once for the whole run (an input that gets
 * as far as the variant check pays for it only the first time). */
static fat_gen *gen;
static fat_import_options opts;

static void open_db(void) {
  char path[256], err[1024];
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/fuzz_import_%d.db", dir && *dir ? dir : "/tmp", (int)getpid());
  unlink(path);
  if (fat_db_open(path, &db, err, sizeof err) || !(gen = fat_gen_open(NULL, err, sizeof err)) ||
      !(opts.trust = fat_trust_open(gen))) {
    fprintf(stderr, "fuzz_import: %s\n", err);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!db) open_db();
  char *sql = malloc(size + 1);
  if (!sql) return 0;
  memcpy(sql, data, size);
  sql[size] = 0;
  char err[1024] = "";
  if (fat_tables_import(db, sql, "fuzz.sql", &opts, NULL, err, sizeof err) != 0 && !err[0]) abort();
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(fat_db_handle(db), "PRAGMA quick_check", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(s, 0), "ok") != 0)
    abort();
  sqlite3_finalize(s);
  free(sql);
  return 0;
}
