/* SPDX-License-Identifier: MIT */
/* The ids of an earlier export (fat_table_ids, tables.h), for the export
 * that replaces it: the table file's text goes the way an import's does
 * (import.c: its first and last lines checked, then only INSERTs into
 * fatune's tables, under the import's authorizer) into a private in-memory
 * database of fatune's schema, whose constraints judge each row. Export
 * reads from it only each row's id and natural key (table_ids_copy), never
 * a value it writes: nothing of the earlier table reaches the new one or
 * any database, so the trust rule, which would refuse the stale table a
 * re-tune replaces, has nothing to judge. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "embedded.h"
#include "tables_int.h"

struct fat_table_ids {
  sqlite3 *h;  /* the in-memory database holding the earlier table's rows */
  char *name;  /* its file name, for messages */
};

/* The tables with an id column, whose ids an export keeps. */
static const char *const TABLES_WITH_IDS[] = {"gpus",     "ceilings", "variants", "builds",
                                              "problems", "checks",   "timings",  "external_timings"};
#define N_TABLES_WITH_IDS (sizeof TABLES_WITH_IDS / sizeof TABLES_WITH_IDS[0])

/* The longest statement made here (a table's name and natural key filled in). */
#define IDS_SQL_CAP 1024
/* The most columns a natural key has (problems: 12), and a parameter for
 * each and for the id. */
#define MAX_KEY_COLUMNS 15
static const char PARAMETERS[] = "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?";

void fat_table_ids_free(fat_table_ids *ids) {
  if (!ids) return;
  sqlite3_close(ids->h);
  free(ids->name);
  free(ids);
}

/* Every id of H's tables within 1 to FAT_TABLE_MAX_ID. 0, or -1 with err. */
static int check_id_range(sqlite3 *h, const char *name, char *err, size_t errlen) {
  char sql[IDS_SQL_CAP];
  for (size_t t = 0; t < N_TABLES_WITH_IDS; t++) {
    sqlite3_stmt *s = NULL;
    snprintf(sql, sizeof sql, "SELECT id FROM main.%s WHERE id < 1 OR id > ?1 ORDER BY id LIMIT 1",
             TABLES_WITH_IDS[t]);
    if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) {
      set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
      return -1;
    }
    sqlite3_bind_int64(s, 1, FAT_TABLE_MAX_ID);
    const int step = sqlite3_step(s);
    if (step == SQLITE_ROW)
      set_err(err, errlen, "%s: %s id %lld is outside 1 to %lld", name, TABLES_WITH_IDS[t],
              (long long)sqlite3_column_int64(s, 0), FAT_TABLE_MAX_ID);
    else if (step != SQLITE_DONE)
      set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) return -1;
  }
  return 0;
}

/* H's GPU rows, if any, include one named GPU: a table of another GPU
 * shares no GPU, check or timing with this export, and replacing it is
 * more likely a slip of -o than meant. 0, or -1 with err. */
static int check_gpu_name(sqlite3 *h, const char *name, const char *gpu, char *err,
                          size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = -1;
  if (sqlite3_prepare_v2(h, "SELECT name FROM main.gpus WHERE NOT EXISTS (SELECT 1 FROM"
                            " main.gpus WHERE name = ?1) ORDER BY id LIMIT 1", -1, &s, NULL)
      != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
    return -1;
  }
  sqlite3_bind_text(s, 1, gpu, -1, SQLITE_STATIC);
  const int step = sqlite3_step(s);
  if (step == SQLITE_ROW)
    set_err(err, errlen, "%s: a table of GPU '%s', not '%s'", name, sqlite3_column_text(s, 0),
            gpu);
  else if (step != SQLITE_DONE)
    set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(h));
  else
    rc = 0;
  sqlite3_finalize(s);
  return rc;
}

fat_table_ids *fat_table_ids_read(const char *text, const char *name, const char *gpu_name,
                                  char *err, size_t errlen) {
  const fat_embedded_file *schema = fat_embedded_find(FAT_DB_SCHEMA_PATH);
  fat_table_ids *ids = NULL;
  char *msg = NULL;
  if (!(text = table_text_begin(text, name, err, errlen))) return NULL;
  if (!schema) {
    set_err(err, errlen, "%s: %s is not embedded in this build", name, FAT_DB_SCHEMA_PATH);
    return NULL;
  }
  if (!(ids = calloc(1, sizeof *ids)) || !(ids->name = strdup(name)) ||
      sqlite3_open_v2(":memory:", &ids->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
          SQLITE_OK) {
    set_err(err, errlen, "%s: cannot open a database to read it in: %s", name,
            ids && ids->h ? sqlite3_errmsg(ids->h) : "out of memory");
    goto fail;
  }
  /* Foreign keys on, as in the scratch database an import fills: a row
   * must refer to rows before it. */
  if (sqlite3_exec(ids->h, schema->data, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(ids->h, "PRAGMA foreign_keys = ON", NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, errlen, "%s: cannot make a database to read it in: %s", name,
            msg ? msg : sqlite3_errmsg(ids->h));
    goto fail;
  }
  if (table_text_run(ids->h, text, name, err, errlen) ||
      check_id_range(ids->h, name, err, errlen) ||
      check_gpu_name(ids->h, name, gpu_name, err, errlen))
    goto fail;
  return ids;
fail:
  sqlite3_free(msg);
  fat_table_ids_free(ids);
  return NULL;
}

int table_ids_copy(sqlite3 *h, const fat_table_ids *ids, const char *table, const char *key,
                   char *err, size_t errlen) {
  char sql[IDS_SQL_CAP];
  sqlite3_stmt *from = NULL, *to = NULL;
  int rc = -1, step = SQLITE_DONE;
  snprintf(sql, sizeof sql, "CREATE TEMP TABLE p_%s (id, %s)", table, key);
  if (sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "export %s: %s", table, sqlite3_errmsg(h));
    return -1;
  }
  if (!ids) return 0;
  snprintf(sql, sizeof sql, "SELECT id, %s FROM main.%s", key, table);
  if (sqlite3_prepare_v2(ids->h, sql, -1, &from, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", ids->name, sqlite3_errmsg(ids->h));
    goto out;
  }
  /* One parameter a column: the id and the key's (at most MAX_KEY_COLUMNS). */
  const int n = sqlite3_column_count(from);
  if (n > MAX_KEY_COLUMNS + 1) {
    set_err(err, errlen, "export %s: a natural key of %d columns, more than %d", table, n - 1,
            MAX_KEY_COLUMNS);
    goto out;
  }
  snprintf(sql, sizeof sql, "INSERT INTO temp.p_%s VALUES (%.*s)", table, 3 * n - 2, PARAMETERS);
  if (sqlite3_prepare_v2(h, sql, -1, &to, NULL) != SQLITE_OK) {
    set_err(err, errlen, "export %s: %s", table, sqlite3_errmsg(h));
    goto out;
  }
  while ((step = sqlite3_step(from)) == SQLITE_ROW) {
    for (int c = 0; c < n; c++) sqlite3_bind_value(to, c + 1, sqlite3_column_value(from, c));
    if (sqlite3_step(to) != SQLITE_DONE) {
      set_err(err, errlen, "export %s: %s", table, sqlite3_errmsg(h));
      goto out;
    }
    sqlite3_reset(to);
  }
  if (step != SQLITE_DONE) {
    set_err(err, errlen, "%s: %s", ids->name, sqlite3_errmsg(ids->h));
    goto out;
  }
  rc = 0;
out:
  sqlite3_finalize(from);
  sqlite3_finalize(to);
  return rc;
}
