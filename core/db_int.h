/* SPDX-License-Identifier: MIT */
/* What the tuning database's two files share (db.h is their public
 * header): the connection's fields with its cache of prepared statements,
 * and the two helpers both use, an error and a plain exec. db.c opens,
 * creates, upgrades and closes the database; db_rows.c reads and writes its
 * rows. Nothing outside them includes it. */
#ifndef FAT_DB_INT_H
#define FAT_DB_INT_H
#include <stdarg.h>
#include <stdio.h>
#include "db.h"

#define FAT_DB_ERR_MAX 512

/* The prepared statements, one per query; SQL text in stmt_sql[] (db_rows.c). */
enum stmt_id {
  ST_PUT_GPU,
  ST_PUT_VARIANT,
  ST_GET_VARIANT,
  ST_FIND_BUILD,
  ST_PUT_BUILD,
  ST_PUT_PROBLEM,
  ST_PUT_CHECK,
  ST_PUT_TIMING,
  ST_PUT_DEVICE,
  ST_HAS_RESULT,
  ST_RANK,
  ST_SET_WINNER,
  ST_GET_WINNER,
  ST_RETIRE_CHECKS,
  ST_RETIRE_TIMINGS,
  ST_DROP_WINNER,
  ST_SUMMARY,
  ST_PUT_BUILD_HASH,
  ST_DROP_BUILD_HASH,
  ST_PUT_JOB,
  ST_RANK_ALONE,
  ST_RANK_ALONE_DQ_DETERMINISTIC,
  ST_JOBS,
  ST_JOB_TIMINGS,
  ST_RANK_ALONE_ALL,
  ST_DROP_ELIMINATIONS,
  ST_PUT_ELIMINATION,
  ST_ELIMINATIONS,
  ST_COUNT
};

struct fat_db {
  sqlite3 *h;
  char *path;
  sqlite3_stmt *st[ST_COUNT];
  char err[FAT_DB_ERR_MAX];
};

/* Sets db->err to the formatted context followed by ": " and SQLite's
 * message for the last failure on the connection; returns -1. */
static inline int fail(fat_db *db, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(db->err, sizeof db->err, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof db->err)
    snprintf(db->err + n, sizeof db->err - (size_t)n, ": %s", sqlite3_errmsg(db->h));
  return -1;
}

static inline int exec(fat_db *db, const char *sql) {
  return sqlite3_exec(db->h, sql, NULL, NULL, NULL);
}
#endif
