/* SPDX-License-Identifier: MIT */
/* The database a reader of results opens: explain and report both read an
 * existing database (never create one), pick the GPU it speaks for, and fall
 * back to the shipped tables when the user's holds no GPU results
 * (results_db.h says what each call returns). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "results_db.h"
#include "tables_path.h"

int fat_db_open_existing(const char *path, fat_db **db, char *err, size_t errlen) {
  struct stat st;
  *db = NULL;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    snprintf(err, errlen, "cannot open database %s: %s", path, strerror(errno));
    return -1;
  }
  return fat_db_open_readonly(path, db, err, errlen);
}

/* The distinct GPU names in DB, ", "-joined into BUF ("none" when empty);
 * *COUNT gets how many. */
static int gpu_names(fat_db *db, char *buf, size_t cap, int *count, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int ret = -1, rc;
  size_t used = 0;
  *count = 0;
  buf[0] = '\0';
  if (sqlite3_prepare_v2(fat_db_handle(db), "SELECT DISTINCT name FROM gpus ORDER BY name", -1,
                         &s, NULL) != SQLITE_OK)
    goto fail;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int n = snprintf(buf + used, cap - used, "%s%s", *count ? ", " : "",
                     (const char *)sqlite3_column_text(s, 0));
    if (n > 0) used = used + (size_t)n < cap ? used + (size_t)n : cap - 1;
    (*count)++;
  }
  if (rc != SQLITE_DONE) goto fail;
  if (!*count) snprintf(buf, cap, "none");
  ret = 0;
  goto out;
fail:
  snprintf(err, errlen, "cannot read GPUs: %s", sqlite3_errmsg(fat_db_handle(db)));
out:
  sqlite3_finalize(s);
  return ret;
}

/* fat_db_pick_gpu, and with MOST set, several GPUs and no NAME, the one
 * with the most winners rather than an error; *COUNT gets how many GPU
 * names the database holds. */
static int pick_gpu(fat_db *db, const char *name, int most, sqlite3_int64 *gpu_id, char *name_out,
                    size_t name_cap, int *found, int *count_out, char *err, size_t errlen) {
  char names[1024];
  int count = 0, ret = -1, rc;
  sqlite3_stmt *s = NULL;
  *found = 0;
  if (gpu_names(db, names, sizeof names, &count, err, errlen)) return -1;
  if (count_out) *count_out = count;
  if (!name || !*name) {
    if (count == 0) return 0;
    if (count > 1 && !most) {
      snprintf(err, errlen, "the database holds results of several GPUs (%s): choose one with "
               "--gpu-name", names);
      return 2;
    }
    /* The only name, read back below. */
    name = NULL;
  }
  /* By name, the latest row with winners, else the latest; without, the
   * most winners (then the latest). */
  if (sqlite3_prepare_v2(fat_db_handle(db),
                         "SELECT g.id, g.name FROM gpus g WHERE ?1 IS NULL OR g.name = ?1"
                         " ORDER BY CASE WHEN ?1 IS NULL THEN"
                         " (SELECT COUNT(*) FROM winners w WHERE w.gpu_id = g.id) END DESC,"
                         " EXISTS (SELECT 1 FROM winners w WHERE w.gpu_id = g.id) DESC,"
                         " g.id DESC LIMIT 1",
                         -1, &s, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "cannot read GPUs: %s", sqlite3_errmsg(fat_db_handle(db)));
    goto out;
  }
  if (name) sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *gpu_id = sqlite3_column_int64(s, 0);
    snprintf(name_out, name_cap, "%s", (const char *)sqlite3_column_text(s, 1));
    *found = 1;
  } else if (rc == SQLITE_DONE) {
    snprintf(err, errlen, "--gpu-name: no GPU named '%s' in the database (it holds: %s)", name,
             names);
    ret = 2;
    goto out;
  } else {
    snprintf(err, errlen, "cannot read GPUs: %s", sqlite3_errmsg(fat_db_handle(db)));
    goto out;
  }
  ret = 0;
out:
  sqlite3_finalize(s);
  return ret;
}

int fat_db_pick_gpu(fat_db *db, const char *name, sqlite3_int64 *gpu_id, char *name_out,
                    size_t name_cap, int *found, char *err, size_t errlen) {
  return pick_gpu(db, name, 0, gpu_id, name_out, name_cap, found, NULL, err, errlen);
}

int fat_results_db_open(char *path, size_t path_cap, int given, const char *gpu_name, fat_db **db,
                        sqlite3_int64 *gpu_id, char *gpu, size_t gpu_cap, int *found, int *shipped,
                        int *n_gpus, char *err, size_t errlen) {
  char tables[4096], looked[4096];
  int rc;
  char why[1024];
  *found = *shipped = *n_gpus = 0;
  if (fat_db_open_existing(path, db, why, sizeof why)) {
    snprintf(err, errlen, "--db: %s", why);
    return 2;
  }
  if (*db && (rc = pick_gpu(*db, gpu_name, 0, gpu_id, gpu, gpu_cap, found, n_gpus, err, errlen))) return rc;
  if (*found || given || fat_tables_default(tables, sizeof tables, looked, sizeof looked)) return 0;
  if (strlen(tables) >= path_cap) return 0; /* the user's (empty) database stays the answer */
  fat_db_close(*db);
  snprintf(path, path_cap, "%s", tables);
  *shipped = 1;
  if (fat_db_open_existing(path, db, why, sizeof why)) {
    snprintf(err, errlen, "the shipped tables: %s", why);
    return -1;
  }
  /* The shipped tables hold one table per GPU model: without --gpu-name,
   * the most complete. */
  return *db ? pick_gpu(*db, gpu_name, 1, gpu_id, gpu, gpu_cap, found, n_gpus, err, errlen) : 0;
}
