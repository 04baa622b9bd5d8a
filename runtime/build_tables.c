/* Build-time tool: turns the shipped text tables (the .sql files of db/tables) into the
 * read-only table database that installs with libfatune:
 *   build_tables OUT.db [TABLE.sql...]
 * Each table goes through `fatune import` (tables.c: authorizer-guarded,
 * merged by natural keys). OUT.db is written under a temporary name and
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
  /* fat_tables_main("import", "--db", tmp, files...); with no files only the
   * empty database is made. */
  int rc = 0;
  if (argc > 2) {
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return 1;
    args[0] = "import";
    args[1] = "--db";
    args[2] = tmp;
    for (int i = 2; i < argc; i++) args[i + 1] = argv[i];
    rc = fat_tables_main(argc + 1, args);
    free(args);
  } else {
    char err[1024];
    fat_db *db = NULL;
    if (fat_db_open(tmp, &db, err, sizeof err)) {
      fprintf(stderr, "build_tables: %s\n", err);
      rc = 1;
    }
    fat_db_close(db);
  }
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
