/* SPDX-License-Identifier: MIT */
/* `fatune merge`: another machine's database, opened read-only and
 * refused unless its schema is fatune's own (none of its views or triggers
 * runs, and no virtual table or generated column computes what is read);
 * its tables are copied into a scratch database (scratch.c), judged and
 * merged from there as an imported file's rows are. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tables_int.h"

/* Tables SQLite itself may have made in a database (ANALYZE's statistics,
 * AUTOINCREMENT's counters): allowed beside fatune's own. */
static const char *const SQLITE_OWN_TABLES[] = {"sqlite_stat1", "sqlite_stat2", "sqlite_stat3",
                                                "sqlite_stat4", "sqlite_sequence"};
#define N_SQLITE_OWN_TABLES (sizeof SQLITE_OWN_TABLES / sizeof SQLITE_OWN_TABLES[0])

#define MERGE_OLDEST_SOURCE 1  /* the oldest schema version a merge reads */

/* Every object of source SRC's schema is one a fatune database has, of the
 * same kind, as REF (a fresh scratch database) has it: a table, index,
 * view or trigger of another name, or a view where fatune has a table (a
 * view is code), refuses the source. Its views and triggers never run:
 * the source is read-only and only its tables are read. */
static int check_source_objects(sqlite3 *src, sqlite3 *ref, const char *path, char *err,
                                size_t errlen) {
  sqlite3_stmt *s = NULL, *q = NULL;
  int rc = -1, step;
  if (sqlite3_prepare_v2(src, "SELECT type, name, sql LIKE 'CREATE VIRTUAL TABLE%' FROM"
                         " main.sqlite_schema ORDER BY rowid", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(ref, "SELECT type FROM main.sqlite_schema WHERE name = ?1", -1, &q,
                         NULL) != SQLITE_OK) {
    set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
    goto out;
  }
  while ((step = sqlite3_step(s)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(s, 0);
    const char *name = (const char *)sqlite3_column_text(s, 1);
    if (!type || !name) continue;
    /* A virtual table is read through its module's code, not from the file. */
    if (sqlite3_column_int(s, 2)) {
      set_err(err, errlen, "%s: '%s' is a virtual table: refusing the database", path, name);
      goto out;
    }
    if (!strcmp(type, "table") && in_list(name, SQLITE_OWN_TABLES, N_SQLITE_OWN_TABLES)) continue;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) != SQLITE_ROW) {
      set_err(err, errlen, "%s: %s '%s' is not fatune's: refusing the database", path, type, name);
      goto out;
    }
    const char *want = (const char *)sqlite3_column_text(q, 0);
    if (strcmp(type, want)) {
      set_err(err, errlen, "%s: '%s' is a %s, fatune's is a %s: refusing the database", path,
              name, type, want);
      goto out;
    }
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
    goto out;
  }
  /* A generated column is computed as it is read: an expression of the
   * file's (a 60 MB string per row, say), not a value stored in it. Without
   * them everything read is bytes of the file, so the file bounds it. */
  for (size_t t = 0; t < N_IMPORT_TABLES; t++) {
    char sql[128];
    sqlite3_finalize(q);
    q = NULL;
    snprintf(sql, sizeof sql, "PRAGMA main.table_xinfo(%s)", IMPORT_TABLES[t]);
    if (sqlite3_prepare_v2(src, sql, -1, &q, NULL) != SQLITE_OK) {
      set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
      goto out;
    }
    while ((step = sqlite3_step(q)) == SQLITE_ROW)
      if (sqlite3_column_int(q, 6) != 0) { /* hidden: 2 and 3 are generated columns */
        set_err(err, errlen, "%s: column '%s' of %s is generated, not stored: refusing the "
                "database", path, (const char *)sqlite3_column_text(q, 1), IMPORT_TABLES[t]);
        goto out;
      }
    if (step != SQLITE_DONE) {
      set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(src));
      goto out;
    }
  }
  rc = 0;
out:
  sqlite3_finalize(s);
  sqlite3_finalize(q);
  return rc;
}

/* Opens PATH read-only (a merge never writes its source) as a fatune
 * database of a schema version a merge reads, whose schema is fatune's
 * (REF: a fresh one to compare with). *SRC gets the connection. */
