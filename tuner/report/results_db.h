/* SPDX-License-Identifier: MIT */
/* Where a reader of results (`fatune explain`, `fatune report`) finds them:
 * an existing database opened read-only (neither command creates one), the
 * GPU it speaks for, and the shipped tables when the user's database holds no
 * GPU results. One owner, so the two commands choose alike and say alike why
 * a database or a GPU name was refused. */
#ifndef FAT_RESULTS_DB_H
#define FAT_RESULTS_DB_H
#include <stddef.h>
#include "db.h"

/* The GPU a database speaks for. With NAME, rows of that name (a driver
 * upgrade is another row: the latest with winners, else the latest); without,
 * the database's only GPU name. Returns 0 with *FOUND = 1 and *GPU_ID, or
 * *FOUND = 0 when the database holds no GPU at all and NAME is empty; 2 (a
 * usage error) with ERR when NAME is not there or several GPUs leave the
 * choice open; -1 with ERR when the database cannot be read. NAME_OUT gets
 * the GPU's name. */
int fat_db_pick_gpu(fat_db *db, const char *name, sqlite3_int64 *gpu_id, char *name_out,
                    size_t name_cap, int *found, char *err, size_t errlen);

/* Opens an existing database for reading results. *DB is NULL (and 0 is
 * returned) when PATH does not exist: explain works without one, and neither
 * command creates a database. -1 with ERR when PATH exists but is not usable. */
int fat_db_open_existing(const char *path, fat_db **db, char *err, size_t errlen);

/* The database a reader of results (explain, report) reads and its GPU:
 * PATH (PATH_CAP bytes; --db, or the user's default when GIVEN is 0) opened
 * as fat_db_open_existing does, the GPU picked as fat_db_pick_gpu does with
 * GPU_NAME. With no --db given and no GPU results in the user's database
 * (or no database at all), the shipped tables instead when some are found
 * (fat_tables_default): PATH then names them and *SHIPPED is 1, and
 * without GPU_NAME the GPU with the most winners speaks for them (they
 * hold one table per GPU model). *N_GPUS gets how many GPU names the
 * database read holds. *DB may be NULL (no database anywhere). Returns
 * fat_db_pick_gpu's 0, 2 or -1, and 2 with ERR ("--db: ...") for a file at
 * PATH that is not a usable database. */
int fat_results_db_open(char *path, size_t path_cap, int given, const char *gpu_name, fat_db **db,
                        sqlite3_int64 *gpu_id, char *gpu, size_t gpu_cap, int *found, int *shipped,
                        int *n_gpus, char *err, size_t errlen);
#endif
