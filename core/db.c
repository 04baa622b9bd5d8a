/* SPDX-License-Identifier: MIT */
/* The tuning database's connection: opening (and creating) it safely,
 * the schema applied to a new file and upgraded in an older one, WAL, the
 * read-only open of report, export and explain, and closing. The rows it
 * holds are read and written by db_rows.c. Errors are kept in the handle
 * with the value at fault and SQLite's own message. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "db_int.h"
#include "embedded.h"
#include "sha256.h"

/* The upgrade from version N - 1 to N (db/migrations/N.sql). */
#define FAT_DB_MIGRATION_PATH "db/migrations/%d.sql"
/* Where schema.sql's idempotent appended part begins (db/schema.sql says why). */
#define FAT_DB_APPENDED_MARKER "-- ---- Appended: cubin integrity"

const char *fat_db_errmsg(const fat_db *db) { return db ? db->err : "no database"; }
const char *fat_db_path(const fat_db *db) { return db ? db->path : ""; }
sqlite3 *fat_db_handle(fat_db *db) { return db ? db->h : NULL; }

/* PRAGMA user_version, or -1 with db->err set (a file that is not SQLite
 * fails here: SQLite reads the header lazily). */
static int read_user_version(fat_db *db, int *version) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(db->h, "PRAGMA user_version", -1, &s, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *version = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return 0;
  }
  if ((rc & 0xff) == SQLITE_NOTADB)
    fail(db, "not a fatune database: %s", db->path);
  else
    fail(db, "cannot read database %s", db->path);
  sqlite3_finalize(s);
  return -1;
}