static int open_source(const char *path, sqlite3 *ref, sqlite3 **src, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  struct stat st;
  int version, rc = -1;
  *src = NULL;
  if (access(path, R_OK)) {
    set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  if (stat(path, &st) || !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s: not a regular file", path);
    return -1;
  }
  if (sqlite3_open_v2(path, src, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    set_err(err, errlen, "not a fatune database: %s: %s", path,
            *src ? sqlite3_errmsg(*src) : "out of memory");
    goto out;
  }
  /* Nothing in its schema runs with more trust than the rows: no function
   * a view or trigger names unless it is harmless, no schema writes, and
   * no value longer than the largest a row may hold. */
  sqlite3_db_config(*src, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
  sqlite3_db_config(*src, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
  sqlite3_limit(*src, SQLITE_LIMIT_LENGTH, (int)FAT_TABLES_MAX_CUBIN_BYTES + 1);
  sqlite3_busy_timeout(*src, FAT_DB_BUSY_TIMEOUT_MS);
  sqlite3_progress_handler(*src, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (sqlite3_prepare_v2(*src, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW) {
    set_err(err, errlen, "not a fatune database: %s: %s", path, sqlite3_errmsg(*src));
    goto out;
  }
  version = sqlite3_column_int(s, 0);
  if (version < MERGE_OLDEST_SOURCE || version > FAT_DB_SCHEMA_VERSION) {
    set_err(err, errlen, "%s: schema version %d, this fatune reads %d to %d", path, version,
            MERGE_OLDEST_SOURCE, FAT_DB_SCHEMA_VERSION);
    goto out;
  }
  if (check_source_objects(*src, ref, path, err, errlen)) goto out;
  rc = 0;
out:
  sqlite3_finalize(s);
  if (rc) {
    sqlite3_close(*src);
    *src = NULL;
  }
  return rc;
}

/* The columns of TABLE in database H (heap, NULL-terminated list of heap
 * strings), or NULL on failure. */
static char **table_columns(sqlite3 *h, const char *table) {
  char sql[128];
  sqlite3_stmt *s = NULL;
  char **cols = NULL;
  size_t n = 0;
  snprintf(sql, sizeof sql, "PRAGMA main.table_info(%s)", table);
  if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) return NULL;
  if (!(cols = calloc(1, sizeof *cols))) goto out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    char **grown = realloc(cols, (n + 2) * sizeof *cols);
    if (!grown) break;
    cols = grown;
    cols[n] = strdup((const char *)sqlite3_column_text(s, 1));
    cols[++n] = NULL;
  }
out:
  sqlite3_finalize(s);
  return cols;
}

static int has_column(char *const *cols, const char *name) {
  for (size_t i = 0; cols[i]; i++)
    if (!strcmp(cols[i], name)) return 1;
  return 0;
}

static void columns_free(char **cols) {
  for (size_t i = 0; cols && cols[i]; i++) free(cols[i]);
  free(cols);
}

/* Whether TABLE's COLUMN of the scratch's schema comes from the source
 * with columns THEIRS: where the source has it (an older one lacks some,
 * which take their defaults), but for what no table carries -- the device
 * a timing was measured on names a host's GPU (the devices table, which
 * neither a table file nor a merge brings), so a merged timing is of its
 * GPU model alone, as an imported one is. */
static int column_brought(char *const *theirs, const char *table, const char *column) {
  return has_column(theirs, column) && !(!strcmp(table, "timings") && !strcmp(column, "device_id"));
}

/* Copies TABLE's rows from SRC into scratch SH: the columns brought
 * (column_brought), named as the scratch's schema names them. The
 * scratch's constraints and triggers judge each row as they judge an
 * imported file's INSERT. */
static int copy_table(sqlite3 *src, sqlite3 *sh, const char *path, const char *table, char *err,
                      size_t errlen) {
  char **ours = table_columns(sh, table), **theirs = table_columns(src, table);
  char *select = NULL, *insert = NULL;
  size_t cap = 0;
  sqlite3_stmt *from = NULL, *to = NULL;
  int rc = -1, n = 0, step;
  if (!ours || !theirs) {
    set_err(err, errlen, "%s: cannot read the columns of %s", path, table);
    goto out;
  }
  if (!theirs[0]) {  /* a table an older schema has not yet got (build_hashes) */
    rc = 0;
    goto out;
  }
  for (size_t i = 0; ours[i]; i++) cap += strlen(ours[i]) + 8;
  cap += strlen(table) + 64;
  select = malloc(cap), insert = malloc(2 * cap);
  if (!select || !insert) {
    set_err(err, errlen, "out of memory");
    goto out;
  }
  strcpy(select, "SELECT ");
  snprintf(insert, 2 * cap, "INSERT INTO main.\"%s\" (", table);
  for (size_t i = 0; ours[i]; i++) n += column_brought(theirs, table, ours[i]);
  if (n == 0) {  /* nothing in common: nothing to bring */
    rc = 0;
    goto out;
  }
  n = 0;
  for (size_t i = 0; ours[i]; i++) {
    if (!column_brought(theirs, table, ours[i])) continue;
    strcat(select, n ? ", \"" : "\"");
    strcat(select, ours[i]);
    strcat(select, "\"");
    strcat(insert, n ? ", \"" : "\"");
    strcat(insert, ours[i]);
    strcat(insert, "\"");
    n++;
  }
  /* The rowid last, to name a refused row by it. */
  snprintf(select + strlen(select), cap - strlen(select), ", rowid FROM main.\"%s\" ORDER BY rowid",
           table);
  strcat(insert, ") VALUES (");
  for (int i = 0; i < n; i++) strcat(insert, i ? ", ?" : "?");
  strcat(insert, ")");
  if (sqlite3_prepare_v2(src, select, -1, &from, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s: %s", path, table, sqlite3_errmsg(src));
    goto out;
  }
  if (sqlite3_prepare_v2(sh, insert, -1, &to, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s: %s", path, table, sqlite3_errmsg(sh));
    goto out;
  }
  while ((step = sqlite3_step(from)) == SQLITE_ROW) {
    sqlite3_reset(to);
    for (int c = 0; c < n; c++) sqlite3_bind_value(to, c + 1, sqlite3_column_value(from, c));
    if (sqlite3_step(to) != SQLITE_DONE) {
      set_err(err, errlen, "%s: %s row %lld: %s", path, table,
              (long long)sqlite3_column_int64(from, n), sqlite3_errmsg(sh));
      goto out;
    }
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "%s: %s: %s", path, table, sqlite3_errmsg(src));
    goto out;
  }
  rc = 0;
out:
  sqlite3_finalize(from);
  sqlite3_finalize(to);
  free(select);
  free(insert);
  columns_free(ours);
  columns_free(theirs);
  return rc;
}

int fat_tables_merge(fat_db *db, const char *path, const fat_import_options *o,
                     fat_tables_report *r, char *err, size_t errlen) {
  char stage[PATH_CAP] = "";
  fat_db *sdb = NULL;
  sqlite3 *src = NULL;
  fat_tables_report scratch_report;
  int rc = -1;
  if (!r) r = &scratch_report;
  *r = NO_REPORT;
  if (!o || !o->trust) {
    set_err(err, errlen, "%s: no generator to check its variants against", path);
    return -1;
  }
  if (scratch_open(path, stage, &sdb, err, errlen)) goto out;
  sqlite3 *sh = fat_db_handle(sdb);
  sqlite3_progress_handler(sh, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (open_source(path, sh, &src, err, errlen)) goto out;
  if (sqlite3_exec(sh, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: scratch database: %s", path, sqlite3_errmsg(sh));
    goto out;
  }
  /* One read transaction: the rows come from one state of the source. */
  if (sqlite3_exec(src, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", path, sqlite3_errmsg(src));
    sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
    goto out;
  }
  for (size_t t = 0; t < N_IMPORT_TABLES; t++)
    if (copy_table(src, sh, path, IMPORT_TABLES[t], err, errlen)) {
      sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
      goto out;
    }
  sqlite3_exec(src, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(src);
  src = NULL;
  rc = judge_and_merge(db, sdb, stage, path, o, r, err, errlen);
  sdb = NULL;
out:
  sqlite3_close(src);
  fat_db_close(sdb);
  scratch_done(stage);
  return rc;
}