/* Number of objects in the schema (tables, indexes, ...), -1 on failure. */
static int count_schema_objects(fat_db *db) {
  sqlite3_stmt *s = NULL;
  int n = -1;
  if (sqlite3_prepare_v2(db->h, "SELECT count(*) FROM sqlite_schema", -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int(s, 0);
  else
    fail(db, "cannot read database %s", db->path);
  sqlite3_finalize(s);
  return n;
}

/* Applies db/schema.sql to an empty database, in one transaction taken
 * with the write lock, re-checking under the lock in case another process
 * created it meanwhile. */
static int create_schema(fat_db *db) {
  int ret = -1, in_tx = 0, version = 0;
  const fat_embedded_file *schema = fat_embedded_find(FAT_DB_SCHEMA_PATH);
  if (!schema) {
    snprintf(db->err, sizeof db->err, "cannot create database %s: %s is not embedded in this build",
             db->path, FAT_DB_SCHEMA_PATH);
    goto out;
  }
  if (exec(db, "BEGIN IMMEDIATE") != SQLITE_OK) {
    fail(db, "cannot lock database %s", db->path);
    goto out;
  }
  in_tx = 1;
  if (read_user_version(db, &version)) goto out;
  if (version == 0) {
    char *msg = NULL;
    if (sqlite3_exec(db->h, schema->data, NULL, NULL, &msg) != SQLITE_OK) {
      snprintf(db->err, sizeof db->err, "cannot create schema in %s: %s", db->path,
               msg ? msg : sqlite3_errmsg(db->h));
      sqlite3_free(msg);
      goto out;
    }
  }
  if (exec(db, "COMMIT") != SQLITE_OK) {
    fail(db, "cannot commit schema to %s", db->path);
    goto out;
  }
  in_tx = 0;
  ret = 0;
out:
  if (in_tx) exec(db, "ROLLBACK");
  return ret;
}

/* sha256 of a blob as hex, for the one-time fill of build_hashes. */
static void sql_sha256(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  char hex[FAT_SHA256_HEX_CHARS + 1];
  (void)argc;
  fat_sha256_hex(sqlite3_value_blob(argv[0]), (size_t)sqlite3_value_bytes(argv[0]), hex);
  sqlite3_result_text(ctx, hex, -1, SQLITE_TRANSIENT);
}

/* fat_dq_deterministic(params) (db.h): what the runtime's schedule reads
 * from the same string (fat_kernel_schedule), by the same parser and the
 * same rule (types.h's fat_dq_deterministic: separate or ordered). */
static void sql_dq_deterministic(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  int block_m, block_n;
  fat_dq_mode mode = FAT_DQ_ATOMIC;
  char err[8];
  const char *params = (const char *)sqlite3_value_text(argv[0]);
  (void)argc;
  sqlite3_result_int(ctx, params &&
                              !fat_bwd_params_parse(params, &block_m, &block_n, &mode, err, sizeof err) &&
                              fat_dq_deterministic(mode));
}

/* fat_family_may_win(family, direction) (db.h): the family table's word. */
static void sql_family_may_win(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  fat_direction direction;
  const char *name = (const char *)sqlite3_value_text(argv[0]);
  const char *dir = (const char *)sqlite3_value_text(argv[1]);
  const fat_family *f =
      dir && !fat_direction_parse(dir, &direction) ? fat_family_find(name, direction) : NULL;
  (void)argc;
  sqlite3_result_int(ctx, f && f->may_win);
}

int fat_db_add_functions(sqlite3 *h) {
  /* Pure functions of their arguments; DIRECTONLY keeps them out of the
   * views and triggers of a database that is not ours. */
  const int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY;
  int rc = sqlite3_create_function(h, "fat_dq_deterministic", 1, flags, NULL, sql_dq_deterministic,
                                   NULL, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(h, "fat_family_may_win", 2, flags, NULL, sql_family_may_win,
                                 NULL, NULL);
  return rc;
}

/* 1 when table NAME exists in main, 0 when not, -1 on failure. */
static int has_table(fat_db *db, const char *name) {
  sqlite3_stmt *s = NULL;
  int n = -1;
  if (sqlite3_prepare_v2(db->h, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                         -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int(s, 0) > 0;
  }
  if (n < 0) fail(db, "cannot read database %s", db->path);
  sqlite3_finalize(s);
  return n;
}

/* A version-1 database made before schema.sql's appended part gets it now
 * (under the write lock, re-checked there), with a hash for each cubin it
 * already holds: they were stored by this user's own tuner or runtime. */
static int apply_appended_schema(fat_db *db) {
  int ret = -1, in_tx = 0, have;
  char *msg = NULL;
  const fat_embedded_file *schema = fat_embedded_find(FAT_DB_SCHEMA_PATH);
  const char *tail = schema ? strstr(schema->data, FAT_DB_APPENDED_MARKER) : NULL;
  if ((have = has_table(db, "build_hashes")) != 0) return have < 0 ? -1 : 0;
  if (!tail) {
    snprintf(db->err, sizeof db->err, "cannot upgrade database %s: %s has no '%s' part", db->path,
             FAT_DB_SCHEMA_PATH, FAT_DB_APPENDED_MARKER);
    return -1;
  }
  if (exec(db, "BEGIN IMMEDIATE") != SQLITE_OK) {
    fail(db, "cannot lock database %s", db->path);
    goto out;
  }
  in_tx = 1;
  if ((have = has_table(db, "build_hashes")) < 0) goto out;
  if (!have) {
    if (sqlite3_exec(db->h, tail, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_create_function(db->h, "fat_sha256_hex", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, sql_sha256, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db->h,
                     "INSERT INTO build_hashes (build_key, cubin_sha256) SELECT key,"
                     " fat_sha256_hex(cubin) FROM builds WHERE ok = 1 AND length(cubin) > 0",
                     NULL, NULL, &msg) != SQLITE_OK) {
      snprintf(db->err, sizeof db->err, "cannot upgrade database %s: %s", db->path,
               msg ? msg : sqlite3_errmsg(db->h));
      goto out;
    }
  }
  if (exec(db, "COMMIT") != SQLITE_OK) {
    fail(db, "cannot commit the upgrade of %s", db->path);
    goto out;
  }
  in_tx = 0;
  ret = 0;
out:
  sqlite3_free(msg);
  sqlite3_create_function(db->h, "fat_sha256_hex", 1, SQLITE_UTF8, NULL, NULL, NULL, NULL);
  if (in_tx) exec(db, "ROLLBACK");
  return ret;
}

/* Fails the upgrade when a row references a parent row that is missing
 * (PRAGMA foreign_key_check, run inside the upgrade's transaction). */
static int check_foreign_keys(fat_db *db, int from) {
  sqlite3_stmt *s = NULL;
  int ret = -1, rc = sqlite3_prepare_v2(db->h, "PRAGMA foreign_key_check", -1, &s, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW)
    snprintf(db->err, sizeof db->err,
             "cannot upgrade database %s from schema version %d: row %lld of %s references a "
             "missing row of %s", db->path, from, (long long)sqlite3_column_int64(s, 1),
             (const char *)sqlite3_column_text(s, 0), (const char *)sqlite3_column_text(s, 2));
  else if (rc != SQLITE_DONE)
    fail(db, "cannot check the foreign keys of %s", db->path);
  else
    ret = 0;
  sqlite3_finalize(s);
  return ret;
}

/* Runs db/migrations/(FROM + 1).sql on a database of version FROM, in one
 * transaction with the write lock; *VERSION gets the version found under
 * the lock, then the one reached (another process may have upgraded the
 * file meanwhile: then nothing is run). The caller turns foreign keys off
 * and legacy_alter_table on (the migration file says why). */
static int migrate_once(fat_db *db, int *version) {
  int ret = -1, in_tx = 0, from = *version;
  char path[64], *msg = NULL;
  if (exec(db, "BEGIN IMMEDIATE") != SQLITE_OK) {
    fail(db, "cannot lock database %s", db->path);
    goto out;
  }
  in_tx = 1;
  if (read_user_version(db, version)) goto out;
  if ((from = *version) < FAT_DB_SCHEMA_VERSION) {
    snprintf(path, sizeof path, FAT_DB_MIGRATION_PATH, from + 1);
    const fat_embedded_file *m = fat_embedded_find(path);
    if (!m) {
      snprintf(db->err, sizeof db->err, "cannot upgrade database %s from schema version %d: %s "
               "is not embedded in this build", db->path, from, path);
      goto out;
    }
    if (sqlite3_exec(db->h, m->data, NULL, NULL, &msg) != SQLITE_OK) {
      snprintf(db->err, sizeof db->err, "cannot upgrade database %s from schema version %d (%s): %s",
               db->path, from, path, msg ? msg : sqlite3_errmsg(db->h));
      goto out;
    }
    if (check_foreign_keys(db, from) || read_user_version(db, version)) goto out;
    /* Each step must raise the version, or the caller would loop. */
    if (*version != from + 1) {
      snprintf(db->err, sizeof db->err, "cannot upgrade database %s: %s left schema version %d, "
               "not %d", db->path, path, *version, from + 1);
      goto out;
    }
  }
  if (exec(db, "COMMIT") != SQLITE_OK) {
    fail(db, "cannot commit the upgrade of %s from schema version %d", db->path, from);
    goto out;
  }
  in_tx = 0;
  ret = 0;
out:
  sqlite3_free(msg);
  if (in_tx) exec(db, "ROLLBACK");
  return ret;
}

/* Upgrades a database of schema VERSION (1 or more, older than this
 * build's) to FAT_DB_SCHEMA_VERSION, one version per transaction: a failed
 * step leaves the file at the last version reached, never half-upgraded. */
static int migrate(fat_db *db, int version) {
  int ret = 0;
  /* Both are no-ops inside a transaction: set before each BEGIN. */
  if (exec(db, "PRAGMA foreign_keys = OFF") != SQLITE_OK ||
      exec(db, "PRAGMA legacy_alter_table = ON") != SQLITE_OK)
    return fail(db, "cannot prepare the upgrade of %s", db->path);
  while (ret == 0 && version < FAT_DB_SCHEMA_VERSION) ret = migrate_once(db, &version);
  if (exec(db, "PRAGMA legacy_alter_table = OFF") != SQLITE_OK && ret == 0)
    ret = fail(db, "cannot finish the upgrade of %s", db->path);
  return ret;
}

/* Checks the file is ours, creating the schema when empty and upgrading
 * an older version. */
static int check_schema(fat_db *db) {
  int version = 0;
  if (read_user_version(db, &version)) return -1;
  if (version > FAT_DB_SCHEMA_VERSION) {
    snprintf(db->err, sizeof db->err,
             "database %s has schema version %d, newer than this fatune's %d: "
             "use a newer fatune or another database",
             db->path, version, FAT_DB_SCHEMA_VERSION);
    return -1;
  }
  if (version < 0) {
    snprintf(db->err, sizeof db->err, "database %s has unknown schema version %d (this fatune reads %d)",
             db->path, version, FAT_DB_SCHEMA_VERSION);
    return -1;
  }
  if (version == FAT_DB_SCHEMA_VERSION) return 0;
  if (version > 0) return migrate(db, version);
  int objects = count_schema_objects(db);
  if (objects < 0) return -1;
  if (objects > 0) {
    /* Another process may have committed the schema between the two reads
     * (two tuners creating one database at once). */
    if (read_user_version(db, &version)) return -1;
    if (version == FAT_DB_SCHEMA_VERSION) return 0;
    snprintf(db->err, sizeof db->err,
             "not a fatune database: %s: it holds %d schema objects but no fatune schema version",
             db->path, objects);
    return -1;
  }
  return create_schema(db);
}

static double monotonic_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* PRAGMA journal_mode = WAL. The change takes the write lock, and SQLite
 * does not call the busy handler for it: while another connection holds
 * that lock on a database still in rollback mode (a second tuner creating
 * the schema, any writer between the schema's commit and this switch) the
 * pragma fails at once with SQLITE_BUSY. Retried here, with the busy
 * timeout's deadline. Returns 0, or -1 with err set. */
static int use_wal(fat_db *db, const char *path, char *err, size_t errlen) {
  const double deadline = monotonic_s() + FAT_DB_BUSY_TIMEOUT_MS / 1000.0;
  for (int wait_ms = 1;; wait_ms = wait_ms < 50 ? wait_ms * 2 : 100) {
    sqlite3_stmt *s = NULL;
    char mode[16] = "unknown";
    int rc = sqlite3_prepare_v2(db->h, "PRAGMA journal_mode = WAL", -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_text(s, 0))
      snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    if (rc == SQLITE_ROW && strcmp(mode, "wal") == 0) return 0;
    const int busy = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
    if (!busy || monotonic_s() >= deadline) {
      snprintf(err, errlen, "cannot use write-ahead logging on %s: journal mode is %s (%s)%s", path, mode,
               sqlite3_errmsg(db->h), busy ? ": the write lock stayed taken past the busy timeout" : "");
      return -1;
    }
    sqlite3_sleep(wait_ms);
  }
}

int fat_db_open(const char *path, fat_db **out, char *err, size_t errlen) {
  int ret = -1;
  fat_db *db = NULL;
  *out = NULL;
  if (!path || !*path) {
    snprintf(err, errlen, "cannot open database: empty path");
    goto out;
  }
  /* SQLite's name for a database that lives and dies with the connection:
   * every result would be lost (WAL cannot even be set on it). */
  if (!strcmp(path, ":memory:")) {
    snprintf(err, errlen, "cannot open database :memory:: an in-memory database keeps nothing; "
             "give a file");
    goto out;
  }
  /* Only a regular file (or a name not yet taken): a FIFO blocks open()
   * until some writer comes, and a device (/dev/null, /dev/full) is no
   * database -- SQLite would also leave its -journal beside it. */
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "cannot open database %s: %s", path,
             S_ISDIR(st.st_mode) ? "it is a folder" : "not a regular file");
    goto out;
  }
  db = calloc(1, sizeof *db);
  if (!db || !(db->path = strdup(path))) {
    snprintf(err, errlen, "cannot open database %s: out of memory", path);
    goto out;
  }
  if (sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
    int sys = db->h ? sqlite3_system_errno(db->h) : 0;
    snprintf(err, errlen, "cannot open database %s: %s%s%s%s", path,
             db->h ? sqlite3_errmsg(db->h) : "out of memory", sys ? " (" : "",
             sys ? strerror(sys) : "", sys ? ")" : "");
    goto out;
  }
  sqlite3_extended_result_codes(db->h, 1);
  /* SQLite silently falls back to read-only; a tuner that cannot write
   * would lose every result, so say so now. */
  if (sqlite3_db_readonly(db->h, "main") == 1) {
    snprintf(err, errlen, "cannot open database %s: file is read-only", path);
    goto out;
  }
  /* Another tuner on the same file waits for the lock instead of failing. */
  sqlite3_busy_timeout(db->h, FAT_DB_BUSY_TIMEOUT_MS);
  if (check_schema(db) || apply_appended_schema(db)) {
    snprintf(err, errlen, "%s", db->err);
    goto out;
  }
  /* WAL: a reader (the runtime) never blocks the tuner's commits, and a
   * crash loses at most the result being written. synchronous=NORMAL is
   * crash-safe in WAL mode (only a power cut can lose the last commits). */
  if (use_wal(db, path, err, errlen)) goto out;
  if (exec(db, "PRAGMA synchronous = NORMAL") != SQLITE_OK ||
      exec(db, "PRAGMA foreign_keys = ON") != SQLITE_OK || fat_db_add_functions(db->h) != SQLITE_OK) {
    snprintf(err, errlen, "cannot configure database %s: %s", path, sqlite3_errmsg(db->h));
    goto out;
  }
  db->err[0] = '\0';
  *out = db;
  db = NULL;
  ret = 0;
out:
  fat_db_close(db);
  return ret;
}

/* PATH as a file: URI that opens it read-only and immutable (no -shm to
 * create, no lock to take), its bytes percent-encoded where a URI needs it. */
static int immutable_uri(const char *path, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  size_t n = (size_t)snprintf(out, cap, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    const int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || strchr("/-._~", *p);
    if (n + 4 >= cap) return -1;
    if (plain) {
      out[n++] = (char)*p;
    } else {
      out[n++] = '%';
      out[n++] = hex[*p >> 4];
      out[n++] = hex[*p & 15];
    }
  }
  return snprintf(out + n, cap - n, "?mode=ro&immutable=1") < (int)(cap - n) ? 0 : -1;
}

int fat_db_open_readonly(const char *path, fat_db **out, char *err, size_t errlen) {
  fat_db *db = NULL;
  struct stat st;
  int version = 0, ret = -1, have;
  *out = NULL;
  if (!path || !*path) {
    snprintf(err, errlen, "cannot open database: empty path");
    return -1;
  }
  if (stat(path, &st)) {
    snprintf(err, errlen, "no database at %s (%s)", path, strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "cannot open database %s: %s", path,
             S_ISDIR(st.st_mode) ? "it is a folder" : "not a regular file");
    return -1;
  }
  if (!(db = calloc(1, sizeof *db)) || !(db->path = strdup(path))) {
    snprintf(err, errlen, "cannot open database %s: out of memory", path);
    goto out;
  }
  int rc = sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_extended_result_codes(db->h, 1);
    sqlite3_busy_timeout(db->h, FAT_DB_BUSY_TIMEOUT_MS);
    rc = read_user_version(db, &version) ? sqlite3_extended_errcode(db->h) : SQLITE_OK;
  }
  /* A WAL database in a folder this user cannot write (read-only media)
   * cannot get its -shm file: read it as the immutable file it is there. */
  if ((rc & 0xff) == SQLITE_CANTOPEN || rc == SQLITE_READONLY_CANTINIT ||
      rc == SQLITE_READONLY_DIRECTORY) {
    char uri[4096 * 3 + 32];
    sqlite3_close(db->h);
    db->h = NULL;
    if (immutable_uri(path, uri, sizeof uri) ||
        sqlite3_open_v2(uri, &db->h, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK ||
        read_user_version(db, &version)) {
      if (!db->err[0] && db->h) fail(db, "cannot read database %s", path);
      snprintf(err, errlen, "%s", db->err[0] ? db->err : "cannot read database");
      goto out;
    }
  } else if (rc != SQLITE_OK) {
    if (!db->h) snprintf(db->err, sizeof db->err, "cannot open database %s: out of memory", path);
    else if (!db->err[0]) fail(db, "cannot open database %s", path);
    snprintf(err, errlen, "%s", db->err);
    goto out;
  }
  if (version > FAT_DB_SCHEMA_VERSION || version < 0 ||
      (version == 0 && count_schema_objects(db) != 0)) {
    /* The read-write open words each refusal; it writes nothing first. */
    fat_db_close(db);
    return fat_db_open(path, out, err, errlen);
  }
  if (version == 0) {
    snprintf(err, errlen, "not a fatune database: %s: an empty file (no fatune schema yet)", path);
    goto out;
  }
  if ((have = has_table(db, "build_hashes")) < 0) {
    snprintf(err, errlen, "%s", db->err);
    goto out;
  }
  /* An older schema is upgraded in place, as any command that opens it
   * does: that is a write, and the reads below need today's columns. */
  if (version < FAT_DB_SCHEMA_VERSION || !have) {
    fat_db_close(db);
    return fat_db_open(path, out, err, errlen);
  }
  if (fat_db_add_functions(db->h) != SQLITE_OK) {
    snprintf(err, errlen, "cannot configure database %s: %s", path, sqlite3_errmsg(db->h));
    goto out;
  }
  *out = db;
  db = NULL;
  ret = 0;
out:
  fat_db_close(db);
  return ret;
}

void fat_db_close(fat_db *db) {
  if (!db) return;
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(db->st[i]);
  sqlite3_close(db->h); /* all statements are finalized, so this cannot be busy */
  free(db->path);
  free(db);
}
